/* A server's deltas, encoded once per version (server/delta_cache.h). */
#include "config.h"

#include "transport/server/delta_cache.h"
#include "transport/server/delta_cache_gpu.h"
#include "transport/server/delta_pairs.h"

#include "common/log.h"
#include "common/time_util.h"
#include "transport/core/view_layout.h"
#include "kernels/delta_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <weft/delta.h>

#define CACHE_ALIGN 4096u
#define ENTRY_ALIGN WEFT_DELTA_ENTRY_ALIGN
#define BUF_MIN     (UINT64_C(1) << 20) /* weft_delta_cache_capacity's least */

/* A GPU encode's steps: no batch in flight, a batch being encoded, its
 * deltas (or tensors whole) coming into the buffer. */
enum { GPU_IDLE, GPU_ENCODING, GPU_COPYING };

/* A batch tensor's gpu_item where it has no item: whole; a WT that its
 * W's delta may patch (decided when the batch is placed). */
enum { GPU_ITEM_WHOLE = -1, GPU_ITEM_PAIRED = -2 };

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* A GPU registry's encoder, when reg is one. */
static weft_status_t init_gpu(weft_delta_cache_t *c)
{
    weft_arena_info_t arenas;
    uint8_t *const    host[2] = {c->buf[0].data, c->buf[1].data};
    weft_status_t     status = weft_registry_arena_info(c->reg, &arenas);

    if (status != WEFT_OK || arenas.memory != WEFT_MEMORY_CUDA) {
        return status;
    }
    c->gpu_items = calloc(WEFT_DELTA_GPU_BATCH_MAX, sizeof(*c->gpu_items));
    c->gpu_item = calloc(WEFT_DELTA_GPU_BATCH_MAX, sizeof(*c->gpu_item));
    if (c->gpu_items == NULL || c->gpu_item == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    return weft_delta_gpu_create(host, c->capacity, &c->gpu_scratch, &c->gpu);
}

weft_status_t weft_delta_cache_init(weft_delta_cache_t *c, weft_registry_h reg, weft_delta_mode_t mode,
                                    uint64_t capacity)
{
    weft_status_t status;

    memset(c, 0, sizeof(*c));
    c->reg = reg;
    c->mode = mode;
    c->current = -1;
    status = weft_registry_tensor_count(reg, &c->tensor_count);
    c->capacity = align_up(capacity ? capacity : 1, CACHE_ALIGN);
    c->dense = calloc(c->tensor_count ? c->tensor_count : 1, 1);
    c->pair = calloc(c->tensor_count ? c->tensor_count : 1, sizeof(*c->pair));
    c->pair_rows = calloc(c->tensor_count ? c->tensor_count : 1, sizeof(*c->pair_rows));
    c->pair_cols = calloc(c->tensor_count ? c->tensor_count : 1, sizeof(*c->pair_cols));
    c->view_of = calloc(c->tensor_count ? c->tensor_count : 1, sizeof(*c->view_of));
    if (status == WEFT_OK && (c->dense == NULL || c->pair == NULL || c->pair_rows == NULL || c->pair_cols == NULL ||
                              c->view_of == NULL)) {
        status = WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t t = 0; t < c->tensor_count && status == WEFT_OK; t++) {
        weft_tensor_info_t info;
        uint64_t           dense[WEFT_TENSOR_MAX_DIMS] = {0}, elements = 1;

        status = weft_registry_tensor_info(reg, t, &info);
        if (status == WEFT_OK && info.ndim <= WEFT_TENSOR_MAX_DIMS) {
            weft_contiguous_strides(info.ndim, info.shape, dense);
            for (uint32_t d = 0; d < info.ndim; d++) {
                elements *= info.shape[d];
            }
            c->dense[t] = memcmp(dense, info.strides, info.ndim * sizeof(*dense)) == 0 &&
                          info.bytes == elements * weft_dtype_size(info.dtype);
        }
    }
    if (status == WEFT_OK) {
        status = weft_delta_pairs_find(reg, c->dense, c->tensor_count, c->pair, c->pair_rows, c->pair_cols);
    }
    for (int i = 0; i < 2 && status == WEFT_OK; i++) {
        c->buf[i].entries = calloc(c->tensor_count ? c->tensor_count : 1, sizeof(*c->buf[i].entries));
        c->buf[i].data = aligned_alloc(CACHE_ALIGN, c->capacity);
        if (c->buf[i].entries == NULL || c->buf[i].data == NULL) {
            status = WEFT_ERR_NO_MEMORY;
        }
    }
    if (status == WEFT_OK) {
        status = init_gpu(c);
    }
    if (status != WEFT_OK) {
        weft_delta_cache_fini(c);
    }
    return status;
}

/* A GPU encode's work done (it reads the leased slots and writes the
 * buffer), before its leases go or the encode starts over. */
static void gpu_settle(weft_delta_cache_t *c)
{
    if (c->gpu != NULL && c->gpu_step != GPU_IDLE) {
        (void)weft_delta_gpu_wait(c->gpu);
        c->gpu_step = GPU_IDLE;
    }
}

/* The encode in progress, if any, is abandoned (its lease released). */
static void drop_encode(weft_delta_cache_t *c)
{
    if (c->encoding) {
        gpu_settle(c);
        (void)weft_registry_release(c->reg, &c->next);
        c->encoding = 0;
    }
}

void weft_delta_cache_forget(weft_delta_cache_t *c)
{
    drop_encode(c);
    if (c->has_base) {
        (void)weft_registry_release(c->reg, &c->base);
        c->has_base = 0;
    }
    for (int i = 0; i < 2; i++) {
        c->buf[i].to = 0;
    }
    c->current = -1;
}

void weft_delta_cache_fini(weft_delta_cache_t *c)
{
    weft_delta_cache_forget(c);
    weft_delta_gpu_destroy(c->gpu); /* unpins the buffers */
    for (int i = 0; i < 2; i++) {
        free(c->buf[i].entries);
        free(c->buf[i].data);
    }
    free(c->gpu_items);
    free(c->gpu_item);
    free(c->dense);
    free(c->pair);
    free(c->pair_rows);
    free(c->pair_cols);
    free(c->view_of);
    memset(c, 0, sizeof(*c));
}

/* One tensor's entry: its delta, or the tensor whole where that is no
 * larger. 0 when neither fits in what is left of the buffer. */
static int encode_tensor(weft_delta_cache_t *c, weft_delta_buf_t *b, uint32_t t, const uint8_t *old_data,
                         const uint8_t *new_data, uint64_t bytes, const uint64_t *checksum)
{
    uint64_t                 at = align_up(b->used, ENTRY_ALIGN);
    uint64_t                 room = at <= c->capacity ? c->capacity - at : 0;
    weft_wire_delta_entry_t *e = &b->entries[t];
    uint64_t                 n = 0;

    /* A capacity of the tensor's size: NO_SPACE exactly where whole is no larger. */
    const uint64_t           cap = bytes < room ? bytes : room;
    const weft_status_t      st = checksum != NULL
                                      ? weft_delta_encode_host_summed(old_data, new_data, bytes, b->data + at, cap, &n,
                                                                      *checksum)
                                      : weft_delta_encode_host(old_data, new_data, bytes, b->data + at, cap, &n);

    if (st == WEFT_OK) {
        *e = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_PATCH, .offset = at, .bytes = n};
    } else if (bytes <= room) {
        memcpy(b->data + at, new_data, bytes);
        *e = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_WHOLE, .offset = at, .bytes = bytes};
    } else {
        return 0;
    }
    b->used = at + e->bytes;
    return 1;
}

/*
 * A WT whose W's delta is in the buffer (W came first): its entry is that
 * delta, to apply transposed and check against WT's stored checksum
 * (PATCH_T): WT is neither read nor sent. 0 where it has no such W, W
 * went whole, or the version stores no checksum for it: it is encoded,
 * or goes whole, as any tensor.
 */
static int pair_entry(weft_delta_cache_t *c, weft_delta_buf_t *b, uint32_t t)
{
    const int32_t w = c->pair[t];
    uint64_t      stored = 0;

    if (w < 0 || c->unpaired || b->entries[w].kind != WEFT_WIRE_DELTA_PATCH ||
        weft_registry_tensor_checksum(c->reg, &c->next, t, &stored) != WEFT_OK) {
        return 0;
    }
    b->entries[t] = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_PATCH_T, .offset = b->entries[w].offset,
                                              .bytes = b->entries[w].bytes, .rows = c->pair_rows[t],
                                              .cols = c->pair_cols[t], .checksum = stored};
    return 1;
}

/* Leases tensor t of both versions: its info and device pointers. */
static weft_status_t lease_pair(weft_delta_cache_t *c, uint32_t t, weft_tensor_info_t *info, const void **old_data,
                                const void **new_data)
{
    weft_status_t status = weft_registry_tensor_info(c->reg, t, info);

    if (status == WEFT_OK) {
        status = weft_registry_lease_tensor(c->reg, &c->base, t, old_data);
    }
    if (status == WEFT_OK) {
        status = weft_registry_lease_tensor(c->reg, &c->next, t, new_data);
    }
    return status;
}

/* Encodes the next tensor of the encode in progress. */
static weft_status_t encode_next(weft_delta_cache_t *c)
{
    weft_delta_buf_t  *b = &c->buf[c->target];
    const uint32_t     t = c->next_tensor++;
    weft_tensor_info_t info;
    const void        *old_data = NULL, *new_data = NULL;
    weft_status_t      status;

    if (c->overflow) {
        return WEFT_OK; /* goes whole: its tensors are only counted through */
    }
    if (pair_entry(c, b, t)) {
        return WEFT_OK;
    }
    status = lease_pair(c, t, &info, &old_data, &new_data);
    /* The checksum the publish stored (registries created with them): the
     * encode need not sum the tensor again. */
    uint64_t  stored = 0;
    const int known = status == WEFT_OK && weft_registry_tensor_checksum(c->reg, &c->next, t, &stored) == WEFT_OK;
    if (status == WEFT_OK && !encode_tensor(c, b, t, old_data, new_data, info.bytes, known ? &stored : NULL)) {
        weft_log_info("server: the delta of version %" PRIu64 " from %" PRIu64 " does not fit in %" PRIu64
                      " bytes: it goes whole",
                      c->next.version, c->base.version, c->capacity);
        c->overflow = 1;
    }
    return status;
}

/* The next batch on the GPU: tensors from next_tensor while their
 * shares of the scratch fit it, each share what is left of the buffer
 * (at most the tensor: a delta no smaller goes whole). */
static weft_status_t gpu_start_batch(weft_delta_cache_t *c)
{
    const weft_delta_buf_t *b = &c->buf[c->target];
    const uint64_t          at = align_up(b->used, ENTRY_ALIGN);
    const uint64_t          room = at <= c->capacity ? c->capacity - at : 0;
    uint64_t                taken = 0;
    uint32_t                n = 0, j = 0;
    weft_status_t           status = WEFT_OK;

    for (; c->next_tensor + j < c->tensor_count && j < WEFT_DELTA_GPU_BATCH_MAX; j++) {
        weft_tensor_info_t info;
        const void        *old_data = NULL, *new_data = NULL;
        uint64_t           share;

        status = lease_pair(c, c->next_tensor + j, &info, &old_data, &new_data);
        if (status != WEFT_OK) {
            return status;
        }
        uint64_t  stored = 0;
        const int known = weft_registry_tensor_checksum(c->reg, &c->next, c->next_tensor + j, &stored) == WEFT_OK;
        if (known && !c->unpaired && c->pair[c->next_tensor + j] >= 0) {
            c->gpu_item[j] = GPU_ITEM_PAIRED; /* its W's delta, if W's is one */
            continue;
        }
        share = info.bytes < room ? info.bytes : room;
        share = share < c->gpu_scratch ? share : c->gpu_scratch;
        if (share < weft_delta_bytes(info.bytes, 0)) {
            c->gpu_item[j] = GPU_ITEM_WHOLE; /* if it fits */
            continue;
        }
        if (taken + align_up(share, ENTRY_ALIGN) > c->gpu_scratch) {
            break; /* the next batch's */
        }
        c->gpu_items[n] = (struct weft_delta_gpu_item){.old_data = old_data, .new_data = new_data,
                                                       .bytes = info.bytes, .capacity = share,
                                                       .checksum = stored, .known = known};
        taken += align_up(share, ENTRY_ALIGN);
        c->gpu_item[j] = (int32_t)n++;
    }
    c->gpu_first = c->next_tensor;
    c->gpu_span = j;
    status = weft_delta_gpu_encode(c->gpu, c->gpu_items, n);
    if (status == WEFT_OK) {
        status = weft_delta_gpu_mark(c->gpu);
    }
    c->gpu_step = GPU_ENCODING;
    return status;
}

/* The batch's deltas encoded: each tensor's entry laid out in the
 * buffer (its delta, or the tensor whole where that did not fit its
 * share or is no larger), the copies home enqueued. */
static weft_status_t gpu_place_batch(weft_delta_cache_t *c)
{
    weft_delta_buf_t *b = &c->buf[c->target];
    weft_status_t     status = WEFT_OK;

    for (uint32_t j = 0; j < c->gpu_span && status == WEFT_OK && !c->overflow; j++) {
        const uint32_t           t = c->gpu_first + j;
        const uint64_t           at = align_up(b->used, ENTRY_ALIGN);
        const uint64_t           room = at <= c->capacity ? c->capacity - at : 0;
        const uint64_t           size = c->gpu_item[j] >= 0 ? weft_delta_gpu_size(c->gpu, (uint32_t)c->gpu_item[j]) : 0;
        weft_wire_delta_entry_t *e = &b->entries[t];
        weft_tensor_info_t       info;
        const void              *new_data = NULL;

        if (c->gpu_item[j] == GPU_ITEM_PAIRED && pair_entry(c, b, t)) {
            continue; /* nothing of its own in the buffer */
        }
        status = weft_registry_tensor_info(c->reg, t, &info);
        if (status != WEFT_OK) {
            break;
        }
        if (size != 0 && size <= room) {
            status = weft_delta_gpu_fetch_delta(c->gpu, (uint32_t)c->gpu_item[j], b->data + at);
            *e = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_PATCH, .offset = at, .bytes = size};
        } else if (info.bytes <= room) {
            status = weft_registry_lease_tensor(c->reg, &c->next, t, &new_data);
            if (status == WEFT_OK) {
                status = weft_delta_gpu_fetch_bytes(c->gpu, new_data, info.bytes, b->data + at);
            }
            *e = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_WHOLE, .offset = at, .bytes = info.bytes};
        } else {
            weft_log_info("server: the delta of version %" PRIu64 " from %" PRIu64 " does not fit in %" PRIu64
                          " bytes: it goes whole",
                          c->next.version, c->base.version, c->capacity);
            c->overflow = 1;
            break;
        }
        b->used = at + e->bytes;
    }
    if (status == WEFT_OK) {
        status = weft_delta_gpu_mark(c->gpu);
    }
    c->gpu_step = GPU_COPYING;
    return status;
}

/* The GPU encode's next step: WEFT_INPROGRESS while the GPU works (the
 * caller comes back later), WEFT_OK once a batch is in the buffer. */
static weft_status_t gpu_encode_next(weft_delta_cache_t *c)
{
    weft_status_t status;

    if (c->overflow) {
        c->next_tensor = c->tensor_count; /* goes whole */
        return WEFT_OK;
    }
    if (c->gpu_step == GPU_IDLE) {
        status = gpu_start_batch(c);
        return status == WEFT_OK ? WEFT_INPROGRESS : status;
    }
    status = weft_delta_gpu_ready(c->gpu);
    if (status != WEFT_OK) {
        return status;
    }
    if (c->gpu_step == GPU_ENCODING) {
        status = gpu_place_batch(c);
        return status == WEFT_OK ? WEFT_INPROGRESS : status;
    }
    c->gpu_step = GPU_IDLE;
    c->next_tensor = c->overflow ? c->tensor_count : c->gpu_first + c->gpu_span;
    return WEFT_OK;
}

/* The encode is over: its buffer current (unless it overflowed), its
 * version the base. */
static void finish_encode(weft_delta_cache_t *c, weft_status_t status)
{
    weft_delta_buf_t *b = &c->buf[c->target];

    if (status == WEFT_OK && !c->overflow) {
        b->from = c->base.version;
        b->to = c->next.version;
        c->current = c->target;
        c->encode_ns = weft_time_ns() - c->encode_start_ns;
        weft_log_debug("server: version %" PRIu64 " as a delta from %" PRIu64 ": %" PRIu64 " bytes, encoded in %" PRIu64
                       " us",
                       b->to, b->from, b->used, c->encode_ns / 1000);
    }
    (void)weft_registry_release(c->reg, &c->base);
    c->base = c->next;
    c->encoding = 0;
}

/* Starts encoding base → latest into the buffer not current, when no put
 * reads it. */
static weft_status_t start_encode(weft_delta_cache_t *c, unsigned reading)
{
    const int     target = c->current < 0 ? 0 : 1 - c->current;
    weft_status_t status;

    if (reading & (1u << target)) {
        return WEFT_OK; /* later: its puts end first */
    }
    status = weft_registry_acquire(c->reg, &c->next);
    if (status != WEFT_OK) {
        return status;
    }
    if (c->next.version <= c->base.version) {
        (void)weft_registry_release(c->reg, &c->next);
        return WEFT_OK;
    }
    c->encoding = 1;
    c->target = target;
    c->overflow = 0;
    c->next_tensor = 0;
    c->buf[target].used = 0;
    c->buf[target].to = 0;
    c->encode_start_ns = weft_time_ns();
    return WEFT_OK;
}

weft_status_t weft_delta_cache_update(weft_delta_cache_t *c, uint64_t latest, unsigned reading, uint64_t budget_ns)
{
    const uint64_t until = weft_time_ns() + budget_ns;
    weft_status_t  status = WEFT_OK;

    if (!c->has_base) {
        if (latest == 0 || weft_registry_acquire(c->reg, &c->base) != WEFT_OK) {
            return WEFT_OK; /* nothing published yet */
        }
        c->has_base = 1;
        return WEFT_OK;
    }
    if (!c->encoding && latest > c->base.version) {
        status = start_encode(c, reading);
    }
    while (status == WEFT_OK && c->encoding && c->next_tensor < c->tensor_count) {
        status = c->gpu != NULL ? gpu_encode_next(c) : encode_next(c);
        if (status == WEFT_INPROGRESS) {
            status = WEFT_OK; /* the GPU's turn: looked at again next call */
            break;
        }
        if (weft_time_ns() >= until) {
            break;
        }
    }
    if (c->encoding && (status != WEFT_OK || c->next_tensor == c->tensor_count)) {
        gpu_settle(c);
        finish_encode(c, status);
    }
    return status;
}

void weft_delta_cache_unpair(weft_delta_cache_t *c, const char *who)
{
    if (!c->unpaired) {
        weft_log_warn("server: consumer \"%s\": a WT patched by its W's delta did not check out: every WT goes as "
                      "its own delta from the next version on",
                      who);
    }
    c->unpaired = 1;
}

int weft_delta_cache_busy(const weft_delta_cache_t *c)
{
    return c->encoding;
}

int weft_delta_cache_coming(const weft_delta_cache_t *c, uint64_t holds, uint64_t latest)
{
    if (c->mode == WEFT_DELTA_OFF || !c->has_base || holds == 0 || c->base.version != holds) {
        return 0;
    }
    /* The encode may have leased a version newer than `latest`: the
     * consumer's lease would take that one too. */
    return c->encoding && c->next.version >= latest;
}

int weft_delta_cache_entries(weft_delta_cache_t *c, uint64_t holds, uint64_t version,
                             const weft_plan_view_t *views, uint32_t count, uint64_t whole, uint64_t room,
                             int *which, weft_wire_delta_entry_t *out, uint64_t *bytes)
{
    const weft_delta_buf_t *b;
    uint64_t                sum = 0;

    if (c->mode == WEFT_DELTA_OFF || c->current < 0 || holds == 0) {
        return 0;
    }
    b = &c->buf[c->current];
    if (b->to == 0 || b->to != version || b->from != holds) {
        return 0;
    }
    for (uint32_t i = 0; i < count; i++) {
        if (views[i].tensor >= c->tensor_count || !c->dense[views[i].tensor]) {
            return 0;
        }
        c->view_of[views[i].tensor] = i;
    }
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t t = views[i].tensor;
        const int32_t  w = c->pair[t];
        const uint32_t wv = w >= 0 ? c->view_of[w] : 0;

        out[i] = b->entries[t];
        /* A WT whose W is among the views shares W's bytes in the inbox. */
        out[i].shares = out[i].kind == WEFT_WIRE_DELTA_PATCH_T && w >= 0 && wv < count &&
                        views[wv].tensor == (uint32_t)w && b->entries[w].kind == WEFT_WIRE_DELTA_PATCH &&
                        b->entries[w].offset == out[i].offset;
        out[i].shared_view = out[i].shares ? wv : 0;
        if (!out[i].shares) {
            sum = align_up(sum, ENTRY_ALIGN) + out[i].bytes;
        }
    }
    *which = c->current;
    *bytes = sum;
    return sum <= room && (c->mode == WEFT_DELTA_FORCE || sum < whole);
}

uint64_t weft_delta_cache_capacity(weft_registry_h reg, weft_delta_mode_t mode, uint64_t slot_bytes)
{
    uint32_t tensors = 0;

    if (mode == WEFT_DELTA_FORCE && weft_registry_tensor_count(reg, &tensors) == WEFT_OK) {
        return slot_bytes + (uint64_t)tensors * ENTRY_ALIGN;
    }
    return slot_bytes / 16 > BUF_MIN ? slot_bytes / 16 : BUF_MIN;
}

/* The cache and the transport's memory for it (weft_delta_cache_turn). */
static weft_status_t make_cache(weft_delta_cache_t *c, weft_registry_h reg, weft_delta_mode_t mode, uint64_t slot_bytes,
                                weft_status_t (*attach)(void *arg), void *arg)
{
    weft_status_t status = weft_delta_cache_init(c, reg, mode, weft_delta_cache_capacity(reg, mode, slot_bytes));

    if (status == WEFT_OK) {
        status = attach(arg);
        if (status != WEFT_OK) {
            weft_delta_cache_fini(c);
        }
    }
    if (status != WEFT_OK) {
        weft_log_warn("server: no delta cache (%s): every version goes whole", weft_status_string(status));
        return status;
    }
    weft_log_info("server: delta versions (%s), two buffers of %" PRIu64 " bytes", weft_delta_mode_name(mode),
                  c->capacity);
    return WEFT_OK;
}

int weft_delta_cache_redone(weft_delta_cache_t *c, const char *who, uint32_t flags, uint32_t *redos)
{
    if ((flags & 1u) != 0) {
        /* A WT patched by its W's delta did not check out: either an
         * engine wrote into that view, or the producer's WT is not its
         * W's transpose (not libweft's FP8 writer). The second would fail
         * every version, so from here each WT is encoded on its own. */
        weft_delta_cache_unpair(c, who);
    }
    if (++*redos < WEFT_DELTA_REDOS_MAX) {
        return 0;
    }
    weft_log_warn("server: consumer \"%s\": %u deltas in a row did not check out: every version goes to it "
                  "whole from here",
                  who, *redos);
    return 1;
}

void weft_delta_cache_turn(weft_delta_cache_t *c, int *made, weft_delta_mode_t *mode, weft_registry_h reg,
                           uint64_t slot_bytes, weft_status_t (*attach)(void *arg), void *arg, int takers,
                           unsigned reading, uint64_t latest, uint64_t budget_ns)
{
    weft_status_t status;

    if (takers == 0) {
        if (*made) {
            weft_delta_cache_forget(c);
        }
        return;
    }
    if (!*made) {
        if (make_cache(c, reg, *mode, slot_bytes, attach, arg) != WEFT_OK) {
            *mode = WEFT_DELTA_OFF;
            return;
        }
        *made = 1;
    }
    status = weft_delta_cache_update(c, latest, reading, budget_ns);
    if (status != WEFT_OK) {
        weft_log_warn("server: the delta of the latest version was not made (%s): it goes whole",
                      weft_status_string(status));
    }
}

uint64_t weft_delta_inbox_layout(weft_wire_delta_entry_t *map, uint32_t count, uint64_t inbox_base,
                                 weft_range_list_t *puts)
{
    uint64_t at = 0;

    puts->count = 0;
    for (uint32_t i = 0; i < count; i++) {
        weft_wire_delta_entry_t *e = &map[i];

        if (e->shares) {
            continue; /* below, once its W's place is known */
        }
        at = align_up(at, ENTRY_ALIGN);
        if (e->bytes != 0) {
            puts->ranges[puts->count++] = (weft_copy_range_t){
                .src = e->offset, .dst = (uint8_t *)(uintptr_t)(inbox_base + at), .bytes = e->bytes, .view = i};
        }
        e->offset = at; /* from here: where it lies in the inbox */
        at += e->bytes;
    }
    for (uint32_t i = 0; i < count; i++) {
        if (map[i].shares) {
            map[i].offset = map[map[i].shared_view].offset; /* W's delta, put once */
        }
    }
    return at;
}
