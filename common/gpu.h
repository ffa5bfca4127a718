/*
 * What code outside the CUDA-built parts asks about GPUs, with no CUDA
 * header: gpu_cuda.c answers with the CUDA runtime, gpu_none.c (chosen by
 * Makefile.am in a library built without CUDA) says there is none. So the
 * callers need no #if for CUDA. Internal; thread-safe.
 */
#ifndef WEFT_COMMON_GPU_H
#define WEFT_COMMON_GPU_H

#include <weft/types.h>

#include <stddef.h>

/* The GPU that holds the device memory at ptr. WEFT_ERR_INVALID_PARAM
 * (not logged: the caller names the object) when ptr is not device memory
 * of this process; WEFT_ERR_UNSUPPORTED without CUDA; WEFT_ERR_CUDA. */
weft_status_t weft_gpu_pointer_device(const void *ptr, int *device);

/* GPUs visible to this process; 0 without CUDA or a driver. */
int weft_gpu_count(void);

/* The PCI bus id of GPU `device` ("0000:3b:00.0") in bus[size];
 * WEFT_ERR_UNSUPPORTED without CUDA, WEFT_ERR_NO_DEVICE. */
weft_status_t weft_gpu_pci_bus_id(int device, char *bus, size_t size);

#endif
