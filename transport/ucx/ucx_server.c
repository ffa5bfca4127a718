/*
 * The server of the ucx transport: one thread that accepts remote
 * consumers on the bootstrap port, checks their token, builds each one's
 * plan (registry tensors → the consumer's remote addresses, with the plan
 * core's checks and merged ranges), and sends every newly published
 * version to every ready consumer:
 *
 *   WANT(a) from the consumer's weft_remote_receive → (v > a published)
 *   lease v → RMA puts of every range (in chunks, at most `window` bytes
 *   in flight per consumer) → flush the endpoint → VERSION(v) on the
 *   bootstrap connection → ACK(v) → weft_registry_consumer_received(v)
 *
 * Only a request starts a version, so a consumer's views never change
 * between its receive calls. A consumer staging device views through a
 * bounded ring gets each version in rounds (ucx_rounds.h): puts of a
 * round into one half of its ring, flush, ROUND, and the next round; a
 * half is put into again only after the consumer's ROUND_DONE for it.
 *
 * Each consumer holds its own lease on the version it is receiving, so a
 * slow or stuck consumer never holds the others back: each gets the latest
 * version as soon as it acknowledged the one before. A consumer is dropped (its failure recorded, then its registry
 * record removed) when its endpoint fails, its connection closes, or a
 * step takes longer than the timeout; the others carry on.
 *
 * Where the puts read from: a host registry's slots, registered once at
 * create. Their puts to a consumer are spread over the put lanes
 * (ucx_lanes.h: threads with workers of their own) where there are more
 * than one; the server thread then waits for the lanes instead of
 * putting, and goes on with the notice once each flushed.
 * A GPU registry (the thread makes its GPU current) takes the
 * path ucx_gpu.h picks: direct, each slot's arena registered as CUDA
 * memory when first leased (again after a reload moved it); or staged,
 * each consumer's bounce ring (ucx_cuda.h) of window bytes, device-to-
 * host copies overlapping the puts of earlier chunks.
 *
 * Everything below runs on the server thread except create, port, stats
 * and destroy.
 */
#include "config.h"

#include "common/log.h"
#include "common/time_util.h"
#include "transport/plan/plan.h"
#include "transport/core/desc.h"
#include "transport/server/server.h"
#include "ucx_common.h"
#include "ucx_cuda.h"
#include "ucx_gpu.h"
#include "ucx_lanes.h"
#include "transport/ctl/ucx_views.h"
#include "transport/plan/rounds.h"

#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_WINDOW_BYTES (UINT64_C(64) << 20)
#define CHUNK_BYTES          (UINT64_C(4) << 20) /* one put at most */
/* One put at most on a lane: smaller, so that a version of a few large
 * tensors still spreads over every lane (a 16 MiB tensor over 16 lanes). */
#define LANE_PIECE_BYTES     (UINT64_C(1) << 20)
/* How long the server looks for an ack without sleeping after a notice: a
 * consumer that is waiting answers within microseconds, and a sleep and
 * wake-up cost more than that. */
#define ACK_SPIN_NS          UINT64_C(200000)
/* How long the server looks for its lanes' end without sleeping after it
 * gave them a version, when their version before ended within it: over
 * shared memory a 16 MiB version takes about 0.5 ms, and the wake-up on
 * their eventfd costs more than a look. A transfer that takes longer
 * (TCP) needs the CPUs for the lanes: looking for 2 ms every time, this
 * thread alone slowed 16 MiB versions between two namespaces of one host
 * from 2.5-2.7 to 3.3-3.9 ms. */
#define LANES_SPIN_NS        UINT64_C(1000000)

typedef enum peer_state {
    PEER_HELLO,    /* waiting for HELLO, then its PROOF */
    PEER_VIEWS,    /* waiting for VIEWS */
    PEER_READY,    /* idle, gets the next version */
    PEER_SENDING,  /* puts in flight */
    PEER_FLUSHING, /* flush in flight */
    PEER_ACKING,   /* VERSION sent, waiting for ACK */
    PEER_CLOSING   /* dropped; waiting for its requests to end */
} peer_state_t;

typedef struct peer {
    weft_serve_peer_t   base; /* connection, plan, registry record, lease */
    struct ucx_server  *server;
    peer_state_t        state;
    ucp_ep_h            ep;
    int                 ep_failed;
    int                 ep_err_mode; /* the endpoint reports peer failures */
    weft_wire_span_t   *regions;     /* its registered memory */
    ucp_rkey_h         *rkeys;       /* one per region */
    uint32_t            region_count;
    uint64_t            range, range_offset; /* next put */
    uint64_t            in_flight;           /* puts not completed yet */
    const uint8_t      *arena;               /* of the leased slot, here */
    weft_ucx_ring_t    *ring;                /* staged GPU registry: its bounce ring */
    weft_ucx_lane_set_t *lanes;              /* its puts go on the lanes */
    int                 put_failed;
    ucs_status_ptr_t    flush;
    ucs_status_ptr_t    close;
    uint64_t            sending_ns;  /* when its version's puts began */
    uint64_t            lanes_ns;    /* how long its last version's lanes took */
    uint64_t            notified_ns; /* when the notice of the version went */
    /* A dropped consumer's connection, held open until no put of it can
     * still land: its close then tells the consumer (weft_remote_close
     * waits for it) that its memory is its own again. -1: none. */
    int                 linger_fd;
    /* A consumer staging through a bounded ring (ucx_rounds.h): the
     * version's rounds, the one being sent, and how many it copied. */
    weft_ucx_rounds_t   rounds;
    uint32_t            round, rounds_done;
} peer_t;

struct ucx_server {
    weft_serve_t    base; /* socket, token, timeout, window, thread, stats */
    weft_ucx_t      ucx;
    ucp_address_t  *address; /* of the worker, sent to every consumer */
    size_t          address_length;
    ucp_mem_h       slot_memh[16]; /* host registry, or direct: each slot registered */
    uint8_t        *slot_base[16];
    uint32_t        slot_count;
    uint64_t        slot_bytes;
    weft_memory_kind_t memory;     /* of the registry's arenas */
    int             device;        /* their GPU; -1 for host */
    weft_ucx_gpu_path_t path;      /* GPU registry: direct or staged */
    int             broken;        /* the thread could not use the GPU: refuse everyone */
    weft_ucx_lanes_t *lanes;       /* host registry with more than one lane */

    int             stopping; /* the thread is shutting down: close at once */
};

static const weft_plan_ops_t remote_plan_ops = {
    .name       = "ucx",
    .src_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST) | WEFT_MEMORY_BIT(WEFT_MEMORY_CUDA),
    /* As the server sees them: the consumer stages device views itself. */
    .dst_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST),
    .post       = weft_serve_remote_post,
};

/* The peer table (weft_serve_t) holds our peers. */
static peer_t *peer_at(const struct ucx_server *s, uint32_t i)
{
    return (peer_t *)s->base.peers[i];
}

/* ------------------------------------------------------------ dropping */

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    peer_t *p = arg;

    (void)ep;
    p->ep_failed = 1;
    weft_log_info("server: consumer \"%s\" (%s): endpoint failed: %s", p->base.name, p->base.addr,
                  ucs_status_string(status));
}

/* Drops a consumer: records its failure for the version in flight, removes
 * it from the registry, closes its endpoint and socket. */
static void peer_drop(peer_t *p, weft_status_t why, const char *what)
{
    struct ucx_server *s = p->server;

    if (p->state == PEER_CLOSING) {
        return;
    }
    /* Only a consumer that got keys can be written to (after VIEWS). */
    if (p->base.fd >= 0 && (p->ep != NULL || p->lanes != NULL)) {
        p->linger_fd = fcntl(p->base.fd, F_DUPFD_CLOEXEC, 0);
    }
    weft_serve_drop(&p->base, why, what,
                    p->state == PEER_SENDING || p->state == PEER_FLUSHING ||
                        p->state == PEER_ACKING,
                    !p->ep_failed);
    if (p->ep != NULL) {
        /* A failed endpoint is closed at once. A live one (a timeout, a
         * refusal) closes gracefully, letting its puts end: force-closing
         * a TCP endpoint with puts in flight has crashed UCX 1.13 here. */
        int                 force = p->ep_err_mode && (p->ep_failed || s->stopping);
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                     .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
        p->close = ucp_ep_close_nbx(p->ep, &param);
        p->ep = NULL;
    }
    if (p->lanes != NULL) {
        weft_ucx_lane_set_close(p->lanes, s->stopping);
    }
    p->state = PEER_CLOSING;
}

static void peer_free(peer_t *p)
{
    if (p->linger_fd >= 0) {
        close(p->linger_fd);
    }
    /* Only at shutdown is a request left: a graceful close towards a host
     * that went away. Released, UCX completes it as the worker goes (a
     * request not released trips an assertion in UCX 1.13 then). */
    if (p->close != NULL && !UCS_PTR_IS_ERR(p->close)) {
        ucp_request_free(p->close);
    }
    if (p->flush != NULL && !UCS_PTR_IS_ERR(p->flush)) {
        ucp_request_free(p->flush);
    }
    for (uint32_t i = 0; p->rkeys != NULL && i < p->region_count; i++) {
        if (p->rkeys[i] != NULL) {
            ucp_rkey_destroy(p->rkeys[i]);
        }
    }
    free(p->rkeys);
    weft_ucx_lane_set_free(p->lanes); /* it points at the regions */
    free(p->regions);
    weft_ucx_rounds_free(&p->rounds);
    weft_ucx_ring_destroy(p->ring);
    weft_serve_peer_fini(&p->base);
    free(p);
}

/* A dropped consumer is freed once UCX gave back every request of it. */
static int peer_reap(weft_serve_peer_t *base)
{
    peer_t *p = (peer_t *)base;

    if (p->state != PEER_CLOSING || p->in_flight > 0 ||
        (p->ring != NULL && !weft_ucx_ring_idle(p->ring)) ||
        (p->lanes != NULL && !weft_ucx_lane_set_closed(p->lanes))) {
        return 0;
    }
    if (p->flush != NULL) {
        if (!UCS_PTR_IS_ERR(p->flush) && ucp_request_check_status(p->flush) == UCS_INPROGRESS) {
            return 0;
        }
        if (!UCS_PTR_IS_ERR(p->flush)) {
            ucp_request_free(p->flush);
        }
        p->flush = NULL;
    }
    if (p->close != NULL && !UCS_PTR_IS_ERR(p->close)) {
        if (ucp_request_check_status(p->close) == UCS_INPROGRESS) {
            return 0;
        }
        ucp_request_free(p->close);
    }
    p->close = NULL;
    /* No put of it reads the slot any more. */
    weft_serve_release(&p->base);
    peer_free(p);
    return 1;
}

/* ----------------------------------------------------------- handshake */

static void refuse(peer_t *p, weft_status_t status, const char *reason)
{
    weft_serve_refuse(&p->base, status, reason);
    peer_drop(p, status, "refused");
}

static void on_hello(peer_t *p, const weft_boot_msg_t *msg)
{
    struct ucx_server *s = p->server;
    /* The consumer connects an endpoint of its own to this worker: UCX pairs
     * it with ours, and its side then handles our failure instead of
     * aborting on it. */
    weft_status_t status = weft_serve_welcome(&p->base, msg, s->address, (uint32_t)s->address_length);

    if (status == WEFT_INPROGRESS) {
        return; /* challenged: its proof comes next, in this state */
    }
    if (status != WEFT_OK) {
        peer_drop(p, status, status == WEFT_ERR_CONNECTION ? "welcome not sent" : "refused");
        return;
    }
    p->state = PEER_VIEWS;
}

/* 1 when every range of the plan lies inside one registered region. */
static int ranges_in_regions(const peer_t *p)
{
    const weft_range_list_t *list = &p->base.plan->ranges;

    for (uint64_t i = 0; i < list->count; i++) {
        if (weft_wire_span_find(p->regions, p->region_count, (uint64_t)(uintptr_t)list->ranges[i].dst,
                                list->ranges[i].bytes) == NULL) {
            return 0;
        }
    }
    return 1;
}

/* The endpoint to a consumer's worker, with peer-failure reports where
 * WEFT_UCX_ERR_MODE and its transport allow. */
static weft_status_t connect_peer(peer_t *p, const void *address)
{
    char who[96];

    snprintf(who, sizeof(who), "connecting to consumer \"%s\"", p->base.name);
    return weft_ucx_connect(&p->server->ucx, address, ep_error, p, who, &p->ep, &p->ep_err_mode);
}

static void on_views(peer_t *p, const weft_boot_msg_t *msg)
{
    struct ucx_server   *s = p->server;
    weft_ucx_views_msg_t m; /* its blobs point into msg, valid during this call */
    const char          *reason;
    weft_status_t        status;

    if (msg->type != WEFT_BOOT_VIEWS) {
        refuse(p, WEFT_ERR_CORRUPT, "views expected");
        return;
    }
    status = weft_ucx_views_parse(msg, &m, &reason);
    if (status != WEFT_OK) {
        refuse(p, status, reason);
        return;
    }
    /* The peer keeps the regions; the rest is read here. */
    p->regions = m.regions;
    p->region_count = m.region_count;
    p->rkeys = calloc(m.region_count, sizeof(*p->rkeys));
    m.regions = NULL;
    if (p->rkeys == NULL) {
        weft_ucx_views_msg_free(&m);
        refuse(p, WEFT_ERR_NO_MEMORY, "no memory");
        return;
    }
    status = weft_serve_plan(&p->base, WEFT_TRANSPORT_UCX, &remote_plan_ops, m.views, m.view_count);
    free(m.views);
    free(m.names);
    m.views = NULL;
    m.names = NULL;
    if (status != WEFT_OK) {
        free(m.rkeys);
        peer_drop(p, status, "refused");
        return;
    }
    /* Staged through a ring: the views are device memory the consumer
     * copies into itself; every put goes into the ring. */
    status = m.ring_half != 0 ? weft_ucx_rounds_build(&p->base.plan->ranges, p->regions[0].base, m.ring_half,
                                                      &p->rounds)
                              : WEFT_OK;
    if (status != WEFT_OK) {
        free(m.rkeys);
        refuse(p, status, "its staging ring cannot hold a version in rounds");
        return;
    }
    if (m.ring_half == 0 && !ranges_in_regions(p)) {
        free(m.rkeys);
        refuse(p, WEFT_ERR_INVALID_PARAM, "a view lies outside the memory it registered");
        return;
    }
    if (s->broken) {
        free(m.rkeys);
        refuse(p, WEFT_ERR_CUDA, "the server cannot use its registry's GPU");
        return;
    }
    /* Only a consumer that passed every check gets an endpoint: closing an
     * endpoint still in its wire-up, whose peer then disconnects (as a
     * refused consumer does), can trip an assertion inside UCX 1.13. */
    status = connect_peer(p, m.address.data);
    for (uint32_t r = 0; r < p->region_count && status == WEFT_OK; r++) {
        status = weft_ucx_status(ucp_ep_rkey_unpack(p->ep, m.rkeys[r].data, &p->rkeys[r]),
                                 "unpacking a consumer's key");
    }
    /* A host registry's plain puts go on the lanes: each makes its own
     * endpoint and keys. A staging ring's rounds stay on this thread. */
    if (status == WEFT_OK && s->lanes != NULL && p->rounds.count == 0) {
        status = weft_ucx_lane_set_create(s->lanes, p->regions, p->region_count, p->base.name,
                                          &p->lanes);
        /* To the consumer's receive lanes in turn, or its one worker. */
        if (status == WEFT_OK) {
            const weft_ucx_blob_t worker = {.data = m.address.data, .length = m.address.length};

            status = weft_ucx_lane_set_connect(p->lanes, m.lane_count != 0 ? m.lanes : &worker,
                                               m.lane_count != 0 ? m.lane_count : 1, m.rkeys,
                                               weft_deadline_ns(weft_time_ns(), s->base.timeout_us));
        }
    }
    free(m.rkeys);
    if (status != WEFT_OK) {
        refuse(p, status, "cannot reach it or use its memory keys");
        return;
    }
    if (s->memory == WEFT_MEMORY_CUDA && s->path == WEFT_UCX_GPU_STAGED) {
        status = weft_ucx_ring_create(s->ucx.context, s->base.window, CHUNK_BYTES, &p->ring);
        if (status != WEFT_OK) {
            refuse(p, status, "no bounce buffers for it on the server");
            return;
        }
    }
    status = weft_serve_register(&p->base);
    if (status != WEFT_OK) {
        peer_drop(p, status, "refused");
        return;
    }
    {
        weft_boot_buf_t buf = {0};

        weft_serve_put_ready(&p->base, &buf);
        status = weft_serve_send(&p->base, WEFT_BOOT_READY, &buf);
        weft_boot_buf_free(&buf);
    }
    if (status != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "ready not sent");
        return;
    }
    p->state = PEER_READY;
    weft_log_info("server: consumer \"%s\" (%s) ready: %u tensors, %" PRIu64 " bytes in %" PRIu64
                  " ranges%s, puts on %u lane%s",
                  p->base.name, p->base.addr, p->base.plan->view_count, p->base.plan->bytes,
                  p->base.plan->ranges.count,
                  p->rounds.count != 0 ? ", in rounds through its staging ring" : "",
                  p->lanes != NULL ? weft_ucx_lanes_count(s->lanes) : 1,
                  p->lanes != NULL ? "s" : " (the server thread)");
}

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

/* What is put now: the plan's ranges, or for a consumer with a staging
 * ring those of the round being sent (into the ring). */
static const weft_range_list_t *peer_ranges(const peer_t *p)
{
    return p->rounds.count != 0 ? &p->rounds.round[p->round].puts : &p->base.plan->ranges;
}

/* Starts putting the ranges of peer_ranges() from the first. */
static void peer_start_ranges(peer_t *p)
{
    p->range = p->range_offset = 0;
    if (p->ring != NULL) {
        weft_ucx_ring_start(p->ring, peer_ranges(p), p->arena);
    }
}

/* Posts puts until the window is full or every range is posted. */
static void peer_post(peer_t *p)
{
    struct ucx_server       *s = p->server;
    const weft_range_list_t *list = peer_ranges(p);
    const weft_ucx_target_t  target = {.ep = p->ep, .regions = p->regions, .rkeys = p->rkeys,
                                       .region_count = p->region_count};
    uint64_t                 window = s->base.window;
    uint64_t                 max_in_flight = window / CHUNK_BYTES ? window / CHUNK_BYTES : 1;

    while (p->range < list->count && p->in_flight < max_in_flight && !p->put_failed) {
        const weft_copy_range_t *r = &list->ranges[p->range];
        uint64_t                 left = r->bytes - p->range_offset;
        uint64_t                 n = left < CHUNK_BYTES ? left : CHUNK_BYTES;
        uint64_t                 dst = (uint64_t)(uintptr_t)r->dst + p->range_offset;
        ucs_status_ptr_t         req;

        /* Inside a region: on_views checked every range against them. */
        req = weft_ucx_put(&target, p->arena + r->src + p->range_offset, n, dst,
                           s->slot_memh[p->base.lease.slot], put_done, p);
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
 * After a round's flush: ROUND to the consumer, then the next round
 * (state SENDING) or, after the last, stay FLUSHING for the notice.
 * 0 when the consumer was dropped.
 */
static int send_round(peer_t *p)
{
    weft_boot_buf_t buf = {0};
    weft_status_t   status;

    weft_ucx_put_round(&buf, p->base.version, &p->rounds, p->round);
    status = weft_serve_send(&p->base, WEFT_BOOT_ROUND, &buf);
    weft_boot_buf_free(&buf);
    if (status != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "a round's notice was not sent");
        return 0;
    }
    if (++p->round < p->rounds.count) {
        peer_start_ranges(p);
        p->state = PEER_SENDING;
    }
    return 1;
}

/* The consumer copied a round out of its ring: that half is free. */
static void on_round_done(peer_t *p, const weft_boot_msg_t *msg)
{
    weft_boot_cursor_t cur = {.data = msg->payload, .length = msg->length};
    uint64_t           v = weft_boot_get_u64(&cur);
    uint32_t           k = weft_boot_get_u32(&cur);

    if (cur.failed || v != p->base.version || k != p->rounds_done || k >= p->round) {
        peer_drop(p, WEFT_ERR_CORRUPT, "a round done out of turn");
        return;
    }
    p->rounds_done++;
}

/* Advances one consumer's transfer of the version in flight. */
static void peer_advance(peer_t *p)
{
    struct ucx_server *s = p->server;

    /* Only puts and flushes need the endpoint. Once the notice is out, a
     * consumer that acks and leaves fails its endpoint too: its ack, its
     * goodbye or the end of the bootstrap connection decides. */
    if (p->ep_failed && (p->state == PEER_SENDING || p->state == PEER_FLUSHING)) {
        peer_drop(p, WEFT_ERR_CONNECTION, "its endpoint failed");
        return;
    }
    if ((p->state == PEER_SENDING || p->state == PEER_FLUSHING || p->state == PEER_ACKING ||
         p->state == PEER_HELLO || p->state == PEER_VIEWS) &&
        weft_time_ns() > p->base.deadline) {
        peer_drop(p, WEFT_ERR_TIMEOUT, "no progress within the timeout");
        return;
    }
    /* A round goes into the half of the ring that round - 2 used: only
     * once the consumer copied that one out. */
    if (p->state == PEER_SENDING && p->rounds.count != 0 && p->round >= 2 &&
        p->rounds_done + 1 < p->round) {
        return;
    }
    if (p->state == PEER_SENDING) {
        int posted = 0;

        if (p->lanes != NULL) {
            weft_status_t status = weft_ucx_lane_set_poll(p->lanes);

            if (status == WEFT_INPROGRESS) {
                return;
            }
            if (status != WEFT_OK) {
                peer_drop(p, status, "a put or flush on a lane failed");
                return;
            }
            /* Each lane flushed its endpoint: every byte is there. */
            p->lanes_ns = weft_time_ns() - p->sending_ns;
            p->state = PEER_FLUSHING;
        } else if (p->ring != NULL) {
            const weft_ucx_target_t target = {.ep = p->ep, .regions = p->regions,
                                              .rkeys = p->rkeys, .region_count = p->region_count};
            weft_status_t           status = weft_ucx_ring_advance(p->ring, &target);

            if (status != WEFT_OK && status != WEFT_INPROGRESS) {
                peer_drop(p, status, status == WEFT_ERR_CONNECTION
                                         ? "a put failed"
                                         : "a copy into the bounce ring failed");
                return;
            }
            posted = status == WEFT_OK;
        } else {
            peer_post(p);
            if (p->put_failed) {
                peer_drop(p, WEFT_ERR_CONNECTION, "a put failed");
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
                peer_drop(p, WEFT_ERR_CONNECTION, "the flush failed");
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
            peer_drop(p, WEFT_ERR_CONNECTION, "the flush failed");
            return;
        }
        /* A round is in the consumer's ring: tell it, go on with the next. */
        if (p->rounds.count != 0 && !send_round(p)) {
            return;
        }
        if (p->state != PEER_FLUSHING) {
            return; /* the next round is being sent */
        }
        /* Every byte of v is in the consumer's memory: now tell it. */
        if (weft_serve_send_version(&p->base,
                               weft_deadline_ns(weft_time_ns(), s->base.timeout_us)) != WEFT_OK) {
            peer_drop(p, WEFT_ERR_CONNECTION, "the notice was not sent");
            return;
        }
        p->state = PEER_ACKING;
        p->notified_ns = weft_time_ns();
        weft_log_debug("server: consumer \"%s\": version %" PRIu64 " flushed, notified",
                       p->base.name, p->base.version);
    }
}

static void on_ack(peer_t *p, const weft_boot_msg_t *msg)
{
    if (weft_serve_ack(&p->base, msg) != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CORRUPT, "an unexpected message instead of the ack");
        return;
    }
    p->state = PEER_READY;
}

/* Reads what a consumer sent, in whatever state it is. */
static void peer_read(weft_serve_peer_t *base)
{
    peer_t         *p = (peer_t *)base;
    weft_boot_msg_t msg;
    weft_status_t   why;
    const char     *what;

    const int got = weft_serve_next(&p->base, p->state != PEER_READY, &msg, &why, &what);

    if (got < 0) {
        return; /* a message not yet whole: the rest comes later */
    }
    if (got == 0) {
        peer_drop(p, why, what);
        return;
    }
    /* The consumer asks for each version, so that its views change only
     * while it waits in weft_remote_receive. */
    if (msg.type == WEFT_BOOT_WANT && p->state != PEER_HELLO && p->state != PEER_VIEWS) {
        if (weft_serve_want(&p->base, &msg) != WEFT_OK) {
            peer_drop(p, WEFT_ERR_CORRUPT, "a malformed request");
        }
        free(msg.payload);
        return;
    }
    if (msg.type == WEFT_BOOT_ROUND_DONE && p->rounds.count != 0 &&
        (p->state == PEER_SENDING || p->state == PEER_FLUSHING || p->state == PEER_ACKING)) {
        on_round_done(p, &msg);
        free(msg.payload);
        return;
    }
    switch (p->state) {
    case PEER_HELLO:
        on_hello(p, &msg);
        break;
    case PEER_VIEWS:
        on_views(p, &msg);
        break;
    case PEER_ACKING:
        on_ack(p, &msg);
        break;
    default:
        peer_drop(p, WEFT_ERR_CORRUPT, "a message out of turn");
        break;
    }
    free(msg.payload);
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

/* Starts sending the latest version to a ready consumer that lacks it. */
static void peer_start(weft_serve_peer_t *base, uint64_t latest)
{
    peer_t            *p = (peer_t *)base;
    struct ucx_server *s = p->server;
    weft_status_t      status;

    if (p->state != PEER_READY || p->base.acked >= latest || !weft_serve_wants(&p->base, latest)) {
        return;
    }
    if (p->ep_failed) {
        peer_drop(p, WEFT_ERR_CONNECTION, "its endpoint failed");
        return;
    }
    if (!weft_serve_lease_next(&p->base, latest)) {
        return;
    }
    p->state = PEER_SENDING; /* from here a failure is recorded for this version */
    p->base.wanting = 0;     /* this version answers the request */
    status = lease_arena(p);
    if (status != WEFT_OK) {
        peer_drop(p, status, "the version cannot be read here");
        return;
    }
    p->put_failed = 0;
    p->round = p->rounds_done = 0;
    peer_start_ranges(p);
    if (p->lanes != NULL) {
        weft_ucx_lane_set_send(p->lanes, &p->base.plan->ranges, p->arena,
                               s->slot_memh[p->base.lease.slot]);
    }
    /* After the lanes got it: the consumer may stay awake for the notice. */
    p->sending_ns = weft_time_ns();
    if (weft_wire_send_u64(p->base.fd, &p->base.session, WEFT_BOOT_SENDING, p->base.version,
                           weft_deadline_ns(p->sending_ns, s->base.timeout_us)) != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "SENDING was not sent");
        return;
    }
    weft_log_debug("server: consumer \"%s\": sending version %" PRIu64 " from slot %u",
                   p->base.name, p->base.version, p->base.lease.slot);
}

/* A consumer just accepted: it says hello first. */
static void peer_init(weft_serve_peer_t *base)
{
    peer_t *p = (peer_t *)base;

    p->server = (struct ucx_server *)base->server; /* weft_serve_t is its first member */
    p->state = PEER_HELLO;
    p->linger_fd = -1;
}

static void peer_drop_base(weft_serve_peer_t *base, weft_status_t why, const char *what)
{
    peer_drop((peer_t *)base, why, what);
}

static const weft_serve_peer_ops_t peer_ops = {
    .size  = sizeof(peer_t),
    .init  = peer_init,
    .read  = peer_read,
    .start = peer_start,
    .reap  = peer_reap,
    .drop  = peer_drop_base,
};

static void unregister_slots(struct ucx_server *s)
{
    for (uint32_t i = 0; i < s->slot_count; i++) {
        if (s->slot_memh[i] != NULL) {
            (void)ucp_mem_unmap(s->ucx.context, s->slot_memh[i]);
            s->slot_memh[i] = NULL;
        }
    }
}

static void *server_main(void *arg)
{
    struct ucx_server *s = arg;
    /* UCX, listener, peers, lanes */
    struct pollfd     *fds = calloc(WEFT_SERVE_MAX_PEERS + 3, sizeof(*fds));

    if (fds == NULL) {
        weft_log_error("server: no memory for its poll set");
        return NULL;
    }
    /* Every CUDA call of the server, and UCX's on GPU memory, runs here,
     * on the GPU of the registry's arenas. */
    if (s->memory == WEFT_MEMORY_CUDA) {
        int saved;

        if (weft_ucx_cuda_enter(s->device, &saved) != WEFT_OK) {
            weft_log_error("server: cannot use GPU %d: every consumer will be refused", s->device);
            s->broken = 1;
        }
    }
    while (!atomic_load(&s->base.stop)) {
        uint32_t          n, ready = 0;
        uint64_t          after = UINT64_MAX;
        weft_serve_wait_t wait = s->base.peer_count > 0 ? WEFT_SERVE_VERSION : WEFT_SERVE_SOCKETS;

        /* Puts in flight need progress, not sleep, lanes that just got a
         * version are looked at (LANES_SPIN_NS) and a fresh notice's ack
         * is looked for (ACK_SPIN_NS); with every consumer ready, the
         * next version is waited for on the registry for those that ask
         * (UCX's events then wait up to WEFT_SERVE_IDLE_WAIT_US), and with
         * none asking only the sockets are (QUIET). */
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            const peer_t  *p = peer_at(s, i);
            const uint64_t now = weft_time_ns();

            if ((p->state == PEER_SENDING && p->lanes == NULL) || p->state == PEER_FLUSHING ||
                (p->state == PEER_ACKING && now - p->notified_ns < ACK_SPIN_NS)) {
                wait = WEFT_SERVE_BUSY;
            } else if (p->state == PEER_SENDING && p->lanes_ns < LANES_SPIN_NS &&
                       now - p->sending_ns < LANES_SPIN_NS) {
                /* The lanes need the CPUs more than this look does. */
                wait = wait == WEFT_SERVE_BUSY ? wait : WEFT_SERVE_SPIN;
            } else if (p->state != PEER_READY && wait != WEFT_SERVE_BUSY && wait != WEFT_SERVE_SPIN) {
                wait = WEFT_SERVE_SOCKETS;
            }
            if (p->state == PEER_READY && weft_serve_want_floor(&p->base) < after) {
                after = weft_serve_want_floor(&p->base);
            }
        }
        if (wait == WEFT_SERVE_VERSION && after == UINT64_MAX) {
            wait = WEFT_SERVE_QUIET;
        }
        /* Sleep only when UCX has nothing to do either: its fd wakes us. */
        if (wait != WEFT_SERVE_BUSY && wait != WEFT_SERVE_SPIN && !weft_ucx_arm(&s->ucx)) {
            wait = WEFT_SERVE_BUSY;
        }
        /* A lane that finished a job (a consumer's puts waited on in
         * SOCKETS) wakes the poll through its eventfd. */
        fds[0] = (struct pollfd){.fd = s->ucx.efd, .events = POLLIN};
        n = 1 + weft_serve_poll_fds(&s->base, fds + 1);
        if (s->lanes != NULL) {
            fds[n] = (struct pollfd){.fd = weft_ucx_lanes_fd(s->lanes), .events = POLLIN};
        }
        weft_serve_sleep(&s->base, fds, n + (s->lanes != NULL), wait, after);
        if (s->lanes != NULL) {
            weft_ucx_lanes_drain(s->lanes);
        }
        weft_ucx_progress(&s->ucx);
        weft_serve_poll_events(&s->base, fds + 1, n - 1);
        weft_serve_start_versions(&s->base);
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            peer_advance(peer_at(s, i));
        }
        weft_ucx_progress(&s->ucx);
        weft_serve_reap(&s->base);
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            peer_state_t st = peer_at(s, i)->state;
            ready += st != PEER_HELLO && st != PEER_VIEWS && st != PEER_CLOSING;
        }
        weft_serve_set_consumers(&s->base, ready);
    }
    /* Shutting down: drop everyone, let UCX finish, release the leases. */
    s->stopping = 1;
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        peer_drop(peer_at(s, i), WEFT_ERR_CANCELED, "the server stops");
    }
    for (int spins = 0; spins < 100000 && s->base.peer_count > 0; spins++) {
        weft_ucx_progress(&s->ucx);
        weft_serve_reap(&s->base);
    }
    /* Nothing runs on the lanes from here: what they still hold of a
     * consumer goes with it below, their endpoints with their workers. */
    if (s->lanes != NULL) {
        weft_ucx_lanes_stop(s->lanes);
    }
    /* What is left is freed here, where its streams' GPU is current. */
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        weft_serve_release(&peer_at(s, i)->base);
        peer_free(peer_at(s, i));
    }
    s->base.peer_count = 0;
    unregister_slots(s);
    free(fds);
    return NULL;
}

/* ---------------------------------------------------------- lifecycle */

/* The peers and GPU slots went with the thread (server_main frees them). */
static void server_free(struct ucx_server *s)
{
    weft_ucx_lanes_destroy(s->lanes);
    s->lanes = NULL;
    unregister_slots(s);
    if (s->address != NULL) {
        ucp_worker_release_address(s->ucx.worker, s->address);
    }
    weft_ucx_close(&s->ucx);
    weft_serve_fini(&s->base);
    free(s);
}

/* A host registry's slots are registered once: every put reads from them. */
static weft_status_t register_host_slots(struct ucx_server *s, weft_registry_h reg)
{
    weft_status_t status = WEFT_OK;

    for (uint32_t i = 0; i < s->slot_count && status == WEFT_OK; i++) {
        void    *base;
        uint64_t bytes;

        status = weft_registry_slot_memory(reg, i, &base, &bytes);
        if (status == WEFT_OK) {
            s->slot_base[i] = base;
            status = weft_ucx_mem_map(s->ucx.context, base, bytes, WEFT_MEMORY_HOST,
                                      &s->slot_memh[i], "registering a registry slot");
        }
    }
    return status;
}

/* A GPU registry: its GPU must be visible here; the path is chosen now. */
static weft_status_t check_gpu_registry(struct ucx_server *s)
{
    weft_status_t status;
    int           saved;

    if (s->device < 0) {
        weft_log_error("server: the GPU of the registry's arenas is not visible in this process");
        return WEFT_ERR_NO_DEVICE;
    }
    status = weft_ucx_gpu_path(s->ucx.context, "server", &s->path);
    /* A GPU this process cannot use fails here, not on the thread. */
    if (status == WEFT_OK) {
        status = weft_ucx_cuda_enter(s->device, &saved);
        if (status == WEFT_OK) {
            weft_ucx_cuda_leave(s->device, saved);
        }
    }
    return status;
}

static weft_status_t ucx_server_create(weft_registry_h reg, const weft_server_params_t *params,
                                       void **out)
{
    struct ucx_server    *s;
    weft_registry_stats_t rs;
    weft_arena_info_t     arenas;
    uint32_t              lanes = 1;
    weft_status_t         status;

    status = weft_registry_get_stats(reg, &rs);
    if (status == WEFT_OK) {
        status = weft_registry_arena_info(reg, &arenas);
    }
    if (status != WEFT_OK) {
        return status;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    weft_serve_init(&s->base, reg, params, WEFT_UCX_PROTOCOL, DEFAULT_WINDOW_BYTES, &peer_ops);
    if (s->base.window < CHUNK_BYTES) {
        s->base.window = CHUNK_BYTES;
    }
    s->slot_count = rs.slot_count;
    s->slot_bytes = rs.slot_bytes;
    s->memory = arenas.memory;
    s->device = arenas.device;

    /* The parameters and the address first: a bad one is the caller's
     * error, whatever UCX would say of registering the slots. */
    if (s->memory != WEFT_MEMORY_CUDA) {
        status = weft_ucx_lanes_count_for((params->field_mask & WEFT_SERVER_PARAM_LANES) != 0,
                                          params->lanes, &lanes);
    }
    if (status == WEFT_OK) {
        status = weft_serve_listen(&s->base, params->listen);
    }
    if (status == WEFT_OK) {
        status = weft_ucx_open(&s->ucx, "server", lanes > 1);
    }
    if (status == WEFT_OK) {
        status = weft_ucx_status(ucp_worker_get_address(s->ucx.worker, &s->address,
                                                        &s->address_length),
                                 "ucp_worker_get_address");
    }
    if (status == WEFT_OK && s->memory == WEFT_MEMORY_CUDA) {
        status = check_gpu_registry(s);
    } else if (status == WEFT_OK) {
        status = register_host_slots(s, reg);
    }
    /* Each lane may have its share of the window in flight. */
    if (status == WEFT_OK && lanes > 1) {
        uint64_t puts = s->base.window / LANE_PIECE_BYTES / lanes;

        status = weft_ucx_lanes_create(&s->ucx, lanes, LANE_PIECE_BYTES, puts ? puts : 1,
                                       &s->lanes);
    }
    if (status == WEFT_OK) {
        status = weft_serve_start(&s->base, server_main, s);
    }
    if (status != WEFT_OK) {
        server_free(s);
        return status;
    }
    if (s->memory == WEFT_MEMORY_CUDA) {
        weft_log_info("server: serving on port %u (ucx from GPU %d, %s, window %" PRIu64
                      " bytes, timeout %" PRIu64 " us)",
                      s->base.port, s->device, weft_ucx_gpu_path_name(s->path), s->base.window,
                      s->base.timeout_us);
    } else {
        weft_log_info("server: serving on port %u (ucx, %u put lane%s, window %" PRIu64
                      " bytes, timeout %" PRIu64 " us)",
                      s->base.port, lanes, lanes > 1 ? "s" : "", s->base.window,
                      s->base.timeout_us);
    }
    *out = s;
    return WEFT_OK;
}

static void ucx_server_destroy(void *server)
{
    struct ucx_server *s = server;

    weft_serve_join(&s->base);
    server_free(s);
}

const weft_server_ops_t weft_ucx_server_ops = {
    .name      = "ucx",
    .create    = ucx_server_create,
    .port      = weft_serve_port_of,
    .get_stats = weft_serve_stats_of,
    .destroy   = ucx_server_destroy,
};
