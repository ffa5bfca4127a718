/*
 * weft_server_* and weft_remote_*: the arguments every transport shares
 * are checked here, then the call goes to the transport's table. Optional
 * transports get their entry under their HAVE_* here, and nowhere else.
 */
#include "config.h"

#include "transport/core/desc.h"

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

static const weft_server_ops_t *const server_ops[] = {
#if HAVE_UCX
    [WEFT_TRANSPORT_UCX] = &weft_ucx_server_ops,
#endif
#if HAVE_NCCL
    [WEFT_TRANSPORT_NCCL] = &weft_nccl_server_ops,
#endif
#if HAVE_CUDA
    [WEFT_TRANSPORT_CUDA_IPC] = &weft_cuda_ipc_server_ops,
#endif
    [WEFT_TRANSPORT_HOST] = NULL,
};

static const weft_remote_ops_t *const remote_ops[] = {
#if HAVE_UCX
    [WEFT_TRANSPORT_UCX] = &weft_ucx_remote_ops,
#endif
#if HAVE_NCCL
    [WEFT_TRANSPORT_NCCL] = &weft_nccl_remote_ops,
#endif
#if HAVE_CUDA
    [WEFT_TRANSPORT_CUDA_IPC] = &weft_cuda_ipc_remote_ops,
#endif
    [WEFT_TRANSPORT_HOST] = NULL,
};

/* 1 for the transports with a server, built in or not: those across
 * nodes, and cuda_ipc's push mode. */
static int served(weft_transport_t transport)
{
    return transport == WEFT_TRANSPORT_UCX || transport == WEFT_TRANSPORT_NCCL ||
           transport == WEFT_TRANSPORT_CUDA_IPC;
}

static const char *transport_name(weft_transport_t transport)
{
    return transport == WEFT_TRANSPORT_UCX    ? "UCX"
           : transport == WEFT_TRANSPORT_NCCL ? "NCCL"
                                              : "CUDA";
}

static int token_ok(const char *token)
{
    size_t n = strlen(token);
    return n > 0 && n <= WEFT_TOKEN_MAX;
}

WEFT_API weft_status_t weft_server_create(weft_registry_h reg, const weft_server_params_t *params,
                                          weft_server_h *out)
{
    const uint64_t      known =
        WEFT_SERVER_PARAM_TIMEOUT | WEFT_SERVER_PARAM_WINDOW | WEFT_SERVER_PARAM_LANES;
    struct weft_server *s;
    weft_status_t       status;

    if (reg == NULL || params == NULL || out == NULL || params->listen == NULL ||
        params->token == NULL || (params->field_mask & ~known) ||
        !served(params->transport)) {
        weft_log_error("server: invalid argument (registry, params with transport ucx, nccl or cuda_ipc, "
                       "listen and token are required)");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!token_ok(params->token)) {
        weft_log_error("server: the token must be 1..%d bytes", WEFT_TOKEN_MAX);
        return WEFT_ERR_INVALID_PARAM;
    }
    if ((size_t)params->transport >= WEFT_ARRAY_SIZE(server_ops) ||
        server_ops[params->transport] == NULL) {
        weft_log_error("libweft was built without %s: no %s server",
                       transport_name(params->transport), transport_name(params->transport));
        return WEFT_ERR_UNSUPPORTED;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    s->ops = server_ops[params->transport];
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
    struct weft_remote *r;
    weft_status_t       status;

    if (p == NULL || views == NULL || count == 0 || out == NULL || p->server == NULL ||
        p->token == NULL || p->name == NULL || !served(p->transport) ||
        (p->field_mask & ~(uint64_t)(WEFT_REMOTE_PARAM_TIMEOUT | WEFT_REMOTE_PARAM_LANES |
                                     WEFT_REMOTE_PARAM_MEMORY))) {
        weft_log_error("remote: invalid argument (params, views, count, transport ucx, nccl or cuda_ipc, "
                       "server, token and name are required)");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!token_ok(p->token) || strlen(p->name) == 0 || strlen(p->name) >= WEFT_CONSUMER_NAME_MAX) {
        weft_log_error("remote: the token must be 1..%d bytes and the name 1..%d", WEFT_TOKEN_MAX,
                       WEFT_CONSUMER_NAME_MAX - 1);
        return WEFT_ERR_INVALID_PARAM;
    }
    if ((size_t)p->transport >= WEFT_ARRAY_SIZE(remote_ops) || remote_ops[p->transport] == NULL) {
        weft_log_error("libweft was built without %s: no %s consumer", transport_name(p->transport),
                       transport_name(p->transport));
        return WEFT_ERR_UNSUPPORTED;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    r->ops = remote_ops[p->transport];
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

#if !HAVE_UCX
/* ucx/ucx_memory.c's calls, in a library built without UCX. */
WEFT_API weft_status_t weft_ucx_memory_alloc(uint64_t bytes, weft_ucx_memory_h *memory, void **base)
{
    (void)bytes;
    if (memory != NULL) {
        *memory = NULL;
    }
    if (base != NULL) {
        *base = NULL;
    }
    weft_log_error("libweft was built without UCX: no UCX memory");
    return WEFT_ERR_UNSUPPORTED;
}

WEFT_API weft_status_t weft_ucx_memory_free(weft_ucx_memory_h memory)
{
    (void)memory; /* none can have been made */
    return WEFT_OK;
}
#endif
