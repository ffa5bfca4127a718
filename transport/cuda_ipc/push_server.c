/*
 * The server of the cuda_ipc push mode (push.h): one thread, current
 * device the registry's GPU, in the producer's process. It accepts local
 * consumers on the bootstrap port (token; their allocations mapped
 * through CUDA IPC; views checked as weft_plan_create does; consumer
 * registered) and copies every newly published version into each ready
 * consumer's views, once that consumer asked for one:
 *
 *   WANT(a) → (v > a published) lease v → weft_plan_copy (the cuda_ipc plan's kernel and copy
 *   engines, into the mapped views, waited for) → VERSION(v) → ACK(v) →
 *   consumer_received(v)
 *
 * Copies run one consumer after the other on this thread: on one GPU
 * each already moves the bytes at HBM speed, and a consumer's copy
 * cannot hang on that consumer (its memory stays mapped here until we
 * close it, even when its process died). A consumer whose connection
 * closes, or that does not ack within the timeout, is dropped: a version
 * in flight is recorded as its failure, its mappings are closed, then
 * its connection. A leaving consumer (BYE) waits for that close, so its
 * memory is never written after weft_remote_close() returned.
 *
 * A consumer that exported an inbox and holds the version it last
 * acknowledged may get the next one as a delta (push_server_delta.c):
 * its entries copied into the inbox, then DELTA and VERSION; it applies
 * and checks them on its GPU and ACKs, or answers REDO, and the version
 * (still leased) is copied in whole.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/log.h"
#include "common/time_util.h"
#include "push.h"
#include "push_server.h"
#include "transport/plan/plan.h"
#include "transport/core/desc.h"
#include "transport/core/view_layout.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>


static peer_t *peer_at(const struct push_server *s, uint32_t i)
{
    return (peer_t *)s->base.peers[i];
}

/* ------------------------------------------------------------ dropping */

/* Closes what we mapped of the consumer; its plan goes first (its
 * streams are synchronized, so no copy into them runs any more). */
static void peer_unmap(peer_t *p)
{
    weft_push_delta_peer_fini(p); /* the inbox is one of the mappings */
    weft_plan_destroy(p->base.plan);
    p->base.plan = NULL;
    for (uint32_t i = 0; i < p->mapped_count; i++) {
        if (p->mapped[i] != NULL) {
            (void)WEFT_CUDA_CHECK(cudaIpcCloseMemHandle(p->mapped[i]));
        }
    }
    free(p->mapped);
    p->mapped = NULL;
    p->mapped_count = 0;
}

static void peer_drop(peer_t *p, weft_status_t why, const char *what)
{
    if (p->state == PEER_CLOSING) {
        return;
    }
    /* Copies are synchronous: nothing of ours reads the slot or writes
     * its views now. Unmapped before the connection closes, which is what
     * a leaving consumer waits for. */
    weft_server_base_release(&p->base);
    peer_unmap(p);
    weft_server_base_drop(&p->base, why, what, p->state == PEER_ACKING, 1);
    p->state = PEER_CLOSING;
}

static int peer_reap(weft_server_peer_t *base)
{
    peer_t *p = (peer_t *)base;

    if (p->state != PEER_CLOSING) {
        return 0;
    }
    weft_server_peer_fini(&p->base);
    free(p);
    return 1;
}

/* ----------------------------------------------------------- handshake */

/* One of the consumer's allocations: its range there, our mapping here. */
typedef struct allocation {
    uint64_t base, bytes;
    uint8_t *here;
} allocation_t;

/* Bytes of the mapping that begins at `here`; 0 when the driver cannot
 * tell (logged) or its allocation begins elsewhere. */
static uint64_t mapped_bytes(const void *here)
{
    uint64_t base = 0, bytes = 0;

    if (weft_cuda_allocation_range(here, "cuda_ipc server: a consumer's mapped allocation", &base, &bytes) !=
            WEFT_OK ||
        base != (uint64_t)(uintptr_t)here) {
        return 0;
    }
    return bytes;
}

/* Reads the allocation table and maps each allocation, each no smaller
 * than declared. *reason on error. */
static weft_status_t map_allocations(peer_t *p, weft_ctl_cursor_t *cur, allocation_t **out,
                                     uint32_t *count, const char **reason)
{
    uint32_t      n = weft_ctl_get_u32(cur);
    allocation_t *allocs;

    *reason = "malformed views";
    if (cur->failed || n == 0 || n > WEFT_CUDA_IPC_MAX_ALLOCS) {
        return WEFT_ERR_CORRUPT;
    }
    allocs = calloc(n, sizeof(*allocs));
    p->mapped = calloc(n, sizeof(*p->mapped));
    if (allocs == NULL || p->mapped == NULL) {
        free(allocs);
        *reason = "out of memory";
        return WEFT_ERR_NO_MEMORY;
    }
    *out = allocs;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t           length = 0;
        const void        *handle = weft_ctl_get_blob(cur, &length);
        cudaIpcMemHandle_t ipc;

        allocs[i].base = weft_ctl_get_u64(cur);
        allocs[i].bytes = weft_ctl_get_u64(cur);
        if (cur->failed || length != WEFT_CUDA_IPC_HANDLE_BYTES || allocs[i].bytes == 0 ||
            allocs[i].base + allocs[i].bytes < allocs[i].base) {
            return WEFT_ERR_CORRUPT;
        }
        _Static_assert(sizeof(ipc) == WEFT_CUDA_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t size");
        memcpy(&ipc, handle, sizeof(ipc));
        /* Opened into this thread's device (the registry's); another GPU's
         * memory is reached through peer access. Fails for a handle of
         * this very process, whose consumers pull with weft_plan_*. */
        if (WEFT_CUDA_CHECK(cudaIpcOpenMemHandle(&p->mapped[i], ipc,
                                                 cudaIpcMemLazyEnablePeerAccess)) != WEFT_OK) {
            p->mapped[i] = NULL;
            *reason = "its memory cannot be mapped in the server's process (another node, a GPU "
                      "the server cannot see, or the server's own process)";
            return WEFT_ERR_CUDA;
        }
        p->mapped_count = i + 1;
        allocs[i].here = p->mapped[i];
        /* The copies write up to the declared size: a consumer that
         * declares more than it exported would have them write past our
         * mapping and fault this process's context, every consumer's. */
        if (mapped_bytes(p->mapped[i]) < allocs[i].bytes) {
            *reason = "an allocation declared larger than the memory its handle exports";
            return WEFT_ERR_CORRUPT;
        }
    }
    *count = n;
    return WEFT_OK;
}

/* The allocation that holds [addr, addr + bytes), or NULL. */
static const allocation_t *allocation_of(const allocation_t *allocs, uint32_t n, uint64_t addr,
                                         uint64_t bytes)
{
    for (uint32_t i = 0; i < n; i++) {
        if (addr >= allocs[i].base && bytes <= allocs[i].bytes &&
            addr - allocs[i].base <= allocs[i].bytes - bytes) {
            return &allocs[i];
        }
    }
    return NULL;
}

/*
 * Points each view at our mapping of its allocation. Every byte a view
 * reaches must lie in one allocation the consumer exported: the copies
 * write there. (Views are checked one by one: two allocations may touch,
 * and a span merged across them has no single mapping here.)
 */
static weft_status_t translate_views(weft_recv_view_t *views, uint32_t count,
                                     const allocation_t *allocs, uint32_t n, const char **reason)
{
    for (uint32_t v = 0; v < count; v++) {
        uint64_t            addr = (uint64_t)(uintptr_t)views[v].data, span = 0;
        const allocation_t *a;

        if (weft_view_span(&views[v], &span) != 0) {
            continue; /* weft_server_base_plan refuses it, naming it */
        }
        if (span == 0) {
            views[v].data = allocs[0].here; /* no byte: never copied */
            continue;
        }
        a = allocation_of(allocs, n, addr, span);
        if (a == NULL) {
            *reason = "its views reach memory outside the allocations it exported";
            return WEFT_ERR_INVALID_PARAM;
        }
        views[v].data = a->here + (addr - a->base);
    }
    return WEFT_OK;
}

/*
 * Views on another GPU than the registry's: the copies run on the views'
 * GPU (the cuda_ipc backend's streams) and its kernel reads the slot on
 * ours, which needs peer access from there. Mapping the consumer's memory
 * enabled only the other direction.
 */
static weft_status_t reach_registry_from(peer_t *p, const char **reason)
{
    struct cudaPointerAttributes attr;
    int                          device = p->server->device, saved, can = 0;
    weft_status_t                status;
    cudaError_t                  err;

    status = WEFT_CUDA_CHECK(cudaPointerGetAttributes(&attr, p->mapped[0]));
    if (status == WEFT_OK) {
        p->device = attr.device;
    }
    if (status != WEFT_OK || attr.device == device) {
        return status;
    }
    status = WEFT_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, attr.device, device));
    if (status == WEFT_OK && !can) {
        *reason = "its GPU cannot reach the registry's GPU (no peer access)";
        return WEFT_ERR_UNSUPPORTED;
    }
    if (status == WEFT_OK) {
        status = weft_cuda_enter(attr.device, &saved);
    }
    if (status != WEFT_OK) {
        *reason = "the server cannot use its GPU";
        return status;
    }
    err = cudaDeviceEnablePeerAccess(device, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError(); /* enabled for an earlier consumer */
        err = cudaSuccess;
    }
    status = WEFT_CUDA_CHECK(err);
    weft_cuda_leave(attr.device, saved);
    if (status != WEFT_OK) {
        *reason = "peer access from its GPU to the registry's failed";
    }
    return status;
}

static weft_status_t peer_views(weft_server_peer_t *base, const weft_ctl_msg_t *msg)
{
    peer_t             *p = (peer_t *)base;
    weft_ctl_cursor_t  cur = {.data = msg->payload, .length = msg->length};
    weft_recv_view_t   *views = NULL;
    char (*names)[WEFT_TENSOR_NAME_MAX] = NULL;
    allocation_t       *allocs = NULL;
    uint32_t            view_count = 0, alloc_count = 0;
    uint64_t            inbox_addr = 0, inbox_bytes = 0;
    uint8_t            *inbox = NULL;
    const char         *reason = "malformed views";
    weft_status_t       status;

    status = map_allocations(p, &cur, &allocs, &alloc_count, &reason);
    if (status == WEFT_OK) {
        reason = "malformed views";
        inbox_addr = weft_ctl_get_u64(&cur);
        inbox_bytes = weft_ctl_get_u64(&cur);
        status = weft_wire_get_views(&cur, WEFT_MEMORY_CUDA, &views, &names, &view_count);
    }
    if (status == WEFT_OK) {
        status = translate_views(views, view_count, allocs, alloc_count, &reason);
    }
    if (status == WEFT_OK && inbox_bytes != 0) {
        /* Its inbox lies in one allocation it exported, as its views do. */
        const allocation_t *a = allocation_of(allocs, alloc_count, inbox_addr, inbox_bytes);

        if (a == NULL) {
            reason = "its inbox lies outside the allocations it exported";
            status = WEFT_ERR_INVALID_PARAM;
        } else {
            inbox = a->here + (inbox_addr - a->base);
        }
    }
    if (status == WEFT_OK) {
        status = reach_registry_from(p, &reason);
    }
    free(allocs);
    if (status != WEFT_OK) {
        free(views);
        free(names);
        weft_server_base_refuse_drop(&p->base, status, reason);
        return status;
    }
    /* The real cuda_ipc backend, whose views are our mappings. */
    status = weft_server_base_plan(&p->base, WEFT_TRANSPORT_CUDA_IPC, &weft_cuda_ipc_plan_ops, views,
                             view_count);
    free(views);
    free(names);
    if (status == WEFT_OK && inbox != NULL && weft_push_delta_pays(p->server, p->device) &&
        weft_push_delta_peer_init(p, inbox, inbox_bytes) != WEFT_OK) {
        weft_log_warn("server: consumer \"%s\": no memory for its deltas: every version goes whole", p->base.name);
        weft_push_delta_peer_fini(p);
    }
    if (status != WEFT_OK) {
        peer_drop(p, status, "refused");
        return status;
    }
    status = weft_server_base_ready(&p->base, NULL);
    if (status != WEFT_OK) {
        return status;
    }
    p->state = PEER_READY;
    weft_log_info("server: consumer \"%s\" (%s) ready: %u tensors, %" PRIu64 " bytes in %" PRIu64
                  " ranges, %u allocations mapped (cuda_ipc push, GPU %d), deltas into an inbox of %" PRIu64
                  " bytes",
                  p->base.name, p->base.addr, p->base.plan->view_count, p->base.plan->bytes,
                  p->base.plan->ranges.count, p->mapped_count, p->device, p->inbox != NULL ? p->inbox_bytes : 0);
    return WEFT_OK;
}

/* ------------------------------------------------------------ versions */

/*
 * VERSION for the version in flight, every byte of it (or of its delta)
 * in place (the notice carries the version's checksums, read under the
 * lease). 0 when the consumer was dropped.
 */
static int send_version(peer_t *p)
{
    if (weft_server_base_send_version(&p->base, weft_deadline_ns(weft_time_ns(), p->server->base.timeout_us)) !=
        WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "the notice was not sent");
        return 0;
    }
    return 1;
}

/* The leased version copied whole into the consumer's views, then its
 * notice; the lease is no longer needed. */
static void copy_whole(peer_t *p)
{
    weft_status_t status;

    p->delta = 0;
    p->holds = 0; /* its views change from here */
    status = weft_plan_copy(p->base.plan, &p->base.lease);
    p->base.in_place_ns = weft_time_ns();
    p->state = PEER_ACKING; /* from here a failure is this version's */
    if (status != WEFT_OK) {
        peer_drop(p, status, "the copy into its views failed");
        return;
    }
    if (send_version(p)) {
        weft_server_base_release(&p->base);
    }
}

/* The delta's entries are in the consumer's inbox (weft_push_peer_delta):
 * DELTA, then VERSION. The lease stays until the answer: a REDO is
 * answered with the version whole from it. */
static void send_delta(peer_t *p)
{
    p->delta = 1;
    p->base.in_place_ns = 0; /* in place once applied: its ack tells */
    p->state = PEER_ACKING; /* from here a failure is this version's */
    if (weft_server_base_send_delta(&p->base, p->holds, p->delta_map) != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "the delta's map was not sent");
        return;
    }
    (void)send_version(p);
}

/* Its views did not check out after the delta: the version in flight
 * goes again, whole. */
static void on_redo(peer_t *p, const weft_ctl_msg_t *msg)
{
    uint32_t flags;

    if (!p->delta || weft_server_base_redo(&p->base, msg, &flags) != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CORRUPT, "a REDO out of turn");
        return;
    }
    if (weft_delta_cache_redone(&p->server->delta, p->base.name, flags, &p->redos)) {
        p->inbox = NULL; /* no more deltas for it */
    }
    p->base.deadline = weft_deadline_ns(weft_time_ns(), p->server->base.timeout_us);
    copy_whole(p);
}

/* Its ack: it holds the version now, the base of its next delta. */
static void on_ack(peer_t *p, const weft_ctl_msg_t *msg)
{
    const int delta = p->delta;

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

/* A message from a consumer past its handshake. */
static void peer_message(weft_server_peer_t *base, const weft_ctl_msg_t *msg)
{
    peer_t *p = (peer_t *)base;

    /* WANT(a, holds): it waits in weft_remote_receive for a version > a;
     * also while it has not read the answer to a request that timed out
     * (the new request stands after that one's ack). */
    if (msg->type == WEFT_CTL_WANT && (p->state == PEER_READY || p->state == PEER_ACKING)) {
        if (weft_server_base_want(&p->base, msg) != WEFT_OK) {
            peer_drop(p, WEFT_ERR_CORRUPT, "a malformed request");
        }
        return;
    }
    switch (p->state) {
    case PEER_ACKING:
        if (msg->type == WEFT_CTL_REDO) {
            on_redo(p, msg);
        } else {
            on_ack(p, msg);
        }
        break;
    default:
        peer_drop(p, WEFT_ERR_CORRUPT, "a message out of turn");
        break;
    }
}

static int peer_idle(const weft_server_peer_t *base)
{
    return ((const peer_t *)base)->state == PEER_READY;
}

/* Sends the latest version to a ready consumer that asked and lacks it:
 * as a delta where it can take one, else copied whole. */
static void peer_start(weft_server_peer_t *base, uint64_t latest)
{
    peer_t *p = (peer_t *)base;

    if (p->state != PEER_READY || !weft_server_base_wants(&p->base, latest)) {
        return;
    }
    /* Its delta to the latest is being made: it waits for it. */
    if (weft_push_delta_coming(p, latest) || !weft_server_base_lease_next(&p->base, latest)) {
        return;
    }
    /* This version answers the request; one that comes while it is in
     * flight stands (a REDO's second sending does not answer it). */
    p->base.wanting = 0;
    if (weft_push_peer_delta(p)) {
        send_delta(p);
    } else {
        copy_whole(p);
    }
}

static void peer_check_deadline(peer_t *p)
{
    if (p->state != PEER_READY && p->state != PEER_CLOSING && weft_time_ns() > p->base.deadline) {
        peer_drop(p, WEFT_ERR_TIMEOUT,
                  p->state == PEER_ACKING ? "no ack within the timeout" : "no handshake within the timeout");
    }
}

static void peer_init(weft_server_peer_t *base)
{
    peer_t *p = (peer_t *)base;

    p->server = (struct push_server *)base->server; /* weft_server_base_t is its first member */
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

/*
 * What the thread waits for: with every consumer ready, a version newer
 * than the oldest one a consumer asked past (*after), or, when none
 * asks, only their sockets; otherwise (a handshake, an ack) the sockets
 * and new versions now and then. Copies are synchronous: busy only while
 * a delta is encoded.
 */
static weft_server_base_wait_t what_to_wait_for(const struct push_server *s, uint64_t *after)
{
    uint64_t floor = UINT64_MAX;

    if (s->base.peer_count == 0) {
        return WEFT_SERVER_SOCKETS;
    }
    if (weft_push_delta_busy(s)) {
        return WEFT_SERVER_BUSY; /* the encode goes on between turns */
    }
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        const peer_t *p = peer_at(s, i);

        if (p->state != PEER_READY) {
            return WEFT_SERVER_SOCKETS;
        }
        if (weft_server_base_want_floor(&p->base) < floor) {
            floor = weft_server_base_want_floor(&p->base);
        }
    }
    *after = floor;
    return floor == UINT64_MAX ? WEFT_SERVER_QUIET : WEFT_SERVER_VERSION;
}

static void *server_main(void *arg)
{
    struct push_server *s = arg;
    struct pollfd      *fds = calloc(WEFT_SERVER_MAX_PEERS + 1, sizeof(*fds)); /* listener, peers */

    if (fds == NULL) {
        weft_log_error("server: no memory for its poll set");
        return NULL;
    }
    /* Every CUDA call of the server runs here: mappings are opened into
     * the registry's GPU's context. */
    if (WEFT_CUDA_CHECK(cudaSetDevice(s->device)) != WEFT_OK) {
        weft_log_error("server: cannot use GPU %d: every consumer will be refused", s->device);
        s->base.broken = 1;
    }
    while (!atomic_load(&s->base.stop)) {
        uint32_t n, ready = 0;
        uint64_t after = 0, latest;

        n = weft_server_base_poll_fds(&s->base, fds);
        weft_server_base_sleep(&s->base, fds, n, what_to_wait_for(s, &after), after);
        weft_server_base_poll_events(&s->base, fds, n);
        latest = weft_server_base_latest(&s->base);
        weft_push_delta_refresh(s, latest);
        weft_server_base_start_versions(&s->base, latest);
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            peer_check_deadline(peer_at(s, i));
        }
        weft_server_base_reap(&s->base);
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            ready += peer_at(s, i)->state == PEER_READY || peer_at(s, i)->state == PEER_ACKING;
        }
        weft_server_base_set_consumers(&s->base, ready);
    }
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        peer_drop(peer_at(s, i), WEFT_ERR_CANCELED, "the server stops");
    }
    weft_server_base_reap(&s->base);
    weft_push_delta_free(s); /* no copy reads it: each was waited for */
    free(fds);
    return NULL;
}

/* ---------------------------------------------------------- lifecycle */

static void server_free(struct push_server *s)
{
    weft_server_base_fini(&s->base);
    free(s);
}

static weft_status_t push_server_create(weft_registry_h reg, const weft_server_params_t *params,
                                        void **out)
{
    struct push_server   *s = calloc(1, sizeof(*s));
    weft_registry_stats_t rs;
    weft_status_t         status;

    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    weft_server_base_init(&s->base, reg, params, WEFT_CUDA_IPC_PUSH_PROTOCOL, 0, &peer_ops);
    s->delta_mode = weft_delta_mode();
    status = weft_server_gpu_registry(reg, "cuda_ipc", "consumers copy it with the host transport",
                                     &s->device);
    if (status == WEFT_OK) {
        status = weft_registry_get_stats(reg, &rs);
        s->slot_bytes = rs.slot_bytes;
    }
    if (status == WEFT_OK) {
        /* A consumer takes an inbox for deltas where its GPU is another. */
        status = weft_cuda_device_uuid(s->device, s->uuid);
        s->base.welcome = s->uuid;
        s->base.welcome_length = WEFT_CUDA_UUID_BYTES;
    }
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
    weft_log_info("server: serving on port %u (cuda_ipc push from GPU %d, timeout %" PRIu64 " us)",
                  s->base.port, s->device, s->base.timeout_us);
    *out = s;
    return WEFT_OK;
}

static void push_server_destroy(void *server)
{
    struct push_server *s = server;

    weft_server_base_join(&s->base);
    server_free(s);
}

const weft_server_ops_t weft_cuda_ipc_server_ops = {
    .name      = "cuda_ipc",
    .create    = push_server_create,
    .port      = weft_server_base_port_of,
    .get_stats = weft_server_base_stats_of,
    .destroy   = push_server_destroy,
};
