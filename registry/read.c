/* The readers' side: leases on published versions. */
#include "config.h"

#include "common/log.h"
#include "futex.h"
#include "process.h"
#include "registry_impl.h"

#include <sched.h>

/* 1 when the latest word names a version whose bytes can be leased. */
static int latest_readable(uint64_t latest)
{
    return latest != 0 && REG_VS_SLOT(latest) != REG_SLOT_NONE;
}

/* A version newer than after_version that can be leased is there. */
static int newer_readable(uint64_t latest, uint64_t after_version)
{
    return latest_readable(latest) && REG_VS_VERSION(latest) > after_version;
}

/* Tries to lease the latest version this many times before giving up;
 * each failure means the producer published twice meanwhile. */
#define ACQUIRE_ATTEMPTS 10000

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
static int64_t lease_claim(struct weft_registry *reg)
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

static void lease_unclaim(struct weft_registry *reg, reg_lease_t *lease)
{
    REG_STORE(&lease->slot_version, 0);
    __atomic_fetch_add(&lease->ticket, 1, __ATOMIC_SEQ_CST);
    REG_STORE(&lease->holder, 0);
    REG_STORE(&lease->owner, REG_OWNER_NONE);
}

WEFT_API weft_status_t weft_registry_acquire(weft_registry_h reg, weft_lease_t *out)
{
    reg_lease_t *lease;
    int64_t      record;

    if (reg == NULL || out == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed) {
        return WEFT_ERR_STATE;
    }
    weft_registry_arenas_sweep(reg);
    if (!latest_readable(REG_LOAD(&reg->hdr->latest))) {
        return WEFT_ERR_NOT_FOUND;
    }
    record = lease_claim(reg);
    if (record < 0) {
        weft_log_error("registry \"%s\": all %u lease records are held", reg->name, reg->geo.lease_capacity);
        return WEFT_ERR_NO_SPACE;
    }
    lease = &reg->leases[record];
    for (int attempt = 0; attempt < ACQUIRE_ATTEMPTS; attempt++) {
        uint64_t latest = REG_LOAD(&reg->hdr->latest);
        uint32_t s = REG_VS_SLOT(latest);
        uint64_t word;

        if (s == REG_SLOT_NONE) {
            /* Offloaded while we tried: nothing to lease now. */
            lease_unclaim(reg, lease);
            return WEFT_ERR_NOT_FOUND;
        }
        if (s >= reg->geo.slot_count) {
            weft_log_error("registry \"%s\": latest version names slot %u of %u", reg->name, s,
                           reg->geo.slot_count);
            lease_unclaim(reg, lease);
            return WEFT_ERR_CORRUPT;
        }
        /* Publish the lease, then check that the slot still holds the
         * version: the producer does the converse (write_try_slot). */
        REG_STORE(&lease->slot_version, latest);
        word = REG_LOAD(&reg->slots[s].word);
        if (REG_SLOT_STATE(word) == REG_SLOT_PUBLISHED && REG_SLOT_VERSION(word) == REG_VS_VERSION(latest)) {
            out->version = REG_VS_VERSION(latest);
            out->slot = s;
            out->record = (uint32_t)record;
            out->ticket = __atomic_add_fetch(&lease->ticket, 1, __ATOMIC_SEQ_CST);
            return WEFT_OK;
        }
        REG_STORE(&lease->slot_version, 0);
        if (attempt % 64 == 63) {
            sched_yield();
        }
    }
    lease_unclaim(reg, lease);
    weft_log_error("registry \"%s\": versions change too fast to lease one", reg->name);
    return WEFT_ERR_BUSY;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

WEFT_API weft_status_t weft_registry_wait(weft_registry_h reg, uint64_t after_version, uint64_t timeout_us,
                                          weft_lease_t *lease)
{
    uint64_t      start, deadline, spin_end;
    weft_status_t status;

    if (reg == NULL || lease == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed) {
        return WEFT_ERR_STATE;
    }
    if (newer_readable(REG_LOAD(&reg->hdr->latest), after_version)) {
        status = weft_registry_acquire(reg, lease);
        if (status != WEFT_ERR_NOT_FOUND) {
            return status;
        }
    }
    start = weft_time_ns();
    deadline = weft_deadline_ns(start, timeout_us);
    spin_end = weft_deadline_ns(start, (uint64_t)reg->spin_us);
    if (spin_end > deadline) {
        spin_end = deadline;
    }
    /* Bounded spinning catches a publish that comes soon after the call
     * without a system call on either side. */
    for (unsigned n = 0;; n++) {
        if (newer_readable(__atomic_load_n(&reg->hdr->latest, __ATOMIC_ACQUIRE), after_version)) {
            status = weft_registry_acquire(reg, lease);
            if (status != WEFT_ERR_NOT_FOUND) {
                return status;
            }
        }
        if ((n & 63) == 0 && weft_time_ns() >= spin_end) {
            break;
        }
        cpu_relax();
    }
    for (;;) {
        /* Read the sequence before the version: a publish in between
         * changes the sequence, and the futex then returns at once. */
        uint32_t seq = REG_LOAD(&reg->hdr->publish_seq);
        uint64_t now;

        if (newer_readable(REG_LOAD(&reg->hdr->latest), after_version)) {
            /* NOT_FOUND: offloaded between the two loads; wait on. */
            status = weft_registry_acquire(reg, lease);
            if (status != WEFT_ERR_NOT_FOUND) {
                return status;
            }
        }
        /* An offload wakes us too: give up stale GPU mappings. */
        weft_registry_arenas_sweep(reg);
        now = weft_time_ns();
        if (now >= deadline) {
            return WEFT_ERR_TIMEOUT;
        }
        /* At most a second at a time: a for-ever timeout stays a plain loop. */
        weft_registry_sleep(&reg->hdr->publish_seq, &reg->hdr->publish_waiters, seq,
                            deadline - now < 1000000000u ? deadline - now : 1000000000u);
    }
}

/* The record of a lease this handle holds, or NULL. */
static reg_lease_t *lease_record(struct weft_registry *reg, const weft_lease_t *lease)
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

WEFT_API weft_status_t weft_registry_lease_tensor(weft_registry_h reg, const weft_lease_t *lease, uint32_t index,
                                                  const void **data)
{
    if (reg == NULL || lease == NULL || data == NULL || index >= reg->geo.tensor_count) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed || lease_record(reg, lease) == NULL) {
        weft_log_error("registry \"%s\": lease of version %llu is not held", reg->name,
                       (unsigned long long)lease->version);
        return WEFT_ERR_STATE;
    }
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        uint8_t      *base;
        weft_status_t status = weft_registry_arena_base(reg, lease->slot, &base);

        if (status != WEFT_OK) {
            return status;
        }
        *data = base + reg->tensors[index].offset;
        return WEFT_OK;
    }
    *data = weft_registry_tensor_addr(reg, lease->slot, index);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_release(weft_registry_h reg, weft_lease_t *lease)
{
    reg_lease_t *record;

    if (reg == NULL || lease == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    record = reg->sealed ? lease_record(reg, lease) : NULL;
    if (record == NULL) {
        weft_log_error("registry \"%s\": release of a lease not held (version %llu; released twice?)",
                       reg->name, (unsigned long long)lease->version);
        return WEFT_ERR_STATE;
    }
    lease_unclaim(reg, record);
    weft_registry_wake(&reg->hdr->release_seq, &reg->hdr->release_waiters);
    return WEFT_OK;
}

void weft_registry_drop_leases(struct weft_registry *reg)
{
    int dropped = 0;

    for (uint32_t i = 0; i < reg->geo.lease_capacity; i++) {
        reg_lease_t *lease = &reg->leases[i];

        if (REG_LOAD(&lease->owner) == reg->self && REG_LOAD(&lease->holder) == reg->tag) {
            lease_unclaim(reg, lease);
            dropped = 1;
        }
    }
    if (dropped) {
        weft_registry_wake(&reg->hdr->release_seq, &reg->hdr->release_waiters);
    }
}
