/*
 * Delta versions on the GPU (<weft/delta.h>) against the host codec: the
 * GPU encoder's deltas byte for byte those of weft_delta_encode_host at
 * every rate (chunks whose changes overflow the encoder's per-chunk slot
 * included) and ragged size, from aligned and misaligned versions; the
 * same answer where a delta does not fit; the GPU apply into contiguous
 * and strided device views equal to the new version, padding untouched,
 * and W's delta into WT's views (transposed) equal to the new WT, dense
 * pairs (WT written whole from W's new bytes) included;
 * a malformed delta refused before it writes; the summed apply a
 * consumer verifies with (each target's checksum, rows of odd widths
 * included, equal to the host's, and a delta applied onto the wrong
 * bytes caught by its checksum); batches of many tensors, encoded summing
 * their bytes or given their checksums (a wrong one carried and caught).
 * Exits 77 (skipped) where no GPU is present.
 */
#include "config.h"

#include "lib/delta_inputs.h"
#include "lib/gpu_skip.h"
#include "lib/harness.h"
#include "kernels/delta_internal.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>

#define CUDA_OK(call) ck_assert_int_eq((int)(call), (int)cudaSuccess)

/* n bytes of device memory (and 16 more), holding `host`'s if not NULL. */
static void *to_device(const void *host, uint64_t n)
{
    void *d = NULL;

    CUDA_OK(cudaMalloc(&d, n + 16));
    if (n > 0 && host != NULL) {
        CUDA_OK(cudaMemcpy(d, host, n, cudaMemcpyHostToDevice));
    }
    return d;
}

/* Applies count patches in one batch on the default stream, summed when
 * `sums` is not NULL, and copies their verdicts (and sums) back: the
 * workspace and device arrays live for this call only. */
static void apply_batch(const weft_delta_cuda_patch_t *patches, uint32_t count, unsigned *verdicts, uint64_t *sums)
{
    const size_t need = weft_delta_cuda_apply_work_bytes(count);
    void        *work = NULL, *dverdicts = NULL, *dsums = NULL;

    CUDA_OK(cudaMalloc(&work, need));
    CUDA_OK(cudaMalloc(&dverdicts, count * sizeof(unsigned)));
    if (sums != NULL) {
        CUDA_OK(cudaMalloc(&dsums, count * sizeof(uint64_t)));
        ck_assert_int_eq(weft_delta_apply_cuda_summed_async(patches, count, dverdicts, dsums, work, need, NULL),
                         WEFT_OK);
        CUDA_OK(cudaMemcpy(sums, dsums, count * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    } else {
        ck_assert_int_eq(weft_delta_apply_cuda_async(patches, count, dverdicts, work, need, NULL), WEFT_OK);
    }
    CUDA_OK(cudaMemcpy(verdicts, dverdicts, count * sizeof(unsigned), cudaMemcpyDeviceToHost));
    cudaFree(work);
    cudaFree(dverdicts);
    cudaFree(dsums);
}

/* Both encoders on old → new (the device copies `skew` bytes into their
 * buffers, to test misaligned versions), with `capacity`: the same status,
 * and where it is WEFT_OK the same size and bytes. Returns the status. */
static weft_status_t encode_both(const uint8_t *a, const uint8_t *b, uint64_t n, uint64_t capacity, uint64_t skew)
{
    uint8_t      *host = malloc(capacity ? capacity : 1), *got = malloc(capacity ? capacity : 1);
    uint8_t      *da = NULL, *db = NULL, *dout = NULL;
    uint64_t      host_size = 0, gpu_size = 0;
    weft_status_t hs, gs;

    ck_assert(host != NULL && got != NULL);
    CUDA_OK(cudaMalloc((void **)&da, n + skew + 16));
    CUDA_OK(cudaMalloc((void **)&db, n + skew + 16));
    CUDA_OK(cudaMalloc((void **)&dout, capacity + 16));
    if (n > 0) {
        CUDA_OK(cudaMemcpy(da + skew, a, n, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(db + skew, b, n, cudaMemcpyHostToDevice));
    }
    hs = weft_delta_encode_host(a, b, n, host, capacity, &host_size);
    gs = weft_delta_encode_cuda(da + skew, db + skew, n, dout, capacity, &gpu_size, NULL);
    ck_assert_msg(hs == gs, "%llu bytes, capacity %llu: host %s, GPU %s", (unsigned long long)n,
                  (unsigned long long)capacity, weft_status_string(hs), weft_status_string(gs));
    if (hs == WEFT_OK) {
        ck_assert_uint_eq(gpu_size, host_size);
        CUDA_OK(cudaMemcpy(got, dout, gpu_size, cudaMemcpyDeviceToHost));
        ck_assert_msg(memcmp(got, host, host_size) == 0, "%llu bytes: the GPU's delta differs from the host's",
                      (unsigned long long)n);
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dout);
    free(host);
    free(got);
    return hs;
}

START_TEST(gpu_encodes_the_hosts_bytes)
{
    /* ragged sizes; rates from none to all, 0.2 past a chunk's slot (256
     * changes of 4096) so that those chunks are compared twice */
    static const uint64_t sizes[] = {1, 7, 15, 16, 17, 4095, 4096, 4097, 3 * 4096 + 5, (1u << 20) + 3, 8u << 20};
    static const double   rates[] = {0.0, 0.001, 0.0125, 0.05, 0.2, 1.0};
    const uint64_t        max = 8u << 20;
    uint8_t              *a = malloc(max), *b = malloc(max);

    ck_assert(a != NULL && b != NULL);
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        for (size_t ri = 0; ri < sizeof(rates) / sizeof(rates[0]); ri++) {
            const uint64_t n = sizes[si];
            make_pair(a, b, n, rates[ri], 100 * si + ri + 1);
            ck_assert_int_eq(encode_both(a, b, n, weft_delta_bytes(n, n), 0), WEFT_OK);
            ck_assert_int_eq(encode_both(a, b, n, weft_delta_bytes(n, n), (si + ri) % 15 + 1), WEFT_OK);
        }
    }
    free(a);
    free(b);
}
END_TEST

/* Capacity: the tensor's own size refuses an all-changed delta on both
 * sides, takes a sparse one; below the empty delta, NO_SPACE at once. */
START_TEST(gpu_no_space_as_the_host)
{
    const uint64_t n = 64 * 4096 + 11;
    uint8_t       *a = malloc(n), *b = malloc(n);

    ck_assert(a != NULL && b != NULL);
    make_pair(a, b, n, 1.0, 5);
    ck_assert_int_eq(encode_both(a, b, n, n, 0), WEFT_ERR_NO_SPACE);
    make_pair(a, b, n, 0.01, 6);
    ck_assert_int_eq(encode_both(a, b, n, n, 0), WEFT_OK);
    ck_assert_int_eq(encode_both(a, b, n, weft_delta_bytes(n, 0) - 1, 0), WEFT_ERR_NO_SPACE);
    /* exactly the delta's size fits; one byte less does not */
    {
        const uint64_t exact = weft_delta_bytes(n, naive_changes(a, b, n));
        ck_assert_int_eq(encode_both(a, b, n, exact, 0), WEFT_OK);
        ck_assert_int_eq(encode_both(a, b, n, exact - 1, 0), WEFT_ERR_NO_SPACE);
    }
    free(a);
    free(b);
}
END_TEST

/* A version's worth of tensors in one asynchronous batch on a stream of
 * its own: sizes 0 to 1 MB, one misaligned, one whose delta does not fit
 * (size 0), each delta the host's; then all applied in one batch into
 * device copies of the old tensors, one of them damaged: that one refused
 * (its target untouched), the others the new bytes. */
#define BATCH 7
START_TEST(gpu_batches_encode_and_apply)
{
    static const uint64_t sizes[BATCH] = {3u << 20, 0, 4097, 1, 100000, 5 * 4096, 12345};
    static const double   rates[BATCH] = {0.0125, 0.0, 0.2, 1.0, 0.001, 1.0, 0.05};
    uint8_t                 *a[BATCH], *b[BATCH], *host[BATCH], *da[BATCH], *db[BATCH], *dout[BATCH], *dtarget[BATCH];
    uint64_t                 host_size[BATCH], sizes_back[BATCH], *dsizes = NULL;
    unsigned                 verdicts[BATCH], *dverdicts = NULL;
    weft_delta_cuda_tensor_t tensors[BATCH];
    weft_delta_cuda_patch_t  patches[BATCH];
    void                    *work = NULL;
    size_t                   work_bytes;
    cudaStream_t             st;

    CUDA_OK(cudaStreamCreate(&st));
    for (int i = 0; i < BATCH; i++) {
        const uint64_t n = sizes[i], skew = i == 2 ? 3 : 0;
        const uint64_t capacity = i == 5 ? n : weft_delta_bytes(n, n); /* i = 5: all changed, room for n */
        a[i] = malloc(n + 1);
        b[i] = malloc(n + 1);
        host[i] = malloc(capacity);
        ck_assert(a[i] != NULL && b[i] != NULL && host[i] != NULL);
        make_pair(a[i], b[i], n, rates[i], 40 + (uint64_t)i);
        da[i] = to_device(NULL, n + skew);
        db[i] = to_device(NULL, n + skew);
        if (n > 0) {
            CUDA_OK(cudaMemcpy(da[i] + skew, a[i], n, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(db[i] + skew, b[i], n, cudaMemcpyHostToDevice));
        }
        CUDA_OK(cudaMalloc((void **)&dout[i], capacity));
        tensors[i] = (weft_delta_cuda_tensor_t){da[i] + skew, db[i] + skew, n, dout[i], capacity};
        host_size[i] = 0;
        ck_assert_int_eq(weft_delta_encode_host(a[i], b[i], n, host[i], capacity, &host_size[i]),
                         i == 5 ? WEFT_ERR_NO_SPACE : WEFT_OK);
    }
    work_bytes = weft_delta_cuda_encode_work_bytes(tensors, BATCH);
    CUDA_OK(cudaMalloc(&work, work_bytes));
    CUDA_OK(cudaMalloc((void **)&dsizes, sizeof(sizes_back)));
    ck_assert_int_eq(weft_delta_encode_cuda_async(tensors, BATCH, dsizes, work, work_bytes, st), WEFT_OK);
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(sizes_back, dsizes, sizeof(sizes_back), cudaMemcpyDeviceToHost));
    for (int i = 0; i < BATCH; i++) {
        uint8_t *got = malloc(tensors[i].out_capacity);
        ck_assert(got != NULL);
        if (i == 5) {
            ck_assert_uint_eq(sizes_back[i], 0);
            free(got);
            continue;
        }
        ck_assert_uint_eq(sizes_back[i], host_size[i]);
        CUDA_OK(cudaMemcpy(got, dout[i], host_size[i], cudaMemcpyDeviceToHost));
        ck_assert_msg(memcmp(got, host[i], host_size[i]) == 0, "tensor %d: the GPU's delta differs", i);
        free(got);
    }
    /* Arguments: a short or misaligned workspace, NULLs, a tensor's output
     * misaligned or below the empty delta. */
    ck_assert_int_eq(weft_delta_encode_cuda_async(tensors, BATCH, dsizes, work, work_bytes - 1, st),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_delta_encode_cuda_async(tensors, BATCH, dsizes, (char *)work + 8, work_bytes, st),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_delta_encode_cuda_async(tensors, BATCH, NULL, work, work_bytes, st), WEFT_ERR_INVALID_PARAM);
    tensors[0].out = dout[0] + 1;
    ck_assert_int_eq(weft_delta_encode_cuda_async(tensors, BATCH, dsizes, work, work_bytes, st), WEFT_ERR_INVALID_PARAM);
    tensors[0].out = dout[0];
    tensors[0].out_capacity = weft_delta_bytes(tensors[0].bytes, 0) - 1;
    ck_assert_int_eq(weft_delta_encode_cuda_async(tensors, BATCH, dsizes, work, work_bytes, st), WEFT_ERR_NO_SPACE);
    ck_assert_int_eq(weft_delta_encode_cuda(da[0], db[0], sizes[0], dout[0], sizes[0], NULL, NULL),
                     WEFT_ERR_INVALID_PARAM);

    /* The apply batch: the six deltas that fit (tensor 5 goes whole),
     * tensor 4's with its magic broken. */
    cudaFree(work);
    work_bytes = weft_delta_cuda_apply_work_bytes(BATCH);
    CUDA_OK(cudaMalloc(&work, work_bytes));
    CUDA_OK(cudaMalloc((void **)&dverdicts, sizeof(verdicts)));
    {
        int count = 0, index[BATCH];
        for (int i = 0; i < BATCH; i++) {
            dtarget[i] = to_device(a[i], sizes[i]);
            if (i == 5) {
                continue;
            }
            if (i == 4) {
                CUDA_OK(cudaMemset(dout[i], 0x58, 1)); /* "XFD1" */
            }
            index[count] = i;
            patches[count++] = (weft_delta_cuda_patch_t){
                dout[i], host_size[i], {.data = dtarget[i], .tensor_bytes = sizes[i], .row_bytes = sizes[i] ? sizes[i] : 1,
                                        .row_stride = sizes[i] ? sizes[i] : 1}};
        }
        ck_assert_int_eq(weft_delta_apply_cuda_async(patches, (uint32_t)count, dverdicts, work, work_bytes, st), WEFT_OK);
        CUDA_OK(cudaStreamSynchronize(st));
        CUDA_OK(cudaMemcpy(verdicts, dverdicts, (size_t)count * sizeof(unsigned), cudaMemcpyDeviceToHost));
        for (int c = 0; c < count; c++) {
            const int i = index[c];
            uint8_t  *back = malloc(sizes[i] + 1);
            ck_assert(back != NULL);
            if (sizes[i] > 0) {
                CUDA_OK(cudaMemcpy(back, dtarget[i], sizes[i], cudaMemcpyDeviceToHost));
            }
            if (i == 4) {
                ck_assert_uint_ne(verdicts[c], 0);
                ck_assert_int_eq(memcmp(back, a[i], sizes[i]), 0);
            } else {
                ck_assert_msg(verdicts[c] == 0, "patch %d refused (%u)", i, verdicts[c]);
                ck_assert_int_eq(memcmp(back, b[i], sizes[i]), 0);
            }
            free(back);
        }
        ck_assert_int_eq(weft_delta_apply_cuda_async(patches, (uint32_t)count, NULL, work, work_bytes, st),
                         WEFT_ERR_INVALID_PARAM);
        ck_assert_int_eq(weft_delta_apply_cuda_async(patches, (uint32_t)count, dverdicts, work, work_bytes - 1, st),
                         WEFT_ERR_INVALID_PARAM);
    }
    for (int i = 0; i < BATCH; i++) {
        cudaFree(da[i]);
        cudaFree(db[i]);
        cudaFree(dout[i]);
        cudaFree(dtarget[i]);
        free(a[i]);
        free(b[i]);
        free(host[i]);
    }
    cudaFree(work);
    cudaFree(dsizes);
    cudaFree(dverdicts);
    CUDA_OK(cudaStreamDestroy(st));
}
END_TEST

/* The GPU apply into a contiguous device copy of old and into rows of a
 * fused device tensor (padding between rows left alone): the new bytes,
 * and the checksum the delta carries is theirs. */
/* A strided view read back: each row the new version's, the padding
 * between rows untouched (0xA5). */
static void expect_rows(const uint8_t *back, const uint8_t *want, uint64_t rows, uint64_t row_bytes, uint64_t stride)
{
    for (uint64_t r = 0; r < rows; r++) {
        ck_assert_int_eq(memcmp(back + r * stride, want + r * row_bytes, row_bytes), 0);
        for (uint64_t g = row_bytes; g < stride; g++) {
            ck_assert_uint_eq(back[r * stride + g], 0xA5);
        }
    }
}

START_TEST(gpu_apply_into_contiguous_and_strided_views)
{
    const uint64_t rows = 777, row_bytes = 96, stride = 160, n = rows * row_bytes;
    uint8_t       *a = malloc(n), *b = malloc(n), *delta = malloc(weft_delta_bytes(n, n));
    uint8_t       *fused = malloc(rows * stride), *back = malloc(rows * stride);
    uint8_t       *ddelta, *dtarget, *dfused;
    uint64_t       size = 0, carried = 0;

    ck_assert(a != NULL && b != NULL && delta != NULL && fused != NULL && back != NULL);
    for (int pass = 0; pass < 2; pass++) {
        make_pair(a, b, n, pass == 0 ? 0.01 : 0.3, 21 + pass);
        ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, weft_delta_bytes(n, n), &size), WEFT_OK);
        ddelta = to_device(delta, size);
        dtarget = to_device(a, n);
        {
            const weft_delta_target_t t = {.data = dtarget, .tensor_bytes = n, .row_bytes = n, .row_stride = n};
            ck_assert_int_eq(weft_delta_apply_cuda(ddelta, size, &t, &carried, NULL), WEFT_OK);
            CUDA_OK(cudaMemcpy(back, dtarget, n, cudaMemcpyDeviceToHost));
            ck_assert_int_eq(memcmp(back, b, n), 0);
            ck_assert_uint_eq(carried, weft_checksum_host(b, n));
        }
        memset(fused, 0xA5, rows * stride);
        for (uint64_t r = 0; r < rows; r++) {
            memcpy(fused + r * stride, a + r * row_bytes, row_bytes);
        }
        dfused = to_device(fused, rows * stride);
        {
            const weft_delta_target_t t = {.data = dfused, .tensor_bytes = n, .row_bytes = row_bytes,
                                           .row_stride = stride};
            ck_assert_int_eq(weft_delta_apply_cuda(ddelta, size, &t, NULL, NULL), WEFT_OK);
        }
        CUDA_OK(cudaMemcpy(back, dfused, rows * stride, cudaMemcpyDeviceToHost));
        expect_rows(back, b, rows, row_bytes, stride);
        cudaFree(ddelta);
        cudaFree(dtarget);
        cudaFree(dfused);
    }
    free(a);
    free(b);
    free(delta);
    free(fused);
    free(back);
}
END_TEST

/* W's delta applied on the GPU to W and, transposed, to WT in one batch
 * (a contiguous WT of ragged matrices, and a strided one): each byte as
 * the host's transposed apply gives it; summed, each transposed view's
 * sum WT's checksum (its delta carries W's: not compared there). */
static void transposed_views(uint64_t e, uint64_t rows, uint64_t cols)
{
    const uint64_t n = e * rows * cols, stride = rows + 27;
    uint8_t       *a = malloc(n), *b = malloc(n), *at = malloc(n), *bt = malloc(n), *back = malloc(n / rows * stride);
    uint8_t       *fused = malloc(n / rows * stride), *delta = malloc(weft_delta_bytes(n, n));
    uint64_t       size = 0;
    unsigned       verdicts[3];

    ck_assert(a != NULL && b != NULL && at != NULL && bt != NULL && back != NULL && fused != NULL && delta != NULL);
    for (int pass = 0; pass < 2; pass++) {
        make_pair(a, b, n, pass == 0 ? 0.0125 : 0.4, 51 + pass);
        transpose_matrices(a, at, e, rows, cols);
        transpose_matrices(b, bt, e, rows, cols);
        ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, weft_delta_bytes(n, n), &size), WEFT_OK);
        memset(fused, 0xA5, n / rows * stride);
        for (uint64_t r = 0; r < n / rows; r++) {
            memcpy(fused + r * stride, at + r * rows, rows);
        }
        uint8_t *ddelta = to_device(delta, size), *dw = to_device(a, n), *dwt = to_device(at, n);
        uint8_t *dfused = to_device(fused, n / rows * stride);
        const weft_delta_cuda_patch_t patches[3] = {
            {ddelta, size, {.data = dw, .tensor_bytes = n, .row_bytes = n, .row_stride = n}},
            {ddelta, size,
             {.data = dwt, .tensor_bytes = n, .row_bytes = n, .row_stride = n, .transpose_rows = rows,
              .transpose_cols = cols}},
            {ddelta, size,
             {.data = dfused, .tensor_bytes = n, .row_bytes = rows, .row_stride = stride, .transpose_rows = rows,
              .transpose_cols = cols}}};
        uint64_t sums[3];

        if (pass == 0) {
            apply_batch(patches, 3, verdicts, NULL);
        } else {
            /* Summed: W's view against the checksum its delta carries,
             * the transposed ones only summed, for the caller to compare
             * with WT's own. */
            apply_batch(patches, 3, verdicts, sums);
            ck_assert_uint_eq(sums[0], weft_checksum_host(b, n));
            ck_assert_uint_eq(sums[1], weft_checksum_host(bt, n));
            ck_assert_uint_eq(sums[2], weft_checksum_host(bt, n));
        }
        ck_assert_uint_eq(verdicts[0] | verdicts[1] | verdicts[2], 0);
        CUDA_OK(cudaMemcpy(back, dw, n, cudaMemcpyDeviceToHost));
        ck_assert_int_eq(memcmp(back, b, n), 0);
        CUDA_OK(cudaMemcpy(back, dwt, n, cudaMemcpyDeviceToHost));
        ck_assert_int_eq(memcmp(back, bt, n), 0);
        CUDA_OK(cudaMemcpy(back, dfused, n / rows * stride, cudaMemcpyDeviceToHost));
        expect_rows(back, bt, n / rows, rows, stride);
        {
            /* Matrices that do not tile the tensor: refused, as on the host. */
            const weft_delta_target_t t = {.data = dwt, .tensor_bytes = n, .row_bytes = n, .row_stride = n,
                                           .transpose_rows = rows + 1, .transpose_cols = cols};
            ck_assert_int_eq(weft_delta_apply_cuda(ddelta, size, &t, NULL, NULL), WEFT_ERR_INVALID_PARAM);
        }
        cudaFree(ddelta);
        cudaFree(dw);
        cudaFree(dwt);
        cudaFree(dfused);
    }
    free(a);
    free(b);
    free(at);
    free(bt);
    free(back);
    free(fused);
    free(delta);
}

/* W's rows of 1029 bytes (the scatter steps from each chunk's first
 * byte; chunks straddle matrices), of exactly the 512 it steps from, and
 * of 300 (matrices smaller than a chunk: the general formula). */
START_TEST(gpu_apply_into_transposed_views)
{
    transposed_views(3, 37, 1029);
    transposed_views(2, 100, 512);
    transposed_views(5, 7, 300);
}
END_TEST

/*
 * Dense pairs: W's delta applied to W and then, transposed, to WT in one
 * batch, in matrices whose sides are multiples of 128, where with
 * WEFT_DELTA_WT_REWRITE=auto the apply writes WT whole from W's new bytes
 * instead of scattering into it (a delta of at least one change in 256
 * bytes), and with off scatters as before: the same bytes either way. Two pairs of different
 * shapes in one batch (the rewrite finds each tile's pair) and a strided
 * WT view after them (scattered): each equal to the new WT at every rate,
 * sparse (scattered) ones included, and summed as WT's checksum. A pair
 * whose delta is damaged writes neither W nor WT, and both are refused.
 */
typedef struct pair_case {
    uint64_t e, rows, cols, n;
    uint8_t *a, *b, *at, *bt, *delta;
    uint64_t size;
    uint8_t *ddelta, *dw, *dwt;
} pair_case_t;

static void pair_make(pair_case_t *c, uint64_t e, uint64_t rows, uint64_t cols, double rate, uint64_t seed)
{
    c->e = e;
    c->rows = rows;
    c->cols = cols;
    c->n = e * rows * cols;
    c->a = malloc(c->n);
    c->b = malloc(c->n);
    c->at = malloc(c->n);
    c->bt = malloc(c->n);
    c->delta = malloc(weft_delta_bytes(c->n, c->n));
    ck_assert(c->a != NULL && c->b != NULL && c->at != NULL && c->bt != NULL && c->delta != NULL);
    make_pair(c->a, c->b, c->n, rate, seed);
    transpose_matrices(c->a, c->at, e, rows, cols);
    transpose_matrices(c->b, c->bt, e, rows, cols);
    ck_assert_int_eq(weft_delta_encode_host(c->a, c->b, c->n, c->delta, weft_delta_bytes(c->n, c->n), &c->size),
                     WEFT_OK);
    c->ddelta = to_device(c->delta, c->size);
    c->dw = to_device(c->a, c->n);
    c->dwt = to_device(c->at, c->n);
}

static void pair_free(pair_case_t *c)
{
    cudaFree(c->ddelta);
    cudaFree(c->dw);
    cudaFree(c->dwt);
    free(c->a);
    free(c->b);
    free(c->at);
    free(c->bt);
    free(c->delta);
}

/* W's patch, then WT's (transposed), of one pair. */
static void pair_patches(const pair_case_t *c, weft_delta_cuda_patch_t *out)
{
    out[0] = (weft_delta_cuda_patch_t){c->ddelta, c->size,
                                       {.data = c->dw, .tensor_bytes = c->n, .row_bytes = c->n, .row_stride = c->n}};
    out[1] = (weft_delta_cuda_patch_t){c->ddelta, c->size,
                                       {.data = c->dwt, .tensor_bytes = c->n, .row_bytes = c->n, .row_stride = c->n,
                                        .transpose_rows = c->rows, .transpose_cols = c->cols}};
}

static void expect_device(const void *d, const uint8_t *want, uint64_t n, const char *what, double rate)
{
    uint8_t *back = malloc(n);

    ck_assert(back != NULL);
    CUDA_OK(cudaMemcpy(back, d, n, cudaMemcpyDeviceToHost));
    ck_assert_msg(memcmp(back, want, n) == 0, "rate %g: %s differs", rate, what);
    free(back);
}

static void dense_pairs(const char *rewrite)
{
    const double rates[] = {0.0125, 0.4, 1.0, 0.001, 0.004};

    /* Read at the first apply: each test runs in a process of its own. */
    ck_assert_int_eq(setenv("WEFT_DELTA_WT_REWRITE", rewrite, 1), 0);

    for (size_t r = 0; r < sizeof(rates) / sizeof(rates[0]); r++) {
        pair_case_t    p, q;
        const uint64_t stride = 256 + 48;

        pair_make(&p, 3, 256, 384, rates[r], 70 + r);
        pair_make(&q, 1, 128, 640, rates[r], 90 + r);
        /* A strided WT view of p, scattered into */
        uint8_t *fused = malloc(p.n / p.rows * stride);
        ck_assert(fused != NULL);
        memset(fused, 0x5A, p.n / p.rows * stride);
        for (uint64_t row = 0; row < p.n / p.rows; row++) {
            memcpy(fused + row * stride, p.at + row * p.rows, p.rows);
        }
        uint8_t                *dfused = to_device(fused, p.n / p.rows * stride);
        weft_delta_cuda_patch_t patches[5];
        unsigned                verdicts[5];
        uint64_t                sums[5];

        pair_patches(&p, patches);
        pair_patches(&q, patches + 2);
        patches[4] = (weft_delta_cuda_patch_t){p.ddelta, p.size,
                                               {.data = dfused, .tensor_bytes = p.n, .row_bytes = p.rows,
                                                .row_stride = stride, .transpose_rows = p.rows,
                                                .transpose_cols = p.cols}};
        apply_batch(patches, 5, verdicts, sums);
        for (int i = 0; i < 5; i++) {
            ck_assert_msg(verdicts[i] == 0, "rate %g: patch %d refused (%u)", rates[r], i, verdicts[i]);
        }
        expect_device(p.dw, p.b, p.n, "W", rates[r]);
        expect_device(p.dwt, p.bt, p.n, "WT", rates[r]);
        expect_device(q.dw, q.b, q.n, "the second pair's W", rates[r]);
        expect_device(q.dwt, q.bt, q.n, "the second pair's WT", rates[r]);
        CUDA_OK(cudaMemcpy(fused, dfused, p.n / p.rows * stride, cudaMemcpyDeviceToHost));
        expect_rows(fused, p.bt, p.n / p.rows, p.rows, stride);
        ck_assert_uint_eq(sums[0], weft_checksum_host(p.b, p.n));
        ck_assert_uint_eq(sums[1], weft_checksum_host(p.bt, p.n));
        ck_assert_uint_eq(sums[3], weft_checksum_host(q.bt, q.n));
        ck_assert_uint_eq(sums[4], weft_checksum_host(p.bt, p.n));

        /* Damaged: a middle chunk's offsets out of order, a change count
         * that does not match the size, a truncated delta. The pair is
         * reset to the older bytes first. */
        const uint64_t chunks = (p.n + WEFT_DELTA_CHUNK_BYTES - 1) / WEFT_DELTA_CHUNK_BYTES;
        const uint64_t changes = (p.size - WEFT_DELTA_HEADER_BYTES - 4 * chunks) / 3;
        for (int k = 0; k < 3 && changes >= 2; k++) {
            uint8_t *bad = malloc(p.size);
            uint64_t len = p.size;

            ck_assert(bad != NULL);
            memcpy(bad, p.delta, p.size);
            if (k == 0) {
                uint16_t       *offsets = (uint16_t *)(bad + WEFT_DELTA_HEADER_BYTES + 4 * chunks);
                const uint32_t *first = (const uint32_t *)(bad + WEFT_DELTA_HEADER_BYTES);
                uint64_t        at = UINT64_MAX; /* the first change of a later chunk with two or more */

                for (uint64_t ch = chunks / 2; ch < chunks && at == UINT64_MAX; ch++) {
                    const uint64_t end = ch + 1 < chunks ? first[ch + 1] : changes;
                    at = end - first[ch] >= 2 ? first[ch] : UINT64_MAX;
                }
                ck_assert(at != UINT64_MAX);
                offsets[at + 1] = offsets[at];
            } else if (k == 1) {
                bad[16] ^= 1;
            } else {
                len = p.size - 3;
            }
            CUDA_OK(cudaMemcpy(p.dw, p.a, p.n, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(p.dwt, p.at, p.n, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(p.ddelta, bad, p.size, cudaMemcpyHostToDevice));
            patches[0].delta_bytes = patches[1].delta_bytes = len;
            apply_batch(patches, 2, verdicts, NULL);
            ck_assert_msg(verdicts[0] != 0 && verdicts[1] != 0, "rate %g: damage %d: verdicts %u, %u", rates[r], k,
                          verdicts[0], verdicts[1]);
            expect_device(p.dw, p.a, p.n, "a refused W", rates[r]);
            expect_device(p.dwt, p.at, p.n, "a refused WT", rates[r]);
            free(bad);
        }
        cudaFree(dfused);
        free(fused);
        pair_free(&p);
        pair_free(&q);
    }
}

START_TEST(gpu_dense_pairs_rewrite_wt)
{
    dense_pairs("auto");
}
END_TEST

START_TEST(gpu_dense_pairs_scatter_wt)
{
    dense_pairs("off");
}
END_TEST

/* Three deltas in one summed apply: into a contiguous target, into rows
 * of 93 bytes 131 apart (checksum words straddle rows), and into a target
 * that does not hold the delta's old bytes: the first two applied and
 * summed as the host sums the new version, the third caught by the
 * checksum it carries. */
START_TEST(gpu_summed_apply_checks_each_target)
{
    const uint64_t rows = 333, row_bytes = 93, stride = 131, n = rows * row_bytes;
    uint8_t       *a = malloc(n), *b = malloc(n), *other = malloc(n), *fused = malloc(rows * stride);
    uint8_t       *delta = malloc(weft_delta_bytes(n, n)), *back = malloc(rows * stride);
    uint64_t       size = 0, sums[3];
    unsigned       verdicts[3];

    ck_assert(a != NULL && b != NULL && other != NULL && fused != NULL && delta != NULL && back != NULL);
    make_pair(a, b, n, 0.02, 31);
    memcpy(other, a, n);
    for (uint64_t i = n / 2; i < n; i++) {
        if (a[i] == b[i]) {
            other[i] ^= 0x10; /* the engine wrote where the delta does not */
            break;
        }
    }
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, weft_delta_bytes(n, n), &size), WEFT_OK);
    memset(fused, 0xA5, rows * stride);
    for (uint64_t r = 0; r < rows; r++) {
        memcpy(fused + r * stride, a + r * row_bytes, row_bytes);
    }
    uint8_t *ddelta = to_device(delta, size), *dflat = to_device(a, n), *dfused = to_device(fused, rows * stride);
    uint8_t *dother = to_device(other, n);
    const weft_delta_cuda_patch_t patches[3] = {
        {ddelta, size, {.data = dflat, .tensor_bytes = n, .row_bytes = n, .row_stride = n}},
        {ddelta, size, {.data = dfused, .tensor_bytes = n, .row_bytes = row_bytes, .row_stride = stride}},
        {ddelta, size, {.data = dother, .tensor_bytes = n, .row_bytes = n, .row_stride = n}}};

    apply_batch(patches, 3, verdicts, sums);
    ck_assert_uint_eq(verdicts[0], 0);
    ck_assert_uint_eq(verdicts[1], 0);
    ck_assert_uint_eq(verdicts[2], WEFT_DELTA_VERDICT_SUM);
    ck_assert_uint_eq(sums[0], weft_checksum_host(b, n));
    ck_assert_uint_eq(sums[1], weft_checksum_host(b, n));
    ck_assert_uint_ne(sums[2], weft_checksum_host(b, n));
    CUDA_OK(cudaMemcpy(back, dfused, rows * stride, cudaMemcpyDeviceToHost));
    expect_rows(back, b, rows, row_bytes, stride);
    cudaFree(ddelta);
    cudaFree(dflat);
    cudaFree(dfused);
    cudaFree(dother);
    free(a);
    free(b);
    free(other);
    free(fused);
    free(delta);
    free(back);
}
END_TEST

/*
 * A batch of many tensors (more than one launch's piece of them, so the
 * pieces' chunk and group numbering meet), several of more than one
 * group of the encoder's second step (and ragged), one at a rate whose
 * chunks overflow their slots: the deltas equal the host's, encoded
 * summing the bytes and given the checksums; given a wrong checksum, a
 * delta carries it and the summed apply refuses what it gave.
 */
#define MANY 400

START_TEST(gpu_many_tensors_and_given_checksums)
{
    uint8_t                  *a[MANY], *b[MANY], *da[MANY], *db[MANY], *dout[MANY];
    uint64_t                  n[MANY], host_size[MANY], sums[MANY], back_sizes[MANY], *dsizes = NULL;
    weft_delta_cuda_tensor_t  tensors[MANY];
    uint8_t                  *host = NULL, *got = NULL;
    void                     *work = NULL;
    size_t                    work_bytes;
    uint64_t                  seed = 77, most = 0;

    for (int i = 0; i < MANY; i++) {
        /* a few of 1..3 groups of 256 chunks, ragged; the rest small, some empty */
        n[i] = i % 97 == 5 ? (uint64_t)(256 + 300 * (i % 3)) * WEFT_DELTA_CHUNK_BYTES + 77 * (uint64_t)i
                           : rng_next(&seed) % (3 * WEFT_DELTA_CHUNK_BYTES);
        n[i] = i % 50 == 7 ? 0 : n[i];
        most = n[i] > most ? n[i] : most;
        a[i] = malloc(n[i] + 1);
        b[i] = malloc(n[i] + 1);
        ck_assert(a[i] != NULL && b[i] != NULL);
        make_pair(a[i], b[i], n[i], i == 102 ? 0.2 : 0.0125, 500 + (uint64_t)i);
        da[i] = to_device(a[i], n[i]);
        db[i] = to_device(b[i], n[i]);
        CUDA_OK(cudaMalloc((void **)&dout[i], weft_delta_bytes(n[i], n[i])));
        tensors[i] = (weft_delta_cuda_tensor_t){da[i], db[i], n[i], dout[i], weft_delta_bytes(n[i], n[i])};
        sums[i] = weft_checksum_host(b[i], n[i]);
    }
    host = malloc(weft_delta_bytes(most, most));
    got = malloc(weft_delta_bytes(most, most));
    ck_assert(host != NULL && got != NULL);
    work_bytes = weft_delta_cuda_encode_work_bytes(tensors, MANY);
    CUDA_OK(cudaMalloc(&work, work_bytes));
    CUDA_OK(cudaMalloc((void **)&dsizes, sizeof(back_sizes)));
    for (int given = 0; given < 2; given++) {
        CUDA_OK(cudaMemset(dsizes, 0xFF, sizeof(back_sizes)));
        ck_assert_int_eq(given ? weft_delta_encode_cuda_with_checksums_async(tensors, sums, MANY, dsizes, work,
                                                                             work_bytes, NULL)
                               : weft_delta_encode_cuda_async(tensors, MANY, dsizes, work, work_bytes, NULL),
                         WEFT_OK);
        CUDA_OK(cudaMemcpy(back_sizes, dsizes, sizeof(back_sizes), cudaMemcpyDeviceToHost));
        for (int i = 0; i < MANY; i++) {
            ck_assert_int_eq(weft_delta_encode_host(a[i], b[i], n[i], host, tensors[i].out_capacity, &host_size[i]),
                             WEFT_OK);
            ck_assert_msg(back_sizes[i] == host_size[i], "tensor %d (%llu bytes, given %d): size %llu, host %llu", i,
                          (unsigned long long)n[i], given, (unsigned long long)back_sizes[i],
                          (unsigned long long)host_size[i]);
            CUDA_OK(cudaMemcpy(got, dout[i], host_size[i], cudaMemcpyDeviceToHost));
            ck_assert_msg(memcmp(got, host, host_size[i]) == 0, "tensor %d (given %d): the GPU's delta differs", i,
                          given);
        }
    }
    ck_assert_int_eq(weft_delta_encode_cuda_with_checksums_async(tensors, NULL, MANY, dsizes, work, work_bytes, NULL),
                     WEFT_ERR_INVALID_PARAM);

    /* A wrong checksum given for tensor 5: carried, and caught by the apply. */
    {
        const int                     i = 5;
        const uint64_t                wrong = sums[i] ^ 1;
        uint64_t                      carried = 0, sum = 0;
        unsigned                      verdict = 0, *dverdict = NULL;
        uint64_t                     *dsum = NULL;
        void                         *apply_work = NULL;
        const size_t                  apply_bytes = weft_delta_cuda_apply_work_bytes(1);
        uint8_t                      *dtarget = to_device(a[i], n[i]);
        const weft_delta_cuda_patch_t patch = {
            dout[i], host_size[i], {.data = dtarget, .tensor_bytes = n[i], .row_bytes = n[i], .row_stride = n[i]}};

        ck_assert_uint_gt(n[i], 256 * WEFT_DELTA_CHUNK_BYTES);
        ck_assert_int_eq(weft_delta_encode_cuda_with_checksums_async(&tensors[i], &wrong, 1, dsizes, work, work_bytes,
                                                                     NULL),
                         WEFT_OK);
        CUDA_OK(cudaMemcpy(&carried, dout[i] + 24, sizeof(carried), cudaMemcpyDeviceToHost));
        ck_assert_uint_eq(carried, wrong);
        CUDA_OK(cudaMalloc(&apply_work, apply_bytes));
        CUDA_OK(cudaMalloc((void **)&dverdict, sizeof(verdict)));
        CUDA_OK(cudaMalloc((void **)&dsum, sizeof(sum)));
        ck_assert_int_eq(weft_delta_apply_cuda_summed_async(&patch, 1, dverdict, dsum, apply_work, apply_bytes, NULL),
                         WEFT_OK);
        CUDA_OK(cudaMemcpy(&verdict, dverdict, sizeof(verdict), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(&sum, dsum, sizeof(sum), cudaMemcpyDeviceToHost));
        ck_assert_uint_eq(verdict, WEFT_DELTA_VERDICT_SUM);
        ck_assert_uint_eq(sum, sums[i]); /* applied: the new bytes, whose checksum is not the one given */
        cudaFree(apply_work);
        cudaFree(dverdict);
        cudaFree(dsum);
        cudaFree(dtarget);
    }
    for (int i = 0; i < MANY; i++) {
        cudaFree(da[i]);
        cudaFree(db[i]);
        cudaFree(dout[i]);
        free(a[i]);
        free(b[i]);
    }
    free(host);
    free(got);
    cudaFree(work);
    cudaFree(dsizes);
}
END_TEST

/* The host test's damaged deltas, on the GPU: each refused as the host
 * refuses it, and the device target untouched. */
START_TEST(gpu_malformed_deltas_are_refused_before_writing)
{
    const uint64_t n = 3 * WEFT_DELTA_CHUNK_BYTES;
    uint8_t       *a = malloc(n), *b = malloc(n), *back = malloc(n);
    uint8_t       *delta = malloc(weft_delta_bytes(n, n)), *bad = malloc(weft_delta_bytes(n, n));
    uint8_t       *dbad, *dtarget;
    uint64_t       size = 0;

    ck_assert(a != NULL && b != NULL && back != NULL && delta != NULL && bad != NULL);
    make_pair(a, b, n, 0.01, 11);
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, n, &size), WEFT_OK);
    dtarget = to_device(a, n);
    CUDA_OK(cudaMalloc((void **)&dbad, weft_delta_bytes(n, n)));
    for (int k = 0; k < DELTA_DAMAGES; k++) {
        uint64_t            len;
        int                 other;
        weft_status_t       expect;
        weft_delta_target_t t = {.data = dtarget, .tensor_bytes = n, .row_bytes = n, .row_stride = n};
        weft_delta_target_t host_t = {.data = back, .tensor_bytes = n, .row_bytes = n, .row_stride = n};

        memcpy(bad, delta, size);
        expect = delta_damage(bad, size, k, &len, &other);
        if (other) {
            t.tensor_bytes = t.row_bytes = t.row_stride = n - WEFT_DELTA_CHUNK_BYTES;
            host_t.tensor_bytes = host_t.row_bytes = host_t.row_stride = t.tensor_bytes;
        }
        memcpy(back, a, n);
        ck_assert_int_eq(weft_delta_apply_host(bad, len, &host_t, NULL), expect);
        CUDA_OK(cudaMemcpy(dbad, bad, size, cudaMemcpyHostToDevice));
        ck_assert_msg(weft_delta_apply_cuda(dbad, len, &t, NULL, NULL) == expect, "damage %d not refused as the host", k);
        CUDA_OK(cudaMemcpy(back, dtarget, n, cudaMemcpyDeviceToHost));
        ck_assert_int_eq(memcmp(back, a, n), 0);
    }
    /* and the sound delta then applies */
    {
        const weft_delta_target_t t = {.data = dtarget, .tensor_bytes = n, .row_bytes = n, .row_stride = n};
        CUDA_OK(cudaMemcpy(dbad, delta, size, cudaMemcpyHostToDevice));
        ck_assert_int_eq(weft_delta_apply_cuda(dbad, size, &t, NULL, NULL), WEFT_OK);
        CUDA_OK(cudaMemcpy(back, dtarget, n, cudaMemcpyDeviceToHost));
        ck_assert_int_eq(memcmp(back, b, n), 0);
    }
    cudaFree(dbad);
    cudaFree(dtarget);
    free(a);
    free(b);
    free(back);
    free(delta);
    free(bad);
}
END_TEST

static Suite *delta_cuda_suite(void)
{
    Suite *s;
    TCase *tc;

    if (weft_test_gpu_count() == 0) {
        return NULL;
    }
    s = suite_create("delta_cuda");
    tc = tcase_create("gpu");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, gpu_encodes_the_hosts_bytes);
    tcase_add_test(tc, gpu_no_space_as_the_host);
    tcase_add_test(tc, gpu_batches_encode_and_apply);
    tcase_add_test(tc, gpu_apply_into_contiguous_and_strided_views);
    tcase_add_test(tc, gpu_apply_into_transposed_views);
    tcase_add_test(tc, gpu_dense_pairs_rewrite_wt);
    tcase_add_test(tc, gpu_dense_pairs_scatter_wt);
    tcase_add_test(tc, gpu_malformed_deltas_are_refused_before_writing);
    tcase_add_test(tc, gpu_summed_apply_checks_each_target);
    tcase_add_test(tc, gpu_many_tensors_and_given_checksums);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(delta_cuda_suite)
