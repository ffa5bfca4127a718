/*
 * The registry handle and what the registry's files share. Internal.
 *
 * Pointers into the segment (hdr, slots, leases, consumers) address words
 * other processes change: they are read and written with __atomic
 * builtins only. The geometry and the tensor table are copies made after
 * validation, so later changes to the segment cannot move them.
 */
#ifndef WEFT_REGISTRY_IMPL_H
#define WEFT_REGISTRY_IMPL_H

#include "kernels/checksum.h"
#include "layout.h"
#include "validate.h"

#include <pthread.h>
#include <stdint.h>
#include <weft/registry.h>

/* A consumer's mapping of one slot's GPU arena, good for one generation. */
typedef struct reg_mapping {
    void    *ptr;    /* NULL: not mapped */
    uint64_t gen;
    int32_t  mapper; /* index of this process's word in the arena's mappers; -1 none */
    int      own;    /* this process allocated it: nothing to unmap */
    int      device; /* whose context it is mapped in */
} reg_mapping_t;

struct weft_registry {
    char            name[WEFT_REGISTRY_NAME_MAX];
    char            shm_name[WEFT_REGISTRY_NAME_MAX + 8];
    int             fd;
    uint8_t        *base;
    size_t          mapped;
    int             producer; /* this handle holds the producer role */
    int             sealed;
    uint64_t        self;     /* owner word of this process */
    uint64_t        tag;      /* tells this handle's records from other handles' */
    long            spin_us;  /* reader's spin budget, WEFT_REGISTRY_SPIN_US */

    reg_geometry_t  geo;
    reg_tensor_t   *tensors;  /* local copy once sealed/opened */
    uint32_t       *name_index;  /* open addressing: tensor index + 1 */
    uint32_t        name_buckets;

    reg_header_t   *hdr;
    reg_slot_t     *slots;
    reg_lease_t    *leases;
    reg_consumer_t *consumers;

    int             writing;
    uint32_t        write_slot;
    uint64_t        announced; /* the version the write in progress announced (streaming), 0: none */
    pthread_mutex_t lock; /* producer state of this handle */

    /* GPU registries (geo.memory == REG_MEMORY_CUDA). */
    reg_arena_t    *arenas;      /* in the segment, one per slot */
    int             device;      /* ordinal of the arenas' GPU here; -1 not visible */
    void          **arena_ptr;   /* producer: its allocation per slot, NULL when none */
    reg_mapping_t  *maps;        /* everyone else: mappings per slot */
    uint64_t        arena_word_seen; /* header arena_word at the last sweep */
    pthread_mutex_t map_lock;    /* maps and arena_word_seen */

    /* GPU checksums (verify.c): device scratch kept between calls. */
    weft_checksum_scratch_t sum_scratch;
    pthread_mutex_t         sum_lock;
};

/* Creates the name index of reg->tensors. */
weft_status_t weft_registry_index_names(struct weft_registry *reg);

/* Points hdr/slots/leases/consumers into the mapping by reg->geo. */
void weft_registry_bind_tables(struct weft_registry *reg);

/* Address of tensor `index` in slot `slot` of a host registry; both
 * already checked. */
static inline uint8_t *weft_registry_tensor_addr(const struct weft_registry *reg, uint32_t slot,
                                                 uint32_t index)
{
    return reg->base + reg->geo.data_offset + (uint64_t)slot * reg->geo.slot_stride +
           reg->tensors[index].offset;
}

/* --- The lease table (lease.c) --- */

/*
 * Takes back the lease record if its owner died. Returns 1 when the record
 * is (now) free or was already, 0 when a living process holds it.
 */
int weft_registry_reclaim_lease(struct weft_registry *reg, reg_lease_t *lease);

/* 1 when some living reader holds a lease on slot. Reclaims dead ones. */
int weft_registry_slot_leased(struct weft_registry *reg, uint32_t slot);

/* Releases every lease and consumer record this handle owns (close). */
void weft_registry_drop_leases(struct weft_registry *reg);
void weft_registry_drop_consumers(struct weft_registry *reg);

/* The lease's record when this handle holds it (its ticket and version
 * match), else NULL. */
reg_lease_t *weft_registry_lease_record(struct weft_registry *reg, const weft_lease_t *lease);

/* Claims a free lease record for this handle (taking back those of dead
 * processes when none is free); NULL, logged, when every record is held. */
reg_lease_t *weft_registry_lease_claim(struct weft_registry *reg, uint32_t *index);

/* The caller's view of a lease now held on `version` in `slot`. */
void weft_registry_lease_fill(reg_lease_t *lease, uint32_t index, uint64_t version, uint32_t slot,
                              weft_lease_t *out);

/* Frees a record this handle holds (the caller wakes the writers). */
void weft_registry_lease_unclaim(struct weft_registry *reg, reg_lease_t *lease);

/* --- Verified versions (verify.c) --- */

/* Producer, before it publishes slot `slot` as `version`: stores every
 * tensor's checksum, when the registry has checksums. Logged on error
 * (nothing stored; the publish must not happen). */
weft_status_t weft_registry_sum_slot(struct weft_registry *reg, uint32_t slot, uint64_t version);

/* --- GPU arenas (arena.c) --- */

/* Producer: sets up the handle's arena state after create or open. */
weft_status_t weft_registry_arenas_init(struct weft_registry *reg);

/* Producer: allocates and exports every slot's arena as a new generation,
 * and marks the arenas present. Nothing stays allocated on failure. */
weft_status_t weft_registry_arenas_allocate(struct weft_registry *reg);

/* Producer, taking over: the dead producer's arenas are gone; marks them
 * absent and the latest version unreadable. */
void weft_registry_arenas_orphan(struct weft_registry *reg);

/* Device pointer to the start of slot `slot`'s arena in this process,
 * mapping it first if needed. Call it under a lease on (or a write of) the
 * slot. */
weft_status_t weft_registry_arena_base(struct weft_registry *reg, uint32_t slot, uint8_t **base);

/* Unmaps mappings whose generation is no longer current; cheap when the
 * header's arena word has not changed since the last sweep. */
void weft_registry_arenas_sweep(struct weft_registry *reg);

/* At close: unmaps everything; the producer frees its arenas when no one
 * maps them any more (else they are left allocated, with a warning). */
void weft_registry_arenas_close(struct weft_registry *reg);

#define REG_LOAD(p)       __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define REG_STORE(p, v)   __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define REG_CAS(p, e, d)  __atomic_compare_exchange_n((p), (e), (d), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)

/* Withdraws slot s's streaming announcement: the count first, then the
 * version, then its producer, so that a reader that loads version, count,
 * owner, version and sees the same version twice has that version's count
 * and announcer. */
static inline void weft_registry_slot_unannounce(struct weft_registry *reg, uint32_t s)
{
    REG_STORE(&reg->slots[s].ready_count, 0);
    REG_STORE(&reg->slots[s].ready_version, 0);
    REG_STORE(&reg->slots[s].ready_owner, 0);
}

#endif
