/* A remote consumer's deltas into device views (remote_delta_gpu.h). */
#include "config.h"

#include "transport/remote/remote_delta_gpu.h"

#include "common/cuda_util.h"
#include "common/log.h"
#include "kernels/delta_internal.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct weft_remote_delta_gpu {
    int                      device;
    uint32_t                 count;
    uint8_t                 *inbox;        /* where the server puts */
    int                      inbox_host;   /* pinned host memory: copied up before the apply */
    uint8_t                 *device_inbox; /* the inbox itself, or its device copy */
    uint64_t                 inbox_bytes;
    cudaStream_t             stream;
    void                    *work;         /* the apply's workspace, then count verdicts, then count sums */
    size_t                   work_bytes;
    unsigned                *verdicts;     /* device */
    uint64_t                *sums;         /* device */
    unsigned                *host_verdicts; /* pinned: count of them, then count sums */
    uint64_t                *host_sums;
    weft_delta_cuda_patch_t *patches;      /* host: the PATCH entries of an apply */
    uint32_t                *which;        /* each patch's view */
};

static size_t align256(size_t n)
{
    return (n + 255) / 256 * 256;
}

/* Frees what is there; on the GPU made current by the caller. */
static void release(weft_remote_delta_gpu_t *g)
{
    if (g->stream != NULL) {
        (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(g->stream));
        (void)WEFT_CUDA_CHECK(cudaStreamDestroy(g->stream));
    }
    if (g->inbox_host) {
        (void)WEFT_CUDA_CHECK(cudaFreeHost(g->inbox));
        (void)WEFT_CUDA_CHECK(cudaFree(g->device_inbox));
    } else {
        (void)WEFT_CUDA_CHECK(cudaFree(g->inbox));
    }
    (void)WEFT_CUDA_CHECK(cudaFree(g->work));
    (void)WEFT_CUDA_CHECK(cudaFreeHost(g->host_verdicts));
    free(g->patches);
    free(g->which);
    free(g);
}

weft_status_t weft_remote_delta_gpu_create(int device, uint32_t count, uint64_t inbox_bytes,
                                           weft_memory_kind_t inbox_memory, weft_remote_delta_gpu_t **out,
                                           uint8_t **inbox)
{
    weft_remote_delta_gpu_t *g = calloc(1, sizeof(*g));
    const uint32_t           n = count ? count : 1;
    int                      saved;
    weft_status_t            status;

    if (g == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    status = weft_cuda_enter(device, &saved);
    if (status != WEFT_OK) {
        free(g);
        return status;
    }
    g->device = device;
    g->count = count;
    g->inbox_bytes = inbox_bytes;
    g->inbox_host = inbox_memory != WEFT_MEMORY_CUDA;
    g->patches = calloc(n, sizeof(*g->patches));
    g->which = calloc(n, sizeof(*g->which));
    if (g->patches == NULL || g->which == NULL) {
        status = WEFT_ERR_NO_MEMORY;
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    }
    if (status == WEFT_OK && g->inbox_host) {
        /* Pinned: the copy up runs at the link's speed, not staged by the driver. */
        status = WEFT_CUDA_CHECK(cudaMallocHost((void **)&g->inbox, inbox_bytes));
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaMalloc((void **)&g->device_inbox, inbox_bytes));
        }
    } else if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaMalloc((void **)&g->inbox, inbox_bytes));
        g->device_inbox = g->inbox;
    }
    if (status == WEFT_OK) {
        const size_t apply = align256(weft_delta_cuda_apply_work_bytes(n));

        g->work_bytes = apply;
        status = WEFT_CUDA_CHECK(cudaMalloc(&g->work, apply + align256(n * sizeof(unsigned)) + n * sizeof(uint64_t)));
        if (status == WEFT_OK) {
            g->verdicts = (unsigned *)((uint8_t *)g->work + apply);
            g->sums = (uint64_t *)((uint8_t *)g->verdicts + align256(n * sizeof(unsigned)));
        }
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaMallocHost((void **)&g->host_verdicts,
                                                align256(n * sizeof(unsigned)) + n * sizeof(uint64_t)));
        if (status == WEFT_OK) {
            g->host_sums = (uint64_t *)((uint8_t *)g->host_verdicts + align256(n * sizeof(unsigned)));
        }
    }
    if (status != WEFT_OK) {
        release(g);
    } else {
        *out = g;
        *inbox = g->inbox;
    }
    weft_cuda_leave(device, saved);
    return status;
}

void weft_remote_delta_gpu_destroy(weft_remote_delta_gpu_t *g)
{
    int saved;

    if (g == NULL) {
        return;
    }
    if (weft_cuda_enter(g->device, &saved) != WEFT_OK) {
        return; /* the GPU is gone: so is what it held */
    }
    release(g);
    weft_cuda_leave(g->device, saved);
}

/* Every entry's size and place checked before anything is enqueued, so
 * that a malformed map writes nothing; *patches and *used (the inbox's
 * bytes the entries reach). */
static weft_status_t check_map(weft_remote_delta_gpu_t *g, const weft_wire_delta_entry_t *map,
                               const weft_delta_target_t *targets, uint32_t count, uint32_t *patches,
                               uint64_t *used, uint32_t *bad)
{
    uint32_t n = 0;

    *used = 0;
    for (uint32_t i = 0; i < count; i++) {
        const weft_wire_delta_entry_t *e = &map[i];
        const weft_delta_target_t     *t = &targets[i];
        const int whole = e->kind == WEFT_WIRE_DELTA_WHOLE;

        if ((t->tensor_bytes == 0 && e->bytes != 0) || (whole && e->bytes != t->tensor_bytes) ||
            (!whole && t->tensor_bytes != 0 && e->offset % 8 != 0)) {
            weft_log_error("remote: view %u: a delta entry of %" PRIu64 " bytes at %" PRIu64
                           " (%s) does not fit a view of %" PRIu64 " bytes",
                           i, e->bytes, e->offset, whole ? "whole" : "patch", t->tensor_bytes);
            *bad = i;
            return WEFT_ERR_CORRUPT;
        }
        if (e->offset + e->bytes > *used) {
            *used = e->offset + e->bytes;
        }
        if (!whole && t->tensor_bytes != 0) {
            g->patches[n] = (weft_delta_cuda_patch_t){.delta = g->device_inbox + e->offset,
                                                      .delta_bytes = e->bytes, .target = *t};
            if (e->kind == WEFT_WIRE_DELTA_PATCH_T) { /* its W's delta, transposed */
                g->patches[n].target.transpose_rows = e->rows;
                g->patches[n].target.transpose_cols = e->cols;
                if (!weft_delta_target_sound(&g->patches[n].target)) {
                    weft_log_error("remote: view %u: W's matrices of %" PRIu64 " x %" PRIu64
                                   " bytes do not tile it",
                                   i, e->rows, e->cols);
                    *bad = i;
                    return WEFT_ERR_CORRUPT;
                }
            }
            g->which[n++] = i;
        }
    }
    *patches = n;
    return WEFT_OK;
}

/* Enqueues the copy up, the whole entries and the patches. */
static weft_status_t enqueue(weft_remote_delta_gpu_t *g, const weft_wire_delta_entry_t *map,
                             const weft_delta_target_t *targets, uint32_t count, uint32_t patches, uint64_t used)
{
    weft_status_t status = WEFT_OK;

    if (g->inbox_host && used > 0) {
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(g->device_inbox, g->inbox, used, cudaMemcpyHostToDevice, g->stream));
    }
    for (uint32_t i = 0; i < count && status == WEFT_OK; i++) {
        const weft_delta_target_t *t = &targets[i];

        if (map[i].kind == WEFT_WIRE_DELTA_WHOLE && t->tensor_bytes != 0) {
            status = WEFT_CUDA_CHECK(cudaMemcpy2DAsync(t->data, t->row_stride, g->device_inbox + map[i].offset,
                                                       t->row_bytes, t->row_bytes, t->tensor_bytes / t->row_bytes,
                                                       cudaMemcpyDeviceToDevice, g->stream));
        }
    }
    if (status == WEFT_OK) {
        status = weft_delta_apply_cuda_summed_async(g->patches, patches, g->verdicts, g->sums, g->work,
                                                    g->work_bytes, g->stream);
    }
    if (status == WEFT_OK && patches > 0) {
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(g->host_verdicts, g->verdicts, patches * sizeof(unsigned),
                                                 cudaMemcpyDeviceToHost, g->stream));
    }
    if (status == WEFT_OK && patches > 0) {
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(g->host_sums, g->sums, patches * sizeof(uint64_t),
                                                 cudaMemcpyDeviceToHost, g->stream));
    }
    /* Waited for even after a failure: nothing of ours may still run. */
    const weft_status_t waited = WEFT_CUDA_CHECK(cudaStreamSynchronize(g->stream));
    return status == WEFT_OK ? waited : status;
}

weft_status_t weft_remote_delta_gpu_apply(weft_remote_delta_gpu_t *g, const weft_wire_delta_entry_t *map,
                                          const weft_delta_target_t *targets, uint32_t count, uint8_t *patched,
                                          uint64_t *carried, uint32_t *bad)
{
    uint32_t      patches = 0;
    uint64_t      used = 0;
    int           saved;
    weft_status_t status;

    if (count > g->count) {
        *bad = g->count;
        return WEFT_ERR_CORRUPT;
    }
    status = check_map(g, map, targets, count, &patches, &used, bad);
    if (status != WEFT_OK) {
        return status;
    }
    status = weft_cuda_enter(g->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    status = enqueue(g, map, targets, count, patches, used);
    for (uint32_t k = 0; k < patches && status == WEFT_OK; k++) {
        const uint32_t i = g->which[k];

        if (g->host_verdicts[k] != 0) {
            weft_log_error("remote: view %u: its delta was refused on the GPU (verdict 0x%x: %s)", i,
                           g->host_verdicts[k],
                           g->host_verdicts[k] == WEFT_DELTA_VERDICT_SUM ? "its bytes after it are not the checksum it carries"
                                                      : "malformed or not this view's");
            *bad = i;
            status = WEFT_ERR_CORRUPT;
            break;
        }
        /* A WT's sum against WT's checksum: its delta, W's, carries W's
         * and the GPU compared none. */
        if (map[i].kind == WEFT_WIRE_DELTA_PATCH_T && g->host_sums[k] != map[i].checksum) {
            weft_log_error("remote: view %u after its W's delta: checksum 0x%016" PRIx64 ", the version's is 0x%016" PRIx64,
                           i, g->host_sums[k], map[i].checksum);
            *bad = i;
            status = WEFT_ERR_CORRUPT;
            break;
        }
        patched[i] = 1;
        carried[i] = g->host_sums[k];
    }
    weft_cuda_leave(g->device, saved);
    return status;
}
