/*
 * What the servers that send from GPU registries only (nccl, cuda_ipc
 * push) check before they start. Built with CUDA. Internal.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/log.h"
#include "transport/server/server.h"

weft_status_t weft_server_gpu_registry(weft_registry_h reg, const char *transport,
                                      const char *host_hint, int *device)
{
    weft_arena_info_t info;
    weft_status_t     status = weft_registry_arena_info(reg, &info);
    int               saved;

    if (status != WEFT_OK) {
        return status;
    }
    if (info.memory != WEFT_MEMORY_CUDA) {
        weft_log_error("server: the %s transport sends from GPU registries only (this one is in "
                       "host memory: %s)",
                       transport, host_hint);
        return WEFT_ERR_UNSUPPORTED;
    }
    if (info.device < 0) {
        weft_log_error("server: the GPU of the registry's arenas is not visible in this process");
        return WEFT_ERR_NO_DEVICE;
    }
    *device = info.device;
    /* The context is made now, where a failure can still be returned,
     * not on the server's thread. */
    status = weft_cuda_enter(info.device, &saved);
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaFree(NULL));
        weft_cuda_leave(info.device, saved);
    }
    return status;
}
