/* The byte layout of receive views (see view_layout.h). */
#include "transport/core/view_layout.h"

#include <string.h>

void weft_contiguous_strides(uint32_t ndim, const uint64_t *shape, uint64_t *strides)
{
    uint64_t stride = 1;

    for (uint32_t d = ndim; d-- > 0;) {
        strides[d] = stride;
        stride *= shape[d];
    }
}

void weft_view_strides(const weft_recv_view_t *view, uint64_t strides[WEFT_TENSOR_MAX_DIMS])
{
    memset(strides, 0, WEFT_TENSOR_MAX_DIMS * sizeof(*strides));
    if (view->ndim > WEFT_TENSOR_MAX_DIMS) {
        return;
    }
    if (view->field_mask & WEFT_RECV_VIEW_FIELD_STRIDES) {
        memcpy(strides, view->strides, view->ndim * sizeof(*strides));
    } else {
        weft_contiguous_strides(view->ndim, view->shape, strides);
    }
}

int weft_layout_size(uint32_t ndim, const uint64_t *shape, const uint64_t *strides,
                     size_t elem_size, uint64_t *elements, uint64_t *span)
{
    uint64_t count = 1, last = 0, step;

    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] == 0) {
            *elements = 0;
            *span     = 0;
            return 0;
        }
    }
    for (uint32_t d = 0; d < ndim; d++) {
        if (__builtin_mul_overflow(count, shape[d], &count) ||
            __builtin_mul_overflow(shape[d] - 1, strides[d], &step) ||
            __builtin_add_overflow(last, step, &last)) {
            return -1;
        }
    }
    if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, elem_size, span) ||
        __builtin_mul_overflow(count, elem_size, &step)) {
        return -1;
    }
    *elements = count;
    return 0;
}

int weft_view_span(const weft_recv_view_t *view, uint64_t *span)
{
    uint64_t strides[WEFT_TENSOR_MAX_DIMS], elements;

    if (view->ndim > WEFT_TENSOR_MAX_DIMS) {
        return -1;
    }
    weft_view_strides(view, strides);
    return weft_layout_size(view->ndim, view->shape, strides, weft_dtype_size(view->dtype),
                            &elements, span);
}
