/* weft-perf's model fixtures: see fixtures.h. */
#include "fixtures.h"

#include <string.h>

const perf_expert_kind_t perf_qwen3_expert_kinds[PERF_EXPERT_KINDS] = {
    {"gate_up_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 1536, 2048},
    {"gate_up_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, 2048, 1536},
    {"gate_up_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 12, 16},
    {"down_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2048, 768},
    {"down_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, 768, 2048},
    {"down_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 16, 6},
};

void perf_expert_kinds(uint64_t hidden, uint64_t intermediate, uint64_t block,
                       perf_expert_kind_t kinds[PERF_EXPERT_KINDS])
{
    const uint64_t           up = 2 * intermediate, b = block;
    const perf_expert_kind_t k[PERF_EXPERT_KINDS] = {
        {"gate_up_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, up, hidden},
        {"gate_up_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, hidden, up},
        {"gate_up_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, (up + b - 1) / b, (hidden + b - 1) / b},
        {"down_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, hidden, intermediate},
        {"down_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, intermediate, hidden},
        {"down_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, (hidden + b - 1) / b,
         (intermediate + b - 1) / b},
    };

    memcpy(kinds, k, sizeof(k));
}

uint64_t perf_expert_kind_bytes(const perf_expert_kind_t *k)
{
    return k->rows * k->cols * weft_dtype_size(k->dtype);
}
