/* The producer's side of a version: take a free slot, fill it, publish. */
#include "config.h"

#include "common/log.h"
#include "futex.h"
#include "registry_impl.h"

/* Longest single sleep while waiting for a free slot: a reader that died
 * never wakes us, so look again at least this often. */
#define FREE_SLOT_POLL_NS 10000000u

/*
 * Tries to take slot s for writing. The slot word goes to WRITING first,
 * then the lease table is read: a reader publishes its lease before it
 * checks the slot word, so one of the two always sees the other (both
 * sides use sequentially consistent operations). When a lease shows up
 * the slot word is put back as it was.
 */
static int write_try_slot(struct weft_registry *reg, uint32_t s)
{
    uint64_t word = REG_LOAD(&reg->slots[s].word);

    if (REG_SLOT_STATE(word) == REG_SLOT_WRITING) {
        return 0;
    }
    if (!REG_CAS(&reg->slots[s].word, &word, REG_SLOT_WORD(REG_SLOT_VERSION(word), REG_SLOT_WRITING))) {
        return 0;
    }
    if (weft_registry_slot_leased(reg, s)) {
        REG_STORE(&reg->slots[s].word, word);
        return 0;
    }
    return 1;
}

/* One pass over the slots, oldest version first. Returns the slot taken,
 * or -1 when every candidate is the latest version or leased. */
static int write_take_slot(struct weft_registry *reg)
{
    uint32_t latest_slot = UINT32_MAX;
    uint64_t latest = REG_LOAD(&reg->hdr->latest);
    uint64_t tried = 0;

    if (latest != 0) {
        latest_slot = REG_VS_SLOT(latest);
    }
    for (uint32_t attempt = 0; attempt < reg->geo.slot_count; attempt++) {
        uint32_t best = UINT32_MAX;
        uint64_t best_version = UINT64_MAX;

        for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
            uint64_t version = REG_SLOT_VERSION(REG_LOAD(&reg->slots[s].word));

            if (s != latest_slot && !(tried & (1u << s)) && version < best_version) {
                best = s;
                best_version = version;
            }
        }
        if (best == UINT32_MAX) {
            break;
        }
        tried |= 1u << best;
        if (write_try_slot(reg, best)) {
            return (int)best;
        }
    }
    return -1;
}

WEFT_API weft_status_t weft_registry_write_begin(weft_registry_h reg, uint64_t timeout_us, uint32_t *slot)
{
    uint64_t deadline;
    int      taken;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->producer || !reg->sealed || reg->writing) {
        weft_log_error("registry \"%s\": write_begin %s", reg->name,
                       !reg->producer ? "by a handle that is not the producer"
                       : !reg->sealed ? "before seal"
                                      : "while a write is in progress");
        return WEFT_ERR_STATE;
    }
    if (REG_ARENAS_STATE(REG_LOAD(&reg->hdr->arena_word)) != REG_ARENAS_PRESENT) {
        weft_log_error("registry \"%s\": write_begin while the GPU arenas are offloaded (reload first)",
                       reg->name);
        return WEFT_ERR_STATE;
    }
    deadline = weft_deadline_ns(weft_time_ns(), timeout_us);
    for (;;) {
        uint32_t seq = REG_LOAD(&reg->hdr->release_seq);
        uint64_t now;

        taken = write_take_slot(reg);
        if (taken >= 0) {
            break;
        }
        now = weft_time_ns();
        if (now >= deadline) {
            __atomic_fetch_add(&reg->hdr->busy, 1, __ATOMIC_RELAXED);
            weft_log_debug("registry \"%s\": no free slot within %llu us", reg->name,
                           (unsigned long long)timeout_us);
            return WEFT_ERR_BUSY;
        }
        weft_registry_sleep(&reg->hdr->release_seq, &reg->hdr->release_waiters, seq,
                            deadline - now < FREE_SLOT_POLL_NS ? deadline - now : FREE_SLOT_POLL_NS);
    }
    reg->writing = 1;
    reg->write_slot = (uint32_t)taken;
    reg->announced = 0;
    weft_registry_slot_unannounce(reg, (uint32_t)taken); /* nothing of this write is final yet */
    /* The slot is ours (no lease was seen): its old version goes from the
     * word, so that writing with a version in the word only ever means a
     * producer trying a slot (streaming readers count on it). */
    REG_STORE(&reg->slots[taken].word, REG_SLOT_WORD(0, REG_SLOT_WRITING));
    if (slot != NULL) {
        *slot = (uint32_t)taken;
    }
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_write_tensor(weft_registry_h reg, uint32_t index, void **data)
{
    if (reg == NULL || data == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->writing) {
        weft_log_error("registry \"%s\": write_tensor outside a write", reg->name);
        return WEFT_ERR_STATE;
    }
    if (index >= reg->geo.tensor_count) {
        weft_log_error("registry \"%s\": tensor index %u of %u", reg->name, index, reg->geo.tensor_count);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (reg->geo.memory == REG_MEMORY_CUDA) {
        uint8_t      *base;
        weft_status_t status = weft_registry_arena_base(reg, reg->write_slot, &base);

        if (status != WEFT_OK) {
            return status;
        }
        *data = base + reg->tensors[index].offset;
        return WEFT_OK;
    }
    *data = weft_registry_tensor_addr(reg, reg->write_slot, index);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_publish(weft_registry_h reg, uint64_t version, uint64_t *published)
{
    uint64_t      latest_version;
    uint32_t      s;
    weft_status_t status;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->writing) {
        weft_log_error("registry \"%s\": publish without a write in progress", reg->name);
        return WEFT_ERR_STATE;
    }
    latest_version = REG_VS_VERSION(REG_LOAD(&reg->hdr->latest));
    if (reg->announced != 0 && version != 0 && version != reg->announced) {
        weft_log_error("registry \"%s\": publish as version %llu, announced as %llu", reg->name,
                       (unsigned long long)version, (unsigned long long)reg->announced);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (version == 0) {
        version = reg->announced != 0 ? reg->announced : latest_version + 1;
    }
    if (version <= latest_version || version > REG_MAX_VERSION) {
        weft_log_error("registry \"%s\": version %llu is not newer than %llu (or past 2^56)", reg->name,
                       (unsigned long long)version, (unsigned long long)latest_version);
        return WEFT_ERR_INVALID_PARAM;
    }
    s = reg->write_slot;
    /* The checksums first (registries with them): a publish that cannot
     * sum the version does not happen, and the write stays in progress. */
    status = weft_registry_sum_slot(reg, s, version);
    if (status != WEFT_OK) {
        return status;
    }
    reg->slots[s].publish_time_ns = weft_time_ns();
    /* The bytes and the slot word first, then the latest word: a reader
     * that sees the latest word sees the complete version. */
    REG_STORE(&reg->slots[s].word, REG_SLOT_WORD(version, REG_SLOT_PUBLISHED));
    REG_STORE(&reg->hdr->latest, REG_VS_WORD(version, s));
    /* After the slot word: a streaming reader that misses the announcement
     * finds the slot published instead. */
    weft_registry_slot_unannounce(reg, s);
    reg->announced = 0;
    __atomic_fetch_add(&reg->hdr->versions_published, 1, __ATOMIC_RELAXED);
    weft_registry_wake(&reg->hdr->publish_seq, &reg->hdr->publish_waiters);
    reg->writing = 0;
    weft_log_debug("registry \"%s\": published version %llu in slot %u", reg->name,
                   (unsigned long long)version, s);
    if (published != NULL) {
        *published = version;
    }
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_write_abort(weft_registry_h reg)
{
    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->writing) {
        return WEFT_ERR_STATE;
    }
    /* Part of the old version may be overwritten: the slot holds nothing. */
    REG_STORE(&reg->slots[reg->write_slot].word, REG_SLOT_WORD(0, REG_SLOT_FREE));
    weft_registry_slot_unannounce(reg, reg->write_slot);
    reg->writing = 0;
    if (reg->announced != 0) {
        /* Streaming readers of the announced version wait on this word:
         * they learn that it will not come. */
        reg->announced = 0;
        weft_registry_wake(&reg->hdr->publish_seq, &reg->hdr->publish_waiters);
    }
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_write_ready(weft_registry_h reg, uint64_t version, uint32_t tensors)
{
    uint64_t latest_version;
    uint32_t s;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!reg->writing) {
        weft_log_error("registry \"%s\": write_ready outside a write", reg->name);
        return WEFT_ERR_STATE;
    }
    s = reg->write_slot;
    latest_version = REG_VS_VERSION(REG_LOAD(&reg->hdr->latest));
    if (version <= latest_version || version > REG_MAX_VERSION ||
        (reg->announced != 0 && version != reg->announced) || tensors > reg->geo.tensor_count ||
        tensors < REG_LOAD(&reg->slots[s].ready_count)) {
        weft_log_error("registry \"%s\": write_ready(version %llu, %u tensors): the version must be newer than "
                       "%llu and the same for the whole write, the count at most %u and never smaller",
                       reg->name, (unsigned long long)version, tensors, (unsigned long long)latest_version,
                       reg->geo.tensor_count);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (reg->announced == 0) {
        REG_STORE(&reg->slots[s].ready_owner, reg->self);
        REG_STORE(&reg->slots[s].ready_version, version);
        reg->announced = version;
    }
    REG_STORE(&reg->slots[s].ready_count, tensors);
    weft_registry_wake(&reg->hdr->publish_seq, &reg->hdr->publish_waiters);
    return WEFT_OK;
}
