/* The ucx backend in a library built without UCX: its descriptor says so
 * (core/catalog.c), and its public calls fail with WEFT_ERR_UNSUPPORTED. */
#include "config.h"

#include "common/log.h"
#include "transport/core/desc.h"

#include <stddef.h>

const weft_transport_desc_t weft_ucx_desc = {
    .backend    = WEFT_BACKEND_UCX,
    .name       = "ucx",
    .dependency = "UCX",
    .transport  = WEFT_TRANSPORT_UCX,
};

/* ucx/ucx_memory.c's calls, in a library built without UCX. */
WEFT_API weft_status_t weft_ucx_memory_alloc(uint64_t bytes, weft_ucx_memory_h *memory, void **base)
{
    (void)bytes;
    if (memory != NULL) {
        *memory = NULL;
    }
    if (base != NULL) {
        *base = NULL;
    }
    weft_log_error("libweft was built without UCX: no UCX memory");
    return WEFT_ERR_UNSUPPORTED;
}

WEFT_API weft_status_t weft_ucx_memory_free(weft_ucx_memory_h memory)
{
    (void)memory; /* none can have been made */
    return WEFT_OK;
}
