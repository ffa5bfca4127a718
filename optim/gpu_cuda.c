/*
 * The GPU placements. STAGED streams the matrices through a ring of slots
 * on three streams:
 *
 *   h2d:      wait slot_free[k] → master, m, v (and a host gradient) into slot k → h2d_done[k]
 *   compute:  wait h2d_done[k]  → AdamW → the writer, on this stream      → compute_done[k]
 *   d2h:      wait compute_done[k] → master, m, v back to pinned memory   → slot_free[k]
 *
 * so the copy in of one matrix, the update of the next and the copy out of
 * a third run at once, and a slot is reused only after the writer's work
 * on it and its copy out. The caller's stream is joined at both ends by
 * events; nothing here waits on the device as a whole. RESIDENT updates
 * each group in place on the caller's stream: AdamW in one launch, Muon's
 * matrices in one batch. A slot carries as many whole matrices of a group
 * as fit (optim_slot_units), so STAGED Muon orthogonalizes them in one
 * batch too, and small matrices cost one copy and one launch a slot.
 */
#include "config.h"

#include "optim_impl.h"

#include "common/cuda_util.h"
#include "common/log.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

struct optim_gpu {
    cudaStream_t h2d, compute, d2h;
    cudaEvent_t  start;      /* the caller's stream reached the step */
    cudaEvent_t  done;       /* the last copy out of the latest step */
    cudaEvent_t *h2d_done, *compute_done, *slot_free; /* per slot */
    char        *slots;      /* slot_count × slot_bytes, device */
    uint32_t     next_slot;  /* the ring goes on across steps */
    void        *blas;       /* cuBLAS handle, for Muon's GEMMs */
    void        *muon_work;  /* Newton–Schulz workspace, device */
    size_t       muon_work_bytes;
};

static uint64_t slot_array_bytes(uint64_t elems, size_t elem)
{
    return (elems * elem + OPTIM_SLOT_ALIGN - 1) / OPTIM_SLOT_ALIGN * OPTIM_SLOT_ALIGN;
}

static void gpu_free(struct optim_gpu *gpu, uint32_t slots)
{
    for (uint32_t k = 0; k < slots; k++) {
        if (gpu->h2d_done != NULL && gpu->h2d_done[k] != NULL) {
            cudaEventDestroy(gpu->h2d_done[k]);
        }
        if (gpu->compute_done != NULL && gpu->compute_done[k] != NULL) {
            cudaEventDestroy(gpu->compute_done[k]);
        }
        if (gpu->slot_free != NULL && gpu->slot_free[k] != NULL) {
            cudaEventDestroy(gpu->slot_free[k]);
        }
    }
    free(gpu->h2d_done);
    free(gpu->compute_done);
    free(gpu->slot_free);
    if (gpu->start != NULL) {
        cudaEventDestroy(gpu->start);
    }
    if (gpu->done != NULL) {
        cudaEventDestroy(gpu->done);
    }
    if (gpu->h2d != NULL) {
        cudaStreamDestroy(gpu->h2d);
    }
    if (gpu->compute != NULL) {
        cudaStreamDestroy(gpu->compute);
    }
    if (gpu->d2h != NULL) {
        cudaStreamDestroy(gpu->d2h);
    }
    if (gpu->slots != NULL) {
        cudaFree(gpu->slots);
    }
    if (gpu->muon_work != NULL) {
        cudaFree(gpu->muon_work);
    }
    weft_muon_blas_destroy(gpu->blas);
    free(gpu);
}

static weft_status_t event_new(cudaEvent_t *ev)
{
    return WEFT_CUDA_CHECK(cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
}

weft_status_t optim_gpu_create(weft_optim_h opt)
{
    struct optim_gpu *gpu;
    weft_status_t     status;
    const uint32_t    slots = opt->placement == WEFT_OPTIM_STAGED ? opt->slot_count : 0;
    int               saved;

    status = weft_cuda_enter(opt->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    gpu = calloc(1, sizeof(*gpu));
    if (gpu == NULL) {
        weft_cuda_leave(opt->device, saved);
        return WEFT_ERR_NO_MEMORY;
    }
    status = event_new(&gpu->start);
    if (status == WEFT_OK) {
        status = event_new(&gpu->done);
    }
    if (status == WEFT_OK && slots > 0) {
        gpu->h2d_done     = calloc(slots, sizeof(cudaEvent_t));
        gpu->compute_done = calloc(slots, sizeof(cudaEvent_t));
        gpu->slot_free    = calloc(slots, sizeof(cudaEvent_t));
        if (gpu->h2d_done == NULL || gpu->compute_done == NULL || gpu->slot_free == NULL) {
            status = WEFT_ERR_NO_MEMORY;
        }
        for (uint32_t k = 0; k < slots && status == WEFT_OK; k++) {
            status = event_new(&gpu->h2d_done[k]);
            if (status == WEFT_OK) {
                status = event_new(&gpu->compute_done[k]);
            }
            if (status == WEFT_OK) {
                status = event_new(&gpu->slot_free[k]);
            }
        }
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&gpu->h2d, cudaStreamNonBlocking));
        }
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&gpu->compute, cudaStreamNonBlocking));
        }
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&gpu->d2h, cudaStreamNonBlocking));
        }
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaMalloc((void **)&gpu->slots, (size_t)(slots * opt->slot_bytes)));
        }
    }
    if (status != WEFT_OK) {
        gpu_free(gpu, slots);
        weft_cuda_leave(opt->device, saved);
        return status;
    }
    opt->gpu = gpu;
    opt->device_bytes += slots * opt->slot_bytes;
    weft_cuda_leave(opt->device, saved);
    return WEFT_OK;
}

void optim_gpu_destroy(weft_optim_h opt)
{
    int saved;

    if (weft_cuda_enter(opt->device, &saved) != WEFT_OK) {
        return;
    }
    /* The last step's copies out and the writer's work may still run. */
    if (opt->gpu->d2h != NULL) {
        (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(opt->gpu->d2h));
        (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(opt->gpu->compute));
        (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(opt->gpu->h2d));
    }
    (void)WEFT_CUDA_CHECK(cudaEventSynchronize(opt->gpu->done));
    gpu_free(opt->gpu, opt->placement == WEFT_OPTIM_STAGED ? opt->slot_count : 0);
    opt->gpu = NULL;
    weft_cuda_leave(opt->device, saved);
}

weft_status_t optim_gpu_state_alloc(weft_optim_h opt, optim_group_t *g)
{
    const size_t  bytes = (size_t)(g->units * g->unit_elems * sizeof(float));
    weft_status_t status = WEFT_OK;
    int           saved, i;

    status = weft_cuda_enter(opt->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    for (i = 0; i < g->arrays && status == WEFT_OK; i++) {
        if (opt->placement == WEFT_OPTIM_STAGED) {
            status = WEFT_CUDA_CHECK(cudaHostAlloc((void **)&g->state[i], bytes, cudaHostAllocPortable));
            if (status == WEFT_OK) {
                memset(g->state[i], 0, bytes);
            }
        } else {
            status = WEFT_CUDA_CHECK(cudaMalloc((void **)&g->state[i], bytes));
            if (status == WEFT_OK) {
                status = WEFT_CUDA_CHECK(cudaMemset(g->state[i], 0, bytes));
                if (status != WEFT_OK) {
                    cudaFree(g->state[i]);
                }
            }
        }
        if (status != WEFT_OK) {
            g->state[i] = NULL;
        }
    }
    if (status != WEFT_OK) {
        optim_gpu_state_free(opt, g);
    } else if (opt->placement == WEFT_OPTIM_STAGED) {
        opt->host_bytes += (uint64_t)g->arrays * bytes;
    } else {
        opt->device_bytes += (uint64_t)g->arrays * bytes;
    }
    weft_cuda_leave(opt->device, saved);
    return status;
}

void optim_gpu_state_free(weft_optim_h opt, optim_group_t *g)
{
    int saved, entered = weft_cuda_enter(opt->device, &saved) == WEFT_OK;

    for (int i = 0; i < g->arrays; i++) {
        if (g->state[i] == NULL) {
            continue;
        }
        if (opt->placement == WEFT_OPTIM_STAGED) {
            cudaFreeHost(g->state[i]);
        } else {
            cudaFree(g->state[i]);
        }
        g->state[i] = NULL;
    }
    if (entered) {
        weft_cuda_leave(opt->device, saved);
    }
}

weft_status_t optim_gpu_grad_check(weft_optim_h opt, uint32_t group, const weft_optim_grad_t *grad)
{
    const optim_group_t *g = &opt->groups[group];
    int                  device;

    if (grad->memory == WEFT_MEMORY_CUDA) {
        if (weft_cuda_pointer_device(grad->data, &device) != WEFT_OK || device != opt->device) {
            weft_log_error("weft_optim_step: group \"%s\": the gradient is not device memory of GPU %d", g->name,
                           (int)opt->device);
            return WEFT_ERR_INVALID_PARAM;
        }
        return WEFT_OK;
    }
    if (opt->placement == WEFT_OPTIM_RESIDENT) {
        weft_log_error("weft_optim_step: group \"%s\": a resident optimizer takes device gradients", g->name);
        return WEFT_ERR_INVALID_PARAM;
    }
    if (optim_slot_need(g, 1, grad->dtype) > opt->slot_bytes) {
        weft_log_error("weft_optim_step: group \"%s\": a %llu × %llu matrix with its host gradient needs %llu "
                       "bytes of slot but a slot has %llu",
                       g->name, (unsigned long long)g->rows, (unsigned long long)g->cols,
                       (unsigned long long)optim_slot_need(g, 1, grad->dtype), (unsigned long long)opt->slot_bytes);
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_OK;
}

weft_status_t optim_gpu_muon_prepare(weft_optim_h opt, const optim_group_t *g)
{
    struct optim_gpu *gpu  = opt->gpu;
    const uint64_t    batch = opt->placement == WEFT_OPTIM_RESIDENT ? g->units
                                                                    : optim_slot_units(opt, g, WEFT_DTYPE_INVALID);
    const size_t      need = weft_muon_cuda_work_bytes(g->rows, g->cols, batch);
    weft_status_t     status;
    int               saved;

    status = weft_cuda_enter(opt->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    if (gpu->blas == NULL) {
        status = weft_muon_blas_create(&gpu->blas);
    }
    if (status == WEFT_OK && need > gpu->muon_work_bytes) {
        void *work = NULL;
        status = WEFT_CUDA_CHECK(cudaMalloc(&work, need));
        if (status == WEFT_OK) {
            if (gpu->muon_work != NULL) {
                cudaFree(gpu->muon_work);
            }
            opt->device_bytes += need - gpu->muon_work_bytes;
            gpu->muon_work       = work;
            gpu->muon_work_bytes = need;
        }
    }
    weft_cuda_leave(opt->device, saved);
    return status;
}

weft_status_t optim_gpu_state_copy(weft_optim_h opt, optim_group_t *g, int a, uint64_t offset, void *host,
                                   size_t bytes, int to_device)
{
    char         *dev = (char *)g->state[a] + offset;
    weft_status_t status;
    int           saved;

    status = weft_cuda_enter(opt->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    status = WEFT_CUDA_CHECK(to_device ? cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice)
                                       : cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    weft_cuda_leave(opt->device, saved);
    return status;
}

/* Matrices u0 .. u0 + count − 1 of a group through slot k: the three
 * stages, each on its stream. Each state array of the batch is one copy
 * (the matrices are consecutive in the stack) and one update launch (Muon:
 * one Newton–Schulz batch); the writer then sees each matrix alone. */
static weft_status_t staged_batch(weft_optim_h opt, uint32_t group, uint32_t u0, uint32_t count,
                                  const weft_optim_grad_t *grad, const optim_scalars_t *s,
                                  const weft_optim_step_params_t *params)
{
    struct optim_gpu    *gpu   = opt->gpu;
    const optim_group_t *g     = &opt->groups[group];
    const uint32_t       k     = gpu->next_slot;
    const uint64_t       n     = g->unit_elems, off = (uint64_t)u0 * n, elems = (uint64_t)count * n;
    const uint64_t       array = slot_array_bytes(elems, sizeof(float));
    const size_t         bytes = (size_t)(elems * sizeof(float));
    const size_t         gsize = weft_dtype_size(grad->dtype);
    char                *slot  = gpu->slots + (uint64_t)k * opt->slot_bytes;
    float               *dev[3] = {NULL, NULL, NULL};
    const void          *dgrad;
    weft_status_t        status;

    gpu->next_slot = (k + 1) % opt->slot_count;
    for (int i = 0; i < g->arrays; i++) {
        dev[i] = (float *)(slot + i * array);
    }
    dgrad = (const char *)grad->data + off * gsize;

    status = WEFT_CUDA_CHECK(cudaStreamWaitEvent(gpu->h2d, gpu->slot_free[k], 0));
    for (int i = 0; i < g->arrays && status == WEFT_OK; i++) {
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(dev[i], g->state[i] + off, bytes, cudaMemcpyHostToDevice, gpu->h2d));
    }
    if (status == WEFT_OK && grad->memory == WEFT_MEMORY_HOST) {
        void *slot_grad = slot + g->arrays * array;
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(slot_grad, dgrad, (size_t)(elems * gsize), cudaMemcpyHostToDevice,
                                                 gpu->h2d));
        dgrad  = slot_grad;
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaEventRecord(gpu->h2d_done[k], gpu->h2d));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamWaitEvent(gpu->compute, gpu->h2d_done[k], 0));
    }
    if (status == WEFT_OK) {
        status = g->algo == WEFT_OPTIM_MUON
                     ? weft_muon_cuda_step(&s->muon, (int)g->muon.schedule, (int)g->muon_rounding,
                                           g->muon.ns_steps, dev[0], dev[1], dgrad, grad->dtype, g->rows, g->cols,
                                           count, 0, gpu->muon_work, gpu->blas, gpu->compute)
                     : weft_adamw_cuda(&s->adamw, dev[0], dev[1], dev[2], dgrad, grad->dtype, (size_t)elems,
                                       gpu->compute);
    }
    for (uint32_t j = 0; j < count && status == WEFT_OK && (params->field_mask & WEFT_OPTIM_STEP_FIELD_WRITER); j++) {
        weft_optim_unit_t unit;
        optim_unit_init(opt, group, u0 + j, dev[0] + (uint64_t)j * n, WEFT_MEMORY_CUDA, gpu->compute, &unit);
        status = params->writer(params->writer_arg, &unit);
        if (status != WEFT_OK) {
            weft_log_error("weft_optim_step: the writer failed on group \"%s\" matrix %u: %s", g->name, u0 + j,
                           weft_status_string(status));
        }
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaEventRecord(gpu->compute_done[k], gpu->compute));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamWaitEvent(gpu->d2h, gpu->compute_done[k], 0));
    }
    for (int i = 0; i < g->arrays && status == WEFT_OK; i++) {
        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(g->state[i] + off, dev[i], bytes, cudaMemcpyDeviceToHost, gpu->d2h));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaEventRecord(gpu->slot_free[k], gpu->d2h));
    }
    return status;
}

static weft_status_t staged_step(weft_optim_h opt, cudaStream_t stream, const weft_optim_grad_t *grads,
                                 const optim_scalars_t *scalars, const weft_optim_step_params_t *params)
{
    struct optim_gpu *gpu = opt->gpu;
    weft_status_t     status, joined;

    /* The gradients are ready when the caller's stream gets here; the
     * previous step's copies out must land before its masters go in
     * again (the caller may use another stream this time). */
    status = WEFT_CUDA_CHECK(cudaEventRecord(gpu->start, stream));
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamWaitEvent(gpu->h2d, gpu->start, 0));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamWaitEvent(gpu->h2d, gpu->done, 0));
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaStreamWaitEvent(gpu->compute, gpu->start, 0));
    }
    for (uint32_t i = 0; i < opt->group_count && status == WEFT_OK; i++) {
        const optim_group_t *g = &opt->groups[i];
        const uint64_t       per_slot =
            optim_slot_units(opt, g, grads[i].memory == WEFT_MEMORY_HOST ? grads[i].dtype : WEFT_DTYPE_INVALID);
        for (uint32_t u = 0; u < g->units && status == WEFT_OK; u += (uint32_t)per_slot) {
            const uint32_t count = (uint32_t)(g->units - u < per_slot ? g->units - u : per_slot);
            status = staged_batch(opt, i, u, count, &grads[i], &scalars[i], params);
        }
    }
    /* Whatever was enqueued, the caller's stream waits for it, so that a
     * synchronize after a failure still leaves nothing running. */
    joined = WEFT_CUDA_CHECK(cudaEventRecord(gpu->done, gpu->d2h));
    if (joined == WEFT_OK) {
        joined = WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, gpu->done, 0));
    }
    return status != WEFT_OK ? status : joined;
}

static weft_status_t resident_step(weft_optim_h opt, cudaStream_t stream, const weft_optim_grad_t *grads,
                                   const optim_scalars_t *scalars, const weft_optim_step_params_t *params)
{
    weft_status_t status = WEFT_OK;

    for (uint32_t i = 0; i < opt->group_count && status == WEFT_OK; i++) {
        const optim_group_t *g = &opt->groups[i];
        /* Muon: every matrix of the group in one batch. */
        status = g->algo == WEFT_OPTIM_MUON
                     ? weft_muon_cuda_step(&scalars[i].muon, (int)g->muon.schedule, (int)g->muon_rounding,
                                           g->muon.ns_steps, g->state[0], g->state[1], grads[i].data, grads[i].dtype,
                                           g->rows, g->cols, g->units, 0, opt->gpu->muon_work, opt->gpu->blas,
                                           stream)
                     : weft_adamw_cuda(&scalars[i].adamw, g->state[0], g->state[1], g->state[2], grads[i].data,
                                       grads[i].dtype, (size_t)(g->units * g->unit_elems), stream);
        for (uint32_t u = 0; u < g->units && status == WEFT_OK && (params->field_mask & WEFT_OPTIM_STEP_FIELD_WRITER);
             u++) {
            weft_optim_unit_t unit;
            optim_unit_init(opt, i, u, g->state[0] + (uint64_t)u * g->unit_elems, WEFT_MEMORY_CUDA, stream,
                            &unit);
            status = params->writer(params->writer_arg, &unit);
            if (status != WEFT_OK) {
                weft_log_error("weft_optim_step: the writer failed on group \"%s\" matrix %u: %s", g->name, u,
                               weft_status_string(status));
            }
        }
    }
    /* What destroy waits for. */
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaEventRecord(opt->gpu->done, stream));
    }
    return status;
}

weft_status_t optim_gpu_step(weft_optim_h opt, const weft_optim_grad_t *grads, const optim_scalars_t *scalars,
                             const weft_optim_step_params_t *params)
{
    cudaStream_t  stream = (params->field_mask & WEFT_OPTIM_STEP_FIELD_STREAM) ? (cudaStream_t)params->stream : NULL;
    weft_status_t status;
    int           saved;

    status = weft_cuda_enter(opt->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    status = opt->placement == WEFT_OPTIM_STAGED ? staged_step(opt, stream, grads, scalars, params)
                                                 : resident_step(opt, stream, grads, scalars, params);
    if (status != WEFT_OK) {
        opt->broken = 1;
    }
    weft_cuda_leave(opt->device, saved);
    return status;
}
