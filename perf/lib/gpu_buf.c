/* weft-perf: GPU buffers (gpu_buf.h). */
#include "config.h"

#include "gpu_buf.h"

#include <stdio.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

static int cuda_ok(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "weft-perf: %s: %s\n", what, cudaGetErrorString(err));
        return 0;
    }
    return 1;
}

int perf_gpu_count(void)
{
    int n = 0;

    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

int perf_gpu_alloc(int device, uint64_t bytes, void **ptr)
{
    *ptr = NULL;
    if (!cuda_ok(cudaSetDevice(device), "cudaSetDevice") ||
        !cuda_ok(cudaMalloc(ptr, bytes > 0 ? bytes : 1), "cudaMalloc") ||
        !cuda_ok(cudaMemset(*ptr, 0, bytes), "cudaMemset") ||
        !cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
        perf_gpu_free(*ptr);
        *ptr = NULL;
        return -1;
    }
    return 0;
}

void perf_gpu_free(void *ptr)
{
    if (ptr != NULL) {
        (void)cuda_ok(cudaFree(ptr), "cudaFree");
    }
}

int perf_gpu_upload(void *dst, const void *src, uint64_t bytes)
{
    return cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the GPU") ? 0 : -1;
}

int perf_gpu_download(void *dst, const void *src, uint64_t bytes)
{
    return cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU") ? 0 : -1;
}

#else

int perf_gpu_count(void)
{
    return 0;
}

int perf_gpu_alloc(int device, uint64_t bytes, void **ptr)
{
    (void)device;
    (void)bytes;
    *ptr = NULL;
    fprintf(stderr, "weft-perf: built without CUDA\n");
    return -1;
}

void perf_gpu_free(void *ptr)
{
    (void)ptr;
}

int perf_gpu_upload(void *dst, const void *src, uint64_t bytes)
{
    (void)dst;
    (void)src;
    (void)bytes;
    return -1;
}

int perf_gpu_download(void *dst, const void *src, uint64_t bytes)
{
    (void)dst;
    (void)src;
    (void)bytes;
    return -1;
}

#endif
