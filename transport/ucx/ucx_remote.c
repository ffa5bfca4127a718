/*
 * The remote consumer of the ucx transport: connects to a server over the
 * bootstrap connection, registers the memory of its views with UCX and
 * sends their keys, then receives versions. The bytes arrive by RMA puts
 * the server makes; the notice of version v comes on the bootstrap
 * connection only after the server's flush completed, so when it is read
 * every byte of v is in place.
 *
 * Host views get receive lanes (ucx_lanes.h) where WEFT_UCX_LANES gives
 * more than one: threads with workers of their own, sent in VIEWS, that
 * the server's put lanes connect to, so that puts UCX emulates (shared
 * memory into our own memory, TCP) are copied in by several threads.
 *
 * Device views (all on one GPU) take the path ucx_gpu.h picks: direct,
 * their memory registered with UCX as CUDA memory; or staged, a pinned
 * host ring of WEFT_UCX_STAGE_BYTES at most registered and sent instead:
 * the server puts each version there in rounds (plan/rounds.h), each
 * round is copied into the views and answered before the server reuses
 * its half, and the version is acknowledged only after its last round's
 * copy completed.
 *
 * Views also get an inbox (remote/remote_delta.h), one more registered
 * region in the memory of the others (host memory for host views and
 * staged device views, device memory for device views registered
 * directly): a server that sends deltas puts there, instead of into the
 * views (or the ring), the delta of each tensor from the version the
 * views hold; the DELTA before the notice says where each lies, and the
 * views are patched and checked at the notice (device views on their
 * GPU). A delta that does not check out
 * is answered with REDO, and the version comes again whole.
 */
#include "config.h"

#include "common/env_config.h"
#include "common/log.h"
#include "common/time_util.h"
#include "transport/remote/remote.h"
#include "transport/remote/remote_delta.h"
#include "transport/core/desc.h"
#include "transport/core/view_memory.h"
#include "transport/ctl/wire.h"
#include "ucx_common.h"
#include "ucx_cuda.h"
#include "ucx_sandbox.h"
#include "ucx_gpu.h"
#include "ucx_deliver.h"
#include "ucx_lanes.h"
#include "ucx_memory.h"
#include "transport/plan/rounds.h"

#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RECEIVE_POLL_MS    100 /* at most, between looks at the deadline */
/* After UCX last had work, keep driving it this long before sleeping: a
 * version arrives over TCP or shared memory as many small events, and a
 * sleep and wake-up between each costs more than the event. */
#define RECEIVE_SPIN_NS    UINT64_C(200000)
/* After SENDING (the server began putting a version), keep awake this long
 * for the notice, when the version before came within it: a sleep and
 * wake-up on the notice cost 50-185 us on the H200 host, about a tenth of
 * a 16 MiB version over shared memory. A transfer that takes longer (TCP)
 * needs the CPUs for itself: awake for 2 ms every time, this thread alone
 * slowed 16 MiB versions between two namespaces of one host from 2.5-2.7
 * to 3.4-4.0 ms. */
#define SENDING_SPIN_NS    UINT64_C(1000000)

struct ucx_remote {
    weft_remote_base_t   base;           /* the bootstrap connection */
    weft_ucx_t       ucx;
    void            *server_address; /* the server's worker, from WELCOME */
    uint32_t         server_address_length;
    ucp_ep_h         ep;             /* ours to the server: see connect_back */
    int              ep_failed;
    int              ep_err_mode;    /* the endpoint reports peer failures */
    weft_wire_span_t *regions; /* contiguous stretches of the views, registered once */
    ucp_mem_h        *memh;    /* one per region */
    uint32_t         region_count;
    uint32_t         consumer; /* the server's registry consumer id */
    uint64_t         bytes;    /* per version */
    weft_memory_kind_t memory; /* of the views */
    int              device;   /* their GPU; -1 for host views */
    weft_memory_kind_t region_memory; /* of the registered regions */
    weft_ucx_stage_t *stage;   /* staged device views; NULL otherwise */
    weft_ucx_lanes_t *lanes;   /* host views: receive lanes; NULL with one */
    /* Host views in memory UCX allocated (ucx_memory.h): its context, its
     * one region; NULL otherwise. */
    struct weft_ucx_memory *borrowed;
    /* Staged: the rounds of the version arriving (plan/rounds.h). */
    uint64_t         round_version;
    uint32_t         round_next, round_total;
    /* When the last SENDING came (0: none since the notice), and how long
     * from it to the notice the version before took. */
    uint64_t         sending_at, sending_took;
    weft_remote_delta_t delta; /* its inbox; delta.inbox NULL: every version whole */
    /* Bytes the server delivers as active messages (ucx_deliver.h): what
     * landed, and what its last SENT says it sent in all. */
    weft_ucx_deliver_sink_t sink;
    uint64_t         sent_bytes;
};

#define STAGE_BYTES_MIN (UINT64_C(128) << 10)

static weft_status_t register_regions(struct ucx_remote *r)
{
    r->memh = calloc(r->region_count + 1, sizeof(*r->memh));
    if (r->memh == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    if (r->borrowed != NULL) {
        r->memh[0] = r->borrowed->memh; /* the memory's, not ours to unmap */
        return WEFT_OK;
    }
    for (uint32_t i = 0; i < r->region_count; i++) {
        weft_status_t status =
            weft_ucx_mem_map(r->ucx.context, (void *)(uintptr_t)r->regions[i].base,
                             r->regions[i].bytes, r->region_memory, &r->memh[i],
                             "registering receive memory");
        if (status != WEFT_OK) {
            return status;
        }
    }
    return WEFT_OK;
}

/* HELLO → WELCOME (the server's worker address), or the server's refusal. */
static weft_status_t say_hello(struct ucx_remote *r, const weft_remote_params_t *p, uint64_t deadline)
{
    weft_ctl_msg_t msg;
    weft_status_t   status = weft_remote_base_hello(&r->base, WEFT_UCX_PROTOCOL, p, deadline, &msg);

    if (status != WEFT_OK) {
        return status;
    }
    if (msg.length == 0) {
        weft_log_error("remote: %s answered with message %u", r->base.server, msg.type);
        free(msg.payload);
        return WEFT_ERR_CORRUPT;
    }
    r->server_address = msg.payload; /* kept: the worker address */
    r->server_address_length = msg.length;
    return WEFT_OK;
}

static void server_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    struct ucx_remote *r = arg;

    (void)ep;
    r->ep_failed = 1;
    weft_log_info("remote: the endpoint to %s failed: %s", r->base.server, ucs_status_string(status));
}

/*
 * An endpoint of our own to the server's worker, with peer failure
 * handling (WEFT_UCX_ERR_MODE=peer). UCX pairs it with the one the server
 * makes to us; without it the endpoint UCX makes for the server's puts has
 * no error handling, and a server that dies in the middle of a put can
 * abort this process (seen with UCX 1.13 over TCP): the price of
 * WEFT_UCX_ERR_MODE=none.
 */
static weft_status_t connect_back(struct ucx_remote *r)
{
    /* A server that holds the token could still send a worker address
     * that UCX dies on: UCX sees it first in the sandbox. */
    const weft_ucx_blob_t address = {.data = r->server_address, .length = r->server_address_length};
    char                  why[160];
    weft_status_t         status = weft_ucx_sandbox_check(&address, 1, NULL, 0,
                                                          weft_deadline_ns(weft_time_ns(), r->base.timeout_us),
                                                          why, sizeof(why));

    if (status != WEFT_OK) {
        weft_log_error("remote: %s's worker address: %s", r->base.server, why);
        return status;
    }
    return weft_ucx_connect(&r->ucx, r->server_address, server_ep_error, r,
                            "connecting to the server's worker", &r->ep, &r->ep_err_mode);
}

/* VIEWS → READY, or the server's refusal. */
static weft_status_t send_views(struct ucx_remote *r, const weft_recv_view_t *views, size_t count,
                                uint64_t deadline)
{
    weft_ctl_buf_t buf = {0};
    weft_ctl_msg_t msg;
    ucp_address_t  *address = NULL;
    size_t          address_length = 0;
    weft_status_t   status;

    status = weft_ucx_status(ucp_worker_get_address(r->ucx.worker, &address, &address_length),
                             "ucp_worker_get_address");
    if (status != WEFT_OK) {
        return status;
    }
    weft_ctl_put_blob(&buf, address, (uint32_t)address_length);
    ucp_worker_release_address(r->ucx.worker, address);
    weft_ctl_put_u32(&buf, r->region_count);
    for (uint32_t i = 0; i < r->region_count && status == WEFT_OK; i++) {
        void  *rkey;
        size_t rkey_length;

        status = weft_ucx_status(ucp_rkey_pack(r->ucx.context, r->memh[i], &rkey, &rkey_length),
                                 "ucp_rkey_pack");
        if (status == WEFT_OK) {
            weft_ctl_put_u64(&buf, r->regions[i].base);
            weft_ctl_put_u64(&buf, r->regions[i].bytes);
            weft_ctl_put_blob(&buf, rkey, (uint32_t)rkey_length);
            ucp_rkey_buffer_release(rkey);
        }
    }
    weft_wire_put_views(&buf, views, count);
    weft_ctl_put_u64(&buf, r->stage != NULL ? weft_ucx_stage_half(r->stage) : 0);
    weft_ctl_put_u32(&buf, r->lanes != NULL ? weft_ucx_lanes_count(r->lanes) : 0);
    for (uint32_t i = 0; r->lanes != NULL && i < weft_ucx_lanes_count(r->lanes); i++) {
        const void *lane_address;
        size_t      lane_address_length;

        weft_ucx_lanes_address(r->lanes, i, &lane_address, &lane_address_length);
        weft_ctl_put_blob(&buf, lane_address, (uint32_t)lane_address_length);
    }
    weft_ctl_put_u64(&buf, (uint64_t)(uintptr_t)r->delta.inbox);
    weft_ctl_put_u64(&buf, r->delta.inbox_bytes);
    if (status == WEFT_OK) {
        status = weft_remote_base_views(&r->base, &buf, deadline, &msg);
    }
    weft_ctl_buf_free(&buf);
    if (status == WEFT_OK) {
        weft_ctl_cursor_t cur = {.data = msg.payload, .length = msg.length};

        r->consumer = weft_ctl_get_u32(&cur);
        r->bytes = weft_ctl_get_u64(&cur);
        if (cur.failed) {
            status = WEFT_ERR_CORRUPT;
        }
        free(msg.payload);
    }
    return status;
}

static void remote_free(struct ucx_remote *r)
{
    weft_remote_base_disconnect(&r->base);
    if (r->ep != NULL) {
        /* Forcing needs peer failure handling; without it, flush. */
        weft_ucx_close_ep(&r->ucx, r->ep, r->ep_err_mode, weft_deadline_ns(weft_time_ns(), 1000000));
    }
    free(r->server_address);
    /* The lanes' workers go before the memory they receive into. */
    weft_ucx_lanes_destroy(r->lanes);
    for (uint32_t i = 0; r->borrowed == NULL && r->memh != NULL && i < r->region_count; i++) {
        if (r->memh[i] != NULL) {
            (void)ucp_mem_unmap(r->ucx.context, r->memh[i]);
        }
    }
    free(r->memh);
    free(r->regions);
    weft_remote_delta_fini(&r->delta); /* its registration went above */
    if (r->borrowed != NULL) {
        weft_ucx_close_worker(&r->ucx); /* the context is the memory's */
        weft_ucx_memory_release(r->borrowed);
    } else {
        weft_ucx_close(&r->ucx);
    }
    weft_ucx_stage_destroy(r->stage);
    free(r);
}

/*
 * The half of the staging ring for views spanning `spans` bytes:
 * WEFT_UCX_STAGE_BYTES split in two, no more than the views need.
 */
static weft_status_t stage_half(uint64_t spans, uint64_t *half)
{
    uint64_t      bytes;
    weft_status_t status = weft_config_size(WEFT_CONFIG_UCX_STAGE_BYTES, &bytes);

    if (status != WEFT_OK || bytes < STAGE_BYTES_MIN) {
        weft_log_error("remote: WEFT_UCX_STAGE_BYTES must be a size of at least %" PRIu64 " bytes",
                       STAGE_BYTES_MIN);
        return WEFT_ERR_INVALID_PARAM;
    }
    *half = bytes / 2 < spans ? bytes / 2 : spans;
    if (*half == 0) {
        *half = 1;
    }
    return WEFT_OK;
}

/*
 * What the consumer registers and tells the server: the views' spans, or
 * for staged device views the staging ring (the views are sent as they
 * are: the server cuts its puts into rounds through the ring).
 */
static weft_status_t receive_memory(struct ucx_remote *r, const weft_recv_view_t *views,
                                    size_t count)
{
    weft_ucx_gpu_path_t path = WEFT_UCX_GPU_STAGED;
    uint64_t            spans = 0, half;
    weft_status_t       status;

    r->region_memory = WEFT_MEMORY_HOST;
    status = weft_wire_view_spans(views, count, &r->regions, &r->region_count);
    if (status == WEFT_OK && r->borrowed != NULL) {
        /* Checked before anything was asked of the server (memory_views). */
        r->regions[0] = (weft_wire_span_t){.base = (uint64_t)(uintptr_t)r->borrowed->base,
                                           .bytes = r->borrowed->bytes};
        r->region_count = 1;
        return WEFT_OK;
    }
    if (status != WEFT_OK || r->memory != WEFT_MEMORY_CUDA) {
        return status;
    }
    status = weft_ucx_gpu_path(r->ucx.context, "remote", &path);
    if (status != WEFT_OK) {
        return status;
    }
    if (path == WEFT_UCX_GPU_DIRECT) {
        r->region_memory = WEFT_MEMORY_CUDA;
        return WEFT_OK;
    }
    for (uint32_t i = 0; i < r->region_count; i++) {
        spans += r->regions[i].bytes;
    }
    status = stage_half(spans, &half);
    if (status == WEFT_OK) {
        status = weft_ucx_stage_create(r->regions, r->region_count, half, &r->stage);
    }
    if (status != WEFT_OK) {
        return status;
    }
    r->regions[0] = weft_ucx_stage_area(r->stage);
    r->region_count = 1;
    return WEFT_OK;
}

/* The inbox, registered as one more region (after the views'). */
static weft_status_t add_inbox_region(struct ucx_remote *r)
{
    weft_wire_span_t *regions = realloc(r->regions, (r->region_count + 1) * sizeof(*regions));

    if (regions == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    regions[r->region_count++] = (weft_wire_span_t){.base = (uint64_t)(uintptr_t)r->delta.inbox,
                                                    .bytes = r->delta.inbox_bytes};
    r->regions = regions;
    return WEFT_OK;
}

/*
 * Views in memory from weft_ucx_memory_alloc: host views, all inside it.
 * The consumer then uses the memory until it is freed (remote_free).
 */
static weft_status_t memory_views(struct ucx_remote *r, const weft_ucx_remote_params_t *p,
                                  const weft_recv_view_t *views, size_t count)
{
    weft_wire_span_t *spans = NULL;
    uint32_t          span_count = 0;
    weft_status_t     status;

    if (p->memory == NULL) {
        weft_log_error("remote: WEFT_UCX_REMOTE_FIELD_MEMORY with no memory");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (r->memory == WEFT_MEMORY_CUDA) {
        weft_log_error("remote: memory from weft_ucx_memory_alloc is host memory; the views are "
                       "device memory");
        return WEFT_ERR_INVALID_PARAM;
    }
    /* Taken first: from here weft_ucx_memory_free refuses. */
    if (!weft_ucx_memory_use(p->memory)) {
        weft_log_error("remote: the memory given is being freed");
        return WEFT_ERR_BUSY;
    }
    status = weft_wire_view_spans(views, count, &spans, &span_count);
    if (status == WEFT_OK && !weft_ucx_memory_holds(p->memory, spans, span_count)) {
        weft_log_error("remote: a view lies outside the memory given (%p, %" PRIu64 " bytes)",
                       (void *)p->memory->base, p->memory->bytes);
        status = WEFT_ERR_INVALID_PARAM;
    }
    free(spans);
    if (status == WEFT_OK) {
        r->borrowed = p->memory;
    } else {
        weft_ucx_memory_release(p->memory);
    }
    return status;
}

static weft_status_t ucx_remote_connect(const weft_remote_params_t *p,
                                        const weft_recv_view_t *views, size_t count, void **out)
{
    struct ucx_remote      *r;
    uint64_t                deadline;
    int                     saved = -1, entered = 0;
    uint32_t                lanes = 1;
    weft_status_t           status;
    /* The transport's own parameters, or none (core/api.c checked that a
     * flagged pointer is given). */
    const weft_ucx_remote_params_t  none = {0};
    const weft_ucx_remote_params_t *own = (p->field_mask & WEFT_REMOTE_FIELD_TRANSPORT)
                                              ? (const weft_ucx_remote_params_t *)p->transport_params
                                              : &none;

    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    deadline = weft_deadline_ns(weft_time_ns(), weft_remote_base_init(&r->base, p));
    status = weft_views_memory(views, count, "remote", &r->memory, &r->device);
    /* The parameters before the server is asked anything. */
    if (status == WEFT_OK && (own->field_mask & ~(uint64_t)(WEFT_UCX_REMOTE_FIELD_LANES | WEFT_UCX_REMOTE_FIELD_MEMORY))) {
        weft_log_error("remote: weft_ucx_remote_params_t has unknown field_mask bits 0x%" PRIx64,
                       own->field_mask & ~(uint64_t)(WEFT_UCX_REMOTE_FIELD_LANES | WEFT_UCX_REMOTE_FIELD_MEMORY));
        status = WEFT_ERR_INVALID_PARAM;
    }
    if (status == WEFT_OK && r->memory != WEFT_MEMORY_CUDA) {
        status = weft_ucx_lanes_count_for((own->field_mask & WEFT_UCX_REMOTE_FIELD_LANES) != 0, own->lanes,
                                          &lanes);
    }
    if (status == WEFT_OK && (own->field_mask & WEFT_UCX_REMOTE_FIELD_MEMORY)) {
        status = memory_views(r, own, views, count);
    }
    /* Device views: their GPU is current while UCX and CUDA set them up. */
    if (status == WEFT_OK && r->memory == WEFT_MEMORY_CUDA) {
        status = weft_ucx_cuda_enter(r->device, &saved);
        entered = status == WEFT_OK;
    }
    if (status == WEFT_OK) {
        status = weft_remote_base_connect(&r->base, deadline);
    }
    if (status == WEFT_OK) {
        status = say_hello(r, p, deadline);
    }
    if (status == WEFT_OK) {
        status = r->borrowed != NULL ? weft_ucx_open_worker(&r->ucx, &r->borrowed->ucx)
                                     : weft_ucx_open(&r->ucx, "remote consumer", lanes > 1);
    }
    if (status == WEFT_OK) {
        status = weft_ucx_deliver_sink_attach(&r->sink, r->ucx.worker);
    }
    if (status == WEFT_OK && lanes > 1) {
        /* Receive lanes only drive their workers: no puts of their own. */
        status = weft_ucx_lanes_create(&r->ucx, lanes, 1, 1, &r->sink, &r->lanes);
    }
    if (status == WEFT_OK) {
        status = connect_back(r);
    }
    if (status == WEFT_OK) {
        status = receive_memory(r, views, count);
    }
    /* Deltas into views of our own memory (UCX's, borrowed, is one
     * region, its own), the inbox in the memory of the other regions. */
    if (status == WEFT_OK && r->borrowed == NULL) {
        status = weft_remote_delta_init(&r->delta, views, (uint32_t)count,
                                        r->memory == WEFT_MEMORY_CUDA ? r->device : -1, r->region_memory);
    }
    if (status == WEFT_OK && r->delta.inbox != NULL) {
        status = add_inbox_region(r);
    }
    if (status == WEFT_OK) {
        status = register_regions(r);
    }
    if (status == WEFT_OK) {
        /* Final now; nothing is delivered before we ask. */
        r->sink.regions = r->regions;
        r->sink.region_count = r->region_count;
        r->sink.host = r->region_memory != WEFT_MEMORY_CUDA;
        status = send_views(r, views, count, deadline);
    }
    if (status == WEFT_OK) {
        status = weft_remote_base_keep_views(&r->base, views, (uint32_t)count, r->memory);
    }
    if (status != WEFT_OK) {
        int device = r->device;

        remote_free(r);
        if (entered) {
            weft_ucx_cuda_leave(device, saved);
        }
        return status;
    }
    if (entered) {
        weft_ucx_cuda_leave(r->device, saved);
    }
    weft_log_info("remote: connected to %s as consumer %u, %" PRIu64 " bytes per version into "
                  "%s memory%s in %u registered regions, %u receive lane%s, deltas into an inbox of %" PRIu64
                  " bytes",
                  p->server, r->consumer, r->bytes,
                  r->memory == WEFT_MEMORY_CUDA ? "device" : "host",
                  r->borrowed != NULL           ? " (UCX's, from weft_ucx_memory_alloc)"
                  : r->memory != WEFT_MEMORY_CUDA ? ""
                  : r->stage != NULL            ? " (staged through pinned host memory)"
                                                : " (registered directly)",
                  r->region_count, lanes, lanes > 1 ? "s" : " (the receiving thread)", r->delta.inbox_bytes);
    *out = r;
    return WEFT_OK;
}

/* SENDING(v, delta): the server began putting v, whole into the views
 * (which from here hold no version we vouch for) or as a delta into the
 * inbox; stay awake for its notice. */
static weft_status_t on_sending(struct ucx_remote *r, const weft_ctl_msg_t *msg, uint64_t *awake_until)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    uint32_t          delta;

    (void)weft_ctl_get_u64(&cur);
    delta = weft_ctl_get_u32(&cur);
    if (cur.failed || cur.at != cur.length || delta > 1 || (delta && r->delta.inbox == NULL)) {
        weft_log_error("remote: a malformed SENDING from %s", r->base.server);
        return WEFT_ERR_CORRUPT;
    }
    if (!delta) {
        weft_remote_delta_forget(&r->delta);
    }
    r->sending_at = weft_time_ns();
    *awake_until = r->sending_took < SENDING_SPIN_NS ? r->sending_at + SENDING_SPIN_NS : 0;
    return WEFT_OK;
}

/* SENT(n): the server delivered n bytes in all as active messages; they
 * are ours to read once as many landed (wait_delivered). */
static weft_status_t on_sent(struct ucx_remote *r, const weft_ctl_msg_t *msg)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    const uint64_t    n = weft_ctl_get_u64(&cur);

    if (cur.failed || cur.at != cur.length || n < r->sent_bytes) {
        weft_log_error("remote: a malformed SENT from %s", r->base.server);
        return WEFT_ERR_CORRUPT;
    }
    r->sent_bytes = n;
    return WEFT_OK;
}

/*
 * Before reading what the server delivered as active messages: until as
 * many bytes landed as its SENT says (our worker driven here, the lanes'
 * by theirs), within the handshake's timeout. WEFT_ERR_CORRUPT after a
 * delivery the sink refused, WEFT_ERR_CONNECTION when the endpoint failed
 * first, WEFT_ERR_TIMEOUT when they do not come.
 */
static weft_status_t wait_delivered(struct ucx_remote *r)
{
    const uint64_t deadline = weft_deadline_ns(weft_time_ns(), r->base.timeout_us);

    for (;;) {
        if (atomic_load_explicit(&r->sink.refused, memory_order_relaxed) != 0) {
            weft_log_error("remote: %s delivered bytes outside this consumer's memory, or in a way it does not "
                           "take; not acknowledged",
                           r->base.server);
            return WEFT_ERR_CORRUPT;
        }
        if (atomic_load_explicit(&r->sink.landed, memory_order_acquire) >= r->sent_bytes) {
            return WEFT_OK;
        }
        if (r->ep_failed) {
            weft_log_error("remote: the endpoint to %s failed before every byte it sent landed", r->base.server);
            return WEFT_ERR_CONNECTION;
        }
        if (weft_time_ns() >= deadline) {
            weft_log_error("remote: %" PRIu64 " bytes %s sent never landed",
                           r->sent_bytes - atomic_load(&r->sink.landed), r->base.server);
            return WEFT_ERR_TIMEOUT;
        }
        if (!weft_ucx_progress(&r->ucx)) {
            (void)sched_yield();
        }
    }
}

/*
 * Staged device views: round k of version v is in the staging ring. Copy
 * it into the views, then tell the server that half of the ring is free.
 * Rounds come in order, all of one version before its notice.
 */
static weft_status_t stage_round(struct ucx_remote *r, const weft_ctl_msg_t *msg)
{
    weft_ctl_buf_t buf = {0};
    uint64_t        v = 0;
    uint32_t        k = 0, total = 0;
    int             saved;
    weft_status_t   status = wait_delivered(r);

    if (status != WEFT_OK) {
        return status;
    }
    status = weft_ucx_cuda_enter(r->device, &saved);
    if (status == WEFT_OK) {
        status = weft_ucx_stage_round(r->stage, msg, &v, &k, &total);
        weft_ucx_cuda_leave(r->device, saved);
    }
    if (status == WEFT_OK && k != 0 && k != r->round_next) { /* round 0 starts a version */
        status = WEFT_ERR_CORRUPT;
    }
    if (status == WEFT_OK && k != 0 && (v != r->round_version || total != r->round_total)) {
        status = WEFT_ERR_CORRUPT;
    }
    if (status != WEFT_OK) {
        weft_log_error("remote: round %u of version %" PRIu64 " from %s: %s; not acknowledged", k,
                       v, r->base.server,
                       status == WEFT_ERR_CORRUPT ? "out of turn or malformed"
                                                  : "copying it into the device views failed");
        return status;
    }
    r->round_version = v;
    r->round_total = total;
    r->round_next = k + 1;
    weft_ctl_put_u64(&buf, v);
    weft_ctl_put_u32(&buf, k);
    status = weft_remote_base_send(&r->base, WEFT_CTL_ROUND_DONE, &buf);
    weft_ctl_buf_free(&buf);
    return status;
}

/* Staged device views: the notice of v is worth an ack only after every
 * round of v was copied (a version of no bytes has none). */
static weft_status_t stage_complete(const struct ucx_remote *r, uint64_t v)
{
    /* A delta came into the inbox, not through the ring. */
    if (r->stage == NULL || r->bytes == 0 || r->delta.map_version == v ||
        (r->round_version == v && r->round_next == r->round_total)) {
        return WEFT_OK;
    }
    weft_log_error("remote: the notice of version %" PRIu64 " from %s came before all its "
                   "rounds; not acknowledged",
                   v, r->base.server);
    return WEFT_ERR_CORRUPT;
}

/* The views did not check out after v's delta: REDO(v), and v comes
 * again whole. WEFT_ERR_CONNECTION (the connection closed) when it could
 * not be asked. */
static weft_status_t redo(struct ucx_remote *r, uint64_t v)
{
    if (r->lanes != NULL) {
        /* The patched views come before the lanes copy v in again. */
        weft_ucx_lanes_sync(r->lanes);
    }
    return weft_remote_delta_redo(&r->delta, &r->base, v);
}

/* weft_remote_base_check with the views' GPU current for device views. */
static weft_status_t check_version(struct ucx_remote *r, uint64_t v)
{
    int           saved = -1;
    weft_status_t status = r->memory == WEFT_MEMORY_CUDA ? weft_ucx_cuda_enter(r->device, &saved) : WEFT_OK;

    if (status == WEFT_OK) {
        status = weft_remote_base_check(&r->base, v);
        if (r->memory == WEFT_MEMORY_CUDA) {
            weft_ucx_cuda_leave(r->device, saved);
        }
    }
    return status;
}

static weft_status_t ucx_remote_receive(void *remote, uint64_t after_version,
                                        uint64_t timeout_us, uint64_t *version)
{
    struct ucx_remote *r = remote;
    const uint32_t     extra = WEFT_CTL_TYPE_BIT(WEFT_CTL_SENDING) | WEFT_CTL_TYPE_BIT(WEFT_CTL_SENT) |
                           (r->stage != NULL ? WEFT_CTL_TYPE_BIT(WEFT_CTL_ROUND) : 0) |
                           (r->delta.inbox != NULL ? WEFT_CTL_TYPE_BIT(WEFT_CTL_DELTA) : 0);
    uint64_t           deadline, last_work, awake_until = 0;

    if (r->base.fd < 0) {
        return WEFT_ERR_CONNECTION;
    }
    deadline = weft_deadline_ns(weft_time_ns(), timeout_us);
    last_work = weft_time_ns();
    /* The server puts into the views only when asked (a request that
     * timed out stands), so between calls they do not change. */
    if (r->lanes != NULL) {
        /* What we read of the views comes before the lanes copy more in. */
        weft_ucx_lanes_sync(r->lanes);
    }
    if (weft_remote_base_ask(&r->base, after_version, r->delta.holds) != WEFT_OK) {
        return WEFT_ERR_CONNECTION;
    }
    for (;;) {
        weft_status_t   status;
        uint64_t        v;
        weft_ctl_msg_t msg;

        /* Puts over some transports (TCP) need the target to progress. */
        if (weft_ucx_progress(&r->ucx)) {
            last_work = weft_time_ns();
        }
        if (!weft_ctl_readable(r->base.fd)) {
            struct pollfd pfd[2] = {{.fd = r->base.fd, .events = POLLIN},
                                    {.fd = r->ucx.efd, .events = POLLIN}};
            const uint64_t now = weft_time_ns();

            if (now >= deadline) {
                return WEFT_ERR_TIMEOUT;
            }
            if (now - last_work < RECEIVE_SPIN_NS) {
                continue;
            }
            if (now < awake_until) {
                /* Awake for the notice, but the receive lanes (over TCP)
                 * and the server's (on this host) need the CPUs more. */
                (void)sched_yield();
                continue;
            }
            /* Sleep until the server writes or UCX has work (incoming
             * puts need our progress); unarmed means work is there now. */
            if (weft_ucx_arm(&r->ucx)) {
                (void)poll(pfd, 2, RECEIVE_POLL_MS);
            }
            continue;
        }
        status = weft_remote_base_notice(&r->base, &v, extra, &msg);
        if (status == WEFT_INPROGRESS) {
            status = msg.type == WEFT_CTL_SENDING ? on_sending(r, &msg, &awake_until)
                     : msg.type == WEFT_CTL_SENT  ? on_sent(r, &msg)
                     : msg.type == WEFT_CTL_DELTA ? weft_remote_delta_take_map(&r->delta, &msg, r->base.server)
                                                  : stage_round(r, &msg);
            free(msg.payload);
            if (status != WEFT_OK) {
                weft_remote_base_disconnect(&r->base);
                return status;
            }
            continue;
        }
        if (status != WEFT_OK) {
            return status;
        }
        if (r->sending_at != 0) {
            r->sending_took = weft_time_ns() - r->sending_at;
            r->sending_at = 0;
        }
        /* Delivered as messages: every byte landed first. */
        status = wait_delivered(r);
        if (status != WEFT_OK) {
            weft_remote_base_disconnect(&r->base);
            return status;
        }
        if (r->lanes != NULL) {
            /* The notice came through the server; what the lanes copied
             * in is ours to read only once they are synchronized with. */
            weft_ucx_lanes_sync(r->lanes);
        }
        status = stage_complete(r, v);
        if (status == WEFT_OK) {
            int applied;

            /* A delta's bytes are in the inbox: into the views, checked
             * (a patched view against the VERSION's sum without a second
             * reading). */
            status = weft_remote_delta_apply(&r->delta, v, &applied);
            if (status == WEFT_OK && applied) {
                status = weft_remote_delta_vouch(&r->delta, &r->base.sums);
            }
            if (status != WEFT_OK && applied) {
                status = redo(r, v);
                if (status != WEFT_OK) {
                    return status;
                }
                continue; /* v comes again, whole */
            }
        }
        if (status == WEFT_OK) {
            /* Every byte of v is here: checked against the server's sums
             * (WEFT_VERIFY), acknowledged, then reported. */
            status = check_version(r, v);
        }
        if (status == WEFT_OK) {
            status = weft_remote_base_ack(&r->base, v);
        }
        if (status == WEFT_OK) {
            r->delta.holds = v; /* the base of the next delta */
        }
        if (status != WEFT_OK) {
            /* Never acknowledged: the server drops us; connect again. */
            weft_remote_base_disconnect(&r->base);
            return status;
        }
        if (v > after_version) {
            *version = v;
            return WEFT_OK;
        }
        /* An older request's version: ask again. */
        if (r->lanes != NULL) {
        /* What we read of the views comes before the lanes copy more in. */
        weft_ucx_lanes_sync(r->lanes);
    }
    if (weft_remote_base_ask(&r->base, after_version, r->delta.holds) != WEFT_OK) {
            return WEFT_ERR_CONNECTION;
        }
    }
}

/* The server's endpoints close with our workers' help: ours is driven
 * while we wait for its close, the receive lanes drive theirs. */
static void drive_close(void *arg)
{
    weft_ucx_progress(&((struct ucx_remote *)arg)->ucx);
}

static void wait_close(void *arg, int fd, int ms)
{
    struct ucx_remote *r = arg;
    struct pollfd      pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = r->ucx.efd, .events = POLLIN}};

    if (weft_ucx_arm(&r->ucx)) {
        (void)poll(pfd, 2, ms);
    }
}

/*
 * After BYE the server closes the connection once none of its puts can
 * still land here (its endpoint and lanes to us closed); only that makes
 * the views the engine's again for sure. Without it (the link or the
 * server's host gone, the server hung) remote_free still ends every path
 * that needs this process: the workers that copy emulated and TCP puts
 * in, and the registrations whose keys an RDMA NIC checks. What it cannot
 * stop, a server on this host writing by the kernel's cross-memory copy,
 * is what the non-OK return tells the caller about (transport.h).
 */
static weft_status_t ucx_remote_close(void *remote)
{
    struct ucx_remote *r = remote;
    weft_status_t      status;

    weft_remote_base_bye(&r->base);
    /* Whatever it says, remote_free ends this consumer's workers and keys. */
    status = weft_remote_base_await_close(&r->base, "it stopped writing into the views", drive_close,
                                      wait_close, r);
    if (r->stage != NULL) {
        int device = r->device, saved;
        int entered = weft_ucx_cuda_enter(device, &saved) == WEFT_OK;

        /* The staging area's stream is freed on its GPU. */
        remote_free(r);
        if (entered) {
            weft_ucx_cuda_leave(device, saved);
        }
        return status;
    }
    remote_free(r);
    return status;
}

const weft_remote_ops_t weft_ucx_remote_ops = {
    .name    = "ucx",
    .transport_params = 1,
    .connect = ucx_remote_connect,
    .receive = ucx_remote_receive,
    .close   = ucx_remote_close,
};
