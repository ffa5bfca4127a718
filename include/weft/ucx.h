/*
 * What only the ucx transport has: its parameters of a server and of a
 * remote consumer (given to weft_server_create and weft_remote_connect in
 * their params' transport_params), and host memory for a consumer's views
 * that UCX allocates itself. The rest of ucx's use goes through the calls
 * of <weft/transport.h> with WEFT_TRANSPORT_UCX.
 *
 * Threads: see each call. Errors are logged (WEFT_LOG_LEVEL).
 */
#ifndef WEFT_UCX_H
#define WEFT_UCX_H

#include <stdint.h>
#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

enum weft_ucx_server_params_field {
    WEFT_UCX_SERVER_FIELD_LANES = 1u << 0
};

/* A ucx server's own parameters: weft_server_params_t's transport_params
 * with WEFT_SERVER_FIELD_TRANSPORT. */
typedef struct weft_ucx_server_params {
    uint64_t field_mask; /* optional fields set below */
    /* Host registries: lanes, threads (1..16) each with a UCX worker of
     * its own, that the puts of a version to one consumer are spread over
     * (1 MiB pieces in turn); each has its own endpoint, to one of the
     * consumer's receive lanes in turn, and up to its share of the window
     * in flight. Puts that UCX emulates (into memory the consumer
     * allocated itself over shared memory; TCP) move at what one core
     * copies on each side; lanes on both sides multiply that. 1: the
     * server thread puts them itself. Default WEFT_UCX_LANES (auto: half
     * the online CPUs, 1 to 8). Ignored for GPU registries. */
    uint32_t lanes;
} weft_ucx_server_params_t;

enum weft_ucx_remote_params_field {
    WEFT_UCX_REMOTE_FIELD_LANES  = 1u << 0,
    WEFT_UCX_REMOTE_FIELD_MEMORY = 1u << 1
};

/* A ucx remote consumer's own parameters: weft_remote_params_t's
 * transport_params with WEFT_REMOTE_FIELD_TRANSPORT. */
typedef struct weft_ucx_remote_params {
    uint64_t          field_mask; /* optional fields set below */
    /* Host views: receive lanes (1..16; see weft_remote_connect). Default
     * WEFT_UCX_LANES. Ignored for device views. */
    uint32_t          lanes;
    /* Host views: the memory from weft_ucx_memory_alloc() that every view
     * lies in. */
    weft_ucx_memory_h memory;
} weft_ucx_remote_params_t;

/*
 * Host memory for a ucx consumer's views that UCX allocates and maps
 * itself, as ucx_perftest's is. Puts between processes of one node
 * (shared memory) then land with one copy, made by the server's side,
 * with no work on this side. Into memory UCX did not allocate, UCX 1.13
 * emulates them: the server copies each put into a queue and the consumer
 * copies it out (newer UCX uses the kernel's cross-memory copy). Across
 * nodes it works as any host memory does. Give it to weft_remote_connect()
 * in weft_ucx_remote_params_t's memory, with every host view inside
 * [*base, *base + bytes).
 * The memory has a UCX context of its own, made here with the UCX_* and
 * WEFT_UCX_ERR_MODE settings of now; the consumers that use it make their
 * workers on it and keep that error mode. The key a consumer sends covers
 * the whole memory (UCX cannot key part of memory it allocated): its
 * server may write anywhere in it, and writes only into the views. It is
 * zeroed by the kernel where shared memory backs it; otherwise its
 * contents are unspecified. Several consumers may use one memory at once,
 * from any threads; weft_ucx_memory_free must not run while a
 * weft_remote_connect() given the memory may.
 * Errors: WEFT_ERR_INVALID_PARAM (bytes 0, a NULL pointer, a bad
 * WEFT_UCX_ERR_MODE), WEFT_ERR_UCX, WEFT_ERR_NO_MEMORY,
 * WEFT_ERR_UNSUPPORTED (libweft built without UCX).
 */
WEFT_API weft_status_t weft_ucx_memory_alloc(uint64_t bytes, weft_ucx_memory_h *memory, void **base);

/*
 * Frees the memory and its UCX context. NULL is a no-op. Refused with
 * WEFT_ERR_BUSY (nothing freed) while a consumer that was connected with
 * it is not yet closed (weft_remote_close). The handle is gone after.
 */
WEFT_API weft_status_t weft_ucx_memory_free(weft_ucx_memory_h memory);

#ifdef __cplusplus
}
#endif

#endif
