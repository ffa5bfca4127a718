/*
 * The host AdamW: the reference for the CUDA kernel, and the update of
 * hosts without a GPU. Elements go 16 at a time through a fixed-count loop
 * that GCC and Clang vectorize even at -O2; on CPUs with FMA a copy of it
 * built for AVX2+FMA turns fmaf into vector fused multiply-adds, which
 * round exactly as fmaf does, so every path gives the same bytes.
 */
#include "config.h"

#include "adamw.h"
#include "adamw_math.h"

#include <math.h>
#include <stdint.h>

#define ADAMW_CHUNK 16

void weft_adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay, uint64_t t,
                        weft_adamw_scalars_t *s)
{
    const float lr_f = (float)lr, wd_f = (float)weight_decay;
    const float b1 = (float)beta1, b2 = (float)beta2;
    /* PyTorch keeps the step count as a float and raises the float betas
     * to it; the power is taken here in double and rounded once, which is
     * the correctly rounded float power in all but vanishingly rare cases. */
    const float t_f  = (float)t;
    const float pow1 = (float)pow((double)b1, (double)t_f);
    const float pow2 = (float)pow((double)b2, (double)t_f);
    const float bc1  = 1.0f - pow1;

    s->lr_wd     = lr_f * wd_f;
    s->beta1     = b1;
    s->beta2     = b2;
    s->eps       = (float)eps;
    s->step_size = lr_f / bc1;
    s->bc2s      = sqrtf(1.0f - pow2);
    s->decay     = wd_f != 0.0f;
}

/* One chunk of ADAMW_CHUNK elements; `decay_on` is a constant, so the
 * loop has no branch. */
#define ADAMW_CHUNK_BODY(decay_on, load_g)                                                        \
    for (int i = 0; i < ADAMW_CHUNK; i++) {                                                       \
        weft_adamw_element(s, decay_on, &p[i], &m_[i], &v_[i], load_g);                           \
    }

#define ADAMW_CHUNK_FUNCTIONS(suffix, attr)                                                       \
    attr static void chunks_f32_##suffix(const weft_adamw_scalars_t *s, float *restrict p,       \
                                         float *restrict m_, float *restrict v_,                 \
                                         const float *restrict g32, size_t chunks)               \
    {                                                                                             \
        for (size_t c = 0; c < chunks; c++, p += ADAMW_CHUNK, m_ += ADAMW_CHUNK,                 \
                    v_ += ADAMW_CHUNK, g32 += ADAMW_CHUNK) {                                      \
            if (s->decay) {                                                                       \
                ADAMW_CHUNK_BODY(1, g32[i])                                                       \
            } else {                                                                              \
                ADAMW_CHUNK_BODY(0, g32[i])                                                       \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    attr static void chunks_bf16_##suffix(const weft_adamw_scalars_t *s, float *restrict p,      \
                                          float *restrict m_, float *restrict v_,                \
                                          const uint16_t *restrict g16, size_t chunks)           \
    {                                                                                             \
        for (size_t c = 0; c < chunks; c++, p += ADAMW_CHUNK, m_ += ADAMW_CHUNK,                 \
                    v_ += ADAMW_CHUNK, g16 += ADAMW_CHUNK) {                                      \
            if (s->decay) {                                                                       \
                ADAMW_CHUNK_BODY(1, weft_bf16_to_float(g16[i]))                                   \
            } else {                                                                              \
                ADAMW_CHUNK_BODY(0, weft_bf16_to_float(g16[i]))                                   \
            }                                                                                     \
        }                                                                                         \
    }

ADAMW_CHUNK_FUNCTIONS(generic, )
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ADAMW_HAVE_FMA_CLONE 1
ADAMW_CHUNK_FUNCTIONS(fma, __attribute__((target("avx2,fma"))))
#endif

static int cpu_has_fma(void)
{
#ifdef ADAMW_HAVE_FMA_CLONE
    static int known = -1;

    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return known;
#else
    return 0;
#endif
}

void weft_adamw_host(const weft_adamw_scalars_t *s, float *param, float *exp_avg, float *exp_avg_sq,
                     const void *grad, weft_dtype_t grad_dtype, size_t n)
{
    const size_t chunks = n / ADAMW_CHUNK, done = chunks * ADAMW_CHUNK;
    const int    fma    = cpu_has_fma();

    if (grad_dtype == WEFT_DTYPE_BF16) {
        const uint16_t *g = grad;
#ifdef ADAMW_HAVE_FMA_CLONE
        if (fma) {
            chunks_bf16_fma(s, param, exp_avg, exp_avg_sq, g, chunks);
        } else
#endif
        {
            chunks_bf16_generic(s, param, exp_avg, exp_avg_sq, g, chunks);
        }
        for (size_t i = done; i < n; i++) {
            weft_adamw_element(s, s->decay, &param[i], &exp_avg[i], &exp_avg_sq[i], weft_bf16_to_float(g[i]));
        }
    } else {
        const float *g = grad;
#ifdef ADAMW_HAVE_FMA_CLONE
        if (fma) {
            chunks_f32_fma(s, param, exp_avg, exp_avg_sq, g, chunks);
        } else
#endif
        {
            chunks_f32_generic(s, param, exp_avg, exp_avg_sq, g, chunks);
        }
        for (size_t i = done; i < n; i++) {
            weft_adamw_element(s, s->decay, &param[i], &exp_avg[i], &exp_avg_sq[i], g[i]);
        }
    }
    (void)fma;
}

void weft_bf16_from_float_host(const float *x, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        out[i] = weft_float_to_bf16(x[i]);
    }
}

#ifndef HAVE_CUDA
weft_status_t weft_adamw_cuda(const weft_adamw_scalars_t *s, float *param, float *exp_avg, float *exp_avg_sq,
                              const void *grad, weft_dtype_t grad_dtype, size_t n, void *stream)
{
    (void)s;
    (void)param;
    (void)exp_avg;
    (void)exp_avg_sq;
    (void)grad;
    (void)grad_dtype;
    (void)n;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_bf16_from_float_cuda(const float *x, uint16_t *out, size_t n, void *stream)
{
    (void)x;
    (void)out;
    (void)n;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}
#endif
