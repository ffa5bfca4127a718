/*
 * optim/ on the host: AdamW's bytes (vectorized, threaded) against the
 * formula of optim.h written out a second time, plainly, per element;
 * 1000 steps against an FP64 AdamW; the ready-made writers against
 * weft_quant_host of the master they were given; and the argument errors.
 * The GPU placements are test_optim_cuda's.
 */
#include "config.h"

#include "lib/harness.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft/weft.h>

#include "lib/optim_inputs.h"

/* ------------------------------------------------------------------
 * optim.h's AdamW, once more, one element at a time: fmaf where the
 * header says fma, every other operation rounded on its own (this file
 * is built with -ffp-contract=off). */
typedef struct spec_scalars {
    float lr_wd, beta1, beta2, eps, step_size, bc2s;
    int   decay;
} spec_scalars_t;

static spec_scalars_t spec_scalars(const weft_adamw_hparams_t *h, uint64_t t)
{
    spec_scalars_t s;
    const float    lr = (float)h->lr, wd = (float)h->weight_decay;

    s.beta1     = (float)h->beta1;
    s.beta2     = (float)h->beta2;
    s.eps       = (float)h->eps;
    s.lr_wd     = lr * wd;
    s.decay     = wd != 0.0f;
    s.step_size = lr / (1.0f - (float)pow((double)s.beta1, (double)(float)t));
    s.bc2s      = sqrtf(1.0f - (float)pow((double)s.beta2, (double)(float)t));
    return s;
}

static float canon(float x)
{
    return isnan(x) ? f32_from_bits(0x7fffffffu) : x;
}

static void spec_element(const spec_scalars_t *s, float *p, float *m, float *v, float g)
{
    float theta = *p;
    if (s->decay) {
        theta = fmaf(-s->lr_wd, theta, theta);
    }
    *m = fmaf(s->beta1, *m, fmaf(-s->beta1, g, g));
    *v = fmaf(s->beta2, *v, fmaf(-s->beta2, g * g, g * g));
    *p = canon(theta - (s->step_size * *m) / (sqrtf(*v) / s->bc2s + s->eps));
    *m = canon(*m);
    *v = canon(*v);
}

/* ------------------------------------------------------------------ */

/* A host optimizer with one group of `experts` rows × cols matrices. */
static weft_optim_h one_group(uint32_t threads, uint32_t experts, uint64_t rows, uint64_t cols,
                              const weft_adamw_hparams_t *h, const char *name)
{
    weft_optim_params_t     p = {.field_mask = WEFT_OPTIM_FIELD_THREADS, .threads = threads};
    weft_optim_group_desc_t d = {.field_mask = h ? WEFT_OPTIM_GROUP_FIELD_ADAMW : 0,
                                 .name       = name,
                                 .algo       = WEFT_OPTIM_ADAMW,
                                 .experts    = experts,
                                 .rows       = rows,
                                 .cols       = cols};
    weft_optim_h            opt;

    if (h != NULL) {
        d.adamw = *h;
    }
    ck_assert_int_eq(weft_optim_create(&p, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    return opt;
}

static float *state_of(weft_optim_h opt, uint32_t group, weft_optim_state_t which)
{
    float *data = NULL;
    ck_assert_int_eq(weft_optim_group_state(opt, group, which, &data), WEFT_OK);
    ck_assert_ptr_nonnull(data);
    return data;
}

/* Steps `steps` times with adversarial or random inputs, and compares
 * every byte of master, m and v with the spec after each step. */
static void check_against_spec(uint32_t threads, int bf16_grads, int finite_only, const weft_adamw_hparams_t *h)
{
    const uint64_t n = 3 * 4099; /* 3 experts of 1 × 4099: tails on every path */
    weft_optim_h   opt = one_group(threads, 3, 1, 4099, h, "g");
    float         *p = state_of(opt, 0, WEFT_OPTIM_STATE_MASTER), *m = state_of(opt, 0, WEFT_OPTIM_STATE_EXP_AVG),
          *v = state_of(opt, 0, WEFT_OPTIM_STATE_EXP_AVG_SQ);
    float    *sp = malloc(n * 4), *sm = malloc(n * 4), *sv = malloc(n * 4), *g = malloc(n * 4);
    uint16_t *g16 = malloc(n * 2);
    uint64_t  rng = 0x1234567 + threads * 7 + (uint64_t)bf16_grads;

    for (uint64_t i = 0; i < n; i++) {
        p[i] = sp[i] = adversarial(&rng, finite_only);
    }
    memset(sm, 0, n * 4);
    memset(sv, 0, n * 4);
    for (uint64_t t = 1; t <= 4; t++) {
        weft_optim_grad_t gr = {.data = g, .dtype = WEFT_DTYPE_FP32, .memory = WEFT_MEMORY_HOST};
        spec_scalars_t    s  = spec_scalars(h, t);
        uint64_t          differ = 0;

        for (uint64_t i = 0; i < n; i++) {
            g[i]   = adversarial(&rng, finite_only);
            g16[i] = bf16_bits(g[i]);
        }
        if (bf16_grads) {
            gr.data  = g16;
            gr.dtype = WEFT_DTYPE_BF16;
        }
        ck_assert_int_eq(weft_optim_step(opt, &gr, 1, NULL), WEFT_OK);
        for (uint64_t i = 0; i < n; i++) {
            const float gi = bf16_grads ? f32_from_bits((uint32_t)g16[i] << 16) : g[i];
            spec_element(&s, &sp[i], &sm[i], &sv[i], gi);
            differ += f32_bits(p[i]) != f32_bits(sp[i]) || f32_bits(m[i]) != f32_bits(sm[i]) ||
                      f32_bits(v[i]) != f32_bits(sv[i]);
        }
        ck_assert_msg(differ == 0, "step %llu, %u threads, %s gradients: %llu of %llu elements differ",
                      (unsigned long long)t, threads, bf16_grads ? "BF16" : "FP32", (unsigned long long)differ,
                      (unsigned long long)n);
    }
    free(sp);
    free(sm);
    free(sv);
    free(g);
    free(g16);
    weft_optim_destroy(opt);
}

static const weft_adamw_hparams_t typical = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                             .weight_decay = 0.01};
static const weft_adamw_hparams_t no_decay = {.lr = 3e-4, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6,
                                              .weight_decay = 0.0};

START_TEST(adamw_matches_spec_random)
{
    check_against_spec(1, 0, 1, &typical);
    check_against_spec(3, 0, 1, &no_decay);
}
END_TEST

START_TEST(adamw_matches_spec_adversarial)
{
    /* Infinite and NaN gradients and masters, subnormals, extremes: NaN
     * and infinity propagate as in PyTorch, NaN stored canonically. */
    check_against_spec(1, 0, 0, &typical);
    check_against_spec(2, 1, 0, &typical);
    check_against_spec(4, 0, 0, &no_decay);
}
END_TEST

START_TEST(adamw_bf16_gradients_widen_exactly)
{
    check_against_spec(2, 1, 1, &typical);
}
END_TEST

/* The same inputs through 1 and 7 threads give the same bytes. */
START_TEST(adamw_bytes_do_not_depend_on_threads)
{
    const uint64_t n = 2 * 300001;
    weft_optim_h   a = one_group(1, 2, 1, 300001, &typical, "g"), b = one_group(7, 2, 1, 300001, &typical, "g");
    float         *pa = state_of(a, 0, WEFT_OPTIM_STATE_MASTER), *pb = state_of(b, 0, WEFT_OPTIM_STATE_MASTER);
    float         *g  = malloc(n * 4);
    uint64_t       rng = 99;

    for (uint64_t i = 0; i < n; i++) {
        pa[i] = pb[i] = rng_unit(&rng);
    }
    for (int t = 0; t < 3; t++) {
        weft_optim_grad_t gr = {.data = g, .dtype = WEFT_DTYPE_FP32, .memory = WEFT_MEMORY_HOST};
        for (uint64_t i = 0; i < n; i++) {
            g[i] = rng_unit(&rng) * 1e-2f;
        }
        ck_assert_int_eq(weft_optim_step(a, &gr, 1, NULL), WEFT_OK);
        ck_assert_int_eq(weft_optim_step(b, &gr, 1, NULL), WEFT_OK);
    }
    ck_assert_int_eq(memcmp(pa, pb, n * 4), 0);
    ck_assert_int_eq(memcmp(state_of(a, 0, WEFT_OPTIM_STATE_EXP_AVG_SQ), state_of(b, 0, WEFT_OPTIM_STATE_EXP_AVG_SQ),
                            n * 4),
                     0);
    free(g);
    weft_optim_destroy(a);
    weft_optim_destroy(b);
}
END_TEST

/* 1000 steps in FP32 stay within a small distance of the same run in
 * FP64 (AdamW of textbook form: the bias corrections applied as in the
 * header, in double). A wrong bias correction, a missing decay or a
 * swapped beta moves the trajectory far outside the bound. */
START_TEST(adamw_tracks_fp64_for_1000_steps)
{
    const uint64_t n   = 2048;
    const double   lr  = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    weft_optim_h   opt = one_group(2, 0, 1, n, &(weft_adamw_hparams_t){lr, b1, b2, eps, wd}, "g");
    float         *p = state_of(opt, 0, WEFT_OPTIM_STATE_MASTER), *g = malloc(n * 4);
    double        *dp = malloc(n * 8), *dm = calloc(n, 8), *dv = calloc(n, 8);
    uint64_t       rng = 7;
    double         worst = 0, scale = 0;

    for (uint64_t i = 0; i < n; i++) {
        p[i] = rng_unit(&rng);
        dp[i] = p[i];
    }
    for (uint64_t t = 1; t <= 1000; t++) {
        weft_optim_grad_t gr = {.data = g, .dtype = WEFT_DTYPE_FP32, .memory = WEFT_MEMORY_HOST};
        /* A gradient that pulls every weight towards a target, plus
         * noise: the trajectory goes somewhere, as in training. */
        for (uint64_t i = 0; i < n; i++) {
            g[i] = (float)(dp[i] - 0.5 * sin((double)i)) + 0.1f * rng_unit(&rng);
        }
        ck_assert_int_eq(weft_optim_step(opt, &gr, 1, NULL), WEFT_OK);
        for (uint64_t i = 0; i < n; i++) {
            const double gi = g[i];
            dp[i] -= lr * wd * dp[i];
            dm[i] = b1 * dm[i] + (1 - b1) * gi;
            dv[i] = b2 * dv[i] + (1 - b2) * gi * gi;
            dp[i] -= lr / (1 - pow(b1, (double)t)) * dm[i] / (sqrt(dv[i]) / sqrt(1 - pow(b2, (double)t)) + eps);
        }
    }
    for (uint64_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)p[i] - dp[i]));
        scale = fmax(scale, fabs(dp[i]));
    }
    /* FP32 rounds every step by ~6e-8 relative; over 1000 steps of a
     * contracting trajectory the error stays near 1e-6. A step of lr is
     * 1e-3: any real mistake is hundreds of times this bound. */
    ck_assert_msg(worst <= 2e-5 * scale, "FP32 drifted %.3g from FP64 (weights up to %.3g)", worst, scale);
    free(g);
    free(dp);
    free(dm);
    free(dv);
    weft_optim_destroy(opt);
}
END_TEST

/* A group adopting the caller's arrays updates them in place. */
START_TEST(adopted_state_is_updated_in_place)
{
    enum { N = 100 };
    float                   master[N], m[N] = {0}, v[N] = {0}, g[N];
    weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_FIELD_ADOPT,
                                 .name       = "bias",
                                 .algo       = WEFT_OPTIM_ADAMW,
                                 .rows       = 1,
                                 .cols       = N,
                                 .master     = master,
                                 .exp_avg    = m,
                                 .exp_avg_sq = v};
    weft_optim_h            opt;
    weft_optim_grad_t       gr = {.data = g, .dtype = WEFT_DTYPE_FP32, .memory = WEFT_MEMORY_HOST};
    weft_optim_info_t       info;
    spec_scalars_t          s = spec_scalars(&(weft_adamw_hparams_t){1e-3, 0.9, 0.999, 1e-8, 1e-2}, 1);

    for (int i = 0; i < N; i++) {
        master[i] = (float)i / N;
        g[i]      = 0.5f - (float)i / N;
    }
    ck_assert_int_eq(weft_optim_create(NULL, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    ck_assert_ptr_eq(state_of(opt, 0, WEFT_OPTIM_STATE_MASTER), master);
    ck_assert_int_eq(weft_optim_step(opt, &gr, 1, NULL), WEFT_OK);
    for (int i = 0; i < N; i++) {
        float sp = (float)i / N, sm = 0, sv = 0;
        spec_element(&s, &sp, &sm, &sv, g[i]);
        ck_assert_uint_eq(f32_bits(master[i]), f32_bits(sp));
        ck_assert_uint_eq(f32_bits(m[i]), f32_bits(sm));
    }
    ck_assert_int_eq(weft_optim_get_info(opt, &info), WEFT_OK);
    ck_assert_uint_eq(info.step, 1);
    ck_assert_uint_eq(info.parameters, N);
    ck_assert_uint_eq(info.units, 1);
    ck_assert_uint_eq(info.host_bytes, 0); /* adopted: nothing allocated */
    ck_assert_uint_eq(info.device_bytes, 0);
    weft_optim_destroy(opt);
}
END_TEST

/* ------------------------------------------------------------- writers */

/* A host registry with the FP8 (or BF16) tensors of `experts` matrices
 * named "L0.experts.<e>.w1". */
static weft_registry_h writer_registry(const char *reg_name, uint32_t experts, uint64_t rows, uint64_t cols,
                                       int bf16, int skip_expert)
{
    weft_registry_h reg;
    char            name[WEFT_TENSOR_NAME_MAX];

    weft_registry_unlink(reg_name);
    ck_assert_int_eq(weft_registry_create(reg_name, NULL, &reg), WEFT_OK);
    for (uint32_t e = 0; e < experts; e++) {
        weft_tensor_desc_t w = {.name = name, .layer = 0, .expert = (int32_t)e, .role = WEFT_ROLE_W,
                                .dtype = bf16 ? WEFT_DTYPE_BF16 : WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                .shape = {rows, cols}};
        if ((int)e == skip_expert) {
            continue;
        }
        snprintf(name, sizeof(name), "L0.experts.%u.w1.weight", e);
        ck_assert_int_eq(weft_registry_declare(reg, &w, NULL), WEFT_OK);
        if (bf16) {
            continue;
        }
        weft_tensor_desc_t wt = w, sc = w;
        snprintf(name, sizeof(name), "L0.experts.%u.w1.weight_t", e);
        wt.role     = WEFT_ROLE_WT;
        wt.shape[0] = cols;
        wt.shape[1] = rows;
        ck_assert_int_eq(weft_registry_declare(reg, &wt, NULL), WEFT_OK);
        snprintf(name, sizeof(name), "L0.experts.%u.w1.weight_scale_inv", e);
        sc.role     = WEFT_ROLE_SCALE;
        sc.dtype    = WEFT_DTYPE_FP32;
        sc.shape[0] = (rows + 127) / 128;
        sc.shape[1] = (cols + 127) / 128;
        ck_assert_int_eq(weft_registry_declare(reg, &sc, NULL), WEFT_OK);
    }
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    return reg;
}

static void *tensor_bytes(weft_registry_h reg, const char *name)
{
    uint32_t index;
    void    *data = NULL;
    ck_assert_int_eq(weft_registry_lookup(reg, name, &index), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_tensor(reg, index, &data), WEFT_OK);
    return data;
}

static void fill_masters_and_step(weft_optim_h opt, uint64_t n, uint64_t seed, const weft_optim_step_params_t *sp)
{
    float            *p = state_of(opt, 0, WEFT_OPTIM_STATE_MASTER), *g = malloc(n * 4);
    weft_optim_grad_t gr = {.data = g, .dtype = WEFT_DTYPE_FP32, .memory = WEFT_MEMORY_HOST};

    for (uint64_t i = 0; i < n; i++) {
        p[i] = rng_unit(&seed) * 0.05f;
        g[i] = rng_unit(&seed);
    }
    ck_assert_int_eq(weft_optim_step(opt, &gr, 1, sp), WEFT_OK);
    free(g);
}

START_TEST(fp8_writer_writes_the_quantized_master)
{
    const uint32_t           E = 3;
    const uint64_t           rows = 200, cols = 300, n = E * rows * cols;
    char                     reg_name[64], name[WEFT_TENSOR_NAME_MAX];
    weft_registry_h          reg;
    weft_optim_h             opt = one_group(2, E, rows, cols, NULL, "L0.experts.{E}.w1");
    weft_optim_writer_h      w;
    weft_optim_step_params_t sp = {.field_mask = WEFT_OPTIM_STEP_FIELD_WRITER, .writer = weft_optim_writer_write};
    uint8_t                 *ew = malloc(rows * cols), *ewt = malloc(rows * cols);
    float                    escale[2 * 3];

    /* _i: the formula (both reach the writer). */
    const weft_quant_params_t        qp = {.field_mask = WEFT_QUANT_FIELD_FORMULA, .formula = (weft_quant_formula_t)_i};
    const weft_optim_writer_params_t wp = {.field_mask = WEFT_OPTIM_WRITER_FIELD_QUANT, .quant = qp};

    snprintf(reg_name, sizeof(reg_name), "test-optim-fp8-%d", (int)getpid());
    reg = writer_registry(reg_name, E, rows, cols, 0, -1);
    ck_assert_int_eq(weft_optim_writer_create(opt, reg, &wp, &w), WEFT_OK);
    sp.writer_arg = w;
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_OK);
    fill_masters_and_step(opt, n, 5, &sp);
    for (uint32_t e = 0; e < E; e++) {
        const float        *master = state_of(opt, 0, WEFT_OPTIM_STATE_MASTER) + e * rows * cols;
        weft_quant_matrix_t qm     = {.x = master, .w = ew, .wt = ewt, .scale_inv = escale};
        ck_assert_int_eq(weft_quant_host(&qp, WEFT_DTYPE_FP32, rows, cols, &qm, 1), WEFT_OK);
        snprintf(name, sizeof(name), "L0.experts.%u.w1.weight", e);
        ck_assert_int_eq(memcmp(tensor_bytes(reg, name), ew, rows * cols), 0);
        snprintf(name, sizeof(name), "L0.experts.%u.w1.weight_t", e);
        ck_assert_int_eq(memcmp(tensor_bytes(reg, name), ewt, rows * cols), 0);
        snprintf(name, sizeof(name), "L0.experts.%u.w1.weight_scale_inv", e);
        ck_assert_int_eq(memcmp(tensor_bytes(reg, name), escale, sizeof(escale)), 0);
    }
    ck_assert_int_eq(weft_registry_publish(reg, 0, NULL), WEFT_OK);
    /* Outside a write, the writer refuses and the step says so; the
     * masters of a host step are whole, so later steps go on. */
    ck_assert_int_eq(weft_optim_step(opt, &(weft_optim_grad_t){state_of(opt, 0, WEFT_OPTIM_STATE_EXP_AVG),
                                                               WEFT_DTYPE_FP32, WEFT_MEMORY_HOST},
                                     1, &sp),
                     WEFT_ERR_STATE);
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_OK);
    fill_masters_and_step(opt, n, 6, &sp);
    weft_optim_writer_destroy(w);
    weft_optim_destroy(opt);
    weft_registry_close(reg);
    weft_registry_unlink(reg_name);
    free(ew);
    free(ewt);
}
END_TEST

START_TEST(bf16_writer_rounds_to_nearest_even)
{
    const uint64_t             rows = 7, cols = 33, n = rows * cols;
    char                       reg_name[64];
    weft_registry_h            reg;
    weft_optim_h               opt = one_group(1, 1, rows, cols, NULL, "L0.experts.{E}.w1");
    weft_optim_writer_h        w;
    weft_optim_writer_params_t wp = {.field_mask = WEFT_OPTIM_WRITER_FIELD_FORMAT, .format = WEFT_OPTIM_WRITE_BF16};
    weft_optim_step_params_t   sp = {.field_mask = WEFT_OPTIM_STEP_FIELD_WRITER, .writer = weft_optim_writer_write};
    const uint16_t            *out;
    const float               *master;

    snprintf(reg_name, sizeof(reg_name), "test-optim-bf16-%d", (int)getpid());
    reg = writer_registry(reg_name, 1, rows, cols, 1, -1);
    ck_assert_int_eq(weft_optim_writer_create(opt, reg, &wp, &w), WEFT_OK);
    sp.writer_arg = w;
    ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_OK);
    fill_masters_and_step(opt, n, 11, &sp);
    out    = tensor_bytes(reg, "L0.experts.0.w1.weight");
    master = state_of(opt, 0, WEFT_OPTIM_STATE_MASTER);
    for (uint64_t i = 0; i < n; i++) {
        /* The nearer of the two BF16 neighbours, by a double comparison. */
        const uint32_t u = f32_bits(master[i]);
        const float    lo = f32_from_bits(u & 0xffff0000u), hi = f32_from_bits((u & 0xffff0000u) + 0x10000u);
        const double   dlo = fabs((double)master[i] - lo), dhi = fabs((double)hi - master[i]);
        const uint16_t want = dlo < dhi ? (uint16_t)(u >> 16)
                              : dhi < dlo ? (uint16_t)((u >> 16) + 1)
                                          : (uint16_t)(((u >> 16) & 1) ? (u >> 16) + 1 : (u >> 16));
        ck_assert_uint_eq(out[i], want);
    }
    weft_optim_writer_destroy(w);
    weft_optim_destroy(opt);
    weft_registry_close(reg);
    weft_registry_unlink(reg_name);
}
END_TEST

START_TEST(writer_refuses_missing_or_mismatched_tensors)
{
    char                reg_name[64];
    weft_registry_h     reg;
    weft_optim_h        opt = one_group(1, 2, 64, 64, NULL, "L0.experts.{E}.w1");
    weft_optim_h        other = one_group(1, 2, 64, 32, NULL, "L0.experts.{E}.w1");
    weft_optim_writer_h w = NULL;

    snprintf(reg_name, sizeof(reg_name), "test-optim-wmiss-%d", (int)getpid());
    reg = writer_registry(reg_name, 2, 64, 64, 0, 1); /* expert 1 missing */
    ck_assert_int_eq(weft_optim_writer_create(opt, reg, NULL, &w), WEFT_ERR_NOT_FOUND);
    ck_assert_ptr_null(w);
    weft_registry_close(reg);
    reg = writer_registry(reg_name, 2, 64, 64, 0, -1);
    ck_assert_int_eq(weft_optim_writer_create(other, reg, NULL, &w), WEFT_ERR_INVALID_PARAM); /* shape */
    ck_assert_int_eq(weft_optim_writer_create(opt, reg,
                                              &(weft_optim_writer_params_t){.field_mask = WEFT_OPTIM_WRITER_FIELD_FORMAT,
                                                                            .format     = WEFT_OPTIM_WRITE_BF16},
                                              &w),
                     WEFT_ERR_INVALID_PARAM); /* FP8 tensors, BF16 writer */
    ck_assert_int_eq(weft_optim_writer_create(opt, reg,
                                              &(weft_optim_writer_params_t){.field_mask = WEFT_OPTIM_WRITER_FIELD_QUANT,
                                                                            .quant = {.field_mask = WEFT_QUANT_FIELD_BLOCK,
                                                                                      .block = 64}},
                                              &w),
                     WEFT_ERR_INVALID_PARAM); /* 128-blocks declared */
    ck_assert_int_eq(weft_optim_writer_create(opt, reg,
                                              &(weft_optim_writer_params_t){.field_mask = WEFT_OPTIM_WRITER_FIELD_QUANT,
                                                                            .quant = {.field_mask = WEFT_QUANT_FIELD_FORMULA,
                                                                                      .formula = (weft_quant_formula_t)5}},
                                              &w),
                     WEFT_ERR_INVALID_PARAM); /* no such formula */
    ck_assert_int_eq(weft_optim_writer_create(opt, reg, &(weft_optim_writer_params_t){.field_mask = 1u << 20}, &w),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_writer_create(opt, reg, NULL, &w), WEFT_OK);
    weft_optim_writer_destroy(w);
    weft_optim_destroy(opt);
    weft_optim_destroy(other);
    weft_registry_close(reg);
    weft_registry_unlink(reg_name);
}
END_TEST

/* ----------------------------------------------------------------- Muon */

static const weft_muon_hparams_t muon_h = {.lr = 0.02, .momentum = 0.95, .weight_decay = 0.01, .nesterov = 1,
                                           .ns_steps = 5, .scale = WEFT_MUON_SCALE_SHAPE,
                                           .schedule = WEFT_MUON_NS_SIMPLE};

static weft_optim_h muon_opt(uint32_t threads, uint32_t experts, uint64_t rows, uint64_t cols,
                             const weft_muon_hparams_t *h)
{
    weft_optim_params_t     p = {.field_mask = WEFT_OPTIM_FIELD_THREADS, .threads = threads};
    weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_FIELD_MUON, .name = "L0.experts.{E}.w2",
                                 .algo = WEFT_OPTIM_MUON, .experts = experts, .rows = rows, .cols = cols,
                                 .muon = *h};
    weft_optim_h            opt;

    ck_assert_int_eq(weft_optim_create(&p, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    return opt;
}

/* Muon of one matrix in FP64, as optim.h writes it (Keller Jordan's
 * formulation): returns the update direction X·scale in dx. */
static void muon_fp64(const double *g, double *m, uint64_t rows, uint64_t cols, const weft_muon_hparams_t *h,
                      double *dx)
{
    const int    tr = rows > cols;
    const size_t a = tr ? cols : rows, b = tr ? rows : cols, n = rows * cols;
    double      *X = malloc(a * b * 8), *A = malloc(a * a * 8), *B = malloc(a * a * 8), *Y = malloc(a * b * 8);
    double       norm = 0, scale = h->scale == WEFT_MUON_SCALE_SHAPE ? sqrt(fmax(1.0, (double)rows / cols))
                                                                     : 0.2 * sqrt((double)(rows > cols ? rows : cols));
    static const double abc[3] = {3.4445, -4.7750, 2.0315};

    for (size_t i = 0; i < n; i++) {
        m[i] += (1 - h->momentum) * (g[i] - m[i]);
    }
    for (size_t i = 0; i < a; i++) {
        for (size_t j = 0; j < b; j++) {
            const size_t k = tr ? j * cols + i : i * cols + j;
            X[i * b + j] = h->nesterov ? g[k] + h->momentum * (m[k] - g[k]) : m[k];
            norm += X[i * b + j] * X[i * b + j];
        }
    }
    norm = sqrt(norm) + 1e-7;
    for (size_t i = 0; i < a * b; i++) {
        X[i] /= norm;
    }
    for (uint32_t s = 0; s < h->ns_steps; s++) {
        for (size_t i = 0; i < a; i++) {
            for (size_t k = 0; k < a; k++) {
                double v = 0;
                for (size_t j = 0; j < b; j++) {
                    v += X[i * b + j] * X[k * b + j];
                }
                A[i * a + k] = v;
            }
        }
        for (size_t i = 0; i < a; i++) {
            for (size_t k = 0; k < a; k++) {
                double v = 0;
                for (size_t j = 0; j < a; j++) {
                    v += A[i * a + j] * A[j * a + k];
                }
                B[i * a + k] = abc[1] * A[i * a + k] + abc[2] * v;
            }
        }
        for (size_t i = 0; i < a; i++) {
            for (size_t j = 0; j < b; j++) {
                double v = 0;
                for (size_t k = 0; k < a; k++) {
                    v += B[i * a + k] * X[k * b + j];
                }
                Y[i * b + j] = abc[0] * X[i * b + j] + v;
            }
        }
        memcpy(X, Y, a * b * 8);
    }
    for (size_t i = 0; i < a; i++) {
        for (size_t j = 0; j < b; j++) {
            dx[tr ? j * cols + i : i * cols + j] = X[i * b + j] * scale;
        }
    }
    free(X);
    free(A);
    free(B);
    free(Y);
}

/* One and then a second step on the host against FP64: the update of
 * every matrix within 1e-4 (relative Frobenius), the momentum within
 * 1e-6; wide and tall matrices. */
static void muon_against_fp64(uint64_t rows, uint64_t cols, int nesterov)
{
    const uint32_t      E = 3;
    const uint64_t      n = rows * cols;
    weft_muon_hparams_t h = muon_h;
    weft_optim_h        opt;
    float              *p, *m, *g = malloc(E * n * 4), *before = malloc(E * n * 4);
    double             *dg = malloc(n * 8), *dm = calloc(E * n, 8), *dx = malloc(n * 8);
    uint64_t            rng = 17 + rows;

    h.nesterov = nesterov;
    opt        = muon_opt(2, E, rows, cols, &h);
    p          = state_of(opt, 0, WEFT_OPTIM_STATE_MASTER);
    m          = state_of(opt, 0, WEFT_OPTIM_STATE_MOMENTUM);
    for (uint64_t i = 0; i < E * n; i++) {
        p[i] = rng_unit(&rng) * 0.05f;
    }
    for (int step = 0; step < 2; step++) {
        weft_optim_grad_t gr = {.data = g, .dtype = WEFT_DTYPE_FP32, .memory = WEFT_MEMORY_HOST};
        for (uint64_t i = 0; i < E * n; i++) {
            g[i] = rng_unit(&rng) + 0.3f * (float)((i / cols) % 5);
        }
        memcpy(before, p, E * n * 4);
        ck_assert_int_eq(weft_optim_step(opt, &gr, 1, NULL), WEFT_OK);
        for (uint32_t e = 0; e < E; e++) {
            double err = 0, ref = 0, merr = 0;
            for (uint64_t i = 0; i < n; i++) {
                dg[i] = g[e * n + i];
            }
            muon_fp64(dg, dm + e * n, rows, cols, &h, dx);
            for (uint64_t i = 0; i < n; i++) {
                /* θ·(1 − lr·wd) − lr·dx: the step's own update, recovered. */
                const double ours = ((double)before[e * n + i] * (1 - h.lr * h.weight_decay) - p[e * n + i]) / h.lr;
                err += (ours - dx[i]) * (ours - dx[i]);
                ref += dx[i] * dx[i];
                merr = fmax(merr, fabs((double)m[e * n + i] - dm[e * n + i]));
            }
            ck_assert_msg(sqrt(err / ref) <= 1e-4, "%llux%llu expert %u step %d: update off by %.3g (relative)",
                          (unsigned long long)rows, (unsigned long long)cols, e, step, sqrt(err / ref));
            ck_assert_msg(merr <= 1e-6, "momentum off by %.3g", merr);
        }
    }
    free(g);
    free(before);
    free(dg);
    free(dm);
    free(dx);
    weft_optim_destroy(opt);
}

START_TEST(muon_host_tracks_fp64)
{
    muon_against_fp64(24, 40, 1); /* wide */
    muon_against_fp64(40, 24, 1); /* tall: orthogonalized transposed */
    muon_against_fp64(32, 32, 0); /* square, no Nesterov */
}
END_TEST

START_TEST(muon_bytes_do_not_depend_on_threads)
{
    weft_optim_h a = muon_opt(1, 5, 20, 36, &muon_h), b = muon_opt(4, 5, 20, 36, &muon_h);
    float       *pa = state_of(a, 0, WEFT_OPTIM_STATE_MASTER), *pb = state_of(b, 0, WEFT_OPTIM_STATE_MASTER);
    float        g[5 * 20 * 36];
    uint64_t     rng = 5;

    for (int i = 0; i < 5 * 20 * 36; i++) {
        pa[i] = pb[i] = rng_unit(&rng);
        g[i]          = rng_unit(&rng);
    }
    ck_assert_int_eq(weft_optim_step(a, &(weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_step(b, &(weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, 1, NULL), WEFT_OK);
    ck_assert_int_eq(memcmp(pa, pb, sizeof(g)), 0);
    weft_optim_destroy(a);
    weft_optim_destroy(b);
}
END_TEST

START_TEST(muon_argument_errors)
{
    weft_optim_h            opt;
    weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_FIELD_MUON, .name = "w", .algo = WEFT_OPTIM_MUON,
                                 .rows = 1, .cols = 64, .muon = muon_h};
    float                  *data;

    ck_assert_int_eq(weft_optim_create(NULL, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM); /* a vector takes AdamW */
    d.rows          = 8;
    d.muon.ns_steps = 0;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.muon.ns_steps = 7;
    d.muon.schedule = WEFT_MUON_NS_QUINTIC; /* steps a multiple of 5 */
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.muon          = muon_h;
    d.muon.momentum = 1.0;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.muon          = muon_h;
    d.muon.scale    = 9;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.muon          = muon_h;
    d.field_mask    = WEFT_OPTIM_GROUP_FIELD_MUON | WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING; /* and muon_rounding 0 */
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.muon_rounding = (weft_muon_rounding_t)3;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.field_mask    = WEFT_OPTIM_GROUP_FIELD_MUON | (WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING << 1); /* an unknown bit */
    d.muon_rounding = WEFT_MUON_ROUNDING_FUSED;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.field_mask = WEFT_OPTIM_GROUP_FIELD_MUON | WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_group_state(opt, 0, WEFT_OPTIM_STATE_EXP_AVG_SQ, &data), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_group_state(opt, 0, WEFT_OPTIM_STATE_EXP_AVG, &data), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_group_state(opt, 0, WEFT_OPTIM_STATE_MOMENTUM, &data), WEFT_OK);
    ck_assert_int_eq(weft_optim_group_set_adamw(opt, 0, &typical), WEFT_ERR_INVALID_PARAM); /* not AdamW */
    ck_assert_int_eq(weft_optim_group_set_muon(opt, 0, &muon_h), WEFT_OK);
    weft_optim_destroy(opt);
}
END_TEST

/* A Muon group's checkpoint: hyperparameters and momentum come back, and
 * the next step is the same. */
START_TEST(muon_checkpoint_round_trip)
{
    weft_muon_hparams_t h = muon_h;
    weft_optim_h        a, b;
    float               g[2 * 12 * 20], *pa, *pb;
    char                path[128];
    uint64_t            rng = 8;

    h.lr       = 0.05;
    h.schedule = WEFT_MUON_NS_QUINTIC;
    a          = muon_opt(2, 2, 12, 20, &h);
    b          = muon_opt(2, 2, 12, 20, &muon_h); /* other hyperparameters: the file's win */
    pa         = state_of(a, 0, WEFT_OPTIM_STATE_MASTER);
    for (int i = 0; i < 2 * 12 * 20; i++) {
        pa[i] = rng_unit(&rng);
        g[i]  = rng_unit(&rng);
    }
    snprintf(path, sizeof(path), "/tmp/weft-test-optim-muon-%d.ckpt", (int)getpid());
    ck_assert_int_eq(weft_optim_step(a, &(weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_save(a, path), WEFT_OK);
    ck_assert_int_eq(weft_optim_restore(b, path), WEFT_OK);
    ck_assert_int_eq(weft_optim_step(a, &(weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_step(b, &(weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, 1, NULL), WEFT_OK);
    pb = state_of(b, 0, WEFT_OPTIM_STATE_MASTER);
    ck_assert_int_eq(memcmp(pa, pb, sizeof(g)), 0);
    ck_assert_int_eq(memcmp(state_of(a, 0, WEFT_OPTIM_STATE_MOMENTUM), state_of(b, 0, WEFT_OPTIM_STATE_MOMENTUM),
                            sizeof(g)),
                     0);
    unlink(path);
    weft_optim_destroy(a);
    weft_optim_destroy(b);
}
END_TEST

/* ---------------------------------------------------------- checkpoint */

/* Two groups, a stack and a plain tensor, with masters filled. */
static weft_optim_h ckpt_opt(uint64_t cols0)
{
    weft_optim_h            opt;
    weft_optim_group_desc_t a = {.name = "L0.experts.{E}.w1", .algo = WEFT_OPTIM_ADAMW, .experts = 3, .rows = 40,
                                 .cols = cols0};
    weft_optim_group_desc_t b = {.name = "L0.norm", .algo = WEFT_OPTIM_ADAMW, .rows = 1, .cols = 77};
    uint64_t                rng = 3;

    ck_assert_int_eq(weft_optim_create(NULL, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &a, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &b, NULL), WEFT_OK);
    for (uint32_t g = 0; g < 2; g++) {
        float   *m = state_of(opt, g, WEFT_OPTIM_STATE_MASTER);
        uint64_t n = g == 0 ? 3 * 40 * cols0 : 77;
        for (uint64_t i = 0; i < n; i++) {
            m[i] = rng_unit(&rng);
        }
    }
    return opt;
}

static const uint64_t CKPT_N[2] = {3 * 40 * 50, 77};

/* Step t's gradients: the same for every optimizer. */
static void ckpt_step(weft_optim_h opt, uint64_t t)
{
    float            *g0 = malloc(CKPT_N[0] * 4), *g1 = malloc(CKPT_N[1] * 4);
    uint64_t          rng = 1000 + t;
    weft_optim_grad_t gr[2] = {{g0, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, {g1, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}};

    for (uint64_t i = 0; i < CKPT_N[0]; i++) {
        g0[i] = rng_unit(&rng);
    }
    for (uint64_t i = 0; i < CKPT_N[1]; i++) {
        g1[i] = rng_unit(&rng) * 0.1f;
    }
    ck_assert_int_eq(weft_optim_step(opt, gr, 2, NULL), WEFT_OK);
    free(g0);
    free(g1);
}

/* Every array of the optimizer, one after another. */
static float *ckpt_snapshot(weft_optim_h opt)
{
    float *out = malloc(3 * (CKPT_N[0] + CKPT_N[1]) * 4), *at = out;
    for (uint32_t g = 0; g < 2; g++) {
        for (int a = 0; a < 3; a++) {
            memcpy(at, state_of(opt, g, (weft_optim_state_t)(WEFT_OPTIM_STATE_MASTER + a)), CKPT_N[g] * 4);
            at += CKPT_N[g];
        }
    }
    return out;
}

static void ckpt_assert_same(const float *a, const float *b, const char *what)
{
    ck_assert_msg(memcmp(a, b, 3 * (CKPT_N[0] + CKPT_N[1]) * 4) == 0, "%s", what);
}

static void ckpt_path(char *buf, size_t size, const char *tag)
{
    snprintf(buf, size, "/tmp/weft-test-optim-%s-%d.ckpt", tag, (int)getpid());
}

START_TEST(checkpoint_round_trip_is_bit_exact)
{
    weft_optim_h      a = ckpt_opt(50), b = ckpt_opt(50);
    weft_adamw_hparams_t h = {.lr = 2e-3, .beta1 = 0.85, .beta2 = 0.99, .eps = 1e-7, .weight_decay = 0.05};
    weft_optim_info_t info;
    char              path[128];
    float            *saved, *restored, *a_after, *b_after;

    ckpt_path(path, sizeof(path), "rt");
    ck_assert_int_eq(weft_optim_group_set_adamw(a, 0, &h), WEFT_OK); /* not b's: the file carries it */
    for (uint64_t t = 1; t <= 3; t++) {
        ckpt_step(a, t);
    }
    ck_assert_int_eq(weft_optim_save(a, path), WEFT_OK);
    saved = ckpt_snapshot(a);
    for (uint64_t t = 4; t <= 5; t++) {
        ckpt_step(a, t);
    }
    ck_assert_int_eq(weft_optim_restore(b, path), WEFT_OK);
    restored = ckpt_snapshot(b);
    ckpt_assert_same(saved, restored, "the restored state differs from the saved one");
    ck_assert_int_eq(weft_optim_get_info(b, &info), WEFT_OK);
    ck_assert_uint_eq(info.step, 3);
    for (uint64_t t = 4; t <= 5; t++) {
        ckpt_step(b, t);
    }
    a_after = ckpt_snapshot(a);
    b_after = ckpt_snapshot(b);
    ckpt_assert_same(a_after, b_after, "steps after a restore differ from the run that never stopped");
    unlink(path);
    free(saved);
    free(restored);
    free(a_after);
    free(b_after);
    weft_optim_destroy(a);
    weft_optim_destroy(b);
}
END_TEST

/* Reads the file, lets `damage` change it, writes it back. */
static void ckpt_rewrite(const char *path, void (*damage)(unsigned char *data, long *size))
{
    FILE          *f = fopen(path, "rb");
    long           size;
    unsigned char *data;

    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    data = malloc((size_t)size + 16);
    ck_assert_uint_eq(fread(data, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    damage(data, &size);
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    free(data);
}

static void flip_data_byte(unsigned char *d, long *size) { d[*size - 1000] ^= 0x10; }
static void flip_table_byte(unsigned char *d, long *size) { (void)size; d[64 + 10] ^= 1; }
static void flip_header_step(unsigned char *d, long *size) { (void)size; d[24] ^= 1; }
static void truncate_by_one(unsigned char *d, long *size) { (void)d; *size -= 1; }
static void grow_by_one(unsigned char *d, long *size) { d[*size] = 0; *size += 1; }
static void bad_magic(unsigned char *d, long *size) { (void)size; d[0] = 'X'; }
/* A well-formed header of a later format: refused as another version. */
static void later_format(unsigned char *d, long *size)
{
    uint64_t sum;
    (void)size;
    d[8] = 3;
    memset(d + 56, 0, 8);
    sum = weft_checksum_host(d, 64);
    memcpy(d + 56, &sum, 8);
}

START_TEST(checkpoint_damage_is_refused_and_changes_nothing)
{
    static const struct {
        void (*damage)(unsigned char *, long *);
        weft_status_t want;
        const char   *what;
    } cases[] = {
        {flip_data_byte, WEFT_ERR_CORRUPT, "a data byte"},     {flip_table_byte, WEFT_ERR_CORRUPT, "a table byte"},
        {flip_header_step, WEFT_ERR_CORRUPT, "the step"},      {truncate_by_one, WEFT_ERR_CORRUPT, "truncated"},
        {grow_by_one, WEFT_ERR_CORRUPT, "a byte appended"},    {bad_magic, WEFT_ERR_CORRUPT, "the magic"},
        {later_format, WEFT_ERR_VERSION, "a later format"},
    };
    weft_optim_h a = ckpt_opt(50), b = ckpt_opt(50), other = ckpt_opt(51);
    char         path[128];
    float       *before, *after;

    ckpt_path(path, sizeof(path), "bad");
    ckpt_step(a, 1);
    ck_assert_int_eq(weft_optim_save(a, path), WEFT_OK);
    ck_assert_int_eq(weft_optim_restore(other, path), WEFT_ERR_INVALID_PARAM); /* other shape */
    ckpt_step(b, 7);
    before = ckpt_snapshot(b);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_int_eq(weft_optim_save(a, path), WEFT_OK);
        ckpt_rewrite(path, cases[i].damage);
        ck_assert_msg(weft_optim_restore(b, path) == cases[i].want, "%s: not refused as expected", cases[i].what);
        after = ckpt_snapshot(b);
        ckpt_assert_same(before, after, cases[i].what);
        free(after);
    }
    unlink(path);
    ck_assert_int_eq(weft_optim_restore(b, path), WEFT_ERR_NOT_FOUND);
    /* Still whole: it steps on. */
    ckpt_step(b, 8);
    free(before);
    weft_optim_destroy(a);
    weft_optim_destroy(b);
    weft_optim_destroy(other);
}
END_TEST

/* -------------------------------------------------------------- errors */

START_TEST(argument_errors)
{
    weft_optim_h            opt = NULL;
    weft_optim_group_desc_t d   = {.name = "a", .algo = WEFT_OPTIM_ADAMW, .rows = 2, .cols = 3};
    float                   g[6] = {0};
    weft_optim_grad_t       gr  = {.data = g, .dtype = WEFT_DTYPE_FP32, .memory = WEFT_MEMORY_HOST};
    weft_status_t           st;

    ck_assert_int_eq(weft_optim_create(NULL, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_create(&(weft_optim_params_t){.field_mask = 1u << 30}, &opt), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_create(&(weft_optim_params_t){.field_mask = WEFT_OPTIM_FIELD_THREADS, .threads = 0},
                                       &opt),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_create(&(weft_optim_params_t){.field_mask = WEFT_OPTIM_FIELD_PLACEMENT, .placement = 9},
                                       &opt),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_ptr_null(opt);
    /* A GPU placement here: not built in, or no GPU. */
    st = weft_optim_create(&(weft_optim_params_t){.field_mask = WEFT_OPTIM_FIELD_PLACEMENT,
                                                  .placement  = WEFT_OPTIM_STAGED},
                           &opt);
    if (st == WEFT_OK) {
        weft_optim_destroy(opt); /* a machine with a GPU */
    } else {
        ck_assert_msg(st == WEFT_ERR_UNSUPPORTED || st == WEFT_ERR_NO_DEVICE || st == WEFT_ERR_CUDA, "%s",
                      weft_status_string(st));
    }
    opt = NULL;

    ck_assert_int_eq(weft_optim_create(NULL, &opt), WEFT_OK);
    d.name = "";
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.name = "a";
    d.algo = 7;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.algo = WEFT_OPTIM_ADAMW;
    d.rows = 0;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.rows       = 2;
    d.field_mask = WEFT_OPTIM_GROUP_FIELD_ADAMW;
    d.adamw      = (weft_adamw_hparams_t){.lr = 1e-3, .beta1 = 1.0, .beta2 = 0.9, .eps = 1e-8};
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.adamw.beta1 = NAN;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.adamw.beta1 = 0.9;
    d.adamw.eps   = 0;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.adamw.eps  = 1e-8;
    d.field_mask = WEFT_OPTIM_GROUP_FIELD_ADOPT; /* without the arrays */
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM);
    d.field_mask = 0;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM); /* duplicate */

    ck_assert_int_eq(weft_optim_step(opt, &gr, 2, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_step(opt, NULL, 1, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_step(opt, &(weft_optim_grad_t){g, WEFT_DTYPE_FP16, WEFT_MEMORY_HOST}, 1, NULL),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_step(opt, &(weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA}, 1, NULL),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_step(opt, &gr, 1, &(weft_optim_step_params_t){.field_mask = WEFT_OPTIM_STEP_FIELD_WRITER}),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_step(opt, &gr, 1, &(weft_optim_step_params_t){.field_mask = 1u << 9}),
                     WEFT_ERR_INVALID_PARAM);
    /* Nothing above took a step. */
    {
        weft_optim_info_t info;
        ck_assert_int_eq(weft_optim_get_info(opt, &info), WEFT_OK);
        ck_assert_uint_eq(info.step, 0);
    }
    ck_assert_int_eq(weft_optim_step(opt, &gr, 1, NULL), WEFT_OK);
    d.name = "b";
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_STATE); /* after a step */
    ck_assert_int_eq(weft_optim_group_set_adamw(opt, 0, &(weft_adamw_hparams_t){.lr = -1, .beta1 = 0.9,
                                                                                .beta2 = 0.9, .eps = 1}),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_group_set_adamw(opt, 1, &typical), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_optim_group_set_adamw(opt, 0, &typical), WEFT_OK);
    {
        float *data;
        ck_assert_int_eq(weft_optim_group_state(opt, 0, 0, &data), WEFT_ERR_INVALID_PARAM);
        ck_assert_int_eq(weft_optim_group_state(opt, 1, WEFT_OPTIM_STATE_MASTER, &data), WEFT_ERR_INVALID_PARAM);
    }
    ck_assert_int_eq(weft_optim_destroy(opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_destroy(NULL), WEFT_OK);
}
END_TEST

static Suite *optim_suite(void)
{
    Suite *s     = suite_create("optim");
    TCase *adamw = tcase_create("adamw");
    TCase *wr    = tcase_create("writers");
    TCase *api   = tcase_create("api");

    tcase_set_timeout(adamw, 120);
    tcase_add_test(adamw, adamw_matches_spec_random);
    tcase_add_test(adamw, adamw_matches_spec_adversarial);
    tcase_add_test(adamw, adamw_bf16_gradients_widen_exactly);
    tcase_add_test(adamw, adamw_bytes_do_not_depend_on_threads);
    tcase_add_test(adamw, adamw_tracks_fp64_for_1000_steps);
    tcase_add_test(adamw, adopted_state_is_updated_in_place);
    tcase_add_test(adamw, muon_host_tracks_fp64);
    tcase_add_test(adamw, muon_bytes_do_not_depend_on_threads);
    tcase_add_test(adamw, muon_checkpoint_round_trip);
    suite_add_tcase(s, adamw);
    tcase_set_timeout(wr, 60);
    tcase_add_loop_test(wr, fp8_writer_writes_the_quantized_master, WEFT_QUANT_FORMULA_EXACT,
                        WEFT_QUANT_FORMULA_REFERENCE + 1);
    tcase_add_test(wr, bf16_writer_rounds_to_nearest_even);
    tcase_add_test(wr, writer_refuses_missing_or_mismatched_tensors);
    suite_add_tcase(s, wr);
    tcase_add_test(api, checkpoint_round_trip_is_bit_exact);
    tcase_add_test(api, checkpoint_damage_is_refused_and_changes_nothing);
    tcase_add_test(api, argument_errors);
    tcase_add_test(api, muon_argument_errors);
    suite_add_tcase(s, api);
    return s;
}

WEFT_TEST_MAIN(optim_suite)
