/*
 * weft-perf update's model: Qwen3-30B-A3B-shaped expert weights (by
 * default), their tensors as an SGLang engine names and holds them, the
 * trainer's initial masters and gradients, the registry, and the layout of
 * the mapping shared with the consumers. See update.h.
 */
#include "update.h"

#include <stdio.h>

void update_kinds(const update_options_t *o, tensor_kind_t kinds[UPDATE_KINDS])
{
    perf_expert_kinds(o->hidden, o->intermediate, o->block, kinds);
}

void update_tensor_name(char *buf, size_t size, uint64_t layer, uint64_t expert, const tensor_kind_t *k)
{
    snprintf(buf, size, "model.layers.%llu.mlp.experts.%llu.%s.%s", (unsigned long long)layer,
             (unsigned long long)expert, k->proj, k->suffix);
}

static uint32_t hash32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7feb352dU;
    h ^= h >> 15;
    h *= 0x846ca68bU;
    h ^= h >> 16;
    return h;
}

/*
 * The initial FP32 master of one expert matrix: uniform values whose
 * range, 0.005 to 0.08, changes from row to row (so the block scales
 * differ).
 */
void update_master_fill(float *x, uint64_t rows, uint64_t cols, uint64_t layer, uint64_t expert, int proj)
{
    uint32_t seed = hash32(hash32((uint32_t)(layer * 4096 + expert) * 2 + (uint32_t)proj));

    for (uint64_t r = 0; r < rows; r++) {
        uint32_t rs = hash32(seed ^ (uint32_t)r);
        float    amp = (0.005f + 0.075f * (float)(rs >> 8) / 16777216.0f) / 2147483648.0f;
        float   *row = x + r * cols;

        for (uint64_t c = 0; c < cols; c++) {
            uint32_t h = ((uint32_t)c + rs) * 0x9e3779b1U;
            h ^= h >> 15;
            h *= 0x85ebca77U;
            h ^= h >> 13;
            row[c] = (float)(int32_t)h * amp;
        }
    }
}

/* The gradient of a whole group (all experts of one layer's projection)
 * at `version`: deterministic, zero-mean, of magnitude up to 1e-2, with a
 * per-row bias so that the moments grow unevenly. */
void update_grad_fill(float *g, uint64_t n, uint64_t cols, uint64_t version, uint32_t group)
{
    const uint32_t seed = hash32((uint32_t)version * 0x9e3779b9U ^ hash32(group + 1));

    for (uint64_t i = 0; i < n; i++) {
        uint32_t h = ((uint32_t)i + seed) * 0x9e3779b1U;
        h ^= h >> 15;
        h *= 0x85ebca77U;
        h ^= h >> 13;
        g[i] = (float)(int32_t)h * (1e-2f / 2147483648.0f) + (float)((i / cols) % 7) * 1e-4f;
    }
}

weft_status_t update_registry_create(const char *name, const update_options_t *o, weft_memory_kind_t memory,
                                     weft_registry_h *out)
{
    weft_registry_params_t params = {
        .field_mask = WEFT_REGISTRY_FIELD_SLOTS | WEFT_REGISTRY_FIELD_MAX_TENSORS | WEFT_REGISTRY_FIELD_MEMORY,
        .memory = memory,
        .device = o->device,
        .slot_count = (uint32_t)o->slots,
        .max_tensors = (uint32_t)(update_tensor_count(o))};
    tensor_kind_t   kinds[UPDATE_KINDS];
    weft_registry_h reg;
    weft_status_t   status;

    update_kinds(o, kinds);
    status = weft_registry_create(name, &params, &reg);
    if (status != WEFT_OK) {
        return status;
    }
    for (uint64_t l = 0; l < o->layers; l++) {
        for (int k = 0; k < UPDATE_KINDS; k++) {
            for (uint64_t e = 0; e < o->experts; e++) {
                char               tname[WEFT_TENSOR_NAME_MAX];
                weft_tensor_desc_t d = {.field_mask = WEFT_TENSOR_FIELD_BLOCK, .name = tname,
                                        .layer = (int32_t)l, .expert = (int32_t)e, .role = kinds[k].role,
                                        .dtype = kinds[k].dtype, .ndim = 2,
                                        .shape = {kinds[k].rows, kinds[k].cols},
                                        .block = {(uint32_t)o->block, (uint32_t)o->block}};
                update_tensor_name(tname, sizeof(tname), l, e, &kinds[k]);
                status = weft_registry_declare(reg, &d, NULL);
                if (status != WEFT_OK) {
                    goto err;
                }
            }
        }
    }
    status = weft_registry_seal(reg);
    if (status != WEFT_OK) {
        goto err;
    }
    *out = reg;
    return WEFT_OK;
err:
    weft_registry_close(reg);
    weft_registry_unlink(name);
    return status;
}

uint32_t update_tensor_index(const update_options_t *o, uint64_t layer, int kind, uint64_t expert)
{
    return (uint32_t)((layer * UPDATE_KINDS + (uint64_t)kind) * o->experts + expert);
}

uint64_t update_tensor_count(const update_options_t *o)
{
    return o->layers * UPDATE_KINDS * o->experts;
}

uint64_t update_version_bytes(const update_options_t *o)
{
    tensor_kind_t kinds[UPDATE_KINDS];
    uint64_t      bytes = 0;

    update_kinds(o, kinds);
    for (int k = 0; k < UPDATE_KINDS; k++) {
        bytes += perf_expert_kind_bytes(&kinds[k]);
    }
    return bytes * o->experts * o->layers;
}

uint64_t update_sample_bytes(const update_options_t *o)
{
    tensor_kind_t kinds[UPDATE_KINDS];
    uint64_t      bytes = 0;

    if (!o->gpu) {
        return 0; /* the host consumers check every byte's checksum and need no sample */
    }
    update_kinds(o, kinds);
    for (int k = 0; k < UPDATE_KINDS; k++) {
        bytes += perf_expert_kind_bytes(&kinds[k]);
    }
    return bytes * o->layers;
}

uint64_t update_sample_expert(const update_options_t *o, uint64_t version)
{
    return version % o->experts;
}

size_t update_shared_bytes(const update_options_t *o)
{
    return sizeof(update_shared_t) + UPDATE_RING * update_tensor_count(o) * sizeof(uint64_t) +
           UPDATE_RING * update_sample_bytes(o);
}

uint64_t *update_checksums(update_shared_t *shared, const update_options_t *o, uint64_t version)
{
    return (uint64_t *)(shared + 1) + (version % UPDATE_RING) * update_tensor_count(o);
}

uint8_t *update_samples(update_shared_t *shared, const update_options_t *o, uint64_t version)
{
    uint8_t *base = (uint8_t *)((uint64_t *)(shared + 1) + UPDATE_RING * update_tensor_count(o));
    return base + (version % UPDATE_RING) * update_sample_bytes(o);
}
