/*
 * The optimizer object shared by optim/'s files: groups and their state,
 * the placement, and the GPU part (gpu_cuda.c; gpu_none.c without CUDA).
 * Internal.
 */
#ifndef WEFT_OPTIM_IMPL_H
#define WEFT_OPTIM_IMPL_H

#include <weft/optim.h>

#include "kernels/adamw.h"
#include "kernels/muon.h"

#include <stdint.h>

typedef struct optim_group {
    char                 name[WEFT_OPTIM_NAME_MAX];
    weft_optim_algo_t    algo;
    uint32_t             experts;    /* as declared: 0 for a plain tensor */
    uint32_t             units;      /* matrices: max(experts, 1) */
    uint64_t             rows, cols;
    uint64_t             unit_elems; /* rows × cols */
    weft_adamw_hparams_t adamw;
    weft_muon_hparams_t  muon;
    weft_muon_rounding_t muon_rounding;
    int                  arrays;     /* state arrays: 3 (AdamW), 2 (Muon) */
    /* master, then exp_avg and exp_avg_sq (AdamW) or the momentum (Muon):
     * units × unit_elems floats each. */
    float               *state[3];
    int                  adopted;    /* state is the caller's */
} optim_group_t;

/* A group's scalars for one step. */
typedef union optim_scalars {
    weft_adamw_scalars_t adamw;
    weft_muon_scalars_t  muon;
} optim_scalars_t;

struct optim_gpu; /* gpu_cuda.c */

struct weft_optim {
    weft_optim_placement_t placement;
    int32_t                device;
    uint32_t               threads;    /* HOST */
    uint32_t               slot_count; /* STAGED */
    uint64_t               slot_bytes; /* STAGED */
    optim_group_t         *groups;
    uint32_t               group_count;
    uint32_t               group_capacity;
    uint64_t               step;       /* steps completed (enqueued, on a GPU) */
    int                    broken;     /* a step stopped part-way */
    uint64_t               host_bytes;
    uint64_t               device_bytes;
    struct optim_gpu      *gpu;        /* STAGED, RESIDENT */
};

/* Bytes of slot that `count` consecutive matrices of a group take (master
 * and state: 12 B an element for AdamW, 8 for Muon, each array holding the
 * count matrices one after another and rounded up to the slot's
 * alignment), with their host gradient when there is one
 * (host_grad_dtype; WEFT_DTYPE_INVALID for none). */
#define OPTIM_SLOT_ALIGN 256u
uint64_t optim_slot_need(const optim_group_t *g, uint64_t count, weft_dtype_t host_grad_dtype);
/* How many whole matrices of a group one slot carries at once: the most
 * that fit, at most the group's; 0 when not even one fits. Batching them
 * lets Muon orthogonalize a slot's matrices in one batch, and lets the
 * copies and launches of small matrices cost once a slot. */
uint64_t optim_slot_units(const weft_optim_h opt, const optim_group_t *g, weft_dtype_t host_grad_dtype);

/* The unit the writer sees, for group g's matrix u. */
void optim_unit_init(const weft_optim_h opt, uint32_t group, uint32_t unit, const float *master,
                     weft_memory_kind_t memory, void *stream, weft_optim_unit_t *out);

/* HOST: one step over every group on the optimizer's threads, then the
 * writer over every matrix in order (step_host.c). */
weft_status_t optim_host_step(weft_optim_h opt, const weft_optim_grad_t *grads, const optim_scalars_t *scalars,
                              const weft_optim_step_params_t *params);

/* GPU placements (gpu_cuda.c, or gpu_none.c: WEFT_ERR_UNSUPPORTED). */
weft_status_t optim_gpu_create(weft_optim_h opt);
void          optim_gpu_destroy(weft_optim_h opt);
/* The three state arrays of a group: pinned host (STAGED) or device
 * (RESIDENT) memory, zeroed. */
weft_status_t optim_gpu_state_alloc(weft_optim_h opt, optim_group_t *g);
void          optim_gpu_state_free(weft_optim_h opt, optim_group_t *g);
/* Checks that a gradient is where the placement needs it. */
weft_status_t optim_gpu_grad_check(weft_optim_h opt, uint32_t group, const weft_optim_grad_t *grad);
/* Copies bytes at `offset` of state array a (0 master, 1 m, 2 v) of a
 * RESIDENT group from (to_device = 0) or to the host buffer. */
weft_status_t optim_gpu_state_copy(weft_optim_h opt, optim_group_t *g, int a, uint64_t offset, void *host,
                                   size_t bytes, int to_device);
/* A Muon group on the GPU: the cuBLAS handle and the Newton–Schulz
 * workspace, grown to the largest batch (RESIDENT: all the group's
 * matrices; STAGED: the matrices a slot carries). */
weft_status_t optim_gpu_muon_prepare(weft_optim_h opt, const optim_group_t *g);
weft_status_t optim_gpu_step(weft_optim_h opt, const weft_optim_grad_t *grads, const optim_scalars_t *scalars,
                             const weft_optim_step_params_t *params);

#endif
