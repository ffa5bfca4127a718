/* common/gpu.h in a library built without CUDA: there is no GPU. */
#include "config.h"

#include "common/gpu.h"

weft_status_t weft_gpu_pointer_device(const void *ptr, int *device)
{
    (void)ptr;
    (void)device;
    return WEFT_ERR_UNSUPPORTED;
}

int weft_gpu_count(void)
{
    return 0;
}

weft_status_t weft_gpu_pci_bus_id(int device, char *bus, size_t size)
{
    (void)device;
    (void)bus;
    (void)size;
    return WEFT_ERR_UNSUPPORTED;
}
