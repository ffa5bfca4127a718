/*
 * weft-perf ipc's workloads: a version's bytes and tensors, their
 * declaration order; and the CUDA check every ipc process uses.
 */
#include "config.h"

#include "ipc.h"

#ifdef HAVE_CUDA /* without CUDA, weft-perf ipc only says it is skipped */

#include <stdio.h>
#include <stdlib.h>

/* Bytes of one version: every tensor's elements, no padding. */
uint64_t ipc_workload_bytes(const ipc_workload_t *w)
{
    uint64_t bytes = 0;

    for (uint32_t k = 0; k < w->kinds; k++) {
        bytes += perf_expert_kind_bytes(&w->kind[k]) * w->layers * w->experts;
    }
    return bytes;
}

uint64_t ipc_workload_tensors(const ipc_workload_t *w)
{
    return w->layers * w->experts * w->kinds;
}

static void set_tensor(ipc_tensor_t *t, const ipc_workload_t *w, uint64_t l, uint32_t k, uint64_t e)
{
    t->layer = (uint32_t)l;
    t->kind = k;
    t->expert = (uint32_t)e;
    t->id = (uint32_t)((l * w->kinds + k) * w->experts + e);
    snprintf(t->name, sizeof(t->name), "model.layers.%llu.mlp.experts.%llu.%s.%s", (unsigned long long)l,
             (unsigned long long)e, w->kind[k].proj, w->kind[k].suffix);
}

/*
 * The tensors in declaration order. By role: per layer, every expert's
 * tensor of one kind, kind after kind, so that consecutive experts' sources
 * are adjacent in the slot as their views are in the fused tensors and the
 * plan merges them. By expert: each expert's tensors in turn, so sources of
 * consecutive experts interleave and the plan cannot merge across experts.
 */
ipc_tensor_t *ipc_tensor_list(const ipc_workload_t *w, int by_expert, size_t *count)
{
    ipc_tensor_t *list = calloc(ipc_workload_tensors(w), sizeof(*list));
    size_t        n = 0;

    if (list == NULL) {
        fprintf(stderr, "weft-perf ipc: out of memory\n");
        return NULL;
    }
    for (uint64_t l = 0; l < w->layers; l++) {
        if (by_expert) {
            for (uint64_t e = 0; e < w->experts; e++) {
                for (uint32_t k = 0; k < w->kinds; k++) {
                    set_tensor(&list[n++], w, l, k, e);
                }
            }
        } else {
            for (uint32_t k = 0; k < w->kinds; k++) {
                for (uint64_t e = 0; e < w->experts; e++) {
                    set_tensor(&list[n++], w, l, k, e);
                }
            }
        }
    }
    *count = n;
    return list;
}

/* ------------------------------------------------------------- checks */

int ipc_cuda_ok(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "weft-perf ipc: %s failed: %s\n", what, cudaGetErrorString(err));
        return 0;
    }
    return 1;
}

#endif /* HAVE_CUDA */
