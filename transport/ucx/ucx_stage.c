/*
 * The consumer's staging ring for device views on the staged path
 * (ucx_cuda.h): pinned host memory of two halves, into which the server
 * puts a version round by round (plan/rounds.h). Each round's pieces are
 * copied into the views on a stream of the views' GPU, and only the
 * pieces: they are the views' elements, so the gaps of strided views (the
 * engine's bytes) are never written.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/log.h"
#include "ucx_cuda.h"
#include "transport/plan/rounds.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct weft_ucx_stage {
    uint8_t          *host;  /* 2 × half bytes, pinned */
    uint64_t          half;
    weft_wire_span_t *spans; /* of the views, device addresses: where pieces may go */
    uint32_t          count;
    cudaStream_t      stream;
};

weft_status_t weft_ucx_stage_create(const weft_wire_span_t *spans, uint32_t count, uint64_t half,
                                    weft_ucx_stage_t **out)
{
    weft_ucx_stage_t *st = calloc(1, sizeof(*st));
    weft_status_t     status;

    if (st == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    st->spans = calloc(count + 1, sizeof(*st->spans));
    if (st->spans == NULL) {
        weft_ucx_stage_destroy(st);
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(st->spans, spans, count * sizeof(*spans));
    st->count = count;
    st->half = half;
    status = WEFT_CUDA_CHECK(cudaHostAlloc((void **)&st->host, 2 * half, cudaHostAllocDefault));
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    }
    if (status != WEFT_OK) {
        weft_log_error("remote: no staging ring of %" PRIu64 " bytes in pinned host memory for "
                       "the device views",
                       2 * half);
        weft_ucx_stage_destroy(st);
        return status;
    }
    *out = st;
    return WEFT_OK;
}

void weft_ucx_stage_destroy(weft_ucx_stage_t *st)
{
    if (st == NULL) {
        return;
    }
    if (st->stream != NULL) {
        (void)WEFT_CUDA_CHECK(cudaStreamDestroy(st->stream));
    }
    if (st->host != NULL) {
        (void)WEFT_CUDA_CHECK(cudaFreeHost(st->host));
    }
    free(st->spans);
    free(st);
}

weft_wire_span_t weft_ucx_stage_area(const weft_ucx_stage_t *st)
{
    return (weft_wire_span_t){.base = (uint64_t)(uintptr_t)st->host, .bytes = 2 * st->half};
}

uint64_t weft_ucx_stage_half(const weft_ucx_stage_t *st)
{
    return st->half;
}

weft_status_t weft_ucx_stage_round(weft_ucx_stage_t *st, const weft_ctl_msg_t *msg,
                                   uint64_t *version, uint32_t *round, uint32_t *rounds)
{
    weft_ucx_piece_t *pieces;
    uint64_t          count;
    weft_status_t     status = weft_ucx_get_round(msg, st->half, st->spans, st->count, version,
                                                  round, rounds, &pieces, &count);

    if (status != WEFT_OK) {
        weft_log_error("remote: a malformed round, or one outside the ring or the views");
        return status;
    }
    for (uint64_t i = 0; i < count && status == WEFT_OK; i++) {
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync((void *)(uintptr_t)pieces[i].dst,
                                                 st->host + pieces[i].ring_offset, pieces[i].bytes,
                                                 cudaMemcpyHostToDevice, st->stream));
    }
    free(pieces);
    /* Waited for even after a failed enqueue: nothing may still read the
     * ring when the server is told it may put there again, or when the
     * caller gives up on this version. */
    {
        weft_status_t synced = WEFT_CUDA_CHECK(cudaStreamSynchronize(st->stream));

        return status != WEFT_OK ? status : synced;
    }
}
