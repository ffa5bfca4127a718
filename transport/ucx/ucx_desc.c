/* The ucx backend's descriptor (core/desc.h): servers and remote
 * consumers across nodes; no plan. */
#include "config.h"

#include "transport/core/desc.h"
#include "transport/ucx/ucx_common.h"

const weft_transport_desc_t weft_ucx_desc = {
    .backend    = WEFT_BACKEND_UCX,
    .name       = "ucx",
    .dependency = "UCX",
    .transport  = WEFT_TRANSPORT_UCX,
    .compiled   = 1,
    .probe      = weft_ucx_probe,
    .server     = &weft_ucx_server_ops,
    .remote     = &weft_ucx_remote_ops,
};
