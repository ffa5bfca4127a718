/* The ucx transport's staged GPU path in a library built without CUDA
 * (ucx_cuda.h): no GPU memory reaches the transport then, and every call
 * says so. */
#include "config.h"

#include "transport/ucx/ucx_cuda.h"

weft_status_t weft_ucx_cuda_enter(int device, int *saved)
{
    (void)device;
    *saved = -1;
    return WEFT_ERR_UNSUPPORTED;
}

void weft_ucx_cuda_leave(int device, int saved)
{
    (void)device;
    (void)saved;
}

weft_status_t weft_ucx_ring_create(ucp_context_h context, uint64_t window,
                                   uint64_t max_put, weft_ucx_ring_t **ring)
{
    (void)context;
    (void)window;
    (void)max_put;
    (void)ring;
    return WEFT_ERR_UNSUPPORTED;
}

void weft_ucx_ring_destroy(weft_ucx_ring_t *ring)
{
    (void)ring;
}

void weft_ucx_ring_start(weft_ucx_ring_t *ring, const weft_range_list_t *ranges,
                         const uint8_t *arena)
{
    (void)ring;
    (void)ranges;
    (void)arena;
}

weft_status_t weft_ucx_ring_advance(weft_ucx_ring_t *ring,
                                    const weft_ucx_target_t *target)
{
    (void)ring;
    (void)target;
    return WEFT_ERR_UNSUPPORTED;
}

int weft_ucx_ring_idle(weft_ucx_ring_t *ring)
{
    (void)ring;
    return 1;
}

weft_status_t weft_ucx_stage_create(const weft_wire_span_t *spans, uint32_t count,
                                    uint64_t half, weft_ucx_stage_t **stage)
{
    (void)spans;
    (void)count;
    (void)half;
    (void)stage;
    return WEFT_ERR_UNSUPPORTED;
}

void weft_ucx_stage_destroy(weft_ucx_stage_t *stage)
{
    (void)stage;
}

weft_wire_span_t weft_ucx_stage_area(const weft_ucx_stage_t *stage)
{
    (void)stage;
    return (weft_wire_span_t){0, 0};
}

uint64_t weft_ucx_stage_half(const weft_ucx_stage_t *stage)
{
    (void)stage;
    return 0;
}

weft_status_t weft_ucx_stage_round(weft_ucx_stage_t *stage,
                                   const weft_ctl_msg_t *msg, uint64_t *version,
                                   uint32_t *round, uint32_t *rounds)
{
    (void)stage;
    (void)msg;
    (void)version;
    (void)round;
    (void)rounds;
    return WEFT_ERR_UNSUPPORTED;
}
