/*
 * weft-perf stress: one producer and R reader processes on one registry,
 * every read verified byte for byte while its lease is held.
 *
 * The producer publishes versions as fast as it can; each version's payload
 * is derived from its version number and tensor index (perf/lib/payload.h), so
 * a reader that saw any byte of another version reports a torn read. Readers
 * alternate acquire (the latest) and wait (newer than the last seen); a
 * reader's versions never go backwards. Odd-numbered readers hold their
 * leases for random short times, so that the producer sometimes finds no
 * free slot (WEFT_ERR_BUSY after a short timeout: counted, not an error).
 * With --kill-readers the producer now and then asks a reader to keep its
 * lease, SIGKILLs it while it does and starts another in its place, so
 * that the registry must reclaim leases of dead processes. With --kills N
 * the run ends only once N readers were killed and their leases reclaimed,
 * so that a test does not depend on how many kills fit in --seconds.
 */
#include "config.h"

#include "lib/args.h"
#include "lib/columns.h"
#include "lib/json.h"
#include "lib/payload.h"
#include "lib/proc.h"
#include "lib/sysinfo.h"
#include "perf.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/registry.h>
#include <weft/weft.h>

#define STRESS_READERS_MAX  64
#define STRESS_KILLS_MAX    64 /* replacement readers, each in a new stats record */
#define STRESS_RECORDS      (STRESS_READERS_MAX + STRESS_KILLS_MAX)
#define STRESS_EXPERTS      4
#define STRESS_TENSORS      (3 * STRESS_EXPERTS)
#define WRITE_TIMEOUT_US    1000   /* write_begin: short, so that BUSY happens */
#define READ_WAIT_US        100000 /* a reader's wait: it checks stop between waits */
/* ms the producer waits for a victim to hold a lease. A victim holds its
 * next lease, a moment away while versions keep coming: this bound only
 * keeps a stuck victim from stopping the kills (it counts a miss). */
#define KILL_HOLD_TIMEOUT   10000
/* s the run may go on after --seconds for --kills; only there to turn a
 * hang into a failure (readers give up 60 s after --seconds). */
#define KILLS_TIMEOUT       30
#define VICTIM_HOLD_MAX_MS  10000  /* a victim not killed by then releases and goes on */
#define EXIT_TIMEOUT        10000  /* ms for a reader to exit once told to stop */
#define REPORT_MAX          5      /* messages per reader about torn or backward reads */

/* One reader process's counts, in memory shared with the producer; only
 * that reader writes them, except for the two handshake flags. */
typedef struct stress_reader_stats {
    _Atomic uint64_t reads;          /* leases verified and released */
    _Atomic uint64_t torn;           /* reads with a byte of another version */
    _Atomic uint64_t backwards;      /* leases older than one seen before */
    _Atomic uint64_t timeouts;       /* waits that found no newer version */
    _Atomic uint64_t not_found;      /* acquires before the first publish */
    _Atomic uint64_t verified_bytes;
    _Atomic int      hold_request;   /* producer: keep the next lease until killed */
    _Atomic int      holding;        /* reader: holding that lease now */
} stress_reader_stats_t;

typedef struct stress_shared {
    _Atomic int           stop;
    stress_reader_stats_t reader[STRESS_RECORDS];
} stress_shared_t;

typedef struct stress_options {
    uint64_t readers;
    double   seconds;
    uint64_t versions; /* 0: no limit */
    uint64_t bytes;
    uint64_t slots;
    uint64_t hold_us;
    uint64_t seed;
    uint64_t kills; /* 0: no minimum */
    int      kill_readers;
    int      json;
} stress_options_t;

typedef struct stress_run {
    stress_options_t opt;
    char             name[WEFT_REGISTRY_NAME_MAX];
    stress_shared_t *shared;
    perf_children_t  children;
    pid_t            pid[STRESS_RECORDS]; /* 0: not running */
    int              records;             /* stats records used */
    weft_registry_h  reg;
    int              created;
    uint32_t         tensors;
    uint64_t         tensor_bytes[STRESS_TENSORS];
    uint64_t         slot_bytes;
    /* Results. */
    uint64_t versions;
    uint64_t busy;
    uint64_t killed;
    uint64_t kill_misses; /* victims that held no lease in time */
    uint64_t errors;
    double   elapsed_s;
    weft_registry_stats_t stats;
} stress_run_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf stress [OPTIONS]\n"
            "\n"
            "One producer and several reader processes on one registry. Every read is\n"
            "verified byte for byte while its lease is held; exits 1 on any torn read,\n"
            "version going backwards or unexpected error.\n"
            "\n"
            "  -r, --readers N     reader processes (default 4, at most %d)\n"
            "  -t, --seconds S     duration (default 10)\n"
            "  -v, --versions N    stop after N versions (default: no limit)\n"
            "  -b, --bytes SIZE    bytes per version, K/M/G suffixes (default 8M)\n"
            "  -k, --slots K       slots of the registry, 2..16 (default 3)\n"
            "      --hold-us U     longest time a holding reader keeps a lease (default 2000)\n"
            "      --kill-readers  SIGKILL readers that hold a lease and start new ones\n"
            "      --kills N       --kill-readers, and go on after --seconds until N readers\n"
            "                      were killed and their leases reclaimed (at most %d s more)\n"
            "      --seed N        seed of the readers' random holds (default 1)\n"
            "      --json          print one JSON object instead of the table\n"
            "  -h, --help          this text\n",
            STRESS_READERS_MAX, KILLS_TIMEOUT);
}

static int parse_options(int argc, char **argv, stress_options_t *opt)
{
    enum { OPT_HOLD = 256, OPT_KILL, OPT_KILLS, OPT_SEED, OPT_JSON };
    static const struct option longopts[] = {
        {"readers", required_argument, NULL, 'r'},
        {"seconds", required_argument, NULL, 't'},
        {"versions", required_argument, NULL, 'v'},
        {"bytes", required_argument, NULL, 'b'},
        {"slots", required_argument, NULL, 'k'},
        {"hold-us", required_argument, NULL, OPT_HOLD},
        {"kill-readers", no_argument, NULL, OPT_KILL},
        {"kills", required_argument, NULL, OPT_KILLS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, rc = 0;

    *opt = (stress_options_t){.readers = 4, .seconds = 10.0, .bytes = 8u << 20, .slots = 3,
                              .hold_us = 2000, .seed = 1};
    optind = 1;
    while ((c = getopt_long(argc, argv, "r:t:v:b:k:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r': rc = perf_arg_u64("--readers", optarg, 1, STRESS_READERS_MAX, &opt->readers); break;
        case 't': rc = perf_arg_double("--seconds", optarg, 0.01, 86400, &opt->seconds); break;
        case 'v': rc = perf_arg_u64("--versions", optarg, 1, UINT64_C(1) << 40, &opt->versions); break;
        case 'b': rc = perf_arg_size("--bytes", optarg, 4096, UINT64_C(1) << 30, &opt->bytes); break;
        case 'k': rc = perf_arg_u64("--slots", optarg, 2, 16, &opt->slots); break;
        case OPT_HOLD: rc = perf_arg_u64("--hold-us", optarg, 0, 1000000, &opt->hold_us); break;
        case OPT_KILL: opt->kill_readers = 1; break;
        case OPT_KILLS:
            rc = perf_arg_u64("--kills", optarg, 1, STRESS_KILLS_MAX, &opt->kills);
            opt->kill_readers = 1;
            break;
        case OPT_SEED: rc = perf_arg_u64("--seed", optarg, 0, UINT64_MAX, &opt->seed); break;
        case OPT_JSON: opt->json = 1; break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return -1;
        }
        if (rc != 0) {
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "weft-perf stress: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    return 0;
}

static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * UINT64_C(2685821657736338717);
}

/* ----------------------------------------------------------------- reader */

typedef struct stress_reader {
    stress_run_t          *run;
    stress_reader_stats_t *stats;
    int                    record;
    weft_registry_h        reg;
    uint32_t               tensors;
    uint64_t               bytes[STRESS_TENSORS];
    uint64_t               reports;
} stress_reader_t;

/* Verifies every tensor of the leased version. Returns 0 when it matches,
 * 1 for a torn read, -1 on an error. */
static int verify_lease(stress_reader_t *rd, const weft_lease_t *lease)
{
    int torn = 0;

    for (uint32_t t = 0; t < rd->tensors; t++) {
        const void   *data;
        weft_status_t status = weft_registry_lease_tensor(rd->reg, lease, t, &data);
        uint64_t      bad;

        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf stress: reader %d: lease_tensor(version %" PRIu64 ", tensor %u) "
                    "failed: %s\n", rd->record, lease->version, t, weft_status_string(status));
            return -1;
        }
        bad = payload_check(data, rd->bytes[t], lease->version, t);
        if (bad < rd->bytes[t]) {
            if (rd->reports++ < REPORT_MAX) {
                fprintf(stderr, "weft-perf stress: reader %d: TORN read: version %" PRIu64 " (slot %u), "
                        "tensor %u differs from its payload at byte %" PRIu64 " of %" PRIu64 "\n",
                        rd->record, lease->version, lease->slot, t, bad, rd->bytes[t]);
            }
            torn = 1;
        }
    }
    return torn;
}

/* The victim of --kill-readers: keeps its lease while the producer asks,
 * until the SIGKILL comes; bounded, in case it never does. */
static void hold_until_killed(stress_run_t *run, stress_reader_stats_t *stats)
{
    atomic_store(&stats->holding, 1);
    for (int ms = 0; ms < VICTIM_HOLD_MAX_MS && atomic_load(&stats->hold_request) &&
                     !atomic_load(&run->shared->stop);
         ms++) {
        perf_sleep_us(1000);
    }
    atomic_store(&stats->holding, 0);
    atomic_store(&stats->hold_request, 0);
}

/* Takes one lease, by acquire or by wait. Returns 1 with *lease held, 0
 * when there was nothing to lease (counted), -1 on an error. */
static int take_lease(stress_reader_t *rd, int by_wait, uint64_t last, weft_lease_t *lease)
{
    weft_status_t status;

    if (by_wait) {
        status = weft_registry_wait(rd->reg, last, READ_WAIT_US, lease);
        if (status == WEFT_ERR_TIMEOUT) {
            atomic_fetch_add(&rd->stats->timeouts, 1);
            return 0;
        }
    } else {
        status = weft_registry_acquire(rd->reg, lease);
        if (status == WEFT_ERR_NOT_FOUND) {
            atomic_fetch_add(&rd->stats->not_found, 1);
            perf_sleep_us(100);
            return 0;
        }
    }
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf stress: reader %d: %s failed: %s\n", rd->record,
                by_wait ? "wait" : "acquire", weft_status_string(status));
        return -1;
    }
    return 1;
}

static int reader_loop(stress_reader_t *rd)
{
    stress_run_t *run = rd->run;
    uint64_t      rng = (run->opt.seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(rd->record + 1))) | 1;
    uint64_t      last = 0;
    int           holder = rd->record % 2 == 1;
    /* The producer says stop; this bound holds should it never say so. */
    uint64_t      give_up = perf_now_ns() + (uint64_t)((run->opt.seconds + 60.0) * 1e9);

    for (uint64_t iter = 0; !atomic_load(&run->shared->stop); iter++) {
        weft_lease_t  lease;
        weft_status_t status;
        int           by_wait = (int)(iter & 1), taken, torn;

        if (perf_now_ns() > give_up) {
            fprintf(stderr, "weft-perf stress: reader %d: no stop from the producer\n", rd->record);
            return -1;
        }
        taken = take_lease(rd, by_wait, last, &lease);
        if (taken <= 0) {
            if (taken < 0) {
                return -1;
            }
            continue;
        }
        if (lease.version < last || (by_wait && lease.version == last)) {
            atomic_fetch_add(&rd->stats->backwards, 1);
            if (rd->reports++ < REPORT_MAX) {
                fprintf(stderr, "weft-perf stress: reader %d: %s gave version %" PRIu64 " after version %"
                        PRIu64 " was seen\n", rd->record, by_wait ? "wait" : "acquire", lease.version, last);
            }
        }
        torn = verify_lease(rd, &lease);
        if (torn > 0) {
            atomic_fetch_add(&rd->stats->torn, 1);
        }
        if (atomic_load(&rd->stats->hold_request)) {
            hold_until_killed(run, rd->stats);
        } else if (holder && run->opt.hold_us > 0) {
            perf_sleep_us(next_random(&rng) % (run->opt.hold_us + 1));
        }
        status = weft_registry_release(rd->reg, &lease);
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf stress: reader %d: release of version %" PRIu64 " failed: %s\n",
                    rd->record, lease.version, weft_status_string(status));
            return -1;
        }
        if (torn < 0) {
            return -1;
        }
        atomic_fetch_add(&rd->stats->reads, 1);
        atomic_fetch_add(&rd->stats->verified_bytes, run->slot_bytes);
        if (lease.version > last) {
            last = lease.version;
        }
    }
    return 0;
}

/* A reader process: its own handle (handles do not survive fork), a check
 * that it sees the producer's layout, then the loop. */
static int reader_main(stress_run_t *run, int record)
{
    stress_reader_t rd = {.run = run, .stats = &run->shared->reader[record], .record = record};
    weft_status_t   status;
    int             rc = -1;

    status = weft_registry_open(run->name, WEFT_REGISTRY_OPEN_READ, &rd.reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf stress: reader %d: cannot open registry '%s': %s\n", record, run->name,
                weft_status_string(status));
        return 1;
    }
    status = weft_registry_tensor_count(rd.reg, &rd.tensors);
    if (status != WEFT_OK || rd.tensors != run->tensors) {
        fprintf(stderr, "weft-perf stress: reader %d: tensor count %u (%s), the producer declared %u\n",
                record, rd.tensors, weft_status_string(status), run->tensors);
        goto out;
    }
    for (uint32_t t = 0; t < rd.tensors; t++) {
        weft_tensor_info_t info;

        status = weft_registry_tensor_info(rd.reg, t, &info);
        if (status != WEFT_OK || info.bytes != run->tensor_bytes[t]) {
            fprintf(stderr, "weft-perf stress: reader %d: tensor %u: %s, %" PRIu64 " bytes where the "
                    "producer has %" PRIu64 "\n", record, t, weft_status_string(status),
                    status == WEFT_OK ? info.bytes : 0, run->tensor_bytes[t]);
            goto out;
        }
        rd.bytes[t] = info.bytes;
    }
    rc = reader_loop(&rd);
out:
    status = weft_registry_close(rd.reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf stress: reader %d: close failed: %s\n", record, weft_status_string(status));
        rc = -1;
    }
    return rc == 0 ? 0 : 1;
}

/* --------------------------------------------------------------- producer */

static int spawn_reader(stress_run_t *run)
{
    int   record = run->records;
    pid_t pid;

    if (record >= STRESS_RECORDS) {
        fprintf(stderr, "weft-perf stress: more than %d reader processes\n", STRESS_RECORDS);
        return -1;
    }
    pid = perf_fork(&run->children);
    if (pid == 0) {
        _exit(reader_main(run, record));
    }
    if (pid < 0) {
        return -1;
    }
    run->pid[record] = pid;
    run->records++;
    return 0;
}

/* Experts of varied sizes: expert e gets (e + 1) / 10 of the bytes, as W
 * and WT in FP8 plus FP32 block scales; odd widths give tensors whose
 * sizes are not multiples of 8, so byte tails are verified too. */
static int declare_tensors(stress_run_t *run)
{
    static const char *const suffix[3] = {"w", "wt", "scale_inv"};
    weft_status_t status;

    for (uint32_t e = 0; e < STRESS_EXPERTS; e++) {
        uint64_t cols = 512 - 3 * e;
        uint64_t rows = run->opt.bytes * (e + 1) / 10 / (2 * cols);
        weft_tensor_desc_t desc[3];

        rows = rows > 0 ? rows : 1;
        for (int k = 0; k < 3; k++) {
            desc[k] = (weft_tensor_desc_t){.layer = 0, .expert = (int32_t)e, .ndim = 2};
        }
        desc[0].role = WEFT_ROLE_W;
        desc[0].dtype = WEFT_DTYPE_FP8_E4M3;
        desc[0].shape[0] = rows;
        desc[0].shape[1] = cols;
        desc[1].role = WEFT_ROLE_WT;
        desc[1].dtype = WEFT_DTYPE_FP8_E4M3;
        desc[1].shape[0] = cols;
        desc[1].shape[1] = rows;
        desc[2].role = WEFT_ROLE_SCALE;
        desc[2].dtype = WEFT_DTYPE_FP32;
        desc[2].shape[0] = (rows + 127) / 128;
        desc[2].shape[1] = (cols + 127) / 128;
        for (int k = 0; k < 3; k++) {
            char name[WEFT_TENSOR_NAME_MAX];

            snprintf(name, sizeof(name), "layers.0.experts.%u.%s", e, suffix[k]);
            desc[k].name = name;
            status = weft_registry_declare(run->reg, &desc[k], NULL);
            if (status != WEFT_OK) {
                fprintf(stderr, "weft-perf stress: cannot declare tensor '%s': %s\n", name,
                        weft_status_string(status));
                return -1;
            }
        }
    }
    return 0;
}

static int create_registry(stress_run_t *run)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_SLOTS,
                                     .slot_count = (uint32_t)run->opt.slots};
    weft_registry_stats_t  stats;
    weft_status_t          status;

    status = weft_registry_create(run->name, &params, &run->reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf stress: cannot create registry '%s': %s\n", run->name,
                weft_status_string(status));
        return -1;
    }
    run->created = 1;
    if (declare_tensors(run) != 0) {
        return -1;
    }
    status = weft_registry_seal(run->reg);
    if (status == WEFT_OK) {
        status = weft_registry_tensor_count(run->reg, &run->tensors);
    }
    if (status == WEFT_OK) {
        status = weft_registry_get_stats(run->reg, &stats);
    }
    if (status != WEFT_OK || run->tensors != STRESS_TENSORS) {
        fprintf(stderr, "weft-perf stress: cannot seal registry '%s': %s (%u tensors)\n", run->name,
                weft_status_string(status), run->tensors);
        return -1;
    }
    run->slot_bytes = stats.slot_bytes;
    for (uint32_t t = 0; t < run->tensors; t++) {
        weft_tensor_info_t info;

        status = weft_registry_tensor_info(run->reg, t, &info);
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf stress: tensor_info(%u) failed: %s\n", t, weft_status_string(status));
            return -1;
        }
        run->tensor_bytes[t] = info.bytes;
    }
    return 0;
}

/* Writes and publishes the next version, unless no slot frees up within
 * WRITE_TIMEOUT_US (busy: counted). */
static int publish_one(stress_run_t *run)
{
    uint64_t      version = run->versions + 1, published = 0;
    weft_status_t status = weft_registry_write_begin(run->reg, WRITE_TIMEOUT_US, NULL);

    if (status == WEFT_ERR_BUSY) {
        run->busy++;
        return 0;
    }
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf stress: write_begin failed: %s\n", weft_status_string(status));
        return -1;
    }
    for (uint32_t t = 0; t < run->tensors; t++) {
        void *data;

        status = weft_registry_write_tensor(run->reg, t, &data);
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf stress: write_tensor(%u) failed: %s\n", t, weft_status_string(status));
            (void)weft_registry_write_abort(run->reg);
            return -1;
        }
        payload_fill(data, run->tensor_bytes[t], version, t);
    }
    status = weft_registry_publish(run->reg, version, &published);
    if (status != WEFT_OK || published != version) {
        fprintf(stderr, "weft-perf stress: publish of version %" PRIu64 " failed: %s (published %" PRIu64
                ")\n", version, weft_status_string(status), published);
        if (status != WEFT_OK) {
            (void)weft_registry_write_abort(run->reg);
        }
        return -1;
    }
    run->versions = version;
    return 0;
}

/* Any reader that exits before the producer says stop has failed. */
static int check_readers(stress_run_t *run)
{
    int   status;
    pid_t pid = perf_reap_exited(&run->children, &status);
    char  what[96];

    if (pid == 0) {
        return 0;
    }
    if (pid > 0) {
        for (int r = 0; r < run->records; r++) {
            if (run->pid[r] == pid) {
                run->pid[r] = 0;
                perf_describe_status(status, what, sizeof(what));
                fprintf(stderr, "weft-perf stress: reader %d (pid %d) %s during the run\n", r, (int)pid, what);
            }
        }
    }
    return -1;
}

typedef struct stress_killer {
    uint64_t interval_ns;
    uint64_t next_ns;  /* when to pick the next victim */
    uint64_t asked_ns; /* when the victim was asked to hold */
    int      victim;   /* record, or -1 */
    int      rotate;   /* where the search for the next victim starts */
} stress_killer_t;

/* One step of --kill-readers: ask a reader to hold its next lease; once it
 * holds it, SIGKILL it and start a new reader in its place. */
static int kill_step(stress_run_t *run, stress_killer_t *k, uint64_t now)
{
    stress_reader_stats_t *stats;
    int                    status;
    char                   what[96];

    if (k->victim < 0) {
        if (now < k->next_ns || run->killed >= STRESS_KILLS_MAX) {
            return 0;
        }
        for (int i = 0; i < run->records; i++) {
            int r = (k->rotate + i) % run->records;

            if (run->pid[r] != 0) {
                k->victim = r;
                k->rotate = r + 1;
                break;
            }
        }
        if (k->victim >= 0) {
            atomic_store(&run->shared->reader[k->victim].hold_request, 1);
            k->asked_ns = now;
        }
        return 0;
    }
    stats = &run->shared->reader[k->victim];
    if (!atomic_load(&stats->holding)) {
        if (now - k->asked_ns > (uint64_t)KILL_HOLD_TIMEOUT * 1000000u) {
            atomic_store(&stats->hold_request, 0);
            run->kill_misses++;
            k->victim = -1;
            k->next_ns = now + k->interval_ns;
        }
        return 0;
    }
    if (kill(run->pid[k->victim], SIGKILL) != 0) {
        fprintf(stderr, "weft-perf stress: cannot kill reader %d (pid %d): %s\n", k->victim,
                (int)run->pid[k->victim], strerror(errno));
        return -1;
    }
    if (perf_wait_child(&run->children, run->pid[k->victim], EXIT_TIMEOUT, &status) != 0) {
        return -1;
    }
    run->pid[k->victim] = 0;
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        perf_describe_status(status, what, sizeof(what));
        fprintf(stderr, "weft-perf stress: reader %d %s before the SIGKILL\n", k->victim, what);
        return -1;
    }
    run->killed++;
    k->victim = -1;
    k->next_ns = now + k->interval_ns;
    return spawn_reader(run);
}

/* --kills: whether enough readers were killed and the registry took
 * their leases back (*reclaimed: how many it took). */
static int kills_done(stress_run_t *run, uint64_t *reclaimed)
{
    weft_registry_stats_t stats;

    *reclaimed = weft_registry_get_stats(run->reg, &stats) == WEFT_OK ? stats.leases_reclaimed : 0;
    return run->killed >= run->opt.kills && *reclaimed >= run->opt.kills;
}

static int produce(stress_run_t *run)
{
    uint64_t        start = perf_now_ns();
    uint64_t        deadline = start + (uint64_t)(run->opt.seconds * 1e9);
    stress_killer_t killer = {.victim = -1};
    int             rc = 0;

    /* About ten kills per run, at most five a second. */
    killer.interval_ns = (uint64_t)(run->opt.seconds * 1e8);
    if (killer.interval_ns < 200000000u) {
        killer.interval_ns = 200000000u;
    }
    killer.next_ns = start + killer.interval_ns / 2;
    for (;;) {
        uint64_t now = perf_now_ns();

        if (perf_interrupted) {
            fprintf(stderr, "weft-perf stress: interrupted\n");
            rc = -1;
            break;
        }
        if (now >= deadline || (run->opt.versions != 0 && run->versions >= run->opt.versions)) {
            uint64_t reclaimed;

            if (run->opt.kills == 0 || kills_done(run, &reclaimed)) {
                break;
            }
            if (now >= deadline + (uint64_t)KILLS_TIMEOUT * 1000000000u) {
                fprintf(stderr, "weft-perf stress: --kills %" PRIu64 ": %" PRIu64 " readers killed, %" PRIu64
                        " leases reclaimed %d s after --seconds\n", run->opt.kills, run->killed, reclaimed,
                        KILLS_TIMEOUT);
                rc = -1;
                break;
            }
        }
        if (check_readers(run) != 0 || (run->opt.kill_readers && kill_step(run, &killer, now) != 0) ||
            publish_one(run) != 0) {
            rc = -1;
            break;
        }
    }
    run->elapsed_s = (double)(perf_now_ns() - start) / 1e9;
    if (killer.victim >= 0) {
        atomic_store(&run->shared->reader[killer.victim].hold_request, 0);
    }
    return rc;
}

/* Tells the readers to stop and reaps them, bounded. */
static int stop_readers(stress_run_t *run)
{
    int rc = 0;

    atomic_store(&run->shared->stop, 1);
    for (int r = 0; r < run->records; r++) {
        int  status;
        char what[96];

        if (run->pid[r] == 0) {
            continue;
        }
        if (perf_wait_child(&run->children, run->pid[r], EXIT_TIMEOUT, &status) != 0) {
            rc = -1;
            continue;
        }
        run->pid[r] = 0;
        if (status != 0) {
            perf_describe_status(status, what, sizeof(what));
            fprintf(stderr, "weft-perf stress: reader %d %s\n", r, what);
            rc = -1;
        }
    }
    return rc;
}

/* ----------------------------------------------------------------- report */

typedef struct stress_totals {
    uint64_t reads, torn, backwards, timeouts, not_found, verified_bytes;
} stress_totals_t;

static void sum_readers(const stress_run_t *run, stress_totals_t *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (int r = 0; r < run->records; r++) {
        stress_reader_stats_t *s = &run->shared->reader[r];

        sum->reads += atomic_load(&s->reads);
        sum->torn += atomic_load(&s->torn);
        sum->backwards += atomic_load(&s->backwards);
        sum->timeouts += atomic_load(&s->timeouts);
        sum->not_found += atomic_load(&s->not_found);
        sum->verified_bytes += atomic_load(&s->verified_bytes);
    }
}

/* The result's columns: the table's, in order, and the JSON's among them. */
enum {
    COL_VERSIONS, COL_READS, COL_TORN, COL_BACKWARDS, COL_BUSY, COL_REGISTRY_BUSY, COL_LEASES_RECLAIMED,
    COL_KILLED, COL_KILL_MISSES, COL_WAIT_TIMEOUTS, COL_ERRORS, COL_VERIFIED_BYTES, COL_VERSIONS_PER_S,
    COL_VERIFIED_GB_PER_S, COLS
};

static const perf_column_t columns[COLS] = {
    [COL_VERSIONS] = {"versions", "versions", 9, 0, PERF_COLUMN_UINT},
    [COL_READS] = {"reads", "reads", 10, 0, PERF_COLUMN_UINT},
    [COL_TORN] = {"torn", "torn", 5, 0, PERF_COLUMN_UINT},
    [COL_BACKWARDS] = {"backwards", "backwards", 9, 0, PERF_COLUMN_UINT},
    [COL_BUSY] = {"busy", "busy", 8, 0, PERF_COLUMN_UINT},
    [COL_REGISTRY_BUSY] = {"registry_busy", NULL, 0, 0, PERF_COLUMN_UINT},
    [COL_LEASES_RECLAIMED] = {"leases_reclaimed", "leases_reclaimed", 16, 0, PERF_COLUMN_UINT},
    [COL_KILLED] = {"readers_killed", "killed", 6, 0, PERF_COLUMN_UINT},
    [COL_KILL_MISSES] = {"kill_misses", NULL, 0, 0, PERF_COLUMN_UINT},
    [COL_WAIT_TIMEOUTS] = {"wait_timeouts", NULL, 0, 0, PERF_COLUMN_UINT},
    [COL_ERRORS] = {"errors", "errors", 6, 0, PERF_COLUMN_UINT},
    [COL_VERIFIED_BYTES] = {"verified_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [COL_VERSIONS_PER_S] = {"versions_per_s", "versions_per_s", 14, 1, PERF_COLUMN_DOUBLE},
    [COL_VERIFIED_GB_PER_S] = {"verified_GB_per_s", "verified_GB_per_s", 17, 2, PERF_COLUMN_DOUBLE},
};

static void report(const stress_run_t *run, const stress_totals_t *sum, int ok)
{
    double      secs = run->elapsed_s > 0 ? run->elapsed_s : 1e-9;
    perf_cell_t cells[COLS] = {
        [COL_VERSIONS] = {.u = run->versions},
        [COL_READS] = {.u = sum->reads},
        [COL_TORN] = {.u = sum->torn},
        [COL_BACKWARDS] = {.u = sum->backwards},
        [COL_BUSY] = {.u = run->busy},
        [COL_REGISTRY_BUSY] = {.u = run->stats.busy},
        [COL_LEASES_RECLAIMED] = {.u = run->stats.leases_reclaimed},
        [COL_KILLED] = {.u = run->killed},
        [COL_KILL_MISSES] = {.u = run->kill_misses},
        [COL_WAIT_TIMEOUTS] = {.u = sum->timeouts},
        [COL_ERRORS] = {.u = run->errors},
        [COL_VERIFIED_BYTES] = {.u = sum->verified_bytes},
        [COL_VERSIONS_PER_S] = {.d = (double)run->versions / secs},
        [COL_VERIFIED_GB_PER_S] = {.d = (double)sum->verified_bytes / secs / 1e9},
    };
    char host[256];

    if (run->opt.json) {
        perf_json_t json;

        perf_host_name(host, sizeof(host));
        perf_json_begin(&json, stdout);
        perf_json_str(&json, "command", "stress");
        perf_json_str(&json, "version", weft_version());
        perf_json_str(&json, "host", host);
        perf_json_uint(&json, "readers", run->opt.readers);
        perf_json_uint(&json, "slots", run->opt.slots);
        perf_json_uint(&json, "tensors", run->tensors);
        perf_json_uint(&json, "bytes_per_version", run->slot_bytes);
        perf_json_bool(&json, "kill_readers", run->opt.kill_readers);
        perf_json_double(&json, "seconds", run->elapsed_s);
        perf_columns_json(&json, "", columns, COLS, cells);
        perf_json_bool(&json, "ok", ok);
        perf_json_end(&json);
        return;
    }
    printf("#\n");
    perf_columns_header(stdout, "# ", columns, COLS);
    printf("  %s\n", "result");
    perf_columns_row(stdout, "  ", columns, COLS, cells);
    printf("  %s\n", ok ? "ok" : "FAILED");
    printf("#\n# registry: %" PRIu64 " versions published, latest %" PRIu64 ", %" PRIu64 " write_begin calls "
           "found no free slot, %u leases held at the end\n", run->stats.versions_published,
           run->stats.latest_version, run->stats.busy, run->stats.leases_held);
    printf("# readers: %" PRIu64 " waits timed out (%d ms), %" PRIu64 " acquires before the first version; "
           "%" PRIu64 " kill victims held no lease in time\n", sum->timeouts, READ_WAIT_US / 1000,
           sum->not_found, run->kill_misses);
}

static void print_preamble(const stress_run_t *run)
{
    printf("# weft-perf stress: 1 producer, %" PRIu64 " reader processes, registry '%s'\n", run->opt.readers,
           run->name);
    {
        int cpu[2];

        perf_print_host(stdout, perf_cpus_allowed(cpu));
    }
    printf("# %u tensors (%d experts: W, WT fp8_e4m3, scale_inv fp32; varied sizes), %" PRIu64
           " bytes per version, %" PRIu64 " slots\n", run->tensors, STRESS_EXPERTS, run->slot_bytes,
           run->opt.slots);
    printf("# readers alternate acquire and wait, verify every byte while leased; odd readers hold "
           "leases up to %" PRIu64 " us; write_begin timeout %d us\n", run->opt.hold_us, WRITE_TIMEOUT_US);
    if (run->opt.versions != 0) {
        printf("# duration: %.1f s or %" PRIu64 " versions; kill readers: %s\n", run->opt.seconds,
               run->opt.versions, run->opt.kill_readers ? "yes" : "no");
    } else {
        printf("# duration: %.1f s; kill readers: %s\n", run->opt.seconds,
               run->opt.kill_readers ? "yes" : "no");
    }
    fflush(stdout);
}

int perf_cmd_stress(int argc, char **argv)
{
    stress_run_t    run;
    stress_totals_t sum;
    weft_status_t   status;
    int             rc = 1, parsed, ok;

    memset(&run, 0, sizeof(run));
    parsed = parse_options(argc, argv, &run.opt);
    if (parsed != 0) {
        return parsed > 0 ? 0 : 2;
    }
    run.shared = mmap(NULL, sizeof(stress_shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
    if (run.shared == MAP_FAILED) {
        fprintf(stderr, "weft-perf stress: cannot map the readers' counters: %s\n", strerror(errno));
        return 1;
    }
    snprintf(run.name, sizeof(run.name), "weft-perf-stress-%d", (int)getpid());
    if (perf_catch_interrupts() != 0 || create_registry(&run) != 0) {
        goto out;
    }
    if (!run.opt.json) {
        print_preamble(&run);
    }
    for (uint64_t r = 0; r < run.opt.readers; r++) {
        if (spawn_reader(&run) != 0) {
            goto out;
        }
    }
    if (produce(&run) != 0) {
        run.errors++;
    }
    if (stop_readers(&run) != 0) {
        run.errors++;
    }
    status = weft_registry_get_stats(run.reg, &run.stats);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf stress: stats failed: %s\n", weft_status_string(status));
        run.errors++;
    } else if (run.stats.versions_published != run.versions) {
        fprintf(stderr, "weft-perf stress: the registry counts %" PRIu64 " versions published, the "
                "producer %" PRIu64 "\n", run.stats.versions_published, run.versions);
        run.errors++;
    }
    sum_readers(&run, &sum);
    ok = run.errors == 0 && sum.torn == 0 && sum.backwards == 0;
    report(&run, &sum, ok);
    if (sum.torn != 0 || sum.backwards != 0) {
        fprintf(stderr, "weft-perf stress: %" PRIu64 " torn reads, %" PRIu64 " versions going backwards\n",
                sum.torn, sum.backwards);
    }
    rc = ok ? 0 : 1;
out:
    perf_kill_children(&run.children);
    if (run.reg != NULL) {
        status = weft_registry_close(run.reg);
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf stress: close failed: %s\n", weft_status_string(status));
            rc = 1;
        }
    }
    if (run.created) {
        status = weft_registry_unlink(run.name);
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf stress: cannot unlink registry '%s': %s\n", run.name,
                    weft_status_string(status));
            rc = 1;
        }
    }
    munmap(run.shared, sizeof(stress_shared_t));
    return rc;
}
