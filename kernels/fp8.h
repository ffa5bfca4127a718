/*
 * The FP8 writer's arithmetic, shared by the host reference (quant_host.c)
 * and the CUDA kernel (quant_cuda.cu), which include this same code and so
 * produce the same bytes. Everything here is integer work on the bits of a
 * float, plus exactly one IEEE FP32 division (amax / 448) and the caller's
 * x / s: no result depends on the FPU's rounding mode, on FMA contraction or
 * on the order of a reduction (max is exact in any order). Internal.
 *
 * e4m3fn (OCP FP8): sign, 4 exponent bits (bias 7), 3 mantissa bits; no
 * infinities; 0x7F and 0xFF are NaN; largest finite ±448 (0x7E/0xFE);
 * smallest subnormal 2^-9.
 *
 * Encoding matches CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE,
 * __NV_E4M3) for all 2^32 inputs (tests/test_fp8_exhaustive.cc):
 *  - finite |x| is rounded to nearest, ties to even, at every binade and in
 *    the subnormal range; |x| ≤ 2^-10 (half the smallest subnormal) and
 *    every float subnormal give a zero of x's sign (0x00 or 0x80);
 *  - |x| > 464 (448 plus half an ulp) and ±Inf saturate to ±448; 464 itself
 *    is a tie and rounds to 448, the even neighbour;
 *  - every NaN, whatever its sign or payload, gives 0x7F: CUDA makes NaN
 *    canonical before converting, and x86 and GPUs disagree on the sign of
 *    a NaN made by an operation (Inf/Inf), so keeping it would make the two
 *    writers differ.
 *
 * Block scale (DESIGN.md, "FP8 writer (exact)"):
 *  - amax = max |x| over the block's real elements, NaN ignored (as fmaxf
 *    does); an all-NaN block has amax 0. Computed on the bits: for
 *    non-negative floats the integer order is the float order.
 *  - amax < 1e-4f becomes 1e-4f; s = amax / 448.0f (IEEE FP32 division,
 *    round to nearest even).
 *  - UE8M0: s = 2^⌈log2 s⌉: the exponent field of s, plus one when the
 *    mantissa field is non-zero. The clamp keeps s normal (≥ 1e-4 / 448,
 *    2^-22 once rounded) and a finite amax keeps it at most 2^120: the
 *    rounding never overflows. An infinite s stays infinite.
 *  - An infinite element makes amax and s +Inf: the block's finite elements
 *    encode to ±0 (x / Inf), its infinities to NaN 0x7F (Inf / Inf), and
 *    scale_inv is +Inf, so the block dequantizes to NaN. Nothing is
 *    special-cased: a diverged master shows up downstream instead of being
 *    hidden behind saturated bytes.
 *  - q = e4m3(x / s). A NaN element gives 0x7F.
 *
 * The reference formula's helpers (weft_fp8_ref_*) follow quant.h's
 * statement of it.
 */
#ifndef WEFT_KERNELS_FP8_H
#define WEFT_KERNELS_FP8_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define WEFT_HD static inline __host__ __device__
#else
#define WEFT_HD static inline
#endif

#define WEFT_FP8_E4M3_MAX       448.0f
#define WEFT_FP8_E4M3_NAN       0x7Fu
#define WEFT_FP8_SCALE_MIN_AMAX 1e-4f

#ifdef __cplusplus
extern "C" {
#endif

WEFT_HD uint32_t weft_fp8_float_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

WEFT_HD float weft_fp8_bits_float(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

/*
 * e4m3fn encoding of the float with bits u. Both roundings are computed
 * and the right one selected, so the compiler emits selects, not branches.
 */
WEFT_HD uint8_t weft_fp8_e4m3_encode_bits(uint32_t u)
{
    const uint32_t sign = (u >> 24) & 0x80u;
    const uint32_t a = u & 0x7FFFFFFFu;
    /* Normal: |x| ≥ 2^-6 (0x3C800000). Rebias the exponent (127 → 7) and
     * round the 20 dropped mantissa bits to nearest even; a carry moves
     * into the exponent, as it should. */
    const uint32_t normal = (a - (120u << 23) + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
    /* Subnormal: the result is |x| / 2^-9 rounded to nearest even, that is
     * the 24-bit significand shifted right by 141 - exponent (≥ 21 here).
     * Shifts past 25 all give 0; 31 keeps the shift defined, also for the
     * normal exponents (> 120), whose result is computed but not used. */
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t sh = (e < 110u || e > 120u) ? 31u : 141u - e;
    const uint32_t sub = (m + (1u << (sh - 1)) - 1u + ((m >> sh) & 1u)) >> sh;
    uint32_t       r = a < 0x3C800000u ? sub : normal;

    r = a > 0x43E80000u ? 0x7Eu : r; /* beyond 464, and ±Inf: ±448 */
    r |= sign;
    return (uint8_t)(a > 0x7F800000u ? WEFT_FP8_E4M3_NAN : r);
}

WEFT_HD uint8_t weft_fp8_e4m3_encode_float(float x)
{
    return weft_fp8_e4m3_encode_bits(weft_fp8_float_bits(x));
}

/* The float an e4m3fn byte stands for; every value is exact. 0x7F and 0xFF
 * give a quiet NaN of that sign. */
WEFT_HD float weft_fp8_e4m3_decode_byte(uint8_t byte)
{
    const uint32_t sign = (uint32_t)(byte & 0x80u) << 24;
    const uint32_t exp = (byte >> 3) & 0xFu;
    const uint32_t man = byte & 0x7u;

    if ((byte & 0x7Fu) == 0x7Fu) {
        return weft_fp8_bits_float(sign | 0x7FC00000u);
    }
    if (exp == 0) {
        /* man × 2^-9, exact: a small integer times a power of two. */
        return weft_fp8_bits_float(sign | weft_fp8_float_bits((float)man * (1.0f / 512.0f)));
    }
    return weft_fp8_bits_float(sign | ((exp + 120u) << 23) | (man << 20));
}

/* |x| as bits for the block maximum: 0 for a NaN, so a max over these
 * ignores NaN the way fmaxf does; +Inf stays. */
WEFT_HD uint32_t weft_fp8_abs_bits(uint32_t u)
{
    const uint32_t a = u & 0x7FFFFFFFu;

    return a > 0x7F800000u ? 0u : a;
}

/* The block scale s (scale_inv) from amax_bits, the largest of
 * weft_fp8_abs_bits() over the block. */
WEFT_HD float weft_fp8_block_scale(uint32_t amax_bits, int ue8m0)
{
    const uint32_t min_bits = weft_fp8_float_bits(WEFT_FP8_SCALE_MIN_AMAX);
    const float    amax = weft_fp8_bits_float(amax_bits < min_bits ? min_bits : amax_bits);
    const float    s = amax / WEFT_FP8_E4M3_MAX;
    uint32_t       b = weft_fp8_float_bits(s);

    if (ue8m0 && (b & 0x7F800000u) != 0x7F800000u && (b & 0x7FFFFFu) != 0) {
        b = (b & 0xFF800000u) + 0x800000u;
    }
    return weft_fp8_bits_float(b);
}

/* q = e4m3(x / s), IEEE FP32 division. */
WEFT_HD uint8_t weft_fp8_quantize(float x, float s)
{
    return weft_fp8_e4m3_encode_float(x / s);
}

/*
 * The reference formula (quant.h, WEFT_QUANT_FORMULA_REFERENCE): DeepGEMM's
 * per_block_cast_to_fp8 as PyTorch computes it on a GPU. Three IEEE FP32
 * operations a block (a reciprocal and two products) and one an element;
 * none is followed by an addition, so FMA contraction cannot touch them.
 */

/* |x| as bits for the reference's block maximum: a NaN stays a NaN, and
 * as an integer it is above every number, +Inf included, so a max over
 * these is NaN as soon as one element is (torch.amax propagates NaN). */
WEFT_HD uint32_t weft_fp8_ref_abs_bits(uint32_t u)
{
    return u & 0x7FFFFFFFu;
}

/* The block's amax from the largest weft_fp8_ref_abs_bits, clamped to
 * 1e-4f (clamp(1e-4); a NaN stays: its bits are above the minimum's). */
WEFT_HD float weft_fp8_ref_amax(uint32_t amax_bits)
{
    const uint32_t min_bits = weft_fp8_float_bits(WEFT_FP8_SCALE_MIN_AMAX);

    return weft_fp8_bits_float(amax_bits < min_bits ? min_bits : amax_bits);
}

/* 448.0 / x_amax: reciprocal, then the product with 448. */
WEFT_HD float weft_fp8_ref_factor(float amax)
{
    const float r = 1.0f / amax;

    return r * WEFT_FP8_E4M3_MAX;
}

/* x_amax / 448.0: the product with RN(1/448). A GPU's multiply returns
 * the canonical NaN (0x7FFFFFFF) whatever NaN went in; a CPU keeps the
 * operand's, so it is set here. */
WEFT_HD float weft_fp8_ref_scale_inv(float amax)
{
    const float s = amax * (1.0f / WEFT_FP8_E4M3_MAX);

    return s != s ? weft_fp8_bits_float(0x7FFFFFFFu) : s;
}

/* q = e4m3(RN(x × f)): the encoder's NaN 0x7F is what a GPU's canonical
 * NaN gives, and |x × f| never comes near 480, where PyTorch's
 * conversion (NaN) and saturation part ways. */
WEFT_HD uint8_t weft_fp8_ref_quantize(float x, float f)
{
    return weft_fp8_e4m3_encode_float(x * f);
}

/* BF16 bits to the float they stand for (exact). */
WEFT_HD float weft_fp8_bf16_float(uint16_t h)
{
    return weft_fp8_bits_float((uint32_t)h << 16);
}

#ifdef __cplusplus
}
#endif

#endif
