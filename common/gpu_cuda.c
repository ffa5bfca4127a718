/* common/gpu.h with the CUDA runtime. */
#include "config.h"

#include "common/cuda_util.h"
#include "common/gpu.h"

weft_status_t weft_gpu_pointer_device(const void *ptr, int *device)
{
    return weft_cuda_pointer_device(ptr, device);
}

int weft_gpu_count(void)
{
    int count = 0;

    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver: no GPU, and no sticky error left */
        return 0;
    }
    return count;
}

weft_status_t weft_gpu_pci_bus_id(int device, char *bus, size_t size)
{
    if (cudaDeviceGetPCIBusId(bus, (int)size, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return WEFT_ERR_NO_DEVICE;
    }
    return WEFT_OK;
}
