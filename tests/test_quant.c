/*
 * kernels/ on the host: the FP8 writer (weft_quant_host, weft_dequant_host,
 * the e4m3 encoder and decoder). The encoder's agreement with CUDA on all
 * 2^32 inputs is test_fp8_exhaustive's; here are the values that matter
 * named one by one, and the writer checked against the definition in
 * DESIGN.md written out a second time, plainly, with libm.
 */
#include "config.h"

#include "kernels/fp8.h"
#include "lib/harness.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>

/* xorshift64*: reproducible inputs. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

/* Values over many binades, both signs, some exact zeros and subnormals. */
static float rng_value(uint64_t *s)
{
    uint64_t r = rng_next(s);
    float    mag = (float)((r >> 40) & 0xFFFFFF) / 16777216.0f;
    int      exp = (int)((r >> 8) % 40) - 30;

    if ((r & 0xFF) == 0) {
        return 0.0f;
    }
    if ((r & 0xFF) == 1) {
        return weft_fp8_bits_float((uint32_t)(r >> 16) & 0x807FFFFFu); /* a float subnormal */
    }
    return ldexpf(mag, exp) * ((r >> 7) & 1 ? -1.0f : 1.0f);
}

/* The value of an e4m3fn byte by the format's definition. */
static double spec_decode(uint8_t b)
{
    int    e = (b >> 3) & 0xF, m = b & 7;
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);

    return (b & 0x80) ? -v : v;
}

/* ------------------------------------------------------------ encoding */

START_TEST(decode_every_byte)
{
    for (int b = 0; b < 256; b++) {
        float f = weft_fp8_e4m3_decode((uint8_t)b);

        if ((b & 0x7F) == 0x7F) {
            ck_assert(isnan(f));
            ck_assert_int_eq(!!signbit(f), b >> 7);
            continue;
        }
        ck_assert_msg((double)f == spec_decode((uint8_t)b), "byte 0x%02x decodes to %a", b, (double)f);
        ck_assert_int_eq(!!signbit(f), b >> 7); /* 0x80 is -0 */
    }
    ck_assert(weft_fp8_e4m3_decode(0x7E) == 448.0f);
    ck_assert(weft_fp8_e4m3_decode(0x01) == ldexpf(1, -9));
    ck_assert(weft_fp8_e4m3_decode(0x07) == ldexpf(7, -9));
    ck_assert(weft_fp8_e4m3_decode(0x08) == ldexpf(1, -6));
}
END_TEST

START_TEST(encode_decode_round_trip)
{
    for (int b = 0; b < 256; b++) {
        uint8_t back = weft_fp8_e4m3_encode(weft_fp8_e4m3_decode((uint8_t)b));

        ck_assert_msg(back == ((b & 0x7F) == 0x7F ? 0x7F : b), "byte 0x%02x comes back as 0x%02x", b, back);
    }
    /* Ordered: each positive code is larger than the one before. */
    for (int b = 1; b <= 0x7E; b++) {
        ck_assert(weft_fp8_e4m3_decode((uint8_t)b) > weft_fp8_e4m3_decode((uint8_t)(b - 1)));
    }
}
END_TEST

/* Between any two neighbours, in every binade and among subnormals: the
 * midpoint goes to the even code, the floats beside it to the nearer one. */
START_TEST(encode_ties_to_even_everywhere)
{
    for (int b = 0; b < 0x7E; b++) {
        for (int sign = 0; sign <= 0x80; sign += 0x80) {
            float   lo = weft_fp8_e4m3_decode((uint8_t)b), hi = weft_fp8_e4m3_decode((uint8_t)(b + 1));
            float   mid = (lo + hi) / 2; /* exact: both have 4 significant bits */
            float   s = sign ? -1.0f : 1.0f;
            uint8_t even = (uint8_t)((b & 1) ? b + 1 : b);

            ck_assert_msg(weft_fp8_e4m3_encode(s * mid) == (even | sign), "tie between 0x%02x and 0x%02x", b,
                          b + 1);
            ck_assert_uint_eq(weft_fp8_e4m3_encode(s * nextafterf(mid, 0.0f)), b | sign);
            ck_assert_uint_eq(weft_fp8_e4m3_encode(s * nextafterf(mid, INFINITY)), (b + 1) | sign);
            ck_assert_uint_eq(weft_fp8_e4m3_encode(s * lo), b | sign);
        }
    }
}
END_TEST

START_TEST(encode_named_values)
{
    /* Saturation: 448, up to 464 (the tie above it rounds to even 448),
     * beyond, and infinities. */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(448.0f), 0x7E);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(nextafterf(448.0f, INFINITY)), 0x7E);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(456.0f), 0x7E);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(464.0f), 0x7E);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(nextafterf(464.0f, INFINITY)), 0x7E);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-464.0f), 0xFE);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(1e9f), 0x7E);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(FLT_MAX), 0x7E);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-FLT_MAX), 0xFE);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(INFINITY), 0x7E);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-INFINITY), 0xFE);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(416.0f), 0x7D);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(432.0f), 0x7E); /* tie 416|448: 0x7E is even */
    /* Subnormals of e4m3: 2^-9 .. 7 × 2^-9, and the way to zero. */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(ldexpf(7, -9)), 0x07);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(ldexpf(15, -10)), 0x08); /* tie 7|8 → 8 */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(ldexpf(1, -9)), 0x01);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(ldexpf(3, -10)), 0x02); /* tie 1|2 → 2 */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(ldexpf(1, -10)), 0x00); /* tie 0|1 → 0 */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(nextafterf(ldexpf(1, -10), 1.0f)), 0x01);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-ldexpf(1, -10)), 0x80);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-nextafterf(ldexpf(1, -10), 1.0f)), 0x81);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(ldexpf(1, -6)), 0x08);
    /* Zeros keep their sign; float subnormals and tiny values become zeros. */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(0.0f), 0x00);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-0.0f), 0x80);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(FLT_MIN), 0x00);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-FLT_MIN), 0x80);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(weft_fp8_bits_float(0x00000001u)), 0x00);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(weft_fp8_bits_float(0x807FFFFFu)), 0x80);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(1e-20f), 0x00);
    /* Ordinary values. */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(1.0f), 0x38);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-1.0f), 0xB8);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(1.0625f), 0x38); /* tie 1|1.125 → 1 */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(1.1875f), 0x3A); /* tie 1.125|1.25 → 1.25 */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(15.5f), 0x58);   /* tie 15|16 → 16 */
    /* NaN, any sign or payload: 0x7F, as CUDA gives. */
    ck_assert_uint_eq(weft_fp8_e4m3_encode(NAN), 0x7F);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(-NAN), 0x7F);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(weft_fp8_bits_float(0x7F800001u)), 0x7F);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(weft_fp8_bits_float(0xFFFFFFFFu)), 0x7F);
    ck_assert_uint_eq(weft_fp8_e4m3_encode(weft_fp8_bits_float(0xFFC00000u)), 0x7F);
}
END_TEST

/* ------------------------------------------------- the writer, by spec */

/* The block scale as DESIGN.md says it, with libm. */
static float spec_scale(float amax, int ue8m0)
{
    float s;

    if (amax < 1e-4f) {
        amax = 1e-4f;
    }
    s = amax / 448.0f;
    if (ue8m0 && isfinite(s)) {
        int   e;
        float m = frexpf(s, &e); /* s = m × 2^e, m in [0.5, 1) */
        if (m != 0.5f) {
            s = ldexpf(1.0f, e);
        }
    }
    return s;
}

/* The whole writer, element by element. */
static void spec_quant(const float *x, uint64_t stride, uint64_t rows, uint64_t cols, uint32_t b, int ue8m0,
                       uint8_t *w, uint8_t *wt, float *scale)
{
    uint64_t nbc = (cols + b - 1) / b;

    for (uint64_t bi = 0; bi * b < rows; bi++) {
        for (uint64_t bj = 0; bj * b < cols; bj++) {
            float amax = 0.0f, s;
            for (uint64_t r = bi * b; r < rows && r < (bi + 1) * b; r++) {
                for (uint64_t c = bj * b; c < cols && c < (bj + 1) * b; c++) {
                    amax = fmaxf(amax, fabsf(x[r * stride + c]));
                }
            }
            s = spec_scale(amax, ue8m0);
            scale[bi * nbc + bj] = s;
            for (uint64_t r = bi * b; r < rows && r < (bi + 1) * b; r++) {
                for (uint64_t c = bj * b; c < cols && c < (bj + 1) * b; c++) {
                    uint8_t q = weft_fp8_e4m3_encode(x[r * stride + c] / s);
                    w[r * cols + c] = q;
                    wt[c * rows + r] = q;
                }
            }
        }
    }
}

typedef struct outputs {
    uint8_t *w, *wt;
    float   *scale;
    size_t   nscale;
} outputs_t;

static outputs_t outputs_alloc(uint64_t rows, uint64_t cols, uint32_t b)
{
    outputs_t o;

    o.nscale = (size_t)(((rows + b - 1) / b) * ((cols + b - 1) / b));
    o.w = malloc(rows * cols);
    o.wt = malloc(rows * cols);
    o.scale = malloc(o.nscale * sizeof(float));
    ck_assert(o.w != NULL && o.wt != NULL && o.scale != NULL);
    memset(o.w, 0xAA, rows * cols);
    memset(o.wt, 0xAA, rows * cols);
    memset(o.scale, 0xAA, o.nscale * sizeof(float));
    return o;
}

static void outputs_free(outputs_t *o)
{
    free(o->w);
    free(o->wt);
    free(o->scale);
}

static void outputs_assert_equal(const outputs_t *a, const outputs_t *b, uint64_t rows, uint64_t cols)
{
    ck_assert_int_eq(memcmp(a->w, b->w, rows * cols), 0);
    ck_assert_int_eq(memcmp(a->wt, b->wt, rows * cols), 0);
    ck_assert_int_eq(memcmp(a->scale, b->scale, a->nscale * sizeof(float)), 0); /* bits: Inf too */
}

static weft_status_t quant(const float *x, uint64_t stride, uint64_t rows, uint64_t cols, uint32_t b,
                           int ue8m0, outputs_t *o)
{
    weft_quant_params_t p = {.field_mask = WEFT_QUANT_FIELD_BLOCK | WEFT_QUANT_FIELD_UE8M0, .block = b,
                             .ue8m0 = ue8m0};
    weft_quant_matrix_t m = {.x = x, .x_row_stride = stride, .w = o->w, .wt = o->wt, .scale_inv = o->scale};

    return weft_quant_host(&p, WEFT_DTYPE_FP32, rows, cols, &m, 1);
}

/* The writer against the spec: shapes with partial edge blocks, every
 * block size of the tests, both scale kinds. */
START_TEST(quant_matches_spec)
{
    static const uint32_t blocks[] = {1, 32, 128, 256};
    static const uint64_t shapes[][2] = {{1, 1}, {3, 5}, {130, 200}, {256, 384}, {300, 129}, {64, 1000}};
    uint64_t              seed = 0x1234567;

    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        uint64_t rows = shapes[si][0], cols = shapes[si][1];
        float   *x = malloc(rows * cols * sizeof(float));

        ck_assert_ptr_nonnull(x);
        for (uint64_t i = 0; i < rows * cols; i++) {
            x[i] = rng_value(&seed);
        }
        for (size_t bi = 0; bi < sizeof(blocks) / sizeof(blocks[0]); bi++) {
            for (int ue8m0 = 0; ue8m0 <= 1; ue8m0++) {
                outputs_t got = outputs_alloc(rows, cols, blocks[bi]);
                outputs_t want = outputs_alloc(rows, cols, blocks[bi]);

                spec_quant(x, cols, rows, cols, blocks[bi], ue8m0, want.w, want.wt, want.scale);
                ck_assert_int_eq(quant(x, 0, rows, cols, blocks[bi], ue8m0, &got), WEFT_OK);
                outputs_assert_equal(&got, &want, rows, cols);
                outputs_free(&got);
                outputs_free(&want);
            }
        }
        free(x);
    }
}
END_TEST

/* Known answers, worked out by hand: producers and consumers of
 * different builds must agree. */
START_TEST(quant_known_answers)
{
    const float x[4] = {1000.0f, -2.0f, 0.5f, 0.0f};
    uint8_t     w[4], wt[4];
    float       s;
    outputs_t   o = {.w = w, .wt = wt, .scale = &s, .nscale = 1};

    ck_assert_int_eq(quant(x, 0, 1, 4, 128, 0, &o), WEFT_OK);
    ck_assert(s == 1000.0f / 448.0f);
    /* 1000/s = 448; -2/s = -0.896 → -0.875; 0.5/s = 0.224 → 0.21875. */
    ck_assert_uint_eq(w[0], 0x7E);
    ck_assert_uint_eq(w[1], 0xB6);
    ck_assert_uint_eq(w[2], 0x26);
    ck_assert_uint_eq(w[3], 0x00);
    ck_assert_int_eq(memcmp(w, wt, 4), 0); /* one row: WT is W */

    /* UE8M0: s = 1000/448 = 2.23 rounds up to 4; 1000/4 = 250 → 256 (the
     * nearer of 240 and 256); -2/4 = -0.5 and 0.5/4 = 0.125 are exact. */
    ck_assert_int_eq(quant(x, 0, 1, 4, 128, 1, &o), WEFT_OK);
    ck_assert(s == 4.0f);
    /* 256 = 1.0 × 2^8: sign 0, exponent 8 + bias 7 = 1111, mantissa 000,
     * so 0 1111 000 = 0x78 (448 = 1.75 × 2^8 is 0x7E above). A constant,
     * not weft_fp8_e4m3_encode(256): the encoder is what is under test. */
    ck_assert_uint_eq(w[0], 0x78);
    ck_assert_uint_eq(w[1], 0xB0);
    ck_assert_uint_eq(w[2], 0x20);
}
END_TEST

START_TEST(scale_of_zero_block)
{
    float     x[3 * 4] = {0};
    outputs_t o = outputs_alloc(3, 4, 128);

    x[5] = -0.0f;
    ck_assert_int_eq(quant(x, 0, 3, 4, 128, 0, &o), WEFT_OK);
    ck_assert(o.scale[0] == 1e-4f / 448.0f);
    for (int i = 0; i < 12; i++) {
        ck_assert_uint_eq(o.w[i], i == 5 ? 0x80 : 0x00);
    }
    /* UE8M0: 1e-4/448 = 2.23e-7 rounds up to 2^-22. */
    ck_assert_int_eq(quant(x, 0, 3, 4, 128, 1, &o), WEFT_OK);
    ck_assert(o.scale[0] == ldexpf(1.0f, -22));
    /* A block of tiny values is clamped the same way. */
    x[0] = 3e-5f;
    ck_assert_int_eq(quant(x, 0, 3, 4, 128, 0, &o), WEFT_OK);
    ck_assert(o.scale[0] == 1e-4f / 448.0f);
    ck_assert_uint_eq(o.w[0], weft_fp8_e4m3_encode(3e-5f / (1e-4f / 448.0f)));
    outputs_free(&o);
}
END_TEST

START_TEST(scale_ue8m0_rounding)
{
    /* amax → s: exact powers of two stay, everything else rounds up. */
    static const struct {
        float amax, s;
    } cases[] = {
        {448.0f, 1.0f},       {896.0f, 2.0f},          {224.0f, 0.5f},          {449.0f, 2.0f},
        {447.0f, 1.0f},       {448.0f * 1024, 1024.0f}, {448.0f * 1025, 2048.0f}, {0.875f, 0.001953125f},
        {0.876f, 0.00390625f}, {1e-4f, 0x1p-22f},       {FLT_MAX, 0x1p+120f},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        float     x[2] = {cases[i].amax, -cases[i].amax / 3};
        outputs_t o = outputs_alloc(1, 2, 128);

        ck_assert_int_eq(quant(x, 0, 1, 2, 128, 1, &o), WEFT_OK);
        ck_assert_msg(o.scale[0] == cases[i].s, "amax %g: scale %a, expected %a", (double)cases[i].amax,
                      (double)o.scale[0], (double)cases[i].s);
        ck_assert(weft_fp8_block_scale(weft_fp8_float_bits(cases[i].amax), 1) == cases[i].s);
        /* Without UE8M0, the plain division. */
        ck_assert_int_eq(quant(x, 0, 1, 2, 128, 0, &o), WEFT_OK);
        ck_assert(o.scale[0] == (cases[i].amax < 1e-4f ? 1e-4f : cases[i].amax) / 448.0f);
        outputs_free(&o);
    }
}
END_TEST

/* NaN is ignored by amax and encodes to 0x7F, whatever its sign. */
START_TEST(scale_with_nan)
{
    float     x[2 * 2] = {1.0f, NAN, -weft_fp8_bits_float(0x7FC00001u), -2.0f};
    outputs_t o = outputs_alloc(2, 2, 128);

    ck_assert_int_eq(quant(x, 0, 2, 2, 128, 0, &o), WEFT_OK);
    ck_assert(o.scale[0] == 2.0f / 448.0f);
    ck_assert_uint_eq(o.w[0], weft_fp8_e4m3_encode(1.0f / (2.0f / 448.0f)));
    ck_assert_uint_eq(o.w[1], 0x7F);
    ck_assert_uint_eq(o.w[2], 0x7F);
    ck_assert_uint_eq(o.w[3], 0xFE);
    /* All NaN: amax 0, the floor's scale, every byte NaN. */
    x[0] = x[3] = NAN;
    ck_assert_int_eq(quant(x, 0, 2, 2, 128, 0, &o), WEFT_OK);
    ck_assert(o.scale[0] == 1e-4f / 448.0f);
    for (int i = 0; i < 4; i++) {
        ck_assert_uint_eq(o.w[i], 0x7F);
    }
    outputs_free(&o);
}
END_TEST

/* An infinity poisons its block only: s = +Inf, finite values → ±0,
 * infinities → NaN; the next block is normal. */
START_TEST(scale_with_inf)
{
    float     x[1 * 4] = {INFINITY, -3.0f, 5.0f, 1.0f};
    outputs_t o = outputs_alloc(1, 4, 2);
    float     dq[4];

    ck_assert_int_eq(quant(x, 0, 1, 4, 2, 0, &o), WEFT_OK);
    ck_assert(isinf(o.scale[0]) && o.scale[0] > 0);
    ck_assert(o.scale[1] == 5.0f / 448.0f);
    ck_assert_uint_eq(o.w[0], 0x7F);
    ck_assert_uint_eq(o.w[1], 0x80);
    ck_assert_uint_eq(o.w[2], 0x7E);
    ck_assert_uint_eq(o.w[3], weft_fp8_e4m3_encode(1.0f / (5.0f / 448.0f)));
    ck_assert_int_eq(weft_dequant_host(2, 1, 4, o.w, o.scale, dq), WEFT_OK);
    ck_assert(isnan(dq[0]) && isnan(dq[1]));
    ck_assert(fabsf(dq[2] - 5.0f) <= 5.0f * 0x1p-22f);
    x[0] = -INFINITY;
    ck_assert_int_eq(quant(x, 0, 1, 4, 2, 1, &o), WEFT_OK);
    ck_assert(isinf(o.scale[0]) && o.scale[0] > 0);
    ck_assert_uint_eq(o.w[0], 0x7F);
    outputs_free(&o);
}
END_TEST

/* Edge blocks use their real elements only: values beyond the last
 * column (in the row stride's padding) never count. */
START_TEST(partial_edge_blocks)
{
    const uint64_t rows = 130, cols = 200, stride = 256;
    float         *x = calloc(rows * stride, sizeof(float));
    outputs_t      o = outputs_alloc(rows, cols, 128);

    ck_assert_ptr_nonnull(x);
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t c = cols; c < stride; c++) {
            x[r * stride + c] = 1e30f;
        }
    }
    x[0] = 1.0f;                          /* block (0, 0) */
    x[5 * stride + 199] = -2.0f;          /* block (0, 1), its last column */
    x[129 * stride + 3] = 4.0f;           /* block (1, 0), the last row */
    x[128 * stride + 150] = 8.0f;         /* block (1, 1) */
    ck_assert_int_eq(quant(x, stride, rows, cols, 128, 0, &o), WEFT_OK);
    ck_assert_uint_eq(o.nscale, 4);
    ck_assert(o.scale[0] == 1.0f / 448.0f);
    ck_assert(o.scale[1] == 2.0f / 448.0f);
    ck_assert(o.scale[2] == 4.0f / 448.0f);
    ck_assert(o.scale[3] == 8.0f / 448.0f);
    ck_assert_uint_eq(o.w[0], 0x7E);
    ck_assert_uint_eq(o.w[5 * cols + 199], 0xFE);
    ck_assert_uint_eq(o.wt[199 * rows + 5], 0xFE);
    ck_assert_uint_eq(o.w[129 * cols + 3], 0x7E);
    ck_assert_uint_eq(o.wt[3 * rows + 129], 0x7E);
    ck_assert_uint_eq(o.w[128 * cols + 150], 0x7E);
    outputs_free(&o);
    free(x);
}
END_TEST

START_TEST(wt_is_the_transpose)
{
    const uint64_t rows = 77, cols = 301;
    float         *x = malloc(rows * cols * sizeof(float));
    outputs_t      o = outputs_alloc(rows, cols, 32);
    uint64_t       seed = 99;

    ck_assert_ptr_nonnull(x);
    for (uint64_t i = 0; i < rows * cols; i++) {
        x[i] = rng_value(&seed);
    }
    ck_assert_int_eq(quant(x, 0, rows, cols, 32, 0, &o), WEFT_OK);
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t c = 0; c < cols; c++) {
            ck_assert_uint_eq(o.wt[c * rows + r], o.w[r * cols + c]);
        }
    }
    outputs_free(&o);
    free(x);
}
END_TEST

/* Without write_wt, WT may be NULL and W and the scales are the same. */
START_TEST(without_wt)
{
    const uint64_t      rows = 40, cols = 50;
    float               x[40 * 50];
    outputs_t           full = outputs_alloc(rows, cols, 32), part = outputs_alloc(rows, cols, 32);
    weft_quant_params_t p = {.field_mask = WEFT_QUANT_FIELD_BLOCK | WEFT_QUANT_FIELD_WRITE_WT, .block = 32,
                             .write_wt = 0};
    weft_quant_matrix_t m = {.x = x, .w = part.w, .wt = NULL, .scale_inv = part.scale};
    uint64_t            seed = 5;

    for (size_t i = 0; i < rows * cols; i++) {
        x[i] = rng_value(&seed);
    }
    ck_assert_int_eq(quant(x, 0, rows, cols, 32, 0, &full), WEFT_OK);
    ck_assert_int_eq(weft_quant_host(&p, WEFT_DTYPE_FP32, rows, cols, &m, 1), WEFT_OK);
    ck_assert_int_eq(memcmp(full.w, part.w, rows * cols), 0);
    ck_assert_int_eq(memcmp(full.scale, part.scale, full.nscale * sizeof(float)), 0);
    outputs_free(&full);
    outputs_free(&part);
}
END_TEST

/* BF16 input gives the bytes of the FP32 input of the same values. */
START_TEST(bf16_equals_fp32)
{
    const uint64_t rows = 129, cols = 260;
    uint16_t      *xb = malloc(rows * cols * sizeof(uint16_t));
    float         *xf = malloc(rows * cols * sizeof(float));
    uint64_t       seed = 7;

    ck_assert(xb != NULL && xf != NULL);
    for (uint64_t i = 0; i < rows * cols; i++) {
        xb[i] = (uint16_t)(weft_fp8_float_bits(rng_value(&seed)) >> 16);
        if (i % 997 == 0) {
            xb[i] = i % 2 ? 0x7FC0 : 0xFF81; /* NaNs */
        }
        xf[i] = weft_fp8_bits_float((uint32_t)xb[i] << 16);
    }
    for (int ue8m0 = 0; ue8m0 <= 1; ue8m0++) {
        outputs_t           of = outputs_alloc(rows, cols, 128), ob = outputs_alloc(rows, cols, 128);
        weft_quant_params_t p = {.field_mask = WEFT_QUANT_FIELD_UE8M0, .ue8m0 = ue8m0};
        weft_quant_matrix_t m = {.x = xb, .w = ob.w, .wt = ob.wt, .scale_inv = ob.scale};

        ck_assert_int_eq(quant(xf, 0, rows, cols, 128, ue8m0, &of), WEFT_OK);
        ck_assert_int_eq(weft_quant_host(&p, WEFT_DTYPE_BF16, rows, cols, &m, 1), WEFT_OK);
        outputs_assert_equal(&of, &ob, rows, cols);
        outputs_free(&of);
        outputs_free(&ob);
    }
    free(xb);
    free(xf);
}
END_TEST

/* A row stride (BF16 and FP32) reads the same values as a packed copy,
 * whatever lies between the rows; several matrices in one call equal
 * one call each. */
START_TEST(row_stride_and_batches)
{
    const uint64_t      rows = 70, cols = 90, stride = 97;
    float              *packed = malloc(rows * cols * sizeof(float));
    float              *strided = malloc(rows * stride * sizeof(float));
    uint16_t           *bpacked = malloc(rows * cols * sizeof(uint16_t));
    uint16_t           *bstrided = malloc(rows * stride * sizeof(uint16_t));
    outputs_t           a = outputs_alloc(rows, cols, 32), b = outputs_alloc(rows, cols, 32);
    outputs_t           c = outputs_alloc(rows, cols, 32), d = outputs_alloc(rows, cols, 32);
    weft_quant_params_t p = {.field_mask = WEFT_QUANT_FIELD_BLOCK, .block = 32};
    uint64_t            seed = 11;

    ck_assert(packed != NULL && strided != NULL && bpacked != NULL && bstrided != NULL);
    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t col = 0; col < stride; col++) {
            float v = col < cols ? rng_value(&seed) : (col % 2 ? INFINITY : 1e38f);
            strided[r * stride + col] = v;
            bstrided[r * stride + col] = (uint16_t)(weft_fp8_float_bits(v) >> 16);
            if (col < cols) {
                packed[r * cols + col] = v;
                bpacked[r * cols + col] = (uint16_t)(weft_fp8_float_bits(v) >> 16);
            }
        }
    }
    {
        weft_quant_matrix_t m[2] = {
            {.x = packed, .x_row_stride = 0, .w = a.w, .wt = a.wt, .scale_inv = a.scale},
            {.x = strided, .x_row_stride = stride, .w = b.w, .wt = b.wt, .scale_inv = b.scale},
        };
        ck_assert_int_eq(weft_quant_host(&p, WEFT_DTYPE_FP32, rows, cols, m, 2), WEFT_OK);
        outputs_assert_equal(&a, &b, rows, cols);
    }
    {
        weft_quant_matrix_t m[2] = {
            {.x = bpacked, .x_row_stride = cols, .w = c.w, .wt = c.wt, .scale_inv = c.scale},
            {.x = bstrided, .x_row_stride = stride, .w = d.w, .wt = d.wt, .scale_inv = d.scale},
        };
        ck_assert_int_eq(weft_quant_host(&p, WEFT_DTYPE_BF16, rows, cols, m, 2), WEFT_OK);
        outputs_assert_equal(&c, &d, rows, cols);
    }
    outputs_free(&a);
    outputs_free(&b);
    outputs_free(&c);
    outputs_free(&d);
    free(packed);
    free(strided);
    free(bpacked);
    free(bstrided);
}
END_TEST

/* Dequantized values lie within e4m3's rounding of the input: 2^-4 of the
 * value (3 mantissa bits, half an ulp), or half a subnormal step (2^-10 of
 * the scale) near zero; FP32's own roundings add a hair. */
START_TEST(dequant_within_bound)
{
    static const uint32_t blocks[] = {1, 32, 128, 256};
    const uint64_t        rows = 300, cols = 260;
    float                *x = malloc(rows * cols * sizeof(float)), *dq = malloc(rows * cols * sizeof(float));
    uint64_t              seed = 3;

    ck_assert(x != NULL && dq != NULL);
    for (uint64_t i = 0; i < rows * cols; i++) {
        x[i] = rng_value(&seed);
    }
    for (size_t bi = 0; bi < sizeof(blocks) / sizeof(blocks[0]); bi++) {
        for (int ue8m0 = 0; ue8m0 <= 1; ue8m0++) {
            uint32_t  b = blocks[bi];
            outputs_t o = outputs_alloc(rows, cols, b);
            uint64_t  nbc = (cols + b - 1) / b;

            ck_assert_int_eq(quant(x, 0, rows, cols, b, ue8m0, &o), WEFT_OK);
            ck_assert_int_eq(weft_dequant_host(b, rows, cols, o.w, o.scale, dq), WEFT_OK);
            for (uint64_t r = 0; r < rows; r++) {
                for (uint64_t c = 0; c < cols; c++) {
                    double v = x[r * cols + c], got = dq[r * cols + c];
                    double s = o.scale[(r / b) * nbc + c / b];
                    double bound = fmax(fabs(v) * 0x1p-4, s * 0x1p-10) * (1 + 0x1p-16);

                    ck_assert_msg(fabs(got - v) <= bound, "block %u [%llu, %llu]: %a dequantizes to %a (s %a)", b,
                                  (unsigned long long)r, (unsigned long long)c, v, got, s);
                    /* dequant is decode × scale, exactly as defined */
                    ck_assert(dq[r * cols + c] ==
                              weft_fp8_e4m3_decode(o.w[r * cols + c]) * o.scale[(r / b) * nbc + c / b]);
                }
            }
            outputs_free(&o);
        }
    }
    free(x);
    free(dq);
}
END_TEST

START_TEST(argument_errors)
{
    float               x[4 * 4] = {1, 2, 3, 4};
    uint8_t             w[16], wt[16], dw[16];
    float               s[1], out[16];
    weft_quant_matrix_t m[2] = {{.x = x, .w = w, .wt = wt, .scale_inv = s},
                                {.x = x, .w = w, .wt = wt, .scale_inv = s}};
    weft_quant_params_t p;

#define EXPECT_INVALID(call) ck_assert_int_eq((call), WEFT_ERR_INVALID_PARAM)
    memset(w, 0x55, sizeof(w));
    memset(dw, 0x55, sizeof(dw));
    /* Defaults, and nothing to do. */
    ck_assert_int_eq(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 4, m, 1), WEFT_OK);
    ck_assert_int_eq(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 4, NULL, 0), WEFT_OK);
    memset(w, 0x55, sizeof(w));

    p = (weft_quant_params_t){.field_mask = 1u << 4};
    EXPECT_INVALID(weft_quant_host(&p, WEFT_DTYPE_FP32, 4, 4, m, 1));
    /* A formula outside the enum; UE8M0 with the reference formula. */
    p = (weft_quant_params_t){.field_mask = WEFT_QUANT_FIELD_FORMULA, .formula = (weft_quant_formula_t)2};
    EXPECT_INVALID(weft_quant_host(&p, WEFT_DTYPE_FP32, 4, 4, m, 1));
    p = (weft_quant_params_t){.field_mask = WEFT_QUANT_FIELD_FORMULA | WEFT_QUANT_FIELD_UE8M0,
                              .formula = WEFT_QUANT_FORMULA_REFERENCE, .ue8m0 = 1};
    EXPECT_INVALID(weft_quant_host(&p, WEFT_DTYPE_FP32, 4, 4, m, 1));
    for (uint32_t bad = 0; bad < 4; bad++) {
        static const uint32_t blocks[] = {0, 3, 96, 2048};
        p = (weft_quant_params_t){.field_mask = WEFT_QUANT_FIELD_BLOCK, .block = blocks[bad]};
        EXPECT_INVALID(weft_quant_host(&p, WEFT_DTYPE_FP32, 4, 4, m, 1));
    }
    p = (weft_quant_params_t){.field_mask = WEFT_QUANT_FIELD_UE8M0, .ue8m0 = 2};
    EXPECT_INVALID(weft_quant_host(&p, WEFT_DTYPE_FP32, 4, 4, m, 1));
    p = (weft_quant_params_t){.field_mask = WEFT_QUANT_FIELD_WRITE_WT, .write_wt = -1};
    EXPECT_INVALID(weft_quant_host(&p, WEFT_DTYPE_FP32, 4, 4, m, 1));
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP16, 4, 4, m, 1));
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP8_E4M3, 4, 4, m, 1));
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_INVALID, 4, 4, m, 1));
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, 0, 4, m, 1));
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 0, m, 1));
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, UINT64_MAX / 2, 4, m, 1));
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 4, NULL, 1));
    /* A bad second matrix: nothing is written, not even the first. */
    m[1].x_row_stride = 3;
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 4, m, 2));
    m[1].x_row_stride = 0;
    m[1].x = NULL;
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 4, m, 2));
    m[1].x = x;
    m[1].w = NULL;
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 4, m, 2));
    m[1].w = w;
    m[1].scale_inv = NULL;
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 4, m, 2));
    m[1].scale_inv = s;
    m[1].wt = NULL;
    EXPECT_INVALID(weft_quant_host(NULL, WEFT_DTYPE_FP32, 4, 4, m, 2));
    for (size_t i = 0; i < sizeof(w); i++) {
        ck_assert_uint_eq(w[i], 0x55);
    }
    /* WT may be NULL without write_wt. */
    p = (weft_quant_params_t){.field_mask = WEFT_QUANT_FIELD_WRITE_WT, .write_wt = 0};
    ck_assert_int_eq(weft_quant_host(&p, WEFT_DTYPE_FP32, 4, 4, m, 2), WEFT_OK);

    EXPECT_INVALID(weft_dequant_host(0, 4, 4, dw, s, out));
    EXPECT_INVALID(weft_dequant_host(6, 4, 4, dw, s, out));
    EXPECT_INVALID(weft_dequant_host(2048, 4, 4, dw, s, out));
    EXPECT_INVALID(weft_dequant_host(128, 0, 4, dw, s, out));
    EXPECT_INVALID(weft_dequant_host(128, 4, 0, dw, s, out));
    EXPECT_INVALID(weft_dequant_host(128, 4, 4, NULL, s, out));
    EXPECT_INVALID(weft_dequant_host(128, 4, 4, dw, NULL, out));
    EXPECT_INVALID(weft_dequant_host(128, 4, 4, dw, s, NULL));
#undef EXPECT_INVALID
}
END_TEST

/* ---------------------------------------- the reference formula, by spec */

/* DeepGEMM's per_block_cast_to_fp8 as PyTorch computes it (quant.h),
 * written out plainly: torch.amax propagates NaN, clamp(1e-4), 448 / amax
 * as reciprocal × 448, x × f in FP32, amax / 448 as amax × RN(1/448), a
 * GPU's canonical NaN. */
static void spec_ref_quant(const float *x, uint64_t rows, uint64_t cols, uint32_t b, uint8_t *w, uint8_t *wt,
                           float *scale)
{
    const uint64_t nbc = (cols + b - 1) / b;

    for (uint64_t bi = 0; bi * b < rows; bi++) {
        for (uint64_t bj = 0; bj * b < cols; bj++) {
            float amax = 0.0f, reciprocal, f, s;
            int   nan = 0;

            for (uint64_t r = bi * b; r < rows && r < (bi + 1) * b; r++) {
                for (uint64_t c = bj * b; c < cols && c < (bj + 1) * b; c++) {
                    nan |= isnan(x[r * cols + c]);
                    amax = fmaxf(amax, fabsf(x[r * cols + c]));
                }
            }
            amax = nan ? NAN : amax < 1e-4f ? 1e-4f : amax;
            reciprocal = 1.0f / amax;
            f = reciprocal * 448.0f;
            s = amax * (1.0f / 448.0f);
            scale[bi * nbc + bj] = isnan(s) ? weft_fp8_bits_float(0x7FFFFFFFu) : s;
            for (uint64_t r = bi * b; r < rows && r < (bi + 1) * b; r++) {
                for (uint64_t c = bj * b; c < cols && c < (bj + 1) * b; c++) {
                    const float   y = x[r * cols + c] * f;
                    const uint8_t q = isnan(y) ? 0x7F : weft_fp8_e4m3_encode(y);
                    w[r * cols + c] = q;
                    wt[c * rows + r] = q;
                }
            }
        }
    }
}

static weft_status_t ref_quant(weft_dtype_t dtype, const void *x, uint64_t rows, uint64_t cols, uint32_t b,
                               outputs_t *o)
{
    weft_quant_params_t p = {.field_mask = WEFT_QUANT_FIELD_BLOCK | WEFT_QUANT_FIELD_FORMULA, .block = b,
                             .formula = WEFT_QUANT_FORMULA_REFERENCE};
    weft_quant_matrix_t m = {.x = x, .w = o->w, .wt = o->wt, .scale_inv = o->scale};

    return weft_quant_host(&p, dtype, rows, cols, &m, 1);
}

/* The writer against the spec on ragged shapes, every block size, FP32
 * and BF16 (a BF16 input is widened first: the same bytes as its FP32
 * copy), with NaN and Inf blocks among them. */
START_TEST(reference_matches_spec)
{
    static const uint32_t blocks[] = {1, 32, 128, 256};
    static const uint64_t shapes[][2] = {{1, 1}, {3, 5}, {130, 200}, {256, 384}, {300, 129}};
    uint64_t              seed = 0xBEEF;

    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        const uint64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
        float         *x = malloc(n * sizeof(float));
        uint16_t      *xb = malloc(n * sizeof(uint16_t));

        ck_assert(x != NULL && xb != NULL);
        for (uint64_t i = 0; i < n; i++) {
            xb[i] = (uint16_t)(weft_fp8_float_bits(rng_value(&seed)) >> 16);
            xb[i] = i % 1499 == 7 ? 0xFFC1 : i % 1777 == 11 ? 0x7F80 : xb[i]; /* -NaN, +Inf */
            x[i] = weft_fp8_bits_float((uint32_t)xb[i] << 16);
        }
        for (size_t bi = 0; bi < sizeof(blocks) / sizeof(blocks[0]); bi++) {
            outputs_t want = outputs_alloc(rows, cols, blocks[bi]);

            spec_ref_quant(x, rows, cols, blocks[bi], want.w, want.wt, want.scale);
            for (int bf16 = 0; bf16 <= 1; bf16++) {
                outputs_t got = outputs_alloc(rows, cols, blocks[bi]);

                ck_assert_int_eq(ref_quant(bf16 ? WEFT_DTYPE_BF16 : WEFT_DTYPE_FP32, bf16 ? (void *)xb : (void *)x,
                                           rows, cols, blocks[bi], &got),
                                 WEFT_OK);
                outputs_assert_equal(&got, &want, rows, cols);
                outputs_free(&got);
            }
            outputs_free(&want);
        }
        free(x);
        free(xb);
    }
}
END_TEST

/* Known answers, worked out by hand (and where the two formulas part). */
START_TEST(reference_known_answers)
{
    /* amax 0.3: f = RN(RN(1/0.3) × 448) = 0x44BAAAAA (1493.333),
     * scale_inv = RN(0.3 × RN(1/448)) = 0x3A2F8AFA where the default's
     * 0.3 / 448 is 0x3A2F8AF9. x = 0x3C2A0EA1 (0.0103795): x × f =
     * 15.499999 → 15 (0x57), where x / s = 15.5 exactly, a tie → 16 (0x58). */
    float     x[4] = {0.3f, weft_fp8_bits_float(0x3C2A0EA1u), -0.15f, 0.0f};
    outputs_t o = outputs_alloc(1, 4, 128);

    ck_assert_int_eq(ref_quant(WEFT_DTYPE_FP32, x, 1, 4, 128, &o), WEFT_OK);
    ck_assert_uint_eq(weft_fp8_float_bits(o.scale[0]), 0x3A2F8AFAu);
    ck_assert_uint_eq(o.w[0], 0x7E);                 /* 448 */
    ck_assert_uint_eq(o.w[1], 0x57);                 /* 15 */
    ck_assert_uint_eq(o.w[2], 0xF6);                 /* -224 = -1.75 × 2^7: 1 1110 110 */
    ck_assert_uint_eq(o.w[3], 0x00);
    ck_assert_int_eq(quant(x, 0, 1, 4, 128, 0, &o), WEFT_OK);
    ck_assert_uint_eq(weft_fp8_float_bits(o.scale[0]), 0x3A2F8AF9u);
    ck_assert_uint_eq(o.w[1], 0x58); /* the default formula: 16 */
    outputs_free(&o);
}
END_TEST

/* Zero blocks, tiny blocks, NaN and Inf blocks: each as the reference
 * makes them, the other blocks untouched. */
START_TEST(reference_special_blocks)
{
    /* Four 2 × 2 blocks side by side (block 2): zeros; tiny; a NaN; an Inf. */
    float     x[2 * 8] = {0.0f, -0.0f, 3e-5f, -1e-5f, 1.0f, NAN, INFINITY, -3.0f,
                          0.0f, 0.0f,  0.0f,  0.0f,   -2.0f, 0.5f, 5.0f,    -0.0f};
    outputs_t o = outputs_alloc(2, 8, 2);

    ck_assert_int_eq(ref_quant(WEFT_DTYPE_FP32, x, 2, 8, 2, &o), WEFT_OK);
    /* Zeros: amax clamped to 1e-4, f = 0x4A88B800 (4.48e6), scale_inv
     * RN(1e-4 × RN(1/448)) = 0x346FACAD; zeros keep their sign. */
    ck_assert_uint_eq(weft_fp8_float_bits(o.scale[0]), 0x346FACADu);
    ck_assert_uint_eq(o.w[0], 0x00);
    ck_assert_uint_eq(o.w[1], 0x80);
    /* Tiny: the same clamp; 3e-5 × 4.48e6 = 134.4 → 128 (0x70). */
    ck_assert_uint_eq(weft_fp8_float_bits(o.scale[1]), 0x346FACADu);
    ck_assert_uint_eq(o.w[2], 0x70);
    ck_assert_uint_eq(o.w[3], weft_fp8_e4m3_encode(-1e-5f * weft_fp8_bits_float(0x4A88B800u)));
    /* A NaN: every byte of its block NaN, scale_inv the canonical NaN. */
    ck_assert_uint_eq(weft_fp8_float_bits(o.scale[2]), 0x7FFFFFFFu);
    ck_assert_uint_eq(o.w[4], 0x7F);
    ck_assert_uint_eq(o.w[5], 0x7F);
    ck_assert_uint_eq(o.w[8 + 4], 0x7F);
    ck_assert_uint_eq(o.w[8 + 5], 0x7F);
    /* An Inf: f = 0, finite values zeros of their sign, the Inf NaN,
     * scale_inv +Inf. */
    ck_assert_uint_eq(weft_fp8_float_bits(o.scale[3]), 0x7F800000u);
    ck_assert_uint_eq(o.w[6], 0x7F);
    ck_assert_uint_eq(o.w[7], 0x80);
    ck_assert_uint_eq(o.w[8 + 6], 0x00);
    ck_assert_uint_eq(o.w[8 + 7], 0x80);
    outputs_free(&o);
}
END_TEST

/* On weights shaped like a trainer's (N(0, 0.02)), the two formulas do
 * differ, by one code at most, and about half the scales do: the option
 * is not the default under another name. */
START_TEST(reference_differs_from_the_default_by_one_code)
{
    const uint64_t rows = 512, cols = 1024, n = rows * cols;
    float         *x = malloc(n * sizeof(float));
    outputs_t      e = outputs_alloc(rows, cols, 128), r = outputs_alloc(rows, cols, 128);
    uint64_t       seed = 99, bytes = 0, scales = 0;

    ck_assert_ptr_nonnull(x);
    for (uint64_t i = 0; i < n; i += 2) { /* Box-Muller */
        const double u1 = ((double)(rng_next(&seed) >> 11) + 1.0) / 9007199254740993.0;
        const double u2 = (double)(rng_next(&seed) >> 11) / 9007199254740992.0;
        x[i] = (float)(0.02 * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
        x[i + 1] = (float)(0.02 * sqrt(-2.0 * log(u1)) * sin(2.0 * M_PI * u2));
    }
    ck_assert_int_eq(quant(x, 0, rows, cols, 128, 0, &e), WEFT_OK);
    ck_assert_int_eq(ref_quant(WEFT_DTYPE_FP32, x, rows, cols, 128, &r), WEFT_OK);
    for (uint64_t i = 0; i < n; i++) {
        const int a = e.w[i] & 0x7F, b = r.w[i] & 0x7F;
        ck_assert_msg(abs(a - b) <= 1 && (e.w[i] & 0x80) == (r.w[i] & 0x80), "element %llu: 0x%02x vs 0x%02x",
                      (unsigned long long)i, e.w[i], r.w[i]);
        bytes += e.w[i] != r.w[i];
    }
    for (size_t i = 0; i < e.nscale; i++) {
        scales += weft_fp8_float_bits(e.scale[i]) != weft_fp8_float_bits(r.scale[i]);
    }
    printf("reference vs exact: %llu of %llu W bytes, %llu of %zu scales differ\n", (unsigned long long)bytes,
           (unsigned long long)n, (unsigned long long)scales, e.nscale);
    ck_assert_uint_gt(scales, 0);
    outputs_free(&e);
    outputs_free(&r);
    free(x);
}
END_TEST

START_TEST(formula_names)
{
    weft_quant_formula_t f = (weft_quant_formula_t)7;

    ck_assert_str_eq(weft_quant_formula_name(WEFT_QUANT_FORMULA_EXACT), "exact");
    ck_assert_str_eq(weft_quant_formula_name(WEFT_QUANT_FORMULA_REFERENCE), "reference");
    ck_assert_ptr_null(weft_quant_formula_name((weft_quant_formula_t)2));
    ck_assert_int_eq(weft_quant_formula_parse("reference", &f), WEFT_OK);
    ck_assert_int_eq(f, WEFT_QUANT_FORMULA_REFERENCE);
    ck_assert_int_eq(weft_quant_formula_parse("exact", &f), WEFT_OK);
    ck_assert_int_eq(f, WEFT_QUANT_FORMULA_EXACT);
    ck_assert_int_eq(weft_quant_formula_parse("deepgemm", &f), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_quant_formula_parse(NULL, &f), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(f, WEFT_QUANT_FORMULA_EXACT);
}
END_TEST

#ifndef HAVE_CUDA
START_TEST(cuda_without_gpu_support)
{
    float               x[1] = {1}, s[1], out[1];
    uint8_t             w[1], wt[1];
    weft_quant_matrix_t m = {.x = x, .w = w, .wt = wt, .scale_inv = s};

    ck_assert_int_eq(weft_quant_cuda(NULL, WEFT_DTYPE_FP32, 1, 1, &m, 1, NULL), WEFT_ERR_UNSUPPORTED);
    ck_assert_int_eq(weft_dequant_cuda(128, 1, 1, w, s, out, NULL), WEFT_ERR_UNSUPPORTED);
}
END_TEST
#endif

static Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *enc = tcase_create("e4m3");
    TCase *wr = tcase_create("writer");

    tcase_add_test(enc, decode_every_byte);
    tcase_add_test(enc, encode_decode_round_trip);
    tcase_add_test(enc, encode_ties_to_even_everywhere);
    tcase_add_test(enc, encode_named_values);
    suite_add_tcase(s, enc);
    tcase_set_timeout(wr, 60);
    tcase_add_test(wr, quant_matches_spec);
    tcase_add_test(wr, quant_known_answers);
    tcase_add_test(wr, scale_of_zero_block);
    tcase_add_test(wr, scale_ue8m0_rounding);
    tcase_add_test(wr, scale_with_nan);
    tcase_add_test(wr, scale_with_inf);
    tcase_add_test(wr, partial_edge_blocks);
    tcase_add_test(wr, wt_is_the_transpose);
    tcase_add_test(wr, without_wt);
    tcase_add_test(wr, bf16_equals_fp32);
    tcase_add_test(wr, row_stride_and_batches);
    tcase_add_test(wr, dequant_within_bound);
    tcase_add_test(wr, argument_errors);
    tcase_add_test(wr, reference_matches_spec);
    tcase_add_test(wr, reference_known_answers);
    tcase_add_test(wr, reference_special_blocks);
    tcase_add_test(wr, reference_differs_from_the_default_by_one_code);
    tcase_add_test(wr, formula_names);
#ifndef HAVE_CUDA
    tcase_add_test(wr, cuda_without_gpu_support);
#endif
    suite_add_tcase(s, wr);
    return s;
}

WEFT_TEST_MAIN(quant_suite)
