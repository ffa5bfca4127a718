/*
 * weft-perf optim: the staged AdamW step (optim.h, STAGED placement) on
 * expert groups shaped like a real MoE layer, on one GPU. Masters and state
 * in pinned host memory, gradients on the GPU: each step moves 12 B a
 * parameter each way over PCIe. Beside it, in the same run:
 *  - the PCIe floor: those bytes ÷ the bandwidth of one 1 GiB copy each way
 *    at once (two streams), the most both directions move together;
 *  - the same step with the FP8 writer (W, WT, scale_inv into a GPU
 *    registry version) in the slot;
 *  - the peer: a staged AdamW a PyTorch user would write (optim_peer.py:
 *    chunked, double-buffered, pinned, torch._fused_adamw_).
 * The FP8 bytes written from the slot are checked against weft_quant_host
 * of the masters copied back (first and last expert of each group).
 * Then Muon, shape by shape: a RESIDENT step (every matrix in one batch)
 * beside the same step in PyTorch around the reference batched
 * Newton–Schulz, torch.compile'd, that NS alone, and the BF16 GEMM peak,
 * and a STAGED step (--muon-batch matrices a slot) beside max(its PCIe
 * floor, the RESIDENT step); the staged masters are checked against the
 * resident ones after the same steps. A staged step costs at least its
 * floor plus one slot's copy in (nothing to copy out yet) and one slot's
 * copy out (nothing left to copy in): 4 matrices a slot keep that near
 * 5 % of the floor, where 8 made 10-16 % on the H200 (1536x2048: 1.06-1.07
 * against 1.13-1.16 × the bound, the same runs) and the GEMMs of 4 still
 * finish under their slot's copies.
 */
#include "config.h"

#include "lib/args.h"
#include "lib/gpu_buf.h"
#include "lib/columns.h"
#include "lib/json.h"
#include "lib/peer.h"
#include "lib/stats.h"
#include "lib/sysinfo.h"
#include "perf.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft/weft.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif


#define MAX_GROUPS 8
#define MAX_ITERS  1000

typedef struct optim_options {
    uint64_t    experts, iters, warmup, slots, slot_mib, muon_batch;
    uint64_t    rows[MAX_GROUPS], cols[MAX_GROUPS];
    int         groups, json, peer, device, muon;
    const char *peer_script;
} optim_options_t;

static int optim_usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf optim [options]\n"
            "  The staged AdamW step on expert groups [E, rows, cols], masters and state in\n"
            "  pinned host memory, beside the PCIe floor, the same step with the FP8 writer\n"
            "  and a PyTorch staged pipeline.\n"
            "  --experts N        experts a group (128)\n"
            "  --shapes RxC,...   the groups' matrix shapes (1536x2048,2048x768)\n"
            "  --slots N          GPU staging slots (4)\n"
            "  --slot-mib N       MiB a slot (0: just the largest matrix's master and state)\n"
            "  --iterations N     timed steps (5), after --warmup N (2); --iters too\n"
            "  --device N         GPU (0)\n"
            "  --no-muon          skip Muon (batched on the GPU, and staged)\n"
            "  --muon-batch N     matrices a staged Muon slot carries (4)\n"
            "  --no-peer          skip the PyTorch pipeline\n"
            "  --peer-script P    the peer script (default %s)\n"
            "  --json             one JSON object per case (AdamW; Muon, a shape each) instead\n"
            "                     of the table\n",
            perf_peer_script("optim_peer.py"));
    return out == stdout ? 0 : 2;
}

static int parse_shapes(const char *text, optim_options_t *o)
{
    const char *p = text;

    o->groups = 0;
    while (*p != '\0') {
        unsigned long long r, c;
        int                used = 0;
        if (o->groups == MAX_GROUPS || sscanf(p, "%llux%llu%n", &r, &c, &used) != 2 || r == 0 || c == 0 ||
            r > 65536 || c > 65536) {
            fprintf(stderr, "weft-perf optim: --shapes takes up to %d ROWSxCOLS, comma-separated\n", MAX_GROUPS);
            return 2;
        }
        o->rows[o->groups] = r;
        o->cols[o->groups] = c;
        o->groups++;
        p += used;
        if (*p == ',') {
            p++;
        }
    }
    return o->groups > 0 ? 0 : 2;
}

static int optim_parse(int argc, char **argv, optim_options_t *o)
{
    static const struct option longopts[] = {
        {"experts", required_argument, NULL, 'e'}, {"shapes", required_argument, NULL, 's'},
        {"slots", required_argument, NULL, 'k'},   {"slot-mib", required_argument, NULL, 'm'},
        {"iterations", required_argument, NULL, 'i'}, {"iters", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'w'},
        {"device", required_argument, NULL, 'd'},  {"no-peer", no_argument, NULL, 'n'},
        {"no-muon", no_argument, NULL, 'u'},       {"muon-batch", required_argument, NULL, 'b'},
        {"peer-script", required_argument, NULL, 'p'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0}};
    uint64_t device = 0;
    int      opt;

    *o = (optim_options_t){.experts = 128, .iters = 5, .warmup = 2, .slots = 4, .muon_batch = 4, .peer = 1, .muon = 1,
                           .peer_script = perf_peer_script("optim_peer.py")};
    parse_shapes("1536x2048,2048x768", o);
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'e': bad = perf_arg_u64("--experts", optarg, 1, 4096, &o->experts); break;
        case 's': bad = parse_shapes(optarg, o); break;
        case 'k': bad = perf_arg_u64("--slots", optarg, 2, 64, &o->slots); break;
        case 'm': bad = perf_arg_u64("--slot-mib", optarg, 0, 65536, &o->slot_mib); break;
        case 'i': bad = perf_arg_u64("--iterations", optarg, 1, MAX_ITERS, &o->iters); break;
        case 'w': bad = perf_arg_u64("--warmup", optarg, 0, 100, &o->warmup); break;
        case 'd': bad = perf_arg_u64("--device", optarg, 0, 63, &device); break;
        case 'n': o->peer = 0; break;
        case 'u': o->muon = 0; break;
        case 'b': bad = perf_arg_u64("--muon-batch", optarg, 1, 4096, &o->muon_batch); break;
        case 'p': o->peer_script = optarg; break;
        case 'j': o->json = 1; break;
        case 'h': return optim_usage(stdout) + 1;
        default: return optim_usage(stderr);
        }
        if (bad) {
            return 2;
        }
    }
    o->device = (int)device;
    if (optind < argc) {
        fprintf(stderr, "weft-perf optim: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

#ifndef HAVE_CUDA

int perf_cmd_optim(int argc, char **argv)
{
    optim_options_t o;
    int             rc = optim_parse(argc, argv, &o);

    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    fprintf(stderr, "weft-perf optim: not built with CUDA: the staged optimizer needs a GPU; skipped\n");
    return 77;
}

#else

static int cuda_ok(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "weft-perf optim: %s failed: %s\n", what, cudaGetErrorString(err));
        return 0;
    }
    return 1;
}

#define CU(call) cuda_ok((call), #call)

static int weft_ok(weft_status_t status, const char *what)
{
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf optim: %s: %s\n", what, weft_status_string(status));
        return 0;
    }
    return 1;
}

static double median_of(double *ms, size_t n)
{
    perf_spread_t s;
    perf_spread_of(ms, n, &s);
    return s.median;
}

/* One direction alone and both at once, 1 GiB each, pinned: GB/s a
 * direction (the slower of the two when both run). */
typedef struct pcie {
    double h2d_gbps, d2h_gbps, both_gbps;
} pcie_t;

static int measure_pcie(pcie_t *out)
{
    const size_t bytes = (size_t)1 << 30;
    void        *host_a = NULL, *host_b = NULL, *dev_a = NULL, *dev_b = NULL;
    cudaStream_t s1 = NULL, s2 = NULL;
    cudaEvent_t  ev[6];
    double       h2d[5], d2h[5], both[5];
    int          ok;

    ok = CU(cudaHostAlloc(&host_a, bytes, 0)) && CU(cudaHostAlloc(&host_b, bytes, 0)) &&
         CU(cudaMalloc(&dev_a, bytes)) && CU(cudaMalloc(&dev_b, bytes)) &&
         CU(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)) &&
         CU(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    for (int i = 0; i < 6 && ok; i++) {
        ok = CU(cudaEventCreate(&ev[i]));
    }
    if (ok) {
        memset(host_a, 0x5a, bytes);
        memset(host_b, 0xa5, bytes);
    }
    for (int r = -1; r < 5 && ok; r++) {
        float ms1 = 0, ms2 = 0, ms3 = 0, ms4 = 0;
        ok = CU(cudaEventRecord(ev[0], s1)) && CU(cudaMemcpyAsync(dev_a, host_a, bytes, cudaMemcpyHostToDevice, s1)) &&
             CU(cudaEventRecord(ev[1], s1)) && CU(cudaMemcpyAsync(host_b, dev_b, bytes, cudaMemcpyDeviceToHost, s1)) &&
             CU(cudaEventRecord(ev[2], s1)) && CU(cudaStreamSynchronize(s1)) &&
             /* Both at once: each on its stream, both started after one event. */
             CU(cudaEventRecord(ev[3], s1)) && CU(cudaStreamWaitEvent(s2, ev[3], 0)) &&
             CU(cudaMemcpyAsync(dev_a, host_a, bytes, cudaMemcpyHostToDevice, s1)) &&
             CU(cudaMemcpyAsync(host_b, dev_b, bytes, cudaMemcpyDeviceToHost, s2)) &&
             CU(cudaEventRecord(ev[4], s1)) && CU(cudaEventRecord(ev[5], s2)) && CU(cudaDeviceSynchronize()) &&
             CU(cudaEventElapsedTime(&ms1, ev[0], ev[1])) && CU(cudaEventElapsedTime(&ms2, ev[1], ev[2])) &&
             CU(cudaEventElapsedTime(&ms3, ev[3], ev[4])) && CU(cudaEventElapsedTime(&ms4, ev[3], ev[5]));
        if (ok && r >= 0) {
            h2d[r]  = (double)bytes / (ms1 / 1e3) / 1e9;
            d2h[r]  = (double)bytes / (ms2 / 1e3) / 1e9;
            both[r] = (double)bytes / ((ms3 > ms4 ? ms3 : ms4) / 1e3) / 1e9;
        }
    }
    if (ok) {
        out->h2d_gbps  = median_of(h2d, 5);
        out->d2h_gbps  = median_of(d2h, 5);
        out->both_gbps = median_of(both, 5);
    }
    for (int i = 0; i < 6; i++) {
        cudaEventDestroy(ev[i]);
    }
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaFreeHost(host_a);
    cudaFreeHost(host_b);
    cudaFree(dev_a);
    cudaFree(dev_b);
    return ok ? 0 : -1;
}

static void group_name(char *buf, size_t size, int g)
{
    snprintf(buf, size, "model.layers.0.mlp.experts.{E}.proj%d", g);
}

static void tensor_name(char *buf, size_t size, int g, uint64_t e, const char *suffix)
{
    snprintf(buf, size, "model.layers.0.mlp.experts.%llu.proj%d.%s", (unsigned long long)e, g, suffix);
}

/* A GPU registry holding W, WT and scale_inv of every expert matrix. */
static int registry_make(const optim_options_t *o, const char *name, weft_registry_h *out)
{
    weft_registry_params_t p = {.field_mask = WEFT_REGISTRY_FIELD_MEMORY | WEFT_REGISTRY_FIELD_MAX_TENSORS |
                                              WEFT_REGISTRY_FIELD_SLOTS,
                                .memory = WEFT_MEMORY_CUDA, .device = o->device, .slot_count = 2,
                                .max_tensors = (uint32_t)(3 * o->experts * (uint64_t)o->groups)};
    weft_registry_h        reg;
    char                   tname[WEFT_TENSOR_NAME_MAX];

    weft_registry_unlink(name);
    if (!weft_ok(weft_registry_create(name, &p, &reg), "registry")) {
        return -1;
    }
    for (int g = 0; g < o->groups; g++) {
        for (uint64_t e = 0; e < o->experts; e++) {
            const uint64_t     r = o->rows[g], c = o->cols[g];
            weft_tensor_desc_t d[3] = {
                {.name = NULL, .layer = 0, .expert = (int32_t)e, .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3,
                 .ndim = 2, .shape = {r, c}},
                {.name = NULL, .layer = 0, .expert = (int32_t)e, .role = WEFT_ROLE_WT, .dtype = WEFT_DTYPE_FP8_E4M3,
                 .ndim = 2, .shape = {c, r}},
                {.name = NULL, .layer = 0, .expert = (int32_t)e, .role = WEFT_ROLE_SCALE, .dtype = WEFT_DTYPE_FP32,
                 .ndim = 2, .shape = {(r + 127) / 128, (c + 127) / 128}}};
            static const char *suffix[3] = {"weight", "weight_t", "weight_scale_inv"};
            for (int k = 0; k < 3; k++) {
                tensor_name(tname, sizeof(tname), g, e, suffix[k]);
                d[k].name = tname;
                if (!weft_ok(weft_registry_declare(reg, &d[k], NULL), "declare")) {
                    weft_registry_close(reg);
                    weft_registry_unlink(name);
                    return -1;
                }
            }
        }
    }
    if (!weft_ok(weft_registry_seal(reg), "seal")) {
        weft_registry_close(reg);
        weft_registry_unlink(name);
        return -1;
    }
    *out = reg;
    return 0;
}

/* The FP8 of expert e of group g in the registry's version being written
 * against weft_quant_host of its master. */
static int check_expert(const optim_options_t *o, weft_optim_h opt, weft_registry_h reg, int g, uint64_t e)
{
    static const char *suffix[3] = {"weight", "weight_t", "weight_scale_inv"};
    const uint64_t     r = o->rows[g], c = o->cols[g], n = r * c, scales = ((r + 127) / 128) * ((c + 127) / 128);
    const size_t       bytes[3] = {n, n, scales * 4};
    uint8_t           *want[3], *got = malloc(n > scales * 4 ? n : scales * 4);
    float             *master;
    int                same = 1;

    want[0] = malloc(n);
    want[1] = malloc(n);
    want[2] = malloc(scales * 4);
    if (got == NULL || want[0] == NULL || want[1] == NULL || want[2] == NULL ||
        !weft_ok(weft_optim_group_state(opt, (uint32_t)g, WEFT_OPTIM_STATE_MASTER, &master), "state")) {
        same = 0;
    } else {
        weft_quant_matrix_t m = {.x = master + e * n, .w = want[0], .wt = want[1], .scale_inv = (float *)want[2]};
        same = weft_ok(weft_quant_host(NULL, WEFT_DTYPE_FP32, r, c, &m, 1), "quant_host");
        for (int k = 0; k < 3 && same; k++) {
            char     tname[WEFT_TENSOR_NAME_MAX];
            uint32_t index;
            void    *data;
            tensor_name(tname, sizeof(tname), g, e, suffix[k]);
            same = weft_ok(weft_registry_lookup(reg, tname, &index), tname) &&
                   weft_ok(weft_registry_write_tensor(reg, index, &data), tname) &&
                   CU(cudaMemcpy(got, data, bytes[k], cudaMemcpyDeviceToHost)) && memcmp(got, want[k], bytes[k]) == 0;
        }
    }
    free(got);
    for (int k = 0; k < 3; k++) {
        free(want[k]);
    }
    return same;
}

/* What run_peer's lines fill. */
typedef struct step_peer {
    double ms;
    char  *note, *torch;
    size_t note_size, torch_size;
} step_peer_t;

static void step_peer_line(void *arg, const char *line)
{
    step_peer_t *p = arg;

    if (strstr(line, "\"error\"") != NULL) {
        snprintf(p->note, p->note_size, "skipped: %.*s", (int)strcspn(line, "\n"), line);
        return;
    }
    p->ms = perf_json_find_number(line, "median_ms");
    (void)perf_json_find_string(line, "torch", p->torch, p->torch_size);
}

/* The peer's median step, in ms (NaN when it did not run: note says why). */
static double run_peer(const optim_options_t *o, uint64_t params, char *note, size_t note_size, char *torch,
                       size_t torch_size)
{
    step_peer_t peer = {.ms = NAN, .note = note, .note_size = note_size, .torch = torch, .torch_size = torch_size};
    char        cmd[1024];
    int         status = 0;

    snprintf(torch, torch_size, "none");
    if (!o->peer) {
        snprintf(note, note_size, "skipped (--no-peer)");
        return NAN;
    }
    snprintf(cmd, sizeof(cmd), "CUDA_VISIBLE_DEVICES=%d python3 '%s' --params %llu --iters %llu --warmup %llu 2>&1",
             o->device, o->peer_script, (unsigned long long)params, (unsigned long long)o->iters,
             (unsigned long long)o->warmup);
    snprintf(note, note_size, "torch staged pipeline via %s", o->peer_script);
    if (perf_peer_run(cmd, step_peer_line, &peer, &status) != 0) {
        snprintf(note, note_size, "skipped: cannot run python3");
        return NAN;
    }
    if (status != 0 && isnan(peer.ms) && strncmp(note, "skipped", 7) != 0) {
        snprintf(note, note_size, "skipped: python3 %s failed (is torch installed?)", o->peer_script);
    }
    return peer.ms;
}

/* Muon's figures for one shape. */
typedef struct muon_result {
    double resident_ms;  /* a RESIDENT step: every matrix in one batch */
    double staged_ms;    /* a STAGED step: master and momentum through the slots */
    double ns_tflops;    /* Newton–Schulz FLOPs / its five iterations' time (iter_ms) */
    double torch_ns_ms;  /* the torch.compile'd batched reference NS */
    double torch_step_ms; /* a torch.compile'd Muon step around it: the same work as resident_ms */
    /* The five NS iterations alone, on both sides measured the same way:
     * 5/4 × (5 iterations − 1 iteration), which leaves out what surrounds
     * them (ours: momentum, the norm, θ's update; torch's: the BF16 cast
     * and the norm). */
    double iter_ms, torch_iter_ms;
    /* The figures above are the default rounding's, FUSED (the sums in
     * the GEMMs' epilogues, rounded once, as the compiled reference
     * rounds them); these the same with WEFT_MUON_ROUNDING_EAGER, and how
     * far FUSED's masters land from EAGER's. */
    double eager_resident_ms, eager_iter_ms, fused_vs_eager;
    double floor_ms;     /* 8 B a parameter each way / PCIe both ways */
    double both_gbps;    /* that PCIe rate, measured just before the staged step */
    double staged_vs_resident; /* relative Frobenius distance of their masters */
    uint64_t batch;      /* matrices a staged slot carried */
} muon_result_t;

/* Times `iters` steps of a one-group Muon optimizer of `placement`, from
 * zero masters; the masters after them into `master` (experts × rows ×
 * cols floats). */
static double muon_time(const optim_options_t *o, int g, weft_optim_placement_t placement, uint32_t ns_steps,
                        weft_muon_rounding_t rounding, const void *grad, cudaStream_t stream, cudaEvent_t ev0,
                        cudaEvent_t ev1, float *master)
{
    const uint64_t          n = o->rows[g] * o->cols[g];
    const uint64_t          batch = o->muon_batch < o->experts ? o->muon_batch : o->experts;
    weft_optim_params_t     p = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT | WEFT_OPTIM_FIELD_DEVICE |
                                               WEFT_OPTIM_FIELD_SLOT_COUNT | WEFT_OPTIM_FIELD_SLOT_BYTES,
                                 .placement = placement, .device = o->device, .slot_count = (uint32_t)o->slots,
                                 /* master and momentum of `batch` matrices, each array aligned */
                                 .slot_bytes = 8 * n * batch + 2 * 256};
    weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_FIELD_MUON | WEFT_OPTIM_GROUP_FIELD_MUON_ROUNDING,
                                 .name = "muon.{E}", .algo = WEFT_OPTIM_MUON,
                                 .experts = (uint32_t)o->experts, .rows = o->rows[g], .cols = o->cols[g],
                                 .muon = {.lr = 0.02, .momentum = 0.95, .nesterov = 1, .ns_steps = ns_steps,
                                          .scale = WEFT_MUON_SCALE_SHAPE, .schedule = WEFT_MUON_NS_SIMPLE},
                                 .muon_rounding = rounding};
    weft_optim_grad_t       gr = {grad, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA};
    weft_optim_step_params_t sp = {.field_mask = WEFT_OPTIM_STEP_FIELD_STREAM, .stream = stream};
    weft_optim_h            opt = NULL;
    double                  ms[MAX_ITERS];
    int                     ok;

    ok = weft_ok(weft_optim_create(&p, &opt), "muon optimizer") && weft_ok(weft_optim_add_group(opt, &d, NULL), "group");
    for (uint64_t it = 0; it < o->warmup + o->iters && ok; it++) {
        float elapsed = 0;
        ok = CU(cudaEventRecord(ev0, stream)) && weft_ok(weft_optim_step(opt, &gr, 1, &sp), "muon step") &&
             CU(cudaEventRecord(ev1, stream)) && CU(cudaStreamSynchronize(stream)) &&
             CU(cudaEventElapsedTime(&elapsed, ev0, ev1));
        if (ok && it >= o->warmup) {
            ms[it - o->warmup] = elapsed;
        }
    }
    if (ok && master != NULL) {
        float *state = NULL;
        ok = weft_ok(weft_optim_group_state(opt, 0, WEFT_OPTIM_STATE_MASTER, &state), "muon master") &&
             CU(cudaMemcpy(master, state, o->experts * n * sizeof(float), cudaMemcpyDefault));
    }
    weft_optim_destroy(opt);
    return ok ? median_of(ms, o->iters) : NAN;
}

/* ||a − b||_F / ||b||_F over n floats (1 when b is zero and a is not). */
static double rel_frobenius(const float *a, const float *b, uint64_t n)
{
    double diff = 0, ref = 0;
    for (uint64_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        diff += d * d;
        ref += (double)b[i] * (double)b[i];
    }
    return ref > 0 ? sqrt(diff / ref) : (diff > 0 ? 1.0 : 0.0);
}

/* The FLOPs of five NS iterations over group g's matrices, each GEMM
 * counted whole (2·M·N·K) as the reference multiplies it. */
static double flops_of(const optim_options_t *o, int g)
{
    const double m = (double)(o->rows[g] < o->cols[g] ? o->rows[g] : o->cols[g]);
    const double n = (double)(o->rows[g] < o->cols[g] ? o->cols[g] : o->rows[g]);
    return (double)o->experts * 5.0 * (4.0 * m * m * n + 2.0 * m * m * m);
}

/* What run_ns_peer's lines fill. */
typedef struct ns_peer {
    const optim_options_t *o;
    double                *ns_ms, *one_ms, *step_ms, *gemm_tflops;
} ns_peer_t;

static void ns_peer_line(void *arg, const char *line)
{
    const ns_peer_t       *p = arg;
    const optim_options_t *o = p->o;
    char                   shape[64];

    if (!isnan(perf_json_find_number(line, "gemm_tflops"))) {
        *p->gemm_tflops = perf_json_find_number(line, "gemm_tflops");
    }
    if (perf_json_find_string(line, "ns", shape, sizeof(shape)) == 0) {
        for (int g = 0; g < o->groups; g++) {
            char want[64];
            snprintf(want, sizeof(want), "%llux%llux%llu", (unsigned long long)o->experts,
                     (unsigned long long)o->rows[g], (unsigned long long)o->cols[g]);
            if (strcmp(want, shape) == 0) {
                p->ns_ms[g]  = perf_json_find_number(line, "median_ms");
                p->one_ms[g] = perf_json_find_number(line, "one_iteration_ms");
                p->step_ms[g] = perf_json_find_number(line, "step_ms");
            }
        }
    }
}

/* The torch.compile'd NS of every shape, five iterations (ns_ms) and one
 * (one_ms), a compiled Muon step around it (step_ms), and the BF16 GEMM
 * rate. */
static void run_ns_peer(const optim_options_t *o, double *ns_ms, double *one_ms, double *step_ms,
                        double *gemm_tflops)
{
    ns_peer_t peer = {.o = o, .ns_ms = ns_ms, .one_ms = one_ms, .step_ms = step_ms, .gemm_tflops = gemm_tflops};
    char      cmd[2048];
    int       used, status;

    *gemm_tflops = NAN;
    for (int g = 0; g < o->groups; g++) {
        ns_ms[g] = one_ms[g] = step_ms[g] = NAN;
    }
    if (!o->peer) {
        return;
    }
    used = snprintf(cmd, sizeof(cmd), "CUDA_VISIBLE_DEVICES=%d python3 '%s' --iters %llu --warmup %llu", o->device,
                    o->peer_script, (unsigned long long)o->iters, (unsigned long long)o->warmup + 1);
    for (int g = 0; g < o->groups && used > 0 && (size_t)used < sizeof(cmd); g++) {
        used += snprintf(cmd + used, sizeof(cmd) - (size_t)used, " --ns %llux%llux%llu", (unsigned long long)o->experts,
                         (unsigned long long)o->rows[g], (unsigned long long)o->cols[g]);
    }
    snprintf(cmd + used, sizeof(cmd) - (size_t)used, " 2>&1");
    /* Without the peer (it could not start or failed), its figures stay NaN. */
    (void)perf_peer_run(cmd, ns_peer_line, &peer, &status);
}

/* Fills n floats with values of magnitude `scale` (a cheap hash). */
static void fill_random(float *x, uint64_t n, uint64_t seed, float scale)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t h = (i + seed) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
        h *= 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 32;
        x[i] = ((float)(int32_t)(uint32_t)h / 2147483648.0f) * scale;
    }
}


/* The AdamW row: its table columns and --json fields, in one order. */
enum {
    A_PLACEMENT, A_DEVICE, A_EXPERTS, A_PARAMETERS, A_SLOTS, A_SLOT_BYTES, A_GPU_BYTES, A_H2D, A_D2H, A_BOTH,
    A_STEP, A_FLOOR, A_RATIO_FLOOR, A_TORCH, A_RATIO_TORCH, A_WITH_WRITER, A_WRITER_OVERHEAD, A_TORCH_VERSION,
    A_CORRECT, A_COLUMNS
};

static const perf_column_t adamw_columns[A_COLUMNS] = {
    [A_PLACEMENT]       = {"placement", NULL, 0, 0, PERF_COLUMN_TEXT},
    [A_DEVICE]          = {"device", NULL, 0, 0, PERF_COLUMN_TEXT},
    [A_EXPERTS]         = {"experts", NULL, 0, 0, PERF_COLUMN_UINT},
    [A_PARAMETERS]      = {"parameters", NULL, 0, 0, PERF_COLUMN_UINT},
    [A_SLOTS]           = {"slots", NULL, 0, 0, PERF_COLUMN_UINT},
    [A_SLOT_BYTES]      = {"slot_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [A_GPU_BYTES]       = {"gpu_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [A_H2D]             = {"h2d_gb_per_s", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [A_D2H]             = {"d2h_gb_per_s", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [A_BOTH]            = {"both_ways_gb_per_s", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [A_STEP]            = {"adamw_step_ms", "step_ms", 14, 2, PERF_COLUMN_DOUBLE},
    [A_FLOOR]           = {"pcie_floor_ms", "floor_ms", 14, 2, PERF_COLUMN_DOUBLE},
    [A_RATIO_FLOOR]     = {"adamw_ratio_pcie_floor", "ratio_floor", 14, 3, PERF_COLUMN_DOUBLE},
    [A_TORCH]           = {"torch_staged_ms", "torch_ms", 12, 2, PERF_COLUMN_DOUBLE},
    [A_RATIO_TORCH]     = {"adamw_ratio_torch_staged", "ratio_torch", 12, 3, PERF_COLUMN_DOUBLE},
    [A_WITH_WRITER]     = {"adamw_with_writer_ms", "with_writer_ms", 16, 2, PERF_COLUMN_DOUBLE},
    [A_WRITER_OVERHEAD] = {"writer_overhead", "writer_ovh", 12, 3, PERF_COLUMN_DOUBLE},
    [A_TORCH_VERSION]   = {"torch", NULL, 0, 0, PERF_COLUMN_TEXT},
    [A_CORRECT]         = {"correct", "correct", 8, 0, PERF_COLUMN_BOOL},
};

/* A Muon group's row (the default rounding, FUSED). */
enum {
    M_SHAPE, M_ROUNDING, M_DEVICE, M_EXPERTS, M_ROWS, M_COLS, M_SLOTS, M_BATCH, M_RESIDENT, M_COMPILE_STEP,
    M_SPEEDUP, M_COMPILE, M_VS_NS, M_ITER, M_COMPILE_ITER, M_ITER_SPEEDUP, M_NS_TFLOPS, M_OF_PEAK,
    M_RESIDENT_OF_PEAK, M_STAGED, M_FLOOR, M_RATIO,
    M_VS_RESIDENT, M_BOTH, M_GEMM_PEAK, M_TORCH_VERSION, M_CORRECT, M_COLUMNS
};

static const perf_column_t muon_columns[M_COLUMNS] = {
    [M_SHAPE]         = {"shape", "shape", 12, 0, PERF_COLUMN_TEXT},
    [M_ROUNDING]      = {"rounding", NULL, 0, 0, PERF_COLUMN_TEXT},
    [M_DEVICE]        = {"device", NULL, 0, 0, PERF_COLUMN_TEXT},
    [M_EXPERTS]       = {"experts", NULL, 0, 0, PERF_COLUMN_UINT},
    [M_ROWS]          = {"rows", NULL, 0, 0, PERF_COLUMN_UINT},
    [M_COLS]          = {"cols", NULL, 0, 0, PERF_COLUMN_UINT},
    [M_SLOTS]         = {"slots", NULL, 0, 0, PERF_COLUMN_UINT},
    [M_BATCH]         = {"matrices_a_slot", NULL, 0, 0, PERF_COLUMN_UINT},
    [M_RESIDENT]      = {"resident_step_ms", "resident_ms", 12, 2, PERF_COLUMN_DOUBLE},
    [M_COMPILE_STEP]  = {"torch_compile_step_ms", "c_step_ms", 10, 2, PERF_COLUMN_DOUBLE},
    [M_SPEEDUP]       = {"ns_speedup_torch_compile", "speedup", 9, 3, PERF_COLUMN_DOUBLE},
    [M_COMPILE]       = {"torch_compile_ns_ms", "c_ns_ms", 9, 2, PERF_COLUMN_DOUBLE},
    [M_VS_NS]         = {"resident_vs_torch_ns", "vs_ns", 7, 3, PERF_COLUMN_DOUBLE},
    [M_ITER]          = {"ns_iterations_ms", "iter_ms", 9, 2, PERF_COLUMN_DOUBLE},
    [M_COMPILE_ITER]  = {"torch_compile_ns_iterations_ms", "c_iter_ms", 10, 2, PERF_COLUMN_DOUBLE},
    [M_ITER_SPEEDUP]  = {"ns_iterations_speedup_torch_compile", "iter_x", 8, 3, PERF_COLUMN_DOUBLE},
    [M_NS_TFLOPS]     = {"ns_tflops", "ns_TFLOP/s", 11, 1, PERF_COLUMN_DOUBLE},
    [M_OF_PEAK]       = {"ns_fraction_of_peak", "of_peak", 8, 3, PERF_COLUMN_DOUBLE},
    [M_RESIDENT_OF_PEAK] = {"resident_fraction_of_peak", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [M_STAGED]        = {"staged_step_ms", "staged_ms", 12, 2, PERF_COLUMN_DOUBLE},
    [M_FLOOR]         = {"pcie_floor_ms", "floor_ms", 12, 2, PERF_COLUMN_DOUBLE},
    [M_RATIO]         = {"muon_ratio_floor", "ratio", 10, 3, PERF_COLUMN_DOUBLE},
    [M_VS_RESIDENT]   = {"staged_vs_resident_rel_err", "vs_res", 10, 2, PERF_COLUMN_G},
    [M_BOTH]          = {"both_ways_gb_per_s", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [M_GEMM_PEAK]     = {"bf16_gemm_tflops", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [M_TORCH_VERSION] = {"torch", NULL, 0, 0, PERF_COLUMN_TEXT},
    [M_CORRECT]       = {"correct", NULL, 0, 0, PERF_COLUMN_BOOL},
};

/* The same group with eager PyTorch's roundings: the second table; its
 * fields join the group's JSON object. */
enum { E_SHAPE, E_RESIDENT, E_ITER, E_ITER_SPEEDUP, E_ITER_OF_PEAK, E_FUSED_VS_EAGER, E_COLUMNS };

static const perf_column_t eager_columns[E_COLUMNS] = {
    [E_SHAPE]          = {NULL, "shape", 12, 0, PERF_COLUMN_TEXT},
    [E_RESIDENT]       = {"eager_resident_step_ms", "resident_ms", 12, 2, PERF_COLUMN_DOUBLE},
    [E_ITER]           = {"eager_ns_iterations_ms", "iter_ms", 10, 2, PERF_COLUMN_DOUBLE},
    [E_ITER_SPEEDUP]   = {"eager_ns_iterations_speedup_torch_compile", "iter_x", 10, 3, PERF_COLUMN_DOUBLE},
    [E_ITER_OF_PEAK]   = {"eager_ns_iterations_fraction_of_peak", "of_peak", 12, 3, PERF_COLUMN_DOUBLE},
    [E_FUSED_VS_EAGER] = {"fused_vs_eager_rel_err", "fused_vs_eager", 15, 2, PERF_COLUMN_G},
};

int perf_cmd_optim(int argc, char **argv)
{
    optim_options_t          o;
    weft_optim_h             opt = NULL;
    weft_optim_writer_h      writer = NULL;
    weft_registry_h          reg = NULL;
    weft_optim_grad_t        grads[MAX_GROUPS];
    weft_optim_info_t        info;
    cudaStream_t             stream = NULL;
    cudaEvent_t              ev0 = NULL, ev1 = NULL;
    struct cudaDeviceProp    prop;
    pcie_t                   pcie = {0}, muon_pcie = {0};
    double                   plain_ms[MAX_ITERS], writer_ms[MAX_ITERS], step_ms, step_w_ms, floor_ms, peer_ms;
    char                     reg_name[64], note[256], torch[64];
    uint64_t                 params = 0, slot_need = 0;
    muon_result_t            mr[MAX_GROUPS];
    double                   ns_peer_ms[MAX_GROUPS], ns_peer_one_ms[MAX_GROUPS], ns_peer_step_ms[MAX_GROUPS];
    double                   gemm_tflops = NAN;
    int                      rc, correct = 1, muon_correct = 1, ok;

    memset(grads, 0, sizeof(grads));
    rc = optim_parse(argc, argv, &o);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    {
        /* As the other GPU commands do: no GPU is a skip (77), not an error. */
        const int gpus = perf_gpu_count();
        if (gpus == 0) {
            fprintf(stderr, "weft-perf optim: no NVIDIA driver or GPU found; skipped\n");
            return 77;
        }
        if (o.device >= gpus) {
            fprintf(stderr, "weft-perf optim: --device %d: no such GPU (%d found)\n", o.device, gpus);
            return 2;
        }
    }
    if (!CU(cudaSetDevice(o.device)) || !CU(cudaGetDeviceProperties(&prop, o.device))) {
        return 1;
    }
    for (int g = 0; g < o.groups; g++) {
        const uint64_t n = o.rows[g] * o.cols[g];
        params += o.experts * n;
        if (12 * n + 3 * 256 > slot_need) {
            slot_need = 12 * n + 3 * 256;
        }
    }
    if (o.slot_mib != 0) {
        slot_need = o.slot_mib << 20;
    }
    peer_ms = run_peer(&o, params, note, sizeof(note), torch, sizeof(torch));
    /* PCIe drifts on a shared host: the floor is measured after the peer's
     * minute of its own traffic, just before the step it bounds (as
     * Muon's staged step's is). */
    if (measure_pcie(&pcie) != 0) {
        return 1;
    }

    /* The optimizer: one group a shape, masters random ~N(0, 0.02)-sized. */
    {
        weft_optim_params_t p = {.field_mask = WEFT_OPTIM_FIELD_PLACEMENT | WEFT_OPTIM_FIELD_DEVICE |
                                               WEFT_OPTIM_FIELD_SLOT_COUNT | WEFT_OPTIM_FIELD_SLOT_BYTES,
                                 .placement = WEFT_OPTIM_STAGED, .device = o.device,
                                 .slot_count = (uint32_t)o.slots, .slot_bytes = slot_need};
        ok = weft_ok(weft_optim_create(&p, &opt), "optimizer");
    }
    for (int g = 0; g < o.groups && ok; g++) {
        const uint64_t          n = o.experts * o.rows[g] * o.cols[g];
        char                    gname[WEFT_OPTIM_NAME_MAX];
        weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_FIELD_ADAMW, .name = gname, .algo = WEFT_OPTIM_ADAMW,
                                     .experts = (uint32_t)o.experts, .rows = o.rows[g], .cols = o.cols[g],
                                     .adamw = {1e-5, 0.9, 0.999, 1e-8, 0.01}};
        float *master, *host_grad = NULL;
        void  *dev_grad = NULL;

        group_name(gname, sizeof(gname), g);
        ok = weft_ok(weft_optim_add_group(opt, &d, NULL), "group") &&
             weft_ok(weft_optim_group_state(opt, (uint32_t)g, WEFT_OPTIM_STATE_MASTER, &master), "state");
        if (ok) {
            fill_random(master, n, 1 + (uint64_t)g, 0.04f);
            host_grad = malloc(n * sizeof(float));
            ok = host_grad != NULL && CU(cudaMalloc(&dev_grad, n * sizeof(float)));
        }
        if (ok) {
            fill_random(host_grad, n, 100 + (uint64_t)g, 1e-2f);
            ok = CU(cudaMemcpy(dev_grad, host_grad, n * sizeof(float), cudaMemcpyHostToDevice));
            grads[g] = (weft_optim_grad_t){dev_grad, WEFT_DTYPE_FP32, WEFT_MEMORY_CUDA};
        }
        free(host_grad);
    }
    snprintf(reg_name, sizeof(reg_name), "weft-perf-optim-%d", (int)getpid());
    ok = ok && registry_make(&o, reg_name, &reg) == 0 &&
         weft_ok(weft_optim_writer_create(opt, reg, NULL, &writer), "writer") &&
         CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) && CU(cudaEventCreate(&ev0)) &&
         CU(cudaEventCreate(&ev1));

    /* Warm-up steps first; then steps without and with the writer
     * alternate, so that drift of the shared host's PCIe (and whatever a
     * first timed phase pays) lands on both alike. */
    for (uint64_t it = 0; it < 2 * (o.warmup + o.iters) && ok; it++) {
        const int                with_writer = (int)(it & 1);
        const uint64_t           round = it / 2;
        double                  *ms = with_writer ? writer_ms : plain_ms;
        weft_optim_step_params_t sp = {.field_mask = WEFT_OPTIM_STEP_FIELD_STREAM, .stream = stream};
        float                    elapsed = 0;

        if (with_writer) {
            sp.field_mask |= WEFT_OPTIM_STEP_FIELD_WRITER;
            sp.writer     = weft_optim_writer_write;
            sp.writer_arg = writer;
            ok = weft_ok(weft_registry_write_begin(reg, 10000000, NULL), "write_begin");
        }
        ok = ok && CU(cudaEventRecord(ev0, stream)) &&
             weft_ok(weft_optim_step(opt, grads, (uint32_t)o.groups, &sp), "step") &&
             CU(cudaEventRecord(ev1, stream)) && CU(cudaStreamSynchronize(stream)) &&
             CU(cudaEventElapsedTime(&elapsed, ev0, ev1));
        if (ok && with_writer && round + 1 == o.warmup + o.iters) {
            /* The last version: its bytes against the host writer. */
            for (int g = 0; g < o.groups; g++) {
                correct &= check_expert(&o, opt, reg, g, 0) && check_expert(&o, opt, reg, g, o.experts - 1);
            }
        }
        if (ok && with_writer) {
            ok = weft_ok(weft_registry_publish(reg, 0, NULL), "publish");
        }
        if (ok && round >= o.warmup) {
            ms[round - o.warmup] = elapsed;
        }
    }
    if (!ok) {
        rc = 1;
        goto out;
    }
    weft_optim_get_info(opt, &info);
    /* Muon, shape by shape, on the same gradients; its peers. The AdamW
     * optimizer's pinned state stays allocated meanwhile. */
    if (o.muon) {
        run_ns_peer(&o, ns_peer_ms, ns_peer_one_ms, ns_peer_step_ms, &gemm_tflops);
        for (int g = 0; g < o.groups; g++) {
            const double m = (double)(o.rows[g] < o.cols[g] ? o.rows[g] : o.cols[g]);
            const double n = (double)(o.rows[g] < o.cols[g] ? o.cols[g] : o.rows[g]);
            const double flops = flops_of(&o, g);
            const size_t bytes = (size_t)(o.experts * m * n) * sizeof(float);
            float       *resident = malloc(bytes), *staged = malloc(bytes);
            if (resident == NULL || staged == NULL) {
                fprintf(stderr, "weft-perf optim: no memory for two copies of the Muon masters\n");
                free(resident);
                free(staged);
                rc = 1;
                goto out;
            }
            mr[g].resident_ms = muon_time(&o, g, WEFT_OPTIM_RESIDENT, 5, WEFT_MUON_ROUNDING_FUSED, grads[g].data,
                                          stream, ev0, ev1, resident);
            mr[g].iter_ms     = 1.25 * (mr[g].resident_ms - muon_time(&o, g, WEFT_OPTIM_RESIDENT, 1,
                                                                      WEFT_MUON_ROUNDING_FUSED, grads[g].data,
                                                                      stream, ev0, ev1, NULL));
            /* EAGER, its masters into `staged` for a moment. */
            mr[g].eager_resident_ms = muon_time(&o, g, WEFT_OPTIM_RESIDENT, 5, WEFT_MUON_ROUNDING_EAGER,
                                                grads[g].data, stream, ev0, ev1, staged);
            mr[g].eager_iter_ms     = 1.25 * (mr[g].eager_resident_ms - muon_time(&o, g, WEFT_OPTIM_RESIDENT, 1,
                                                                                  WEFT_MUON_ROUNDING_EAGER,
                                                                                  grads[g].data, stream, ev0, ev1,
                                                                                  NULL));
            mr[g].fused_vs_eager = rel_frobenius(resident, staged, (uint64_t)(o.experts * m * n));
            /* PCIe drifts on a shared host: its floor measured again just
             * before the staged step it bounds. */
            if (measure_pcie(&muon_pcie) != 0) {
                free(resident);
                free(staged);
                rc = 1;
                goto out;
            }
            mr[g].staged_ms   = muon_time(&o, g, WEFT_OPTIM_STAGED, 5, WEFT_MUON_ROUNDING_FUSED, grads[g].data,
                                          stream, ev0, ev1, staged);
            /* The same steps from the same state: the staged batches of
             * a few matrices against the one batch of all (cuBLAS may sum
             * in another order; the test suite's bound is 2e-2). */
            mr[g].staged_vs_resident = rel_frobenius(staged, resident, (uint64_t)(o.experts * m * n));
            mr[g].batch              = o.muon_batch < o.experts ? o.muon_batch : o.experts;
            free(resident);
            free(staged);
            if (isnan(mr[g].resident_ms) || isnan(mr[g].staged_ms) || !(mr[g].staged_vs_resident <= 2e-2)) {
                muon_correct = 0;
            }
            mr[g].ns_tflops   = flops / (mr[g].iter_ms / 1e3) / 1e12;
            mr[g].torch_ns_ms = ns_peer_ms[g];
            mr[g].torch_step_ms = ns_peer_step_ms[g];
            mr[g].torch_iter_ms = 1.25 * (ns_peer_ms[g] - ns_peer_one_ms[g]);
            mr[g].floor_ms    = 8.0 * (double)o.experts * m * n / (muon_pcie.both_gbps * 1e9) * 1e3;
            mr[g].both_gbps   = muon_pcie.both_gbps;
        }
    }
    step_ms   = median_of(plain_ms, o.iters);
    step_w_ms = median_of(writer_ms, o.iters);
    floor_ms  = 12.0 * (double)params / (pcie.both_gbps * 1e9) * 1e3;
    {
        const double      ratio_floor = step_ms / floor_ms, ratio_torch = step_ms / peer_ms;
        const double      overhead = step_w_ms / step_ms - 1.0;
        const perf_cell_t adamw[A_COLUMNS] = {
            [A_PLACEMENT] = {.text = "staged"},
            [A_DEVICE] = {.text = prop.name},
            [A_EXPERTS] = {.u = o.experts},
            [A_PARAMETERS] = {.u = params},
            [A_SLOTS] = {.u = o.slots},
            [A_SLOT_BYTES] = {.u = slot_need},
            [A_GPU_BYTES] = {.u = info.device_bytes},
            [A_H2D] = {.d = pcie.h2d_gbps},
            [A_D2H] = {.d = pcie.d2h_gbps},
            [A_BOTH] = {.d = pcie.both_gbps},
            [A_STEP] = {.d = step_ms},
            [A_FLOOR] = {.d = floor_ms},
            [A_RATIO_FLOOR] = {.d = ratio_floor},
            [A_TORCH] = {.d = peer_ms},
            [A_RATIO_TORCH] = {.d = ratio_torch},
            [A_WITH_WRITER] = {.d = step_w_ms},
            [A_WRITER_OVERHEAD] = {.d = overhead},
            [A_TORCH_VERSION] = {.text = torch},
            [A_CORRECT] = {.u = (uint64_t)correct},
        };
        perf_cell_t muon[MAX_GROUPS][M_COLUMNS], eager[MAX_GROUPS][E_COLUMNS];
        char        shapes[MAX_GROUPS][32];

        for (int g = 0; g < o.groups && o.muon; g++) {
            const double ns_ms = mr[g].resident_ms;
            const double bound = mr[g].floor_ms > ns_ms ? mr[g].floor_ms : ns_ms;
            const double flops = flops_of(&o, g);

            snprintf(shapes[g], sizeof(shapes[g]), "%llux%llu", (unsigned long long)o.rows[g],
                     (unsigned long long)o.cols[g]);
            memset(muon[g], 0, sizeof(muon[g]));
            memset(eager[g], 0, sizeof(eager[g]));
            muon[g][M_SHAPE].text = shapes[g];
            muon[g][M_ROUNDING].text = "fused";
            muon[g][M_DEVICE].text = prop.name;
            muon[g][M_EXPERTS].u = o.experts;
            muon[g][M_ROWS].u = o.rows[g];
            muon[g][M_COLS].u = o.cols[g];
            muon[g][M_SLOTS].u = o.slots;
            muon[g][M_BATCH].u = mr[g].batch;
            muon[g][M_RESIDENT].d = ns_ms;
            muon[g][M_NS_TFLOPS].d = mr[g].ns_tflops;
            muon[g][M_OF_PEAK].d = mr[g].ns_tflops / gemm_tflops;
            muon[g][M_RESIDENT_OF_PEAK].d = flops / (ns_ms / 1e3) / 1e12 / gemm_tflops;
            muon[g][M_COMPILE_STEP].d = mr[g].torch_step_ms;
            muon[g][M_SPEEDUP].d = mr[g].torch_step_ms / ns_ms;
            muon[g][M_COMPILE].d = mr[g].torch_ns_ms;
            muon[g][M_VS_NS].d = mr[g].torch_ns_ms / ns_ms;
            muon[g][M_ITER].d = mr[g].iter_ms;
            muon[g][M_COMPILE_ITER].d = mr[g].torch_iter_ms;
            muon[g][M_ITER_SPEEDUP].d = mr[g].torch_iter_ms / mr[g].iter_ms;
            muon[g][M_STAGED].d = mr[g].staged_ms;
            muon[g][M_FLOOR].d = mr[g].floor_ms;
            muon[g][M_RATIO].d = mr[g].staged_ms / bound;
            muon[g][M_VS_RESIDENT].d = mr[g].staged_vs_resident;
            muon[g][M_BOTH].d = mr[g].both_gbps;
            muon[g][M_GEMM_PEAK].d = gemm_tflops;
            muon[g][M_TORCH_VERSION].text = torch;
            muon[g][M_CORRECT].u = !(mr[g].staged_vs_resident > 2e-2) && !isnan(mr[g].staged_ms);
            eager[g][E_SHAPE].text = shapes[g];
            eager[g][E_RESIDENT].d = mr[g].eager_resident_ms;
            eager[g][E_ITER].d = mr[g].eager_iter_ms;
            eager[g][E_ITER_SPEEDUP].d = mr[g].torch_iter_ms / mr[g].eager_iter_ms;
            eager[g][E_ITER_OF_PEAK].d = flops / (mr[g].eager_iter_ms / 1e3) / 1e12 / gemm_tflops;
            eager[g][E_FUSED_VS_EAGER].d = mr[g].fused_vs_eager;
        }
        if (o.json) {
            perf_json_t j;

            perf_json_begin(&j, stdout);
            perf_json_str(&j, "command", "optim");
            perf_json_str(&j, "case", "adamw");
            perf_columns_json(&j, "", adamw_columns, A_COLUMNS, adamw);
            perf_json_end(&j);
            for (int g = 0; g < o.groups && o.muon; g++) {
                perf_json_begin(&j, stdout);
                perf_json_str(&j, "command", "optim");
                perf_json_str(&j, "case", "muon");
                perf_columns_json(&j, "", muon_columns, M_COLUMNS, muon[g]);
                perf_columns_json(&j, "", eager_columns, E_COLUMNS, eager[g]);
                perf_json_end(&j);
            }
        } else {
            printf("# weft-perf optim: libweft %s, device %d: %s, %d SMs\n", weft_version(), o.device, prop.name,
                   prop.multiProcessorCount);
            printf("# staged AdamW, %llu experts a group:", (unsigned long long)o.experts);
            for (int g = 0; g < o.groups; g++) {
                printf(" %llux%llu", (unsigned long long)o.rows[g], (unsigned long long)o.cols[g]);
            }
            printf("; %.1f M parameters, 12 B each way a parameter; %llu slots of %.1f MiB (GPU memory %.1f MiB)\n",
                   (double)params / 1e6, (unsigned long long)o.slots, (double)slot_need / 1048576.0,
                   (double)info.device_bytes / 1048576.0);
            printf("# PCIe, pinned 1 GiB: H2D %.1f GB/s, D2H %.1f GB/s alone, %.1f GB/s each way at once: floor %.1f ms\n",
                   pcie.h2d_gbps, pcie.d2h_gbps, pcie.both_gbps, floor_ms);
            printf("# peer: %s (torch %s); %llu warm-up, median of %llu steps (CUDA events)\n", note, torch,
                   (unsigned long long)o.warmup, (unsigned long long)o.iters);
            perf_columns_header(stdout, "", adamw_columns, A_COLUMNS);
            putchar('\n');
            perf_columns_row(stdout, "", adamw_columns, A_COLUMNS, adamw);
            putchar('\n');
            printf("# ratio_floor: step / PCIe floor (target <= 1.05); ratio_torch: step / torch staged (<= 1.0);\n"
                   "# writer_ovh: the FP8 writer in the slot, as a fraction of the step (<= 0.05)\n");
            if (o.muon) {
                printf("# Muon (5 Newton-Schulz steps, BF16 on tensor cores; BF16 GEMM peak %.0f TFLOP/s by torch.mm)\n",
                       gemm_tflops);
                perf_columns_header(stdout, "", muon_columns, M_COLUMNS);
                putchar('\n');
                for (int g = 0; g < o.groups; g++) {
                    perf_columns_row(stdout, "", muon_columns, M_COLUMNS, muon[g]);
                    putchar('\n');
                }
                printf("# rounding EAGER (each product and scaled term, as eager PyTorch):\n");
                perf_columns_header(stdout, "", eager_columns, E_COLUMNS);
                putchar('\n');
                for (int g = 0; g < o.groups; g++) {
                    perf_columns_row(stdout, "", eager_columns, E_COLUMNS, eager[g]);
                    putchar('\n');
                }
                printf("# resident: a Muon step with every matrix in one batch (momentum, NS, update); c_step_ms:\n"
                       "# the same step written in PyTorch (Nesterov momentum, the batched reference NS, the update),\n"
                       "# torch.compile'd; speedup: c_step_ms / resident_ms (target >= 1.3; libweft's NS is timed\n"
                       "# within its step: its first and last passes are fused into the momentum and the update);\n"
                       "# c_ns_ms: the compiled reference NS alone, vs_ns: c_ns_ms / resident_ms (momentum and update\n"
                       "# counted against libweft only); iter_ms, c_iter_ms: the five NS iterations alone, ours and\n"
                       "# the compiled reference's, each 5/4 x (5 iterations - 1), iter_x their ratio; ns_TFLOP/s:\n"
                       "# the iterations' FLOPs / iter_ms, of_peak: that / the GEMM peak (>= 0.75; the JSON's\n"
                       "# resident_fraction_of_peak divides by the whole step); staged: master and momentum through\n"
                       "# the slots, %llu matrices a slot, ratio: / max(floor, resident) (<= 1.1); vs_res: the staged\n"
                       "# masters' distance from the resident's after the same steps (relative Frobenius, <= 2e-2);\n"
                       "# all with the default rounding, FUSED (b*A + c*A*A and a*X + B*X rounded once in the GEMMs,\n"
                       "# as the compiled reference rounds); EAGER: the same with eager PyTorch's roundings,\n"
                       "# fused_vs_eager: the distance between the two's masters after the same steps; FLOPs counted\n"
                       "# as the reference multiplies (X*X^T and A*A whole; libweft multiplies their lower blocks)\n",
                       (unsigned long long)(o.muon_batch < o.experts ? o.muon_batch : o.experts));
            }
        }
    }
    rc = correct && muon_correct ? 0 : 1;
out:
    if (stream != NULL) {
        cudaStreamDestroy(stream);
    }
    if (ev0 != NULL) {
        cudaEventDestroy(ev0);
    }
    if (ev1 != NULL) {
        cudaEventDestroy(ev1);
    }
    weft_optim_writer_destroy(writer);
    weft_optim_destroy(opt);
    for (int g = 0; g < o.groups; g++) {
        cudaFree((void *)grads[g].data);
    }
    if (reg != NULL) {
        weft_registry_close(reg);
        weft_registry_unlink(reg_name);
    }
    return rc;
}

#endif /* HAVE_CUDA */
