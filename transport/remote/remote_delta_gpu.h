/*
 * The device side of a remote consumer's deltas (remote_delta.h) for
 * device views: the inbox (pinned host memory where the consumer's
 * regions are host memory, a staged consumer's; device memory where they
 * are device memory), a device copy of a host inbox, and the apply: every
 * entry into its view on one stream, the patches checked, scattered and
 * summed on the GPU (weft_delta_apply_cuda_summed_async), the whole
 * entries copied row by row, then one wait for the verdicts.
 *
 * Built with CUDA; without it, create says WEFT_ERR_UNSUPPORTED and
 * device views take every version whole. One consumer's, on its receiving
 * thread; each call makes the views' GPU current and restores the
 * caller's. Internal.
 */
#ifndef WEFT_TRANSPORT_REMOTE_REMOTE_DELTA_GPU_H
#define WEFT_TRANSPORT_REMOTE_REMOTE_DELTA_GPU_H

#include "transport/ctl/wire.h"

#include <stdint.h>
#include <weft/delta.h>
#include <weft/types.h>

typedef struct weft_remote_delta_gpu weft_remote_delta_gpu_t;

/*
 * For `count` views on GPU `device`: an inbox of inbox_bytes (a multiple
 * of 4096) in `inbox_memory` (WEFT_MEMORY_HOST: pinned host memory;
 * WEFT_MEMORY_CUDA: memory of `device`), into *inbox, and what the apply
 * needs. WEFT_ERR_UNSUPPORTED without CUDA; WEFT_ERR_NO_MEMORY,
 * WEFT_ERR_CUDA (logged).
 */
weft_status_t weft_remote_delta_gpu_create(int device, uint32_t count, uint64_t inbox_bytes,
                                           weft_memory_kind_t inbox_memory, weft_remote_delta_gpu_t **out,
                                           uint8_t **inbox);

/* Frees it and its inbox (NULL: nothing). */
void weft_remote_delta_gpu_destroy(weft_remote_delta_gpu_t *g);

/*
 * Applies map[0 .. count) (entries in the inbox, inside it: the wire
 * parse checked) into targets[0 .. count) (device memory): a PATCH is
 * checked, scattered and its view summed on the GPU, a PATCH_T the same
 * transposed (its sum then compared with the entry's checksum here), a
 * WHOLE copied in.
 * WEFT_OK: patched[i] is 1 and carried[i] the checksum of each patched
 * view, which equals the one its delta carries. WEFT_ERR_CORRUPT (*bad
 * the view, why logged): an entry that is not its view's size or not
 * 8-byte aligned (nothing written then), a delta refused, or a view
 * whose bytes after its delta are not the checksum it carries; the views
 * then hold no version. WEFT_ERR_CUDA (logged).
 */
weft_status_t weft_remote_delta_gpu_apply(weft_remote_delta_gpu_t *g, const weft_wire_delta_entry_t *map,
                                          const weft_delta_target_t *targets, uint32_t count, uint8_t *patched,
                                          uint64_t *carried, uint32_t *bad);

#endif
