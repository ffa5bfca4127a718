/* The ucx server's versions: a consumer's lease of the version it asked
 * for, the puts (on the server's worker, on the lanes, or through the
 * bounce ring; a delta's from the delta cache into the consumer's inbox),
 * the rounds of a staged consumer, the flush, the notice and the ack
 * (ucx_server.h). On the server thread. */
#include "config.h"

#include "transport/ucx/ucx_server.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ versions */

static void put_done(void *request, ucs_status_t status, void *arg)
{
    peer_t *p = arg;

    p->in_flight--;
    if (status != UCS_OK) {
        p->put_failed = 1;
    }
    ucp_request_free(request);
}

/* What is put now: the plan's ranges, for a consumer with a staging
 * ring those of the round being sent (into the ring), for a delta its
 * entries (into the inbox). */
static const weft_range_list_t *peer_ranges(const peer_t *p)
{
    if (p->delta) {
        return &p->delta_puts;
    }
    return p->rounds.count != 0 ? &p->rounds.round[p->round].puts : &p->base.plan->ranges;
}

/* The version goes in rounds through the consumer's staging ring (a
 * delta goes into its inbox, whole). */
static int in_rounds(const peer_t *p)
{
    return p->rounds.count != 0 && !p->delta;
}

/* The version's bytes go through the server's bounce ring (a GPU
 * registry's slots UCX cannot read; a delta is in host memory). */
static int through_ring(const peer_t *p)
{
    return p->ring != NULL && !p->delta;
}

/* Starts putting the ranges of peer_ranges() from the first. */
static void peer_start_ranges(peer_t *p)
{
    p->range = p->range_offset = 0;
    if (through_ring(p)) {
        weft_ucx_ring_start(p->ring, peer_ranges(p), p->arena);
    }
}

/* Posts puts until the window is full or every range is posted. */
static void peer_post(peer_t *p)
{
    struct ucx_server       *s = p->server;
    const weft_range_list_t *list = peer_ranges(p);
    const weft_ucx_target_t  target = {.ep = p->ep, .regions = p->regions, .rkeys = p->rkeys,
                                       .region_count = p->region_count, .by_messages = p->by_messages};
    uint64_t                 window = s->base.window;
    uint64_t                 max_in_flight = window / CHUNK_BYTES ? window / CHUNK_BYTES : 1;
    /* Ranges count from the leased slot's arena, a delta's from its buffer. */
    const uint8_t           *src = p->delta ? s->delta.buf[p->delta_buf].data : p->arena;
    ucp_mem_h                memh = p->delta ? s->delta_memh[p->delta_buf] : s->slot_memh[p->base.lease.slot];

    while (p->range < list->count && p->in_flight < max_in_flight && !p->put_failed) {
        const weft_copy_range_t *r = &list->ranges[p->range];
        uint64_t                 left = r->bytes - p->range_offset;
        uint64_t                 n = left < CHUNK_BYTES ? left : CHUNK_BYTES;
        uint64_t                 dst = (uint64_t)(uintptr_t)r->dst + p->range_offset;
        ucs_status_ptr_t         req;

        /* Inside a region: on_views checked every range against them. */
        req = weft_ucx_put(&target, src + r->src + p->range_offset, n, dst, memh, put_done, p);
        if (UCS_PTR_IS_ERR(req)) {
            p->put_failed = 1;
            break;
        }
        if (req != NULL) {
            p->in_flight++;
        }
        p->range_offset += n;
        if (p->range_offset == r->bytes) {
            p->range++;
            p->range_offset = 0;
        }
    }
}

/*
 * Bytes that go as active messages: the flush says only that they left,
 * so the consumer is told how many it was sent in all (SENT), and reads
 * nothing until as many landed (ucx_deliver.h). Before each ROUND and
 * notice, for the ranges just flushed. 0 when the consumer was dropped.
 */
static int send_sent(peer_t *p, const weft_range_list_t *flushed)
{
    weft_ctl_buf_t buf = {0};
    weft_status_t  status;

    if (!p->by_messages) {
        return 1;
    }
    for (uint64_t i = 0; i < flushed->count; i++) {
        p->sent_bytes += flushed->ranges[i].bytes;
    }
    weft_ctl_put_u64(&buf, p->sent_bytes);
    status = weft_server_base_send(&p->base, WEFT_CTL_SENT, &buf);
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "SENT was not sent");
        return 0;
    }
    return 1;
}

/*
 * After a round's flush: ROUND to the consumer, then the next round
 * (state SENDING) or, after the last, stay FLUSHING for the notice.
 * 0 when the consumer was dropped.
 */
static int send_round(peer_t *p)
{
    weft_ctl_buf_t buf = {0};
    weft_status_t   status;

    if (!send_sent(p, peer_ranges(p))) {
        return 0;
    }
    weft_ucx_put_round(&buf, p->base.version, &p->rounds, p->round);
    status = weft_server_base_send(&p->base, WEFT_CTL_ROUND, &buf);
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "a round's notice was not sent");
        return 0;
    }
    if (++p->round < p->rounds.count) {
        peer_start_ranges(p);
        p->state = PEER_SENDING;
    }
    return 1;
}

/* The consumer copied a round out of its ring: that half is free. */
void weft_ucx_on_round_done(peer_t *p, const weft_ctl_msg_t *msg)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    uint64_t           v = weft_ctl_get_u64(&cur);
    uint32_t           k = weft_ctl_get_u32(&cur);

    if (cur.failed || v != p->base.version || k != p->rounds_done || k >= p->round) {
        weft_ucx_peer_drop(p, WEFT_ERR_CORRUPT, "a round done out of turn");
        return;
    }
    p->rounds_done++;
}

/* A delta's DELTA, before its VERSION. 0 when the consumer was dropped. */
static int send_delta_map(peer_t *p)
{
    if (weft_server_base_send_delta(&p->base, p->holds, p->delta_map) != WEFT_OK) {
        weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "the delta's map was not sent");
        return 0;
    }
    return 1;
}

/* Advances one consumer's transfer of the version in flight. */
void weft_ucx_peer_advance(peer_t *p)
{
    struct ucx_server *s = p->server;

    if (p->state == PEER_PROBING) {
        weft_ucx_peer_probe(p);
        return;
    }
    /* Only puts and flushes need the endpoint. Once the notice is out, a
     * consumer that acks and leaves fails its endpoint too: its ack, its
     * goodbye or the end of the bootstrap connection decides. */
    if (p->ep_failed && (p->state == PEER_SENDING || p->state == PEER_FLUSHING)) {
        weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "its endpoint failed");
        return;
    }
    if ((p->state == PEER_SENDING || p->state == PEER_FLUSHING || p->state == PEER_ACKING ||
         p->state == PEER_HANDSHAKE) &&
        weft_time_ns() > p->base.deadline) {
        weft_ucx_peer_drop(p, WEFT_ERR_TIMEOUT, "no progress within the timeout");
        return;
    }
    /* A round goes into the half of the ring that round - 2 used: only
     * once the consumer copied that one out. */
    if (p->state == PEER_SENDING && in_rounds(p) && p->round >= 2 &&
        p->rounds_done + 1 < p->round) {
        return;
    }
    if (p->state == PEER_SENDING) {
        int posted = 0;

        if (p->lanes != NULL && !p->delta) {
            weft_status_t status = weft_ucx_lane_set_poll(p->lanes);

            if (status == WEFT_INPROGRESS) {
                return;
            }
            if (status != WEFT_OK) {
                weft_ucx_peer_drop(p, status, "a put or flush on a lane failed");
                return;
            }
            /* Each lane flushed its endpoint: every byte is there. */
            p->lanes_ns = weft_time_ns() - p->sending_ns;
            p->state = PEER_FLUSHING;
        } else if (through_ring(p)) {
            const weft_ucx_target_t target = {.ep = p->ep, .regions = p->regions,
                                              .rkeys = p->rkeys, .region_count = p->region_count,
                                              .by_messages = p->by_messages};
            weft_status_t           status = weft_ucx_ring_advance(p->ring, &target);

            if (status != WEFT_OK && status != WEFT_INPROGRESS) {
                weft_ucx_peer_drop(p, status, status == WEFT_ERR_CONNECTION
                                         ? "a put failed"
                                         : "a copy into the bounce ring failed");
                return;
            }
            posted = status == WEFT_OK;
        } else {
            peer_post(p);
            if (p->put_failed) {
                weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "a put failed");
                return;
            }
            posted = p->range == peer_ranges(p)->count && p->in_flight == 0;
        }
        if (posted) {
            ucp_request_param_t param = {0};

            /* Every put done locally; the flush makes them done remotely. */
            p->flush = ucp_ep_flush_nbx(p->ep, &param);
            if (UCS_PTR_IS_ERR(p->flush)) {
                p->flush = NULL;
                weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "the flush failed");
                return;
            }
            p->state = PEER_FLUSHING;
            weft_log_debug("server: consumer \"%s\": version %" PRIu64 " posted, flushing",
                           p->base.name, p->base.version);
        }
    }
    if (p->state == PEER_FLUSHING) {
        ucs_status_t status = p->flush == NULL ? UCS_OK : ucp_request_check_status(p->flush);

        if (status == UCS_INPROGRESS) {
            return;
        }
        if (p->flush != NULL) {
            ucp_request_free(p->flush);
            p->flush = NULL;
        }
        if (status != UCS_OK) {
            weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "the flush failed");
            return;
        }
        /* A round is in the consumer's ring: tell it, go on with the next. */
        if (in_rounds(p) && !send_round(p)) {
            return;
        }
        if (p->state != PEER_FLUSHING) {
            return; /* the next round is being sent */
        }
        /* Every byte of v is in the consumer's memory (or, as messages,
         * on its way: SENT says how many): now tell it (a delta's map
         * first: the consumer applies it at the notice). A staged
         * version's SENT went with its last ROUND. */
        if (!in_rounds(p) && !send_sent(p, peer_ranges(p))) {
            return;
        }
        if (p->delta && !send_delta_map(p)) {
            return;
        }
        if (weft_server_base_send_version(&p->base,
                               weft_deadline_ns(weft_time_ns(), s->base.timeout_us)) != WEFT_OK) {
            weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "the notice was not sent");
            return;
        }
        p->state = PEER_ACKING;
        p->notified_ns = weft_time_ns();
        weft_log_debug("server: consumer \"%s\": version %" PRIu64 " flushed, notified",
                       p->base.name, p->base.version);
    }
}

/* Direct path: the slot's arena registered with UCX as CUDA memory, once
 * per arena (a reload moves it; no lease of the old one is left then). */
static weft_status_t register_gpu_slot(struct ucx_server *s, uint32_t slot, const uint8_t *arena)
{
    weft_status_t status;

    if (s->slot_memh[slot] != NULL && s->slot_base[slot] == arena) {
        return WEFT_OK;
    }
    if (s->slot_memh[slot] != NULL) {
        (void)weft_ucx_status(ucp_mem_unmap(s->ucx.context, s->slot_memh[slot]),
                              "unregistering a moved GPU slot");
        s->slot_memh[slot] = NULL;
    }
    status = weft_ucx_mem_map(s->ucx.context, (void *)(uintptr_t)arena, s->slot_bytes,
                              WEFT_MEMORY_CUDA, &s->slot_memh[slot], "registering a GPU slot");
    if (status == WEFT_OK) {
        s->slot_base[slot] = (uint8_t *)(uintptr_t)arena;
        weft_log_debug("server: GPU slot %u registered with UCX at %p (%" PRIu64 " bytes)", slot,
                       (const void *)arena, s->slot_bytes);
    }
    return status;
}

/* Where the puts of the leased version read from, in this process. */
static weft_status_t lease_arena(peer_t *p)
{
    struct ucx_server *s = p->server;
    weft_status_t      status;

    if (s->memory != WEFT_MEMORY_CUDA) {
        p->arena = s->slot_base[p->base.lease.slot];
        return WEFT_OK;
    }
    /* The producer's own allocation, or the arena mapped through CUDA IPC
     * into this thread's device. */
    status = weft_plan_slot_base(p->base.plan, &p->base.lease, &p->arena);
    if (status == WEFT_OK && s->path == WEFT_UCX_GPU_DIRECT) {
        status = register_gpu_slot(s, p->base.lease.slot, p->arena);
    }
    return status;
}

/* The puts of the leased version begin: whole (the plan's ranges, on the
 * lanes where there are), or as a delta into the inbox; SENDING tells
 * the consumer which. */
static void start_puts(peer_t *p, int delta)
{
    struct ucx_server *s = p->server;
    weft_ctl_buf_t     buf = {0};
    weft_status_t      status;

    p->delta = delta;
    if (!delta) {
        p->holds = 0; /* its views change from here */
    }
    p->put_failed = 0;
    p->round = p->rounds_done = 0;
    peer_start_ranges(p);
    if (p->lanes != NULL && !delta) {
        weft_ucx_lane_set_send(p->lanes, &p->base.plan->ranges, p->arena,
                               s->slot_memh[p->base.lease.slot]);
    }
    /* After the lanes got it: the consumer may stay awake for the notice. */
    p->sending_ns = weft_time_ns();
    weft_ctl_put_u64(&buf, p->base.version);
    weft_ctl_put_u32(&buf, (uint32_t)delta);
    status = weft_server_base_send(&p->base, WEFT_CTL_SENDING, &buf);
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "SENDING was not sent");
        return;
    }
    weft_log_debug("server: consumer \"%s\": sending version %" PRIu64 " from slot %u%s", p->base.name,
                   p->base.version, p->base.lease.slot, delta ? " as a delta" : "");
}

/* Starts sending the latest version to a ready consumer that lacks it. */
void weft_ucx_peer_start(weft_server_peer_t *base, uint64_t latest)
{
    peer_t       *p = (peer_t *)base;
    weft_status_t status;

    if (p->state != PEER_READY || p->base.acked >= latest || !weft_server_base_wants(&p->base, latest)) {
        return;
    }
    if (p->ep_failed) {
        weft_ucx_peer_drop(p, WEFT_ERR_CONNECTION, "its endpoint failed");
        return;
    }
    /* Its delta to the latest is being made: it waits for it. */
    if (weft_ucx_delta_coming(p, latest)) {
        return;
    }
    if (!weft_server_base_lease_next(&p->base, latest)) {
        return;
    }
    p->state = PEER_SENDING; /* from here a failure is recorded for this version */
    p->base.wanting = 0;     /* this version answers the request */
    status = lease_arena(p);
    if (status != WEFT_OK) {
        weft_ucx_peer_drop(p, status, "the version cannot be read here");
        return;
    }
    start_puts(p, weft_ucx_peer_delta(p));
}

void weft_ucx_on_redo(peer_t *p, const weft_ctl_msg_t *msg)
{
    uint32_t flags;

    if (p->state != PEER_ACKING || !p->delta || weft_server_base_redo(&p->base, msg, &flags) != WEFT_OK) {
        weft_ucx_peer_drop(p, WEFT_ERR_CORRUPT, "a REDO out of turn");
        return;
    }
    if (weft_delta_cache_redone(&p->server->delta, p->base.name, flags, &p->redos)) {
        p->inbox_bytes = 0;
    }
    p->state = PEER_SENDING;
    p->base.deadline = weft_deadline_ns(weft_time_ns(), p->server->base.timeout_us);
    start_puts(p, 0);
}
