/* The UCX context and worker, status translation, shared messages. */
#include "config.h"

#include "ucx_common.h"
#include "ucx_deliver.h"

#include "common/env_config.h"
#include "common/log.h"
#include "common/time_util.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

weft_status_t weft_ucx_status(ucs_status_t status, const char *what)
{
    if (status == UCS_OK) {
        return WEFT_OK;
    }
    weft_log_error("ucx: %s failed: %s", what, ucs_status_string(status));
    switch (status) {
    case UCS_ERR_TIMED_OUT:
        return WEFT_ERR_TIMEOUT;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
        return WEFT_ERR_CONNECTION;
    case UCS_ERR_CANCELED:
        return WEFT_ERR_CANCELED;
    case UCS_ERR_NO_MEMORY:
        return WEFT_ERR_NO_MEMORY;
    default:
        return WEFT_ERR_UCX;
    }
}

/* A worker on ucx->context, and its wake-up fd. */
static weft_status_t make_worker(weft_ucx_t *ucx)
{
    ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE |
                                                 UCP_WORKER_PARAM_FIELD_EVENTS,
                                   /* Serialized, not single: the worker is
                                    * made on the caller's thread and then
                                    * driven by the server's own (or by any
                                    * one consumer thread at a time); UCX
                                    * 1.18 asserts, in single mode, that
                                    * only its creator progresses it. */
                                   .thread_mode = UCS_THREAD_MODE_SERIALIZED,
                                   /* Puts emulated over TCP or shared memory
                                    * need the target to progress: wake it. */
                                   .events = UCP_WAKEUP_RMA | UCP_WAKEUP_TX | UCP_WAKEUP_RX};
    weft_status_t       status;

    status = weft_ucx_status(ucp_worker_create(ucx->context, &wparams, &ucx->worker),
                             "ucp_worker_create");
    if (status != WEFT_OK) {
        ucx->worker = NULL;
        return status;
    }
    status = weft_ucx_status(ucp_worker_get_efd(ucx->worker, &ucx->efd), "ucp_worker_get_efd");
    if (status != WEFT_OK) {
        ucp_worker_destroy(ucx->worker);
        ucx->worker = NULL;
    }
    return status;
}

/* RMA for puts, AM for deliveries (ucx_deliver.h), WAKEUP for sleeping
 * on the worker; a checker (the sandbox) asks only for RMA. */
static weft_status_t open_context(weft_ucx_t *ucx, const char *who, int shared, uint64_t features)
{
    ucp_params_t  params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                            .features = features,
                            .mt_workers_shared = shared != 0};
    ucp_config_t *config;
    weft_status_t status;
    const char   *why;

    memset(ucx, 0, sizeof(*ucx));
    if (weft_ucx_api_load(&why) != WEFT_OK) {
        weft_log_error("%s: UCX could not be loaded (libweft was built with it; this host lacks it?): %s", who,
                       why);
        return WEFT_ERR_UNSUPPORTED;
    }
    if (strcasecmp(weft_config_value(WEFT_CONFIG_UCX_ERR_MODE), "peer") == 0) {
        ucx->peer_errors = 1;
    } else if (strcasecmp(weft_config_value(WEFT_CONFIG_UCX_ERR_MODE), "none") != 0) {
        weft_log_error("ucx: WEFT_UCX_ERR_MODE=\"%s\" is neither peer nor none",
                       weft_config_value(WEFT_CONFIG_UCX_ERR_MODE));
        return WEFT_ERR_INVALID_PARAM;
    }
    status = weft_ucx_status(ucp_config_read(NULL, NULL, &config), "reading the UCX configuration");
    if (status != WEFT_OK) {
        return status;
    }
    status = weft_ucx_status(ucp_init(&params, config, &ucx->context), "ucp_init");
    ucp_config_release(config);
    if (status != WEFT_OK) {
        ucx->context = NULL;
        return status;
    }
    weft_log_debug("ucx: %s: context ready (UCX %s, WEFT_UCX_ERR_MODE=%s)", who,
                   ucp_get_version_string(), ucx->peer_errors ? "peer" : "none");
    return WEFT_OK;
}

weft_status_t weft_ucx_open_context(weft_ucx_t *ucx, const char *who, int shared)
{
    return open_context(ucx, who, shared, UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP);
}

static weft_status_t open_with_worker(weft_ucx_t *ucx, const char *who, int shared, uint64_t features)
{
    weft_status_t status = open_context(ucx, who, shared, features);

    if (status != WEFT_OK) {
        return status;
    }
    status = make_worker(ucx);
    if (status != WEFT_OK) {
        ucp_cleanup(ucx->context);
        memset(ucx, 0, sizeof(*ucx));
    }
    return status;
}

weft_status_t weft_ucx_open(weft_ucx_t *ucx, const char *who, int shared)
{
    return open_with_worker(ucx, who, shared, UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP);
}

weft_status_t weft_ucx_open_checker(weft_ucx_t *ucx, const char *who)
{
    return open_with_worker(ucx, who, 0, UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP);
}

weft_status_t weft_ucx_open_worker(weft_ucx_t *ucx, const weft_ucx_t *parent)
{
    weft_status_t status;

    memset(ucx, 0, sizeof(*ucx));
    ucx->context = parent->context;
    ucx->peer_errors = parent->peer_errors;
    status = make_worker(ucx);
    if (status != WEFT_OK) {
        memset(ucx, 0, sizeof(*ucx));
    }
    return status;
}

void weft_ucx_close_worker(weft_ucx_t *ucx)
{
    if (ucx->worker != NULL) {
        ucp_worker_destroy(ucx->worker);
    }
    memset(ucx, 0, sizeof(*ucx));
}

void weft_ucx_close_ep(weft_ucx_t *ucx, ucp_ep_h ep, int force, uint64_t deadline_ns)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    ucs_status_ptr_t    request = ucp_ep_close_nbx(ep, &param);
    ucs_status_t        status = UCS_OK;

    if (UCS_PTR_IS_ERR(request)) {
        status = UCS_PTR_STATUS(request);
    } else if (request != NULL) {
        while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS &&
               weft_time_ns() < deadline_ns) {
            ucp_worker_progress(ucx->worker);
        }
        if (status == UCS_INPROGRESS) {
            ucp_request_cancel(ucx->worker, request);
            weft_ucx_progress(ucx);
        }
        ucp_request_free(request);
    }
    if (status != UCS_OK) {
        weft_log_info("ucx: closing an endpoint: %s (the peer went first)", ucs_status_string(status));
    }
}

weft_status_t weft_ucx_connect(weft_ucx_t *ucx, const void *address, ucp_err_handler_cb_t on_error,
                               void *arg, const char *who, ucp_ep_h *ep, int *reports)
{
    ucp_ep_params_t params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = address};
    ucs_status_t    created = UCS_ERR_UNREACHABLE;

    if (ucx->peer_errors) {
        params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler = (ucp_err_handler_t){.cb = on_error, .arg = arg};
        created = ucp_ep_create(ucx->worker, &params, ep);
        *reports = created == UCS_OK;
        if (created != UCS_ERR_UNREACHABLE) {
            return weft_ucx_status(created, who);
        }
        /* UCX 1.13's shared-memory transports cannot report a peer's
         * failure; without it the bootstrap connection and the timeout
         * still catch a peer that dies. */
        weft_log_info("ucx: %s: the transport cannot report peer failures; relying on the "
                      "bootstrap connection and timeouts", who);
        params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    }
    created = ucp_ep_create(ucx->worker, &params, ep);
    *reports = 0;
    return weft_ucx_status(created, who);
}

void weft_ucx_close(weft_ucx_t *ucx)
{
    if (ucx->worker != NULL) {
        ucp_worker_destroy(ucx->worker);
    }
    if (ucx->context != NULL) {
        ucp_cleanup(ucx->context);
    }
    memset(ucx, 0, sizeof(*ucx));
}

int weft_ucx_progress(weft_ucx_t *ucx)
{
    int did = 0;

    while (ucp_worker_progress(ucx->worker) != 0) {
        did = 1;
    }
    return did;
}

int weft_ucx_arm(weft_ucx_t *ucx)
{
    weft_ucx_progress(ucx);
    return ucp_worker_arm(ucx->worker) == UCS_OK;
}

ucs_status_ptr_t weft_ucx_put(const weft_ucx_target_t *target, const void *src, uint64_t n,
                              uint64_t dst, ucp_mem_h memh, ucp_send_nbx_callback_t cb,
                              void *user_data)
{
    const weft_wire_span_t *region =
        weft_wire_span_find(target->regions, target->region_count, dst, n);
    ucp_request_param_t     param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                            UCP_OP_ATTR_FIELD_MEMH,
            .cb.send = cb,
            .user_data = user_data,
            .memh = memh,
    };

    if (region == NULL) {
        return UCS_STATUS_PTR(UCS_ERR_INVALID_ADDR);
    }
    if (target->by_messages) {
        return weft_ucx_deliver_send(target->ep, src, n, dst, cb, user_data);
    }
    return ucp_put_nbx(target->ep, src, n, dst, target->rkeys[region - target->regions], &param);
}
