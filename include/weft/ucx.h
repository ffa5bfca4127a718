/*
 * What only the ucx transport has: host memory for a consumer's views that
 * UCX allocates itself. The rest of ucx's use goes through the calls of
 * <weft/transport.h> with WEFT_TRANSPORT_UCX.
 *
 * Threads: see each call. Errors are logged (WEFT_LOG_LEVEL).
 */
#ifndef WEFT_UCX_H
#define WEFT_UCX_H

#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Host memory for a ucx consumer's views that UCX allocates and maps
 * itself, as ucx_perftest's is. Puts between processes of one node
 * (shared memory) then land with one copy, made by the server's side,
 * with no work on this side. Into memory UCX did not allocate, UCX 1.13
 * emulates them: the server copies each put into a queue and the consumer
 * copies it out (newer UCX uses the kernel's cross-memory copy). Across
 * nodes it works as any host memory does. Give it to weft_remote_connect()
 * in params->memory, with every host view inside [*base, *base + bytes).
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
