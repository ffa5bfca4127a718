/* The nccl backend in a library built without NCCL: its descriptor says
 * so (core/catalog.c). */
#include "config.h"

#include "transport/core/desc.h"

const weft_transport_desc_t weft_nccl_desc = {
    .backend    = WEFT_BACKEND_NCCL,
    .name       = "nccl",
    .dependency = "NCCL",
    .transport  = WEFT_TRANSPORT_NCCL,
};
