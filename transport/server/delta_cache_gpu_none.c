/* Without CUDA there are no GPU registries to encode from
 * (server/delta_cache_gpu.h). */
#include "config.h"

#include "transport/server/delta_cache_gpu.h"

#include <stddef.h>

weft_status_t weft_delta_gpu_create(uint8_t *const host[2], uint64_t capacity, uint64_t *scratch_bytes,
                                    weft_delta_gpu_t **out)
{
    (void)host;
    (void)capacity;
    *scratch_bytes = 0;
    *out = NULL;
    return WEFT_ERR_UNSUPPORTED;
}

void weft_delta_gpu_destroy(weft_delta_gpu_t *g)
{
    (void)g;
}

weft_status_t weft_delta_gpu_encode(weft_delta_gpu_t *g, const weft_delta_gpu_item_t *items, uint32_t n)
{
    (void)g;
    (void)items;
    (void)n;
    return WEFT_ERR_UNSUPPORTED;
}

uint64_t weft_delta_gpu_size(const weft_delta_gpu_t *g, uint32_t i)
{
    (void)g;
    (void)i;
    return 0;
}

weft_status_t weft_delta_gpu_fetch_delta(weft_delta_gpu_t *g, uint32_t i, void *dst)
{
    (void)g;
    (void)i;
    (void)dst;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_delta_gpu_fetch_bytes(weft_delta_gpu_t *g, const void *src, uint64_t bytes, void *dst)
{
    (void)g;
    (void)src;
    (void)bytes;
    (void)dst;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_delta_gpu_wait(weft_delta_gpu_t *g)
{
    (void)g;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_delta_gpu_mark(weft_delta_gpu_t *g)
{
    (void)g;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_delta_gpu_ready(weft_delta_gpu_t *g)
{
    (void)g;
    return WEFT_ERR_UNSUPPORTED;
}
