/* The ucx server's consumers: their VIEWS (the plan they make, the
 * endpoint, keys and lanes), the messages read once they are served, and
 * the drop (ucx_server.h). The handshake before VIEWS is server.h's. On
 * the server thread. */
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

/* ------------------------------------------------------------ dropping */

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    peer_t *p = arg;

    (void)ep;
    p->ep_failed = 1;
    weft_log_info("server: consumer \"%s\" (%s): endpoint failed: %s", p->base.name, p->base.addr,
                  ucs_status_string(status));
}

/* What a PROBING consumer holds: its VIEWS' copy, its keys, its sandbox. */
static void release_wire(peer_t *p)
{
    if (p->probe != NULL) {
        weft_ucx_probe_cancel(p->probe);
        p->probe = NULL;
        p->server->probes--;
    }
    free(p->wire.rkeys);
    p->wire.rkeys = NULL;
    free(p->held.payload);
    p->held.payload = NULL;
}

/* Drops a consumer: records its failure for the version in flight, removes
 * it from the registry, closes its endpoint and socket. */
void weft_ucx_peer_drop(peer_t *p, weft_status_t why, const char *what)
{
    struct ucx_server *s = p->server;

    if (p->state == PEER_CLOSING) {
        return;
    }
    release_wire(p);
    /* Only a consumer that got keys can be written to (after VIEWS). */
    if (p->base.fd >= 0 && (p->ep != NULL || p->lanes != NULL)) {
        p->linger_fd = fcntl(p->base.fd, F_DUPFD_CLOEXEC, 0);
    }
    weft_server_base_drop(&p->base, why, what,
                    p->state == PEER_SENDING || p->state == PEER_FLUSHING ||
                        p->state == PEER_ACKING,
                    !p->ep_failed);
    /* The version's lease goes now, not once UCX gives back the puts of a
     * consumer that stopped reading: a graceful close waits for them, and
     * UCX over TCP waits for a live but stuck peer indefinitely, keeping
     * the slot from the writer. The slot stays mapped and registered as
     * long as the server lives, so a put still reading it reads valid
     * memory; what it carries lands in the views of a consumer that was
     * dropped and is never told that this version arrived. */
    weft_server_base_release(&p->base);
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

void weft_ucx_peer_free(peer_t *p)
{
    release_wire(p);
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
    weft_rounds_free(&p->rounds);
    weft_ucx_ring_destroy(p->ring);
    free(p->delta_puts.ranges);
    free(p->delta_map);
    weft_server_peer_fini(&p->base);
    free(p);
}

/* A dropped consumer is freed once UCX gave back every request of it. */
static int peer_reap(weft_server_peer_t *base)
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
    weft_ucx_peer_free(p); /* its lease went at the drop */
    return 1;
}

/* ----------------------------------------------------------- handshake */

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
 * WEFT_UCX_ERR_MODE and its transport allow, and how bytes reach it:
 * puts, or active messages where UCX has no native put to it
 * (ucx_deliver.h). */
static weft_status_t connect_peer(peer_t *p, const void *address)
{
    char          who[96];
    weft_status_t status;

    snprintf(who, sizeof(who), "connecting to consumer \"%s\"", p->base.name);
    status = weft_ucx_connect(&p->server->ucx, address, ep_error, p, who, &p->ep, &p->ep_err_mode);
    if (status == WEFT_OK) {
        snprintf(who, sizeof(who), "consumer \"%s\"", p->base.name);
        status = weft_ucx_deliver_choose(p->ep, p->ep_err_mode, who, &p->by_messages);
    }
    return status;
}

/* The consumer's addresses and keys passed the sandbox (or none runs):
 * its endpoint, keys, lanes and ring, then READY. */
static weft_status_t finish_views(peer_t *p)
{
    struct ucx_server          *s = p->server;
    const weft_ucx_views_msg_t *m = &p->wire;
    weft_status_t               status = connect_peer(p, m->address.data);

    for (uint32_t r = 0; r < p->region_count && status == WEFT_OK; r++) {
        status = weft_ucx_status(ucp_ep_rkey_unpack(p->ep, m->rkeys[r].data, &p->rkeys[r]),
                                 "unpacking a consumer's key");
    }
    /* A host registry's plain puts go on the lanes: each makes its own
     * endpoint and keys. A staging ring's rounds stay on this thread. */
    if (status == WEFT_OK && s->lanes != NULL && p->rounds.count == 0) {
        status = weft_ucx_lane_set_create(s->lanes, p->regions, p->region_count, p->by_messages,
                                          p->base.name, &p->lanes);
        /* To the consumer's receive lanes in turn, or its one worker. */
        if (status == WEFT_OK) {
            status = weft_ucx_lane_set_connect(p->lanes, m->lane_count != 0 ? m->lanes : &m->address,
                                               m->lane_count != 0 ? m->lane_count : 1, m->rkeys,
                                               weft_deadline_ns(weft_time_ns(), s->base.timeout_us));
        }
    }
    release_wire(p);
    if (status != WEFT_OK) {
        weft_server_base_refuse_drop(&p->base, status, "cannot reach it or use its memory keys");
        return status;
    }
    if (s->memory == WEFT_MEMORY_CUDA && s->path == WEFT_UCX_GPU_STAGED) {
        status = weft_ucx_ring_create(s->ucx.context, s->base.window, CHUNK_BYTES, &p->ring);
        if (status != WEFT_OK) {
            weft_server_base_refuse_drop(&p->base, status, "no bounce buffers for it on the server");
            return status;
        }
    }
    status = weft_server_base_ready(&p->base, NULL);
    if (status != WEFT_OK) {
        return status;
    }
    p->state = PEER_READY;
    weft_log_info("server: consumer \"%s\" (%s) ready: %u tensors, %" PRIu64 " bytes in %" PRIu64
                  " ranges%s, puts on %u lane%s",
                  p->base.name, p->base.addr, p->base.plan->view_count, p->base.plan->bytes,
                  p->base.plan->ranges.count,
                  p->rounds.count != 0 ? ", in rounds through its staging ring" : "",
                  p->lanes != NULL ? weft_ucx_lanes_count(s->lanes) : 1,
                  p->lanes != NULL ? "s" : " (the server thread)");
    return WEFT_OK;
}

/* Starts the sandbox on the consumer's worker and lane addresses and its
 * keys. WEFT_INPROGRESS while it runs (or waits for its turn), WEFT_OK
 * when none runs, or why it could not start (the consumer refused). */
static weft_status_t start_probe(peer_t *p)
{
    struct ucx_server *s = p->server;
    weft_ucx_blob_t    addresses[1 + WEFT_UCX_LANES_MAX];
    char               why[160];
    weft_status_t      status;

    if (s->probes >= UCX_PROBES_MAX) {
        return WEFT_INPROGRESS; /* its turn comes in weft_ucx_peer_probe */
    }
    addresses[0] = p->wire.address;
    memcpy(addresses + 1, p->wire.lanes, p->wire.lane_count * sizeof(*p->wire.lanes));
    status = weft_ucx_probe_start(addresses, 1 + p->wire.lane_count, p->wire.rkeys, p->region_count,
                                  weft_deadline_ns(weft_time_ns(), s->base.timeout_us), &p->probe, why,
                                  sizeof(why));
    if (status == WEFT_INPROGRESS) {
        s->probes++;
    } else if (status != WEFT_OK) {
        weft_server_base_refuse_drop(&p->base, status, why);
    }
    return status;
}

void weft_ucx_peer_probe(peer_t *p)
{
    char          why[160];
    weft_status_t status;

    if (p->probe == NULL) {
        status = start_probe(p);
        if (status == WEFT_OK) {
            (void)finish_views(p);
        }
        return;
    }
    status = weft_ucx_probe_poll(p->probe, why, sizeof(why));
    if (status == WEFT_INPROGRESS) {
        return;
    }
    p->probe = NULL; /* the poll freed it */
    p->server->probes--;
    if (status != WEFT_OK) {
        weft_server_base_refuse_drop(&p->base, status, why);
        return;
    }
    (void)finish_views(p);
}

static weft_status_t peer_views(weft_server_peer_t *base, const weft_ctl_msg_t *msg)
{
    peer_t              *p = (peer_t *)base;
    weft_ucx_views_msg_t m; /* its blobs point into p->held */
    const char          *reason;
    weft_status_t        status;

    /* Kept while the sandbox looks at its addresses and keys. */
    p->held = *msg;
    p->held.payload = malloc(msg->length > 0 ? msg->length : 1);
    if (p->held.payload == NULL) {
        weft_server_base_refuse_drop(&p->base, WEFT_ERR_NO_MEMORY, "no memory");
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(p->held.payload, msg->payload, msg->length);
    status = weft_ucx_views_parse(&p->held, &m, &reason);
    if (status != WEFT_OK) {
        weft_server_base_refuse_drop(&p->base, status, reason);
        return status;
    }
    /* The peer keeps the regions and (until READY) the keys' bytes. */
    p->regions = m.regions;
    p->region_count = m.region_count;
    p->rkeys = calloc(m.region_count, sizeof(*p->rkeys));
    m.regions = NULL;
    p->wire = m;
    p->wire.views = NULL;
    p->wire.names = NULL;
    if (p->rkeys == NULL) {
        free(m.views);
        free(m.names);
        weft_server_base_refuse_drop(&p->base, WEFT_ERR_NO_MEMORY, "no memory");
        return WEFT_ERR_NO_MEMORY;
    }
    status = weft_server_base_plan(&p->base, WEFT_TRANSPORT_UCX, &weft_ucx_remote_plan_ops, m.views, m.view_count);
    free(m.views);
    free(m.names);
    if (status != WEFT_OK) {
        weft_ucx_peer_drop(p, status, "refused");
        return status;
    }
    /* Staged through a ring: the views are device memory the consumer
     * copies into itself; every put goes into the ring. */
    status = m.ring_half != 0 ? weft_rounds_build(&p->base.plan->ranges, p->regions[0].base, m.ring_half,
                                                      &p->rounds)
                              : WEFT_OK;
    if (status != WEFT_OK) {
        weft_server_base_refuse_drop(&p->base, status, "its staging ring cannot hold a version in rounds");
        return status;
    }
    if (m.ring_half == 0 && !ranges_in_regions(p)) {
        weft_server_base_refuse_drop(&p->base, WEFT_ERR_INVALID_PARAM, "a view lies outside the memory it registered");
        return WEFT_ERR_INVALID_PARAM;
    }
    /* An inbox (checked inside a region by the parse): room for a
     * delta's entries, one per view. A GPU registry sends every version
     * whole (its deltas are not made). */
    if (m.inbox_bytes != 0 && p->server->delta_mode != WEFT_DELTA_OFF) {
        const uint32_t views = p->base.plan->view_count;

        p->inbox_base = m.inbox_base;
        p->inbox_bytes = m.inbox_bytes;
        p->delta_map = calloc(views ? views : 1, sizeof(*p->delta_map));
        p->delta_puts.ranges = calloc(views ? views : 1, sizeof(*p->delta_puts.ranges));
        p->delta_puts.capacity = views;
        if (p->delta_map == NULL || p->delta_puts.ranges == NULL) {
            weft_server_base_refuse_drop(&p->base, WEFT_ERR_NO_MEMORY, "no memory");
            return WEFT_ERR_NO_MEMORY;
        }
    }
    /* UCX parses the address and keys without checks of its own: it gets
     * them first in the sandbox, where forged ones kill only the sandbox,
     * while this thread serves the others. Only a consumer that passed
     * every check gets an endpoint: closing an endpoint still in its
     * wire-up, whose peer then disconnects (as a refused consumer does),
     * can trip an assertion inside UCX 1.13. */
    p->state = PEER_PROBING;
    status = start_probe(p);
    return status == WEFT_OK ? finish_views(p) : status;
}

static void on_ack(peer_t *p, const weft_ctl_msg_t *msg)
{
    const int delta = p->delta;

    p->delta = 0;
    if ((delta ? weft_server_base_ack_delta(&p->base, msg, p->delta_bytes) : weft_server_base_ack(&p->base, msg)) !=
        WEFT_OK) {
        weft_ucx_peer_drop(p, WEFT_ERR_CORRUPT, "an unexpected message instead of the ack");
        return;
    }
    /* Its views hold that version now: the base of its next delta. */
    p->holds = p->base.acked;
    p->redos = delta ? 0 : p->redos;
    p->state = PEER_READY;
}

/* A message from a consumer past its handshake. */
static void peer_message(weft_server_peer_t *base, const weft_ctl_msg_t *msg)
{
    peer_t *p = (peer_t *)base;

    /* The consumer asks for each version, so that its views change only
     * while it waits in weft_remote_receive. */
    if (msg->type == WEFT_CTL_WANT) {
        if (weft_server_base_want(&p->base, msg) != WEFT_OK) {
            weft_ucx_peer_drop(p, WEFT_ERR_CORRUPT, "a malformed request");
        }
        return;
    }
    if (msg->type == WEFT_CTL_ROUND_DONE && p->rounds.count != 0 &&
        (p->state == PEER_SENDING || p->state == PEER_FLUSHING || p->state == PEER_ACKING)) {
        weft_ucx_on_round_done(p, msg);
        return;
    }
    if (msg->type == WEFT_CTL_REDO) {
        weft_ucx_on_redo(p, msg);
        return;
    }
    if (p->state == PEER_ACKING) {
        on_ack(p, msg);
    } else {
        weft_ucx_peer_drop(p, WEFT_ERR_CORRUPT, "a message out of turn");
    }
}

static int peer_idle(const weft_server_peer_t *base)
{
    return ((const peer_t *)base)->state == PEER_READY;
}

/* A consumer just accepted: it says hello first. */
static void peer_init(weft_server_peer_t *base)
{
    peer_t *p = (peer_t *)base;

    p->server = (struct ucx_server *)base->server; /* weft_server_base_t is its first member */
    p->state = PEER_HANDSHAKE;
    p->linger_fd = -1;
}

static void peer_drop_base(weft_server_peer_t *base, weft_status_t why, const char *what)
{
    weft_ucx_peer_drop((peer_t *)base, why, what);
}

const weft_server_peer_ops_t weft_ucx_peer_ops = {
    .size    = sizeof(peer_t),
    .init    = peer_init,
    .views   = peer_views,
    .message = peer_message,
    .idle    = peer_idle,
    .start   = weft_ucx_peer_start,
    .reap    = peer_reap,
    .drop    = peer_drop_base,
};
