/* Copy ranges: laying a tensor out as byte runs, the overlap check, and
 * merging adjacent runs. */
#include "config.h"

#include "transport/plan/plan_ranges.h"

#include <stdint.h>
#include <stdlib.h>

static weft_status_t list_reserve(weft_range_list_t *list, uint64_t more)
{
    uint64_t           need, capacity;
    weft_copy_range_t *grown;

    if (__builtin_add_overflow(list->count, more, &need)) {
        return WEFT_ERR_NO_MEMORY;
    }
    if (need <= list->capacity) {
        return WEFT_OK;
    }
    /* Doubling keeps appending one tensor after another linear. */
    capacity = list->capacity < 64 ? 64 : list->capacity;
    while (capacity < need) {
        if (capacity > UINT64_MAX / 2) {
            capacity = need;
            break;
        }
        capacity *= 2;
    }
    if (capacity > SIZE_MAX / sizeof(*grown)) {
        return WEFT_ERR_NO_MEMORY;
    }
    grown = realloc(list->ranges, (size_t)capacity * sizeof(*grown));
    if (grown == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    list->ranges   = grown;
    list->capacity = capacity;
    return WEFT_OK;
}

weft_status_t weft_ranges_append(weft_range_list_t *list, const weft_range_tensor_t *tensor)
{
    uint64_t      shape[WEFT_TENSOR_MAX_DIMS], src_stride[WEFT_TENSOR_MAX_DIMS];
    uint64_t      dst_stride[WEFT_TENSOR_MAX_DIMS], idx[WEFT_TENSOR_MAX_DIMS] = {0};
    uint64_t      run = 1, count = 1, src = 0, dst = 0, run_bytes;
    int           ndim = 0, outer;
    weft_status_t status;

    /* An extent-1 dimension's stride is never used: dropping it lets the
     * dimensions around it merge. */
    for (uint32_t d = 0; d < tensor->ndim; d++) {
        if (tensor->shape[d] == 0) {
            return WEFT_OK;
        }
        if (tensor->shape[d] == 1) {
            continue;
        }
        shape[ndim]      = tensor->shape[d];
        src_stride[ndim] = tensor->src_strides[d];
        dst_stride[ndim] = tensor->dst_strides[d];
        ndim++;
    }

    /* The innermost dimensions that are dense on both sides make one run;
     * the products stay below the element count, which the caller bounds. */
    outer = ndim - 1;
    while (outer >= 0 && src_stride[outer] == run && dst_stride[outer] == run) {
        run *= shape[outer];
        outer--;
    }
    for (int d = 0; d <= outer; d++) {
        count *= shape[d];
    }
    status = list_reserve(list, count);
    if (status != WEFT_OK) {
        return status;
    }

    run_bytes = run * tensor->elem_size;
    for (uint64_t n = 0; n < count; n++) {
        weft_copy_range_t *r = &list->ranges[list->count++];

        r->src   = tensor->src_offset + src * tensor->elem_size;
        r->dst   = tensor->dst + dst * tensor->elem_size;
        r->bytes = run_bytes;
        r->view  = tensor->view;

        /* Odometer over the outer dimensions; offsets wrap back exactly
         * (unsigned arithmetic) when a dimension rolls over. */
        for (int d = outer; d >= 0; d--) {
            idx[d]++;
            src += src_stride[d];
            dst += dst_stride[d];
            if (idx[d] < shape[d]) {
                break;
            }
            src -= src_stride[d] * shape[d];
            dst -= dst_stride[d] * shape[d];
            idx[d] = 0;
        }
    }
    return WEFT_OK;
}

static int compare_dst(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const weft_copy_range_t *)a)->dst;
    uintptr_t y = (uintptr_t)((const weft_copy_range_t *)b)->dst;

    return (x > y) - (x < y);
}

static int compare_src(const void *a, const void *b)
{
    uint64_t x = ((const weft_copy_range_t *)a)->src;
    uint64_t y = ((const weft_copy_range_t *)b)->src;

    return (x > y) - (x < y);
}

int weft_ranges_find_dst_overlap(weft_range_list_t *list, uint64_t *first, uint64_t *second)
{
    if (list->count < 2) {
        return 0;
    }
    qsort(list->ranges, (size_t)list->count, sizeof(*list->ranges), compare_dst);
    for (uint64_t i = 1; i < list->count; i++) {
        const weft_copy_range_t *prev = &list->ranges[i - 1];

        /* Sorted by start, so only a neighbour can reach into a range. */
        if ((uintptr_t)prev->dst + prev->bytes > (uintptr_t)list->ranges[i].dst) {
            *first  = i - 1;
            *second = i;
            return 1;
        }
    }
    return 0;
}

weft_status_t weft_ranges_coalesce(weft_range_list_t *list)
{
    uint64_t kept = 0;

    if (list->count < 2) {
        return WEFT_OK;
    }
    qsort(list->ranges, (size_t)list->count, sizeof(*list->ranges), compare_src);
    for (uint64_t i = 1; i < list->count; i++) {
        if (list->ranges[i - 1].src + list->ranges[i - 1].bytes > list->ranges[i].src) {
            return WEFT_ERR_CORRUPT;
        }
    }
    for (uint64_t i = 1; i < list->count; i++) {
        weft_copy_range_t       *last = &list->ranges[kept];
        const weft_copy_range_t *next = &list->ranges[i];

        if (last->src + last->bytes == next->src &&
            (uintptr_t)last->dst + last->bytes == (uintptr_t)next->dst) {
            last->bytes += next->bytes;
        } else {
            list->ranges[++kept] = *next;
        }
    }
    list->count = kept + 1;
    return WEFT_OK;
}

void weft_ranges_free(weft_range_list_t *list)
{
    free(list->ranges);
    list->ranges   = NULL;
    list->count    = 0;
    list->capacity = 0;
}
