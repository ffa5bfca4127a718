/*
 * The server of the ucx transport: one thread that accepts remote
 * consumers on the bootstrap port, checks their token, builds each one's
 * plan (registry tensors → the consumer's remote addresses, with the plan
 * core's checks and merged ranges), and sends every newly published
 * version to every ready consumer:
 *
 *   lease v → RMA puts of every range (in chunks, at most `window` bytes
 *   in flight per consumer) → flush the endpoint → VERSION(v) on the
 *   bootstrap connection → ACK(v) → weft_registry_consumer_received(v)
 *
 * Each consumer holds its own lease on the version it is receiving, so a
 * slow or stuck consumer never holds the others back: each gets the latest
 * version as soon as it acknowledged the one before. A consumer is dropped (its failure recorded, then its registry
 * record removed) when its endpoint fails, its connection closes, or a
 * step takes longer than the timeout; the others carry on.
 *
 * Everything below runs on the server thread except create, port, stats
 * and destroy.
 */
#include "config.h"

#include "common/log.h"
#include "common/time_util.h"
#include "transport/plan.h"
#include "ucx_common.h"

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_US   30000000u
#define DEFAULT_WINDOW_BYTES (UINT64_C(64) << 20)
#define CHUNK_BYTES          (UINT64_C(4) << 20) /* one put at most */
#define MAX_PEERS            1024u
#define POLL_MS              1       /* idle, no consumer */
#define POLL_IDLE_NS         50000L  /* idle, consumers connected */

typedef enum peer_state {
    PEER_HELLO,    /* waiting for HELLO */
    PEER_VIEWS,    /* waiting for VIEWS */
    PEER_READY,    /* idle, gets the next version */
    PEER_SENDING,  /* puts in flight */
    PEER_FLUSHING, /* flush in flight */
    PEER_ACKING,   /* VERSION sent, waiting for ACK */
    PEER_CLOSING   /* dropped; waiting for its requests to end */
} peer_state_t;

typedef struct peer_region {
    uint64_t   base, bytes;
    ucp_rkey_h rkey;
} peer_region_t;

typedef struct peer {
    struct weft_server *server;
    peer_state_t        state;
    int                 fd;
    char                addr[64];
    char                name[WEFT_CONSUMER_NAME_MAX];
    uint64_t            deadline;
    ucp_ep_h            ep;
    int                 ep_failed;
    int                 ep_err_mode; /* the endpoint reports peer failures */
    peer_region_t      *regions;
    uint32_t            region_count;
    weft_plan_h         plan;
    uint32_t            consumer;
    int                 registered;
    uint64_t            acked;   /* the last version it acknowledged */
    /* The version in flight, leased for this consumer alone. */
    weft_lease_t        lease;
    int                 leased;
    uint64_t            version;
    uint64_t            range, range_offset; /* next put */
    uint64_t            in_flight;           /* puts not completed yet */
    int                 put_failed;
    ucs_status_ptr_t    flush;
    ucs_status_ptr_t    close;
} peer_t;

struct weft_server {
    weft_registry_h reg;
    int             listen_fd;
    uint16_t        port;
    char            token[WEFT_TOKEN_MAX + 1];
    uint64_t        timeout_us, window;
    weft_ucx_t      ucx;
    ucp_address_t  *address; /* of the worker, sent to every consumer */
    size_t          address_length;
    ucp_mem_h       slot_memh[16];
    uint8_t        *slot_base[16];
    uint32_t        slot_count;

    pthread_t       thread;
    atomic_int      stop;
    int             stopping; /* the thread is shutting down: close at once */
    peer_t         *peers[MAX_PEERS];
    uint32_t        peer_count;


    pthread_mutex_t stats_lock;
    weft_server_stats_t stats;
};

/* The plan's backend for remote addresses: nothing is copied locally. */
static weft_status_t remote_post(struct weft_plan *plan, const weft_lease_t *lease)
{
    (void)plan;
    (void)lease;
    return WEFT_ERR_UNSUPPORTED;
}

static const weft_transport_ops_t remote_plan_ops = {
    .name       = "ucx",
    .src_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST),
    .dst_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_HOST),
    .post       = remote_post,
};

static void stats_add(struct weft_server *s, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&s->stats_lock);
    *field += n;
    pthread_mutex_unlock(&s->stats_lock);
}

/* ------------------------------------------------------------ dropping */

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    peer_t *p = arg;

    (void)ep;
    p->ep_failed = 1;
    weft_log_info("server: consumer \"%s\" (%s): endpoint failed: %s", p->name, p->addr,
                  ucs_status_string(status));
}

/* Drops a consumer: records its failure for the version in flight, removes
 * it from the registry, closes its endpoint and socket. */
static void peer_drop(peer_t *p, weft_status_t why, const char *what)
{
    struct weft_server *s = p->server;

    if (p->state == PEER_CLOSING) {
        return;
    }
    if (why == WEFT_OK || why == WEFT_ERR_CANCELED) {
        weft_log_info("server: consumer \"%s\" (%s): %s", p->name, p->addr, what);
    } else {
        weft_log_warn("server: dropping consumer \"%s\" (%s): %s (%s)", p->name[0] ? p->name : "?",
                      p->addr, what, weft_status_string(why));
    }
    if (p->registered) {
        int mid_version = p->state == PEER_SENDING || p->state == PEER_FLUSHING ||
                          p->state == PEER_ACKING;

        if (mid_version) {
            (void)weft_registry_consumer_failed(s->reg, p->consumer, p->version, why);
            if (!p->ep_failed && p->fd >= 0) {
                /* Tell it, if it can still hear: it must not wait for v. */
                weft_boot_buf_t buf = {0};
                weft_boot_put_u64(&buf, p->version);
                weft_boot_put_u32(&buf, (uint32_t)(int32_t)why);
                if (!buf.failed) {
                    (void)weft_boot_send(p->fd, WEFT_BOOT_FAILED, buf.data, (uint32_t)buf.length,
                                         weft_deadline_ns(weft_time_ns(), 100000));
                }
                weft_boot_buf_free(&buf);
            }
        }
        (void)weft_registry_consumer_unregister(s->reg, p->consumer);
        p->registered = 0;
        /* Saying goodbye between versions is a departure, not a loss. */
        if (why != WEFT_OK) {
            stats_add(s, &s->stats.dropped, 1);
        }
    }
    if (p->fd >= 0) {
        close(p->fd);
        p->fd = -1;
    }
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
    p->state = PEER_CLOSING;
}

static void peer_free(peer_t *p)
{
    for (uint32_t i = 0; i < p->region_count; i++) {
        if (p->regions[i].rkey != NULL) {
            ucp_rkey_destroy(p->regions[i].rkey);
        }
    }
    free(p->regions);
    weft_plan_destroy(p->plan);
    free(p);
}

/* A dropped consumer is freed once UCX gave back every request of it. */
static int peer_reap(peer_t *p)
{
    if (p->state != PEER_CLOSING || p->in_flight > 0) {
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
    if (p->leased) {
        (void)weft_registry_release(p->server->reg, &p->lease);
        p->leased = 0;
    }
    peer_free(p);
    return 1;
}

/* ----------------------------------------------------------- handshake */

static void refuse(peer_t *p, weft_status_t status, const char *reason)
{
    struct weft_server *s = p->server;

    weft_log_warn("server: refused consumer from %s: %s", p->addr, reason);
    stats_add(s, &s->stats.refused, 1); /* before the peer can hear of it */
    (void)weft_ucx_send_refused(p->fd, status, reason, weft_deadline_ns(weft_time_ns(), 100000));
    peer_drop(p, status, "refused");
}

static void on_hello(peer_t *p, const weft_boot_msg_t *msg)
{
    struct weft_server *s = p->server;
    weft_boot_cursor_t  cur = {.data = msg->payload, .length = msg->length};
    char                token[WEFT_TOKEN_MAX + 1];
    uint32_t            protocol = weft_boot_get_u32(&cur);

    weft_boot_get_str(&cur, token, sizeof(token));
    weft_boot_get_str(&cur, p->name, sizeof(p->name));
    if (msg->type != WEFT_BOOT_HELLO || cur.failed) {
        refuse(p, WEFT_ERR_CORRUPT, "a malformed hello");
        return;
    }
    if (protocol != WEFT_UCX_PROTOCOL) {
        refuse(p, WEFT_ERR_VERSION, "another protocol version");
        return;
    }
    /* Nothing is set up for a peer before its token is checked. */
    if (!weft_boot_token_equal(token, s->token)) {
        explicit_bzero(token, sizeof(token));
        refuse(p, WEFT_ERR_AUTH, "wrong token");
        return;
    }
    explicit_bzero(token, sizeof(token));
    /* The consumer connects an endpoint of its own to this worker: UCX pairs
     * it with ours, and its side then handles our failure instead of
     * aborting on it. */
    if (weft_boot_send(p->fd, WEFT_BOOT_WELCOME, s->address, (uint32_t)s->address_length,
                       weft_deadline_ns(weft_time_ns(), s->timeout_us)) != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "welcome not sent");
        return;
    }
    p->state = PEER_VIEWS;
}

/* Parses the views into weft_recv_view_t (names point into the payload). */
static weft_status_t parse_views(peer_t *p, weft_boot_cursor_t *cur, weft_recv_view_t **views_out,
                                 char (**names_out)[WEFT_TENSOR_NAME_MAX], uint32_t *count_out)
{
    uint32_t          count = weft_boot_get_u32(cur);
    weft_recv_view_t *views;
    char (*names)[WEFT_TENSOR_NAME_MAX];

    if (cur->failed || count == 0 || count > (1u << 20)) {
        return WEFT_ERR_CORRUPT;
    }
    views = calloc(count, sizeof(*views));
    names = calloc(count, sizeof(*names));
    if (views == NULL || names == NULL) {
        free(views);
        free(names);
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < count && !cur->failed; i++) {
        weft_recv_view_t *v = &views[i];

        weft_boot_get_str(cur, names[i], sizeof(names[i]));
        v->field_mask = WEFT_RECV_VIEW_FIELD_STRIDES;
        v->name = names[i];
        v->role = (weft_tensor_role_t)weft_boot_get_u32(cur);
        v->dtype = (weft_dtype_t)weft_boot_get_u32(cur);
        v->ndim = weft_boot_get_u32(cur);
        for (int d = 0; d < WEFT_TENSOR_MAX_DIMS; d++) {
            v->shape[d] = weft_boot_get_u64(cur);
        }
        for (int d = 0; d < WEFT_TENSOR_MAX_DIMS; d++) {
            v->strides[d] = weft_boot_get_u64(cur);
        }
        v->data = (void *)(uintptr_t)weft_boot_get_u64(cur);
    }
    if (cur->failed) {
        free(views);
        free(names);
        return WEFT_ERR_CORRUPT;
    }
    (void)p;
    *views_out = views;
    *names_out = names;
    *count_out = count;
    return WEFT_OK;
}

/* 1 when every range of the plan lies inside one registered region. */
static int ranges_in_regions(const peer_t *p)
{
    const weft_range_list_t *list = &p->plan->ranges;

    for (uint64_t i = 0; i < list->count; i++) {
        uint64_t dst = (uint64_t)(uintptr_t)list->ranges[i].dst, found = 0;

        for (uint32_t r = 0; r < p->region_count && !found; r++) {
            found = dst >= p->regions[r].base && list->ranges[i].bytes <= p->regions[r].bytes &&
                    dst - p->regions[r].base <= p->regions[r].bytes - list->ranges[i].bytes;
        }
        if (!found) {
            return 0;
        }
    }
    return 1;
}

static peer_region_t *region_of(peer_t *p, uint64_t dst)
{
    for (uint32_t r = 0; r < p->region_count; r++) {
        if (dst >= p->regions[r].base && dst - p->regions[r].base < p->regions[r].bytes) {
            return &p->regions[r];
        }
    }
    return NULL;
}

static void on_views(peer_t *p, const weft_boot_msg_t *msg)
{
    struct weft_server *s = p->server;
    weft_boot_cursor_t  cur = {.data = msg->payload, .length = msg->length};
    weft_recv_view_t   *views = NULL;
    char (*names)[WEFT_TENSOR_NAME_MAX] = NULL;
    uint32_t            view_count = 0, address_length;
    const void         *address;
    weft_status_t       status;
    char                reason[160];

    if (msg->type != WEFT_BOOT_VIEWS) {
        refuse(p, WEFT_ERR_CORRUPT, "views expected");
        return;
    }
    address = weft_boot_get_blob(&cur, &address_length);
    p->region_count = weft_boot_get_u32(&cur);
    if (cur.failed || p->region_count == 0 || p->region_count > (1u << 20)) {
        refuse(p, WEFT_ERR_CORRUPT, "malformed views");
        return;
    }
    p->regions = calloc(p->region_count, sizeof(*p->regions));
    if (p->regions == NULL) {
        refuse(p, WEFT_ERR_NO_MEMORY, "no memory");
        return;
    }
    status = WEFT_OK;
    for (uint32_t r = 0; r < p->region_count && status == WEFT_OK; r++) {
        uint32_t    rkey_length;
        const void *rkey;

        p->regions[r].base = weft_boot_get_u64(&cur);
        p->regions[r].bytes = weft_boot_get_u64(&cur);
        rkey = weft_boot_get_blob(&cur, &rkey_length);
        if (cur.failed) {
            status = WEFT_ERR_CORRUPT;
            break;
        }
        if (r == 0) {
            /* The endpoint first: rkeys are unpacked on it. */
            ucp_ep_params_t ep_params = {
                .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                              UCP_EP_PARAM_FIELD_ERR_HANDLER,
                .address = address,
                .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                .err_handler = {.cb = ep_error, .arg = p},
            };
            ucs_status_t created = ucp_ep_create(s->ucx.worker, &ep_params, &p->ep);

            p->ep_err_mode = created == UCS_OK;

            /* Shared-memory transports cannot report a peer's failure;
             * without that mode the bootstrap connection and the timeout
             * still catch a consumer that dies. */
            if (created == UCS_ERR_UNREACHABLE) {
                ep_params.field_mask &= ~(uint64_t)(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                                    UCP_EP_PARAM_FIELD_ERR_HANDLER);
                created = ucp_ep_create(s->ucx.worker, &ep_params, &p->ep);
                if (created == UCS_OK) {
                    weft_log_info("server: consumer \"%s\": its transport cannot report peer "
                                  "failures; relying on the bootstrap connection and timeouts",
                                  p->name);
                }
            }
            status = weft_ucx_status(created, "connecting to a consumer");
            if (status != WEFT_OK) {
                break;
            }
        }
        status = weft_ucx_status(ucp_ep_rkey_unpack(p->ep, rkey, &p->regions[r].rkey),
                                 "unpacking a consumer's key");
    }
    if (status == WEFT_OK) {
        status = parse_views(p, &cur, &views, &names, &view_count);
    }
    if (status != WEFT_OK) {
        refuse(p, status, status == WEFT_ERR_CORRUPT ? "malformed views or keys"
                                                     : "cannot reach it or use its memory keys");
        return;
    }
    /* The same checks as a local plan: names, roles, dtypes, shapes,
     * overlaps. The log says which view failed. */
    status = weft_plan_create_with(s->reg, WEFT_TRANSPORT_UCX, &remote_plan_ops, views, view_count,
                                   &p->plan);
    free(views);
    free(names);
    if (status != WEFT_OK) {
        snprintf(reason, sizeof(reason), "its views do not match the registry (%s)",
                 weft_status_string(status));
        refuse(p, status, reason);
        return;
    }
    if (!ranges_in_regions(p)) {
        refuse(p, WEFT_ERR_INVALID_PARAM, "a view lies outside the memory it registered");
        return;
    }
    status = weft_registry_consumer_register(s->reg, p->name, &p->consumer);
    if (status != WEFT_OK) {
        refuse(p, status, "no room in the registry's consumer table");
        return;
    }
    p->registered = 1;
    stats_add(s, &s->stats.accepted, 1);
    {
        weft_boot_buf_t buf = {0};
        weft_boot_put_u32(&buf, p->consumer);
        weft_boot_put_u64(&buf, p->plan->bytes);
        weft_boot_put_u64(&buf, p->plan->ranges.count);
        status = buf.failed ? WEFT_ERR_NO_MEMORY
                            : weft_boot_send(p->fd, WEFT_BOOT_READY, buf.data, (uint32_t)buf.length,
                                             weft_deadline_ns(weft_time_ns(), s->timeout_us));
        weft_boot_buf_free(&buf);
    }
    if (status != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "ready not sent");
        return;
    }
    p->state = PEER_READY;
    weft_log_info("server: consumer \"%s\" (%s) ready: %u tensors, %" PRIu64 " bytes in %" PRIu64
                  " ranges",
                  p->name, p->addr, p->plan->view_count, p->plan->bytes, p->plan->ranges.count);
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

/* Posts puts until the window is full or every range is posted. */
static void peer_post(peer_t *p)
{
    struct weft_server      *s = p->server;
    const weft_range_list_t *list = &p->plan->ranges;
    const uint8_t           *arena = s->slot_base[p->lease.slot];
    uint64_t                 max_in_flight = s->window / CHUNK_BYTES ? s->window / CHUNK_BYTES : 1;

    while (p->range < list->count && p->in_flight < max_in_flight && !p->put_failed) {
        const weft_copy_range_t *r = &list->ranges[p->range];
        uint64_t                 left = r->bytes - p->range_offset;
        uint64_t                 n = left < CHUNK_BYTES ? left : CHUNK_BYTES;
        uint64_t                 dst = (uint64_t)(uintptr_t)r->dst + p->range_offset;
        peer_region_t           *region = region_of(p, dst);
        ucp_request_param_t      param = {
                 .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                 UCP_OP_ATTR_FIELD_MEMH,
                 .cb.send = put_done,
                 .user_data = p,
                 .memh = s->slot_memh[p->lease.slot],
        };
        ucs_status_ptr_t req;

        req = ucp_put_nbx(p->ep, arena + r->src + p->range_offset, n, dst, region->rkey, &param);
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

/* Advances one consumer's transfer of the version in flight. */
static void peer_advance(peer_t *p)
{
    struct weft_server *s = p->server;

    /* Only puts and flushes need the endpoint. Once the notice is out, a
     * consumer that acks and leaves fails its endpoint too: its ack, its
     * goodbye or the end of the bootstrap connection decides. */
    if (p->ep_failed && (p->state == PEER_SENDING || p->state == PEER_FLUSHING)) {
        peer_drop(p, WEFT_ERR_CONNECTION, "its endpoint failed");
        return;
    }
    if ((p->state == PEER_SENDING || p->state == PEER_FLUSHING || p->state == PEER_ACKING ||
         p->state == PEER_HELLO || p->state == PEER_VIEWS) &&
        weft_time_ns() > p->deadline) {
        peer_drop(p, WEFT_ERR_TIMEOUT, "no progress within the timeout");
        return;
    }
    if (p->state == PEER_SENDING) {
        peer_post(p);
        if (p->put_failed) {
            peer_drop(p, WEFT_ERR_CONNECTION, "a put failed");
            return;
        }
        if (p->range == p->plan->ranges.count && p->in_flight == 0) {
            ucp_request_param_t param = {0};

            /* Every put done locally; the flush makes them done remotely. */
            p->flush = ucp_ep_flush_nbx(p->ep, &param);
            if (UCS_PTR_IS_ERR(p->flush)) {
                p->flush = NULL;
                peer_drop(p, WEFT_ERR_CONNECTION, "the flush failed");
                return;
            }
            p->state = PEER_FLUSHING;
            weft_log_debug("server: consumer \"%s\": version %" PRIu64 " posted, flushing", p->name,
                           p->version);
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
        /* Every byte of v is in the consumer's memory: now tell it. */
        if (weft_ucx_send_u64(p->fd, WEFT_BOOT_VERSION, p->version,
                              weft_deadline_ns(weft_time_ns(), s->timeout_us)) != WEFT_OK) {
            peer_drop(p, WEFT_ERR_CONNECTION, "the notice was not sent");
            return;
        }
        p->state = PEER_ACKING;
        weft_log_debug("server: consumer \"%s\": version %" PRIu64 " flushed, notified", p->name,
                       p->version);
    }
}

static void on_ack(peer_t *p, const weft_boot_msg_t *msg)
{
    struct weft_server *s = p->server;
    weft_boot_cursor_t  cur = {.data = msg->payload, .length = msg->length};
    uint64_t            v = weft_boot_get_u64(&cur);

    if (msg->type != WEFT_BOOT_ACK || cur.failed || v != p->version) {
        peer_drop(p, WEFT_ERR_CORRUPT, "an unexpected message instead of the ack");
        return;
    }
    /* Counted before it is recorded: whoever waits on the record sees it. */
    stats_add(s, &s->stats.versions_sent, 1);
    stats_add(s, &s->stats.bytes_sent, p->plan->bytes);
    (void)weft_registry_consumer_received(s->reg, p->consumer, v);
    p->acked = v;
    p->state = PEER_READY;
    (void)weft_registry_release(s->reg, &p->lease);
    p->leased = 0;
    pthread_mutex_lock(&s->stats_lock);
    if (v > s->stats.last_version) {
        s->stats.last_version = v;
    }
    pthread_mutex_unlock(&s->stats_lock);
}

/* Reads what a consumer sent, in whatever state it is. */
static void peer_read(peer_t *p)
{
    weft_boot_msg_t msg;
    weft_status_t   status;

    status = weft_boot_recv(p->fd, &msg, weft_deadline_ns(weft_time_ns(), p->server->timeout_us));
    if (status != WEFT_OK) {
        peer_drop(p, WEFT_ERR_CONNECTION, "its connection closed");
        return;
    }
    if (msg.type == WEFT_BOOT_BYE) {
        free(msg.payload);
        /* In the middle of a version it gave up on it: that is a failure. */
        peer_drop(p, p->state == PEER_READY ? WEFT_OK : WEFT_ERR_CANCELED,
                  "it left in the middle of a version");
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

/* Starts sending the latest version to a ready consumer that lacks it. */
static void peer_start(struct weft_server *s, peer_t *p, uint64_t latest)
{
    if (p->state != PEER_READY || p->acked >= latest) {
        return;
    }
    if (p->ep_failed) {
        peer_drop(p, WEFT_ERR_CONNECTION, "its endpoint failed");
        return;
    }
    if (weft_registry_acquire(s->reg, &p->lease) != WEFT_OK) {
        return; /* offloaded or changing: look again soon */
    }
    if (p->lease.version <= p->acked) {
        (void)weft_registry_release(s->reg, &p->lease);
        return;
    }
    p->leased = 1;
    p->state = PEER_SENDING;
    p->version = p->lease.version;
    p->range = p->range_offset = 0;
    p->put_failed = 0;
    p->deadline = weft_deadline_ns(weft_time_ns(), s->timeout_us);
    weft_log_debug("server: consumer \"%s\": sending version %" PRIu64 " from slot %u", p->name,
                   p->version, p->lease.slot);
}

/* Every ready consumer that lacks the latest version gets it now. */
static void start_versions(struct weft_server *s)
{
    weft_registry_stats_t rs;

    if (weft_registry_get_stats(s->reg, &rs) != WEFT_OK || rs.latest_version == 0) {
        return;
    }
    for (uint32_t i = 0; i < s->peer_count; i++) {
        peer_start(s, s->peers[i], rs.latest_version);
    }
}

/* Frees the dropped consumers whose requests are over. */
static void reap_peers(struct weft_server *s)
{
    for (uint32_t i = 0; i < s->peer_count;) {
        if (peer_reap(s->peers[i])) {
            s->peers[i] = s->peers[--s->peer_count];
        } else {
            i++;
        }
    }
}

static void accept_peers(struct weft_server *s)
{
    for (;;) {
        char    addr[64];
        int     fd;
        peer_t *p;

        if (weft_boot_accept(s->listen_fd, &fd, addr, sizeof(addr)) != WEFT_OK || fd < 0) {
            return;
        }
        if (s->peer_count == MAX_PEERS || (p = calloc(1, sizeof(*p))) == NULL) {
            weft_log_error("server: no room for consumer from %s", addr);
            close(fd);
            continue;
        }
        p->server = s;
        p->fd = fd;
        p->state = PEER_HELLO;
        p->deadline = weft_deadline_ns(weft_time_ns(), s->timeout_us);
        snprintf(p->addr, sizeof(p->addr), "%s", addr);
        s->peers[s->peer_count++] = p;
    }
}

static void *server_main(void *arg)
{
    struct weft_server *s = arg;
    struct pollfd      *fds = calloc(MAX_PEERS + 2, sizeof(*fds)); /* UCX, listener, peers */

    if (fds == NULL) {
        weft_log_error("server: no memory for its poll set");
        return NULL;
    }
    while (!atomic_load(&s->stop)) {
        uint32_t n = 0;
        int      busy = 0;

        for (uint32_t i = 0; i < s->peer_count; i++) {
            busy |= s->peers[i]->state == PEER_SENDING || s->peers[i]->state == PEER_FLUSHING;
        }
        /* Sleep only when UCX has nothing to do either: its fd wakes us. */
        if (!busy) {
            busy = !weft_ucx_arm(&s->ucx);
        }
        fds[n++] = (struct pollfd){.fd = s->ucx.efd, .events = POLLIN};

        fds[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        for (uint32_t i = 0; i < s->peer_count; i++) {
            fds[n++] = (struct pollfd){.fd = s->peers[i]->fd, .events = POLLIN};
        }
        /* Puts in flight need progress, not sleep. Idle, it looks for a new
         * version every POLL_IDLE_NS while consumers are connected (a
         * publish wakes a futex, which poll cannot wait on). */
        {
            struct timespec ts = {.tv_sec = 0,
                                  .tv_nsec = busy ? 0 : s->peer_count > 0 ? POLL_IDLE_NS : POLL_MS * 1000000L};
            (void)ppoll(fds, n, &ts, NULL);
        }
        weft_ucx_progress(&s->ucx);
        if (fds[1].revents & POLLIN) {
            accept_peers(s);
        }
        for (uint32_t i = 0; i + 2 < n && i < s->peer_count; i++) {
            peer_t *p = s->peers[i];

            if (p->fd >= 0 && p->fd == fds[i + 2].fd &&
                (fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) {
                peer_read(p);
            }
        }
        start_versions(s);
        for (uint32_t i = 0; i < s->peer_count; i++) {
            peer_advance(s->peers[i]);
        }
        weft_ucx_progress(&s->ucx);
        reap_peers(s);
        {
            uint32_t ready = 0;
            for (uint32_t i = 0; i < s->peer_count; i++) {
                peer_state_t st = s->peers[i]->state;
                ready += st != PEER_HELLO && st != PEER_VIEWS && st != PEER_CLOSING;
            }
            pthread_mutex_lock(&s->stats_lock);
            s->stats.consumers = ready;
            pthread_mutex_unlock(&s->stats_lock);
        }
    }
    /* Shutting down: drop everyone, let UCX finish, release the leases. */
    s->stopping = 1;
    for (uint32_t i = 0; i < s->peer_count; i++) {
        peer_drop(s->peers[i], WEFT_ERR_CANCELED, "the server stops");
    }
    for (int spins = 0; spins < 100000 && s->peer_count > 0; spins++) {
        weft_ucx_progress(&s->ucx);
        reap_peers(s);
    }
    free(fds);
    return NULL;
}

/* ---------------------------------------------------------- lifecycle */

static void server_free(struct weft_server *s)
{
    for (uint32_t i = 0; i < s->slot_count; i++) {
        if (s->slot_memh[i] != NULL) {
            (void)ucp_mem_unmap(s->ucx.context, s->slot_memh[i]);
        }
    }
    for (uint32_t i = 0; i < s->peer_count; i++) {
        peer_free(s->peers[i]);
    }
    if (s->address != NULL) {
        ucp_worker_release_address(s->ucx.worker, s->address);
    }
    weft_ucx_close(&s->ucx);
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
    }
    explicit_bzero(s->token, sizeof(s->token));
    pthread_mutex_destroy(&s->stats_lock);
    free(s);
}

WEFT_API weft_status_t weft_server_create(weft_registry_h reg, const weft_server_params_t *params,
                                          weft_server_h *out)
{
    const uint64_t        known = WEFT_SERVER_PARAM_TIMEOUT | WEFT_SERVER_PARAM_WINDOW;
    struct weft_server   *s;
    weft_registry_stats_t rs;
    weft_status_t         status;

    if (reg == NULL || params == NULL || out == NULL || params->listen == NULL ||
        params->token == NULL || (params->field_mask & ~known) ||
        params->transport != WEFT_TRANSPORT_UCX) {
        weft_log_error("server: invalid argument (registry, params with transport ucx, listen and "
                       "token are required)");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (strlen(params->token) == 0 || strlen(params->token) > WEFT_TOKEN_MAX) {
        weft_log_error("server: the token must be 1..%d bytes", WEFT_TOKEN_MAX);
        return WEFT_ERR_INVALID_PARAM;
    }
    status = weft_registry_get_stats(reg, &rs);
    if (status != WEFT_OK) {
        return status;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    s->reg = reg;
    s->listen_fd = -1;
    s->timeout_us = (params->field_mask & WEFT_SERVER_PARAM_TIMEOUT) ? params->timeout_us : DEFAULT_TIMEOUT_US;
    s->window = (params->field_mask & WEFT_SERVER_PARAM_WINDOW) ? params->window_bytes : DEFAULT_WINDOW_BYTES;
    if (s->window < CHUNK_BYTES) {
        s->window = CHUNK_BYTES;
    }
    snprintf(s->token, sizeof(s->token), "%s", params->token);
    pthread_mutex_init(&s->stats_lock, NULL);
    s->slot_count = rs.slot_count;

    status = weft_ucx_open(&s->ucx, "server");
    if (status == WEFT_OK) {
        status = weft_ucx_status(ucp_worker_get_address(s->ucx.worker, &s->address,
                                                        &s->address_length),
                                 "ucp_worker_get_address");
    }
    /* The slots are registered once: every put reads from them. */
    for (uint32_t i = 0; i < s->slot_count && status == WEFT_OK; i++) {
        void                *base;
        uint64_t             bytes;
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                 UCP_MEM_MAP_PARAM_FIELD_LENGTH};

        status = weft_registry_slot_memory(reg, i, &base, &bytes);
        if (status == WEFT_ERR_UNSUPPORTED) {
            weft_log_error("server: the ucx transport serves host registries only for now");
            break;
        }
        if (status == WEFT_OK) {
            mp.address = base;
            mp.length = bytes;
            s->slot_base[i] = base;
            status = weft_ucx_status(ucp_mem_map(s->ucx.context, &mp, &s->slot_memh[i]),
                                     "registering a registry slot");
        }
    }
    if (status == WEFT_OK) {
        status = weft_boot_listen(params->listen, &s->listen_fd, &s->port);
    }
    if (status == WEFT_OK && pthread_create(&s->thread, NULL, server_main, s) != 0) {
        status = WEFT_ERR_NO_MEMORY;
    }
    if (status != WEFT_OK) {
        server_free(s);
        return status;
    }
    weft_log_info("server: serving on port %u (ucx, window %" PRIu64 " bytes, timeout %" PRIu64 " us)",
                  s->port, s->window, s->timeout_us);
    *out = s;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_server_port(weft_server_h s, uint16_t *port)
{
    if (s == NULL || port == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    *port = s->port;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_server_get_stats(weft_server_h s, weft_server_stats_t *stats)
{
    if (s == NULL || stats == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&s->stats_lock);
    *stats = s->stats;
    pthread_mutex_unlock(&s->stats_lock);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_server_destroy(weft_server_h s)
{
    if (s == NULL) {
        return WEFT_OK;
    }
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    server_free(s);
    return WEFT_OK;
}
