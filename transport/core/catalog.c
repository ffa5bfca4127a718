/* The backends libweft knows, one descriptor each. This is the only file
 * that names them: a new backend is its folder, one line here and one in
 * include/weft's enums. Which file defines each descriptor, the backend or
 * its <name>_none.c stand-in, Makefile.am chooses by what was built. */
#include "transport/core/catalog.h"

#include "common/compiler.h"

#include <stddef.h>

extern const weft_transport_desc_t weft_host_desc;
extern const weft_transport_desc_t weft_cuda_desc;
extern const weft_transport_desc_t weft_ucx_desc;
extern const weft_transport_desc_t weft_nccl_desc;
extern const weft_transport_desc_t weft_verbs_desc;

static const weft_transport_desc_t *const catalog[] = {
    [WEFT_BACKEND_HOST] = &weft_host_desc, [WEFT_BACKEND_CUDA] = &weft_cuda_desc,
    [WEFT_BACKEND_UCX] = &weft_ucx_desc,   [WEFT_BACKEND_NCCL] = &weft_nccl_desc,
    [WEFT_BACKEND_VERBS] = &weft_verbs_desc,
};

_Static_assert(WEFT_ARRAY_SIZE(catalog) == WEFT_BACKEND_LAST, "every backend needs a descriptor");

const weft_transport_desc_t *weft_catalog_backend(weft_backend_t backend)
{
    return (unsigned)backend < WEFT_ARRAY_SIZE(catalog) ? catalog[backend] : NULL;
}

const weft_transport_desc_t *weft_catalog_transport(weft_transport_t transport)
{
    if ((int)transport <= 0) {
        return NULL;
    }
    for (size_t i = 0; i < WEFT_ARRAY_SIZE(catalog); i++) {
        if (catalog[i]->transport == transport) {
            return catalog[i];
        }
    }
    return NULL;
}
