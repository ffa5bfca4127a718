/*
 * The server's bounce ring for GPU registries on the staged path
 * (ucx_cuda.h): device-to-host copies into pinned chunks, puts from them.
 *
 * A cursor (range, offset) walks the plan's ranges in order. Filling a
 * chunk takes the bytes from the cursor on, packed one after another in
 * the chunk; its copies merge where sources follow on directly (the
 * ranges are sorted by source). Putting a chunk walks the same bytes
 * again from the chunk's first cursor to its last, one put per range
 * piece of at most max_put bytes.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/log.h"
#include "ucx_cuda.h"
#include "ucx_gpu.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdlib.h>

typedef enum chunk_state {
    CHUNK_FREE,    /* may take the next bytes */
    CHUNK_COPYING, /* its device-to-host copy is queued; the event follows it */
    CHUNK_PUTTING  /* its puts are posted */
} chunk_state_t;

typedef struct ring_cursor {
    uint64_t range, offset;
} ring_cursor_t;

typedef struct ring_chunk {
    struct weft_ucx_ring *ring;
    chunk_state_t         state;
    cudaEvent_t           event;
    uint8_t              *host;       /* its part of the ring */
    ring_cursor_t         from, to;   /* the version's bytes it holds */
    uint64_t              in_flight;  /* its puts not completed */
} ring_chunk_t;

struct weft_ucx_ring {
    ucp_context_h            context;
    uint8_t                 *host;
    uint64_t                 chunk_bytes, max_put;
    ucp_mem_h                memh;
    cudaStream_t             stream;
    ring_chunk_t             chunks[WEFT_UCX_RING_CHUNKS];
    uint32_t                 fill;      /* the next chunk to fill, in ring order */
    uint32_t                 put;       /* the next chunk to put, in ring order */
    const weft_range_list_t *ranges;
    const uint8_t           *arena;     /* device memory of the leased slot */
    ring_cursor_t            next;      /* the first byte not in a chunk yet */
    int                      put_failed;
};

/* Moves c past ranges it has used up (and empty ones): a cursor is then
 * either inside a range or at the end, so that cursors compare. */
static void cursor_settle(const weft_range_list_t *list, ring_cursor_t *c)
{
    while (c->range < list->count && list->ranges[c->range].bytes == c->offset) {
        c->range++;
        c->offset = 0;
    }
}

weft_status_t weft_ucx_ring_create(ucp_context_h context, uint64_t window, uint64_t max_put,
                                   weft_ucx_ring_t **out)
{
    weft_ucx_ring_t *ring = calloc(1, sizeof(*ring));
    uint64_t         bytes;
    weft_status_t    status;

    if (ring == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    ring->context = context;
    ring->chunk_bytes = window / WEFT_UCX_RING_CHUNKS;
    ring->max_put = max_put;
    bytes = ring->chunk_bytes * WEFT_UCX_RING_CHUNKS;
    status = WEFT_CUDA_CHECK(cudaHostAlloc((void **)&ring->host, bytes, cudaHostAllocDefault));
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&ring->stream, cudaStreamNonBlocking));
    }
    for (uint32_t c = 0; c < WEFT_UCX_RING_CHUNKS && status == WEFT_OK; c++) {
        ring->chunks[c].ring = ring;
        ring->chunks[c].host = ring->host + c * ring->chunk_bytes;
        status = WEFT_CUDA_CHECK(
            cudaEventCreateWithFlags(&ring->chunks[c].event, cudaEventDisableTiming));
    }
    /* Registered once: every put of this consumer reads from it. */
    if (status == WEFT_OK) {
        status = weft_ucx_mem_map(context, ring->host, bytes, WEFT_MEMORY_HOST, &ring->memh,
                                  "registering a bounce ring");
    }
    if (status != WEFT_OK) {
        weft_log_error("server: no bounce ring of %" PRIu64 " bytes in pinned host memory", bytes);
        weft_ucx_ring_destroy(ring);
        return status;
    }
    *out = ring;
    return WEFT_OK;
}

void weft_ucx_ring_destroy(weft_ucx_ring_t *ring)
{
    if (ring == NULL) {
        return;
    }
    if (ring->memh != NULL) {
        (void)weft_ucx_status(ucp_mem_unmap(ring->context, ring->memh), "unregistering a bounce ring");
    }
    for (uint32_t c = 0; c < WEFT_UCX_RING_CHUNKS; c++) {
        if (ring->chunks[c].event != NULL) {
            (void)WEFT_CUDA_CHECK(cudaEventDestroy(ring->chunks[c].event));
        }
    }
    if (ring->stream != NULL) {
        (void)WEFT_CUDA_CHECK(cudaStreamDestroy(ring->stream));
    }
    if (ring->host != NULL) {
        (void)WEFT_CUDA_CHECK(cudaFreeHost(ring->host));
    }
    free(ring);
}

void weft_ucx_ring_start(weft_ucx_ring_t *ring, const weft_range_list_t *ranges,
                         const uint8_t *arena)
{
    ring->ranges = ranges;
    ring->arena = arena;
    ring->next = (ring_cursor_t){0, 0};
    cursor_settle(ranges, &ring->next);
    ring->fill = ring->put = 0;
    ring->put_failed = 0;
    for (uint32_t c = 0; c < WEFT_UCX_RING_CHUNKS; c++) {
        ring->chunks[c].state = CHUNK_FREE;
        ring->chunks[c].in_flight = 0;
    }
}

/* The next piece from c, at most `limit` bytes of one range, and moves c
 * past it; 0 at the end of the ranges. */
static uint64_t next_piece(const weft_range_list_t *list, ring_cursor_t *c, uint64_t limit,
                           const weft_copy_range_t **range, uint64_t *offset)
{
    uint64_t n;

    cursor_settle(list, c);
    if (c->range == list->count || limit == 0) {
        return 0;
    }
    *range = &list->ranges[c->range];
    *offset = c->offset;
    n = (*range)->bytes - c->offset;
    n = n < limit ? n : limit;
    c->offset += n;
    cursor_settle(list, c);
    return n;
}

static int cursor_before(ring_cursor_t a, ring_cursor_t b)
{
    return a.range < b.range || (a.range == b.range && a.offset < b.offset);
}

/* Queues the copies of the next bytes into a free chunk, then its event. */
static weft_status_t chunk_fill(weft_ucx_ring_t *ring, ring_chunk_t *chunk)
{
    const uint8_t            *run_src = NULL; /* copies merged where sources follow on */
    uint64_t                  run_at = 0, run_bytes = 0, used = 0, n, offset;
    const weft_copy_range_t  *r;
    weft_status_t             status = WEFT_OK;

    chunk->from = ring->next;
    while ((n = next_piece(ring->ranges, &ring->next, ring->chunk_bytes - used, &r, &offset)) > 0) {
        const uint8_t *src = ring->arena + r->src + offset;

        if (run_bytes > 0 && run_src + run_bytes == src) {
            run_bytes += n;
        } else {
            if (run_bytes > 0) {
                status = WEFT_CUDA_CHECK(cudaMemcpyAsync(chunk->host + run_at, run_src, run_bytes,
                                                         cudaMemcpyDeviceToHost, ring->stream));
                if (status != WEFT_OK) {
                    return status;
                }
            }
            run_src = src;
            run_at = used;
            run_bytes = n;
        }
        used += n;
    }
    chunk->to = ring->next;
    if (run_bytes > 0) {
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(chunk->host + run_at, run_src, run_bytes,
                                                 cudaMemcpyDeviceToHost, ring->stream));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaEventRecord(chunk->event, ring->stream));
    }
    if (status == WEFT_OK) {
        chunk->state = CHUNK_COPYING;
    }
    return status;
}

static void ring_put_done(void *request, ucs_status_t status, void *arg)
{
    ring_chunk_t *chunk = arg;

    chunk->in_flight--;
    if (status != UCS_OK) {
        chunk->ring->put_failed = 1;
    }
    ucp_request_free(request);
}

/* Posts the puts of a chunk whose copy completed. */
static weft_status_t chunk_put(weft_ucx_ring_t *ring, ring_chunk_t *chunk,
                               const weft_ucx_target_t *target)
{
    ring_cursor_t            c = chunk->from;
    uint64_t                 at = 0, n, offset;
    const weft_copy_range_t *r;

    chunk->state = CHUNK_PUTTING;
    while (cursor_before(c, chunk->to)) {
        /* The chunk ends inside its last range or at the end of one. */
        uint64_t limit = c.range == chunk->to.range ? chunk->to.offset - c.offset : ring->max_put;
        ucs_status_ptr_t req;

        n = next_piece(ring->ranges, &c, limit < ring->max_put ? limit : ring->max_put, &r, &offset);
        if (n == 0) {
            break;
        }
        req = weft_ucx_put(target, chunk->host + at, n, (uint64_t)(uintptr_t)r->dst + offset,
                           ring->memh, ring_put_done, chunk);
        if (UCS_PTR_IS_ERR(req)) {
            weft_log_error("server: a put of %" PRIu64 " bytes from the bounce ring failed: %s", n,
                           ucs_status_string(UCS_PTR_STATUS(req)));
            ring->put_failed = 1;
            return WEFT_ERR_CONNECTION;
        }
        if (req != NULL) {
            chunk->in_flight++;
        }
        at += n;
    }
    return WEFT_OK;
}

weft_status_t weft_ucx_ring_advance(weft_ucx_ring_t *ring, const weft_ucx_target_t *target)
{
    int all_free = 1;

    if (ring->put_failed) {
        return WEFT_ERR_CONNECTION;
    }
    for (uint32_t c = 0; c < WEFT_UCX_RING_CHUNKS; c++) {
        if (ring->chunks[c].state == CHUNK_PUTTING && ring->chunks[c].in_flight == 0) {
            ring->chunks[c].state = CHUNK_FREE;
        }
    }
    /* In ring order: the oldest copy first. */
    while (ring->chunks[ring->put].state == CHUNK_COPYING) {
        ring_chunk_t *chunk = &ring->chunks[ring->put];
        cudaError_t   done = cudaEventQuery(chunk->event);
        weft_status_t status;

        if (done == cudaErrorNotReady) {
            break;
        }
        status = WEFT_CUDA_CHECK(done);
        if (status == WEFT_OK) {
            status = chunk_put(ring, chunk, target);
        }
        if (status != WEFT_OK) {
            return status;
        }
        ring->put = (ring->put + 1) % WEFT_UCX_RING_CHUNKS;
    }
    while (ring->chunks[ring->fill].state == CHUNK_FREE &&
           ring->next.range < ring->ranges->count) {
        weft_status_t status = chunk_fill(ring, &ring->chunks[ring->fill]);

        if (status != WEFT_OK) {
            return status;
        }
        ring->fill = (ring->fill + 1) % WEFT_UCX_RING_CHUNKS;
    }
    for (uint32_t c = 0; c < WEFT_UCX_RING_CHUNKS; c++) {
        all_free &= ring->chunks[c].state == CHUNK_FREE;
    }
    if (ring->put_failed) {
        return WEFT_ERR_CONNECTION;
    }
    return all_free && ring->next.range == ring->ranges->count ? WEFT_OK : WEFT_INPROGRESS;
}

int weft_ucx_ring_idle(weft_ucx_ring_t *ring)
{
    for (uint32_t c = 0; c < WEFT_UCX_RING_CHUNKS; c++) {
        const ring_chunk_t *chunk = &ring->chunks[c];

        if (chunk->state == CHUNK_PUTTING && chunk->in_flight > 0) {
            return 0;
        }
        /* A copy still running writes into the ring: wait for it. */
        if (chunk->state == CHUNK_COPYING && cudaEventQuery(chunk->event) == cudaErrorNotReady) {
            return 0;
        }
    }
    return 1;
}
