/*
 * The ready-made writers: every updated matrix into its tensors of the
 * registry version being written, as FP8 (W, WT, scale_inv through the
 * FP8 writer) or BF16. The tensors are looked up and checked once, when
 * the writer is created, so a step never meets a missing name.
 */
#include "config.h"

#include "optim_impl.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WRITER_KNOWN_FIELDS ((uint64_t)(WEFT_OPTIM_WRITER_FIELD_FORMAT | WEFT_OPTIM_WRITER_FIELD_QUANT))

enum { ROLE_W, ROLE_WT, ROLE_SCALE, ROLES };

struct weft_optim_writer {
    weft_optim_h              opt;
    weft_registry_h           reg;
    weft_optim_write_format_t format;
    weft_quant_params_t       quant;
    uint32_t                  block;
    int                       write_wt;
    uint32_t                  groups;
    uint64_t                 *first;   /* per group: index of its first matrix in tensors */
    uint32_t                (*tensors)[ROLES];
};

/* "<name with {E} replaced by expert><suffix>"; 0 when it does not fit. */
static int tensor_name(char *buf, size_t size, const char *name, int32_t expert, const char *suffix)
{
    size_t      used = 0;
    const char *p    = name;

    while (*p != '\0') {
        int n;
        if (strncmp(p, "{E}", 3) == 0 && expert >= 0) {
            n = snprintf(buf + used, size - used, "%d", (int)expert);
            p += 3;
        } else {
            n = snprintf(buf + used, size - used, "%c", *p);
            p++;
        }
        if (n < 0 || (size_t)n >= size - used) {
            return 0;
        }
        used += (size_t)n;
    }
    return snprintf(buf + used, size - used, "%s", suffix) < (int)(size - used);
}

/* Finds a tensor and checks that it is what the writer will put there. */
static weft_status_t tensor_resolve(const weft_optim_writer_h w, const char *name, weft_dtype_t dtype,
                                    uint64_t rows, uint64_t cols, int check_block, uint32_t *index)
{
    static const char *who = "weft_optim_writer_create";
    weft_tensor_info_t info;
    weft_status_t      status;
    const int          host  = w->opt->placement == WEFT_OPTIM_HOST;

    status = weft_registry_lookup(w->reg, name, index);
    if (status != WEFT_OK) {
        weft_log_error("%s: the registry has no tensor \"%s\"", who, name);
        return WEFT_ERR_NOT_FOUND;
    }
    status = weft_registry_tensor_info(w->reg, *index, &info);
    if (status != WEFT_OK) {
        return status;
    }
    if (info.dtype != dtype || info.ndim != 2 || info.shape[0] != rows || info.shape[1] != cols ||
        info.strides[0] != cols || info.strides[1] != 1) {
        weft_log_error("%s: tensor \"%s\" is %s [%llu, %llu] (strides %llu, %llu); the writer needs %s "
                       "[%llu, %llu], contiguous",
                       who, name, weft_dtype_name(info.dtype), (unsigned long long)info.shape[0],
                       (unsigned long long)(info.ndim > 1 ? info.shape[1] : 0),
                       (unsigned long long)info.strides[0], (unsigned long long)(info.ndim > 1 ? info.strides[1] : 0),
                       weft_dtype_name(dtype), (unsigned long long)rows, (unsigned long long)cols);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (check_block && (info.block[0] != w->block || info.block[1] != w->block)) {
        weft_log_error("%s: tensor \"%s\" has %u × %u blocks; the writer quantizes %u × %u", who, name,
                       info.block[0], info.block[1], w->block, w->block);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (host ? info.memory != WEFT_MEMORY_HOST
             : (info.memory != WEFT_MEMORY_CUDA || info.device != w->opt->device)) {
        weft_log_error("%s: tensor \"%s\" is in %s memory (device %d); the optimizer's matrices are in %s "
                       "memory (device %d)",
                       who, name, info.memory == WEFT_MEMORY_HOST ? "host" : "GPU", (int)info.device,
                       host ? "host" : "GPU", host ? -1 : (int)w->opt->device);
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_OK;
}

static weft_status_t resolve_all(weft_optim_writer_h w)
{
    const weft_optim_h opt = w->opt;
    uint64_t           at  = 0;
    char               name[WEFT_TENSOR_NAME_MAX];

    for (uint32_t i = 0; i < w->groups; i++) {
        const optim_group_t *g = &opt->groups[i];
        const uint64_t       bn = (g->rows + w->block - 1) / w->block, bk = (g->cols + w->block - 1) / w->block;

        w->first[i] = at;
        for (uint32_t u = 0; u < g->units; u++, at++) {
            const int32_t expert = g->experts ? (int32_t)u : -1;
            weft_status_t status;

            if (!tensor_name(name, sizeof(name), g->name, expert, ".weight")) {
                goto err_long;
            }
            status = tensor_resolve(w, name, w->format == WEFT_OPTIM_WRITE_BF16 ? WEFT_DTYPE_BF16 : WEFT_DTYPE_FP8_E4M3,
                                    g->rows, g->cols, w->format == WEFT_OPTIM_WRITE_FP8, &w->tensors[at][ROLE_W]);
            if (status != WEFT_OK || w->format == WEFT_OPTIM_WRITE_BF16) {
                if (status != WEFT_OK) {
                    return status;
                }
                continue;
            }
            if (w->write_wt) {
                if (!tensor_name(name, sizeof(name), g->name, expert, ".weight_t")) {
                    goto err_long;
                }
                status = tensor_resolve(w, name, WEFT_DTYPE_FP8_E4M3, g->cols, g->rows, 0, &w->tensors[at][ROLE_WT]);
                if (status != WEFT_OK) {
                    return status;
                }
            }
            if (!tensor_name(name, sizeof(name), g->name, expert, ".weight_scale_inv")) {
                goto err_long;
            }
            status = tensor_resolve(w, name, WEFT_DTYPE_FP32, bn, bk, 0, &w->tensors[at][ROLE_SCALE]);
            if (status != WEFT_OK) {
                return status;
            }
        }
    }
    return WEFT_OK;

err_long:
    weft_log_error("weft_optim_writer_create: a tensor name made from group name \"%s\" is too long", name);
    return WEFT_ERR_INVALID_PARAM;
}

weft_status_t weft_optim_writer_create(weft_optim_h opt, weft_registry_h reg, const weft_optim_writer_params_t *params,
                                       weft_optim_writer_h *out)
{
    weft_optim_writer_h w;
    weft_status_t       status;
    uint64_t            units = 0;

    if (opt == NULL || reg == NULL || out == NULL) {
        weft_log_error("weft_optim_writer_create: NULL argument");
        return WEFT_ERR_INVALID_PARAM;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    w->opt      = opt;
    w->reg      = reg;
    w->format   = WEFT_OPTIM_WRITE_FP8;
    w->block    = 128;
    w->write_wt = 1;
    if (params != NULL) {
        if ((params->field_mask & ~WRITER_KNOWN_FIELDS) != 0) {
            weft_log_error("weft_optim_writer_create: unknown field_mask bits 0x%llx",
                           (unsigned long long)(params->field_mask & ~WRITER_KNOWN_FIELDS));
            status = WEFT_ERR_INVALID_PARAM;
            goto err_free;
        }
        if (params->field_mask & WEFT_OPTIM_WRITER_FIELD_FORMAT) {
            w->format = params->format;
        }
        if (params->field_mask & WEFT_OPTIM_WRITER_FIELD_QUANT) {
            w->quant = params->quant;
        }
    }
    if (w->format != WEFT_OPTIM_WRITE_FP8 && w->format != WEFT_OPTIM_WRITE_BF16) {
        weft_log_error("weft_optim_writer_create: unknown format %d", (int)w->format);
        status = WEFT_ERR_INVALID_PARAM;
        goto err_free;
    }
    if (w->quant.field_mask & WEFT_QUANT_FIELD_BLOCK) {
        w->block = w->quant.block;
    }
    if (w->quant.field_mask & WEFT_QUANT_FIELD_WRITE_WT) {
        w->write_wt = w->quant.write_wt;
    }
    /* The formula is checked now, so that a bad one fails here rather
     * than in the middle of a step. */
    if ((w->quant.field_mask & WEFT_QUANT_FIELD_FORMULA) &&
        (weft_quant_formula_name(w->quant.formula) == NULL ||
         (w->quant.formula == WEFT_QUANT_FORMULA_REFERENCE && (w->quant.field_mask & WEFT_QUANT_FIELD_UE8M0) &&
          w->quant.ue8m0))) {
        weft_log_error("weft_optim_writer_create: quant.formula %d is unknown or asks for UE8M0 scales, which the "
                       "reference formula does not define",
                       (int)w->quant.formula);
        status = WEFT_ERR_INVALID_PARAM;
        goto err_free;
    }
    if (w->block == 0 || (w->block & (w->block - 1)) != 0 || (w->write_wt != 0 && w->write_wt != 1)) {
        weft_log_error("weft_optim_writer_create: quant.block %u (a power of two) or write_wt %d (0 or 1)", w->block,
                       w->write_wt);
        status = WEFT_ERR_INVALID_PARAM;
        goto err_free;
    }
    w->groups = opt->group_count;
    for (uint32_t i = 0; i < w->groups; i++) {
        units += opt->groups[i].units;
    }
    w->first   = calloc(w->groups ? w->groups : 1, sizeof(*w->first));
    w->tensors = calloc(units ? units : 1, sizeof(*w->tensors));
    if (w->first == NULL || w->tensors == NULL) {
        status = WEFT_ERR_NO_MEMORY;
        goto err_free;
    }
    status = resolve_all(w);
    if (status != WEFT_OK) {
        goto err_free;
    }
    *out = w;
    return WEFT_OK;

err_free:
    free(w->first);
    free(w->tensors);
    free(w);
    return status;
}

weft_status_t weft_optim_writer_write(void *arg, const weft_optim_unit_t *unit)
{
    weft_optim_writer_h w = arg;
    const uint32_t     *t;
    void               *ptr[ROLES] = {NULL, NULL, NULL};
    weft_status_t       status;

    if (w == NULL || unit == NULL || unit->group >= w->groups) {
        weft_log_error("weft_optim_writer_write: NULL writer or unit, or a group the writer does not know");
        return WEFT_ERR_INVALID_PARAM;
    }
    t = w->tensors[w->first[unit->group] + (unit->expert >= 0 ? (uint64_t)unit->expert : 0)];
    for (int r = 0; r < ROLES; r++) {
        if (r == ROLE_W || (w->format == WEFT_OPTIM_WRITE_FP8 && (r == ROLE_SCALE || w->write_wt))) {
            status = weft_registry_write_tensor(w->reg, t[r], &ptr[r]);
            if (status != WEFT_OK) {
                return status;
            }
        }
    }
    if (w->format == WEFT_OPTIM_WRITE_BF16) {
        const size_t n = (size_t)(unit->rows * unit->cols);
        if (unit->memory == WEFT_MEMORY_HOST) {
            weft_bf16_from_float_host(unit->master, ptr[ROLE_W], n);
            return WEFT_OK;
        }
        return weft_bf16_from_float_cuda(unit->master, ptr[ROLE_W], n, unit->stream);
    }
    {
        const weft_quant_matrix_t m = {.x = unit->master, .w = ptr[ROLE_W], .wt = ptr[ROLE_WT], .scale_inv = ptr[ROLE_SCALE]};
        weft_quant_params_t       q = w->quant;

        q.field_mask |= WEFT_QUANT_FIELD_WRITE_WT;
        q.write_wt = w->write_wt;
        return unit->memory == WEFT_MEMORY_HOST
                   ? weft_quant_host(&q, WEFT_DTYPE_FP32, unit->rows, unit->cols, &m, 1)
                   : weft_quant_cuda(&q, WEFT_DTYPE_FP32, unit->rows, unit->cols, &m, 1, unit->stream);
    }
}

weft_status_t weft_optim_writer_destroy(weft_optim_writer_h w)
{
    if (w != NULL) {
        free(w->first);
        free(w->tensors);
        free(w);
    }
    return WEFT_OK;
}
