/*
 * The GPU FP8 writer's internal entry points, for tests. Internal.
 */
#ifndef WEFT_KERNELS_QUANT_CUDA_H
#define WEFT_KERNELS_QUANT_CUDA_H

#include <weft/weft.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* q[i] = e4m3(x[i]) on the GPU, through the same conversion the tile
 * kernel uses (the hardware's two-at-a-time cvt, NaN → 0x7F), so that a
 * test can hold it against fp8.h's encoder on chosen bit patterns. Device
 * pointers; asynchronous on `stream`. Built only with CUDA. */
weft_status_t weft_fp8_e4m3_encode_cuda(const float *x, uint8_t *q, size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#endif
