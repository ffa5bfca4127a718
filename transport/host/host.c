/*
 * The host transport: the registry's slots are mapped in this process, so
 * a version is copied with one memcpy per range, synchronously.
 */
#include "config.h"

#include "common/text.h"
#include "transport/core/desc.h"
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
static const weft_plan_ops_t host_plan_ops = {
    .name       = "host",
    .src_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST),
    .dst_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST),
    .post       = host_post,
};

static void host_probe(weft_backend_info_t *info)
{
    info->available = 1;
    weft_text_append(info->detail, sizeof(info->detail), "POSIX shared memory and memcpy\n");
}

const weft_transport_desc_t weft_host_desc = {
    .backend    = WEFT_BACKEND_HOST,
    .name       = "host",
    .dependency = "", /* always built */
    .transport  = WEFT_TRANSPORT_HOST,
    .compiled   = 1,
    .probe      = host_probe,
    .plan       = &host_plan_ops,
};
