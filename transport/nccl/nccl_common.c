/* NCCL status, non-blocking communicators, one version's groups. */
#include "config.h"

#include "nccl_common.h"

#include "common/cuda_util.h"
#include "common/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum xfer_state {
    XFER_NEXT,      /* post the next group */
    XFER_ENQUEUING, /* ncclGroupEnd returned ncclInProgress */
    XFER_RUNNING,   /* enqueued: wait for the stream */
    XFER_DONE
};

weft_status_t weft_nccl_status(ncclResult_t result, ncclComm_t comm, const char *what)
{
    const char *last;

    if (result == ncclSuccess) {
        return WEFT_OK;
    }
    if (result == ncclInProgress) {
        return WEFT_INPROGRESS;
    }
    last = ncclGetLastError(comm);
    weft_log_error("nccl: %s failed: %s (%d)%s%s", what, ncclGetErrorString(result), (int)result,
                   last != NULL && last[0] ? ": " : "", last != NULL ? last : "");
    switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
        return WEFT_ERR_CONNECTION;
    default:
        return WEFT_ERR_NCCL;
    }
}

weft_status_t weft_nccl_comm_start(ncclComm_t *comm, const ncclUniqueId *id, int rank)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;

    /* Nothing blocks: a peer that never comes or dies is seen by polling,
     * and a stuck transfer can be aborted. */
    config.blocking = 0;
    *comm = NULL;
    return weft_nccl_status(ncclCommInitRankConfig(comm, 2, *id, rank, &config), *comm,
                            "ncclCommInitRankConfig");
}

weft_status_t weft_nccl_poll(ncclComm_t comm, const char *what)
{
    ncclResult_t  state = ncclSuccess;
    weft_status_t status = weft_nccl_status(ncclCommGetAsyncError(comm, &state), comm,
                                            "ncclCommGetAsyncError");

    if (status != WEFT_OK) {
        return status;
    }
    return weft_nccl_status(state, comm, what);
}

void weft_nccl_abort(ncclComm_t comm, const char *who)
{
    ncclResult_t result;

    if (comm == NULL) {
        return;
    }
    result = ncclCommAbort(comm);
    if (result != ncclSuccess && result != ncclInProgress) {
        weft_log_warn("nccl: %s: ncclCommAbort failed: %s", who, ncclGetErrorString(result));
    }
}

uint32_t weft_nccl_host_id(char id[WEFT_NCCL_HOST_ID_MAX + 1])
{
    const char *env = getenv("NCCL_HOSTID");

    snprintf(id, WEFT_NCCL_HOST_ID_MAX + 1, "%s", env != NULL ? env : "");
    return (uint32_t)strlen(id);
}

void weft_nccl_xfer_start(weft_nccl_xfer_t *x)
{
    x->range = 0;
    x->offset = 0;
    x->groups = 0;
    x->state = XFER_NEXT;
}

/* Posts the next group; XFER_DONE when every range was posted. */
static weft_status_t post_group(weft_nccl_xfer_t *x)
{
    uint64_t      bytes = 0;
    uint32_t      ops = 0;
    weft_status_t status, ended;

    while (x->range < x->count && x->sizes[x->range] == 0) {
        x->range++;
    }
    if (x->range == x->count) {
        x->state = XFER_DONE;
        return WEFT_OK;
    }
    status = weft_nccl_status(ncclGroupStart(), x->comm, "ncclGroupStart");
    if (status != WEFT_OK) {
        return status;
    }
    while (x->range < x->count && ops < WEFT_NCCL_GROUP_OPS && bytes < x->window &&
           status == WEFT_OK) {
        uint64_t left = x->sizes[x->range] - x->offset;
        uint64_t room = x->window - bytes;
        uint64_t n = left < room ? left : room;
        void    *ptr = (void *)(uintptr_t)(x->base + x->offsets[x->range] + x->offset);

        if (n > 0) {
            status = x->send ? weft_nccl_status(ncclSend(ptr, n, ncclUint8, 1, x->comm, x->stream),
                                                x->comm, "ncclSend")
                             : weft_nccl_status(ncclRecv(ptr, n, ncclUint8, 0, x->comm, x->stream),
                                                x->comm, "ncclRecv");
            ops++;
            bytes += n;
        }
        x->offset += n;
        if (x->offset == x->sizes[x->range]) {
            x->range++;
            x->offset = 0;
        }
    }
    /* The group is ended even after a failed call: NCCL requires it. */
    ended = weft_nccl_status(ncclGroupEnd(), x->comm, "ncclGroupEnd");
    if (status != WEFT_OK && status != WEFT_INPROGRESS) {
        return status;
    }
    if (ended != WEFT_OK && ended != WEFT_INPROGRESS) {
        return ended;
    }
    x->groups++;
    x->state = ended == WEFT_INPROGRESS ? XFER_ENQUEUING : XFER_RUNNING;
    return WEFT_OK;
}

weft_status_t weft_nccl_xfer_progress(weft_nccl_xfer_t *x)
{
    for (;;) {
        weft_status_t status;
        cudaError_t   done;

        switch (x->state) {
        case XFER_NEXT:
            status = post_group(x);
            if (status != WEFT_OK) {
                return status;
            }
            break;
        case XFER_ENQUEUING:
            /* Until the group is enqueued the stream says nothing of it. */
            status = weft_nccl_poll(x->comm, "enqueuing a group");
            if (status != WEFT_OK) {
                return status;
            }
            x->state = XFER_RUNNING;
            break;
        case XFER_RUNNING:
            /* A failed peer or link shows here (network transports); a
             * dead peer over P2P or shared memory leaves the kernels
             * waiting: the caller's timeout and connection catch that. */
            status = weft_nccl_poll(x->comm, "a group in flight");
            if (status != WEFT_OK) {
                return status;
            }
            done = cudaStreamQuery(x->stream);
            if (done == cudaErrorNotReady) {
                return WEFT_INPROGRESS;
            }
            status = WEFT_CUDA_CHECK(done);
            if (status != WEFT_OK) {
                return status;
            }
            x->state = XFER_NEXT;
            break;
        default:
            return WEFT_OK;
        }
    }
}

int weft_nccl_stream_idle(cudaStream_t stream)
{
    return stream == NULL || cudaStreamQuery(stream) != cudaErrorNotReady;
}
