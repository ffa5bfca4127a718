/*
 * The ucx consumer's VIEWS message, read and checked before anything in
 * it reaches UCX (plain C, no UCX: built and fuzzed everywhere). Internal.
 *
 * VIEWS (sealed, ctl/auth.h): blob worker address, u32 region count,
 * per region u64 base, u64 bytes, blob packed remote key; the views
 * (ctl/wire.h); u64 staging ring half (0: none); u32 receive lane
 * count, a blob worker address each; u64 inbox base, u64 inbox bytes
 * (delta versions, remote/remote_delta.h; 0 bytes: none).
 *
 * What is checked here: every length against the message, counts against
 * their limits, no empty address (UCX reads a worker address without its
 * length), a ring only in region 0 holding two halves, an inbox inside
 * one region, and with a ring that region is region 1, the only other
 * (a staged consumer's inbox is pinned host memory of its own). What
 * cannot be:
 * the inside of a worker address or a packed key, which UCX parses
 * without lengths of its own. Those come only from a consumer that proved
 * the token, in a message sealed for its session; a token holder can
 * still make UCX read garbage (documented in the README).
 */
#ifndef WEFT_TRANSPORT_CTL_UCX_VIEWS_H
#define WEFT_TRANSPORT_CTL_UCX_VIEWS_H

#include "transport/ctl/bootstrap.h"
#include "transport/ctl/wire.h"

#include <stdint.h>

#define WEFT_UCX_LANES_MAX   16u        /* receive lanes a consumer may announce */
#define WEFT_UCX_REGIONS_MAX (1u << 20) /* registered regions a consumer may announce */

/* Bytes from a message: a worker address, a packed remote key. */
typedef struct weft_ucx_blob {
    const void *data;
    uint32_t    length;
} weft_ucx_blob_t;

typedef struct weft_ucx_views_msg {
    weft_ucx_blob_t   address;       /* the consumer's worker */
    uint32_t          region_count;  /* ≥ 1 */
    weft_wire_span_t *regions;       /* malloc'd: its registered memory */
    weft_ucx_blob_t  *rkeys;         /* malloc'd: a key per region */
    weft_recv_view_t *views;         /* malloc'd (weft_wire_get_views) */
    char (*names)[WEFT_TENSOR_NAME_MAX];
    uint32_t          view_count;
    uint64_t          ring_half;     /* 0: no staging ring */
    uint32_t          lane_count;    /* 0: its one worker */
    weft_ucx_blob_t   lanes[WEFT_UCX_LANES_MAX];
    uint64_t          inbox_base, inbox_bytes; /* 0 bytes: takes no deltas */
} weft_ucx_views_msg_t;

/*
 * Reads msg (a VIEWS) into *out, whose blobs point into msg's payload
 * (valid while it is). WEFT_OK; or WEFT_ERR_CORRUPT / WEFT_ERR_NO_MEMORY
 * with *reason, the refusal's words ("malformed views": the head;
 * "malformed views or keys": the rest), nothing left allocated.
 */
weft_status_t weft_ucx_views_parse(const weft_ctl_msg_t *msg, weft_ucx_views_msg_t *out, const char **reason);

/* Frees what parse allocated and the caller did not take (set to NULL). */
void weft_ucx_views_msg_free(weft_ucx_views_msg_t *m);

#endif
