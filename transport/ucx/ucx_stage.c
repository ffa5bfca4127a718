/*
 * The consumer's staging area for device views on the staged path
 * (ucx_cuda.h). Span i of the views (device memory) lands at area +
 * at[i]; the spans are packed one after another, so the area costs as
 * much pinned host memory as the views' spans together. Only the views'
 * elements go back to the GPU, as runs laid out like a plan's copy ranges
 * (source: offset in the area; destination: device address), merged where
 * they follow on: the gaps of strided views are the engine's bytes.
 */
#include "config.h"

#include "common/log.h"
#include "transport/plan_ranges.h"
#include "transport/view_layout.h"
#include "ucx_cuda.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct weft_ucx_stage {
    uint8_t          *host;
    uint64_t          bytes;
    weft_wire_span_t *spans; /* of the views, device addresses */
    uint64_t         *at;    /* where each span lands in the area */
    uint32_t          count;
    weft_range_list_t runs;  /* the views' elements: area offset → device */
    cudaStream_t      stream;
};

weft_status_t weft_ucx_stage_create(const weft_wire_span_t *spans, uint32_t count,
                                    weft_ucx_stage_t **out)
{
    weft_ucx_stage_t *st = calloc(1, sizeof(*st));
    weft_status_t     status;

    if (st == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    st->spans = calloc(count + 1, sizeof(*st->spans));
    st->at = calloc(count + 1, sizeof(*st->at));
    if (st->spans == NULL || st->at == NULL) {
        weft_ucx_stage_destroy(st);
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < count; i++) {
        st->spans[i] = spans[i];
        st->at[i] = st->bytes;
        st->bytes += spans[i].bytes;
    }
    st->count = count;
    status = WEFT_CUDA_CHECK(
        cudaHostAlloc((void **)&st->host, st->bytes > 0 ? st->bytes : 1, cudaHostAllocDefault));
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    }
    if (status != WEFT_OK) {
        weft_log_error("remote: no staging area of %" PRIu64 " bytes in pinned host memory for "
                       "the device views",
                       st->bytes);
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
    weft_ranges_free(&st->runs);
    free(st->spans);
    free(st->at);
    free(st);
}

weft_wire_span_t weft_ucx_stage_area(const weft_ucx_stage_t *st)
{
    return (weft_wire_span_t){.base = (uint64_t)(uintptr_t)st->host,
                              .bytes = st->bytes > 0 ? st->bytes : 1};
}

weft_status_t weft_ucx_stage_views(weft_ucx_stage_t *st, const weft_recv_view_t *views, size_t count,
                                   weft_recv_view_t **out)
{
    weft_recv_view_t *staged = calloc(count, sizeof(*staged));
    weft_status_t     status = WEFT_OK;

    if (staged == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    memcpy(staged, views, count * sizeof(*staged));
    weft_ranges_free(&st->runs);
    for (size_t v = 0; v < count && status == WEFT_OK; v++) {
        uint64_t addr = (uint64_t)(uintptr_t)views[v].data;
        uint64_t strides[WEFT_TENSOR_MAX_DIMS], span;

        if (weft_view_span(&views[v], &span) != 0) {
            weft_log_error("remote: view %zu (\"%s\") has an invalid layout", v,
                           views[v].name != NULL ? views[v].name : "");
            status = WEFT_ERR_INVALID_PARAM;
            break;
        }
        weft_view_strides(&views[v], strides);
        staged[v].field_mask &= ~(uint64_t)WEFT_RECV_VIEW_FIELD_MEMORY;
        staged[v].memory = WEFT_MEMORY_HOST;
        /* Spans are merged: a view's first byte lies in exactly one. An
         * empty view lies in none and moves nothing. */
        for (uint32_t i = 0; i < st->count; i++) {
            if (addr >= st->spans[i].base && addr - st->spans[i].base < st->spans[i].bytes) {
                const uint64_t at = st->at[i] + (addr - st->spans[i].base);

                staged[v].data = st->host + at;
                status = weft_ranges_append(&st->runs, &(weft_range_tensor_t){
                                                           .view = (uint32_t)v,
                                                           .elem_size = weft_dtype_size(views[v].dtype),
                                                           .ndim = views[v].ndim,
                                                           .shape = views[v].shape,
                                                           .src_strides = strides,
                                                           .src_offset = at,
                                                           .dst_strides = strides,
                                                           .dst = (uint8_t *)views[v].data,
                                                       });
                break;
            }
        }
    }
    if (status == WEFT_OK) {
        status = weft_ranges_coalesce(&st->runs);
    }
    if (status != WEFT_OK) {
        free(staged);
        return status;
    }
    *out = staged;
    return WEFT_OK;
}

weft_status_t weft_ucx_stage_commit(weft_ucx_stage_t *st)
{
    weft_status_t status = WEFT_OK;

    for (uint64_t i = 0; i < st->runs.count && status == WEFT_OK; i++) {
        const weft_copy_range_t *run = &st->runs.ranges[i];

        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(run->dst, st->host + run->src, run->bytes,
                                                 cudaMemcpyHostToDevice, st->stream));
    }
    /* Waited for even after a failed enqueue: nothing may still run when
     * the caller gives up on this version. */
    {
        weft_status_t synced = WEFT_CUDA_CHECK(cudaStreamSynchronize(st->stream));

        return status != WEFT_OK ? status : synced;
    }
}
