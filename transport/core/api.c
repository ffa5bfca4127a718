/*
 * weft_server_* and weft_remote_*: the arguments every transport shares
 * are checked here, then the call goes to the ops of the transport's
 * descriptor (core/catalog.h).
 */
#include "config.h"

#include "transport/core/catalog.h"

#include "common/compiler.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

struct weft_server {
    const weft_server_ops_t *ops;
    void                    *impl;
};

struct weft_remote {
    const weft_remote_ops_t *ops;
    void                    *impl;
};

/* The descriptor serving a transport's server or consumer (`remote`);
 * NULL, logged, when none does; *status says how to fail: an unknown
 * transport or one without servers (host) is a bad argument, one whose
 * backend was not built in is unsupported. */
static const weft_transport_desc_t *served_by(weft_transport_t transport, int remote, weft_status_t *status)
{
    const weft_transport_desc_t *desc = weft_catalog_transport(transport);
    const char                  *what = remote ? "consumer" : "server";

    if (desc != NULL && !desc->compiled) {
        weft_log_error("libweft was built without %s: no %s %s", desc->dependency, desc->name, what);
        *status = WEFT_ERR_UNSUPPORTED;
        return NULL;
    }
    if (desc == NULL || (remote ? desc->remote == NULL : desc->server == NULL)) {
        weft_log_error("%s: transport %d has no %ss (ucx, nccl and cuda_ipc have)", remote ? "remote" : "server",
                       (int)transport, what);
        *status = WEFT_ERR_INVALID_PARAM;
        return NULL;
    }
    return desc;
}

/* A transport's own parameters: given (the field set) only with a
 * pointer, and only to a transport that reads them. */
static int transport_params_ok(const weft_transport_desc_t *desc, int given, const void *params, int takes,
                               const char *who)
{
    if (given && params == NULL) {
        weft_log_error("%s: the transport's parameters are flagged but not given", who);
        return 0;
    }
    if (given && !takes) {
        weft_log_error("%s: the %s transport takes no parameters of its own", who, desc->name);
        return 0;
    }
    return 1;
}

static int token_ok(const char *token)
{
    size_t n = strlen(token);
    return n > 0 && n <= WEFT_TOKEN_MAX;
}

WEFT_API weft_status_t weft_server_create(weft_registry_h reg, const weft_server_params_t *params,
                                          weft_server_h *out)
{
    const uint64_t               known =
        WEFT_SERVER_FIELD_TIMEOUT | WEFT_SERVER_FIELD_WINDOW | WEFT_SERVER_FIELD_TRANSPORT;
    const weft_transport_desc_t *desc;
    struct weft_server          *s;
    weft_status_t                status;

    if (reg == NULL || params == NULL || out == NULL || params->listen == NULL ||
        params->token == NULL || (params->field_mask & ~known)) {
        weft_log_error("server: invalid argument (registry, params with transport ucx, nccl or cuda_ipc, "
                       "listen and token are required)");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!token_ok(params->token)) {
        weft_log_error("server: the token must be 1..%d bytes", WEFT_TOKEN_MAX);
        return WEFT_ERR_INVALID_PARAM;
    }
    desc = served_by(params->transport, 0, &status);
    if (desc == NULL) {
        return status;
    }
    if (!transport_params_ok(desc, (params->field_mask & WEFT_SERVER_FIELD_TRANSPORT) != 0,
                             params->transport_params, desc->server->transport_params, "server")) {
        return WEFT_ERR_INVALID_PARAM;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    s->ops = desc->server;
    status = s->ops->create(reg, params, &s->impl);
    if (status != WEFT_OK) {
        free(s);
        return status;
    }
    *out = s;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_server_port(weft_server_h s, uint16_t *port)
{
    if (s == NULL || port == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    *port = s->ops->port(s->impl);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_server_get_stats(weft_server_h s, weft_server_stats_t *stats)
{
    if (s == NULL || stats == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    s->ops->get_stats(s->impl, stats);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_server_destroy(weft_server_h s)
{
    if (s != NULL) {
        s->ops->destroy(s->impl);
        free(s);
    }
    return WEFT_OK;
}

WEFT_API weft_status_t weft_remote_connect(const weft_remote_params_t *p,
                                           const weft_recv_view_t *views, size_t count,
                                           weft_remote_h *out)
{
    const weft_transport_desc_t *desc;
    struct weft_remote          *r;
    weft_status_t                status;

    if (p == NULL || views == NULL || count == 0 || out == NULL || p->server == NULL ||
        p->token == NULL || p->name == NULL ||
        (p->field_mask & ~(uint64_t)(WEFT_REMOTE_FIELD_TIMEOUT | WEFT_REMOTE_FIELD_TRANSPORT))) {
        weft_log_error("remote: invalid argument (params, views, count, transport ucx, nccl or cuda_ipc, "
                       "server, token and name are required)");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!token_ok(p->token) || strlen(p->name) == 0 || strlen(p->name) >= WEFT_CONSUMER_NAME_MAX) {
        weft_log_error("remote: the token must be 1..%d bytes and the name 1..%d", WEFT_TOKEN_MAX,
                       WEFT_CONSUMER_NAME_MAX - 1);
        return WEFT_ERR_INVALID_PARAM;
    }
    desc = served_by(p->transport, 1, &status);
    if (desc == NULL) {
        return status;
    }
    if (!transport_params_ok(desc, (p->field_mask & WEFT_REMOTE_FIELD_TRANSPORT) != 0, p->transport_params,
                             desc->remote->transport_params, "remote")) {
        return WEFT_ERR_INVALID_PARAM;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    r->ops = desc->remote;
    status = r->ops->connect(p, views, count, &r->impl);
    if (status != WEFT_OK) {
        free(r);
        return status;
    }
    *out = r;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_remote_receive(weft_remote_h r, uint64_t after_version,
                                           uint64_t timeout_us, uint64_t *version)
{
    if (r == NULL || version == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    return r->ops->receive(r->impl, after_version, timeout_us, version);
}

WEFT_API weft_status_t weft_remote_close(weft_remote_h r)
{
    weft_status_t status = WEFT_OK;

    if (r != NULL) {
        status = r->ops->close(r->impl);
        free(r);
    }
    return status;
}
