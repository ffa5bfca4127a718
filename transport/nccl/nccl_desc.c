/* The nccl backend's descriptor (core/desc.h): the baseline's servers and
 * remote consumers; no plan. */
#include "config.h"

#include "transport/core/desc.h"
#include "transport/nccl/nccl_common.h"

const weft_transport_desc_t weft_nccl_desc = {
    .backend    = WEFT_BACKEND_NCCL,
    .name       = "nccl",
    .dependency = "NCCL",
    .transport  = WEFT_TRANSPORT_NCCL,
    .compiled   = 1,
    .probe      = weft_nccl_probe,
    .server     = &weft_nccl_server_ops,
    .remote     = &weft_nccl_remote_ops,
};
