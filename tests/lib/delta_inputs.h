/*
 * Inputs for the delta codec's tests (test_delta, test_delta_cuda): two
 * versions of a tensor with a chosen fraction of their bytes changed, and
 * the change count written out plainly.
 */
#ifndef WEFT_TESTS_LIB_DELTA_INPUTS_H
#define WEFT_TESTS_LIB_DELTA_INPUTS_H

#include "lib/optim_inputs.h" /* rng_next */

#include <stdint.h>
#include <weft/weft.h>

/* old: random bytes; new: old with about `rate` of its bytes changed. */
static inline void make_pair(uint8_t *old_data, uint8_t *new_data, uint64_t n, double rate, uint64_t seed)
{
    const uint64_t threshold = (uint64_t)(rate * 18446744073709551615.0);

    for (uint64_t i = 0; i < n; i++) {
        old_data[i] = (uint8_t)rng_next(&seed);
        new_data[i] = old_data[i];
        if (rate >= 1.0 || rng_next(&seed) < threshold) {
            new_data[i] = (uint8_t)(old_data[i] + 1 + rng_next(&seed) % 255); /* always another byte */
        }
    }
}

static inline uint64_t naive_changes(const uint8_t *a, const uint8_t *b, uint64_t n)
{
    uint64_t c = 0;

    for (uint64_t i = 0; i < n; i++) {
        c += a[i] != b[i];
    }
    return c;
}

/* wt: each of the `count` matrices of w (rows × cols bytes, row-major,
 * end to end) transposed, as the FP8 writer lays out WT. */
static inline void transpose_matrices(const uint8_t *w, uint8_t *wt, uint64_t count, uint64_t rows, uint64_t cols)
{
    for (uint64_t e = 0; e < count; e++) {
        for (uint64_t r = 0; r < rows; r++) {
            for (uint64_t c = 0; c < cols; c++) {
                wt[e * rows * cols + c * rows + r] = w[e * rows * cols + r * cols + c];
            }
        }
    }
}

/* The damaged deltas every apply must refuse before it writes, made from
 * a sound delta of a 3-chunk tensor (`size` bytes, copied into `bad`
 * first): damage k (0 .. DELTA_DAMAGES − 1) on `bad`, the length to hand
 * the apply (*len), whether the target must be another tensor's, one
 * chunk shorter (*other_tensor), and the status to expect. */
#define DELTA_DAMAGES 10

static inline weft_status_t delta_damage(uint8_t *bad, uint64_t size, int k, uint64_t *len, int *other_tensor)
{
    const uint64_t index = WEFT_DELTA_HEADER_BYTES, offsets = index + 4 * 3;

    *len = size;
    *other_tensor = 0;
    switch (k) {
    case 0: *len = size - 1; return WEFT_ERR_CORRUPT;                   /* truncated */
    case 1: *len = WEFT_DELTA_HEADER_BYTES - 1; return WEFT_ERR_CORRUPT; /* not even a header */
    case 2: bad[0] ^= 1; return WEFT_ERR_CORRUPT;                        /* magic */
    case 3: bad[3] = '2'; return WEFT_ERR_VERSION;                       /* "WFD2" */
    case 4: bad[8] ^= 1; return WEFT_ERR_CORRUPT;                        /* tensor bytes */
    case 5: bad[16] ^= 1; return WEFT_ERR_CORRUPT;                       /* change count */
    case 6: bad[index + 4] ^= 0x10; return WEFT_ERR_CORRUPT;             /* chunk 1's first change */
    case 7: /* change 0 at change 1's offset: offsets not increasing */
        bad[offsets] = bad[offsets + 2];
        bad[offsets + 1] = bad[offsets + 3];
        return WEFT_ERR_CORRUPT;
    case 8: bad[offsets + 1] = 0x10; return WEFT_ERR_CORRUPT; /* offset 4096 + x: out of its chunk */
    default: *other_tensor = 1; return WEFT_ERR_CORRUPT;      /* another tensor's */
    }
}

#endif
