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

#include "layout.h"
#include "validate.h"

#include <pthread.h>
#include <stdint.h>
#include <weft/registry.h>

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
    pthread_mutex_t lock; /* producer state of this handle */
};

/* Creates the name index of reg->tensors. */
weft_status_t weft_registry_index_names(struct weft_registry *reg);

/* Points hdr/slots/leases/consumers into the mapping by reg->geo. */
void weft_registry_bind_tables(struct weft_registry *reg);

/* Address of tensor `index` in slot `slot`; both already checked. */
static inline uint8_t *weft_registry_tensor_addr(const struct weft_registry *reg, uint32_t slot,
                                                 uint32_t index)
{
    return reg->base + reg->geo.data_offset + (uint64_t)slot * reg->geo.slot_stride +
           reg->tensors[index].offset;
}

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

/* Wakes sleepers on a futex word if any are counted. */
void weft_registry_wake(uint32_t *seq, uint32_t *waiters);

/* Sleeps on seq (value seen: expected) up to timeout_ns, counted in waiters. */
void weft_registry_sleep(uint32_t *seq, uint32_t *waiters, uint32_t expected, uint64_t timeout_ns);

#define REG_LOAD(p)       __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define REG_STORE(p, v)   __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define REG_CAS(p, e, d)  __atomic_compare_exchange_n((p), (e), (d), 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)

#endif
