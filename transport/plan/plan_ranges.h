/*
 * Copy ranges of a plan: one tensor's elements as runs of bytes, the check
 * that no two destinations overlap, and the merging of adjacent runs.
 * Shared by every backend. Internal.
 */
#ifndef WEFT_TRANSPORT_PLAN_PLAN_RANGES_H
#define WEFT_TRANSPORT_PLAN_PLAN_RANGES_H

#include <weft/registry.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_copy_range {
    uint64_t src;   /* bytes from the start of a slot's arena */
    uint8_t *dst;
    uint64_t bytes;
    uint32_t view;  /* the first view the range serves; for messages */
} weft_copy_range_t;

typedef struct weft_range_list {
    weft_copy_range_t *ranges;
    uint64_t           count;
    uint64_t           capacity;
} weft_range_list_t;

/* One tensor to lay out. Strides are in elements; the caller has checked
 * that every offset they reach fits in 64 bits and in its buffer. */
typedef struct weft_range_tensor {
    uint32_t        view;
    size_t          elem_size;
    uint32_t        ndim;
    const uint64_t *shape;
    const uint64_t *src_strides;
    uint64_t        src_offset;
    const uint64_t *dst_strides;
    uint8_t        *dst;
} weft_range_tensor_t;

/*
 * Appends a tensor's ranges: one per run of elements that is contiguous
 * in both the source and the destination (a whole tensor when both are
 * row-major, a row when the destination is padded). Dimensions of extent
 * 1 are ignored; a tensor with a dimension of extent 0 adds nothing.
 * WEFT_ERR_NO_MEMORY when the list cannot grow.
 */
weft_status_t weft_ranges_append(weft_range_list_t *list, const weft_range_tensor_t *tensor);

/*
 * Sorts the ranges by destination address and looks for two that share a
 * byte. Returns 1 and their indices (after the sort) when found, else 0.
 */
int weft_ranges_find_dst_overlap(weft_range_list_t *list, uint64_t *first, uint64_t *second);

/*
 * Sorts the ranges by source offset and merges each range into the one
 * before it when both its source and its destination follow on directly.
 * WEFT_ERR_CORRUPT when two sources overlap (the registry's layout is
 * inconsistent); the list is then sorted but not merged.
 */
weft_status_t weft_ranges_coalesce(weft_range_list_t *list);

void weft_ranges_free(weft_range_list_t *list);

#ifdef __cplusplus
}
#endif

#endif
