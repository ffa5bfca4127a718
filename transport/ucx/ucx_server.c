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
 * bounded ring gets each version in rounds (plan/rounds.h): puts of a
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

const weft_plan_ops_t weft_ucx_remote_plan_ops = {
    .name       = "ucx",
    .src_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST) | WEFT_MEMORY_BIT(WEFT_MEMORY_CUDA),
    /* As the server sees them: the consumer stages device views itself. */
    .dst_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST),
    .post       = weft_server_remote_post,
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
    struct pollfd     *fds = calloc(WEFT_SERVER_MAX_PEERS + 3, sizeof(*fds));

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
            s->base.broken = 1;
        }
    }
    while (!atomic_load(&s->base.stop)) {
        uint32_t          n, ready = 0;
        uint64_t          after = UINT64_MAX, latest;
        weft_server_base_wait_t wait = s->base.peer_count > 0 ? WEFT_SERVER_VERSION : WEFT_SERVER_SOCKETS;

        /* Puts in flight need progress, not sleep, lanes that just got a
         * version are looked at (LANES_SPIN_NS) and a fresh notice's ack
         * is looked for (ACK_SPIN_NS); with every consumer ready, the
         * next version is waited for on the registry for those that ask
         * (UCX's events then wait up to WEFT_SERVER_IDLE_WAIT_US), and with
         * none asking only the sockets are (QUIET). */
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            const peer_t  *p = peer_at(s, i);
            const uint64_t now = weft_time_ns();

            /* A delta's puts are the server thread's own, lanes or not. */
            if ((p->state == PEER_SENDING && (p->lanes == NULL || p->delta)) || p->state == PEER_FLUSHING ||
                (p->state == PEER_ACKING && now - p->notified_ns < ACK_SPIN_NS)) {
                wait = WEFT_SERVER_BUSY;
            } else if (p->state == PEER_SENDING && p->lanes_ns < LANES_SPIN_NS &&
                       now - p->sending_ns < LANES_SPIN_NS) {
                /* The lanes need the CPUs more than this look does. */
                wait = wait == WEFT_SERVER_BUSY ? wait : WEFT_SERVER_SPIN;
            } else if (p->state != PEER_READY && wait != WEFT_SERVER_BUSY && wait != WEFT_SERVER_SPIN) {
                wait = WEFT_SERVER_SOCKETS;
            }
            if (p->state == PEER_READY && weft_server_base_want_floor(&p->base) < after) {
                after = weft_server_base_want_floor(&p->base);
            }
        }
        if (wait == WEFT_SERVER_VERSION && after == UINT64_MAX) {
            wait = WEFT_SERVER_QUIET;
        }
        /* A delta being encoded is this thread's work. */
        if (weft_ucx_delta_busy(s)) {
            wait = WEFT_SERVER_BUSY;
        }
        /* Sleep only when UCX has nothing to do either: its fd wakes us. */
        if (wait != WEFT_SERVER_BUSY && wait != WEFT_SERVER_SPIN && !weft_ucx_arm(&s->ucx)) {
            wait = WEFT_SERVER_BUSY;
        }
        /* A lane that finished a job (a consumer's puts waited on in
         * SOCKETS) wakes the poll through its eventfd. */
        fds[0] = (struct pollfd){.fd = s->ucx.efd, .events = POLLIN};
        n = 1 + weft_server_base_poll_fds(&s->base, fds + 1);
        if (s->lanes != NULL) {
            fds[n] = (struct pollfd){.fd = weft_ucx_lanes_fd(s->lanes), .events = POLLIN};
        }
        weft_server_base_sleep(&s->base, fds, n + (s->lanes != NULL), wait, after);
        if (s->lanes != NULL) {
            weft_ucx_lanes_drain(s->lanes);
        }
        weft_ucx_progress(&s->ucx);
        weft_server_base_poll_events(&s->base, fds + 1, n - 1);
        /* One reading of the latest version for the delta cache and the
         * offers: one published between two readings would otherwise be
         * offered before its delta was begun, and go whole. */
        latest = weft_server_base_latest(&s->base);
        weft_ucx_delta_refresh(s, latest);
        weft_server_base_start_versions(&s->base, latest);
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            weft_ucx_peer_advance(peer_at(s, i));
        }
        weft_ucx_progress(&s->ucx);
        weft_server_base_reap(&s->base);
        for (uint32_t i = 0; i < s->base.peer_count; i++) {
            peer_state_t st = peer_at(s, i)->state;
            ready += st != PEER_HANDSHAKE && st != PEER_PROBING && st != PEER_CLOSING;
        }
        weft_server_base_set_consumers(&s->base, ready);
    }
    /* Shutting down: drop everyone, let UCX finish, release the leases. */
    s->stopping = 1;
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        weft_ucx_peer_drop(peer_at(s, i), WEFT_ERR_CANCELED, "the server stops");
    }
    for (int spins = 0; spins < 100000 && s->base.peer_count > 0; spins++) {
        weft_ucx_progress(&s->ucx);
        weft_server_base_reap(&s->base);
    }
    /* Nothing runs on the lanes from here: what they still hold of a
     * consumer goes with it below, their endpoints with their workers. */
    if (s->lanes != NULL) {
        weft_ucx_lanes_stop(s->lanes);
    }
    /* What is left is freed here, where its streams' GPU is current. */
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        weft_server_base_release(&peer_at(s, i)->base);
        weft_ucx_peer_free(peer_at(s, i));
    }
    s->base.peer_count = 0;
    weft_ucx_delta_free(s);
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
    weft_server_base_fini(&s->base);
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
    weft_server_base_init(&s->base, reg, params, WEFT_UCX_PROTOCOL, DEFAULT_WINDOW_BYTES, &weft_ucx_peer_ops);
    if (s->base.window < CHUNK_BYTES) {
        s->base.window = CHUNK_BYTES;
    }
    s->slot_count = rs.slot_count;
    s->slot_bytes = rs.slot_bytes;
    s->memory = arenas.memory;
    s->device = arenas.device;
    s->delta_mode = weft_delta_mode();

    /* The parameters and the address first: a bad one is the caller's
     * error, whatever UCX would say of registering the slots. */
    if (s->memory != WEFT_MEMORY_CUDA) {
        const weft_ucx_server_params_t none = {0};
        const weft_ucx_server_params_t *own = (params->field_mask & WEFT_SERVER_FIELD_TRANSPORT)
                                                  ? (const weft_ucx_server_params_t *)params->transport_params
                                                  : &none;

        if (own->field_mask & ~(uint64_t)WEFT_UCX_SERVER_FIELD_LANES) {
            weft_log_error("server: weft_ucx_server_params_t has unknown field_mask bits 0x%" PRIx64,
                           own->field_mask & ~(uint64_t)WEFT_UCX_SERVER_FIELD_LANES);
            status = WEFT_ERR_INVALID_PARAM;
        } else {
            status = weft_ucx_lanes_count_for((own->field_mask & WEFT_UCX_SERVER_FIELD_LANES) != 0, own->lanes,
                                              &lanes);
        }
    }
    if (status == WEFT_OK) {
        status = weft_server_base_listen(&s->base, params->listen);
    }
    if (status == WEFT_OK) {
        status = weft_ucx_open(&s->ucx, "server", lanes > 1);
    }
    if (status == WEFT_OK) {
        status = weft_ucx_deliver_refuse(s->ucx.worker);
    }
    if (status == WEFT_OK) {
        status = weft_ucx_status(ucp_worker_get_address(s->ucx.worker, &s->address,
                                                        &s->address_length),
                                 "ucp_worker_get_address");
    }
    /* WELCOME carries the worker's address: the consumer connects an
     * endpoint of its own to it, which UCX pairs with ours, and its side
     * then handles our failure instead of aborting on it. */
    s->base.welcome = s->address;
    s->base.welcome_length = (uint32_t)s->address_length;
    if (status == WEFT_OK && s->memory == WEFT_MEMORY_CUDA) {
        status = check_gpu_registry(s);
    } else if (status == WEFT_OK) {
        status = register_host_slots(s, reg);
    }
    /* Each lane may have its share of the window in flight. */
    if (status == WEFT_OK && lanes > 1) {
        uint64_t puts = s->base.window / LANE_PIECE_BYTES / lanes;

        status = weft_ucx_lanes_create(&s->ucx, lanes, LANE_PIECE_BYTES, puts ? puts : 1, NULL,
                                       &s->lanes);
    }
    if (status == WEFT_OK) {
        status = weft_server_base_start(&s->base, server_main, s);
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

    weft_server_base_join(&s->base);
    server_free(s);
}

const weft_server_ops_t weft_ucx_server_ops = {
    .name      = "ucx",
    .transport_params = 1,
    .create    = ucx_server_create,
    .port      = weft_server_base_port_of,
    .get_stats = weft_server_base_stats_of,
    .destroy   = ucx_server_destroy,
};
