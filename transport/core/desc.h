/*
 * The transports across nodes behind weft_server_* and weft_remote_*:
 * each fills one const table of each kind; dispatch.c checks the
 * arguments every transport shares and picks the table by
 * params->transport. A transport not built in has no table and its calls
 * give WEFT_ERR_UNSUPPORTED. Internal.
 */
#ifndef WEFT_TRANSPORT_REMOTE_DISPATCH_H
#define WEFT_TRANSPORT_REMOTE_DISPATCH_H

#include <stdint.h>
#include <weft/transport.h>

typedef struct weft_server_ops {
    const char *name;
    /* params are checked already (field_mask, listen, token). */
    weft_status_t (*create)(weft_registry_h reg, const weft_server_params_t *params, void **server);
    uint16_t (*port)(void *server);
    void (*get_stats)(void *server, weft_server_stats_t *stats);
    void (*destroy)(void *server);
} weft_server_ops_t;

typedef struct weft_remote_ops {
    const char *name;
    /* params are checked already (field_mask, server, token, name), and
     * views and count are not NULL / 0. */
    weft_status_t (*connect)(const weft_remote_params_t *params, const weft_recv_view_t *views,
                             size_t count, void **remote);
    weft_status_t (*receive)(void *remote, uint64_t after_version, uint64_t timeout_us,
                             uint64_t *version);
    /* Frees the consumer whatever it returns: WEFT_OK once the server
     * confirmed it writes no more (weft_remote_close). */
    weft_status_t (*close)(void *remote);
} weft_remote_ops_t;

extern const weft_server_ops_t weft_ucx_server_ops;  /* HAVE_UCX */
extern const weft_remote_ops_t weft_ucx_remote_ops;  /* HAVE_UCX */
extern const weft_server_ops_t weft_nccl_server_ops; /* HAVE_NCCL */
extern const weft_remote_ops_t weft_nccl_remote_ops; /* HAVE_NCCL */
extern const weft_server_ops_t weft_cuda_ipc_server_ops; /* HAVE_CUDA: push mode */
extern const weft_remote_ops_t weft_cuda_ipc_remote_ops; /* HAVE_CUDA: push mode */

#endif
