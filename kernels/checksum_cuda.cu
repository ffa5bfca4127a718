/*
 * The GPU checksum. One pass over the data: each thread adds the terms of
 * a grid-strided set of 8-byte words, a warp reduces with shuffles, one
 * atomicAdd per block folds the block's sum into the result. Addition mod
 * 2^64 commutes, so the result does not depend on scheduling. Bound by
 * memory bandwidth; meant for verification, not for the hot path.
 */
#include "config.h"

#include "block_sum.cuh"
#include "checksum.h"
#include "common/cuda_util.h"

#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

__device__ uint64_t load_word(const unsigned char *p, size_t n, bool aligned)
{
    if (aligned && n == 8) {
        return *reinterpret_cast<const uint64_t *>(p);
    }
    uint64_t word = 0;
    for (size_t b = 0; b < n; b++) {
        word |= static_cast<uint64_t>(p[b]) << (8 * b);
    }
    return word;
}


/* Grid (blocks a chunk, chunks): chunk blockIdx.y starts at
 * base + y·stride and its sum goes to sums[y]. */
__global__ void checksum_kernel(const unsigned char *base, size_t bytes, size_t stride, unsigned long long *sums)
{
    const unsigned char *data = base + blockIdx.y * stride;
    unsigned long long  *sum = sums + blockIdx.y;
    const bool           aligned = (reinterpret_cast<uintptr_t>(data) & 7) == 0;
    const size_t         words = (bytes + 7) / 8;
    uint64_t             local = 0;

    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < words;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        size_t n = bytes - 8 * i < 8 ? bytes - 8 * i : 8;
        local += weft_checksum_term(load_word(data + 8 * i, n, aligned), i);
    }
    weft_block_add<kThreads>(local, sum);
}

/* Grid (blocks a segment, segments): segment blockIdx.y is bytes[y]
 * bytes at base + offsets[y]; its sum, finished, goes to sums[y] by
 * segments_finalize_kernel. */
__global__ void segments_kernel(const unsigned char *base, const uint64_t *offsets, const uint64_t *bytes,
                                unsigned long long *sums)
{
    const unsigned char *data = base + offsets[blockIdx.y];
    const size_t         n_bytes = bytes[blockIdx.y];
    const bool           aligned = (reinterpret_cast<uintptr_t>(data) & 7) == 0;
    const size_t         words = (n_bytes + 7) / 8;
    uint64_t             local = 0;

    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < words;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        size_t n = n_bytes - 8 * i < 8 ? n_bytes - 8 * i : 8;
        local += weft_checksum_term(load_word(data + 8 * i, n, aligned), i);
    }
    weft_block_add<kThreads>(local, sums + blockIdx.y);
}

__global__ void segments_finalize_kernel(unsigned long long *sums, const uint64_t *bytes, uint32_t count)
{
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        sums[i] = weft_checksum_final(sums[i], bytes[i]);
    }
}

/* The sums' last step, in place: a thread a sum. */
__global__ void finalize_kernel(unsigned long long *sums, uint32_t count, size_t bytes)
{
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        sums[i] = weft_checksum_final(sums[i], bytes);
    }
}

/* 1 in the lowest bit of each byte of x that is not zero. */
__device__ uint64_t nonzero_bytes(uint64_t x)
{
    x |= x >> 4;
    x |= x >> 2;
    x |= x >> 1;
    return x & 0x0101010101010101ULL;
}

/* Differing bytes of a and b: 8-byte words where both are aligned alike
 * (a head of single bytes brings them to a word boundary), single bytes
 * otherwise; a block's count folded in with one atomicAdd. */
__global__ void compare_kernel(const unsigned char *a, const unsigned char *b, size_t bytes, unsigned long long *count)
{
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t first  = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    uint64_t     local  = 0;
    size_t       head   = 0;

    if (((reinterpret_cast<uintptr_t>(a) ^ reinterpret_cast<uintptr_t>(b)) & 7) == 0) {
        head = (8 - (reinterpret_cast<uintptr_t>(a) & 7)) & 7;
        head = head < bytes ? head : bytes;
        const size_t words = (bytes - head) / 8;
        const auto  *wa    = reinterpret_cast<const uint64_t *>(a + head);
        const auto  *wb    = reinterpret_cast<const uint64_t *>(b + head);
        for (size_t i = first; i < words; i += stride) {
            local += __popcll(nonzero_bytes(wa[i] ^ wb[i]));
        }
        /* The bytes before the first word and after the last. */
        for (size_t i = first; i < head; i += stride) {
            local += a[i] != b[i];
        }
        for (size_t i = head + 8 * words + first; i < bytes; i += stride) {
            local += a[i] != b[i];
        }
    } else {
        for (size_t i = first; i < bytes; i += stride) {
            local += a[i] != b[i];
        }
    }
    weft_block_add<kThreads>(local, count);
}

/* The current device's multiprocessors, which the launches size their
 * grids by. */
weft_status_t multiprocessors(int *sms)
{
    int           device;
    weft_status_t status = WEFT_CUDA_CHECK(cudaGetDevice(&device));

    return status == WEFT_OK ? WEFT_CUDA_CHECK(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device))
                             : status;
}

} // namespace

extern "C" weft_status_t weft_compare_cuda_async(const void *a, const void *b, size_t bytes, uint64_t *count,
                                                 void *stream)
{
    int           sms;
    weft_status_t status;

    if (count == nullptr || (bytes > 0 && (a == nullptr || b == nullptr))) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (bytes == 0) {
        return WEFT_OK;
    }
    status = multiprocessors(&sms);
    if (status == WEFT_OK) {
        /* At most 8 blocks an SM; no more than the words need. */
        const size_t want   = (bytes / 8 + kThreads) / kThreads;
        const size_t most   = static_cast<size_t>(sms) * 8;
        const size_t blocks = want < most ? want : most;

        compare_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<const unsigned char *>(a), static_cast<const unsigned char *>(b), bytes,
            reinterpret_cast<unsigned long long *>(count));
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    return status;
}

extern "C" weft_status_t weft_checksum_cuda_strided_async(const void *device_data, size_t bytes, size_t stride,
                                                          uint32_t count, uint64_t *results, void *stream)
{
    cudaStream_t        s = static_cast<cudaStream_t>(stream);
    unsigned long long *sums = reinterpret_cast<unsigned long long *>(results);
    int                 sms;
    weft_status_t       status;

    if ((device_data == nullptr && bytes > 0 && count > 0) || (results == nullptr && count > 0) ||
        (count > 1 && stride < bytes) || count > 65535) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (count == 0) {
        return WEFT_OK;
    }
    status = multiprocessors(&sms);
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaMemsetAsync(sums, 0, count * sizeof(*sums), s));
    }
    if (status == WEFT_OK && bytes > 0) {
        /* About 8 blocks an SM in all, at least one a chunk. */
        const size_t words = (bytes + 7) / 8;
        const size_t want = (words + kThreads - 1) / kThreads;
        const size_t share = static_cast<size_t>(sms) * 8 / count;
        const size_t blocks = want < share ? want : (share > 0 ? share : 1);

        checksum_kernel<<<dim3(static_cast<unsigned>(blocks), count), kThreads, 0, s>>>(
            static_cast<const unsigned char *>(device_data), bytes, stride, sums);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    if (status == WEFT_OK) {
        finalize_kernel<<<(count + 255) / 256, 256, 0, s>>>(sums, count, bytes);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    return status;
}

extern "C" weft_status_t weft_checksum_cuda_segments_async(const void *base, const uint64_t *offsets,
                                                           const uint64_t *bytes, uint32_t count, uint64_t *results,
                                                           void *stream)
{
    cudaStream_t        s = static_cast<cudaStream_t>(stream);
    unsigned long long *sums = reinterpret_cast<unsigned long long *>(results);
    int                 sms;
    weft_status_t       status;

    if (count > 0 && (base == nullptr || offsets == nullptr || bytes == nullptr || results == nullptr)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (count == 0) {
        return WEFT_OK;
    }
    if (count > 65535) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = multiprocessors(&sms);
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaMemsetAsync(sums, 0, count * sizeof(*sums), s));
    }
    if (status == WEFT_OK) {
        /* About 8 blocks an SM in all, shared by the segments, at least one
         * each; a block with nothing of its segment left adds 0. */
        const size_t share = static_cast<size_t>(sms) * 8 / count;
        const size_t blocks = share > 0 ? share : 1;

        segments_kernel<<<dim3(static_cast<unsigned>(blocks), count), kThreads, 0, s>>>(
            static_cast<const unsigned char *>(base), offsets, bytes, sums);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    if (status == WEFT_OK) {
        segments_finalize_kernel<<<(count + 255) / 256, 256, 0, s>>>(sums, bytes, count);
        status = WEFT_CUDA_CHECK(cudaGetLastError());
    }
    return status;
}

extern "C" weft_status_t weft_checksum_cuda_async(const void *device_data, size_t bytes, uint64_t *result,
                                                  void *stream)
{
    if ((device_data == nullptr && bytes > 0) || result == nullptr) {
        return WEFT_ERR_INVALID_PARAM;
    }
    return weft_checksum_cuda_strided_async(device_data, bytes, bytes, 1, result, stream);
}

extern "C" weft_status_t weft_checksum_cuda(const void *device_data, size_t bytes, void *stream, uint64_t *checksum)
{
    cudaStream_t  s = static_cast<cudaStream_t>(stream);
    uint64_t     *d_sum = nullptr;
    uint64_t      h_sum = 0;
    weft_status_t status;

    if ((device_data == nullptr && bytes > 0) || checksum == nullptr) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = WEFT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void **>(&d_sum), sizeof(*d_sum), s));
    if (status != WEFT_OK) {
        return status;
    }
    status = weft_checksum_cuda_async(device_data, bytes, d_sum, stream);
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(&h_sum, d_sum, sizeof(h_sum), cudaMemcpyDeviceToHost, s));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    {
        weft_status_t free_status = WEFT_CUDA_CHECK(cudaFreeAsync(d_sum, s));
        if (status == WEFT_OK) {
            status = free_status;
        }
    }
    if (status == WEFT_OK) {
        *checksum = h_sum;
    }
    return status;
}

extern "C" weft_status_t weft_checksum_cuda_ranges(const uint8_t *const *ptrs, const uint64_t *bytes, uint32_t count,
                                                   uint64_t *sums, weft_checksum_scratch_t *scratch)
{
    const uint32_t chunk = count < 65535u ? count : 65535u;
    const size_t   need = static_cast<size_t>(chunk) * 3 * sizeof(uint64_t);
    uint64_t      *host = nullptr;
    int            device;
    weft_status_t  status;

    if (count == 0) {
        return WEFT_OK;
    }
    if (ptrs == nullptr || bytes == nullptr || sums == nullptr || scratch == nullptr) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = WEFT_CUDA_CHECK(cudaGetDevice(&device));
    if (status == WEFT_OK && scratch->memory != nullptr && (scratch->bytes < need || scratch->device != device)) {
        weft_checksum_scratch_free(scratch);
    }
    if (status == WEFT_OK && scratch->memory == nullptr) {
        status = WEFT_CUDA_CHECK(cudaMalloc(&scratch->memory, need));
        scratch->bytes = status == WEFT_OK ? need : 0;
        scratch->device = device;
    }
    host = static_cast<uint64_t *>(malloc(static_cast<size_t>(chunk) * 2 * sizeof(uint64_t)));
    if (status == WEFT_OK && host == nullptr) {
        status = WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t first = 0; first < count && status == WEFT_OK; first += chunk) {
        const uint32_t n = count - first < chunk ? count - first : chunk;
        uint64_t      *dev = static_cast<uint64_t *>(scratch->memory);
        uintptr_t      base = UINTPTR_MAX;

        /* Offsets from the lowest range: one base for the launch. */
        for (uint32_t i = 0; i < n; i++) {
            base = reinterpret_cast<uintptr_t>(ptrs[first + i]) < base ? reinterpret_cast<uintptr_t>(ptrs[first + i])
                                                                      : base;
        }
        for (uint32_t i = 0; i < n; i++) {
            host[i] = reinterpret_cast<uintptr_t>(ptrs[first + i]) - base;
            host[chunk + i] = bytes[first + i];
        }
        status = WEFT_CUDA_CHECK(
            cudaMemcpy(dev, host, static_cast<size_t>(chunk) * 2 * sizeof(uint64_t), cudaMemcpyHostToDevice));
        if (status == WEFT_OK) {
            status = weft_checksum_cuda_segments_async(reinterpret_cast<const void *>(base), dev, dev + chunk, n,
                                                       dev + 2 * static_cast<size_t>(chunk), nullptr);
        }
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaMemcpy(sums + first, dev + 2 * static_cast<size_t>(chunk),
                                                n * sizeof(uint64_t), cudaMemcpyDeviceToHost));
        }
    }
    free(host);
    return status;
}

extern "C" weft_status_t weft_checksum_cuda_ranges_where(const uint8_t *const *ptrs, const uint64_t *bytes,
                                                         uint32_t count, uint64_t *sums,
                                                         weft_checksum_scratch_t *scratch)
{
    cudaPointerAttributes attr;
    int                   saved = -1;
    weft_status_t         status;

    if (count == 0) {
        return WEFT_OK;
    }
    status = WEFT_CUDA_CHECK(cudaGetDevice(&saved));
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptrs[0]));
    }
    if (status == WEFT_OK && attr.type != cudaMemoryTypeDevice) {
        status = WEFT_ERR_INVALID_PARAM;
    }
    if (status == WEFT_OK && attr.device != saved) {
        status = WEFT_CUDA_CHECK(cudaSetDevice(attr.device));
    }
    if (status == WEFT_OK) {
        status = weft_checksum_cuda_ranges(ptrs, bytes, count, sums, scratch);
        if (attr.device != saved) {
            (void)WEFT_CUDA_CHECK(cudaSetDevice(saved));
        }
    }
    return status;
}

extern "C" void weft_checksum_scratch_free(weft_checksum_scratch_t *scratch)
{
    if (scratch->memory != nullptr) {
        /* cudaFree finds the allocation's device from the pointer. */
        (void)WEFT_CUDA_CHECK(cudaFree(scratch->memory));
    }
    scratch->memory = nullptr;
    scratch->bytes = 0;
}
