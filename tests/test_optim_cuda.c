/*
 * optim/ on the GPU: the CUDA AdamW kernel against the host reference,
 * byte for byte; the STAGED and RESIDENT placements against HOST over
 * several steps (the slot ring wrapping, device and host gradients, FP32
 * and BF16); the writers into a GPU registry from the slot against
 * weft_quant_host of the master copied back; the slot-size errors. The
 * comparison with PyTorch's fused AdamW is optim_torch.sh's. Exits 77
 * without a GPU.
 */
#include "config.h"

#include "lib/gpu_skip.h"
#include "lib/optim_inputs.h"
#include "kernels/adamw.h"
#include "kernels/muon.h"
#include "lib/harness.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft/weft.h>

#define CUDA_OK(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

static void *device_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes));
    CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* The kernel and the host reference, same inputs, every byte; `offset`
 * elements into the buffers to take the unaligned path too. */
static void kernel_vs_host(uint64_t seed, size_t n, size_t offset, int bf16, const weft_adamw_hparams_t *h,
                           uint64_t t)
{
    const size_t         total = n + offset;
    float               *p = malloc(total * 4), *m = malloc(total * 4), *v = malloc(total * 4);
    float               *g = malloc(total * 4), *out = malloc(total * 4);
    uint16_t            *g16 = malloc(total * 2);
    float               *dp, *dm, *dv;
    void                *dg;
    weft_adamw_scalars_t s;
    const void          *hg;
    size_t               differ = 0;

    for (size_t i = 0; i < total; i++) {
        p[i]   = adversarial(&seed, 0);
        m[i]   = adversarial(&seed, 0) * 1e-3f;
        v[i]   = fabsf(adversarial(&seed, 0)) * 1e-6f;
        g[i]   = adversarial(&seed, 0);
        g16[i] = bf16_bits(g[i]);
    }
    dp = device_copy(p, total * 4);
    dm = device_copy(m, total * 4);
    dv = device_copy(v, total * 4);
    dg = bf16 ? device_copy(g16, total * 2) : device_copy(g, total * 4);
    hg = bf16 ? (const void *)(g16 + offset) : (const void *)(g + offset);
    weft_adamw_scalars(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, t, &s);
    ck_assert_int_eq(weft_adamw_cuda(&s, dp + offset, dm + offset, dv + offset,
                                     (const char *)dg + offset * (bf16 ? 2 : 4),
                                     bf16 ? WEFT_DTYPE_BF16 : WEFT_DTYPE_FP32, n, NULL),
                     WEFT_OK);
    weft_adamw_host(&s, p + offset, m + offset, v + offset, hg, bf16 ? WEFT_DTYPE_BF16 : WEFT_DTYPE_FP32, n);
    CUDA_OK(cudaDeviceSynchronize());
    {
        float *const host[3] = {p, m, v};
        float *const dev[3]  = {dp, dm, dv};
        for (int a = 0; a < 3; a++) {
            CUDA_OK(cudaMemcpy(out, dev[a], total * 4, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < total; i++) {
                differ += memcmp(&out[i], &host[a][i], 4) != 0;
            }
        }
    }
    ck_assert_msg(differ == 0, "%zu of %zu values differ (n %zu, offset %zu, %s, step %llu)", differ, 3 * total, n,
                  offset, bf16 ? "bf16" : "fp32", (unsigned long long)t);
    cudaFree(dp);
    cudaFree(dm);
    cudaFree(dv);
    cudaFree(dg);
    free(p);
    free(m);
    free(v);
    free(g);
    free(out);
    free(g16);
}

static const weft_adamw_hparams_t typical  = {1e-3, 0.9, 0.999, 1e-8, 0.01};
static const weft_adamw_hparams_t no_decay = {3e-4, 0.8, 0.95, 1e-6, 0.0};

START_TEST(kernel_matches_host_reference)
{
    kernel_vs_host(1, (1u << 20) + 3, 0, 0, &typical, 1);
    kernel_vs_host(2, (1u << 20) + 3, 1, 0, &typical, 7);
    kernel_vs_host(3, 100003, 0, 1, &no_decay, 2);
    kernel_vs_host(4, 100003, 3, 1, &typical, 1000);
    kernel_vs_host(5, 5, 0, 0, &typical, 123456);
}
END_TEST

/* ----------------------------------------------------------- placements */

enum { GROUPS = 2 };
static const uint32_t G_EXPERTS[GROUPS] = {5, 0};
static const uint64_t G_ROWS[GROUPS] = {96, 1}, G_COLS[GROUPS] = {130, 1000};

static uint64_t group_elems(int i)
{
    return (G_EXPERTS[i] ? G_EXPERTS[i] : 1) * G_ROWS[i] * G_COLS[i];
}

static weft_optim_h make_opt(weft_optim_placement_t placement, uint32_t slots, uint64_t slot_bytes)
{
    weft_optim_params_t p = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT | WEFT_OPTIM_FIELD_SLOT_COUNT |
                                           WEFT_OPTIM_FIELD_SLOT_BYTES,
                             .placement  = placement,
                             .slot_count = slots,
                             .slot_bytes = slot_bytes};
    weft_optim_h        opt;
    static const char  *names[GROUPS] = {"L0.experts.{E}.w1", "L0.norm"};

    ck_assert_int_eq(weft_optim_create(&p, &opt), WEFT_OK);
    for (int i = 0; i < GROUPS; i++) {
        weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_FIELD_ADAMW,
                                     .name       = names[i],
                                     .algo       = WEFT_OPTIM_ADAMW,
                                     .experts    = G_EXPERTS[i],
                                     .rows       = G_ROWS[i],
                                     .cols       = G_COLS[i],
                                     .adamw      = i == 0 ? typical : no_decay};
        ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    }
    return opt;
}

static float *state(weft_optim_h opt, int group, weft_optim_state_t which)
{
    float *d = NULL;
    ck_assert_int_eq(weft_optim_group_state(opt, (uint32_t)group, which, &d), WEFT_OK);
    return d;
}

/* Host copies of a group's three arrays, wherever they live. */
static void read_state(weft_optim_h opt, int group, float *out[3], int resident)
{
    const size_t bytes = group_elems(group) * 4;
    for (int a = 0; a < 3; a++) {
        const float *src = state(opt, group, (weft_optim_state_t)(WEFT_OPTIM_STATE_MASTER + a));
        CUDA_OK(cudaMemcpy(out[a], src, bytes, resident ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost));
    }
}

/* STAGED and RESIDENT against HOST: three steps, group 0 with FP32
 * gradients on the device, group 1 with BF16 gradients on the host
 * (STAGED) or device. Two slots for six matrices, the ring wrapping every
 * step: a slot of one expert matrix (_i 0), and of two (_i 1: batches of
 * 2, 2 and 1 matrices, one copy and one launch each). */
static const uint64_t STAGED_SLOT_BYTES[2] = {3 * 96 * 130 * 4 + 4096, 2 * 3 * 96 * 130 * 4 + 4096};

START_TEST(staged_and_resident_equal_host)
{
    weft_optim_h host = make_opt(WEFT_OPTIM_HOST, 2, 4096);
    weft_optim_h staged = make_opt(WEFT_OPTIM_STAGED, 2, STAGED_SLOT_BYTES[_i]);
    weft_optim_h resident = make_opt(WEFT_OPTIM_RESIDENT, 2, 4096);
    cudaStream_t stream;
    uint64_t     rng = 42;
    float       *g0 = malloc(group_elems(0) * 4);
    uint16_t    *g1 = malloc(group_elems(1) * 2);
    void        *dg0, *dg1;
    float       *init = malloc(group_elems(0) * 4);

    CUDA_OK(cudaStreamCreate(&stream));
    for (int i = 0; i < GROUPS; i++) {
        const size_t bytes = group_elems(i) * 4;
        for (uint64_t e = 0; e < group_elems(i); e++) {
            init[e] = rng_unit(&rng) * 0.1f;
        }
        memcpy(state(host, i, WEFT_OPTIM_STATE_MASTER), init, bytes);
        memcpy(state(staged, i, WEFT_OPTIM_STATE_MASTER), init, bytes);
        CUDA_OK(cudaMemcpy(state(resident, i, WEFT_OPTIM_STATE_MASTER), init, bytes, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaMalloc(&dg0, group_elems(0) * 4));
    CUDA_OK(cudaMalloc(&dg1, group_elems(1) * 2));
    for (int t = 0; t < 3; t++) {
        weft_optim_step_params_t sp = {.field_mask = WEFT_OPTIM_STEP_FIELD_STREAM, .stream = stream};
        weft_optim_grad_t        hg[GROUPS] = {{g0, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, {g1, WEFT_DTYPE_BF16, WEFT_MEMORY_HOST}};
        weft_optim_grad_t        sg[GROUPS] = {{dg0, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA}, {g1, WEFT_DTYPE_BF16, WEFT_MEMORY_HOST}};
        weft_optim_grad_t        rg[GROUPS] = {{dg0, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA}, {dg1, WEFT_DTYPE_BF16, WEFT_MEMORY_CUDA}};

        for (uint64_t e = 0; e < group_elems(0); e++) {
            g0[e] = rng_unit(&rng);
        }
        for (uint64_t e = 0; e < group_elems(1); e++) {
            g1[e] = bf16_bits(rng_unit(&rng) * 1e-3f);
        }
        /* The gradients land on `stream` asynchronously: the step must
         * wait for them there. */
        CUDA_OK(cudaMemcpyAsync(dg0, g0, group_elems(0) * 4, cudaMemcpyHostToDevice, stream));
        CUDA_OK(cudaMemcpyAsync(dg1, g1, group_elems(1) * 2, cudaMemcpyHostToDevice, stream));
        ck_assert_int_eq(weft_optim_step(host, hg, GROUPS, NULL), WEFT_OK);
        ck_assert_int_eq(weft_optim_step(staged, sg, GROUPS, &sp), WEFT_OK);
        ck_assert_int_eq(weft_optim_step(resident, rg, GROUPS, &sp), WEFT_OK);
        CUDA_OK(cudaStreamSynchronize(stream));
    }
    for (int i = 0; i < GROUPS; i++) {
        const size_t bytes = group_elems(i) * 4;
        float       *a[3], *b[3];
        for (int k = 0; k < 3; k++) {
            a[k] = malloc(bytes);
            b[k] = malloc(bytes);
        }
        read_state(staged, i, a, 0);
        read_state(resident, i, b, 1);
        for (int k = 0; k < 3; k++) {
            const float *h = state(host, i, (weft_optim_state_t)(WEFT_OPTIM_STATE_MASTER + k));
            ck_assert_msg(memcmp(a[k], h, bytes) == 0, "staged group %d array %d differs from host", i, k);
            ck_assert_msg(memcmp(b[k], h, bytes) == 0, "resident group %d array %d differs from host", i, k);
            free(a[k]);
            free(b[k]);
        }
    }
    {
        weft_optim_info_t info;
        ck_assert_int_eq(weft_optim_get_info(staged, &info), WEFT_OK);
        ck_assert_uint_eq(info.device_bytes, 2ull * STAGED_SLOT_BYTES[_i]);
        ck_assert_uint_eq(info.slot_count, 2);
        ck_assert_uint_eq(info.step, 3);
        ck_assert_uint_eq(info.host_bytes, 12 * (group_elems(0) + group_elems(1)));
        ck_assert_int_eq(weft_optim_get_info(resident, &info), WEFT_OK);
        ck_assert_uint_eq(info.device_bytes, 12 * (group_elems(0) + group_elems(1)));
    }
    cudaFree(dg0);
    cudaFree(dg1);
    cudaStreamDestroy(stream);
    weft_optim_destroy(host);
    weft_optim_destroy(staged);
    weft_optim_destroy(resident);
    free(g0);
    free(g1);
    free(init);
}
END_TEST

/* A checkpoint is the optimizer's state wherever it lives: saved from
 * STAGED, restored into HOST and RESIDENT, the next step is the same. */
START_TEST(checkpoint_crosses_placements)
{
    weft_optim_h staged = make_opt(WEFT_OPTIM_STAGED, 3, 3 * 96 * 130 * 4 + 4096);
    weft_optim_h host = make_opt(WEFT_OPTIM_HOST, 2, 4096);
    weft_optim_h resident = make_opt(WEFT_OPTIM_RESIDENT, 2, 4096);
    float       *g0 = malloc(group_elems(0) * 4), *g1 = malloc(group_elems(1) * 4);
    void        *dg0, *dg1;
    uint64_t     rng = 9;
    char         path[128];

    snprintf(path, sizeof(path), "/tmp/weft-test-optim-cuda-%d.ckpt", (int)getpid());
    for (int i = 0; i < GROUPS; i++) {
        float *m = state(staged, i, WEFT_OPTIM_STATE_MASTER);
        for (uint64_t e = 0; e < group_elems(i); e++) {
            m[e] = rng_unit(&rng);
        }
    }
    for (uint64_t e = 0; e < group_elems(0); e++) {
        g0[e] = rng_unit(&rng);
    }
    for (uint64_t e = 0; e < group_elems(1); e++) {
        g1[e] = rng_unit(&rng);
    }
    dg0 = device_copy(g0, group_elems(0) * 4);
    dg1 = device_copy(g1, group_elems(1) * 4);
    {
        weft_optim_grad_t dg[GROUPS] = {{dg0, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA}, {dg1, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA}};
        weft_optim_grad_t hg[GROUPS] = {{g0, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, {g1, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}};

        ck_assert_int_eq(weft_optim_step(staged, dg, GROUPS, NULL), WEFT_OK);
        ck_assert_int_eq(weft_optim_step(staged, dg, GROUPS, NULL), WEFT_OK);
        CUDA_OK(cudaDeviceSynchronize());
        ck_assert_int_eq(weft_optim_save(staged, path), WEFT_OK);
        ck_assert_int_eq(weft_optim_restore(host, path), WEFT_OK);
        ck_assert_int_eq(weft_optim_restore(resident, path), WEFT_OK);
        ck_assert_int_eq(weft_optim_step(staged, dg, GROUPS, NULL), WEFT_OK);
        ck_assert_int_eq(weft_optim_step(resident, dg, GROUPS, NULL), WEFT_OK);
        ck_assert_int_eq(weft_optim_step(host, hg, GROUPS, NULL), WEFT_OK);
        CUDA_OK(cudaDeviceSynchronize());
    }
    for (int i = 0; i < GROUPS; i++) {
        const size_t bytes = group_elems(i) * 4;
        float       *r[3];
        for (int k = 0; k < 3; k++) {
            r[k] = malloc(bytes);
        }
        read_state(resident, i, r, 1);
        for (int k = 0; k < 3; k++) {
            const float *h = state(host, i, (weft_optim_state_t)(WEFT_OPTIM_STATE_MASTER + k));
            const float *st = state(staged, i, (weft_optim_state_t)(WEFT_OPTIM_STATE_MASTER + k));
            ck_assert_msg(memcmp(h, st, bytes) == 0, "host after restore differs, group %d array %d", i, k);
            ck_assert_msg(memcmp(r[k], st, bytes) == 0, "resident after restore differs, group %d array %d", i, k);
            free(r[k]);
        }
    }
    unlink(path);
    cudaFree(dg0);
    cudaFree(dg1);
    free(g0);
    free(g1);
    weft_optim_destroy(staged);
    weft_optim_destroy(host);
    weft_optim_destroy(resident);
}
END_TEST

/* Muon on the GPU (BF16 Newton–Schulz) against the host (FP32): RESIDENT
 * (every matrix in one batch) and STAGED (a matrix a slot), wide and tall
 * matrices, two steps. The momentum is element-wise and the same bytes;
 * the update within 5e-2 (relative Frobenius): five BF16 iterations land
 * 2-3 % from FP32's, while a wrong coefficient, transpose or scale, or an
 * iteration too few, is 30 % and more away. (Against the reference Muon
 * in BF16 the bound is 2e-2: optim_torch.py.) */
static void muon_gpu_vs_host(uint64_t rows, uint64_t cols, uint64_t slot_matrices, weft_muon_rounding_t rounding)
{
    const uint32_t          E = 4;
    const uint64_t          n = rows * cols;
    weft_muon_hparams_t     h = {.lr = 0.02, .momentum = 0.95, .weight_decay = 0.01, .nesterov = 1, .ns_steps = 5,
                                 .scale = WEFT_MUON_SCALE_SHAPE, .schedule = WEFT_MUON_NS_SIMPLE};
    weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_FIELD_MUON | WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING,
                                 .name = "L0.experts.{E}.w2", .algo = WEFT_OPTIM_MUON, .experts = E, .rows = rows,
                                 .cols = cols, .muon = h, .muon_rounding = rounding};
    weft_optim_h            opt[3];
    const weft_optim_placement_t where[3] = {WEFT_OPTIM_HOST, WEFT_OPTIM_RESIDENT, WEFT_OPTIM_STAGED};
    float                  *g = malloc(E * n * 4), *init = malloc(E * n * 4), *out[3], *mom[3];
    void                   *dg;
    uint64_t                rng = 31 + rows;

    for (uint64_t i = 0; i < E * n; i++) {
        init[i] = rng_unit(&rng) * 0.05f;
    }
    for (int k = 0; k < 3; k++) {
        weft_optim_params_t p = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT | WEFT_OPTIM_FIELD_SLOT_BYTES,
                                 .placement = where[k], .slot_bytes = slot_matrices * 8 * n + 4096};
        float *master;
        ck_assert_int_eq(weft_optim_create(&p, &opt[k]), WEFT_OK);
        ck_assert_int_eq(weft_optim_add_group(opt[k], &d, NULL), WEFT_OK);
        master = state(opt[k], 0, WEFT_OPTIM_STATE_MASTER);
        CUDA_OK(cudaMemcpy(master, init, E * n * 4, cudaMemcpyDefault));
        out[k] = malloc(E * n * 4);
        mom[k] = malloc(E * n * 4);
    }
    CUDA_OK(cudaMalloc(&dg, E * n * 4));
    for (int step = 0; step < 2; step++) {
        for (uint64_t i = 0; i < E * n; i++) {
            g[i] = rng_unit(&rng) + 0.3f * (float)((i / cols) % 5);
        }
        CUDA_OK(cudaMemcpy(dg, g, E * n * 4, cudaMemcpyHostToDevice));
        for (int k = 0; k < 3; k++) {
            float                  *master = state(opt[k], 0, WEFT_OPTIM_STATE_MASTER);
            weft_optim_grad_t       gr = k == 0 ? (weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}
                                                : (weft_optim_grad_t){dg, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA};
            CUDA_OK(cudaMemcpy(init, master, E * n * 4, cudaMemcpyDefault)); /* θ before */
            ck_assert_int_eq(weft_optim_step(opt[k], &gr, 1, NULL), WEFT_OK);
            CUDA_OK(cudaDeviceSynchronize());
            CUDA_OK(cudaMemcpy(out[k], master, E * n * 4, cudaMemcpyDefault));
            CUDA_OK(cudaMemcpy(mom[k], state(opt[k], 0, WEFT_OPTIM_STATE_MOMENTUM), E * n * 4, cudaMemcpyDefault));
            /* out: the update direction this step, recovered from θ. */
            for (uint64_t i = 0; i < E * n; i++) {
                out[k][i] = (float)(((double)init[i] * (1 - h.lr * h.weight_decay) - out[k][i]) / h.lr);
            }
        }
        for (int k = 1; k < 3; k++) {
            ck_assert_msg(memcmp(mom[k], mom[0], E * n * 4) == 0, "momentum of placement %d differs from the host's",
                          (int)where[k]);
            for (uint32_t e = 0; e < E; e++) {
                double err = 0, ref = 0;
                for (uint64_t i = e * n; i < (e + 1) * n; i++) {
                    err += ((double)out[k][i] - out[0][i]) * ((double)out[k][i] - out[0][i]);
                    ref += (double)out[0][i] * out[0][i];
                }
                ck_assert_msg(sqrt(err / ref) <= 5e-2, "%llux%llu rounding %d placement %d expert %u step %d: "
                              "%.3g off", (unsigned long long)rows, (unsigned long long)cols, (int)rounding,
                              (int)where[k], e, step, sqrt(err / ref));
            }
        }
        /* The placements continue from their own masters: all three moved
         * the same way, so they stay close. */
    }
    for (int k = 0; k < 3; k++) {
        weft_optim_destroy(opt[k]);
        free(out[k]);
        free(mom[k]);
    }
    cudaFree(dg);
    free(g);
    free(init);
}

/* _i: the weft_muon_rounding_t (EAGER, FUSED). */
START_TEST(muon_gpu_close_to_host)
{
    const weft_muon_rounding_t rounding = (weft_muon_rounding_t)_i;

    muon_gpu_vs_host(96, 160, 1, rounding);
    muon_gpu_vs_host(160, 96, 3, rounding); /* staged batches of 3 and 1 */
    /* X·Xᵀ in 2 × 2 blocks of 256 rows, the three lower ones multiplied */
    ck_assert_int_eq(weft_muon_gram_blocks(512), 2);
    muon_gpu_vs_host(640, 512, 2, rounding);
}
END_TEST

/* One RESIDENT Muon optimizer of a 4 × 128 × 192 stack, masters from
 * `init` (device copies are the optimizer's; masters and momentum read
 * back with read_muon); rounding 0 leaves the group's rounding unset. */
static weft_optim_h muon_resident(weft_muon_rounding_t rounding, const float *init, size_t n)
{
    weft_optim_params_t     p = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT, .placement = WEFT_OPTIM_RESIDENT};
    weft_optim_group_desc_t d = {.field_mask = rounding != 0 ? WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING : 0,
                                 .name = "L0.experts.{E}.w1",
                                 .algo = WEFT_OPTIM_MUON, .experts = 4, .rows = 128, .cols = 192,
                                 .muon_rounding = rounding};
    weft_optim_h            opt;

    ck_assert_int_eq(weft_optim_create(&p, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    CUDA_OK(cudaMemcpy(state(opt, 0, WEFT_OPTIM_STATE_MASTER), init, n * 4, cudaMemcpyHostToDevice));
    return opt;
}

static void read_muon(weft_optim_h opt, float *out, size_t n)
{
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(out, state(opt, 0, WEFT_OPTIM_STATE_MASTER), n * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(out + n, state(opt, 0, WEFT_OPTIM_STATE_MOMENTUM), n * 4, cudaMemcpyDeviceToHost));
}

/* The group's rounding is part of its checkpoint: an optimizer created
 * EAGER that restores a FUSED one's file steps as FUSED (the same bytes),
 * where an EAGER step from the same state gives other bytes. */
START_TEST(muon_rounding_survives_checkpoint)
{
    const size_t      n = 4 * 128 * 192;
    float            *init = malloc(n * 4), *g = malloc(n * 4), *out[3];
    void             *dg;
    uint64_t          rng = 77;
    char              path[128];
    weft_optim_h      fused, restored, eager;
    weft_optim_grad_t gr;

    for (size_t i = 0; i < n; i++) {
        init[i] = rng_unit(&rng) * 0.05f;
        g[i]    = rng_unit(&rng) + 0.3f * (float)((i / 192) % 5);
    }
    dg = device_copy(g, n * 4);
    gr = (weft_optim_grad_t){dg, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA};
    snprintf(path, sizeof(path), "/tmp/weft-test-optim-cuda-rounding-%d.ckpt", (int)getpid());
    fused    = muon_resident(WEFT_MUON_ROUNDING_FUSED, init, n);
    restored = muon_resident(WEFT_MUON_ROUNDING_EAGER, init, n);
    eager    = muon_resident(WEFT_MUON_ROUNDING_EAGER, init, n);
    ck_assert_int_eq(weft_optim_step(fused, &gr, 1, NULL), WEFT_OK);
    CUDA_OK(cudaDeviceSynchronize());
    ck_assert_int_eq(weft_optim_save(fused, path), WEFT_OK);
    ck_assert_int_eq(weft_optim_restore(restored, path), WEFT_OK);
    ck_assert_int_eq(weft_optim_restore(eager, path), WEFT_OK);
    ck_assert_int_eq(weft_optim_group_set_muon(eager, 0, &(weft_muon_hparams_t){.lr = 0.02, .momentum = 0.95,
                                                                                .nesterov = 1, .ns_steps = 5,
                                                                                .scale = WEFT_MUON_SCALE_SHAPE,
                                                                                .schedule = WEFT_MUON_NS_SIMPLE}),
                     WEFT_OK); /* set_muon keeps the rounding: still FUSED */
    for (int k = 0; k < 3; k++) {
        out[k] = malloc(2 * n * 4);
    }
    ck_assert_int_eq(weft_optim_step(fused, &gr, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_step(restored, &gr, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_step(eager, &gr, 1, NULL), WEFT_OK);
    read_muon(fused, out[0], n);
    read_muon(restored, out[1], n);
    read_muon(eager, out[2], n);
    ck_assert_msg(memcmp(out[0], out[1], 2 * n * 4) == 0, "the restored optimizer stepped otherwise");
    ck_assert_msg(memcmp(out[0], out[2], 2 * n * 4) == 0, "set_muon changed the restored rounding");
    weft_optim_destroy(eager);
    /* An optimizer that stays EAGER from the same file's state differs. */
    eager = muon_resident(WEFT_MUON_ROUNDING_EAGER, init, n);
    ck_assert_int_eq(weft_optim_step(eager, &gr, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_step(eager, &gr, 1, NULL), WEFT_OK);
    read_muon(eager, out[2], n);
    ck_assert_msg(memcmp(out[0], out[2], n * 4) != 0, "EAGER and FUSED gave the same masters");
    weft_optim_destroy(eager);
    /* A group that does not choose is FUSED: the same bytes as `fused`. */
    eager = muon_resident((weft_muon_rounding_t)0, init, n);
    ck_assert_int_eq(weft_optim_step(eager, &gr, 1, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_step(eager, &gr, 1, NULL), WEFT_OK);
    read_muon(eager, out[2], n);
    ck_assert_msg(memcmp(out[0], out[2], 2 * n * 4) == 0, "the default rounding is not FUSED");
    unlink(path);
    weft_optim_destroy(fused);
    weft_optim_destroy(restored);
    weft_optim_destroy(eager);
    for (int k = 0; k < 3; k++) {
        free(out[k]);
    }
    cudaFree(dg);
    free(init);
    free(g);
}
END_TEST

START_TEST(slot_too_small_is_an_error)
{
    weft_optim_params_t     p = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT | WEFT_OPTIM_FIELD_SLOT_BYTES,
                                 .placement  = WEFT_OPTIM_STAGED,
                                 .slot_bytes = 3 * 4096 * 4};
    weft_optim_group_desc_t d = {.name = "big", .algo = WEFT_OPTIM_ADAMW, .experts = 2, .rows = 64, .cols = 65};
    weft_optim_h            opt;
    float                  *g;

    ck_assert_int_eq(weft_optim_create(&p, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_ERR_INVALID_PARAM); /* 64 × 65 > 4096 */
    d.cols = 64;
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK); /* fits exactly */
    g = calloc(2 * 64 * 64, 4);
    /* A host gradient needs room beside the state: refused before any work. */
    ck_assert_int_eq(weft_optim_step(opt, &(weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_HOST}, 1, NULL),
                     WEFT_ERR_INVALID_PARAM);
    /* Host memory announced as device memory is refused too. */
    ck_assert_int_eq(weft_optim_step(opt, &(weft_optim_grad_t){g, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA}, 1, NULL),
                     WEFT_ERR_INVALID_PARAM);
    free(g);
    weft_optim_destroy(opt);
}
END_TEST

/* ------------------------------------------------------------- writers */

static weft_registry_h gpu_registry(const char *name, uint32_t experts, uint64_t rows, uint64_t cols, int bf16)
{
    weft_registry_params_t rp = {.field_mask = WEFT_REGISTRY_FIELD_MEMORY, .memory = WEFT_MEMORY_CUDA, .device = 0};
    weft_registry_h        reg;
    char                   tname[WEFT_TENSOR_NAME_MAX];

    weft_registry_unlink(name);
    ck_assert_int_eq(weft_registry_create(name, &rp, &reg), WEFT_OK);
    for (uint32_t e = 0; e < experts; e++) {
        weft_tensor_desc_t w = {.name = tname, .layer = 0, .expert = (int32_t)e, .role = WEFT_ROLE_W,
                                .dtype = bf16 ? WEFT_DTYPE_BF16 : WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                .shape = {rows, cols}};
        snprintf(tname, sizeof(tname), "L0.experts.%u.w1.weight", e);
        ck_assert_int_eq(weft_registry_declare(reg, &w, NULL), WEFT_OK);
        if (!bf16) {
            weft_tensor_desc_t wt = w, sc = w;
            snprintf(tname, sizeof(tname), "L0.experts.%u.w1.weight_t", e);
            wt.role     = WEFT_ROLE_WT;
            wt.shape[0] = cols;
            wt.shape[1] = rows;
            ck_assert_int_eq(weft_registry_declare(reg, &wt, NULL), WEFT_OK);
            snprintf(tname, sizeof(tname), "L0.experts.%u.w1.weight_scale_inv", e);
            sc.role     = WEFT_ROLE_SCALE;
            sc.dtype    = WEFT_DTYPE_FP32;
            sc.shape[0] = (rows + 127) / 128;
            sc.shape[1] = (cols + 127) / 128;
            ck_assert_int_eq(weft_registry_declare(reg, &sc, NULL), WEFT_OK);
        }
    }
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    return reg;
}

static void read_tensor(weft_registry_h reg, const char *name, void *out, size_t bytes)
{
    uint32_t index;
    void    *data;
    ck_assert_int_eq(weft_registry_lookup(reg, name, &index), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_tensor(reg, index, &data), WEFT_OK);
    CUDA_OK(cudaMemcpy(out, data, bytes, cudaMemcpyDeviceToHost));
}

/* From the slot into a GPU registry: what the writer wrote equals the
 * host FP8 writer (or BF16 rounding) of the master that came back. */
static void writer_from_slot(int bf16)
{
    const uint32_t             E = 4;
    const uint64_t             rows = 256, cols = 384, n = rows * cols;
    char                       reg_name[64], tname[WEFT_TENSOR_NAME_MAX];
    weft_optim_params_t        p = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT | WEFT_OPTIM_FIELD_SLOT_COUNT |
                                                  WEFT_OPTIM_FIELD_SLOT_BYTES,
                                    .placement  = WEFT_OPTIM_STAGED,
                                    .slot_count = 3,
                                    .slot_bytes = 12 * n};
    weft_optim_group_desc_t    d = {.name = "L0.experts.{E}.w1", .algo = WEFT_OPTIM_ADAMW, .experts = E,
                                    .rows = rows, .cols = cols};
    weft_optim_writer_params_t wp = {.field_mask = WEFT_OPTIM_WRITER_FIELD_FORMAT,
                                     .format = bf16 ? WEFT_OPTIM_WRITE_BF16 : WEFT_OPTIM_WRITE_FP8};
    weft_optim_h               opt;
    weft_optim_writer_h        w;
    weft_registry_h            reg;
    float                     *master, *g;
    void                      *dg;
    uint8_t                   *got = malloc(2 * n), *want = malloc(2 * n), *want_t = malloc(n);
    float                      gs[2 * 3], ws[2 * 3];
    uint64_t                   rng = 77;

    snprintf(reg_name, sizeof(reg_name), "test-optim-cuda-w%d-%d", bf16, (int)getpid());
    reg = gpu_registry(reg_name, E, rows, cols, bf16);
    ck_assert_int_eq(weft_optim_create(&p, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_writer_create(opt, reg, &wp, &w), WEFT_OK);
    master = state(opt, 0, WEFT_OPTIM_STATE_MASTER);
    g      = malloc(E * n * 4);
    for (uint64_t i = 0; i < E * n; i++) {
        master[i] = rng_unit(&rng) * 0.05f;
        g[i]      = rng_unit(&rng);
    }
    dg = device_copy(g, E * n * 4);
    for (int step = 0; step < 2; step++) {
        weft_optim_step_params_t sp = {.field_mask = WEFT_OPTIM_STEP_FIELD_WRITER, .writer = weft_optim_writer_write,
                                       .writer_arg = w};
        ck_assert_int_eq(weft_registry_write_begin(reg, 0, NULL), WEFT_OK);
        ck_assert_int_eq(weft_optim_step(opt, &(weft_optim_grad_t){dg, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA}, 1, &sp),
                         WEFT_OK);
        CUDA_OK(cudaDeviceSynchronize());
        for (uint32_t e = 0; e < E; e++) {
            const float *x = master + e * n;
            snprintf(tname, sizeof(tname), "L0.experts.%u.w1.weight", e);
            if (bf16) {
                uint16_t *want16 = (uint16_t *)want;
                for (uint64_t i = 0; i < n; i++) {
                    want16[i] = bf16_bits(x[i]);
                }
                read_tensor(reg, tname, got, 2 * n);
                ck_assert_int_eq(memcmp(got, want, 2 * n), 0);
                continue;
            }
            weft_quant_matrix_t qm = {.x = x, .w = want, .wt = want_t, .scale_inv = ws};
            ck_assert_int_eq(weft_quant_host(NULL, WEFT_DTYPE_FP32, rows, cols, &qm, 1), WEFT_OK);
            read_tensor(reg, tname, got, n);
            ck_assert_msg(memcmp(got, want, n) == 0, "W of expert %u, step %d", e, step);
            snprintf(tname, sizeof(tname), "L0.experts.%u.w1.weight_t", e);
            read_tensor(reg, tname, got, n);
            ck_assert_msg(memcmp(got, want_t, n) == 0, "WT of expert %u, step %d", e, step);
            snprintf(tname, sizeof(tname), "L0.experts.%u.w1.weight_scale_inv", e);
            read_tensor(reg, tname, gs, sizeof(gs));
            ck_assert_msg(memcmp(gs, ws, sizeof(gs)) == 0, "scale_inv of expert %u, step %d", e, step);
        }
        ck_assert_int_eq(weft_registry_publish(reg, 0, NULL), WEFT_OK);
    }
    cudaFree(dg);
    weft_optim_writer_destroy(w);
    weft_optim_destroy(opt);
    weft_registry_close(reg);
    weft_registry_unlink(reg_name);
    free(g);
    free(got);
    free(want);
    free(want_t);
}

START_TEST(fp8_writer_from_the_slot)
{
    writer_from_slot(0);
}
END_TEST

START_TEST(bf16_writer_from_the_slot)
{
    writer_from_slot(1);
}
END_TEST

/* A host registry cannot take the GPU's matrices. */
START_TEST(writer_refuses_host_registry_for_gpu_optimizer)
{
    weft_optim_params_t     p = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT, .placement = WEFT_OPTIM_RESIDENT};
    weft_optim_group_desc_t d = {.name = "x", .algo = WEFT_OPTIM_ADAMW, .rows = 4, .cols = 4};
    weft_tensor_desc_t      t = {.name = "x.weight", .layer = -1, .expert = -1, .role = WEFT_ROLE_W,
                                 .dtype = WEFT_DTYPE_BF16, .ndim = 2, .shape = {4, 4}};
    weft_optim_writer_params_t wp = {.field_mask = WEFT_OPTIM_WRITER_FIELD_FORMAT, .format = WEFT_OPTIM_WRITE_BF16};
    weft_optim_h            opt;
    weft_optim_writer_h     w;
    weft_registry_h         reg;
    char                    name[64];

    snprintf(name, sizeof(name), "test-optim-cuda-hostreg-%d", (int)getpid());
    weft_registry_unlink(name);
    ck_assert_int_eq(weft_registry_create(name, NULL, &reg), WEFT_OK);
    ck_assert_int_eq(weft_registry_declare(reg, &t, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    ck_assert_int_eq(weft_optim_create(&p, &opt), WEFT_OK);
    ck_assert_int_eq(weft_optim_add_group(opt, &d, NULL), WEFT_OK);
    ck_assert_int_eq(weft_optim_writer_create(opt, reg, &wp, &w), WEFT_ERR_INVALID_PARAM);
    weft_optim_destroy(opt);
    weft_registry_close(reg);
    weft_registry_unlink(name);
}
END_TEST

static Suite *optim_cuda_suite(void)
{
    Suite *s;
    TCase *tc;

    if (weft_test_gpu_count() == 0) {
        return NULL;
    }
    s  = suite_create("optim_cuda");
    tc = tcase_create("optim");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, kernel_matches_host_reference);
    tcase_add_loop_test(tc, staged_and_resident_equal_host, 0, 2);
    tcase_add_test(tc, checkpoint_crosses_placements);
    tcase_add_loop_test(tc, muon_gpu_close_to_host, WEFT_MUON_ROUNDING_EAGER, WEFT_MUON_ROUNDING_FUSED + 1);
    tcase_add_test(tc, muon_rounding_survives_checkpoint);
    tcase_add_test(tc, slot_too_small_is_an_error);
    tcase_add_test(tc, fp8_writer_from_the_slot);
    tcase_add_test(tc, bf16_writer_from_the_slot);
    tcase_add_test(tc, writer_refuses_host_registry_for_gpu_optimizer);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(optim_cuda_suite)
