/*
 * The verifiable payload of libweft's benchmarks and tests: what byte i of
 * tensor t of version v holds. Defined once here; weft-perf and the test
 * suites include it (header-only, so a test links nothing of perf/).
 *
 * Word i of tensor t of version v is seed(v, t) + i × an odd constant,
 * seed a bijective mix of (v, t). Within a tensor no word of one version
 * equals the same word of another, so a byte left from another version (a
 * torn read, a stale or a shifted copy) is always seen; words are stored
 * little-endian as the machine writes them, and byte i is byte i % 8 of
 * word i / 8.
 */
#ifndef WEFT_PERF_LIB_PAYLOAD_H
#define WEFT_PERF_LIB_PAYLOAD_H

#include <stdint.h>
#include <string.h>

/* Odd: i × PAYLOAD_STEP is a bijection of 64-bit words. */
#define PAYLOAD_STEP UINT64_C(0x9e3779b97f4a7c15)

/* splitmix64's finalizer: a bijection of 64-bit words. */
static inline uint64_t payload_mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static inline uint64_t payload_seed(uint64_t version, uint32_t tensor)
{
    return payload_mix(payload_mix(version) ^ tensor);
}

/* Word `word` of tensor `tensor` of `version`. */
static inline uint64_t payload_word(uint64_t version, uint32_t tensor, uint64_t word)
{
    return payload_seed(version, tensor) + word * PAYLOAD_STEP;
}

/* Byte `offset` of tensor `tensor` of `version`: for code that checks or
 * writes a byte at a time (a strided view, a GPU copy read back). */
static inline uint8_t payload_byte(uint64_t version, uint32_t tensor, uint64_t offset)
{
    uint64_t word = payload_word(version, tensor, offset / 8);
    uint8_t  bytes[8];

    memcpy(bytes, &word, sizeof(bytes));
    return bytes[offset % 8];
}

/* Writes the payload of tensor `tensor` of `version` over `bytes` bytes
 * (any count: a tail shorter than a word gets that word's first bytes). */
static inline void payload_fill(void *data, uint64_t bytes, uint64_t version, uint32_t tensor)
{
    const uint64_t base = payload_seed(version, tensor), words = bytes / 8;
    unsigned char *out = data;

    for (uint64_t i = 0; i < words; i++) {
        const uint64_t word = base + i * PAYLOAD_STEP;

        memcpy(out + i * 8, &word, 8); /* memcpy: data need not be aligned */
    }
    if (bytes % 8 != 0) {
        const uint64_t last = base + words * PAYLOAD_STEP;

        memcpy(out + words * 8, &last, bytes % 8);
    }
}

/* Offset of the first byte that differs from the payload; `bytes` when
 * every byte matches. */
static inline uint64_t payload_check(const void *data, uint64_t bytes, uint64_t version, uint32_t tensor)
{
    const uint64_t       base = payload_seed(version, tensor), words = bytes / 8;
    const unsigned char *in = data;

    for (uint64_t i = 0; i < words; i++) {
        const uint64_t expected = base + i * PAYLOAD_STEP;
        uint64_t       got;

        memcpy(&got, in + i * 8, 8);
        if (got != expected) {
            for (unsigned b = 0; b < 8; b++) {
                if (in[i * 8 + b] != ((const unsigned char *)&expected)[b]) {
                    return i * 8 + b;
                }
            }
        }
    }
    for (uint64_t off = words * 8; off < bytes; off++) {
        if (in[off] != payload_byte(version, tensor, off)) {
            return off;
        }
    }
    return bytes;
}

/* Bytes that differ from the payload (0 when all match): for reports that
 * count wrong bytes rather than find the first. */
static inline uint64_t payload_count_wrong(const void *data, uint64_t bytes, uint64_t version, uint32_t tensor)
{
    const uint64_t       base = payload_seed(version, tensor), words = bytes / 8;
    const unsigned char *in = data;
    uint64_t             wrong = 0;

    for (uint64_t i = 0; i < words; i++) {
        const uint64_t expected = base + i * PAYLOAD_STEP;
        uint64_t       got;

        memcpy(&got, in + i * 8, 8);
        if (got != expected) {
            for (unsigned b = 0; b < 8; b++) {
                wrong += in[i * 8 + b] != ((const unsigned char *)&expected)[b];
            }
        }
    }
    for (uint64_t off = words * 8; off < bytes; off++) {
        wrong += in[off] != payload_byte(version, tensor, off);
    }
    return wrong;
}

#endif
