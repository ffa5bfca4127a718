/*
 * weft-perf delta --gpu: the GPU codec (<weft/delta.h>, weft_delta_*_cuda)
 * on the versions the host measurement makes. For each version, in device
 * memory: the older and newer version's tensors (W, WT, scale_inv of every
 * expert, one buffer each, the tensors end to end); then, each the median
 * of a few repetitions timed by CUDA events on one stream behind a gate
 * (gate_wait: GPU time, not the host's enqueue latency),
 *  - copy: the whole newer version D2D (one cudaMemcpyAsync), the ceiling
 *    against which the targets are stated;
 *  - encode: weft_delta_encode_cuda_async of all the tensors in one batch
 *    (where a delta is not smaller than its tensor, the tensor goes whole);
 *  - encode, stored checksums: the same given each tensor's checksum, as a
 *    server encoding from a registry that stores them does
 *    (weft_delta_encode_cuda_with_checksums_async);
 *  - apply: the deltas applied in one batch into a copy of the older
 *    version. Tensors that go whole are not part of it: a transport
 *    receives them in place, as it would without deltas (the check below
 *    copies them in, untimed, before it compares);
 *  - paired: the encode given the checksums of only the W and scale
 *    tensors, and the apply of each W's delta into its W and, transposed,
 *    into its WT (<weft/delta.h>'s transposed targets): the FP8 writer's
 *    WT is W's bytes transposed, so WT needs no delta of its own (where W
 *    goes whole, so does its WT);
 * and checks: every GPU delta (all encodes') equal to
 * weft_delta_encode_host's of the same tensors, and each applied copy
 * equal to the newer version.
 */
#include "config.h"

#include "delta.h"
#include "lib/stats.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

#define GPU_REPS 5

static int cuda_ok(cudaError_t e, const char *what, delta_gpu_result_t *res)
{
    if (e != cudaSuccess) {
        snprintf(res->note, sizeof(res->note), "%s: %s", what, cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

/*
 * A gate in the stream: a host function that returns only once the host
 * has enqueued all of a measurement's work behind it, so that the events
 * time what the GPU does (kernels back to back, as in a stream that is
 * kept fed) and not how long the host takes to enqueue it: the encode's
 * host side (its checks, CUB's dispatch) runs while the GPU would
 * otherwise idle between two events. nvbench's blocking kernel does the
 * same. The copy is timed behind the same gate.
 */
static void CUDART_CB gate_wait(void *arg)
{
    const atomic_int *open = arg;
    while (!atomic_load(open)) {
        sched_yield();
    }
}

/* ms between two events recorded around `what` on st, GPU_REPS times; a
 * `reset` before each (not timed). Returns the median in seconds or < 0. */
typedef int (*gpu_step_fn)(void *ctx);

static double timed(cudaStream_t st, gpu_step_fn reset, gpu_step_fn what, void *ctx, delta_gpu_result_t *res)
{
    cudaEvent_t e0 = NULL, e1 = NULL;
    double      ms[GPU_REPS];
    atomic_int  open;
    int         ok = cuda_ok(cudaEventCreate(&e0), "cudaEventCreate", res) &&
             cuda_ok(cudaEventCreate(&e1), "cudaEventCreate", res);

    /* Once untimed and without the gate: a kernel's first launch may load
     * its module, which can wait for the device, so it must not happen
     * while the gate holds the stream shut. */
    ok = ok && (reset == NULL || reset(ctx) == 0) && what(ctx) == 0 &&
         cuda_ok(cudaStreamSynchronize(st), "cudaStreamSynchronize", res);
    for (int r = 0; r < GPU_REPS && ok; r++) {
        float elapsed = 0;

        atomic_store(&open, 0);
        ok = (reset == NULL || reset(ctx) == 0) &&
             cuda_ok(cudaLaunchHostFunc(st, gate_wait, &open), "cudaLaunchHostFunc", res) &&
             cuda_ok(cudaEventRecord(e0, st), "cudaEventRecord", res) && what(ctx) == 0 &&
             cuda_ok(cudaEventRecord(e1, st), "cudaEventRecord", res);
        atomic_store(&open, 1); /* also when something failed: the stream must not stay shut */
        ok = ok && cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize", res) &&
             cuda_ok(cudaEventElapsedTime(&elapsed, e0, e1), "cudaEventElapsedTime", res);
        ms[r] = elapsed;
    }
    if (cudaStreamSynchronize(st) != cudaSuccess) { /* the gate gone before `open` leaves scope */
        ok = 0;
    }
    if (e0 != NULL) {
        cudaEventDestroy(e0);
    }
    if (e1 != NULL) {
        cudaEventDestroy(e1);
    }
    if (!ok) {
        return -1.0;
    }
    perf_spread_t spread;
    perf_spread_of(ms, GPU_REPS, &spread);
    return spread.median / 1e3;
}

/* A delta's room: the tensor's size (a bigger delta is not worth sending)
 * but at least a delta of no change (the encoder's minimum), 8-aligned. */
static uint64_t delta_capacity(uint64_t bytes)
{
    const uint64_t floor = weft_delta_bytes(bytes, 0);
    return ((bytes > floor ? bytes : floor) + 7) / 8 * 8;
}

/* One version's measurement state. */
typedef struct gpu_case {
    cudaStream_t              st;
    uint32_t                  count;
    uint64_t                  total, out_total;
    uint8_t                  *old_v, *new_v, *held, *out; /* device */
    uint64_t                 *offsets, *out_offsets;      /* host: each tensor's place */
    const uint64_t           *bytes;
    uint64_t                 *sizes, *dsizes;             /* host, device: each delta's size (0: whole) */
    unsigned                 *dverdicts;
    weft_delta_cuda_tensor_t *tensors;
    uint64_t                 *checksums;                  /* host: each newer tensor's, as a registry stores */
    uint8_t                  *stored_got;                 /* host: the deltas of the encode given them */
    weft_delta_cuda_patch_t  *patches;
    uint32_t                  patch_count;
    /* The paired case: W and scale tensors only (own[j]: tensor index). */
    weft_delta_cuda_tensor_t *own_tensors;
    uint64_t                 *own_checksums;
    uint32_t                 *own, own_count;
    void                     *work, *apply_work;
    size_t                    work_bytes, apply_work_bytes;
    delta_gpu_result_t       *res;
} gpu_case_t;

static int do_copy(void *ctx)
{
    gpu_case_t *c = ctx;
    return cuda_ok(cudaMemcpyAsync(c->held, c->new_v, c->total, cudaMemcpyDeviceToDevice, c->st), "copy", c->res) ? 0
                                                                                                                 : -1;
}

static int do_encode(void *ctx)
{
    gpu_case_t *c = ctx;
    return weft_delta_encode_cuda_async(c->tensors, c->count, c->dsizes, c->work, c->work_bytes, c->st) == WEFT_OK
               ? 0
               : -1;
}

static int do_encode_stored(void *ctx)
{
    gpu_case_t *c = ctx;
    return weft_delta_encode_cuda_with_checksums_async(c->tensors, c->checksums, c->count, c->dsizes, c->work,
                                                       c->work_bytes, c->st) == WEFT_OK
               ? 0
               : -1;
}

static int do_encode_paired(void *ctx)
{
    gpu_case_t *c = ctx;
    return weft_delta_encode_cuda_with_checksums_async(c->own_tensors, c->own_checksums, c->own_count, c->dsizes,
                                                       c->work, c->work_bytes, c->st) == WEFT_OK
               ? 0
               : -1;
}

static int do_reset(void *ctx)
{
    gpu_case_t *c = ctx;
    return cuda_ok(cudaMemcpyAsync(c->held, c->old_v, c->total, cudaMemcpyDeviceToDevice, c->st), "reset", c->res)
               ? 0
               : -1;
}

static int do_apply(void *ctx)
{
    gpu_case_t *c = ctx;

    return weft_delta_apply_cuda_async(c->patches, c->patch_count, c->dverdicts, c->apply_work, c->apply_work_bytes,
                                       c->st) == WEFT_OK
               ? 0
               : -1;
}

/* The tensors that go whole (sizes[i] 0), received in place (not timed). */
static int receive_whole(gpu_case_t *c, const uint64_t *sizes)
{
    for (uint32_t i = 0; i < c->count; i++) {
        if (sizes[i] == 0 &&
            !cuda_ok(cudaMemcpyAsync(c->held + c->offsets[i], c->new_v + c->offsets[i], c->bytes[i],
                                     cudaMemcpyDeviceToDevice, c->st),
                     "whole tensor", c->res)) {
            return -1;
        }
    }
    return cuda_ok(cudaStreamSynchronize(c->st), "cudaStreamSynchronize", c->res) ? 0 : -1;
}

/* The applied copy `back` (the held version, read back) against the newer
 * version: its wrong bytes added to the result. */
static void count_wrong(gpu_case_t *c, const uint8_t *back, const uint8_t *const *new_t)
{
    for (uint32_t i = 0; i < c->count; i++) {
        for (uint64_t b = 0; b < c->bytes[i]; b++) {
            c->res->wrong_bytes += back[c->offsets[i] + b] != new_t[i][b];
        }
    }
}

/* The paired case's check: each W and scale delta of the paired encode
 * (at its tensor's place in `out`, sizes[] per own tensor) against the
 * first encode's, which check() holds to the host's; the applied copy
 * against the newer version. */
static int check_paired(gpu_case_t *c, const uint64_t *sizes, const uint8_t *const *new_t)
{
    const uint8_t *first = c->stored_got;
    uint8_t       *got = malloc(c->out_total + 1), *back = malloc(c->total);
    int            ok = got != NULL && back != NULL;

    ok = ok && cuda_ok(cudaMemcpy(got, c->out, c->out_total, cudaMemcpyDeviceToHost), "download", c->res) &&
         cuda_ok(cudaMemcpy(back, c->held, c->total, cudaMemcpyDeviceToHost), "download", c->res);
    for (uint32_t j = 0; j < c->own_count && ok; j++) {
        const uint32_t i = c->own[j];
        const uint64_t size = sizes[j] > c->bytes[i] ? 0 : sizes[j];

        if (size != c->sizes[i] || (size > 0 && memcmp(got + c->out_offsets[i], first + c->out_offsets[i], size) != 0)) {
            c->res->mismatched_deltas++;
        }
    }
    if (ok) {
        count_wrong(c, back, new_t);
    }
    free(got);
    free(back);
    return ok ? 0 : -1;
}

/* Each GPU delta against the host encoder's of the same tensors; the
 * applied copy against the newer version. */
static int check(gpu_case_t *c, const uint8_t *const *old_t, const uint8_t *const *new_t)
{
    uint8_t *host = malloc(c->out_total + 1), *got = malloc(c->out_total + 1), *back = malloc(c->total);
    int      ok = host != NULL && got != NULL && back != NULL;

    ok = ok && cuda_ok(cudaMemcpy(got, c->out, c->out_total, cudaMemcpyDeviceToHost), "download", c->res) &&
         cuda_ok(cudaMemcpy(back, c->held, c->total, cudaMemcpyDeviceToHost), "download", c->res);
    for (uint32_t i = 0; i < c->count && ok; i++) {
        uint64_t      size = 0;
        weft_status_t st = weft_delta_encode_host(old_t[i], new_t[i], c->bytes[i], host + c->out_offsets[i],
                                                  c->bytes[i], &size);
        if (st == WEFT_ERR_NO_SPACE) {
            size = 0;
        } else if (st != WEFT_OK) {
            snprintf(c->res->note, sizeof(c->res->note), "the host encoder failed");
            ok = 0;
            break;
        }
        if (size != c->sizes[i] || (size > 0 && memcmp(host + c->out_offsets[i], got + c->out_offsets[i], size) != 0)) {
            c->res->mismatched_deltas++;
        }
        if (size > 0 && memcmp(host + c->out_offsets[i], c->stored_got + c->out_offsets[i], size) != 0) {
            c->res->mismatched_deltas++; /* the encode given the stored checksums */
        }
    }
    if (ok) {
        count_wrong(c, back, new_t);
    }
    free(host);
    free(got);
    free(back);
    return ok ? 0 : -1;
}

/*
 * The paired case (after the first, whose deltas in stored_got check()
 * held to the host's): W and scale tensors encoded given their
 * checksums, then each W's delta applied into its W and, transposed, its
 * WT. Sets res's paired figures; 0, or -1 (res->note).
 */
static int measure_paired(gpu_case_t *c, uint64_t rows, uint64_t cols, const uint8_t *const *new_t)
{
    delta_gpu_result_t *res = c->res;
    uint64_t           *own_sizes = calloc(c->count, sizeof(uint64_t)), *sizes = calloc(c->count, sizeof(uint64_t));
    unsigned           *verdicts = calloc(c->count, sizeof(unsigned));
    double              encode_s = -1.0, apply_s = -1.0;
    int                 ok = own_sizes != NULL && sizes != NULL && verdicts != NULL;

    c->own_count = 0;
    for (uint32_t i = 0; i < c->count && ok; i++) {
        if (i % 3 != 1) { /* W or scale_inv: WT comes from W */
            c->own[c->own_count] = i;
            c->own_tensors[c->own_count] = c->tensors[i];
            c->own_checksums[c->own_count++] = c->checksums[i];
        }
    }
    ok = ok && cuda_ok(cudaMemset(c->out, 0, c->out_total), "cudaMemset", res);
    encode_s = ok ? timed(c->st, NULL, do_encode_paired, c, res) : -1.0;
    ok = encode_s >= 0 && cuda_ok(cudaMemcpy(own_sizes, c->dsizes, c->own_count * sizeof(uint64_t),
                                             cudaMemcpyDeviceToHost),
                                  "download", res);
    c->patch_count = 0;
    res->wire_paired_bytes = 0;
    for (uint32_t j = 0; j < c->own_count && ok; j++) {
        const uint32_t i = c->own[j];
        const uint64_t size = own_sizes[j] > c->bytes[i] ? 0 : own_sizes[j];
        uint8_t       *delta = c->out + c->out_offsets[i];

        sizes[i] = size;
        res->wire_paired_bytes += size > 0 ? size : c->bytes[i];
        if (size > 0) {
            c->patches[c->patch_count++] = (weft_delta_cuda_patch_t){
                delta, size,
                {.data = c->held + c->offsets[i], .tensor_bytes = c->bytes[i], .row_bytes = c->bytes[i],
                 .row_stride = c->bytes[i]}};
        }
        if (i % 3 == 0) { /* W: its WT, patched by the same delta or whole */
            sizes[i + 1] = size;
            if (size > 0) {
                c->patches[c->patch_count++] = (weft_delta_cuda_patch_t){
                    delta, size,
                    {.data = c->held + c->offsets[i + 1], .tensor_bytes = c->bytes[i + 1],
                     .row_bytes = c->bytes[i + 1], .row_stride = c->bytes[i + 1], .transpose_rows = rows,
                     .transpose_cols = cols}};
            } else {
                res->wire_paired_bytes += c->bytes[i + 1];
            }
        }
    }
    apply_s = ok ? timed(c->st, do_reset, do_apply, c, res) : -1.0;
    ok = apply_s >= 0 && cuda_ok(cudaMemcpy(verdicts, c->dverdicts, c->patch_count * sizeof(unsigned),
                                            cudaMemcpyDeviceToHost),
                                 "download", res);
    for (uint32_t k = 0; k < c->patch_count && ok; k++) {
        if (verdicts[k] != 0) {
            snprintf(res->note, sizeof(res->note), "a paired delta was refused by the GPU apply (verdict %u)",
                     verdicts[k]);
            ok = 0;
        }
    }
    ok = ok && receive_whole(c, sizes) == 0 && check_paired(c, own_sizes, new_t) == 0;
    if (ok) {
        res->encode_paired_s = encode_s;
        res->apply_paired_s = apply_s;
    }
    free(own_sizes);
    free(sizes);
    free(verdicts);
    return ok ? 0 : -1;
}

int delta_gpu_measure(const uint8_t *const *old_t, const uint8_t *const *new_t, const uint64_t *bytes, uint32_t count,
                      uint64_t rows, uint64_t cols, delta_gpu_result_t *res)
{
    gpu_case_t c = {.count = count, .bytes = bytes, .res = res};
    unsigned  *verdicts = NULL;
    int        ok, device_count = 0;
    double     copy_s, encode_s, encode_stored_s, apply_s;

    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        snprintf(res->note, sizeof(res->note), "no NVIDIA driver or GPU found");
        return 77;
    }
    c.offsets = calloc(count, sizeof(uint64_t));
    c.out_offsets = calloc(count, sizeof(uint64_t));
    c.sizes = calloc(count, sizeof(uint64_t));
    c.tensors = calloc(count, sizeof(*c.tensors));
    c.patches = calloc(count, sizeof(*c.patches));
    c.checksums = calloc(count, sizeof(uint64_t));
    c.own_tensors = calloc(count, sizeof(*c.own_tensors));
    c.own_checksums = calloc(count, sizeof(uint64_t));
    c.own = calloc(count, sizeof(uint32_t));
    verdicts = calloc(count, sizeof(unsigned));
    ok = c.offsets != NULL && c.out_offsets != NULL && c.sizes != NULL && c.tensors != NULL && c.patches != NULL &&
         c.checksums != NULL && c.own_tensors != NULL && c.own_checksums != NULL && c.own != NULL && verdicts != NULL;
    if (!ok) {
        snprintf(res->note, sizeof(res->note), "out of memory");
    }
    if (ok && count % 3 != 0) {
        snprintf(res->note, sizeof(res->note), "not experts' W, WT and scale tensors in turn");
        ok = 0;
    }
    for (uint32_t i = 0; i < count && ok; i++) {
        c.offsets[i] = c.total;
        c.out_offsets[i] = c.out_total;
        c.total += bytes[i];
        c.out_total += delta_capacity(bytes[i]);
        c.checksums[i] = weft_checksum_host(new_t[i], bytes[i]);
    }
    c.stored_got = ok ? malloc(c.out_total + 1) : NULL;
    ok = ok && c.stored_got != NULL;
    ok = ok && cuda_ok(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking), "cudaStreamCreate", res) &&
         cuda_ok(cudaMalloc((void **)&c.old_v, c.total), "cudaMalloc", res) &&
         cuda_ok(cudaMalloc((void **)&c.new_v, c.total), "cudaMalloc", res) &&
         cuda_ok(cudaMalloc((void **)&c.held, c.total), "cudaMalloc", res) &&
         cuda_ok(cudaMalloc((void **)&c.out, c.out_total), "cudaMalloc", res) &&
         cuda_ok(cudaMalloc((void **)&c.dsizes, count * sizeof(uint64_t)), "cudaMalloc", res) &&
         cuda_ok(cudaMalloc((void **)&c.dverdicts, count * sizeof(unsigned)), "cudaMalloc", res);
    for (uint32_t i = 0; i < count && ok; i++) {
        ok = cuda_ok(cudaMemcpy(c.old_v + c.offsets[i], old_t[i], bytes[i], cudaMemcpyHostToDevice), "upload", res) &&
             cuda_ok(cudaMemcpy(c.new_v + c.offsets[i], new_t[i], bytes[i], cudaMemcpyHostToDevice), "upload", res);
        c.tensors[i] = (weft_delta_cuda_tensor_t){c.old_v + c.offsets[i], c.new_v + c.offsets[i], bytes[i],
                                                  c.out + c.out_offsets[i], delta_capacity(bytes[i])};
    }
    if (ok) {
        c.work_bytes = weft_delta_cuda_encode_work_bytes(c.tensors, count);
        c.apply_work_bytes = weft_delta_cuda_apply_work_bytes(count);
        ok = cuda_ok(cudaMalloc(&c.work, c.work_bytes), "cudaMalloc", res) &&
             cuda_ok(cudaMalloc(&c.apply_work, c.apply_work_bytes), "cudaMalloc", res);
    }
    copy_s = ok ? timed(c.st, NULL, do_copy, &c, res) : -1.0;
    /* The encode given the checksums first, its deltas kept to be checked;
     * then the one that sums, whose deltas the rest of the case uses. */
    encode_stored_s = copy_s >= 0 ? timed(c.st, NULL, do_encode_stored, &c, res) : -1.0;
    ok = encode_stored_s >= 0 &&
         cuda_ok(cudaMemcpy(c.stored_got, c.out, c.out_total, cudaMemcpyDeviceToHost), "download", res);
    encode_s = ok ? timed(c.st, NULL, do_encode, &c, res) : -1.0;
    ok = encode_s >= 0 && cuda_ok(cudaMemcpy(c.sizes, c.dsizes, count * sizeof(uint64_t), cudaMemcpyDeviceToHost),
                                  "download", res);
    for (uint32_t i = 0; i < count && ok; i++) {
        if (c.sizes[i] > bytes[i]) {
            c.sizes[i] = 0; /* not smaller: whole, as the host encoder with a capacity of the tensor's size */
        }
        res->wire_bytes += c.sizes[i] > 0 ? c.sizes[i] : bytes[i];
        if (c.sizes[i] > 0) {
            c.patches[c.patch_count++] = (weft_delta_cuda_patch_t){
                c.out + c.out_offsets[i], c.sizes[i],
                {.data = c.held + c.offsets[i], .tensor_bytes = bytes[i], .row_bytes = bytes[i], .row_stride = bytes[i]}};
        }
    }
    apply_s = ok ? timed(c.st, do_reset, do_apply, &c, res) : -1.0;
    ok = apply_s >= 0 &&
         cuda_ok(cudaMemcpy(verdicts, c.dverdicts, c.patch_count * sizeof(unsigned), cudaMemcpyDeviceToHost), "download",
                 res);
    for (uint32_t i = 0; i < c.patch_count && ok; i++) {
        if (verdicts[i] != 0) {
            snprintf(res->note, sizeof(res->note), "a GPU delta was refused by the GPU apply (verdict %u)", verdicts[i]);
            ok = 0;
        }
    }
    ok = ok && receive_whole(&c, c.sizes) == 0 && check(&c, old_t, new_t) == 0;
    ok = ok && measure_paired(&c, rows, cols, new_t) == 0;
    if (ok) {
        res->copy_s = copy_s;
        res->encode_s = encode_s;
        res->encode_stored_s = encode_stored_s;
        res->apply_s = apply_s;
        res->full_bytes = c.total;
    }
    cudaFree(c.old_v);
    cudaFree(c.new_v);
    cudaFree(c.held);
    cudaFree(c.out);
    cudaFree(c.dsizes);
    cudaFree(c.dverdicts);
    cudaFree(c.work);
    cudaFree(c.apply_work);
    if (c.st != NULL) {
        cudaStreamDestroy(c.st);
    }
    free(c.offsets);
    free(c.out_offsets);
    free(c.sizes);
    free(c.tensors);
    free(c.patches);
    free(c.checksums);
    free(c.own_tensors);
    free(c.own_checksums);
    free(c.own);
    free(c.stored_got);
    free(verdicts);
    return ok ? 0 : -1;
}

#else

int delta_gpu_measure(const uint8_t *const *old_t, const uint8_t *const *new_t, const uint64_t *bytes, uint32_t count,
                      uint64_t rows, uint64_t cols, delta_gpu_result_t *res)
{
    (void)rows;
    (void)cols;
    (void)old_t;
    (void)new_t;
    (void)bytes;
    (void)count;
    snprintf(res->note, sizeof(res->note), "libweft was built without CUDA");
    return 77;
}

#endif
