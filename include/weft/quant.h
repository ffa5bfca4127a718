/*
 * The FP8 writer: an FP32 or BF16 expert matrix X [rows, cols] becomes
 *   W         e4m3 [rows, cols]
 *   WT        e4m3 [cols, rows]  (the same bytes transposed)
 *   scale_inv f32  [⌈rows/b⌉, ⌈cols/b⌉], row-major
 * in one pass, blockwise (b × b blocks, b a power of two, default 128), as
 * DeepSeek-V3 checkpoints and SGLang's weight_scale_inv have them:
 *
 *   amax = max |x| over the block's real elements (NaN ignored), at least 1e-4
 *   s    = amax / 448 (FP32 division); with UE8M0 scales, s = 2^⌈log2 s⌉
 *   q    = e4m3fn(x / s), round to nearest even, saturated to ±448, NaN → 0x7F
 *   scale_inv = s (the dequantization multiplier)
 *
 * An all-zero (or all-NaN) block gets s = 1e-4 / 448. An infinite element
 * makes s +Inf: that block's finite elements become ±0 and its infinities
 * NaN (0x7F), so it dequantizes to NaN and a diverged master is seen, not
 * hidden behind saturated values; other blocks are unaffected.
 *
 * With WEFT_QUANT_FORMULA_REFERENCE the writer instead gives the bytes of
 * the quantizer the ecosystem tests against, DeepGEMM's
 * per_block_cast_to_fp8 as written (SGLang's and others' tests use it):
 *
 *   x_amax    = x.abs().float().amax(block).clamp(1e-4)
 *   q         = (x * (448.0 / x_amax)).to(torch.float8_e4m3fn)
 *   scale_inv = x_amax / 448.0
 *
 * evaluated as PyTorch evaluates it on a CUDA device, in FP32:
 *
 *   amax      = max |x| over the block's real elements; one NaN makes it
 *               NaN; then at least 1e-4f (RN32 of 1e-4)
 *   f         = RN(RN(1 / amax) × 448)   (a scalar divided by a tensor is
 *               the tensor's reciprocal times the scalar)
 *   q         = e4m3fn(RN(x × f)), round to nearest even (a BF16 x is
 *               widened to FP32 first: the product is FP32)
 *   scale_inv = RN(amax × RN(1 / 448))   (a tensor divided by a scalar is
 *               a multiplication by the scalar's reciprocal)
 *
 * Every |x × f| is at most 448 (1 + 2^-21), so PyTorch's conversion (NaN
 * from 480 up) and saturation never differ here. A NaN anywhere in a block
 * makes every byte of it 0x7F and its scale_inv the GPU's canonical NaN
 * (bits 0x7FFFFFFF); an infinity (and no NaN) makes f 0: the block's
 * finite elements become zeros of their sign, its infinities 0x7F, and
 * scale_inv +Inf. An all-zero block gets scale_inv RN(1e-4f × RN(1/448)).
 * UE8M0 scales are not defined for this formula (WEFT_ERR_INVALID_PARAM).
 * Where the two formulas differ: in a small fraction of the W bytes, by
 * one code (where x × f and x / s fall on either side of a rounding
 * boundary: more often for BF16 inputs, whose values sit on coarser
 * grids), and in about half the scale_inv words, in the last bits.
 *
 * The host functions are the reference; the CUDA functions produce the same
 * bytes for every input, in both formulas. Outputs go wherever the caller points, typically
 * into the tensors of a registry version being written.
 *
 * Threads: every call is reentrant; calls on one stream are ordered.
 */
#ifndef WEFT_QUANT_H
#define WEFT_QUANT_H

#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

enum weft_quant_params_field {
    WEFT_QUANT_FIELD_BLOCK    = 1u << 0,
    WEFT_QUANT_FIELD_UE8M0    = 1u << 1,
    WEFT_QUANT_FIELD_WRITE_WT = 1u << 2,
    WEFT_QUANT_FIELD_FORMULA  = 1u << 3
};

/* Which arithmetic the writer follows (see the top of this file). */
typedef enum weft_quant_formula {
    WEFT_QUANT_FORMULA_EXACT     = 0, /* s = amax / 448, q = e4m3(x / s): the default */
    WEFT_QUANT_FORMULA_REFERENCE = 1  /* DeepGEMM's per_block_cast_to_fp8, as PyTorch computes it */
} weft_quant_formula_t;

typedef struct weft_quant_params {
    uint64_t             field_mask; /* fields set below; others take defaults */
    uint32_t             block;      /* block edge, power of two, 1..1024; default 128 */
    int                  ue8m0;      /* 1: power-of-two scales; default 0 */
    int                  write_wt;   /* 1: write WT too; default 1 */
    weft_quant_formula_t formula;    /* default WEFT_QUANT_FORMULA_EXACT */
} weft_quant_params_t;

/* "exact" or "reference"; NULL for a value outside the enum. */
WEFT_API const char *weft_quant_formula_name(weft_quant_formula_t formula);

/* The formula named `name` ("exact", "reference"): WEFT_OK, or
 * WEFT_ERR_INVALID_PARAM (logged) for any other name or NULL. */
WEFT_API weft_status_t weft_quant_formula_parse(const char *name, weft_quant_formula_t *formula);

/* One matrix to quantize: where its input is and where its outputs go. */
typedef struct weft_quant_matrix {
    const void *x;            /* input [rows, cols], FP32 or BF16 */
    uint64_t    x_row_stride; /* elements between rows; 0: cols */
    uint8_t    *w;            /* e4m3 [rows, cols], contiguous */
    uint8_t    *wt;           /* e4m3 [cols, rows], contiguous; unused without write_wt */
    float      *scale_inv;    /* [⌈rows/b⌉, ⌈cols/b⌉], contiguous */
} weft_quant_matrix_t;

/*
 * Quantizes `count` matrices of one shape and input dtype (WEFT_DTYPE_FP32
 * or WEFT_DTYPE_BF16) on the host. params may be NULL for the defaults.
 * Errors: WEFT_ERR_INVALID_PARAM (dtype, shape 0, stride < cols, block not
 * a power of two, ue8m0 or write_wt not 0 or 1, a formula outside the
 * enum, ue8m0 with the reference formula, a NULL pointer, unknown
 * field_mask bits), logged; every matrix is checked before any is written.
 */
WEFT_API weft_status_t weft_quant_host(const weft_quant_params_t *params, weft_dtype_t x_dtype,
                                       uint64_t rows, uint64_t cols, const weft_quant_matrix_t *matrices,
                                       size_t count);

/*
 * The same on the GPU, all matrices in a single launch on `stream` (a
 * cudaStream_t; NULL: the legacy default stream). Every pointer is device
 * memory of the current device; `matrices` itself is host memory and may be
 * reused when the call returns. Asynchronous: the outputs are ready when
 * the stream gets there. WEFT_ERR_UNSUPPORTED in a build without CUDA;
 * WEFT_ERR_CUDA when the launch fails (logged).
 */
WEFT_API weft_status_t weft_quant_cuda(const weft_quant_params_t *params, weft_dtype_t x_dtype,
                                       uint64_t rows, uint64_t cols, const weft_quant_matrix_t *matrices,
                                       size_t count, void *stream);

/*
 * Dequantizes W with its scales into FP32 [rows, cols] (contiguous), on
 * the host: out = decode(w) × scale_inv of its block. For checks.
 */
WEFT_API weft_status_t weft_dequant_host(uint32_t block, uint64_t rows, uint64_t cols, const uint8_t *w,
                                         const float *scale_inv, float *out);

/* The same on the GPU, on `stream`; device pointers. */
WEFT_API weft_status_t weft_dequant_cuda(uint32_t block, uint64_t rows, uint64_t cols, const uint8_t *w,
                                         const float *scale_inv, float *out, void *stream);

/* e4m3fn encoding of one float: round to nearest even, saturated to ±448
 * (±Inf too), every NaN → 0x7F whatever its sign (CUDA makes NaN canonical
 * first: -NaN gives 0x7F, never 0xFF). Matches CUDA's
 * __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) bit for bit, for all
 * 2^32 inputs. */
WEFT_API uint8_t weft_fp8_e4m3_encode(float x);

/* The float an e4m3fn byte stands for (NaN for 0x7F and 0xFF). */
WEFT_API float weft_fp8_e4m3_decode(uint8_t byte);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_QUANT_H */
