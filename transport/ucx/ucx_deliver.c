/* Delivery by active messages (ucx_deliver.h). */
#include "config.h"

#include "transport/ucx/ucx_deliver.h"

#include "common/env_config.h"
#include "common/log.h"
#include "transport/ucx/ucx_common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------ choosing */

/*
 * UCX has no call that says whether its puts on an endpoint are native;
 * ucp_ep_print_info lists the endpoint's put protocols ("put[0]: 0..",
 * "put: 0.." in older releases) only where it has lanes that put
 * natively. Not finding one means puts would be emulated, or that the
 * listing changed: either way messages are the safe choice.
 */
static int lists_put_lanes(ucp_ep_h ep)
{
    char  *text = NULL;
    size_t size = 0;
    FILE  *stream = open_memstream(&text, &size);
    int    found = 0;

    if (stream == NULL) {
        return 0;
    }
    ucp_ep_print_info(ep, stream);
    if (fclose(stream) != 0 || text == NULL) {
        free(text);
        return 0;
    }
    for (const char *line = text; line != NULL && *line != '\0' && !found;) {
        const char *next = strchr(line, '\n');
        const char *p = line;

        while (*p == '#' || *p == ' ') {
            p++;
        }
        found = strncmp(p, "put[", 4) == 0 || strncmp(p, "put:", 4) == 0;
        line = next != NULL ? next + 1 : NULL;
    }
    free(text);
    return found;
}

weft_status_t weft_ucx_deliver_choose(ucp_ep_h ep, int reports, const char *who, int *by_messages)
{
    const char *mode = weft_config_value(WEFT_CONFIG_UCX_DELIVERY);

    if (strcasecmp(mode, "am") == 0) {
        *by_messages = 1;
    } else if (strcasecmp(mode, "put") == 0) {
        *by_messages = 0;
    } else if (strcasecmp(mode, "auto") == 0) {
        *by_messages = !lists_put_lanes(ep);
    } else {
        weft_log_error("ucx: WEFT_UCX_DELIVERY=\"%s\" is none of auto, am, put", mode);
        return WEFT_ERR_INVALID_PARAM;
    }
    weft_log_info("ucx: %s: %s%s", who,
                  *by_messages ? "bytes go as active messages (UCX's puts would be emulated)"
                               : "bytes go as puts",
                  *by_messages && reports ? "; peer failures reported" : "");
    return WEFT_OK;
}

/* ------------------------------------------------------------- sending */

/* The header must outlive the send (UCX 1.13 has no flag to copy it): it
 * travels with the bytes' address and the caller's callback, and is
 * freed at completion. */
typedef struct deliver_req {
    uint64_t                dst;
    const uint8_t          *src;
    uint64_t                bytes;
    ucp_send_nbx_callback_t cb;
    void                   *user_data;
} deliver_req_t;

/*
 * The bytes go as a generic datatype that UCX packs by calling us: that
 * never takes a zero-copy protocol. UCX 1.13's TCP transport asserts (a
 * completion counted below zero) when an endpoint fails under zero-copy
 * sends: a consumer's link going down ended the server. The state is the
 * request itself; nothing to finish.
 */
static void *pack_start(void *context, const void *buffer, size_t count)
{
    (void)context;
    (void)count;
    return (void *)(uintptr_t)buffer;
}

static size_t pack_size(void *state)
{
    return ((const deliver_req_t *)state)->bytes;
}

static size_t pack(void *state, size_t offset, void *dest, size_t max_length)
{
    const deliver_req_t *d = state;
    const size_t         n = d->bytes - offset < max_length ? d->bytes - offset : max_length;

    memcpy(dest, d->src + offset, n);
    return n;
}

static void *unpack_start(void *context, void *buffer, size_t count)
{
    (void)context;
    (void)count;
    return buffer;
}

static ucs_status_t unpack(void *state, size_t offset, const void *src, size_t length)
{
    (void)state;
    (void)offset;
    (void)src;
    (void)length;
    return UCS_ERR_UNSUPPORTED; /* never received into: the sink copies */
}

static void pack_finish(void *state)
{
    (void)state;
}

static const ucp_generic_dt_ops_t packed_ops = {
    .start_pack = pack_start,
    .start_unpack = unpack_start,
    .packed_size = pack_size,
    .pack = pack,
    .unpack = unpack,
    .finish = pack_finish,
};

static pthread_once_t datatype_once = PTHREAD_ONCE_INIT;
static ucp_datatype_t packed_datatype;
static ucs_status_t   packed_status = UCS_ERR_NO_RESOURCE;

static void make_datatype(void)
{
    packed_status = ucp_dt_create_generic(&packed_ops, NULL, &packed_datatype);
}

static void deliver_done(void *request, ucs_status_t status, void *arg)
{
    deliver_req_t          *d = arg;
    ucp_send_nbx_callback_t cb = d->cb;
    void                   *user_data = d->user_data;

    free(d);
    cb(request, status, user_data);
}

ucs_status_ptr_t weft_ucx_deliver_send(ucp_ep_h ep, const void *src, uint64_t n, uint64_t dst,
                                       ucp_send_nbx_callback_t cb, void *user_data)
{
    deliver_req_t      *d;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE,
        .cb.send = deliver_done,
        /* Eager only: rendezvous would have the consumer fetch (and the
         * server answer it). */
        .flags = UCP_AM_SEND_FLAG_EAGER,
    };
    ucs_status_ptr_t req;

    (void)pthread_once(&datatype_once, make_datatype);
    if (packed_status != UCS_OK) {
        return UCS_STATUS_PTR(packed_status);
    }
    d = malloc(sizeof(*d));
    if (d == NULL) {
        return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
    }
    *d = (deliver_req_t){.dst = dst, .src = src, .bytes = n, .cb = cb, .user_data = user_data};
    param.user_data = d;
    param.datatype = packed_datatype;
    req = ucp_am_send_nbx(ep, WEFT_UCX_AM_DELIVER, &d->dst, sizeof(d->dst), d, n, &param);
    if (!UCS_PTR_IS_PTR(req)) {
        free(d); /* done already, or failed: no callback comes */
    }
    return req;
}

/* ----------------------------------------------------------- receiving */

static ucs_status_t deliver_arrived(void *arg, const void *header, size_t header_length, void *data,
                                    size_t length, const ucp_am_recv_param_t *param)
{
    weft_ucx_deliver_sink_t *sink = arg;
    uint64_t                 dst;

    if (header_length != sizeof(dst) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || !sink->host ||
        (length != 0 && data == NULL)) {
        atomic_fetch_add_explicit(&sink->refused, 1, memory_order_relaxed);
        return UCS_OK;
    }
    memcpy(&dst, header, sizeof(dst));
    if (length != 0 && weft_wire_span_find(sink->regions, sink->region_count, dst, length) == NULL) {
        atomic_fetch_add_explicit(&sink->refused, 1, memory_order_relaxed);
        return UCS_OK;
    }
    if (length != 0) {
        memcpy((void *)(uintptr_t)dst, data, length);
    }
    /* Release: whoever reads `landed` (acquire) sees these bytes. */
    atomic_fetch_add_explicit(&sink->landed, length, memory_order_release);
    return UCS_OK;
}

weft_status_t weft_ucx_deliver_sink_attach(weft_ucx_deliver_sink_t *sink, ucp_worker_h worker)
{
    const ucp_am_handler_param_t param = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = WEFT_UCX_AM_DELIVER,
        /* One call per message, fragments put together by UCX. */
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = deliver_arrived,
        .arg = sink,
    };

    return weft_ucx_status(ucp_worker_set_am_recv_handler(worker, &param),
                           "setting the delivery handler");
}

static ucs_status_t deliver_refused(void *arg, const void *header, size_t header_length, void *data,
                                    size_t length, const ucp_am_recv_param_t *param)
{
    static atomic_int warned;

    (void)arg;
    (void)header;
    (void)header_length;
    (void)data;
    (void)param;
    if (atomic_exchange(&warned, 1) == 0) {
        weft_log_warn("ucx: a peer delivered %zu bytes to a server's worker, which takes none: dropped "
                      "(logged once)",
                      length);
    }
    return UCS_OK;
}

weft_status_t weft_ucx_deliver_refuse(ucp_worker_h worker)
{
    const ucp_am_handler_param_t param = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB,
        .id = WEFT_UCX_AM_DELIVER,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = deliver_refused,
    };

    return weft_ucx_status(ucp_worker_set_am_recv_handler(worker, &param),
                           "setting the refusing delivery handler");
}
