/*
 * A server's deltas (docs/protocol.md, "Delta versions on the wire"): the
 * delta of every registry tensor from the version its consumers last
 * received (the base, which the cache keeps leased) to the latest one,
 * encoded once per version on the host (<weft/delta.h>) and sent to each
 * consumer that says it holds the base. A tensor whose delta is no
 * smaller than it is kept whole. What does not fit in a buffer makes the
 * version go whole to everyone.
 *
 * Why the base stays leased: a consumer holding version b can be sent
 * b → v only while b's bytes are there to encode from; the lease keeps
 * the producer from writing over them. It is moved to v as soon as v is
 * encoded, so with K slots the producer still has K − 2 to write into
 * (the latest and the base are taken) while the server encodes, and
 * K − 1 otherwise.
 *
 * Two buffers: consumers are sent the complete one (current) while the
 * next version is encoded into the other, a tensor at a time within a
 * time budget per call, so that the server's thread goes on serving the
 * others between tensors. The other buffer is encoded into only when no
 * consumer's puts read it (the caller says which are read).
 *
 * An expert's WT (the FP8 writer's: W's bytes transposed) is not encoded
 * where its W's delta can patch it, transposed (PATCH_T, checked by WT's
 * stored checksum): half the version is read and sent.
 *
 * A GPU registry's deltas are encoded on its GPU a batch of tensors at a
 * time and brought into the same host buffers (delta_cache_gpu.h); the
 * update then only enqueues and polls, and the server's thread goes on
 * serving while the GPU works.
 *
 * On the server's thread (a GPU registry's GPU current). Internal.
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

/* REDOs in a row after which a consumer gets every version whole: its
 * views keep failing the check (an engine writing into them), where
 * each delta would cost an encode, the delta and the version whole. */
#define WEFT_DELTA_REDOS_MAX 3u

typedef struct weft_delta_buf {
    uint8_t                 *data;     /* capacity bytes, page aligned */
    uint64_t                 used;
    /* Per registry tensor: PATCH or WHOLE (copied here from the slot),
     * offsets into data. */
    weft_wire_delta_entry_t *entries;
    uint64_t                 from, to; /* complete: from → to; to 0: none */
} weft_delta_buf_t;

typedef struct weft_delta_cache {
    weft_registry_h   reg;       /* borrowed */
    weft_delta_mode_t mode;
    uint32_t          tensor_count;
    uint64_t          capacity;  /* of each buffer */
    weft_delta_buf_t  buf[2];
    /* Per registry tensor: its bytes lie dense in row-major order, as a
     * consumer applies a delta in its view's element order; others (padded
     * or other strides in the registry) go whole, in the plan's ranges. */
    uint8_t          *dense;
    /* Per registry tensor: for a WT, the index of its W (same layer and
     * expert, transposed shape, both dense bytes), whose delta patches
     * it transposed (PATCH_T) where the version stores WT's checksum to
     * check it by; -1 otherwise. pair_rows, pair_cols: W's matrices. */
    int32_t          *pair;
    uint64_t         *pair_rows, *pair_cols;
    int               unpaired;  /* weft_delta_cache_unpair was called: no PATCH_T any more */
    /* Per registry tensor: the index of its view in the last call of
     * weft_delta_cache_entries (scratch; stale entries are told by the
     * view's tensor not matching). */
    uint32_t         *view_of;
    int               current;   /* the complete buffer consumers are sent; -1: none */
    weft_lease_t      base;      /* the version consumers hold (the last one encoded to) */
    int               has_base;
    /* An encode in progress: base → next into buf[target], tensors
     * before next_tensor done; overflow: it did not fit. */
    int               encoding, target, overflow;
    weft_lease_t      next;
    uint32_t          next_tensor;
    uint64_t          encode_start_ns, encode_ns; /* the last complete encode's time */
    /* A GPU registry's encode (NULL for a host registry's): the batch in
     * flight, tensors gpu_first .. gpu_first + gpu_span − 1, gpu_item[j]
     * the encode's item of tensor gpu_first + j (−1: too small a share
     * for a delta: whole), and its step (GPU_* in delta_cache.c). */
    struct weft_delta_gpu        *gpu;
    struct weft_delta_gpu_item   *gpu_items;
    int32_t                      *gpu_item;
    uint64_t                      gpu_scratch;
    uint32_t                      gpu_first, gpu_span;
    int                           gpu_step;
} weft_delta_cache_t;

/*
 * Prepares a cache of two buffers of `capacity` bytes each for reg (a host
 * registry, or a GPU registry whose GPU is current: its encoder's scratch
 * made there); nothing is leased until the first update.
 * WEFT_ERR_NO_MEMORY, WEFT_ERR_CUDA; WEFT_ERR_UNSUPPORTED for a GPU
 * registry in a build without CUDA.
 */
weft_status_t weft_delta_cache_init(weft_delta_cache_t *c, weft_registry_h reg, weft_delta_mode_t mode,
                                    uint64_t capacity);

/* Releases the leases and frees the memory. */
void weft_delta_cache_fini(weft_delta_cache_t *c);

/*
 * The capacity of each buffer for a registry of versions of slot_bytes:
 * a sixteenth of a version (a delta any larger is more than a consumer's
 * default inbox; RL steps make 0.4-3 %), at least 1 MiB; with
 * WEFT_DELTA=force, a whole version and its entries' alignment.
 */
uint64_t weft_delta_cache_capacity(weft_registry_h reg, weft_delta_mode_t mode, uint64_t slot_bytes);

/*
 * A consumer (`who`) answered a delta with REDO(v, flags) (wire.h): with
 * bit 0 of flags (a WT patched by its W's delta failed) the cache stops
 * pairing (weft_delta_cache_unpair). *redos counts its REDOs in a row;
 * returns 1 at the WEFT_DELTA_REDOS_MAX-th (logged): it is sent no more
 * deltas.
 */
int weft_delta_cache_redone(weft_delta_cache_t *c, const char *who, uint32_t flags, uint32_t *redos);

/*
 * One turn of a server's thread for its delta cache, at `latest`:
 * takers, how many consumers take deltas now; reading, which buffers
 * their transfers still read (bits, as for weft_delta_cache_update).
 * Without takers the cache lets go of its leases (the producer's slots
 * back). Otherwise the cache is made the first time (*made set): buffers
 * of weft_delta_cache_capacity for reg's versions of slot_bytes, then,
 * with attach(arg), the transport's own memory for them (registered for
 * puts, copies on a GPU; attach frees what it made when it fails). When
 * that fails (logged) *mode becomes WEFT_DELTA_OFF and every version goes
 * whole. Then it encodes for at most budget_ns; a failed encode is
 * logged, and that version goes whole.
 */
void weft_delta_cache_turn(weft_delta_cache_t *c, int *made, weft_delta_mode_t *mode, weft_registry_h reg,
                           uint64_t slot_bytes, weft_status_t (*attach)(void *arg), void *arg, int takers,
                           unsigned reading, uint64_t latest, uint64_t budget_ns);

/*
 * Moves the cache towards the latest version `latest`: the first time,
 * leases it as the base; when a newer one is published, starts encoding
 * base → latest into the buffer that is not current, unless bit i of
 * `reading` says consumers' puts read buffer i; then encodes tensors until
 * budget_ns passed, and once all are, makes that buffer current and the
 * latest the base. WEFT_OK also when a version's delta did not fit (it
 * goes whole; its buffer is not made current); a registry error
 * otherwise (the encode abandoned, the base moved on).
 */
weft_status_t weft_delta_cache_update(weft_delta_cache_t *c, uint64_t latest, unsigned reading, uint64_t budget_ns);

/* 1 while an encode is under way (the caller keeps calling update). */
int weft_delta_cache_busy(const weft_delta_cache_t *c);

/*
 * 1 when a consumer holding `holds` should wait before it is sent
 * `latest`: the delta from holds to latest, or to a newer version, is
 * being encoded. (One that cannot
 * start, its buffer still read by a consumer's puts, is not waited for:
 * the version goes whole.)
 */
int weft_delta_cache_coming(const weft_delta_cache_t *c, uint64_t holds, uint64_t latest);

/* A consumer (`who`, for the log) said a WT patched by its W's delta did
 * not check out: every WT is encoded on its own from the next encode on
 * (for the cache's life), as for a producer whose WT is not W's
 * transpose; an engine that wrote into a WT view costs only that. */
void weft_delta_cache_unpair(weft_delta_cache_t *c, const char *who);

/* Releases the leases (no consumer takes deltas now): the producer has
 * its slots again; the next update starts over. */
void weft_delta_cache_forget(weft_delta_cache_t *c);

/*
 * The entries for a consumer whose views are views[0 .. count) (their
 * registry tensors) and that holds version `holds`, asking for
 * `version`: 1, *which (the buffer they are in: current), out[i] the
 * entry of each (offsets into that buffer), *bytes their sum with
 * alignment, when the current buffer has holds → version, the sum is at
 * most room, and (mode auto) smaller than the views' whole bytes `whole`;
 * 0 otherwise (the version goes whole), also when a view's tensor is not
 * dense in the registry. A WT's PATCH_T whose W's PATCH is among the
 * views (before or after it) is marked shares, shared_view that view,
 * and not counted: its bytes are W's, put once.
 */
/*
 * Lays a consumer's entries (map[0 .. count), from weft_delta_cache_entries)
 * out in its inbox, in view order, each on WEFT_DELTA_ENTRY_ALIGN: every
 * entry's offset becomes its place in the inbox (a shared entry's, its
 * W's), and each one not shared with bytes to send is one range of puts
 * (src: its offset in the cache's buffer; dst: inbox_base plus its place;
 * puts has room for count). Returns the bytes the inbox holds then.
 */
uint64_t weft_delta_inbox_layout(weft_wire_delta_entry_t *map, uint32_t count, uint64_t inbox_base,
                                 weft_range_list_t *puts);

int weft_delta_cache_entries(weft_delta_cache_t *c, uint64_t holds, uint64_t version,
                             const weft_plan_view_t *views, uint32_t count, uint64_t whole, uint64_t room,
                             int *which, weft_wire_delta_entry_t *out, uint64_t *bytes);

#endif
