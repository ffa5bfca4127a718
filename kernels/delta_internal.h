/* The host delta codec's calls for the library's own transports. Internal. */
#ifndef WEFT_KERNELS_DELTA_INTERNAL_H
#define WEFT_KERNELS_DELTA_INTERNAL_H

#include <stdint.h>
#include <weft/delta.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The host delta encoder with the new bytes' checksum already known: a
 * registry version stores each tensor's checksum at publish, so a server
 * encoding from it need not sum the tensor again (the sum is a fifth of
 * an encode's time on the host). The delta carries `checksum` as given:
 * a consumer compares what applying gave with it, so a wrong one is
 * caught there, never trusted. Otherwise weft_delta_encode_host's
 * contract.
 */
weft_status_t weft_delta_encode_host_summed(const void *old_data, const void *new_data, uint64_t bytes, void *out,
                                            uint64_t out_capacity, uint64_t *out_bytes, uint64_t checksum);

/*
 * weft_delta_apply_host, and *actual the checksum of the target's bytes
 * once the delta is in (weft_checksum_host_rows's), summed in the same
 * pass where the target is dense: a consumer that checks what applying
 * gave against the carried checksum (*carried) then reads its tensor once,
 * not twice. Neither is set when the delta is refused. Internal.
 */
weft_status_t weft_delta_apply_host_summed(const void *delta, uint64_t delta_bytes, const weft_delta_target_t *target,
                                           uint64_t *carried, uint64_t *actual);

/* Whether a target is one weft_delta_target_t's contract allows: its
 * data there, rows that tile the tensor, and matrices that do where it is
 * transposed. */
int weft_delta_target_sound(const weft_delta_target_t *target);

#ifdef __CUDACC__
#define WEFT_DELTA_HOST_DEVICE __host__ __device__
#else
#define WEFT_DELTA_HOST_DEVICE
#endif

/* Where the target's own byte `pos` (in its tensor's order) lies in its
 * memory: its rows row_stride apart. */
static inline WEFT_DELTA_HOST_DEVICE uint64_t weft_delta_row_offset(const weft_delta_target_t *t, uint64_t pos)
{
    return t->row_stride == t->row_bytes ? pos : pos / t->row_bytes * t->row_stride + pos % t->row_bytes;
}

/* Where the delta's byte `pos` lies in a sound target's memory (bytes
 * from target->data): transposed, then laid out in rows. The host's
 * apply and the GPU's scatter both place bytes by it. */
static inline WEFT_DELTA_HOST_DEVICE uint64_t weft_delta_target_offset(const weft_delta_target_t *t, uint64_t pos)
{
    if (t->transpose_rows != 0) {
        const uint64_t n = t->transpose_rows, k = t->transpose_cols, in = pos % (n * k);

        pos += in % k * n + in / k - in;
    }
    return weft_delta_row_offset(t, pos);
}

/* The verdict of a delta that was applied but whose target does not sum
 * to the checksum it carries (weft_delta_apply_cuda_summed_async). */
#define WEFT_DELTA_VERDICT_SUM 64u

/*
 * weft_delta_apply_cuda_async, then, on the same stream, the checksum of
 * each applied target's bytes (weft_checksum_host_rows's: its rows read
 * as if end to end) into sums[i] (device memory, or host memory the GPU
 * can write; count words), compared on the GPU with the checksum its
 * delta carries: where they differ, verdicts[i] is non-zero although the
 * delta was applied (WEFT_DELTA_VERDICT_SUM: the target then holds
 * neither version). A consumer
 * so verifies a version's patched views without a second pass from the
 * host. A transposed target's sum is not compared (its delta carries
 * W's checksum, not its own): the caller compares sums[i] with WT's.
 * Same workspace as weft_delta_apply_cuda_async. Built with CUDA only.
 */
weft_status_t weft_delta_apply_cuda_summed_async(const weft_delta_cuda_patch_t *patches, uint32_t count,
                                                 unsigned *verdicts, uint64_t *sums, void *work, size_t work_bytes,
                                                 void *stream);

#ifdef __cplusplus
}
#endif

#endif
