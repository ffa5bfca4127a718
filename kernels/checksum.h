/*
 * The checksum's per-word steps, shared by the host reference and the GPU
 * kernel; the definition and the calls are in <weft/checksum.h>. Internal.
 */
#ifndef WEFT_KERNELS_CHECKSUM_H
#define WEFT_KERNELS_CHECKSUM_H

#include <weft/checksum.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The per-word steps, shared by the host and GPU code. */
#define WEFT_CHECKSUM_GOLDEN 0x9e3779b97f4a7c15ULL

#ifdef __CUDACC__
#define WEFT_CHECKSUM_FN static inline __host__ __device__
#else
#define WEFT_CHECKSUM_FN static inline
#endif

WEFT_CHECKSUM_FN uint64_t weft_checksum_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

WEFT_CHECKSUM_FN uint64_t weft_checksum_term(uint64_t word, uint64_t index)
{
    return weft_checksum_mix(word + (index + 1) * WEFT_CHECKSUM_GOLDEN);
}

WEFT_CHECKSUM_FN uint64_t weft_checksum_final(uint64_t sum, uint64_t bytes)
{
    return weft_checksum_mix(sum ^ bytes);
}

/*
 * The checksums of count segments of device memory at base: segment i is
 * bytes[i] bytes at base + offsets[i], its sum into results[i]; offsets,
 * bytes and results are device memory of the current device. Enqueued on
 * stream as weft_checksum_cuda_async, in one launch for up to 65535
 * segments (a registry version's tensors: a launch each would cost more
 * than the sums). Built with CUDA only.
 */
weft_status_t weft_checksum_cuda_segments_async(const void *base, const uint64_t *offsets, const uint64_t *bytes,
                                                uint32_t count, uint64_t *results, void *stream);

/* Device memory that weft_checksum_cuda_ranges keeps between calls
 * (zeroed to start; one caller at a time). */
typedef struct weft_checksum_scratch {
    void  *memory; /* on `device` */
    size_t bytes;
    int    device;
} weft_checksum_scratch_t;

/*
 * The checksums of count ranges of the current device's memory (ptrs[i],
 * bytes[i] bytes each; host arrays) into sums[0 .. count − 1]: the ranges
 * go up in one copy, up to 65535 a launch on the legacy default stream,
 * the sums come home in one copy, which waits. scratch is grown as
 * needed (a cudaMalloc is slower than the sums: it is kept for the next
 * call). WEFT_ERR_CUDA (logged), WEFT_ERR_UNSUPPORTED without CUDA.
 */
weft_status_t weft_checksum_cuda_ranges(const uint8_t *const *ptrs, const uint64_t *bytes, uint32_t count,
                                        uint64_t *sums, weft_checksum_scratch_t *scratch);

/* The same on the GPU that holds ptrs[0] (all on one GPU), made current
 * for the call and the caller's device restored. */
weft_status_t weft_checksum_cuda_ranges_where(const uint8_t *const *ptrs, const uint64_t *bytes, uint32_t count,
                                              uint64_t *sums, weft_checksum_scratch_t *scratch);

/* Frees what a scratch holds (on its device; the current one is kept). */
void weft_checksum_scratch_free(weft_checksum_scratch_t *scratch);

/*
 * weft_checksum_host of `rows` rows of row_bytes bytes each, row_stride
 * bytes apart from data (a strided view of a fused tensor), read as if
 * they lay end to end: a consumer checks what it wrote into such a view
 * without gathering it first.
 */
uint64_t weft_checksum_host_rows(const void *data, uint64_t row_bytes, uint64_t row_stride, uint64_t rows);

/*
 * The terms of bytes [at, at + n) of a tensor at `data` (`at` a multiple
 * of 8; a last partial word zero-padded), before weft_checksum_final:
 * pieces of a tensor summed apart add up to weft_checksum_host's sum.
 */
uint64_t weft_checksum_terms_host(const void *data, uint64_t at, uint64_t n);

/*
 * The checksums of `count` tensors in host memory (tensor i: bytes[i] at
 * data[i]) into sums[i], each weft_checksum_host's, on up to as many
 * threads as the host has CPUs (one for each 4 MB; pieces of a tensor
 * go to different threads). Blocks until done. 0, or -1 when out of
 * memory (nothing set). Thread-safe.
 */
int weft_checksum_host_batch(const void *const *data, const uint64_t *bytes, uint32_t count, uint64_t *sums);

#ifdef __cplusplus
}
#endif

#endif
