/*
 * Staged optimizers: the producers of the versions libweft moves.
 *
 * A trainer keeps the FP32 master weights and the optimizer state of every
 * parameter in pinned host memory (its GPU is shared with a colocated
 * rollout engine). Each step streams them through a few GPU slots, whole
 * matrices only (a slot carries as many consecutive matrices of one group
 * as fit in it; Muon orthogonalizes them in one batch):
 *
 *   copy in (master, state) ──► update on the GPU ──► writer(matrix) ──► copy out
 *        slot k+1                     slot k           (FP8 into the       slot k−1
 *                                                       registry version)
 *
 * the three on separate streams, ordered by events. The writer callback
 * receives each updated FP32 matrix while it is still in its slot; a slot
 * is reused only after the writer's work on it and the copy out are done.
 *
 *   weft_optim_create(params)                      placement: host, staged or resident
 *   weft_optim_add_group(desc) × N                 [E, rows, cols] stacks, plain tensors
 *   weft_optim_group_state(MASTER) → initial weights
 *   weft_optim_writer_create(opt, registry)        FP8 (W, WT, scale_inv) or BF16
 *   loop:
 *     weft_registry_write_begin()
 *     weft_optim_step(grads, writer)
 *     cudaStreamSynchronize(stream)                GPU placements: the step is asynchronous
 *     weft_registry_publish()
 *
 * AdamW arithmetic (every placement produces the same bytes). PyTorch's
 * fused CUDA AdamW (torch._fused_adamw_, the float-opmath kernel of
 * PyTorch 2.11), element by element, every operation in FP32 rounded to
 * nearest even, fma(a, b, c) rounded once:
 *
 *   lr, β1, β2, ε, wd = the group's double hyperparameters rounded to float
 *   t   = the step count after this step (1 at the first), as a float
 *   bc1 = 1 − f32(β1^t),  bc2s = sqrt(1 − f32(β2^t))     powers: float(pow(double β, double t))
 *   g   = the gradient (a BF16 gradient widened exactly)
 *   θ   = fma(−(lr·wd), θ, θ)                            only when wd ≠ 0
 *   m   = fma(β1, m, fma(−β1, g, g))
 *   v   = fma(β2, v, fma(−β2, g·g, g·g))
 *   θ   = θ − ((lr / bc1)·m) / (sqrt(v) / bc2s + ε)
 *
 * The bias corrections are computed once per step on the host. PyTorch
 * computes the powers with CUDA's powf, which is not always correctly
 * rounded; where it is not, θ would differ by about an ulp (m and v never
 * do). On the H200 with PyTorch 2.11 every byte of θ, m and v was
 * identical at every step count tried, 1 to 10^6 (tests/optim_torch.py).
 * A stored NaN is 0x7FFFFFFF, as the GPU makes it. Non-finite values are
 * not special: a NaN or
 * infinite gradient makes its element's m, v and θ NaN or infinite, as in
 * PyTorch without a gradient scaler; the FP8 writer makes such a block NaN
 * so that a diverged master is seen.
 *
 * Muon (for 2-D matrices; every expert of a stack its own matrix):
 *
 *   θ = θ·f32(1 − lr·wd)                                  only when wd ≠ 0
 *   m = fma(1−β, g − m, m)                                momentum, a lerp towards g
 *   u = nesterov ? fma(−(1−β), m − g, m) : m              u = g + β(m − g)
 *   X = NS(u)                                             transposed while rows > cols
 *   θ = fma(−f32(lr·scale), X, θ)
 *
 * NS(u): X = u / (‖u‖_F + 1e-7), then ns_steps times A = X·Xᵀ,
 * B = b·A + c·A·A, X = a·X + B·X, with (a, b, c) = (3.4445, −4.7750,
 * 2.0315) or the five tuples of the "quintic" schedule. On the GPU X is
 * BF16 (tensor-core GEMMs accumulating in FP32, cuBLAS), every expert of
 * a group in one batched launch where the placement allows (RESIDENT).
 * Where it rounds to BF16 is the group's weft_muon_rounding_t: by default
 * (WEFT_MUON_ROUNDING_FUSED) the sums b·A + c·A·A and a·X + B·X are
 * formed in FP32 in the GEMMs' epilogues and rounded once, as the
 * reference under torch.compile (Inductor's fused element-wise kernels)
 * or torch.baddbmm rounds them: on the H200 its updates were within
 * 1.7 % of the compiled reference's and 0.9 % of the FP64 iteration's,
 * and its iterations 1.36-1.58 × the compiled reference's speed; or
 * (WEFT_MUON_ROUNDING_EAGER) each product and term where the reference in
 * eager PyTorch rounds it (b·A, c·A, (c·A)·A, their sum, a·X, B·X, that
 * sum; the norm and norm + 1e-7): within 1.1 % of the eager reference's
 * updates, about 2 % from the FP64 iteration and from the compiled
 * reference (as far as those two are from each other), and slower (four
 * element-wise passes an iteration). On the host everything is FP32. Muon's results are not bit-exact
 * between the two (BF16 against FP32) nor with other implementations:
 * tests hold them to tolerances (tests/optim_torch.py, test_optim).
 *
 * Threads: one optimizer is used by one thread at a time. Distinct
 * optimizers are independent. Errors are logged (WEFT_LOG_LEVEL).
 */
#ifndef WEFT_OPTIM_H
#define WEFT_OPTIM_H

#include <weft/quant.h>
#include <weft/registry.h>
#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_OPTIM_NAME_MAX 96 /* bytes of a group name, with the NUL */

typedef enum weft_optim_algo {
    WEFT_OPTIM_ADAMW = 1,
    WEFT_OPTIM_MUON  = 2
} weft_optim_algo_t;

/* Where masters and state live and where the update runs. */
typedef enum weft_optim_placement {
    WEFT_OPTIM_HOST     = 1, /* host memory, update on the CPU's threads (no GPU) */
    WEFT_OPTIM_STAGED   = 2, /* pinned host memory, update on the GPU through slots */
    WEFT_OPTIM_RESIDENT = 3  /* device memory, update in place on the GPU */
} weft_optim_placement_t;

/* ---------------------------------------------------------------- create */

enum weft_optim_params_field {
    WEFT_OPTIM_FIELD_PLACEMENT  = 1u << 0,
    WEFT_OPTIM_FIELD_DEVICE     = 1u << 1,
    WEFT_OPTIM_FIELD_SLOT_COUNT = 1u << 2,
    WEFT_OPTIM_FIELD_SLOT_BYTES = 1u << 3,
    WEFT_OPTIM_FIELD_THREADS    = 1u << 4
};

typedef struct weft_optim_params {
    uint64_t               field_mask; /* fields set below; others take defaults */
    weft_optim_placement_t placement;  /* default WEFT_OPTIM_HOST */
    int32_t                device;     /* GPU ordinal (STAGED, RESIDENT); default 0 */
    uint32_t               slot_count; /* STAGED: 2..64; default 3 */
    /* STAGED: bytes of one slot, ≥ 4096; default 256 MiB. A matrix takes
     * 12 B an element (AdamW) or 8 (Muon), plus its gradient when that is
     * on the host; more matrices a slot mean fewer, larger copies and
     * Muon batches, fewer slots a step to overlap. */
    uint64_t               slot_bytes;
    uint32_t               threads;    /* HOST: worker threads, 1..1024; default: online CPUs */
} weft_optim_params_t;

/*
 * Creates an optimizer with no groups. STAGED allocates its slots and
 * streams on `device` here (the calling thread's current device is left
 * as it was). Errors: WEFT_ERR_INVALID_PARAM (a value out of range, an
 * unknown field_mask bit), WEFT_ERR_UNSUPPORTED (a GPU placement in a
 * library built without CUDA), WEFT_ERR_NO_DEVICE, WEFT_ERR_CUDA,
 * WEFT_ERR_NO_MEMORY. Destroy it with weft_optim_destroy().
 */
WEFT_API weft_status_t weft_optim_create(const weft_optim_params_t *params, weft_optim_h *opt);

/*
 * Frees the optimizer, its slots and the state it allocated (state a
 * group adopted stays the caller's). A GPU placement first waits for the
 * work of its last step. NULL is a no-op.
 */
WEFT_API weft_status_t weft_optim_destroy(weft_optim_h opt);

/* ---------------------------------------------------------------- groups */

/* AdamW's hyperparameters, as torch.optim.AdamW takes them. */
typedef struct weft_adamw_hparams {
    double lr;           /* default 1e-3 */
    double beta1;        /* [0, 1); default 0.9 */
    double beta2;        /* [0, 1); default 0.999 */
    double eps;          /* > 0; default 1e-8 */
    double weight_decay; /* ≥ 0; default 1e-2 */
} weft_adamw_hparams_t;

/* How Muon scales the orthogonalized update. */
typedef enum weft_muon_scale {
    WEFT_MUON_SCALE_SHAPE       = 1, /* max(1, rows/cols)^½ (Keller Jordan's) */
    WEFT_MUON_SCALE_MATCH_ADAMW = 2  /* 0.2·√max(rows, cols) (Moonlight's, AdamW's RMS) */
} weft_muon_scale_t;

/* Newton–Schulz coefficients. */
typedef enum weft_muon_schedule {
    WEFT_MUON_NS_SIMPLE  = 1, /* (3.4445, −4.7750, 2.0315) every step */
    WEFT_MUON_NS_QUINTIC = 2  /* five tuples from (4.0848, −6.8946, 2.9270); steps a multiple of 5 */
} weft_muon_schedule_t;

/* Where Newton–Schulz rounds to BF16 on the GPU (the host path is FP32
 * either way). Measured on stacks of 1536×2048 and 2048×768 (perf/
 * ns_accuracy.py): EAGER lands 0.020-0.023 (relative Frobenius) from the
 * same iterations in FP64, FUSED 0.008-0.009 (and 0.014-0.017 from the
 * compiled reference), and the two ~0.02 apart. EAGER was the default
 * until 2026-12-03 (NEWS). */
typedef enum weft_muon_rounding {
    WEFT_MUON_ROUNDING_EAGER = 1, /* each product and scaled term, as eager PyTorch */
    WEFT_MUON_ROUNDING_FUSED = 2  /* each sum once, in the GEMM epilogue (default) */
} weft_muon_rounding_t;

typedef struct weft_muon_hparams {
    double               lr;           /* ≥ 0; default 0.02 */
    double               momentum;     /* β in [0, 1); default 0.95 */
    double               weight_decay; /* ≥ 0; default 0 */
    int                  nesterov;     /* 0 or 1; default 1 */
    uint32_t             ns_steps;     /* 1..100; default 5 */
    weft_muon_scale_t    scale;        /* default WEFT_MUON_SCALE_SHAPE */
    weft_muon_schedule_t schedule;     /* default WEFT_MUON_NS_SIMPLE */
} weft_muon_hparams_t;

enum weft_optim_group_field {
    WEFT_OPTIM_GROUP_FIELD_ADAMW = 1u << 0, /* adamw is set (else the defaults) */
    WEFT_OPTIM_GROUP_FIELD_ADOPT = 1u << 1, /* master and the state arrays are the caller's */
    WEFT_OPTIM_GROUP_FIELD_MUON  = 1u << 2, /* muon is set (else the defaults) */
    WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING = 1u << 3 /* muon_rounding is set (else FUSED) */
};

typedef struct weft_optim_group_desc {
    uint64_t          field_mask;
    /* 1..95 bytes. The ready-made writers find a matrix's registry tensors
     * by it: "{E}" stands for the expert index, and the tensors are the
     * name followed by ".weight", ".weight_t" and ".weight_scale_inv". */
    const char       *name;
    weft_optim_algo_t algo;
    /* E for a stack [E, rows, cols] of expert matrices, each its own unit
     * (never split, never merged with a neighbour); 0 for one plain tensor
     * [rows, cols] (a vector: rows = 1). */
    uint32_t          experts;
    uint64_t          rows, cols;
    weft_adamw_hparams_t adamw;
    /* ADOPT: the caller's FP32 arrays, [E, rows, cols] contiguous each (E
     * counted as 1 for a plain tensor), zero-initialized state included:
     * pinned host memory (HOST: any host memory) or, RESIDENT, device
     * memory of the optimizer's GPU. They must outlive the optimizer.
     * AdamW: master, exp_avg, exp_avg_sq; Muon: master and exp_avg (its
     * momentum; exp_avg_sq unused). */
    float            *master, *exp_avg, *exp_avg_sq;
    weft_muon_hparams_t muon; /* algo WEFT_OPTIM_MUON: rows and cols ≥ 2 */
    /* Read only with WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING (added after the
     * other fields: a caller built against a header without it never sets
     * the bit). Kept by weft_optim_group_set_muon; saved in checkpoints. */
    weft_muon_rounding_t muon_rounding;
} weft_optim_group_desc_t;

/*
 * Adds a group; *group (may be NULL) gets its index (0, 1, … in the order
 * added). Without ADOPT, libweft allocates the master (zero: fill it
 * through weft_optim_group_state) and zeroed state, pinned where the
 * placement stages. Only before the first step. Errors:
 * WEFT_ERR_INVALID_PARAM (shape, name, algo, a hyperparameter out of
 * range, a duplicate name, an unknown bit; STAGED: a matrix whose master
 * and state do not fit in one slot, the message names both sizes),
 * WEFT_ERR_STATE (after a step), WEFT_ERR_NO_MEMORY, WEFT_ERR_CUDA.
 */
WEFT_API weft_status_t weft_optim_add_group(weft_optim_h opt, const weft_optim_group_desc_t *desc,
                                            uint32_t *group);

/* Replaces a group's AdamW hyperparameters (a schedule's new lr, say),
 * from the next step on. WEFT_ERR_INVALID_PARAM as in add_group. */
WEFT_API weft_status_t weft_optim_group_set_adamw(weft_optim_h opt, uint32_t group,
                                                  const weft_adamw_hparams_t *hparams);

/* The same for a Muon group. */
WEFT_API weft_status_t weft_optim_group_set_muon(weft_optim_h opt, uint32_t group,
                                                 const weft_muon_hparams_t *hparams);

typedef enum weft_optim_state {
    WEFT_OPTIM_STATE_MASTER     = 1,
    WEFT_OPTIM_STATE_EXP_AVG    = 2,
    WEFT_OPTIM_STATE_EXP_AVG_SQ = 3, /* AdamW only */
    WEFT_OPTIM_STATE_MOMENTUM   = 4  /* Muon only */
} weft_optim_state_t;

/*
 * Where a group's FP32 array lives: [E, rows, cols] contiguous, host
 * memory (device memory for RESIDENT). Valid until the optimizer is
 * destroyed. Read or write it only while no step is in flight (GPU
 * placements: after the step's stream has been synchronized).
 * WEFT_ERR_INVALID_PARAM for an unknown group or state.
 */
WEFT_API weft_status_t weft_optim_group_state(weft_optim_h opt, uint32_t group, weft_optim_state_t state,
                                              float **data);

/* ------------------------------------------------------------------ step */

/* One group's gradient: [E, rows, cols] (or [rows, cols]) contiguous. */
typedef struct weft_optim_grad {
    const void        *data;
    weft_dtype_t       dtype;  /* WEFT_DTYPE_FP32 or WEFT_DTYPE_BF16 (Megatron's main_grad) */
    weft_memory_kind_t memory; /* HOST, or CUDA on the optimizer's GPU (not with HOST) */
} weft_optim_grad_t;

/* One updated matrix, as the writer receives it. */
typedef struct weft_optim_unit {
    uint32_t           group;
    int32_t            expert; /* index in the stack; -1 for a plain tensor */
    const char        *name;   /* the group's name */
    uint64_t           rows, cols;
    uint64_t           step;   /* the step count after this step */
    const float       *master; /* the updated FP32 matrix, [rows, cols] contiguous */
    weft_memory_kind_t memory; /* where master is: HOST, or CUDA (a slot, or resident) */
    void              *stream; /* CUDA: the cudaStream_t to enqueue work on; NULL for HOST */
} weft_optim_unit_t;

/*
 * A writer: consumes one updated matrix. On the host it runs to
 * completion; on the GPU it enqueues its work on unit->stream and returns
 * (the slot is reused only after that work). Any other status stops the
 * step (see weft_optim_step).
 */
typedef weft_status_t (*weft_optim_writer_fn)(void *arg, const weft_optim_unit_t *unit);

enum weft_optim_step_field {
    WEFT_OPTIM_STEP_FIELD_WRITER = 1u << 0,
    WEFT_OPTIM_STEP_FIELD_STREAM = 1u << 1
};

typedef struct weft_optim_step_params {
    uint64_t             field_mask;
    weft_optim_writer_fn writer; /* called once a matrix, in group then expert order */
    void                *writer_arg;
    /* GPU placements: a cudaStream_t (NULL: the legacy default stream).
     * The step waits for the work already on it (the gradients) and puts
     * its own completion on it. */
    void                *stream;
} weft_optim_step_params_t;

/*
 * One optimizer step over every group: grads[i] is group i's gradient
 * (count = the number of groups). Every argument is checked before any
 * state changes. HOST runs to completion. STAGED and RESIDENT are
 * asynchronous: the call returns once the work is enqueued, and the
 * updated masters, states and everything the writer wrote are complete
 * when `stream` gets there; the gradients must stay valid until then. No
 * device-wide synchronization happens inside a step.
 * Errors: WEFT_ERR_INVALID_PARAM (count, a NULL or misplaced gradient, a
 * dtype, an unknown bit; STAGED: a host gradient that does not fit in a
 * slot beside its matrix), WEFT_ERR_CUDA, or the writer's status. HOST
 * updates every matrix before it calls the writer: after a writer's error
 * the step has counted, and only the writes after the failing one are
 * missing. On a GPU the step stopped part-way, some matrices updated and
 * some not, and every later step gives WEFT_ERR_STATE (restore a
 * checkpoint, or destroy the optimizer).
 */
WEFT_API weft_status_t weft_optim_step(weft_optim_h opt, const weft_optim_grad_t *grads, uint32_t count,
                                       const weft_optim_step_params_t *params);

typedef struct weft_optim_info {
    weft_optim_placement_t placement;
    uint32_t groups;
    uint64_t units;            /* matrices, all groups */
    uint64_t parameters;       /* elements, all groups */
    uint64_t step;             /* steps taken */
    uint64_t host_bytes;       /* masters and state allocated by libweft on the host */
    uint64_t device_bytes;     /* GPU memory held: slots (STAGED) or resident state */
    uint32_t slot_count;       /* STAGED; 0 otherwise */
    uint64_t slot_bytes;       /* STAGED; 0 otherwise */
} weft_optim_info_t;

WEFT_API weft_status_t weft_optim_get_info(weft_optim_h opt, weft_optim_info_t *info);

/* ------------------------------------------------------------ checkpoint */

/*
 * Saves the whole optimizer state to `path`: every group's master,
 * exp_avg and exp_avg_sq, its hyperparameters, and the step count, with a
 * versioned header and a checksum of each part. The file is written as
 * "<path>.tmp", synced and renamed over path, so a crash leaves the old
 * checkpoint or the new one. GPU placements: the last step's stream must
 * have been synchronized. Errors: WEFT_ERR_IO / WEFT_ERR_PERMISSION (the
 * log names the file and the system's reason), WEFT_ERR_STATE (a step
 * stopped part-way: there is no whole state to save), WEFT_ERR_CUDA,
 * WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_optim_save(weft_optim_h opt, const char *path);

/*
 * Restores a checkpoint into an optimizer with the same groups (names,
 * algorithms and shapes, in the same order): the state, the
 * hyperparameters and the step count become the saved ones, and the next
 * step gives the bytes the saved run's next step gave. Everything is
 * checked before anything changes: WEFT_ERR_CORRUPT (not a checkpoint, a
 * damaged header or table, a truncated file, an array failing its
 * checksum), WEFT_ERR_VERSION (another format), WEFT_ERR_INVALID_PARAM
 * (other groups), WEFT_ERR_NOT_FOUND / WEFT_ERR_IO / WEFT_ERR_PERMISSION,
 * each leaving the optimizer as it was. Only a failure while the checked
 * file is read into place (it changed or vanished meanwhile; WEFT_ERR_IO,
 * WEFT_ERR_CUDA) leaves it part-restored, and then its steps give
 * WEFT_ERR_STATE until a restore succeeds. A restore also clears the state
 * left by a step that stopped part-way.
 */
WEFT_API weft_status_t weft_optim_restore(weft_optim_h opt, const char *path);

/* --------------------------------------------------------------- writers */

typedef enum weft_optim_write_format {
    WEFT_OPTIM_WRITE_FP8  = 1, /* W, WT (per quant.write_wt) and scale_inv, by weft_quant_* */
    WEFT_OPTIM_WRITE_BF16 = 2  /* W as BF16, round to nearest even (no quantization) */
} weft_optim_write_format_t;

enum weft_optim_writer_field {
    WEFT_OPTIM_WRITER_FIELD_FORMAT = 1u << 0,
    WEFT_OPTIM_WRITER_FIELD_QUANT  = 1u << 1
};

typedef struct weft_optim_writer_params {
    uint64_t                  field_mask;
    weft_optim_write_format_t format; /* default FP8 */
    weft_quant_params_t       quant;  /* FP8: block, scales, WT; default weft_quant's */
} weft_optim_writer_params_t;

/*
 * A ready-made writer into the version being written of `reg`: for every
 * matrix of every group of `opt` (groups added later are not seen), the
 * tensors named after the group (see weft_optim_group_desc_t.name) are
 * looked up now, so a missing or mismatched tensor is an error here, never
 * during a step. FP8: "<name>.weight" e4m3 [rows, cols], "<name>.weight_t"
 * e4m3 [cols, rows] (when quant.write_wt), "<name>.weight_scale_inv" FP32
 * [⌈rows/b⌉, ⌈cols/b⌉], every one contiguous. BF16: "<name>.weight" BF16
 * [rows, cols]. The registry's memory must be where the optimizer's
 * matrices are: host for HOST, the optimizer's GPU otherwise.
 * Errors: WEFT_ERR_NOT_FOUND (a tensor, named in the log),
 * WEFT_ERR_INVALID_PARAM (a dtype, shape or layout that does not match, a
 * memory mismatch, an unknown bit), WEFT_ERR_STATE (reg not sealed),
 * WEFT_ERR_NO_MEMORY. The writer borrows opt and reg: destroy it first.
 */
WEFT_API weft_status_t weft_optim_writer_create(weft_optim_h opt, weft_registry_h reg,
                                                const weft_optim_writer_params_t *params,
                                                weft_optim_writer_h *writer);

/*
 * The writer callback (a weft_optim_writer_fn, arg = the writer handle):
 * writes the unit into the version being written (weft_registry_write_begin
 * must have been called). WEFT_ERR_STATE outside a write.
 */
WEFT_API weft_status_t weft_optim_writer_write(void *writer, const weft_optim_unit_t *unit);

/* Frees a writer. NULL is a no-op. */
WEFT_API weft_status_t weft_optim_writer_destroy(weft_optim_writer_h writer);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_OPTIM_H */
