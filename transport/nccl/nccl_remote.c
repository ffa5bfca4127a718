/*
 * The remote consumer of the nccl transport: connects to a server over
 * the bootstrap connection, sends its views and its GPU's UUID, gets back
 * the ranges of its plan (destination addresses in its own views, in the
 * server's order) and the id of a communicator of its own with the
 * server, which it joins as rank 1 on the views' GPU. For each version
 * the notice comes first; the ranges are then received group by group on
 * a stream of that GPU, and the version is acknowledged and returned only
 * once that stream completed.
 *
 * Views also get an inbox on their GPU (remote/remote_delta.h): a server
 * that sends deltas sends, after a DELTA, the delta of each tensor from
 * the version the views hold into the inbox instead of the ranges; it is
 * applied on the GPU and checked before the version is acknowledged. A
 * delta that does not check out is answered with REDO, and the version
 * comes again whole.
 *
 * A server that dies or whose link fails is seen by polling the
 * communicator (ncclCommGetAsyncError: network transports report it) and
 * the bootstrap connection (its close: P2P and shared-memory transports
 * would just wait), and the transfer has the connect timeout as its
 * deadline; any of them aborts the communicator and the call fails
 * without acknowledging anything. Connect again to go on.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/log.h"
#include "common/time_util.h"
#include "nccl_common.h"
#include "transport/remote/remote.h"
#include "transport/remote/remote_delta.h"
#include "transport/core/desc.h"
#include "transport/core/view_memory.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ABORT_WAIT_NS      2000000000ull /* for aborted kernels to leave the stream */

struct nccl_remote {
    weft_remote_base_t   base;       /* the bootstrap connection */
    int              device;     /* of every view */
    uint64_t         timeout_us; /* the handshake; a version's transfer */
    ncclComm_t       comm;
    cudaStream_t     stream;
    uint32_t         consumer;   /* the server's registry consumer id */
    uint64_t         bytes;      /* per version */
    uint64_t        *sizes, *dst; /* the ranges, in the server's order */
    uint64_t         range_count;
    weft_nccl_xfer_t xfer;
    weft_remote_delta_t delta;      /* its inbox; delta.inbox NULL: every version whole */
    uint64_t        *place_offsets, *place_sizes; /* a delta's pieces, one per view at most */
};

/* The GPU of every view; views must be device memory of one GPU. */
static weft_status_t views_device(const weft_recv_view_t *views, size_t count, int *device)
{
    weft_memory_kind_t memory;

    for (size_t i = 0; i < count; i++) {
        if (!(views[i].field_mask & WEFT_RECV_VIEW_FIELD_MEMORY) ||
            views[i].memory != WEFT_MEMORY_CUDA) {
            weft_log_error("remote: view %zu (\"%s\"): the nccl transport receives into device "
                           "memory only (WEFT_MEMORY_CUDA)",
                           i, views[i].name != NULL ? views[i].name : "?");
            return WEFT_ERR_UNSUPPORTED;
        }
    }
    return weft_views_memory(views, count, "remote", &memory, device);
}

/* Reads READY: the ranges (each inside our views) and the communicator's id. */
static weft_status_t parse_ready(struct nccl_remote *r, const weft_ctl_msg_t *msg,
                                 const weft_recv_view_t *views, size_t count, ncclUniqueId *id)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    weft_wire_span_t  *spans = NULL;
    uint32_t           span_count = 0, id_length;
    uint64_t           range_count, window;
    const void        *id_bytes;
    weft_status_t      status;

    r->consumer = weft_ctl_get_u32(&cur);
    r->bytes = weft_ctl_get_u64(&cur);
    range_count = weft_ctl_get_u64(&cur);
    id_bytes = weft_ctl_get_blob(&cur, &id_length);
    window = weft_ctl_get_u64(&cur);
    if (cur.failed || id_length != sizeof(*id) || window < WEFT_NCCL_MIN_WINDOW ||
        range_count > (msg->length / 16)) {
        weft_log_error("remote: %s sent a malformed ready", r->base.server);
        return WEFT_ERR_CORRUPT;
    }
    memcpy(id, id_bytes, sizeof(*id));
    r->sizes = calloc(range_count + 1, sizeof(*r->sizes));
    r->dst = calloc(range_count + 1, sizeof(*r->dst));
    if (r->sizes == NULL || r->dst == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    status = weft_wire_view_spans(views, count, &spans, &span_count);
    for (uint64_t i = 0; i < range_count && status == WEFT_OK; i++) {
        r->dst[i] = weft_ctl_get_u64(&cur);
        r->sizes[i] = weft_ctl_get_u64(&cur);
        /* NCCL writes where the server says: only inside our views. */
        if (cur.failed || weft_wire_span_find(spans, span_count, r->dst[i], r->sizes[i]) == NULL) {
            weft_log_error("remote: %s sent range %" PRIu64 " (%" PRIu64 " bytes at 0x%" PRIx64
                           ") outside this consumer's views",
                           r->base.server, i, r->sizes[i], r->dst[i]);
            status = WEFT_ERR_CORRUPT;
        }
    }
    free(spans);
    r->range_count = range_count;
    r->xfer = (weft_nccl_xfer_t){.send = 0, .window = window};
    return status;
}

/* VIEWS → READY, or the server's refusal. */
static weft_status_t send_views(struct nccl_remote *r, const weft_recv_view_t *views, size_t count,
                                uint64_t deadline, ncclUniqueId *id)
{
    weft_ctl_buf_t buf = {0};
    weft_ctl_msg_t msg;
    uint8_t         uuid[WEFT_CUDA_UUID_BYTES];
    char            host_id[WEFT_NCCL_HOST_ID_MAX + 1];
    const uint32_t  host_id_length = weft_nccl_host_id(host_id);
    weft_status_t   status = weft_cuda_device_uuid(r->device, uuid);

    if (status != WEFT_OK) {
        return status;
    }
    weft_ctl_put_blob(&buf, uuid, sizeof(uuid));
    weft_ctl_put_blob(&buf, host_id, host_id_length);
    weft_ctl_put_u64(&buf, r->delta.inbox != NULL ? r->delta.inbox_bytes : 0);
    weft_wire_put_views(&buf, views, count);
    status = weft_remote_base_views(&r->base, &buf, deadline, &msg);
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        return status;
    }
    status = parse_ready(r, &msg, views, count, id);
    free(msg.payload);
    return status == WEFT_OK ? weft_remote_base_keep_views(&r->base, views, (uint32_t)count, WEFT_MEMORY_CUDA) : status;
}

/* What the server sent while we receive or make the communicator: its
 * close, or FAILED. */
static weft_status_t server_spoke(struct nccl_remote *r)
{
    weft_ctl_msg_t msg;
    weft_status_t   status =
        weft_remote_base_recv(&r->base, &msg, weft_deadline_ns(weft_time_ns(), 5000000));

    if (status != WEFT_OK) {
        weft_log_error("remote: lost the connection to %s: %s", r->base.server,
                       weft_status_string(status));
        return WEFT_ERR_CONNECTION;
    }
    if (msg.type == WEFT_CTL_FAILED) {
        weft_log_error("remote: %s dropped this consumer during a version", r->base.server);
        status = WEFT_ERR_CANCELED;
    } else if (msg.type == WEFT_CTL_REFUSED) {
        status = weft_remote_base_refused(&r->base, &msg, "this consumer");
    } else {
        weft_log_error("remote: unexpected message %u from %s", msg.type, r->base.server);
        status = WEFT_ERR_CORRUPT;
    }
    free(msg.payload);
    return status;
}

/* Ends the connection and the communicator after a failure; nothing of it
 * is used again (connect again). */
static void disconnect(struct nccl_remote *r)
{
    if (r->comm != NULL) {
        weft_nccl_abort(r->comm, "remote consumer");
        r->comm = NULL;
    }
    weft_remote_base_disconnect(&r->base);
}

/*
 * Drives one non-blocking NCCL step (the communicator's creation, or a
 * version's transfer) to its end before the deadline, watching the
 * server's connection meanwhile.
 */
static weft_status_t drive(struct nccl_remote *r, int transfer, uint64_t deadline)
{
    for (;;) {
        weft_status_t status = transfer ? weft_nccl_xfer_progress(&r->xfer)
                                        : weft_nccl_poll(r->comm, "making the communicator");

        if (status != WEFT_INPROGRESS) {
            return status;
        }
        /* During a transfer the server says nothing unless it drops us. */
        if (transfer && weft_ctl_readable(r->base.fd)) {
            return server_spoke(r);
        }
        /* While the communicator is made, the server (whose side may be
         * up first) can already have sent the first version's notice,
         * which waits for weft_remote_receive: only the connection's end
         * stops that step. */
        if (!transfer && weft_ctl_closed(r->base.fd)) {
            weft_log_error("remote: %s closed the connection while the communicator was made", r->base.server);
            return WEFT_ERR_CONNECTION;
        }
        if (weft_time_ns() >= deadline) {
            weft_log_error("remote: %s with %s did not finish within the timeout",
                           transfer ? "a version's transfer" : "making the communicator", r->base.server);
            return WEFT_ERR_TIMEOUT;
        }
        sched_yield();
    }
}

static void remote_free(struct nccl_remote *r)
{
    disconnect(r);
    if (r->stream != NULL) {
        uint64_t until = weft_time_ns() + ABORT_WAIT_NS;

        /* Aborted kernels leave the stream soon; never wait forever. */
        while (!weft_nccl_stream_idle(r->stream) && weft_time_ns() < until) {
            sched_yield();
        }
        (void)WEFT_CUDA_CHECK(cudaStreamDestroy(r->stream));
    }
    weft_remote_delta_fini(&r->delta);
    free(r->place_offsets);
    free(r->place_sizes);
    free(r->sizes);
    free(r->dst);
    free(r);
}

static weft_status_t nccl_remote_connect(const weft_remote_params_t *p,
                                         const weft_recv_view_t *views, size_t count, void **out)
{
    struct nccl_remote *r;
    uint64_t            deadline;
    ncclUniqueId        id;
    int                 saved = -1;
    weft_status_t       status;
    const char         *why;

    if (weft_nccl_api_load(&why) != WEFT_OK) {
        weft_log_error("remote: NCCL could not be loaded (libweft was built with it; this host lacks it?): %s", why);
        return WEFT_ERR_UNSUPPORTED;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    r->timeout_us = weft_remote_base_init(&r->base, p);
    deadline = weft_deadline_ns(weft_time_ns(), r->timeout_us);
    status = views_device(views, count, &r->device);
    if (status == WEFT_OK && r->device < 0) {
        weft_log_error("remote: no view has a byte to receive");
        status = WEFT_ERR_INVALID_PARAM;
    }
    if (status == WEFT_OK) {
        status = weft_cuda_enter(r->device, &saved);
    }
    if (status != WEFT_OK) {
        free(r);
        return status;
    }
    /* An inbox on the views' GPU, where NCCL receives a delta's pieces. */
    status = weft_remote_delta_init(&r->delta, views, (uint32_t)count, r->device, WEFT_MEMORY_CUDA);
    if (status == WEFT_OK && r->delta.inbox != NULL) {
        r->place_offsets = calloc(count + 1, sizeof(*r->place_offsets));
        r->place_sizes = calloc(count + 1, sizeof(*r->place_sizes));
        status = r->place_offsets != NULL && r->place_sizes != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
    }
    if (status == WEFT_OK) {
        status = weft_remote_base_connect(&r->base, deadline);
    }
    if (status == WEFT_OK) {
        weft_ctl_msg_t welcome;

        status = weft_remote_base_hello(&r->base, WEFT_NCCL_PROTOCOL, p, deadline, &welcome);
        if (status == WEFT_OK) {
            free(welcome.payload);
        }
    }
    if (status == WEFT_OK) {
        status = send_views(r, views, count, deadline, &id);
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking));
    }
    if (status == WEFT_OK) {
        status = weft_nccl_comm_start(&r->comm, &id, 1);
        if (status == WEFT_INPROGRESS) {
            status = drive(r, 0, deadline);
        }
    }
    if (status != WEFT_OK) {
        int device = r->device;

        remote_free(r);
        weft_cuda_leave(device, saved);
        return status;
    }
    r->xfer.comm = r->comm;
    r->xfer.stream = r->stream;
    weft_cuda_leave(r->device, saved);
    weft_log_info("remote: connected to %s as consumer %u (nccl, GPU %d), %" PRIu64
                  " bytes per version in %" PRIu64 " ranges, deltas into an inbox of %" PRIu64 " bytes",
                  p->server, r->consumer, r->device, r->bytes, r->range_count,
                  r->delta.inbox != NULL ? r->delta.inbox_bytes : 0);
    *out = r;
    return WEFT_OK;
}

/* What the transfer of v receives: a delta's pieces into the inbox when
 * its DELTA came, else every range into the views. */
static weft_status_t plan_transfer(struct nccl_remote *r, uint64_t v, int *delta)
{
    uint32_t      places;
    weft_status_t status;

    *delta = r->delta.map != NULL && r->delta.map_version == v;
    if (!*delta) {
        weft_remote_delta_forget(&r->delta); /* the views change from here */
        r->xfer.sizes = r->sizes;
        r->xfer.offsets = r->dst;
        r->xfer.count = r->range_count;
        r->xfer.base = 0;
        return WEFT_OK;
    }
    status = weft_remote_delta_places(&r->delta, r->place_offsets, r->place_sizes, &places);
    if (status != WEFT_OK) {
        return status; /* logged */
    }
    r->xfer.sizes = r->place_sizes;
    r->xfer.offsets = r->place_offsets;
    r->xfer.count = places;
    r->xfer.base = (uint64_t)(uintptr_t)r->delta.inbox;
    return WEFT_OK;
}

/*
 * Receives version v, announced: every range (or its delta's pieces,
 * applied then), checked and acknowledged. *redone: its delta did not
 * check out, REDO was sent, and v comes again whole.
 */
static weft_status_t receive_version(struct nccl_remote *r, uint64_t v, int *redone)
{
    int           delta, applied;
    weft_status_t status = plan_transfer(r, v, &delta);

    *redone = 0;
    if (status != WEFT_OK) {
        return status;
    }
    weft_nccl_xfer_start(&r->xfer);
    status = drive(r, 1, weft_deadline_ns(weft_time_ns(), r->timeout_us));
    if (status != WEFT_OK) {
        weft_log_error("remote: version %" PRIu64 " from %s failed after %" PRIu64 " groups: %s",
                       v, r->base.server, r->xfer.groups, weft_status_string(status));
        weft_remote_delta_forget(&r->delta);
        return status;
    }
    /* Our stream completed: every byte of v (or of its delta) is here. A
     * delta goes into the views on the GPU, each patched view checked
     * (against the VERSION's sum without a second reading). */
    if (delta) {
        status = weft_remote_delta_apply(&r->delta, v, &applied);
        if (status == WEFT_OK) {
            status = weft_remote_delta_vouch(&r->delta, &r->base.sums);
        }
        if (status == WEFT_ERR_CORRUPT) {
            /* The views are not v: v comes again whole. */
            weft_remote_delta_forget(&r->delta);
            *redone = 1;
            return weft_remote_delta_redo(&r->delta, &r->base, v);
        }
        if (status != WEFT_OK) {
            weft_remote_delta_forget(&r->delta);
            return status; /* a CUDA error: nothing acknowledged */
        }
    }
    /* Checked against the server's sums (WEFT_VERIFY; the views' GPU is
     * current), then acknowledged: the base of the next delta. */
    status = weft_remote_base_check(&r->base, v);
    if (status == WEFT_OK) {
        status = weft_remote_base_ack(&r->base, v);
    }
    r->delta.holds = status == WEFT_OK ? v : 0;
    return status;
}

static weft_status_t nccl_remote_receive(void *remote, uint64_t after_version,
                                         uint64_t timeout_us, uint64_t *version)
{
    struct nccl_remote *r = remote;
    uint64_t            deadline;
    int                 saved;
    weft_status_t       status;

    if (r->base.fd < 0 || r->comm == NULL) {
        return WEFT_ERR_CONNECTION;
    }
    status = weft_cuda_enter(r->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    deadline = weft_deadline_ns(weft_time_ns(), timeout_us);
    for (;;) {
        const uint32_t extra = r->delta.inbox != NULL ? WEFT_CTL_TYPE_BIT(WEFT_CTL_DELTA) : 0;
        weft_ctl_msg_t msg;
        uint64_t       v;
        int            redone = 0;

        if (weft_remote_base_wait_readable(&r->base, deadline) != WEFT_OK) {
            status = WEFT_ERR_TIMEOUT;
            break;
        }
        status = weft_remote_base_notice(&r->base, &v, extra, &msg);
        if (status == WEFT_INPROGRESS) {
            /* A DELTA: its VERSION follows. */
            status = weft_remote_delta_take_map(&r->delta, &msg, r->base.server);
            free(msg.payload);
            if (status == WEFT_OK) {
                continue;
            }
        } else if (status == WEFT_OK) {
            status = receive_version(r, v, &redone);
        }
        if (status != WEFT_OK) {
            disconnect(r);
            break;
        }
        if (redone) {
            continue; /* v comes again, whole */
        }
        if (v > after_version) {
            *version = v;
            break;
        }
    }
    weft_cuda_leave(r->device, saved);
    return status;
}

/* Once the communicator is aborted NCCL writes nothing more. */
static weft_status_t nccl_remote_close(void *remote)
{
    struct nccl_remote *r = remote;
    int                 device = r->device, saved;
    int                 entered;

    weft_remote_base_bye(&r->base);
    entered = weft_cuda_enter(device, &saved) == WEFT_OK;
    remote_free(r);
    if (entered) {
        weft_cuda_leave(device, saved);
    }
    return WEFT_OK;
}

const weft_remote_ops_t weft_nccl_remote_ops = {
    .name    = "nccl",
    .connect = nccl_remote_connect,
    .receive = nccl_remote_receive,
    .close   = nccl_remote_close,
};
