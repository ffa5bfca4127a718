/*
 * weft-perf ucx: how fast the ucx transport moves a published version to a
 * remote consumer, beside ucx_perftest -t ucp_put_bw moving the same bytes
 * over the same UCX transport in the same run.
 *
 * Why: the ucx transport is a registry lease, RMA puts of the plan's
 * ranges, a flush, a notice and an ack per version. ucx_perftest's put
 * bandwidth is what UCX itself gets out of the link; the target is 0.9 of
 * it (issue: "Speed, weft-perf ucx").
 *
 * What is timed: a server process (a host registry and weft_server) and a
 * consumer process (weft_remote_receive in a loop into host memory). For
 * each version the server fills every tensor (not timed), then times from
 * weft_registry_publish(v) to weft_registry_wait_consumers(v) returning:
 * the bytes are in the consumer's memory and it acknowledged them. The
 * figure is the median over --iterations versions after --warmup ones
 * (one per registry slot, whose first put registers it); GB/s is 1e9
 * bytes per second. The last version's bytes are checked at the consumer.
 *
 * Cases: for each --sizes size S, versions of K = --version-bytes / S
 * tensors of S bytes (at least one), each its own put: the consumer lays
 * its views out in the reverse order of the registry's, so that no two
 * tensors' ranges merge into one larger put. That is what ucx_perftest's
 * put bandwidth at S measures (many S-byte puts, then a completion), with
 * one notice and ack per K puts; --version-bytes 0 makes each version one
 * tensor, a round trip's latency more than a bandwidth. And a whole FP8
 * expert version of one Qwen3-30B-A3B MoE layer (128 experts × W, WT and
 * block scales of gate_up_proj and down_proj: 768 tensors, 1,208,107,008
 * bytes), viewed by the consumer in fused per-kind buffers as an engine
 * holds them.
 *
 * ucx_perftest moves as many S-byte puts as weft does (-n iterations × K,
 * -w warm-up × K); the target is against that figure. Where weft's
 * endpoints handle peer failures (WEFT_UCX_ERR_MODE=peer, the default),
 * UCX emulates puts over TCP in software, and ucx_perftest -e (the same
 * error handling) runs too: that "same" figure says how much of the gap
 * is UCX's, not libweft's. Where UCX cannot connect with -e (its shared-
 * memory transports), weft's endpoints go without it too
 * (ucx_common.c), and the same setup is the first run's.
 *
 * Transports: tcp-netns, the server in one network namespace and the
 * consumer in another, joined by a veth pair that this command creates and
 * removes (UCX_TLS=tcp, UCX_NET_DEVICES the veth end; needs root and ip);
 * shm, both on this host (UCX_TLS=sm,self). The processes are this program
 * run again with the hidden --role option, under `ip netns exec` for
 * tcp-netns. ucx_perftest runs the same way: its server on the receiving
 * side, its client (which puts) on the server's side.
 *
 * Rounds: a shared host's speed drifts between runs of a few seconds (the
 * same build's 64 KiB ratio ran from 0.53 to 1.35 in one session), so each
 * row is --rounds rounds of (weft, ucx_perftest, the copy ceiling), one
 * after the other. A round's ratio pairs figures taken within seconds of
 * each other; the row reports the median round's ratio and the least and
 * greatest, and the median of each figure.
 */
#include "config.h"

#include "args.h"
#include "copy_ceiling.h"
#include "gpu_buf.h"
#include "json.h"
#include "lib/payload.h"
#include "lib/runner.h"
#include "perf.h"
#include "proc.h"
#include "stats.h"
#include "sysinfo.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <weft/registry.h>
#include <weft/transport.h>
#include <weft/weft.h>

#define EXIT_SKIP     77 /* the automake "skipped" status */
#define MAX_ITERS     10000
#define MAX_ROUNDS    9
#define MAX_SIZES     16
#define MAX_SIZE      (UINT64_C(16) << 30)
#define TARGET        0.9
#define EXPERTS       128
#define STEP_US       UINT64_C(120000000) /* the server's timeout for one transfer or ack */
#define WAIT_US       UINT64_C(240000000) /* a version's wait, on either side */
#define READY_MS      60000u              /* a server's port, a consumer's handshake */
#define SLOW_BYTES_S  20e6                /* a transfer slower than this is stuck */
#define PERFTEST_TRYS 5                   /* message sizes tried for the expert version */
#define PERFTEST_MAX_BYTES (UINT64_C(4) << 30) /* moved by one ucx_perftest run at most */
#define VERSION_BYTES UINT64_C(16777216)        /* --version-bytes' default */
#define MAX_TENSORS   65536u                     /* a size case's tensors a version, at most */

enum { TR_TCP_NETNS = 1, TR_SHM = 2, TR_TCP_LO = 4 };

typedef struct ucx_options {
    int      transports; /* TR_* bits */
    uint64_t sizes[MAX_SIZES];
    size_t   nsizes;
    int      expert, json;
    int      err_none; /* --err-mode: 1 none, 0 peer, -1 as the environment says */
    int      gpu;      /* --memory cuda: a GPU registry into device views */
    int      recv_user; /* --recv-memory user: host views in malloc'd memory, not UCX's */
    uint64_t lanes;    /* --lanes: WEFT_UCX_LANES for the server; 0 as the environment says */
    int      checksums; /* --checksums on: the registry keeps them, the consumer checks (WEFT_VERIFY) */
    uint64_t iters, warmup;
    uint64_t rounds;   /* of each row */
    uint64_t version_bytes; /* a size case's versions: this many bytes of its size's tensors */
    /* Hidden: the processes this command runs itself as. */
    const char *role, *listen, *connect, *token, *registry;
    uint64_t    case_bytes; /* 0: the expert version */
    uint64_t    tensors;    /* of case_bytes each */
} ucx_options_t;

static int ucx_usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf ucx [options]\n"
            "  Put bandwidth of the ucx transport (publish -> every byte at a remote\n"
            "  consumer -> ack), beside ucx_perftest -t ucp_put_bw at the same size over\n"
            "  the same UCX transport.\n"
            "  --transport T        tcp-netns (two network namespaces, a veth pair;\n"
            "                       needs root), shm (this host), tcp-lo (TCP over this\n"
            "                       host's loopback) or all (tcp-netns and shm; default)\n"
            "  --sizes LIST         put sizes, comma-separated, K/M/G suffixes (default\n"
            "                       65536,1048576,16777216,67108864): versions of\n"
            "                       tensors of that size, each its own put\n"
            "  --version-bytes B    a size's versions hold B / size tensors, at least\n"
            "                       one (default 16M; 0: one tensor a version)\n"
            "  --expert-version     also a whole FP8 expert version of one Qwen3-30B-A3B\n"
            "                       layer, 1.2 GB (default on; ~5 GB of host memory)\n"
            "  --no-expert-version  skip it\n"
            "  --iterations N       timed versions (default 20)\n"
            "  --warmup N           untimed versions first (default 3)\n"
            "  --rounds N           each row measured N times, weft then ucx_perftest\n"
            "                       each time; the median round's ratio is reported\n"
            "                       with the least and greatest (default 3, at most %d)\n"
            "  --memory M           host (default) or cuda: weft moves a GPU registry on\n"
            "                       GPU 0 into device views on GPU 1 (GPU 0 with one\n"
            "                       GPU), staged through pinned host memory where UCX\n"
            "                       has no GPUDirect RDMA; ucx_perftest still moves\n"
            "                       host memory, the network's own figure\n"
            "  --err-mode M         WEFT_UCX_ERR_MODE for weft's server and consumer:\n"
            "                       peer (the default: endpoints report peer failures;\n"
            "                       UCX then emulates puts over TCP in software, and\n"
            "                       ucx_perftest also runs with -e, the same) or none\n"
            "  --recv-memory R      the consumer's host views: ucx (default: in memory\n"
            "                       from weft_ucx_memory_alloc, which UCX allocates\n"
            "                       and maps, as ucx_perftest's is) or user (malloc'd,\n"
            "                       as an engine's own buffers: UCX 1.13 emulates puts\n"
            "                       into it over shared memory)\n"
            "  --lanes N            WEFT_UCX_LANES for weft's server: threads with UCX\n"
            "                       workers of their own that a version's puts are\n"
            "                       spread over (1..16; default: the environment's,\n"
            "                       else auto, half the CPUs, 1 to 8)\n"
            "  --checksums on|off   verified versions: the registry keeps a checksum of\n"
            "                       each tensor (summed at publish), and the consumer\n"
            "                       checks its views against them before each ack\n"
            "                       (WEFT_VERIFY; default off)\n"
            "  --json               one JSON object per row instead of the table\n"
            "Target: weft >= %.1f x ucx_perftest. Exits 0 when every weft transfer\n"
            "succeeded, %d when libweft has no UCX.\n",
            MAX_ROUNDS, TARGET, EXIT_SKIP);
    return out == stdout ? 0 : 2;
}

static const perf_arg_word_t transport_words[] = {
    {"tcp-netns", TR_TCP_NETNS}, {"shm", TR_SHM}, {"tcp-lo", TR_TCP_LO},
    {"all", TR_TCP_NETNS | TR_SHM}, {NULL, 0}};
static const perf_arg_word_t err_mode_words[] = {{"peer", 0}, {"none", 1}, {NULL, 0}};
static const perf_arg_word_t memory_words[] = {{"host", 0}, {"cuda", 1}, {NULL, 0}};
static const perf_arg_word_t recv_memory_words[] = {{"ucx", 0}, {"user", 1}, {NULL, 0}};
static const perf_arg_word_t on_off_words[] = {{"off", 0}, {"on", 1}, {NULL, 0}};

static int parse_sizes(const char *text, ucx_options_t *o)
{
    char *copy = strdup(text), *save = NULL;
    int   bad = copy == NULL;

    o->nsizes = 0;
    for (char *tok = bad ? NULL : strtok_r(copy, ",", &save); tok != NULL && !bad;
         tok = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == MAX_SIZES) {
            fprintf(stderr, "weft-perf: --sizes: at most %d sizes\n", MAX_SIZES);
            bad = 1;
        } else {
            bad = perf_arg_size("--sizes", tok, 1, MAX_SIZE, &o->sizes[o->nsizes++]) != 0;
        }
    }
    free(copy);
    return bad ? -1 : 0;
}

/* --case: a size, or "expert". */
static int parse_case(const char *text, uint64_t *bytes)
{
    if (strcmp(text, "expert") == 0) {
        *bytes = 0;
        return 0;
    }
    return perf_arg_size("--case", text, 1, MAX_SIZE, bytes);
}

/* 0: run; 1: --help was printed; 2: a usage error. */
static int parse_options(int argc, char **argv, ucx_options_t *o)
{
    static const struct option longopts[] = {
        {"transport", required_argument, NULL, 't'}, {"sizes", required_argument, NULL, 's'},
        {"expert-version", no_argument, NULL, 'e'},  {"no-expert-version", no_argument, NULL, 'E'},
        {"iterations", required_argument, NULL, 'i'}, {"warmup", required_argument, NULL, 'w'},
        {"json", no_argument, NULL, 'j'},            {"help", no_argument, NULL, 'h'},
        {"err-mode", required_argument, NULL, 'm'},  {"memory", required_argument, NULL, 'M'},
        {"role", required_argument, NULL, 'R'},      {"case", required_argument, NULL, 'C'},
        {"listen", required_argument, NULL, 'L'},    {"connect", required_argument, NULL, 'c'},
        {"token", required_argument, NULL, 'T'},     {"registry", required_argument, NULL, 'r'},
        {"version-bytes", required_argument, NULL, 'V'}, {"tensors", required_argument, NULL, 'K'},
        {"lanes", required_argument, NULL, 'N'},     {"recv-memory", required_argument, NULL, 'U'},
        {"rounds", required_argument, NULL, 'O'},    {"checksums", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0},
    };
    int opt;

    *o = (ucx_options_t){.transports = TR_TCP_NETNS | TR_SHM, .nsizes = 4,
                         .sizes = {65536, 1048576, 16777216, 67108864}, .expert = 1, .iters = 20,
                         .warmup = 3, .rounds = 3, .err_none = -1, .version_bytes = VERSION_BYTES, .tensors = 1};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;

        switch (opt) {
        case 't': bad = perf_arg_word("--transport", optarg, transport_words, &o->transports); break;
        case 's': bad = parse_sizes(optarg, o); break;
        case 'e': o->expert = 1; break;
        case 'E': o->expert = 0; break;
        case 'i': bad = perf_arg_u64("--iterations", optarg, 1, MAX_ITERS, &o->iters); break;
        case 'w': bad = perf_arg_u64("--warmup", optarg, 0, MAX_ITERS, &o->warmup); break;
        case 'O': bad = perf_arg_u64("--rounds", optarg, 1, MAX_ROUNDS, &o->rounds); break;
        case 'j': o->json = 1; break;
        case 'm': bad = perf_arg_word("--err-mode", optarg, err_mode_words, &o->err_none); break;
        case 'M': bad = perf_arg_word("--memory", optarg, memory_words, &o->gpu); break;
        case 'h': return ucx_usage(stdout) + 1;
        case 'R': o->role = optarg; break;
        case 'C': bad = parse_case(optarg, &o->case_bytes); break;
        case 'L': o->listen = optarg; break;
        case 'c': o->connect = optarg; break;
        case 'T': o->token = optarg; break;
        case 'r': o->registry = optarg; break;
        case 'V': bad = perf_arg_size("--version-bytes", optarg, 0, MAX_SIZE, &o->version_bytes); break;
        case 'K': bad = perf_arg_u64("--tensors", optarg, 1, MAX_TENSORS, &o->tensors); break;
        case 'N': bad = perf_arg_u64("--lanes", optarg, 1, 16, &o->lanes); break;
        case 'U': bad = perf_arg_word("--recv-memory", optarg, recv_memory_words, &o->recv_user); break;
        case 'S': bad = perf_arg_word("--checksums", optarg, on_off_words, &o->checksums); break;
        default: return ucx_usage(stderr);
        }
        if (bad) {
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-perf ucx: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

/* ----------------------------------------------------------- workloads */

/* One kind of expert tensor. Must match cmd_ipc.c's Qwen3 layer. */
typedef struct ucx_kind {
    const char        *proj, *suffix;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint64_t           rows, cols;
} ucx_kind_t;

static const ucx_kind_t expert_kinds[] = {
    {"gate_up_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 1536, 2048},
    {"gate_up_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, 2048, 1536},
    {"gate_up_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 12, 16},
    {"down_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2048, 768},
    {"down_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, 768, 2048},
    {"down_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 16, 6},
};

#define KINDS (sizeof(expert_kinds) / sizeof(expert_kinds[0]))

typedef struct ucx_tensor {
    char               name[WEFT_TENSOR_NAME_MAX];
    int32_t            expert;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint32_t           ndim;
    uint64_t           shape[2];
    uint64_t           bytes, offset; /* offset: in the consumer's buffer */
} ucx_tensor_t;

typedef struct ucx_workload {
    ucx_tensor_t *t;
    uint32_t      count;
    uint64_t      bytes;
} ucx_workload_t;

static void add_tensor(ucx_workload_t *w, int32_t expert, weft_tensor_role_t role, weft_dtype_t dtype,
                       uint32_t ndim, uint64_t rows, uint64_t cols)
{
    ucx_tensor_t *t = &w->t[w->count++];

    t->expert = expert;
    t->role = role;
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->bytes = rows * (ndim == 2 ? cols : 1) * weft_dtype_size(dtype);
    t->offset = w->bytes;
    w->bytes += t->bytes;
}

/* A size case's tensors a version: version_bytes of them, at least one. */
static uint64_t case_tensors(uint64_t case_bytes, uint64_t version_bytes)
{
    uint64_t k = case_bytes > 0 ? version_bytes / case_bytes : 1;

    return k < 1 ? 1 : k > MAX_TENSORS ? MAX_TENSORS : k;
}

/*
 * case_bytes > 0: `tensors` FP8 tensors of that many bytes, which the
 * consumer holds in the reverse order: the registry's arena has them side
 * by side, the views do not, so each is a put of its own. 0: the expert
 * version, declared kind by kind, each kind's experts side by side, so
 * that the consumer's buffer holds one fused tensor per kind.
 */
static int workload_make(uint64_t case_bytes, uint64_t tensors, ucx_workload_t *w)
{
    memset(w, 0, sizeof(*w));
    w->t = calloc(case_bytes > 0 ? tensors : KINDS * EXPERTS, sizeof(*w->t));
    if (w->t == NULL) {
        fprintf(stderr, "weft-perf ucx: out of memory\n");
        return -1;
    }
    if (case_bytes > 0) {
        for (uint64_t i = 0; i < tensors; i++) {
            add_tensor(w, -1, WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 1, case_bytes, 0);
            w->t[i].offset = (tensors - 1 - i) * case_bytes;
            snprintf(w->t[i].name, sizeof(w->t[i].name), "weft_perf.ucx.tensor_%llu.%llu",
                     (unsigned long long)case_bytes, (unsigned long long)i);
        }
        return 0;
    }
    for (uint32_t k = 0; k < KINDS; k++) {
        const ucx_kind_t *kd = &expert_kinds[k];

        for (int32_t e = 0; e < EXPERTS; e++) {
            add_tensor(w, e, kd->role, kd->dtype, 2, kd->rows, kd->cols);
            snprintf(w->t[w->count - 1].name, sizeof(w->t[0].name), "model.layers.0.mlp.experts.%d.%s.%s", (int)e,
                     kd->proj, kd->suffix);
        }
    }
    return 0;
}

static int weft_ok(weft_status_t status, const char *what)
{
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf ucx: %s: %s\n", what, weft_status_string(status));
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------ the server role */

static int create_registry(const char *name, const ucx_workload_t *w, int gpu, int checksums, weft_registry_h *out)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_PARAM_MEMORY | WEFT_REGISTRY_PARAM_MAX_TENSORS |
                                                   WEFT_REGISTRY_PARAM_CHECKSUMS,
                                     .memory = gpu ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST, .device = 0,
                                     .max_tensors = w->count, .checksums = (uint32_t)checksums};
    weft_registry_h        reg = NULL;
    weft_status_t          status;

    (void)weft_registry_unlink(name);
    status = weft_registry_create(name, &params, &reg);
    for (uint32_t i = 0; i < w->count && status == WEFT_OK; i++) {
        const ucx_tensor_t *t = &w->t[i];
        weft_tensor_desc_t  d = {.name = t->name, .layer = t->expert >= 0 ? 0 : -1, .expert = t->expert,
                                 .role = t->role, .dtype = t->dtype, .ndim = t->ndim,
                                 .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0}};

        status = weft_registry_declare(reg, &d, NULL);
    }
    if (status == WEFT_OK) {
        status = weft_registry_seal(reg);
    }
    if (!weft_ok(status, "creating the registry")) {
        (void)weft_registry_close(reg);
        (void)weft_registry_unlink(name);
        return -1;
    }
    *out = reg;
    return 0;
}

/* Waits for the consumer's handshake: versions published before it are
 * not sent to it. */
static int wait_for_consumer(weft_server_h server)
{
    uint64_t deadline = perf_now_ns() + (uint64_t)READY_MS * 1000000u;

    for (;;) {
        weft_server_stats_t st;

        if (!weft_ok(weft_server_get_stats(server, &st), "weft_server_get_stats")) {
            return -1;
        }
        if (st.consumers >= 1) {
            return 0;
        }
        if (perf_now_ns() > deadline) {
            fprintf(stderr, "weft-perf ucx: no consumer connected within %u ms\n", READY_MS);
            return -1;
        }
        perf_sleep_us(1000);
    }
}

/* Writes version v (not timed); a GPU registry's tensors through `host`,
 * as large as the largest tensor (NULL for a host registry). */
static int fill_version(weft_registry_h reg, const ucx_workload_t *w, uint64_t v, uint8_t *host)
{
    if (!weft_ok(weft_registry_write_begin(reg, WAIT_US, NULL), "weft_registry_write_begin")) {
        return -1;
    }
    for (uint32_t i = 0; i < w->count; i++) {
        void *data = NULL;

        if (!weft_ok(weft_registry_write_tensor(reg, i, &data), "weft_registry_write_tensor")) {
            return -1;
        }
        if (host == NULL) {
            payload_fill(data, w->t[i].bytes, v, i);
        } else {
            payload_fill(host, w->t[i].bytes, v, i);
            if (perf_gpu_upload(data, host, w->t[i].bytes) != 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* The largest tensor's bytes. */
static uint64_t largest_tensor(const ucx_workload_t *w)
{
    uint64_t most = 0;

    for (uint32_t i = 0; i < w->count; i++) {
        most = w->t[i].bytes > most ? w->t[i].bytes : most;
    }
    return most;
}

/* Publishes version v; *ns gets the time until the consumer acked it. */
static int send_version(weft_registry_h reg, weft_server_h server, uint64_t v, uint64_t *ns)
{
    weft_server_stats_t st;
    uint32_t            lagging = 0;
    uint64_t            t0 = perf_now_ns(), t1;

    if (!weft_ok(weft_registry_publish(reg, v, NULL), "weft_registry_publish") ||
        !weft_ok(weft_registry_wait_consumers(reg, v, WAIT_US, &lagging), "weft_registry_wait_consumers")) {
        return -1;
    }
    t1 = perf_now_ns();
    /* A dropped consumer leaves the table and wait_consumers returns:
     * the server's stats tell. (One that got the last version may have
     * left already, on purpose: that is not a drop.) */
    if (!weft_ok(weft_server_get_stats(server, &st), "weft_server_get_stats")) {
        return -1;
    }
    if (lagging != 0 || st.dropped != 0) {
        fprintf(stderr, "weft-perf ucx: version %llu: the consumer was dropped\n", (unsigned long long)v);
        return -1;
    }
    *ns = t1 - t0;
    return 0;
}

static int serve_versions(const ucx_options_t *o, const ucx_workload_t *w, weft_registry_h reg,
                          weft_server_h server)
{
    const uint64_t versions = o->warmup + o->iters;
    uint64_t      *ns = calloc(o->iters, sizeof(*ns)), n = 0;
    uint8_t       *host = o->gpu ? malloc(largest_tensor(w)) : NULL;
    perf_latency_t lat;
    int            rc = -1;

    if (ns == NULL || (o->gpu && host == NULL)) {
        free(ns);
        free(host);
        return -1;
    }
    for (uint64_t v = 1; v <= versions; v++) {
        uint64_t t;

        if (fill_version(reg, w, v, host) != 0 || send_version(reg, server, v, &t) != 0) {
            goto out;
        }
        if (v > o->warmup) {
            ns[n++] = t;
        }
    }
    perf_latency_summarize(ns, n, &lat);
    printf("result iterations %llu median_ns %llu min_ns %llu max_ns %llu bytes %llu\n", (unsigned long long)n,
           (unsigned long long)perf_percentile(ns, n, 500), (unsigned long long)ns[0],
           (unsigned long long)ns[n - 1], (unsigned long long)w->bytes);
    fflush(stdout);
    rc = 0;
out:
    free(ns);
    free(host);
    return rc;
}

static int server_role(const ucx_options_t *o, const ucx_workload_t *w)
{
    char                 listen[128];
    weft_server_params_t params = {.field_mask = WEFT_SERVER_PARAM_TIMEOUT, .transport = WEFT_TRANSPORT_UCX,
                                   .listen = listen, .token = o->token, .timeout_us = STEP_US};
    weft_registry_h      reg = NULL;
    weft_server_h        server = NULL;
    uint16_t             port = 0;
    int                  rc = 1;

    if (o->listen == NULL || o->token == NULL || o->registry == NULL) {
        fprintf(stderr, "weft-perf ucx: --role server needs --listen, --token and --registry\n");
        return 2;
    }
    snprintf(listen, sizeof(listen), "%s:0", o->listen);
    if (create_registry(o->registry, w, o->gpu, o->checksums, &reg) != 0) {
        return 1;
    }
    if (weft_ok(weft_server_create(reg, &params, &server), "weft_server_create") &&
        weft_ok(weft_server_port(server, &port), "weft_server_port")) {
        printf("port %u\n", (unsigned)port);
        fflush(stdout);
        if (wait_for_consumer(server) == 0 && serve_versions(o, w, reg, server) == 0) {
            rc = 0;
        }
    }
    if (server != NULL) {
        (void)weft_ok(weft_server_destroy(server), "weft_server_destroy");
    }
    (void)weft_registry_close(reg);
    (void)weft_registry_unlink(o->registry);
    return rc;
}

/* ---------------------------------------------------- the consumer role */

static void build_views(const ucx_workload_t *w, uint8_t *buf, int gpu, weft_recv_view_t *views)
{
    for (uint32_t i = 0; i < w->count; i++) {
        const ucx_tensor_t *t = &w->t[i];

        views[i] = (weft_recv_view_t){.name = t->name, .role = t->role, .dtype = t->dtype, .ndim = t->ndim,
                                      .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0},
                                      .data = buf + t->offset};
        if (gpu) {
            views[i].field_mask |= WEFT_RECV_VIEW_FIELD_MEMORY;
            views[i].memory = WEFT_MEMORY_CUDA;
        }
    }
}

/* Wrong bytes of the last version in the views (device views through
 * `host`, as large as the largest tensor); UINT64_MAX when a copy failed. */
static uint64_t check_views(const ucx_workload_t *w, const uint8_t *buf, uint8_t *host, uint64_t v)
{
    uint64_t wrong = 0;

    for (uint32_t i = 0; i < w->count; i++) {
        const uint8_t *at = buf + w->t[i].offset;

        if (host != NULL) {
            if (perf_gpu_download(host, at, w->t[i].bytes) != 0) {
                return UINT64_MAX;
            }
            at = host;
        }
        wrong += payload_count_wrong(at, w->t[i].bytes, v, i);
    }
    return wrong;
}

/* Receives every version; returns the last one, 0 on failure. */
static uint64_t receive_versions(weft_remote_h remote, uint64_t versions)
{
    uint64_t last = 0;

    while (last < versions) {
        uint64_t      got = 0;
        weft_status_t status = weft_remote_receive(remote, last, WAIT_US, &got);

        if (!weft_ok(status, "weft_remote_receive")) {
            return 0;
        }
        last = got;
    }
    return last;
}

static int consumer_role(const ucx_options_t *o, const ucx_workload_t *w)
{
    weft_remote_params_t params = {.field_mask = WEFT_REMOTE_PARAM_TIMEOUT, .transport = WEFT_TRANSPORT_UCX,
                                   .server = o->connect, .token = o->token, .name = "weft-perf-ucx",
                                   .timeout_us = (uint64_t)READY_MS * 1000};
    uint8_t             *buf = NULL, *host = NULL; /* the views' memory; GPU: where they are checked */
    weft_ucx_memory_h    memory = NULL; /* buf's, for host views in UCX's memory */
    weft_recv_view_t    *views = calloc(w->count, sizeof(*views));
    weft_remote_h        remote = NULL;
    uint64_t             last = 0, wrong = 0;
    int                  rc = 1;

    if (o->connect == NULL || o->token == NULL) {
        fprintf(stderr, "weft-perf ucx: --role consumer needs --connect and --token\n");
        rc = 2;
        goto out;
    }
    if (o->gpu) {
        /* The other GPU than the registry's where there are two. */
        if (perf_gpu_alloc(perf_gpu_count() > 1 ? 1 : 0, w->bytes, (void **)&buf) != 0) {
            goto out;
        }
        host = malloc(largest_tensor(w));
    } else if (!o->recv_user) {
        if (!weft_ok(weft_ucx_memory_alloc(w->bytes, &memory, (void **)&buf), "weft_ucx_memory_alloc")) {
            goto out; /* said why */
        }
        memset(buf, 0, w->bytes); /* every page faulted in before the first put */
        params.field_mask |= WEFT_REMOTE_PARAM_MEMORY;
        params.memory = memory;
    } else if ((buf = malloc(w->bytes)) != NULL) {
        memset(buf, 0, w->bytes);
    }
    if (buf == NULL || views == NULL || (o->gpu && host == NULL)) {
        fprintf(stderr, "weft-perf ucx: out of memory (%llu bytes)\n", (unsigned long long)w->bytes);
        goto out;
    }
    build_views(w, buf, o->gpu, views);
    if (!weft_ok(weft_remote_connect(&params, views, w->count, &remote), "weft_remote_connect")) {
        goto out;
    }
    last = receive_versions(remote, o->warmup + o->iters);
    if (last != 0) {
        /* Nothing is sent after the last version: its bytes stay put. */
        wrong = check_views(w, buf, host, last);
        printf("received %llu wrong %llu\n", (unsigned long long)last, (unsigned long long)wrong);
        fflush(stdout);
        rc = wrong == 0 ? 0 : 4;
    }
out:
    (void)weft_remote_close(remote);
    free(views);
    if (o->gpu) {
        perf_gpu_free(buf);
    } else if (memory != NULL) {
        (void)weft_ok(weft_ucx_memory_free(memory), "weft_ucx_memory_free");
    } else if (o->recv_user) {
        free(buf);
    }
    free(host);
    return rc;
}

static int run_role(const ucx_options_t *o)
{
    ucx_workload_t w;
    int            rc;

    if (workload_make(o->case_bytes, o->tensors, &w) != 0) {
        return 1;
    }
    if (strcmp(o->role, "server") == 0) {
        rc = server_role(o, &w);
    } else if (strcmp(o->role, "consumer") == 0) {
        rc = consumer_role(o, &w);
    } else {
        fprintf(stderr, "weft-perf ucx: --role '%s': expected server or consumer\n", o->role);
        rc = 2;
    }
    free(w.t);
    return rc;
}

/* ------------------------------------------------------------ children */

/* Where a process runs: a namespace (NULL: this one), UCX's settings. */
typedef struct ucx_side {
    const char *ns, *dev, *ip;
} ucx_side_t;

typedef struct ucx_transport {
    const char *name, *tls;
    /* [0]: the side that puts (weft server, ucx_perftest client);
     * [1]: the side that receives. */
    ucx_side_t side[2];
} ucx_transport_t;

typedef struct ucx_ctx {
    const ucx_options_t *o;
    perf_runner_t        runner;
    char                 self[4096], perftest[4096], token[64], date[32];
    int                  perftest_mpi; /* built with MPI: run it with -P 0 */
    int                  cpus;         /* this process may run on: the copy ceiling's threads */
    char                 ns[2][32]; /* the namespaces made; "" when none */
    int                  number;    /* of the next registry */
} ucx_ctx_t;

static void child_env(const ucx_transport_t *tr, const ucx_side_t *side)
{
    if (tr == NULL) {
        return;
    }
    setenv("UCX_TLS", tr->tls, 1);
    setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
    if (side->dev != NULL) {
        setenv("UCX_NET_DEVICES", side->dev, 1);
    } else {
        unsetenv("UCX_NET_DEVICES");
    }
}

/* In the child: runs argv, under `ip netns exec` when ns is set. */
static void child_exec(const char *ns, char *const argv[])
{
    char *wrapped[64] = {"ip", "netns", "exec", (char *)ns};
    int   n = 4;

    if (ns == NULL) {
        execvp(argv[0], argv);
    } else {
        for (int i = 0; argv[i] != NULL && n < 63; i++) {
            wrapped[n++] = argv[i];
        }
        wrapped[n] = NULL;
        execvp("ip", wrapped);
    }
    fprintf(stderr, "weft-perf ucx: cannot run %s: %s\n", ns == NULL ? argv[0] : "ip", strerror(errno));
}

/* Where a child runs: side `side` of tr. */
typedef struct ucx_where {
    const ucx_transport_t *tr;
    int                    side;
} ucx_where_t;

/* In the child: UCX's settings of its side, then argv in its namespace. */
static void side_exec(const void *arg, char *const argv[])
{
    const ucx_where_t *where = arg;

    child_env(where->tr, &where->tr->side[where->side]);
    child_exec(where->tr->side[where->side].ns, argv);
}

/* Starts argv on side `side` of tr (tr NULL: here, environment as is). */
static int proc_start(ucx_ctx_t *ctx, perf_run_t *p, const char *what, const ucx_transport_t *tr, int side,
                      char *const argv[], int merge_stderr)
{
    const ucx_where_t where = {.tr = tr, .side = side};

    return perf_run_start(&ctx->runner, p, what, argv, merge_stderr, tr != NULL ? side_exec : NULL, &where);
}

static void add_note(char *note, size_t size, const char *fmt, ...)
{
    size_t  used = strlen(note);
    va_list ap;

    if (used + 2 >= size) {
        return;
    }
    if (used > 0) {
        snprintf(note + used, size - used, "; ");
        used += 2;
    }
    va_start(ap, fmt);
    vsnprintf(note + used, size - used, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------ ip and netns */

/* Runs `ip ARGS` (ARGS split at spaces) with a 10 s limit; out (may be
 * NULL) gets its output. 0 when it exited with 0. */
static int run_ip(ucx_ctx_t *ctx, char *out, size_t size, const char *fmt, ...)
{
    char       cmd[512], *argv[24] = {"ip"}, *save = NULL;
    int        argc = 1, rc;
    va_list    ap;
    perf_run_t p;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    for (char *tok = strtok_r(cmd, " ", &save); tok != NULL && argc < 23; tok = strtok_r(NULL, " ", &save)) {
        argv[argc++] = tok;
    }
    argv[argc] = NULL;
    if (proc_start(ctx, &p, "ip", NULL, 0, argv, 1) != 0) {
        return -1;
    }
    rc = perf_run_wait(&ctx->runner, &p, 1, NULL, perf_deadline_in_s(10), 1);
    if (out != NULL && size > 0) {
        size_t n = p.len < size - 1 ? p.len : size - 1;

        memcpy(out, p.out, n);
        out[n] = '\0';
    }
    return rc;
}

/* UCX takes only interfaces that are running: waits for the carrier. */
static int wait_carrier(ucx_ctx_t *ctx, const char *ns, const char *dev)
{
    char out[2048];

    for (int i = 0; i < 100 && !perf_run_interrupted(&ctx->runner); i++) {
        if (run_ip(ctx, out, sizeof(out), "-n %s link show %s", ns, dev) == 0 && strstr(out, "LOWER_UP") != NULL) {
            return 0;
        }
        perf_sleep_us(50000);
    }
    return -1;
}

static void netns_teardown(ucx_ctx_t *ctx)
{
    ctx->runner.cleaning = 1;
    for (int i = 0; i < 2; i++) {
        if (ctx->ns[i][0] != '\0' && run_ip(ctx, NULL, 0, "netns del %s", ctx->ns[i]) != 0) {
            fprintf(stderr, "weft-perf ucx: could not delete network namespace %s\n", ctx->ns[i]);
        }
        ctx->ns[i][0] = '\0';
    }
    ctx->runner.cleaning = 0;
}

/* One command of the set-up; on failure, why gets its output. */
#define NETNS_STEP(...)                                                                                              \
    do {                                                                                                           \
        if (run_ip(ctx, out, sizeof(out), __VA_ARGS__) != 0) {                                                     \
            snprintf(why, size, "ip failed: %.200s", out);                                                         \
            return -1;                                                                                             \
        }                                                                                                          \
    } while (0)

/*
 * Two namespaces joined by a veth pair: A (the side that puts) 10.202.0.1
 * on weftpa0, B 10.202.0.2 on weftpb0. Fills tr; on failure why says why
 * and the caller tears down what was made.
 */
static int netns_setup(ucx_ctx_t *ctx, ucx_transport_t *tr, char *why, size_t size)
{
    const char *a = ctx->ns[0], *b = ctx->ns[1];
    char        out[1024];

    if (geteuid() != 0) {
        snprintf(why, size, "needs root (network namespaces)");
        return -1;
    }
    snprintf(ctx->ns[0], sizeof(ctx->ns[0]), "weftPA%d", (int)getpid());
    if (run_ip(ctx, out, sizeof(out), "netns add %s", a) != 0) {
        ctx->ns[0][0] = '\0';
        snprintf(why, size, "cannot create network namespaces (is ip installed?): %.200s", out);
        return -1;
    }
    snprintf(ctx->ns[1], sizeof(ctx->ns[1]), "weftPB%d", (int)getpid());
    if (run_ip(ctx, out, sizeof(out), "netns add %s", b) != 0) {
        ctx->ns[1][0] = '\0';
        snprintf(why, size, "cannot create network namespaces: %.200s", out);
        return -1;
    }
    NETNS_STEP("link add weftpa0 netns %s type veth peer name weftpb0 netns %s", a, b);
    NETNS_STEP("-n %s addr add 10.202.0.1/24 dev weftpa0", a);
    NETNS_STEP("-n %s addr add 10.202.0.2/24 dev weftpb0", b);
    NETNS_STEP("-n %s link set lo up", a);
    NETNS_STEP("-n %s link set lo up", b);
    NETNS_STEP("-n %s link set weftpa0 up", a);
    NETNS_STEP("-n %s link set weftpb0 up", b);
    if (wait_carrier(ctx, a, "weftpa0") != 0 || wait_carrier(ctx, b, "weftpb0") != 0) {
        snprintf(why, size, "the veth pair has no carrier");
        return -1;
    }
    *tr = (ucx_transport_t){.name = "tcp-netns", .tls = "tcp",
                            .side = {{.ns = a, .dev = "weftpa0", .ip = "10.202.0.1"},
                                     {.ns = b, .dev = "weftpb0", .ip = "10.202.0.2"}}};
    return 0;
}

/* ----------------------------------------------------------- the cases */

typedef struct ucx_case {
    char     name[32];
    uint64_t bytes;   /* of each tensor; 0: the expert version */
    uint64_t tensors; /* a size case's tensors a version (1 for the expert version) */
} ucx_case_t;

typedef struct ucx_row {
    const char *transport;
    ucx_case_t  c;
    uint64_t    bytes, tensors, iterations;
    double      weft_s, weft_min_s, weft_max_s; /* NaN: not measured */
    double      perftest_gbps;
    uint64_t    perftest_bytes, perftest_iters, perftest_warmup;
    double      perftest_same_gbps; /* with weft's endpoints' error handling; NaN: no figure */
    double      ceiling_s; /* shm: the host's copy ceiling for the version's bytes; NaN: none */
    char        perftest_same[80];  /* which: "-e", or why it is the first run */
    int         ok;    /* every version acked, the last one's bytes right */
    int         clean; /* and both weft processes exited with 0 */
    char        note[1024];
    /* A row of rounds (measure_row): the figures above are the rounds'
     * medians; weft's figure over each peer's, each round's own. */
    uint64_t      rounds;
    perf_spread_t ratio, ratio_same, ratio_ceiling;
} ucx_row_t;

static void case_text(const ucx_case_t *c, char *buf, size_t size)
{
    if (c->bytes == 0) {
        snprintf(buf, size, "expert");
    } else {
        snprintf(buf, size, "%llu", (unsigned long long)c->bytes);
    }
}

/* A generous bound on a run moving `bytes` `versions` times. */
static double time_limit_s(uint64_t bytes, uint64_t versions)
{
    return 120.0 + (double)versions * (2.0 + (double)bytes / SLOW_BYTES_S);
}

static void parse_server(const perf_run_t *p, uint64_t iters, ucx_row_t *r)
{
    const char        *s = perf_run_line(p, "result ");
    unsigned long long n, med, lo, hi, bytes;

    if (s != NULL && sscanf(s, "iterations %llu median_ns %llu min_ns %llu max_ns %llu bytes %llu", &n, &med, &lo,
                            &hi, &bytes) == 5) {
        r->iterations = n;
        r->weft_s = (double)med / 1e9;
        r->weft_min_s = (double)lo / 1e9;
        r->weft_max_s = (double)hi / 1e9;
        if (n != iters) {
            add_note(r->note, sizeof(r->note), "the server timed %llu versions, not %llu", n,
                     (unsigned long long)iters);
            r->ok = 0;
        }
        if (bytes != r->bytes) {
            add_note(r->note, sizeof(r->note), "the server sent %llu bytes a version, not %llu", bytes,
                     (unsigned long long)r->bytes);
            r->ok = 0;
        }
    } else {
        r->ok = 0;
    }
}

static void parse_consumer(const perf_run_t *p, uint64_t versions, ucx_row_t *r)
{
    const char        *s = perf_run_line(p, "received ");
    unsigned long long last, wrong;

    if (s == NULL || sscanf(s, "%llu wrong %llu", &last, &wrong) != 2) {
        r->ok = 0;
        return;
    }
    if (last != versions || wrong != 0) {
        add_note(r->note, sizeof(r->note), "the consumer got version %llu of %llu with %llu wrong bytes", last,
                 (unsigned long long)versions, wrong);
        r->ok = 0;
    }
}

/* Notes why each failed proc failed, with its last line. */
static void note_failures(const perf_run_t *procs, int n, char *note, size_t size)
{
    for (int i = 0; i < n; i++) {
        char how[160], last[200];

        if (!perf_run_failed(&procs[i]) && (procs[i].exited || procs[i].pid == 0)) {
            continue;
        }
        perf_run_describe(&procs[i], how, sizeof(how));
        last[0] = '\0';
        if (procs[i].merged) {
            perf_run_last_line(&procs[i], last, sizeof(last));
        }
        add_note(note, size, "%s%s%s", how, last[0] ? ": " : "", last);
    }
}

/* weft: a server role on side 0, a consumer role on side 1. */
static void run_weft(ucx_ctx_t *ctx, const ucx_transport_t *tr, ucx_row_t *r)
{
    const ucx_options_t *o = ctx->o;
    const uint64_t       versions = o->warmup + o->iters;
    char                 reg[WEFT_REGISTRY_NAME_MAX], cs[32], it[32], wu[32], ks[32], addr[128];
    perf_run_t           p[2];
    const char          *port;

    memset(p, 0, sizeof(p));
    snprintf(reg, sizeof(reg), "weft-perf-ucx-%d-%d", (int)getpid(), ctx->number++);
    case_text(&r->c, cs, sizeof(cs));
    snprintf(it, sizeof(it), "%llu", (unsigned long long)o->iters);
    snprintf(wu, sizeof(wu), "%llu", (unsigned long long)o->warmup);
    snprintf(ks, sizeof(ks), "%llu", (unsigned long long)r->c.tensors);
    {
        char *const argv[] = {ctx->self,     "ucx",      "--role",   "server",
                              "--case",      cs,         "--tensors", ks,
                              "--iterations", it,        "--warmup", wu,
                              "--listen",    (char *)tr->side[0].ip, "--token", ctx->token,
                              "--registry",  reg,        "--memory", o->gpu ? "cuda" : "host",
                              "--checksums", o->checksums ? "on" : "off", NULL};

        if (proc_start(ctx, &p[0], "weft server", tr, 0, argv, 0) != 0 ||
            perf_run_wait(&ctx->runner, p, 1, "port ", perf_deadline_in_s(READY_MS / 1000.0), 1) != 0) {
            goto out;
        }
    }
    port = perf_run_line(&p[0], "port ");
    snprintf(addr, sizeof(addr), "%s:%u", tr->side[0].ip, (unsigned)strtoul(port, NULL, 10));
    {
        char *const argv[] = {ctx->self,     "ucx",      "--role",   "consumer",
                              "--case",      cs,         "--tensors", ks,
                              "--iterations", it,        "--warmup", wu,
                              "--connect",   addr,       "--token",  ctx->token,
                              "--memory",    o->gpu ? "cuda" : "host",
                              "--recv-memory", o->recv_user ? "user" : "ucx", NULL};

        if (proc_start(ctx, &p[1], "weft consumer", tr, 1, argv, 0) != 0) {
            perf_run_kill_all(&ctx->runner, p, 2);
            goto out;
        }
    }
    /* A process that fails is left to end the other: the consumer of a
     * dead server gets a connection error; the server of a dead consumer
     * sees it dropped. The deadline is the backstop. */
    (void)perf_run_wait(&ctx->runner, p, 2, NULL, perf_deadline_in_s(time_limit_s(r->bytes, versions)), 0);
    r->ok = !perf_run_failed(&p[1]);
    parse_server(&p[0], o->iters, r);
    parse_consumer(&p[1], versions, r);
out:
    /* Every version acked and the last one right, but a process that
     * then failed (in weft_server_destroy, say) is not a clean exit. */
    r->clean = !perf_run_failed(&p[0]) && !perf_run_failed(&p[1]) && p[1].pid != 0;
    if (!r->clean) {
        note_failures(p, 2, r->note, sizeof(r->note));
    }
    if (!r->ok) {
        add_note(r->note, sizeof(r->note), "the weft transfer failed");
    }
    (void)weft_registry_unlink(reg); /* the server's, if it died */
}

/* ---------------------------------------------------------- ucx_perftest */

/* WEFT_UCX_ERR_MODE as weft's processes get it. */
static const char *err_mode(void)
{
    const char *mode = getenv("WEFT_UCX_ERR_MODE");

    return mode != NULL ? mode : "peer";
}

/* WEFT_UCX_LANES as weft's server gets it. */
static const char *lanes(void)
{
    const char *n = getenv("WEFT_UCX_LANES");

    return n != NULL ? n : "auto";
}

/* A TCP port free on this host now, for ucx_perftest's exchange. */
static unsigned free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t          len = sizeof(sa);
    int                fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unsigned           port = 13337; /* ucx_perftest's own default */

    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
        port = ntohs(sa.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

/* Whether process pid (in its own network namespace) listens on port. */
static int listening(pid_t pid, unsigned port)
{
    static const char *const tables[] = {"tcp", "tcp6"};

    for (size_t i = 0; i < 2; i++) {
        char  path[64], line[512];
        FILE *f;
        int   found = 0;

        snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, tables[i]);
        f = fopen(path, "r");
        while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
            unsigned lport, state;

            found = sscanf(line, " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x", &lport, &state) == 2 &&
                    lport == port && state == 0x0A; /* TCP_LISTEN */
        }
        if (f != NULL) {
            fclose(f);
        }
        if (found) {
            return 1;
        }
    }
    return 0;
}

/* Until the perftest server listens (or exits); 10 s at most. */
static void wait_listening(ucx_ctx_t *ctx, perf_run_t *p, unsigned port)
{
    uint64_t deadline = perf_deadline_in_s(10);

    while (!listening(p->pid, port) && !perf_run_done(p) && !perf_run_interrupted(&ctx->runner) &&
           perf_now_ns() < deadline) {
        perf_run_pump(&ctx->runner, p, 1, 10);
    }
}

/*
 * The client's put bandwidth from its "Final:" line: iterations, latency
 * (50th percentile, average, overall, usec), bandwidth (average, overall,
 * MB/s), message rate (average, overall). The overall bandwidth, over the
 * whole timed run, is taken. ucx_perftest's MB is 2^20 bytes (1 MiB of a
 * 1 MiB message in 42.976 us reads 23268.72 MB/s: 2^20 / 42.976e-6 /
 * 2^20), so GB/s (1e9) = MB/s × 1048576 / 1e9. NaN when absent.
 */
static double perftest_gbps(const perf_run_t *client)
{
    const char *s = perf_run_line(client, "Final:");
    double      f[6];

    if (s == NULL || sscanf(s, "%lf %lf %lf %lf %lf %lf", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5]) != 6 ||
        !(f[5] > 0)) {
        return NAN;
    }
    return f[5] * 1048576.0 / 1e9;
}

/* One ucx_perftest run: its size and counts, what it gave. */
typedef struct perftest_run {
    uint64_t bytes, iters, warmup;
    int      err_peer; /* -e: peer failure handling, as weft's endpoints */
    double   gbps;     /* NaN: none */
    int      own_fail; /* the client failed by itself (not killed) */
} perftest_run_t;

/*
 * ucx_perftest puts as many messages of the case's size as weft does: n
 * × puts, where weft's versions are puts tensors each. Its ucp_put_bw
 * over UCX 1.13's tcp can run at tens of MB/s: past PERFTEST_MAX_BYTES in
 * all, its counts are cut (noted).
 */
static void perftest_counts(const ucx_options_t *o, uint64_t bytes, uint64_t puts, perftest_run_t *run)
{
    const uint64_t iters = o->iters * puts, warmup = o->warmup * puts;

    run->bytes = bytes;
    run->iters = iters;
    run->warmup = warmup;
    if (bytes * (iters + warmup) > PERFTEST_MAX_BYTES) {
        uint64_t n = PERFTEST_MAX_BYTES / bytes;

        run->iters = n < 2 ? 2 : n < iters ? n : iters;
        run->warmup = warmup < 1 ? warmup : 1;
    }
}

/*
 * Whether ucx_perftest was built with MPI (its help offers "-P <0|1>
 * disable/enable MPI mode"). Such a build (Debian 13's 1.18) starts in MPI
 * mode and, run without mpirun, refuses ("exactly 2 processes in p2p
 * case"); older ones (Debian 12's 1.13) have no -P and would refuse it.
 */
static int perftest_has_mpi_mode(ucx_ctx_t *ctx)
{
    char *const argv[] = {ctx->perftest, "-h", NULL};
    perf_run_t  p;

    if (proc_start(ctx, &p, "ucx_perftest -h", NULL, 0, argv, 1) != 0) {
        return 0;
    }
    (void)perf_run_wait(&ctx->runner, &p, 1, NULL, perf_deadline_in_s(10), 1); /* -h's status does not matter */
    return strstr(p.out, "MPI mode") != NULL;
}

/* Runs ucx_perftest's server on side 1, then its client on side 0. */
static int perftest_start(ucx_ctx_t *ctx, const ucx_transport_t *tr, const perftest_run_t *run, perf_run_t p[2])
{
    const unsigned port = free_port();
    char           ps[16], sz[32], it[32], wu[32];
    /* The trailing "-P 0" only where perftest_mpi; a NULL ends argv before. */
    char *const    server[] = {ctx->perftest, "-p", ps, ctx->perftest_mpi ? "-P" : NULL, "0", NULL};
    /* The client's options end with "-e" and "-P 0" where they apply. */
    char          *client[16] = {ctx->perftest, (char *)tr->side[1].ip, "-p", ps, "-t", "ucp_put_bw", "-s", sz,
                                 "-n", it, "-w", wu};
    int            c = 12;

    if (run->err_peer) {
        client[c++] = "-e";
    }
    if (ctx->perftest_mpi) {
        client[c++] = "-P";
        client[c++] = "0";
    }
    client[c] = NULL;

    snprintf(ps, sizeof(ps), "%u", port);
    snprintf(sz, sizeof(sz), "%llu", (unsigned long long)run->bytes);
    snprintf(it, sizeof(it), "%llu", (unsigned long long)run->iters);
    snprintf(wu, sizeof(wu), "%llu", (unsigned long long)run->warmup);
    if (proc_start(ctx, &p[1], "ucx_perftest server", tr, 1, server, 1) != 0) {
        return -1;
    }
    wait_listening(ctx, &p[1], port);
    if (proc_start(ctx, &p[0], "ucx_perftest client", tr, 0, client, 1) != 0) {
        perf_run_kill_all(&ctx->runner, p, 2);
        return -1;
    }
    return 0;
}

/* One ucx_perftest run; run->gbps NaN (and a note) on failure. */
static void perftest_once(ucx_ctx_t *ctx, const ucx_transport_t *tr, perftest_run_t *run, char *note, size_t size)
{
    perf_run_t p[2]; /* the client, which puts, first */

    memset(p, 0, sizeof(p));
    run->gbps = NAN;
    run->own_fail = 0;
    if (perftest_start(ctx, tr, run, p) != 0) {
        return;
    }
    if (perf_run_wait(&ctx->runner, p, 2, NULL,
                      perf_deadline_in_s(time_limit_s(run->bytes, run->warmup + run->iters)), 1) == 0) {
        run->gbps = perftest_gbps(&p[0]);
    }
    if (isnan(run->gbps)) {
        note_failures(p, 2, note, size);
        if (!perf_run_failed(&p[0])) {
            add_note(note, size, "ucx_perftest at %llu bytes printed no Final line", (unsigned long long)run->bytes);
        }
        run->own_fail = p[0].exited && !p[0].killed;
    }
}

/*
 * ucx_perftest with the error handling of weft's endpoints (see the top):
 * -e where they handle peer failures, unless UCX cannot connect so (as
 * weft's connect then goes without, ucx_common.c).
 */
static void run_perftest_same(ucx_ctx_t *ctx, const ucx_transport_t *tr, const perftest_run_t *first, ucx_row_t *r)
{
    perftest_run_t same = *first;
    char           why[sizeof(r->note)] = "";

    r->perftest_same_gbps = first->gbps;
    if (strcmp(err_mode(), "peer") != 0) {
        snprintf(r->perftest_same, sizeof(r->perftest_same), "the first run (WEFT_UCX_ERR_MODE=none)");
        return;
    }
    same.err_peer = 1;
    perftest_once(ctx, tr, &same, why, sizeof(why));
    if (isnan(same.gbps) && strstr(why, "unreachable") != NULL) {
        snprintf(r->perftest_same, sizeof(r->perftest_same), "the first run (UCX cannot connect with -e here)");
        return;
    }
    r->perftest_same_gbps = same.gbps;
    snprintf(r->perftest_same, sizeof(r->perftest_same), "-e");
    if (why[0] != '\0') {
        add_note(r->note, sizeof(r->note), "ucx_perftest -e: %s", why);
    }
}

/*
 * ucx_perftest at the row's put size, as many puts as weft's. For the
 * expert version, one message of the whole version's bytes; should
 * ucx_perftest refuse it (fail on its own, not run out of time), smaller
 * ones, halving, noted. A failure is a note, not a failed row. Then
 * again set up as weft's puts, at the size that worked.
 */
static void run_perftest(ucx_ctx_t *ctx, const ucx_transport_t *tr, ucx_row_t *r)
{
    perftest_run_t run = {.gbps = NAN, .own_fail = 1};
    const uint64_t size = r->c.bytes != 0 ? r->c.bytes : r->bytes;
    const uint64_t puts = r->c.bytes != 0 ? r->c.tensors : 1;
    uint64_t       bytes = size;

    if (ctx->perftest[0] == '\0') {
        add_note(r->note, sizeof(r->note), "ucx_perftest: not found on PATH (Debian: ucx-utils)");
        return;
    }
    for (int i = 0; i < (r->c.bytes == 0 ? PERFTEST_TRYS : 1) && isnan(run.gbps) && run.own_fail &&
                    !perf_run_interrupted(&ctx->runner);
         i++, bytes /= 2) {
        perftest_counts(ctx->o, bytes, puts, &run);
        perftest_once(ctx, tr, &run, r->note, sizeof(r->note));
    }
    r->perftest_gbps = run.gbps;
    r->perftest_bytes = run.bytes;
    r->perftest_iters = run.iters;
    r->perftest_warmup = run.warmup;
    if (isnan(run.gbps)) {
        return;
    }
    if (!perf_run_interrupted(&ctx->runner)) {
        run_perftest_same(ctx, tr, &run, r);
    }
    if (run.bytes != size) {
        add_note(r->note, sizeof(r->note), "ucx_perftest measured at %llu-byte messages",
                 (unsigned long long)run.bytes);
    }
    if (run.iters != ctx->o->iters * puts || run.warmup != ctx->o->warmup * puts) {
        add_note(r->note, sizeof(r->note), "ucx_perftest ran -n %llu -w %llu (%llu GiB at most in all)",
                 (unsigned long long)run.iters, (unsigned long long)run.warmup,
                 (unsigned long long)(PERFTEST_MAX_BYTES >> 30));
    }
}

/* One round of a row: weft, ucx_perftest, the copy ceiling (shm). */
static void measure_round(ucx_ctx_t *ctx, const ucx_transport_t *tr, const ucx_case_t *c, ucx_row_t *r)
{
    ucx_workload_t w;

    memset(r, 0, sizeof(*r));
    r->transport = tr->name;
    r->c = *c;
    r->weft_s = r->weft_min_s = r->weft_max_s = r->perftest_gbps = r->perftest_same_gbps = NAN;
    r->ceiling_s = NAN;
    if (workload_make(c->bytes, c->tensors, &w) != 0) {
        add_note(r->note, sizeof(r->note), "out of memory");
        return;
    }
    r->bytes = w.bytes;
    r->tensors = w.count;
    free(w.t);
    run_weft(ctx, tr, r);
    if (!perf_run_interrupted(&ctx->runner)) {
        run_perftest(ctx, tr, r);
    }
    /* Over shared memory a put is one copy: the host's most bounds it. */
    if (!perf_run_interrupted(&ctx->runner) && strcmp(tr->name, "shm") == 0 &&
        perf_copy_ceiling(r->bytes, (uint32_t)ctx->cpus, (uint32_t)ctx->o->iters, &r->ceiling_s) != 0) {
        add_note(r->note, sizeof(r->note), "no copy ceiling");
    }
}

/* weft's figure over another's, in a round: NaN where either is missing. */
static double round_ratio(const ucx_row_t *round, double other_gbps)
{
    return perf_gbps(round->bytes, round->weft_s) / other_gbps;
}

static perf_spread_t spread(const double *values, uint64_t n)
{
    perf_spread_t s;

    perf_spread_of(values, (size_t)n, &s);
    return s;
}

/* The n rounds folded into r: each figure the rounds' median (the fastest
 * and slowest weft versions of all of them), each ratio the median of the
 * rounds' own, with their least and greatest; ok and clean only when
 * every round was; the notes of each round. */
static void fold_rounds(const ucx_row_t *round, uint64_t n, ucx_row_t *r)
{
    double        weft[MAX_ROUNDS], lo[MAX_ROUNDS], hi[MAX_ROUNDS], perftest[MAX_ROUNDS], same[MAX_ROUNDS];
    double        ceiling[MAX_ROUNDS], ratio[MAX_ROUNDS], ratio_same[MAX_ROUNDS], ratio_ceiling[MAX_ROUNDS];

    *r = round[0]; /* what every round shares: the case, its bytes and counts */
    r->rounds = n;
    r->note[0] = '\0';
    for (uint64_t i = 0; i < n; i++) {
        weft[i] = round[i].weft_s;
        lo[i] = round[i].weft_min_s;
        hi[i] = round[i].weft_max_s;
        perftest[i] = round[i].perftest_gbps;
        same[i] = round[i].perftest_same_gbps;
        ceiling[i] = round[i].ceiling_s;
        ratio[i] = round_ratio(&round[i], round[i].perftest_gbps);
        ratio_same[i] = round_ratio(&round[i], round[i].perftest_same_gbps);
        ratio_ceiling[i] = round_ratio(&round[i], perf_gbps(round[i].bytes, round[i].ceiling_s));
        r->ok &= round[i].ok;
        r->clean &= round[i].clean;
        if (round[i].note[0] != '\0') {
            if (n > 1) {
                add_note(r->note, sizeof(r->note), "round %llu: %s", (unsigned long long)i + 1, round[i].note);
            } else {
                add_note(r->note, sizeof(r->note), "%s", round[i].note);
            }
        }
    }
    r->weft_s = spread(weft, n).median;
    r->weft_min_s = spread(lo, n).min;
    r->weft_max_s = spread(hi, n).max;
    r->perftest_gbps = spread(perftest, n).median;
    r->perftest_same_gbps = spread(same, n).median;
    r->ceiling_s = spread(ceiling, n).median;
    r->ratio = spread(ratio, n);
    r->ratio_same = spread(ratio_same, n);
    r->ratio_ceiling = spread(ratio_ceiling, n);
}

/* --rounds rounds of a row, one after the other; a round whose weft
 * transfer failed ends the row (the failure is the row's result). */
static void measure_row(ucx_ctx_t *ctx, const ucx_transport_t *tr, const ucx_case_t *c, ucx_row_t *r)
{
    ucx_row_t round[MAX_ROUNDS];
    uint64_t  n = 0;

    do {
        measure_round(ctx, tr, c, &round[n]);
        n++;
    } while (n < ctx->o->rounds && round[n - 1].ok && !perf_run_interrupted(&ctx->runner));
    fold_rounds(round, n, r);
}

/* -------------------------------------------------------------- output */


static void print_preamble(const ucx_ctx_t *ctx, const char *ucx_version, int cpus)
{
    const ucx_options_t *o = ctx->o;

    perf_print_host(stdout, cpus);
    printf("# UCX %s; ucx_perftest: %s; WEFT_UCX_ERR_MODE=%s; WEFT_UCX_LANES=%s\n", ucx_version,
           ctx->perftest[0] ? ctx->perftest : "not found (no peer)", err_mode(), lanes());
    if (!o->gpu) {
        printf("# the consumer's host views: %s\n",
               o->recv_user ? "malloc'd (--recv-memory user): over shared memory UCX 1.13 emulates puts into them"
                            : "in memory from weft_ucx_memory_alloc (UCX allocates and maps it, as ucx_perftest's)");
    } else {
        printf("# --memory cuda: weft moves a GPU registry (GPU 0) into device views (GPU %d); ucx_perftest "
               "moves host memory: the ratio is against the network's own figure\n",
               perf_gpu_count() > 1 ? 1 : 0);
    }
    printf("# weft: a server process (host registry + weft_server) and a consumer process (weft_remote_receive into "
           "host memory);\n# median time from weft_registry_publish to weft_registry_wait_consumers over %llu versions "
           "after %llu warm-up\n# (fill not timed; the last version checked byte for byte); GB/s = 1e9 bytes/s\n",
           (unsigned long long)o->iters, (unsigned long long)o->warmup);
    printf("# a size case: versions of tensors of that size, %llu bytes a version (at least one tensor), each tensor "
           "its own put\n",
           (unsigned long long)o->version_bytes);
    printf("# ucx_perftest -t ucp_put_bw -s SIZE -n %llu*tensors -w %llu*tensors%s, as many puts as weft's; its Final "
           "overall bandwidth (MB = 2^20 bytes) in GB/s;\n# its client puts from the weft server's side to its server "
           "on the consumer's side; past %llu GiB in all, fewer iterations (noted)\n",
           (unsigned long long)o->iters, (unsigned long long)o->warmup,
           ctx->perftest_mpi ? " -P 0 (built with MPI; run without mpirun)" : "",
           (unsigned long long)(PERFTEST_MAX_BYTES >> 30));
    printf("# perftest_same: ucx_perftest with weft's endpoints' error handling: -e with WEFT_UCX_ERR_MODE=peer (over "
           "TCP UCX then emulates puts\n# in software), unless UCX cannot connect so (shared memory: weft's endpoints "
           "go without it too); otherwise the first run;\n# ratio_same against it (the target is against the "
           "first)\n");
    printf("# tcp-netns: namespaces weftPA%d (10.202.0.1) and weftPB%d (10.202.0.2), a veth pair, UCX_TLS=tcp; "
           "shm: this host, UCX_TLS=sm,self; tcp-lo: this host's loopback, UCX_TLS=tcp\n",
           (int)getpid(), (int)getpid());
    printf("# ceiling (shm): the host's copy ceiling, the version's bytes copied from a freshly written buffer into another\n"
           "# by %d spinning threads in one process (no wake-up timed), median of %llu; a put over shared memory is one\n"
           "# copy; ucx_perftest's one buffer, cache-hot, can beat it at small sizes\n",
           ctx->cpus, (unsigned long long)o->iters);
    printf("# expert: one Qwen3-30B-A3B layer's FP8 experts, 128 x (W, WT, scale) of gate_up_proj and down_proj\n");
    printf("# rounds: each row %llu times, weft then ucx_perftest (then the ceiling) each time; each figure is the "
           "rounds' median,\n# each ratio the median of the rounds' own (weft over the peer measured beside it), "
           "ratio_range the least-greatest\n",
           (unsigned long long)o->rounds);
    printf("# target: ratio (weft / ucx_perftest) >= %.1f\n", TARGET);
    printf("%-10s %-9s %11s %7s %12s %10s %14s %7s %13s %14s %10s %12s %9s\n", "transport", "case", "bytes",
           "tensors", "weft_med_ms", "weft_GB/s", "perftest_GB/s", "ratio", "ratio_range", "perftest_same",
           "ratio_same", "ceiling_GB/s", "r_ceiling");
}

static void print_row(const ucx_row_t *r)
{
    const double weft = perf_gbps(r->bytes, r->weft_s), ceiling = perf_gbps(r->bytes, r->ceiling_s);
    char         b[10][32], range[72];

    snprintf(range, sizeof(range), "%s-%s", perf_num(b[8], 32, r->ratio.min, 2), perf_num(b[9], 32, r->ratio.max, 2));
    printf("%-10s %-9s %11llu %7llu %12s %10s %14s %7s %13s %14s %10s %12s %9s%s\n", r->transport, r->c.name,
           (unsigned long long)r->bytes, (unsigned long long)r->tensors, perf_num(b[0], 32, r->weft_s * 1e3, 3),
           perf_num(b[1], 32, weft, 3), perf_num(b[2], 32, r->perftest_gbps, 3), perf_num(b[3], 32, r->ratio.median, 3),
           r->ratio.count > 1 ? range : "-", perf_num(b[4], 32, r->perftest_same_gbps, 3),
           perf_num(b[5], 32, r->ratio_same.median, 3), perf_num(b[6], 32, ceiling, 1),
           perf_num(b[7], 32, r->ratio_ceiling.median, 3), !r->ok ? "  FAILED" : !r->clean ? "  UNCLEAN-EXIT" : "");
    if (r->note[0] != '\0') {
        printf("#   %s %s: %s\n", r->transport, r->c.name, r->note);
    }
}

static void print_json(const ucx_ctx_t *ctx, const char *ucx_version, const ucx_row_t *r)
{
    const double weft = perf_gbps(r->bytes, r->weft_s);
    char         host[256];
    perf_json_t  j;

    perf_host_name(host, sizeof(host));
    perf_json_begin(&j, stdout);
    perf_json_str(&j, "command", "ucx");
    perf_json_str(&j, "date", ctx->date);
    perf_json_str(&j, "host", host);
    perf_json_str(&j, "libweft", weft_version());
    perf_json_str(&j, "ucx_version", ucx_version);
    perf_json_str(&j, "weft_ucx_err_mode", err_mode());
    perf_json_str(&j, "weft_ucx_lanes", lanes());
    perf_json_str(&j, "memory", ctx->o->gpu ? "cuda" : "host");
    if (!ctx->o->gpu) {
        perf_json_str(&j, "recv_memory", ctx->o->recv_user ? "user" : "ucx");
    }
    perf_json_bool(&j, "checksums", ctx->o->checksums);
    perf_json_str(&j, "transport", r->transport);
    perf_json_str(&j, "case", r->c.name);
    perf_json_uint(&j, "bytes", r->bytes);
    perf_json_uint(&j, "tensors", r->tensors);
    if (r->c.bytes != 0) {
        perf_json_uint(&j, "tensor_bytes", r->c.bytes); /* each its own put */
    }
    perf_json_uint(&j, "iterations", ctx->o->iters);
    perf_json_uint(&j, "warmup", ctx->o->warmup);
    perf_json_uint(&j, "rounds", r->rounds);
    perf_json_number_g(&j, "weft_seconds_median", r->weft_s);
    perf_json_number_g(&j, "weft_seconds_min", r->weft_min_s);
    perf_json_number_g(&j, "weft_seconds_max", r->weft_max_s);
    perf_json_double(&j, "weft_gbps", weft);
    perf_json_double(&j, "ucx_perftest_gbps", r->perftest_gbps);
    if (isnan(r->perftest_gbps)) {
        perf_json_number_g(&j, "ucx_perftest_bytes", NAN);
        perf_json_number_g(&j, "ucx_perftest_iterations", NAN);
        perf_json_number_g(&j, "ucx_perftest_warmup", NAN);
    } else {
        perf_json_uint(&j, "ucx_perftest_bytes", r->perftest_bytes);
        perf_json_uint(&j, "ucx_perftest_iterations", r->perftest_iters);
        perf_json_uint(&j, "ucx_perftest_warmup", r->perftest_warmup);
    }
    /* Each ratio: the median of the rounds' own (not weft_gbps over the
     * peer's median), with their least and greatest. */
    perf_json_double(&j, "ratio_ucx_perftest", r->ratio.median);
    perf_json_double(&j, "ratio_ucx_perftest_min", r->ratio.min);
    perf_json_double(&j, "ratio_ucx_perftest_max", r->ratio.max);
    perf_json_str(&j, "ucx_perftest_same_setup", r->perftest_same);
    perf_json_double(&j, "ucx_perftest_same_setup_gbps", r->perftest_same_gbps);
    perf_json_double(&j, "ratio_ucx_perftest_same_setup", r->ratio_same.median);
    perf_json_double(&j, "copy_ceiling_gbps", perf_gbps(r->bytes, r->ceiling_s));
    perf_json_uint(&j, "copy_ceiling_threads", (uint64_t)ctx->cpus);
    perf_json_double(&j, "ratio_copy_ceiling", r->ratio_ceiling.median);
    perf_json_double(&j, "target", TARGET);
    perf_json_bool(&j, "ok", r->ok);
    perf_json_bool(&j, "clean_exit", r->clean);
    perf_json_str(&j, "notes", r->note);
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

/* ucx_perftest's full name from PATH into buf; "" when absent. */
static void find_on_path(const char *prog, char *buf, size_t size)
{
    const char *path = getenv("PATH");
    char       *copy = strdup(path != NULL ? path : ""), *save = NULL;

    buf[0] = '\0';
    for (char *dir = copy != NULL ? strtok_r(copy, ":", &save) : NULL; dir != NULL && buf[0] == '\0';
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(buf, size, "%s/%s", dir, prog);
        if (dir[0] != '/' || access(buf, X_OK) != 0) {
            buf[0] = '\0';
        }
    }
    free(copy);
}

/* This program, to run its roles: the running executable itself. */
static int find_self(char *buf, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);

    if (n <= 0) {
        fprintf(stderr, "weft-perf ucx: cannot find this program: %s\n", strerror(errno));
        return -1;
    }
    buf[n] = '\0';
    return 0;
}

static void size_name(uint64_t bytes, char *buf, size_t size)
{
    if (bytes % (UINT64_C(1) << 30) == 0) {
        snprintf(buf, size, "%lluG", (unsigned long long)(bytes >> 30));
    } else if (bytes % (UINT64_C(1) << 20) == 0) {
        snprintf(buf, size, "%lluM", (unsigned long long)(bytes >> 20));
    } else if (bytes % 1024 == 0) {
        snprintf(buf, size, "%lluK", (unsigned long long)(bytes >> 10));
    } else {
        snprintf(buf, size, "%llu", (unsigned long long)bytes);
    }
}

/* Every case on one transport; returns 1 when a weft transfer failed.
 * *rows counts the rows printed. */
static int run_transport(ucx_ctx_t *ctx, const ucx_transport_t *tr, const char *ucx_version, int *rows)
{
    const ucx_options_t *o = ctx->o;
    int                  failed = 0;

    for (size_t i = 0; i < o->nsizes + (o->expert ? 1 : 0) && !perf_run_interrupted(&ctx->runner); i++) {
        ucx_case_t c = {.bytes = i < o->nsizes ? o->sizes[i] : 0, .tensors = 1};
        ucx_row_t  r;

        if (c.bytes == 0) {
            snprintf(c.name, sizeof(c.name), "expert");
        } else {
            size_name(c.bytes, c.name, sizeof(c.name));
            c.tensors = case_tensors(c.bytes, o->version_bytes);
        }
        measure_row(ctx, tr, &c, &r);
        if (perf_run_interrupted(&ctx->runner)) {
            break;
        }
        if (o->json) {
            print_json(ctx, ucx_version, &r);
        } else {
            print_row(&r);
        }
        fflush(stdout);
        failed |= !r.ok;
        (*rows)++;
    }
    return failed;
}

static void skipped(const ucx_ctx_t *ctx, const char *transport, const char *why)
{
    if (ctx->o->json) {
        fprintf(stderr, "weft-perf ucx: %s skipped: %s\n", transport, why);
    } else {
        printf("# %s skipped: %s\n", transport, why);
    }
}

/* 0: every weft transfer succeeded; 1: one failed; EXIT_SKIP: no row. */
static int run_all(ucx_ctx_t *ctx, const char *ucx_version)
{
    const ucx_transport_t shm = {.name = "shm", .tls = "sm,self",
                                 .side = {{.ip = "127.0.0.1"}, {.ip = "127.0.0.1"}}};
    const ucx_transport_t tcp_lo = {.name = "tcp-lo", .tls = "tcp",
                                    .side = {{.dev = "lo", .ip = "127.0.0.1"}, {.dev = "lo", .ip = "127.0.0.1"}}};
    int                   failed = 0, rows = 0;

    if (ctx->o->transports & TR_TCP_NETNS) {
        ucx_transport_t tcp;
        char            why[300] = "";

        if (netns_setup(ctx, &tcp, why, sizeof(why)) == 0) {
            failed |= run_transport(ctx, &tcp, ucx_version, &rows);
        } else if (!perf_run_interrupted(&ctx->runner)) {
            skipped(ctx, "tcp-netns", why);
        }
        netns_teardown(ctx);
    }
    if ((ctx->o->transports & TR_SHM) && !perf_run_interrupted(&ctx->runner)) {
        failed |= run_transport(ctx, &shm, ucx_version, &rows);
    }
    if ((ctx->o->transports & TR_TCP_LO) && !perf_run_interrupted(&ctx->runner)) {
        failed |= run_transport(ctx, &tcp_lo, ucx_version, &rows);
    }
    if (rows == 0 && !failed && !perf_run_interrupted(&ctx->runner)) {
        fprintf(stderr, "weft-perf ucx: nothing measured: skipped\n");
        return EXIT_SKIP;
    }
    return failed;
}

int perf_cmd_ucx(int argc, char **argv)
{
    ucx_options_t       o;
    ucx_ctx_t           ctx;
    weft_backend_info_t info = {0};
    int                 cpu[2], cpus, rc = parse_options(argc, argv, &o);

    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    if (o.role != NULL) {
        return run_role(&o);
    }
    if (weft_backend_query(WEFT_BACKEND_UCX, &info) != WEFT_OK || !info.compiled || !info.available) {
        fprintf(stderr, "weft-perf ucx: libweft has no usable UCX (%s): skipped\n",
                info.compiled ? "not found at run time" : "not in this build");
        return EXIT_SKIP;
    }
    if (o.gpu && perf_gpu_count() == 0) {
        fprintf(stderr, "weft-perf ucx: --memory cuda needs a GPU (and libweft and weft-perf built with CUDA): skipped\n");
        return EXIT_SKIP;
    }
    if (o.err_none >= 0) {
        setenv("WEFT_UCX_ERR_MODE", o.err_none ? "none" : "peer", 1); /* for the roles' processes */
    }
    if (o.lanes != 0) {
        char n[8];

        snprintf(n, sizeof(n), "%u", (unsigned)o.lanes);
        setenv("WEFT_UCX_LANES", n, 1);
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.o = &o;
    ctx.runner.name = "weft-perf ucx";
    if (find_self(ctx.self, sizeof(ctx.self)) != 0 || perf_catch_interrupts() != 0) {
        return 1;
    }
    find_on_path("ucx_perftest", ctx.perftest, sizeof(ctx.perftest));
    ctx.perftest_mpi = ctx.perftest[0] != '\0' && perftest_has_mpi_mode(&ctx);
    snprintf(ctx.token, sizeof(ctx.token), "weft-perf-ucx-%d-%llx", (int)getpid(),
             (unsigned long long)perf_now_ns());
    utc_date(ctx.date, sizeof(ctx.date));
    cpus = perf_cpus_allowed(cpu);
    ctx.cpus = cpus > 0 ? cpus : 1;
    if (!o.json) {
        print_preamble(&ctx, info.version[0] ? info.version : "unknown", cpus);
        fflush(stdout);
    }
    rc = run_all(&ctx, info.version[0] ? info.version : "unknown");
    if (perf_interrupted) {
        fprintf(stderr, "weft-perf ucx: interrupted\n");
        return 1;
    }
    return rc;
}
