/*
 * The nccl server's delta versions (server/delta_cache.h, docs/protocol.md
 * "Delta versions on the wire"): the cache made for the first consumer
 * with an inbox, its encode a time-bounded share of each turn of the
 * server's thread, and a consumer's entries laid out in its inbox. NCCL
 * sends from device memory: the cache's complete buffer is copied to the
 * GPU once per delta, and the pieces go from that copy, each entry into
 * its place in the inbox, in inbox order (the consumer finds the same
 * places from the DELTA alone: remote_delta.h, weft_remote_delta_places).
 * On the server's thread, the registry's GPU current.
 */
#include "config.h"

#include "transport/nccl/nccl_server.h"

#include "common/cuda_util.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdlib.h>

/* Encoding a turn of the server's thread, at most (a tensor may take
 * longer): the other consumers are served between. */
#define DELTA_ENCODE_NS UINT64_C(2000000)

static void free_device_copies(struct nccl_server *s)
{
    for (int i = 0; i < 2; i++) {
        if (s->delta_dev[i] != NULL) {
            (void)WEFT_CUDA_CHECK(cudaFree(s->delta_dev[i]));
            s->delta_dev[i] = NULL;
        }
        s->mirrored_from[i] = s->mirrored_to[i] = 0;
    }
    if (s->mirror_stream != NULL) {
        (void)WEFT_CUDA_CHECK(cudaStreamDestroy(s->mirror_stream));
        s->mirror_stream = NULL;
    }
}

/* A device copy of each of the cache's buffers; none left on failure. */
static weft_status_t make_device_copies(void *arg)
{
    struct nccl_server *s = arg;
    weft_status_t       status = WEFT_OK;

    for (int i = 0; i < 2 && status == WEFT_OK; i++) {
        status = WEFT_CUDA_CHECK(cudaMalloc((void **)&s->delta_dev[i], s->delta.capacity));
    }
    if (status == WEFT_OK) {
        /* Non-blocking: the copies do not wait for the consumers' streams. */
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&s->mirror_stream, cudaStreamNonBlocking));
    }
    if (status != WEFT_OK) {
        free_device_copies(s);
    }
    return status;
}

void weft_nccl_delta_refresh(struct nccl_server *s, uint64_t latest)
{
    unsigned reading = 0;
    int      takers = 0;

    if (s->delta_mode == WEFT_DELTA_OFF) {
        return;
    }
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        const peer_t *p = nccl_peer_at(s, i);

        takers += p->inbox_bytes != 0 && p->state != PEER_HANDSHAKE && p->state != PEER_CLOSING;
        /* Sends in flight read the device copy of their buffer: the
         * buffer is encoded into (and so copied again) only after them.
         * A dropped consumer's communicator is aborted: its kernels quit. */
        if (p->delta && p->state == PEER_SENDING) {
            reading |= 1u << p->delta_buf;
        }
    }
    weft_delta_cache_turn(&s->delta, &s->delta_made, &s->delta_mode, s->base.reg, s->slot_bytes, make_device_copies, s, takers,
                          reading, latest, DELTA_ENCODE_NS);
}

int weft_nccl_delta_busy(const struct nccl_server *s)
{
    return s->delta_made && weft_delta_cache_busy(&s->delta);
}

int weft_nccl_delta_coming(const peer_t *p, uint64_t latest)
{
    const struct nccl_server *s = p->server;

    return s->delta_made && p->inbox_bytes != 0 && p->holds != 0 &&
           weft_delta_cache_coming(&s->delta, p->holds, latest);
}

/* The device copy of buffer i, made once per delta it holds. */
static weft_status_t mirror(struct nccl_server *s, int i)
{
    const weft_delta_buf_t *b = &s->delta.buf[i];
    weft_status_t           status;

    if (s->mirrored_from[i] == b->from && s->mirrored_to[i] == b->to) {
        return WEFT_OK;
    }
    s->mirrored_from[i] = s->mirrored_to[i] = 0;
    status = WEFT_CUDA_CHECK(
        cudaMemcpyAsync(s->delta_dev[i], b->data, b->used, cudaMemcpyHostToDevice, s->mirror_stream));
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamSynchronize(s->mirror_stream));
    }
    if (status == WEFT_OK) {
        s->mirrored_from[i] = b->from;
        s->mirrored_to[i] = b->to;
    }
    return status;
}

int weft_nccl_peer_delta(peer_t *p)
{
    struct nccl_server *s = p->server;
    const weft_plan_h   plan = p->base.plan;

    if (!s->delta_made || p->inbox_bytes == 0 || p->holds == 0 || plan->view_count == 0) {
        return 0;
    }
    if (!weft_delta_cache_entries(&s->delta, p->holds, p->base.version, plan->views, plan->view_count,
                                  plan->bytes, p->inbox_bytes, &p->delta_buf, p->delta_map, &p->delta_bytes)) {
        return 0;
    }
    if (mirror(s, p->delta_buf) != WEFT_OK) {
        weft_log_warn("server: consumer \"%s\": the delta of version %" PRIu64 " could not be copied to the GPU: "
                      "it goes whole",
                      p->base.name, p->base.version);
        return 0;
    }
    /* Inbox offsets as the destinations: the consumer receives each
     * piece at its own inbox's base plus that offset. */
    (void)weft_delta_inbox_layout(p->delta_map, plan->view_count, 0, &p->delta_puts);
    for (uint64_t k = 0; k < p->delta_puts.count; k++) {
        p->delta_sizes[k] = p->delta_puts.ranges[k].bytes;
        p->delta_offsets[k] = p->delta_puts.ranges[k].src;
    }
    p->xfer.sizes = p->delta_sizes;
    p->xfer.offsets = p->delta_offsets;
    p->xfer.count = p->delta_puts.count;
    p->xfer.base = (uint64_t)(uintptr_t)s->delta_dev[p->delta_buf];
    return 1;
}

weft_status_t weft_nccl_delta_peer_init(peer_t *p, uint64_t inbox_bytes)
{
    const uint32_t views = p->base.plan->view_count;

    p->inbox_bytes = inbox_bytes;
    p->delta_map = calloc(views + 1, sizeof(*p->delta_map));
    p->delta_puts.ranges = calloc(views + 1, sizeof(*p->delta_puts.ranges));
    p->delta_puts.capacity = views;
    p->delta_sizes = calloc(views + 1, sizeof(*p->delta_sizes));
    p->delta_offsets = calloc(views + 1, sizeof(*p->delta_offsets));
    if (p->delta_map == NULL || p->delta_puts.ranges == NULL || p->delta_sizes == NULL || p->delta_offsets == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    return WEFT_OK;
}

void weft_nccl_delta_peer_fini(peer_t *p)
{
    free(p->delta_map);
    free(p->delta_puts.ranges);
    free(p->delta_sizes);
    free(p->delta_offsets);
}

void weft_nccl_delta_free(struct nccl_server *s)
{
    if (!s->delta_made) {
        return;
    }
    free_device_copies(s);
    weft_delta_cache_fini(&s->delta);
    s->delta_made = 0;
}
