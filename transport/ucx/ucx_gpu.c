/* Which path GPU memory takes over UCX, and registering memory by kind. */
#include "config.h"

#include "ucx_gpu.h"

#include "common/env_config.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* 1 when one of the component's memory domains registers CUDA memory. */
static int component_registers_cuda(uct_component_h component, const uct_component_attr_t *attr)
{
    int found = 0;

    for (unsigned i = 0; i < attr->md_resource_count && !found; i++) {
        uct_md_config_t *config;
        uct_md_h         md;
        uct_md_attr_t    md_attr;

        if (uct_md_config_read(component, NULL, NULL, &config) != UCS_OK) {
            continue;
        }
        if (uct_md_open(component, attr->md_resources[i].md_name, config, &md) == UCS_OK) {
            found = uct_md_query(md, &md_attr) == UCS_OK &&
                    (md_attr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
            uct_md_close(md);
        }
        uct_config_release(config);
    }
    return found;
}

/*
 * 1 when a memory domain of UCX's InfiniBand/RoCE component ("ib")
 * registers CUDA memory: GPUDirect RDMA (nvidia-peermem or dma-buf).
 * UCX's cuda_copy, cuda_ipc and gdr_copy domains register CUDA memory
 * too, but for copies on one node; with them alone UCX 1.13.1 (built with
 * CUDA) does not put from CUDA memory over TCP: its TCP transport read
 * the device pointer as host memory and crashed (seen on an H200).
 */
int weft_ucx_network_registers_cuda(void)
{
    uct_component_h *components;
    unsigned         count;
    int              found = 0;

    if (weft_ucx_api_load(NULL) != WEFT_OK || uct_query_components(&components, &count) != UCS_OK) {
        return 0;
    }
    for (unsigned c = 0; c < count && !found; c++) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};

        if (uct_component_query(components[c], &attr) != UCS_OK || strcmp(attr.name, "ib") != 0 ||
            attr.md_resource_count == 0) {
            continue;
        }
        attr.md_resources = calloc(attr.md_resource_count, sizeof(*attr.md_resources));
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        if (attr.md_resources != NULL && uct_component_query(components[c], &attr) == UCS_OK) {
            found = component_registers_cuda(components[c], &attr);
        }
        free(attr.md_resources);
    }
    uct_release_component_list(components);
    return found;
}

int weft_ucx_reports_cuda(ucp_context_h context)
{
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};

    if (ucp_context_query(context, &attr) != UCS_OK) {
        return 0;
    }
    return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0 &&
           weft_ucx_network_registers_cuda();
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
        weft_log_error("%s: WEFT_UCX_CUDA=direct, but UCX %s reports no GPUDirect RDMA (no CUDA "
                       "memory support, or no network memory domain that registers CUDA memory); "
                       "use WEFT_UCX_CUDA=staged or auto",
                       who, ucp_get_version_string());
        return status;
    }
    if (status != WEFT_OK) {
        weft_log_error("WEFT_UCX_CUDA=\"%s\" is none of auto, direct, staged",
                       weft_config_value(WEFT_CONFIG_UCX_CUDA));
        return status;
    }
    weft_log_info("%s: GPU memory over ucx: %s (UCX %s reports %sGPUDirect RDMA; %s)", who,
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
