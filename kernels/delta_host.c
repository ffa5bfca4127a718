/*
 * Delta versions on the host (<weft/delta.h>): counting, encoding and
 * applying the byte-sparse delta between two versions of a tensor.
 *
 * The comparison goes 8 bytes at a time: most words of two consecutive
 * versions are equal (their XOR is zero), and a word that is not gives
 * its changed bytes from the XOR's non-zero bytes. The encoder reads each
 * byte of the two versions once: a tensor's chunks are cut into
 * contiguous ranges, one a thread, and each range's changes go to buffers
 * of its own as it finds them, while the new bytes' checksum (a sum over
 * words, so ranges add up) is summed in the same loop; the ranges' changes
 * are then copied into place, one after another, as the layout has them.
 * (Two passes over the data, counting and then writing, read it twice and
 * ran at a quarter of a memcpy's speed on a 2-vCPU VM.)
 */
#include "config.h"

#include "checksum.h"
#include "delta_internal.h"
#include "le_bytes.h"
#include "common/log.h"
#include "common/pool.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <weft/checksum.h>
#include <weft/delta.h>

#define DELTA_MAGIC 0x31444657u /* "WFD1" */
/* Threads for one encode: a tensor below DELTA_THREAD_BYTES a thread (or
 * on one CPU) is encoded on the caller's thread alone. */
#define DELTA_THREADS_MAX  8
#define DELTA_THREAD_BYTES (UINT64_C(1) << 20)

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
        const uint64_t x = weft_le_load64(a + i) ^ weft_le_load64(b + i);
        if (x != 0) {
            changes += (uint64_t)__builtin_popcountll(nonzero_bytes(x));
        }
    }
    for (; i < n; i++) {
        changes += a[i] != b[i];
    }
    return changes;
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

/* One thread's share of an encode: chunks [k0, k1). Its first[] entries
 * (relative to its own first change), its changes' offsets and values in
 * buffers of its own, and its part of the checksum's sum. It stops as soon
 * as it holds more changes than the whole delta has room for. */
typedef struct encode_part {
    const uint8_t *a, *b;
    uint64_t       bytes, k0, k1, max_changes;
    uint8_t       *first;
    uint8_t       *offsets, *values; /* malloc'd: 2 and 1 bytes a change */
    uint64_t       changes, capacity, sum, base;
    int            failed;           /* no memory, or over max_changes */
    int            summed;           /* the checksum is known: not summed here */
} encode_part_t;

static int part_reserve(encode_part_t *p, uint64_t more)
{
    if (p->changes + more <= p->capacity) {
        return 0;
    }
    {
        const uint64_t want = p->capacity * 2 > p->changes + more ? p->capacity * 2 : p->changes + more + 4096;
        uint8_t       *o = realloc(p->offsets, 2 * want), *v;

        if (o == NULL) {
            return -1;
        }
        p->offsets = o;
        v = realloc(p->values, want);
        if (v == NULL) {
            return -1;
        }
        p->values = v;
        p->capacity = want;
    }
    return 0;
}

/* The changed bytes of one word (mask: 0x80 at each), at chunk offset
 * `pos` onwards. */
static void part_add(encode_part_t *p, uint64_t mask, uint64_t pos, const uint8_t *b_word)
{
    while (mask != 0) {
        const uint64_t byte = (uint64_t)(__builtin_ctzll(mask) >> 3);
        const uint64_t off = pos + byte;

        p->offsets[2 * p->changes] = (uint8_t)off;
        p->offsets[2 * p->changes + 1] = (uint8_t)(off >> 8);
        p->values[p->changes++] = b_word[byte];
        mask &= mask - 1;
    }
}

static void *encode_part_run(void *arg)
{
    encode_part_t *p = arg;

    for (uint64_t k = p->k0; k < p->k1 && !p->failed; k++) {
        const uint64_t start = k * WEFT_DELTA_CHUNK_BYTES;
        const uint64_t n = p->bytes - start < WEFT_DELTA_CHUNK_BYTES ? p->bytes - start : WEFT_DELTA_CHUNK_BYTES;
        const uint8_t *a = p->a + start, *b = p->b + start;
        uint64_t       i = 0;

        weft_le_store32(p->first + 4 * k, (uint32_t)p->changes); /* relative; the base is added later */
        if (part_reserve(p, 64) != 0) {
            p->failed = 1;
            break;
        }
        for (; i + 8 <= n; i += 8) {
            const uint64_t wb = weft_le_load64(b + i), x = weft_le_load64(a + i) ^ wb;

            if (!p->summed) {
                p->sum += weft_checksum_term(wb, (start + i) / 8);
            }
            if (x != 0) {
                if (part_reserve(p, 8) != 0) {
                    p->failed = 1;
                    break;
                }
                part_add(p, nonzero_bytes(x), i, b + i);
            }
        }
        if (i < n && !p->failed) { /* the tensor's last, short word */
            uint64_t tail = 0;

            for (uint64_t j = i; j < n; j++) {
                tail |= (uint64_t)b[j] << (8 * (j - i));
                if (a[j] != b[j]) {
                    if (part_reserve(p, 1) != 0) {
                        p->failed = 1;
                        break;
                    }
                    p->offsets[2 * p->changes] = (uint8_t)j;
                    p->offsets[2 * p->changes + 1] = (uint8_t)(j >> 8);
                    p->values[p->changes++] = b[j];
                }
            }
            if (!p->summed) {
                p->sum += weft_checksum_term(tail, (start + i) / 8);
            }
        }
        p->failed |= p->changes > p->max_changes;
    }
    return NULL;
}

static void encode_part_fn(void *arg, uint32_t part)
{
    encode_part_run((encode_part_t *)arg + part);
}

/* Runs every part, on the library's workers and this thread. */
static void run_parts(encode_part_t *parts, int count)
{
    weft_pool_run((uint32_t)count, encode_part_fn, parts);
}

static int encode_threads(uint64_t bytes, uint64_t chunks)
{
    const uint64_t cpus = weft_pool_width();
    uint64_t       n = bytes / DELTA_THREAD_BYTES;

    n = n < cpus ? n : cpus;
    n = n < DELTA_THREADS_MAX ? n : DELTA_THREADS_MAX;
    n = n < chunks ? n : chunks;
    return n > 1 ? (int)n : 1;
}

/* The encode, its checksum summed here (known NULL) or given. */
static weft_status_t encode_host(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                 uint64_t out_capacity, uint64_t *out_bytes, const uint64_t *known)
{
    const uint8_t *a = old_data, *b = new_data;
    uint8_t       *o = out;
    const uint64_t chunks = chunks_of(bytes);
    encode_part_t  parts[DELTA_THREADS_MAX];
    int            count;
    uint64_t       changes = 0, sum = 0, size, max_changes;
    weft_status_t  status = WEFT_OK;

    if (out == NULL || out_bytes == NULL || (bytes > 0 && (a == NULL || b == NULL)) || chunks > UINT32_MAX) {
        weft_log_error("weft_delta_encode_host: NULL pointers, or %llu bytes (more than 2^32 chunks)",
                       (unsigned long long)bytes);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (out_capacity < weft_delta_bytes(bytes, 0)) {
        return WEFT_ERR_NO_SPACE;
    }
    max_changes = (out_capacity - weft_delta_bytes(bytes, 0)) / 3;
    max_changes = max_changes < UINT32_MAX ? max_changes : UINT32_MAX;
    count = encode_threads(bytes, chunks);
    for (int i = 0; i < count; i++) {
        parts[i] = (encode_part_t){.a = a, .b = b, .bytes = bytes, .k0 = chunks * (uint64_t)i / (uint64_t)count,
                                   .k1 = chunks * (uint64_t)(i + 1) / (uint64_t)count, .max_changes = max_changes,
                                   .first = o + WEFT_DELTA_HEADER_BYTES, .summed = known != NULL};
    }
    run_parts(parts, count);
    for (int i = 0; i < count; i++) {
        if (parts[i].failed && parts[i].changes <= max_changes) {
            status = WEFT_ERR_NO_MEMORY;
        }
        parts[i].base = changes;
        changes += parts[i].changes;
        sum += parts[i].sum;
    }
    size = weft_delta_bytes(bytes, changes);
    if (status == WEFT_OK && (changes > max_changes || size > out_capacity)) {
        status = WEFT_ERR_NO_SPACE;
    }
    /* The ranges' changes into place, their first[] made absolute. */
    for (int i = 0; i < count && status == WEFT_OK; i++) {
        uint8_t *offsets = o + WEFT_DELTA_HEADER_BYTES + 4 * chunks, *values = offsets + 2 * changes;

        for (uint64_t k = parts[i].k0; i > 0 && k < parts[i].k1; k++) {
            uint8_t *f = o + WEFT_DELTA_HEADER_BYTES + 4 * k;
            weft_le_store32(f, weft_le_load32(f) + (uint32_t)parts[i].base);
        }
        if (parts[i].changes > 0) {
            memcpy(offsets + 2 * parts[i].base, parts[i].offsets, 2 * parts[i].changes);
            memcpy(values + parts[i].base, parts[i].values, parts[i].changes);
        }
    }
    for (int i = 0; i < count; i++) {
        free(parts[i].offsets);
        free(parts[i].values);
    }
    if (status != WEFT_OK) {
        if (status == WEFT_ERR_NO_MEMORY) {
            weft_log_error("weft_delta_encode_host: no memory for the changes of %llu bytes",
                           (unsigned long long)bytes);
        }
        return status;
    }
    weft_le_store32(o, DELTA_MAGIC);
    weft_le_store32(o + 4, WEFT_DELTA_CHUNK_BYTES);
    weft_le_store64(o + 8, bytes);
    weft_le_store64(o + 16, changes);
    weft_le_store64(o + 24, known != NULL ? *known : weft_checksum_final(sum, bytes));
    *out_bytes = size;
    return WEFT_OK;
}

weft_status_t weft_delta_encode_host(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                     uint64_t out_capacity, uint64_t *out_bytes)
{
    return encode_host(old_data, new_data, bytes, out, out_capacity, out_bytes, NULL);
}

weft_status_t weft_delta_encode_host_summed(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                            uint64_t out_capacity, uint64_t *out_bytes, uint64_t checksum)
{
    return encode_host(old_data, new_data, bytes, out, out_capacity, out_bytes, &checksum);
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
    if (weft_le_load32(d) != DELTA_MAGIC) {
        *status = (weft_le_load32(d) & 0x00FFFFFFu) == (DELTA_MAGIC & 0x00FFFFFFu) ? WEFT_ERR_VERSION : WEFT_ERR_CORRUPT;
        return *status == WEFT_ERR_VERSION ? "another layout version" : "not a delta (magic)";
    }
    if (weft_le_load32(d + 4) != WEFT_DELTA_CHUNK_BYTES || weft_le_load64(d + 8) != tensor_bytes) {
        return "its chunk or tensor size is not this tensor's";
    }
    changes = weft_le_load64(d + 16);
    if (changes > tensor_bytes || delta_bytes != weft_delta_bytes(tensor_bytes, changes)) {
        return "its size does not match its change count";
    }
    first = d + WEFT_DELTA_HEADER_BYTES;
    offsets = first + 4 * chunks;
    for (uint64_t k = 0; k < chunks; k++) {
        const uint64_t begin = weft_le_load32(first + 4 * k);
        const uint64_t end = k + 1 < chunks ? weft_le_load32(first + 4 * (k + 1)) : changes;
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

/* The checksum terms of chunk k's words of a dense tensor of `bytes`
 * (weft_checksum_host's, before its final mix). */
static uint64_t chunk_sum(const uint8_t *data, uint64_t bytes, uint64_t k)
{
    const uint64_t start = k * WEFT_DELTA_CHUNK_BYTES;

    return weft_checksum_terms_host(data, start,
                                    bytes - start < WEFT_DELTA_CHUNK_BYTES ? bytes - start : WEFT_DELTA_CHUNK_BYTES);
}

int weft_delta_target_sound(const weft_delta_target_t *t)
{
    const uint64_t n = t->transpose_rows, k = t->transpose_cols;

    if ((t->data == NULL && t->tensor_bytes > 0) || t->row_bytes == 0 || t->tensor_bytes % t->row_bytes != 0 ||
        t->row_stride < t->row_bytes) {
        return 0;
    }
    if (n == 0 || k == 0) {
        return n == 0 && k == 0;
    }
    /* n·k overflows exactly when it exceeds what the tensor can hold. */
    return n <= UINT64_MAX / k && t->tensor_bytes % (n * k) == 0;
}

/* weft_delta_apply_host; with `actual`, the target's checksum after the
 * delta too. A dense target is summed chunk by chunk right after each
 * chunk's changes are written, while they are in cache (one pass over
 * the tensor, not an apply and then a sum); a strided one afterwards. */
static weft_status_t apply_host(const void *delta, uint64_t delta_bytes, const weft_delta_target_t *target,
                                uint64_t *checksum, uint64_t *actual, const char *who)
{
    const uint8_t *d = delta;
    const uint8_t *first, *offsets, *values;
    uint64_t       chunks, changes, sum = 0;
    uint8_t       *data;
    weft_status_t  status;
    const char    *why;
    int            dense;

    if (d == NULL || target == NULL || !weft_delta_target_sound(target)) {
        weft_log_error("%s: a NULL delta or target, or rows or transposed matrices that do not tile the tensor", who);
        return WEFT_ERR_INVALID_PARAM;
    }
    why = check_delta(d, delta_bytes, target->tensor_bytes, &status);
    if (why != NULL) {
        weft_log_error("%s: the delta is refused: %s", who, why);
        return status;
    }
    chunks = chunks_of(target->tensor_bytes);
    changes = weft_le_load64(d + 16);
    first = d + WEFT_DELTA_HEADER_BYTES;
    offsets = first + 4 * chunks;
    values = offsets + 2 * changes;
    data = target->data;
    /* A transposed target's changes fall across the tensor, not in the
     * chunk just written: summed afterwards, as a strided one. */
    dense = target->row_stride == target->row_bytes && target->transpose_rows == 0;
    for (uint64_t k = 0; k < chunks; k++) {
        const uint64_t begin = weft_le_load32(first + 4 * k);
        const uint64_t end = k + 1 < chunks ? weft_le_load32(first + 4 * (k + 1)) : changes;

        for (uint64_t j = begin; j < end; j++) {
            const uint64_t pos = k * WEFT_DELTA_CHUNK_BYTES + ((uint64_t)offsets[2 * j] | (uint64_t)offsets[2 * j + 1] << 8);
            data[weft_delta_target_offset(target, pos)] = values[j];
        }
        if (actual != NULL && dense) {
            sum += chunk_sum(data, target->tensor_bytes, k);
        }
    }
    if (actual != NULL) {
        *actual = dense ? weft_checksum_final(sum, target->tensor_bytes)
                        : weft_checksum_host_rows(data, target->row_bytes, target->row_stride,
                                                  target->tensor_bytes / target->row_bytes);
    }
    if (checksum != NULL) {
        *checksum = weft_le_load64(d + 24);
    }
    return WEFT_OK;
}

weft_status_t weft_delta_apply_host(const void *delta, uint64_t delta_bytes, const weft_delta_target_t *target,
                                    uint64_t *checksum)
{
    return apply_host(delta, delta_bytes, target, checksum, NULL, "weft_delta_apply_host");
}

weft_status_t weft_delta_apply_host_summed(const void *delta, uint64_t delta_bytes, const weft_delta_target_t *target,
                                           uint64_t *carried, uint64_t *actual)
{
    return apply_host(delta, delta_bytes, target, carried, actual, "weft_delta_apply_host");
}

#ifndef HAVE_CUDA
size_t weft_delta_cuda_encode_work_bytes(const weft_delta_cuda_tensor_t *tensors, uint32_t count)
{
    (void)tensors, (void)count;
    return 0;
}

size_t weft_delta_cuda_apply_work_bytes(uint32_t count)
{
    (void)count;
    return 0;
}

weft_status_t weft_delta_encode_cuda_async(const weft_delta_cuda_tensor_t *tensors, uint32_t count, uint64_t *out_bytes,
                                           void *work, size_t work_bytes, void *stream)
{
    (void)tensors, (void)count, (void)out_bytes, (void)work, (void)work_bytes, (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_delta_encode_cuda_with_checksums_async(const weft_delta_cuda_tensor_t *tensors,
                                                          const uint64_t *checksums, uint32_t count,
                                                          uint64_t *out_bytes, void *work, size_t work_bytes,
                                                          void *stream)
{
    (void)tensors, (void)checksums, (void)count, (void)out_bytes, (void)work, (void)work_bytes, (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_delta_encode_cuda(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                     uint64_t out_capacity, uint64_t *out_bytes, void *stream)
{
    (void)old_data, (void)new_data, (void)bytes, (void)out, (void)out_capacity, (void)out_bytes, (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_delta_apply_cuda_async(const weft_delta_cuda_patch_t *patches, uint32_t count, unsigned *verdicts,
                                          void *work, size_t work_bytes, void *stream)
{
    (void)patches, (void)count, (void)verdicts, (void)work, (void)work_bytes, (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_delta_apply_cuda(const void *delta, uint64_t delta_bytes, const weft_delta_target_t *target,
                                    uint64_t *checksum, void *stream)
{
    (void)delta, (void)delta_bytes, (void)target, (void)checksum, (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}
#endif
