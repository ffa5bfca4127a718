/* Which path GPU memory takes over UCX, and registering memory by kind. */
#include "config.h"

#include "ucx_gpu.h"

#include "common/env_config.h"
#include "common/log.h"

#include <string.h>
#include <strings.h>

int weft_ucx_reports_cuda(ucp_context_h context)
{
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};

    if (ucp_context_query(context, &attr) != UCS_OK) {
        return 0;
    }
    return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

const char *weft_ucx_gpu_path_name(weft_ucx_gpu_path_t path)
{
    return path == WEFT_UCX_GPU_DIRECT ? "direct" : "staged";
}

weft_status_t weft_ucx_gpu_choose(int cuda, weft_ucx_gpu_path_t *path, const char **why)
{
    const char *want = weft_config_value(WEFT_CONFIG_UCX_CUDA);

    if (strcasecmp(want, "direct") == 0) {
        *path = WEFT_UCX_GPU_DIRECT;
        *why = "WEFT_UCX_CUDA=direct";
        return cuda ? WEFT_OK : WEFT_ERR_UNSUPPORTED;
    }
    if (strcasecmp(want, "staged") == 0) {
        *path = WEFT_UCX_GPU_STAGED;
        *why = "WEFT_UCX_CUDA=staged";
        return WEFT_OK;
    }
    if (strcasecmp(want, "auto") == 0) {
        *path = cuda ? WEFT_UCX_GPU_DIRECT : WEFT_UCX_GPU_STAGED;
        *why = "WEFT_UCX_CUDA=auto";
        return WEFT_OK;
    }
    *why = "WEFT_UCX_CUDA is none of auto, direct, staged";
    return WEFT_ERR_INVALID_PARAM;
}

weft_status_t weft_ucx_gpu_path(ucp_context_h context, const char *who, weft_ucx_gpu_path_t *path)
{
    const char   *why;
    weft_status_t status = weft_ucx_gpu_choose(weft_ucx_reports_cuda(context), path, &why);

    if (status == WEFT_ERR_UNSUPPORTED) {
        weft_log_error("%s: WEFT_UCX_CUDA=direct, but UCX %s reports no CUDA memory support "
                       "(a UCX built without CUDA, or its CUDA transports left out); use "
                       "WEFT_UCX_CUDA=staged or auto",
                       who, ucp_get_version_string());
        return status;
    }
    if (status != WEFT_OK) {
        weft_log_error("WEFT_UCX_CUDA=\"%s\" is none of auto, direct, staged",
                       weft_config_value(WEFT_CONFIG_UCX_CUDA));
        return status;
    }
    weft_log_info("%s: GPU memory over ucx: %s (UCX %s reports %sCUDA memory support; %s)", who,
                  *path == WEFT_UCX_GPU_DIRECT ? "direct, registered with UCX"
                                               : "staged through pinned host bounce buffers",
                  ucp_get_version_string(), weft_ucx_reports_cuda(context) ? "" : "no ", why);
    return WEFT_OK;
}

weft_status_t weft_ucx_mem_map(ucp_context_h context, void *addr, uint64_t bytes,
                               weft_memory_kind_t memory, ucp_mem_h *memh, const char *what)
{
    ucp_mem_map_params_t mp = {
        .field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                       UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        .address     = addr,
        .length      = bytes,
        .memory_type = memory == WEFT_MEMORY_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST,
    };

    return weft_ucx_status(ucp_mem_map(context, &mp, memh), what);
}
