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

#include "ipc.h"
#include "lib/args.h"
#include "lib/baseline.h"
#include "lib/columns.h"
#include "lib/json.h"
#include "lib/proc.h"
#include "lib/stats.h"
#include "lib/sysinfo.h"
#include "perf.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <weft/registry.h>
#include <weft/weft.h>

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

/* ---------------------------------------------------------- workloads */

/* single-1g: one 1 GiB FP8 matrix. */
static const perf_expert_kind_t single_kind[] = {
    {"gate_up_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 32768, 32768},
};

static const ipc_workload_t workloads[] = {
    {"qwen3-2layer", WORKLOAD_QWEN3, 2, PERF_QWEN3_EXPERTS, PERF_EXPERT_KINDS, perf_qwen3_expert_kinds},
    {"single-1g", WORKLOAD_SINGLE, 1, 1, 1, single_kind},
};

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

/* ----------------------------------------------------------- children */

/* What a child runs: fn on the case, with the parent's context. */
typedef struct child_entry {
    ipc_ctx_t        *ctx;
    ipc_child_fn      fn;
    const ipc_case_t *c;
} child_entry_t;

/* lib/runner's exec, in the forked child: no program, the function, whose
 * result is the exit status. SIGPIPE is ignored again (the runner gives
 * an exec'd program the default): the children write to weft's sockets as
 * the parent would, getting EPIPE from a dead peer. */
static void child_exec(const void *arg, char *const argv[])
{
    const child_entry_t *e = arg;

    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    _exit(e->fn(e->ctx, e->c));
}

/*
 * One child (or two, a then b) running its function; the first that
 * fails, the deadline or an interrupt kills the others (said on stderr).
 * Returns 0 when all exited with 0.
 */
static int run_children(ipc_ctx_t *ctx, const char *what, ipc_child_fn a, ipc_child_fn b, const ipc_case_t *c,
                        uint64_t timeout_s)
{
    const child_entry_t entry[2] = {{ctx, a, c}, {ctx, b, c}};
    char *const         argv[] = {NULL};
    const int           n = b != NULL ? 2 : 1;
    perf_run_t          runs[2];
    int                 reported = 0;

    memset(runs, 0, sizeof(runs));
    for (int i = 0; i < n; i++) {
        if (perf_run_start(&ctx->runner, &runs[i], what, argv, 0, child_exec, &entry[i]) != 0) {
            perf_run_kill_all(&ctx->runner, runs, n);
            return -1;
        }
    }
    if (perf_run_wait(&ctx->runner, runs, n, NULL, perf_deadline_in_s((double)timeout_s), 1) == 0) {
        return 0;
    }
    for (int i = 0; i < n; i++) {
        char how[96];

        if (runs[i].exited && perf_run_failed(&runs[i])) {
            perf_describe_status(runs[i].status, how, sizeof(how));
            fprintf(stderr, "weft-perf ipc: %s: process %d %s\n", what, (int)runs[i].pid, how);
            reported = 1;
        }
    }
    if (!reported) {
        fprintf(stderr, "weft-perf ipc: %s: %s\n", what, perf_interrupted ? "interrupted" : "timed out");
    }
    return -1;
}

static void add_note(ipc_result_t *r, const char *note)
{
    size_t used = strlen(r->note);

    snprintf(r->note + used, sizeof(r->note) - used, "%s%s", used ? "; " : "", note);
}

/* ----------------------------------------------------------- baselines */

/* A baseline timed in child processes (perf_baseline_run's arg): fn, with
 * `with` beside it unless NULL, each run's time in the shared timing. */
typedef struct child_baseline {
    ipc_ctx_t        *ctx;
    const ipc_case_t *c;
    ipc_child_fn      fn, with;
    const char       *setup, *failed; /* how it is set up; the note when it fails */
} child_baseline_t;

static int child_measure(void *arg, perf_baseline_result_t *res)
{
    const child_baseline_t *b = arg;
    ipc_shared_t           *sh = b->ctx->sh;
    const uint64_t          timeout_s = 300 + (b->ctx->o->warmup + b->ctx->o->iters) * 5;

    memset(&sh->timing, 0, sizeof(sh->timing));
    snprintf(res->setup, sizeof(res->setup), "%s", b->setup);
    if (run_children(b->ctx, res->what, b->fn, b->with, b->c, timeout_s) != 0) {
        perf_baseline_note(res, "%s", b->failed);
        return -1;
    }
    res->seconds = median_seconds(sh->timing.ns, sh->timing.n);
    return 0;
}

/* Runs b as `what`: its median time, NaN (and r's note) when it failed. */
static double run_child_baseline(child_baseline_t *b, const char *what, ipc_result_t *r)
{
    const perf_baseline_t  baseline = {what, child_measure};
    perf_baseline_result_t res;

    if (perf_baseline_run(&baseline, b, r->bytes, &res) != 0) {
        add_note(r, res.note);
    }
    return res.seconds;
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
    failed = run_children(ctx, "weft push producer/consumer", ipc_push_producer_main, ipc_push_consumer_main, c,
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
    r->bytes = ipc_workload_bytes(c->w);
    r->tensors = ipc_workload_tensors(c->w);

    /* weft: a producer and a consumer process over a fresh registry. */
    snprintf(ctx->registry, sizeof(ctx->registry), "weft-perf-ipc-%d-%d", (int)getpid(), number);
    (void)weft_registry_unlink(ctx->registry);
    memset(&sh->weft, 0, sizeof(sh->weft));
    if (run_children(ctx, "weft producer/consumer", ipc_producer_main, ipc_consumer_main, c,
                     300 + versions * 10) != 0) {
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
    if (c->cross) {
        child_baseline_t b = {ctx, c, ipc_copy_main, NULL,
                              "cudaMemcpyPeerAsync of the version's bytes as one buffer, on a stream of the "
                              "destination GPU",
                              "the peer copy failed"};

        r->ceiling_s = run_child_baseline(&b, "peer copy", r);
    } else {
        child_baseline_t b = {ctx, c, ipc_copy_main, NULL,
                              "cudaMemcpyAsync D2D of the version's bytes as one buffer", "the D2D copy failed"};

        r->ceiling_s = run_child_baseline(&b, "D2D copy", r);
    }

    /* On one GPU, the same copy when it must wait for a context switch. */
    if (!c->cross) {
        child_baseline_t b = {ctx, c, ipc_switched_copy_main, ipc_toucher_main,
                              "cudaMemcpyAsync D2D of the version's bytes, each after another process's 64 MiB "
                              "memset on the GPU",
                              "the D2D copy after a context switch failed"};

        atomic_store(&sh->turn, 0);
        r->switched_s = run_child_baseline(&b, "D2D copy after a context switch", r);
    }

    /* NCCL send/recv, across GPUs only. */
    if (c->cross) {
#ifdef HAVE_NCCL
        child_baseline_t b = {ctx, c, ipc_nccl_main, NULL,
                              "ncclSend/ncclRecv of the version's bytes, both ends in one process",
                              "NCCL send/recv failed"};

        r->nccl_s = run_child_baseline(&b, "NCCL send/recv", r);
#else
        add_note(r, "NCCL: not in this build");
#endif
    }

    /* The peer, last: it allocates on both GPUs itself. */
    ipc_run_torch(ctx->o, c, r);
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

/*
 * A case's row: the table's columns and the --json fields after the run's
 * own, in one order. The table shows the case's ceiling (the peer copy
 * across GPUs, the D2D copy on one) in one column; the JSON names which,
 * the other null. Push, end-to-end and wrong-byte fields are null where
 * not measured (--no-push, not verified).
 */
enum {
    I_WORKLOAD, I_PLACEMENT, I_SRC, I_DST, I_PEER_ACCESS, I_ORDER, I_KERNEL_MAX, I_STREAMS, I_TENSORS, I_RANGES,
    I_UNCOALESCED, I_BYTES, I_ITERATIONS, I_WARMUP, I_WEFT_S, I_WEFT, I_PUSH, I_CEILING, I_PEER_COPY, I_D2D,
    I_NCCL, I_TORCH, I_TORCH_VERSION, I_TORCH_NOTE, I_R_CEILING, I_RATIO_PEER_COPY, I_RATIO_D2D, I_R_PUSH,
    I_RATIO_NCCL, I_RATIO_TORCH, I_WRONG, I_SWITCHED, I_RATIO_SWITCHED, I_PUSH_S, I_RATIO_PEER_COPY_PUSH,
    I_RATIO_D2D_PUSH, I_E2E_S, I_E2E, I_RATIO_PEER_COPY_E2E, I_RATIO_D2D_E2E, I_PUSH_E2E_S, I_PUSH_E2E,
    I_RATIO_PEER_COPY_PUSH_E2E, I_RATIO_D2D_PUSH_E2E, I_PUSH_WRONG, I_PUSH_OK, I_OK, I_NOTES, I_COLUMNS
};

static const perf_column_t ipc_columns[I_COLUMNS] = {
    [I_WORKLOAD]                 = {"workload", "workload", -13, 0, PERF_COLUMN_TEXT},
    [I_PLACEMENT]                = {"placement", "placement", -9, 0, PERF_COLUMN_TEXT},
    [I_SRC]                      = {"src_device", NULL, 0, 0, PERF_COLUMN_INT},
    [I_DST]                      = {"dst_device", NULL, 0, 0, PERF_COLUMN_INT},
    [I_PEER_ACCESS]              = {"peer_access", NULL, 0, 0, PERF_COLUMN_BOOL},
    [I_ORDER]                    = {"order", NULL, 0, 0, PERF_COLUMN_TEXT},
    [I_KERNEL_MAX]               = {"WEFT_CUDA_IPC_KERNEL_MAX", NULL, 0, 0, PERF_COLUMN_TEXT},
    [I_STREAMS]                  = {"WEFT_CUDA_IPC_STREAMS", NULL, 0, 0, PERF_COLUMN_TEXT},
    [I_TENSORS]                  = {"tensors", "tensors", 7, 0, PERF_COLUMN_UINT},
    [I_RANGES]                   = {"ranges", "ranges", 7, 0, PERF_COLUMN_UINT},
    [I_UNCOALESCED]              = {"ranges_uncoalesced", NULL, 0, 0, PERF_COLUMN_UINT},
    [I_BYTES]                    = {"bytes", "bytes", 13, 0, PERF_COLUMN_UINT},
    [I_ITERATIONS]               = {"iterations", NULL, 0, 0, PERF_COLUMN_UINT},
    [I_WARMUP]                   = {"warmup", NULL, 0, 0, PERF_COLUMN_UINT},
    [I_WEFT_S]                   = {"weft_seconds_median", NULL, 0, 6, PERF_COLUMN_G},
    [I_WEFT]                     = {"weft_gbps", "weft_GB/s", 10, 1, PERF_COLUMN_DOUBLE},
    [I_PUSH]                     = {"push_gbps", "push_GB/s", 10, 1, PERF_COLUMN_DOUBLE},
    [I_CEILING]                  = {NULL, "ceiling_GB/s", 12, 1, PERF_COLUMN_DOUBLE},
    [I_PEER_COPY]                = {"peer_copy_gbps", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [I_D2D]                      = {"d2d_gbps", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [I_NCCL]                     = {"nccl_gbps", "nccl_GB/s", 10, 1, PERF_COLUMN_DOUBLE},
    [I_TORCH]                    = {"torch_ipc_gbps", "torch_GB/s", 11, 1, PERF_COLUMN_DOUBLE},
    [I_TORCH_VERSION]            = {"torch_version", NULL, 0, 0, PERF_COLUMN_TEXT},
    [I_TORCH_NOTE]               = {"peer", NULL, 0, 0, PERF_COLUMN_TEXT},
    [I_R_CEILING]                = {NULL, "r_ceiling", 10, 3, PERF_COLUMN_DOUBLE},
    [I_RATIO_PEER_COPY]          = {"ratio_peer_copy", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_RATIO_D2D]                = {"ratio_d2d_same_gpu", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_R_PUSH]                   = {NULL, "r_push", 7, 3, PERF_COLUMN_DOUBLE},
    [I_RATIO_NCCL]               = {"ratio_nccl", "r_nccl", 7, 3, PERF_COLUMN_DOUBLE},
    [I_RATIO_TORCH]              = {"ratio_torch_ipc", "r_torch", 8, 3, PERF_COLUMN_DOUBLE},
    [I_WRONG]                    = {"wrong_bytes", "wrong_bytes", 11, 0, PERF_COLUMN_UINT},
    [I_SWITCHED]                 = {"d2d_after_switch_gbps", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [I_RATIO_SWITCHED]           = {"ratio_d2d_after_switch", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_PUSH_S]                   = {"push_seconds_median", NULL, 0, 6, PERF_COLUMN_G},
    [I_RATIO_PEER_COPY_PUSH]     = {"ratio_peer_copy_push", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_RATIO_D2D_PUSH]           = {"ratio_d2d_same_gpu_push", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_E2E_S]                    = {"weft_e2e_seconds_median", NULL, 0, 6, PERF_COLUMN_G},
    [I_E2E]                      = {"weft_e2e_gbps", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [I_RATIO_PEER_COPY_E2E]      = {"ratio_peer_copy_e2e", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_RATIO_D2D_E2E]            = {"ratio_d2d_same_gpu_e2e", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_PUSH_E2E_S]               = {"push_e2e_seconds_median", NULL, 0, 6, PERF_COLUMN_G},
    [I_PUSH_E2E]                 = {"push_e2e_gbps", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [I_RATIO_PEER_COPY_PUSH_E2E] = {"ratio_peer_copy_push_e2e", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_RATIO_D2D_PUSH_E2E]       = {"ratio_d2d_same_gpu_push_e2e", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [I_PUSH_WRONG]               = {"push_wrong_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [I_PUSH_OK]                  = {"push_ok", NULL, 0, 0, PERF_COLUMN_BOOL},
    [I_OK]                       = {"ok", NULL, 0, 0, PERF_COLUMN_BOOL},
    [I_NOTES]                    = {"notes", NULL, 0, 0, PERF_COLUMN_TEXT},
};

/* The cells of case c's result r (ceiling and ratios as the row says). */
static void row_cells(const ipc_options_t *o, const ipc_probe_t *p, const ipc_case_t *c, const ipc_result_t *r,
                      perf_cell_t *cells)
{
    const double weft = perf_gbps(r->bytes, r->weft_s), ceiling = perf_gbps(r->bytes, r->ceiling_s);
    const double nccl = perf_gbps(r->bytes, r->nccl_s), torch = perf_gbps(r->bytes, r->torch_s);
    const double push = perf_gbps(r->bytes, r->push_s), e2e = perf_gbps(r->bytes, r->weft_e2e_s);
    const double push_e2e = perf_gbps(r->bytes, r->push_e2e_s), switched = perf_gbps(r->bytes, r->switched_s);
    const int    x = c->cross;

    memset(cells, 0, I_COLUMNS * sizeof(*cells));
    cells[I_WORKLOAD].text = c->w->name;
    cells[I_PLACEMENT].text = x ? "cross_gpu" : "same_gpu";
    cells[I_SRC].i = c->src;
    cells[I_DST].i = c->dst;
    cells[I_PEER_ACCESS].u = x ? (uint64_t)(p->peer[0] && p->peer[1]) : 1;
    cells[I_ORDER].text = o->by_expert ? "expert" : "role";
    /* The transport's settings as the environment gives them ("" where
     * unset: the library's defaults, which `weft-perf info` lists). */
    cells[I_KERNEL_MAX].text = env_or_empty("WEFT_CUDA_IPC_KERNEL_MAX");
    cells[I_STREAMS].text = env_or_empty("WEFT_CUDA_IPC_STREAMS");
    cells[I_TENSORS].u = r->tensors;
    cells[I_RANGES].u = r->ranges;
    cells[I_UNCOALESCED].u = r->ranges_uncoalesced;
    cells[I_BYTES].u = r->bytes;
    cells[I_ITERATIONS].u = o->iters;
    cells[I_WARMUP].u = o->warmup;
    cells[I_WEFT_S].d = r->weft_s;
    cells[I_WEFT].d = weft;
    cells[I_PUSH].d = push;
    cells[I_CEILING].d = ceiling;
    cells[I_PEER_COPY].d = x ? ceiling : NAN;
    cells[I_D2D].d = x ? NAN : ceiling;
    cells[I_NCCL].d = nccl;
    cells[I_TORCH].d = torch;
    cells[I_TORCH_VERSION].text = r->torch_version;
    cells[I_TORCH_NOTE].text = r->torch_note;
    cells[I_R_CEILING].d = weft / ceiling;
    cells[I_RATIO_PEER_COPY].d = x ? weft / ceiling : NAN;
    cells[I_RATIO_D2D].d = x ? NAN : weft / ceiling;
    cells[I_R_PUSH].d = push / ceiling;
    cells[I_RATIO_NCCL].d = weft / nccl;
    cells[I_RATIO_TORCH].d = weft / torch;
    cells[I_WRONG] = (perf_cell_t){.u = r->wrong_bytes, .null = !r->verified};
    /* Same GPU: a D2D copy that, as the weft copy, waits for the GPU to
     * switch from the producer process's context. */
    cells[I_SWITCHED].d = x ? NAN : switched;
    cells[I_RATIO_SWITCHED].d = x ? NAN : weft / switched;
    cells[I_PUSH_S].d = r->push_s;
    cells[I_RATIO_PEER_COPY_PUSH].d = x ? push / ceiling : NAN;
    cells[I_RATIO_D2D_PUSH].d = x ? NAN : push / ceiling;
    cells[I_E2E_S].d = r->weft_e2e_s;
    cells[I_E2E].d = e2e;
    cells[I_RATIO_PEER_COPY_E2E].d = x ? e2e / ceiling : NAN;
    cells[I_RATIO_D2D_E2E].d = x ? NAN : e2e / ceiling;
    cells[I_PUSH_E2E_S].d = r->push_e2e_s;
    cells[I_PUSH_E2E].d = push_e2e;
    cells[I_RATIO_PEER_COPY_PUSH_E2E].d = x ? push_e2e / ceiling : NAN;
    cells[I_RATIO_D2D_PUSH_E2E].d = x ? NAN : push_e2e / ceiling;
    cells[I_PUSH_WRONG] = (perf_cell_t){.u = r->push_wrong_bytes, .null = !r->push_verified};
    cells[I_PUSH_OK] = (perf_cell_t){.u = (uint64_t)r->push_ok, .null = !r->push_measured};
    cells[I_OK].u = (uint64_t)r->ok;
    cells[I_NOTES].text = r->note;
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
    perf_columns_header(stdout, "", ipc_columns, I_COLUMNS);
    putchar('\n');
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

static void print_row(const ipc_options_t *o, const ipc_probe_t *p, const ipc_case_t *c, const ipc_result_t *r)
{
    const double ceiling = perf_gbps(r->bytes, r->ceiling_s);
    const double weft = perf_gbps(r->bytes, r->weft_s), switched = perf_gbps(r->bytes, r->switched_s);
    perf_cell_t  cells[I_COLUMNS];
    char         b[2][32];

    row_cells(o, p, c, r, cells);
    perf_columns_row(stdout, "", ipc_columns, I_COLUMNS, cells);
    printf("%s\n", r->ok ? "" : "  FAILED");
    printf("#   %s %s: %llu ranges before merging; torch: %s%s%s\n", c->w->name, c->cross ? "cross_gpu" : "same_gpu",
           (unsigned long long)r->ranges_uncoalesced, r->torch_note, r->note[0] ? "; " : "", r->note);
    print_push(c, r, ceiling);
    if (!c->cross) {
        printf("#   %s same_gpu: D2D copy right after another process's GPU work (a context switch): %s GB/s; "
               "weft = %s x that\n",
               c->w->name, perf_num(b[0], 32, switched, 1), perf_num(b[1], 32, weft / switched, 3));
    }
}

static void print_json(const ipc_options_t *o, const ipc_probe_t *p, const char *date, const ipc_case_t *c,
                       const ipc_result_t *r)
{
    perf_cell_t cells[I_COLUMNS];
    char        host[256];
    perf_json_t j;

    perf_host_name(host, sizeof(host));
    row_cells(o, p, c, r, cells);
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
    perf_columns_json(&j, "", ipc_columns, I_COLUMNS, cells);
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
                print_row(o, probe, &c, &r);
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
    ctx.runner.name = "weft-perf ipc";
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
    if (run_children(&ctx, "GPU probe", ipc_probe_main, NULL, NULL, 120) != 0 || !ctx.sh->probe.done) {
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

