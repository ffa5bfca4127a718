/* The host checksum: the reference for the GPU kernel. */
#include "config.h"

#include "checksum.h"
#include "le_bytes.h"

#include <string.h>

uint64_t weft_checksum_terms_host(const void *data, uint64_t at, uint64_t n)
{
    const unsigned char *p = (const unsigned char *)data + at;
    uint64_t             sum = 0, w = 0;

    for (; 8 * w + 8 <= n; w++) {
        sum += weft_checksum_term(weft_le_load64(p + 8 * w), at / 8 + w);
    }
    if (8 * w < n) {
        sum += weft_checksum_term(weft_le_load_partial(p + 8 * w, n - 8 * w), at / 8 + w);
    }
    return sum;
}

uint64_t weft_checksum_host(const void *data, size_t bytes)
{
    return weft_checksum_final(weft_checksum_terms_host(data, 0, bytes), bytes);
}

uint64_t weft_checksum_host_rows(const void *data, uint64_t row_bytes, uint64_t row_stride, uint64_t rows)
{
    const unsigned char *base = data;
    unsigned char        word[8];
    uint64_t             sum = 0, index = 0, have = 0; /* bytes of `word` filled */

    if (row_bytes % 8 == 0) { /* every row starts a word: no carry between rows */
        for (uint64_t r = 0; r < rows; r++) {
            const unsigned char *p = base + r * row_stride;

            for (uint64_t w = 0; w < row_bytes / 8; w++) {
                sum += weft_checksum_term(weft_le_load64(p + 8 * w), index++);
            }
        }
        return weft_checksum_final(sum, row_bytes * rows);
    }
    /* Words straddle rows: carried byte by byte where they do. */
    for (uint64_t r = 0; r < rows; r++) {
        const unsigned char *p = base + r * row_stride;
        uint64_t             at = 0;

        while (at < row_bytes) {
            if (have == 0 && row_bytes - at >= 8) {
                sum += weft_checksum_term(weft_le_load64(p + at), index++);
                at += 8;
                continue;
            }
            word[have++] = p[at++];
            if (have == 8) {
                sum += weft_checksum_term(weft_le_load64(word), index++);
                have = 0;
            }
        }
    }
    if (have != 0) {
        sum += weft_checksum_term(weft_le_load_partial(word, have), index);
    }
    return weft_checksum_final(sum, row_bytes * rows);
}

#ifndef HAVE_CUDA
weft_status_t weft_checksum_cuda(const void *device_data, size_t bytes, void *stream,
                                   uint64_t *checksum)
{
    (void)device_data;
    (void)bytes;
    (void)stream;
    (void)checksum;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_checksum_cuda_strided_async(const void *device_data, size_t bytes, size_t stride, uint32_t count,
                                               uint64_t *results, void *stream)
{
    (void)device_data;
    (void)bytes;
    (void)stride;
    (void)count;
    (void)results;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_checksum_cuda_async(const void *device_data, size_t bytes, uint64_t *result, void *stream)
{
    (void)device_data;
    (void)bytes;
    (void)result;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_checksum_cuda_ranges(const uint8_t *const *ptrs, const uint64_t *bytes, uint32_t count,
                                        uint64_t *sums, weft_checksum_scratch_t *scratch)
{
    (void)ptrs;
    (void)bytes;
    (void)count;
    (void)sums;
    (void)scratch;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_checksum_cuda_ranges_where(const uint8_t *const *ptrs, const uint64_t *bytes, uint32_t count,
                                              uint64_t *sums, weft_checksum_scratch_t *scratch)
{
    return weft_checksum_cuda_ranges(ptrs, bytes, count, sums, scratch);
}

void weft_checksum_scratch_free(weft_checksum_scratch_t *scratch)
{
    scratch->memory = NULL;
    scratch->bytes = 0;
}

weft_status_t weft_compare_cuda_async(const void *a, const void *b, size_t bytes, uint64_t *count, void *stream)
{
    (void)a;
    (void)b;
    (void)bytes;
    (void)count;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}
#endif
