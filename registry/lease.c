/* The lease table: records in shared memory that say which reader holds
 * which version in which slot. Below the readers (read.c) and the writers
 * (write.c, arena.c), which both consult it: a writer never takes a slot a
 * living reader leases. */
#include "config.h"

#include "common/log.h"
#include "futex.h"
#include "process.h"
#include "registry_impl.h"

int weft_registry_reclaim_lease(struct weft_registry *reg, reg_lease_t *lease)
{
    uint64_t owner = REG_LOAD(&lease->owner);

    if (owner == REG_OWNER_NONE) {
        return 1;
    }
    if (owner == REG_OWNER_BUSY || owner == reg->self || weft_process_alive(owner)) {
        return 0;
    }
    /* Mark the record first, so that nobody claims it while its slot is
     * cleared; only the process whose CAS wins counts the reclaim. */
    if (!REG_CAS(&lease->owner, &owner, REG_OWNER_BUSY)) {
        return 0;
    }
    if (REG_LOAD(&lease->slot_version) != 0) {
        REG_STORE(&lease->slot_version, 0);
        __atomic_fetch_add(&reg->hdr->leases_reclaimed, 1, __ATOMIC_RELAXED);
        weft_log_info("registry \"%s\": reclaimed a lease of dead pid %d", reg->name, weft_process_pid(owner));
    }
    __atomic_fetch_add(&lease->ticket, 1, __ATOMIC_SEQ_CST);
    REG_STORE(&lease->owner, REG_OWNER_NONE);
    weft_registry_wake(&reg->hdr->release_seq, &reg->hdr->release_waiters);
    return 1;
}

int weft_registry_slot_leased(struct weft_registry *reg, uint32_t slot)
{
    for (uint32_t i = 0; i < reg->geo.lease_capacity; i++) {
        reg_lease_t *lease = &reg->leases[i];
        uint64_t     held = REG_LOAD(&lease->slot_version);

        if (held != 0 && REG_VS_SLOT(held) == slot && !weft_registry_reclaim_lease(reg, lease)) {
            return 1;
        }
    }
    return 0;
}

/* Claims a free lease record for this handle; -1 when the table is full. */
static int64_t lease_claim_free(struct weft_registry *reg)
{
    /* Start at a place that depends on the process: readers of different
     * processes rarely collide on the same record. */
    uint32_t start = (uint32_t)(reg->self >> 32) % reg->geo.lease_capacity;

    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t k = 0; k < reg->geo.lease_capacity; k++) {
            uint32_t     i = (start + k) % reg->geo.lease_capacity;
            reg_lease_t *lease = &reg->leases[i];
            uint64_t     none = REG_OWNER_NONE;

            if (REG_LOAD(&lease->owner) == REG_OWNER_NONE && REG_CAS(&lease->owner, &none, reg->self)) {
                REG_STORE(&lease->holder, reg->tag);
                return i;
            }
            /* Second pass: take back records of dead processes. */
            if (pass == 1) {
                (void)weft_registry_reclaim_lease(reg, lease);
            }
        }
    }
    return -1;
}

reg_lease_t *weft_registry_lease_claim(struct weft_registry *reg, uint32_t *index)
{
    int64_t record = lease_claim_free(reg);

    if (record < 0) {
        weft_log_error("registry \"%s\": all %u lease records are held", reg->name, reg->geo.lease_capacity);
        return NULL;
    }
    *index = (uint32_t)record;
    return &reg->leases[record];
}

void weft_registry_lease_fill(reg_lease_t *lease, uint32_t index, uint64_t version, uint32_t slot, weft_lease_t *out)
{
    out->version = version;
    out->slot = slot;
    out->record = index;
    out->ticket = __atomic_add_fetch(&lease->ticket, 1, __ATOMIC_SEQ_CST);
}

void weft_registry_lease_unclaim(struct weft_registry *reg, reg_lease_t *lease)
{
    REG_STORE(&lease->slot_version, 0);
    __atomic_fetch_add(&lease->ticket, 1, __ATOMIC_SEQ_CST);
    REG_STORE(&lease->holder, 0);
    REG_STORE(&lease->owner, REG_OWNER_NONE);
}

/* The record of a lease this handle holds, or NULL. */
reg_lease_t *weft_registry_lease_record(struct weft_registry *reg, const weft_lease_t *lease)
{
    reg_lease_t *record;

    if (lease->record >= reg->geo.lease_capacity || lease->slot >= reg->geo.slot_count) {
        return NULL;
    }
    record = &reg->leases[lease->record];
    if (REG_LOAD(&record->owner) != reg->self || REG_LOAD(&record->ticket) != lease->ticket ||
        REG_LOAD(&record->slot_version) != REG_VS_WORD(lease->version, lease->slot)) {
        return NULL;
    }
    return record;
}

void weft_registry_drop_leases(struct weft_registry *reg)
{
    int dropped = 0;

    for (uint32_t i = 0; i < reg->geo.lease_capacity; i++) {
        reg_lease_t *lease = &reg->leases[i];

        if (REG_LOAD(&lease->owner) == reg->self && REG_LOAD(&lease->holder) == reg->tag) {
            weft_registry_lease_unclaim(reg, lease);
            dropped = 1;
        }
    }
    if (dropped) {
        weft_registry_wake(&reg->hdr->release_seq, &reg->hdr->release_waiters);
    }
}
