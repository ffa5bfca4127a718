/* The transport-neutral half of a server: sockets, token, consumers' records. */
#include "config.h"

#include "transport/server/server.h"

#include "transport/ctl/auth.h"
#include "transport/ctl/wire.h"

#include "common/log.h"
#include "common/time_util.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_US 30000000u
#define GOODBYE_US         100000u /* a refusal or FAILED to a peer that may be gone */
#define ACCEPT_PAUSE_NS    100000000ull /* out of descriptors: the next accept after this */

void weft_server_base_init(weft_server_base_t *s, weft_registry_h reg, const weft_server_params_t *params,
                     uint32_t protocol, uint64_t default_window,
                     const weft_server_peer_ops_t *peer_ops)
{
    s->reg = reg;
    s->peer_ops = peer_ops;
    s->listen_fd = -1;
    s->protocol = protocol;
    s->timeout_us = (params->field_mask & WEFT_SERVER_FIELD_TIMEOUT) ? params->timeout_us
                                                                      : DEFAULT_TIMEOUT_US;
    s->window = (params->field_mask & WEFT_SERVER_FIELD_WINDOW) ? params->window_bytes
                                                                 : default_window;
    snprintf(s->token, sizeof(s->token), "%s", params->token);
    atomic_init(&s->stop, 0);
    pthread_mutex_init(&s->stats_lock, NULL);
}

weft_status_t weft_server_base_listen(weft_server_base_t *s, const char *listen)
{
    const weft_status_t status = weft_auth_init(); /* before any consumer can say hello */

    return status == WEFT_OK ? weft_ctl_listen(listen, &s->listen_fd, &s->port) : status;
}

weft_status_t weft_server_base_start(weft_server_base_t *s, void *(*main)(void *), void *arg)
{
    if (pthread_create(&s->thread, NULL, main, arg) != 0) {
        weft_log_error("server: cannot start its thread");
        return WEFT_ERR_NO_MEMORY;
    }
    s->thread_started = 1;
    return WEFT_OK;
}

void weft_server_base_join(weft_server_base_t *s)
{
    if (s->thread_started) {
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
        s->thread_started = 0;
    }
}

void weft_server_base_fini(weft_server_base_t *s)
{
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
        s->listen_fd = -1;
    }
    explicit_bzero(s->token, sizeof(s->token));
    pthread_mutex_destroy(&s->stats_lock);
}

void weft_server_base_stats_add(weft_server_base_t *s, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&s->stats_lock);
    *field += n;
    pthread_mutex_unlock(&s->stats_lock);
}

void weft_server_base_set_consumers(weft_server_base_t *s, uint32_t ready)
{
    pthread_mutex_lock(&s->stats_lock);
    s->stats.consumers = ready;
    pthread_mutex_unlock(&s->stats_lock);
}

void weft_server_base_get_stats(weft_server_base_t *s, weft_server_stats_t *stats)
{
    pthread_mutex_lock(&s->stats_lock);
    *stats = s->stats;
    pthread_mutex_unlock(&s->stats_lock);
}

/*
 * 1 when a version newer than `after` came within timeout_us; 0 when none
 * came, or when one was there already: the consumers are idle although
 * it is, so starting it failed (a registry being offloaded or reloaded)
 * and it must not be spun on.
 */
static int wait_newer(weft_server_base_t *s, uint64_t after, uint64_t timeout_us)
{
    weft_lease_t lease;

    if (weft_server_base_latest(s) > after) {
        return 0;
    }
    if (weft_registry_wait(s->reg, after, timeout_us, &lease) != WEFT_OK) {
        return 0;
    }
    (void)weft_registry_release(s->reg, &lease); /* each peer leases its own */
    return 1;
}

void weft_server_base_sleep(weft_server_base_t *s, struct pollfd *fds, uint32_t n, weft_server_base_wait_t what,
                      uint64_t after)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 0};

    switch (what) {
    case WEFT_SERVER_BUSY:
        break;
    case WEFT_SERVER_SPIN:
        (void)ppoll(fds, n, &ts, NULL);
        (void)sched_yield();
        return;
    case WEFT_SERVER_VERSION:
        /* A publish wakes a futex, which poll cannot wait on: the wait is
         * on the registry, and the fds are looked at after it. A wait
         * that ended without a version is followed by a short one on the
         * fds, so that a registry that cannot be waited on (or whose
         * version cannot be started now) is not spun on. */
        if (!wait_newer(s, after, WEFT_SERVER_IDLE_WAIT_US)) {
            ts.tv_nsec = WEFT_SERVER_POLL_US * 1000L;
        }
        break;
    case WEFT_SERVER_QUIET:
        ts.tv_nsec = WEFT_SERVER_IDLE_WAIT_US * 1000L;
        break;
    case WEFT_SERVER_SOCKETS:
    default:
        ts.tv_nsec = s->peer_count > 0 ? WEFT_SERVER_POLL_US * 1000L : 1000000L;
        break;
    }
    (void)ppoll(fds, n, &ts, NULL);
}

uint16_t weft_server_base_port_of(void *server)
{
    return ((weft_server_base_t *)server)->port;
}

void weft_server_base_stats_of(void *server, weft_server_stats_t *stats)
{
    weft_server_base_get_stats(server, stats);
}

uint64_t weft_server_base_latest(weft_server_base_t *s)
{
    weft_registry_stats_t rs;

    if (weft_registry_get_stats(s->reg, &rs) != WEFT_OK) {
        return 0;
    }
    return rs.latest_version;
}

void weft_server_peer_init(weft_server_peer_t *p, weft_server_base_t *s, int fd, const char *addr)
{
    p->server = s;
    p->fd = fd;
    p->deadline = weft_deadline_ns(weft_time_ns(), s->timeout_us);
    /* A consumer between versions is not waited on by any deadline: its
     * connection going quiet (a link or host gone) must end it, so that
     * it leaves the registry's table and trainers stop waiting for it. */
    weft_ctl_dead_peer_timeout(fd, s->timeout_us);
    snprintf(p->addr, sizeof(p->addr), "%s", addr);
}

weft_status_t weft_server_base_plan(weft_server_peer_t *p, weft_transport_t transport,
                              const weft_plan_ops_t *ops, const weft_recv_view_t *views,
                              uint32_t count)
{
    weft_status_t status;
    char          reason[160];

    /* The same checks as a local plan: names, roles, dtypes, shapes,
     * overlaps. The log says which view failed. */
    status = weft_plan_create_with(p->server->reg, transport, ops, views, count, &p->plan);
    if (status != WEFT_OK) {
        snprintf(reason, sizeof(reason), "its views do not match the registry (%s)",
                 weft_status_string(status));
        weft_server_base_refuse(p, status, reason);
    }
    return status;
}

/* Registers the consumer in the registry under its name; refuses on error. */
static weft_status_t register_consumer(weft_server_peer_t *p)
{
    weft_server_base_t *s = p->server;
    weft_status_t status = weft_registry_consumer_register(s->reg, p->name, &p->consumer);

    if (status != WEFT_OK) {
        weft_server_base_refuse(p, status, "no room in the registry's consumer table");
        return status;
    }
    p->registered = 1;
    weft_server_base_stats_add(s, &s->stats.accepted, 1);
    return WEFT_OK;
}

/* The head of READY: u32 consumer id, u64 bytes per version, u64 ranges. */
static void put_ready_head(const weft_server_peer_t *p, weft_ctl_buf_t *buf)
{
    weft_ctl_put_u32(buf, p->consumer);
    weft_ctl_put_u64(buf, p->plan->bytes);
    weft_ctl_put_u64(buf, p->plan->ranges.count);
}

weft_status_t weft_server_base_send(weft_server_peer_t *p, uint32_t type, weft_ctl_buf_t *buf)
{
    if (buf->failed) {
        return WEFT_ERR_NO_MEMORY;
    }
    return weft_auth_send(p->fd, &p->session, type, buf->data, (uint32_t)buf->length,
                          weft_deadline_ns(weft_time_ns(), p->server->timeout_us));
}

weft_status_t weft_server_base_ready(weft_server_peer_t *p, const weft_ctl_buf_t *tail)
{
    const weft_server_peer_ops_t *ops = p->server->peer_ops;
    weft_ctl_buf_t                buf = {0};
    weft_status_t                 status = register_consumer(p);

    if (status != WEFT_OK) {
        ops->drop(p, status, "refused"); /* it was told */
        return status;
    }
    put_ready_head(p, &buf);
    if (tail != NULL && (tail->length != 0 || tail->failed)) {
        weft_ctl_put(&buf, tail->data, tail->length);
        buf.failed |= tail->failed;
    }
    status = weft_server_base_send(p, WEFT_CTL_READY, &buf);
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        ops->drop(p, WEFT_ERR_CONNECTION, "ready not sent");
        return WEFT_ERR_CONNECTION;
    }
    return WEFT_OK;
}

weft_status_t weft_server_base_send_delta(weft_server_peer_t *p, uint64_t holds, const weft_wire_delta_entry_t *map)
{
    weft_ctl_buf_t buf = {0};
    weft_status_t  status;

    weft_wire_put_delta(&buf, p->version, holds, map, p->plan->view_count);
    status = weft_server_base_send(p, WEFT_CTL_DELTA, &buf);
    weft_ctl_buf_free(&buf);
    return status;
}

weft_status_t weft_server_base_send_version(weft_server_peer_t *p, uint64_t deadline_ns)
{
    const weft_plan_h plan = p->plan;
    weft_wire_sums_t  sums = {0};
    weft_ctl_buf_t   buf = {0};
    weft_status_t     status = WEFT_OK;
    uint64_t          sum;

    /* The sums of the lease's version, from the registry; none where it
     * keeps none (the first view tells). */
    if (plan->view_count > 0 &&
        weft_registry_tensor_checksum(p->server->reg, &p->lease, plan->views[0].tensor, &sum) == WEFT_OK) {
        sums.known = calloc(plan->view_count, 1);
        sums.sums = calloc(plan->view_count, sizeof(*sums.sums));
        if (sums.known == NULL || sums.sums == NULL) {
            status = WEFT_ERR_NO_MEMORY;
        }
        for (uint32_t i = 0; i < plan->view_count && status == WEFT_OK; i++) {
            sums.known[i] = plan->views[i].verbatim &&
                            weft_registry_tensor_checksum(p->server->reg, &p->lease, plan->views[i].tensor,
                                                          &sums.sums[i]) == WEFT_OK;
        }
        sums.count = plan->view_count;
    }
    weft_wire_put_version(&buf, p->version, status == WEFT_OK ? &sums : NULL);
    if (status == WEFT_OK) {
        status = buf.failed ? WEFT_ERR_NO_MEMORY
                            : weft_auth_send(p->fd, &p->session, WEFT_CTL_VERSION, buf.data, (uint32_t)buf.length,
                                             deadline_ns);
    }
    weft_ctl_buf_free(&buf);
    weft_wire_sums_free(&sums);
    return status;
}

int weft_server_base_lease_next(weft_server_peer_t *p, uint64_t latest)
{
    weft_server_base_t *s = p->server;

    if (p->acked >= latest || weft_registry_acquire(s->reg, &p->lease) != WEFT_OK) {
        return 0;
    }
    if (p->lease.version <= p->acked) {
        (void)weft_registry_release(s->reg, &p->lease);
        return 0;
    }
    p->leased = 1;
    p->version = p->lease.version;
    p->leased_ns = weft_time_ns();
    p->in_place_ns = 0;
    p->deadline = weft_deadline_ns(p->leased_ns, s->timeout_us);
    return 1;
}

void weft_server_base_release(weft_server_peer_t *p)
{
    if (p->leased) {
        (void)weft_registry_release(p->server->reg, &p->lease);
        p->leased = 0;
    }
}

/* delta: the version went as a delta of delta_bytes. */
static weft_status_t ack_counted(weft_server_peer_t *p, const weft_ctl_msg_t *msg, int delta, uint64_t delta_bytes)
{
    weft_server_base_t      *s = p->server;
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    uint64_t           v = weft_ctl_get_u64(&cur);

    if (msg->type != WEFT_CTL_ACK || cur.failed || v != p->version) {
        return WEFT_ERR_CORRUPT;
    }
    /* Counted before it is recorded: whoever waits on the record
     * (weft_registry_wait_consumers) then sees it in the stats. */
    if (delta) {
        weft_server_base_stats_add(s, &s->stats.deltas_sent, 1);
        weft_server_base_stats_add(s, &s->stats.delta_bytes, delta_bytes);
    }
    weft_server_base_stats_add(s, &s->stats.versions_sent, 1);
    weft_server_base_stats_add(s, &s->stats.bytes_sent, p->plan->bytes);
    weft_server_base_stats_add(s, &s->stats.transfer_ns,
                         (p->in_place_ns != 0 ? p->in_place_ns : weft_time_ns()) - p->leased_ns);
    (void)weft_registry_consumer_received(s->reg, p->consumer, v);
    p->acked = v;
    /* A request that came while v was in flight (after one that timed
     * out) and that v answers is answered: the consumer returns v, and
     * its views must not change again until it asks. */
    if (p->wanting && p->want_after < v) {
        p->wanting = 0;
    }
    weft_server_base_release(p);
    pthread_mutex_lock(&s->stats_lock);
    if (v > s->stats.last_version) {
        s->stats.last_version = v;
    }
    pthread_mutex_unlock(&s->stats_lock);
    return WEFT_OK;
}

weft_status_t weft_server_base_ack(weft_server_peer_t *p, const weft_ctl_msg_t *msg)
{
    return ack_counted(p, msg, 0, 0);
}

weft_status_t weft_server_base_ack_delta(weft_server_peer_t *p, const weft_ctl_msg_t *msg, uint64_t delta_bytes)
{
    return ack_counted(p, msg, 1, delta_bytes);
}

weft_status_t weft_server_base_redo(weft_server_peer_t *p, const weft_ctl_msg_t *msg, uint32_t *flags)
{
    weft_server_base_t *s = p->server;
    weft_ctl_cursor_t   cur = {.data = msg->payload, .length = msg->length};
    const uint64_t      v = weft_ctl_get_u64(&cur);

    *flags = cur.at < cur.length ? weft_ctl_get_u32(&cur) : 0;
    if (msg->type != WEFT_CTL_REDO || cur.failed || cur.at != cur.length || v != p->version || !p->leased) {
        return WEFT_ERR_CORRUPT;
    }
    weft_log_warn("server: consumer \"%s\": its views did not check out after the delta of version %" PRIu64
                  "; sending it whole",
                  p->name, v);
    weft_server_base_stats_add(s, &s->stats.deltas_redone, 1);
    return WEFT_OK;
}

weft_status_t weft_server_base_want(weft_server_peer_t *p, const weft_ctl_msg_t *msg)
{
    uint64_t after, holds;

    if (weft_wire_get_want(msg, &after, &holds) != WEFT_OK) {
        return WEFT_ERR_CORRUPT;
    }
    p->wanting = 1;
    p->want_after = after;
    p->want_holds = holds;
    return WEFT_OK;
}

int weft_server_base_wants(const weft_server_peer_t *p, uint64_t latest)
{
    return p->wanting && latest > p->want_after;
}

uint64_t weft_server_base_want_floor(const weft_server_peer_t *p)
{
    if (!p->wanting) {
        return UINT64_MAX;
    }
    return p->want_after > p->acked ? p->want_after : p->acked;
}

void weft_server_base_drop(weft_server_peer_t *p, weft_status_t why, const char *what, int mid_version,
                     int tell)
{
    weft_server_base_t *s = p->server;

    if (why == WEFT_OK || why == WEFT_ERR_CANCELED) {
        weft_log_info("server: consumer \"%s\" (%s): %s", p->name, p->addr, what);
    } else {
        weft_log_warn("server: dropping consumer \"%s\" (%s): %s (%s)", p->name[0] ? p->name : "?",
                      p->addr, what, weft_status_string(why));
    }
    if (p->registered) {
        if (mid_version) {
            (void)weft_registry_consumer_failed(s->reg, p->consumer, p->version, why);
            if (tell && p->fd >= 0) {
                /* Tell it, if it can still hear: it must not wait for v. */
                weft_ctl_buf_t buf = {0};

                weft_ctl_put_u64(&buf, p->version);
                weft_ctl_put_u32(&buf, (uint32_t)(int32_t)why);
                if (!buf.failed) {
                    (void)weft_auth_send(p->fd, &p->session, WEFT_CTL_FAILED, buf.data, (uint32_t)buf.length,
                                         weft_deadline_ns(weft_time_ns(), GOODBYE_US));
                }
                weft_ctl_buf_free(&buf);
            }
        }
        (void)weft_registry_consumer_unregister(s->reg, p->consumer);
        p->registered = 0;
        /* Saying goodbye between versions is a departure, not a loss. */
        if (why != WEFT_OK) {
            weft_server_base_stats_add(s, &s->stats.dropped, 1);
        }
    }
    if (p->fd >= 0) {
        close(p->fd);
        p->fd = -1;
    }
}

void weft_server_peer_fini(weft_server_peer_t *p)
{
    weft_plan_destroy(p->plan);
    p->plan = NULL;
    weft_ctl_reader_free(&p->reader);
    weft_auth_session_end(&p->session);
}

weft_status_t weft_server_remote_post(struct weft_plan *plan, const weft_lease_t *lease)
{
    (void)plan;
    (void)lease;
    return WEFT_ERR_UNSUPPORTED;
}

/*
 * Room for a connection from addr: when addr has WEFT_SERVER_PREAUTH_PER_ADDRESS
 * connections that have not proved the token, or the table is full, the
 * oldest such connection (from addr, else from anywhere) is dropped and
 * freed. Connections that proved the token are never dropped for room.
 */
static void make_room(weft_server_base_t *s, const char *addr)
{
    weft_server_peer_t *oldest_here = NULL, *oldest = NULL;
    uint32_t           here = 0;

    for (uint32_t i = 0; i < s->peer_count; i++) {
        weft_server_peer_t *p = s->peers[i];
        if (p->authenticated || p->fd < 0) {
            continue;
        }
        if (strcmp(p->addr, addr) == 0) {
            here++;
            oldest_here = oldest_here == NULL || p->accepted_seq < oldest_here->accepted_seq ? p : oldest_here;
        }
        oldest = oldest == NULL || p->accepted_seq < oldest->accepted_seq ? p : oldest;
    }
    if (here >= WEFT_SERVER_PREAUTH_PER_ADDRESS || (s->peer_count == WEFT_SERVER_MAX_PEERS && oldest != NULL)) {
        weft_server_peer_t *victim = here >= WEFT_SERVER_PREAUTH_PER_ADDRESS ? oldest_here : oldest;
        s->peer_ops->drop(victim, WEFT_ERR_BUSY, "it had not proved the token, and a newer connection needed room");
        weft_server_base_reap(s);
    }
}

/* Takes every pending connection as a peer waiting for its hello. */
static void accept_peers(weft_server_base_t *s)
{
    for (;;) {
        char               addr[64];
        int                fd;
        weft_server_peer_t *p;

        const weft_status_t status = weft_ctl_accept(s->listen_fd, &fd, addr, sizeof(addr));

        if (status == WEFT_ERR_NO_SPACE) {
            const uint64_t now = weft_time_ns();
            s->accept_resume_ns = now + ACCEPT_PAUSE_NS;
            s->accept_failures++;
            if (now >= s->accept_log_ns) {
                weft_log_warn("server: out of file descriptors for new connections (%llu accepts failed since "
                              "the last word): they wait in the backlog; trying again every %u ms",
                              (unsigned long long)s->accept_failures, (unsigned)(ACCEPT_PAUSE_NS / 1000000));
                s->accept_failures = 0;
                s->accept_log_ns = now + 1000000000ull;
            }
            return;
        }
        if (status != WEFT_OK || fd < 0) {
            return;
        }
        make_room(s, addr);
        if (s->peer_count == WEFT_SERVER_MAX_PEERS || (p = calloc(1, s->peer_ops->size)) == NULL) {
            weft_log_error("server: no room for consumer from %s", addr);
            close(fd);
            continue;
        }
        weft_server_peer_init(p, s, fd, addr);
        p->accepted_seq = ++s->accepted;
        s->peer_ops->init(p);
        s->peers[s->peer_count++] = p;
    }
}

uint32_t weft_server_base_poll_fds(const weft_server_base_t *s, struct pollfd *fds)
{
    uint32_t n = 0;

    /* A paused listener is still in the set (fds[0] is always it), asked
     * for nothing. */
    fds[n++] = (struct pollfd){.fd = s->listen_fd,
                               .events = weft_time_ns() < s->accept_resume_ns ? 0 : POLLIN};
    for (uint32_t i = 0; i < s->peer_count; i++) {
        fds[n++] = (struct pollfd){.fd = s->peers[i]->fd, .events = POLLIN};
    }
    return n;
}

void weft_server_base_poll_events(weft_server_base_t *s, const struct pollfd *fds, uint32_t n)
{
    if (fds[0].revents & POLLIN) {
        accept_peers(s);
    }
    /* Only the peers polled: those just accepted come after them, and a
     * peer dropped meanwhile has no connection any more. */
    for (uint32_t i = 0; i + 1 < n && i < s->peer_count; i++) {
        weft_server_peer_t *p = s->peers[i];

        if (p->fd >= 0 && p->fd == fds[i + 1].fd &&
            (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) {
            weft_server_peer_read(p);
        }
    }
}

void weft_server_base_start_versions(weft_server_base_t *s, uint64_t latest)
{
    if (latest == 0) {
        return;
    }
    for (uint32_t i = 0; i < s->peer_count; i++) {
        s->peer_ops->start(s->peers[i], latest);
    }
}

void weft_server_base_reap(weft_server_base_t *s)
{
    for (uint32_t i = 0; i < s->peer_count;) {
        if (s->peer_ops->reap(s->peers[i])) {
            s->peers[i] = s->peers[--s->peer_count];
        } else {
            i++;
        }
    }
}
