/*
 * Little-endian loads and stores at any alignment, for the host code that
 * reads and writes byte layouts (the FP8 writer's transpose, the delta
 * codec, the checksum): x86 and arm64 are little-endian, and the layouts
 * say so for any other. Internal.
 */
#ifndef WEFT_KERNELS_LE_BYTES_H
#define WEFT_KERNELS_LE_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t weft_le_load64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void weft_le_store64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, sizeof(v));
}

/* Up to 8 bytes, zero-padded. */
static inline uint64_t weft_le_load_partial(const uint8_t *p, size_t n)
{
    uint64_t v = 0;

    for (size_t b = 0; b < n; b++) {
        v |= (uint64_t)p[b] << (8 * b);
    }
    return v;
}

static inline uint32_t weft_le_load32(const uint8_t *p)
{
    return (uint32_t)weft_le_load_partial(p, 4);
}

static inline void weft_le_store32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

#endif
