/*
 * Muon's parts: the element-wise momentum and update (host reference and
 * CUDA kernels, the same bytes), and the Newton–Schulz orthogonalization:
 * FP32 on the host, BF16 tensor-core GEMMs (cuBLASLt) on the GPU, batched
 * over the matrices of a group. The arithmetic is written out in
 * include/weft/optim.h. Internal.
 */
#ifndef WEFT_KERNELS_MUON_H
#define WEFT_KERNELS_MUON_H

#include <weft/optim.h>
#include <weft/weft.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_MUON_NS_STEPS_MAX 100

/* Everything an element's momentum and update need. */
typedef struct weft_muon_scalars {
    float one_minus_beta; /* f32(1 − β) */
    float decay;          /* f32(1 − lr·wd) */
    float lr_scaled;      /* f32(lr · scale) */
    int   has_decay;      /* wd ≠ 0 */
    int   nesterov;
} weft_muon_scalars_t;

/* The scalars of a step from the double hyperparameters; scale is the
 * update's (max(1, rows/cols)^½ or 0.2·√max(rows, cols)). */
void weft_muon_scalars(double lr, double momentum, double weight_decay, int nesterov, double scale,
                       weft_muon_scalars_t *s);

/* The NS coefficients of step i of a schedule (1 simple, 2 quintic). */
void weft_muon_coefficients(int schedule, uint32_t step, float abc[3]);

/* u = the update direction (m updated in place), n elements; g FP32 or
 * BF16 (grad_dtype). */
void weft_muon_momentum_host(const weft_muon_scalars_t *s, float *momentum, const void *grad,
                             weft_dtype_t grad_dtype, float *u, size_t n);

/* X = NS(u) for one rows × cols matrix, FP32, on the calling thread. work
 * holds weft_muon_ns_host_work(rows, cols) floats. */
size_t weft_muon_ns_host_work(uint64_t rows, uint64_t cols);
void   weft_muon_ns_host(const float *u, uint64_t rows, uint64_t cols, int schedule, uint32_t steps, float *x,
                         float *work);

/* θ = θ·decay (if any), then θ = fma(−lr_scaled, x, θ), n elements. */
void weft_muon_apply_host(const weft_muon_scalars_t *s, float *param, const float *x, size_t n);

/*
 * The GPU: one group's step for `count` matrices of rows × cols, all in
 * one batch: param, momentum and grad hold the matrices one after
 * another (grad FP32 or BF16). The workspace is device memory of
 * weft_muon_cuda_work_bytes(rows, cols, count) bytes (cuBLASLt's
 * workspace included); `blas` from weft_muon_blas_create, used by one
 * thread at a time (it keeps the GEMM plans of the shapes it met).
 * gram_blocks: how many row blocks the symmetric products X·Xᵀ and
 * (FUSED) b·A + c·A·A are computed in (only the blocks on and below the
 * diagonal are multiplied); 0 takes weft_muon_gram_blocks(min(rows,
 * cols)), another value (1, or 2..4 splitting the rows in multiples of
 * 64) is for tests and benchmarks. rounding: a
 * weft_muon_rounding_t (where the iterations round to BF16). Asynchronous.
 * WEFT_ERR_UNSUPPORTED without CUDA.
 */
size_t        weft_muon_cuda_work_bytes(uint64_t rows, uint64_t cols, uint64_t count);
int           weft_muon_gram_blocks(uint64_t m);
weft_status_t weft_muon_cuda_step(const weft_muon_scalars_t *s, int schedule, int rounding, uint32_t steps,
                                  float *param, float *momentum, const void *grad, weft_dtype_t grad_dtype,
                                  uint64_t rows, uint64_t cols, uint64_t count, int gram_blocks, void *work,
                                  void *blas, void *stream);

/* The GEMM state of one optimizer: cuBLAS and cuBLASLt handles and the
 * cuBLASLt plans (descriptors and the heuristic's first algorithm) of up
 * to 16 shapes, made on first use; and its release. Not thread-safe.
 * WEFT_ERR_UNSUPPORTED without CUDA. */
weft_status_t weft_muon_blas_create(void **blas);
void          weft_muon_blas_destroy(void *blas);

#ifdef __cplusplus
}
#endif

#endif
