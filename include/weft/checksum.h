/*
 * A 64-bit checksum for verifying that bytes arrived intact: computed by a
 * producer on what it wrote and by a consumer on what it received.
 *
 * Definition (the host function is the reference; the GPU one matches it
 * bit for bit): the data is read as little-endian 64-bit words w_i, the
 * last one zero-padded; with mix() the splitmix64 finalizer and
 * G = 0x9e3779b97f4a7c15,
 *
 *     sum = Σ_i mix(w_i + (i + 1)·G)   (mod 2^64)
 *     checksum = mix(sum ^ bytes)
 *
 * Each word is mixed with its position, so swapped words and shifted data
 * change the sum. Not cryptographic: it finds accidents (a torn or stale
 * copy, a lost write), not an attacker.
 *
 * Threads: both calls are reentrant.
 */
#ifndef WEFT_CHECKSUM_H
#define WEFT_CHECKSUM_H

#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The checksum of `bytes` bytes of host memory (any alignment). */
WEFT_API uint64_t weft_checksum_host(const void *data, size_t bytes);

/*
 * The same of device memory, computed on the GPU that holds it, on
 * `stream` (a cudaStream_t; NULL: the legacy default stream); waits for
 * the result. WEFT_ERR_UNSUPPORTED in a build without CUDA, WEFT_ERR_CUDA
 * when the GPU fails (logged). *checksum is written on success only.
 */
WEFT_API weft_status_t weft_checksum_cuda(const void *device_data, size_t bytes, void *stream,
                                          uint64_t *checksum);

/*
 * The same, enqueued on `stream` without waiting: when the stream gets
 * past this call's work, *result holds the checksum. `result` must be
 * memory the GPU can write (device memory of the same GPU, or pinned,
 * mapped host memory); it is scratch until then. For producers that sum
 * what they write inside a pipeline (a writer callback must not stall the
 * host thread that feeds the GPU). The data must stay unchanged until the
 * stream gets there. WEFT_ERR_INVALID_PARAM for a NULL result (or NULL
 * data with bytes > 0), WEFT_ERR_UNSUPPORTED without CUDA, WEFT_ERR_CUDA
 * when a launch fails (logged).
 */
WEFT_API weft_status_t weft_checksum_cuda_async(const void *device_data, size_t bytes, uint64_t *result,
                                                void *stream);

/*
 * The checksums of `count` chunks of `bytes` bytes each, chunk i at
 * device_data + i·stride (stride ≥ bytes when count > 1), into
 * results[0 .. count − 1], in one launch and enqueued like
 * weft_checksum_cuda_async: an engine's fused tensor [E, rows, cols]
 * verifies all its experts at once. count ≤ 65535 (0: nothing to do).
 * WEFT_ERR_INVALID_PARAM otherwise or for NULL pointers, else as above.
 */
WEFT_API weft_status_t weft_checksum_cuda_strided_async(const void *device_data, size_t bytes, size_t stride,
                                                        uint32_t count, uint64_t *results, void *stream);

/*
 * Counts the bytes at which a[0 .. bytes − 1] and b[0 .. bytes − 1]
 * differ, on the GPU, enqueued on `stream` like weft_checksum_cuda_async,
 * and adds the count to *count (zero it first: several comparisons can
 * add to one counter). a, b and count must be memory the stream's GPU
 * can read (count: write): its device memory, or page-locked host memory
 * registered as mapped (cudaHostRegister, cudaMallocHost), whose host
 * address the GPU uses as is. For engines that check a sampled subset of
 * what they received byte for byte against the producer's copy without
 * bringing either home. Any alignment. WEFT_ERR_INVALID_PARAM for a NULL
 * count (or NULL a or b with bytes > 0), WEFT_ERR_UNSUPPORTED without
 * CUDA, WEFT_ERR_CUDA when the launch fails (logged).
 */
WEFT_API weft_status_t weft_compare_cuda_async(const void *a, const void *b, size_t bytes, uint64_t *count,
                                               void *stream);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_CHECKSUM_H */
