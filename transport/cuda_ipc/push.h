/*
 * The push mode of the cuda_ipc transport: the producer's process copies
 * each version into receive views that a consumer on the same node
 * exported (weft_server_* / weft_remote_* with WEFT_TRANSPORT_CUDA_IPC).
 *
 * Why a push mode: on one GPU, a copy made by the engine's process right
 * after the trainer's process wrote the version waits for the GPU to
 * switch contexts (~0.15 ms a version on an H200, perf/results/
 * 2026-11-29-ipc-h200x2-a3c78a0.json: a 1 GiB device copy at 2072 GB/s
 * alone, 1626 GB/s right after another process's work). Copied by the
 * process that wrote it, the version stays in one context.
 *
 * Bootstrap messages (the transport-neutral ones are in ctl/wire.h):
 *   HELLO   protocol WEFT_CUDA_IPC_PUSH_PROTOCOL; WELCOME the UUID of the
 *           registry's GPU (WEFT_CUDA_UUID_BYTES): with WEFT_DELTA=auto a
 *           consumer whose views are on another GPU takes an inbox.
 *   VIEWS   u32 allocation count, then per allocation: blob
 *           cudaIpcMemHandle_t (WEFT_CUDA_IPC_HANDLE_BYTES), u64 base and
 *           u64 bytes in the consumer's address space; u64 inbox address
 *           and u64 inbox bytes (0: it takes no deltas), inside one
 *           allocation; then the views (wire.h), addresses the
 *           consumer's, each inside one allocation. The server
 *           refuses (WEFT_ERR_CORRUPT) an allocation whose mapping here
 *           is smaller than its declared bytes: the copies trust them.
 *   READY   the head of weft_server_base_ready, nothing else.
 *   WANT(a, holds) the consumer is in weft_remote_receive(after a), its
 *           views holding version `holds` verbatim (0: none it vouches
 *           for): the server may now write one version newer than a into
 *           the views (the latest), or its delta into the inbox. Without
 *           it the server never writes, so the views change only while
 *           the engine asks for a version.
 *   DELTA   (wire.h) the entries of v's delta, copied into the inbox;
 *           VERSION(v) follows. Only to a consumer that takes deltas and
 *           whose views hold the delta's base (docs/protocol.md).
 *   VERSION(v) once the server's copy of v into the views (or of its
 *           delta into the inbox) completed;
 *   ACK(v)  from the consumer, then the server records v for it; after a
 *           delta, REDO(v, flags) instead when its views did not check
 *           out: v is copied in whole and VERSION(v) comes again.
 *   BYE     the consumer leaves: the server unmaps its allocations, then
 *           closes the connection; the consumer waits for that close.
 * Internal.
 */
#ifndef WEFT_TRANSPORT_CUDA_IPC_PUSH_H
#define WEFT_TRANSPORT_CUDA_IPC_PUSH_H

#define WEFT_CUDA_IPC_PUSH_PROTOCOL 0x43490002u
#define WEFT_CUDA_IPC_HANDLE_BYTES  64u /* sizeof(cudaIpcMemHandle_t) */
#define WEFT_CUDA_IPC_MAX_ALLOCS    65536u

#include "transport/core/desc.h"

/* The cuda_ipc backend's tables (cuda_ipc_desc.c names them): the plan
 * (pull: the consumer's process copies), and the push mode's server and
 * remote consumer. */
extern const weft_plan_ops_t   weft_cuda_ipc_plan_ops;   /* cuda_ipc.c */
extern const weft_server_ops_t weft_cuda_ipc_server_ops; /* push_server.c */
extern const weft_remote_ops_t weft_cuda_ipc_remote_ops; /* push_remote.c */

#endif
