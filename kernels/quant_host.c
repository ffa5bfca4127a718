/*
 * The host FP8 writer: the reference for the CUDA kernel, and the writer of
 * hosts without a GPU. The arithmetic is fp8.h's; this file walks the
 * matrix.
 *
 * One band of block rows at a time: each block's amax, scale and bytes in
 * W (the block is read twice, the second time from cache), then the band
 * of W, still in cache, is transposed into WT in 8 × 8 tiles.
 */
#include "config.h"

#include "fp8.h"
#include "le_bytes.h"
#include "quant_internal.h"

#include "common/log.h"

#include <stdint.h>
#include <string.h>

#define QUANT_KNOWN_FIELDS                                                                                   \
    ((uint64_t)(WEFT_QUANT_FIELD_BLOCK | WEFT_QUANT_FIELD_UE8M0 | WEFT_QUANT_FIELD_WRITE_WT |                   \
                WEFT_QUANT_FIELD_FORMULA))

/* Elements handled per step of the inner loops: a fixed count lets the
 * compiler vectorize them even at its cheapest cost model (-O2). */
#define QUANT_CHUNK 16

static int block_ok(uint32_t block)
{
    return block >= 1 && block <= WEFT_QUANT_BLOCK_MAX && (block & (block - 1)) == 0;
}

/* rows × cols fits in size_t, and so does every index into it. */
static int shape_ok(uint64_t rows, uint64_t cols)
{
    return rows > 0 && cols > 0 && rows <= SIZE_MAX / cols;
}

weft_status_t weft_quant_check(const char *who, const weft_quant_params_t *params, weft_dtype_t x_dtype,
                               uint64_t rows, uint64_t cols, const weft_quant_matrix_t *matrices,
                               size_t count, weft_quant_config_t *config)
{
    weft_quant_config_t  c = {.block = WEFT_QUANT_BLOCK_DEFAULT, .ue8m0 = 0, .write_wt = 1};
    weft_quant_formula_t formula = WEFT_QUANT_FORMULA_EXACT;

    if (params != NULL) {
        if ((params->field_mask & ~QUANT_KNOWN_FIELDS) != 0) {
            weft_log_error("%s: unknown field_mask bits 0x%llx", who,
                           (unsigned long long)(params->field_mask & ~QUANT_KNOWN_FIELDS));
            return WEFT_ERR_INVALID_PARAM;
        }
        if (params->field_mask & WEFT_QUANT_FIELD_BLOCK) {
            c.block = params->block;
        }
        if (params->field_mask & WEFT_QUANT_FIELD_UE8M0) {
            c.ue8m0 = params->ue8m0;
        }
        if (params->field_mask & WEFT_QUANT_FIELD_WRITE_WT) {
            c.write_wt = params->write_wt;
        }
        if (params->field_mask & WEFT_QUANT_FIELD_FORMULA) {
            formula = params->formula;
        }
    }
    if (weft_quant_formula_name(formula) == NULL) {
        weft_log_error("%s: formula %d is neither exact (0) nor reference (1)", who, (int)formula);
        return WEFT_ERR_INVALID_PARAM;
    }
    c.reference = formula == WEFT_QUANT_FORMULA_REFERENCE;
    if (!block_ok(c.block)) {
        weft_log_error("%s: block %u is not a power of two in 1..%u", who, c.block, WEFT_QUANT_BLOCK_MAX);
        return WEFT_ERR_INVALID_PARAM;
    }
    if ((c.ue8m0 != 0 && c.ue8m0 != 1) || (c.write_wt != 0 && c.write_wt != 1)) {
        weft_log_error("%s: ue8m0 (%d) and write_wt (%d) must be 0 or 1", who, c.ue8m0, c.write_wt);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (c.ue8m0 && c.reference) {
        weft_log_error("%s: UE8M0 scales are not defined for the reference formula", who);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (x_dtype != WEFT_DTYPE_FP32 && x_dtype != WEFT_DTYPE_BF16) {
        weft_log_error("%s: input dtype %s is neither fp32 nor bf16", who, weft_dtype_name(x_dtype));
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!shape_ok(rows, cols)) {
        weft_log_error("%s: shape [%llu, %llu] is empty or too large", who, (unsigned long long)rows,
                       (unsigned long long)cols);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (matrices == NULL && count > 0) {
        weft_log_error("%s: matrices is NULL for %zu matrices", who, count);
        return WEFT_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < count; i++) {
        const weft_quant_matrix_t *m = &matrices[i];
        uint64_t                   stride = m->x_row_stride != 0 ? m->x_row_stride : cols;

        if (m->x == NULL || m->w == NULL || m->scale_inv == NULL || (c.write_wt && m->wt == NULL)) {
            weft_log_error("%s: matrix %zu: %s is NULL", who, i,
                           m->x == NULL ? "x" : m->w == NULL ? "w" : m->scale_inv == NULL ? "scale_inv" : "wt");
            return WEFT_ERR_INVALID_PARAM;
        }
        if (stride < cols || !shape_ok(rows, stride)) {
            weft_log_error("%s: matrix %zu: row stride %llu is below cols %llu or too large", who, i,
                           (unsigned long long)stride, (unsigned long long)cols);
            return WEFT_ERR_INVALID_PARAM;
        }
    }
    *config = c;
    return WEFT_OK;
}

weft_status_t weft_dequant_check(const char *who, uint32_t block, uint64_t rows, uint64_t cols,
                                 const uint8_t *w, const float *scale_inv, const float *out)
{
    if (!block_ok(block)) {
        weft_log_error("%s: block %u is not a power of two in 1..%u", who, block, WEFT_QUANT_BLOCK_MAX);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!shape_ok(rows, cols)) {
        weft_log_error("%s: shape [%llu, %llu] is empty or too large", who, (unsigned long long)rows,
                       (unsigned long long)cols);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (w == NULL || scale_inv == NULL || out == NULL) {
        weft_log_error("%s: %s is NULL", who, w == NULL ? "w" : scale_inv == NULL ? "scale_inv" : "out");
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_OK;
}

const char *weft_quant_formula_name(weft_quant_formula_t formula)
{
    switch (formula) {
    case WEFT_QUANT_FORMULA_EXACT:
        return "exact";
    case WEFT_QUANT_FORMULA_REFERENCE:
        return "reference";
    }
    return NULL;
}

weft_status_t weft_quant_formula_parse(const char *name, weft_quant_formula_t *formula)
{
    if (name != NULL && formula != NULL) {
        for (int f = WEFT_QUANT_FORMULA_EXACT; f <= WEFT_QUANT_FORMULA_REFERENCE; f++) {
            if (strcmp(name, weft_quant_formula_name((weft_quant_formula_t)f)) == 0) {
                *formula = (weft_quant_formula_t)f;
                return WEFT_OK;
            }
        }
    }
    weft_log_error("quant: formula \"%s\" is neither \"exact\" nor \"reference\"", name != NULL ? name : "(null)");
    return WEFT_ERR_INVALID_PARAM;
}

/* ------------------------------------------------------------- the sweeps */

static uint32_t umax(uint32_t a, uint32_t b)
{
    return a > b ? a : b;
}

static uint32_t amax_f32(const float *x, size_t n, uint32_t amax)
{
    /* Four chains, so that the maxima do not wait on each other. */
    uint32_t m0 = amax, m1 = 0, m2 = 0, m3 = 0;
    size_t   i = 0;

    for (; i + 4 <= n; i += 4) {
        m0 = umax(m0, weft_fp8_abs_bits(weft_fp8_float_bits(x[i])));
        m1 = umax(m1, weft_fp8_abs_bits(weft_fp8_float_bits(x[i + 1])));
        m2 = umax(m2, weft_fp8_abs_bits(weft_fp8_float_bits(x[i + 2])));
        m3 = umax(m3, weft_fp8_abs_bits(weft_fp8_float_bits(x[i + 3])));
    }
    for (; i < n; i++) {
        m0 = umax(m0, weft_fp8_abs_bits(weft_fp8_float_bits(x[i])));
    }
    return umax(umax(m0, m1), umax(m2, m3));
}

static uint32_t amax_bf16(const uint16_t *x, size_t n, uint32_t amax)
{
    for (size_t i = 0; i < n; i++) {
        amax = umax(amax, weft_fp8_abs_bits((uint32_t)x[i] << 16));
    }
    return amax;
}

/* The reference formula's: NaN kept (weft_fp8_ref_abs_bits). */
static uint32_t ref_amax_f32(const float *x, size_t n, uint32_t amax)
{
    uint32_t m0 = amax, m1 = 0, m2 = 0, m3 = 0;
    size_t   i = 0;

    for (; i + 4 <= n; i += 4) {
        m0 = umax(m0, weft_fp8_ref_abs_bits(weft_fp8_float_bits(x[i])));
        m1 = umax(m1, weft_fp8_ref_abs_bits(weft_fp8_float_bits(x[i + 1])));
        m2 = umax(m2, weft_fp8_ref_abs_bits(weft_fp8_float_bits(x[i + 2])));
        m3 = umax(m3, weft_fp8_ref_abs_bits(weft_fp8_float_bits(x[i + 3])));
    }
    for (; i < n; i++) {
        m0 = umax(m0, weft_fp8_ref_abs_bits(weft_fp8_float_bits(x[i])));
    }
    return umax(umax(m0, m1), umax(m2, m3));
}

static uint32_t ref_amax_bf16(const uint16_t *x, size_t n, uint32_t amax)
{
    for (size_t i = 0; i < n; i++) {
        amax = umax(amax, weft_fp8_ref_abs_bits((uint32_t)x[i] << 16));
    }
    return amax;
}

/* q = e4m3(RN(x × f)), the products of a chunk first (vectorized). */
static void ref_quant_f32(const float *x, size_t n, float f, uint8_t *q)
{
    size_t i = 0;

    for (; i + QUANT_CHUNK <= n; i += QUANT_CHUNK) {
        float y[QUANT_CHUNK];

        for (int k = 0; k < QUANT_CHUNK; k++) {
            y[k] = x[i + (size_t)k] * f;
        }
        for (int k = 0; k < QUANT_CHUNK; k++) {
            q[i + (size_t)k] = weft_fp8_e4m3_encode_float(y[k]);
        }
    }
    for (; i < n; i++) {
        q[i] = weft_fp8_ref_quantize(x[i], f);
    }
}

static void ref_quant_bf16(const uint16_t *x, size_t n, float f, uint8_t *q)
{
    for (size_t i = 0; i < n; i++) {
        q[i] = weft_fp8_ref_quantize(weft_fp8_bf16_float(x[i]), f);
    }
}

/*
 * q = e4m3(x / s). Where s is a power of two (always with UE8M0; the
 * caller checks), x × (1/s) is the same real number as x / s, so IEEE
 * rounding gives the same float: the multiply replaces the slow divide.
 */
static void quant_f32(const float *x, size_t n, float s, int pow2, uint8_t *q)
{
    const float inv = 1.0f / s;
    size_t      i = 0;

    /* The quotients of a chunk first (the compiler vectorizes that loop),
     * then their encodings. */
    for (; i + QUANT_CHUNK <= n; i += QUANT_CHUNK) {
        float y[QUANT_CHUNK];

        if (pow2) {
            for (int k = 0; k < QUANT_CHUNK; k++) {
                y[k] = x[i + (size_t)k] * inv;
            }
        } else {
            for (int k = 0; k < QUANT_CHUNK; k++) {
                y[k] = x[i + (size_t)k] / s;
            }
        }
        for (int k = 0; k < QUANT_CHUNK; k++) {
            q[i + (size_t)k] = weft_fp8_e4m3_encode_float(y[k]);
        }
    }
    for (; i < n; i++) {
        q[i] = weft_fp8_quantize(x[i], s);
    }
}

static void quant_bf16(const uint16_t *x, size_t n, float s, uint8_t *q)
{
    for (size_t i = 0; i < n; i++) {
        q[i] = weft_fp8_quantize(weft_fp8_bf16_float(x[i]), s);
    }
}

/* s is 2^k with 1/s a normal float: then x / s == x * (1/s) exactly. */
static int is_pow2_scale(float s)
{
    uint32_t b = weft_fp8_float_bits(s);
    uint32_t e = (b >> 23) & 0xFFu;

    return (b & 0x807FFFFFu) == 0 && e >= 2 && e <= 252;
}

/* Transposes the 8 × 8 bytes held in 8 little-endian words, in place
 * (three rounds of swapping 4 × 4, 2 × 2 and 1 × 1 sub-blocks). */
static void transpose8x8(uint64_t v[8])
{
    for (int k = 0; k < 8; k += 2) { /* 1 × 1 blocks between row pairs */
        uint64_t t = ((v[k] >> 8) ^ v[k + 1]) & 0x00FF00FF00FF00FFULL;
        v[k + 1] ^= t;
        v[k] ^= t << 8;
    }
    for (int k = 0; k < 8; k += 4) { /* 2 × 2 blocks */
        for (int j = 0; j < 2; j++) {
            uint64_t t = ((v[k + j] >> 16) ^ v[k + j + 2]) & 0x0000FFFF0000FFFFULL;
            v[k + j + 2] ^= t;
            v[k + j] ^= t << 16;
        }
    }
    for (int j = 0; j < 4; j++) { /* 4 × 4 blocks */
        uint64_t t = ((v[j] >> 32) ^ v[j + 4]) & 0x00000000FFFFFFFFULL;
        v[j + 4] ^= t;
        v[j] ^= t << 32;
    }
}

/* WT[c][r0 + i] = W[r0 + i][c] for the band's rows; W's band is in cache.
 * 8 × 8 tiles through registers, then the ragged edges byte by byte. */
static void transpose_band(const uint8_t *w, uint64_t rows, uint64_t cols, uint64_t r0, uint64_t br,
                           uint8_t *wt)
{
    const uint8_t *src = w + r0 * cols;
    uint64_t       c = 0, i;

    /* Eight columns of W at a time: eight rows of WT filled left to right. */
    for (; c + 8 <= cols; c += 8) {
        for (i = 0; i + 8 <= br; i += 8) {
            uint64_t v[8];
            for (int k = 0; k < 8; k++) {
                v[k] = weft_le_load64(src + (i + (uint64_t)k) * cols + c);
            }
            transpose8x8(v);
            for (int k = 0; k < 8; k++) {
                weft_le_store64(wt + (c + (uint64_t)k) * rows + r0 + i, v[k]);
            }
        }
        for (; i < br; i++) {
            for (uint64_t k = c; k < c + 8; k++) {
                wt[k * rows + r0 + i] = src[i * cols + k];
            }
        }
    }
    for (; c < cols; c++) {
        for (i = 0; i < br; i++) {
            wt[c * rows + r0 + i] = src[i * cols + c];
        }
    }
}

/* quant_block with the reference formula. */
static float ref_quant_block(weft_dtype_t dtype, const uint8_t *x, uint64_t stride, uint64_t br, uint64_t bc,
                             uint8_t *w, uint64_t cols)
{
    const size_t esize = dtype == WEFT_DTYPE_FP32 ? 4 : 2;
    uint32_t     amax_bits = 0;
    float        amax, f;

    for (uint64_t r = 0; r < br; r++) {
        const void *row = x + r * stride * esize;
        amax_bits = dtype == WEFT_DTYPE_FP32 ? ref_amax_f32(row, bc, amax_bits) : ref_amax_bf16(row, bc, amax_bits);
    }
    amax = weft_fp8_ref_amax(amax_bits);
    f = weft_fp8_ref_factor(amax);
    for (uint64_t r = 0; r < br; r++) {
        const void *row = x + r * stride * esize;
        if (dtype == WEFT_DTYPE_FP32) {
            ref_quant_f32(row, bc, f, w + r * cols);
        } else {
            ref_quant_bf16(row, bc, f, w + r * cols);
        }
    }
    return weft_fp8_ref_scale_inv(amax);
}

/* One block: its amax, its scale, its row segments quantized into W. The
 * block (64 KB of FP32 at b = 128) is read twice, the second time from
 * cache. */
static float quant_block(const weft_quant_config_t *c, weft_dtype_t dtype, const uint8_t *x, uint64_t stride,
                         uint64_t br, uint64_t bc, uint8_t *w, uint64_t cols)
{
    const size_t esize = dtype == WEFT_DTYPE_FP32 ? 4 : 2;
    uint32_t     amax = 0;
    float        s;
    int          pow2;

    for (uint64_t r = 0; r < br; r++) {
        const void *row = x + r * stride * esize;
        amax = dtype == WEFT_DTYPE_FP32 ? amax_f32(row, bc, amax) : amax_bf16(row, bc, amax);
    }
    s = weft_fp8_block_scale(amax, c->ue8m0);
    pow2 = is_pow2_scale(s);
    for (uint64_t r = 0; r < br; r++) {
        const void *row = x + r * stride * esize;
        if (dtype == WEFT_DTYPE_FP32) {
            quant_f32(row, bc, s, pow2, w + r * cols);
        } else {
            quant_bf16(row, bc, s, w + r * cols);
        }
    }
    return s;
}

/* A band of block rows at a time: its blocks into W, then the band, still
 * in cache, transposed from W into WT. */
static void quant_matrix(const weft_quant_config_t *c, weft_dtype_t dtype, uint64_t rows, uint64_t cols,
                         const weft_quant_matrix_t *m)
{
    const uint64_t b = c->block;
    const uint64_t stride = m->x_row_stride != 0 ? m->x_row_stride : cols;
    const uint64_t nbc = (cols + b - 1) / b;
    const size_t   esize = dtype == WEFT_DTYPE_FP32 ? 4 : 2;
    const uint8_t *x = m->x;

    for (uint64_t r0 = 0; r0 < rows; r0 += b) {
        const uint64_t br = rows - r0 < b ? rows - r0 : b;

        for (uint64_t j = 0; j < nbc; j++) {
            const uint64_t c0 = j * b, bc = cols - c0 < b ? cols - c0 : b;

            const uint8_t *block_x = x + (r0 * stride + c0) * esize;
            uint8_t       *block_w = m->w + r0 * cols + c0;

            m->scale_inv[(r0 / b) * nbc + j] = c->reference
                                                   ? ref_quant_block(dtype, block_x, stride, br, bc, block_w, cols)
                                                   : quant_block(c, dtype, block_x, stride, br, bc, block_w, cols);
        }
        if (c->write_wt) {
            transpose_band(m->w, rows, cols, r0, br, m->wt);
        }
    }
}

weft_status_t weft_quant_host(const weft_quant_params_t *params, weft_dtype_t x_dtype, uint64_t rows,
                              uint64_t cols, const weft_quant_matrix_t *matrices, size_t count)
{
    weft_quant_config_t c;
    weft_status_t       status;

    status = weft_quant_check("weft_quant_host", params, x_dtype, rows, cols, matrices, count, &c);
    if (status != WEFT_OK) {
        return status;
    }
    for (size_t i = 0; i < count; i++) {
        quant_matrix(&c, x_dtype, rows, cols, &matrices[i]);
    }
    return WEFT_OK;
}

weft_status_t weft_dequant_host(uint32_t block, uint64_t rows, uint64_t cols, const uint8_t *w,
                                const float *scale_inv, float *out)
{
    const uint64_t nbc = (cols + block - 1) / (block != 0 ? block : 1);
    weft_status_t  status;
    float          table[256];

    status = weft_dequant_check("weft_dequant_host", block, rows, cols, w, scale_inv, out);
    if (status != WEFT_OK) {
        return status;
    }
    for (int i = 0; i < 256; i++) {
        table[i] = weft_fp8_e4m3_decode_byte((uint8_t)i);
    }
    for (uint64_t r = 0; r < rows; r++) {
        const float *scale = scale_inv + (r / block) * nbc;
        for (uint64_t col = 0; col < cols; col++) {
            out[r * cols + col] = table[w[r * cols + col]] * scale[col / block];
        }
    }
    return WEFT_OK;
}

uint8_t weft_fp8_e4m3_encode(float x)
{
    return weft_fp8_e4m3_encode_float(x);
}

float weft_fp8_e4m3_decode(uint8_t byte)
{
    return weft_fp8_e4m3_decode_byte(byte);
}

#ifndef HAVE_CUDA
weft_status_t weft_quant_cuda(const weft_quant_params_t *params, weft_dtype_t x_dtype, uint64_t rows,
                              uint64_t cols, const weft_quant_matrix_t *matrices, size_t count, void *stream)
{
    (void)params;
    (void)x_dtype;
    (void)rows;
    (void)cols;
    (void)matrices;
    (void)count;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_dequant_cuda(uint32_t block, uint64_t rows, uint64_t cols, const uint8_t *w,
                                const float *scale_inv, float *out, void *stream)
{
    (void)block;
    (void)rows;
    (void)cols;
    (void)w;
    (void)scale_inv;
    (void)out;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}
#endif
