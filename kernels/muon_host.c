/*
 * Muon on the host: the element-wise momentum and update (the references
 * of the CUDA kernels, the same bytes), and Newton–Schulz in FP32 for
 * machines without a GPU. The products go row by row in "axpy" order
 * (C[i][:] += a[i][k] · B[k][:]), which vectorizes without reordering any
 * sum, so each element's sum runs in one fixed order.
 */
#include "config.h"

#include "muon.h"
#include "muon_math.h"

#include <math.h>
#include <string.h>

static const float simple_abc[3] = {3.4445f, -4.7750f, 2.0315f};
static const float quintic_abc[5][3] = {
    {4.0848f, -6.8946f, 2.9270f}, {3.9505f, -6.3029f, 2.6377f}, {3.7418f, -5.5913f, 2.3037f},
    {2.8769f, -3.1427f, 1.2046f}, {2.8366f, -3.0525f, 1.2012f},
};

void weft_muon_scalars(double lr, double momentum, double weight_decay, int nesterov, double scale,
                       weft_muon_scalars_t *s)
{
    /* As PyTorch takes Python floats: the expression in double, rounded
     * to the float the kernel uses. */
    s->one_minus_beta = (float)(1.0 - momentum);
    s->decay          = (float)(1.0 - lr * weight_decay);
    s->has_decay      = weight_decay != 0.0;
    s->lr_scaled      = (float)(lr * scale);
    s->nesterov       = nesterov;
}

void weft_muon_coefficients(int schedule, uint32_t step, float abc[3])
{
    memcpy(abc, schedule == 2 ? quintic_abc[step % 5] : simple_abc, 3 * sizeof(float));
}

void weft_muon_momentum_host(const weft_muon_scalars_t *s, float *momentum, const void *grad,
                             weft_dtype_t grad_dtype, float *u, size_t n)
{
    if (grad_dtype == WEFT_DTYPE_BF16) {
        const uint16_t *g = grad;
        for (size_t i = 0; i < n; i++) {
            u[i] = weft_muon_momentum_element(s, &momentum[i], weft_bf16_to_float(g[i]));
        }
    } else {
        const float *g = grad;
        for (size_t i = 0; i < n; i++) {
            u[i] = weft_muon_momentum_element(s, &momentum[i], g[i]);
        }
    }
}

void weft_muon_apply_host(const weft_muon_scalars_t *s, float *param, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        param[i] = weft_muon_apply_element(s, param[i], x[i]);
    }
}

size_t weft_muon_ns_host_work(uint64_t rows, uint64_t cols)
{
    const size_t m = (size_t)(rows < cols ? rows : cols), n = (size_t)(rows < cols ? cols : rows);

    /* X, its transpose, the next X; A and B. */
    return 3 * m * n + 2 * m * m;
}

/* c[m][p] = a[m][k] · b[k][p] (+= when accumulate), row-major. */
static void matmul(const float *a, const float *b, float *c, size_t m, size_t k, size_t p)
{
    for (size_t i = 0; i < m; i++) {
        float *ci = c + i * p;
        memset(ci, 0, p * sizeof(float));
        for (size_t l = 0; l < k; l++) {
            const float  ail = a[i * k + l];
            const float *bl  = b + l * p;
            for (size_t j = 0; j < p; j++) {
                ci[j] += ail * bl[j];
            }
        }
    }
}

void weft_muon_ns_host(const float *u, uint64_t rows, uint64_t cols, int schedule, uint32_t steps, float *x,
                       float *work)
{
    const int    transposed = rows > cols;
    const size_t m = (size_t)(transposed ? cols : rows), n = (size_t)(transposed ? rows : cols);
    float       *X = work, *XT = X + m * n, *Xn = XT + m * n, *A = Xn + m * n, *B = A + m * m;
    double       sum = 0;
    float        norm;

    /* X = u, or uᵀ so that X is wide (m ≤ n). */
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            X[i * n + j] = transposed ? u[j * cols + i] : u[i * cols + j];
        }
    }
    for (size_t i = 0; i < m * n; i++) {
        sum += (double)X[i] * (double)X[i];
    }
    norm = (float)sqrt(sum) + 1e-7f;
    for (size_t i = 0; i < m * n; i++) {
        X[i] = X[i] / norm;
    }
    for (uint32_t step = 0; step < steps; step++) {
        float abc[3];

        weft_muon_coefficients(schedule, step, abc);
        for (size_t i = 0; i < m; i++) {
            for (size_t j = 0; j < n; j++) {
                XT[j * m + i] = X[i * n + j];
            }
        }
        matmul(X, XT, A, m, n, m);  /* A = X·Xᵀ */
        matmul(A, A, B, m, m, m);   /* B = A·A, then b·A + c·B */
        for (size_t i = 0; i < m * m; i++) {
            B[i] = abc[1] * A[i] + abc[2] * B[i];
        }
        matmul(B, X, Xn, m, m, n);  /* X = a·X + B·X */
        for (size_t i = 0; i < m * n; i++) {
            X[i] = abc[0] * X[i] + Xn[i];
        }
    }
    for (size_t i = 0; i < m; i++) {
        for (size_t j = 0; j < n; j++) {
            x[transposed ? j * cols + i : i * cols + j] = X[i * n + j];
        }
    }
}

#ifndef HAVE_CUDA
size_t weft_muon_cuda_work_bytes(uint64_t rows, uint64_t cols, uint64_t count)
{
    (void)rows;
    (void)cols;
    (void)count;
    return 0;
}

weft_status_t weft_muon_cuda_step(const weft_muon_scalars_t *s, int schedule, int rounding, uint32_t steps,
                                  float *param, float *momentum, const void *grad, weft_dtype_t grad_dtype,
                                  uint64_t rows, uint64_t cols, uint64_t count, int gram_blocks, void *work,
                                  void *blas, void *stream)
{
    (void)s;
    (void)schedule;
    (void)rounding;
    (void)steps;
    (void)param;
    (void)momentum;
    (void)grad;
    (void)grad_dtype;
    (void)rows;
    (void)cols;
    (void)count;
    (void)gram_blocks;
    (void)work;
    (void)blas;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

int weft_muon_gram_blocks(uint64_t m)
{
    (void)m;
    return 1;
}

weft_status_t weft_muon_blas_create(void **blas)
{
    (void)blas;
    return WEFT_ERR_UNSUPPORTED;
}

void weft_muon_blas_destroy(void *blas)
{
    (void)blas;
}
#endif
