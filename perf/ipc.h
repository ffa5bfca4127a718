/*
 * weft-perf ipc's pieces (see cmd_ipc.c for what it measures): the
 * options, the workloads and their tensors, what the children hand back
 * through the shared mapping, a case and its result; what the options,
 * cases and output (cmd_ipc.c), the workloads (ipc_workload.c), the weft
 * producer and consumer (ipc_weft.c) and the baselines (ipc_baselines.c)
 * share. Included after config.h (HAVE_CUDA, HAVE_NCCL).
 */
#ifndef WEFT_PERF_IPC_H
#define WEFT_PERF_IPC_H

#include "lib/fixtures.h"
#include "lib/runner.h"

#include <stdatomic.h>
#include <stdint.h>
#include <weft/weft.h>

#define MAX_ITERS   10000
#define MAX_DEVICE  1023
#define EXIT_SKIP   77 /* the automake "skipped" status */

enum { WORKLOAD_QWEN3 = 1, WORKLOAD_SINGLE = 2 };

typedef struct ipc_options {
    int         workloads; /* WORKLOAD_* bits */
    uint64_t    src, dst, iters, warmup;
    int         by_expert; /* --order expert */
    int         json, peer;
    int         push; /* also the push mode (default; --no-push) */
    const char *peer_script;
} ipc_options_t;

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

/* layers × experts × kinds tensors; the consumer fuses each (layer, kind)
 * over the experts. Must match ipc_peer.py's tensor list. */
typedef struct ipc_workload {
    const char               *name;
    int                       mask; /* WORKLOAD_* */
    uint64_t                  layers, experts;
    uint32_t                  kinds;
    const perf_expert_kind_t *kind; /* kinds of them */
} ipc_workload_t;

/* One registry tensor. id is its canonical number, (layer × kinds + kind)
 * × experts + expert, whatever the declaration order: the fill pattern
 * depends on it, so producer and consumer agree. */
typedef struct ipc_tensor {
    char     name[WEFT_TENSOR_NAME_MAX];
    uint32_t layer, kind, expert, id;
} ipc_tensor_t;

/* What the GPU probe found. peer[0]: src can access dst; peer[1]: back. */
typedef struct ipc_probe {
    int  done, count, peer[2], driver, runtime, nccl;
    int  major[2], minor[2];
    char name[2][256], bus[2][32], error[160];
} ipc_probe_t;

/* One figure per timed version, in ns. */
typedef struct ipc_samples {
    uint64_t n, ns[MAX_ITERS];
} ipc_samples_t;

/* What a consumer found comparing its views with the last version. */
typedef struct ipc_check {
    int      verified; /* every view was compared */
    uint64_t wrong_bytes, verified_bytes;
} ipc_check_t;

typedef struct ipc_shared {
    ipc_probe_t probe;
    struct {
        uint64_t      tensors, ranges, ranges_uncoalesced, plan_bytes;
        uint64_t      last_version;
        ipc_check_t   check;
        uint64_t      n, ns[MAX_ITERS]; /* weft_plan_copy, timed versions */
        ipc_samples_t e2e; /* producer: publish to the consumer's record */
    } weft;
    /* The push mode: the producer's process copies (weft_server). */
    struct {
        _Atomic uint32_t port; /* the producer's server listens there; 0: not yet */
        uint64_t         last_version;
        ipc_check_t      check;
        ipc_samples_t    transfer; /* the server's transfer_ns, per version */
        ipc_samples_t    e2e;      /* producer: publish to the consumer's record */
    } push;
    struct {
        uint64_t n, ns[MAX_ITERS]; /* a ceiling or NCCL child's runs */
    } timing;
    /* The switched D2D copy and its toucher take turns: odd, the copier
     * asks for the toucher's work; even, it is done; ~0: give up. */
    _Atomic uint64_t turn;
} ipc_shared_t;

/* One measurement: a workload, from GPU src to GPU dst. */
typedef struct ipc_case {
    const ipc_workload_t *w;
    int                   src, dst, cross;
} ipc_case_t;

typedef struct ipc_ctx {
    const ipc_options_t *o;
    ipc_shared_t        *sh;
    perf_runner_t        runner; /* the children: the probe and every measurement */
    char                 registry[WEFT_REGISTRY_NAME_MAX];
    char                 token[64]; /* the push server's, per case */
} ipc_ctx_t;

typedef struct ipc_result {
    uint64_t tensors, ranges, ranges_uncoalesced, bytes, wrong_bytes;
    int      verified, ok;
    double   weft_s, ceiling_s, nccl_s, torch_s; /* NaN: none */
    double   switched_s; /* same GPU: D2D copy right after another process's work */
    double   weft_e2e_s;  /* producer: publish to the consumer's record (pull) */
    /* The push mode, when measured: the server's transfer time and the
     * producer's end to end time; its own check of every byte. */
    int      push_measured, push_verified, push_ok;
    uint64_t push_wrong_bytes;
    double   push_s, push_e2e_s;
    char     torch_version[64], torch_note[256], note[512];
} ipc_result_t;

/* What a child process runs: its exit status. */
typedef int (*ipc_child_fn)(ipc_ctx_t *ctx, const ipc_case_t *c);

/* ipc_workload.c: the workloads' sizes and tensors. */

/* Bytes of one version: every tensor's elements, no padding. */
uint64_t ipc_workload_bytes(const ipc_workload_t *w);
uint64_t ipc_workload_tensors(const ipc_workload_t *w);

/* The tensors in declaration order (see ipc_workload.c); the caller
 * frees them. NULL when out of memory (printed). */
ipc_tensor_t *ipc_tensor_list(const ipc_workload_t *w, int by_expert, size_t *count);

/* 1 when err is cudaSuccess; otherwise prints what failed and returns 0. */
int ipc_cuda_ok(cudaError_t err, const char *what);

#define CU(call) ipc_cuda_ok((call), #call)

/* ipc_weft.c: the weft producer and consumer processes, pulled (the
 * consumer's process copies) and pushed (the producer's server copies). */
int ipc_producer_main(ipc_ctx_t *ctx, const ipc_case_t *c);
int ipc_consumer_main(ipc_ctx_t *ctx, const ipc_case_t *c);
int ipc_push_producer_main(ipc_ctx_t *ctx, const ipc_case_t *c);
int ipc_push_consumer_main(ipc_ctx_t *ctx, const ipc_case_t *c);

/* ipc_baselines.c: the peer (or D2D) copy, the same copy after another
 * process's work and its toucher, NCCL send/recv, the GPU probe, the torch
 * peer. */
int ipc_copy_main(ipc_ctx_t *ctx, const ipc_case_t *c);
int ipc_switched_copy_main(ipc_ctx_t *ctx, const ipc_case_t *c);
int ipc_toucher_main(ipc_ctx_t *ctx, const ipc_case_t *c);
#ifdef HAVE_NCCL
int ipc_nccl_main(ipc_ctx_t *ctx, const ipc_case_t *c);
#endif
int ipc_probe_main(ipc_ctx_t *ctx, const ipc_case_t *unused);

/* ipc_peer.py on this case: fills r's torch_s, torch_version, torch_note. */
void ipc_run_torch(const ipc_options_t *o, const ipc_case_t *c, ipc_result_t *r);

#endif /* HAVE_CUDA */
#endif
