/*
 * The transport contract. Each backend defines one const ops table; the
 * plan core (plan.c, plan_copy.c) dispatches through it and never tests
 * which backend it holds. post is required; any other op may be NULL,
 * meaning the backend has nothing to do at that step. Internal.
 *
 * Order of calls on a plan: open → connect → build → (post → wait) × N →
 * close. The core has already matched the views, checked them and built
 * the coalesced copy ranges (plan->ranges) when build runs.
 */
#ifndef WEFT_TRANSPORT_TRANSPORT_H
#define WEFT_TRANSPORT_TRANSPORT_H

#include <weft/transport.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct weft_plan;

/* A bit per weft_memory_kind_t, for the memory a backend can reach. */
#define WEFT_MEMORY_BIT(kind) (1u << (unsigned)(kind))

typedef struct weft_transport_ops {
    const char *name;       /* "host"; for messages */
    uint32_t    src_memory; /* WEFT_MEMORY_BIT()s of registry memory it reads */
    uint32_t    dst_memory; /* WEFT_MEMORY_BIT()s of receive views it writes */

    /* Creates the backend's state for a plan, in plan->backend. */
    weft_status_t (*open)(struct weft_plan *plan);
    /* Reaches the producer's side (bootstrap, endpoints, imported
     * handles). NULL where the registry's memory is mapped locally. */
    weft_status_t (*connect)(struct weft_plan *plan);
    /* Registers the receive memory and turns plan->ranges into whatever
     * the backend replays (descriptors, rkeys, staging chunks). */
    weft_status_t (*build)(struct weft_plan *plan);
    /* Starts copying the leased version into the views: WEFT_OK when every
     * byte is in place already, WEFT_INPROGRESS when wait finishes it. */
    weft_status_t (*post)(struct weft_plan *plan, const weft_lease_t *lease);
    /* Completes the post in flight; required when post can return
     * WEFT_INPROGRESS. */
    weft_status_t (*wait)(struct weft_plan *plan);
    /* Undoes open, connect and build, whichever of them ran; called once
     * open succeeded, also when a later step failed. */
    void (*close)(struct weft_plan *plan);
} weft_transport_ops_t;

/* The backend of a transport; NULL when it is unknown or not built in. */
const weft_transport_ops_t *weft_transport_ops_find(weft_transport_t transport);

/* The backends. Each is defined in its own directory (host/, …). */
extern const weft_transport_ops_t weft_transport_host_ops;
extern const weft_transport_ops_t weft_transport_cuda_ipc_ops; /* HAVE_CUDA */

#ifdef __cplusplus
}
#endif

#endif
