/*
 * weft-perf update's trainer: its AdamW (or Muon) groups, initial masters
 * and gradients, the writer that puts FP8 W, WT and scales of each updated
 * matrix into the version being written and sums them, the announcement
 * of finished layers (streaming); on a GPU, the device arrays, streams and
 * sample copies, and the probe that asks a child about the GPU.
 */
#include "config.h"

#include "lib/proc.h"
#include "lib/sysinfo.h"
#include "perf.h"
#include "update.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifdef HAVE_CUDA
static weft_status_t cuda_status(cudaError_t err, const char *what)
{
    if (err == cudaSuccess) {
        return WEFT_OK;
    }
    fprintf(stderr, "weft-perf update: %s: %s\n", what, cudaGetErrorString(err));
    return WEFT_ERR_CUDA;
}

/* The device arrays: two gradient sets of every parameter, the checksums,
 * the step's stream. */
static weft_status_t trainer_gpu_alloc(update_trainer_t *t, const update_options_t *o, update_shared_t *shared)
{
    const uint64_t params = o->layers * o->experts * 3 * o->intermediate * o->hidden;
    weft_status_t  status = cuda_status(cudaSetDevice(o->device), "cudaSetDevice");

    for (int s = 0; s < 2 && status == WEFT_OK; s++) {
        status = cuda_status(cudaMalloc(&t->dev_grads[s], params * sizeof(float)), "cudaMalloc (gradients)");
    }
    if (status == WEFT_OK) {
        status = cuda_status(cudaMalloc((void **)&t->dev_checksums, update_tensor_count(o) * sizeof(uint64_t)),
                             "cudaMalloc (checksums)");
    }
    if (status == WEFT_OK) {
        cudaStream_t stream;
        status    = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
        t->stream = status == WEFT_OK ? stream : NULL;
    }
    if (status == WEFT_OK) {
        /* Page-locked, so that the writer's copies of the sampled expert
         * go home at PCIe speed, asynchronously, during the step (from
         * pageable memory they took 16 ms of the tail). */
        void *rows = update_samples(shared, o, 0);
        status     = cuda_status(cudaHostRegister(rows, UPDATE_RING * update_sample_bytes(o), cudaHostRegisterDefault),
                                 "cudaHostRegister (samples)");
        t->pinned_samples = status == WEFT_OK ? rows : NULL;
    }
    if (status == WEFT_OK) {
        cudaStream_t stream;
        status             = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
        t->announce_stream = status == WEFT_OK ? stream : NULL;
    }
    for (int i = 0; i < 16 && status == WEFT_OK; i++) {
        cudaEvent_t event;
        status       = cuda_status(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "event");
        t->events[i] = status == WEFT_OK ? event : NULL;
    }
    return status;
}

/* Remembers a slot stream the writer's work went to in this version. */
static weft_status_t trainer_gpu_note_stream(update_trainer_t *t, void *stream)
{
    for (int i = 0; i < t->nstreams; i++) {
        if (t->streams[i] == stream) {
            return WEFT_OK;
        }
    }
    if (t->nstreams == 16) {
        fprintf(stderr, "weft-perf update: more than 16 slot streams\n");
        return WEFT_ERR_NO_SPACE;
    }
    t->streams[t->nstreams++] = stream;
    return WEFT_OK;
}

/* Runs on CUDA's host-function thread; write_ready calls no CUDA. */
static void CUDART_CB announce_fn(void *arg)
{
    struct announcement *a = arg;

    if (weft_registry_write_ready(a->reg, a->version, a->tensors) != WEFT_OK) {
        __atomic_store_n(a->failed, 1, __ATOMIC_RELEASE);
    }
}

/* Announces the first `tensors` tensors (every layer up to `layer`) once
 * the work enqueued so far on every slot stream is done. */
static weft_status_t trainer_gpu_announce(update_trainer_t *t, uint64_t layer, uint32_t tensors)
{
    cudaStream_t  announce = (cudaStream_t)t->announce_stream;
    weft_status_t status = WEFT_OK;

    for (int i = 0; i < t->nstreams && status == WEFT_OK; i++) {
        status = cuda_status(cudaEventRecord((cudaEvent_t)t->events[i], (cudaStream_t)t->streams[i]), "event");
        if (status == WEFT_OK) {
            status = cuda_status(cudaStreamWaitEvent(announce, (cudaEvent_t)t->events[i], 0), "stream wait");
        }
    }
    t->announcements[layer] = (struct announcement){.reg = t->reg, .version = t->version, .tensors = tensors,
                                                    .failed = &t->announce_failed};
    if (status == WEFT_OK) {
        status = cuda_status(cudaLaunchHostFunc(announce, announce_fn, &t->announcements[layer]), "host function");
    }
    return status;
}

/* Group g's gradients of steps 1 and 2 (odd and even steps use them in
 * turn), made on the host and copied once. */
static weft_status_t trainer_gpu_grads(update_trainer_t *t, uint32_t g, uint64_t offset, uint64_t n, uint64_t cols)
{
    float        *host = malloc(n * sizeof(float));
    weft_status_t status = host != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;

    for (int s = 0; s < 2 && status == WEFT_OK; s++) {
        update_grad_fill(host, n, cols, (uint64_t)s + 1, g);
        status = cuda_status(cudaMemcpy((float *)t->dev_grads[s] + offset, host, n * sizeof(float),
                                        cudaMemcpyHostToDevice),
                             "gradient copy");
    }
    free(host);
    t->grads[g] = (weft_optim_grad_t){.data = (float *)t->dev_grads[0] + offset, .dtype = WEFT_DTYPE_FP32,
                                      .memory = WEFT_MEMORY_CUDA};
    return status;
}

/* Waits for the GPU step's work (the caller times the step with it). */
weft_status_t update_trainer_gpu_wait(update_trainer_t *t)
{
    return cuda_status(cudaStreamSynchronize((cudaStream_t)t->stream), "the step");
}

/* After a GPU step: waits for it, then brings home the checksums the
 * writer computed (the sampled expert's bytes came home during the step,
 * see update_write_and_sum), for the engines to hold their copies against. */
weft_status_t update_trainer_gpu_finish(update_trainer_t *t)
{
    weft_status_t status = cuda_status(cudaStreamSynchronize((cudaStream_t)t->stream), "the step");

    /* Every announcement made, before the publish. */
    if (status == WEFT_OK) {
        status = cuda_status(cudaStreamSynchronize((cudaStream_t)t->announce_stream), "the announcements");
    }
    if (status == WEFT_OK && __atomic_load_n(&t->announce_failed, __ATOMIC_ACQUIRE)) {
        fprintf(stderr, "weft-perf update: version %llu: a layer's announcement failed\n",
                (unsigned long long)t->version);
        status = WEFT_ERR_STATE;
    }
    if (status == WEFT_OK) {
        status = cuda_status(cudaMemcpy(t->checksums, t->dev_checksums,
                                        update_tensor_count(t->o) * sizeof(uint64_t), cudaMemcpyDeviceToHost),
                             "checksum copy");
    }
    return status;
}

/* The sampled expert's three tensors just written by `unit` (an expert of
 * layer `layer`, projection `p`), copied home on the unit's stream after
 * the writer's kernels, into their place in the sample row: every layer
 * and kind one after another. */
static weft_status_t trainer_gpu_sample(update_trainer_t *t, const weft_optim_unit_t *unit, uint64_t layer, int p)
{
    uint64_t      offset = 0;
    weft_status_t status = WEFT_OK;

    for (int k = 0; k < UPDATE_KINDS; k++) {
        offset += perf_expert_kind_bytes(&t->kinds[k]) * (k < 3 * p ? layer + 1 : layer);
    }
    for (int k = 3 * p; k < 3 * p + 3 && status == WEFT_OK; k++) {
        const uint64_t bytes = perf_expert_kind_bytes(&t->kinds[k]);
        void          *data;
        status = weft_registry_write_tensor(t->reg, update_tensor_index(t->o, layer, k, (uint64_t)unit->expert), &data);
        if (status == WEFT_OK) {
            status = cuda_status(cudaMemcpyAsync(t->samples + offset, data, bytes, cudaMemcpyDeviceToHost,
                                                 (cudaStream_t)unit->stream),
                                 "sample copy");
        }
        offset += bytes;
    }
    return status;
}

/* How many GPUs there are and the free memory of `device`, asked in a
 * child so that this process stays free of CUDA until it has forked its
 * engines. */
int update_gpu_probe(perf_children_t *children, int device, uint64_t *free_bytes)
{
    uint64_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int       code = 0, count = 0;
    pid_t     pid;

    *free_bytes = 0;
    if (page == MAP_FAILED) {
        return 0;
    }
    page[0] = 0;
    pid = perf_fork(children);
    if (pid == 0) {
        int    n = 0;
        size_t free_mem = 0, total = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            n = 0;
        }
        if (n > device && cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free_mem, &total) == cudaSuccess) {
            page[0] = free_mem;
        }
        _exit(n > 100 ? 100 : n);
    }
    if (pid >= 0 && perf_wait_child(children, pid, 60000, &code) == 0 && WIFEXITED(code)) {
        count       = WEXITSTATUS(code);
        *free_bytes = page[0];
    }
    munmap(page, 4096);
    return count;
}

static void trainer_gpu_free(update_trainer_t *t)
{
    if (!t->o->gpu) {
        return; /* a host run never touches CUDA */
    }
    if (t->stream != NULL) {
        cudaStreamSynchronize((cudaStream_t)t->stream);
        cudaStreamDestroy((cudaStream_t)t->stream);
    }
    cudaFree(t->dev_grads[0]);
    cudaFree(t->dev_grads[1]);
    cudaFree(t->dev_checksums);
    if (t->pinned_samples != NULL) {
        cudaHostUnregister(t->pinned_samples);
    }
    if (t->announce_stream != NULL) {
        cudaStreamSynchronize((cudaStream_t)t->announce_stream);
        cudaStreamDestroy((cudaStream_t)t->announce_stream);
    }
    for (int i = 0; i < 16; i++) {
        if (t->events[i] != NULL) {
            cudaEventDestroy((cudaEvent_t)t->events[i]);
        }
    }
}
#else
static weft_status_t trainer_gpu_alloc(update_trainer_t *t, const update_options_t *o, update_shared_t *shared)
{
    (void)t;
    (void)o;
    (void)shared;
    return WEFT_ERR_UNSUPPORTED;
}

static weft_status_t trainer_gpu_grads(update_trainer_t *t, uint32_t g, uint64_t offset, uint64_t n, uint64_t cols)
{
    (void)t;
    (void)g;
    (void)offset;
    (void)n;
    (void)cols;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t update_trainer_gpu_wait(update_trainer_t *t)
{
    (void)t;
    return WEFT_ERR_UNSUPPORTED;
}

weft_status_t update_trainer_gpu_finish(update_trainer_t *t)
{
    (void)t;
    return WEFT_ERR_UNSUPPORTED;
}

static weft_status_t trainer_gpu_sample(update_trainer_t *t, const weft_optim_unit_t *unit, uint64_t layer, int p)
{
    (void)t;
    (void)unit;
    (void)layer;
    (void)p;
    return WEFT_ERR_UNSUPPORTED;
}

static weft_status_t trainer_gpu_note_stream(update_trainer_t *t, void *stream)
{
    (void)t;
    (void)stream;
    return WEFT_ERR_UNSUPPORTED;
}

static weft_status_t trainer_gpu_announce(update_trainer_t *t, uint64_t layer, uint32_t tensors)
{
    (void)t;
    (void)layer;
    (void)tensors;
    return WEFT_ERR_UNSUPPORTED;
}

int update_gpu_probe(perf_children_t *children, int device, uint64_t *free_bytes)
{
    (void)children;
    (void)device;
    *free_bytes = 0;
    return 0;
}

static void trainer_gpu_free(update_trainer_t *t)
{
    (void)t;
}
#endif

weft_status_t update_trainer_create(update_trainer_t *t, const update_options_t *o, weft_registry_h reg,
                                    update_shared_t *shared)
{
    weft_optim_params_t        op = {.field_mask = o->threads ? WEFT_OPTIM_FIELD_THREADS : 0,
                                     .threads    = (uint32_t)o->threads};
    uint64_t                   grad_offset = 0;
    weft_optim_writer_params_t wp = {.field_mask = WEFT_OPTIM_WRITER_FIELD_QUANT,
                                     .quant      = {.field_mask = WEFT_QUANT_FIELD_BLOCK | WEFT_QUANT_FIELD_FORMULA,
                                                    .block = (uint32_t)o->block, .formula = o->formula}};
    weft_status_t              status;

    memset(t, 0, sizeof(*t));
    t->o      = o;
    t->reg    = reg;
    t->groups = (uint32_t)(o->layers * UPDATE_PROJS);
    update_kinds(o, t->kinds);
    t->grads = calloc(t->groups, sizeof(*t->grads));
    if (t->grads == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    if (o->gpu) {
        op = (weft_optim_params_t){.field_mask = WEFT_OPTIM_FIELD_PLACEMENT | WEFT_OPTIM_FIELD_DEVICE,
                                   .placement = WEFT_OPTIM_STAGED, .device = o->device};
        status = trainer_gpu_alloc(t, o, shared);
        if (status != WEFT_OK) {
            return status;
        }
    }
    status = weft_optim_create(&op, &t->opt);
    for (uint64_t l = 0; l < o->layers && status == WEFT_OK; l++) {
        for (int p = 0; p < UPDATE_PROJS && status == WEFT_OK; p++) {
            const tensor_kind_t    *kw = &t->kinds[3 * p];
            const uint32_t          g  = (uint32_t)(l * UPDATE_PROJS + (uint64_t)p);
            char                    gname[WEFT_OPTIM_NAME_MAX];
            weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_FIELD_ADAMW | WEFT_OPTIM_GROUP_FIELD_MUON,
                                         .name = gname, .algo = (weft_optim_algo_t)o->optimizer,
                                         .experts = (uint32_t)o->experts, .rows = kw->rows, .cols = kw->cols,
                                         .adamw = {.lr = o->lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                                   .weight_decay = 0.01},
                                         .muon = {.lr = o->lr, .momentum = 0.95, .weight_decay = 0.01,
                                                  .nesterov = 1, .ns_steps = 5, .scale = WEFT_MUON_SCALE_SHAPE,
                                                  .schedule = WEFT_MUON_NS_SIMPLE}};
            float *master;

            snprintf(gname, sizeof(gname), "model.layers.%llu.mlp.experts.{E}.%s", (unsigned long long)l, kw->proj);
            status = weft_optim_add_group(t->opt, &d, NULL);
            if (status == WEFT_OK) {
                status = weft_optim_group_state(t->opt, g, WEFT_OPTIM_STATE_MASTER, &master);
            }
            for (uint64_t e = 0; e < o->experts && status == WEFT_OK; e++) {
                update_master_fill(master + e * kw->rows * kw->cols, kw->rows, kw->cols, l, e, p);
            }
            if (status == WEFT_OK && o->gpu) {
                const uint64_t n = o->experts * kw->rows * kw->cols;
                status = trainer_gpu_grads(t, g, grad_offset, n, kw->cols);
                grad_offset += n;
            } else if (status == WEFT_OK) {
                t->grads[g] = (weft_optim_grad_t){.data   = malloc(o->experts * kw->rows * kw->cols * sizeof(float)),
                                                  .dtype  = WEFT_DTYPE_FP32,
                                                  .memory = WEFT_MEMORY_HOST};
                status = t->grads[g].data != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
            }
        }
    }
    if (status == WEFT_OK) {
        status = weft_optim_writer_create(t->opt, reg, &wp, &t->fp8);
    }
    return status;
}

void update_trainer_destroy(update_trainer_t *t)
{
    weft_optim_writer_destroy(t->fp8);
    weft_optim_destroy(t->opt);
    for (uint32_t g = 0; g < t->groups && t->grads != NULL && !t->o->gpu; g++) {
        free((void *)t->grads[g].data);
    }
    free(t->grads);
    trainer_gpu_free(t);
}

/* Streaming: once every matrix of `layer` is written (both projections,
 * every expert), its tensors are final: the layers before it are too
 * (the writer gets the matrices in group order), so every tensor up to
 * the layer's last is announced. On a GPU, once the work is done. */
static weft_status_t announce_when_layer_done(update_trainer_t *t, const weft_optim_unit_t *unit, uint64_t layer)
{
    const uint32_t tensors = update_tensor_index(t->o, layer + 1, 0, 0);
    weft_status_t  status = WEFT_OK;

    if (unit->memory == WEFT_MEMORY_CUDA) {
        status = trainer_gpu_note_stream(t, unit->stream);
    }
    if (status != WEFT_OK || ++t->layer_units[layer] < UPDATE_PROJS * t->o->experts) {
        return status;
    }
    return unit->memory == WEFT_MEMORY_CUDA ? trainer_gpu_announce(t, layer, tensors)
                                            : weft_registry_write_ready(t->reg, t->version, tensors);
}

/* The step's writer: the FP8 writer, then the checksums of the three
 * tensors it wrote, while they are in cache; on a GPU, the sampled
 * expert's tensors are copied home as well. */
weft_status_t update_write_and_sum(void *arg, const weft_optim_unit_t *unit)
{
    update_trainer_t *t = arg;
    const uint64_t    layer = unit->group / UPDATE_PROJS, expert = (uint64_t)unit->expert;
    const int         p = (int)(unit->group % UPDATE_PROJS);
    uint64_t          t0 = perf_now_ns(), t1;
    weft_status_t     status = weft_optim_writer_write(t->fp8, unit);

    t1 = perf_now_ns();
    t->quant_ns += t1 - t0;
    for (int k = 3 * p; k < 3 * p + 3 && status == WEFT_OK; k++) {
        const uint32_t i = update_tensor_index(t->o, layer, k, expert);
        void          *data;
        status = weft_registry_write_tensor(t->reg, i, &data);
        if (status == WEFT_OK && unit->memory == WEFT_MEMORY_CUDA) {
            /* Enqueued after the writer's kernels on the slot's stream;
             * the step's end brings the sums home. */
            status = weft_checksum_cuda_async(data, perf_expert_kind_bytes(&t->kinds[k]), &t->dev_checksums[i],
                                              unit->stream);
        } else if (status == WEFT_OK) {
            t->checksums[i] = weft_checksum_host(data, perf_expert_kind_bytes(&t->kinds[k]));
        }
    }
    if (status == WEFT_OK && unit->memory == WEFT_MEMORY_CUDA && expert == update_sample_expert(t->o, t->version)) {
        status = trainer_gpu_sample(t, unit, layer, p);
    }
    if (status == WEFT_OK && !t->o->whole_versions) {
        status = announce_when_layer_done(t, unit, layer);
    }
    t->sum_ns += perf_now_ns() - t1;
    /* --kill-trainer: a crash with half of the version's matrices written. */
    if (t->version == t->o->kill_trainer_at &&
        ++t->units >= t->o->layers * UPDATE_PROJS * t->o->experts / 2) {
        fflush(NULL);
        raise(SIGKILL);
    }
    return status;
}

