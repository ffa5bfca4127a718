/*
 * The plan object, shared by the plan core and the backends. Internal.
 */
#ifndef WEFT_TRANSPORT_PLAN_PLAN_H
#define WEFT_TRANSPORT_PLAN_PLAN_H

#include "kernels/checksum.h"
#include "transport/plan/plan_ranges.h"
#include "transport/core/desc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <weft/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A receive view after matching: what copies and messages need of it. */
typedef struct weft_plan_view {
    char               name[WEFT_TENSOR_NAME_MAX];
    uint32_t           tensor;  /* registry index */
    uint64_t           offset;  /* of the tensor in a slot's arena */
    weft_memory_kind_t memory;
    uint8_t           *data;
    uint64_t           span;    /* bytes from data to one past its last element */
    uint64_t           bytes;   /* of its elements */
    /* The view holds the tensor's bytes end to end in the registry's
     * order (same strides, neither padded): the tensor's checksum is the
     * view's, so a consumer can check what it received against it. */
    int                verbatim;
} weft_plan_view_t;

struct weft_plan {
    weft_registry_h             reg;       /* borrowed */
    weft_transport_t            transport;
    const weft_plan_ops_t *ops;
    void                       *backend;   /* the backend's state, from open */

    weft_plan_view_t *views;
    uint32_t          view_count;
    uint64_t          bytes;              /* per version */
    uint32_t          last_tensor;        /* the largest registry index of a view */
    uint64_t          ranges_uncoalesced;
    weft_range_list_t ranges;             /* coalesced, sorted by source */
    uint64_t          slot_bytes;         /* of one version in the registry */

    /* Bit s: slot s's tensors were found where their offsets say. */
    uint64_t      checked_slots;
    /* Test hook: the next copy fails with this status. */
    weft_status_t fault;

    /* Verified versions: device memory the checks of device views keep. */
    weft_checksum_scratch_t sum_scratch;

    _Atomic uint64_t versions_copied;
    _Atomic uint64_t copy_failures;
    _Atomic uint64_t last_version;
};

/*
 * The start of the leased slot's arena, where range sources are counted
 * from. The first time a slot is seen, every tensor of the plan is checked
 * to lie at arena + its offset (WEFT_ERR_CORRUPT otherwise), so that
 * ranges merged across tensors are safe to copy.
 */
weft_status_t weft_plan_slot_base(struct weft_plan *plan, const weft_lease_t *lease,
                                  const uint8_t **base);

/*
 * weft_plan_create() with the backend given: for the servers of remote
 * transports, whose plans map registry tensors to another node's
 * addresses (view data pointers are the remote addresses, never
 * dereferenced here).
 */
weft_status_t weft_plan_create_with(weft_registry_h reg, weft_transport_t transport,
                                    const weft_plan_ops_t *ops, const weft_recv_view_t *views,
                                    size_t count, weft_plan_h *plan);

/*
 * Test hook: the next weft_plan_copy() or weft_plan_receive() on this plan
 * fails with `status` before any byte moves; WEFT_OK disarms it. Not for
 * use outside tests.
 */
void weft_plan_fail_next_copy(weft_plan_h plan, weft_status_t status);

#ifdef __cplusplus
}
#endif

#endif
