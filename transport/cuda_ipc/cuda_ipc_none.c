/* The cuda backend in a library built without CUDA: its descriptor says so
 * (core/catalog.c). */
#include "config.h"

#include "transport/core/desc.h"

const weft_transport_desc_t weft_cuda_desc = {
    .backend    = WEFT_BACKEND_CUDA,
    .name       = "cuda",
    .dependency = "CUDA",
    .transport  = WEFT_TRANSPORT_CUDA_IPC,
};
