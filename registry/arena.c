/*
 * GPU arenas: one device allocation per slot, exported through CUDA IPC,
 * mapped by consumers once per generation; offload frees them and reload
 * makes a new generation. The protocol is in registry/PROTOCOL.md ("GPU
 * arenas"); the CUDA calls are behind device_memory.h.
 *
 * Why mapper words: a legacy IPC allocation must not be freed while
 * another process still maps it (the CUDA documentation calls that
 * undefined behaviour). Each process that maps an arena holds one of the
 * arena's mapper words, and the producer frees only when none is held by
 * a living process. A mapper publishes its word and then re-reads the
 * arena word; the producer publishes RETIRING and then reads the mapper
 * words: with sequentially consistent operations on both sides one of
 * them sees the other.
 */
#include "config.h"

#include "common/log.h"
#include "device_memory.h"
#include "futex.h"
#include "process.h"
#include "registry_impl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Longest single sleep while offload waits: a process that died never
 * wakes us, so look again at least this often. */
#define OFFLOAD_POLL_NS 5000000u

static int is_gpu(const struct weft_registry *reg)
{
    return reg->geo.memory == REG_MEMORY_CUDA;
}

weft_status_t weft_registry_arenas_init(struct weft_registry *reg)
{
    weft_status_t status;

    reg->device = -1;
    if (!is_gpu(reg)) {
        return WEFT_OK;
    }
    reg->arenas = (reg_arena_t *)(reg->base + reg->geo.arena_table_offset);
    reg->maps = calloc(reg->geo.slot_count, sizeof(*reg->maps));
    reg->arena_ptr = calloc(reg->geo.slot_count, sizeof(*reg->arena_ptr));
    if (reg->maps == NULL || reg->arena_ptr == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        reg->maps[s].mapper = -1;
    }
    status = weft_devmem_find(reg->geo.device_uuid, &reg->device);
    if (status != WEFT_OK) {
        /* A consumer can still map the arenas into another GPU. */
        reg->device = -1;
        if (reg->producer) {
            weft_log_error("registry \"%s\": the GPU of its arenas is not visible in this process",
                           reg->name);
            return status == WEFT_ERR_NOT_FOUND ? WEFT_ERR_NO_DEVICE : status;
        }
    }
    return WEFT_OK;
}

/* Frees the allocations this producer holds; the records must be ABSENT
 * or RETIRING with no mapper left. */
static void arenas_free_local(struct weft_registry *reg)
{
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        if (reg->arena_ptr[s] != NULL) {
            (void)weft_devmem_free(reg->device, reg->arena_ptr[s]);
            reg->arena_ptr[s] = NULL;
        }
    }
}

weft_status_t weft_registry_arenas_allocate(struct weft_registry *reg)
{
    uint64_t      bytes = WEFT_ALIGN_UP(reg->geo.slot_bytes, (uint64_t)REG_PAGE);
    weft_status_t status = WEFT_OK;

    for (uint32_t s = 0; s < reg->geo.slot_count && status == WEFT_OK; s++) {
        status = weft_devmem_alloc(reg->device, bytes, &reg->arena_ptr[s],
                                   reg->arenas[s].ipc_handle);
    }
    if (status != WEFT_OK) {
        weft_log_error("registry \"%s\": cannot allocate %u arenas of %" PRIu64 " bytes on GPU %d: %s",
                       reg->name, reg->geo.slot_count, bytes, reg->device,
                       weft_status_string(status));
        arenas_free_local(reg);
        return status;
    }
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        reg_arena_t *arena = &reg->arenas[s];
        uint64_t     gen   = REG_ARENA_GEN(REG_LOAD(&arena->word)) + 1;

        arena->bytes  = bytes;
        arena->device = reg->device;
        REG_STORE(&arena->exporter, reg->self);
        /* The handle and size above become visible with the word. */
        REG_STORE(&arena->word, REG_ARENA_WORD(gen, REG_ARENA_PRESENT));
    }
    return WEFT_OK;
}

void weft_registry_arenas_orphan(struct weft_registry *reg)
{
    uint64_t latest = REG_LOAD(&reg->hdr->latest);

    if (latest != 0) {
        REG_STORE(&reg->hdr->latest, REG_VS_WORD(REG_VS_VERSION(latest), REG_SLOT_NONE));
    }
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        uint64_t word = REG_LOAD(&reg->arenas[s].word);

        REG_STORE(&reg->slots[s].word, REG_SLOT_WORD(0, REG_SLOT_FREE));
        weft_registry_slot_unannounce(reg, s);
        REG_STORE(&reg->arenas[s].word, REG_ARENA_WORD(REG_ARENA_GEN(word), REG_ARENA_ABSENT));
    }
    REG_STORE(&reg->hdr->arena_word,
              REG_ARENAS_WORD(REG_ARENAS_EPOCH(REG_LOAD(&reg->hdr->arena_word)) + 1,
                              REG_ARENAS_OFFLOADED));
}

/* Claims a mapper word of the arena for this process; -1 when all 64 are
 * held by living processes. */
static int32_t mapper_claim(struct weft_registry *reg, reg_arena_t *arena)
{
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < REG_ARENA_MAPPERS; i++) {
            uint64_t owner = REG_LOAD(&arena->mappers[i]);

            if (owner == REG_OWNER_NONE) {
                if (REG_CAS(&arena->mappers[i], &owner, reg->self)) {
                    return (int32_t)i;
                }
            } else if (pass == 1 && owner != reg->self && !weft_process_alive(owner)) {
                (void)REG_CAS(&arena->mappers[i], &owner, REG_OWNER_NONE);
            }
        }
    }
    return -1;
}

static void mapper_release(struct weft_registry *reg, reg_arena_t *arena, int32_t mapper)
{
    uint64_t self = reg->self;

    if (mapper >= 0) {
        /* A producer may have reclaimed it meanwhile (we looked dead);
         * then the word is no longer ours to clear. */
        (void)REG_CAS(&arena->mappers[mapper], &self, REG_OWNER_NONE);
    }
}

/* Drops one mapping; map_lock held. */
static void mapping_drop(struct weft_registry *reg, uint32_t slot)
{
    reg_mapping_t *m = &reg->maps[slot];

    if (m->ptr != NULL && !m->own) {
        (void)weft_devmem_close(m->device, m->ptr);
        weft_log_debug("registry \"%s\": unmapped arena %u generation %" PRIu64, reg->name, slot,
                       m->gen);
    }
    mapper_release(reg, &reg->arenas[slot], m->mapper);
    *m = (reg_mapping_t){.ptr = NULL, .gen = 0, .mapper = -1, .own = 0, .device = -1};
    /* Whoever offloads waits for mapper words: tell it one came free. */
    weft_registry_wake(&reg->hdr->arena_seq, &reg->hdr->arena_waiters);
}

/* Maps generation `word` of slot's arena; map_lock held. */
static weft_status_t mapping_make(struct weft_registry *reg, uint32_t slot, uint64_t word)
{
    reg_arena_t  *arena = &reg->arenas[slot];
    uint8_t       handle[REG_IPC_HANDLE_BYTES];
    int           own = REG_LOAD(&arena->exporter) == reg->self;
    int32_t       mapper = -1;
    int           device = -1;
    weft_status_t status;
    void         *ptr;

    if (!own) {
        mapper = mapper_claim(reg, arena);
        if (mapper < 0) {
            weft_log_error("registry \"%s\": arena %u is mapped by %u processes already", reg->name,
                           slot, REG_ARENA_MAPPERS);
            return WEFT_ERR_NO_SPACE;
        }
    }
    /* The handle is good if the word did not change around reading it. */
    memcpy(handle, arena->ipc_handle, sizeof(handle));
    if (REG_LOAD(&arena->word) != word) {
        mapper_release(reg, arena, mapper);
        weft_log_error("registry \"%s\": arena %u changed while being mapped", reg->name, slot);
        return WEFT_ERR_STATE;
    }
    /* Into the current device's context: the GPU the caller copies with
     * (peer access to the arena's GPU is enabled lazily). */
    status = weft_devmem_open(handle, &ptr, &device);
    if (status != WEFT_OK) {
        mapper_release(reg, arena, mapper);
        weft_log_error("registry \"%s\": cannot map arena %u generation %" PRIu64 " of pid %d: %s",
                       reg->name, slot, REG_ARENA_GEN(word),
                       weft_process_pid(REG_LOAD(&arena->exporter)), weft_status_string(status));
        return status;
    }
    reg->maps[slot] =
        (reg_mapping_t){.ptr = ptr, .gen = REG_ARENA_GEN(word), .mapper = mapper, .own = own,
                        .device = device};
    weft_log_debug("registry \"%s\": mapped arena %u generation %" PRIu64 " at %p", reg->name, slot,
                   REG_ARENA_GEN(word), ptr);
    return WEFT_OK;
}

weft_status_t weft_registry_arena_base(struct weft_registry *reg, uint32_t slot, uint8_t **base)
{
    reg_mapping_t *m;
    uint64_t       word;
    weft_status_t  status = WEFT_OK;

    if (reg->producer && reg->arena_ptr[slot] != NULL) {
        *base = reg->arena_ptr[slot];
        return WEFT_OK;
    }
    word = REG_LOAD(&reg->arenas[slot].word);
    if (REG_ARENA_STATE(word) != REG_ARENA_PRESENT) {
        weft_log_error("registry \"%s\": arena %u is not present (offloaded)", reg->name, slot);
        return WEFT_ERR_STATE;
    }
    pthread_mutex_lock(&reg->map_lock);
    m = &reg->maps[slot];
    if (m->ptr == NULL || m->gen != REG_ARENA_GEN(word)) {
        if (m->ptr != NULL) {
            mapping_drop(reg, slot); /* an older generation: rebind */
        }
        status = mapping_make(reg, slot, word);
    }
    if (status == WEFT_OK) {
        *base = m->ptr;
    }
    pthread_mutex_unlock(&reg->map_lock);
    return status;
}

void weft_registry_arenas_sweep(struct weft_registry *reg)
{
    uint64_t word;

    if (!is_gpu(reg) || reg->maps == NULL) {
        return;
    }
    word = REG_LOAD(&reg->hdr->arena_word);
    if (word == __atomic_load_n(&reg->arena_word_seen, __ATOMIC_RELAXED)) {
        return;
    }
    pthread_mutex_lock(&reg->map_lock);
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        uint64_t arena = REG_LOAD(&reg->arenas[s].word);
        reg_mapping_t *m = &reg->maps[s];

        /* PRESENT with our generation is still good; anything else means
         * the producer retires it or replaced it. A lease on the slot is
         * impossible then: offload waited for the leases first. */
        if (m->ptr != NULL &&
            (REG_ARENA_STATE(arena) != REG_ARENA_PRESENT || REG_ARENA_GEN(arena) != m->gen)) {
            mapping_drop(reg, s);
        }
    }
    __atomic_store_n(&reg->arena_word_seen, word, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&reg->map_lock);
}

/* Bumps the header's arena word to `state` and wakes everyone who might
 * have to look at it: readers sleep on publish_seq. */
static void arenas_announce(struct weft_registry *reg, uint32_t state)
{
    uint64_t word = REG_LOAD(&reg->hdr->arena_word);

    REG_STORE(&reg->hdr->arena_word, REG_ARENAS_WORD(REG_ARENAS_EPOCH(word) + 1, state));
    weft_registry_wake(&reg->hdr->publish_seq, &reg->hdr->publish_waiters);
    weft_registry_wake(&reg->hdr->arena_seq, &reg->hdr->arena_waiters);
}

/* 1 when some living process other than the producer's own maps an arena;
 * mapper words of dead processes are reclaimed on the way. */
static int arenas_mapped(struct weft_registry *reg, int32_t *pid)
{
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        for (uint32_t i = 0; i < REG_ARENA_MAPPERS; i++) {
            uint64_t owner = REG_LOAD(&reg->arenas[s].mappers[i]);

            if (owner == REG_OWNER_NONE) {
                continue;
            }
            if (owner != REG_OWNER_BUSY && !weft_process_alive(owner)) {
                (void)REG_CAS(&reg->arenas[s].mappers[i], &owner, REG_OWNER_NONE);
                continue;
            }
            *pid = weft_process_pid(owner);
            return 1;
        }
    }
    return 0;
}

static int slots_leased(struct weft_registry *reg)
{
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        if (weft_registry_slot_leased(reg, s)) {
            return 1;
        }
    }
    return 0;
}

/* Waits on futex word seq until done() holds or the deadline passes. */
static int offload_wait(struct weft_registry *reg, uint32_t *seq, uint32_t *waiters, uint64_t deadline,
                        int (*busy)(struct weft_registry *, int32_t *), int32_t *pid)
{
    for (;;) {
        uint32_t seen = REG_LOAD(seq);
        uint64_t now;

        if (!busy(reg, pid)) {
            return 1;
        }
        now = weft_time_ns();
        if (now >= deadline) {
            return 0;
        }
        weft_registry_sleep(seq, waiters, seen,
                            deadline - now < OFFLOAD_POLL_NS ? deadline - now : OFFLOAD_POLL_NS);
    }
}

static int leases_busy(struct weft_registry *reg, int32_t *pid)
{
    (void)pid;
    return slots_leased(reg);
}

WEFT_API weft_status_t weft_registry_offload(weft_registry_h reg, uint64_t timeout_us)
{
    uint64_t latest, deadline, words[REG_MAX_SLOTS];
    int32_t  pid = 0;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!is_gpu(reg)) {
        weft_log_error("registry \"%s\": offload of a host registry", reg->name);
        return WEFT_ERR_UNSUPPORTED;
    }
    if (!reg->producer || reg->writing ||
        REG_ARENAS_STATE(REG_LOAD(&reg->hdr->arena_word)) != REG_ARENAS_PRESENT) {
        weft_log_error("registry \"%s\": offload %s", reg->name,
                       !reg->producer ? "by a handle that is not the producer"
                       : reg->writing ? "while a write is in progress"
                                      : "twice");
        return WEFT_ERR_STATE;
    }
    deadline = weft_deadline_ns(weft_time_ns(), timeout_us);

    /* 1. No new lease: the latest word names no slot, and every slot word
     *    leaves PUBLISHED (a reader re-checks the slot word after it
     *    published its lease, as against a writer). */
    latest = REG_LOAD(&reg->hdr->latest);
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        words[s] = REG_LOAD(&reg->slots[s].word);
        REG_STORE(&reg->slots[s].word, REG_SLOT_WORD(REG_SLOT_VERSION(words[s]), REG_SLOT_WRITING));
    }
    if (latest != 0) {
        REG_STORE(&reg->hdr->latest, REG_VS_WORD(REG_VS_VERSION(latest), REG_SLOT_NONE));
    }
    arenas_announce(reg, REG_ARENAS_OFFLOADING);
    if (!offload_wait(reg, &reg->hdr->release_seq, &reg->hdr->release_waiters, deadline, leases_busy,
                      &pid)) {
        weft_log_error("registry \"%s\": offload: readers still hold leases after %" PRIu64 " us",
                       reg->name, timeout_us);
        goto undo;
    }

    /* 2. Retire the generation and wait until nobody maps it. */
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        uint64_t word = REG_LOAD(&reg->arenas[s].word);
        REG_STORE(&reg->arenas[s].word, REG_ARENA_WORD(REG_ARENA_GEN(word), REG_ARENA_RETIRING));
    }
    arenas_announce(reg, REG_ARENAS_OFFLOADING);
    if (!offload_wait(reg, &reg->hdr->arena_seq, &reg->hdr->arena_waiters, deadline, arenas_mapped,
                      &pid)) {
        weft_log_error("registry \"%s\": offload: pid %d still maps an arena after %" PRIu64
                       " us (it unmaps in weft_registry_wait or weft_registry_unmap_arenas)",
                       reg->name, pid, timeout_us);
        for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
            uint64_t word = REG_LOAD(&reg->arenas[s].word);
            REG_STORE(&reg->arenas[s].word, REG_ARENA_WORD(REG_ARENA_GEN(word), REG_ARENA_PRESENT));
        }
        goto undo;
    }

    /* 3. Free. The versions' bytes are gone with the memory. */
    arenas_free_local(reg);
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        uint64_t word = REG_LOAD(&reg->arenas[s].word);
        REG_STORE(&reg->arenas[s].word, REG_ARENA_WORD(REG_ARENA_GEN(word), REG_ARENA_ABSENT));
        REG_STORE(&reg->slots[s].word, REG_SLOT_WORD(0, REG_SLOT_FREE));
    }
    arenas_announce(reg, REG_ARENAS_OFFLOADED);
    weft_log_info("registry \"%s\": offloaded %u GPU arenas", reg->name, reg->geo.slot_count);
    return WEFT_OK;

undo:
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        REG_STORE(&reg->slots[s].word, words[s]);
    }
    REG_STORE(&reg->hdr->latest, latest);
    arenas_announce(reg, REG_ARENAS_PRESENT);
    return WEFT_ERR_BUSY;
}

WEFT_API weft_status_t weft_registry_reload(weft_registry_h reg)
{
    weft_status_t status;

    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    if (!is_gpu(reg)) {
        weft_log_error("registry \"%s\": reload of a host registry", reg->name);
        return WEFT_ERR_UNSUPPORTED;
    }
    if (!reg->producer || REG_ARENAS_STATE(REG_LOAD(&reg->hdr->arena_word)) != REG_ARENAS_OFFLOADED) {
        weft_log_error("registry \"%s\": reload %s", reg->name,
                       !reg->producer ? "by a handle that is not the producer" : "without an offload");
        return WEFT_ERR_STATE;
    }
    status = weft_registry_arenas_allocate(reg);
    if (status != WEFT_OK) {
        return status;
    }
    arenas_announce(reg, REG_ARENAS_PRESENT);
    weft_log_info("registry \"%s\": reloaded %u GPU arenas, generation %" PRIu64, reg->name,
                  reg->geo.slot_count, REG_ARENA_GEN(REG_LOAD(&reg->arenas[0].word)));
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_unmap_arenas(weft_registry_h reg)
{
    if (reg == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    weft_registry_arenas_sweep(reg);
    return WEFT_OK;
}

WEFT_API weft_status_t weft_registry_arena_info(weft_registry_h reg, weft_arena_info_t *info)
{
    if (reg == NULL || info == NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    memset(info, 0, sizeof(*info));
    info->memory = is_gpu(reg) ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST;
    info->device = is_gpu(reg) ? reg->device : -1;
    if (is_gpu(reg) && reg->sealed) {
        info->generation = REG_ARENA_GEN(REG_LOAD(&reg->arenas[0].word));
        info->offloaded =
            REG_ARENAS_STATE(REG_LOAD(&reg->hdr->arena_word)) == REG_ARENAS_OFFLOADED;
    }
    return WEFT_OK;
}

void weft_registry_arenas_close(struct weft_registry *reg)
{
    if (!is_gpu(reg) || reg->maps == NULL) {
        return;
    }
    pthread_mutex_lock(&reg->map_lock);
    for (uint32_t s = 0; s < reg->geo.slot_count; s++) {
        if (reg->maps[s].ptr != NULL || reg->maps[s].mapper >= 0) {
            mapping_drop(reg, s);
        }
    }
    pthread_mutex_unlock(&reg->map_lock);

    if (reg->producer && reg->sealed &&
        REG_ARENAS_STATE(REG_LOAD(&reg->hdr->arena_word)) == REG_ARENAS_PRESENT) {
        /* Leaving: free the arenas the way offload does, briefly. Memory
         * still mapped elsewhere is left allocated rather than freed
         * under a reader (it goes when this process exits). */
        if (weft_registry_offload(reg, 2000000) != WEFT_OK) {
            weft_log_warn("registry \"%s\": GPU arenas left allocated at close: still in use",
                          reg->name);
        }
    }
    free(reg->maps);
    free(reg->arena_ptr);
    reg->maps = NULL;
    reg->arena_ptr = NULL;
}
