/*
 * Verified versions (ABI 1.3): the producer stores a checksum of each
 * tensor with the version it publishes; readers check a leased tensor
 * against it. <weft/checksum.h> defines the sum; on the GPU for GPU
 * arenas, where the bytes are.
 */
#include "config.h"

#include "registry_impl.h"

#include "common/log.h"
#include "device_memory.h"
#include "kernels/checksum.h"

#include <stdlib.h>
#include <weft/checksum.h>

static reg_checksum_t *checksum_record(struct weft_registry *reg, uint32_t slot, uint32_t index)
{
    reg_checksum_t *table = (reg_checksum_t *)(reg->base + reg->geo.checksum_table_offset);

    return &table[(uint64_t)slot * reg->geo.tensor_capacity + index];
}

/* A host slot's sums, on the host's CPUs (a version of 100 MB took
 * ~20 ms of a publish on one). */
static weft_status_t host_sums(struct weft_registry *reg, uint32_t slot, uint64_t *sums)
{
    const uint32_t count = reg->geo.tensor_count;
    const void   **data = malloc((size_t)(count ? count : 1) * sizeof(*data));
    uint64_t      *bytes = malloc((size_t)(count ? count : 1) * sizeof(*bytes));
    weft_status_t  status = data != NULL && bytes != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;

    for (uint32_t i = 0; i < count && status == WEFT_OK; i++) {
        data[i] = weft_registry_tensor_addr(reg, slot, i);
        bytes[i] = reg->tensors[i].bytes;
    }
    if (status == WEFT_OK && weft_checksum_host_batch(data, bytes, count, sums) != 0) {
        status = WEFT_ERR_NO_MEMORY;
    }
    free(data);
    free(bytes);
    return status;
}

weft_status_t weft_registry_sum_slot(struct weft_registry *reg, uint32_t slot, uint64_t version)
{
    const uint32_t count = reg->geo.tensor_count;
    uint64_t      *sums;
    weft_status_t  status = WEFT_OK;

    if (reg->geo.checksum_table_offset == 0) {
        return WEFT_OK;
    }
    sums = malloc((size_t)count * sizeof(*sums));
    if (sums == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        uint8_t *base;

        status = weft_registry_arena_base(reg, slot, &base);
        if (status == WEFT_OK) {
            pthread_mutex_lock(&reg->sum_lock);
            status = weft_devmem_checksums(reg->device, base, reg->tensors, count, sums, &reg->sum_scratch);
            pthread_mutex_unlock(&reg->sum_lock);
        }
    } else {
        status = host_sums(reg, slot, sums);
    }
    if (status != WEFT_OK) {
        weft_log_error("registry \"%s\": cannot sum version %llu's tensors: %s", reg->name,
                       (unsigned long long)version, weft_status_string(status));
        free(sums);
        return status;
    }
    /* Before the publish's stores of the slot word and `latest`, which
     * order these before any reader's lease of the version. */
    for (uint32_t i = 0; i < count; i++) {
        reg_checksum_t *r = checksum_record(reg, slot, i);

        REG_STORE(&r->sum, sums[i]);
        REG_STORE(&r->version, version);
    }
    free(sums);
    return WEFT_OK;
}

/* What both checks need first: a registry with checksums, a lease held
 * and a published version whose records are the lease's. */
static weft_status_t verifiable(struct weft_registry *reg, const weft_lease_t *lease)
{
    if (reg == NULL || lease == NULL || !reg->sealed) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (reg->geo.checksum_table_offset == 0) {
        return WEFT_ERR_UNSUPPORTED;
    }
    if (weft_registry_lease_record(reg, lease) == NULL) {
        weft_log_error("registry \"%s\": lease of version %llu is not held", reg->name,
                       (unsigned long long)lease->version);
        return WEFT_ERR_STATE;
    }
    /* The lease keeps the slot from being written: its records hold this
     * version's sums once it was published, or an older version's. The
     * publish stores them all before the slot word. */
    if (REG_LOAD(&checksum_record(reg, lease->slot, 0)->version) != lease->version) {
        weft_log_error("registry \"%s\": version %llu is not published yet: nothing to verify it against",
                       reg->name, (unsigned long long)lease->version);
        return WEFT_ERR_STATE;
    }
    return WEFT_OK;
}

/* Compares a sum made now with the one published; logs a mismatch. */
static weft_status_t compare(struct weft_registry *reg, const weft_lease_t *lease, uint32_t index, uint64_t got)
{
    const reg_checksum_t *r = checksum_record(reg, lease->slot, index);
    const uint64_t        want = REG_LOAD(&r->sum);

    if (REG_LOAD(&r->version) != lease->version) {
        return WEFT_ERR_STATE; /* cannot happen while the lease is held */
    }
    if (got != want) {
        weft_log_error("registry \"%s\": tensor \"%s\" of version %llu fails its checksum (0x%016llx, published "
                       "0x%016llx): its bytes changed after publish",
                       reg->name, reg->tensors[index].name, (unsigned long long)lease->version,
                       (unsigned long long)got, (unsigned long long)want);
        return WEFT_ERR_CORRUPT;
    }
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_tensor_checksum(weft_registry_h reg, const weft_lease_t *lease, uint32_t index,
                                                     uint64_t *sum)
{
    const reg_checksum_t *r;

    if (reg == NULL || lease == NULL || sum == NULL || !reg->sealed || index >= reg->geo.tensor_count) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (reg->geo.checksum_table_offset == 0) {
        return WEFT_ERR_UNSUPPORTED;
    }
    if (weft_registry_lease_record(reg, lease) == NULL) {
        return WEFT_ERR_STATE;
    }
    r = checksum_record(reg, lease->slot, index);
    if (REG_LOAD(&r->version) != lease->version) {
        return WEFT_ERR_STATE;
    }
    /* The lease keeps the slot from being written: the sum stays the
     * version's. */
    *sum = REG_LOAD(&r->sum);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_verify(weft_registry_h reg, const weft_lease_t *lease, uint32_t index)
{
    weft_status_t status;
    uint64_t      got;

    if (reg == NULL || !reg->sealed || index >= reg->geo.tensor_count) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = verifiable(reg, lease);
    if (status != WEFT_OK) {
        return status;
    }
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        uint8_t *base;

        status = weft_registry_arena_base(reg, lease->slot, &base);
        if (status == WEFT_OK) {
            status = weft_checksum_cuda(base + reg->tensors[index].offset, reg->tensors[index].bytes, NULL, &got);
        }
        if (status != WEFT_OK) {
            return status;
        }
    } else {
        got = weft_checksum_host(weft_registry_tensor_addr(reg, lease->slot, index), reg->tensors[index].bytes);
    }
    return compare(reg, lease, index, got);
}

WEFT_API weft_status_t weft_registry_verify_version(weft_registry_h reg, const weft_lease_t *lease, uint32_t *bad)
{
    weft_status_t status = verifiable(reg, lease), first = WEFT_OK;
    uint64_t     *sums;

    if (status != WEFT_OK) {
        return status;
    }
    sums = malloc((size_t)reg->geo.tensor_count * sizeof(*sums));
    if (sums == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        uint8_t *base;

        /* Through this process's mapping, on the current device. */
        status = weft_registry_arena_base(reg, lease->slot, &base);
        if (status == WEFT_OK) {
            pthread_mutex_lock(&reg->sum_lock);
            status = weft_devmem_checksums(-1, base, reg->tensors, reg->geo.tensor_count, sums, &reg->sum_scratch);
            pthread_mutex_unlock(&reg->sum_lock);
        }
    } else {
        for (uint32_t i = 0; i < reg->geo.tensor_count; i++) {
            sums[i] = weft_checksum_host(weft_registry_tensor_addr(reg, lease->slot, i), reg->tensors[i].bytes);
        }
    }
    for (uint32_t i = 0; i < reg->geo.tensor_count && status == WEFT_OK; i++) {
        const weft_status_t one = compare(reg, lease, i, sums[i]);

        if (one != WEFT_OK && first == WEFT_OK) {
            first = one;
            if (bad != NULL) {
                *bad = i;
            }
        }
    }
    free(sums);
    return status != WEFT_OK ? status : first;
}
