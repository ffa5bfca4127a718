/* Without CUDA: device views take every version whole (remote_delta_gpu.h). */
#include "config.h"

#include "transport/remote/remote_delta_gpu.h"

weft_status_t weft_remote_delta_gpu_create(int device, uint32_t count, uint64_t inbox_bytes,
                                           weft_memory_kind_t inbox_memory, weft_remote_delta_gpu_t **out,
                                           uint8_t **inbox)
{
    (void)device;
    (void)count;
    (void)inbox_bytes;
    (void)inbox_memory;
    *out = NULL;
    *inbox = NULL;
    return WEFT_ERR_UNSUPPORTED;
}

void weft_remote_delta_gpu_destroy(weft_remote_delta_gpu_t *g)
{
    (void)g;
}

weft_status_t weft_remote_delta_gpu_apply(weft_remote_delta_gpu_t *g, const weft_wire_delta_entry_t *map,
                                          const weft_delta_target_t *targets, uint32_t count, uint8_t *patched,
                                          uint64_t *carried, uint32_t *bad)
{
    (void)g;
    (void)map;
    (void)targets;
    (void)count;
    (void)patched;
    (void)carried;
    *bad = 0;
    return WEFT_ERR_UNSUPPORTED;
}
