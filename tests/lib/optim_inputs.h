/*
 * Inputs for the optimizer tests (test_optim, test_optim_cuda):
 * reproducible random values, the bit patterns that break careless float
 * code, and BF16 rounding written out plainly.
 */
#ifndef WEFT_TESTS_LIB_OPTIM_INPUTS_H
#define WEFT_TESTS_LIB_OPTIM_INPUTS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* xorshift64*. */
static inline uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

/* Uniform in [-1, 1). */
static inline float rng_unit(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 40) / 8388608.0 - 1.0);
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Zeros of both signs, subnormals, the extremes, then (unless
 * finite_only) infinities and NaNs, one value in three; ordinary values
 * over many binades otherwise. */
static inline float adversarial(uint64_t *s, int finite_only)
{
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u,
                                       0x7f7fffffu, 0xff7fffffu, 0x00800000u, 0x3f800000u, 0x5f000000u,
                                       0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u};
    const uint64_t        r     = rng_next(s);
    const size_t          count = sizeof(special) / sizeof(special[0]) - (finite_only ? 5 : 0);

    if (r % 3 == 0) {
        return f32_from_bits(special[(r >> 8) % count]);
    }
    return rng_unit(s) * ldexpf(1.0f, (int)((r >> 32) % 60) - 40);
}

/* BF16 bits of f, round to nearest even; a NaN stays a quiet NaN. */
static inline uint16_t bf16_bits(float f)
{
    const uint32_t u = f32_bits(f);
    if (isnan(f)) {
        return (uint16_t)((u >> 16) | 0x40);
    }
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

#endif
