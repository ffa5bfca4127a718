/* The FP8 writer on the GPU against the host reference: W, WT and the
 * scales byte for byte, on random matrices of many shapes, both input
 * dtypes, row strides, batches, UE8M0 and WT on and off, block sizes, the
 * tile and the generic kernel, NaN and Inf. Exits 77 (skipped) where no
 * GPU is present. */
#include "config.h"

#include "lib/gpu_skip.h"
#include "kernels/fp8.h"
#include "kernels/quant_cuda.h"
#include "lib/harness.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <weft/quant.h>

#define POISON 0xA5

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Random floats whose magnitude varies by row band (2^-24 .. 2^15), so
 * that blocks get very different scales, some of them clamped. */
static float row_scale(uint64_t row)
{
    return ldexpf(1.0f, (int)((row / 37) % 40) - 24);
}

static float rng_float(float scale)
{
    const uint64_t r = rng_next();

    return ((float)(r >> 40) / (float)(1u << 24) * 2.0f - 1.0f) * scale;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return (uint16_t)(u >> 16);
}

typedef struct quant_case {
    weft_dtype_t dtype;
    uint64_t     rows, cols;
    uint64_t     stride_pad; /* elements beyond cols in each input row */
    size_t       count;
    uint32_t     block;
    int          ue8m0, write_wt;
    size_t       x_offset; /* elements: misaligns the inputs */
    int          specials; /* sprinkle NaN, Inf, -0, subnormals, huge */
    int          reference; /* WEFT_QUANT_FORMULA_REFERENCE (ue8m0 0) */
} quant_case_t;

/* The scale kinds every option sweep runs: the default formula, with
 * and without UE8M0 scales, and the reference formula. */
#define SCALE_KINDS 3
static void set_scale_kind(quant_case_t *qc, int kind)
{
    qc->ue8m0 = kind == 1;
    qc->reference = kind == 2;
}

static void put_specials(void *x, weft_dtype_t dtype, uint64_t stride, uint64_t rows, uint64_t cols)
{
    static const uint32_t bits[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7F800000u,
                                    0xFF800000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu,
                                    0xFF7FFFFFu, 0x43E80000u, 0x3A800000u, 0x3A000000u};
    const size_t          n = sizeof(bits) / sizeof(bits[0]);

    for (uint64_t r = 0; r < rows; r++) {
        for (uint64_t c = 0; c < cols; c++) {
            uint64_t pick = rng_next();
            uint32_t b;

            /* Most blocks get none; some get a few. */
            if (((r / 64 + c / 64) % 3) != 0 || pick % 97 != 0) {
                continue;
            }
            b = bits[(pick >> 8) % n];
            if (dtype == WEFT_DTYPE_FP32) {
                memcpy((float *)x + r * stride + c, &b, sizeof(b));
            } else {
                ((uint16_t *)x)[r * stride + c] = (uint16_t)(b >> 16);
            }
        }
    }
}

/* Quantizes c's matrices on the GPU and on the host; every byte must match. */
static void run_case(const quant_case_t *qc, cudaStream_t stream)
{
    const size_t        esize = qc->dtype == WEFT_DTYPE_FP32 ? 4 : 2;
    const uint64_t      stride = qc->cols + qc->stride_pad;
    const uint64_t      b = qc->block;
    const size_t        nscale = ((qc->rows + b - 1) / b) * ((qc->cols + b - 1) / b);
    const size_t        x_elems = qc->rows * stride;
    const size_t        q_bytes = qc->rows * qc->cols;
    const size_t        x_bytes = (x_elems * qc->count + qc->x_offset) * esize;
    unsigned char      *hx = malloc(x_bytes);
    uint8_t            *hw = malloc(q_bytes * qc->count), *hwt = malloc(q_bytes * qc->count);
    uint8_t            *gw = malloc(q_bytes * qc->count), *gwt = malloc(q_bytes * qc->count);
    float              *hs = malloc(nscale * qc->count * 4), *gs = malloc(nscale * qc->count * 4);
    weft_quant_matrix_t *hm = calloc(qc->count, sizeof(*hm)), *dm = calloc(qc->count, sizeof(*dm));
    unsigned char      *dx = NULL;
    uint8_t            *dw = NULL, *dwt = NULL;
    float              *ds = NULL;
    weft_quant_params_t params = {
        .field_mask = WEFT_QUANT_FIELD_BLOCK | WEFT_QUANT_FIELD_UE8M0 | WEFT_QUANT_FIELD_WRITE_WT |
                      WEFT_QUANT_FIELD_FORMULA,
        .block = qc->block,
        .ue8m0 = qc->ue8m0,
        .write_wt = qc->write_wt,
        .formula = qc->reference ? WEFT_QUANT_FORMULA_REFERENCE : WEFT_QUANT_FORMULA_EXACT,
    };

    ck_assert(hx && hw && hwt && gw && gwt && hs && gs && hm && dm);
    rng_state = 0x9E3779B97F4A7C15ull ^ (qc->rows * 1000003u + qc->cols * 7919u + qc->count);
    for (size_t m = 0; m < qc->count; m++) {
        unsigned char *x = hx + (qc->x_offset + m * x_elems) * esize;

        for (uint64_t r = 0; r < qc->rows; r++) {
            const float scale = row_scale(r + m);

            for (uint64_t c = 0; c < stride; c++) {
                float f = rng_float(scale);

                if (qc->dtype == WEFT_DTYPE_FP32) {
                    ((float *)x)[r * stride + c] = f;
                } else {
                    ((uint16_t *)x)[r * stride + c] = to_bf16(f);
                }
            }
        }
        if (qc->specials) {
            put_specials(x, qc->dtype, stride, qc->rows, qc->cols);
        }
    }
    ck_assert_int_eq(cudaMalloc((void **)&dx, x_bytes), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dw, q_bytes * qc->count), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dwt, q_bytes * qc->count), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&ds, nscale * qc->count * 4), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(dx, hx, x_bytes, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaMemset(dw, POISON, q_bytes * qc->count), cudaSuccess);
    ck_assert_int_eq(cudaMemset(dwt, POISON, q_bytes * qc->count), cudaSuccess);
    ck_assert_int_eq(cudaMemset(ds, POISON, nscale * qc->count * 4), cudaSuccess);

    for (size_t m = 0; m < qc->count; m++) {
        const size_t xo = (qc->x_offset + m * x_elems) * esize;

        hm[m] = (weft_quant_matrix_t){hx + xo, qc->stride_pad ? stride : 0, hw + m * q_bytes,
                                      hwt + m * q_bytes, hs + m * nscale};
        dm[m] = (weft_quant_matrix_t){dx + xo, qc->stride_pad ? stride : 0, dw + m * q_bytes,
                                      dwt + m * q_bytes, ds + m * nscale};
    }
    ck_assert_int_eq(weft_quant_cuda(&params, qc->dtype, qc->rows, qc->cols, dm, qc->count, stream), WEFT_OK);
    memset(dm, 0, qc->count * sizeof(*dm)); /* the call must not need them any more */
    memset(hwt, POISON, q_bytes * qc->count);
    ck_assert_int_eq(weft_quant_host(&params, qc->dtype, qc->rows, qc->cols, hm, qc->count), WEFT_OK);
    ck_assert_int_eq(cudaStreamSynchronize(stream), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(gw, dw, q_bytes * qc->count, cudaMemcpyDeviceToHost), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(gwt, dwt, q_bytes * qc->count, cudaMemcpyDeviceToHost), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(gs, ds, nscale * qc->count * 4, cudaMemcpyDeviceToHost), cudaSuccess);

    for (size_t m = 0; m < qc->count; m++) {
        ck_assert_msg(memcmp(gs + m * nscale, hs + m * nscale, nscale * 4) == 0,
                      "scales differ: %llux%llu matrix %zu", (unsigned long long)qc->rows,
                      (unsigned long long)qc->cols, m);
        if (memcmp(gw + m * q_bytes, hw + m * q_bytes, q_bytes) != 0) {
            for (size_t i = 0; i < q_bytes; i++) {
                const size_t j = m * q_bytes + i;

                ck_assert_msg(gw[j] == hw[j],
                              "W differs: %llux%llu block %u matrix %zu at (%zu, %zu): gpu %02x host %02x",
                              (unsigned long long)qc->rows, (unsigned long long)qc->cols, qc->block, m,
                              i / qc->cols, i % qc->cols, gw[j], hw[j]);
            }
        }
    }
    /* Without WT the GPU leaves it alone. */
    ck_assert_msg(memcmp(gwt, hwt, q_bytes * qc->count) == 0, "WT differs: %llux%llu block %u wt %d",
                  (unsigned long long)qc->rows, (unsigned long long)qc->cols, qc->block, qc->write_wt);

    ck_assert_int_eq(cudaFree(dx), cudaSuccess);
    ck_assert_int_eq(cudaFree(dw), cudaSuccess);
    ck_assert_int_eq(cudaFree(dwt), cudaSuccess);
    ck_assert_int_eq(cudaFree(ds), cudaSuccess);
    free(hx);
    free(hw);
    free(hwt);
    free(gw);
    free(gwt);
    free(hs);
    free(gs);
    free(hm);
    free(dm);
}

static void run_all_options(weft_dtype_t dtype, uint64_t rows, uint64_t cols, uint64_t pad, size_t count,
                            uint32_t block)
{
    for (int kind = 0; kind < SCALE_KINDS; kind++) {
        for (int wt = 0; wt < 2; wt++) {
            quant_case_t qc = {dtype, rows, cols, pad, count, block, 0, wt, 0, 0, 0};

            set_scale_kind(&qc, kind);
            run_case(&qc, NULL);
        }
    }
}

START_TEST(gpu_quant_shapes)
{
    static const uint64_t shapes[][3] = {
        {1, 1, 0},     {3, 5, 0},     {3, 5, 7},     {17, 300, 1},   {128, 128, 0}, {130, 257, 3},
        {256, 384, 0}, {256, 384, 4}, {144, 208, 0}, {1000, 1000, 0}, {48, 1040, 16}, {2048, 768, 0},
    };
    const weft_dtype_t dtype = _i == 0 ? WEFT_DTYPE_FP32 : WEFT_DTYPE_BF16;

    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        run_all_options(dtype, shapes[i][0], shapes[i][1], shapes[i][2], 1, 128);
    }
}
END_TEST

START_TEST(gpu_quant_large)
{
    quant_case_t fp32 = {WEFT_DTYPE_FP32, 4096, 7168, 0, 1, 128, 0, 1, 0, 0, 0};
    quant_case_t bf16 = {WEFT_DTYPE_BF16, 4096, 7168, 64, 1, 128, 1, 1, 0, 0, 0};

    run_case(&fp32, NULL);
    run_case(&bf16, NULL);
    fp32.reference = 1;
    set_scale_kind(&bf16, 2);
    run_case(&fp32, NULL);
    run_case(&bf16, NULL);
}
END_TEST

START_TEST(gpu_quant_batched_experts)
{
    /* The gate_up and down projections of 128 experts, one launch each. */
    quant_case_t up = {WEFT_DTYPE_FP32, 1536, 2048, 0, 128, 128, 0, 1, 0, 0, 0};
    quant_case_t down = {WEFT_DTYPE_BF16, 2048, 768, 0, 128, 128, 1, 1, 0, 0, 0};

    run_case(&up, NULL);
    run_case(&down, NULL);
    up.reference = 1;
    set_scale_kind(&down, 2);
    run_case(&up, NULL);
    run_case(&down, NULL);
}
END_TEST

START_TEST(gpu_quant_many_matrices)
{
    /* More matrices than fit in the kernel's parameters: descriptors go
     * through a device buffer. Tile and generic kernel. */
    quant_case_t tile = {WEFT_DTYPE_FP32, 32, 48, 0, 1000, 128, 0, 1, 0, 0, 0};
    quant_case_t generic = {WEFT_DTYPE_BF16, 3, 5, 2, 1500, 128, 1, 1, 0, 0, 0};

    run_case(&tile, NULL);
    run_case(&generic, NULL);
}
END_TEST

START_TEST(gpu_quant_block_sizes)
{
    static const uint32_t blocks[] = {1, 2, 4, 16, 32, 64, 256, 1024};

    for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
        run_all_options(WEFT_DTYPE_FP32, 200, 300, 0, 2, blocks[i]);
        run_all_options(WEFT_DTYPE_BF16, 67, 45, 3, 3, blocks[i]);
    }
    {
        quant_case_t big = {WEFT_DTYPE_FP32, 2100, 1100, 0, 1, 1024, 0, 1, 0, 0, 0};

        run_case(&big, NULL);
    }
}
END_TEST

START_TEST(gpu_quant_misaligned_inputs)
{
    /* Inputs off their 16-byte alignment take the generic kernel. */
    quant_case_t fp32 = {WEFT_DTYPE_FP32, 256, 256, 0, 3, 128, 0, 1, 1, 0, 0};
    quant_case_t bf16 = {WEFT_DTYPE_BF16, 256, 256, 2, 3, 128, 1, 1, 1, 0, 0};

    run_case(&fp32, NULL);
    run_case(&bf16, NULL);
}
END_TEST

START_TEST(gpu_quant_nan_inf)
{
    static const uint64_t shapes[][2] = {{256, 384}, {250, 380}, {512, 128}};

    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        for (int d = 0; d < 2; d++) {
            for (int kind = 0; kind < SCALE_KINDS; kind++) {
                quant_case_t qc = {d ? WEFT_DTYPE_BF16 : WEFT_DTYPE_FP32, shapes[i][0], shapes[i][1], 0, 2, 128,
                                   0, 1, 0, 1, 0};

                set_scale_kind(&qc, kind);
                run_case(&qc, NULL);
            }
        }
    }
}
END_TEST

START_TEST(gpu_quant_on_a_stream)
{
    cudaStream_t stream;
    quant_case_t qc = {WEFT_DTYPE_FP32, 384, 512, 0, 4, 128, 0, 1, 0, 0, 0};

    ck_assert_int_eq(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    run_case(&qc, stream);
    ck_assert_int_eq(cudaStreamDestroy(stream), cudaSuccess);
}
END_TEST

/* Dequantized values are the host's, and within half an e4m3 step of x. */
START_TEST(gpu_dequant_within_bound)
{
    const uint64_t      rows = 640, cols = 896, n = rows * cols, nscale = 5 * 7;
    float              *x = malloc(n * 4), *gout = malloc(n * 4), *hout = malloc(n * 4);
    uint8_t            *w = malloc(n), *wt = malloc(n);
    float               s[5 * 7];
    float              *dout = NULL, *ds = NULL;
    uint8_t            *dw = NULL;
    weft_quant_matrix_t m;

    ck_assert(x && gout && hout && w && wt);
    rng_state = 12345;
    for (uint64_t i = 0; i < n; i++) {
        x[i] = rng_float(row_scale(i / cols));
    }
    m = (weft_quant_matrix_t){x, 0, w, wt, s};
    ck_assert_int_eq(weft_quant_host(NULL, WEFT_DTYPE_FP32, rows, cols, &m, 1), WEFT_OK);
    ck_assert_int_eq(cudaMalloc((void **)&dout, n * 4), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dw, n), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&ds, nscale * 4), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(dw, w, n, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(ds, s, nscale * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(weft_dequant_cuda(128, rows, cols, dw, ds, dout, NULL), WEFT_OK);
    ck_assert_int_eq(cudaMemcpy(gout, dout, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    ck_assert_int_eq(weft_dequant_host(128, rows, cols, w, s, hout), WEFT_OK);
    ck_assert(memcmp(gout, hout, n * 4) == 0);
    for (uint64_t i = 0; i < n; i++) {
        const float sc = s[(i / cols) / 128 * 7 + (i % cols) / 128];
        const float bound = fabsf(x[i]) * (0.0625f + 1e-6f) + sc * (1.0f / 1024.0f);

        ck_assert_msg(fabsf(gout[i] - x[i]) <= bound, "element %llu: x %g dequantized %g scale %g",
                      (unsigned long long)i, x[i], gout[i], sc);
    }
    ck_assert_int_eq(cudaFree(dout), cudaSuccess);
    ck_assert_int_eq(cudaFree(dw), cudaSuccess);
    ck_assert_int_eq(cudaFree(ds), cudaSuccess);
    free(x);
    free(gout);
    free(hout);
    free(w);
    free(wt);
}
END_TEST

/* The hardware conversion the tile kernel uses, against fp8.h's encoder:
 * every sign, exponent and top 7 mantissa bits, with low bits that probe
 * the rounding (ties, sticky bits) and random ones. */
START_TEST(gpu_encode_matches_reference)
{
    static const uint32_t low[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x0F00, 0x00F0};
    const size_t          nlow = sizeof(low) / sizeof(low[0]) + 8;
    const size_t          n = 65536 * nlow;
    uint32_t             *bits = malloc(n * 4);
    uint8_t              *q = malloc(n);
    float                *dx = NULL;
    uint8_t              *dq = NULL;

    ck_assert(bits && q);
    rng_state = 777;
    for (size_t hi = 0; hi < 65536; hi++) {
        for (size_t j = 0; j < nlow; j++) {
            bits[hi * nlow + j] =
                (uint32_t)(hi << 16) | (j < nlow - 8 ? low[j] : (uint32_t)(rng_next() & 0xFFFF));
        }
    }
    ck_assert_int_eq(cudaMalloc((void **)&dx, n * 4), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dq, n), cudaSuccess);
    ck_assert_int_eq(cudaMemcpy(dx, bits, n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ck_assert_int_eq(weft_fp8_e4m3_encode_cuda(dx, dq, n, NULL), WEFT_OK);
    ck_assert_int_eq(cudaMemcpy(q, dq, n, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(q[i] == weft_fp8_e4m3_encode_bits(bits[i]), "bits %08x: gpu %02x reference %02x", bits[i],
                      q[i], weft_fp8_e4m3_encode_bits(bits[i]));
    }
    ck_assert_int_eq(cudaFree(dx), cudaSuccess);
    ck_assert_int_eq(cudaFree(dq), cudaSuccess);
    free(bits);
    free(q);
}
END_TEST

/*
 * The tile kernel divides with RN(1/s), one multiplication and two FMAs,
 * which must give the IEEE quotient exactly; where it would not, the
 * bytes differ first next to e4m3 rounding boundaries. Probe those windows:
 * each 128 × 128 block gets its own scale (random, a power of two, one
 * whose reciprocal is inexact, clamped), set by its first element, and
 * holds x = RN(t × s) ± up to 12 ulps for every e4m3 halfway point t
 * (ties of the 128 positive codes), every code itself, 464, 2^-6 and
 * 2^-10, of both signs; the rest is random under the block's amax. GPU
 * and host must agree byte for byte, with and without UE8M0.
 */
/* The block amax for scale kind k of block number i. */
static float window_amax(uint64_t i)
{
    const uint64_t r = rng_next();

    switch (i % 5) {
    case 0: /* random magnitude, 2^-20 .. 2^20 */
        return ldexpf(1.0f + (float)(r >> 41) / (float)(1u << 23), (int)((r >> 8) % 41) - 20);
    case 1: /* s a power of two: amax = 448 × 2^k */
        return ldexpf(448.0f, (int)((r >> 8) % 41) - 20);
    case 2: /* s = 3 × 2^k or 5 × 2^k: reciprocal inexact */
        return ldexpf((r & 1) ? 3.0f * 448.0f : 5.0f * 448.0f, (int)((r >> 8) % 31) - 15);
    case 3: /* random mantissa near 1 and 2: reciprocals just off powers of two */
        return ldexpf(weft_fp8_bits_float(0x3F800000u + (uint32_t)(r >> 60) + ((r >> 8) & 1 ? 0x7FFFF0u : 0)), (int)((r >> 16) % 21) - 10);
    default: /* clamped: amax under 1e-4 */
        return 1e-4f * (float)((r >> 40) & 0xFFFF) / 65536.0f;
    }
}

START_TEST(gpu_quant_division_windows)
{
    const uint64_t      rows = 1024, cols = 2048, n = rows * cols;
    const uint64_t      bk = cols / 128, nb = (rows / 128) * bk;
    float              *x = malloc(n * 4), *hs = malloc(nb * 4), *gs = malloc(nb * 4);
    uint8_t            *hw = malloc(n), *hwt = malloc(n), *gw = malloc(n), *gwt = malloc(n);
    float              *targets = malloc(512 * sizeof(float));
    float              *dx = NULL, *ds = NULL;
    uint8_t            *dw = NULL, *dwt = NULL;
    size_t              nt = 0;
    weft_quant_params_t params = {.field_mask = WEFT_QUANT_FIELD_UE8M0 | WEFT_QUANT_FIELD_WRITE_WT, .write_wt = 1};

    ck_assert(x && hs && gs && hw && hwt && gw && gwt && targets);
    /* Boundaries: the halfway points between consecutive codes 0..0x7E,
     * 464 (past 448), the codes themselves, 2^-6 and 2^-10. */
    for (uint32_t c = 0; c < 0x7F; c++) {
        const float v = weft_fp8_e4m3_decode_byte((uint8_t)c);

        targets[nt++] = v;
        targets[nt++] = c < 0x7E ? (v + weft_fp8_e4m3_decode_byte((uint8_t)(c + 1))) * 0.5f : 464.0f;
    }
    targets[nt++] = ldexpf(1.0f, -6);
    targets[nt++] = ldexpf(1.0f, -10);
    ck_assert_int_eq(cudaMalloc((void **)&dx, n * 4), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dw, n), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&dwt, n), cudaSuccess);
    ck_assert_int_eq(cudaMalloc((void **)&ds, nb * 4), cudaSuccess);
    for (int ue8m0 = 0; ue8m0 < 2; ue8m0++) {
        weft_quant_matrix_t hm = {x, 0, hw, hwt, hs}, dm = {dx, 0, dw, dwt, ds};
        size_t              probes = 0;

        rng_state = 0xD1B54A32D192ED03ull + (uint64_t)ue8m0;
        params.ue8m0 = ue8m0;
        for (uint64_t b = 0; b < nb; b++) {
            const uint64_t r0 = b / bk * 128, c0 = b % bk * 128;
            const float    amax = window_amax(b);
            const float    s = weft_fp8_block_scale(weft_fp8_abs_bits(weft_fp8_float_bits(amax)), ue8m0);
            uint64_t       e = 1;

            for (uint64_t i = 0; i < 128 * 128; i++) {
                x[(r0 + i / 128) * cols + c0 + i % 128] = rng_float(amax);
            }
            x[r0 * cols + c0] = (b & 1) ? -amax : amax; /* sets the scale */
            for (size_t t = 0; t < nt && e < 128 * 128; t++) {
                const uint32_t base = weft_fp8_float_bits(targets[t] * s) & 0x7FFFFFFFu;

                for (int k = -12; k <= 12 && e < 128 * 128; k++) {
                    const float v = weft_fp8_bits_float((uint32_t)((int64_t)base + k));

                    if (base + k > 0x7F7FFFFFu || !(v <= amax)) {
                        continue;
                    }
                    x[(r0 + e / 128) * cols + c0 + e % 128] = (e & 1) ? -v : v;
                    e++;
                    probes++;
                }
            }
        }
        ck_assert_uint_gt(probes, nb * 2000);
        ck_assert_int_eq(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ck_assert_int_eq(cudaMemset(dw, POISON, n), cudaSuccess);
        ck_assert_int_eq(cudaMemset(dwt, POISON, n), cudaSuccess);
        ck_assert_int_eq(weft_quant_cuda(&params, WEFT_DTYPE_FP32, rows, cols, &dm, 1, NULL), WEFT_OK);
        ck_assert_int_eq(weft_quant_host(&params, WEFT_DTYPE_FP32, rows, cols, &hm, 1), WEFT_OK);
        ck_assert_int_eq(cudaMemcpy(gw, dw, n, cudaMemcpyDeviceToHost), cudaSuccess);
        ck_assert_int_eq(cudaMemcpy(gwt, dwt, n, cudaMemcpyDeviceToHost), cudaSuccess);
        ck_assert_int_eq(cudaMemcpy(gs, ds, nb * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        ck_assert(memcmp(gs, hs, nb * 4) == 0);
        for (uint64_t i = 0; i < n; i++) {
            ck_assert_msg(gw[i] == hw[i], "ue8m0 %d: x %a (%08x) scale %a: gpu %02x host %02x", ue8m0, x[i],
                          weft_fp8_float_bits(x[i]), hs[(i / cols) / 128 * bk + (i % cols) / 128], gw[i], hw[i]);
        }
        ck_assert(memcmp(gwt, hwt, n) == 0);
    }
    ck_assert_int_eq(cudaFree(dx), cudaSuccess);
    ck_assert_int_eq(cudaFree(dw), cudaSuccess);
    ck_assert_int_eq(cudaFree(dwt), cudaSuccess);
    ck_assert_int_eq(cudaFree(ds), cudaSuccess);
    free(x);
    free(hs);
    free(gs);
    free(hw);
    free(hwt);
    free(gw);
    free(gwt);
    free(targets);
}
END_TEST

START_TEST(gpu_quant_rejects_bad_arguments)
{
    weft_quant_matrix_t m = {(void *)16, 0, (uint8_t *)16, (uint8_t *)16, (float *)16};
    weft_quant_params_t p = {.field_mask = WEFT_QUANT_FIELD_BLOCK, .block = 96};

    ck_assert_int_eq(weft_quant_cuda(NULL, WEFT_DTYPE_FP16, 4, 4, &m, 1, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_quant_cuda(&p, WEFT_DTYPE_FP32, 4, 4, &m, 1, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_quant_cuda(NULL, WEFT_DTYPE_FP32, 0, 4, &m, 1, NULL), WEFT_ERR_INVALID_PARAM);
    m.x_row_stride = 3;
    ck_assert_int_eq(weft_quant_cuda(NULL, WEFT_DTYPE_FP32, 4, 4, &m, 1, NULL), WEFT_ERR_INVALID_PARAM);
    m.x_row_stride = 0;
    m.w = NULL;
    ck_assert_int_eq(weft_quant_cuda(NULL, WEFT_DTYPE_FP32, 4, 4, &m, 1, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_dequant_cuda(100, 4, 4, (uint8_t *)16, (float *)16, (float *)16, NULL),
                     WEFT_ERR_INVALID_PARAM);
}
END_TEST

static Suite *quant_cuda_suite(void)
{
    Suite *s;
    TCase *tc;

    if (weft_test_gpu_count() == 0) {
        return NULL;
    }
    s = suite_create("quant_cuda");
    tc = tcase_create("quant");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, gpu_quant_shapes, 0, 2);
    tcase_add_test(tc, gpu_quant_large);
    tcase_add_test(tc, gpu_quant_batched_experts);
    tcase_add_test(tc, gpu_quant_many_matrices);
    tcase_add_test(tc, gpu_quant_block_sizes);
    tcase_add_test(tc, gpu_quant_misaligned_inputs);
    tcase_add_test(tc, gpu_quant_nan_inf);
    tcase_add_test(tc, gpu_quant_on_a_stream);
    tcase_add_test(tc, gpu_dequant_within_bound);
    tcase_add_test(tc, gpu_encode_matches_reference);
    tcase_add_test(tc, gpu_quant_division_windows);
    tcase_add_test(tc, gpu_quant_rejects_bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(quant_cuda_suite)
