/*
 * The server of the nccl transport: one thread, current device the
 * registry's GPU, that accepts remote consumers on the bootstrap port
 * (token, views checked as weft_plan_create does, consumer registered),
 * gives each its own 2-rank NCCL communicator (this side rank 0, the
 * ncclUniqueId sent in READY) and sends every newly published version to
 * every ready consumer:
 *
 *   lease v → VERSION(v) → ncclSend of every range from the slot's arena,
 *   group by group on the consumer's stream → ACK(v) (the consumer
 *   received every byte) and our stream done → consumer_received(v)
 *
 * Communicators are non-blocking: nothing here waits on NCCL. Each loop
 * polls every communicator (ncclCommGetAsyncError) and stream, so a
 * consumer whose link fails (an NCCL error), whose process dies (its
 * bootstrap connection closes) or that makes no progress within the
 * timeout is dropped: its failure recorded, its communicator aborted
 * (kernels in flight quit), its lease released once its stream is idle.
 * The others go on.
 *
 * NCCL refuses two ranks of one communicator on one GPU of one host: a
 * consumer whose views are on the registry's GPU is refused
 * (WEFT_ERR_UNSUPPORTED) unless its NCCL host id differs from ours (then
 * NCCL takes the two ranks for two hosts and moves the bytes through its
 * network transport, as it would between nodes).
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/log.h"
#include "common/time_util.h"
#include "nccl_server.h"
#include "transport/plan/plan.h"
#include "transport/core/desc.h"

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_WINDOW_BYTES (UINT64_C(64) << 20)
#define SHUTDOWN_SPINS       200000 /* looks at aborted streams before giving up */

static const weft_plan_ops_t remote_plan_ops = {
    .name       = "nccl",
    .src_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_CUDA),
    .dst_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_CUDA),
    .post       = weft_server_remote_post,
};

/* ------------------------------------------------------------ dropping */

static void peer_drop(peer_t *p, weft_status_t why, const char *what)
{
    if (p->state == PEER_CLOSING) {
        return;
    }
    weft_server_base_drop(&p->base, why, what, p->state == PEER_SENDING || p->state == PEER_ACKING, 1);
    /* Local and immediate: kernels still waiting for the consumer quit. */
    weft_nccl_abort(p->comm, p->base.name);
    p->comm = NULL;
    p->state = PEER_CLOSING;
}

static void peer_free(peer_t *p)
{
    weft_nccl_abort(p->comm, p->base.name);
    if (p->stream != NULL) {
        (void)WEFT_CUDA_CHECK(cudaStreamDestroy(p->stream));
    }
    free(p->sizes);
    free(p->offsets);
    weft_nccl_delta_peer_fini(p);
    weft_server_peer_fini(&p->base);
    free(p);
}

/* A dropped consumer is freed once nothing of it runs on its stream. */
static int peer_reap(weft_server_peer_t *base)
{
    peer_t *p = (peer_t *)base;

    if (p->state != PEER_CLOSING || !weft_nccl_stream_idle(p->stream)) {
        return 0;
    }
    /* No send of it reads the slot any more. */
    weft_server_base_release(&p->base);
    peer_free(p);
    return 1;
}

/* ----------------------------------------------------------- handshake */

/* READY's part of ours: the communicator's id, the window, the ranges. */
static void put_ready_tail(const peer_t *p, const ncclUniqueId *id, weft_ctl_buf_t *buf)
{
    const weft_range_list_t *list = &p->base.plan->ranges;

    weft_ctl_put_blob(buf, id, (uint32_t)sizeof(*id));
    weft_ctl_put_u64(buf, p->server->base.window);
    for (uint64_t i = 0; i < list->count; i++) {
        weft_ctl_put_u64(buf, (uint64_t)(uintptr_t)list->ranges[i].dst);
        weft_ctl_put_u64(buf, list->ranges[i].bytes);
    }
}

/* The sizes and arena offsets of the plan's ranges: the send schedule. */
static weft_status_t build_schedule(peer_t *p)
{
    const weft_range_list_t *list = &p->base.plan->ranges;

    p->sizes = calloc(list->count + 1, sizeof(*p->sizes));
    p->offsets = calloc(list->count + 1, sizeof(*p->offsets));
    if (p->sizes == NULL || p->offsets == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint64_t i = 0; i < list->count; i++) {
        p->sizes[i] = list->ranges[i].bytes;
        p->offsets[i] = list->ranges[i].src;
    }
    p->xfer = (weft_nccl_xfer_t){.send = 1, .window = p->server->base.window};
    return WEFT_OK;
}

static weft_status_t peer_views(weft_server_peer_t *base, const weft_ctl_msg_t *msg)
{
    peer_t             *p = (peer_t *)base;
    struct nccl_server *s = p->server;
    weft_ctl_cursor_t  cur = {.data = msg->payload, .length = msg->length};
    weft_recv_view_t   *views = NULL;
    char (*names)[WEFT_TENSOR_NAME_MAX] = NULL;
    uint32_t            view_count = 0, uuid_length, host_id_length;
    uint64_t            inbox_bytes;
    const void         *uuid, *host_id;
    ncclUniqueId        id;
    weft_ctl_buf_t      tail = {0};
    weft_status_t       status;

    uuid = weft_ctl_get_blob(&cur, &uuid_length);
    host_id = weft_ctl_get_blob(&cur, &host_id_length);
    inbox_bytes = weft_ctl_get_u64(&cur);
    if (cur.failed || uuid_length != WEFT_CUDA_UUID_BYTES || host_id_length > WEFT_NCCL_HOST_ID_MAX) {
        weft_server_base_refuse_drop(&p->base, WEFT_ERR_CORRUPT, "malformed views");
        return WEFT_ERR_CORRUPT;
    }
    /* NCCL's own rule (one GPU, one host id: a duplicate GPU), checked
     * here, before anything is registered, with a clearer message. */
    if (memcmp(uuid, s->uuid, WEFT_CUDA_UUID_BYTES) == 0 && host_id_length == strlen(s->host_id) &&
        memcmp(host_id, s->host_id, host_id_length) == 0) {
        weft_server_base_refuse_drop(&p->base, WEFT_ERR_UNSUPPORTED,
               "its views are on the server's GPU, under the same NCCL host id: NCCL refuses two "
               "ranks on one GPU (use the cuda_ipc transport on one GPU, or give the consumer an "
               "NCCL_HOSTID of its own to go through NCCL's network transport)");
        return WEFT_ERR_UNSUPPORTED;
    }
    status = weft_wire_get_views(&cur, WEFT_MEMORY_CUDA, &views, &names, &view_count);
    if (status != WEFT_OK) {
        weft_server_base_refuse_drop(&p->base, status, "malformed views");
        return status;
    }
    status = weft_server_base_plan(&p->base, WEFT_TRANSPORT_NCCL, &remote_plan_ops, views, view_count);
    free(views);
    free(names);
    if (status != WEFT_OK) {
        peer_drop(p, status, "refused");
        return status;
    }
    status = build_schedule(p);
    /* An inbox: room for a delta's entries, one per view. */
    if (status == WEFT_OK && inbox_bytes != 0 && s->delta_mode != WEFT_DELTA_OFF) {
        status = weft_nccl_delta_peer_init(p, inbox_bytes);
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
    }
    if (status == WEFT_OK) {
        status = weft_nccl_status(ncclGetUniqueId(&id), NULL, "ncclGetUniqueId");
    }
    if (status != WEFT_OK) {
        weft_server_base_refuse_drop(&p->base, status, "the server could not set up NCCL for it");
        return status;
    }
    p->xfer.stream = p->stream;
    put_ready_tail(p, &id, &tail);
    status = weft_server_base_ready(&p->base, &tail);
    weft_ctl_buf_free(&tail);
    if (status != WEFT_OK) {
        return status;
    }
    /* Both ranks make the communicator now; the consumer counts as ready
     * once ours is up. */
    status = weft_nccl_comm_start(&p->comm, &id, 0);
    if (status != WEFT_OK && status != WEFT_INPROGRESS) {
        peer_drop(p, status, "its communicator could not be made");
        return status;
    }
    p->xfer.comm = p->comm;
    p->base.deadline = weft_deadline_ns(weft_time_ns(), s->base.timeout_us);
    p->state = PEER_INIT;
    weft_log_info("server: consumer \"%s\" (%s) accepted: %u tensors, %" PRIu64 " bytes in %" PRIu64
                  " ranges; making its communicator",
                  p->base.name, p->base.addr, p->base.plan->view_count, p->base.plan->bytes,
                  p->base.plan->ranges.count);
    return WEFT_OK;
}

/* ------------------------------------------------------------ versions */

static void start_transfer(peer_t *p, int delta);

/* The version in flight goes again, whole: its delta did not check out. */
static void on_redo(peer_t *p, const weft_ctl_msg_t *msg)
{
    uint32_t flags;

    if (!p->delta || weft_server_base_redo(&p->base, msg, &flags) != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CORRUPT, "a REDO out of turn");
        return;
    }
    if (weft_delta_cache_redone(&p->server->delta, p->base.name, flags, &p->redos)) {
        p->inbox_bytes = 0;
    }
    p->base.deadline = weft_deadline_ns(weft_time_ns(), p->server->base.timeout_us);
    start_transfer(p, 0);
}

/* The consumer's answer to the version in flight, our sends done: its
 * ack (it holds the version now: the base of its next delta) or, after a
 * delta, its REDO. */
static void finish_version(peer_t *p, const weft_ctl_msg_t *msg)
{
    const int delta = p->delta;

    if (msg->type == WEFT_CTL_REDO) {
        on_redo(p, msg);
        return;
    }
    if ((delta ? weft_server_base_ack_delta(&p->base, msg, p->delta_bytes) : weft_server_base_ack(&p->base, msg)) !=
        WEFT_OK) {
        peer_drop(p, WEFT_ERR_CORRUPT, "an unexpected message instead of the ack");
        return;
    }
    p->delta = 0;
    p->holds = p->base.acked;
    p->redos = delta ? 0 : p->redos;
    p->state = PEER_READY;
}

static void on_answer(peer_t *p, const weft_ctl_msg_t *msg)
{
    if (p->state == PEER_SENDING) {
        /* It received every byte before our stream told us: keep its
         * answer until our sends are done too (the slot or the delta's
         * copy is read until then). */
        if ((msg->type != WEFT_CTL_ACK && msg->type != WEFT_CTL_REDO) || p->early != 0 ||
            msg->length > sizeof(p->early_payload)) {
            peer_drop(p, WEFT_ERR_CORRUPT, "an unexpected message instead of the ack");
            return;
        }
        memcpy(p->early_payload, msg->payload, msg->length);
        p->early_msg = (weft_ctl_msg_t){.type = msg->type, .length = msg->length, .payload = p->early_payload};
        p->early = msg->type;
        return;
    }
    finish_version(p, msg);
}

/* Advances one consumer: its communicator, its transfer, its timeout. */
static void peer_advance(peer_t *p)
{
    weft_status_t status;

    if (p->state == PEER_CLOSING || p->state == PEER_READY) {
        return;
    }
    if (weft_time_ns() > p->base.deadline) {
        peer_drop(p, WEFT_ERR_TIMEOUT, "no progress within the timeout");
        return;
    }
    if (p->state == PEER_INIT) {
        status = weft_nccl_poll(p->comm, "making the communicator");
        if (status == WEFT_OK) {
            p->state = PEER_READY;
            weft_log_info("server: consumer \"%s\" (%s) ready", p->base.name, p->base.addr);
        } else if (status != WEFT_INPROGRESS) {
            peer_drop(p, status, "its communicator failed");
        }
        return;
    }
    if (p->state == PEER_SENDING) {
        status = weft_nccl_xfer_progress(&p->xfer);
        if (status == WEFT_INPROGRESS) {
            return;
        }
        if (status != WEFT_OK) {
            peer_drop(p, status, "a send failed");
            return;
        }
        weft_log_debug("server: consumer \"%s\": version %" PRIu64 " sent in %" PRIu64 " groups",
                       p->base.name, p->base.version, p->xfer.groups);
        p->state = PEER_ACKING;
        if (p->early != 0) {
            p->early = 0;
            finish_version(p, &p->early_msg);
        }
        return;
    }
    if (p->state == PEER_ACKING) {
        /* Between our last send and its ack a failed link still shows. */
        status = weft_nccl_poll(p->comm, "waiting for the ack");
        if (status != WEFT_OK && status != WEFT_INPROGRESS) {
            peer_drop(p, status, "its communicator failed");
        }
    }
}

/* A message from a consumer past its handshake: only an answer to the
 * version in flight is expected. */
static void peer_message(weft_server_peer_t *base, const weft_ctl_msg_t *msg)
{
    peer_t *p = (peer_t *)base;

    if (p->state == PEER_SENDING || p->state == PEER_ACKING) {
        on_answer(p, msg);
    } else {
        peer_drop(p, WEFT_ERR_CORRUPT, "a message out of turn");
    }
}

static int peer_idle(const weft_server_peer_t *base)
{
    return ((const peer_t *)base)->state == PEER_READY;
}

/* The delta's map, for the consumer to receive the pieces into its
 * inbox. 0 when the consumer was dropped. */
static int send_delta_map(peer_t *p)
{
    if (weft_server_base_send_delta(&p->base, p->holds, p->delta_map) != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "the delta's map was not sent");
        return 0;
    }
    return 1;
}

/*
 * The leased version's transfer begins, as a delta (p->xfer set by
 * weft_nccl_peer_delta) or whole from the slot's arena: the DELTA, the
 * notice, then both sides post their groups.
 */
static void start_transfer(peer_t *p, int delta)
{
    const weft_range_list_t *list = &p->base.plan->ranges;
    const uint8_t           *arena;
    weft_status_t            status;

    p->state = PEER_SENDING; /* from here a failure is recorded for this version */
    p->early = 0;
    p->delta = delta;
    if (!delta) {
        /* The slot's arena on this GPU (the producer's own allocation,
         * or mapped through CUDA IPC into this device's context). */
        status = weft_plan_slot_base(p->base.plan, &p->base.lease, &arena);
        if (status != WEFT_OK) {
            peer_drop(p, status, "the version cannot be read here");
            return;
        }
        p->holds = 0; /* its views change from here */
        p->xfer.sizes = p->sizes;
        p->xfer.offsets = p->offsets;
        p->xfer.count = list->count;
        p->xfer.base = (uint64_t)(uintptr_t)arena;
    } else if (!send_delta_map(p)) {
        return;
    }
    if (weft_server_base_send_version(&p->base,
                           weft_deadline_ns(weft_time_ns(), p->server->base.timeout_us)) != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "the notice was not sent");
        return;
    }
    weft_nccl_xfer_start(&p->xfer);
    weft_log_debug("server: consumer \"%s\": sending version %" PRIu64 " from slot %u%s", p->base.name,
                   p->base.version, p->base.lease.slot, delta ? " as a delta" : "");
}

/* Starts sending the latest version to a ready consumer that lacks it. */
static void peer_start(weft_server_peer_t *base, uint64_t latest)
{
    peer_t *p = (peer_t *)base;

    if (p->state != PEER_READY || p->base.acked >= latest) {
        return;
    }
    /* Its delta to the latest is being made: it waits for it. */
    if (weft_nccl_delta_coming(p, latest) || !weft_server_base_lease_next(&p->base, latest)) {
        return;
    }
    start_transfer(p, weft_nccl_peer_delta(p));
}

/* A consumer just accepted: it says hello first. */
static void peer_init(weft_server_peer_t *base)
{
    peer_t *p = (peer_t *)base;

    p->server = (struct nccl_server *)base->server; /* weft_server_base_t is its first member */
    p->state = PEER_HANDSHAKE;
}

static void peer_drop_base(weft_server_peer_t *base, weft_status_t why, const char *what)
{
    peer_drop((peer_t *)base, why, what);
}

static const weft_server_peer_ops_t peer_ops = {
    .size    = sizeof(peer_t),
    .init    = peer_init,
    .views   = peer_views,
    .message = peer_message,
    .idle    = peer_idle,
    .start   = peer_start,
    .reap    = peer_reap,
    .drop    = peer_drop_base,
};

static void *server_main(void *arg)
{
    struct nccl_server *s = arg;
    struct pollfd      *fds = calloc(WEFT_SERVER_MAX_PEERS + 1, sizeof(*fds)); /* listener, peers */

    if (fds == NULL) {
        weft_log_error("server: no memory for its poll set");
        return NULL;
    }
    /* Every CUDA and NCCL call of the server runs here, on the GPU of the
     * registry's arenas. */
    if (WEFT_CUDA_CHECK(cudaSetDevice(s->device)) != WEFT_OK) {
        weft_log_error("server: cannot use GPU %d: every consumer will be refused", s->device);
        s->base.broken = 1;
    }
    while (!atomic_load(&s->base.stop)) {
        uint32_t          n, ready = 0;
        uint64_t          after = UINT64_MAX, latest;
        weft_server_base_wait_t wait = s->base.peer_count > 0 ? WEFT_SERVER_VERSION : WEFT_SERVER_SOCKETS;

        /* Communicators being made and transfers in flight are polled;
         * with every consumer ready, the next version is waited for. */
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            const peer_t *p = nccl_peer_at(s, i);

            if (p->state == PEER_INIT || p->state == PEER_SENDING || p->state == PEER_CLOSING) {
                wait = WEFT_SERVER_BUSY;
            } else if (p->state != PEER_READY && wait != WEFT_SERVER_BUSY) {
                wait = WEFT_SERVER_SOCKETS;
            }
            after = p->base.acked < after ? p->base.acked : after;
        }
        if (weft_nccl_delta_busy(s)) {
            wait = WEFT_SERVER_BUSY; /* the encode goes on between turns */
        }
        n = weft_server_base_poll_fds(&s->base, fds);
        weft_server_base_sleep(&s->base, fds, n, wait, after);
        weft_server_base_poll_events(&s->base, fds, n);
        latest = weft_server_base_latest(&s->base);
        weft_nccl_delta_refresh(s, latest);
        weft_server_base_start_versions(&s->base, latest);
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            peer_advance(nccl_peer_at(s, i));
        }
        weft_server_base_reap(&s->base);
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            peer_state_t st = nccl_peer_at(s, i)->state;
            ready += st == PEER_READY || st == PEER_SENDING || st == PEER_ACKING;
        }
        weft_server_base_set_consumers(&s->base, ready);
    }
    /* Shutting down: drop everyone (aborting their communicators), then
     * release the leases once their streams are idle. */
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        peer_drop(nccl_peer_at(s, i), WEFT_ERR_CANCELED, "the server stops");
    }
    for (int spins = 0; spins < SHUTDOWN_SPINS && s->base.peer_count > 0; spins++) {
        weft_server_base_reap(&s->base);
    }
    if (s->base.peer_count > 0) {
        weft_log_warn("server: %u consumers' streams still busy at shutdown; their leases are kept",
                      s->base.peer_count);
    }
    /* Freed here, on the streams' device. */
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        peer_free(nccl_peer_at(s, i));
    }
    /* Aborted sends still running may read the delta's device copies:
     * those are then left allocated, as the leases are kept. */
    if (s->base.peer_count == 0) {
        weft_nccl_delta_free(s);
    }
    s->base.peer_count = 0;
    free(fds);
    return NULL;
}

/* ---------------------------------------------------------- lifecycle */

/* The peers went with the thread (server_main frees them). */
static void server_free(struct nccl_server *s)
{
    weft_server_base_fini(&s->base);
    free(s);
}

static weft_status_t nccl_server_create(weft_registry_h reg, const weft_server_params_t *params,
                                        void **out)
{
    struct nccl_server    *s;
    weft_registry_stats_t rs;
    weft_status_t         status;
    const char           *why;

    if (weft_nccl_api_load(&why) != WEFT_OK) {
        weft_log_error("server: NCCL could not be loaded (libweft was built with it; this host lacks it?): %s", why);
        return WEFT_ERR_UNSUPPORTED;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    weft_server_base_init(&s->base, reg, params, WEFT_NCCL_PROTOCOL, DEFAULT_WINDOW_BYTES, &peer_ops);
    s->delta_mode = weft_delta_mode();
    if (s->base.window < WEFT_NCCL_MIN_WINDOW) {
        s->base.window = WEFT_NCCL_MIN_WINDOW;
    }
    status = weft_server_gpu_registry(reg, "nccl", "use ucx", &s->device);
    if (status == WEFT_OK) {
        status = weft_registry_get_stats(reg, &rs);
        s->slot_bytes = rs.slot_bytes;
    }
    if (status == WEFT_OK) {
        status = weft_cuda_device_uuid(s->device, s->uuid);
    }
    (void)weft_nccl_host_id(s->host_id);
    if (status == WEFT_OK) {
        status = weft_server_base_listen(&s->base, params->listen);
    }
    if (status == WEFT_OK) {
        status = weft_server_base_start(&s->base, server_main, s);
    }
    if (status != WEFT_OK) {
        server_free(s);
        return status;
    }
    weft_log_info("server: serving on port %u (nccl from GPU %d, %" PRIu64 " bytes per group, "
                  "timeout %" PRIu64 " us)",
                  s->base.port, s->device, s->base.window, s->base.timeout_us);
    *out = s;
    return WEFT_OK;
}

static void nccl_server_destroy(void *server)
{
    struct nccl_server *s = server;

    weft_server_base_join(&s->base);
    server_free(s);
}

const weft_server_ops_t weft_nccl_server_ops = {
    .name      = "nccl",
    .create    = nccl_server_create,
    .port      = weft_server_base_port_of,
    .get_stats = weft_server_base_stats_of,
    .destroy   = nccl_server_destroy,
};
