/*
 * A batched device copy: many small byte ranges from one source arena to
 * anywhere in device memory, in one kernel launch. The cuda_ipc transport
 * sends small ranges (block scales, rows of padded views) this way, because
 * each copy-engine operation costs microseconds however few bytes it moves.
 * Internal.
 */
#ifndef WEFT_KERNELS_COPY_BATCH_H
#define WEFT_KERNELS_COPY_BATCH_H

#include <weft/weft.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One range: bytes from src_base + src to dst. */
typedef struct weft_copy_desc {
    uint64_t src;
    uint64_t dst;
    uint64_t bytes;
} weft_copy_desc_t;

/* Largest range the kernel takes; one CTA copies one range. */
#define WEFT_COPY_BATCH_MAX_RANGE (UINT64_C(1) << 20)

/*
 * Enqueues the copy of `count` ranges described by descs (device memory)
 * on `stream` (a cudaStream_t) of the current device. src_base may be
 * memory of another GPU mapped here with peer access. Ranges must not
 * overlap and each must be at most WEFT_COPY_BATCH_MAX_RANGE bytes; any
 * alignment. WEFT_ERR_CUDA when the launch fails.
 */
weft_status_t weft_copy_batch_launch(const weft_copy_desc_t *descs, uint64_t count,
                                     const void *src_base, void *stream);

#ifdef __cplusplus
}
#endif

#endif
