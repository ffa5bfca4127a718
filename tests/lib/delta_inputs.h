/*
 * Inputs for the delta codec's tests (test_delta, test_delta_cuda): two
 * versions of a tensor with a chosen fraction of their bytes changed, and
 * the change count written out plainly.
 */
#ifndef WEFT_TESTS_LIB_DELTA_INPUTS_H
#define WEFT_TESTS_LIB_DELTA_INPUTS_H

#include "lib/optim_inputs.h" /* rng_next */

#include <stdint.h>

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

#endif
