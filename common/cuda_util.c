/* CUDA runtime helpers: error translation and the device probe. */
#include "cuda_util.h"

#include "config.h"
#include "log.h"
#include "text.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <string.h>

weft_status_t weft_cuda_status(cudaError_t err, const char *what, const char *file, int line)
{
    if (WEFT_LIKELY(err == cudaSuccess)) {
        return WEFT_OK;
    }
    /* The error is reported here: clear the runtime's record of it, or the
     * next cudaGetLastError() (after an unrelated kernel launch) would
     * report it again. Sticky errors (a faulted context) stay. */
    (void)cudaGetLastError();
    if (WEFT_LOG_ERROR <= weft_log_level()) {
        weft_log_write(WEFT_LOG_ERROR, file, line, "%s failed: %s (%s)", what, cudaGetErrorString(err),
                       cudaGetErrorName(err));
    }
    switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
        return WEFT_ERR_NO_DEVICE;
    case cudaErrorMemoryAllocation:
        return WEFT_ERR_NO_MEMORY;
    default:
        return WEFT_ERR_CUDA;
    }
}

weft_status_t weft_cuda_enter(int device, int *saved)
{
    weft_status_t status = WEFT_CUDA_CHECK(cudaGetDevice(saved));

    if (status == WEFT_OK && *saved != device) {
        status = WEFT_CUDA_CHECK(cudaSetDevice(device));
    }
    return status;
}

void weft_cuda_leave(int device, int saved)
{
    if (saved != device) {
        (void)WEFT_CUDA_CHECK(cudaSetDevice(saved));
    }
}

weft_status_t weft_cuda_device_uuid(int device, uint8_t uuid[WEFT_CUDA_UUID_BYTES])
{
    struct cudaDeviceProp prop;
    weft_status_t         status = WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

    _Static_assert(sizeof(prop.uuid.bytes) == WEFT_CUDA_UUID_BYTES, "cudaUUID_t size");
    if (status == WEFT_OK) {
        memcpy(uuid, prop.uuid.bytes, WEFT_CUDA_UUID_BYTES);
    }
    return status;
}

weft_status_t weft_cuda_pointer_device(const void *ptr, int *device)
{
    struct cudaPointerAttributes attr;
    weft_status_t                status = WEFT_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));

    if (status != WEFT_OK) {
        return status;
    }
    if (attr.type != cudaMemoryTypeDevice) {
        return WEFT_ERR_INVALID_PARAM;
    }
    *device = attr.device;
    return WEFT_OK;
}

typedef CUresult (*address_range_fn_t)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

weft_status_t weft_cuda_allocation_range(const void *ptr, const char *what, uint64_t *base, uint64_t *bytes)
{
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    void                                *fn = NULL;
    CUdeviceptr                          b = 0;
    size_t                               n = 0;
    CUresult                             res;
    weft_status_t                        status = WEFT_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found));

    if (status != WEFT_OK) {
        return status;
    }
    if (found != cudaDriverEntryPointSuccess || fn == NULL) {
        weft_log_error("%s: the CUDA driver has no cuMemGetAddressRange", what);
        return WEFT_ERR_UNSUPPORTED;
    }
    res = ((address_range_fn_t)fn)(&b, &n, (CUdeviceptr)(uintptr_t)ptr);
    if (res != CUDA_SUCCESS) {
        weft_log_error("%s: cuMemGetAddressRange failed (%d): not device memory", what, (int)res);
        return WEFT_ERR_INVALID_PARAM;
    }
    *base = (uint64_t)b;
    *bytes = (uint64_t)n;
    return WEFT_OK;
}

void weft_cuda_probe(weft_backend_info_t *info)
{
    int         runtime = 0, driver = 0, count = 0;
    cudaError_t err;

    (void)cudaRuntimeGetVersion(&runtime);
    /* 0 when no driver is installed; not an error for a probe. */
    (void)cudaDriverGetVersion(&driver);
    weft_text_append(info->version, sizeof(info->version), "runtime %d.%d, driver %d.%d",
                     runtime / 1000, (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10);

    weft_text_append(info->detail, sizeof(info->detail), "kernels built for %s\n", WEFT_CUDA_ARCH);
    err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        /* Without a driver CUDA says "driver version is insufficient", which
         * sends people to upgrade a driver that is not there. */
        if (driver == 0 || err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
            weft_text_append(info->detail, sizeof(info->detail), "no NVIDIA driver or GPU found (%s)\n",
                             driver == 0 ? "no driver loaded" : cudaGetErrorString(err));
        } else {
            weft_text_append(info->detail, sizeof(info->detail), "no CUDA device: %s\n", cudaGetErrorString(err));
        }
        (void)cudaGetLastError(); /* clear the sticky-free error for later calls */
        return;
    }
    for (int dev = 0; dev < count; dev++) {
        struct cudaDeviceProp prop;

        if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
            weft_text_append(info->detail, sizeof(info->detail), "GPU%d: properties unavailable\n", dev);
            continue;
        }
        weft_text_append(info->detail, sizeof(info->detail),
                         "GPU%d: %s, sm_%d%d, %.1f GiB, %d SMs, pci %04x:%02x:%02x.0\n", dev, prop.name,
                         prop.major, prop.minor, (double)prop.totalGlobalMem / (1u << 30),
                         prop.multiProcessorCount, prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    }
    for (int a = 0; a < count; a++) {
        for (int b = 0; b < count; b++) {
            int can = 0;

            if (a != b && cudaDeviceCanAccessPeer(&can, a, b) == cudaSuccess) {
                weft_text_append(info->detail, sizeof(info->detail), "GPU%d -> GPU%d: peer access %s\n",
                                 a, b, can ? "yes" : "no");
            }
        }
    }
    info->available = count > 0;
}
