/*
 * The host transport: the registry's slots are mapped in this process, so
 * a version is copied with one memcpy per range, synchronously.
 */
#include "config.h"

#include "transport/plan/plan.h"

#include <string.h>

static weft_status_t host_post(struct weft_plan *plan, const weft_lease_t *lease)
{
    const weft_copy_range_t *range = plan->ranges.ranges;
    const uint8_t           *arena;
    weft_status_t            status;

    status = weft_plan_slot_base(plan, lease, &arena);
    if (status != WEFT_OK) {
        return status;
    }
    for (uint64_t i = 0; i < plan->ranges.count; i++) {
        memcpy(range[i].dst, arena + range[i].src, range[i].bytes);
    }
    return WEFT_OK;
}

/* Nothing to open, connect, register or wait for: the arena is local. */
const weft_transport_ops_t weft_transport_host_ops = {
    .name       = "host",
    .src_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST),
    .dst_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST),
    .post       = host_post,
};
