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

#ifdef __cplusplus
}
#endif

#endif
