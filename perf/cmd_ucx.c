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

#include "lib/args.h"
#include "lib/copy_ceiling.h"
#include "lib/gpu_buf.h"
#include "lib/columns.h"
#include "lib/json.h"
#include "lib/proc.h"
#include "lib/stats.h"
#include "lib/sysinfo.h"
#include "perf.h"
#include "ucx.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <weft/transport.h>
#include <weft/weft.h>

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

/* -------------------------------------------------------------- rounds */

/* One round of a row: weft, ucx_perftest, the copy ceiling (shm). */
static void measure_round(ucx_ctx_t *ctx, const ucx_transport_t *tr, const ucx_case_t *c, ucx_row_t *r)
{
    ucx_workload_t w;

    memset(r, 0, sizeof(*r));
    r->transport = tr->name;
    r->c = *c;
    r->weft_s = r->weft_min_s = r->weft_max_s = r->perftest_gbps = r->perftest_same_gbps = NAN;
    r->ceiling_s = NAN;
    if (ucx_workload_make(c->bytes, c->tensors, &w) != 0) {
        ucx_add_note(r->note, sizeof(r->note), "out of memory");
        return;
    }
    r->bytes = w.bytes;
    r->tensors = w.count;
    free(w.t);
    ucx_run_weft(ctx, tr, r);
    if (!perf_run_interrupted(&ctx->runner)) {
        ucx_run_perftest(ctx, tr, r);
    }
    /* Over shared memory a put is one copy: the host's most bounds it. */
    if (!perf_run_interrupted(&ctx->runner) && strcmp(tr->name, "shm") == 0) {
        perf_copy_ceiling_arg_t arg = {(uint32_t)ctx->cpus, (uint32_t)ctx->o->iters};
        perf_baseline_result_t  ceiling;

        if (perf_baseline_run(&perf_copy_ceiling_baseline, &arg, r->bytes, &ceiling) != 0) {
            ucx_add_note(r->note, sizeof(r->note), "%s", ceiling.note);
        }
        r->ceiling_s = ceiling.seconds;
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
                ucx_add_note(r->note, sizeof(r->note), "round %llu: %s", (unsigned long long)i + 1, round[i].note);
            } else {
                ucx_add_note(r->note, sizeof(r->note), "%s", round[i].note);
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


/* A row: the table's columns and the --json fields after the run's own
 * (print_json), in one order. */
enum {
    U_TRANSPORT, U_CASE, U_BYTES, U_TENSORS, U_TENSOR_BYTES, U_ITERATIONS, U_WARMUP, U_ROUNDS, U_WEFT_MS,
    U_WEFT_S, U_WEFT_S_MIN, U_WEFT_S_MAX, U_WEFT_GBPS, U_PERFTEST_GBPS, U_PERFTEST_BYTES, U_PERFTEST_ITERS,
    U_PERFTEST_WARMUP, U_RATIO, U_RATIO_MIN, U_RATIO_MAX, U_RATIO_RANGE, U_SAME_SETUP, U_SAME_GBPS,
    U_RATIO_SAME, U_CEILING, U_CEILING_THREADS, U_RATIO_CEILING, U_TARGET, U_OK, U_CLEAN, U_NOTES, U_COLUMNS
};

static const perf_column_t ucx_columns[U_COLUMNS] = {
    [U_TRANSPORT]       = {"transport", "transport", -10, 0, PERF_COLUMN_TEXT},
    [U_CASE]            = {"case", "case", -9, 0, PERF_COLUMN_TEXT},
    [U_BYTES]           = {"bytes", "bytes", 11, 0, PERF_COLUMN_UINT},
    [U_TENSORS]         = {"tensors", "tensors", 7, 0, PERF_COLUMN_UINT},
    [U_TENSOR_BYTES]    = {"tensor_bytes", NULL, 0, 0, PERF_COLUMN_UINT}, /* each its own put; null: the expert version */
    [U_ITERATIONS]      = {"iterations", NULL, 0, 0, PERF_COLUMN_UINT},
    [U_WARMUP]          = {"warmup", NULL, 0, 0, PERF_COLUMN_UINT},
    [U_ROUNDS]          = {"rounds", NULL, 0, 0, PERF_COLUMN_UINT},
    [U_WEFT_MS]         = {NULL, "weft_med_ms", 12, 3, PERF_COLUMN_DOUBLE},
    [U_WEFT_S]          = {"weft_seconds_median", NULL, 0, 6, PERF_COLUMN_G},
    [U_WEFT_S_MIN]      = {"weft_seconds_min", NULL, 0, 6, PERF_COLUMN_G},
    [U_WEFT_S_MAX]      = {"weft_seconds_max", NULL, 0, 6, PERF_COLUMN_G},
    [U_WEFT_GBPS]       = {"weft_gbps", "weft_GB/s", 10, 3, PERF_COLUMN_DOUBLE},
    [U_PERFTEST_GBPS]   = {"ucx_perftest_gbps", "perftest_GB/s", 14, 3, PERF_COLUMN_DOUBLE},
    [U_PERFTEST_BYTES]  = {"ucx_perftest_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [U_PERFTEST_ITERS]  = {"ucx_perftest_iterations", NULL, 0, 0, PERF_COLUMN_UINT},
    [U_PERFTEST_WARMUP] = {"ucx_perftest_warmup", NULL, 0, 0, PERF_COLUMN_UINT},
    /* Each ratio: the median of the rounds' own (not weft_gbps over the
     * peer's median), with their least and greatest. */
    [U_RATIO]           = {"ratio_ucx_perftest", "ratio", 7, 3, PERF_COLUMN_DOUBLE},
    [U_RATIO_MIN]       = {"ratio_ucx_perftest_min", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [U_RATIO_MAX]       = {"ratio_ucx_perftest_max", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [U_RATIO_RANGE]     = {NULL, "ratio_range", 13, 0, PERF_COLUMN_TEXT},
    [U_SAME_SETUP]      = {"ucx_perftest_same_setup", NULL, 0, 0, PERF_COLUMN_TEXT},
    [U_SAME_GBPS]       = {"ucx_perftest_same_setup_gbps", "perftest_same", 14, 3, PERF_COLUMN_DOUBLE},
    [U_RATIO_SAME]      = {"ratio_ucx_perftest_same_setup", "ratio_same", 10, 3, PERF_COLUMN_DOUBLE},
    [U_CEILING]         = {"copy_ceiling_gbps", "ceiling_GB/s", 12, 1, PERF_COLUMN_DOUBLE},
    [U_CEILING_THREADS] = {"copy_ceiling_threads", NULL, 0, 0, PERF_COLUMN_UINT},
    [U_RATIO_CEILING]   = {"ratio_copy_ceiling", "r_ceiling", 9, 3, PERF_COLUMN_DOUBLE},
    [U_TARGET]          = {"target", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [U_OK]              = {"ok", NULL, 0, 0, PERF_COLUMN_BOOL},
    [U_CLEAN]           = {"clean_exit", NULL, 0, 0, PERF_COLUMN_BOOL},
    [U_NOTES]           = {"notes", NULL, 0, 0, PERF_COLUMN_TEXT},
};

static void print_preamble(const ucx_ctx_t *ctx, const char *ucx_version, int cpus)
{
    const ucx_options_t *o = ctx->o;

    perf_print_host(stdout, cpus);
    printf("# UCX %s; ucx_perftest: %s; WEFT_UCX_ERR_MODE=%s; WEFT_UCX_LANES=%s\n", ucx_version,
           ctx->perftest[0] ? ctx->perftest : "not found (no peer)", ucx_err_mode(), ucx_lanes());
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
    perf_columns_header(stdout, "", ucx_columns, U_COLUMNS);
    putchar('\n');
}

/* r's cells; range: room for the table's "min-max" of the ratios. */
static void row_cells(const ucx_ctx_t *ctx, const ucx_row_t *r, char *range, size_t size, perf_cell_t *cells)
{
    const int no_perftest = isnan(r->perftest_gbps);
    char      lo[32], hi[32];

    snprintf(range, size, "%s-%s", perf_num(lo, sizeof(lo), r->ratio.min, 2),
             perf_num(hi, sizeof(hi), r->ratio.max, 2));
    memset(cells, 0, U_COLUMNS * sizeof(*cells));
    cells[U_TRANSPORT].text = r->transport;
    cells[U_CASE].text = r->c.name;
    cells[U_BYTES].u = r->bytes;
    cells[U_TENSORS].u = r->tensors;
    cells[U_TENSOR_BYTES] = (perf_cell_t){.u = r->c.bytes, .null = r->c.bytes == 0};
    cells[U_ITERATIONS].u = ctx->o->iters;
    cells[U_WARMUP].u = ctx->o->warmup;
    cells[U_ROUNDS].u = r->rounds;
    cells[U_WEFT_MS].d = r->weft_s * 1e3;
    cells[U_WEFT_S].d = r->weft_s;
    cells[U_WEFT_S_MIN].d = r->weft_min_s;
    cells[U_WEFT_S_MAX].d = r->weft_max_s;
    cells[U_WEFT_GBPS].d = perf_gbps(r->bytes, r->weft_s);
    cells[U_PERFTEST_GBPS].d = r->perftest_gbps;
    cells[U_PERFTEST_BYTES] = (perf_cell_t){.u = r->perftest_bytes, .null = no_perftest};
    cells[U_PERFTEST_ITERS] = (perf_cell_t){.u = r->perftest_iters, .null = no_perftest};
    cells[U_PERFTEST_WARMUP] = (perf_cell_t){.u = r->perftest_warmup, .null = no_perftest};
    cells[U_RATIO].d = r->ratio.median;
    cells[U_RATIO_MIN].d = r->ratio.min;
    cells[U_RATIO_MAX].d = r->ratio.max;
    cells[U_RATIO_RANGE].text = r->ratio.count > 1 ? range : "-";
    cells[U_SAME_SETUP].text = r->perftest_same;
    cells[U_SAME_GBPS].d = r->perftest_same_gbps;
    cells[U_RATIO_SAME].d = r->ratio_same.median;
    cells[U_CEILING].d = perf_gbps(r->bytes, r->ceiling_s);
    cells[U_CEILING_THREADS].u = (uint64_t)ctx->cpus;
    cells[U_RATIO_CEILING].d = r->ratio_ceiling.median;
    cells[U_TARGET].d = TARGET;
    cells[U_OK].u = (uint64_t)r->ok;
    cells[U_CLEAN].u = (uint64_t)r->clean;
    cells[U_NOTES].text = r->note;
}

static void print_row(const ucx_ctx_t *ctx, const ucx_row_t *r)
{
    perf_cell_t cells[U_COLUMNS];
    char        range[72];

    row_cells(ctx, r, range, sizeof(range), cells);
    perf_columns_row(stdout, "", ucx_columns, U_COLUMNS, cells);
    printf("%s\n", !r->ok ? "  FAILED" : !r->clean ? "  UNCLEAN-EXIT" : "");
    if (r->note[0] != '\0') {
        printf("#   %s %s: %s\n", r->transport, r->c.name, r->note);
    }
}

static void print_json(const ucx_ctx_t *ctx, const char *ucx_version, const ucx_row_t *r)
{
    perf_cell_t cells[U_COLUMNS];
    char        host[256], range[72];
    perf_json_t j;

    perf_host_name(host, sizeof(host));
    row_cells(ctx, r, range, sizeof(range), cells);
    perf_json_begin(&j, stdout);
    perf_json_str(&j, "command", "ucx");
    perf_json_str(&j, "date", ctx->date);
    perf_json_str(&j, "host", host);
    perf_json_str(&j, "libweft", weft_version());
    perf_json_str(&j, "ucx_version", ucx_version);
    perf_json_str(&j, "weft_ucx_err_mode", ucx_err_mode());
    perf_json_str(&j, "weft_ucx_lanes", ucx_lanes());
    perf_json_str(&j, "memory", ctx->o->gpu ? "cuda" : "host");
    if (!ctx->o->gpu) {
        perf_json_str(&j, "recv_memory", ctx->o->recv_user ? "user" : "ucx");
    }
    perf_json_bool(&j, "checksums", ctx->o->checksums);
    perf_columns_json(&j, "", ucx_columns, U_COLUMNS, cells);
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
            c.tensors = ucx_case_tensors(c.bytes, o->version_bytes);
        }
        measure_row(ctx, tr, &c, &r);
        if (perf_run_interrupted(&ctx->runner)) {
            break;
        }
        if (o->json) {
            print_json(ctx, ucx_version, &r);
        } else {
            print_row(ctx, &r);
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

        if (ucx_netns_setup(ctx, &tcp, why, sizeof(why)) == 0) {
            failed |= run_transport(ctx, &tcp, ucx_version, &rows);
        } else if (!perf_run_interrupted(&ctx->runner)) {
            skipped(ctx, "tcp-netns", why);
        }
        ucx_netns_teardown(ctx);
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
        return ucx_run_role(&o);
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
    ctx.perftest_mpi = ctx.perftest[0] != '\0' && ucx_perftest_has_mpi_mode(&ctx);
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

