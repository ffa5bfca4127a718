/*
 * A remote consumer's side of delta versions (docs/protocol.md, "Delta
 * versions on the wire"): its inbox, where a server puts the deltas of
 * the tensors of a version instead of the tensors themselves; how each of
 * its views lies (rows, <weft/delta.h>'s target); which version its views
 * hold verbatim, which it tells the server with each request; and the
 * apply, each view checked against the checksum its delta carries before
 * the version counts as received. Transport-neutral. Host views are
 * patched on the library's threads, device views on their GPU
 * (remote_delta_gpu.h).
 * One consumer's, on its receiving thread. Internal.
 */
#ifndef WEFT_TRANSPORT_REMOTE_REMOTE_DELTA_H
#define WEFT_TRANSPORT_REMOTE_REMOTE_DELTA_H

#include "transport/ctl/wire.h"
#include "transport/remote/remote.h"

#include <stdint.h>
#include <weft/delta.h>
#include <weft/transport.h>

/* The inbox a consumer takes when WEFT_DELTA_INBOX says auto: this share
 * of its version's bytes (RL steps change 0.1-1.3 % of the FP8 bytes, a
 * delta costs 3 bytes a change: 0.4-3 % of the version), at least the
 * minimum below; a version of hundreds of GB takes a few % of that in
 * host memory more. */
#define WEFT_DELTA_INBOX_SHARE 16u                       /* 1/16 */
#define WEFT_DELTA_INBOX_MIN   (UINT64_C(1) << 20)

struct weft_remote_delta_gpu;

typedef struct weft_remote_delta {
    uint8_t             *inbox;       /* NULL: this consumer takes no deltas */
    struct weft_remote_delta_gpu *gpu; /* device views: the inbox's and the apply's; NULL for host views */
    uint64_t             inbox_bytes;
    uint32_t             view_count;
    weft_delta_target_t *targets;     /* per view: where its bytes lie */
    /* The version the views hold verbatim, as far as this consumer knows:
     * set when one was received and checked, 0 once the server began to
     * write a version whole into them or a delta failed. */
    uint64_t             holds;
    /* The DELTA of the version in flight (0: none came). */
    uint64_t                 map_version, map_base;
    weft_wire_delta_entry_t *map;
    uint32_t                 map_count;
    /* The last apply failed at a WT's view patched by its W's delta
     * (PATCH_T): its REDO says so, and the server stops pairing. */
    int                  failed_transposed;
    /* The last apply's: per view, whether a patch made it and was checked
     * (its bytes summed), and the checksum that patch carried. */
    uint8_t                 *patched;
    uint64_t                *carried;
} weft_remote_delta_t;

/*
 * Sets up deltas for `count` views: host views (device < 0) get an inbox
 * of host memory (page aligned); device views, all on GPU `device`, one
 * in `inbox_memory` (the memory of the consumer's other registered
 * regions: pinned host memory for a staged consumer, device memory for
 * one registered directly). WEFT_DELTA=off, a view whose bytes do not
 * lie as rows of equal stride, or device views in a build without CUDA
 * leave the inbox NULL (said at info level), and every version comes
 * whole. WEFT_ERR_NO_MEMORY, WEFT_ERR_CUDA; WEFT_ERR_INVALID_PARAM for
 * WEFT_DELTA or WEFT_DELTA_INBOX values that do not parse (logged).
 */
weft_status_t weft_remote_delta_init(weft_remote_delta_t *d, const weft_recv_view_t *views, uint32_t count,
                                     int device, weft_memory_kind_t inbox_memory);

void weft_remote_delta_fini(weft_remote_delta_t *d);

/* A DELTA message: kept for its VERSION. WEFT_ERR_CORRUPT when malformed
 * or not one entry per view; WEFT_ERR_NO_MEMORY. */
weft_status_t weft_remote_delta_on_map(weft_remote_delta_t *d, const weft_ctl_msg_t *msg);

/* weft_remote_delta_on_map for a transport's receive loop: a malformed
 * DELTA is logged with the server that sent it. */
weft_status_t weft_remote_delta_take_map(weft_remote_delta_t *d, const weft_ctl_msg_t *msg, const char *server);

/*
 * At VERSION(v), every byte of v in place: when a DELTA of v came, applies
 * each view's entry from the inbox into the view and checks the view
 * against the checksum its delta carries; *applied says whether one came.
 * WEFT_OK: the views hold v. WEFT_ERR_CORRUPT (logged with the view): they
 * do not, and holds is 0 (a delta for a base the views do not hold, one
 * that does not apply, or a view whose result is not the version's); the
 * caller asks for v whole.
 */
weft_status_t weft_remote_delta_apply(weft_remote_delta_t *d, uint64_t version, int *applied);

/*
 * After an apply, with the VERSION's checksums: each view that a patch
 * made, whose bytes were summed and matched the checksum the patch
 * carried, needs no second reading where the VERSION has its sum: that
 * sum must equal the carried one (WEFT_ERR_CORRUPT, logged, when not),
 * and its `known` is cleared so that weft_remote_base_check passes over
 * it. Nothing to do when no apply ran.
 */
weft_status_t weft_remote_delta_vouch(const weft_remote_delta_t *d, weft_wire_sums_t *sums);

/*
 * Where the DELTA of the version in flight lies in the inbox, for a
 * transport whose server sends the pieces one after the other (nccl):
 * each place with bytes once (a WT patched by its W's delta lies at its
 * W's place), in inbox order, the order the server lays them out in
 * (server/delta_cache.h, weft_delta_inbox_layout). offsets[] and sizes[]
 * have room for view_count; *count says how many. WEFT_ERR_CORRUPT
 * (logged) for no DELTA or places that overlap.
 */
weft_status_t weft_remote_delta_places(const weft_remote_delta_t *d, uint64_t *offsets, uint64_t *sizes,
                                       uint32_t *count);

/*
 * Asks for v whole after its delta did not check out: REDO(v, flags),
 * bit 0 of flags when it failed at a WT patched by its W's delta (the
 * server then stops pairing). WEFT_ERR_CONNECTION when it could not be
 * sent (the connection is closed then: connect again).
 */
weft_status_t weft_remote_delta_redo(const weft_remote_delta_t *d, weft_remote_base_t *base, uint64_t v);

/* The views' bytes are no longer a version this consumer vouches for (the
 * server began to write one whole, or a transfer failed). */
void weft_remote_delta_forget(weft_remote_delta_t *d);

#endif
