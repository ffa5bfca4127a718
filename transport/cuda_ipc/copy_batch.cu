/*
 * The batched copy: one CTA per chunk of at most WEFT_COPY_BATCH_CHUNK
 * bytes. Where source and destination share their alignment modulo 16,
 * the chunk moves as a head of single bytes, 16-byte vectors and a tail;
 * otherwise byte by byte (never the case for the FP8 and f32 tensors of a
 * version, whose offsets and rows are 16-byte multiples).
 *
 * Why SMs and not the copy engines: on one GPU, copies out of an arena that
 * another process exported (CUDA IPC) run on the copy engines at ~0.8 of a
 * device-to-device copy, while loads and stores from the SMs run at the
 * HBM's pace; and a version of hundreds of tensors whose ranges cannot
 * merge costs one copy-engine operation (microseconds) each, where here
 * they are just more CTAs of one launch. Each thread keeps kUnroll 16-byte
 * loads in flight before it stores them, so a 64 KiB chunk is requested
 * all at once. Chosen by timing variants on an H200 (1 GiB, source mapped
 * from another process): 512 threads × 8 loads came closest to
 * cudaMemcpyAsync, ahead of 256 × 4 and 256 × 8; larger chunks,
 * grid-stride loops, streaming (.cs) and read-only (.nc) loads did not
 * help. Over NVLink one large range runs a little slower than on the copy
 * engines, hence the split in transport/cuda_ipc.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "transport/cuda_ipc/copy_batch.h"

#include <cuda_runtime.h>

namespace {

constexpr int      kThreads   = 512;
constexpr int      kUnroll    = 8;
constexpr uint64_t kMaxBlocks = 2147483647u; /* gridDim.x */

static_assert(WEFT_COPY_BATCH_CHUNK % (16 * kThreads * kUnroll) == 0,
              "a chunk is a whole number of unrolled passes");

__device__ __forceinline__ void copy_bytes(unsigned char *dst, const unsigned char *src, uint64_t n)
{
    for (uint64_t i = threadIdx.x; i < n; i += kThreads) {
        dst[i] = src[i];
    }
}

__global__ void __launch_bounds__(kThreads) copy_batch_kernel(const weft_copy_desc_t *descs,
                                                              const unsigned char    *src_base)
{
    const weft_copy_desc_t d   = descs[blockIdx.x];
    const unsigned char   *src = src_base + d.src;
    unsigned char         *dst = reinterpret_cast<unsigned char *>(d.dst);

    if (((reinterpret_cast<uintptr_t>(src) ^ d.dst) & 15) != 0) {
        copy_bytes(dst, src, d.bytes);
        return;
    }
    uint64_t head = (16 - (d.dst & 15)) & 15;

    head = head < d.bytes ? head : d.bytes;
    const uint64_t vectors = (d.bytes - head) / 16;
    const uint4   *s = reinterpret_cast<const uint4 *>(src + head);
    uint4         *t = reinterpret_cast<uint4 *>(dst + head);

    copy_bytes(dst, src, head);
    for (uint64_t base = 0; base < vectors; base += kThreads * kUnroll) {
        uint4 v[kUnroll];

#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const uint64_t i = base + u * kThreads + threadIdx.x;
            if (i < vectors) {
                v[u] = s[i];
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const uint64_t i = base + u * kThreads + threadIdx.x;
            if (i < vectors) {
                t[i] = v[u];
            }
        }
    }
    copy_bytes(dst + head + vectors * 16, src + head + vectors * 16, d.bytes - head - vectors * 16);
}

} // namespace

extern "C" uint64_t weft_copy_batch_split(uint64_t src, uint64_t dst, uint64_t bytes,
                                          weft_copy_desc_t *out)
{
    uint64_t n = 0;

    for (uint64_t done = 0; done < bytes; done += WEFT_COPY_BATCH_CHUNK, n++) {
        const uint64_t len = bytes - done < WEFT_COPY_BATCH_CHUNK ? bytes - done : WEFT_COPY_BATCH_CHUNK;

        if (out != NULL) {
            out[n] = (weft_copy_desc_t){.src = src + done, .dst = dst + done, .bytes = len};
        }
    }
    return n;
}

extern "C" weft_status_t weft_copy_batch_launch(const weft_copy_desc_t *descs, uint64_t count,
                                                const void *src_base, void *stream)
{
    cudaStream_t s = static_cast<cudaStream_t>(stream);

    for (uint64_t first = 0; first < count; first += kMaxBlocks) {
        uint64_t n = count - first < kMaxBlocks ? count - first : kMaxBlocks;

        copy_batch_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(
            descs + first, static_cast<const unsigned char *>(src_base));
        weft_status_t status = WEFT_CUDA_CHECK(cudaGetLastError());
        if (status != WEFT_OK) {
            return status;
        }
    }
    return WEFT_OK;
}
