/*
 * A version cut into rounds for a consumer whose device views are staged
 * through a bounded ring of pinned host memory (the staged path without
 * GPUDirect RDMA; ucx_gpu.h). The ring has two halves of `half` bytes.
 * Round k carries the version's next `half` bytes (the plan's ranges in
 * order, cut where a round ends) into half k % 2: the server puts them
 * there, flushes, and sends ROUND(v, k) with the round's pieces (where in
 * the ring, where in the views, how many bytes); the consumer copies the
 * pieces into its views on its GPU and answers ROUND_DONE(v, k). Half
 * k % 2 is put into again (round k + 2) only after ROUND_DONE(v, k), so
 * the consumer's copy of one round overlaps the puts of the next, and its
 * pinned memory is 2 × half whatever the version's size. After the last
 * round's ROUND the server sends VERSION(v) as usual; the consumer
 * acknowledges it once every round's copy completed.
 *
 * Payloads (bootstrap messages; see ctl/wire.h for the others):
 *   ROUND:      u64 version, u32 round, u32 rounds, u64 count, then count
 *               × (u64 view address, u64 ring offset, u64 bytes)
 *   ROUND_DONE: u64 version, u32 round
 * Host code only: the server builds and sends rounds, the consumer reads
 * them; the copies are ucx_stage.c's. Internal.
 */
#ifndef WEFT_TRANSPORT_PLAN_ROUNDS_H
#define WEFT_TRANSPORT_PLAN_ROUNDS_H

#include "transport/plan/plan_ranges.h"
#include "transport/ctl/wire.h"

#include <stdint.h>
#include <weft/weft.h>

/* One stretch of a round: ring bytes [ring_offset, + bytes) of the whole
 * ring (both halves) belong at the consumer's view address `dst`. */
typedef struct weft_ucx_piece {
    uint64_t dst, ring_offset, bytes;
} weft_ucx_piece_t;

typedef struct weft_round {
    weft_range_list_t puts;   /* arena offset → ring address, for the server's puts */
    weft_ucx_piece_t *pieces; /* the same bytes: ring offset → view address */
    uint64_t          piece_count;
} weft_round_t;

typedef struct weft_rounds {
    weft_round_t *round;
    uint32_t          count;
    uint64_t          half;
} weft_rounds_t;

/* The most rounds a version may need (a half at least this fraction of it). */
#define WEFT_ROUNDS_MAX (UINT32_C(1) << 20)

/*
 * Cuts `ranges` (a plan's, whose dst are the consumer's view addresses) in
 * order into rounds of at most `half` bytes for a ring at ring_base of
 * 2 × half bytes. An empty plan gives no rounds. WEFT_ERR_NO_MEMORY,
 * WEFT_ERR_INVALID_PARAM (half 0, or more than WEFT_ROUNDS_MAX rounds).
 */
weft_status_t weft_rounds_build(const weft_range_list_t *ranges, uint64_t ring_base,
                                    uint64_t half, weft_rounds_t *rounds);
void          weft_rounds_free(weft_rounds_t *rounds);

/* Appends round k of rounds (for version v) in ROUND's encoding. */
void weft_ucx_put_round(weft_ctl_buf_t *buf, uint64_t version, const weft_rounds_t *rounds,
                        uint32_t k);

/*
 * Reads a ROUND payload: *pieces is malloc'd (the caller frees it). Each
 * piece is checked to lie inside one of the spans (the consumer's views)
 * and inside half (round % 2) of a ring of 2 × half bytes.
 * WEFT_ERR_CORRUPT (malformed or out of bounds), WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_ucx_get_round(const weft_ctl_msg_t *msg, uint64_t half,
                                 const weft_wire_span_t *spans, uint32_t span_count,
                                 uint64_t *version, uint32_t *round, uint32_t *rounds,
                                 weft_ucx_piece_t **pieces, uint64_t *count);

#endif
