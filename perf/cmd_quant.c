/*
 * weft-perf quant: the FP8 writer (FP32 → W + WT + scale_inv, 128 × 128
 * blocks) on the GPU, for batched expert matrices and one large square
 * matrix. Bytes are counted as 4 read + 2 written per element, plus the
 * scales. Beside it, in the same run: a device-to-device cudaMemcpyAsync
 * moving the same bytes (read + written counted alike), the ceiling; and
 * the same quantizer compiled by torch.compile (quant_peer.py), the peer.
 * Every shape's output is checked against the host reference.
 */
#include "config.h"

#include "lib/args.h"
#include "lib/columns.h"
#include "lib/json.h"
#include "lib/peer.h"
#include "lib/sysinfo.h"
#include "perf.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/quant.h>
#include <weft/weft.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif


#define BLOCK      128
#define MAX_SETS   16
#define MAX_SHAPES 3
#define MAX_ITERS  10000

typedef struct quant_options {
    uint64_t            iters, warmup;
    int                 json, peer;
    const char         *peer_script;
    weft_quant_params_t params; /* the formula */
} quant_options_t;

typedef struct quant_shape {
    uint64_t experts, rows, cols;
} quant_shape_t;


static int quant_usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf quant [options]\n"
            "  FP8 writer on the GPU vs a D2D copy of the same bytes and torch.compile\n"
            "  shapes: 128 x 1536x2048, 128 x 2048x768 (batched experts), 1 x 8192x8192\n"
            "  --iterations N     timed runs per measurement (default 20); --iters too\n"
            "  --warmup N         untimed runs first (default 5)\n"
            "  --formula F        exact (libweft's default) or reference (DeepGEMM's\n"
            "                     per_block_cast_to_fp8 as PyTorch computes it; quant.h)\n"
            "  --no-peer          skip the torch.compile peer\n"
            "  --peer-script P    the peer script (default %s)\n"
            "  --json             one JSON object per shape instead of the table\n",
            perf_peer_script("quant_peer.py"));
    return out == stdout ? 0 : 2;
}

static int parse_options(int argc, char **argv, quant_options_t *o)
{
    static const struct option longopts[] = {
        {"iterations", required_argument, NULL, 'i'}, {"iters", required_argument, NULL, 'i'}, {"warmup", required_argument, NULL, 'w'},
        {"no-peer", no_argument, NULL, 'n'},     {"peer-script", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},        {"help", no_argument, NULL, 'h'},
        {"formula", required_argument, NULL, 'f'},
        {NULL, 0, NULL, 0},
    };
    int opt;

    *o = (quant_options_t){.iters = 20, .warmup = 5, .peer = 1, .peer_script = perf_peer_script("quant_peer.py"),
                           .params = {.field_mask = WEFT_QUANT_FIELD_FORMULA, .formula = WEFT_QUANT_FORMULA_EXACT}};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'i':
            if (perf_arg_u64("--iterations", optarg, 1, MAX_ITERS, &o->iters) != 0) {
                return 2;
            }
            break;
        case 'w':
            if (perf_arg_u64("--warmup", optarg, 0, MAX_ITERS, &o->warmup) != 0) {
                return 2;
            }
            break;
        case 'n': o->peer = 0; break;
        case 'p': o->peer_script = optarg; break;
        case 'f':
            if (weft_quant_formula_parse(optarg, &o->params.formula) != WEFT_OK) {
                return 2;
            }
            break;
        case 'j': o->json = 1; break;
        case 'h': return quant_usage(stdout) + 1;
        default: return quant_usage(stderr);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-perf quant: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

#ifndef HAVE_CUDA

int perf_cmd_quant(int argc, char **argv)
{
    quant_options_t o;
    int             rc = parse_options(argc, argv, &o);

    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    fprintf(stderr, "weft-perf quant: not built with CUDA: the FP8 writer's GPU kernel is absent; skipped\n");
    return 77;
}

#else

static const quant_shape_t shapes[MAX_SHAPES] = {
    {128, 1536, 2048}, /* gate_up_proj of 128 experts */
    {128, 2048, 768},  /* down_proj of 128 experts */
    {1, 8192, 8192},
};

/* Bytes counted for one batch: 4 read + 2 written per element, + scales. */
static uint64_t counted_bytes(const quant_shape_t *s)
{
    const uint64_t scales = ((s->rows + BLOCK - 1) / BLOCK) * ((s->cols + BLOCK - 1) / BLOCK);

    return s->experts * (s->rows * s->cols * 6 + scales * 4);
}

static int cuda_ok(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "weft-perf quant: %s failed: %s\n", what, cudaGetErrorString(err));
        return 0;
    }
    return 1;
}

#define CU(call) cuda_ok((call), #call)

/* The peer's median times per shape, in ms (NaN: none). */
typedef struct peer_result {
    double median_ms[MAX_SHAPES];
    char   note[256];
    char   torch[64];
} peer_result_t;

/* One of the peer's lines, into arg (a peer_result_t). */
static void quant_peer_line(void *arg, const char *line)
{
    peer_result_t *peer = arg;
    const char    *err = strstr(line, "\"error\"");

    if (err != NULL && strstr(line, "\"shape\"") == NULL) {
        snprintf(peer->note, sizeof(peer->note), "skipped: %.*s", (int)strcspn(line, "\n"), line);
        return;
    }
    for (int i = 0; i < MAX_SHAPES; i++) {
        if (perf_json_find_number(line, "experts") == (double)shapes[i].experts &&
            perf_json_find_number(line, "rows") == (double)shapes[i].rows &&
            perf_json_find_number(line, "cols") == (double)shapes[i].cols) {
            peer->median_ms[i] = perf_json_find_number(line, "median_ms");
            (void)perf_json_find_string(line, "torch", peer->torch, sizeof(peer->torch));
        }
    }
}

static void run_peer(const quant_options_t *o, peer_result_t *peer)
{
    char cmd[1024];
    int  status = 0;

    for (int i = 0; i < MAX_SHAPES; i++) {
        peer->median_ms[i] = NAN;
    }
    snprintf(peer->torch, sizeof(peer->torch), "none");
    if (!o->peer) {
        snprintf(peer->note, sizeof(peer->note), "skipped (--no-peer)");
        return;
    }
    snprintf(cmd, sizeof(cmd),
             "python3 '%s' --formula %s --iters %llu --warmup %llu --shapes %llux%llux%llu,%llux%llux%llu,"
             "%llux%llux%llu 2>&1",
             o->peer_script, weft_quant_formula_name(o->params.formula), (unsigned long long)o->iters,
             (unsigned long long)o->warmup,
             (unsigned long long)shapes[0].experts, (unsigned long long)shapes[0].rows,
             (unsigned long long)shapes[0].cols, (unsigned long long)shapes[1].experts,
             (unsigned long long)shapes[1].rows, (unsigned long long)shapes[1].cols,
             (unsigned long long)shapes[2].experts, (unsigned long long)shapes[2].rows,
             (unsigned long long)shapes[2].cols);
    snprintf(peer->note, sizeof(peer->note), "torch.compile via %s", o->peer_script);
    if (perf_peer_run(cmd, quant_peer_line, peer, &status) != 0) {
        snprintf(peer->note, sizeof(peer->note), "skipped: cannot run python3");
        return;
    }
    if (status != 0 && isnan(peer->median_ms[0]) && strncmp(peer->note, "skipped", 7) != 0) {
        snprintf(peer->note, sizeof(peer->note), "skipped: python3 %s failed (status %d; is torch installed?)",
                 o->peer_script, status);
    }
}

typedef struct quant_buffers {
    float   *x;
    uint8_t *w, *wt;
    float   *s;
} quant_buffers_t;

/* Fills dst with pieces of a random host pattern, each from a different
 * offset, so that no two blocks hold the same numbers. */
static int fill_random(float *dst, uint64_t n, const float *pattern, uint64_t pattern_n, uint64_t seed)
{
    const uint64_t piece = pattern_n / 2;

    for (uint64_t done = 0, k = seed; done < n; k++) {
        const uint64_t len = n - done < piece ? n - done : piece;
        const uint64_t off = (k * 2654435761u) % (pattern_n - len + 1);

        if (!CU(cudaMemcpy(dst + done, pattern + off, len * 4, cudaMemcpyHostToDevice))) {
            return -1;
        }
        done += len;
    }
    return 0;
}

static double median_of(float *ms, uint64_t n)
{
    for (uint64_t i = 1; i < n; i++) { /* insertion sort: n is small */
        float v = ms[i];
        uint64_t j = i;

        for (; j > 0 && ms[j - 1] > v; j--) {
            ms[j] = ms[j - 1];
        }
        ms[j] = v;
    }
    return ms[n / 2];
}

/* Checks matrix m of set 0 against weft_quant_host; 1 when identical. */
static int verify(const quant_options_t *o, const quant_shape_t *sh, const quant_buffers_t *set, uint64_t m)
{
    const uint64_t      nk = sh->rows * sh->cols;
    const uint64_t      ns = ((sh->rows + BLOCK - 1) / BLOCK) * ((sh->cols + BLOCK - 1) / BLOCK);
    float              *x = malloc(nk * 4), *hs = malloc(ns * 4), *gs = malloc(ns * 4);
    uint8_t            *hw = malloc(nk), *hwt = malloc(nk), *gw = malloc(nk), *gwt = malloc(nk);
    weft_quant_matrix_t hm = {x, 0, hw, hwt, hs};
    int                 ok = 0;

    if (x && hs && gs && hw && hwt && gw && gwt && CU(cudaDeviceSynchronize()) &&
        CU(cudaMemcpy(x, set->x + m * nk, nk * 4, cudaMemcpyDeviceToHost)) &&
        CU(cudaMemcpy(gw, set->w + m * nk, nk, cudaMemcpyDeviceToHost)) &&
        CU(cudaMemcpy(gwt, set->wt + m * nk, nk, cudaMemcpyDeviceToHost)) &&
        CU(cudaMemcpy(gs, set->s + m * ns, ns * 4, cudaMemcpyDeviceToHost)) &&
        weft_quant_host(&o->params, WEFT_DTYPE_FP32, sh->rows, sh->cols, &hm, 1) == WEFT_OK) {
        ok = memcmp(hw, gw, nk) == 0 && memcmp(hwt, gwt, nk) == 0 && memcmp(hs, gs, ns * 4) == 0;
    }
    free(x);
    free(hs);
    free(gs);
    free(hw);
    free(hwt);
    free(gw);
    free(gwt);
    return ok;
}

typedef struct quant_result {
    double gbps, copy_gbps, torch_gbps, median_ms, copy_ms;
    int    sets, correct;
} quant_result_t;

/* A shape's row: the table's columns and the --json fields, in one order. */
enum {
    Q_SHAPE, Q_EXPERTS, Q_ROWS, Q_COLS, Q_BYTES, Q_MEDIAN, Q_GBPS, Q_COPY_MEDIAN, Q_COPY_GBPS,
    Q_TORCH_MEDIAN, Q_TORCH_GBPS, Q_RATIO_COPY, Q_RATIO_TORCH, Q_CORRECT, Q_SETS, Q_ITERS, Q_COLUMNS
};

static const perf_column_t quant_columns[Q_COLUMNS] = {
    [Q_SHAPE]        = {"shape", "shape", -16, 0, PERF_COLUMN_TEXT},
    [Q_EXPERTS]      = {"experts", NULL, 0, 0, PERF_COLUMN_UINT},
    [Q_ROWS]         = {"rows", NULL, 0, 0, PERF_COLUMN_UINT},
    [Q_COLS]         = {"cols", NULL, 0, 0, PERF_COLUMN_UINT},
    [Q_BYTES]        = {"bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [Q_MEDIAN]       = {"median_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [Q_GBPS]         = {"gbps", "GB/s", 10, 1, PERF_COLUMN_DOUBLE},
    [Q_COPY_MEDIAN]  = {"copy_median_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [Q_COPY_GBPS]    = {"copy_gbps", "copy_GB/s", 12, 1, PERF_COLUMN_DOUBLE},
    [Q_TORCH_MEDIAN] = {"torch_median_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [Q_TORCH_GBPS]   = {"torch_gbps", "torch_GB/s", 13, 1, PERF_COLUMN_DOUBLE},
    [Q_RATIO_COPY]   = {"ratio_copy", "ratio_copy", 11, 3, PERF_COLUMN_DOUBLE},
    [Q_RATIO_TORCH]  = {"ratio_torch_compile", "ratio_torch_compile", 20, 3, PERF_COLUMN_DOUBLE},
    [Q_CORRECT]      = {"correct", "correct", 8, 0, PERF_COLUMN_BOOL},
    [Q_SETS]         = {"sets", NULL, 0, 0, PERF_COLUMN_UINT},
    [Q_ITERS]        = {"iters", NULL, 0, 0, PERF_COLUMN_UINT},
};

static int measure_shape(const quant_options_t *o, const quant_shape_t *sh, const float *pattern,
                         uint64_t pattern_n, int l2, quant_result_t *res)
{
    const uint64_t       nk = sh->rows * sh->cols, n = nk * sh->experts;
    const uint64_t       ns = ((sh->rows + BLOCK - 1) / BLOCK) * ((sh->cols + BLOCK - 1) / BLOCK);
    const uint64_t       set_bytes = n * 6 + ns * sh->experts * 4;
    const uint64_t       copy_bytes = counted_bytes(sh) / 2;
    int                  sets = (int)((4 * (uint64_t)l2 + set_bytes - 1) / set_bytes);
    quant_buffers_t      buf[MAX_SETS];
    weft_quant_matrix_t *mats = calloc(sh->experts, sizeof(*mats));
    float               *ms = calloc(o->iters, sizeof(*ms));
    cudaEvent_t          start = NULL, stop = NULL;
    int                  rc = -1;

    sets = sets < 2 ? 2 : sets > MAX_SETS ? MAX_SETS : sets;
    memset(buf, 0, sizeof(buf));
    res->sets = sets;
    if (mats == NULL || ms == NULL || !CU(cudaEventCreate(&start)) || !CU(cudaEventCreate(&stop))) {
        goto out;
    }
    for (int i = 0; i < sets; i++) {
        if (!CU(cudaMalloc((void **)&buf[i].x, n * 4)) || !CU(cudaMalloc((void **)&buf[i].w, n)) ||
            !CU(cudaMalloc((void **)&buf[i].wt, n)) ||
            !CU(cudaMalloc((void **)&buf[i].s, ns * sh->experts * 4)) ||
            fill_random(buf[i].x, n, pattern, pattern_n, (uint64_t)i * 1000003u + n) != 0) {
            goto out;
        }
    }

#define QUANT_SET(_i)                                                                                     \
    do {                                                                                                  \
        for (uint64_t _m = 0; _m < sh->experts; _m++) {                                                   \
            mats[_m] = (weft_quant_matrix_t){buf[_i].x + _m * nk, 0, buf[_i].w + _m * nk,                 \
                                             buf[_i].wt + _m * nk, buf[_i].s + _m * ns};                  \
        }                                                                                                 \
        if (weft_quant_cuda(&o->params, WEFT_DTYPE_FP32, sh->rows, sh->cols, mats, sh->experts, NULL) !=   \
            WEFT_OK) {                                                                                    \
            fprintf(stderr, "weft-perf quant: weft_quant_cuda failed\n");                                 \
            goto out;                                                                                     \
        }                                                                                                 \
    } while (0)

    /* Correctness first, on set 0: the first and the last matrix. */
    QUANT_SET(0);
    res->correct = verify(o, sh, &buf[0], 0) && verify(o, sh, &buf[0], sh->experts - 1);

    for (uint64_t i = 0; i < o->warmup; i++) {
        QUANT_SET(i % sets);
    }
    for (uint64_t i = 0; i < o->iters; i++) {
        if (!CU(cudaEventRecord(start, NULL))) {
            goto out;
        }
        QUANT_SET((i + 1) % sets);
        if (!CU(cudaEventRecord(stop, NULL)) || !CU(cudaEventSynchronize(stop)) ||
            !CU(cudaEventElapsedTime(&ms[i], start, stop))) {
            goto out;
        }
    }
    res->median_ms = median_of(ms, o->iters);
    res->gbps = (double)counted_bytes(sh) / (res->median_ms * 1e6);

    /* The ceiling: the same byte count through a D2D copy (read + write). */
    for (uint64_t i = 0; i < o->warmup + o->iters; i++) {
        const int a = (int)(i % sets), b = (int)((i + 1) % sets);

        if (i >= o->warmup && !CU(cudaEventRecord(start, NULL))) {
            goto out;
        }
        if (!CU(cudaMemcpyAsync(buf[b].x, buf[a].x, copy_bytes, cudaMemcpyDeviceToDevice, NULL))) {
            goto out;
        }
        if (i >= o->warmup && (!CU(cudaEventRecord(stop, NULL)) || !CU(cudaEventSynchronize(stop)) ||
                               !CU(cudaEventElapsedTime(&ms[i - o->warmup], start, stop)))) {
            goto out;
        }
    }
    res->copy_ms = median_of(ms, o->iters);
    res->copy_gbps = (double)(2 * copy_bytes) / (res->copy_ms * 1e6);
    rc = 0;

out:
    for (int i = 0; i < sets; i++) {
        cudaFree(buf[i].x);
        cudaFree(buf[i].w);
        cudaFree(buf[i].wt);
        cudaFree(buf[i].s);
    }
    if (start != NULL) {
        cudaEventDestroy(start);
    }
    if (stop != NULL) {
        cudaEventDestroy(stop);
    }
    free(mats);
    free(ms);
    return rc;
#undef QUANT_SET
}

int perf_cmd_quant(int argc, char **argv)
{
    quant_options_t        o;
    peer_result_t          peer;
    quant_result_t         res[MAX_SHAPES];
    struct cudaDeviceProp  prop;
    int                    rc = parse_options(argc, argv, &o), device = 0, l2 = 0, sm_clock = 0, mem_clock = 0;
    int                    driver = 0, runtime = 0, cpu[2], cpus = perf_cpus_allowed(cpu), failed = 0;
    const uint64_t         pattern_n = 16u << 20; /* 64 MB of random floats */
    float                 *pattern;
    char                   host[256];
    uint64_t               rng = 0x2545F4914F6CDD1Dull;

    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    {
        int count = 0;
        /* As the other GPU commands do: no GPU is a skip (77), not an error. */
        if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
            (void)cudaGetLastError();
            fprintf(stderr, "weft-perf quant: no NVIDIA driver or GPU found; skipped\n");
            return 77;
        }
    }
    if (!CU(cudaGetDevice(&device)) || !CU(cudaGetDeviceProperties(&prop, device)) ||
        !CU(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device))) {
        return 1;
    }
    (void)cudaDeviceGetAttribute(&sm_clock, cudaDevAttrClockRate, device);
    (void)cudaDeviceGetAttribute(&mem_clock, cudaDevAttrMemoryClockRate, device);
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    (void)cudaGetLastError();
    perf_host_name(host, sizeof(host));

    /* The peer first, while this process holds little GPU memory. */
    run_peer(&o, &peer);

    pattern = malloc(pattern_n * 4);
    if (pattern == NULL) {
        return 1;
    }
    for (uint64_t i = 0; i < pattern_n; i++) {
        /* Uniform in (-1, 1) times 2^-8 .. 2^7, by 4096-element stretch. */
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        pattern[i] = ldexpf((float)(rng >> 40) / (float)(1u << 23) - 1.0f, (int)((i >> 12) % 16) - 8);
    }

    if (!o.json) {
        perf_print_host(stdout, cpus);
        printf("# device %d: %s, cc %d.%d, %d SMs, L2 %d MB, SM clock %d MHz, memory clock %d MHz\n",
               device, prop.name, prop.major, prop.minor, prop.multiProcessorCount, l2 >> 20, sm_clock / 1000,
               mem_clock / 1000);
        printf("# CUDA driver %d, runtime %d; peer: %s (torch %s)\n", driver, runtime, peer.note, peer.torch);
        printf("# FP32 -> W e4m3 + WT e4m3 + scale_inv f32, block %d, no UE8M0, the %s formula; GB/s count 4 B "
               "read + 2 B written per element + scales\n",
               BLOCK, weft_quant_formula_name(o.params.formula));
        printf("# copy: cudaMemcpyAsync D2D of half those bytes (read + write counted); %llu warm-up, median of "
               "%llu runs, CUDA events; input sets rotated past L2\n",
               (unsigned long long)o.warmup, (unsigned long long)o.iters);
        perf_columns_header(stdout, "", quant_columns, Q_COLUMNS);
        putchar('\n');
    }
    for (int i = 0; i < MAX_SHAPES; i++) {
        const quant_shape_t *sh = &shapes[i];
        char                 name[64];

        snprintf(name, sizeof(name), "%llux%llux%llu", (unsigned long long)sh->experts,
                 (unsigned long long)sh->rows, (unsigned long long)sh->cols);
        memset(&res[i], 0, sizeof(res[i]));
        if (measure_shape(&o, sh, pattern, pattern_n, l2, &res[i]) != 0) {
            fprintf(stderr, "weft-perf quant: shape %s failed\n", name);
            failed = 1;
            continue;
        }
        res[i].torch_gbps = (double)counted_bytes(sh) / (peer.median_ms[i] * 1e6);
        failed |= !res[i].correct;
        {
            const perf_cell_t cells[Q_COLUMNS] = {
                [Q_SHAPE] = {.text = name},
                [Q_EXPERTS] = {.u = sh->experts},
                [Q_ROWS] = {.u = sh->rows},
                [Q_COLS] = {.u = sh->cols},
                [Q_BYTES] = {.u = counted_bytes(sh)},
                [Q_MEDIAN] = {.d = res[i].median_ms},
                [Q_GBPS] = {.d = res[i].gbps},
                [Q_COPY_MEDIAN] = {.d = res[i].copy_ms},
                [Q_COPY_GBPS] = {.d = res[i].copy_gbps},
                [Q_TORCH_MEDIAN] = {.d = peer.median_ms[i]},
                [Q_TORCH_GBPS] = {.d = res[i].torch_gbps},
                [Q_RATIO_COPY] = {.d = res[i].gbps / res[i].copy_gbps},
                [Q_RATIO_TORCH] = {.d = res[i].gbps / res[i].torch_gbps},
                [Q_CORRECT] = {.u = (uint64_t)res[i].correct},
                [Q_SETS] = {.u = (uint64_t)res[i].sets},
                [Q_ITERS] = {.u = o.iters},
            };

            if (o.json) {
                perf_json_t json;

                perf_json_begin(&json, stdout);
                perf_json_str(&json, "command", "quant");
                perf_columns_json(&json, "", quant_columns, Q_COLUMNS, cells);
                perf_json_str(&json, "formula", weft_quant_formula_name(o.params.formula));
                perf_json_str(&json, "device", prop.name);
                perf_json_str(&json, "host", host);
                perf_json_int(&json, "cuda_driver", driver);
                perf_json_int(&json, "cuda_runtime", runtime);
                perf_json_str(&json, "torch", peer.torch);
                perf_json_str(&json, "peer", peer.note);
                perf_json_str(&json, "libweft", weft_version());
                perf_json_end(&json);
            } else {
                perf_columns_row(stdout, "", quant_columns, Q_COLUMNS, cells);
                putchar('\n');
            }
        }
        fflush(stdout);
    }
    free(pattern);
    return failed ? 1 : 0;
}

#endif
