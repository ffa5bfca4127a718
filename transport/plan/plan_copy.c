/*
 * weft_plan_copy and weft_plan_receive: replaying a plan for one version,
 * through the plan's backend, and recording the outcome for a consumer.
 */
#include "config.h"

#include "common/env_config.h"
#include "common/log.h"
#include "transport/plan/plan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <weft/checksum.h>

weft_status_t weft_plan_slot_base(struct weft_plan *plan, const weft_lease_t *lease,
                                  const uint8_t **base)
{
    const void    *first, *data;
    const uint8_t *arena;
    weft_status_t  status;

    status = weft_registry_lease_tensor(plan->reg, lease, plan->views[0].tensor, &first);
    if (status != WEFT_OK) {
        weft_log_error("plan: cannot read tensor \"%s\" of version %" PRIu64 ": %s",
                       plan->views[0].name, lease->version, weft_status_string(status));
        return status;
    }
    arena = (const uint8_t *)first - plan->views[0].offset;

    /* Ranges merged across tensors assume each slot is one arena laid out
     * as the offsets say; confirm it once per slot rather than trust it. */
    if (lease->slot >= 64 || !(plan->checked_slots & (UINT64_C(1) << lease->slot))) {
        for (uint32_t v = 1; v < plan->view_count; v++) {
            status = weft_registry_lease_tensor(plan->reg, lease, plan->views[v].tensor, &data);
            if (status != WEFT_OK) {
                weft_log_error("plan: cannot read tensor \"%s\" of version %" PRIu64 ": %s",
                               plan->views[v].name, lease->version, weft_status_string(status));
                return status;
            }
            if ((const uint8_t *)data != arena + plan->views[v].offset) {
                weft_log_error("plan: tensor \"%s\" of slot %u is not at its offset %" PRIu64
                               " in the slot's arena",
                               plan->views[v].name, lease->slot, plan->views[v].offset);
                return WEFT_ERR_CORRUPT;
            }
        }
        if (lease->slot < 64) {
            plan->checked_slots |= UINT64_C(1) << lease->slot;
        }
    }
    *base = arena;
    return WEFT_OK;
}

void weft_plan_fail_next_copy(weft_plan_h plan, weft_status_t status)
{
    plan->fault = status;
}

/* A lease on a version being written (weft_registry_wait_ready) reads
 * only the tensors announced final, a prefix of the declaration order:
 * the plan's last tensor must be one of them. */
static weft_status_t plan_tensors_final(struct weft_plan *plan, const weft_lease_t *lease)
{
    const void *data;

    return plan->view_count > 0 ? weft_registry_lease_tensor(plan->reg, lease, plan->last_tensor, &data) : WEFT_OK;
}

/*
 * Verified versions (WEFT_VERIFY transfers or all, a registry with
 * checksums): each view that holds its tensor verbatim is summed where it
 * landed (host views on the CPU; device views, all on one GPU, in one
 * launch there) and compared with the sum its version's publish stored.
 */
static weft_status_t plan_check(struct weft_plan *plan, const weft_lease_t *lease)
{
    const uint32_t  n = plan->view_count;
    uint64_t        want, *got = NULL, *bytes = NULL, *wants = NULL;
    const uint8_t **ptrs = NULL;
    uint32_t       *which = NULL, k = 0;
    int             device_views = 0;
    weft_status_t   status = WEFT_OK;

    if (n == 0 || weft_verify_mode() == WEFT_VERIFY_NONE ||
        weft_registry_tensor_checksum(plan->reg, lease, plan->views[0].tensor, &want) != WEFT_OK) {
        return WEFT_OK; /* no checksums to check against */
    }
    got = calloc(n, sizeof(*got));
    bytes = calloc(n, sizeof(*bytes));
    wants = calloc(n, sizeof(*wants));
    ptrs = calloc(n, sizeof(*ptrs));
    which = calloc(n, sizeof(*which));
    if (got == NULL || bytes == NULL || wants == NULL || ptrs == NULL || which == NULL) {
        status = WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n && status == WEFT_OK; i++) {
        const weft_plan_view_t *v = &plan->views[i];

        if (v->verbatim && weft_registry_tensor_checksum(plan->reg, lease, v->tensor, &wants[k]) == WEFT_OK) {
            device_views |= v->memory == WEFT_MEMORY_CUDA;
            ptrs[k] = v->data;
            bytes[k] = v->bytes;
            which[k++] = i;
        }
    }
    if (status == WEFT_OK && device_views) {
        status = weft_checksum_cuda_ranges_where(ptrs, bytes, k, got, &plan->sum_scratch);
    } else if (status == WEFT_OK) {
        for (uint32_t j = 0; j < k; j++) {
            got[j] = weft_checksum_host(ptrs[j], bytes[j]);
        }
    }
    for (uint32_t j = 0; j < k && status == WEFT_OK; j++) {
        if (got[j] != wants[j]) {
            weft_log_error("plan: view of \"%s\" fails its checksum in version %" PRIu64 " (0x%016" PRIx64
                           ", published 0x%016" PRIx64 ")",
                           plan->views[which[j]].name, lease->version, got[j], wants[j]);
            status = WEFT_ERR_CORRUPT;
        }
    }
    if (status == WEFT_OK) {
        weft_log_debug("plan: version %" PRIu64 ": %u of %u views checked against its checksums", lease->version, k,
                       n);
    }
    free(got);
    free(bytes);
    free(wants);
    free(ptrs);
    free(which);
    return status;
}

/* Moves one version's bytes (and checks them); records nothing. */
static weft_status_t plan_transfer(struct weft_plan *plan, const weft_lease_t *lease)
{
    weft_status_t status = plan_tensors_final(plan, lease);

    if (status != WEFT_OK) {
        return status;
    }
    if (plan->fault != WEFT_OK) {
        status      = plan->fault;
        plan->fault = WEFT_OK;
        weft_log_warn("plan: copy of version %" PRIu64 " fails on purpose (test hook): %s",
                      lease->version, weft_status_string(status));
        return status;
    }
    status = plan->ops->post(plan, lease);
    if (status == WEFT_INPROGRESS) {
        status = plan->ops->wait != NULL ? plan->ops->wait(plan) : WEFT_ERR_STATE;
    }
    return status == WEFT_OK ? plan_check(plan, lease) : status;
}

static void plan_count(struct weft_plan *plan, weft_status_t status, uint64_t version)
{
    if (status == WEFT_OK) {
        atomic_fetch_add_explicit(&plan->versions_copied, 1, memory_order_relaxed);
        atomic_store_explicit(&plan->last_version, version, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&plan->copy_failures, 1, memory_order_relaxed);
        weft_log_error("plan: %s copy of version %" PRIu64 " failed: %s", plan->ops->name,
                       version, weft_status_string(status));
    }
}

WEFT_API weft_status_t weft_plan_copy(weft_plan_h plan, const weft_lease_t *lease)
{
    weft_status_t status;

    if (plan == NULL || lease == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = plan_transfer(plan, lease);
    plan_count(plan, status, lease->version);
    return status;
}

WEFT_API weft_status_t weft_plan_receive(weft_plan_h plan, uint32_t consumer,
                                         uint64_t after_version, uint64_t timeout_us,
                                         uint64_t *version)
{
    weft_lease_t  lease;
    weft_status_t status, release_status, record_status;

    if (plan == NULL || version == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = weft_registry_wait(plan->reg, after_version, timeout_us, &lease);
    if (status != WEFT_OK) {
        return status; /* no version came, so there is nothing to record */
    }

    status         = plan_transfer(plan, &lease);
    release_status = weft_registry_release(plan->reg, &lease);
    if (release_status != WEFT_OK) {
        /* A lease lost during the copy means the slot may have been
         * rewritten under it: the bytes cannot be trusted. */
        weft_log_error("plan: releasing the lease of version %" PRIu64 " failed: %s",
                       lease.version, weft_status_string(release_status));
        if (status == WEFT_OK) {
            status = release_status;
        }
    }
    plan_count(plan, status, lease.version);

    if (status != WEFT_OK) {
        record_status = weft_registry_consumer_failed(plan->reg, consumer, lease.version, status);
        if (record_status != WEFT_OK) {
            weft_log_error("plan: cannot record the failure of version %" PRIu64
                           " for consumer %u: %s",
                           lease.version, consumer, weft_status_string(record_status));
        }
        return status;
    }
    status = weft_registry_consumer_received(plan->reg, consumer, lease.version);
    if (status != WEFT_OK) {
        weft_log_error("plan: cannot record version %" PRIu64 " as received by consumer %u: %s",
                       lease.version, consumer, weft_status_string(status));
        return status;
    }
    *version = lease.version;
    return WEFT_OK;
}
