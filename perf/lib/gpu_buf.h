/*
 * weft-perf: GPU buffers for measurements that move GPU memory, filled and
 * checked through host memory. Without CUDA in the build every call
 * fails (printed) and perf_gpu_count() is 0.
 */
#ifndef WEFT_PERF_GPU_BUF_H
#define WEFT_PERF_GPU_BUF_H

#include <stdint.h>

/* GPUs visible to this process; 0 without CUDA or without a GPU. */
int perf_gpu_count(void);

/* cudaMalloc on `device` (made current), zeroed. 0, or -1 (printed). */
int perf_gpu_alloc(int device, uint64_t bytes, void **ptr);
void perf_gpu_free(void *ptr);

/* Synchronous copies host → device and device → host. 0, or -1 (printed). */
int perf_gpu_upload(void *dst, const void *src, uint64_t bytes);
int perf_gpu_download(void *dst, const void *src, uint64_t bytes);

#endif
