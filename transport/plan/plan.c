/*
 * weft_plan_create, _stats, _destroy: matching receive views to registry
 * tensors, the checks that make a copy unable to fail on layout, and the
 * copy ranges every backend replays.
 */
#include "config.h"

#include "common/log.h"
#include "common/text.h"
#include "transport/plan/plan.h"
#include "transport/core/catalog.h"
#include "transport/core/view_layout.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VIEW_FIELDS_KNOWN (WEFT_RECV_VIEW_FIELD_STRIDES | WEFT_RECV_VIEW_FIELD_MEMORY)
#define NO_VIEW           UINT32_MAX

static const char *role_name(weft_tensor_role_t role)
{
    switch (role) {
    case WEFT_ROLE_W:
        return "w";
    case WEFT_ROLE_WT:
        return "wt";
    case WEFT_ROLE_SCALE:
        return "scale";
    }
    return "invalid";
}

static void format_shape(char *buf, size_t size, uint32_t ndim, const uint64_t *shape)
{
    buf[0] = '\0';
    weft_text_append(buf, size, "[");
    for (uint32_t d = 0; d < ndim && d < WEFT_TENSOR_MAX_DIMS; d++) {
        weft_text_append(buf, size, "%s%" PRIu64, d ? ", " : "", shape[d]);
    }
    weft_text_append(buf, size, "]");
}

/* Field checks that need no registry. */
static weft_status_t check_view_fields(const weft_recv_view_t *view, size_t i)
{
    if (view->field_mask & ~(uint64_t)VIEW_FIELDS_KNOWN) {
        weft_log_error("plan: view %zu has unknown field_mask bits 0x%" PRIx64, i,
                       view->field_mask & ~(uint64_t)VIEW_FIELDS_KNOWN);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (view->name == NULL) {
        weft_log_error("plan: view %zu has no name", i);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (view->data == NULL) {
        weft_log_error("plan: view %zu, tensor \"%s\": data is NULL", i, view->name);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (view->ndim == 0 || view->ndim > WEFT_TENSOR_MAX_DIMS) {
        weft_log_error("plan: view %zu, tensor \"%s\": ndim %u is outside 1..%d", i, view->name,
                       view->ndim, WEFT_TENSOR_MAX_DIMS);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (weft_dtype_size(view->dtype) == 0) {
        weft_log_error("plan: view %zu, tensor \"%s\": invalid dtype %d", i, view->name,
                       (int)view->dtype);
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_OK;
}

/* The registry tensor agrees with the view in role, dtype and shape. */
static weft_status_t check_view_matches(const weft_recv_view_t *view, size_t i,
                                        const weft_tensor_info_t *info)
{
    char want[96], have[96];

    if (view->role != info->role) {
        weft_log_error("plan: view %zu, tensor \"%s\": role %s, the registry's is %s", i,
                       view->name, role_name(view->role), role_name(info->role));
        return WEFT_ERR_INVALID_PARAM;
    }
    if (view->dtype != info->dtype) {
        weft_log_error("plan: view %zu, tensor \"%s\": dtype %s, the registry's is %s", i,
                       view->name, weft_dtype_name(view->dtype), weft_dtype_name(info->dtype));
        return WEFT_ERR_INVALID_PARAM;
    }
    if (view->ndim != info->ndim ||
        memcmp(view->shape, info->shape, view->ndim * sizeof(view->shape[0])) != 0) {
        format_shape(want, sizeof(want), view->ndim, view->shape);
        format_shape(have, sizeof(have), info->ndim, info->shape);
        weft_log_error("plan: view %zu, tensor \"%s\": shape %s, the registry's is %s", i,
                       view->name, want, have);
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_OK;
}

/*
 * Matches view i to its registry tensor, checks it and appends its ranges.
 * owner[t] is the view that took tensor t, to catch a tensor named twice.
 */
static weft_status_t plan_add_view(struct weft_plan *plan, const weft_recv_view_t *view, size_t i,
                                   uint32_t *owner)
{
    weft_plan_view_t   *pv = &plan->views[i];
    weft_tensor_info_t  info;
    weft_range_tensor_t layout;
    uint64_t            dst_strides[WEFT_TENSOR_MAX_DIMS], elements, src_span, src_end;
    size_t              elem_size;
    uint32_t            index;
    weft_status_t       status;

    status = check_view_fields(view, i);
    if (status != WEFT_OK) {
        return status;
    }
    status = weft_registry_lookup(plan->reg, view->name, &index);
    if (status != WEFT_OK) {
        weft_log_error("plan: view %zu, tensor \"%s\": not in the registry (%s)", i, view->name,
                       weft_status_string(status));
        return status;
    }
    if (owner[index] != NO_VIEW) {
        weft_log_error("plan: views %u and %zu both name tensor \"%s\"", owner[index], i,
                       view->name);
        return WEFT_ERR_INVALID_PARAM;
    }
    owner[index] = (uint32_t)i;
    status       = weft_registry_tensor_info(plan->reg, index, &info);
    if (status != WEFT_OK) {
        weft_log_error("plan: tensor \"%s\": cannot describe it: %s", view->name,
                       weft_status_string(status));
        return status;
    }
    status = check_view_matches(view, i, &info);
    if (status != WEFT_OK) {
        return status;
    }

    pv->memory = (view->field_mask & WEFT_RECV_VIEW_FIELD_MEMORY) ? view->memory
                                                                  : WEFT_MEMORY_HOST;
    if (!(plan->ops->dst_memory & WEFT_MEMORY_BIT(pv->memory)) ||
        !(plan->ops->src_memory & WEFT_MEMORY_BIT(info.memory))) {
        weft_log_error("plan: view %zu, tensor \"%s\": the %s transport cannot copy from memory "
                       "kind %d to %d",
                       i, view->name, plan->ops->name, (int)info.memory, (int)pv->memory);
        return WEFT_ERR_UNSUPPORTED;
    }

    elem_size = weft_dtype_size(view->dtype);
    weft_view_strides(view, dst_strides);
    if (weft_layout_size(view->ndim, view->shape, dst_strides, elem_size, &elements, &pv->span) != 0 ||
        (uintptr_t)view->data + pv->span < (uintptr_t)view->data) {
        weft_log_error("plan: view %zu, tensor \"%s\": its strides reach past the address space",
                       i, view->name);
        return WEFT_ERR_INVALID_PARAM;
    }
    /* The registry validated its layout; checking it again keeps a bad
     * segment from turning into copies outside the arena. */
    if (weft_layout_size(info.ndim, info.shape, info.strides, elem_size, &elements, &src_span) != 0 ||
        src_span > info.bytes || __builtin_add_overflow(info.offset, info.bytes, &src_end) ||
        src_end > plan->slot_bytes) {
        weft_log_error("plan: tensor \"%s\": the registry's layout (offset %" PRIu64 ", %" PRIu64
                       " bytes) does not fit its %" PRIu64 "-byte slot",
                       view->name, info.offset, info.bytes, plan->slot_bytes);
        return WEFT_ERR_CORRUPT;
    }

    snprintf(pv->name, sizeof(pv->name), "%s", info.name);
    pv->tensor = index;
    pv->offset = info.offset;
    pv->data   = view->data;
    pv->bytes  = elements * elem_size;
    pv->verbatim = pv->span == pv->bytes && info.bytes == pv->bytes &&
                   memcmp(dst_strides, info.strides, (size_t)view->ndim * sizeof(dst_strides[0])) == 0;
    plan->bytes += pv->bytes;
    plan->last_tensor = index > plan->last_tensor ? index : plan->last_tensor;

    layout = (weft_range_tensor_t){
        .view        = (uint32_t)i,
        .elem_size   = elem_size,
        .ndim        = view->ndim,
        .shape       = view->shape,
        .src_strides = info.strides,
        .src_offset  = info.offset,
        .dst_strides = dst_strides,
        .dst         = view->data,
    };
    status = weft_ranges_append(&plan->ranges, &layout);
    if (status != WEFT_OK) {
        weft_log_error("plan: tensor \"%s\": no memory for its copy ranges", view->name);
    }
    return status;
}

/* Matches every view, then checks destinations and merges ranges. */
static weft_status_t plan_build_ranges(struct weft_plan *plan, const weft_recv_view_t *views,
                                       size_t count)
{
    uint32_t      tensor_count, *owner;
    uint64_t      a, b;
    weft_status_t status;

    status = weft_registry_tensor_count(plan->reg, &tensor_count);
    if (status != WEFT_OK) {
        weft_log_error("plan: cannot count the registry's tensors: %s",
                       weft_status_string(status));
        return status;
    }
    owner = malloc(((size_t)tensor_count + 1) * sizeof(*owner));
    if (owner == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t t = 0; t < tensor_count; t++) {
        owner[t] = NO_VIEW;
    }
    for (size_t i = 0; i < count; i++) {
        status = plan_add_view(plan, &views[i], i, owner);
        if (status != WEFT_OK) {
            goto out;
        }
    }
    plan->ranges_uncoalesced = plan->ranges.count;

    if (weft_ranges_find_dst_overlap(&plan->ranges, &a, &b)) {
        const weft_copy_range_t *ra = &plan->ranges.ranges[a], *rb = &plan->ranges.ranges[b];

        if (ra->view == rb->view) {
            weft_log_error("plan: view %u, tensor \"%s\": its strides overlap elements at %p",
                           ra->view, plan->views[ra->view].name, (void *)rb->dst);
        } else {
            weft_log_error("plan: views %u (tensor \"%s\") and %u (tensor \"%s\") share "
                           "destination bytes at %p",
                           ra->view, plan->views[ra->view].name, rb->view,
                           plan->views[rb->view].name, (void *)rb->dst);
        }
        status = WEFT_ERR_INVALID_PARAM;
        goto out;
    }
    status = weft_ranges_coalesce(&plan->ranges);
    if (status != WEFT_OK) {
        weft_log_error("plan: two registry tensors overlap in the slot arena");
    }
out:
    free(owner);
    return status;
}

WEFT_API weft_status_t weft_plan_create(weft_registry_h reg, weft_transport_t transport,
                                        const weft_recv_view_t *views, size_t count,
                                        weft_plan_h *plan_out)
{
    const weft_transport_desc_t *desc = weft_catalog_transport(transport);

    if ((int)transport <= 0) {
        weft_log_error("plan: invalid transport %d", (int)transport);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (desc == NULL) {
        weft_log_error("plan: transport %d is unknown to this libweft", (int)transport);
        return WEFT_ERR_UNSUPPORTED;
    }
    if (!desc->compiled) {
        weft_log_error("plan: libweft was built without %s: no %s transport", desc->dependency, desc->name);
        return WEFT_ERR_UNSUPPORTED;
    }
    if (desc->plan == NULL) {
        weft_log_error("plan: the %s transport is used through weft_server_create and "
                       "weft_remote_connect, not weft_plan_create",
                       desc->name);
        return WEFT_ERR_UNSUPPORTED;
    }
    return weft_plan_create_with(reg, transport, desc->plan, views, count, plan_out);
}

weft_status_t weft_plan_create_with(weft_registry_h reg, weft_transport_t transport,
                                    const weft_plan_ops_t *ops, const weft_recv_view_t *views,
                                    size_t count, weft_plan_h *plan_out)
{
    weft_registry_stats_t rstats;
    struct weft_plan     *plan;
    weft_status_t         status;

    if (reg == NULL || views == NULL || count == 0 || count >= NO_VIEW || plan_out == NULL) {
        weft_log_error("plan: invalid argument (registry %p, views %p, count %zu, plan %p)",
                       (void *)reg, (const void *)views, count, (void *)plan_out);
        return WEFT_ERR_INVALID_PARAM;
    }
    status = weft_registry_get_stats(reg, &rstats);
    if (status != WEFT_OK) {
        weft_log_error("plan: cannot read the registry's stats: %s", weft_status_string(status));
        return status;
    }

    plan = calloc(1, sizeof(*plan));
    if (plan == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    plan->views = calloc(count, sizeof(*plan->views));
    if (plan->views == NULL) {
        status = WEFT_ERR_NO_MEMORY;
        goto err_free_plan;
    }
    plan->reg        = reg;
    plan->transport  = transport;
    plan->ops        = ops;
    plan->view_count = (uint32_t)count;
    plan->slot_bytes = rstats.slot_bytes;
    plan->fault      = WEFT_OK;

    status = plan_build_ranges(plan, views, count);
    if (status != WEFT_OK) {
        goto err_free_ranges;
    }

    if (ops->open != NULL) {
        status = ops->open(plan);
        if (status != WEFT_OK) {
            weft_log_error("plan: the %s transport failed to open: %s", ops->name,
                           weft_status_string(status));
            goto err_free_ranges;
        }
    }
    if (ops->connect != NULL) {
        status = ops->connect(plan);
        if (status != WEFT_OK) {
            weft_log_error("plan: the %s transport failed to connect: %s", ops->name,
                           weft_status_string(status));
            goto err_close;
        }
    }
    if (ops->build != NULL) {
        status = ops->build(plan);
        if (status != WEFT_OK) {
            weft_log_error("plan: the %s transport failed to build the plan: %s", ops->name,
                           weft_status_string(status));
            goto err_close;
        }
    }

    weft_log_debug("plan: %s, %u tensors, %" PRIu64 " bytes in %" PRIu64 " ranges (%" PRIu64
                   " before merging)",
                   ops->name, plan->view_count, plan->bytes, plan->ranges.count,
                   plan->ranges_uncoalesced);
    *plan_out = plan;
    return WEFT_OK;

err_close:
    if (ops->close != NULL) {
        ops->close(plan);
    }
err_free_ranges:
    weft_ranges_free(&plan->ranges);
    free(plan->views);
err_free_plan:
    free(plan);
    return status;
}

WEFT_API weft_status_t weft_plan_rebind(weft_plan_h plan, const weft_recv_view_t *views,
                                        size_t count)
{
    struct weft_plan *fresh, old;
    weft_status_t     status;

    if (plan == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    /* Build the new plan completely first: a failure leaves the old one. */
    status = weft_plan_create_with(plan->reg, plan->transport, plan->ops, views, count, &fresh);
    if (status != WEFT_OK) {
        return status;
    }
    old = *plan;
    plan->backend            = fresh->backend;
    plan->views              = fresh->views;
    plan->view_count         = fresh->view_count;
    plan->bytes              = fresh->bytes;
    plan->last_tensor        = fresh->last_tensor;
    plan->ranges_uncoalesced = fresh->ranges_uncoalesced;
    plan->ranges             = fresh->ranges;
    plan->checked_slots      = 0;
    free(fresh);

    if (old.ops->close != NULL) {
        old.ops->close(&old);
    }
    weft_ranges_free(&old.ranges);
    free(old.views);
    weft_log_debug("plan: rebound to %u views, %" PRIu64 " ranges", plan->view_count,
                   plan->ranges.count);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_plan_get_stats(weft_plan_h plan, weft_plan_stats_t *stats)
{
    if (plan == NULL || stats == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    memset(stats, 0, sizeof(*stats));
    stats->transport          = plan->transport;
    stats->tensor_count       = plan->view_count;
    stats->bytes              = plan->bytes;
    stats->range_count        = plan->ranges.count;
    stats->ranges_uncoalesced = plan->ranges_uncoalesced;
    stats->versions_copied    = atomic_load_explicit(&plan->versions_copied, memory_order_relaxed);
    stats->copy_failures      = atomic_load_explicit(&plan->copy_failures, memory_order_relaxed);
    stats->last_version       = atomic_load_explicit(&plan->last_version, memory_order_relaxed);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_plan_destroy(weft_plan_h plan)
{
    if (plan == NULL) {
        return WEFT_OK;
    }
    if (plan->ops->close != NULL) {
        plan->ops->close(plan);
    }
    weft_ranges_free(&plan->ranges);
    weft_checksum_scratch_free(&plan->sum_scratch);
    free(plan->views);
    free(plan);
    return WEFT_OK;
}
