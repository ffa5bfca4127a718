/*
 * The GPU side of a server's delta cache (delta_cache.h) for a GPU
 * registry: the deltas of a batch of tensors encoded on the registry's
 * GPU (weft_delta_encode_cuda_async) into device scratch, then brought
 * into the cache's host buffers, which consumers are sent from.
 *
 * Why batches: the encoder's workspace grows with the bytes it reads (a
 * fifth of them), so a version is encoded a batch at a time, each
 * holding at most the scratch's worth of deltas; and why host buffers:
 * the wire (UCX over TCP, or a NIC reading host memory) sends them from
 * there, and a delta is a few % of the version.
 *
 * Each step is enqueued on the cache's stream and polled (ready), so the
 * server's thread goes on serving consumers while the GPU works. Built
 * with CUDA; without it, create says WEFT_ERR_UNSUPPORTED. On the
 * server's thread, with the registry's GPU current. Internal.
 */
#ifndef WEFT_TRANSPORT_SERVER_DELTA_CACHE_GPU_H
#define WEFT_TRANSPORT_SERVER_DELTA_CACHE_GPU_H

#include <stdint.h>
#include <weft/types.h>

typedef struct weft_delta_gpu weft_delta_gpu_t;

/* A tensor of a batch: its two versions (device memory), how much of
 * the scratch its delta may take, and the newer version's checksum where
 * the registry stored one (then not summed again). */
typedef struct weft_delta_gpu_item {
    const void *old_data, *new_data;
    uint64_t    bytes;
    uint64_t    capacity;
    uint64_t    checksum;
    int         known; /* 1: checksum holds the stored one */
} weft_delta_gpu_item_t;

/* Tensors a batch holds at most. */
#define WEFT_DELTA_GPU_BATCH_MAX 1024u

/*
 * Device scratch of *scratch_bytes (at most `capacity`, rounded up to 4096;
 * the size actually made is written back), and the two host buffers
 * (capacity bytes each) pinned for the copies. WEFT_ERR_UNSUPPORTED
 * without CUDA; WEFT_ERR_NO_MEMORY, WEFT_ERR_CUDA (logged).
 */
weft_status_t weft_delta_gpu_create(uint8_t *const host[2], uint64_t capacity, uint64_t *scratch_bytes,
                                    weft_delta_gpu_t **out);

/* Waits for what is enqueued, unpins the host buffers, frees the rest. */
void weft_delta_gpu_destroy(weft_delta_gpu_t *g);

/*
 * Enqueues the encode of items[0 .. n) (n ≤ WEFT_DELTA_GPU_BATCH_MAX),
 * item i's delta into the scratch at the sum of the capacities before it,
 * each rounded up to 64 (that sum at most the scratch). When ready,
 * weft_delta_gpu_size(i) is its size, 0 where it did not fit its
 * capacity. Where every item's checksum is known, the deltas carry
 * them and the bytes are not summed. WEFT_ERR_NO_MEMORY, WEFT_ERR_CUDA
 * (logged).
 */
weft_status_t weft_delta_gpu_encode(weft_delta_gpu_t *g, const weft_delta_gpu_item_t *items, uint32_t n);

uint64_t weft_delta_gpu_size(const weft_delta_gpu_t *g, uint32_t i);

/* Enqueues a copy of the last encode's item i's delta (its size's bytes)
 * to host memory `dst`. */
weft_status_t weft_delta_gpu_fetch_delta(weft_delta_gpu_t *g, uint32_t i, void *dst);

/* Enqueues a copy of `bytes` bytes of device memory to host memory. */
weft_status_t weft_delta_gpu_fetch_bytes(weft_delta_gpu_t *g, const void *src, uint64_t bytes, void *dst);

/* Waits for everything enqueued (before the leases it reads go). */
weft_status_t weft_delta_gpu_wait(weft_delta_gpu_t *g);

/* Marks the end of what was enqueued: ready says when the GPU passed it. */
weft_status_t weft_delta_gpu_mark(weft_delta_gpu_t *g);

/* WEFT_OK when the GPU passed the last mark, WEFT_INPROGRESS while it
 * has not; WEFT_ERR_CUDA (logged) when the work failed. */
weft_status_t weft_delta_gpu_ready(weft_delta_gpu_t *g);

#endif
