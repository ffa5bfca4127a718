/*
 * weft-perf ipc: how fast a whole version of expert weights moves from a
 * trainer's GPU registry into a rollout engine's own tensors through the
 * cuda_ipc transport, beside what else could move the same bytes.
 *
 * A producer process owns a GPU registry (WEFT_MEMORY_CUDA) on the source
 * GPU and publishes versions of one workload: 2 MoE layers of Qwen3-30B-A3B's
 * experts in FP8 (W, WT and scale_inv of gate_up_proj and down_proj for 128
 * experts: 1536 tensors, 2.4 GB), or one 1 GiB tensor. A consumer process,
 * laid out like an SGLang engine (fused per-layer tensors allocated once on
 * the destination GPU, one receive view per expert tensor), builds a
 * cuda_ipc plan once and times weft_plan_copy() per version, from the lease
 * to every byte in place (CLOCK_MONOTONIC). The first --warmup versions,
 * which map the registry's arenas, are not counted. After the last version
 * every destination byte is compared with what the producer wrote: a
 * pattern that depends on the version, the tensor and the byte's position.
 *
 * Then the same transfer pushed (unless --no-push): the producer's process
 * runs a cuda_ipc weft_server on loopback and copies each version into
 * the same fused tensors, which the consumer process exported with
 * weft_remote_connect() and waits on with weft_remote_receive(). Why both:
 * on one GPU a copy made by the consumer's process first waits for the GPU
 * to switch from the producer's context (~0.15 ms a version); a push copy
 * runs in the producer's own context. A pushed version is timed by the
 * server, from its lease to the copy completed (the growth of
 * weft_server_stats_t.transfer_ns over that version), and verified as
 * above. For both modes the producer also times each version end to end,
 * from just before weft_registry_publish() to weft_registry_wait_consumers()
 * returning: what a trainer waits for, wake-ups and acknowledgements
 * included.
 *
 * Beside it, in the same run and each in a process of its own: the ceiling,
 * one copy of the same bytes as a single buffer (cudaMemcpyPeerAsync from
 * the source to the destination GPU, or cudaMemcpyAsync device-to-device on
 * one GPU; CUDA events); NCCL send/recv of the same bytes between the two
 * GPUs; and the peer, ipc_peer.py: torch tensors shared one by one over CUDA
 * IPC and copied, which is what SGLang's update_weights_from_tensor does.
 *
 * Cases: same GPU (source to source) always; cross GPU (source to
 * destination) when the destination GPU exists. CUDA is never initialized
 * in this (the parent) process, because fork() after CUDA initialization is
 * broken: the GPU probe and every measurement run in forked children, which
 * hand their figures back through a shared anonymous mapping.
 */
#include "config.h"

#include "args.h"
#include "json.h"
#include "lib/payload.h"
#include "perf.h"
#include "proc.h"
#include "stats.h"
#include "sysinfo.h"

#include <getopt.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <weft/registry.h>
#include <weft/transport.h>
#include <weft/weft.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef HAVE_NCCL
#include <nccl.h>
#endif


#define MAX_ITERS   10000
#define MAX_DEVICE  1023
#define EXIT_SKIP   77 /* the automake "skipped" status */

enum { WORKLOAD_QWEN3 = 1, WORKLOAD_SINGLE = 2 };

typedef struct ipc_options {
    int         workloads; /* WORKLOAD_* bits */
    uint64_t    src, dst, iters, warmup;
    int         by_expert; /* --order expert */
    int         json, peer;
    int         push; /* also the push mode (default; --no-push) */
    const char *peer_script;
} ipc_options_t;

static int ipc_usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf ipc [options]\n"
            "  A whole version of expert weights from a GPU registry into fused engine\n"
            "  tensors through the cuda_ipc transport, beside a peer copy (or a D2D copy\n"
            "  on one GPU) of the same bytes, NCCL send/recv, and torch tensors shared\n"
            "  one by one over CUDA IPC (SGLang's update_weights_from_tensor). The\n"
            "  cuda_ipc transfer runs twice: pulled (the consumer's process copies)\n"
            "  and pushed (the producer's process copies, weft_server/weft_remote).\n"
            "  --workload W       qwen3-2layer, single-1g or all (default all)\n"
            "  --src-device N     the producer's GPU (default 0)\n"
            "  --dst-device N     the consumer's GPU for the cross-GPU case (default 1)\n"
            "  --iterations N     timed versions (default 20)\n"
            "  --warmup N         untimed versions first (default 3: one per registry\n"
            "                     slot, whose first copy maps the slot's arena)\n"
            "  --order O          registry declaration order: role (experts of one tensor\n"
            "                     kind side by side, default) or expert (each expert's\n"
            "                     six tensors in turn)\n"
            "  --no-push          skip the push mode (producer's process copies through\n"
            "                     a cuda_ipc weft_server on loopback)\n"
            "  --no-peer          skip the torch peer\n"
            "  --peer-script P    the peer script (default %s)\n"
            "  --json             one JSON object per case instead of the table\n"
            "Targets: cross GPU >= 0.95 x the peer copy and >= NCCL; >= 5 x torch;\n"
            "same GPU >= 0.9 x the D2D copy. Exits 0 only when every case moved every\n"
            "byte right, %d when there is no GPU (or no CUDA in this build).\n",
            perf_peer_script("ipc_peer.py"), EXIT_SKIP);
    return out == stdout ? 0 : 2;
}

static const perf_arg_word_t workload_words[] = {{"qwen3-2layer", WORKLOAD_QWEN3},
                                                  {"single-1g", WORKLOAD_SINGLE},
                                                  {"all", WORKLOAD_QWEN3 | WORKLOAD_SINGLE},
                                                  {NULL, 0}};
static const perf_arg_word_t order_words[] = {{"role", 0}, {"expert", 1}, {NULL, 0}};

/* 0: run; 1: --help was printed; 2: a usage error. */
static int parse_options(int argc, char **argv, ipc_options_t *o)
{
    static const struct option longopts[] = {
        {"workload", required_argument, NULL, 'W'},   {"src-device", required_argument, NULL, 's'},
        {"dst-device", required_argument, NULL, 'd'}, {"iterations", required_argument, NULL, 'i'},
        {"warmup", required_argument, NULL, 'w'},     {"order", required_argument, NULL, 'o'},
        {"no-peer", no_argument, NULL, 'n'},          {"peer-script", required_argument, NULL, 'p'},
        {"json", no_argument, NULL, 'j'},             {"help", no_argument, NULL, 'h'},
        {"no-push", no_argument, NULL, 'u'},          {NULL, 0, NULL, 0},
    };
    int opt;

    *o = (ipc_options_t){.workloads = WORKLOAD_QWEN3 | WORKLOAD_SINGLE, .src = 0, .dst = 1, .iters = 20,
                         .warmup = 3, .peer = 1, .push = 1, .peer_script = perf_peer_script("ipc_peer.py")};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;

        switch (opt) {
        case 'W': bad = perf_arg_word("--workload", optarg, workload_words, &o->workloads); break;
        case 's': bad = perf_arg_u64("--src-device", optarg, 0, MAX_DEVICE, &o->src); break;
        case 'd': bad = perf_arg_u64("--dst-device", optarg, 0, MAX_DEVICE, &o->dst); break;
        case 'i': bad = perf_arg_u64("--iterations", optarg, 1, MAX_ITERS, &o->iters); break;
        case 'w': bad = perf_arg_u64("--warmup", optarg, 0, MAX_ITERS, &o->warmup); break;
        case 'o': bad = perf_arg_word("--order", optarg, order_words, &o->by_expert); break;
        case 'n': o->peer = 0; break;
        case 'u': o->push = 0; break;
        case 'p': o->peer_script = optarg; break;
        case 'j': o->json = 1; break;
        case 'h': return ipc_usage(stdout) + 1;
        default: return ipc_usage(stderr);
        }
        if (bad) {
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-perf ipc: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

#ifndef HAVE_CUDA

int perf_cmd_ipc(int argc, char **argv)
{
    ipc_options_t o;
    int           rc = parse_options(argc, argv, &o);

    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    fprintf(stderr, "weft-perf ipc: needs CUDA (GPU registries, the cuda_ipc transport), and this build "
                    "has none: skipped\n");
    return EXIT_SKIP;
}

#else

#define KINDS_MAX   6
#define RING_BYTES  ((UINT64_C(16) << 20) + 4093) /* period of the fill pattern; not a power of 2 */
#define CHECK_CHUNK (UINT64_C(64) << 20)          /* bytes copied back to the host at once */
#define WAIT_US     UINT64_C(120000000)           /* a version's wait, on either side */

/* ---------------------------------------------------------- workloads */

/* One kind of expert tensor: its name suffix, role, dtype and shape. */
typedef struct ipc_kind {
    const char        *proj;
    const char        *suffix;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint64_t           rows, cols;
} ipc_kind_t;

/* layers × experts × kinds tensors; the consumer fuses each (layer, kind)
 * over the experts. Must match ipc_peer.py's tensor list. */
typedef struct ipc_workload {
    const char *name;
    int         mask; /* WORKLOAD_* */
    uint64_t    layers, experts;
    uint32_t    kinds;
    ipc_kind_t  kind[KINDS_MAX];
} ipc_workload_t;

static const ipc_workload_t workloads[] = {
    {"qwen3-2layer",
     WORKLOAD_QWEN3,
     2,
     128,
     6,
     {
         {"gate_up_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 1536, 2048},
         {"gate_up_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, 2048, 1536},
         {"gate_up_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 12, 16},
         {"down_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2048, 768},
         {"down_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, 768, 2048},
         {"down_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 16, 6},
     }},
    {"single-1g",
     WORKLOAD_SINGLE,
     1,
     1,
     1,
     {
         {"gate_up_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 32768, 32768},
     }},
};

static uint64_t kind_bytes(const ipc_kind_t *k)
{
    return k->rows * k->cols * weft_dtype_size(k->dtype);
}

/* Bytes of one version: every tensor's elements, no padding. */
static uint64_t workload_bytes(const ipc_workload_t *w)
{
    uint64_t bytes = 0;

    for (uint32_t k = 0; k < w->kinds; k++) {
        bytes += kind_bytes(&w->kind[k]) * w->layers * w->experts;
    }
    return bytes;
}

static uint64_t workload_tensors(const ipc_workload_t *w)
{
    return w->layers * w->experts * w->kinds;
}

/* One registry tensor. id is its canonical number, (layer × kinds + kind)
 * × experts + expert, whatever the declaration order: the fill pattern
 * depends on it, so producer and consumer agree. */
typedef struct ipc_tensor {
    char     name[WEFT_TENSOR_NAME_MAX];
    uint32_t layer, kind, expert, id;
} ipc_tensor_t;

static void set_tensor(ipc_tensor_t *t, const ipc_workload_t *w, uint64_t l, uint32_t k, uint64_t e)
{
    t->layer = (uint32_t)l;
    t->kind = k;
    t->expert = (uint32_t)e;
    t->id = (uint32_t)((l * w->kinds + k) * w->experts + e);
    snprintf(t->name, sizeof(t->name), "model.layers.%llu.mlp.experts.%llu.%s.%s", (unsigned long long)l,
             (unsigned long long)e, w->kind[k].proj, w->kind[k].suffix);
}

/*
 * The tensors in declaration order. By role: per layer, every expert's
 * tensor of one kind, kind after kind, so that consecutive experts' sources
 * are adjacent in the slot as their views are in the fused tensors and the
 * plan merges them. By expert: each expert's tensors in turn, so sources of
 * consecutive experts interleave and the plan cannot merge across experts.
 */
static ipc_tensor_t *tensor_list(const ipc_workload_t *w, int by_expert, size_t *count)
{
    ipc_tensor_t *list = calloc(workload_tensors(w), sizeof(*list));
    size_t        n = 0;

    if (list == NULL) {
        fprintf(stderr, "weft-perf ipc: out of memory\n");
        return NULL;
    }
    for (uint64_t l = 0; l < w->layers; l++) {
        if (by_expert) {
            for (uint64_t e = 0; e < w->experts; e++) {
                for (uint32_t k = 0; k < w->kinds; k++) {
                    set_tensor(&list[n++], w, l, k, e);
                }
            }
        } else {
            for (uint32_t k = 0; k < w->kinds; k++) {
                for (uint64_t e = 0; e < w->experts; e++) {
                    set_tensor(&list[n++], w, l, k, e);
                }
            }
        }
    }
    *count = n;
    return list;
}

/* ------------------------------------------------------------ pattern */

/*
 * Byte i of tensor id at version v is ring[(ring_offset(v, id) + i) mod
 * RING_BYTES], ring a fixed random sequence both sides compute. The
 * producer copies it from a device copy of the ring; the consumer compares
 * against its host copy. A byte of another version, another tensor or
 * another position is wrong with probability 255/256.
 *
 * Not lib/payload.h's words themselves: the producer fills device memory
 * with device-to-device copies from the ring, as no kernel computes the
 * payload on the GPU and uploading every version from the host would take
 * longer than the copy it feeds. The ring's bytes come from the payload's
 * mix: the top byte of payload_mix((i + 1) × PAYLOAD_STEP).
 */
static uint64_t ring_offset(uint64_t version, uint32_t id)
{
    return (version * 1000003u + (uint64_t)id * 7919u) % RING_BYTES;
}

static uint8_t *ring_make(void)
{
    uint8_t *ring = malloc(RING_BYTES);

    if (ring == NULL) {
        fprintf(stderr, "weft-perf ipc: out of memory\n");
        return NULL;
    }
    for (uint64_t i = 0; i < RING_BYTES; i++) {
        ring[i] = (uint8_t)(payload_mix((i + 1) * PAYLOAD_STEP) >> 56);
    }
    return ring;
}

/* Bytes of got[0..n) that differ from the ring from offset off on. */
static uint64_t ring_compare(const uint8_t *got, uint64_t n, uint64_t off, const uint8_t *ring)
{
    uint64_t wrong = 0;

    for (uint64_t pos = 0; pos < n;) {
        uint64_t len = n - pos < RING_BYTES - off ? n - pos : RING_BYTES - off;

        if (memcmp(got + pos, ring + off, len) != 0) {
            for (uint64_t i = 0; i < len; i++) {
                wrong += got[pos + i] != ring[off + i];
            }
        }
        pos += len;
        off = 0;
    }
    return wrong;
}

/* ------------------------------------------------- shared with children */

/* What the GPU probe found. peer[0]: src can access dst; peer[1]: back. */
typedef struct ipc_probe {
    int  done, count, peer[2], driver, runtime, nccl;
    int  major[2], minor[2];
    char name[2][256], bus[2][32], error[160];
} ipc_probe_t;

/* One figure per timed version, in ns. */
typedef struct ipc_samples {
    uint64_t n, ns[MAX_ITERS];
} ipc_samples_t;

/* What a consumer found comparing its views with the last version. */
typedef struct ipc_check {
    int      verified; /* every view was compared */
    uint64_t wrong_bytes, verified_bytes;
} ipc_check_t;

typedef struct ipc_shared {
    ipc_probe_t probe;
    struct {
        uint64_t      tensors, ranges, ranges_uncoalesced, plan_bytes;
        uint64_t      last_version;
        ipc_check_t   check;
        uint64_t      n, ns[MAX_ITERS]; /* weft_plan_copy, timed versions */
        ipc_samples_t e2e; /* producer: publish to the consumer's record */
    } weft;
    /* The push mode: the producer's process copies (weft_server). */
    struct {
        _Atomic uint32_t port; /* the producer's server listens there; 0: not yet */
        uint64_t         last_version;
        ipc_check_t      check;
        ipc_samples_t    transfer; /* the server's transfer_ns, per version */
        ipc_samples_t    e2e;      /* producer: publish to the consumer's record */
    } push;
    struct {
        uint64_t n, ns[MAX_ITERS]; /* a ceiling or NCCL child's runs */
    } timing;
    /* The switched D2D copy and its toucher take turns: odd, the copier
     * asks for the toucher's work; even, it is done; ~0: give up. */
    _Atomic uint64_t turn;
} ipc_shared_t;

/* One measurement: a workload, from GPU src to GPU dst. */
typedef struct ipc_case {
    const ipc_workload_t *w;
    int                   src, dst, cross;
} ipc_case_t;

typedef struct ipc_ctx {
    const ipc_options_t *o;
    ipc_shared_t        *sh;
    perf_children_t      children;
    char                 registry[WEFT_REGISTRY_NAME_MAX];
    char                 token[64]; /* the push server's, per case */
} ipc_ctx_t;

/* ------------------------------------------------------------- checks */

static int cuda_ok(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, "weft-perf ipc: %s failed: %s\n", what, cudaGetErrorString(err));
        return 0;
    }
    return 1;
}

#define CU(call) cuda_ok((call), #call)

static int weft_ok(weft_status_t status, const char *what)
{
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf ipc: %s: %s\n", what, weft_status_string(status));
        return 0;
    }
    return 1;
}

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

/* Median of n samples in ns, in seconds (NaN for none); sorts them. */
static double median_seconds(uint64_t *ns, uint64_t n)
{
    perf_latency_t lat;

    if (n == 0) {
        return NAN;
    }
    perf_latency_summarize(ns, (size_t)n, &lat);
    return lat.p50_us / 1e6;
}

/* Keeps the figure of version v (1, 2, ...) unless it is a warm-up one. */
static void sample_add(ipc_samples_t *s, const ipc_options_t *o, uint64_t v, uint64_t ns)
{
    if (v > o->warmup && s->n < MAX_ITERS) {
        s->ns[s->n++] = ns;
    }
}

/* ----------------------------------------------------------- producer */

static weft_status_t create_registry(const char *name, const ipc_case_t *c, const ipc_tensor_t *tensors,
                                     size_t count, weft_registry_h *out)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_PARAM_MEMORY | WEFT_REGISTRY_PARAM_MAX_TENSORS,
                                     .max_tensors = (uint32_t)count,
                                     .memory = WEFT_MEMORY_CUDA,
                                     .device = c->src};
    weft_registry_h        reg = NULL;
    weft_status_t          status = weft_registry_create(name, &params, &reg);

    for (size_t i = 0; i < count && status == WEFT_OK; i++) {
        const ipc_kind_t  *k = &c->w->kind[tensors[i].kind];
        weft_tensor_desc_t d = {.name = tensors[i].name, .layer = (int32_t)tensors[i].layer,
                                .expert = (int32_t)tensors[i].expert, .role = k->role, .dtype = k->dtype,
                                .ndim = 2, .shape = {k->rows, k->cols}};
        uint32_t           index = 0;

        status = weft_registry_declare(reg, &d, &index);
        if (status == WEFT_OK && index != i) {
            fprintf(stderr, "weft-perf ipc: tensor %zu declared as index %u\n", i, index);
            status = WEFT_ERR_STATE;
        }
    }
    if (status == WEFT_OK) {
        status = weft_registry_seal(reg);
    }
    if (status != WEFT_OK) {
        if (reg != NULL) {
            (void)weft_registry_close(reg);
            (void)weft_registry_unlink(name);
        }
        return status;
    }
    *out = reg;
    return WEFT_OK;
}

/* Copies the tensor's pattern from the device ring into dst. */
static int fill_tensor(uint8_t *dst, uint64_t bytes, uint64_t off, const uint8_t *ring_dev, cudaStream_t stream)
{
    for (uint64_t pos = 0; pos < bytes;) {
        uint64_t len = bytes - pos < RING_BYTES - off ? bytes - pos : RING_BYTES - off;

        if (!CU(cudaMemcpyAsync(dst + pos, ring_dev + off, len, cudaMemcpyDeviceToDevice, stream))) {
            return -1;
        }
        pos += len;
        off = 0;
    }
    return 0;
}

/* Consumers register as they start: wait for the one of this case, so
 * that no version is published to nobody. */
static int wait_for_consumer(weft_registry_h reg)
{
    uint64_t deadline = perf_now_ns() + WAIT_US * 1000;

    for (;;) {
        weft_registry_stats_t stats;

        if (!weft_ok(weft_registry_get_stats(reg, &stats), "weft_registry_get_stats")) {
            return -1;
        }
        if (stats.consumers >= 1) {
            return 0;
        }
        if (perf_interrupted || perf_now_ns() > deadline) {
            fprintf(stderr, "weft-perf ipc: no consumer registered\n");
            return -1;
        }
        perf_sleep_us(1000);
    }
}

/* What a producer process holds: the registry and the pattern's source. */
typedef struct ipc_producer {
    ipc_tensor_t   *tensors;
    size_t          count;
    uint8_t        *ring, *ring_dev;
    cudaStream_t    stream;
    weft_registry_h reg;
} ipc_producer_t;

/* The first CUDA call: this process's context is on the source GPU. */
static int producer_open(ipc_ctx_t *ctx, const ipc_case_t *c, ipc_producer_t *p)
{
    memset(p, 0, sizeof(*p));
    p->tensors = tensor_list(c->w, ctx->o->by_expert, &p->count);
    p->ring = ring_make();
    if (p->tensors == NULL || p->ring == NULL || !CU(cudaSetDevice(c->src)) ||
        !CU(cudaMalloc((void **)&p->ring_dev, RING_BYTES)) ||
        !CU(cudaMemcpy(p->ring_dev, p->ring, RING_BYTES, cudaMemcpyHostToDevice)) ||
        !CU(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking)) ||
        !weft_ok(create_registry(ctx->registry, c, p->tensors, p->count, &p->reg), "GPU registry")) {
        return -1;
    }
    return 0;
}

static void producer_close(ipc_ctx_t *ctx, ipc_producer_t *p)
{
    if (p->reg != NULL) {
        (void)weft_ok(weft_registry_close(p->reg), "weft_registry_close");
        (void)weft_registry_unlink(ctx->registry);
    }
    if (p->stream != NULL) {
        (void)CU(cudaStreamDestroy(p->stream));
    }
    if (p->ring_dev != NULL) {
        (void)CU(cudaFree(p->ring_dev));
    }
    free(p->ring);
    free(p->tensors);
}

/* Version v: write every tensor on the GPU, publish, wait for the ack.
 * *e2e_ns: from just before the publish to the wait's return, which is
 * what a trainer waits for in either mode. */
static int publish_version(ipc_producer_t *p, const ipc_case_t *c, uint64_t v, uint64_t *e2e_ns)
{
    uint32_t lagging = 0;
    uint64_t t0;

    if (!weft_ok(weft_registry_write_begin(p->reg, WAIT_US, NULL), "weft_registry_write_begin")) {
        return -1;
    }
    for (size_t i = 0; i < p->count; i++) {
        void *data = NULL;

        if (!weft_ok(weft_registry_write_tensor(p->reg, (uint32_t)i, &data), "weft_registry_write_tensor") ||
            fill_tensor(data, kind_bytes(&c->w->kind[p->tensors[i].kind]), ring_offset(v, p->tensors[i].id),
                        p->ring_dev, p->stream) != 0) {
            return -1;
        }
    }
    if (!CU(cudaStreamSynchronize(p->stream))) {
        return -1;
    }
    t0 = perf_now_ns();
    if (!weft_ok(weft_registry_publish(p->reg, v, NULL), "weft_registry_publish") ||
        !weft_ok(weft_registry_wait_consumers(p->reg, v, WAIT_US, &lagging), "weft_registry_wait_consumers")) {
        return -1;
    }
    *e2e_ns = perf_now_ns() - t0;
    return 0;
}

/*
 * What the push server counted for version v, whose wait returned: the
 * server counts a transfer (versions_sent, bytes_sent, transfer_ns) before
 * it records it, so it is in `after` (its last_version is set only after
 * the record: not compared). Exactly one transfer of every byte, else the
 * figure would not be this version's. *transfer_ns: its time, from the
 * lease to the copy done.
 */
static int push_counted(weft_server_h server, const weft_server_stats_t *before, uint64_t v, uint64_t bytes,
                        uint64_t *transfer_ns)
{
    weft_server_stats_t after;

    if (!weft_ok(weft_server_get_stats(server, &after), "weft_server_get_stats")) {
        return -1;
    }
    if (after.versions_sent != before->versions_sent + 1 || after.bytes_sent - before->bytes_sent != bytes) {
        fprintf(stderr,
                "weft-perf ipc: push: version %llu: the server counted %llu transfers of %llu bytes in all, not 1 "
                "of %llu\n",
                (unsigned long long)v, (unsigned long long)(after.versions_sent - before->versions_sent),
                (unsigned long long)(after.bytes_sent - before->bytes_sent), (unsigned long long)bytes);
        return -1;
    }
    *transfer_ns = after.transfer_ns - before->transfer_ns;
    return 0;
}

/* Every version in turn, each timed end to end into e2e. With a push
 * server (else NULL), also the server's transfer time into transfer. */
static int publish_versions(ipc_ctx_t *ctx, const ipc_case_t *c, ipc_producer_t *p, weft_server_h server,
                            ipc_samples_t *e2e, ipc_samples_t *transfer)
{
    const uint64_t versions = ctx->o->warmup + ctx->o->iters;

    for (uint64_t v = 1; v <= versions; v++) {
        weft_server_stats_t before = {0};
        uint64_t            e2e_ns = 0, transfer_ns = 0;

        if (perf_interrupted ||
            (server != NULL && !weft_ok(weft_server_get_stats(server, &before), "weft_server_get_stats")) ||
            publish_version(p, c, v, &e2e_ns) != 0 ||
            (server != NULL && push_counted(server, &before, v, workload_bytes(c->w), &transfer_ns) != 0)) {
            fprintf(stderr, "weft-perf ipc: producer%s: version %llu failed\n", server != NULL ? " (push)" : "",
                    (unsigned long long)v);
            return -1;
        }
        sample_add(e2e, ctx->o, v, e2e_ns);
        if (server != NULL) {
            sample_add(transfer, ctx->o, v, transfer_ns);
        }
    }
    return 0;
}

static int producer_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    ipc_producer_t p;
    int            rc = 1;

    if (producer_open(ctx, c, &p) == 0 && wait_for_consumer(p.reg) == 0 &&
        publish_versions(ctx, c, &p, NULL, &ctx->sh->weft.e2e, NULL) == 0) {
        rc = 0;
    }
    producer_close(ctx, &p);
    return rc;
}

/* The push server, on loopback. Its port goes to the consumer process
 * through the shared mapping: both were forked before either had CUDA. */
static int start_push_server(ipc_ctx_t *ctx, weft_registry_h reg, weft_server_h *server)
{
    const weft_server_params_t params = {.transport = WEFT_TRANSPORT_CUDA_IPC, .listen = "127.0.0.1:0",
                                         .token = ctx->token};
    uint16_t                   port = 0;

    if (!weft_ok(weft_server_create(reg, &params, server), "weft_server_create (cuda_ipc)") ||
        !weft_ok(weft_server_port(*server, &port), "weft_server_port")) {
        return -1;
    }
    atomic_store(&ctx->sh->push.port, port);
    return 0;
}

/* After the last version the consumer verifies its views and leaves; the
 * server unmaps them before it closes the connection, which is what the
 * consumer's weft_remote_close() waits for. Destroying the server first
 * would drop the consumer instead of letting it leave. */
static int wait_for_departure(weft_server_h server)
{
    const uint64_t deadline = perf_now_ns() + WAIT_US * 1000;

    for (;;) {
        weft_server_stats_t stats;

        if (!weft_ok(weft_server_get_stats(server, &stats), "weft_server_get_stats")) {
            return -1;
        }
        if (stats.consumers == 0) {
            return 0;
        }
        if (perf_interrupted || perf_now_ns() > deadline) {
            fprintf(stderr, "weft-perf ipc: push: the consumer did not leave\n");
            return -1;
        }
        perf_sleep_us(1000);
    }
}

/* The producer of the push mode: the same registry and versions, copied
 * into the consumer's views by this process's server. */
static int push_producer_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    ipc_producer_t p;
    weft_server_h  server = NULL;
    int            rc = 1;

    if (producer_open(ctx, c, &p) == 0 && start_push_server(ctx, p.reg, &server) == 0 &&
        wait_for_consumer(p.reg) == 0 &&
        publish_versions(ctx, c, &p, server, &ctx->sh->push.e2e, &ctx->sh->push.transfer) == 0 &&
        wait_for_departure(server) == 0) {
        rc = 0;
    }
    /* Before the registry: the server copies out of its arenas. */
    if (server != NULL) {
        (void)weft_ok(weft_server_destroy(server), "weft_server_destroy");
    }
    producer_close(ctx, &p);
    return rc;
}

/* ----------------------------------------------------------- consumer */

/* Opens the registry once the producer has sealed it. */
static int open_registry(const char *name, weft_registry_h *reg)
{
    uint64_t deadline = perf_now_ns() + WAIT_US * 1000;

    for (;;) {
        weft_status_t status = weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, reg);

        if (status == WEFT_OK) {
            return 0;
        }
        if ((status != WEFT_ERR_NOT_FOUND && status != WEFT_ERR_STATE) || perf_interrupted ||
            perf_now_ns() > deadline) {
            return weft_ok(status, "weft_registry_open") - 1;
        }
        perf_sleep_us(1000);
    }
}

/* The engine's tensors: per layer and kind, all experts side by side
 * (SGLang's w13_weight[E, 2I, H] and the like), allocated once. */
static int alloc_fused(const ipc_workload_t *w, uint8_t **fused)
{
    for (uint64_t l = 0; l < w->layers; l++) {
        for (uint32_t k = 0; k < w->kinds; k++) {
            uint64_t bytes = kind_bytes(&w->kind[k]) * w->experts;
            uint8_t **f = &fused[l * w->kinds + k];

            if (!CU(cudaMalloc((void **)f, bytes)) || !CU(cudaMemset(*f, 0, bytes))) {
                return -1;
            }
        }
    }
    return 0;
}

/* Expert e's tensor of one kind: a contiguous slice of the fused tensor. */
static uint8_t *view_data(const ipc_workload_t *w, uint8_t *const *fused, const ipc_tensor_t *t)
{
    return fused[t->layer * w->kinds + t->kind] + t->expert * kind_bytes(&w->kind[t->kind]);
}

static void build_views(const ipc_workload_t *w, uint8_t *const *fused, const ipc_tensor_t *tensors, size_t count,
                        weft_recv_view_t *views)
{
    for (size_t i = 0; i < count; i++) {
        const ipc_kind_t *k = &w->kind[tensors[i].kind];

        views[i] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_MEMORY, .name = tensors[i].name,
                                      .role = k->role, .dtype = k->dtype, .ndim = 2,
                                      .shape = {k->rows, k->cols}, .data = view_data(w, fused, &tensors[i]),
                                      .memory = WEFT_MEMORY_CUDA};
    }
}

/* Every version in turn; the copies after the warm-up are timed. */
static int receive_versions(ipc_ctx_t *ctx, weft_registry_h reg, weft_plan_h plan, uint32_t consumer)
{
    const uint64_t versions = ctx->o->warmup + ctx->o->iters;
    uint64_t       last = 0, received = 0;

    while (last < versions) {
        weft_lease_t  lease;
        weft_status_t copied, released;
        uint64_t      t0, t1;

        if (perf_interrupted || !weft_ok(weft_registry_wait(reg, last, WAIT_US, &lease), "weft_registry_wait")) {
            return -1;
        }
        t0 = perf_now_ns();
        copied = weft_plan_copy(plan, &lease);
        t1 = perf_now_ns();
        released = weft_registry_release(reg, &lease);
        if (!weft_ok(copied, "weft_plan_copy") || !weft_ok(released, "weft_registry_release")) {
            (void)weft_registry_consumer_failed(reg, consumer, lease.version,
                                                copied != WEFT_OK ? copied : released);
            return -1;
        }
        if (!weft_ok(weft_registry_consumer_received(reg, consumer, lease.version),
                     "weft_registry_consumer_received")) {
            return -1;
        }
        if (received++ >= ctx->o->warmup && ctx->sh->weft.n < MAX_ITERS) {
            ctx->sh->weft.ns[ctx->sh->weft.n++] = t1 - t0;
        }
        last = lease.version;
    }
    ctx->sh->weft.last_version = last;
    return 0;
}

/* Copies every view back to the host and compares it with the pattern
 * of `version`, into *check. Returns -1 when a copy fails. */
static int verify_views(const ipc_workload_t *w, uint8_t *const *fused, const ipc_tensor_t *tensors, size_t count,
                        uint64_t version, ipc_check_t *check)
{
    uint8_t *ring = ring_make(), *host = malloc(CHECK_CHUNK);
    int      rc = -1;

    if (ring == NULL || host == NULL) {
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        const uint8_t *data = view_data(w, fused, &tensors[i]);
        uint64_t       bytes = kind_bytes(&w->kind[tensors[i].kind]), off = ring_offset(version, tensors[i].id);

        for (uint64_t pos = 0; pos < bytes; pos += CHECK_CHUNK) {
            uint64_t len = bytes - pos < CHECK_CHUNK ? bytes - pos : CHECK_CHUNK;

            if (!CU(cudaMemcpy(host, data + pos, len, cudaMemcpyDeviceToHost))) {
                goto out;
            }
            check->wrong_bytes += ring_compare(host, len, (off + pos) % RING_BYTES, ring);
            check->verified_bytes += len;
        }
    }
    check->verified = 1;
    rc = 0;
out:
    free(ring);
    free(host);
    return rc;
}

/* What a consumer process holds: the engine's fused tensors and one view
 * per registry tensor into them. */
typedef struct ipc_engine {
    ipc_tensor_t     *tensors;
    size_t            count, nfused;
    weft_recv_view_t *views;
    uint8_t         **fused;
} ipc_engine_t;

static int engine_open(ipc_ctx_t *ctx, const ipc_case_t *c, ipc_engine_t *e)
{
    memset(e, 0, sizeof(*e));
    e->nfused = (size_t)(c->w->layers * c->w->kinds);
    e->tensors = tensor_list(c->w, ctx->o->by_expert, &e->count);
    e->views = calloc(e->count ? e->count : 1, sizeof(*e->views));
    e->fused = calloc(e->nfused, sizeof(*e->fused));
    if (e->tensors == NULL || e->views == NULL || e->fused == NULL) {
        fprintf(stderr, "weft-perf ipc: out of memory\n");
        return -1;
    }
    /* The first CUDA call: this process's context is on the destination. */
    if (!CU(cudaSetDevice(c->dst)) || alloc_fused(c->w, e->fused) != 0) {
        return -1;
    }
    build_views(c->w, e->fused, e->tensors, e->count, e->views);
    return 0;
}

static void engine_close(ipc_engine_t *e)
{
    for (size_t i = 0; e->fused != NULL && i < e->nfused; i++) {
        if (e->fused[i] != NULL) {
            (void)CU(cudaFree(e->fused[i]));
        }
    }
    free(e->fused);
    free(e->views);
    free(e->tensors);
}

static int consumer_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    ipc_engine_t      e;
    weft_registry_h   reg = NULL;
    weft_plan_h       plan = NULL;
    weft_plan_stats_t stats;
    uint32_t          consumer = 0;
    int               rc = 1;

    if (engine_open(ctx, c, &e) != 0 || open_registry(ctx->registry, &reg) != 0 ||
        !weft_ok(weft_registry_consumer_register(reg, "weft-perf-ipc", &consumer), "consumer_register") ||
        !weft_ok(weft_plan_create(reg, WEFT_TRANSPORT_CUDA_IPC, e.views, e.count, &plan), "weft_plan_create") ||
        !weft_ok(weft_plan_get_stats(plan, &stats), "weft_plan_get_stats")) {
        goto out;
    }
    ctx->sh->weft.tensors = stats.tensor_count;
    ctx->sh->weft.ranges = stats.range_count;
    ctx->sh->weft.ranges_uncoalesced = stats.ranges_uncoalesced;
    ctx->sh->weft.plan_bytes = stats.bytes;
    if (receive_versions(ctx, reg, plan, consumer) != 0 ||
        verify_views(c->w, e.fused, e.tensors, e.count, ctx->sh->weft.last_version, &ctx->sh->weft.check) != 0) {
        goto out;
    }
    rc = ctx->sh->weft.check.wrong_bytes == 0 ? 0 : 5;
out:
    (void)weft_ok(weft_plan_destroy(plan), "weft_plan_destroy");
    (void)weft_ok(weft_registry_close(reg), "weft_registry_close");
    engine_close(&e);
    return rc;
}

/* The push server's "host:port", once its producer has published it. */
static int wait_for_server(ipc_ctx_t *ctx, char *addr, size_t size)
{
    const uint64_t deadline = perf_now_ns() + WAIT_US * 1000;

    for (;;) {
        uint32_t port = atomic_load(&ctx->sh->push.port);

        if (port != 0) {
            snprintf(addr, size, "127.0.0.1:%u", (unsigned)port);
            return 0;
        }
        if (perf_interrupted || perf_now_ns() > deadline) {
            fprintf(stderr, "weft-perf ipc: push: the producer's server did not start\n");
            return -1;
        }
        perf_sleep_us(1000);
    }
}

/* Every pushed version in turn; each is in the views when it is returned
 * (the server's copy completed before its notice). The producer waits for
 * each before it publishes the next, so none may be skipped. */
static int receive_pushed(ipc_ctx_t *ctx, weft_remote_h remote)
{
    const uint64_t versions = ctx->o->warmup + ctx->o->iters;
    uint64_t       last = 0;

    while (last < versions) {
        uint64_t v = 0;

        if (perf_interrupted || !weft_ok(weft_remote_receive(remote, last, WAIT_US, &v), "weft_remote_receive")) {
            return -1;
        }
        if (v != last + 1) {
            fprintf(stderr, "weft-perf ipc: push: version %llu came after %llu\n", (unsigned long long)v,
                    (unsigned long long)last);
            return -1;
        }
        last = v;
    }
    ctx->sh->push.last_version = last;
    return 0;
}

/* The consumer of the push mode: the same engine tensors and views,
 * exported to the producer's server, whose process copies into them. This
 * process does no GPU work until the last version is in. */
static int push_consumer_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    char                       addr[32] = "";
    const weft_remote_params_t params = {.transport = WEFT_TRANSPORT_CUDA_IPC, .server = addr,
                                         .token = ctx->token, .name = "weft-perf-ipc-push"};
    ipc_engine_t               e;
    weft_remote_h              remote = NULL;
    int                        rc = 1;

    if (engine_open(ctx, c, &e) != 0 || wait_for_server(ctx, addr, sizeof(addr)) != 0 ||
        !weft_ok(weft_remote_connect(&params, e.views, e.count, &remote), "weft_remote_connect (cuda_ipc)") ||
        receive_pushed(ctx, remote) != 0 ||
        verify_views(c->w, e.fused, e.tensors, e.count, ctx->sh->push.last_version, &ctx->sh->push.check) != 0) {
        goto out;
    }
    rc = ctx->sh->push.check.wrong_bytes == 0 ? 0 : 5;
out:
    /* Before the memory goes: the server maps it until the close returns. */
    (void)weft_ok(weft_remote_close(remote), "weft_remote_close");
    engine_close(&e);
    return rc;
}

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
    return cuda_ok(err, "cudaDeviceEnablePeerAccess") ? 0 : -1;
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
static int copy_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    const uint64_t bytes = workload_bytes(c->w), runs = ctx->o->warmup + ctx->o->iters;
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
 * Two processes on one GPU: before each D2D copy (timed as copy_main
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

static int toucher_main(ipc_ctx_t *ctx, const ipc_case_t *c)
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

static int switched_copy_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    const uint64_t bytes = workload_bytes(c->w), runs = ctx->o->warmup + ctx->o->iters;
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
static int nccl_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    const uint64_t bytes = workload_bytes(c->w), runs = ctx->o->warmup + ctx->o->iters;
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
static int probe_main(ipc_ctx_t *ctx, const ipc_case_t *unused)
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

/* ----------------------------------------------------------- children */

typedef int (*ipc_child_fn)(ipc_ctx_t *ctx, const ipc_case_t *c);

static int fork_child(ipc_ctx_t *ctx, ipc_child_fn fn, const ipc_case_t *c)
{
    pid_t pid = perf_fork(&ctx->children);

    if (pid == 0) {
        _exit(fn(ctx, c));
    }
    return pid < 0 ? -1 : 0;
}

/* Waits for every child; the first that fails, or the deadline, kills the
 * others. Returns 0 when all exited with 0. */
static int wait_children(ipc_ctx_t *ctx, const char *what, uint64_t timeout_s)
{
    uint64_t deadline = perf_now_ns() + timeout_s * UINT64_C(1000000000);

    while (ctx->children.count > 0) {
        int   status = 0;
        pid_t pid = perf_reap_exited(&ctx->children, &status);
        char  how[96];

        if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            continue;
        }
        if (pid > 0) {
            perf_describe_status(status, how, sizeof(how));
            fprintf(stderr, "weft-perf ipc: %s: process %d %s\n", what, (int)pid, how);
        } else if (pid == 0 && !perf_interrupted && perf_now_ns() < deadline) {
            perf_sleep_us(2000);
            continue;
        } else if (pid == 0) {
            fprintf(stderr, "weft-perf ipc: %s: %s\n", what, perf_interrupted ? "interrupted" : "timed out");
        }
        perf_kill_children(&ctx->children);
        return -1;
    }
    return 0;
}

/* One child (or two) running fn; 0 on success. */
static int run_children(ipc_ctx_t *ctx, const char *what, ipc_child_fn a, ipc_child_fn b, const ipc_case_t *c,
                        uint64_t timeout_s)
{
    if (fork_child(ctx, a, c) != 0 || (b != NULL && fork_child(ctx, b, c) != 0)) {
        perf_kill_children(&ctx->children);
        return -1;
    }
    return wait_children(ctx, what, timeout_s);
}

/* --------------------------------------------------------- torch peer */

typedef struct ipc_result {
    uint64_t tensors, ranges, ranges_uncoalesced, bytes, wrong_bytes;
    int      verified, ok;
    double   weft_s, ceiling_s, nccl_s, torch_s; /* NaN: none */
    double   switched_s; /* same GPU: D2D copy right after another process's work */
    double   weft_e2e_s;  /* producer: publish to the consumer's record (pull) */
    /* The push mode, when measured: the server's transfer time and the
     * producer's end to end time; its own check of every byte. */
    int      push_measured, push_verified, push_ok;
    uint64_t push_wrong_bytes;
    double   push_s, push_e2e_s;
    char     torch_version[64], torch_note[256], note[512];
} ipc_result_t;

static void add_note(ipc_result_t *r, const char *note)
{
    size_t used = strlen(r->note);

    snprintf(r->note + used, sizeof(r->note) - used, "%s%s", used ? "; " : "", note);
}

/* The last line of the peer's output that is a JSON object (NULL if
 * none); the caller frees it. *status gets pclose's status. */
static char *peer_output(const char *cmd, int *status)
{
    FILE   *pipe;
    char   *line = NULL, *last = NULL;
    size_t  cap = 0;
    ssize_t len;

    fflush(NULL);
    pipe = popen(cmd, "r");
    if (pipe == NULL) {
        *status = -1;
        return NULL;
    }
    while ((len = getline(&line, &cap, pipe)) >= 0) {
        if (len > 0 && line[0] == '{') {
            free(last);
            last = strdup(line);
        }
    }
    free(line);
    *status = pclose(pipe);
    return last;
}

/* ipc_peer.py on this case: torch tensors shared one by one over CUDA IPC
 * and copied. Fills torch_s, torch_version and torch_note. */
static void run_torch(const ipc_options_t *o, const ipc_case_t *c, ipc_result_t *r)
{
    char  cmd[1536], error[200];
    char *last;
    int   status = 0;

    snprintf(r->torch_version, sizeof(r->torch_version), "none");
    if (!o->peer) {
        snprintf(r->torch_note, sizeof(r->torch_note), "skipped (--no-peer)");
        return;
    }
    if (strchr(o->peer_script, '\'') != NULL || strlen(o->peer_script) > 1024) {
        snprintf(r->torch_note, sizeof(r->torch_note), "skipped: the peer script's path cannot be quoted");
        return;
    }
    snprintf(cmd, sizeof(cmd),
             "python3 '%s' --src-device %d --dst-device %d --workload %s --iterations %llu --warmup %llu 2>&1",
             o->peer_script, c->src, c->dst, c->w->name, (unsigned long long)o->iters,
             (unsigned long long)o->warmup);
    last = peer_output(cmd, &status);
    if (last != NULL && perf_json_find_string(last, "error", error, sizeof(error)) == 0) {
        snprintf(r->torch_note, sizeof(r->torch_note), "skipped: %s", error);
    } else if (last != NULL && perf_json_find_number(last, "bytes") != (double)workload_bytes(c->w)) {
        snprintf(r->torch_note, sizeof(r->torch_note), "skipped: the peer moved %.0f bytes, not %llu",
                 perf_json_find_number(last, "bytes"), (unsigned long long)workload_bytes(c->w));
    } else if (last != NULL && status == 0 && perf_json_find_number(last, "seconds_median") > 0) {
        r->torch_s = perf_json_find_number(last, "seconds_median");
        (void)perf_json_find_string(last, "torch", r->torch_version, sizeof(r->torch_version));
        snprintf(r->torch_note, sizeof(r->torch_note), "torch %s, %.3f GB/s by its own count", r->torch_version,
                 perf_json_find_number(last, "gb_per_s"));
    } else {
        char how[96];

        if (status == -1) {
            snprintf(how, sizeof(how), "cannot be started");
        } else {
            perf_describe_status(status, how, sizeof(how));
        }
        snprintf(r->torch_note, sizeof(r->torch_note), "skipped: python3 %s %s (is torch installed?)",
                 o->peer_script, how);
    }
    free(last);
}

/* ------------------------------------------------------------- a case */

/* The push mode: a producer whose process copies through its server, and
 * a consumer that exported its views, over a fresh registry. */
static void measure_push(ipc_ctx_t *ctx, const ipc_case_t *c, int number, ipc_result_t *r)
{
    const uint64_t versions = ctx->o->warmup + ctx->o->iters;
    ipc_shared_t  *sh = ctx->sh;
    int            failed;

    snprintf(ctx->registry, sizeof(ctx->registry), "weft-perf-ipc-%d-%d-push", (int)getpid(), number);
    snprintf(ctx->token, sizeof(ctx->token), "weft-perf-ipc-%d-%d-%llx", (int)getpid(), number,
             (unsigned long long)perf_now_ns());
    (void)weft_registry_unlink(ctx->registry);
    memset(&sh->push, 0, sizeof(sh->push));
    atomic_store(&sh->push.port, 0);
    failed = run_children(ctx, "weft push producer/consumer", push_producer_main, push_consumer_main, c,
                          300 + versions * 10) != 0;
    if (failed) {
        add_note(r, "the weft push transfer failed");
    }
    (void)weft_registry_unlink(ctx->registry);
    r->push_measured = 1;
    r->push_verified = sh->push.check.verified;
    r->push_wrong_bytes = sh->push.check.wrong_bytes;
    r->push_s = median_seconds(sh->push.transfer.ns, sh->push.transfer.n);
    r->push_e2e_s = median_seconds(sh->push.e2e.ns, sh->push.e2e.n);
    r->push_ok = !failed && r->push_verified && r->push_wrong_bytes == 0 &&
                 sh->push.check.verified_bytes == r->bytes && sh->push.last_version == versions &&
                 sh->push.transfer.n == ctx->o->iters && sh->push.e2e.n == ctx->o->iters;
}

static void measure_case(ipc_ctx_t *ctx, const ipc_case_t *c, int number, ipc_result_t *r)
{
    const uint64_t versions = ctx->o->warmup + ctx->o->iters;
    ipc_shared_t  *sh = ctx->sh;

    memset(r, 0, sizeof(*r));
    r->weft_s = r->ceiling_s = r->nccl_s = r->torch_s = r->switched_s = NAN;
    r->weft_e2e_s = r->push_s = r->push_e2e_s = NAN;
    r->bytes = workload_bytes(c->w);
    r->tensors = workload_tensors(c->w);

    /* weft: a producer and a consumer process over a fresh registry. */
    snprintf(ctx->registry, sizeof(ctx->registry), "weft-perf-ipc-%d-%d", (int)getpid(), number);
    (void)weft_registry_unlink(ctx->registry);
    memset(&sh->weft, 0, sizeof(sh->weft));
    if (run_children(ctx, "weft producer/consumer", producer_main, consumer_main, c, 300 + versions * 10) != 0) {
        add_note(r, "the weft transfer failed");
    }
    (void)weft_registry_unlink(ctx->registry);
    r->verified = sh->weft.check.verified;
    r->wrong_bytes = sh->weft.check.wrong_bytes;
    r->ranges = sh->weft.ranges;
    r->ranges_uncoalesced = sh->weft.ranges_uncoalesced;
    if (sh->weft.tensors != 0) {
        r->tensors = sh->weft.tensors;
    }
    if (sh->weft.plan_bytes != 0 && sh->weft.plan_bytes != r->bytes) {
        add_note(r, "the plan's byte count differs from the workload's");
    }
    r->weft_s = median_seconds(sh->weft.ns, sh->weft.n);
    r->weft_e2e_s = median_seconds(sh->weft.e2e.ns, sh->weft.e2e.n);
    r->ok = r->verified && r->wrong_bytes == 0 && sh->weft.n == ctx->o->iters &&
            sh->weft.check.verified_bytes == r->bytes && sh->weft.plan_bytes == r->bytes;

    /* The same versions pushed: a failed or wrong push fails the case. */
    if (ctx->o->push) {
        measure_push(ctx, c, number, r);
        r->ok = r->ok && r->push_ok;
    }

    /* The ceiling: a peer copy across GPUs, a D2D copy on one. */
    memset(&sh->timing, 0, sizeof(sh->timing));
    if (run_children(ctx, c->cross ? "peer copy" : "D2D copy", copy_main, NULL, c, 300 + versions * 5) == 0) {
        r->ceiling_s = median_seconds(sh->timing.ns, sh->timing.n);
    } else {
        add_note(r, c->cross ? "the peer copy failed" : "the D2D copy failed");
    }

    /* On one GPU, the same copy when it must wait for a context switch. */
    if (!c->cross) {
        memset(&sh->timing, 0, sizeof(sh->timing));
        atomic_store(&sh->turn, 0);
        if (run_children(ctx, "D2D copy after a context switch", switched_copy_main, toucher_main, c,
                         300 + versions * 5) == 0) {
            r->switched_s = median_seconds(sh->timing.ns, sh->timing.n);
        } else {
            add_note(r, "the D2D copy after a context switch failed");
        }
    }

    /* NCCL send/recv, across GPUs only. */
    if (c->cross) {
#ifdef HAVE_NCCL
        memset(&sh->timing, 0, sizeof(sh->timing));
        if (run_children(ctx, "NCCL send/recv", nccl_main, NULL, c, 300 + versions * 5) == 0) {
            r->nccl_s = median_seconds(sh->timing.ns, sh->timing.n);
        } else {
            add_note(r, "NCCL send/recv failed");
        }
#else
        add_note(r, "NCCL: not in this build");
#endif
    }

    /* The peer, last: it allocates on both GPUs itself. */
    run_torch(ctx->o, c, r);
}

/* -------------------------------------------------------------- output */


static const char *env_or_empty(const char *name)
{
    const char *value = getenv(name);

    return value != NULL ? value : "";
}

static void json_targets(perf_json_t *json)
{
    fprintf(json->out,
            "%s\"targets\": {\"peer_copy\": 0.95, \"nccl\": 1.0, \"torch_ipc\": 5.0, \"d2d_same_gpu\": 0.9}",
            json->fields++ > 0 ? ", " : "");
}

static void print_preamble(const ipc_options_t *o, const ipc_probe_t *p, int cpus, int cross)
{
    perf_print_host(stdout, cpus);
    printf("# device %llu: %s (cc %d.%d, PCI %s)", (unsigned long long)o->src, p->name[0], p->major[0],
           p->minor[0], p->bus[0]);
    if (cross) {
        printf(", device %llu: %s (cc %d.%d, PCI %s), peer access %s/%s", (unsigned long long)o->dst, p->name[1],
               p->major[1], p->minor[1], p->bus[1], p->peer[0] ? "yes" : "no", p->peer[1] ? "yes" : "no");
    }
    printf("; %d GPUs; CUDA driver %d, runtime %d; ", p->count, p->driver, p->runtime);
    if (p->nccl != 0) {
        printf("NCCL %d\n", p->nccl);
    } else {
        printf("no NCCL in this build\n");
    }
    if (!cross) {
        printf("# cross GPU case skipped: device %llu %s\n", (unsigned long long)o->dst,
               o->dst == o->src ? "is the source" : "does not exist");
    }
    printf("# weft: GPU registry on the source GPU, cuda_ipc plan into fused per-layer tensors on the "
           "destination, declared by %s;\n# median time of weft_plan_copy over %llu versions after %llu warm-up "
           "(CLOCK_MONOTONIC); every byte of the last version verified\n",
           o->by_expert ? "expert" : "role", (unsigned long long)o->iters, (unsigned long long)o->warmup);
    printf("# ceiling: cudaMemcpyPeerAsync (cross GPU) or cudaMemcpyAsync D2D (same GPU) of the same bytes as one "
           "buffer, CUDA events; same GPU also that copy right after another process's GPU work;\n# nccl: ncclSend/ncclRecv in one process (cross GPU); torch: %s tensors shared "
           "one by one over CUDA IPC and copied (%s)\n",
           o->peer ? "ipc_peer.py," : "skipped (--no-peer),", o->peer_script);
    if (o->push) {
        printf("# push: the same versions copied by the producer's process (cuda_ipc weft_server on loopback) into the "
               "same tensors exported with weft_remote_connect;\n# median of the server's transfer time (lease to "
               "copy done, weft_server_stats_t.transfer_ns), every byte of the last version verified\n");
    } else {
        printf("# push: skipped (--no-push)\n");
    }
    printf("# end to end (pull and push): the producer's median time from just before weft_registry_publish to "
           "weft_registry_wait_consumers returning\n");
    printf("# targets: cross GPU r_ceiling >= 0.95 and r_nccl >= 1; r_torch >= 5; same GPU r_ceiling >= 0.9\n");
    printf("%-13s %-9s %7s %7s %13s %10s %10s %12s %10s %11s %10s %7s %7s %8s %11s\n", "workload", "placement",
           "tensors", "ranges", "bytes", "weft_GB/s", "push_GB/s", "ceiling_GB/s", "nccl_GB/s", "torch_GB/s",
           "r_ceiling", "r_push", "r_nccl", "r_torch", "wrong_bytes");
}

/* The push mode and both modes end to end, under the case's row. */
static void print_push(const ipc_case_t *c, const ipc_result_t *r, double ceiling)
{
    const char  *placement = c->cross ? "cross_gpu" : "same_gpu";
    const double e2e = perf_gbps(r->bytes, r->weft_e2e_s), push_e2e = perf_gbps(r->bytes, r->push_e2e_s);
    char         b[4][32];

    if (!r->push_measured) {
        printf("#   %s %s: push: skipped (--no-push)\n", c->w->name, placement);
    } else if (r->push_verified) {
        printf("#   %s %s: push: %llu wrong bytes%s\n", c->w->name, placement,
               (unsigned long long)r->push_wrong_bytes, r->push_ok ? "" : "; FAILED");
    } else {
        printf("#   %s %s: push: not verified; FAILED\n", c->w->name, placement);
    }
    printf("#   %s %s: end to end (publish to every consumer's record): pull %s GB/s = %s x ceiling, push %s GB/s "
           "= %s x ceiling\n",
           c->w->name, placement, perf_num(b[0], 32, e2e, 1), perf_num(b[1], 32, e2e / ceiling, 3),
           perf_num(b[2], 32, push_e2e, 1), perf_num(b[3], 32, push_e2e / ceiling, 3));
}

static void print_row(const ipc_case_t *c, const ipc_result_t *r)
{
    const double weft = perf_gbps(r->bytes, r->weft_s), ceiling = perf_gbps(r->bytes, r->ceiling_s);
    const double nccl = perf_gbps(r->bytes, r->nccl_s), torch = perf_gbps(r->bytes, r->torch_s);
    const double push = perf_gbps(r->bytes, r->push_s);
    char         b[9][32], wrong[32];

    if (r->verified) {
        snprintf(wrong, sizeof(wrong), "%llu", (unsigned long long)r->wrong_bytes);
    } else {
        snprintf(wrong, sizeof(wrong), "-");
    }
    printf("%-13s %-9s %7llu %7llu %13llu %10s %10s %12s %10s %11s %10s %7s %7s %8s %11s%s\n", c->w->name,
           c->cross ? "cross_gpu" : "same_gpu", (unsigned long long)r->tensors, (unsigned long long)r->ranges,
           (unsigned long long)r->bytes, perf_num(b[0], 32, weft, 1), perf_num(b[1], 32, push, 1),
           perf_num(b[2], 32, ceiling, 1), perf_num(b[3], 32, nccl, 1), perf_num(b[4], 32, torch, 1),
           perf_num(b[5], 32, weft / ceiling, 3), perf_num(b[6], 32, push / ceiling, 3),
           perf_num(b[7], 32, weft / nccl, 3), perf_num(b[8], 32, weft / torch, 3), wrong, r->ok ? "" : "  FAILED");
    printf("#   %s %s: %llu ranges before merging; torch: %s%s%s\n", c->w->name, c->cross ? "cross_gpu" : "same_gpu",
           (unsigned long long)r->ranges_uncoalesced, r->torch_note, r->note[0] ? "; " : "", r->note);
    print_push(c, r, ceiling);
    if (!c->cross) {
        const double switched = perf_gbps(r->bytes, r->switched_s);

        printf("#   %s same_gpu: D2D copy right after another process's GPU work (a context switch): %s GB/s; "
               "weft = %s x that\n",
               c->w->name, perf_num(b[0], 32, switched, 1), perf_num(b[1], 32, weft / switched, 3));
    }
}

/*
 * The push mode (null where not measured: --no-push) and both modes end
 * to end, each against the case's ceiling under the name of the pull
 * ratio with _push, _e2e or _push_e2e appended (null for the other
 * placement, as the pull ratios).
 */
static void json_push(perf_json_t *j, const ipc_case_t *c, const ipc_result_t *r, double ceiling)
{
    const double push = perf_gbps(r->bytes, r->push_s), e2e = perf_gbps(r->bytes, r->weft_e2e_s);
    const double push_e2e = perf_gbps(r->bytes, r->push_e2e_s);

    perf_json_number_g(j, "push_seconds_median", r->push_s);
    perf_json_double(j, "push_gbps", push);
    perf_json_double(j, "ratio_peer_copy_push", c->cross ? push / ceiling : NAN);
    perf_json_double(j, "ratio_d2d_same_gpu_push", c->cross ? NAN : push / ceiling);
    perf_json_number_g(j, "weft_e2e_seconds_median", r->weft_e2e_s);
    perf_json_double(j, "weft_e2e_gbps", e2e);
    perf_json_double(j, "ratio_peer_copy_e2e", c->cross ? e2e / ceiling : NAN);
    perf_json_double(j, "ratio_d2d_same_gpu_e2e", c->cross ? NAN : e2e / ceiling);
    perf_json_number_g(j, "push_e2e_seconds_median", r->push_e2e_s);
    perf_json_double(j, "push_e2e_gbps", push_e2e);
    perf_json_double(j, "ratio_peer_copy_push_e2e", c->cross ? push_e2e / ceiling : NAN);
    perf_json_double(j, "ratio_d2d_same_gpu_push_e2e", c->cross ? NAN : push_e2e / ceiling);
    if (r->push_verified) {
        perf_json_uint(j, "push_wrong_bytes", r->push_wrong_bytes);
    } else {
        perf_json_number_g(j, "push_wrong_bytes", NAN);
    }
    if (r->push_measured) {
        perf_json_bool(j, "push_ok", r->push_ok);
    } else {
        perf_json_number_g(j, "push_ok", NAN);
    }
}

static void print_json(const ipc_options_t *o, const ipc_probe_t *p, const char *date, const ipc_case_t *c,
                       const ipc_result_t *r)
{
    const double weft = perf_gbps(r->bytes, r->weft_s), ceiling = perf_gbps(r->bytes, r->ceiling_s);
    const double nccl = perf_gbps(r->bytes, r->nccl_s), torch = perf_gbps(r->bytes, r->torch_s);
    char         host[256];
    perf_json_t  j;

    perf_host_name(host, sizeof(host));
    perf_json_begin(&j, stdout);
    perf_json_str(&j, "command", "ipc");
    perf_json_str(&j, "date", date);
    perf_json_str(&j, "device", p->name[0]);
    perf_json_str(&j, "dst_device_name", c->cross ? p->name[1] : p->name[0]);
    perf_json_str(&j, "host", host);
    perf_json_str(&j, "libweft", weft_version());
    perf_json_int(&j, "cuda_driver", p->driver);
    perf_json_int(&j, "cuda_runtime", p->runtime);
    perf_json_int(&j, "nccl_version", p->nccl);
    perf_json_str(&j, "workload", c->w->name);
    perf_json_str(&j, "placement", c->cross ? "cross_gpu" : "same_gpu");
    perf_json_int(&j, "src_device", c->src);
    perf_json_int(&j, "dst_device", c->dst);
    perf_json_bool(&j, "peer_access", c->cross ? p->peer[0] && p->peer[1] : 1);
    perf_json_str(&j, "order", o->by_expert ? "expert" : "role");
    /* The transport's settings as the environment gives them ("" where
     * unset: the library's defaults, which `weft-perf info` lists). */
    perf_json_str(&j, "WEFT_CUDA_IPC_KERNEL_MAX", env_or_empty("WEFT_CUDA_IPC_KERNEL_MAX"));
    perf_json_str(&j, "WEFT_CUDA_IPC_STREAMS", env_or_empty("WEFT_CUDA_IPC_STREAMS"));
    perf_json_uint(&j, "tensors", r->tensors);
    perf_json_uint(&j, "ranges", r->ranges);
    perf_json_uint(&j, "ranges_uncoalesced", r->ranges_uncoalesced);
    perf_json_uint(&j, "bytes", r->bytes);
    perf_json_uint(&j, "iterations", o->iters);
    perf_json_uint(&j, "warmup", o->warmup);
    perf_json_number_g(&j, "weft_seconds_median", r->weft_s);
    perf_json_double(&j, "weft_gbps", weft);
    perf_json_double(&j, "peer_copy_gbps", c->cross ? ceiling : NAN);
    perf_json_double(&j, "d2d_gbps", c->cross ? NAN : ceiling);
    perf_json_double(&j, "nccl_gbps", nccl);
    perf_json_double(&j, "torch_ipc_gbps", torch);
    perf_json_str(&j, "torch_version", r->torch_version);
    perf_json_str(&j, "peer", r->torch_note);
    perf_json_double(&j, "ratio_peer_copy", c->cross ? weft / ceiling : NAN);
    perf_json_double(&j, "ratio_nccl", weft / nccl);
    perf_json_double(&j, "ratio_torch_ipc", weft / torch);
    perf_json_double(&j, "ratio_d2d_same_gpu", c->cross ? NAN : weft / ceiling);
    /* Same GPU: a D2D copy that, as the weft copy, waits for the GPU to
     * switch from the producer process's context. */
    perf_json_double(&j, "d2d_after_switch_gbps", c->cross ? NAN : perf_gbps(r->bytes, r->switched_s));
    perf_json_double(&j, "ratio_d2d_after_switch", c->cross ? NAN : weft / perf_gbps(r->bytes, r->switched_s));
    json_push(&j, c, r, ceiling);
    if (r->verified) {
        perf_json_uint(&j, "wrong_bytes", r->wrong_bytes);
    } else {
        perf_json_number_g(&j, "wrong_bytes", NAN);
    }
    perf_json_bool(&j, "ok", r->ok);
    perf_json_str(&j, "notes", r->note);
    json_targets(&j);
    perf_json_end(&j);
}

/* ---------------------------------------------------------------- main */

static void utc_date(char *buf, size_t size)
{
    time_t    now = time(NULL);
    struct tm tm;

    if (gmtime_r(&now, &tm) == NULL || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        snprintf(buf, size, "unknown");
    }
}

/* Runs every case of the options; 0 when all moved every byte right. */
static int run_cases(ipc_ctx_t *ctx, const ipc_probe_t *probe, int cpus, const char *date)
{
    const ipc_options_t *o = ctx->o;
    const int            cross = o->dst != o->src && o->dst < (uint64_t)probe->count;
    int                  failed = 0, number = 0;

    if (!o->json) {
        print_preamble(o, probe, cpus, cross);
    } else if (!cross) {
        fprintf(stderr, "weft-perf ipc: cross GPU case skipped: device %llu %s\n", (unsigned long long)o->dst,
                o->dst == o->src ? "is the source" : "does not exist");
    }
    fflush(stdout);
    for (size_t i = 0; i < sizeof(workloads) / sizeof(workloads[0]); i++) {
        for (int placement = 0; placement <= cross; placement++) {
            const ipc_case_t c = {.w = &workloads[i], .src = (int)o->src,
                                  .dst = placement ? (int)o->dst : (int)o->src, .cross = placement};
            ipc_result_t     r;

            if (!(workloads[i].mask & o->workloads) || perf_interrupted) {
                continue;
            }
            measure_case(ctx, &c, number++, &r);
            if (o->json) {
                print_json(o, probe, date, &c, &r);
            } else {
                print_row(&c, &r);
            }
            fflush(stdout);
            failed |= !r.ok;
        }
    }
    return failed || perf_interrupted ? 1 : 0;
}

int perf_cmd_ipc(int argc, char **argv)
{
    ipc_options_t o;
    ipc_ctx_t     ctx;
    ipc_probe_t   probe;
    char          date[32];
    int           cpu[2], cpus, rc = parse_options(argc, argv, &o);

    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.o = &o;
    ctx.sh = mmap(NULL, sizeof(*ctx.sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (ctx.sh == MAP_FAILED) {
        fprintf(stderr, "weft-perf ipc: out of memory\n");
        return 1;
    }
    if (perf_catch_interrupts() != 0) {
        munmap(ctx.sh, sizeof(*ctx.sh));
        return 1;
    }
    cpus = perf_cpus_allowed(cpu);
    utc_date(date, sizeof(date));

    /* No CUDA here: the probe runs in a child like everything else. */
    if (run_children(&ctx, "GPU probe", probe_main, NULL, NULL, 120) != 0 || !ctx.sh->probe.done) {
        fprintf(stderr, "weft-perf ipc: the GPU probe failed\n");
        rc = 1;
    } else if (ctx.sh->probe.count == 0) {
        fprintf(stderr, "weft-perf ipc: no GPU (%s): skipped\n", ctx.sh->probe.error);
        rc = EXIT_SKIP;
    } else if (o.src >= (uint64_t)ctx.sh->probe.count) {
        fprintf(stderr, "weft-perf ipc: --src-device %llu: this machine has %d GPUs\n", (unsigned long long)o.src,
                ctx.sh->probe.count);
        rc = 2;
    } else {
        probe = ctx.sh->probe;
        rc = run_cases(&ctx, &probe, cpus, date);
    }
    munmap(ctx.sh, sizeof(*ctx.sh));
    return rc;
}

#endif /* HAVE_CUDA */
