/* The readers' side: leases on published versions. */
#include "config.h"

#include "common/env_config.h"
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

WEFT_API weft_status_t weft_registry_acquire(weft_registry_h reg, weft_lease_t *out)
{
    reg_lease_t *lease;
    uint32_t     record;

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
    lease = weft_registry_lease_claim(reg, &record);
    if (lease == NULL) {
        return WEFT_ERR_NO_SPACE;
    }
    for (int attempt = 0; attempt < ACQUIRE_ATTEMPTS; attempt++) {
        uint64_t latest = REG_LOAD(&reg->hdr->latest);
        uint32_t s = REG_VS_SLOT(latest);
        uint64_t word;

        if (s == REG_SLOT_NONE) {
            /* Offloaded while we tried: nothing to lease now. */
            weft_registry_lease_unclaim(reg, lease);
            return WEFT_ERR_NOT_FOUND;
        }
        if (s >= reg->geo.slot_count) {
            weft_log_error("registry \"%s\": latest version names slot %u of %u", reg->name, s,
                           reg->geo.slot_count);
            weft_registry_lease_unclaim(reg, lease);
            return WEFT_ERR_CORRUPT;
        }
        /* Publish the lease, then check that the slot still holds the
         * version: the producer does the converse (write_try_slot). */
        REG_STORE(&lease->slot_version, latest);
        word = REG_LOAD(&reg->slots[s].word);
        if (REG_SLOT_STATE(word) == REG_SLOT_PUBLISHED && REG_SLOT_VERSION(word) == REG_VS_VERSION(latest)) {
            weft_registry_lease_fill(lease, record, REG_VS_VERSION(latest), s, out);
            return WEFT_OK;
        }
        REG_STORE(&lease->slot_version, 0);
        if (attempt % 64 == 63) {
            sched_yield();
        }
    }
    weft_registry_lease_unclaim(reg, lease);
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

/* One look for something to lease after after_version: WEFT_OK with the
 * lease, WEFT_ERR_NOT_FOUND when there is nothing yet, else an error. */
typedef weft_status_t (*lease_try_t)(struct weft_registry *reg, uint64_t after_version, weft_lease_t *lease);

/* A published version newer than after_version: the latest. */
static weft_status_t try_published(struct weft_registry *reg, uint64_t after_version, weft_lease_t *lease)
{
    if (!newer_readable(__atomic_load_n(&reg->hdr->latest, __ATOMIC_ACQUIRE), after_version)) {
        return WEFT_ERR_NOT_FOUND;
    }
    /* NOT_FOUND: offloaded between the two loads; the caller waits on. */
    return weft_registry_acquire(reg, lease);
}

/* The newest version newer than after_version that a write in progress
 * announced (weft_registry_write_ready); leased like a published one:
 * publish the lease, then check that the slot still announces it. */
static weft_status_t lease_announced(struct weft_registry *reg, uint64_t after_version, weft_lease_t *out)
{
    uint64_t     best = 0;
    uint32_t     slot = 0, record;
    reg_lease_t *lease;
    uint64_t     word;

    uint64_t     producer = REG_LOAD(&reg->hdr->producer);

    /* A dead producer's announcement will not be published: leasing it
     * again and again would only spin. */
    if (producer == REG_OWNER_NONE || !weft_process_alive(producer)) {
        return WEFT_ERR_NOT_FOUND;
    }
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        uint64_t version = REG_LOAD(&reg->slots[s].ready_version);

        if (version > after_version && version > best && version <= REG_MAX_VERSION &&
            REG_LOAD(&reg->slots[s].ready_owner) == producer) {
            best = version;
            slot = s;
        }
    }
    if (best == 0) {
        return WEFT_ERR_NOT_FOUND;
    }
    lease = weft_registry_lease_claim(reg, &record);
    if (lease == NULL) {
        return WEFT_ERR_NO_SPACE;
    }
    REG_STORE(&lease->slot_version, REG_VS_WORD(best, slot));
    word = REG_LOAD(&reg->slots[slot].word);
    if ((REG_SLOT_STATE(word) == REG_SLOT_WRITING && REG_LOAD(&reg->slots[slot].ready_version) == best) ||
        (REG_SLOT_STATE(word) == REG_SLOT_PUBLISHED && REG_SLOT_VERSION(word) == best)) {
        weft_registry_lease_fill(lease, record, best, slot, out);
        return WEFT_OK;
    }
    weft_registry_lease_unclaim(reg, lease); /* published and gone, or abandoned: look again */
    return WEFT_ERR_NOT_FOUND;
}

/* A published version first (it is whole), else an announced one. */
static weft_status_t try_published_or_announced(struct weft_registry *reg, uint64_t after_version,
                                                weft_lease_t *lease)
{
    weft_status_t status = try_published(reg, after_version, lease);

    return status == WEFT_ERR_NOT_FOUND ? lease_announced(reg, after_version, lease) : status;
}

/* Waits until `try` leases something, up to timeout_us: spins for the
 * spin budget, then sleeps on publish_seq (which publish, write_ready
 * and an announced write's abort all bump). */
static weft_status_t wait_for(struct weft_registry *reg, uint64_t after_version, uint64_t timeout_us,
                              weft_lease_t *lease, lease_try_t try)
{
    uint64_t      start, deadline, spin_end;
    weft_status_t status;

    if (reg == NULL || lease == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed) {
        return WEFT_ERR_STATE;
    }
    status = try(reg, after_version, lease);
    if (status != WEFT_ERR_NOT_FOUND) {
        return status;
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
        status = try(reg, after_version, lease);
        if (status != WEFT_ERR_NOT_FOUND) {
            return status;
        }
        if ((n & 63) == 0 && weft_time_ns() >= spin_end) {
            break;
        }
        cpu_relax();
    }
    for (;;) {
        /* Read the sequence before looking: a publish in between changes
         * the sequence, and the futex then returns at once. */
        uint32_t seq = REG_LOAD(&reg->hdr->publish_seq);
        uint64_t now;

        status = try(reg, after_version, lease);
        if (status != WEFT_ERR_NOT_FOUND) {
            return status;
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

WEFT_API weft_status_t weft_registry_wait(weft_registry_h reg, uint64_t after_version, uint64_t timeout_us,
                                          weft_lease_t *lease)
{
    return wait_for(reg, after_version, timeout_us, lease, try_published);
}

WEFT_API weft_status_t weft_registry_wait_ready(weft_registry_h reg, uint64_t after_version, uint64_t timeout_us,
                                                weft_lease_t *lease)
{
    return wait_for(reg, after_version, timeout_us, lease, try_published_or_announced);
}

/*
 * How far the leased version is: published (every tensor final), or
 * being written with *count tensors final. 0 when the write it named was
 * abandoned (aborted, or its producer died and another took over: an
 * announcement counts only while its announcer is the producer).
 * Published means the slot word holds the version and `latest` got there
 * too: a producer that died between the two stores published nothing. A
 * slot word writing with the leased version in it is a producer trying
 * the slot (write_try_slot keeps the old version there; a write it keeps
 * holds 0), which finds the lease and puts the word back. Two looks: a
 * publish clears the announcement after `latest`, and the second look
 * finds the version published.
 */
static int lease_progress(struct weft_registry *reg, const weft_lease_t *lease, uint32_t *count, int *published)
{
    reg_slot_t *slot = &reg->slots[lease->slot];

    for (int look = 0; look < 2; look++) {
        uint64_t word = REG_LOAD(&slot->word);
        uint64_t latest = REG_VS_VERSION(REG_LOAD(&reg->hdr->latest));
        int      holds = REG_SLOT_VERSION(word) == lease->version &&
                    (REG_SLOT_STATE(word) == REG_SLOT_PUBLISHED || REG_SLOT_STATE(word) == REG_SLOT_WRITING);

        if (holds && latest >= lease->version) {
            *count = reg->geo.tensor_count;
            *published = 1;
            return 1;
        }
        if (holds || REG_SLOT_STATE(word) == REG_SLOT_WRITING) {
            uint64_t before = REG_LOAD(&slot->ready_version);
            uint32_t ready = REG_LOAD(&slot->ready_count);
            uint64_t owner = REG_LOAD(&slot->ready_owner);

            if (before == lease->version && owner == REG_LOAD(&reg->hdr->producer) &&
                REG_LOAD(&slot->ready_version) == before) {
                *count = ready < reg->geo.tensor_count ? ready : reg->geo.tensor_count;
                *published = 0;
                return 1;
            }
        }
    }
    return 0;
}

WEFT_API weft_status_t weft_registry_lease_tensor(weft_registry_h reg, const weft_lease_t *lease, uint32_t index,
                                                  const void **data)
{
    uint32_t final_count = 0;
    int      published = 0, alive;

    if (reg == NULL || lease == NULL || data == NULL || index >= reg->geo.tensor_count) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed || weft_registry_lease_record(reg, lease) == NULL) {
        weft_log_error("registry \"%s\": lease of version %llu is not held", reg->name,
                       (unsigned long long)lease->version);
        return WEFT_ERR_STATE;
    }
    alive = lease_progress(reg, lease, &final_count, &published);
    if (!alive || index >= final_count) {
        weft_log_error("registry \"%s\": tensor %u of version %llu is not final (%s)", reg->name, index,
                       (unsigned long long)lease->version, alive ? "not yet written" : "the write was abandoned");
        return WEFT_ERR_STATE;
    }
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        uint8_t      *base;
        weft_status_t status = weft_registry_arena_base(reg, lease->slot, &base);

        if (status != WEFT_OK) {
            return status;
        }
        *data = base + reg->tensors[index].offset;
    } else {
        *data = weft_registry_tensor_addr(reg, lease->slot, index);
    }
    /* WEFT_VERIFY=all: a published tensor of a registry with checksums
     * is checked before anyone reads it. */
    if (published && reg->geo.checksum_table_offset != 0 && weft_verify_mode() == WEFT_VERIFY_ALL) {
        const weft_status_t status = weft_registry_verify(reg, lease, index);

        if (status != WEFT_OK) {
            *data = NULL;
            return status;
        }
    }
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_lease_ready(weft_registry_h reg, const weft_lease_t *lease, uint32_t tensors,
                                                 uint64_t timeout_us, uint32_t *ready, int *published)
{
    uint64_t deadline;

    if (reg == NULL || lease == NULL || ready == NULL || published == NULL ||
        (tensors > reg->geo.tensor_count && tensors != WEFT_REGISTRY_PUBLISHED)) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->sealed || weft_registry_lease_record(reg, lease) == NULL) {
        weft_log_error("registry \"%s\": lease of version %llu is not held", reg->name,
                       (unsigned long long)lease->version);
        return WEFT_ERR_STATE;
    }
    deadline = weft_deadline_ns(weft_time_ns(), timeout_us);
    for (;;) {
        uint32_t seq = REG_LOAD(&reg->hdr->publish_seq);
        uint64_t producer = REG_LOAD(&reg->hdr->producer), now;

        *ready = 0;
        *published = 0;
        if (!lease_progress(reg, lease, ready, published)) {
            weft_log_info("registry \"%s\": version %llu will not be published (its write was abandoned)",
                          reg->name, (unsigned long long)lease->version);
            return WEFT_ERR_CANCELED;
        }
        if (*published || (tensors != WEFT_REGISTRY_PUBLISHED && *ready >= tensors)) {
            return WEFT_OK;
        }
        if (producer == REG_OWNER_NONE || !weft_process_alive(producer)) {
            /* It may have published, then exited, since the look above. */
            if (lease_progress(reg, lease, ready, published) && *published) {
                return WEFT_OK;
            }
            weft_log_info("registry \"%s\": the producer writing version %llu is gone", reg->name,
                          (unsigned long long)lease->version);
            return WEFT_ERR_CANCELED;
        }
        now = weft_time_ns();
        if (now >= deadline) {
            return WEFT_ERR_TIMEOUT;
        }
        /* A dead producer wakes nobody: look again at least every 100 ms. */
        weft_registry_sleep(&reg->hdr->publish_seq, &reg->hdr->publish_waiters, seq,
                            deadline - now < 100000000u ? deadline - now : 100000000u);
    }
}

WEFT_API weft_status_t weft_registry_release(weft_registry_h reg, weft_lease_t *lease)
{
    reg_lease_t *record;

    if (reg == NULL || lease == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    record = reg->sealed ? weft_registry_lease_record(reg, lease) : NULL;
    if (record == NULL) {
        weft_log_error("registry \"%s\": release of a lease not held (version %llu; released twice?)",
                       reg->name, (unsigned long long)lease->version);
        return WEFT_ERR_STATE;
    }
    weft_registry_lease_unclaim(reg, record);
    weft_registry_wake(&reg->hdr->release_seq, &reg->hdr->release_waiters);
    return WEFT_OK;
}
