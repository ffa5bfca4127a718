/* Validation of registry segments and tensor records. */
#include "validate.h"

#include "common/compiler.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/registry.h>

WEFT_PRINTF(4, 5)
static weft_status_t refuse(weft_status_t status, char *reason, size_t size, const char *fmt, ...)
{
    va_list ap;

    if (size > 0) {
        va_start(ap, fmt);
        vsnprintf(reason, size, fmt, ap);
        va_end(ap);
    }
    return status;
}

#define CORRUPT(...) refuse(WEFT_ERR_CORRUPT, reason, reason_size, __VA_ARGS__)

int weft_tensor_name_valid(const char *name, size_t max)
{
    size_t len = strnlen(name, max);

    if (len == 0 || len >= max) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (name[i] <= ' ' || name[i] > '~') {
            return 0;
        }
    }
    return 1;
}

uint64_t weft_tensor_span_bytes(uint32_t ndim, const uint64_t *shape, const uint64_t *strides,
                                size_t element_size)
{
    uint64_t last = 0; /* index of the last element */

    if (ndim == 0 || ndim > WEFT_TENSOR_MAX_DIMS || element_size == 0) {
        return 0;
    }
    for (uint32_t d = 0; d < ndim; d++) {
        uint64_t step;

        if (shape[d] == 0 || __builtin_mul_overflow(shape[d] - 1, strides[d], &step) ||
            __builtin_add_overflow(last, step, &last)) {
            return 0;
        }
    }
    uint64_t bytes;
    if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, element_size, &bytes)) {
        return 0;
    }
    return bytes;
}

int weft_tensor_strides_disjoint(uint32_t ndim, const uint64_t *shape, const uint64_t *strides)
{
    uint32_t order[WEFT_TENSOR_MAX_DIMS];
    uint32_t n = 0;

    /* Dimensions of extent 1 never step: their stride does not matter. */
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] > 1) {
            order[n++] = d;
        }
    }
    /* Sorted by stride, each dimension must step over the whole extent of
     * the ones below it: a sufficient condition for no two elements to
     * share an address. */
    for (uint32_t i = 1; i < n; i++) {
        for (uint32_t j = i; j > 0 && strides[order[j]] < strides[order[j - 1]]; j--) {
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    }
    uint64_t extent = 1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t s = strides[order[i]];

        if (s < extent || __builtin_mul_overflow(s, shape[order[i]], &extent)) {
            return 0;
        }
    }
    return 1;
}

static int power_of_two(uint32_t x)
{
    return x != 0 && (x & (x - 1)) == 0;
}

weft_status_t weft_registry_check_tensor(const reg_tensor_t *t, char *reason, size_t reason_size)
{
    size_t   element = weft_dtype_size((weft_dtype_t)t->dtype);
    uint64_t span;

#define INVALID(...) refuse(WEFT_ERR_INVALID_PARAM, reason, reason_size, __VA_ARGS__)
    if (!weft_tensor_name_valid(t->name, sizeof(t->name))) {
        return INVALID("name must be 1 to %zu printable characters without spaces", sizeof(t->name) - 1);
    }
    if (t->role < WEFT_ROLE_W || t->role > WEFT_ROLE_SCALE) {
        return INVALID("role %u is not W, WT or SCALE", t->role);
    }
    if (element == 0) {
        return INVALID("dtype %u is not a valid dtype", t->dtype);
    }
    if (t->ndim < 1 || t->ndim > WEFT_TENSOR_MAX_DIMS) {
        return INVALID("ndim %u is not in 1..%d", t->ndim, WEFT_TENSOR_MAX_DIMS);
    }
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) {
            return INVALID("dimension %u has extent 0", d);
        }
    }
    for (uint32_t d = t->ndim; d < WEFT_TENSOR_MAX_DIMS; d++) {
        if (t->shape[d] != 0 || t->strides[d] != 0) {
            return INVALID("dimension %u is past ndim but not zero", d);
        }
    }
    if (!weft_tensor_strides_disjoint(t->ndim, t->shape, t->strides)) {
        return INVALID("strides make elements overlap");
    }
    span = weft_tensor_span_bytes(t->ndim, t->shape, t->strides, element);
    if (span == 0) {
        return INVALID("shape and strides overflow 64 bits");
    }
    if (t->bytes != span) {
        return INVALID("bytes %llu differ from the span of its elements, %llu",
                       (unsigned long long)t->bytes, (unsigned long long)span);
    }
    if (!power_of_two(t->block[0]) || !power_of_two(t->block[1]) || t->block[0] > 65536 ||
        t->block[1] > 65536) {
        return INVALID("block %u x %u is not a power of two up to 65536", t->block[0], t->block[1]);
    }
    if (t->memory != REG_MEMORY_HOST && t->memory != REG_MEMORY_CUDA) {
        return INVALID("memory kind %u is not supported", t->memory);
    }
#undef INVALID
    return WEFT_OK;
}

/* [offset, offset + count * size) lies inside [lo, hi) and is aligned. */
static int table_fits(uint64_t offset, uint64_t count, uint64_t size, uint64_t lo, uint64_t hi,
                      uint64_t *end)
{
    uint64_t bytes;

    return offset % REG_TABLE_ALIGN == 0 && offset >= lo && !__builtin_mul_overflow(count, size, &bytes) &&
           !__builtin_add_overflow(offset, bytes, end) && *end <= hi;
}

typedef struct {
    uint64_t begin, end;
} span_t;

static int compare_spans(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static uint64_t name_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (; *name != '\0'; name++) {
        h = (h ^ (unsigned char)*name) * 0x100000001b3ULL;
    }
    return h;
}

/* Checks the arena records of a GPU registry: one per slot, each big
 * enough for a slot, in a known state. The handle bytes are opaque. */
static weft_status_t validate_arenas(const reg_arena_t *arenas, uint32_t count, uint64_t slot_bytes,
                                     char *reason, size_t reason_size)
{
    for (uint32_t a = 0; a < count; a++) {
        uint64_t word = __atomic_load_n(&arenas[a].word, __ATOMIC_RELAXED);

        if (arenas[a].slot != a) {
            return CORRUPT("arena %u names slot %u", a, arenas[a].slot);
        }
        if (REG_ARENA_STATE(word) > REG_ARENA_RETIRING) {
            return CORRUPT("arena %u has unknown state %u", a, REG_ARENA_STATE(word));
        }
        if (REG_ARENA_STATE(word) != REG_ARENA_ABSENT && arenas[a].bytes < slot_bytes) {
            return CORRUPT("arena %u holds %llu bytes, a slot needs %llu", a,
                           (unsigned long long)arenas[a].bytes, (unsigned long long)slot_bytes);
        }
    }
    return WEFT_OK;
}

/* Checks every tensor record and that tensors neither overlap in a slot
 * nor share a name. */
static weft_status_t validate_tensors(const reg_tensor_t *tensors, uint32_t count, uint64_t slot_bytes,
                                      uint32_t memory, char *reason, size_t reason_size)
{
    span_t        *spans = malloc(count * sizeof(*spans));
    uint32_t       buckets = 1;
    uint32_t      *table;
    weft_status_t  status = WEFT_OK;
    char           why[160];

    while (buckets < 2 * count) {
        buckets *= 2;
    }
    table = calloc(buckets, sizeof(*table));
    if (spans == NULL || table == NULL) {
        status = refuse(WEFT_ERR_NO_MEMORY, reason, reason_size, "no memory to validate %u tensors", count);
        goto out;
    }
    for (uint32_t i = 0; i < count; i++) {
        const reg_tensor_t *t = &tensors[i];

        if (weft_registry_check_tensor(t, why, sizeof(why)) != WEFT_OK) {
            status = CORRUPT("tensor %u: %s", i, why);
            goto out;
        }
        if (t->memory != memory) {
            status = CORRUPT("tensor %u (%s): memory kind %u in a registry of kind %u", i, t->name,
                             t->memory, memory);
            goto out;
        }
        if (t->offset % REG_TENSOR_ALIGN != 0 || t->offset > slot_bytes || t->bytes > slot_bytes - t->offset) {
            status = CORRUPT("tensor %u (%s): offset %llu + %llu bytes lies outside the %llu-byte slot", i,
                             t->name, (unsigned long long)t->offset, (unsigned long long)t->bytes,
                             (unsigned long long)slot_bytes);
            goto out;
        }
        spans[i].begin = t->offset;
        spans[i].end = t->offset + t->bytes;

        /* Open addressing on the name hash; slots hold index + 1. */
        for (uint32_t b = (uint32_t)name_hash(t->name) & (buckets - 1);; b = (b + 1) & (buckets - 1)) {
            if (table[b] == 0) {
                table[b] = i + 1;
                break;
            }
            if (strcmp(tensors[table[b] - 1].name, t->name) == 0) {
                status = CORRUPT("tensors %u and %u share the name %s", table[b] - 1, i, t->name);
                goto out;
            }
        }
    }
    qsort(spans, count, sizeof(*spans), compare_spans);
    for (uint32_t i = 1; i < count; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            status = CORRUPT("two tensors overlap at offset %llu", (unsigned long long)spans[i].begin);
            goto out;
        }
    }
out:
    free(table);
    free(spans);
    return status;
}

weft_status_t weft_registry_validate(const void *segment, size_t size, reg_geometry_t *g, char *reason,
                                     size_t reason_size)
{
    const reg_header_t *h = segment;
    uint64_t            end_tensors, end_slots, end_leases, end_consumers, end_tables, arenas, data_end;
    const reg_slot_t   *slots;
    uint32_t            memory;

    if (size < sizeof(reg_header_t)) {
        return CORRUPT("segment of %zu bytes is shorter than its header (%zu): truncated", size,
                       sizeof(reg_header_t));
    }
    /* The creator stores the state last (release): 0 means the header is
     * still being written, and nothing else of it can be read yet. */
    if (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == 0) {
        return refuse(WEFT_ERR_STATE, reason, reason_size, "registry is being created (its header is not written yet)");
    }
    if (memcmp(h->magic, REG_MAGIC, REG_MAGIC_LEN) != 0) {
        return CORRUPT("wrong magic: not a libweft registry");
    }
    if (h->abi_major != REG_ABI_MAJOR) {
        return refuse(WEFT_ERR_VERSION, reason, reason_size,
                      "registry ABI %u.%u; this libweft reads ABI %u.x", h->abi_major, h->abi_minor,
                      REG_ABI_MAJOR);
    }
    if (h->header_size != sizeof(reg_header_t)) {
        return CORRUPT("header size %u, expected %zu", h->header_size, sizeof(reg_header_t));
    }
    if (__atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == REG_STATE_DECLARING) {
        return refuse(WEFT_ERR_STATE, reason, reason_size, "registry is not sealed yet");
    }
    if (h->state != REG_STATE_SEALED) {
        return CORRUPT("unknown state %u", h->state);
    }
    if (h->segment_size != size) {
        return CORRUPT("segment is %zu bytes, its header says %llu: truncated or resized", size,
                       (unsigned long long)h->segment_size);
    }
    if (h->slot_count < REG_MIN_SLOTS || h->slot_count > REG_MAX_SLOTS) {
        return CORRUPT("slot count %u is not in %u..%u", h->slot_count, REG_MIN_SLOTS, REG_MAX_SLOTS);
    }
    if (h->tensor_capacity < 1 || h->tensor_capacity > REG_MAX_TENSORS || h->tensor_count < 1 ||
        h->tensor_count > h->tensor_capacity) {
        return CORRUPT("tensor count %u / capacity %u out of range", h->tensor_count, h->tensor_capacity);
    }
    if (h->lease_capacity < 1 || h->lease_capacity > REG_MAX_LEASES) {
        return CORRUPT("lease capacity %u out of range", h->lease_capacity);
    }
    if (h->consumer_capacity < 1 || h->consumer_capacity > REG_MAX_CONSUMERS) {
        return CORRUPT("consumer capacity %u out of range", h->consumer_capacity);
    }
    /* The tables follow the header in this order, each inside the segment. */
    if (!table_fits(h->tensor_table_offset, h->tensor_capacity, sizeof(reg_tensor_t), sizeof(reg_header_t),
                    size, &end_tensors) ||
        !table_fits(h->slot_table_offset, h->slot_count, sizeof(reg_slot_t), end_tensors, size, &end_slots) ||
        !table_fits(h->lease_table_offset, h->lease_capacity, sizeof(reg_lease_t), end_slots, size,
                    &end_leases) ||
        !table_fits(h->consumer_table_offset, h->consumer_capacity, sizeof(reg_consumer_t), end_leases, size,
                    &end_consumers)) {
        return CORRUPT("a table lies outside the segment, overlaps another or is misaligned");
    }
    /* 1.0 segments leave the memory fields zero: host arenas. */
    memory = h->memory == 0 ? REG_MEMORY_HOST : h->memory;
    end_tables = end_consumers;
    if (memory == REG_MEMORY_HOST) {
        if (h->arena_count != 0 || h->arena_table_offset != 0) {
            return CORRUPT("a host registry with %u GPU arena records", h->arena_count);
        }
    } else if (memory == REG_MEMORY_CUDA) {
        if (h->arena_count != h->slot_count ||
            !table_fits(h->arena_table_offset, h->arena_count, sizeof(reg_arena_t), end_consumers,
                        size, &end_tables)) {
            return CORRUPT("GPU arena table (%u records at %llu) does not fit after the consumers",
                           h->arena_count, (unsigned long long)h->arena_table_offset);
        }
        if (h->slot_stride != 0 || h->slot_bytes == 0) {
            return CORRUPT("a GPU registry with slot stride %llu in shared memory",
                           (unsigned long long)h->slot_stride);
        }
    } else {
        return CORRUPT("unknown memory kind %u", h->memory);
    }
    /* 1.3: the checksum table, when there is one, after the others. */
    if (h->checksum_table_offset != 0 || h->checksums != 0) {
        if (h->checksums != REG_CHECKSUMS_AT_PUBLISH ||
            !table_fits(h->checksum_table_offset, (uint64_t)h->slot_count * h->tensor_capacity,
                        sizeof(reg_checksum_t), end_tables, size, &end_tables)) {
            return CORRUPT("checksum table (flags %u, at %llu) does not fit after the other tables", h->checksums,
                           (unsigned long long)h->checksum_table_offset);
        }
    }
    if (REG_ARENAS_STATE(__atomic_load_n(&h->arena_word, __ATOMIC_RELAXED)) > REG_ARENAS_OFFLOADED) {
        return CORRUPT("unknown arena state %u",
                       REG_ARENAS_STATE(__atomic_load_n(&h->arena_word, __ATOMIC_RELAXED)));
    }
    if (h->data_offset % REG_PAGE != 0 || h->data_offset < end_tables || h->slot_stride % REG_PAGE != 0 ||
        h->slot_bytes == 0 || (memory == REG_MEMORY_HOST && h->slot_stride < h->slot_bytes) ||
        __builtin_mul_overflow(h->slot_stride, (uint64_t)h->slot_count, &arenas) ||
        __builtin_add_overflow(h->data_offset, arenas, &data_end) || data_end > size) {
        return CORRUPT("slot arenas (offset %llu, stride %llu, %llu bytes used) do not fit the segment",
                       (unsigned long long)h->data_offset, (unsigned long long)h->slot_stride,
                       (unsigned long long)h->slot_bytes);
    }
    slots = (const reg_slot_t *)((const char *)segment + h->slot_table_offset);
    for (uint32_t s = 0; s < h->slot_count; s++) {
        uint64_t word = __atomic_load_n(&slots[s].word, __ATOMIC_RELAXED);
        if (REG_SLOT_STATE(word) > REG_SLOT_PUBLISHED) {
            return CORRUPT("slot %u has unknown state %u", s, REG_SLOT_STATE(word));
        }
    }
    uint64_t latest = __atomic_load_n(&h->latest, __ATOMIC_RELAXED);
    if (latest != 0 && REG_VS_SLOT(latest) >= h->slot_count && REG_VS_SLOT(latest) != REG_SLOT_NONE) {
        return CORRUPT("latest version names slot %u of %u", REG_VS_SLOT(latest), h->slot_count);
    }

    weft_status_t status = validate_tensors(
        (const reg_tensor_t *)((const char *)segment + h->tensor_table_offset), h->tensor_count,
        h->slot_bytes, memory, reason, reason_size);
    if (status != WEFT_OK) {
        return status;
    }
    if (memory == REG_MEMORY_CUDA) {
        status = validate_arenas((const reg_arena_t *)((const char *)segment + h->arena_table_offset),
                                 h->arena_count, h->slot_bytes, reason, reason_size);
        if (status != WEFT_OK) {
            return status;
        }
    }

    g->slot_count = h->slot_count;
    g->tensor_count = h->tensor_count;
    g->tensor_capacity = h->tensor_capacity;
    g->lease_capacity = h->lease_capacity;
    g->consumer_capacity = h->consumer_capacity;
    g->tensor_table_offset = h->tensor_table_offset;
    g->slot_table_offset = h->slot_table_offset;
    g->lease_table_offset = h->lease_table_offset;
    g->consumer_table_offset = h->consumer_table_offset;
    g->data_offset = h->data_offset;
    g->slot_stride = h->slot_stride;
    g->slot_bytes = h->slot_bytes;
    g->segment_size = h->segment_size;
    g->memory = memory;
    g->arena_count = h->arena_count;
    g->arena_table_offset = h->arena_table_offset;
    memcpy(g->device_uuid, h->device_uuid, sizeof(g->device_uuid));
    g->checksums = h->checksums;
    g->checksum_table_offset = h->checksum_table_offset;
    return WEFT_OK;
}

int weft_registry_name_valid(const char *name)
{
    size_t len;

    if (name == NULL) {
        return 0;
    }
    len = strnlen(name, WEFT_REGISTRY_NAME_MAX);
    if (len == 0 || len >= WEFT_REGISTRY_NAME_MAX) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-')) {
            return 0;
        }
    }
    /* "weft.." and "weft..." are odd names for a file; nothing wants them. */
    return strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}
