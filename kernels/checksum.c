/* The host checksum: the reference for the GPU kernel. */
#include "config.h"

#include "checksum.h"
#include "le_bytes.h"

#include <string.h>

uint64_t weft_checksum_host(const void *data, size_t bytes)
{
    const unsigned char *p = data;
    size_t               full = bytes / 8;
    uint64_t             sum = 0;

    for (size_t i = 0; i < full; i++) {
        sum += weft_checksum_term(weft_le_load64(p + 8 * i), i);
    }
    if (bytes % 8 != 0) {
        sum += weft_checksum_term(weft_le_load_partial(p + 8 * full, bytes % 8), full);
    }
    return weft_checksum_final(sum, bytes);
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
