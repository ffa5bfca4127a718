/*
 * CUDA runtime helpers: every CUDA call's result goes through
 * WEFT_CUDA_CHECK, which logs the call, the error and the place, and
 * translates it to a weft_status_t. Built only with CUDA. Internal.
 */
#ifndef WEFT_COMMON_CUDA_UTIL_H
#define WEFT_COMMON_CUDA_UTIL_H

#include <weft/weft.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* WEFT_OK for cudaSuccess; otherwise logs "<what> failed: <error>" and
 * returns WEFT_ERR_NO_DEVICE, WEFT_ERR_NO_MEMORY or WEFT_ERR_CUDA. */
weft_status_t weft_cuda_status(cudaError_t err, const char *what, const char *file, int line);

#define WEFT_CUDA_CHECK(_call) weft_cuda_status((_call), #_call, __FILE__, __LINE__)

/* Makes `device` the calling thread's current device; *saved gets the one
 * that was current, for weft_cuda_leave(). */
weft_status_t weft_cuda_enter(int device, int *saved);
void          weft_cuda_leave(int device, int saved);

/* The GPU that holds the device memory at ptr; WEFT_ERR_INVALID_PARAM
 * (not logged: the caller names the object) when ptr is not device memory
 * of this process. */
weft_status_t weft_cuda_pointer_device(const void *ptr, int *device);

/* The allocation that holds device address ptr: *base and *bytes
 * (cuMemGetAddressRange, from the driver the runtime loaded: libcuda is
 * never linked, see m4/weft_cuda.m4). Works for memory of this process
 * and for a peer's opened with cudaIpcOpenMemHandle (whose mapping is
 * the whole exported allocation). WEFT_ERR_INVALID_PARAM when ptr lies
 * in no allocation, WEFT_ERR_UNSUPPORTED without the driver entry point;
 * both logged, naming `what`. Thread-safe. */
weft_status_t weft_cuda_allocation_range(const void *ptr, const char *what, uint64_t *base, uint64_t *bytes);

/* The bytes of a GPU's UUID (cudaDeviceProp.uuid): it names the GPU
 * alike in every process of the host, where device numbers may differ. */
#define WEFT_CUDA_UUID_BYTES 16u

/* The UUID of `device`. WEFT_ERR_CUDA, WEFT_ERR_NO_DEVICE (logged). */
weft_status_t weft_cuda_device_uuid(int device, uint8_t uuid[WEFT_CUDA_UUID_BYTES]);

/* Fills info for the CUDA backend: runtime and driver versions, devices. */
void weft_cuda_probe(weft_backend_info_t *info);

#ifdef __cplusplus
}
#endif

#endif
