/*
 * One descriptor per backend (weft_transport_desc_t), the way NCCL's
 * struct ncclTransport or an rdma-core provider is one descriptor: its
 * name, the run-time probe behind weft_backend_query, and the const ops
 * tables of what it provides: a plan (weft_plan_create: copies into views
 * of this process), a server and a remote consumer (weft_server_*,
 * weft_remote_*: transfers to other processes and nodes). An op table
 * left NULL is a thing the backend does not do. core/catalog.c lists the
 * descriptors; a backend whose dependency is not built is its
 * <name>_none.c, a descriptor with compiled = 0. Internal.
 *
 * Order of calls on a plan: open → connect → build → (post → wait) × N →
 * close. The plan core (plan/) has already matched the views, checked them
 * and built the coalesced copy ranges (plan->ranges) when build runs.
 */
#ifndef WEFT_TRANSPORT_CORE_DESC_H
#define WEFT_TRANSPORT_CORE_DESC_H

#include <stdint.h>
#include <weft/transport.h>
#include <weft/weft.h>

#ifdef __cplusplus
extern "C" {
#endif

struct weft_plan;

/* A bit per weft_memory_kind_t, for the memory a backend can reach. */
#define WEFT_MEMORY_BIT(kind) (1u << (unsigned)(kind))

/* A plan's backend. post is required; any other op may be NULL, meaning
 * the backend has nothing to do at that step. */
typedef struct weft_plan_ops {
    const char *name;       /* "host"; for messages */
    uint32_t    src_memory; /* WEFT_MEMORY_BIT()s of registry memory it reads */
    uint32_t    dst_memory; /* WEFT_MEMORY_BIT()s of receive views it writes */

    /* Creates the backend's state for a plan, in plan->backend. */
    weft_status_t (*open)(struct weft_plan *plan);
    /* Reaches the producer's side (bootstrap, endpoints, imported
     * handles). NULL where the registry's memory is mapped locally. */
    weft_status_t (*connect)(struct weft_plan *plan);
    /* Registers the receive memory and turns plan->ranges into whatever
     * the backend replays (descriptors, rkeys, staging chunks). */
    weft_status_t (*build)(struct weft_plan *plan);
    /* Starts copying the leased version into the views: WEFT_OK when every
     * byte is in place already, WEFT_INPROGRESS when wait finishes it. */
    weft_status_t (*post)(struct weft_plan *plan, const weft_lease_t *lease);
    /* Completes the post in flight; required when post can return
     * WEFT_INPROGRESS. */
    weft_status_t (*wait)(struct weft_plan *plan);
    /* Undoes open, connect and build, whichever of them ran; called once
     * open succeeded, also when a later step failed. */
    void (*close)(struct weft_plan *plan);
} weft_plan_ops_t;

/* A server behind weft_server_*; every op is required. */
typedef struct weft_server_ops {
    const char *name;
    /* 1 when create reads params->transport_params (the transport's own
     * struct, <weft/ucx.h>'s say); core/api.c refuses them otherwise. */
    int         transport_params;
    /* params are checked already (field_mask, listen, token). */
    weft_status_t (*create)(weft_registry_h reg, const weft_server_params_t *params, void **server);
    uint16_t (*port)(void *server);
    void (*get_stats)(void *server, weft_server_stats_t *stats);
    void (*destroy)(void *server);
} weft_server_ops_t;

/* A remote consumer behind weft_remote_*; every op is required. */
typedef struct weft_remote_ops {
    const char *name;
    /* 1 when connect reads params->transport_params. */
    int         transport_params;
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

typedef struct weft_transport_desc {
    weft_backend_t   backend;    /* its entry in weft_backend_query */
    const char      *name;       /* "cuda": weft_backend_info_t's name */
    const char      *dependency; /* "CUDA": for "libweft was built without CUDA" */
    weft_transport_t transport;  /* the transport it provides; 0 for none (verbs) */
    int              compiled;   /* 0: the <name>_none.c stand-in */
    /* Fills info (name and compiled set) with what it finds at run time;
     * NULL when it was not compiled in. */
    void (*probe)(weft_backend_info_t *info);
    const weft_plan_ops_t   *plan;   /* NULL: no weft_plan_create */
    const weft_server_ops_t *server; /* NULL: no weft_server_create */
    const weft_remote_ops_t *remote; /* NULL: no weft_remote_connect */
} weft_transport_desc_t;

#ifdef __cplusplus
}
#endif

#endif
