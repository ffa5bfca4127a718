/*
 * The cuda_ipc transport: same node, GPU to GPU. The registry maps the
 * leased slot's GPU arena into this process (CUDA IPC, once per arena
 * generation, see registry/arena.c); this backend replays the plan's
 * ranges from that mapping into the views, on a stream of the views' GPU,
 * and waits for an event recorded after the last copy.
 *
 * Large ranges go to the copy engines (cudaMemcpyAsync, which crosses
 * NVLink or PCIe to another GPU by itself); ranges up to
 * WEFT_CUDA_IPC_KERNEL_MAX bytes go through one batched kernel launch,
 * because a copy-engine operation costs microseconds however small it is
 * and a version of expert weights has hundreds of small scale tensors.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/env_config.h"
#include "common/log.h"
#include "kernels/copy_batch.h"
#include "transport/plan.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdlib.h>

typedef struct ipc_state {
    int               device;      /* of every view */
    cudaStream_t      stream;
    cudaEvent_t       done;
    uint64_t         *large;       /* indices into plan->ranges, copy engines */
    uint64_t          large_count;
    weft_copy_desc_t *small;       /* device array, batched kernel */
    uint64_t          small_count; /* their sources count from the arena's base */
} ipc_state_t;

/* Runs on the views' device, restoring the caller's. */
static weft_status_t enter_device(int device, int *saved)
{
    weft_status_t status = WEFT_CUDA_CHECK(cudaGetDevice(saved));

    if (status == WEFT_OK && *saved != device) {
        status = WEFT_CUDA_CHECK(cudaSetDevice(device));
    }
    return status;
}

static void leave_device(int device, int saved)
{
    if (saved != device) {
        (void)WEFT_CUDA_CHECK(cudaSetDevice(saved));
    }
}

static weft_status_t ipc_open(struct weft_plan *plan)
{
    ipc_state_t *state = calloc(1, sizeof(*state));

    if (state == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    state->device = -1;
    plan->backend = state;
    return WEFT_OK;
}

/* The GPU of every view; views must be device memory of one GPU. */
static weft_status_t views_device(const struct weft_plan *plan, int *device)
{
    *device = -1;
    for (uint32_t v = 0; v < plan->view_count; v++) {
        struct cudaPointerAttributes attr;
        weft_status_t status;

        if (plan->views[v].bytes == 0) {
            continue;
        }
        status = WEFT_CUDA_CHECK(cudaPointerGetAttributes(&attr, plan->views[v].data));
        if (status != WEFT_OK) {
            return status;
        }
        if (attr.type != cudaMemoryTypeDevice) {
            weft_log_error("plan: view \"%s\" at %p is not device memory (cuda_ipc writes into "
                           "GPU memory only)",
                           plan->views[v].name, (void *)plan->views[v].data);
            return WEFT_ERR_INVALID_PARAM;
        }
        if (*device >= 0 && attr.device != *device) {
            weft_log_error("plan: view \"%s\" is on GPU %d, earlier views on GPU %d: one plan "
                           "writes into one GPU",
                           plan->views[v].name, attr.device, *device);
            return WEFT_ERR_INVALID_PARAM;
        }
        *device = attr.device;
    }
    if (*device < 0) {
        weft_log_error("plan: no view has a byte to receive");
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_OK;
}

static weft_status_t ipc_build(struct weft_plan *plan)
{
    ipc_state_t      *state = plan->backend;
    weft_copy_desc_t *host_descs = NULL;
    long              kernel_max = 0;
    int               saved;
    weft_status_t     status;

    status = weft_config_long(WEFT_CONFIG_CUDA_IPC_KERNEL_MAX, 0, (long)WEFT_COPY_BATCH_MAX_RANGE,
                              &kernel_max);
    if (status != WEFT_OK) {
        return status;
    }
    status = views_device(plan, &state->device);
    if (status != WEFT_OK) {
        return status;
    }
    state->large = malloc((plan->ranges.count + 1) * sizeof(*state->large));
    host_descs = malloc((plan->ranges.count + 1) * sizeof(*host_descs));
    if (state->large == NULL || host_descs == NULL) {
        free(host_descs);
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint64_t i = 0; i < plan->ranges.count; i++) {
        const weft_copy_range_t *r = &plan->ranges.ranges[i];

        if (r->bytes <= (uint64_t)kernel_max) {
            host_descs[state->small_count++] = (weft_copy_desc_t){
                .src = r->src, .dst = (uint64_t)(uintptr_t)r->dst, .bytes = r->bytes};
        } else {
            state->large[state->large_count++] = i;
        }
    }

    status = enter_device(state->device, &saved);
    if (status != WEFT_OK) {
        free(host_descs);
        return status;
    }
    status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&state->done, cudaEventDisableTiming));
    }
    if (status == WEFT_OK && state->small_count > 0) {
        size_t bytes = state->small_count * sizeof(*host_descs);

        status = WEFT_CUDA_CHECK(cudaMalloc((void **)&state->small, bytes));
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(
                cudaMemcpy(state->small, host_descs, bytes, cudaMemcpyHostToDevice));
        }
    }
    leave_device(state->device, saved);
    free(host_descs);
    if (status == WEFT_OK) {
        weft_log_debug("plan: cuda_ipc into GPU %d: %" PRIu64 " copy-engine ranges, %" PRIu64
                       " ranges in one kernel (up to %ld bytes)",
                       state->device, state->large_count, state->small_count, kernel_max);
    }
    return status;
}

static weft_status_t ipc_post(struct weft_plan *plan, const weft_lease_t *lease)
{
    ipc_state_t   *state = plan->backend;
    const uint8_t *arena;
    int            saved;
    weft_status_t  status;

    status = enter_device(state->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    /* Maps the slot's arena into the views' GPU's context (or rebinds to a
     * new generation) first. */
    status = weft_plan_slot_base(plan, lease, &arena);
    if (status != WEFT_OK) {
        leave_device(state->device, saved);
        return status;
    }
    for (uint64_t i = 0; i < state->large_count && status == WEFT_OK; i++) {
        const weft_copy_range_t *r = &plan->ranges.ranges[state->large[i]];

        status = WEFT_CUDA_CHECK(
            cudaMemcpyAsync(r->dst, arena + r->src, r->bytes, cudaMemcpyDefault, state->stream));
    }
    if (status == WEFT_OK && state->small_count > 0) {
        status = weft_copy_batch_launch(state->small, state->small_count, arena, state->stream);
    }
    if (status == WEFT_OK) {
        status = WEFT_CUDA_CHECK(cudaEventRecord(state->done, state->stream));
    }
    if (status != WEFT_OK) {
        /* Some copies may be queued: let them end before the lease goes. */
        (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(state->stream));
    }
    leave_device(state->device, saved);
    return status == WEFT_OK ? WEFT_INPROGRESS : status;
}

static weft_status_t ipc_wait(struct weft_plan *plan)
{
    ipc_state_t *state = plan->backend;

    /* Errors of the copies themselves (a bad mapping, a device fault)
     * surface here, and the version is not recorded. */
    return WEFT_CUDA_CHECK(cudaEventSynchronize(state->done));
}

static void ipc_close(struct weft_plan *plan)
{
    ipc_state_t *state = plan->backend;
    int          saved;

    if (state == NULL) {
        return;
    }
    if (state->device >= 0 && enter_device(state->device, &saved) == WEFT_OK) {
        if (state->stream != NULL) {
            (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(state->stream));
        }
        if (state->small != NULL) {
            (void)WEFT_CUDA_CHECK(cudaFree(state->small));
        }
        if (state->done != NULL) {
            (void)WEFT_CUDA_CHECK(cudaEventDestroy(state->done));
        }
        if (state->stream != NULL) {
            (void)WEFT_CUDA_CHECK(cudaStreamDestroy(state->stream));
        }
        leave_device(state->device, saved);
    }
    free(state->large);
    free(state);
    plan->backend = NULL;
}

const weft_transport_ops_t weft_transport_cuda_ipc_ops = {
    .name       = "cuda_ipc",
    .src_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_CUDA),
    .dst_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_CUDA),
    .open       = ipc_open,
    .build      = ipc_build,
    .post       = ipc_post,
    .wait       = ipc_wait,
    .close      = ipc_close,
};
