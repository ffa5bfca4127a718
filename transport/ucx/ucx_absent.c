/* The remote API in a library built without UCX: every call says so. */
#include "config.h"

#include "common/log.h"

#include <weft/transport.h>

static weft_status_t no_ucx(void)
{
    weft_log_error("libweft was built without UCX: no transport across nodes");
    return WEFT_ERR_UNSUPPORTED;
}

WEFT_API weft_status_t weft_server_create(weft_registry_h reg, const weft_server_params_t *params,
                                          weft_server_h *server)
{
    (void)reg;
    (void)params;
    (void)server;
    return no_ucx();
}

WEFT_API weft_status_t weft_server_port(weft_server_h server, uint16_t *port)
{
    (void)server;
    (void)port;
    return WEFT_ERR_INVALID_PARAM;
}

WEFT_API weft_status_t weft_server_get_stats(weft_server_h server, weft_server_stats_t *stats)
{
    (void)server;
    (void)stats;
    return WEFT_ERR_INVALID_PARAM;
}

WEFT_API weft_status_t weft_server_destroy(weft_server_h server)
{
    (void)server;
    return WEFT_OK;
}

WEFT_API weft_status_t weft_remote_connect(const weft_remote_params_t *params,
                                           const weft_recv_view_t *views, size_t count,
                                           weft_remote_h *remote)
{
    (void)params;
    (void)views;
    (void)count;
    (void)remote;
    return no_ucx();
}

WEFT_API weft_status_t weft_remote_receive(weft_remote_h remote, uint64_t after_version,
                                           uint64_t timeout_us, uint64_t *version)
{
    (void)remote;
    (void)after_version;
    (void)timeout_us;
    (void)version;
    return WEFT_ERR_INVALID_PARAM;
}

WEFT_API weft_status_t weft_remote_close(weft_remote_h remote)
{
    (void)remote;
    return WEFT_OK;
}
