/* A server's deltas, encoded once per version (server/delta_cache.h). */
#include "config.h"

#include "transport/server/delta_cache.h"

#include "common/log.h"
#include "common/time_util.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <weft/delta.h>

#define CACHE_ALIGN 4096u
#define ENTRY_ALIGN WEFT_DELTA_ENTRY_ALIGN

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

weft_status_t weft_delta_cache_init(weft_delta_cache_t *c, weft_registry_h reg, weft_delta_mode_t mode,
                                    uint64_t capacity)
{
    weft_status_t status;

    memset(c, 0, sizeof(*c));
    c->reg = reg;
    c->mode = mode;
    status = weft_registry_tensor_count(reg, &c->tensor_count);
    if (status != WEFT_OK) {
        return status;
    }
    for (uint32_t t = 0; t < c->tensor_count && status == WEFT_OK; t++) {
        weft_tensor_info_t info;

        status = weft_registry_tensor_info(reg, t, &info);
        c->version_bytes += status == WEFT_OK ? info.bytes : 0;
    }
    c->capacity = align_up(capacity ? capacity : 1, CACHE_ALIGN);
    c->entries = calloc(c->tensor_count ? c->tensor_count : 1, sizeof(*c->entries));
    c->buf = aligned_alloc(CACHE_ALIGN, c->capacity);
    if (status == WEFT_OK && (c->entries == NULL || c->buf == NULL)) {
        status = WEFT_ERR_NO_MEMORY;
    }
    if (status != WEFT_OK) {
        weft_delta_cache_fini(c);
    }
    return status;
}

void weft_delta_cache_fini(weft_delta_cache_t *c)
{
    weft_delta_cache_forget(c);
    free(c->entries);
    free(c->buf);
    memset(c, 0, sizeof(*c));
}

/* One tensor's entry: its delta, or the tensor whole where that is no
 * larger. 0 when neither fits in what is left of the cache. */
static int encode_tensor(weft_delta_cache_t *c, uint32_t t, const uint8_t *old_data, const uint8_t *new_data,
                         uint64_t bytes)
{
    uint64_t                 at = align_up(c->used, ENTRY_ALIGN);
    uint64_t                 room = at <= c->capacity ? c->capacity - at : 0;
    weft_wire_delta_entry_t *e = &c->entries[t];
    uint64_t                 n = 0;

    /* A capacity of the tensor's size: NO_SPACE exactly where whole is no larger. */
    if (weft_delta_encode_host(old_data, new_data, bytes, c->buf + at, bytes < room ? bytes : room, &n) ==
        WEFT_OK) {
        *e = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_PATCH, .offset = at, .bytes = n};
    } else if (bytes <= room) {
        memcpy(c->buf + at, new_data, bytes);
        *e = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_WHOLE, .offset = at, .bytes = bytes};
    } else {
        return 0;
    }
    c->used = at + e->bytes;
    return 1;
}

/* Encodes base → next into the entries; to 0 when they do not fit. */
static weft_status_t encode(weft_delta_cache_t *c, const weft_lease_t *next)
{
    const uint64_t start = weft_time_ns();
    weft_status_t  status = WEFT_OK;
    uint32_t       t;

    c->used = 0;
    c->to = 0;
    for (t = 0; t < c->tensor_count && status == WEFT_OK; t++) {
        weft_tensor_info_t info;
        const void        *old_data = NULL, *new_data = NULL;

        status = weft_registry_tensor_info(c->reg, t, &info);
        if (status == WEFT_OK) {
            status = weft_registry_lease_tensor(c->reg, &c->base, t, &old_data);
        }
        if (status == WEFT_OK) {
            status = weft_registry_lease_tensor(c->reg, next, t, &new_data);
        }
        if (status == WEFT_OK && !encode_tensor(c, t, old_data, new_data, info.bytes)) {
            weft_log_info("server: the delta of version %" PRIu64 " from %" PRIu64
                          " does not fit in %" PRIu64 " bytes: it goes whole",
                          next->version, c->base.version, c->capacity);
            return WEFT_OK;
        }
    }
    if (status != WEFT_OK) {
        return status;
    }
    c->from = c->base.version;
    c->to = next->version;
    c->encode_ns = weft_time_ns() - start;
    weft_log_debug("server: version %" PRIu64 " as a delta from %" PRIu64 ": %" PRIu64 " of %" PRIu64
                   " bytes, encoded in %" PRIu64 " us",
                   c->to, c->from, c->used, c->version_bytes, c->encode_ns / 1000);
    return WEFT_OK;
}

weft_status_t weft_delta_cache_update(weft_delta_cache_t *c, uint64_t latest)
{
    weft_lease_t  next;
    weft_status_t status;

    if (latest == 0 || (c->has_base && c->base.version >= latest)) {
        return WEFT_OK;
    }
    status = weft_registry_acquire(c->reg, &next);
    if (status != WEFT_OK) {
        return status;
    }
    if (!c->has_base) {
        c->base = next;
        c->has_base = 1;
        return WEFT_OK;
    }
    if (next.version <= c->base.version) {
        (void)weft_registry_release(c->reg, &next);
        return WEFT_OK;
    }
    status = encode(c, &next);
    (void)weft_registry_release(c->reg, &c->base);
    c->base = next;
    if (status != WEFT_OK) {
        c->to = 0;
    }
    return status;
}

void weft_delta_cache_forget(weft_delta_cache_t *c)
{
    if (c->has_base) {
        (void)weft_registry_release(c->reg, &c->base);
        c->has_base = 0;
    }
    c->to = 0;
}

int weft_delta_cache_entries(const weft_delta_cache_t *c, uint64_t holds, uint64_t version,
                             const weft_plan_view_t *views, uint32_t count, uint64_t whole, uint64_t room, weft_wire_delta_entry_t *out,
                             uint64_t *bytes)
{
    uint64_t sum = 0;

    if (c->mode == WEFT_DELTA_OFF || c->to == 0 || c->to != version || c->from != holds || holds == 0) {
        return 0;
    }
    for (uint32_t i = 0; i < count; i++) {
        if (views[i].tensor >= c->tensor_count) {
            return 0;
        }
        out[i] = c->entries[views[i].tensor];
        sum = align_up(sum, ENTRY_ALIGN) + out[i].bytes;
    }
    *bytes = sum;
    return sum <= room && (c->mode == WEFT_DELTA_FORCE || sum < whole);
}
