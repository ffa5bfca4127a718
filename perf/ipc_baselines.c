/*
 * weft-perf ipc's baselines, each in a process of its own: the ceiling (one
 * peer copy of the version's bytes, or a D2D copy on one GPU), the same
 * D2D copy after another process's work on the GPU, NCCL send/recv, the
 * torch peer (ipc_peer.py), each one lib/baseline.h run; and the GPU
 * probe.
 */
#include "config.h"

#include "ipc.h"

#ifdef HAVE_CUDA /* without CUDA, weft-perf ipc only says it is skipped */

#include "lib/baseline.h"
#include "lib/json.h"
#include "lib/peer.h"
#include "lib/sysinfo.h"
#include "perf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_NCCL
#include <nccl.h>
#endif

#ifdef HAVE_NCCL
static int nccl_ok(ncclResult_t result, const char *what)
{
    if (result != ncclSuccess) {
        fprintf(stderr, "weft-perf ipc: %s failed: %s\n", what, ncclGetErrorString(result));
        return 0;
    }
    return 1;
}

#define NC(call) nccl_ok((call), #call)
#endif

/* ------------------------------------------------------------ ceilings */

/* Lets the current device reach `peer`; enabled already is fine. */
static int enable_peer_from(int device, int peer)
{
    cudaError_t err;

    if (!CU(cudaSetDevice(device))) {
        return -1;
    }
    err = cudaDeviceEnablePeerAccess(peer, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError(); /* not sticky: clear it */
        return 0;
    }
    return ipc_cuda_ok(err, "cudaDeviceEnablePeerAccess") ? 0 : -1;
}

/* Peer access both ways where the hardware has it; without, the peer copy
 * goes through the host and the figure says so. */
static int enable_peer_access(int a, int b)
{
    int ab = 0, ba = 0;

    if (!CU(cudaDeviceCanAccessPeer(&ab, a, b)) || !CU(cudaDeviceCanAccessPeer(&ba, b, a))) {
        return -1;
    }
    if (!ab || !ba) {
        fprintf(stderr, "weft-perf ipc: GPUs %d and %d have no peer access both ways: the peer copy is "
                        "staged\n", a, b);
    }
    if ((ab && enable_peer_from(a, b) != 0) || (ba && enable_peer_from(b, a) != 0)) {
        return -1;
    }
    return 0;
}

/* The ceiling: the same bytes as one buffer, src to dst, on a stream of
 * the destination GPU (where the cuda_ipc transport copies too). */
int ipc_copy_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    const uint64_t bytes = ipc_workload_bytes(c->w), runs = ctx->o->warmup + ctx->o->iters;
    void          *a = NULL, *b = NULL;
    cudaStream_t   stream = NULL;
    cudaEvent_t    start = NULL, stop = NULL;

    if ((c->cross && enable_peer_access(c->src, c->dst) != 0) || !CU(cudaSetDevice(c->src)) ||
        !CU(cudaMalloc(&a, bytes)) || !CU(cudaMemset(a, 0x5a, bytes)) || !CU(cudaSetDevice(c->dst)) ||
        !CU(cudaMalloc(&b, bytes)) || !CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) ||
        !CU(cudaEventCreate(&start)) || !CU(cudaEventCreate(&stop))) {
        return 1;
    }
    /* Wall time from the enqueue to the event's completion, as the weft
     * copy and NCCL are timed: the same launch and wake-up costs in all. */
    for (uint64_t i = 0; i < runs; i++) {
        uint64_t t0 = perf_now_ns();

        if (perf_interrupted || !CU(cudaEventRecord(start, stream)) ||
            !(c->cross ? CU(cudaMemcpyPeerAsync(b, c->dst, a, c->src, bytes, stream))
                       : CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream))) ||
            !CU(cudaEventRecord(stop, stream)) || !CU(cudaEventSynchronize(stop))) {
            return 1;
        }
        if (i >= ctx->o->warmup && ctx->sh->timing.n < MAX_ITERS) {
            ctx->sh->timing.ns[ctx->sh->timing.n++] = perf_now_ns() - t0;
        }
    }
    return CU(cudaEventDestroy(start)) && CU(cudaEventDestroy(stop)) && CU(cudaStreamDestroy(stream)) &&
                   CU(cudaFree(b)) && CU(cudaFree(a))
               ? 0
               : 1;
}

/*
 * Two processes on one GPU: before each D2D copy (timed as ipc_copy_main
 * times it), another process runs a 64 MiB memset on the GPU and waits
 * for it, as the trainer fills a version before the engine copies it.
 * The GPU then switches contexts before the copy can start; this copy
 * pays that as the weft copy does, which a copy alone in its process
 * does not.
 */
#define TURN_ABORT UINT64_MAX

static int turn_wait(ipc_ctx_t *ctx, uint64_t want)
{
    const uint64_t deadline = perf_now_ns() + UINT64_C(60000000000);

    for (;;) {
        uint64_t t = atomic_load(&ctx->sh->turn);

        if (t == want) {
            return 0;
        }
        if (t == TURN_ABORT || perf_interrupted || perf_now_ns() > deadline) {
            atomic_store(&ctx->sh->turn, TURN_ABORT);
            return -1;
        }
    }
}

int ipc_toucher_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    const uint64_t runs = ctx->o->warmup + ctx->o->iters, bytes = UINT64_C(64) << 20;
    void          *scratch = NULL;
    cudaStream_t   stream = NULL;

    if (!CU(cudaSetDevice(c->src)) || !CU(cudaMalloc(&scratch, bytes)) ||
        !CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking))) {
        atomic_store(&ctx->sh->turn, TURN_ABORT);
        return 1;
    }
    for (uint64_t i = 0; i < runs; i++) {
        if (turn_wait(ctx, 2 * i + 1) != 0 || !CU(cudaMemsetAsync(scratch, (int)i, bytes, stream)) ||
            !CU(cudaStreamSynchronize(stream))) {
            atomic_store(&ctx->sh->turn, TURN_ABORT);
            return 1;
        }
        atomic_store(&ctx->sh->turn, 2 * i + 2);
    }
    return CU(cudaStreamDestroy(stream)) && CU(cudaFree(scratch)) ? 0 : 1;
}

int ipc_switched_copy_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    const uint64_t bytes = ipc_workload_bytes(c->w), runs = ctx->o->warmup + ctx->o->iters;
    void          *a = NULL, *b = NULL;
    cudaStream_t   stream = NULL;
    cudaEvent_t    stop = NULL;

    if (!CU(cudaSetDevice(c->src)) || !CU(cudaMalloc(&a, bytes)) || !CU(cudaMemset(a, 0x5a, bytes)) ||
        !CU(cudaMalloc(&b, bytes)) || !CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) ||
        !CU(cudaEventCreateWithFlags(&stop, cudaEventDisableTiming)) || !CU(cudaDeviceSynchronize())) {
        atomic_store(&ctx->sh->turn, TURN_ABORT);
        return 1;
    }
    for (uint64_t i = 0; i < runs; i++) {
        uint64_t t0;

        atomic_store(&ctx->sh->turn, 2 * i + 1);
        if (turn_wait(ctx, 2 * i + 2) != 0) {
            return 1;
        }
        t0 = perf_now_ns();
        if (!CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)) ||
            !CU(cudaEventRecord(stop, stream)) || !CU(cudaEventSynchronize(stop))) {
            atomic_store(&ctx->sh->turn, TURN_ABORT);
            return 1;
        }
        if (i >= ctx->o->warmup && ctx->sh->timing.n < MAX_ITERS) {
            ctx->sh->timing.ns[ctx->sh->timing.n++] = perf_now_ns() - t0;
        }
    }
    return CU(cudaEventDestroy(stop)) && CU(cudaStreamDestroy(stream)) && CU(cudaFree(b)) && CU(cudaFree(a)) ? 0
                                                                                                              : 1;
}

#ifdef HAVE_NCCL
/* NCCL send/recv of the same bytes, src to dst, both ends in this process;
 * wall time from the group's start to both streams done. */
int ipc_nccl_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    const uint64_t bytes = ipc_workload_bytes(c->w), runs = ctx->o->warmup + ctx->o->iters;
    const int      devs[2] = {c->src, c->dst};
    ncclComm_t     comm[2] = {NULL, NULL};
    void          *buf[2] = {NULL, NULL};
    cudaStream_t   stream[2] = {NULL, NULL};

    if (!NC(ncclCommInitAll(comm, 2, devs))) {
        return 1;
    }
    for (int i = 0; i < 2; i++) {
        if (!CU(cudaSetDevice(devs[i])) || !CU(cudaMalloc(&buf[i], bytes)) || !CU(cudaMemset(buf[i], i, bytes)) ||
            !CU(cudaStreamCreateWithFlags(&stream[i], cudaStreamNonBlocking)) || !CU(cudaDeviceSynchronize())) {
            return 1;
        }
    }
    for (uint64_t i = 0; i < runs; i++) {
        uint64_t t0 = perf_now_ns();

        if (perf_interrupted || !NC(ncclGroupStart()) ||
            !NC(ncclSend(buf[0], (size_t)bytes, ncclUint8, 1, comm[0], stream[0])) ||
            !NC(ncclRecv(buf[1], (size_t)bytes, ncclUint8, 0, comm[1], stream[1])) || !NC(ncclGroupEnd()) ||
            !CU(cudaStreamSynchronize(stream[0])) || !CU(cudaStreamSynchronize(stream[1]))) {
            return 1;
        }
        if (i >= ctx->o->warmup && ctx->sh->timing.n < MAX_ITERS) {
            ctx->sh->timing.ns[ctx->sh->timing.n++] = perf_now_ns() - t0;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (!NC(ncclCommDestroy(comm[i])) || !CU(cudaSetDevice(devs[i])) || !CU(cudaStreamDestroy(stream[i])) ||
            !CU(cudaFree(buf[i]))) {
            return 1;
        }
    }
    return 0;
}
#endif

/* ----------------------------------------------------------- the probe */

static void probe_device(ipc_probe_t *p, int slot, int device)
{
    struct cudaDeviceProp prop;

    if (device >= p->count || !CU(cudaGetDeviceProperties(&prop, device))) {
        snprintf(p->name[slot], sizeof(p->name[slot]), "none");
        return;
    }
    snprintf(p->name[slot], sizeof(p->name[slot]), "%s", prop.name);
    p->major[slot] = prop.major;
    p->minor[slot] = prop.minor;
    if (!CU(cudaDeviceGetPCIBusId(p->bus[slot], (int)sizeof(p->bus[slot]), device))) {
        snprintf(p->bus[slot], sizeof(p->bus[slot]), "?");
    }
}

/* Counts the GPUs and describes the two of the run. A machine without
 * GPU (or driver) is not an error: count 0 and the reason. */
int ipc_probe_main(ipc_ctx_t *ctx, const ipc_case_t *unused)
{
    ipc_probe_t *p = &ctx->sh->probe;
    cudaError_t  err = cudaGetDeviceCount(&p->count);
    const int    src = (int)ctx->o->src, dst = (int)ctx->o->dst;

    (void)unused;
    if (err != cudaSuccess || p->count <= 0) {
        snprintf(p->error, sizeof(p->error), "%s", err != cudaSuccess ? cudaGetErrorString(err) : "no device");
        p->count = 0;
        p->done = 1;
        return 0;
    }
    if (!CU(cudaDriverGetVersion(&p->driver)) || !CU(cudaRuntimeGetVersion(&p->runtime))) {
        return 1;
    }
    probe_device(p, 0, src);
    probe_device(p, 1, dst);
    if (src < p->count && dst < p->count && src != dst &&
        (!CU(cudaDeviceCanAccessPeer(&p->peer[0], src, dst)) || !CU(cudaDeviceCanAccessPeer(&p->peer[1], dst, src)))) {
        return 1;
    }
#ifdef HAVE_NCCL
    if (!NC(ncclGetVersion(&p->nccl))) {
        return 1;
    }
#endif
    p->done = 1;
    return 0;
}

/* --------------------------------------------------------- torch peer */

/* Keeps the peer's last JSON line (arg: where; NULL when out of memory). */
static void keep_last(void *arg, const char *line)
{
    char **last = arg;

    free(*last);
    *last = strdup(line);
}

/* ipc_peer.py's settings (perf_baseline_run's arg). */
typedef struct torch_arg {
    const ipc_options_t *o;
    const ipc_case_t    *c;
} torch_arg_t;

/* ipc_peer.py on a case: torch tensors shared one by one over CUDA IPC and
 * copied. The note says what it measured, or why it was skipped. */
static int torch_measure(void *arg, perf_baseline_result_t *res)
{
    const torch_arg_t   *a = arg;
    const ipc_options_t *o = a->o;
    const ipc_case_t    *c = a->c;
    char                 error[200];
    char                *last = NULL;
    int                  status = 0, rc = -1;

    snprintf(res->version, sizeof(res->version), "none");
    if (!o->peer) {
        perf_baseline_note(res, "skipped (--no-peer)");
        return -1;
    }
    if (strchr(o->peer_script, '\'') != NULL || strlen(o->peer_script) > 1024) {
        perf_baseline_note(res, "skipped: the peer script's path cannot be quoted");
        return -1;
    }
    snprintf(res->setup, sizeof(res->setup),
             "python3 '%s' --src-device %d --dst-device %d --workload %s --iterations %llu --warmup %llu 2>&1",
             o->peer_script, c->src, c->dst, c->w->name, (unsigned long long)o->iters,
             (unsigned long long)o->warmup);
    if (perf_peer_run(res->setup, keep_last, &last, &status) != 0) {
        status = -1;
    }
    if (last != NULL && perf_json_find_string(last, "error", error, sizeof(error)) == 0) {
        perf_baseline_note(res, "skipped: %s", error);
    } else if (last != NULL && perf_json_find_number(last, "bytes") != (double)res->bytes) {
        perf_baseline_note(res, "skipped: the peer moved %.0f bytes, not %llu", perf_json_find_number(last, "bytes"),
                           (unsigned long long)res->bytes);
    } else if (last != NULL && status == 0 && perf_json_find_number(last, "seconds_median") > 0) {
        res->seconds = perf_json_find_number(last, "seconds_median");
        (void)perf_json_find_string(last, "torch", res->version, sizeof(res->version));
        perf_baseline_note(res, "torch %s, %.3f GB/s by its own count", res->version,
                           perf_json_find_number(last, "gb_per_s"));
        rc = 0;
    } else {
        char how[96];

        if (status == -1) {
            snprintf(how, sizeof(how), "cannot be started");
        } else {
            perf_describe_status(status, how, sizeof(how));
        }
        perf_baseline_note(res, "skipped: python3 %s %s (is torch installed?)", o->peer_script, how);
    }
    free(last);
    return rc;
}

void ipc_run_torch(const ipc_options_t *o, const ipc_case_t *c, ipc_result_t *r)
{
    const perf_baseline_t  torch = {"torch peer", torch_measure};
    torch_arg_t            arg = {o, c};
    perf_baseline_result_t res;

    (void)perf_baseline_run(&torch, &arg, ipc_workload_bytes(c->w), &res);
    r->torch_s = res.seconds;
    snprintf(r->torch_version, sizeof(r->torch_version), "%s", res.version);
    perf_baseline_note_to(&res, r->torch_note, sizeof(r->torch_note));
}

#endif /* HAVE_CUDA */
