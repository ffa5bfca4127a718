/*
 * Delta versions: the bytes of a tensor that changed between two versions,
 * in a form that is smaller than the tensor when few changed and that a
 * consumer applies in place to its copy of the older one.
 *
 * Why: between two RL optimizer steps almost none of a version's FP8
 * bytes change (e4m3 keeps 3 mantissa bits; a step at RL learning rates
 * moves a weight by far less than one FP8 step): ~1.3 % of W's bytes at
 * AdamW lr 1e-5, ~0.2 % at 1e-6, yet every 128×128 block has some
 * change, so only a byte-sparse delta saves anything.
 *
 * Layout (little-endian; docs/protocol.md, "Delta versions"): the tensor's
 * bytes are cut into chunks of WEFT_DELTA_CHUNK_BYTES (the last may be
 * short); a chunk's changes are listed in increasing offset order.
 *
 *   header   32 B: magic "WFD1", chunk bytes (u32), tensor bytes (u64),
 *                  changes (u64), checksum of the new tensor (u64)
 *   first    u32 × chunks: index of the chunk's first change (increasing;
 *                  chunk k's changes are first[k] .. first[k+1] − 1, the
 *                  last chunk's end is `changes`)
 *   offsets  u16 × changes: each change's offset inside its chunk
 *   values   u8  × changes: the new byte
 *
 * so a delta is 32 + 4·chunks + 3·changes bytes (weft_delta_bytes): one
 * GPU block per chunk finds its changes without a scan, and an encoder
 * counts, scans, then writes. The checksum (<weft/checksum.h>) of the new
 * bytes lets the consumer verify what applying gave.
 *
 * Threads: every call is reentrant; nothing is kept between calls.
 */
#ifndef WEFT_DELTA_H
#define WEFT_DELTA_H

#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_DELTA_CHUNK_BYTES  4096u
#define WEFT_DELTA_HEADER_BYTES 32u

/* The size of the delta of a tensor of `tensor_bytes` with `changes`
 * changed bytes. */
WEFT_API uint64_t weft_delta_bytes(uint64_t tensor_bytes, uint64_t changes);

/*
 * How many of the `bytes` bytes differ between old_data and new_data
 * (host memory, any alignment), into *changes. WEFT_ERR_INVALID_PARAM for
 * NULL pointers with bytes > 0 or a NULL changes.
 */
WEFT_API weft_status_t weft_delta_count_host(const void *old_data, const void *new_data, uint64_t bytes,
                                             uint64_t *changes);

/*
 * Encodes the delta from old_data to new_data (`bytes` each) into `out`
 * (capacity `out_capacity` bytes); *out_bytes gets its size. Host memory.
 * WEFT_ERR_NO_SPACE (nothing useful in `out`) when the delta would not fit
 * in out_capacity: a caller that passes the tensor's own size gets this
 * exactly when sending the tensor whole is no larger. WEFT_ERR_INVALID_PARAM
 * for NULL pointers or a tensor of more than 2^32 chunks.
 */
WEFT_API weft_status_t weft_delta_encode_host(const void *old_data, const void *new_data, uint64_t bytes,
                                              void *out, uint64_t out_capacity, uint64_t *out_bytes);

/*
 * Where a delta is applied: the tensor's bytes as rows of row_bytes bytes,
 * each row_stride bytes apart in `data` (a strided view of a fused engine
 * tensor); row_bytes = row_stride = tensor bytes for a contiguous one.
 *
 * Transposed: with transpose_rows = N and transpose_cols = K (both 0: not
 * transposed), the delta is one of matrices of N × K bytes, row-major
 * and end to end (an FP8 W, [..., N, K]), and the target holds each of
 * them transposed (its WT, [..., K, N]): the delta's byte e·N·K + r·K + c
 * is the target's byte e·N·K + c·N + r (then laid out in rows as above).
 * Why: the FP8 writer's WT holds W's bytes transposed (<weft/quant.h>),
 * so WT changes where W does, and W's delta patches both: a producer
 * encodes, and a wire carries, one delta for the two. The delta's
 * checksum is W's then, not the target's: the caller compares the
 * target's with WT's own.
 */
typedef struct weft_delta_target {
    void    *data;
    uint64_t tensor_bytes;
    uint64_t row_bytes;      /* > 0, divides tensor_bytes */
    uint64_t row_stride;     /* ≥ row_bytes */
    uint64_t transpose_rows; /* 0 with transpose_cols, or N > 0 with N·K dividing tensor_bytes */
    uint64_t transpose_cols; /* K */
} weft_delta_target_t;

/*
 * Applies a delta in place: `target` must hold the bytes the delta was
 * encoded from. The whole delta is checked first (magic, sizes against
 * the target, first[] increasing and within `changes`, offsets increasing
 * inside each chunk and inside the tensor), so a malformed or truncated
 * one writes nothing: WEFT_ERR_CORRUPT (why is logged), or
 * WEFT_ERR_VERSION for another layout version. *checksum (may be NULL)
 * gets the checksum the delta carries, for the caller to compare with the
 * target's after applying (weft_checksum_host): a delta applied to the
 * wrong older bytes is detected only there (a transposed target's is
 * compared with WT's own checksum instead). WEFT_ERR_INVALID_PARAM for
 * NULL pointers or a bad target.
 */
WEFT_API weft_status_t weft_delta_apply_host(const void *delta, uint64_t delta_bytes, const weft_delta_target_t *target,
                                             uint64_t *checksum);

/*
 * The same on the GPU (libweft built with CUDA; WEFT_ERR_UNSUPPORTED
 * otherwise). Pointers are device memory of the current device; work
 * happens on `stream` (NULL: the legacy default stream). The deltas are
 * byte for byte those of weft_delta_encode_host.
 *
 * The asynchronous calls take a batch (a version's tensors): one set of
 * launches for all of them, since a tensor of a few MB is encoded in
 * microseconds and launches per tensor would cost more than the work.
 */

/* One tensor of an encode batch. */
typedef struct weft_delta_cuda_tensor {
    const void *old_data, *new_data; /* `bytes` each */
    uint64_t    bytes;
    void       *out;                 /* 8-byte aligned, out_capacity bytes */
    uint64_t    out_capacity;
} weft_delta_cuda_tensor_t;

/* One delta of an apply batch: delta_bytes at `delta` (8-byte aligned)
 * into `target` (device memory). */
typedef struct weft_delta_cuda_patch {
    const void         *delta;
    uint64_t            delta_bytes;
    weft_delta_target_t target;
} weft_delta_cuda_patch_t;

/* Device workspace the asynchronous calls need (256-byte aligned). */
WEFT_API size_t weft_delta_cuda_encode_work_bytes(const weft_delta_cuda_tensor_t *tensors, uint32_t count);
WEFT_API size_t weft_delta_cuda_apply_work_bytes(uint32_t count);

/*
 * Enqueues the encode of `count` tensors and returns, without waiting for
 * the stream. The batch (a host array) travels in the launches'
 * parameters, so it may go once the call returns; `work` (the caller's)
 * is used until the stream passes the encode. When it does, out_bytes[i] (device
 * memory, or host memory the GPU can write; count words) holds tensor i's
 * delta size, or 0 where it did not fit in its out_capacity (its `out`
 * holds nothing useful then): the whole tensor is then the smaller send.
 * Nothing is read back to the host: a transport chains its send behind it.
 * WEFT_ERR_NO_SPACE at once when an out_capacity is below the delta of no
 * change; WEFT_ERR_INVALID_PARAM for NULL or misaligned pointers or a
 * short workspace; WEFT_ERR_CUDA (logged) when a launch fails.
 */
WEFT_API weft_status_t weft_delta_encode_cuda_async(const weft_delta_cuda_tensor_t *tensors, uint32_t count,
                                                    uint64_t *out_bytes, void *work, size_t work_bytes, void *stream);

/*
 * weft_delta_encode_cuda_async with each tensor's new bytes' checksum
 * already known (<weft/checksum.h>'s; checksums: a host array of count
 * words, read before the call returns), e.g. the one a registry stored at
 * publish (weft_registry_tensor_checksum): the bytes are then not summed
 * again (an eighth of the encode's time on an H100). Each delta carries
 * its checksum as given: a consumer compares what applying gave with it,
 * so a wrong one is caught there (and the delta refused), never trusted.
 * Same workspace and errors; WEFT_ERR_INVALID_PARAM for NULL checksums.
 */
WEFT_API weft_status_t weft_delta_encode_cuda_with_checksums_async(const weft_delta_cuda_tensor_t *tensors,
                                                                   const uint64_t *checksums, uint32_t count,
                                                                   uint64_t *out_bytes, void *work, size_t work_bytes,
                                                                   void *stream);

/* One tensor, as weft_delta_encode_host: its workspace from the stream's
 * memory pool; waits for the stream; *out_bytes (host) gets the size, or
 * WEFT_ERR_NO_SPACE. */
WEFT_API weft_status_t weft_delta_encode_cuda(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                              uint64_t out_capacity, uint64_t *out_bytes, void *stream);

/*
 * Enqueues the apply of `count` deltas, each in place into its target,
 * under weft_delta_apply_host's contract: every delta (header, index,
 * offsets) is checked on the GPU first and the scatter writes only the
 * deltas with nothing wrong. When the stream passes it, verdicts[i]
 * (device memory, or host memory the GPU can write; count words) is 0 if
 * delta i was applied, non-zero if it was refused and wrote nothing. The
 * checksum a delta carries is its bytes 24..31 (little-endian), for the
 * caller to compare with the target's (weft_checksum_cuda_strided_async).
 *
 * Pairs, with WEFT_DELTA_WT_REWRITE=auto (default off): a W's patch
 * followed at once by its WT's (the same delta and size, the second
 * transposed) is applied as a pair where the delta is dense (at least one
 * change in 256 bytes), both targets are contiguous and 16-byte aligned,
 * and N and K are multiples of 128: W is patched, then WT written whole
 * as W's new bytes transposed, which streams where a transposed scatter
 * writes a sector in part a change. WT then holds exactly the newer WT
 * when it held the older one (as with the scatter); its verdict is W's.
 *
 * WEFT_ERR_INVALID_PARAM for NULL or misaligned pointers, a bad target or
 * a short workspace; WEFT_ERR_NO_MEMORY when a pair list cannot be allocated.
 */
WEFT_API weft_status_t weft_delta_apply_cuda_async(const weft_delta_cuda_patch_t *patches, uint32_t count,
                                                   unsigned *verdicts, void *work, size_t work_bytes, void *stream);

/* One delta, as weft_delta_apply_host (WEFT_ERR_CORRUPT or
 * WEFT_ERR_VERSION, why logged, for a refused one; *checksum may be
 * NULL); waits for the stream. */
WEFT_API weft_status_t weft_delta_apply_cuda(const void *delta, uint64_t delta_bytes, const weft_delta_target_t *target,
                                             uint64_t *checksum, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_DELTA_H */
