/*
 * weft-perf update's consumers, each a process forked by the trainer:
 *  - on the host: buffers in host memory, the host transport; each version
 *    acknowledged once copied, then every tensor's checksum checked
 *    against the producer's;
 *  - on a GPU (an engine colocated with the trainer): fused device tensors
 *    as SGLang holds them (w13 [E, 2I, H], w2 [E, H, I], their transposes
 *    and scales), one receive view per expert, the cuda_ipc transport; each
 *    version verified before it is acknowledged: every tensor's checksum
 *    computed on the GPU against the producer's, and every byte of one
 *    sampled expert a layer and kind against the producer's copy. A
 *    version that fails is reported failed, never received.
 */
#include "config.h"

#include "lib/sysinfo.h"
#include "update.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* --kill-engine: the version in whose transfer this run of engine `id`
 * dies (engine 0's first run only); 0 when it does not. */
static uint64_t death_version(const update_options_t *o, const update_shared_t *shared, int id)
{
    return o->kill_engine_at != 0 && id == 0 && shared->consumer[id].incarnation == 0 ? o->kill_engine_at : 0;
}

/*
 * What a consumer receives through: a plan over every view (whole
 * versions) or one a layer (streaming: each layer is copied once the
 * trainer announced it final, before the version is published), and the
 * plan over half of the views with which engine 0 dies in --kill-engine.
 * layer_done, when set, is called once a layer is in place (a GPU engine
 * enqueues that layer's verification there).
 */
typedef struct receiver {
    weft_plan_h whole, half;
    weft_plan_h layer[UPDATE_MAX_LAYERS];
    int         streaming;
    int       (*layer_done)(void *arg, uint64_t version, uint64_t layer);
    void       *arg;
} receiver_t;

/* Views of layer l: the tensor indices of a layer follow one another. */
static size_t layer_views(const update_options_t *o) { return (size_t)(UPDATE_KINDS * o->experts); }

static int receiver_create(const update_options_t *o, const update_shared_t *shared, int id, weft_registry_h reg,
                           weft_transport_t transport, const weft_recv_view_t *views, size_t count, receiver_t *r)
{
    weft_status_t status = WEFT_OK;

    r->streaming = !o->whole_versions;
    if (!r->streaming) {
        status = weft_plan_create(reg, transport, views, count, &r->whole);
    }
    for (uint64_t l = 0; r->streaming && l < o->layers && status == WEFT_OK; l++) {
        status = weft_plan_create(reg, transport, views + l * layer_views(o), layer_views(o), &r->layer[l]);
    }
    if (status == WEFT_OK && death_version(o, shared, id) != 0) {
        status = weft_plan_create(reg, transport, views, count / 2 + 1, &r->half);
    }
    if (status != WEFT_OK) {
        fprintf(stderr, "consumer %d: plans: %s\n", id, weft_status_string(status));
        return -1;
    }
    return 0;
}

#ifdef HAVE_CUDA
/* The plans bound to new views (--offload, GPU engines only). */
static weft_status_t receiver_rebind(const update_options_t *o, receiver_t *r, const weft_recv_view_t *views,
                                     size_t count)
{
    weft_status_t status = r->whole != NULL ? weft_plan_rebind(r->whole, views, count) : WEFT_OK;

    for (uint64_t l = 0; r->streaming && l < o->layers && status == WEFT_OK; l++) {
        status = weft_plan_rebind(r->layer[l], views + l * layer_views(o), layer_views(o));
    }
    if (status == WEFT_OK && r->half != NULL) {
        status = weft_plan_rebind(r->half, views, count / 2 + 1);
    }
    return status;
}
#endif

static void receiver_destroy(const update_options_t *o, receiver_t *r)
{
    weft_plan_destroy(r->whole);
    weft_plan_destroy(r->half);
    for (uint64_t l = 0; l < o->layers; l++) {
        weft_plan_destroy(r->layer[l]);
    }
}

/* Copies half of the version, then dies holding the lease, before it
 * acknowledged anything: a process killed in the middle of a transfer. */
static void die_mid_transfer(weft_plan_h half, const weft_lease_t *lease)
{
    if (half != NULL) {
        (void)weft_plan_copy(half, lease);
    }
    raise(SIGKILL);
}

/* One plan's copy, its time added to the consumer's copy time. */
static weft_status_t timed_copy(const update_options_t *o, update_shared_t *shared, int id, weft_plan_h plan,
                                const weft_lease_t *lease)
{
    const uint64_t t0 = perf_now_ns();
    weft_status_t  status = weft_plan_copy(plan, lease);

    if (lease->version > o->warmup) {
        shared->consumer[id].copy_ns += perf_now_ns() - t0;
    }
    return status;
}

/* When this consumer learned that `version` was published. */
static void note_wake(update_shared_t *shared, int id, uint64_t version)
{
    shared->consumer[id].wake_ns[version <= UPDATE_MAX_VERSIONS ? version : 0] = perf_now_ns();
}

/* Streaming: each layer as soon as it is final, then the publish. */
static weft_status_t receive_layers(const update_options_t *o, update_shared_t *shared, int id, weft_registry_h reg,
                                    receiver_t *r, const weft_lease_t *lease)
{
    uint32_t      ready;
    int           published;
    weft_status_t status = WEFT_OK;

    for (uint64_t l = 0; l < o->layers && status == WEFT_OK; l++) {
        status = weft_registry_lease_ready(reg, lease, (uint32_t)((l + 1) * layer_views(o)), 120000000, &ready,
                                           &published);
        if (status == WEFT_OK) {
            status = timed_copy(o, shared, id, r->layer[l], lease);
        }
        if (status == WEFT_OK && r->layer_done != NULL && r->layer_done(r->arg, lease->version, l) != 0) {
            status = WEFT_ERR_CUDA;
        }
    }
    if (status == WEFT_OK) {
        status = weft_registry_lease_ready(reg, lease, WEFT_REGISTRY_PUBLISHED, 120000000, &ready, &published);
        note_wake(shared, id, lease->version);
    }
    return status;
}

/* Waits for the version after `last` (streaming: for its first
 * announcement), copies it and releases the lease, recording when the
 * consumer learned of the publish (streaming: after its copies of the
 * layers announced before it) and the copies' time (engine 0's first
 * run dies in the copy of version --kill-engine). 0 with *version on
 * success; 4 when the wait or the copy failed (a failed copy is recorded
 * with the registry, never the version; a version abandoned by its
 * producer as well). */
static int receive_next(const update_options_t *o, update_shared_t *shared, int id, const char *who,
                        weft_registry_h reg, uint32_t consumer, receiver_t *r, uint64_t last, uint64_t *version)
{
    weft_lease_t  lease;
    uint32_t      ready;
    int           published;
    weft_status_t status = r->streaming ? weft_registry_wait_ready(reg, last, 120000000, &lease)
                                        : weft_registry_wait(reg, last, 120000000, &lease);

    if (status != WEFT_OK) {
        fprintf(stderr, "%s %d: wait after %llu: %s\n", who, id, (unsigned long long)last, weft_status_string(status));
        return 4;
    }
    if (!r->streaming) {
        note_wake(shared, id, lease.version);
    }
    if (lease.version == death_version(o, shared, id)) {
        /* Whole, so that the death falls in the copy, not in a wait. */
        if (r->streaming) {
            (void)weft_registry_lease_ready(reg, &lease, WEFT_REGISTRY_PUBLISHED, 120000000, &ready, &published);
        }
        die_mid_transfer(r->half, &lease);
    }
    if (r->streaming) {
        status = receive_layers(o, shared, id, reg, r, &lease);
    } else {
        status = timed_copy(o, shared, id, r->whole, &lease);
        for (uint64_t l = 0; l < o->layers && status == WEFT_OK && r->layer_done != NULL; l++) {
            status = r->layer_done(r->arg, lease.version, l) == 0 ? WEFT_OK : WEFT_ERR_CUDA;
        }
    }
    weft_registry_release(reg, &lease);
    if (status != WEFT_OK) {
        fprintf(stderr, "%s %d: version %llu: %s: %s\n", who, id, (unsigned long long)lease.version,
                status == WEFT_ERR_CANCELED ? "abandoned by its producer" : "copy", weft_status_string(status));
        weft_registry_consumer_failed(reg, consumer, lease.version, status);
        return 4;
    }
    if (shared->consumer[id].first_version == 0) {
        shared->consumer[id].first_version = lease.version;
    }
    *version = lease.version;
    return 0;
}

/* A consumer process: its own fused buffers (per layer and kind, experts
 * side by side), one view per expert tensor, then every version. */
static int host_consumer(const char *name, const update_options_t *o, update_shared_t *shared, int id)
{
    size_t            count = (size_t)update_tensor_count(o);
    weft_recv_view_t *views = calloc(count, sizeof(*views));
    char            (*names)[WEFT_TENSOR_NAME_MAX] = calloc(count, sizeof(*names));
    uint8_t          *buffers[UPDATE_MAX_LAYERS][UPDATE_KINDS];
    tensor_kind_t     kinds[UPDATE_KINDS];
    weft_registry_h   reg = NULL;
    receiver_t        rx = {0};
    uint32_t          consumer;
    uint64_t          last = 0;
    char              label[32];
    weft_status_t     status;

    update_kinds(o, kinds);
    memset(buffers, 0, sizeof(buffers));
    if (views == NULL || names == NULL) {
        fprintf(stderr, "consumer %d: out of memory\n", id);
        return 3;
    }
    status = weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, &reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "consumer %d: open: %s\n", id, weft_status_string(status));
        return 3;
    }
    for (uint64_t l = 0; l < o->layers; l++) {
        for (int k = 0; k < UPDATE_KINDS; k++) {
            /* What SGLang calls w13_weight[E, 2I, H], its transpose, its
             * scales, and the same for w2. */
            buffers[l][k] = malloc(perf_expert_kind_bytes(&kinds[k]) * o->experts);
            if (buffers[l][k] == NULL) {
                fprintf(stderr, "consumer %d: out of memory\n", id);
                return 3;
            }
            for (uint64_t e = 0; e < o->experts; e++) {
                size_t            i = update_tensor_index(o, l, k, e);
                weft_recv_view_t *v = &views[i];

                update_tensor_name(names[i], sizeof(names[i]), l, e, &kinds[k]);
                v->name = names[i];
                v->role = kinds[k].role;
                v->dtype = kinds[k].dtype;
                v->ndim = 2;
                v->shape[0] = kinds[k].rows;
                v->shape[1] = kinds[k].cols;
                v->data = buffers[l][k] + e * perf_expert_kind_bytes(&kinds[k]);
                v->memory = WEFT_MEMORY_HOST;
            }
        }
    }
    snprintf(label, sizeof(label), "update-consumer-%d", id);
    status = weft_registry_consumer_register(reg, label, &consumer);
    if (status != WEFT_OK) {
        fprintf(stderr, "consumer %d: setup: %s\n", id, weft_status_string(status));
        return 3;
    }
    if (receiver_create(o, shared, id, reg, WEFT_TRANSPORT_HOST, views, count, &rx) != 0) {
        return 3;
    }
    last = shared->consumer[id].join_after;
    while (last < o->versions) {
        if (receive_next(o, shared, id, "consumer", reg, consumer, &rx, last, &last) != 0) {
            return 4;
        }
        /* Received: every byte landed. Verifying comes after, on the
         * consumer's own buffers, which the next copy alone changes. */
        weft_registry_consumer_received(reg, consumer, last);
        /* Every byte of every tensor, in the consumer's own layout: its
         * checksum against the producer's of what it wrote. */
        {
            const uint64_t *expect = update_checksums(shared, o, last);
            uint64_t        t0 = perf_now_ns();

            for (uint64_t l = 0; l < o->layers; l++) {
                for (int k = 0; k < UPDATE_KINDS; k++) {
                    const uint64_t bytes = perf_expert_kind_bytes(&kinds[k]);
                    for (uint64_t e = 0; e < o->experts; e++) {
                        const uint32_t i = update_tensor_index(o, l, k, e);
                        if (weft_checksum_host(buffers[l][k] + e * bytes, bytes) != expect[i]) {
                            shared->consumer[id].wrong_bytes += bytes;
                            if (shared->consumer[id].wrong_tensors++ == 0) {
                                fprintf(stderr, "consumer %d: version %llu: %s differs from what the producer "
                                                "wrote\n",
                                        id, (unsigned long long)last, names[i]);
                            }
                        }
                        shared->consumer[id].verified_bytes += bytes;
                    }
                }
            }
            if (last > o->warmup) {
                shared->consumer[id].verify_ns += perf_now_ns() - t0;
                shared->consumer[id].timed++;
            }
        }
        shared->consumer[id].versions++;
    }
    receiver_destroy(o, &rx);
    weft_registry_close(reg);
    return shared->consumer[id].wrong_tensors == 0 ? 0 : 5;
}


#ifdef HAVE_CUDA

static int cuda_fails(cudaError_t err, const char *what, int id)
{
    if (err == cudaSuccess) {
        return 0;
    }
    fprintf(stderr, "engine %d: %s: %s\n", id, what, cudaGetErrorString(err));
    return 1;
}

/* The trainer creates the registry only after forking the engines (fork()
 * after CUDA is initialized is broken), so an engine opens it once it is
 * there and sealed (before that, open says WEFT_ERR_NOT_FOUND, then
 * WEFT_ERR_STATE): the registry's own state is the signal, the deadline
 * only turns a trainer that never got there into an error. */
static weft_status_t open_when_created(const char *name, weft_registry_h *reg)
{
    const uint64_t deadline = perf_now_ns() + 120ull * 1000000000ull;
    weft_status_t  status;

    while (((status = weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, reg)) == WEFT_ERR_NOT_FOUND ||
            status == WEFT_ERR_STATE) &&
           perf_now_ns() < deadline) {
        perf_sleep_us(2000);
    }
    return status;
}

/* What an engine verifies with: the device sums and differing-byte
 * counts (one a layer and kind) and their page-locked copies home, the
 * producer's sample rows in the shared mapping registered for the GPU to
 * read, and its stream. */
typedef struct verifier {
    uint64_t      *dev_sums, *sums;
    uint64_t      *dev_differing, *differing;
    const uint8_t *samples_for_gpu; /* the GPU's address of row 0 of the producer's samples */
    uint8_t       *samples_host;    /* the same rows, registered (NULL: not yet) */
    cudaStream_t   stream;
} verifier_t;

/* Enqueues the verification of layer l of `version`, in the engine's
 * tensors: every tensor's checksum, and the sampled expert's bytes
 * compared with the producer's copy, which the GPU reads from the shared
 * mapping (the trainer put it there before it announced the layer). The
 * counts start at 0 with layer 0. 0 when enqueued. */
static int gpu_verify_layer(const update_options_t *o, update_shared_t *shared, int id, uint64_t version, uint64_t l,
                            const tensor_kind_t *kinds, uint8_t *buffers[][UPDATE_KINDS], verifier_t *vf)
{
    const uint64_t expert = update_sample_expert(o, version);
    const uint8_t *expect_sample =
        vf->samples_for_gpu + (update_samples(shared, o, version) - update_samples(shared, o, 0));
    uint64_t       off = l * (update_sample_bytes(o) / o->layers);

    if (l == 0 && cuda_fails(cudaMemsetAsync(vf->dev_differing, 0, o->layers * UPDATE_KINDS * sizeof(uint64_t),
                                             vf->stream),
                             "cudaMemsetAsync", id)) {
        return -1;
    }
    for (int k = 0; k < UPDATE_KINDS; k++) {
        const uint64_t bytes = perf_expert_kind_bytes(&kinds[k]);
        /* Every expert of the fused tensor in one launch; their indices
         * follow one another. */
        if (weft_checksum_cuda_strided_async(buffers[l][k], bytes, bytes, (uint32_t)o->experts,
                                             &vf->dev_sums[update_tensor_index(o, l, k, 0)], vf->stream) != WEFT_OK ||
            weft_compare_cuda_async(buffers[l][k] + expert * bytes, expect_sample + off, bytes,
                                    &vf->dev_differing[l * UPDATE_KINDS + (uint64_t)k], vf->stream) != WEFT_OK) {
            return -1;
        }
        off += bytes;
    }
    return 0;
}

/* After every layer's verification was enqueued: 0 when every checksum
 * and every sampled byte is the producer's, 1 when not, -1 on a CUDA
 * failure. */
static int gpu_verify_end(const update_options_t *o, update_shared_t *shared, int id, uint64_t version,
                          const tensor_kind_t *kinds, verifier_t *vf, const char (*names)[WEFT_TENSOR_NAME_MAX])
{
    const uint64_t  count = update_tensor_count(o), expert = update_sample_expert(o, version);
    const uint64_t *expect = update_checksums(shared, o, version);
    const uint64_t  cells = o->layers * UPDATE_KINDS;
    uint64_t        wrong = 0, wrong_bytes = 0, wrong_tensor_bytes = 0;

    if (cuda_fails(cudaMemcpyAsync(vf->sums, vf->dev_sums, count * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                   vf->stream),
                   "checksum copy", id) ||
        cuda_fails(cudaMemcpyAsync(vf->differing, vf->dev_differing, cells * sizeof(uint64_t),
                                   cudaMemcpyDeviceToHost, vf->stream),
                   "count copy", id) ||
        cuda_fails(cudaStreamSynchronize(vf->stream), "verify", id)) {
        return -1;
    }
    for (uint64_t l = 0; l < o->layers; l++) {
        for (int k = 0; k < UPDATE_KINDS; k++) {
            const uint64_t bytes = perf_expert_kind_bytes(&kinds[k]);
            const uint32_t sampled = update_tensor_index(o, l, k, expert);
            const uint64_t differing = vf->differing[l * UPDATE_KINDS + (uint64_t)k];
            for (uint64_t e = 0; e < o->experts; e++) {
                const uint32_t i = update_tensor_index(o, l, k, e);
                if (vf->sums[i] != expect[i]) {
                    wrong_tensor_bytes += bytes;
                    if (wrong++ == 0) {
                        fprintf(stderr, "engine %d: version %llu: %s differs from what the producer wrote\n", id,
                                (unsigned long long)version, names[i]);
                    }
                }
            }
            /* A sampled tensor whose checksum passed: counted here. */
            if (differing != 0 && vf->sums[sampled] == expect[sampled]) {
                wrong_tensor_bytes += bytes;
            }
            wrong_bytes += differing;
        }
    }
    if (wrong_bytes != 0) {
        fprintf(stderr, "engine %d: version %llu: %llu of %llu sampled bytes (expert %llu) differ\n", id,
                (unsigned long long)version, (unsigned long long)wrong_bytes,
                (unsigned long long)update_sample_bytes(o), (unsigned long long)expert);
    }
    shared->consumer[id].wrong_tensors += wrong;
    shared->consumer[id].wrong_sampled_bytes += wrong_bytes;
    shared->consumer[id].wrong_bytes += wrong_tensor_bytes;
    shared->consumer[id].sampled_bytes += update_sample_bytes(o);
    return wrong == 0 && wrong_bytes == 0 ? 0 : 1;
}

/* The verifier's memory; 0 on success. The producer's sample rows are
 * registered as mapped so that the compare kernels read them where they
 * are. */
static int verifier_create(const update_options_t *o, update_shared_t *shared, int id, verifier_t *vf)
{
    const uint64_t cells = o->layers * UPDATE_KINDS, count = update_tensor_count(o);
    uint8_t       *rows = update_samples(shared, o, 0);
    void          *for_gpu = NULL;

    if (cuda_fails(cudaMallocHost((void **)&vf->sums, count * sizeof(uint64_t)), "cudaMallocHost", id) ||
        cuda_fails(cudaMallocHost((void **)&vf->differing, cells * sizeof(uint64_t)), "cudaMallocHost", id) ||
        cuda_fails(cudaMalloc((void **)&vf->dev_sums, count * sizeof(uint64_t)), "cudaMalloc", id) ||
        cuda_fails(cudaMalloc((void **)&vf->dev_differing, cells * sizeof(uint64_t)), "cudaMalloc", id) ||
        cuda_fails(cudaStreamCreateWithFlags(&vf->stream, cudaStreamNonBlocking), "stream", id) ||
        cuda_fails(cudaHostRegister(rows, UPDATE_RING * update_sample_bytes(o), cudaHostRegisterMapped),
                   "cudaHostRegister (samples)", id)) {
        return -1;
    }
    vf->samples_host = rows;
    if (cuda_fails(cudaHostGetDevicePointer(&for_gpu, rows, 0), "cudaHostGetDevicePointer", id)) {
        return -1;
    }
    vf->samples_for_gpu = for_gpu;
    return 0;
}

static void verifier_destroy(verifier_t *vf)
{
    if (vf->samples_host != NULL) {
        cudaHostUnregister(vf->samples_host);
    }
    cudaFree(vf->dev_sums);
    cudaFree(vf->dev_differing);
    cudaFreeHost(vf->sums);
    cudaFreeHost(vf->differing);
    if (vf->stream != NULL) {
        cudaStreamDestroy(vf->stream);
    }
}

/* The engine's fused tensors (w13_weight[E, 2I, H] and the like: one
 * allocation a layer and kind, the experts side by side) and the views
 * into them. */
static int gpu_tensors_alloc(const update_options_t *o, const tensor_kind_t *kinds,
                             uint8_t *buffers[][UPDATE_KINDS], weft_recv_view_t *views,
                             const char (*names)[WEFT_TENSOR_NAME_MAX], int id)
{
    for (uint64_t l = 0; l < o->layers; l++) {
        for (int k = 0; k < UPDATE_KINDS; k++) {
            const uint64_t bytes = perf_expert_kind_bytes(&kinds[k]);
            if (cuda_fails(cudaMalloc((void **)&buffers[l][k], bytes * o->experts), "cudaMalloc", id)) {
                return -1;
            }
            for (uint64_t e = 0; e < o->experts; e++) {
                const size_t i = update_tensor_index(o, l, k, e);
                views[i] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_MEMORY, .name = names[i],
                                              .role = kinds[k].role, .dtype = kinds[k].dtype, .ndim = 2,
                                              .shape = {kinds[k].rows, kinds[k].cols},
                                              .data = buffers[l][k] + e * bytes, .memory = WEFT_MEMORY_CUDA};
            }
        }
    }
    return 0;
}

static void gpu_tensors_free(const update_options_t *o, uint8_t *buffers[][UPDATE_KINDS])
{
    for (uint64_t l = 0; l < o->layers; l++) {
        for (int k = 0; k < UPDATE_KINDS; k++) {
            cudaFree(buffers[l][k]);
            buffers[l][k] = NULL;
        }
    }
}

/*
 * --offload, after a version is acknowledged: the engine releases its
 * weights (as it does while the trainer trains) and takes new memory
 * before the next version; the plan is rebound to it. Every other time a
 * pad is held across the reallocation so that the tensors land elsewhere,
 * as they would in an engine whose allocator served others meanwhile.
 */
static int gpu_offload_reload(const update_options_t *o, update_shared_t *shared, int id, const tensor_kind_t *kinds,
                              uint8_t *buffers[][UPDATE_KINDS], weft_recv_view_t *views,
                              const char (*names)[WEFT_TENSOR_NAME_MAX], receiver_t *rx, int next_timed)
{
    const uintptr_t before = (uintptr_t)buffers[0][0];
    void           *pad = NULL;
    uint64_t        t0, t1;
    weft_status_t   status;
    int             bad;

    gpu_tensors_free(o, buffers);
    if (shared->consumer[id].rebinds % 2 == 0 && cuda_fails(cudaMalloc(&pad, 64u << 20), "cudaMalloc (pad)", id)) {
        return -1;
    }
    t0  = perf_now_ns();
    bad = gpu_tensors_alloc(o, kinds, buffers, views, names, id);
    t1  = perf_now_ns();
    if (bad == 0) {
        status = receiver_rebind(o, rx, views, (size_t)update_tensor_count(o));
        if (status != WEFT_OK) {
            fprintf(stderr, "engine %d: rebind: %s\n", id, weft_status_string(status));
            bad = -1;
        }
    }
    if (next_timed) {
        shared->consumer[id].realloc_ns += t1 - t0;
        shared->consumer[id].rebind_ns += perf_now_ns() - t1;
        shared->consumer[id].timed_rebinds++;
    }
    shared->consumer[id].rebinds++;
    shared->consumer[id].moved += (uintptr_t)buffers[0][0] != before;
    cudaFree(pad);
    return bad;
}

/* What an engine's layer_done hook needs: verification is enqueued layer
 * by layer as the layers land. */
typedef struct engine {
    const update_options_t *o;
    update_shared_t        *shared;
    int                     id;
    const tensor_kind_t    *kinds;
    uint8_t               *(*buffers)[UPDATE_KINDS];
    verifier_t             *vf;
} engine_t;

static int engine_layer_done(void *arg, uint64_t version, uint64_t layer)
{
    engine_t *e = arg;

    return gpu_verify_layer(e->o, e->shared, e->id, version, layer, e->kinds, e->buffers, e->vf);
}

static int gpu_consumer(const char *name, const update_options_t *o, update_shared_t *shared, int id)
{
    const size_t      count = (size_t)update_tensor_count(o);
    weft_recv_view_t *views = calloc(count, sizeof(*views));
    char            (*names)[WEFT_TENSOR_NAME_MAX] = calloc(count, sizeof(*names));
    verifier_t        vf = {0};
    uint8_t          *buffers[UPDATE_MAX_LAYERS][UPDATE_KINDS];
    tensor_kind_t     kinds[UPDATE_KINDS];
    weft_registry_h   reg = NULL;
    receiver_t        rx = {0};
    engine_t          engine = {.o = o, .shared = shared, .id = id, .kinds = kinds, .buffers = buffers, .vf = &vf};
    uint32_t          consumer;
    uint64_t          last = 0;
    char              label[32];
    weft_status_t     status;

    update_kinds(o, kinds);
    memset(buffers, 0, sizeof(buffers));
    if (views == NULL || names == NULL) {
        fprintf(stderr, "engine %d: out of memory\n", id);
        return 3;
    }
    if (cuda_fails(cudaSetDevice(o->engine_device), "cudaSetDevice", id) ||
        verifier_create(o, shared, id, &vf) != 0) {
        return 3;
    }
    for (uint64_t l = 0; l < o->layers; l++) {
        for (int k = 0; k < UPDATE_KINDS; k++) {
            for (uint64_t e = 0; e < o->experts; e++) {
                const size_t i = update_tensor_index(o, l, k, e);
                update_tensor_name(names[i], sizeof(names[i]), l, e, &kinds[k]);
            }
        }
    }
    if (gpu_tensors_alloc(o, kinds, buffers, views, (const char(*)[WEFT_TENSOR_NAME_MAX])names, id) != 0) {
        return 3;
    }
    status = open_when_created(name, &reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "engine %d: open: %s\n", id, weft_status_string(status));
        return 3;
    }
    snprintf(label, sizeof(label), "update-engine-%d", id);
    status = weft_registry_consumer_register(reg, label, &consumer);
    if (status != WEFT_OK) {
        fprintf(stderr, "engine %d: setup: %s\n", id, weft_status_string(status));
        return 3;
    }
    if (receiver_create(o, shared, id, reg, WEFT_TRANSPORT_CUDA_IPC, views, count, &rx) != 0) {
        return 3;
    }
    rx.layer_done = engine_layer_done;
    rx.arg        = &engine;
    last = shared->consumer[id].join_after;
    while (last < o->versions) {
        uint64_t t0;
        int      bad;

        if (receive_next(o, shared, id, "engine", reg, consumer, &rx, last, &last) != 0) {
            return 4;
        }
        t0   = perf_now_ns();
        bad  = gpu_verify_end(o, shared, id, last, kinds, &vf, (const char(*)[WEFT_TENSOR_NAME_MAX])names);
        if (last > o->warmup) {
            shared->consumer[id].verify_ns += perf_now_ns() - t0;
            shared->consumer[id].timed++;
        }
        if (bad != 0) {
            /* Not current for this engine: the trainer hears why. */
            weft_registry_consumer_failed(reg, consumer, last, bad < 0 ? WEFT_ERR_CUDA : WEFT_ERR_CORRUPT);
            return 5;
        }
        shared->consumer[id].verified_bytes += update_version_bytes(o);
        weft_registry_consumer_received(reg, consumer, last);
        shared->consumer[id].versions++;
        if (o->offload && last < o->versions &&
            gpu_offload_reload(o, shared, id, kinds, buffers, views, (const char(*)[WEFT_TENSOR_NAME_MAX])names, &rx,
                               last + 1 > o->warmup) != 0) {
            return 3;
        }
    }
    receiver_destroy(o, &rx);
    weft_registry_close(reg);
    gpu_tensors_free(o, buffers);
    verifier_destroy(&vf);
    free(views);
    free(names);
    return 0;
}
#endif

int update_consumer_main(const char *name, const update_options_t *o, update_shared_t *shared, int id)
{
    shared->consumer[id].pid = getpid();
#ifdef HAVE_CUDA
    if (o->gpu) {
        return gpu_consumer(name, o, shared, id);
    }
#endif
    return host_consumer(name, o, shared, id);
}
