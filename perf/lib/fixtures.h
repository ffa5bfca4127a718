/*
 * weft-perf's model fixtures: the tensors of an FP8 MoE expert as an
 * SGLang engine holds them (W, WT and block scales of gate_up_proj and
 * down_proj), and Qwen3-30B-A3B's layer, which ucx, ipc and update move.
 * One definition, so that the subcommands' workloads and their Python
 * peers' tensor lists describe the same model.
 */
#ifndef WEFT_PERF_LIB_FIXTURES_H
#define WEFT_PERF_LIB_FIXTURES_H

#include <stdint.h>
#include <weft/weft.h>

#define PERF_EXPERT_KINDS  6   /* gate_up_proj W, WT, scale; down_proj W, WT, scale: kinds 3p .. 3p + 2 */
#define PERF_QWEN3_EXPERTS 128 /* a Qwen3-30B-A3B layer's experts */

/* One kind of expert tensor: its name's projection and suffix
 * ("model.layers.L.mlp.experts.E.<proj>.<suffix>"), role, dtype, shape. */
typedef struct perf_expert_kind {
    const char        *proj;
    const char        *suffix;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint64_t           rows, cols;
} perf_expert_kind_t;

/* Qwen3-30B-A3B's kinds: perf_expert_kinds(2048, 768, 128). */
extern const perf_expert_kind_t perf_qwen3_expert_kinds[PERF_EXPERT_KINDS];

/* The kinds of an expert of hidden size `hidden` and intermediate size
 * `intermediate`, FP8 with FP32 scales of `block` × `block` blocks. */
void perf_expert_kinds(uint64_t hidden, uint64_t intermediate, uint64_t block,
                       perf_expert_kind_t kinds[PERF_EXPERT_KINDS]);

/* Bytes of one tensor of kind k. */
uint64_t perf_expert_kind_bytes(const perf_expert_kind_t *k);

#endif
