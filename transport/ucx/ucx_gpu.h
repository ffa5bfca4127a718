/*
 * How GPU memory travels over the ucx transport, decided once per UCX
 * context: direct (the memory itself is registered with UCX, which puts
 * from or into it: GPUDirect RDMA) when the context reports CUDA memory
 * and a network memory domain registers it, or staged
 * through pinned host buffers that libweft copies to and from the GPU
 * (ucx_cuda.h). WEFT_UCX_CUDA=auto|direct|staged overrides. Needs no CUDA
 * itself. Internal.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_GPU_H
#define WEFT_TRANSPORT_UCX_UCX_GPU_H

#include "ucx_common.h"

#include <stdint.h>
#include <weft/registry.h>

typedef enum weft_ucx_gpu_path {
    WEFT_UCX_GPU_DIRECT = 1,
    WEFT_UCX_GPU_STAGED = 2
} weft_ucx_gpu_path_t;

/*
 * 1 when UCX can put from and into CUDA memory across nodes: the context
 * reports UCS_MEMORY_TYPE_CUDA among its memory types and a memory domain
 * of its InfiniBand/RoCE component registers CUDA memory (GPUDirect
 * RDMA). CUDA support alone (cuda_copy) is not enough: see ucx_gpu.c.
 */
int weft_ucx_reports_cuda(ucp_context_h context);

/* The second half of that: an InfiniBand/RoCE memory domain of UCX
 * registers CUDA memory. Opens every such domain to ask. */
int weft_ucx_network_registers_cuda(void);

/*
 * The rule alone, for a context that reports GPUDirect RDMA (cuda = 1) or
 * not: *path and *why (a phrase) from WEFT_UCX_CUDA. WEFT_ERR_UNSUPPORTED
 * (direct asked for without support; *path is direct),
 * WEFT_ERR_INVALID_PARAM (a bad value). Logs nothing.
 */
weft_status_t weft_ucx_gpu_choose(int cuda, weft_ucx_gpu_path_t *path, const char **why);

/*
 * The path GPU memory takes for `who` ("server", "remote"), from
 * WEFT_UCX_CUDA and what the context reports; logs the choice.
 * Errors: WEFT_ERR_UNSUPPORTED (direct asked for, UCX without GPUDirect
 * RDMA), WEFT_ERR_INVALID_PARAM (a value that is none of the three).
 */
weft_status_t weft_ucx_gpu_path(ucp_context_h context, const char *who, weft_ucx_gpu_path_t *path);

/* "direct" or "staged". */
const char *weft_ucx_gpu_path_name(weft_ucx_gpu_path_t path);

/* Registers [addr, addr + bytes) of the given kind with the context. */
weft_status_t weft_ucx_mem_map(ucp_context_h context, void *addr, uint64_t bytes,
                               weft_memory_kind_t memory, ucp_mem_h *memh, const char *what);

#endif
