/* The ucx transport's CUDA context helpers (ucx_cuda.h). */
#include "config.h"

#include "common/cuda_util.h"
#include "transport/ucx/ucx_cuda.h"

weft_status_t weft_ucx_cuda_enter(int device, int *saved)
{
    weft_status_t status = weft_cuda_enter(device, saved);

    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaFree(NULL)); /* binds the primary context */
    }
    return status;
}

void weft_ucx_cuda_leave(int device, int saved)
{
    weft_cuda_leave(device, saved);
}
