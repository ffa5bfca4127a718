/*
 * The byte layout of a receive view: its strides (given, or contiguous
 * when the view names none) and how far its elements reach. Shared by the
 * plan core, which checks views, and the remote consumers, which register
 * the memory their views cover. Internal.
 */
#ifndef WEFT_TRANSPORT_CORE_VIEW_LAYOUT_H
#define WEFT_TRANSPORT_CORE_VIEW_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <weft/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Row-major strides, in elements, of a dense [shape] tensor. */
void weft_contiguous_strides(uint32_t ndim, const uint64_t *shape, uint64_t *strides);

/*
 * The view's strides in elements: its own when it sets
 * WEFT_RECV_VIEW_FIELD_STRIDES, contiguous otherwise. Dimensions past ndim
 * (or all of them when ndim exceeds WEFT_TENSOR_MAX_DIMS) are 0.
 */
void weft_view_strides(const weft_recv_view_t *view, uint64_t strides[WEFT_TENSOR_MAX_DIMS]);

/*
 * Elements and the span in bytes (element [0…0] to one past the last) of
 * a strided layout; -1 when either overflows 64 bits. Both are 0 for an
 * empty tensor.
 */
int weft_layout_size(uint32_t ndim, const uint64_t *shape, const uint64_t *strides,
                     size_t elem_size, uint64_t *elements, uint64_t *span);

/*
 * The span in bytes of a receive view (its own strides, or contiguous):
 * 0 and *span, or -1 when ndim exceeds WEFT_TENSOR_MAX_DIMS or the layout
 * overflows 64 bits. *span is 0 for an empty view.
 */
int weft_view_span(const weft_recv_view_t *view, uint64_t *span);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_TRANSPORT_CORE_VIEW_LAYOUT_H */
