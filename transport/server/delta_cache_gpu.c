/* A server's deltas encoded on the GPU (server/delta_cache_gpu.h). */
#include "config.h"

#include "transport/server/delta_cache_gpu.h"

#include "common/cuda_util.h"
#include "common/log.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <weft/delta.h>

/* The scratch at most: batches of this much delta keep the encoder's
 * workspace (a fifth of the bytes it reads) to a few hundred MB. */
#define SCRATCH_MAX (UINT64_C(256) << 20)

struct weft_delta_gpu {
    uint8_t                 *host[2];   /* pinned here (the cache's) */
    uint8_t                 *scratch;   /* device: the batch's deltas */
    uint64_t                 scratch_bytes;
    void                    *work;      /* the encoder's workspace, grown as batches need */
    size_t                   work_bytes;
    uint64_t                *sizes;     /* pinned, mapped: the batch's delta sizes */
    cudaStream_t             stream;
    cudaEvent_t              mark;
    weft_delta_cuda_tensor_t batch[WEFT_DELTA_GPU_BATCH_MAX];
    uint64_t                 checksums[WEFT_DELTA_GPU_BATCH_MAX]; /* the stored ones, where all are known */
    uint32_t                 count;
};

static void release(weft_delta_gpu_t *g)
{
    if (g->stream != NULL) {
        (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(g->stream));
        (void)WEFT_CUDA_CHECK(cudaStreamDestroy(g->stream));
    }
    if (g->mark != NULL) {
        (void)WEFT_CUDA_CHECK(cudaEventDestroy(g->mark));
    }
    for (int i = 0; i < 2; i++) {
        if (g->host[i] != NULL) {
            (void)WEFT_CUDA_CHECK(cudaHostUnregister(g->host[i]));
        }
    }
    (void)WEFT_CUDA_CHECK(cudaFree(g->scratch));
    (void)WEFT_CUDA_CHECK(cudaFree(g->work));
    (void)WEFT_CUDA_CHECK(cudaFreeHost(g->sizes));
    free(g);
}

weft_status_t weft_delta_gpu_create(uint8_t *const host[2], uint64_t capacity, uint64_t *scratch_bytes,
                                    weft_delta_gpu_t **out)
{
    weft_delta_gpu_t *g = calloc(1, sizeof(*g));
    weft_status_t     status = WEFT_OK;

    if (g == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    g->scratch_bytes = (capacity < SCRATCH_MAX ? capacity : SCRATCH_MAX) + 4095;
    g->scratch_bytes -= g->scratch_bytes % 4096;
    for (int i = 0; i < 2 && status == WEFT_OK; i++) {
        /* Pinned: the deltas come home at the link's speed. */
        status = WEFT_CUDA_CHECK(cudaHostRegister(host[i], capacity, cudaHostRegisterDefault));
        g->host[i] = status == WEFT_OK ? host[i] : NULL;
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaMalloc((void **)&g->scratch, g->scratch_bytes));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaHostAlloc((void **)&g->sizes, WEFT_DELTA_GPU_BATCH_MAX * sizeof(uint64_t),
                                               cudaHostAllocMapped));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&g->mark, cudaEventDisableTiming));
    }
    if (status != WEFT_OK) {
        release(g);
        return status;
    }
    *scratch_bytes = g->scratch_bytes;
    *out = g;
    return WEFT_OK;
}

void weft_delta_gpu_destroy(weft_delta_gpu_t *g)
{
    if (g != NULL) {
        release(g);
    }
}

weft_status_t weft_delta_gpu_encode(weft_delta_gpu_t *g, const weft_delta_gpu_item_t *items, uint32_t n)
{
    uint64_t      at = 0;
    size_t        need;
    weft_status_t status = WEFT_OK;

    if (n > WEFT_DELTA_GPU_BATCH_MAX) {
        return WEFT_ERR_INVALID_PARAM;
    }
    int known = 1;
    for (uint32_t i = 0; i < n; i++) {
        g->batch[i] = (weft_delta_cuda_tensor_t){.old_data = items[i].old_data, .new_data = items[i].new_data,
                                                 .bytes = items[i].bytes, .out = g->scratch + at,
                                                 .out_capacity = items[i].capacity};
        g->checksums[i] = items[i].checksum;
        known &= items[i].known != 0;
        at += (items[i].capacity + 63) / 64 * 64; /* deltas start 64-byte aligned */
    }
    if (at > g->scratch_bytes) {
        return WEFT_ERR_INVALID_PARAM;
    }
    g->count = n;
    need = weft_delta_cuda_encode_work_bytes(g->batch, n);
    if (need > g->work_bytes) {
        /* Grown, never shrunk: batches of a version are alike. */
        status = WEFT_CUDA_CHECK(cudaStreamSynchronize(g->stream));
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaFree(g->work));
            g->work = NULL;
            g->work_bytes = 0;
        }
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaMalloc(&g->work, need));
            g->work_bytes = status == WEFT_OK ? need : 0;
        }
    }
    if (status == WEFT_OK) {
        uint64_t *sizes = NULL;

        status = WEFT_CUDA_CHECK(cudaHostGetDevicePointer((void **)&sizes, g->sizes, 0));
        if (status == WEFT_OK) {
            status = known ? weft_delta_encode_cuda_with_checksums_async(g->batch, g->checksums, n, sizes, g->work,
                                                                         g->work_bytes, g->stream)
                           : weft_delta_encode_cuda_async(g->batch, n, sizes, g->work, g->work_bytes, g->stream);
        }
    }
    return status;
}

uint64_t weft_delta_gpu_size(const weft_delta_gpu_t *g, uint32_t i)
{
    return i < g->count ? g->sizes[i] : 0;
}

weft_status_t weft_delta_gpu_fetch_delta(weft_delta_gpu_t *g, uint32_t i, void *dst)
{
    if (i >= g->count) {
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, g->batch[i].out, g->sizes[i], cudaMemcpyDeviceToHost, g->stream));
}

weft_status_t weft_delta_gpu_fetch_bytes(weft_delta_gpu_t *g, const void *src, uint64_t bytes, void *dst)
{
    return WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g->stream));
}

weft_status_t weft_delta_gpu_wait(weft_delta_gpu_t *g)
{
    return WEFT_CUDA_CHECK(cudaStreamSynchronize(g->stream));
}

weft_status_t weft_delta_gpu_mark(weft_delta_gpu_t *g)
{
    return WEFT_CUDA_CHECK(cudaEventRecord(g->mark, g->stream));
}

weft_status_t weft_delta_gpu_ready(weft_delta_gpu_t *g)
{
    const cudaError_t err = cudaEventQuery(g->mark);

    if (err == cudaErrorNotReady) {
        return WEFT_INPROGRESS;
    }
    return WEFT_CUDA_CHECK(err);
}
