/*
 * weft-perf: the GPU memory each process of a run holds, and its
 * high-water mark, sampled on a thread from NVML (the driver's
 * libnvidia-ml.so.1, loaded at run time: weft-perf neither links it nor
 * needs its header). What NVML reports is the process's whole footprint
 * on the device: its CUDA context, its allocations and what it mapped
 * from other processes.
 */
#ifndef WEFT_PERF_GPU_MEM_H
#define WEFT_PERF_GPU_MEM_H

#include <stdint.h>
#include <sys/types.h>

typedef struct gpu_mem_watch gpu_mem_watch_t;

/* Starts sampling CUDA device `device` (this process must have
 * initialized CUDA) every interval_ms. NULL when it cannot (no CUDA, no
 * NVML, no such device, no thread); why_not gets a line saying so. */
gpu_mem_watch_t *gpu_mem_watch_start(int device, unsigned interval_ms, char *why_not, size_t why_size);

/* The most device memory process pid held in any sample so far; 0 when
 * NVML never listed it (a process of another PID namespace, as in a
 * container, is listed under its host pid). Thread-safe. */
uint64_t gpu_mem_watch_peak(gpu_mem_watch_t *w, pid_t pid);

/* Stops the thread and frees the watch (NULL is ignored). */
void gpu_mem_watch_stop(gpu_mem_watch_t *w);

#endif
