/* The UCX probe: version, every transport of every memory domain, and
 * the path GPU memory takes. */
#include "config.h"

#include "common/text.h"
#include "transport/ucx/ucx_common.h"
#include "ucx_gpu.h"

#include <stdlib.h>

/* Appends "md: tl/dev tl/dev" for one memory domain. Returns its transport
 * count, or -1 when the domain cannot be opened. */
static int ucx_probe_md(uct_component_h component, const char *md_name, weft_backend_info_t *info)
{
    uct_md_config_t        *config;
    uct_md_h                md;
    uct_md_attr_t           attr;
    uct_tl_resource_desc_t *tls;
    unsigned                count;

    if (uct_md_config_read(component, NULL, NULL, &config) != UCS_OK) {
        return -1;
    }
    if (uct_md_open(component, md_name, config, &md) != UCS_OK) {
        uct_config_release(config);
        return -1;
    }
    uct_config_release(config);
    if (uct_md_query_tl_resources(md, &tls, &count) != UCS_OK) {
        uct_md_close(md);
        return -1;
    }
    if (count > 0) {
        weft_text_append(info->detail, sizeof(info->detail), "%s:", md_name);
        for (unsigned i = 0; i < count; i++) {
            weft_text_append(info->detail, sizeof(info->detail), " " UCT_TL_RESOURCE_DESC_FMT,
                             UCT_TL_RESOURCE_DESC_ARG(&tls[i]));
        }
        /* A network domain that registers CUDA memory is GPUDirect RDMA. */
        if (uct_md_query(md, &attr) == UCS_OK &&
            (attr.cap.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA))) {
            weft_text_append(info->detail, sizeof(info->detail), " (registers CUDA memory)");
        }
        weft_text_append(info->detail, sizeof(info->detail), "\n");
    }
    uct_release_tl_resource_list(tls);
    uct_md_close(md);
    return (int)count;
}

/* Whether UCX reports GPUDirect RDMA, and what libweft makes of it. */
static void ucx_probe_gpu(weft_backend_info_t *info)
{
    ucp_params_t        params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_RMA};
    ucp_config_t       *config;
    ucp_context_h       context;
    ucs_status_t        status;
    weft_ucx_gpu_path_t path;
    const char         *why;
    int                 cuda;

    if (ucp_config_read(NULL, NULL, &config) != UCS_OK) {
        weft_text_append(info->detail, sizeof(info->detail), "GPU memory: ucp_config_read failed\n");
        return;
    }
    status = ucp_init(&params, config, &context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        weft_text_append(info->detail, sizeof(info->detail), "GPU memory: ucp_init failed: %s\n",
                         ucs_status_string(status));
        return;
    }
    cuda = weft_ucx_reports_cuda(context);
    ucp_cleanup(context);
    /* Asked apart from the rule, so that an operator sees both halves. */
    weft_text_append(info->detail, sizeof(info->detail),
                     "GPUDirect RDMA: an InfiniBand/RoCE memory domain that registers CUDA memory: "
                     "%s\n",
                     weft_ucx_network_registers_cuda() ? "yes" : "none");
    switch (weft_ucx_gpu_choose(cuda, &path, &why)) {
    case WEFT_OK:
        weft_text_append(info->detail, sizeof(info->detail),
                         "GPU memory: UCX reports %sGPUDirect RDMA; GPU memory goes %s (%s)\n",
                         cuda ? "" : "no ",
                         path == WEFT_UCX_GPU_DIRECT ? "direct, registered with UCX"
                                                     : "staged through pinned host bounce buffers",
                         why);
        break;
    case WEFT_ERR_UNSUPPORTED:
        weft_text_append(info->detail, sizeof(info->detail),
                         "GPU memory: UCX reports no GPUDirect RDMA; WEFT_UCX_CUDA=direct "
                         "makes GPU registries and device views fail\n");
        break;
    default:
        weft_text_append(info->detail, sizeof(info->detail),
                         "GPU memory: UCX reports %sGPUDirect RDMA; %s\n", cuda ? "" : "no ",
                         why);
        break;
    }
}

void weft_ucx_probe(weft_backend_info_t *info)
{
    uct_component_h *components;
    unsigned         ncomponents;
    int              transports = 0;
    const char      *why;

    if (weft_ucx_api_load(&why) != WEFT_OK) {
        weft_text_append(info->detail, sizeof(info->detail), "UCX could not be loaded: %s\n", why);
        return;
    }
    weft_text_append(info->version, sizeof(info->version), "%s", ucp_get_version_string());
    if (uct_query_components(&components, &ncomponents) != UCS_OK) {
        weft_text_append(info->detail, sizeof(info->detail), "uct_query_components failed\n");
        return;
    }
    for (unsigned c = 0; c < ncomponents; c++) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};

        if (uct_component_query(components[c], &attr) != UCS_OK || attr.md_resource_count == 0) {
            continue;
        }
        attr.md_resources = calloc(attr.md_resource_count, sizeof(*attr.md_resources));
        if (attr.md_resources == NULL) {
            break;
        }
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        if (uct_component_query(components[c], &attr) == UCS_OK) {
            for (unsigned m = 0; m < attr.md_resource_count; m++) {
                int n = ucx_probe_md(components[c], attr.md_resources[m].md_name, info);
                transports += n > 0 ? n : 0;
            }
        }
        free(attr.md_resources);
    }
    uct_release_component_list(components);
    ucx_probe_gpu(info);
    if (transports == 0) {
        weft_text_append(info->detail, sizeof(info->detail), "no UCX transport found\n");
    }
    info->available = transports > 0;
}
