/*
 * The optimizer object: creation, groups and their state, the step's
 * checks and the dispatch to the placement's step (step_host.c,
 * gpu_cuda.c).
 */
#include "config.h"

#include "optim_impl.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OPTIM_KNOWN_FIELDS                                                                  \
    ((uint64_t)(WEFT_OPTIM_FIELD_PLACEMENT | WEFT_OPTIM_FIELD_DEVICE | WEFT_OPTIM_FIELD_SLOT_COUNT | \
                WEFT_OPTIM_FIELD_SLOT_BYTES | WEFT_OPTIM_FIELD_THREADS))
#define GROUP_KNOWN_FIELDS                                                                                 \
    ((uint64_t)(WEFT_OPTIM_GROUP_FIELD_ADAMW | WEFT_OPTIM_GROUP_FIELD_ADOPT | WEFT_OPTIM_GROUP_FIELD_MUON |                  \
                WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING))
#define STEP_KNOWN_FIELDS  ((uint64_t)(WEFT_OPTIM_STEP_FIELD_WRITER | WEFT_OPTIM_STEP_FIELD_STREAM))

#define SLOT_COUNT_DEFAULT 3u
#define SLOT_BYTES_DEFAULT (256ull << 20)

static const weft_adamw_hparams_t adamw_defaults = {
    .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2};
static const weft_muon_hparams_t muon_defaults = {.lr           = 0.02,
                                                  .momentum     = 0.95,
                                                  .weight_decay = 0.0,
                                                  .nesterov     = 1,
                                                  .ns_steps     = 5,
                                                  .scale        = WEFT_MUON_SCALE_SHAPE,
                                                  .schedule     = WEFT_MUON_NS_SIMPLE};

static uint32_t online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n <= 1024 ? (uint32_t)n : 1u;
}

weft_status_t weft_optim_create(const weft_optim_params_t *params, weft_optim_h *out)
{
    weft_optim_h  opt;
    weft_status_t status;

    if (out == NULL) {
        weft_log_error("weft_optim_create: NULL output");
        return WEFT_ERR_INVALID_PARAM;
    }
    opt = calloc(1, sizeof(*opt));
    if (opt == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    opt->placement  = WEFT_OPTIM_HOST;
    opt->threads    = online_cpus();
    opt->slot_count = SLOT_COUNT_DEFAULT;
    opt->slot_bytes = SLOT_BYTES_DEFAULT;
    if (params != NULL) {
        const uint64_t mask = params->field_mask;
        if ((mask & ~OPTIM_KNOWN_FIELDS) != 0) {
            weft_log_error("weft_optim_create: unknown field_mask bits 0x%llx",
                           (unsigned long long)(mask & ~OPTIM_KNOWN_FIELDS));
            goto err_invalid;
        }
        if (mask & WEFT_OPTIM_FIELD_PLACEMENT) {
            opt->placement = params->placement;
        }
        if (mask & WEFT_OPTIM_FIELD_DEVICE) {
            opt->device = params->device;
        }
        if (mask & WEFT_OPTIM_FIELD_SLOT_COUNT) {
            opt->slot_count = params->slot_count;
        }
        if (mask & WEFT_OPTIM_FIELD_SLOT_BYTES) {
            opt->slot_bytes = params->slot_bytes;
        }
        if (mask & WEFT_OPTIM_FIELD_THREADS) {
            opt->threads = params->threads;
        }
    }
    if (opt->placement < WEFT_OPTIM_HOST || opt->placement > WEFT_OPTIM_RESIDENT) {
        weft_log_error("weft_optim_create: unknown placement %d", (int)opt->placement);
        goto err_invalid;
    }
    if (opt->device < 0 || opt->slot_count < 2 || opt->slot_count > 64 || opt->slot_bytes < 4096 ||
        opt->threads < 1 || opt->threads > 1024) {
        weft_log_error("weft_optim_create: out of range: device %d, slot_count %u (2..64), slot_bytes %llu "
                       "(at least 4096), threads %u (1..1024)",
                       (int)opt->device, opt->slot_count, (unsigned long long)opt->slot_bytes, opt->threads);
        goto err_invalid;
    }
    if (opt->placement != WEFT_OPTIM_HOST) {
        status = optim_gpu_create(opt);
        if (status != WEFT_OK) {
            free(opt);
            return status;
        }
    }
    *out = opt;
    return WEFT_OK;

err_invalid:
    free(opt);
    return WEFT_ERR_INVALID_PARAM;
}

static void group_state_free(weft_optim_h opt, optim_group_t *g)
{
    if (g->adopted) {
        return;
    }
    if (opt->placement == WEFT_OPTIM_HOST) {
        for (int i = 0; i < g->arrays; i++) {
            free(g->state[i]);
        }
    } else {
        optim_gpu_state_free(opt, g);
    }
}

weft_status_t weft_optim_destroy(weft_optim_h opt)
{
    if (opt == NULL) {
        return WEFT_OK;
    }
    /* The GPU's work of the last step first: its copies out still write
     * the pinned state. */
    if (opt->gpu != NULL) {
        optim_gpu_destroy(opt);
    }
    for (uint32_t i = 0; i < opt->group_count; i++) {
        group_state_free(opt, &opt->groups[i]);
    }
    free(opt->groups);
    free(opt);
    return WEFT_OK;
}

static int adamw_ok(const char *who, const weft_adamw_hparams_t *h)
{
    /* Written so that a NaN fails every test. */
    if (!(h->lr >= 0 && h->lr < INFINITY) || !(h->beta1 >= 0 && h->beta1 < 1) ||
        !(h->beta2 >= 0 && h->beta2 < 1) || !(h->eps > 0 && h->eps < INFINITY) ||
        !(h->weight_decay >= 0 && h->weight_decay < INFINITY)) {
        weft_log_error("%s: AdamW hyperparameters out of range: lr %g (≥ 0), betas (%g, %g) (in [0, 1)), "
                       "eps %g (> 0), weight_decay %g (≥ 0)",
                       who, h->lr, h->beta1, h->beta2, h->eps, h->weight_decay);
        return 0;
    }
    return 1;
}

static int muon_ok(const char *who, const weft_muon_hparams_t *h)
{
    if (!(h->lr >= 0 && h->lr < INFINITY) || !(h->momentum >= 0 && h->momentum < 1) ||
        !(h->weight_decay >= 0 && h->weight_decay < INFINITY) || (h->nesterov != 0 && h->nesterov != 1) ||
        h->ns_steps < 1 || h->ns_steps > WEFT_MUON_NS_STEPS_MAX ||
        (h->scale != WEFT_MUON_SCALE_SHAPE && h->scale != WEFT_MUON_SCALE_MATCH_ADAMW) ||
        (h->schedule != WEFT_MUON_NS_SIMPLE && h->schedule != WEFT_MUON_NS_QUINTIC) ||
        (h->schedule == WEFT_MUON_NS_QUINTIC && h->ns_steps % 5 != 0)) {
        weft_log_error("%s: Muon hyperparameters out of range: lr %g (≥ 0), momentum %g (in [0, 1)), "
                       "weight_decay %g (≥ 0), nesterov %d (0 or 1), ns_steps %u (1..%d; a multiple of 5 for "
                       "the quintic schedule), scale %d, schedule %d",
                       who, h->lr, h->momentum, h->weight_decay, h->nesterov, h->ns_steps, WEFT_MUON_NS_STEPS_MAX,
                       (int)h->scale, (int)h->schedule);
        return 0;
    }
    return 1;
}

static uint64_t slot_align(uint64_t bytes)
{
    return (bytes + OPTIM_SLOT_ALIGN - 1) / OPTIM_SLOT_ALIGN * OPTIM_SLOT_ALIGN;
}

uint64_t optim_slot_need(const optim_group_t *g, uint64_t count, weft_dtype_t host_grad_dtype)
{
    uint64_t need = (uint64_t)g->arrays * slot_align(count * g->unit_elems * sizeof(float));

    if (host_grad_dtype != WEFT_DTYPE_INVALID) {
        need += slot_align(count * g->unit_elems * weft_dtype_size(host_grad_dtype));
    }
    return need;
}

uint64_t optim_slot_units(const weft_optim_h opt, const optim_group_t *g, weft_dtype_t host_grad_dtype)
{
    const uint64_t one = optim_slot_need(g, 1, host_grad_dtype);
    uint64_t       count;

    if (one > opt->slot_bytes) {
        return 0;
    }
    /* The alignment padding is at most one OPTIM_SLOT_ALIGN an array:
     * start from the estimate and step down to what fits. */
    count = opt->slot_bytes / one;
    count = count < g->units ? count : g->units;
    while (count > 1 && optim_slot_need(g, count, host_grad_dtype) > opt->slot_bytes) {
        count--;
    }
    return count;
}

static weft_status_t group_check(weft_optim_h opt, const weft_optim_group_desc_t *d)
{
    static const char *who = "weft_optim_add_group";
    size_t             len;

    if ((d->field_mask & ~GROUP_KNOWN_FIELDS) != 0) {
        weft_log_error("%s: unknown field_mask bits 0x%llx", who,
                       (unsigned long long)(d->field_mask & ~GROUP_KNOWN_FIELDS));
        return WEFT_ERR_INVALID_PARAM;
    }
    len = d->name != NULL ? strnlen(d->name, WEFT_OPTIM_NAME_MAX) : 0;
    if (len == 0 || len >= WEFT_OPTIM_NAME_MAX) {
        weft_log_error("%s: a group name is 1 to %d bytes", who, WEFT_OPTIM_NAME_MAX - 1);
        return WEFT_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < opt->group_count; i++) {
        if (strcmp(opt->groups[i].name, d->name) == 0) {
            weft_log_error("%s: group \"%s\" exists already", who, d->name);
            return WEFT_ERR_INVALID_PARAM;
        }
    }
    if (d->algo != WEFT_OPTIM_ADAMW && d->algo != WEFT_OPTIM_MUON) {
        weft_log_error("%s: group \"%s\": unknown algorithm %d", who, d->name, (int)d->algo);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (d->algo == WEFT_OPTIM_MUON && (d->rows < 2 || d->cols < 2)) {
        weft_log_error("%s: group \"%s\": Muon is for matrices; a %llu × %llu tensor takes AdamW", who, d->name,
                       (unsigned long long)d->rows, (unsigned long long)d->cols);
        return WEFT_ERR_INVALID_PARAM;
    }
    /* Elements of the whole group, and of a unit, fit in size_t and in the
     * kernels' 64-bit indices. */
    if (d->rows == 0 || d->cols == 0 || d->rows > (UINT64_C(1) << 40) / d->cols ||
        (uint64_t)(d->experts ? d->experts : 1) > (UINT64_C(1) << 40) / (d->rows * d->cols)) {
        weft_log_error("%s: group \"%s\": bad shape [%u, %llu, %llu]", who, d->name, d->experts,
                       (unsigned long long)d->rows, (unsigned long long)d->cols);
        return WEFT_ERR_INVALID_PARAM;
    }
    if ((d->field_mask & WEFT_OPTIM_GROUP_FIELD_ADAMW) && !adamw_ok(who, &d->adamw)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if ((d->field_mask & WEFT_OPTIM_GROUP_FIELD_MUON) && !muon_ok(who, &d->muon)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if ((d->field_mask & WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING) && d->muon_rounding != WEFT_MUON_ROUNDING_EAGER &&
        d->muon_rounding != WEFT_MUON_ROUNDING_FUSED) {
        weft_log_error("%s: group \"%s\": unknown Muon rounding %d (WEFT_MUON_ROUNDING_EAGER or _FUSED)", who,
                       d->name, (int)d->muon_rounding);
        return WEFT_ERR_INVALID_PARAM;
    }
    if ((d->field_mask & WEFT_OPTIM_GROUP_FIELD_ADOPT) &&
        (d->master == NULL || d->exp_avg == NULL || (d->algo == WEFT_OPTIM_ADAMW && d->exp_avg_sq == NULL))) {
        weft_log_error("%s: group \"%s\": adopting needs master and exp_avg (and exp_avg_sq for AdamW)", who,
                       d->name);
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_OK;
}

static weft_status_t host_state_alloc(weft_optim_h opt, optim_group_t *g)
{
    const size_t bytes = (size_t)(g->units * g->unit_elems * sizeof(float));

    for (int i = 0; i < g->arrays; i++) {
        if (posix_memalign((void **)&g->state[i], 64, bytes) != 0) {
            for (int j = 0; j < i; j++) {
                free(g->state[j]);
                g->state[j] = NULL;
            }
            weft_log_error("weft_optim_add_group: group \"%s\": cannot allocate %zu bytes of state", g->name,
                           bytes);
            return WEFT_ERR_NO_MEMORY;
        }
        memset(g->state[i], 0, bytes);
    }
    opt->host_bytes += (uint64_t)g->arrays * bytes;
    return WEFT_OK;
}

weft_status_t weft_optim_add_group(weft_optim_h opt, const weft_optim_group_desc_t *desc, uint32_t *group)
{
    optim_group_t g;
    weft_status_t status;

    if (opt == NULL || desc == NULL) {
        weft_log_error("weft_optim_add_group: NULL argument");
        return WEFT_ERR_INVALID_PARAM;
    }
    if (opt->step > 0 || opt->broken) {
        weft_log_error("weft_optim_add_group: groups are added before the first step");
        return WEFT_ERR_STATE;
    }
    status = group_check(opt, desc);
    if (status != WEFT_OK) {
        return status;
    }
    memset(&g, 0, sizeof(g));
    memcpy(g.name, desc->name, strlen(desc->name) + 1);
    g.algo       = desc->algo;
    g.experts    = desc->experts;
    g.units      = desc->experts ? desc->experts : 1;
    g.rows       = desc->rows;
    g.cols       = desc->cols;
    g.unit_elems = desc->rows * desc->cols;
    g.adamw      = (desc->field_mask & WEFT_OPTIM_GROUP_FIELD_ADAMW) ? desc->adamw : adamw_defaults;
    g.muon       = (desc->field_mask & WEFT_OPTIM_GROUP_FIELD_MUON) ? desc->muon : muon_defaults;
    g.muon_rounding =
        (desc->field_mask & WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING) ? desc->muon_rounding : WEFT_MUON_ROUNDING_FUSED;
    g.arrays     = g.algo == WEFT_OPTIM_MUON ? 2 : 3;
    if (opt->placement == WEFT_OPTIM_STAGED && optim_slot_need(&g, 1, WEFT_DTYPE_INVALID) > opt->slot_bytes) {
        weft_log_error("weft_optim_add_group: group \"%s\": a %llu × %llu matrix needs %llu bytes of slot "
                       "(master and optimizer state) but a slot has %llu; raise slot_bytes",
                       g.name, (unsigned long long)g.rows, (unsigned long long)g.cols,
                       (unsigned long long)optim_slot_need(&g, 1, WEFT_DTYPE_INVALID),
                       (unsigned long long)opt->slot_bytes);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (opt->group_count == opt->group_capacity) {
        uint32_t       cap    = opt->group_capacity ? opt->group_capacity * 2 : 8;
        optim_group_t *groups = realloc(opt->groups, cap * sizeof(*groups));
        if (groups == NULL) {
            return WEFT_ERR_NO_MEMORY;
        }
        opt->groups         = groups;
        opt->group_capacity = cap;
    }
    if (g.algo == WEFT_OPTIM_MUON && opt->placement != WEFT_OPTIM_HOST) {
        status = optim_gpu_muon_prepare(opt, &g);
        if (status != WEFT_OK) {
            return status;
        }
    }
    if (desc->field_mask & WEFT_OPTIM_GROUP_FIELD_ADOPT) {
        g.state[0] = desc->master;
        g.state[1] = desc->exp_avg;
        g.state[2] = g.arrays == 3 ? desc->exp_avg_sq : NULL;
        g.adopted  = 1;
    } else {
        status = opt->placement == WEFT_OPTIM_HOST ? host_state_alloc(opt, &g) : optim_gpu_state_alloc(opt, &g);
        if (status != WEFT_OK) {
            return status;
        }
    }
    opt->groups[opt->group_count] = g;
    if (group != NULL) {
        *group = opt->group_count;
    }
    opt->group_count++;
    return WEFT_OK;
}

weft_status_t weft_optim_group_set_adamw(weft_optim_h opt, uint32_t group, const weft_adamw_hparams_t *hparams)
{
    if (opt == NULL || hparams == NULL || group >= opt->group_count ||
        opt->groups[group].algo != WEFT_OPTIM_ADAMW) {
        weft_log_error("weft_optim_group_set_adamw: no AdamW group %u", group);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!adamw_ok("weft_optim_group_set_adamw", hparams)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    opt->groups[group].adamw = *hparams;
    return WEFT_OK;
}

weft_status_t weft_optim_group_set_muon(weft_optim_h opt, uint32_t group, const weft_muon_hparams_t *hparams)
{
    if (opt == NULL || hparams == NULL || group >= opt->group_count ||
        opt->groups[group].algo != WEFT_OPTIM_MUON) {
        weft_log_error("weft_optim_group_set_muon: no Muon group %u", group);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!muon_ok("weft_optim_group_set_muon", hparams)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    opt->groups[group].muon = *hparams;
    return WEFT_OK;
}

weft_status_t weft_optim_group_state(weft_optim_h opt, uint32_t group, weft_optim_state_t state, float **data)
{
    int index = -1;

    if (opt != NULL && data != NULL && group < opt->group_count) {
        const int muon = opt->groups[group].algo == WEFT_OPTIM_MUON;
        switch (state) {
        case WEFT_OPTIM_STATE_MASTER: index = 0; break;
        case WEFT_OPTIM_STATE_EXP_AVG: index = muon ? -1 : 1; break;
        case WEFT_OPTIM_STATE_EXP_AVG_SQ: index = muon ? -1 : 2; break;
        case WEFT_OPTIM_STATE_MOMENTUM: index = muon ? 1 : -1; break;
        }
    }
    if (index < 0) {
        weft_log_error("weft_optim_group_state: no group %u, or no state %d in it", group, (int)state);
        return WEFT_ERR_INVALID_PARAM;
    }
    *data = opt->groups[group].state[index];
    return WEFT_OK;
}

weft_status_t weft_optim_get_info(weft_optim_h opt, weft_optim_info_t *info)
{
    weft_optim_info_t out = {0};

    if (opt == NULL || info == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    out.placement    = opt->placement;
    out.groups       = opt->group_count;
    out.step         = opt->step;
    out.host_bytes   = opt->host_bytes;
    out.device_bytes = opt->device_bytes;
    if (opt->placement == WEFT_OPTIM_STAGED) {
        out.slot_count = opt->slot_count;
        out.slot_bytes = opt->slot_bytes;
    }
    for (uint32_t i = 0; i < opt->group_count; i++) {
        out.units += opt->groups[i].units;
        out.parameters += opt->groups[i].units * opt->groups[i].unit_elems;
    }
    *info = out;
    return WEFT_OK;
}

void optim_unit_init(const weft_optim_h opt, uint32_t group, uint32_t unit, const float *master,
                     weft_memory_kind_t memory, void *stream, weft_optim_unit_t *out)
{
    const optim_group_t *g = &opt->groups[group];

    out->group  = group;
    out->expert = g->experts ? (int32_t)unit : -1;
    out->name   = g->name;
    out->rows   = g->rows;
    out->cols   = g->cols;
    out->step   = opt->step + 1;
    out->master = master;
    out->memory = memory;
    out->stream = stream;
}

static weft_status_t step_check(weft_optim_h opt, const weft_optim_grad_t *grads, uint32_t count,
                                const weft_optim_step_params_t *params)
{
    static const char *who = "weft_optim_step";

    if (opt->broken) {
        weft_log_error("%s: an earlier step stopped part-way; restore a checkpoint or destroy the optimizer",
                       who);
        return WEFT_ERR_STATE;
    }
    if (params != NULL && (params->field_mask & ~STEP_KNOWN_FIELDS) != 0) {
        weft_log_error("%s: unknown field_mask bits 0x%llx", who,
                       (unsigned long long)(params->field_mask & ~STEP_KNOWN_FIELDS));
        return WEFT_ERR_INVALID_PARAM;
    }
    if (params != NULL && (params->field_mask & WEFT_OPTIM_STEP_FIELD_WRITER) && params->writer == NULL) {
        weft_log_error("%s: WEFT_OPTIM_STEP_FIELD_WRITER with a NULL writer", who);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (count != opt->group_count || (count > 0 && grads == NULL)) {
        weft_log_error("%s: %u gradients for %u groups", who, count, opt->group_count);
        return WEFT_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < count; i++) {
        const weft_optim_grad_t *gr = &grads[i];
        if (gr->data == NULL || (gr->dtype != WEFT_DTYPE_FP32 && gr->dtype != WEFT_DTYPE_BF16)) {
            weft_log_error("%s: group \"%s\": the gradient must be FP32 or BF16 and not NULL", who,
                           opt->groups[i].name);
            return WEFT_ERR_INVALID_PARAM;
        }
        if (gr->memory != WEFT_MEMORY_HOST && gr->memory != WEFT_MEMORY_CUDA) {
            weft_log_error("%s: group \"%s\": unknown gradient memory %d", who, opt->groups[i].name,
                           (int)gr->memory);
            return WEFT_ERR_INVALID_PARAM;
        }
        if (opt->placement == WEFT_OPTIM_HOST && gr->memory != WEFT_MEMORY_HOST) {
            weft_log_error("%s: group \"%s\": a host optimizer takes host gradients", who, opt->groups[i].name);
            return WEFT_ERR_INVALID_PARAM;
        }
        if (opt->placement != WEFT_OPTIM_HOST) {
            weft_status_t status = optim_gpu_grad_check(opt, i, gr);
            if (status != WEFT_OK) {
                return status;
            }
        }
    }
    return WEFT_OK;
}

weft_status_t weft_optim_step(weft_optim_h opt, const weft_optim_grad_t *grads, uint32_t count,
                              const weft_optim_step_params_t *params)
{
    static const weft_optim_step_params_t no_params = {0};
    optim_scalars_t                      *scalars;
    weft_status_t                         status;

    if (opt == NULL) {
        weft_log_error("weft_optim_step: NULL optimizer");
        return WEFT_ERR_INVALID_PARAM;
    }
    status = step_check(opt, grads, count, params);
    if (status != WEFT_OK) {
        return status;
    }
    if (params == NULL) {
        params = &no_params;
    }
    scalars = malloc((count ? count : 1) * sizeof(*scalars));
    if (scalars == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < count; i++) {
        const optim_group_t *g = &opt->groups[i];
        if (g->algo == WEFT_OPTIM_MUON) {
            const weft_muon_hparams_t *h = &g->muon;
            const double               r = (double)g->rows, c = (double)g->cols;
            const double scale = h->scale == WEFT_MUON_SCALE_MATCH_ADAMW ? 0.2 * sqrt(r > c ? r : c)
                                                                         : sqrt(r > c ? r / c : 1.0);
            weft_muon_scalars(h->lr, h->momentum, h->weight_decay, h->nesterov, scale, &scalars[i].muon);
        } else {
            const weft_adamw_hparams_t *h = &g->adamw;
            weft_adamw_scalars(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, opt->step + 1,
                               &scalars[i].adamw);
        }
    }
    status = opt->placement == WEFT_OPTIM_HOST ? optim_host_step(opt, grads, scalars, params)
                                               : optim_gpu_step(opt, grads, scalars, params);
    free(scalars);
    if (status == WEFT_OK) {
        opt->step++;
    }
    return status;
}
