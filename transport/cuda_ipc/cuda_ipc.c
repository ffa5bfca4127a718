/*
 * The cuda_ipc transport: same node, GPU to GPU. The registry maps the
 * leased slot's GPU arena into this process (CUDA IPC, once per arena
 * generation, see registry/arena.c); this backend replays the plan's
 * ranges from that mapping into the views, on streams of the views' GPU,
 * and waits for events recorded after the last copies.
 *
 * Which engine copies a range (WEFT_CUDA_IPC_KERNEL_MAX):
 *  - arena and views on one GPU: every range through the batched kernel
 *    (copy_batch.cu), as fast as the copy engines on large ranges
 *    and far faster on ranges that cannot merge (expert-ordered
 *    registries), which cost one copy-engine operation (microseconds)
 *    each but only a CTA each in one launch.
 *  - across GPUs: ranges up to 16 MiB through the kernel, larger ones
 *    through the copy engines, which cross NVLink at the link's full
 *    speed (the kernel comes close) without taking SMs from the rollout
 *    engine. An expert-ordered version (1536 ranges of 0.4-3 MiB) went
 *    from 0.62 × a peer copy on the copy engines to 0.95 this way
 *    (perf/results/2026-11-29-ipc-h200x2-{e150902,a3c78a0}.json). The
 *    kernel has a stream of its own, so it runs beside the copy engines;
 *    these are spread over WEFT_CUDA_IPC_STREAMS streams.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/env_config.h"
#include "common/log.h"
#include "transport/cuda_ipc/copy_batch.h"
#include "transport/plan/plan.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define IPC_STREAMS_MAX       16
#define IPC_CROSS_KERNEL_MAX  (UINT64_C(16) << 20) /* "auto" across GPUs */

typedef struct ipc_state {
    int               device;      /* of every view */
    /* Stream 0 runs the kernel, streams 1..streams-1 the copy engines. */
    int               streams;     /* in use, 1..IPC_STREAMS_MAX + 1 */
    cudaStream_t      stream[IPC_STREAMS_MAX + 1];
    cudaEvent_t       done[IPC_STREAMS_MAX + 1];
    uint64_t         *large;       /* indices into plan->ranges, copy engines */
    uint64_t          large_count;
    weft_copy_desc_t *chunks;      /* device array, batched kernel */
    uint64_t          chunk_count; /* their sources count from the arena's base */
} ipc_state_t;

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
        int           view_device = -1;
        weft_status_t status;

        if (plan->views[v].bytes == 0) {
            continue;
        }
        status = weft_cuda_pointer_device(plan->views[v].data, &view_device);
        if (status == WEFT_ERR_INVALID_PARAM) {
            weft_log_error("plan: view \"%s\" at %p is not device memory (cuda_ipc writes into "
                           "GPU memory only)",
                           plan->views[v].name, (void *)plan->views[v].data);
        }
        if (status != WEFT_OK) {
            return status;
        }
        if (*device >= 0 && view_device != *device) {
            weft_log_error("plan: view \"%s\" is on GPU %d, earlier views on GPU %d: one plan "
                           "writes into one GPU",
                           plan->views[v].name, view_device, *device);
            return WEFT_ERR_INVALID_PARAM;
        }
        *device = view_device;
    }
    if (*device < 0) {
        weft_log_error("plan: no view has a byte to receive");
        return WEFT_ERR_INVALID_PARAM;
    }
    return WEFT_OK;
}

/*
 * The largest range the batched kernel copies: WEFT_CUDA_IPC_KERNEL_MAX,
 * whose "auto" means every range on one GPU and 16 MiB across GPUs.
 */
static weft_status_t kernel_max_bytes(const struct weft_plan *plan, int views_device, uint64_t *max)
{
    const char       *value = weft_config_value(WEFT_CONFIG_CUDA_IPC_KERNEL_MAX);
    weft_arena_info_t arena;
    weft_status_t     status;

    if (strcmp(value, "auto") != 0) {
        return weft_config_size(WEFT_CONFIG_CUDA_IPC_KERNEL_MAX, max);
    }
    status = weft_registry_arena_info(plan->reg, &arena);
    if (status != WEFT_OK) {
        return status;
    }
    *max = arena.device == views_device ? UINT64_MAX : IPC_CROSS_KERNEL_MAX;
    return WEFT_OK;
}

/* Copy-engine ranges for the streams, kernel ranges cut into chunks. */
static weft_status_t split_ranges(struct weft_plan *plan, uint64_t kernel_max,
                                  weft_copy_desc_t **chunks)
{
    ipc_state_t *state = plan->backend;
    uint64_t     count = 0;

    for (uint64_t i = 0; i < plan->ranges.count; i++) {
        const weft_copy_range_t *r = &plan->ranges.ranges[i];

        if (r->bytes <= kernel_max) {
            count += weft_copy_batch_split(r->src, 0, r->bytes, NULL);
        }
    }
    state->large = malloc((plan->ranges.count + 1) * sizeof(*state->large));
    *chunks = malloc((count + 1) * sizeof(**chunks));
    if (state->large == NULL || *chunks == NULL) {
        free(*chunks);
        *chunks = NULL;
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint64_t i = 0; i < plan->ranges.count; i++) {
        const weft_copy_range_t *r = &plan->ranges.ranges[i];

        if (r->bytes <= kernel_max) {
            state->chunk_count += weft_copy_batch_split(r->src, (uint64_t)(uintptr_t)r->dst,
                                                        r->bytes, *chunks + state->chunk_count);
        } else {
            state->large[state->large_count++] = i;
        }
    }
    return WEFT_OK;
}

static weft_status_t ipc_build(struct weft_plan *plan)
{
    ipc_state_t      *state = plan->backend;
    weft_copy_desc_t *host_chunks = NULL;
    uint64_t          kernel_max = 0;
    long              streams = 1;
    int               saved;
    weft_status_t     status;

    status = weft_config_long(WEFT_CONFIG_CUDA_IPC_STREAMS, 1, IPC_STREAMS_MAX, &streams);
    if (status == WEFT_OK) {
        status = views_device(plan, &state->device);
    }
    if (status == WEFT_OK) {
        status = kernel_max_bytes(plan, state->device, &kernel_max);
    }
    if (status == WEFT_OK) {
        status = split_ranges(plan, kernel_max, &host_chunks);
    }
    if (status != WEFT_OK) {
        return status;
    }
    /* The kernel's stream, then no more copy-engine streams than ranges
     * to spread over them. */
    state->streams = 1 + (int)(state->large_count < (uint64_t)streams ? state->large_count : (uint64_t)streams);

    status = weft_cuda_enter(state->device, &saved);
    if (status != WEFT_OK) {
        free(host_chunks);
        return status;
    }
    for (int k = 0; k < state->streams && status == WEFT_OK; k++) {
        status = WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&state->stream[k], cudaStreamNonBlocking));
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&state->done[k], cudaEventDisableTiming));
        }
    }
    if (status == WEFT_OK && state->chunk_count > 0) {
        size_t bytes = state->chunk_count * sizeof(*host_chunks);

        status = WEFT_CUDA_CHECK(cudaMalloc((void **)&state->chunks, bytes));
        if (status == WEFT_OK) {
            status = WEFT_CUDA_CHECK(
                cudaMemcpy(state->chunks, host_chunks, bytes, cudaMemcpyHostToDevice));
        }
    }
    weft_cuda_leave(state->device, saved);
    free(host_chunks);
    if (status == WEFT_OK) {
        weft_log_debug("plan: cuda_ipc into GPU %d: %" PRIu64 " copy-engine ranges on %d streams, %" PRIu64
                       " kernel chunks (ranges up to %" PRIu64 " bytes)",
                       state->device, state->large_count, state->streams - 1, state->chunk_count, kernel_max);
    }
    return status;
}

static weft_status_t ipc_post(struct weft_plan *plan, const weft_lease_t *lease)
{
    ipc_state_t   *state = plan->backend;
    const uint8_t *arena;
    int            saved;
    weft_status_t  status;

    status = weft_cuda_enter(state->device, &saved);
    if (status != WEFT_OK) {
        return status;
    }
    /* Maps the slot's arena into the views' GPU's context (or rebinds to a
     * new generation) first. */
    status = weft_plan_slot_base(plan, lease, &arena);
    if (status != WEFT_OK) {
        weft_cuda_leave(state->device, saved);
        return status;
    }
    /* The copy engines and the kernel work at once, on their own streams. */
    for (uint64_t i = 0; i < state->large_count && status == WEFT_OK; i++) {
        const weft_copy_range_t *r = &plan->ranges.ranges[state->large[i]];

        status = WEFT_CUDA_CHECK(cudaMemcpyAsync(r->dst, arena + r->src, r->bytes, cudaMemcpyDefault,
                                                 state->stream[1 + i % (uint64_t)(state->streams - 1)]));
    }
    if (status == WEFT_OK && state->chunk_count > 0) {
        status = weft_copy_batch_launch(state->chunks, state->chunk_count, arena, state->stream[0]);
    }
    for (int k = 0; k < state->streams && status == WEFT_OK; k++) {
        status = WEFT_CUDA_CHECK(cudaEventRecord(state->done[k], state->stream[k]));
    }
    if (status != WEFT_OK) {
        /* Some copies may be queued: let them end before the lease goes. */
        for (int k = 0; k < state->streams; k++) {
            (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(state->stream[k]));
        }
    }
    weft_cuda_leave(state->device, saved);
    return status == WEFT_OK ? WEFT_INPROGRESS : status;
}

static weft_status_t ipc_wait(struct weft_plan *plan)
{
    ipc_state_t *state = plan->backend;

    weft_status_t status = WEFT_OK;

    /* Errors of the copies themselves (a bad mapping, a device fault)
     * surface here, and the version is not recorded. Every stream is
     * waited for, even after an error: the lease outlives no copy. */
    for (int k = 0; k < state->streams; k++) {
        weft_status_t s = WEFT_CUDA_CHECK(cudaEventSynchronize(state->done[k]));

        status = status == WEFT_OK ? s : status;
    }
    return status;
}

static void ipc_close(struct weft_plan *plan)
{
    ipc_state_t *state = plan->backend;
    int          saved;

    if (state == NULL) {
        return;
    }
    if (state->device >= 0 && weft_cuda_enter(state->device, &saved) == WEFT_OK) {
        for (int k = 0; k < state->streams; k++) {
            if (state->stream[k] != NULL) {
                (void)WEFT_CUDA_CHECK(cudaStreamSynchronize(state->stream[k]));
            }
        }
        if (state->chunks != NULL) {
            (void)WEFT_CUDA_CHECK(cudaFree(state->chunks));
        }
        for (int k = 0; k < state->streams; k++) {
            if (state->done[k] != NULL) {
                (void)WEFT_CUDA_CHECK(cudaEventDestroy(state->done[k]));
            }
            if (state->stream[k] != NULL) {
                (void)WEFT_CUDA_CHECK(cudaStreamDestroy(state->stream[k]));
            }
        }
        weft_cuda_leave(state->device, saved);
    }
    free(state->large);
    free(state);
    plan->backend = NULL;
}

const weft_plan_ops_t weft_cuda_ipc_plan_ops = {
    .name       = "cuda_ipc",
    .src_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_CUDA),
    .dst_memory = WEFT_MEMORY_BIT(WEFT_MEMORY_CUDA),
    .open       = ipc_open,
    .build      = ipc_build,
    .post       = ipc_post,
    .wait       = ipc_wait,
    .close      = ipc_close,
};
