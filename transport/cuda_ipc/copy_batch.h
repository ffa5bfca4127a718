/*
 * A batched device copy: many byte ranges from one source arena to
 * anywhere in device memory, in one kernel launch, cut into chunks that
 * one CTA each copies. The cuda_ipc transport sends small ranges (block
 * scales, rows of padded views) this way, because each copy-engine
 * operation costs microseconds however few bytes it moves, and on one GPU
 * every range, because the SMs read another process's arena faster than
 * the copy engines do (see copy_batch.cu). Internal.
 */
#ifndef WEFT_TRANSPORT_CUDA_IPC_COPY_BATCH_H
#define WEFT_TRANSPORT_CUDA_IPC_COPY_BATCH_H

#include <weft/weft.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One chunk: bytes (at most WEFT_COPY_BATCH_CHUNK) from src_base + src to dst. */
typedef struct weft_copy_desc {
    uint64_t src;
    uint64_t dst;
    uint64_t bytes;
} weft_copy_desc_t;

/* Bytes one CTA copies at most. */
#define WEFT_COPY_BATCH_CHUNK (UINT64_C(64) << 10)

/*
 * Cuts the range [src, src + bytes) → dst into chunks; writes them to out
 * (when not NULL) and returns how many there are (0 for an empty range).
 * Call it with out NULL first to size the array.
 */
uint64_t weft_copy_batch_split(uint64_t src, uint64_t dst, uint64_t bytes, weft_copy_desc_t *out);

/*
 * Enqueues the copy of `count` chunks described by descs (device memory,
 * made by weft_copy_batch_split) on `stream` (a cudaStream_t) of the
 * current device. src_base may be memory of another GPU mapped here with
 * peer access. Destinations must not overlap; any alignment.
 * WEFT_ERR_CUDA when the launch fails.
 */
weft_status_t weft_copy_batch_launch(const weft_copy_desc_t *descs, uint64_t count,
                                     const void *src_base, void *stream);

#ifdef __cplusplus
}
#endif

#endif
