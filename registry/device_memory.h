/*
 * The device memory GPU arenas are made of: allocation, CUDA IPC export
 * and import, and finding a GPU by UUID. The registry's protocol code
 * (arena.c) calls only these, so that it builds and is tested without
 * CUDA; without CUDA every call returns WEFT_ERR_UNSUPPORTED. Internal.
 *
 * Every call leaves the calling thread's current device as it found it.
 */
#ifndef WEFT_REGISTRY_DEVICE_MEMORY_H
#define WEFT_REGISTRY_DEVICE_MEMORY_H

#include "kernels/checksum.h"
#include "layout.h"

#include <stdint.h>
#include <weft/weft.h>

/* The UUID (cudaDeviceProp.uuid) of GPU `device`. */
weft_status_t weft_devmem_uuid(int device, uint8_t uuid[16]);

/* The ordinal in this process of the GPU with this UUID; WEFT_ERR_NOT_FOUND
 * when it is not visible, WEFT_ERR_NO_DEVICE when no GPU is. */
weft_status_t weft_devmem_find(const uint8_t uuid[16], int *device);

/*
 * Allocates bytes on GPU `device` and exports it: *ptr and the IPC handle.
 * The allocation is remembered in this process, so that opening its handle
 * here gives *ptr back (CUDA refuses to import a handle in the process
 * that exported it).
 */
weft_status_t weft_devmem_alloc(int device, uint64_t bytes, void **ptr,
                                uint8_t handle[REG_IPC_HANDLE_BYTES]);

/* Frees what weft_devmem_alloc gave. */
weft_status_t weft_devmem_free(int device, void *ptr);

/*
 * Maps an exported allocation into this process, into the context of the
 * calling thread's current device, whose ordinal goes to *device. Peer
 * access is enabled lazily where the memory is on another GPU. Gives the
 * exporter's own pointer when this process exported it.
 */
weft_status_t weft_devmem_open(const uint8_t handle[REG_IPC_HANDLE_BYTES], void **ptr, int *device);

/* Unmaps what weft_devmem_open gave on `device` (a no-op for this
 * process's own allocations). */
weft_status_t weft_devmem_close(int device, void *ptr);

/*
 * The checksums (<weft/checksum.h>) of count tensors of a GPU arena at
 * base on GPU `device` (the records give offsets and bytes), into
 * sums[0 .. count − 1]: on the legacy default stream, one launch for up to
 * 65535 tensors, waiting for the sums. `device` is the GPU whose context
 * base belongs to (-1: the current one). scratch: device memory kept
 * between calls (weft_checksum_cuda_ranges), one caller at a time.
 */
weft_status_t weft_devmem_checksums(int device, const uint8_t *base, const reg_tensor_t *tensors, uint32_t count,
                                    uint64_t *sums, weft_checksum_scratch_t *scratch);

#endif
