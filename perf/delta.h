/*
 * weft-perf delta's pieces: the options, the optimizer that makes its
 * versions (real steps on deterministic gradients, so that every run of a
 * case, and every process of one, steps through the same versions), and
 * the rate-limited link measurement (delta_link.c): the same versions
 * served by a ucx server in one network namespace to a consumer in
 * another, whole and as deltas, over a link held to a NIC-like rate.
 */
#ifndef WEFT_PERF_DELTA_H
#define WEFT_PERF_DELTA_H

#include "lib/args.h"

#include <stdint.h>
#include <weft/weft.h>

#define MAX_LRS 4

typedef struct delta_options {
    uint64_t experts, rows, cols, steps, warmup, threads;
    uint64_t muon_experts, muon_rows, muon_cols;
    double   lrs[MAX_LRS];
    int      lr_count, adamw, muon, json;
    int      gpu;      /* --gpu: the GPU codec on the same versions (delta_gpu.c) */
    const char *link; /* --link RATE (tc's syntax): the rate-limited measurement; NULL: none */
    int         link_gpu; /* --link-gpu: its registry and views in GPU 0's memory */
    weft_optim_placement_t placement; /* --placement: the optimizer's (HOST or STAGED, on GPU 0) */
    /* Hidden: the processes of the link measurement (delta_link.c). */
    const char *role, *registry, *listen, *connect, *token;
    int         role_muon, role_gpu;
    double      role_lr;
} delta_options_t;

double delta_now_s(void);

/* n normal values of deviation sigma from seed (the same on every run). */
void delta_fill_normal(float *x, uint64_t n, uint64_t seed, float sigma);

/* The placements --placement takes, by name (perf_arg_word's table). */
extern const perf_arg_word_t delta_placements[];

/* A placement's name in that table, for the output. */
const char *delta_placement_name(weft_optim_placement_t placement);

/*
 * The optimizer of a case (one group of `experts` rows×cols matrices,
 * AdamW or Muon at lr, o->placement), its masters ~N(0, 0.02), after
 * o->warmup steps; *master points at them (host memory: pinned where
 * STAGED). 0, or -1 (said why).
 */
int delta_optim_make(const delta_options_t *o, weft_optim_algo_t algo, double lr, uint64_t experts, uint64_t rows,
                     uint64_t cols, float *grad, weft_optim_h *opt, float **master);

/* Step s of a case (after the warm-up), its gradient into grad; returns
 * once the masters hold the step (a STAGED step is waited for). 0 or -1. */
int delta_optim_step(const delta_options_t *o, weft_optim_h opt, float *grad, uint64_t n, uint64_t s);

/* One case of the host codec, and of the GPU codec with --gpu. */
typedef struct delta_case_result {
    double   changed_w;      /* fraction of W's bytes that changed, over the steps */
    /* --gpu: medians over the steps, and the checks summed (gpu_ran: 0
     * not asked, 1 measured, 77 skipped) */
    double   gpu_encode_s, gpu_apply_s, gpu_copy_s, gpu_encode_stored_s;
    double   gpu_encode_paired_s, gpu_apply_paired_s; /* WT patched by W's delta (delta_gpu.h) */
    uint64_t gpu_wire_paired_bytes;                   /* summed over the steps, as wire_bytes */
    uint64_t gpu_mismatched, gpu_wrong;
    int      gpu_ran;
    double   wire_ratio;     /* delta version bytes / full version bytes, as the transports send them */
    uint64_t full_bytes, wire_bytes, tensors_whole;
    uint64_t wire_per_tensor_bytes; /* had every tensor its own delta (WT's not W's) */
    double   encode_s, apply_s, copy_s; /* medians over the steps */
    uint64_t wrong_bytes;
} delta_case_result_t;

/*
 * The host codec on a case: AdamW or Muon at lr on `experts` rows×cols
 * matrices, o->steps versions after the first, each sent as a delta into
 * a copy and checked; with o->gpu also the GPU codec (delta_gpu_measure).
 * 0 and *res (its wrong bytes and mismatches counted, not failed on);
 * -1 when a step, an allocation or a codec call failed (said why).
 */
int delta_host_case(const delta_options_t *o, weft_optim_algo_t algo, double lr, uint64_t experts, uint64_t rows,
                    uint64_t cols, delta_case_result_t *res);

/* The link measurement's result for one case. */
typedef struct delta_link_result {
    double   full_s, delta_s;    /* median update time (publish → acknowledged), whole and as deltas */
    uint64_t versions;           /* measured in each mode */
    uint64_t deltas_sent;        /* of those, in the delta run, that went as deltas */
    uint64_t delta_bytes, full_bytes; /* the delta run's deltas' bytes, and those versions' whole */
    uint64_t wrong_bytes;        /* the consumer's views against the last version, both runs */
    char     note[512];          /* why it failed, or "" */
} delta_link_result_t;

/*
 * Runs the case over the rate-limited link: network namespaces, tc, a
 * trainer process and a consumer process, WEFT_DELTA=off then auto.
 * 0 and *res; 77 when this machine cannot (not root, no ip or tc: why in
 * res->note); -1 when a run failed (res->note).
 */
int delta_link_case(const delta_options_t *o, weft_optim_algo_t algo, double lr, uint64_t experts, uint64_t rows,
                    uint64_t cols, delta_link_result_t *res);

/* The GPU codec on one version's tensors (delta_gpu.c). */
typedef struct delta_gpu_result {
    double   encode_s, apply_s, copy_s; /* medians of a few repetitions: the batch encode, the batch apply
                                         * (whole tensors copied), the whole version D2D */
    double   encode_stored_s;           /* the encode given the checksums a registry stores (not summed) */
    /* The same with WT patched by W's delta, transposed: only W and the
     * scales encoded (given their checksums), WT's views patched from W's
     * deltas; wire_paired_bytes what crosses then. */
    double   encode_paired_s, apply_paired_s;
    uint64_t wire_paired_bytes;
    uint64_t full_bytes, wire_bytes;    /* the version, and its deltas (or whole tensors) */
    uint64_t mismatched_deltas;         /* GPU deltas not byte for byte the host encoder's */
    uint64_t wrong_bytes;               /* the applied copy against the newer version */
    char     note[256];                 /* why it could not run, or "" */
} delta_gpu_result_t;

/*
 * Measures and checks the GPU codec on `count` tensors, old_t[i] → new_t[i]
 * (host memory, bytes[i] each), adding its mismatches and wrong bytes to
 * *res and setting its times. The tensors are experts' W, WT and scales
 * in turn (count a multiple of 3), W [rows, cols]: the paired case
 * patches each WT with its W's delta. 0; 77 without CUDA or a GPU
 * (res->note says which); -1 when a CUDA call failed (res->note).
 */
int delta_gpu_measure(const uint8_t *const *old_t, const uint8_t *const *new_t, const uint64_t *bytes, uint32_t count,
                      uint64_t rows, uint64_t cols, delta_gpu_result_t *res);

/* The hidden --role trainer or consumer: the process's exit status. */
int delta_link_role(const delta_options_t *o);

#endif
