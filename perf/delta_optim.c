/* weft-perf delta's optimizer: the steps that make its versions (delta.h). */
#include "config.h"

#include "delta.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

double delta_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64* and Box-Muller: reproducible normal values. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

void delta_fill_normal(float *x, uint64_t n, uint64_t seed, float sigma)
{
    for (uint64_t i = 0; i < n; i += 2) {
        const double u1 = ((double)(rng_next(&seed) >> 11) + 1.0) / 9007199254740993.0;
        const double u2 = (double)(rng_next(&seed) >> 11) / 9007199254740992.0;
        const double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(sigma * r * cos(6.283185307179586 * u2));
        if (i + 1 < n) {
            x[i + 1] = (float)(sigma * r * sin(6.283185307179586 * u2));
        }
    }
}

const perf_arg_word_t delta_placements[] = {{"host", WEFT_OPTIM_HOST}, {"staged", WEFT_OPTIM_STAGED}, {NULL, 0}};

const char *delta_placement_name(weft_optim_placement_t placement)
{
    for (const perf_arg_word_t *w = delta_placements; w->name != NULL; w++) {
        if (w->value == (int)placement) {
            return w->name;
        }
    }
    return "?";
}

/* Runs one step on grad (host memory) and, where the placement runs it
 * on the GPU (asynchronously, on the legacy default stream), waits for
 * it: the masters are read next, and grad is refilled. */
static int step_once(const delta_options_t *o, weft_optim_h opt, const float *grad)
{
    const weft_optim_grad_t g = {.data = grad, .dtype = WEFT_DTYPE_FP32, .memory = WEFT_MEMORY_HOST};
    weft_status_t           status = weft_optim_step(opt, &g, 1, NULL);

#ifdef HAVE_CUDA
    if (status == WEFT_OK && o->placement != WEFT_OPTIM_HOST) {
        const cudaError_t err = cudaStreamSynchronize(NULL);

        if (err != cudaSuccess) {
            fprintf(stderr, "weft-perf delta: the step's stream: %s\n", cudaGetErrorString(err));
            return -1;
        }
    }
#endif
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf delta: a %s step failed: %s\n", delta_placement_name(o->placement),
                weft_status_string(status));
        return -1;
    }
    return 0;
}

int delta_optim_make(const delta_options_t *o, weft_optim_algo_t algo, double lr, uint64_t experts, uint64_t rows,
                     uint64_t cols, float *grad, weft_optim_h *opt, float **master)
{
    const uint64_t          n = experts * rows * cols;
    weft_optim_params_t     op = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT | (o->threads ? WEFT_OPTIM_FIELD_THREADS : 0),
                                  .placement = o->placement, .threads = (uint32_t)o->threads};
    weft_status_t           status;
    weft_optim_group_desc_t d = {.name = "experts.{E}", .algo = algo, .experts = (uint32_t)experts, .rows = rows,
                                 .cols = cols};

    *opt = NULL;
    if (algo == WEFT_OPTIM_ADAMW) {
        d.field_mask = WEFT_OPTIM_GROUP_FIELD_ADAMW;
        d.adamw = (weft_adamw_hparams_t){lr, 0.9, 0.999, 1e-8, 0.01};
    } else {
        d.field_mask = WEFT_OPTIM_GROUP_FIELD_MUON;
        d.muon = (weft_muon_hparams_t){.lr = lr, .momentum = 0.95, .weight_decay = 0.01, .nesterov = 1,
                                       .ns_steps = 5, .scale = WEFT_MUON_SCALE_MATCH_ADAMW,
                                       .schedule = WEFT_MUON_NS_SIMPLE};
    }
    if ((status = weft_optim_create(&op, opt)) != WEFT_OK || (status = weft_optim_add_group(*opt, &d, NULL)) != WEFT_OK ||
        (status = weft_optim_group_state(*opt, 0, WEFT_OPTIM_STATE_MASTER, master)) != WEFT_OK) {
        fprintf(stderr, "weft-perf delta: cannot set up the optimizer (%s placement): %s\n",
                delta_placement_name(o->placement), weft_status_string(status));
        weft_optim_destroy(*opt);
        *opt = NULL;
        return -1;
    }
    delta_fill_normal(*master, n, 1, 0.02f);
    for (uint64_t s = 0; s < o->warmup; s++) {
        delta_fill_normal(grad, n, 100000 + s, 1e-2f);
        if (step_once(o, *opt, grad) != 0) {
            fprintf(stderr, "weft-perf delta: a warm-up step failed\n");
            weft_optim_destroy(*opt);
            *opt = NULL;
            return -1;
        }
    }
    return 0;
}

int delta_optim_step(const delta_options_t *o, weft_optim_h opt, float *grad, uint64_t n, uint64_t s)
{
    delta_fill_normal(grad, n, 1000 + s, 1e-2f);
    return step_once(o, opt, grad);
}
