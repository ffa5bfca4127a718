/*
 * The consumer of the cuda_ipc push mode (push.h): exports the
 * allocations that hold its views (one legacy CUDA IPC handle each, the
 * allocation found with weft_cuda_allocation_range) and sends them with the
 * views. Receiving is asking (WANT) and reading the notice: a VERSION
 * comes only once the server's process copied every byte of it into the
 * views; then it is acknowledged. Leaving, it waits for the
 * server to close the connection, which it does after unmapping the
 * views.
 *
 * Views also get an inbox on their GPU (remote/remote_delta.h), exported
 * with them: a server that sends deltas copies the delta of each tensor
 * from the version the views hold into the inbox, then sends DELTA and
 * VERSION; the delta is applied on the GPU and checked before the version
 * is acknowledged. A delta that does not check out is answered with
 * REDO, and the version comes again whole.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/log.h"
#include "common/time_util.h"
#include "push.h"
#include "transport/remote/remote.h"
#include "transport/remote/remote_delta.h"
#include "transport/core/delta_mode.h"
#include "transport/core/desc.h"
#include "transport/core/view_memory.h"
#include "transport/core/view_layout.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct push_remote {
    weft_remote_base_t base;       /* the bootstrap connection */
    uint64_t       timeout_us; /* the handshake; the server's unmapping at close */
    uint32_t       consumer;   /* the server's registry consumer id */
    uint64_t       bytes;      /* per version */
    int            device;     /* the views' GPU */
    weft_remote_delta_t delta; /* its inbox; delta.inbox NULL: every version whole */
};

/* One allocation that holds views: its range here and its IPC handle. */
typedef struct export {
    uint64_t           base, bytes;
    cudaIpcMemHandle_t handle;
} export_t;

/* Bytes the view's elements reach from its data pointer (0: none, or a
 * layout the server refuses). */
static uint64_t view_span(const weft_recv_view_t *view)
{
    uint64_t span = 0;

    return weft_view_span(view, &span) == 0 ? span : 0;
}

/* Adds the allocation that holds `data` (view `name`'s, or the inbox's)
 * to exports unless it is there. */
static weft_status_t export_allocation(export_t *exports, uint32_t *count, const void *data, const char *name)
{
    char          what[WEFT_TENSOR_NAME_MAX + 32];
    uint64_t      base = 0, size = 0;
    weft_status_t status;

    snprintf(what, sizeof(what), "remote: view \"%s\"", name);
    status = weft_cuda_allocation_range(data, what, &base, &size);
    if (status != WEFT_OK) {
        return status;
    }
    for (uint32_t i = 0; i < *count; i++) {
        if (exports[i].base == base) {
            return WEFT_OK;
        }
    }
    if (cudaIpcGetMemHandle(&exports[*count].handle, (void *)(uintptr_t)base) != cudaSuccess) {
        (void)cudaGetLastError(); /* reported here */
        weft_log_error("remote: view \"%s\": its allocation cannot be exported with "
                       "cudaIpcGetMemHandle (memory from cudaMalloc only; PyTorch's expandable "
                       "segments are VMM memory)",
                       name);
        return WEFT_ERR_UNSUPPORTED;
    }
    exports[*count].base = base;
    exports[*count].bytes = size;
    (*count)++;
    return WEFT_OK;
}

/* VIEWS: the allocations holding the views and the inbox (NULL: none),
 * exported, the inbox, then the views. */
static weft_status_t build_views(const weft_recv_view_t *views, size_t count, const weft_remote_delta_t *delta,
                                 weft_ctl_buf_t *buf)
{
    export_t            *exports = calloc(count + 2, sizeof(*exports));
    uint32_t             n = 0;
    weft_status_t        status = exports == NULL ? WEFT_ERR_NO_MEMORY : WEFT_OK;

    for (size_t i = 0; i < count && status == WEFT_OK; i++) {
        if (view_span(&views[i]) > 0) {
            status = export_allocation(exports, &n, views[i].data, views[i].name);
        }
    }
    if (status == WEFT_OK && n > 0 && delta->inbox != NULL) {
        status = export_allocation(exports, &n, delta->inbox, "(the delta inbox)");
    }
    if (status == WEFT_OK && (n == 0 || n > WEFT_CUDA_IPC_MAX_ALLOCS)) {
        if (n == 0) {
            weft_log_error("remote: no view has a byte to receive");
        } else {
            weft_log_error("remote: the views lie in %u allocations, at most %u", n,
                           WEFT_CUDA_IPC_MAX_ALLOCS);
        }
        status = WEFT_ERR_INVALID_PARAM;
    }
    if (status == WEFT_OK) {
        weft_ctl_put_u32(buf, n);
        for (uint32_t i = 0; i < n; i++) {
            weft_ctl_put_blob(buf, &exports[i].handle, (uint32_t)sizeof(exports[i].handle));
            weft_ctl_put_u64(buf, exports[i].base);
            weft_ctl_put_u64(buf, exports[i].bytes);
        }
        weft_ctl_put_u64(buf, (uint64_t)(uintptr_t)delta->inbox);
        weft_ctl_put_u64(buf, delta->inbox != NULL ? delta->inbox_bytes : 0);
        weft_wire_put_views(buf, views, count);
        status = buf->failed ? WEFT_ERR_NO_MEMORY : WEFT_OK;
    }
    free(exports);
    return status;
}

static weft_status_t parse_ready(struct push_remote *r, const weft_ctl_msg_t *msg)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};

    r->consumer = weft_ctl_get_u32(&cur);
    r->bytes = weft_ctl_get_u64(&cur);
    (void)weft_ctl_get_u64(&cur); /* ranges: the server's business here */
    if (cur.failed) {
        weft_log_error("remote: %s sent a malformed ready", r->base.server);
        return WEFT_ERR_CORRUPT;
    }
    return WEFT_OK;
}

/*
 * Whether this consumer takes an inbox (*inbox), from the server's
 * WELCOME (the UUID of the registry's GPU): WEFT_DELTA=auto only where
 * the views are on another GPU (on the same GPU the server copies every
 * version whole, and an inbox would only take memory there), force
 * always, off never. WEFT_ERR_CORRUPT for a malformed WELCOME.
 */
static weft_status_t takes_deltas(const struct push_remote *r, const weft_ctl_msg_t *welcome, int device,
                                  int *inbox)
{
    const weft_delta_mode_t mode = weft_delta_mode();
    uint8_t                 own[WEFT_CUDA_UUID_BYTES];
    weft_status_t           status;

    *inbox = 0;
    if (welcome->length != WEFT_CUDA_UUID_BYTES) {
        weft_log_error("remote: %s sent a malformed welcome", r->base.server);
        return WEFT_ERR_CORRUPT;
    }
    if (mode != WEFT_DELTA_AUTO) {
        *inbox = mode == WEFT_DELTA_FORCE;
        return WEFT_OK;
    }
    status = weft_cuda_device_uuid(device, own);
    *inbox = status == WEFT_OK && memcmp(own, welcome->payload, WEFT_CUDA_UUID_BYTES) != 0;
    return status;
}

/* Frees the consumer and its inbox (on GPU `device`, the views'; -1: none made). */
static void remote_free(struct push_remote *r, int device)
{
    int saved = -1;

    if (device >= 0 && weft_cuda_enter(device, &saved) == WEFT_OK) {
        weft_remote_delta_fini(&r->delta);
        weft_cuda_leave(device, saved);
    } else {
        weft_remote_delta_fini(&r->delta);
    }
    free(r);
}

static weft_status_t push_remote_connect(const weft_remote_params_t *p,
                                         const weft_recv_view_t *views, size_t count, void **out)
{
    struct push_remote *r = calloc(1, sizeof(*r));
    weft_memory_kind_t  memory = WEFT_MEMORY_HOST;
    weft_ctl_buf_t     buf = {0};
    weft_ctl_msg_t     msg = {0};
    uint64_t            deadline;
    int                 device = -1, saved = -1;
    weft_status_t       status;

    if (r == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    r->timeout_us = weft_remote_base_init(&r->base, p);
    deadline = weft_deadline_ns(weft_time_ns(), r->timeout_us);
    status = weft_views_memory(views, count, "remote", &memory, &device);
    if (status == WEFT_OK && memory != WEFT_MEMORY_CUDA) {
        weft_log_error("remote: the cuda_ipc transport writes into device memory only "
                       "(WEFT_MEMORY_CUDA views)");
        status = WEFT_ERR_UNSUPPORTED;
    }
    if (status == WEFT_OK) {
        status = weft_remote_base_connect(&r->base, deadline);
    }
    if (status == WEFT_OK) {
        /* WELCOME: the UUID of the registry's GPU. */
        status = weft_remote_base_hello(&r->base, WEFT_CUDA_IPC_PUSH_PROTOCOL, p, deadline, &msg);
        if (status == WEFT_OK) {
            status = weft_cuda_enter(device, &saved);
        }
        if (status == WEFT_OK) {
            int inbox = 0;

            status = takes_deltas(r, &msg, device, &inbox);
            if (status == WEFT_OK && inbox) {
                /* An inbox on the views' GPU, where the server copies deltas. */
                status = weft_remote_delta_init(&r->delta, views, (uint32_t)count, device, WEFT_MEMORY_CUDA);
                if (status == WEFT_ERR_NO_MEMORY || status == WEFT_ERR_CUDA) {
                    /* Its GPU is full: every version whole, as before deltas. */
                    weft_log_warn("remote: no room for a delta inbox on GPU %d: every version comes whole", device);
                    weft_remote_delta_fini(&r->delta);
                    status = WEFT_OK;
                }
            }
            if (status == WEFT_OK) {
                status = build_views(views, count, &r->delta, &buf);
            }
            weft_cuda_leave(device, saved);
        }
        free(msg.payload); /* NULL unless hello read the WELCOME */
    }
    if (status == WEFT_OK) {
        status = weft_remote_base_views(&r->base, &buf, deadline, &msg);
        if (status == WEFT_OK) {
            status = parse_ready(r, &msg);
            free(msg.payload);
        }
    }
    if (status == WEFT_OK) {
        r->device = device;
        status = weft_remote_base_keep_views(&r->base, views, (uint32_t)count, WEFT_MEMORY_CUDA);
    }
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        weft_remote_base_disconnect(&r->base);
        remote_free(r, device);
        return status;
    }
    weft_log_info("remote: connected to %s as consumer %u (cuda_ipc push into GPU %d), %" PRIu64
                  " bytes per version, deltas into an inbox of %" PRIu64 " bytes",
                  p->server, r->consumer, device, r->bytes, r->delta.inbox != NULL ? r->delta.inbox_bytes : 0);
    *out = r;
    return WEFT_OK;
}

/*
 * VERSION(v): every byte of v is in the views, or of its delta in the
 * inbox when its DELTA came (applied and checked on the GPU then). The
 * views are checked against the server's sums (WEFT_VERIFY), then v is
 * acknowledged. *redone: its delta did not check out, REDO was sent,
 * and v comes again whole.
 */
static weft_status_t take_version(struct push_remote *r, uint64_t v, int *redone)
{
    int           saved = -1, applied = 0;
    weft_status_t status = weft_cuda_enter(r->device, &saved);

    *redone = 0;
    if (status != WEFT_OK) {
        return status;
    }
    status = weft_remote_delta_apply(&r->delta, v, &applied);
    if (status == WEFT_OK && applied) {
        status = weft_remote_delta_vouch(&r->delta, &r->base.sums);
    }
    if (status == WEFT_ERR_CORRUPT && applied) {
        /* The views are not v: v comes again whole. */
        weft_cuda_leave(r->device, saved);
        weft_remote_delta_forget(&r->delta);
        *redone = 1;
        return weft_remote_delta_redo(&r->delta, &r->base, v);
    }
    if (status == WEFT_OK) {
        status = weft_remote_base_check(&r->base, v);
    }
    weft_cuda_leave(r->device, saved);
    if (status == WEFT_OK) {
        status = weft_remote_base_ack(&r->base, v);
    }
    /* The base of the next delta, or nothing vouched for. */
    r->delta.holds = status == WEFT_OK ? v : 0;
    return status;
}

static weft_status_t push_remote_receive(void *remote, uint64_t after_version,
                                         uint64_t timeout_us, uint64_t *version)
{
    struct push_remote *r = remote;
    const uint32_t      extra = r->delta.inbox != NULL ? WEFT_CTL_TYPE_BIT(WEFT_CTL_DELTA) : 0;
    uint64_t            deadline = weft_deadline_ns(weft_time_ns(), timeout_us);

    if (r->base.fd < 0) {
        return WEFT_ERR_CONNECTION;
    }
    /* The server writes only when asked (a request that timed out
     * stands); it is told which version the views hold. */
    if (weft_remote_base_ask(&r->base, after_version, r->delta.holds) != WEFT_OK) {
        return WEFT_ERR_CONNECTION;
    }
    for (;;) {
        weft_ctl_msg_t msg;
        weft_status_t  status;
        uint64_t       v;
        int            redone = 0;

        if (weft_remote_base_wait_readable(&r->base, deadline) != WEFT_OK) {
            return WEFT_ERR_TIMEOUT;
        }
        /* The server's copy completed before it sent the notice. */
        status = weft_remote_base_notice(&r->base, &v, extra, &msg);
        if (status == WEFT_INPROGRESS) {
            /* A DELTA: its VERSION follows. */
            status = weft_remote_delta_take_map(&r->delta, &msg, r->base.server);
            free(msg.payload);
            if (status == WEFT_OK) {
                continue;
            }
        } else if (status == WEFT_OK) {
            status = take_version(r, v, &redone);
        }
        if (status != WEFT_OK) {
            weft_remote_delta_forget(&r->delta);
            weft_remote_base_disconnect(&r->base);
            return status;
        }
        if (redone) {
            continue; /* v comes again, whole */
        }
        if (v > after_version) {
            *version = v;
            return WEFT_OK;
        }
        /* An older request's version: ours stands (asking again could
         * make the server write once more after we returned). */
    }
}

/*
 * BYE, then the server's close, which comes after it unmapped the views;
 * whatever else it still sends (a notice of a version copied before it
 * read the BYE) is skipped. Without it, the server's process may still
 * hold its mapping of the views: the return says so (transport.h).
 */
static weft_status_t push_remote_close(void *remote)
{
    struct push_remote *r = remote;
    weft_status_t       status;

    weft_remote_base_bye(&r->base);
    status = weft_remote_base_await_close(&r->base, "it unmapped the views", NULL, NULL, NULL);
    remote_free(r, r->device);
    return status;
}

const weft_remote_ops_t weft_cuda_ipc_remote_ops = {
    .name    = "cuda_ipc",
    .connect = push_remote_connect,
    .receive = push_remote_receive,
    .close   = push_remote_close,
};
