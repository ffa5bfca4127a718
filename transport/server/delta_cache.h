/*
 * A server's deltas (docs/protocol.md, "Delta versions on the wire"): the
 * delta of every registry tensor from the version its consumers last
 * received (the base, which the cache keeps leased) to the latest one,
 * encoded once per version on the host (<weft/delta.h>) and sent to each
 * consumer that says it holds the base. A tensor whose delta is no
 * smaller than it is kept whole. What does not fit in the cache's memory
 * makes the version go whole to everyone.
 *
 * Why the base stays leased: a consumer holding version b can be sent
 * b → v only while b's bytes are there to encode from; the lease keeps
 * the producer from writing over them. It is moved to v as soon as v is
 * encoded, so with K slots the producer still has K − 2 to write into
 * (the latest and the base are taken) while the server encodes, and
 * K − 1 otherwise.
 *
 * Host registries only. On the server's thread. Internal.
 */
#ifndef WEFT_TRANSPORT_SERVER_DELTA_CACHE_H
#define WEFT_TRANSPORT_SERVER_DELTA_CACHE_H

#include "transport/core/delta_mode.h"
#include "transport/ctl/wire.h"
#include "transport/plan/plan.h"

#include <stdint.h>
#include <weft/registry.h>

/* Entries start on this boundary, in the cache and in a consumer's inbox. */
#define WEFT_DELTA_ENTRY_ALIGN 64u

typedef struct weft_delta_cache {
    weft_registry_h          reg;        /* borrowed */
    weft_delta_mode_t        mode;
    weft_lease_t             base;       /* the version consumers hold (from `to` on) */
    int                      has_base;
    uint64_t                 from, to;   /* entries: from → to; to 0: none */
    uint32_t                 tensor_count;
    /* Per registry tensor: PATCH (offset into buf) or WHOLE (offset into
     * buf too: copied there from the slot). */
    weft_wire_delta_entry_t *entries;
    uint8_t                 *buf;        /* capacity bytes, page aligned */
    uint64_t                 capacity, used;
    uint64_t                 version_bytes; /* of every tensor, whole */
    uint64_t                 encode_ns;     /* the last encode's */
} weft_delta_cache_t;

/*
 * Prepares a cache of `capacity` bytes for reg (a host registry); nothing
 * is leased until the first update. WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_delta_cache_init(weft_delta_cache_t *c, weft_registry_h reg, weft_delta_mode_t mode,
                                    uint64_t capacity);

/* Releases the base and frees the memory. */
void weft_delta_cache_fini(weft_delta_cache_t *c);

/*
 * Brings the cache to the latest version `latest`: the first time, leases
 * it as the base; later, when a newer one is published, encodes base →
 * latest and makes latest the base. Nothing when latest is the base
 * already. WEFT_OK also when the entries could not be kept (the version
 * goes whole: to is 0 then); a registry error otherwise, the cache
 * emptied.
 */
weft_status_t weft_delta_cache_update(weft_delta_cache_t *c, uint64_t latest);

/* Releases the base (no consumer takes deltas now): the producer has
 * its slot again; the next update starts over. */
void weft_delta_cache_forget(weft_delta_cache_t *c);

/*
 * The entries for a consumer whose views are views[0 .. count) (their
 * registry tensors) and that holds version `holds`, asking for
 * `version`: 1 and out[i] the cache's entry of each (offsets into buf),
 * *bytes their sum, when the cache has from holds → version, the sum is
 * at most room, and (mode auto) smaller than the views' whole bytes
 * `whole`; 0 otherwise (the version goes whole).
 */
int weft_delta_cache_entries(const weft_delta_cache_t *c, uint64_t holds, uint64_t version,
                             const weft_plan_view_t *views, uint32_t count, uint64_t whole, uint64_t room, weft_wire_delta_entry_t *out,
                             uint64_t *bytes);

#endif
