#include "config.h"

#include "gpu_mem.h"

#include <stdio.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* NVML's types and entry points as its API documents them (nvml.h is not
 * part of every CUDA installation): a process entry of
 * nvmlDeviceGetComputeRunningProcesses_v3, and the calls used. */
typedef struct nvml_process {
    unsigned int       pid;
    unsigned long long used_gpu_memory;
    unsigned int       gpu_instance_id;
    unsigned int       compute_instance_id;
} nvml_process_t;

typedef int (*nvml_init_fn)(void);
typedef int (*nvml_shutdown_fn)(void);
typedef int (*nvml_handle_by_bus_fn)(const char *bus_id, void **device);
typedef int (*nvml_processes_fn)(void *device, unsigned int *count, nvml_process_t *infos);

#define NVML_SUCCESS             0
#define NVML_ERROR_INSUFFICIENT  7 /* NVML_ERROR_INSUFFICIENT_SIZE */
#define WATCH_PROCESSES          64

struct gpu_mem_watch {
    void             *lib;
    nvml_shutdown_fn  shutdown;
    nvml_processes_fn processes;
    void             *device;
    unsigned          interval_ms;
    pthread_t         thread;
    pthread_mutex_t   lock;
    int               stop;
    int               count;
    pid_t             pid[WATCH_PROCESSES];
    uint64_t          peak[WATCH_PROCESSES];
};

static void watch_sample(gpu_mem_watch_t *w)
{
    nvml_process_t infos[WATCH_PROCESSES];
    unsigned int   n = WATCH_PROCESSES;
    const int      r = w->processes(w->device, &n, infos);

    if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT) {
        return;
    }
    if (n > WATCH_PROCESSES) {
        n = WATCH_PROCESSES;
    }
    pthread_mutex_lock(&w->lock);
    for (unsigned int i = 0; i < n; i++) {
        const uint64_t used = infos[i].used_gpu_memory;
        int            k = 0;
        while (k < w->count && w->pid[k] != (pid_t)infos[i].pid) {
            k++;
        }
        if (k == w->count) {
            if (w->count == WATCH_PROCESSES) {
                continue;
            }
            w->pid[k]  = (pid_t)infos[i].pid;
            w->peak[k] = 0;
            w->count++;
        }
        /* NVML says "not available" with all bits set. */
        if (used != ~0ull && used > w->peak[k]) {
            w->peak[k] = used;
        }
    }
    pthread_mutex_unlock(&w->lock);
}

static void *watch_main(void *arg)
{
    gpu_mem_watch_t       *w = arg;
    const struct timespec nap = {.tv_sec = w->interval_ms / 1000, .tv_nsec = (long)(w->interval_ms % 1000) * 1000000};

    for (;;) {
        pthread_mutex_lock(&w->lock);
        const int stop = w->stop;
        pthread_mutex_unlock(&w->lock);
        if (stop) {
            return NULL;
        }
        watch_sample(w);
        nanosleep(&nap, NULL);
    }
}

gpu_mem_watch_t *gpu_mem_watch_start(int device, unsigned interval_ms, char *why_not, size_t why_size)
{
    gpu_mem_watch_t      *w = calloc(1, sizeof(*w));
    nvml_init_fn          init;
    nvml_handle_by_bus_fn by_bus;
    char                  bus[32];

    if (w == NULL) {
        snprintf(why_not, why_size, "out of memory");
        return NULL;
    }
    w->interval_ms = interval_ms ? interval_ms : 1;
    w->lib         = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (w->lib == NULL) {
        snprintf(why_not, why_size, "NVML (libnvidia-ml.so.1) cannot be loaded");
        free(w);
        return NULL;
    }
    init        = (nvml_init_fn)dlsym(w->lib, "nvmlInit_v2");
    w->shutdown = (nvml_shutdown_fn)dlsym(w->lib, "nvmlShutdown");
    by_bus      = (nvml_handle_by_bus_fn)dlsym(w->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    w->processes = (nvml_processes_fn)dlsym(w->lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (init == NULL || w->shutdown == NULL || by_bus == NULL || w->processes == NULL) {
        snprintf(why_not, why_size, "this NVML lacks nvmlDeviceGetComputeRunningProcesses_v3 or a call before it");
        dlclose(w->lib);
        free(w);
        return NULL;
    }
    /* The device by its PCI address: CUDA's and NVML's indices differ
     * when CUDA_VISIBLE_DEVICES reorders them. */
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), device) != cudaSuccess || init() != NVML_SUCCESS) {
        snprintf(why_not, why_size, "NVML does not start, or CUDA device %d has no PCI address", device);
        dlclose(w->lib);
        free(w);
        return NULL;
    }
    if (by_bus(bus, &w->device) != NVML_SUCCESS) {
        snprintf(why_not, why_size, "NVML does not know the device at %s", bus);
        w->shutdown();
        dlclose(w->lib);
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->lock, NULL);
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        snprintf(why_not, why_size, "no thread for the sampler");
        pthread_mutex_destroy(&w->lock);
        w->shutdown();
        dlclose(w->lib);
        free(w);
        return NULL;
    }
    return w;
}

uint64_t gpu_mem_watch_peak(gpu_mem_watch_t *w, pid_t pid)
{
    uint64_t peak = 0;

    if (w == NULL) {
        return 0;
    }
    pthread_mutex_lock(&w->lock);
    for (int k = 0; k < w->count; k++) {
        if (w->pid[k] == pid) {
            peak = w->peak[k];
        }
    }
    pthread_mutex_unlock(&w->lock);
    return peak;
}

void gpu_mem_watch_stop(gpu_mem_watch_t *w)
{
    if (w == NULL) {
        return;
    }
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    w->shutdown();
    dlclose(w->lib);
    free(w);
}

#else /* !HAVE_CUDA */

gpu_mem_watch_t *gpu_mem_watch_start(int device, unsigned interval_ms, char *why_not, size_t why_size)
{
    (void)device;
    (void)interval_ms;
    snprintf(why_not, why_size, "built without CUDA");
    return NULL;
}

uint64_t gpu_mem_watch_peak(gpu_mem_watch_t *w, pid_t pid)
{
    (void)w;
    (void)pid;
    return 0;
}

void gpu_mem_watch_stop(gpu_mem_watch_t *w)
{
    (void)w;
}

#endif
