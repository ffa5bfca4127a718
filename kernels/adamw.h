/*
 * AdamW, element-wise: the host reference and the CUDA kernel, which give
 * the same bytes for every input. The arithmetic is written out in
 * include/weft/optim.h; the per-step scalars are computed once, on the
 * host, by weft_adamw_scalars() so that both sides use the same values.
 * Internal.
 */
#ifndef WEFT_KERNELS_ADAMW_H
#define WEFT_KERNELS_ADAMW_H

#include <weft/weft.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything an element's update needs besides its own values. */
typedef struct weft_adamw_scalars {
    float lr_wd;     /* f32(lr) · f32(wd), rounded */
    float beta1;
    float beta2;
    float eps;
    float step_size; /* f32(lr) / bc1 */
    float bc2s;      /* sqrt(1 − f32(β2^t)) */
    int   decay;     /* f32(wd) ≠ 0 */
} weft_adamw_scalars_t;

/* The scalars of step t (t ≥ 1, the count after this step) from the
 * double hyperparameters. */
void weft_adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay, uint64_t t,
                        weft_adamw_scalars_t *s);

/*
 * Updates n elements in place on the host, one thread. g is FP32 or BF16
 * (grad_dtype). Vectorized where the CPU has FMA; every path rounds the
 * same way.
 */
void weft_adamw_host(const weft_adamw_scalars_t *s, float *param, float *exp_avg, float *exp_avg_sq,
                     const void *grad, weft_dtype_t grad_dtype, size_t n);

/*
 * The same on the GPU, asynchronously on `stream` (a cudaStream_t).
 * Device pointers. WEFT_ERR_UNSUPPORTED without CUDA; WEFT_ERR_CUDA when
 * the launch fails.
 */
weft_status_t weft_adamw_cuda(const weft_adamw_scalars_t *s, float *param, float *exp_avg, float *exp_avg_sq,
                              const void *grad, weft_dtype_t grad_dtype, size_t n, void *stream);

/* FP32 → BF16, round to nearest even, NaN kept a (quiet) NaN: the host
 * reference and the GPU conversion of the BF16 writer. */
void          weft_bf16_from_float_host(const float *x, uint16_t *out, size_t n);
weft_status_t weft_bf16_from_float_cuda(const float *x, uint16_t *out, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
