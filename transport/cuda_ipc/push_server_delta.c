/*
 * The cuda_ipc push server's delta versions (server/delta_cache.h,
 * docs/protocol.md "Deltas over cuda_ipc"): the cache made for the first
 * consumer that takes deltas, its encode a time-bounded share of each
 * turn of the server's thread, and a consumer's entries laid out in its
 * inbox (device memory of its GPU, exported with its views and mapped
 * here) and copied there from the cache's pinned host buffer before the
 * DELTA and VERSION go out. The copies are synchronous, as the push
 * mode's version copies are: nothing reads the buffer once a turn ends.
 * On the server's thread, the registry's GPU current.
 */
#include "config.h"

#include "transport/cuda_ipc/push_server.h"

#include "common/cuda_util.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdlib.h>

/* Encoding a turn of the server's thread, at most (a tensor may take
 * longer): the other consumers are served between. */
#define DELTA_ENCODE_NS UINT64_C(2000000)

int weft_push_delta_pays(const struct push_server *s, int device)
{
    switch (s->delta_mode) {
    case WEFT_DELTA_FORCE:
        return 1;
    case WEFT_DELTA_AUTO:
        return device != s->device;
    default:
        return 0;
    }
}

/* The stream the deltas are copied on; the cache's buffers are the
 * delta cache's own (pinned for the GPU encode). */
static weft_status_t make_stream(void *arg)
{
    struct push_server *s = arg;

    /* Non-blocking: the copies do not wait for the producer's work. */
    return WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&s->delta_stream, cudaStreamNonBlocking));
}

void weft_push_delta_refresh(struct push_server *s, uint64_t latest)
{
    int takers = 0;

    if (s->delta_mode == WEFT_DELTA_OFF) {
        return;
    }
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        const peer_t *p = (const peer_t *)s->base.peers[i];

        takers += p->inbox != NULL && p->state != PEER_HANDSHAKE && p->state != PEER_CLOSING;
    }
    /* No buffer is read between turns: every copy from it was waited for. */
    weft_delta_cache_turn(&s->delta, &s->delta_made, &s->delta_mode, s->base.reg, s->slot_bytes, make_stream, s,
                          takers, 0, latest, DELTA_ENCODE_NS);
}

int weft_push_delta_busy(const struct push_server *s)
{
    return s->delta_made && weft_delta_cache_busy(&s->delta);
}

int weft_push_delta_coming(const peer_t *p, uint64_t latest)
{
    const struct push_server *s = p->server;

    return s->delta_made && p->inbox != NULL && p->holds != 0 && p->base.want_holds == p->holds &&
           weft_delta_cache_coming(&s->delta, p->holds, latest);
}

/*
 * Copies the laid-out entries from buffer `which` into the inbox and
 * waits. Entries follow each other in the cache and in the inbox alike,
 * each on WEFT_DELTA_ENTRY_ALIGN: where the gap before the next one is
 * the same on both sides, the two go as one copy (the gap's bytes are
 * padding on both), so views in the registry's order take one copy.
 */
static weft_status_t copy_entries(peer_t *p, int which)
{
    struct push_server      *s = p->server;
    const uint8_t           *buf = s->delta.buf[which].data;
    const weft_range_list_t *puts = &p->delta_puts;
    weft_status_t            status = WEFT_OK;
    uint64_t                 k = 0;

    while (k < puts->count && status == WEFT_OK) {
        const weft_copy_range_t *first = &puts->ranges[k];
        uint64_t                 bytes = first->bytes;

        for (k++; k < puts->count; k++) {
            const weft_copy_range_t *next = &puts->ranges[k];

            if (next->src < first->src + bytes || next->dst < first->dst + bytes ||
                next->src - first->src != (uint64_t)(next->dst - first->dst) ||
                next->src - (first->src + bytes) >= WEFT_DELTA_ENTRY_ALIGN) {
                break;
            }
            bytes = next->src + next->bytes - first->src;
        }
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(first->dst, buf + first->src, bytes, cudaMemcpyDefault,
                                                 s->delta_stream));
    }
    /* Waited for even after a failed enqueue: nothing may be in flight
     * into the inbox once we return. */
    if (WEFT_CUDA_CHECK(cudaStreamSynchronize(s->delta_stream)) != WEFT_OK) {
        status = WEFT_ERR_CUDA;
    }
    return status;
}

int weft_push_peer_delta(peer_t *p)
{
    struct push_server *s = p->server;
    const weft_plan_h   plan = p->base.plan;
    int                 which = 0;

    if (!s->delta_made || p->inbox == NULL || p->holds == 0 || p->base.want_holds != p->holds ||
        plan->view_count == 0) {
        return 0;
    }
    if (!weft_delta_cache_entries(&s->delta, p->holds, p->base.version, plan->views, plan->view_count,
                                  plan->bytes, p->inbox_bytes, &which, p->delta_map, &p->delta_bytes)) {
        return 0;
    }
    (void)weft_delta_inbox_layout(p->delta_map, plan->view_count, (uint64_t)(uintptr_t)p->inbox, &p->delta_puts);
    if (copy_entries(p, which) != WEFT_OK) {
        weft_log_warn("server: consumer \"%s\": the delta of version %" PRIu64 " could not be copied into its "
                      "inbox: it goes whole",
                      p->base.name, p->base.version);
        return 0;
    }
    return 1;
}

weft_status_t weft_push_delta_peer_init(peer_t *p, uint8_t *inbox, uint64_t inbox_bytes)
{
    const uint32_t views = p->base.plan->view_count;

    p->delta_map = calloc(views + 1, sizeof(*p->delta_map));
    p->delta_puts.ranges = calloc(views + 1, sizeof(*p->delta_puts.ranges));
    p->delta_puts.capacity = views;
    if (p->delta_map == NULL || p->delta_puts.ranges == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    p->inbox = inbox;
    p->inbox_bytes = inbox_bytes;
    return WEFT_OK;
}

void weft_push_delta_peer_fini(peer_t *p)
{
    free(p->delta_map);
    free(p->delta_puts.ranges);
    p->delta_map = NULL;
    p->delta_puts.ranges = NULL;
    p->inbox = NULL;
}

void weft_push_delta_free(struct push_server *s)
{
    if (!s->delta_made) {
        return;
    }
    if (s->delta_stream != NULL) {
        (void)WEFT_CUDA_CHECK(cudaStreamDestroy(s->delta_stream));
        s->delta_stream = NULL;
    }
    weft_delta_cache_fini(&s->delta);
    s->delta_made = 0;
}
