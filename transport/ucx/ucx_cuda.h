/*
 * The CUDA side of the ucx transport's staged path (ucx_gpu.h decides
 * when it is taken): the server's bounce ring (ucx_ring.c) and the
 * consumer's staging area (ucx_stage.c), and ucx_cuda.c. Built with CUDA
 * only; without it ucx_cuda_none.c stands in, every call giving
 * WEFT_ERR_UNSUPPORTED (no GPU memory can reach the transport then
 * anyway). Internal.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_CUDA_H
#define WEFT_TRANSPORT_UCX_UCX_CUDA_H

#include "transport/plan/plan_ranges.h"
#include "ucx_common.h"

#include <stddef.h>
#include <stdint.h>
#include <weft/transport.h>


/*
 * The server's bounce ring, one per consumer fed from a GPU registry: a
 * pinned host buffer of `window` bytes registered once with UCX, in
 * WEFT_UCX_RING_CHUNKS chunks. A chunk takes the next bytes of the
 * version (a device-to-host copy on the ring's stream, then an event);
 * once its event completed, its bytes are put to the consumer; it takes
 * new bytes only after every one of its puts completed. So the copies of
 * later chunks overlap the puts of earlier ones, and the host memory is
 * the window, whatever the size of a version. Used on the server thread,
 * with the registry's GPU current.
 */
#define WEFT_UCX_RING_CHUNKS 4

typedef struct weft_ucx_ring weft_ucx_ring_t;

/*
 * The consumer's staging ring for device views (the staged path): pinned
 * host memory of two halves, which the consumer registers and sends
 * instead of the views; the server puts each version there in rounds
 * (plan/rounds.h), and each round is copied into the views on a stream of
 * the views' GPU before the server may put into its half again.
 */
typedef struct weft_ucx_stage weft_ucx_stage_t;

/*
 * Makes `device` current on the calling thread, its primary context
 * bound there; *saved, for leave. UCX's CUDA transports call the driver
 * API, which sees only a context bound to the thread: the runtime binds
 * one lazily, at its first call that needs it, and cudaSetDevice to the
 * device already current binds nothing. Seen with UCX 1.13.1 built with
 * CUDA: registering a GPU slot from the server's thread failed in
 * cuMemGetAddressRange with "invalid device context".
 */
weft_status_t weft_ucx_cuda_enter(int device, int *saved);
void          weft_ucx_cuda_leave(int device, int saved);

/* window: bytes, at least WEFT_UCX_RING_CHUNKS. */
weft_status_t weft_ucx_ring_create(ucp_context_h context, uint64_t window, uint64_t max_put,
                                   weft_ucx_ring_t **ring);
/* Only once weft_ucx_ring_idle(). NULL is a no-op. */
void weft_ucx_ring_destroy(weft_ucx_ring_t *ring);

/* Starts a version: every range of `ranges`, read from the device arena. */
void weft_ucx_ring_start(weft_ucx_ring_t *ring, const weft_range_list_t *ranges,
                         const uint8_t *arena);

/*
 * Moves the version on: frees chunks whose puts completed, puts chunks
 * whose copy completed, fills free chunks. WEFT_OK once every byte was
 * put and every put completed locally (flush next), WEFT_INPROGRESS,
 * WEFT_ERR_CONNECTION (a put failed), WEFT_ERR_CUDA (a copy failed).
 */
weft_status_t weft_ucx_ring_advance(weft_ucx_ring_t *ring, const weft_ucx_target_t *target);

/* 1 when no copy and no put of the ring is in flight. */
int weft_ucx_ring_idle(weft_ucx_ring_t *ring);

/* On the views' GPU (current). spans: the views' merged byte spans (the
 * only device memory a round may be copied into); a ring of 2 × half. */
weft_status_t weft_ucx_stage_create(const weft_wire_span_t *spans, uint32_t count, uint64_t half,
                                    weft_ucx_stage_t **stage);
void          weft_ucx_stage_destroy(weft_ucx_stage_t *stage);

/* The pinned ring: the one region to register and send. */
weft_wire_span_t weft_ucx_stage_area(const weft_ucx_stage_t *stage);
uint64_t         weft_ucx_stage_half(const weft_ucx_stage_t *stage);

/*
 * A ROUND message (plan/rounds.h): checks it (WEFT_ERR_CORRUPT: malformed,
 * or a piece outside its half of the ring or outside the views), copies
 * its pieces into the views and waits (WEFT_ERR_CUDA). *version, *round
 * and *rounds say which.
 */
weft_status_t weft_ucx_stage_round(weft_ucx_stage_t *stage, const weft_ctl_msg_t *msg,
                                   uint64_t *version, uint32_t *round, uint32_t *rounds);


#endif
