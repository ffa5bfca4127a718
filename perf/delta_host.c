/*
 * weft-perf delta's host codec (delta.h, delta_host_case): one case's
 * versions made by real optimizer steps and the FP8 writer, each sent
 * from the previous one as libweft's transports send it (W's delta once,
 * for W and, transposed, WT; the scales'; a tensor whole where that is
 * no larger) into a consumer's copy, timed against a memcpy of the
 * version and checked byte for byte; with --gpu, the GPU codec on the
 * same versions (delta_gpu.c).
 */
#include "delta.h"
#include "lib/stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>

/* One version's FP8 tensors, all experts': W, WT, scale_inv. */
typedef struct version {
    uint8_t *w, *wt;
    float   *scale;
    uint64_t experts, rows, cols, scales;
} version_t;

static int version_alloc(version_t *v, uint64_t experts, uint64_t rows, uint64_t cols)
{
    v->experts = experts;
    v->rows = rows;
    v->cols = cols;
    v->scales = ((rows + 127) / 128) * ((cols + 127) / 128);
    v->w = malloc(experts * rows * cols);
    v->wt = malloc(experts * rows * cols);
    v->scale = malloc(experts * v->scales * sizeof(float));
    return v->w != NULL && v->wt != NULL && v->scale != NULL ? 0 : -1;
}

static void version_free(version_t *v)
{
    free(v->w);
    free(v->wt);
    free(v->scale);
}

static uint64_t version_bytes(const version_t *v)
{
    return v->experts * (2 * v->rows * v->cols + v->scales * sizeof(float));
}

static int quantize(const float *master, version_t *v)
{
    for (uint64_t e = 0; e < v->experts; e++) {
        const uint64_t      n = v->rows * v->cols;
        weft_quant_matrix_t m = {.x = master + e * n, .w = v->w + e * n, .wt = v->wt + e * n,
                                 .scale_inv = v->scale + e * v->scales};
        if (weft_quant_host(NULL, WEFT_DTYPE_FP32, v->rows, v->cols, &m, 1) != WEFT_OK) {
            return -1;
        }
    }
    return 0;
}

/* What sending a version took: its wire bytes as the transports send
 * them and as each tensor's own delta would be, the tensors sent whole,
 * and the encode and apply times. */
typedef struct send_totals {
    uint64_t wire, wire_per_tensor, whole;
    double   encode_s, apply_s;
} send_totals_t;

/* The delta from old_data to new_data into scratch, timed: WEFT_OK, or
 * WEFT_ERR_NO_SPACE where the tensor whole is no larger. */
static weft_status_t encode_timed(const void *old_data, const void *new_data, uint64_t bytes, uint8_t *scratch,
                                  uint64_t *size, send_totals_t *tot)
{
    const double  t0 = delta_now_s();
    weft_status_t st = weft_delta_encode_host(old_data, new_data, bytes, scratch, bytes, size);

    tot->encode_s += delta_now_s() - t0;
    return st;
}

static int apply_timed(const uint8_t *scratch, uint64_t size, const weft_delta_target_t *t, send_totals_t *tot)
{
    const double t0 = delta_now_s();
    uint64_t     carried = 0;
    int          rc = weft_delta_apply_host(scratch, size, t, &carried) == WEFT_OK ? 0 : -1;

    tot->apply_s += delta_now_s() - t0;
    return rc;
}

static void send_whole(const void *new_data, uint64_t bytes, void *held, send_totals_t *tot)
{
    const double t0 = delta_now_s();

    memcpy(held, new_data, bytes);
    tot->apply_s += delta_now_s() - t0;
    tot->wire += bytes;
    tot->wire_per_tensor += bytes;
    tot->whole += 1;
}

/* A contiguous tensor of `bytes` bytes at `data`, as a delta's target. */
static weft_delta_target_t contiguous(void *data, uint64_t bytes)
{
    return (weft_delta_target_t){.data = data, .tensor_bytes = bytes, .row_bytes = bytes, .row_stride = bytes};
}

/* Sends one tensor from `old` to `new` as a delta (or whole) into the
 * consumer's copy `held`. */
static int send_tensor(const void *old_data, const void *new_data, uint64_t bytes, void *held, uint8_t *scratch,
                       send_totals_t *tot)
{
    const weft_delta_target_t t = contiguous(held, bytes);
    uint64_t                  size = 0;
    weft_status_t             st = encode_timed(old_data, new_data, bytes, scratch, &size, tot);

    if (st == WEFT_ERR_NO_SPACE) {
        send_whole(new_data, bytes, held, tot);
        return 0;
    }
    if (st != WEFT_OK || apply_timed(scratch, size, &t, tot) != 0) {
        return -1;
    }
    tot->wire += size;
    tot->wire_per_tensor += size;
    return 0;
}

/* An expert's W [rows, cols] and WT as libweft's transports send them
 * (docs/protocol.md, "W's delta for WT"): W's delta once, applied to W
 * and, transposed, to WT (the writer's WT is W's bytes transposed);
 * where W goes whole, WT as its own delta. WT's own delta is also
 * encoded, untimed, for wire_per_tensor. */
static int send_w_and_wt(const uint8_t *old_w, const uint8_t *new_w, const uint8_t *old_wt, const uint8_t *new_wt,
                         uint64_t rows, uint64_t cols, uint8_t *held_w, uint8_t *held_wt, uint8_t *scratch,
                         send_totals_t *tot)
{
    const uint64_t            n = rows * cols;
    const weft_delta_target_t w = contiguous(held_w, n);
    weft_delta_target_t       wt = contiguous(held_wt, n);
    uint64_t                  size = 0, own = 0;
    weft_status_t             st = encode_timed(old_w, new_w, n, scratch, &size, tot);

    wt.transpose_rows = rows;
    wt.transpose_cols = cols;
    if (st == WEFT_ERR_NO_SPACE) {
        send_whole(new_w, n, held_w, tot);
        return send_tensor(old_wt, new_wt, n, held_wt, scratch, tot);
    }
    if (st != WEFT_OK || apply_timed(scratch, size, &w, tot) != 0 || apply_timed(scratch, size, &wt, tot) != 0) {
        return -1;
    }
    st = weft_delta_encode_host(old_wt, new_wt, n, scratch, n, &own);
    if (st != WEFT_OK && st != WEFT_ERR_NO_SPACE) {
        return -1;
    }
    tot->wire += size;
    tot->wire_per_tensor += size + (st == WEFT_OK ? own : n);
    return 0;
}

static double median_of(const double *v, uint64_t n)
{
    perf_spread_t s;

    perf_spread_of(v, (size_t)(n < PERF_SPREAD_MAX ? n : PERF_SPREAD_MAX), &s);
    return s.median;
}

static uint64_t wrong_between(const uint8_t *a, const uint8_t *b, uint64_t n)
{
    uint64_t wrong = 0;

    for (uint64_t i = 0; i < n; i++) {
        wrong += a[i] != b[i];
    }
    return wrong;
}

int delta_host_case(const delta_options_t *o, weft_optim_algo_t algo, double lr, uint64_t experts, uint64_t rows,
                    uint64_t cols, delta_case_result_t *res)
{
    const uint64_t          n = experts * rows * cols;
    weft_optim_h            opt = NULL;
    float                  *master = NULL, *grad = malloc(n * sizeof(float));
    version_t               prev = {0}, cur = {0}, held = {0};
    uint8_t                *scratch = malloc(rows * cols + 4096);
    double                 *enc = calloc(o->steps, sizeof(double)), *app = calloc(o->steps, sizeof(double));
    double                 *cpy = calloc(o->steps, sizeof(double));
    double                 *genc = calloc(o->steps, sizeof(double)), *gapp = calloc(o->steps, sizeof(double));
    double                 *gens = calloc(o->steps, sizeof(double));
    double                 *gcpy = calloc(o->steps, sizeof(double));
    double                 *gpenc = calloc(o->steps, sizeof(double)), *gpapp = calloc(o->steps, sizeof(double));
    const uint8_t         **old_t = calloc(3 * experts, sizeof(*old_t)), **new_t = calloc(3 * experts, sizeof(*new_t));
    uint64_t               *tensor_bytes = calloc(3 * experts, sizeof(uint64_t));
    uint64_t                changed = 0;
    int                     rc = -1;

    memset(res, 0, sizeof(*res));
    if (grad == NULL || scratch == NULL || enc == NULL || app == NULL || cpy == NULL || genc == NULL || gapp == NULL ||
        gcpy == NULL || gens == NULL || gpenc == NULL || gpapp == NULL || old_t == NULL || new_t == NULL || tensor_bytes == NULL ||
        version_alloc(&prev, experts, rows, cols) != 0 || version_alloc(&cur, experts, rows, cols) != 0 ||
        version_alloc(&held, experts, rows, cols) != 0) {
        fprintf(stderr, "weft-perf delta: out of memory for the versions\n");
        goto out;
    }
    if (delta_optim_make(o, algo, lr, experts, rows, cols, grad, &opt, &master) != 0) {
        goto out;
    }
    if (quantize(master, &prev) != 0) {
        goto out;
    }
    /* The consumer holds version 0. */
    memcpy(held.w, prev.w, n);
    memcpy(held.wt, prev.wt, n);
    memcpy(held.scale, prev.scale, experts * prev.scales * sizeof(float));
    for (uint64_t s = 0; s < o->steps; s++) {
        send_totals_t tot = {0};
        double        t0;

        if (delta_optim_step(o, opt, grad, n, s) != 0 || quantize(master, &cur) != 0) {
            fprintf(stderr, "weft-perf delta: step %llu failed\n", (unsigned long long)s);
            goto out;
        }
        changed += wrong_between(prev.w, cur.w, n);
        for (uint64_t e = 0; e < experts; e++) {
            const uint64_t off = e * rows * cols, sb = prev.scales * sizeof(float);
            if (send_w_and_wt(prev.w + off, cur.w + off, prev.wt + off, cur.wt + off, rows, cols, held.w + off,
                              held.wt + off, scratch, &tot) != 0 ||
                send_tensor(prev.scale + e * prev.scales, cur.scale + e * prev.scales, sb, held.scale + e * prev.scales,
                            scratch, &tot) != 0) {
                fprintf(stderr, "weft-perf delta: a delta failed\n");
                goto out;
            }
        }
        enc[s] = tot.encode_s;
        app[s] = tot.apply_s;
        res->tensors_whole += tot.whole;
        res->wire_bytes += tot.wire;
        res->wire_per_tensor_bytes += tot.wire_per_tensor;
        res->full_bytes += version_bytes(&cur);
        if (o->gpu && res->gpu_ran != 77) {
            delta_gpu_result_t g = {0};
            int                grc;

            for (uint64_t e = 0; e < experts; e++) {
                const uint64_t off = e * rows * cols;
                old_t[3 * e] = prev.w + off;
                new_t[3 * e] = cur.w + off;
                old_t[3 * e + 1] = prev.wt + off;
                new_t[3 * e + 1] = cur.wt + off;
                old_t[3 * e + 2] = (const uint8_t *)(prev.scale + e * prev.scales);
                new_t[3 * e + 2] = (const uint8_t *)(cur.scale + e * prev.scales);
                tensor_bytes[3 * e] = tensor_bytes[3 * e + 1] = rows * cols;
                tensor_bytes[3 * e + 2] = prev.scales * sizeof(float);
            }
            grc = delta_gpu_measure(old_t, new_t, tensor_bytes, (uint32_t)(3 * experts), rows, cols, &g);
            if (grc == 77) {
                fprintf(stderr, "weft-perf delta: --gpu skipped: %s\n", g.note);
                res->gpu_ran = 77;
            } else if (grc != 0) {
                fprintf(stderr, "weft-perf delta: --gpu failed: %s\n", g.note);
                goto out;
            } else {
                res->gpu_ran = 1;
                genc[s] = g.encode_s;
                gens[s] = g.encode_stored_s;
                gapp[s] = g.apply_s;
                gcpy[s] = g.copy_s;
                gpenc[s] = g.encode_paired_s;
                gpapp[s] = g.apply_paired_s;
                res->gpu_wire_paired_bytes += g.wire_paired_bytes;
                res->gpu_mismatched += g.mismatched_deltas;
                res->gpu_wrong += g.wrong_bytes;
            }
        }
        res->wrong_bytes += wrong_between(held.w, cur.w, n) + wrong_between(held.wt, cur.wt, n) +
                            wrong_between((const uint8_t *)held.scale, (const uint8_t *)cur.scale,
                                          experts * cur.scales * sizeof(float));
        /* The ceiling: the full version's bytes copied (into prev, which
         * becomes the older version of the next step anyway). */
        t0 = delta_now_s();
        memcpy(prev.w, cur.w, n);
        memcpy(prev.wt, cur.wt, n);
        memcpy(prev.scale, cur.scale, experts * cur.scales * sizeof(float));
        cpy[s] = delta_now_s() - t0;
    }
    res->changed_w = (double)changed / ((double)n * (double)o->steps);
    res->wire_ratio = (double)res->wire_bytes / (double)res->full_bytes;
    res->encode_s = median_of(enc, o->steps);
    res->apply_s = median_of(app, o->steps);
    res->copy_s = median_of(cpy, o->steps);
    if (res->gpu_ran == 1) {
        res->gpu_encode_s = median_of(genc, o->steps);
        res->gpu_encode_stored_s = median_of(gens, o->steps);
        res->gpu_apply_s = median_of(gapp, o->steps);
        res->gpu_copy_s = median_of(gcpy, o->steps);
        res->gpu_encode_paired_s = median_of(gpenc, o->steps);
        res->gpu_apply_paired_s = median_of(gpapp, o->steps);
    }
    rc = 0;
out:
    weft_optim_destroy(opt);
    version_free(&prev);
    version_free(&cur);
    version_free(&held);
    free(grad);
    free(scratch);
    free(enc);
    free(app);
    free(cpy);
    free(genc);
    free(gens);
    free(gapp);
    free(gcpy);
    free(gpenc);
    free(gpapp);
    free(old_t);
    free(new_t);
    free(tensor_bytes);
    return rc;
}
