/*
 * A 64-bit checksum for verifying that bytes arrived intact: computed by
 * the producer on what it published and by a consumer on what it received.
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
 * change the sum; the terms are added, so a GPU may add them in any order
 * and still get the same result. Not cryptographic. Internal.
 */
#ifndef WEFT_KERNELS_CHECKSUM_H
#define WEFT_KERNELS_CHECKSUM_H

#include <weft/weft.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Checksum of host memory. */
uint64_t weft_checksum64(const void *data, size_t bytes);

/*
 * Checksum of device memory, computed on the GPU that owns it, on `stream`
 * (a cudaStream_t; NULL for the legacy default stream). Waits for the
 * result. Any alignment. WEFT_ERR_UNSUPPORTED when built without CUDA.
 */
weft_status_t weft_checksum64_cuda(const void *device_data, size_t bytes, void *stream,
                                   uint64_t *checksum);

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

#ifdef __cplusplus
}
#endif

#endif
