/*
 * Delta versions on the host (<weft/delta.h>): counting, encoding and
 * applying the byte-sparse delta between two versions of a tensor.
 *
 * The comparison goes 8 bytes at a time: most words of two consecutive
 * versions are equal (their XOR is zero), and a word that is not gives
 * its changed bytes from the XOR's non-zero bytes. The encoder makes two
 * passes: the first counts each chunk's changes into first[] (so the
 * offsets' and values' places are known), the second writes them.
 */
#include "config.h"

#include "common/log.h"

#include <stdint.h>
#include <string.h>
#include <weft/checksum.h>
#include <weft/delta.h>

#define DELTA_MAGIC 0x31444657u /* "WFD1" */

/* ------------------------------------------------------------- the layout */

typedef struct delta_header {
    uint32_t magic;
    uint32_t chunk_bytes;
    uint64_t tensor_bytes;
    uint64_t changes;
    uint64_t checksum;
} delta_header_t;

_Static_assert(sizeof(delta_header_t) == WEFT_DELTA_HEADER_BYTES, "the header is 32 bytes");

static uint64_t chunks_of(uint64_t bytes)
{
    return (bytes + WEFT_DELTA_CHUNK_BYTES - 1) / WEFT_DELTA_CHUNK_BYTES;
}

uint64_t weft_delta_bytes(uint64_t tensor_bytes, uint64_t changes)
{
    return WEFT_DELTA_HEADER_BYTES + 4 * chunks_of(tensor_bytes) + 3 * changes;
}

/* Little-endian loads and stores at any alignment (x86 and arm64 are
 * little-endian; the layout says so for any other). */
static uint64_t load64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

/* 0x80 in each byte of x that is not zero, 0 elsewhere (no carries
 * between bytes). */
static uint64_t nonzero_bytes(uint64_t x)
{
    return (((x & 0x7F7F7F7F7F7F7F7FULL) + 0x7F7F7F7F7F7F7F7FULL) | x) & 0x8080808080808080ULL;
}

/* The changed bytes of [a, a + n) against b. */
static uint64_t count_range(const uint8_t *a, const uint8_t *b, uint64_t n)
{
    uint64_t changes = 0, i = 0;

    for (; i + 8 <= n; i += 8) {
        const uint64_t x = load64(a + i) ^ load64(b + i);
        if (x != 0) {
            changes += (uint64_t)__builtin_popcountll(nonzero_bytes(x));
        }
    }
    for (; i < n; i++) {
        changes += a[i] != b[i];
    }
    return changes;
}

/* Writes chunk `base`'s changes (its n bytes of old a and new b) at
 * offsets[k], values[k], k from `at` on; returns the next k. */
static uint64_t write_range(const uint8_t *a, const uint8_t *b, uint64_t n, uint8_t *offsets, uint8_t *values,
                            uint64_t at)
{
    uint64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t mask = nonzero_bytes(load64(a + i) ^ load64(b + i));
        while (mask != 0) {
            const uint64_t pos = i + (uint64_t)(__builtin_ctzll(mask) >> 3);
            offsets[2 * at] = (uint8_t)pos;
            offsets[2 * at + 1] = (uint8_t)(pos >> 8);
            values[at++] = b[pos];
            mask &= mask - 1;
        }
    }
    for (; i < n; i++) {
        if (a[i] != b[i]) {
            offsets[2 * at] = (uint8_t)i;
            offsets[2 * at + 1] = (uint8_t)(i >> 8);
            values[at++] = b[i];
        }
    }
    return at;
}

/* ---------------------------------------------------------------- encode */

weft_status_t weft_delta_count_host(const void *old_data, const void *new_data, uint64_t bytes, uint64_t *changes)
{
    if (changes == NULL || (bytes > 0 && (old_data == NULL || new_data == NULL))) {
        weft_log_error("weft_delta_count_host: NULL %s", changes == NULL ? "changes" : "data");
        return WEFT_ERR_INVALID_PARAM;
    }
    *changes = count_range(old_data, new_data, bytes);
    return WEFT_OK;
}

weft_status_t weft_delta_encode_host(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                     uint64_t out_capacity, uint64_t *out_bytes)
{
    const uint8_t *a = old_data, *b = new_data;
    uint8_t       *o = out, *first, *offsets, *values;
    const uint64_t chunks = chunks_of(bytes);
    uint64_t       changes = 0, size, at = 0;

    if (out == NULL || out_bytes == NULL || (bytes > 0 && (a == NULL || b == NULL)) || chunks > UINT32_MAX) {
        weft_log_error("weft_delta_encode_host: NULL pointers, or %llu bytes (more than 2^32 chunks)",
                       (unsigned long long)bytes);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (out_capacity < weft_delta_bytes(bytes, 0)) {
        return WEFT_ERR_NO_SPACE;
    }
    /* Pass 1: each chunk's first change, and whether it all fits. The
     * count stops as soon as it cannot. */
    first = o + WEFT_DELTA_HEADER_BYTES;
    for (uint64_t k = 0; k < chunks; k++) {
        const uint64_t start = k * WEFT_DELTA_CHUNK_BYTES;
        const uint64_t n = bytes - start < WEFT_DELTA_CHUNK_BYTES ? bytes - start : WEFT_DELTA_CHUNK_BYTES;

        if (changes > UINT32_MAX || weft_delta_bytes(bytes, changes) > out_capacity) {
            return WEFT_ERR_NO_SPACE;
        }
        put_u32(first + 4 * k, (uint32_t)changes);
        changes += count_range(a + start, b + start, n);
    }
    size = weft_delta_bytes(bytes, changes);
    if (changes > UINT32_MAX || size > out_capacity) {
        return WEFT_ERR_NO_SPACE;
    }
    /* Pass 2: the offsets and values, chunk by chunk. */
    offsets = first + 4 * chunks;
    values = offsets + 2 * changes;
    for (uint64_t k = 0; k < chunks; k++) {
        const uint64_t start = k * WEFT_DELTA_CHUNK_BYTES;
        const uint64_t n = bytes - start < WEFT_DELTA_CHUNK_BYTES ? bytes - start : WEFT_DELTA_CHUNK_BYTES;

        at = write_range(a + start, b + start, n, offsets, values, at);
    }
    put_u32(o, DELTA_MAGIC);
    put_u32(o + 4, WEFT_DELTA_CHUNK_BYTES);
    put_u64(o + 8, bytes);
    put_u64(o + 16, changes);
    put_u64(o + 24, weft_checksum_host(b, bytes));
    *out_bytes = size;
    return WEFT_OK;
}

/* ----------------------------------------------------------------- apply */

/* Every check of the delta before anything is written; NULL when it is
 * sound, else why not. */
static const char *check_delta(const uint8_t *d, uint64_t delta_bytes, uint64_t tensor_bytes, weft_status_t *status)
{
    const uint64_t chunks = chunks_of(tensor_bytes);
    uint64_t       changes;
    const uint8_t *first, *offsets;

    *status = WEFT_ERR_CORRUPT;
    if (delta_bytes < WEFT_DELTA_HEADER_BYTES) {
        return "shorter than its header";
    }
    if (get_u32(d) != DELTA_MAGIC) {
        *status = (get_u32(d) & 0x00FFFFFFu) == (DELTA_MAGIC & 0x00FFFFFFu) ? WEFT_ERR_VERSION : WEFT_ERR_CORRUPT;
        return *status == WEFT_ERR_VERSION ? "another layout version" : "not a delta (magic)";
    }
    if (get_u32(d + 4) != WEFT_DELTA_CHUNK_BYTES || get_u64(d + 8) != tensor_bytes) {
        return "its chunk or tensor size is not this tensor's";
    }
    changes = get_u64(d + 16);
    if (changes > tensor_bytes || delta_bytes != weft_delta_bytes(tensor_bytes, changes)) {
        return "its size does not match its change count";
    }
    first = d + WEFT_DELTA_HEADER_BYTES;
    offsets = first + 4 * chunks;
    for (uint64_t k = 0; k < chunks; k++) {
        const uint64_t begin = get_u32(first + 4 * k);
        const uint64_t end = k + 1 < chunks ? get_u32(first + 4 * (k + 1)) : changes;
        const uint64_t start = k * WEFT_DELTA_CHUNK_BYTES;
        const uint64_t n = tensor_bytes - start < WEFT_DELTA_CHUNK_BYTES ? tensor_bytes - start : WEFT_DELTA_CHUNK_BYTES;
        uint64_t       previous = 0;

        if ((k == 0 && begin != 0) || begin > end || end > changes || end - begin > n) {
            return "its chunk index is out of order";
        }
        for (uint64_t j = begin; j < end; j++) {
            const uint64_t off = (uint64_t)offsets[2 * j] | (uint64_t)offsets[2 * j + 1] << 8;
            if (off >= n || (j > begin && off <= previous)) {
                return "an offset is out of its chunk or out of order";
            }
            previous = off;
        }
    }
    *status = WEFT_OK;
    return NULL;
}

weft_status_t weft_delta_apply_host(const void *delta, uint64_t delta_bytes, const weft_delta_target_t *target,
                                    uint64_t *checksum)
{
    const uint8_t *d = delta;
    const uint8_t *first, *offsets, *values;
    uint64_t       chunks, changes;
    uint8_t       *data;
    weft_status_t  status;
    const char    *why;

    if (d == NULL || target == NULL || (target->data == NULL && target->tensor_bytes > 0) || target->row_bytes == 0 ||
        target->tensor_bytes % target->row_bytes != 0 || target->row_stride < target->row_bytes) {
        weft_log_error("weft_delta_apply_host: a NULL delta or target, or rows that do not tile the tensor");
        return WEFT_ERR_INVALID_PARAM;
    }
    why = check_delta(d, delta_bytes, target->tensor_bytes, &status);
    if (why != NULL) {
        weft_log_error("weft_delta_apply_host: the delta is refused: %s", why);
        return status;
    }
    chunks = chunks_of(target->tensor_bytes);
    changes = get_u64(d + 16);
    first = d + WEFT_DELTA_HEADER_BYTES;
    offsets = first + 4 * chunks;
    values = offsets + 2 * changes;
    data = target->data;
    for (uint64_t k = 0; k < chunks; k++) {
        const uint64_t begin = get_u32(first + 4 * k);
        const uint64_t end = k + 1 < chunks ? get_u32(first + 4 * (k + 1)) : changes;

        for (uint64_t j = begin; j < end; j++) {
            const uint64_t pos = k * WEFT_DELTA_CHUNK_BYTES + ((uint64_t)offsets[2 * j] | (uint64_t)offsets[2 * j + 1] << 8);
            data[pos / target->row_bytes * target->row_stride + pos % target->row_bytes] = values[j];
        }
    }
    if (checksum != NULL) {
        *checksum = get_u64(d + 24);
    }
    return WEFT_OK;
}
