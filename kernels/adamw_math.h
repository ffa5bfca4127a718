/*
 * One AdamW element, written once for the host reference and the CUDA
 * kernel. Each operation is spelled out as a correctly rounded FP32
 * operation (WEFT_FMUL, WEFT_FDIV, …) so that no compiler may fuse or
 * reorder it: the bytes must be those of the arithmetic in optim.h on
 * every path. Internal.
 */
#ifndef WEFT_KERNELS_ADAMW_MATH_H
#define WEFT_KERNELS_ADAMW_MATH_H

#include "adamw.h"

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define WEFT_ADAMW_FN        static __forceinline__ __device__
#define WEFT_FMA(a, b, c)    __fmaf_rn((a), (b), (c))
#define WEFT_FMUL(a, b)      __fmul_rn((a), (b))
#define WEFT_FDIV(a, b)      __fdiv_rn((a), (b))
#define WEFT_FADD(a, b)      __fadd_rn((a), (b))
#define WEFT_FSUB(a, b)      __fsub_rn((a), (b))
#define WEFT_FSQRT(a)        __fsqrt_rn(a)
#else
#include <math.h>
/* kernels/ is built with -ffp-contract=off, so a * b + c stays two
 * roundings; fmaf is the one fused operation, and it is exact IEEE fma in
 * the C library and in the vector instructions GCC turns it into. */
#define WEFT_ADAMW_FN        static inline
#define WEFT_FMA(a, b, c)    fmaf((a), (b), (c))
#define WEFT_FMUL(a, b)      ((a) * (b))
#define WEFT_FDIV(a, b)      ((a) / (b))
#define WEFT_FADD(a, b)      ((a) + (b))
#define WEFT_FSUB(a, b)      ((a) - (b))
#define WEFT_FSQRT(a)        __builtin_sqrtf(a)
#endif

/* BF16 bits → float: exact. */
WEFT_ADAMW_FN float weft_bf16_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float    f;

#ifdef __CUDA_ARCH__
    f = __uint_as_float(u);
#else
    memcpy(&f, &u, sizeof(f));
#endif
    return f;
}

/* float → BF16 bits, round to nearest even; a NaN stays a quiet NaN. */
WEFT_ADAMW_FN uint16_t weft_float_to_bf16(float f)
{
    uint32_t u;

#ifdef __CUDA_ARCH__
    u = __float_as_uint(f);
#else
    memcpy(&u, &f, sizeof(u));
#endif
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x0040u);
    }
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* NaN as the GPU makes it (0x7FFFFFFF); other values unchanged. The host
 * would keep an input NaN's payload, so both sides canonicalize what they
 * store and the bytes agree even for NaN. */
WEFT_ADAMW_FN float weft_canonical_nan(float x)
{
    const uint32_t canon = 0x7fffffffu;
    float          canon_nan;

#ifdef __CUDA_ARCH__
    canon_nan = __uint_as_float(canon);
#else
    memcpy(&canon_nan, &canon, sizeof(canon_nan));
#endif
    return x != x ? canon_nan : x;
}

/* The update of one element: optim.h's formula, operation by operation.
 * `decay` is s->decay, passed apart so that a loop can make it constant. */
WEFT_ADAMW_FN void weft_adamw_element(const weft_adamw_scalars_t *s, int decay, float *p, float *m_io,
                                      float *v_io, float g)
{
    float theta = *p;
    float gg    = WEFT_FMUL(g, g);
    float denom;

    if (decay) {
        theta = WEFT_FMA(-s->lr_wd, theta, theta);
    }
    const float m = WEFT_FMA(s->beta1, *m_io, WEFT_FMA(-s->beta1, g, g));
    const float v = WEFT_FMA(s->beta2, *v_io, WEFT_FMA(-s->beta2, gg, gg));
    denom = WEFT_FADD(WEFT_FDIV(WEFT_FSQRT(v), s->bc2s), s->eps);
    *p    = weft_canonical_nan(WEFT_FSUB(theta, WEFT_FDIV(WEFT_FMUL(s->step_size, m), denom)));
    *m_io = weft_canonical_nan(m);
    *v_io = weft_canonical_nan(v);
}

#endif
