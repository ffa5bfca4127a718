/*
 * Device memory for GPU arenas, on the CUDA runtime: cudaMalloc plus the
 * legacy IPC handle (cudaIpcGetMemHandle), which fits in the segment as 64
 * plain bytes, so no socket is needed to hand it to consumers.
 */
#include "config.h"

#include "device_memory.h"

#include "common/log.h"

#include <string.h>

#if HAVE_CUDA

#include "common/cuda_util.h"
#include "kernels/checksum.h"

#include <pthread.h>
#include <stdlib.h>

/* Allocations exported by this process, for weft_devmem_open. A few per
 * registry (one per slot); a list is enough. */
typedef struct export_entry {
    struct export_entry *next;
    void                *ptr;
    uint8_t              handle[REG_IPC_HANDLE_BYTES];
} export_entry_t;

static pthread_mutex_t export_lock = PTHREAD_MUTEX_INITIALIZER;
static export_entry_t *exports;

/* Runs the rest of a call on `device`, restoring the caller's device. */
typedef struct {
    int saved;
    int switched;
} device_scope_t;

static weft_status_t scope_enter(device_scope_t *scope, int device)
{
    weft_status_t status = WEFT_CUDA_CHECK(cudaGetDevice(&scope->saved));

    scope->switched = 0;
    if (status != WEFT_OK || device < 0 || device == scope->saved) {
        return status;
    }
    status = WEFT_CUDA_CHECK(cudaSetDevice(device));
    scope->switched = status == WEFT_OK;
    return status;
}

static void scope_leave(const device_scope_t *scope)
{
    if (scope->switched) {
        (void)WEFT_CUDA_CHECK(cudaSetDevice(scope->saved));
    }
}

weft_status_t weft_devmem_uuid(int device, uint8_t uuid[16])
{
    struct cudaDeviceProp prop;
    weft_status_t         status = WEFT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

    if (status == WEFT_OK) {
        memcpy(uuid, prop.uuid.bytes, 16);
    }
    return status;
}

weft_status_t weft_devmem_find(const uint8_t uuid[16], int *device)
{
    int           count = 0;
    weft_status_t status;

    /* Without a driver or a GPU this is an answer, not an error to log. */
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return WEFT_ERR_NO_DEVICE;
    }
    for (int d = 0; d < count; d++) {
        uint8_t id[16];

        status = weft_devmem_uuid(d, id);
        if (status != WEFT_OK) {
            return status;
        }
        if (memcmp(id, uuid, 16) == 0) {
            *device = d;
            return WEFT_OK;
        }
    }
    return WEFT_ERR_NOT_FOUND;
}

weft_status_t weft_devmem_alloc(int device, uint64_t bytes, void **ptr,
                                uint8_t handle[REG_IPC_HANDLE_BYTES])
{
    cudaIpcMemHandle_t ipc;
    export_entry_t    *entry;
    device_scope_t     scope;
    weft_status_t      status;
    void              *p = NULL;

    _Static_assert(sizeof(ipc) == REG_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t size");
    entry = calloc(1, sizeof(*entry));
    if (entry == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    status = scope_enter(&scope, device);
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaMalloc(&p, bytes));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaIpcGetMemHandle(&ipc, p));
        if (status != WEFT_OK) {
            (void)WEFT_CUDA_CHECK(cudaFree(p));
        }
    }
    scope_leave(&scope);
    if (status != WEFT_OK) {
        free(entry);
        return status;
    }
    memcpy(handle, &ipc, REG_IPC_HANDLE_BYTES);
    entry->ptr = p;
    memcpy(entry->handle, handle, REG_IPC_HANDLE_BYTES);
    pthread_mutex_lock(&export_lock);
    entry->next = exports;
    exports     = entry;
    pthread_mutex_unlock(&export_lock);
    *ptr = p;
    return WEFT_OK;
}

weft_status_t weft_devmem_free(int device, void *ptr)
{
    export_entry_t **link, *entry = NULL;
    device_scope_t   scope;
    weft_status_t    status;

    pthread_mutex_lock(&export_lock);
    for (link = &exports; *link != NULL; link = &(*link)->next) {
        if ((*link)->ptr == ptr) {
            entry = *link;
            *link = entry->next;
            break;
        }
    }
    pthread_mutex_unlock(&export_lock);
    free(entry);
    status = scope_enter(&scope, device);
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaFree(ptr));
    }
    scope_leave(&scope);
    return status;
}

static void *export_find(const uint8_t handle[REG_IPC_HANDLE_BYTES])
{
    void *found = NULL;

    pthread_mutex_lock(&export_lock);
    for (export_entry_t *e = exports; e != NULL; e = e->next) {
        if (memcmp(e->handle, handle, REG_IPC_HANDLE_BYTES) == 0) {
            found = e->ptr;
            break;
        }
    }
    pthread_mutex_unlock(&export_lock);
    return found;
}

weft_status_t weft_devmem_open(const uint8_t handle[REG_IPC_HANDLE_BYTES], void **ptr, int *device)
{
    cudaIpcMemHandle_t ipc;
    weft_status_t      status;
    void              *own = export_find(handle);

    status = WEFT_CUDA_CHECK(cudaGetDevice(device));
    if (status != WEFT_OK) {
        return status;
    }
    if (own != NULL) {
        *ptr = own;
        return WEFT_OK;
    }
    memcpy(&ipc, handle, sizeof(ipc));
    return WEFT_CUDA_CHECK(cudaIpcOpenMemHandle(ptr, ipc, cudaIpcMemLazyEnablePeerAccess));
}

weft_status_t weft_devmem_close(int device, void *ptr)
{
    device_scope_t scope;
    weft_status_t  status;
    int            own = 0;

    pthread_mutex_lock(&export_lock);
    for (export_entry_t *e = exports; e != NULL; e = e->next) {
        if (e->ptr == ptr) {
            own = 1;
            break;
        }
    }
    pthread_mutex_unlock(&export_lock);
    if (own) {
        return WEFT_OK;
    }
    /* In the context it was opened in. */
    status = scope_enter(&scope, device);
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaIpcCloseMemHandle(ptr));
    }
    scope_leave(&scope);
    return status;
}

weft_status_t weft_devmem_checksums(int device, const uint8_t *base, const reg_tensor_t *tensors, uint32_t count,
                                    uint64_t *sums, weft_checksum_scratch_t *scratch)
{
    const uint8_t **ptrs = malloc((size_t)(count > 0 ? count : 1) * sizeof(*ptrs));
    uint64_t       *bytes = malloc((size_t)(count > 0 ? count : 1) * sizeof(*bytes));
    device_scope_t  scope;
    weft_status_t   status = ptrs != NULL && bytes != NULL ? scope_enter(&scope, device) : WEFT_ERR_NO_MEMORY;

    if (status == WEFT_OK) {
        for (uint32_t i = 0; i < count; i++) {
            ptrs[i] = base + tensors[i].offset;
            bytes[i] = tensors[i].bytes;
        }
        status = weft_checksum_cuda_ranges(ptrs, bytes, count, sums, scratch);
        scope_leave(&scope);
    }
    free(ptrs);
    free(bytes);
    return status;
}

#else /* !HAVE_CUDA */

static weft_status_t no_cuda(const char *what)
{
    weft_log_error("%s: libweft was built without CUDA", what);
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t weft_devmem_uuid(int device, uint8_t uuid[16])
{
    (void)device;
    (void)uuid;
    return no_cuda("GPU UUID");
}

weft_status_t weft_devmem_find(const uint8_t uuid[16], int *device)
{
    (void)uuid;
    (void)device;
    return WEFT_ERR_NO_DEVICE;
}

weft_status_t weft_devmem_alloc(int device, uint64_t bytes, void **ptr,
                                uint8_t handle[REG_IPC_HANDLE_BYTES])
{
    (void)device;
    (void)bytes;
    (void)ptr;
    (void)handle;
    return no_cuda("GPU arena allocation");
}

weft_status_t weft_devmem_free(int device, void *ptr)
{
    (void)device;
    (void)ptr;
    return no_cuda("GPU arena release");
}

weft_status_t weft_devmem_open(const uint8_t handle[REG_IPC_HANDLE_BYTES], void **ptr, int *device)
{
    (void)device;
    (void)handle;
    (void)ptr;
    return no_cuda("GPU arena mapping");
}

weft_status_t weft_devmem_close(int device, void *ptr)
{
    (void)device;
    (void)ptr;
    return no_cuda("GPU arena unmapping");
}

weft_status_t weft_devmem_checksums(int device, const uint8_t *base, const reg_tensor_t *tensors, uint32_t count,
                                    uint64_t *sums, weft_checksum_scratch_t *scratch)
{
    (void)scratch;
    (void)device;
    (void)base;
    (void)tensors;
    (void)count;
    (void)sums;
    return no_cuda("GPU arena checksums");
}

#endif
