/*
 * What the nccl server and the remote consumer share: NCCL status
 * translation, non-blocking communicators, and the transfer of one
 * version, which both sides replay in the same order. Internal.
 *
 * Messages (besides the shared payloads of ctl/wire.h):
 *   WELCOME: empty.
 *   VIEWS:   blob the UUID of the consumer's GPU (16 bytes), blob its
 *            NCCL host id (weft_nccl_host_id; empty when unset; protocol
 *            2), u64 the bytes of its inbox for deltas (0: it takes none;
 *            protocol 3); the views (device addresses of the consumer).
 *   READY:   u32 consumer id, u64 bytes per version, u64 ranges, blob the
 *            ncclUniqueId of the consumer's communicator (the server is
 *            rank 0), u64 window, then per range u64 destination address,
 *            u64 bytes, in the order of the server's plan.
 *   VERSION(v) comes before the bytes of v: both sides then post their
 *            groups; the consumer acks after its stream completed.
 *   DELTA (wire.h), before VERSION(v): v comes as a delta; the pieces
 *            are then the places of its entries in the consumer's inbox,
 *            each once, in inbox order (remote_delta.h,
 *            weft_remote_delta_places), not the ranges. The consumer
 *            applies it and acks, or answers REDO(v): VERSION(v) then
 *            comes again, and v whole.
 *
 * The schedule: the ranges (or a delta's pieces) in order, cut into pieces of at most `window`
 * bytes; a group holds at most WEFT_NCCL_GROUP_OPS pieces and `window`
 * bytes, and the next group is posted only once the one before completed
 * on its stream. Both sides compute it from the same sizes and window, so
 * each ncclSend meets the ncclRecv of the same piece.
 */
#ifndef WEFT_TRANSPORT_NCCL_NCCL_COMMON_H
#define WEFT_TRANSPORT_NCCL_NCCL_COMMON_H

#include "transport/core/desc.h"

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <weft/weft.h>

#include "transport/nccl/nccl_api.h" /* nccl.h; NCCL's functions, loaded at run time */

/* "NC" and the protocol's version: a ucx consumer is told it is another
 * transport. */
#define WEFT_NCCL_PROTOCOL    0x4E430003u
#define WEFT_NCCL_GROUP_OPS   64u
#define WEFT_NCCL_MIN_WINDOW  (UINT64_C(64) << 10)
#define WEFT_NCCL_HOST_ID_MAX 255u

/* Logs an NCCL failure (with ncclGetLastError) and translates it:
 * ncclSystemError and ncclRemoteError (a peer or link failed) give
 * WEFT_ERR_CONNECTION, the others WEFT_ERR_NCCL. */
weft_status_t weft_nccl_status(ncclResult_t result, ncclComm_t comm, const char *what);

/* Starts a non-blocking 2-rank communicator on the current device.
 * WEFT_OK or WEFT_INPROGRESS (poll it with weft_nccl_poll). */
weft_status_t weft_nccl_comm_start(ncclComm_t *comm, const ncclUniqueId *id, int rank);

/* The state of a non-blocking communicator: WEFT_OK (idle, or the last
 * call's work is enqueued), WEFT_INPROGRESS, or its error (logged). */
weft_status_t weft_nccl_poll(ncclComm_t comm, const char *what);

/* Aborts a communicator (kernels in flight quit); NULL is a no-op. */
void weft_nccl_abort(ncclComm_t comm, const char *who);

/*
 * This process's NCCL_HOSTID into id ("" when unset; its first
 * WEFT_NCCL_HOST_ID_MAX bytes), from which NCCL derives the host of its
 * ranks; returns its length. NCCL refuses two ranks of one communicator
 * on one GPU of one host; ranks whose host ids differ count as on two
 * hosts and talk through NCCL's network transport, even on one GPU.
 */
uint32_t weft_nccl_host_id(char id[WEFT_NCCL_HOST_ID_MAX + 1]);

/* One version's transfer on one side. */
typedef struct weft_nccl_xfer {
    ncclComm_t      comm;
    cudaStream_t    stream;
    int             send;     /* 1: ncclSend to rank 1; 0: ncclRecv from rank 0 */
    const uint64_t *sizes;    /* bytes of each range, in schedule order */
    const uint64_t *offsets;  /* range i lives at base + offsets[i] */
    uint64_t        count;
    uint64_t        window;
    uint64_t        base;     /* set before each weft_nccl_xfer_start */
    /* Progress. */
    uint64_t        range, offset;
    int             state;
    uint64_t        groups;
} weft_nccl_xfer_t;

void weft_nccl_xfer_start(weft_nccl_xfer_t *x);

/*
 * Posts the next group when the one before completed and checks the
 * communicator for errors: WEFT_OK when every piece completed on the
 * stream, WEFT_INPROGRESS, or the error (logged; abort the communicator).
 * Never blocks.
 */
weft_status_t weft_nccl_xfer_progress(weft_nccl_xfer_t *x);

/* After an abort: 1 once nothing of the transfer runs on its stream. */
int weft_nccl_stream_idle(cudaStream_t stream);

/* The nccl backend's tables and probe (nccl_desc.c names them). */
extern const weft_server_ops_t weft_nccl_server_ops; /* nccl_server.c */
extern const weft_remote_ops_t weft_nccl_remote_ops; /* nccl_remote.c */
void weft_nccl_probe(weft_backend_info_t *info);     /* nccl_probe.c */

#endif
