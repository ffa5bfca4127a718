/*
 * weft-perf update: the main job. A trainer process keeps FP32 masters and
 * AdamW state of MoE expert weights (every expert's gate_up_proj and
 * down_proj) and takes real optimizer steps on deterministic gradients with
 * libweft's optimizer (optim.h); its FP8 writer puts W, WT and block scales
 * of each updated matrix straight into the registry version being written.
 * Consumer processes, laid out like an SGLang engine (fused w13/w2 tensors,
 * one view per expert), receive every version and verify every byte
 * (update_consumer.c). Two placements:
 *  - host: the optimizer on the host's threads, a host-memory registry, the
 *    host transport;
 *  - GPU (a GPU present, or --device cuda): masters and state in pinned
 *    host memory streamed through the optimizer's GPU slots, gradients on
 *    the GPU, the writer quantizing from the slot into a GPU registry and
 *    summing what it wrote there; engines colocated on the same GPU receive
 *    through cuda_ipc. fork() after CUDA is initialized is broken, so here
 *    the GPU is probed in a child and the engines are forked before this
 *    process touches CUDA.
 * Reports the step, bytes, bandwidth and publish latency.
 */
#include "config.h"

#include "lib/args.h"
#include "lib/baseline.h"
#include "lib/columns.h"
#include "lib/copy_ceiling.h"
#include "lib/gpu_mem.h"
#include "lib/json.h"
#include "lib/peer.h"
#include "lib/proc.h"
#include "lib/stats.h"
#include "lib/sysinfo.h"
#include "perf.h"
#include "update.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif



/*
 * Where engines come from. On the host this process forks them. On a GPU
 * it may not once CUDA is initialized in it, so to start an engine again
 * (--kill-engine) a nursery forked at the start, free of CUDA, forks it on
 * request (the engine's id through a pipe). The nursery exits when the
 * pipe closes, after its engines: 0 when each of them exited 0.
 */
static int nursery_main(int fd, const char *name, const update_options_t *o, update_shared_t *shared)
{
    perf_children_t engines = {0};
    int             id, failed = 0, code;

    while (read(fd, &id, sizeof(id)) == (ssize_t)sizeof(id)) {
        pid_t pid = perf_fork(&engines);
        if (pid == 0) {
            _exit(update_consumer_main(name, o, shared, id));
        }
        failed |= pid < 0;
    }
    while (engines.count > 0) {
        if (perf_wait_child(&engines, engines.pid[0], 600000, &code) != 0) {
            failed = 1;
            break;
        }
        failed |= !WIFEXITED(code) || WEXITSTATUS(code) != 0;
    }
    perf_kill_children(&engines);
    return failed;
}

static int nursery_start(perf_children_t *children, const char *name, const update_options_t *o,
                         update_shared_t *shared, int *request_fd)
{
    int   fds[2];
    pid_t pid;

    if (pipe(fds) != 0) {
        perror("weft-perf update: pipe");
        return -1;
    }
    pid = perf_fork(children);
    if (pid == 0) {
        close(fds[1]);
        _exit(nursery_main(fds[0], name, o, shared));
    }
    close(fds[0]);
    if (pid < 0) {
        close(fds[1]);
        return -1;
    }
    *request_fd = fds[1];
    return 0;
}

/* Engine 0 again: forked here on the host, by the nursery on a GPU. */
static int engine_restart(perf_children_t *children, const char *name, const update_options_t *o,
                          update_shared_t *shared, int nursery_fd, pid_t *engine0)
{
    const int id = 0;
    pid_t     pid;

    if (o->gpu) {
        *engine0 = -1;
        return write(nursery_fd, &id, sizeof(id)) == (ssize_t)sizeof(id) ? 0 : -1;
    }
    pid = perf_fork(children);
    if (pid == 0) {
        _exit(update_consumer_main(name, o, shared, id));
    }
    *engine0 = pid;
    return pid > 0 ? 0 : -1;
}

/* Waits for engine 0 to die in version v's transfer (SIGKILL, as it
 * does to itself) and reaps it. */
static weft_status_t engine_died(perf_children_t *children, pid_t engine0, uint64_t v)
{
    int  code = 0;
    char how[64];

    if (engine0 <= 0 || perf_wait_child(children, engine0, 120000, &code) != 0) {
        fprintf(stderr, "weft-perf update: engine 0 did not die in version %llu\n", (unsigned long long)v);
        return WEFT_ERR_TIMEOUT;
    }
    if (!WIFSIGNALED(code) || WTERMSIG(code) != SIGKILL) {
        perf_describe_status(code, how, sizeof(how));
        fprintf(stderr, "weft-perf update: engine 0, meant to die in version %llu, %s\n", (unsigned long long)v,
                how);
        return WEFT_ERR_STATE;
    }
    return WEFT_OK;
}

/* Until `want` consumers are registered (60 s at most). */
static weft_status_t wait_registered(weft_registry_h reg, uint32_t want)
{
    const uint64_t        deadline = perf_now_ns() + 60000000000ull;
    weft_registry_stats_t stats;
    weft_status_t         status;

    while ((status = weft_registry_get_stats(reg, &stats)) == WEFT_OK && stats.consumers < want) {
        if (perf_now_ns() > deadline) {
            return WEFT_ERR_TIMEOUT;
        }
        perf_sleep_us(1000);
    }
    return status;
}

/* The PyTorch sequential path's medians (update_peer.py), NaN when it did
 * not run (note says why). */
typedef struct update_peer {
    double step_ms, quant_ms, ipc_ms, tail_ms, e2e_ms;
    char   note[256], torch[64];
} update_peer_t;

/* update_peer.py as a baseline (perf_baseline_run's arg): the run's
 * settings; the peer's stage medians beside the result. */
typedef struct peer_arg {
    const update_options_t *o;
    update_peer_t          *peer;
    perf_baseline_result_t *res;
} peer_arg_t;

/* One of the peer's lines, into arg (a peer_arg_t). */
static void update_peer_line(void *arg, const char *line)
{
    const peer_arg_t *a = arg;
    update_peer_t    *peer = a->peer;

    if (strstr(line, "\"error\"") != NULL) {
        snprintf(a->res->note, sizeof(a->res->note), "skipped: %.*s", (int)strcspn(line, "\n"), line);
        return;
    }
    peer->step_ms  = perf_json_find_number(line, "step_ms");
    peer->quant_ms = perf_json_find_number(line, "quant_ms");
    peer->ipc_ms   = perf_json_find_number(line, "ipc_ms");
    peer->tail_ms  = perf_json_find_number(line, "tail_ms");
    peer->e2e_ms   = perf_json_find_number(line, "e2e_ms");
    (void)perf_json_find_string(line, "torch", a->res->version, sizeof(a->res->version));
}

/* The peer on the run's settings: its end to end median a version is
 * the result's seconds. */
static int peer_measure(void *arg, perf_baseline_result_t *res)
{
    peer_arg_t             *a = arg;
    const update_options_t *o = a->o;
    int                     status = 0;

    a->res = res;
    snprintf(res->version, sizeof(res->version), "none");
    if (!o->peer) {
        snprintf(res->note, sizeof(res->note), "skipped (--no-peer)");
        return -1;
    }
    snprintf(res->setup, sizeof(res->setup),
             "CUDA_VISIBLE_DEVICES=%d python3 '%s' --layers %llu --experts %llu --hidden %llu --intermediate %llu "
             "--block %llu --versions %llu --warmup 2 --lr %g 2>&1",
             o->device, o->peer_script, (unsigned long long)o->layers, (unsigned long long)o->experts,
             (unsigned long long)o->hidden, (unsigned long long)o->intermediate, (unsigned long long)o->block,
             (unsigned long long)(o->versions - o->warmup), o->lr);
    snprintf(res->note, sizeof(res->note), "torch staged AdamW, compiled quantizer, per-tensor IPC via %s",
             o->peer_script);
    if (perf_peer_run(res->setup, update_peer_line, a, &status) != 0) {
        snprintf(res->note, sizeof(res->note), "skipped: cannot run python3");
        return -1;
    }
    if (status != 0 && isnan(a->peer->e2e_ms) && strncmp(res->note, "skipped", 7) != 0) {
        snprintf(res->note, sizeof(res->note), "skipped: python3 %s failed (is torch installed?)", o->peer_script);
    }
    res->seconds = a->peer->e2e_ms / 1e3;
    return isnan(res->seconds) ? -1 : 0;
}

static void run_peer(const update_options_t *o, update_peer_t *peer)
{
    const perf_baseline_t  torch = {"torch sequential path", peer_measure};
    peer_arg_t             arg = {o, peer, NULL};
    perf_baseline_result_t res;

    peer->step_ms = peer->quant_ms = peer->ipc_ms = peer->tail_ms = peer->e2e_ms = NAN;
    /* The --no-peer options may be all zeros: no version to size. */
    (void)perf_baseline_run(&torch, &arg, o->peer ? update_version_bytes(o) : 0, &res);
    perf_baseline_note_to(&res, peer->note, sizeof(peer->note));
    snprintf(peer->torch, sizeof(peer->torch), "%s", res.version);
}

/*
 * A preset's layers cut to the machine: what one layer costs on the GPU
 * (registry slots and every engine's copy of its FP8 version, two FP32
 * gradient sets) within 60 % of the GPU's free memory, and on the host
 * (pinned master and state; on the host placement also the gradient, the
 * registry's slots and every consumer's copy) within half its memory.
 */
static uint64_t fit_layers(const update_options_t *o, uint64_t gpu_free)
{
    update_options_t one = *o;
    uint64_t         version, params, gpu_layer, host_layer, host_total, fit;

    one.layers = 1;
    version    = update_version_bytes(&one);
    params     = o->experts * 3 * o->intermediate * o->hidden;
    host_total = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    if (o->gpu) {
        gpu_layer  = (o->slots + o->consumers) * version + 8 * params;
        host_layer = (o->optimizer == WEFT_OPTIM_MUON ? 8 : 12) * params;
        fit        = (uint64_t)(0.6 * (double)gpu_free) / gpu_layer;
    } else {
        host_layer = 16 * params + (o->slots + o->consumers) * version;
        fit        = o->model_layers;
    }
    if (host_total / 2 / host_layer < fit) {
        fit = host_total / 2 / host_layer;
    }
    fit = fit < o->model_layers ? fit : o->model_layers;
    fit = fit < UPDATE_MAX_LAYERS ? fit : UPDATE_MAX_LAYERS;
    return fit > 0 ? fit : 1;
}


/* The job's row: its table columns and --json fields, in one order (the
 * table's columns are the few a reader looks at first; the JSON has all). */
enum {
    R_MEMORY, R_OPTIMIZER, R_FORMAT, R_FORMULA, R_PUBLICATION, R_MODEL, R_OFFLOAD, R_HIDDEN, R_INTERMEDIATE, R_PINNED,
    R_OPTIM_GPU, R_MEM_SOURCE, R_ENGINE_DEVICE, R_TRAINER_PEAK, R_ENGINE_PEAK, R_LAYERS, R_EXPERTS,
    R_PARAMETERS, R_TENSORS, R_BYTES, R_VERSIONS, R_TIMED, R_CONSUMERS, R_GRAD, R_STEP, R_QUANT, R_CHECKSUM,
    R_ADAMW_GBPS, R_PCIE, R_FINISH, R_ENGINE_COPY, R_PUBLISH, R_WAKE_P50, R_WAKE_MAX, R_ACKED, R_DELIVERED,
    R_VERIFY, R_WRONG_TENSORS, R_CEILING, R_RATIO_CEILING, R_E2E, R_E2E_RATIO, R_REBINDS, R_MOVED, R_REBIND,
    R_REBIND_FRACTION, R_REALLOC, R_REALLOC_FRACTION, R_TAIL, R_TORCH_STEP, R_TORCH_QUANT, R_TORCH_IPC,
    R_TORCH_TAIL, R_TORCH_E2E, R_TORCH, R_TAIL_RATIO, R_SPEEDUP, R_KILLS, R_ENGINE0_VERSIONS, R_ENGINE0_FIRST,
    R_WRONG_BYTES, R_SAMPLED, R_WRONG_SAMPLED, R_COLUMNS
};

static const perf_column_t run_columns[R_COLUMNS] = {
    [R_MEMORY]           = {"memory", NULL, 0, 0, PERF_COLUMN_TEXT},
    [R_OPTIMIZER]        = {"optimizer", NULL, 0, 0, PERF_COLUMN_TEXT},
    [R_FORMAT]           = {"format", NULL, 0, 0, PERF_COLUMN_TEXT},
    [R_FORMULA]          = {"formula", NULL, 0, 0, PERF_COLUMN_TEXT},
    [R_PUBLICATION]      = {"publication", NULL, 0, 0, PERF_COLUMN_TEXT},
    [R_MODEL]            = {"model", NULL, 0, 0, PERF_COLUMN_TEXT},
    [R_OFFLOAD]          = {"offload", NULL, 0, 0, PERF_COLUMN_BOOL},
    [R_HIDDEN]           = {"hidden", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_INTERMEDIATE]     = {"intermediate", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_PINNED]           = {"pinned_host_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_OPTIM_GPU]        = {"optimizer_gpu_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_MEM_SOURCE]       = {"gpu_memory_source", NULL, 0, 0, PERF_COLUMN_TEXT},
    [R_ENGINE_DEVICE]    = {"engine_device", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_TRAINER_PEAK]     = {"trainer_gpu_peak_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_ENGINE_PEAK]      = {"engine_gpu_peak_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_LAYERS]           = {"layers", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_EXPERTS]          = {"experts", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_PARAMETERS]       = {"parameters", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_TENSORS]          = {"tensors", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_BYTES]            = {"bytes_per_version", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_VERSIONS]         = {"versions", "versions", 10, 0, PERF_COLUMN_UINT},
    [R_TIMED]            = {"timed_versions", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_CONSUMERS]        = {"consumers", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_GRAD]             = {"grad_fill_ms_per_version", "grad_ms", 10, 1, PERF_COLUMN_DOUBLE},
    [R_STEP]             = {"step_ms_per_version", "step_ms", 10, 1, PERF_COLUMN_DOUBLE},
    [R_QUANT]            = {"quant_ms_per_version", "quant_ms", 10, 1, PERF_COLUMN_DOUBLE},
    [R_CHECKSUM]         = {"checksum_ms_per_version", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_ADAMW_GBPS]       = {"adamw_gb_per_s", "adamw_GB/s", 12, 2, PERF_COLUMN_DOUBLE},
    [R_PCIE]             = {"pcie_each_way_gb_per_s", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_FINISH]           = {"finish_ms_per_version", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_ENGINE_COPY]      = {"engine_copy_ms_per_version", NULL, 0, 2, PERF_COLUMN_DOUBLE},
    [R_PUBLISH]          = {"publish_call_us", "publish_us", 12, 2, PERF_COLUMN_DOUBLE},
    [R_WAKE_P50]         = {"publish_to_wake_p50_us", "wake_p50_us", 14, 1, PERF_COLUMN_DOUBLE},
    [R_WAKE_MAX]         = {"publish_to_wake_max_us", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_ACKED]            = {"publish_to_all_acked_ms", "all_acked_ms", 16, 1, PERF_COLUMN_DOUBLE},
    [R_DELIVERED]        = {"delivered_gb_per_s", "delivered_GB/s", 14, 2, PERF_COLUMN_DOUBLE},
    [R_VERIFY]           = {"verify_ms_per_version", "verify_ms", 10, 1, PERF_COLUMN_DOUBLE},
    [R_WRONG_TENSORS]    = {"wrong_tensors", "wrong_tensors", 14, 0, PERF_COLUMN_UINT},
    [R_CEILING]          = {"copy_ceiling_gbps", NULL, 0, 2, PERF_COLUMN_DOUBLE},
    [R_RATIO_CEILING]    = {"ratio_copy_ceiling", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [R_E2E]              = {"e2e_ms_per_version", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_E2E_RATIO]        = {"e2e_ratio_step", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [R_REBINDS]          = {"rebinds", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_MOVED]            = {"rebinds_moved", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_REBIND]           = {"rebind_ms", NULL, 0, 2, PERF_COLUMN_DOUBLE},
    [R_REBIND_FRACTION]  = {"rebind_fraction", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [R_REALLOC]          = {"realloc_ms", NULL, 0, 2, PERF_COLUMN_DOUBLE},
    [R_REALLOC_FRACTION] = {"realloc_fraction", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [R_TAIL]             = {"tail_ms_per_version", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_TORCH_STEP]       = {"torch_step_ms", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_TORCH_QUANT]      = {"torch_quant_ms", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_TORCH_IPC]        = {"torch_ipc_ms", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_TORCH_TAIL]       = {"torch_tail_ms", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_TORCH_E2E]        = {"torch_e2e_ms", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [R_TORCH]            = {"torch", NULL, 0, 0, PERF_COLUMN_TEXT},
    [R_TAIL_RATIO]       = {"tail_ratio_torch_sequential", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [R_SPEEDUP]          = {"speedup_torch_sequential", NULL, 0, 2, PERF_COLUMN_DOUBLE},
    [R_KILLS]            = {"engine_kills", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_ENGINE0_VERSIONS] = {"engine0_versions", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_ENGINE0_FIRST]    = {"engine0_first_version_after_restart", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_WRONG_BYTES]      = {"wrong_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_SAMPLED]          = {"sampled_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [R_WRONG_SAMPLED]    = {"wrong_sampled_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
};

int perf_cmd_update(int argc, char **argv)
{
    update_options_t      o;
    update_shared_t      *shared;
    size_t                shared_bytes;
    perf_children_t       children = {0};
    weft_registry_h       reg = NULL;
    weft_registry_stats_t stats;
    weft_status_t         status;
    update_trainer_t      trainer;
    int                   have_trainer = 0;
    char                  name[64];
    update_phase_t       *phases = NULL; /* each version's, for --plot */
    uint64_t             *wake = NULL, step_ns = 0, grad_ns = 0, publish_call_ns = 0, ack_ns = 0, start, wrong = 0;
    uint64_t              verify_ns = 0, verified_versions = 0, published = 0, finish_ns = 0, copy_ns = 0;
    uint64_t              wrong_sampled = 0, wrong_bytes = 0, sampled_bytes = 0, gpu_free = 0, rebind_ns = 0;
    uint64_t              realloc_ns = 0, engine_gpu_peak = 0, trainer_gpu_peak = 0;
    gpu_mem_watch_t      *mem_watch[2] = {NULL, NULL}; /* the trainer's GPU, the engines' (when another) */
    char                  mem_why[128] = "not on a GPU";
    uint64_t              rebinds = 0, moved = 0, timed_from = 1, timed_rebinds = 0;
    update_peer_t         peer;
    pid_t                 engine0 = -1;
    int                   nursery_fd = -1;
    uint64_t              kills = 0;
    size_t                nwake = 0;
    perf_latency_t        lat;
    weft_optim_info_t     oinfo = {0};
    int                   rc = 0;

    rc = update_parse(argc, argv, &o);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    const int placement_asked = o.gpu; /* 0 host, 1 cuda, -1 auto */
    if (o.gpu != 0) {
        const int gpus = update_gpu_probe(&children, o.device, &gpu_free);
        if (o.gpu == 1 && gpus <= o.device) {
            fprintf(stderr, "weft-perf update: --device cuda: no GPU %d (%d found%s)\n", o.device, gpus,
#ifdef HAVE_CUDA
                    ""
#else
                    ", not built with CUDA"
#endif
            );
            return 1;
        }
        o.gpu = gpus > o.device;
        if (o.gpu && gpus <= o.engine_device) {
            fprintf(stderr, "weft-perf update: --engine-gpu %d: no such GPU (%d found)\n", o.engine_device, gpus);
            return 77;
        }
    }
    if (o.engine_device != o.device && !o.gpu) {
        fprintf(stderr, "weft-perf update: --engine-gpu %d: %s\n", o.engine_device,
                placement_asked == 0 ? "engines on a GPU need --device cuda" : "no GPU here");
        return placement_asked == 0 ? 2 : 77;
    }
    if (o.offload && !o.gpu) {
        fprintf(stderr, "weft-perf update: --offload is for engines on a GPU\n");
        return 2;
    }
    if (o.whole_versions < 0) {
        o.whole_versions = 0;
    }
    if (o.warmup == UINT64_MAX) {
        o.warmup = o.gpu ? o.slots : 0;
        if (o.versions_given && o.warmup >= o.versions) {
            o.warmup = o.versions - 1; /* a short run still times its last version */
        }
    }
    if (!o.versions_given) {
        o.versions = o.warmup + 5;
    }
    if (o.layers == 0) {
        o.layers = fit_layers(&o, gpu_free);
    }
    shared_bytes = update_shared_bytes(&o);
    shared = mmap(NULL, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    wake = calloc(o.versions * o.consumers, sizeof(*wake));
    phases = calloc(o.versions, sizeof(*phases));
    timed_from = o.warmup + 1;
    if (shared == MAP_FAILED || wake == NULL || phases == NULL || perf_catch_interrupts() != 0) {
        fprintf(stderr, "weft-perf update: out of memory\n");
        return 1;
    }
    snprintf(name, sizeof(name), "weft-perf-update-%d", (int)getpid());
    /* On a GPU the engines go first: they must be forked before this
     * process initializes CUDA, and they open the registry once it is
     * there. */
    if (!o.gpu) {
        status = update_registry_create(name, &o, WEFT_MEMORY_HOST, &reg);
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf update: registry: %s (is /dev/shm large enough?)\n",
                    weft_status_string(status));
            return 1;
        }
    }
    for (uint64_t c = 0; c < o.consumers; c++) {
        pid_t pid = perf_fork(&children);
        if (pid == 0) {
            if (o.kill_trainer_at != 0) {
                perf_outlive_parent(); /* an engine keeps what it has when the trainer dies */
            }
            _exit(update_consumer_main(name, &o, shared, (int)c));
        }
        if (pid < 0) {
            rc = 1;
            goto out;
        }
        if (c == 0) {
            engine0 = pid;
        }
        shared->consumer[c].pid = pid;
    }
    if (o.kill_trainer_at != 0) {
        const pid_t trainer_pid = getpid();
        pid_t       pid = perf_fork(&children);
        if (pid == 0) {
            perf_outlive_parent();
            _exit(update_witness_main(name, &o, shared, trainer_pid));
        }
        if (pid < 0) {
            rc = 1;
            goto out;
        }
    }
    if (o.gpu && o.kill_engine_at != 0 && nursery_start(&children, name, &o, shared, &nursery_fd) != 0) {
        rc = 1;
        goto out;
    }

    if (o.gpu) {
        status = update_registry_create(name, &o, WEFT_MEMORY_CUDA, &reg);
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf update: GPU registry: %s\n", weft_status_string(status));
            rc = 1;
            goto out;
        }
        /* Every process's footprint on the GPUs, sampled from now on (the
         * engines' tensors, allocated before, are in their first sample). */
        mem_watch[0] = gpu_mem_watch_start(o.device, 5, mem_why, sizeof(mem_why));
        if (mem_watch[0] != NULL && o.engine_device != o.device) {
            mem_watch[1] = gpu_mem_watch_start(o.engine_device, 5, mem_why, sizeof(mem_why));
        }
    }
    status = update_trainer_create(&trainer, &o, reg, shared);
    have_trainer = 1;
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf update: optimizer: %s\n", weft_status_string(status));
        rc = 1;
        goto out;
    }
    weft_optim_get_info(trainer.opt, &oinfo);
    start = perf_now_ns();
    for (uint64_t v = 1; v <= o.versions && !perf_interrupted; v++) {
        weft_optim_step_params_t sp = {.field_mask = WEFT_OPTIM_STEP_FIELD_WRITER, .writer = update_write_and_sum,
                                       .writer_arg = &trainer};
        uint32_t                 lagging = 0;
        uint64_t                 t0 = perf_now_ns(), tg, t1, tf, t2, grad_offset = 0;

        for (uint32_t g = 0; g < trainer.groups; g++) {
            const tensor_kind_t *kw = &trainer.kinds[3 * (g % UPDATE_PROJS)];
            const uint64_t       n = o.experts * kw->rows * kw->cols;
            if (o.gpu) {
                /* Odd steps take the first set, even ones the second. */
                trainer.grads[g].data = (float *)trainer.dev_grads[(v - 1) % 2] + grad_offset;
                grad_offset += n;
            } else {
                update_grad_fill((float *)trainer.grads[g].data, n, kw->cols, v, g);
            }
        }
        if (o.gpu) {
            sp.field_mask |= WEFT_OPTIM_STEP_FIELD_STREAM;
            sp.stream = trainer.stream;
        }
        if (v == timed_from) {
            trainer.quant_ns = trainer.sum_ns = 0; /* the warm-up's are not counted */
        }
        tg = perf_now_ns();
        /* One optimizer step; its writer quantizes each updated matrix
         * straight into the slot being written. */
        trainer.checksums = update_checksums(shared, &o, v);
        trainer.samples   = update_samples(shared, &o, v);
        trainer.version = v;
        trainer.units = 0;
        trainer.nstreams = 0;
        memset(trainer.layer_units, 0, sizeof(trainer.layer_units));
        status = weft_registry_write_begin(reg, 60000000, NULL);
        if (status == WEFT_OK) {
            status = weft_optim_step(trainer.opt, trainer.grads, trainer.groups, &sp);
        }
        if (status == WEFT_OK && o.gpu) {
            status = update_trainer_gpu_wait(&trainer);
        }
        t1 = perf_now_ns();
        if (status == WEFT_OK && o.gpu) {
            status = update_trainer_gpu_finish(&trainer);
        }
        tf = perf_now_ns();
        shared->publish_ns[v] = tf;
        if (status == WEFT_OK) {
            status = weft_registry_publish(reg, v, NULL);
        }
        t2 = perf_now_ns();
        if (status == WEFT_OK && v == o.kill_engine_at) {
            /* Engine 0 dies in this version's transfer; reaped, it is
             * gone for the registry too, and the others go on. */
            status = engine_died(&children, engine0, v);
            kills += status == WEFT_OK;
        }
        if (status == WEFT_OK) {
            /* Consumers register as they start: wait for all of them once. */
            while (v == 1 && weft_registry_get_stats(reg, &stats) == WEFT_OK && stats.consumers < o.consumers &&
                   perf_now_ns() - t2 < 60000000000ull) {
                perf_sleep_us(1000);
            }
            status = weft_registry_wait_consumers(reg, v, 120000000, &lagging);
        }
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf update: version %llu: %s (%u consumers behind)\n", (unsigned long long)v,
                    weft_status_string(status), lagging);
            rc = 1;
            goto out;
        }
        published = v;
        phases[v - 1] = (update_phase_t){{tg - t0, t1 - tg, tf - t1, t2 - tf, perf_now_ns() - t2}};
        if (!o.json && !o.quiet) {
            fprintf(stderr, "weft-perf update: version %llu of %llu%s: step %.1f ms; every consumer had it %.1f ms "
                            "after the publish\n",
                    (unsigned long long)v, (unsigned long long)o.versions, v < timed_from ? " (warm-up)" : "",
                    (double)(t1 - tg) / 1e6, (double)(perf_now_ns() - t2) / 1e6);
        }
        if (v == o.kill_engine_at && v < o.versions) {
            /* Engine 0 again, joining at the next version: registered
             * before that version is published, so that it gets it. */
            shared->consumer[0].incarnation++;
            shared->consumer[0].join_after    = v;
            shared->consumer[0].first_version = 0;
            if (engine_restart(&children, name, &o, shared, nursery_fd, &engine0) != 0 ||
                wait_registered(reg, (uint32_t)o.consumers) != WEFT_OK) {
                fprintf(stderr, "weft-perf update: engine 0 did not come back after version %llu\n",
                        (unsigned long long)v);
                rc = 1;
                goto out;
            }
        }
        if (v >= timed_from) {
            grad_ns += tg - t0;
            step_ns += t1 - tg;
            finish_ns += tf - t1;
            publish_call_ns += t2 - tf;
            ack_ns += perf_now_ns() - t2;
        }
    }
    if (published < o.versions) {
        /* Interrupted: the consumers wait for versions that will not come. */
        perf_kill_children(&children);
        fprintf(stderr, "weft-perf update: interrupted after %llu versions\n", (unsigned long long)published);
        rc = perf_interrupted ? 128 + (int)perf_interrupted : 1;
    }
    if (nursery_fd >= 0) {
        close(nursery_fd); /* the nursery exits after its engines */
        nursery_fd = -1;
    }
    for (int i = children.count - 1; i >= 0 && published == o.versions; i--) {
        int status_code, done = perf_wait_child(&children, children.pid[i], 120000, &status_code);
        if (done != 0 || !WIFEXITED(status_code) || WEXITSTATUS(status_code) != 0) {
            fprintf(stderr, "weft-perf update: a consumer failed\n");
            rc = 1;
        }
    }
    if (published == 0) {
        goto out;
    }
    trainer_gpu_peak = gpu_mem_watch_peak(mem_watch[0], getpid());
    for (uint64_t c = 0; c < o.consumers; c++) {
        const uint64_t peak = gpu_mem_watch_peak(mem_watch[1] != NULL ? mem_watch[1] : mem_watch[0],
                                                 shared->consumer[c].pid);
        engine_gpu_peak = peak > engine_gpu_peak ? peak : engine_gpu_peak;
        wrong += shared->consumer[c].wrong_tensors;
        wrong_sampled += shared->consumer[c].wrong_sampled_bytes;
        wrong_bytes += shared->consumer[c].wrong_bytes;
        sampled_bytes += shared->consumer[c].sampled_bytes;
        copy_ns += shared->consumer[c].copy_ns;
        rebind_ns += shared->consumer[c].rebind_ns;
        realloc_ns += shared->consumer[c].realloc_ns;
        rebinds += shared->consumer[c].rebinds;
        timed_rebinds += shared->consumer[c].timed_rebinds;
        moved += shared->consumer[c].moved;
        verify_ns += shared->consumer[c].verify_ns;
        verified_versions += shared->consumer[c].timed;
        for (uint64_t v = timed_from; v <= published; v++) {
            if (shared->consumer[c].wake_ns[v] >= shared->publish_ns[v] && shared->publish_ns[v] != 0) {
                wake[nwake++] = shared->consumer[c].wake_ns[v] - shared->publish_ns[v];
            }
        }
    }
    if (o.gpu && published == o.versions) {
        run_peer(&o, &peer);
    } else {
        run_peer(&(update_options_t){.peer = 0}, &peer);
    }
    perf_latency_summarize(wake, nwake, &lat);
    weft_registry_get_stats(reg, &stats);
    {
        /* Per version: over the versions after the warm-up. */
        const double n = published >= timed_from ? (double)(published - timed_from + 1) : 1.0;
        double bytes = (double)stats.slot_bytes, seconds = (double)(perf_now_ns() - start) / 1e9;
        double delivered_gbps = bytes * (double)o.consumers * n / ((double)ack_ns / 1e9) / 1e9;
        /* The host's ceiling for what the consumers did at once: each
         * copied the version out of shared memory, so memcpy of version x
         * consumers bytes on as many threads (the CPUs at most), measured
         * now, after the job (at most 1 GiB: enough for the bandwidth). On
         * a GPU the peer is PyTorch's path (below). */
        double   ceiling_gbps = NAN;
        uint64_t ceiling_bytes = (uint64_t)(bytes * (double)o.consumers);
        uint32_t ceiling_threads = (uint32_t)o.consumers;
        if (!o.gpu && published >= timed_from && !perf_interrupted) {
            const long              cpus = sysconf(_SC_NPROCESSORS_ONLN);
            perf_copy_ceiling_arg_t arg;
            perf_baseline_result_t  ceiling;

            ceiling_bytes = ceiling_bytes < (UINT64_C(1) << 30) ? ceiling_bytes : (UINT64_C(1) << 30);
            ceiling_threads = cpus > 0 && ceiling_threads > (uint32_t)cpus ? (uint32_t)cpus : ceiling_threads;
            arg = (perf_copy_ceiling_arg_t){ceiling_threads, 5};
            if (perf_baseline_run(&perf_copy_ceiling_baseline, &arg, ceiling_bytes, &ceiling) == 0) {
                ceiling_gbps = ceiling.gbps; /* NaN where it could not run (its note said why) */
            }
        }
        double verify_ms = verified_versions ? (double)verify_ns / 1e6 / (double)verified_versions : 0;
        /* What an AdamW step must move through memory at least: master, m
         * and v read and written, the gradient read (28 B a parameter).
         * Muon's step is its Newton-Schulz products: no such figure. */
        double step_gbps = o.optimizer == WEFT_OPTIM_MUON || o.gpu
                               ? NAN
                               : 28.0 * (double)oinfo.parameters /
                                     ((double)(step_ns - trainer.quant_ns - trainer.sum_ns) / n / 1e9) / 1e9;
        /* On a GPU the writer's work runs inside the step, on the GPU: the
         * host's time in it is only enqueueing. What the staged step moves
         * over PCIe each way: master and state (AdamW 12 B, Muon 8 B). */
        double quant_ms = o.gpu ? NAN : (double)trainer.quant_ns / 1e6 / n;
        double pcie_gbps = o.gpu ? (o.optimizer == WEFT_OPTIM_MUON ? 8.0 : 12.0) * (double)oinfo.parameters /
                                       ((double)step_ns / n / 1e9) / 1e9
                                 : NAN;
        double e2e_ms = (double)(step_ns + finish_ns + publish_call_ns + ack_ns) / 1e6 / n;
        /* NVML lists processes by their pid in its own namespace: in a
         * container it may list none of ours. */
        const char *mem_source = mem_watch[0] == NULL ? mem_why
                                 : trainer_gpu_peak != 0 || engine_gpu_peak != 0
                                     ? "nvml"
                                     : "nvml listed none of this run's processes (another PID namespace?)";
        /* An engine's rebinding happens after it acknowledged, outside
         * e2e: as a fraction of it, what offloading adds to a version. */
        double rebind_ms = timed_rebinds ? (double)rebind_ns / 1e6 / (double)timed_rebinds : NAN;
        /* The engine's own cudaMalloc of its new tensors, apart: an engine
         * that takes its memory back pays it with any transport. */
        double realloc_ms = timed_rebinds ? (double)realloc_ns / 1e6 / (double)timed_rebinds : NAN;
        /* The tail: the last optimizer write (the step's end) to every
         * engine acknowledged. Streaming, the engines have copied every
         * layer but the last by then. */
        double tail_ms = (double)(finish_ns + publish_call_ns + ack_ns) / 1e6 / n;
        const double step_ms = (double)step_ns / 1e6 / n;
        perf_cell_t  cells[R_COLUMNS] = {
            [R_MEMORY] = {.text = o.gpu ? "cuda" : "host"},
            [R_OPTIMIZER] = {.text = o.optimizer == WEFT_OPTIM_MUON ? "muon" : "adamw"},
            [R_FORMAT] = {.text = "fp8"},
            [R_FORMULA] = {.text = weft_quant_formula_name(o.formula)},
            [R_PUBLICATION] = {.text = o.whole_versions ? "whole" : "per-layer"},
            [R_MODEL] = {.text = o.model != NULL ? o.model : "default"},
            [R_OFFLOAD] = {.u = (uint64_t)o.offload},
            [R_HIDDEN] = {.u = o.hidden},
            [R_INTERMEDIATE] = {.u = o.intermediate},
            [R_PINNED] = {.u = o.gpu ? oinfo.host_bytes : 0},
            [R_OPTIM_GPU] = {.u = oinfo.device_bytes},
            [R_MEM_SOURCE] = {.text = mem_source},
            [R_ENGINE_DEVICE] = {.u = o.gpu ? (uint64_t)o.engine_device : 0},
            /* null when not measured */
            [R_TRAINER_PEAK] = {.u = trainer_gpu_peak, .null = trainer_gpu_peak == 0},
            [R_ENGINE_PEAK] = {.u = engine_gpu_peak, .null = engine_gpu_peak == 0},
            [R_LAYERS] = {.u = o.layers},
            [R_EXPERTS] = {.u = o.experts},
            [R_PARAMETERS] = {.u = oinfo.parameters},
            [R_TENSORS] = {.u = stats.tensor_count},
            [R_BYTES] = {.u = stats.slot_bytes},
            [R_VERSIONS] = {.u = published},
            [R_TIMED] = {.u = published >= timed_from ? published - timed_from + 1 : 0},
            [R_CONSUMERS] = {.u = o.consumers},
            [R_GRAD] = {.d = (double)grad_ns / 1e6 / n},
            [R_STEP] = {.d = step_ms},
            [R_QUANT] = {.d = quant_ms},
            [R_CHECKSUM] = {.d = (double)trainer.sum_ns / 1e6 / n},
            [R_ADAMW_GBPS] = {.d = step_gbps},
            [R_PCIE] = {.d = pcie_gbps},
            [R_FINISH] = {.d = (double)finish_ns / 1e6 / n},
            [R_ENGINE_COPY] = {.d = verified_versions ? (double)copy_ns / 1e6 / (double)verified_versions : NAN},
            [R_PUBLISH] = {.d = (double)publish_call_ns / 1e3 / n},
            [R_WAKE_P50] = {.d = lat.p50_us},
            [R_WAKE_MAX] = {.d = lat.max_us},
            [R_ACKED] = {.d = (double)ack_ns / 1e6 / n},
            [R_DELIVERED] = {.d = delivered_gbps},
            [R_VERIFY] = {.d = verify_ms},
            [R_WRONG_TENSORS] = {.u = wrong},
            [R_CEILING] = {.d = ceiling_gbps},
            [R_RATIO_CEILING] = {.d = delivered_gbps / ceiling_gbps},
            [R_E2E] = {.d = e2e_ms},
            [R_E2E_RATIO] = {.d = e2e_ms / step_ms},
            [R_REBINDS] = {.u = rebinds},
            [R_MOVED] = {.u = moved},
            [R_REBIND] = {.d = rebind_ms},
            [R_REBIND_FRACTION] = {.d = rebind_ms / e2e_ms},
            [R_REALLOC] = {.d = realloc_ms},
            [R_REALLOC_FRACTION] = {.d = realloc_ms / e2e_ms},
            [R_TAIL] = {.d = tail_ms},
            [R_TORCH_STEP] = {.d = peer.step_ms},
            [R_TORCH_QUANT] = {.d = peer.quant_ms},
            [R_TORCH_IPC] = {.d = peer.ipc_ms},
            [R_TORCH_TAIL] = {.d = peer.tail_ms},
            [R_TORCH_E2E] = {.d = peer.e2e_ms},
            [R_TORCH] = {.text = peer.torch},
            [R_TAIL_RATIO] = {.d = tail_ms / peer.tail_ms},
            [R_SPEEDUP] = {.d = peer.e2e_ms / e2e_ms},
            [R_KILLS] = {.u = kills},
            [R_ENGINE0_VERSIONS] = {.u = shared->consumer[0].versions},
            [R_ENGINE0_FIRST] = {.u = kills ? shared->consumer[0].first_version : 0},
            /* The key: the bytes of every tensor found wrong, over
             * all versions and engines (0: every check passed). */
            [R_WRONG_BYTES] = {.u = wrong_bytes},
            [R_SAMPLED] = {.u = sampled_bytes},
            [R_WRONG_SAMPLED] = {.u = wrong_sampled},
        };

        if (o.json) {
            perf_json_t j;

            perf_json_begin(&j, stdout);
            perf_json_str(&j, "command", "update");
            perf_columns_json(&j, "", run_columns, R_COLUMNS, cells);
            perf_json_end(&j);
        } else {
            printf("# weft-perf update: libweft %s, %s, %llu layers x %llu experts%s%s, H=%llu I=%llu, "
                   "block %llu, the %s FP8 formula\n",
                   weft_version(), o.gpu ? "GPU (staged optimizer, GPU registry, cuda_ipc engines)" : "host memory",
                   (unsigned long long)o.layers, (unsigned long long)o.experts, o.model != NULL ? " of " : "",
                   o.model != NULL ? o.model : "",
                   (unsigned long long)o.hidden, (unsigned long long)o.intermediate, (unsigned long long)o.block,
                   weft_quant_formula_name(o.formula));
            printf("# %u tensors (W, WT, scale_inv of gate_up_proj and down_proj), %.1f MB a version, %llu "
                   "slots, %llu consumers\n",
                   stats.tensor_count, bytes / 1e6, (unsigned long long)o.slots, (unsigned long long)o.consumers);
            printf("# trainer: %s (lr %g, wd 0.01) on %.1f M FP32 masters, %.2f GB of master and state, %u threads;\n"
                   "# its FP8 writer fills the slot; consumers check every tensor's checksum\n",
                   o.optimizer == WEFT_OPTIM_MUON ? "Muon (momentum 0.95, Nesterov, 5 NS steps in FP32)"
                                                  : "AdamW (betas 0.9/0.999)",
                   o.lr, (double)oinfo.parameters / 1e6, (double)oinfo.host_bytes / 1e9,
                   o.threads ? (unsigned)o.threads : (unsigned)sysconf(_SC_NPROCESSORS_ONLN));
            printf("# %s\n", o.whole_versions ? "versions published whole: consumers copy a version once it is "
                                                 "published"
                                               : "streaming: each layer announced once written, consumers copy it "
                                                 "then, before the publish");
            if (timed_from > 1) {
                printf("# times a version: the mean over versions %llu to %llu (the first %llu are the warm-up)\n",
                       (unsigned long long)timed_from, (unsigned long long)published,
                       (unsigned long long)(timed_from - 1));
            }
            perf_columns_header(stdout, "", run_columns, R_COLUMNS);
            putchar('\n');
            perf_columns_row(stdout, "", run_columns, R_COLUMNS, cells);
            putchar('\n');
            printf("# grad: deterministic gradients made; step: weft_optim_step with the writer, of which quant:\n"
                   "# the FP8 writer (and %.1f ms checksums); adamw_GB/s: 28 B a parameter over the rest of the\n"
                   "# step; publish_us: the publish call; wake: publish to a waiting consumer's wake-up;\n"
                   "# all_acked: publish to every consumer holding the version (copied; verified after);\n"
                   "# delivered: bytes x consumers / all_acked; verify: a consumer's checksums of its %.2f GB.\n"
                   "# %.1f s in all.\n",
                   (double)trainer.sum_ns / 1e6 / n, bytes / 1e9, seconds);
            if (!isnan(ceiling_gbps)) {
                printf("# copy ceiling (this run, after the job): %.2f GB/s, memcpy of %.0f MB on %u threads, what\n"
                       "# the consumers copied at once; delivered %.3f of it\n",
                       ceiling_gbps, (double)ceiling_bytes / 1e6, ceiling_threads, delivered_gbps / ceiling_gbps);
            }
            if (o.gpu) {
                printf("# GPU: the step moves %.1f GB/s each way over PCIe; its writer's work and checksums run\n"
                       "# in the step; then %.1f ms to bring checksums and samples home; an engine's cuda_ipc copy\n"
                       "# %.2f ms; engines verify before they acknowledge (all_acked includes it): %llu sampled\n"
                       "# bytes compared, %llu wrong; gradients ready to every engine acknowledged: %.1f ms\n",
                       pcie_gbps, (double)finish_ns / 1e6 / n,
                       verified_versions ? (double)copy_ns / 1e6 / (double)verified_versions : NAN,
                       (unsigned long long)sampled_bytes, (unsigned long long)wrong_sampled, e2e_ms);
                printf("# pinned host memory %.2f GB; the optimizer's GPU memory %.2f GB\n",
                       (double)oinfo.host_bytes / 1e9, (double)oinfo.device_bytes / 1e9);
                if (trainer_gpu_peak != 0 || engine_gpu_peak != 0) {
                    printf("# GPU memory high-water (NVML, each process's whole footprint): trainer %.2f GB,\n"
                           "# the largest engine's %.2f GB (GPU %d)\n",
                           (double)trainer_gpu_peak / 1e9, (double)engine_gpu_peak / 1e9, o.engine_device);
                } else {
                    printf("# GPU memory high-water per process: not measured (%s)\n", mem_source);
                }
                printf("# tail (step end to all acknowledged) %.1f ms; peer: %s (torch %s): step %.1f, quantizer\n"
                       "# %.1f, per-tensor IPC %.1f, tail %.1f, end to end %.1f ms: tail ratio %.3f, speedup %.2f\n",
                       tail_ms, peer.note, peer.torch, peer.step_ms, peer.quant_ms, peer.ipc_ms, peer.tail_ms,
                       peer.e2e_ms, tail_ms / peer.tail_ms, peer.e2e_ms / e2e_ms);
                if (o.offload) {
                    printf("# --offload: %llu rebinds (%llu to another address), each %.2f ms of weft_plan_rebind\n"
                           "# (%.3f of the end-to-end time) after %.2f ms of cudaMalloc for the new tensors (%.3f)\n",
                           (unsigned long long)rebinds, (unsigned long long)moved, rebind_ms, rebind_ms / e2e_ms,
                           realloc_ms, realloc_ms / e2e_ms);
                }
            }
        }
    }
    if (o.kill_engine_at != 0 && published == o.versions &&
        (kills != 1 || shared->consumer[0].versions != o.versions - 1 ||
         shared->consumer[0].first_version != o.kill_engine_at + 1)) {
        fprintf(stderr, "weft-perf update: --kill-engine %llu: %llu kills; engine 0 received %llu versions (want "
                        "%llu), the first after its restart %llu (want %llu)\n",
                (unsigned long long)o.kill_engine_at, (unsigned long long)kills,
                (unsigned long long)shared->consumer[0].versions, (unsigned long long)(o.versions - 1),
                (unsigned long long)shared->consumer[0].first_version, (unsigned long long)(o.kill_engine_at + 1));
        rc = 1;
    }
    if (wrong != 0 || wrong_sampled != 0 || wrong_bytes != 0) {
        rc = 1;
    }
    if (o.plot != NULL && published > 0) {
        char title[160];

        snprintf(title, sizeof(title), "weft-perf update: %llu versions of %.1f MB to %llu consumers (%s, %s)",
                 (unsigned long long)published, (double)stats.slot_bytes / 1e6, (unsigned long long)o.consumers,
                 o.gpu ? "GPU" : "host", o.optimizer == WEFT_OPTIM_MUON ? "Muon" : "AdamW");
        if (update_plot_svg(o.plot, phases, published, timed_from, title) != 0) {
            rc = rc != 0 ? rc : 1;
        } else {
            fprintf(o.json ? stderr : stdout, "# the versions' timeline: %s\n", o.plot);
        }
    }
    {
        /* The verdict, last: on stdout under the table, on stderr beside
         * --json (whose stdout is one JSON object). */
        uint64_t received = 0;
        for (uint64_t c = 0; c < o.consumers; c++) {
            received += shared->consumer[c].versions;
        }
        fprintf(o.json ? stderr : stdout,
                "%s: %llu of %llu versions published; %llu consumers received and verified %.2f GB; %llu wrong "
                "bytes\n",
                rc == 0 ? "PASS" : rc > 128 ? "INTERRUPTED" : "FAIL", (unsigned long long)published, (unsigned long long)o.versions,
                (unsigned long long)o.consumers, (double)received * (double)stats.slot_bytes / 1e9,
                (unsigned long long)(wrong_bytes + wrong_sampled));
    }
out:
    gpu_mem_watch_stop(mem_watch[0]);
    gpu_mem_watch_stop(mem_watch[1]);
    if (nursery_fd >= 0) {
        close(nursery_fd);
    }
    perf_kill_children(&children);
    if (have_trainer) {
        update_trainer_destroy(&trainer);
    }
    weft_registry_close(reg);
    weft_registry_unlink(name);
    munmap(shared, shared_bytes);
    free(wake);
    free(phases);
    return rc;
}
