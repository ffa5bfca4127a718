/*
 * The batched copy: one CTA per range. A range whose source, destination
 * and length are 16-byte aligned moves in 16-byte vectors, otherwise byte
 * by byte; the ranges this kernel gets are small (scales, padded rows), so
 * the launch it saves matters more than the width of its loads.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "copy_batch.h"

#include <cuda_runtime.h>

namespace {

constexpr int      kThreads   = 256;
constexpr uint64_t kMaxBlocks = 2147483647u; /* gridDim.x */

__global__ void copy_batch_kernel(const weft_copy_desc_t *descs, const unsigned char *src_base)
{
    const weft_copy_desc_t d   = descs[blockIdx.x];
    const unsigned char   *src = src_base + d.src;
    unsigned char         *dst = reinterpret_cast<unsigned char *>(d.dst);

    if (((reinterpret_cast<uintptr_t>(src) | d.dst | d.bytes) & 15) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4       *t = reinterpret_cast<uint4 *>(dst);
        for (uint64_t i = threadIdx.x; i < d.bytes / 16; i += kThreads) {
            t[i] = s[i];
        }
    } else {
        for (uint64_t i = threadIdx.x; i < d.bytes; i += kThreads) {
            dst[i] = src[i];
        }
    }
}

} // namespace

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
