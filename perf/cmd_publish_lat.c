/*
 * weft-perf publish-lat: the time from the producer's publish to a reader
 * blocked in weft_registry_wait() running again, across two processes, in
 * the default mode (bounded spin, then futex) and futex-only, against the
 * peer a user would pick instead: a Unix-domain-socket notify.
 *
 * The parent is the producer. libweft reads WEFT_* once per process and a
 * forked child inherits what its parent has read, so the parent forks one
 * reader per mode before its own first libweft call; the futex reader sets
 * WEFT_REGISTRY_SPIN_US=0 before its first. The modes take turns of
 * LAT_TURN_ROUNDS rounds, so that a burst of load from other processes
 * falls on every mode alike; a reader blocks on its start pipe between
 * turns. Each round:
 *
 *   reader                              producer (spinning on the ack word)
 *   ack = round (shared memory) ──────► sees the ack; write_begin
 *   weft_registry_wait(last seen)       busy-waits a random delay
 *        …                              t0 = now, stored in the tensor; publish
 *   t1 = now; sample = t1 − t0 ◄──────
 *
 * The ack comes just before the wait, so the delay (at least 10 µs by
 * default) is what makes sure the reader waits when the publish comes. A
 * turn ends with a version (or message) that pauses the reader, which the
 * reader acknowledges too: only then does the next mode's turn publish. A
 * registry reader leases the latest version, so one that was slow to wake
 * would otherwise find the next turn's versions there, miss its pause,
 * and take the other reader's versions for its own. The
 * ack is a word in shared memory that the producer spins on, not a pipe:
 * a producer woken from a sleep would add its own wake-up time to the
 * delay, which must stay below the reader's spin budget.
 */
#include "config.h"

#include "lib/args.h"
#include "lib/columns.h"
#include "lib/json.h"
#include "lib/proc.h"
#include "lib/stats.h"
#include "lib/sysinfo.h"
#include "perf.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <weft/registry.h>
#include <weft/weft.h>

enum lat_mode { MODE_DEFAULT, MODE_FUTEX, MODE_SOCKET, MODE_COUNT };

static const char *const mode_names[MODE_COUNT] = {
    [MODE_DEFAULT] = "default",
    [MODE_FUTEX] = "futex",
    [MODE_SOCKET] = "unix-socket",
};

#define LAT_TENSOR        "timestamp"
#define LAT_STOP_ROUND    UINT64_MAX       /* round number that ends a reader */
#define LAT_PAUSE_ROUND   (UINT64_MAX - 1) /* … that ends a reader's turn */
#define LAT_SOCK_STOP     0                /* the same, as socket messages */
#define LAT_SOCK_PAUSE    1
#define LAT_TURN_ROUNDS   100              /* rounds of one mode before the next */
#define LAT_ROUND_TIMEOUT 5000             /* ms: any one step of a round */
#define LAT_EXIT_TIMEOUT  10000            /* ms: a reader's exit after its stop */

/* Targets from shared/PERF.md: shown, not enforced. */
#define TARGET_SPEEDUP_P50       10.0
#define TARGET_FUTEX_SPEEDUP_P50 1.5
#define TARGET_P99_US            50.0

/* What a reader reports, in memory shared with the parent. */
typedef struct lat_result {
    _Atomic uint64_t ack;     /* counts the reader's waits; set just before each */
    uint64_t         rounds;  /* one past the last round sampled, warm-up included */
    uint64_t         wrong;   /* wake-ups with another version or round than expected */
    long             spin_us; /* WEFT_REGISTRY_SPIN_US in force in the reader */
} lat_result_t;

typedef struct lat_shared {
    lat_result_t result[MODE_COUNT];
    uint64_t     samples[]; /* MODE_COUNT × capacity, in ns */
} lat_shared_t;

typedef struct lat_options {
    uint64_t iterations;
    uint64_t warmup;
    double   seconds;
    uint64_t delay_min_us;
    uint64_t delay_max_us; /* 0: half the spin budget */
    uint64_t seed;
    int      json;
} lat_options_t;

/* The parent's ends of one reader's channels. */
typedef struct lat_reader {
    pid_t pid;
    int   start_fd; /* parent → reader: one byte starts a turn */
    int   sock_fd;  /* socket mode: the producer's end of the socketpair */
} lat_reader_t;

typedef struct lat_run {
    lat_options_t   opt;
    char            name[WEFT_REGISTRY_NAME_MAX];
    uint64_t        capacity; /* warm-up + iterations */
    lat_shared_t   *shared;
    size_t          shared_size;
    int             cpu[2];
    int             cpus;
    int             pinned;
    long            spin_us;
    perf_children_t children;
    lat_reader_t    reader[MODE_COUNT];
    weft_registry_h reg;
    int             created;
    uint32_t        tensor;
    uint64_t        acks[MODE_COUNT]; /* acknowledgements seen per reader */
    uint64_t        rounds;           /* per mode, warm-up included */
} lat_run_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf publish-lat [OPTIONS]\n"
            "\n"
            "Measures, across two processes, the time from weft_registry_publish() to the\n"
            "waiting reader's wake-up: default mode (spin up to WEFT_REGISTRY_SPIN_US, then\n"
            "futex), futex only (WEFT_REGISTRY_SPIN_US=0), and a Unix-socket notify as the\n"
            "baseline. The producer publishes only once the reader waits, after a random\n"
            "delay that lies below the spin budget.\n"
            "\n"
            "  -n, --iterations N    measured rounds per mode (default 20000)\n"
            "  -w, --warmup N        rounds per mode before measuring (default 1000)\n"
            "  -t, --seconds S       stop measuring after S seconds, all modes together,\n"
            "                        warm-up excluded (default 30)\n"
            "      --delay-min-us U  shortest delay before a publish (default 10)\n"
            "      --delay-max-us U  longest delay (default: half the spin budget, at\n"
            "                        least delay-min + 10)\n"
            "      --seed N          seed of the delays (default 1)\n"
            "      --json            print one JSON object instead of the table\n"
            "  -h, --help            this text\n");
}

static int parse_options(int argc, char **argv, lat_options_t *opt)
{
    enum { OPT_DELAY_MIN = 256, OPT_DELAY_MAX, OPT_SEED, OPT_JSON };
    static const struct option longopts[] = {
        {"iterations", required_argument, NULL, 'n'},
        {"warmup", required_argument, NULL, 'w'},
        {"seconds", required_argument, NULL, 't'},
        {"delay-min-us", required_argument, NULL, OPT_DELAY_MIN},
        {"delay-max-us", required_argument, NULL, OPT_DELAY_MAX},
        {"seed", required_argument, NULL, OPT_SEED},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, rc = 0;

    *opt = (lat_options_t){.iterations = 20000, .warmup = 1000, .seconds = 30.0, .delay_min_us = 10,
                           .seed = 1};
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:w:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': rc = perf_arg_u64("--iterations", optarg, 1, 10000000, &opt->iterations); break;
        case 'w': rc = perf_arg_u64("--warmup", optarg, 0, 1000000, &opt->warmup); break;
        case 't': rc = perf_arg_double("--seconds", optarg, 0.001, 3600, &opt->seconds); break;
        case OPT_DELAY_MIN: rc = perf_arg_u64("--delay-min-us", optarg, 1, 1000000, &opt->delay_min_us); break;
        case OPT_DELAY_MAX: rc = perf_arg_u64("--delay-max-us", optarg, 1, 1000000, &opt->delay_max_us); break;
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
        fprintf(stderr, "weft-perf publish-lat: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (opt->delay_max_us != 0 && opt->delay_max_us < opt->delay_min_us) {
        fprintf(stderr, "weft-perf publish-lat: --delay-max-us is below --delay-min-us\n");
        return -1;
    }
    return 0;
}

/* splitmix64's finalizer: the delay of a round is a function of the round
 * alone, so that every mode sees the same delays; neither process can
 * predict them, which is all the randomness needed. */
static uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static uint64_t round_delay_ns(const lat_run_t *run, uint64_t round)
{
    uint64_t span_ns = (run->opt.delay_max_us - run->opt.delay_min_us) * 1000u;

    return run->opt.delay_min_us * 1000u + mix(run->opt.seed ^ mix(round)) % (span_ns + 1);
}

static int write_byte(int fd, const char *what)
{
    char byte = 1;

    for (;;) {
        ssize_t n = write(fd, &byte, 1);

        if (n == 1) {
            return 0;
        }
        if (n < 0 && errno == EINTR && !perf_interrupted) {
            continue;
        }
        fprintf(stderr, "weft-perf publish-lat: cannot write the %s: %s\n", what,
                n < 0 ? strerror(errno) : "short write");
        return -1;
    }
}

/* ----------------------------------------------------------------- reader */

/* Reads the spin budget this process's libweft uses (its first libweft
 * call) and checks that it is the one the mode needs. */
static int reader_spin_budget(enum lat_mode mode, long *spin_us)
{
    const char *value = perf_config_value("WEFT_REGISTRY_SPIN_US");
    char       *end;

    if (value == NULL) {
        fprintf(stderr, "weft-perf publish-lat: this libweft does not know WEFT_REGISTRY_SPIN_US\n");
        return -1;
    }
    errno = 0;
    *spin_us = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || *spin_us < 0) {
        fprintf(stderr, "weft-perf publish-lat: WEFT_REGISTRY_SPIN_US='%s' is not a number of µs\n",
                value);
        return -1;
    }
    if (mode == MODE_FUTEX && *spin_us != 0) {
        fprintf(stderr, "weft-perf publish-lat: the futex reader sees WEFT_REGISTRY_SPIN_US=%s, not 0 "
                        "(libweft read its configuration before the fork)\n", value);
        return -1;
    }
    return 0;
}

/* Blocks until the producer gives the reader its turn: 1; 0 when the
 * parent closed the pipe (it gave up); -1 on an error. Bounded by the
 * parent: it writes, closes, or dies (and PR_SET_PDEATHSIG ends us). */
static int await_turn(int start_fd)
{
    char    byte;
    ssize_t n;

    do {
        n = read(start_fd, &byte, 1);
    } while (n < 0 && errno == EINTR && !perf_interrupted);
    if (n < 0) {
        fprintf(stderr, "weft-perf publish-lat: reader: start pipe: %s\n", strerror(errno));
    }
    return n == 1 ? 1 : n == 0 ? 0 : -1;
}

/* Stores a sample; round is the one the producer sent. */
static void record(lat_run_t *run, enum lat_mode mode, uint64_t *expected, uint64_t round, uint64_t t0,
                   uint64_t woken)
{
    lat_result_t *result = &run->shared->result[mode];

    if (round != *expected || round >= run->capacity || woken < t0) {
        result->wrong++;
    } else {
        run->shared->samples[(size_t)mode * run->capacity + round] = woken - t0;
        result->rounds = round + 1;
    }
    *expected = round + 1;
}

/* Leases the latest version and returns it (0: none yet). */
static int latest_version(weft_registry_h reg, enum lat_mode mode, uint64_t *version)
{
    weft_lease_t  lease;
    weft_status_t status = weft_registry_acquire(reg, &lease);

    *version = 0;
    if (status == WEFT_OK) {
        *version = lease.version;
        status = weft_registry_release(reg, &lease);
    } else if (status == WEFT_ERR_NOT_FOUND) {
        status = WEFT_OK;
    }
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: %s reader: acquire/release failed: %s\n",
                mode_names[mode], weft_status_string(status));
        return -1;
    }
    return 0;
}

/* One wake-up: waits for the version after `last` and reads the producer's
 * timestamp and round from it. Returns the wake-up time, 0 on failure. */
static uint64_t wake_once(weft_registry_h reg, enum lat_mode mode, uint32_t index, uint64_t *last,
                          uint64_t *t0, uint64_t *round, uint64_t *wrong)
{
    weft_lease_t    lease;
    weft_status_t   status;
    const void     *data;
    const uint64_t *word;
    uint64_t        woken;

    status = weft_registry_wait(reg, *last, (uint64_t)LAT_ROUND_TIMEOUT * 1000u, &lease);
    woken = perf_now_ns();
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: %s reader: wait after version %" PRIu64 " failed: %s\n",
                mode_names[mode], *last, weft_status_string(status));
        return 0;
    }
    status = weft_registry_lease_tensor(reg, &lease, index, &data);
    if (status == WEFT_OK) {
        word = data;
        *t0 = word[0];
        *round = word[1];
    } else {
        fprintf(stderr, "weft-perf publish-lat: %s reader: lease_tensor failed: %s\n", mode_names[mode],
                weft_status_string(status));
    }
    if (lease.version != *last + 1) {
        (*wrong)++; /* the producer publishes once per wait: none may be missed */
    }
    *last = lease.version;
    if (weft_registry_release(reg, &lease) != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: %s reader: release of version %" PRIu64 " failed\n",
                mode_names[mode], lease.version);
        return 0;
    }
    return status == WEFT_OK ? woken : 0;
}

/* The registry reader: one handle for the run. Each turn it catches up with
 * the versions the other registry mode published, then measures rounds
 * until the producer's pause. */
static int reader_registry(lat_run_t *run, enum lat_mode mode, int start_fd)
{
    lat_result_t   *result = &run->shared->result[mode];
    weft_registry_h reg = NULL;
    uint64_t        expected = 0, acks = 0;
    uint32_t        index;
    weft_status_t   status;
    int             rc = -1, turn;

    if (reader_spin_budget(mode, &result->spin_us) != 0) {
        return -1;
    }
    /* The producer creates the registry after the forks: the first turn
     * says it exists. */
    turn = await_turn(start_fd);
    if (turn <= 0) {
        return turn;
    }
    status = weft_registry_open(run->name, WEFT_REGISTRY_OPEN_READ, &reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: %s reader: cannot open registry '%s': %s\n",
                mode_names[mode], run->name, weft_status_string(status));
        return -1;
    }
    status = weft_registry_lookup(reg, LAT_TENSOR, &index);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: %s reader: lookup of '%s' failed: %s\n",
                mode_names[mode], LAT_TENSOR, weft_status_string(status));
        goto out;
    }
    for (;; turn = await_turn(start_fd)) {
        uint64_t last;

        if (turn <= 0) {
            rc = turn;
            goto out;
        }
        if (latest_version(reg, mode, &last) != 0) {
            goto out;
        }
        for (;;) {
            uint64_t t0 = 0, round = 0, woken;

            atomic_store(&result->ack, ++acks);
            woken = wake_once(reg, mode, index, &last, &t0, &round, &result->wrong);
            if (woken == 0) {
                goto out;
            }
            if (round == LAT_STOP_ROUND || round == LAT_PAUSE_ROUND) {
                atomic_store(&result->ack, ++acks); /* the end of the turn: seen */
                if (round == LAT_STOP_ROUND) {
                    rc = 0;
                    goto out;
                }
                break;
            }
            record(run, mode, &expected, round, t0, woken);
        }
    }
out:
    status = weft_registry_close(reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: %s reader: close failed: %s\n", mode_names[mode],
                weft_status_string(status));
        rc = -1;
    }
    return rc;
}

/* The baseline reader: blocked in read() on its end of the socketpair. */
static int reader_socket(lat_run_t *run, int start_fd, int sock_fd)
{
    lat_result_t  *result = &run->shared->result[MODE_SOCKET];
    struct timeval timeout = {.tv_sec = LAT_ROUND_TIMEOUT / 1000};
    uint64_t       expected = 0, acks = 0;

    result->spin_us = -1;
    /* A bounded read that is still one system call: the peer's cost. */
    if (setsockopt(sock_fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)) != 0) {
        fprintf(stderr, "weft-perf publish-lat: socket reader: SO_RCVTIMEO: %s\n", strerror(errno));
        return -1;
    }
    for (;;) {
        int turn = await_turn(start_fd);

        if (turn <= 0) {
            return turn;
        }
        for (;;) {
            uint64_t t0, woken;
            ssize_t  n;

            atomic_store(&result->ack, ++acks);
            n = read(sock_fd, &t0, sizeof(t0));
            woken = perf_now_ns();
            if (n != (ssize_t)sizeof(t0)) {
                fprintf(stderr, "weft-perf publish-lat: socket reader: read: %s\n",
                        n < 0 ? strerror(errno) : "short message or end of file");
                return -1;
            }
            if (t0 == LAT_SOCK_STOP || t0 == LAT_SOCK_PAUSE) {
                atomic_store(&result->ack, ++acks); /* the end of the turn: seen */
                if (t0 == LAT_SOCK_STOP) {
                    return 0;
                }
                break;
            }
            /* The round is implicit: messages are neither lost nor reordered. */
            record(run, MODE_SOCKET, &expected, expected, t0, woken);
        }
    }
}

/* A reader process: placed and configured before its first libweft call. */
static int reader_main(lat_run_t *run, enum lat_mode mode, int start_fd, int sock_fd)
{
    if (run->pinned && perf_pin_cpu(run->cpu[1]) != 0) {
        return 1;
    }
    if (mode == MODE_FUTEX && setenv("WEFT_REGISTRY_SPIN_US", "0", 1) != 0) {
        fprintf(stderr, "weft-perf publish-lat: setenv: %s\n", strerror(errno));
        return 1;
    }
    if (mode == MODE_SOCKET) {
        return reader_socket(run, start_fd, sock_fd) == 0 ? 0 : 1;
    }
    return reader_registry(run, mode, start_fd) == 0 ? 0 : 1;
}

/* --------------------------------------------------------------- producer */

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Forks the reader of each mode, before the parent's first libweft call. */
static int start_readers(lat_run_t *run)
{
    for (int m = 0; m < MODE_COUNT; m++) {
        lat_reader_t *r = &run->reader[m];
        int           start[2], sock[2] = {-1, -1};

        if (pipe(start) != 0) {
            fprintf(stderr, "weft-perf publish-lat: pipe: %s\n", strerror(errno));
            return -1;
        }
        r->start_fd = start[1];
        if (m == MODE_SOCKET && socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sock) != 0) {
            fprintf(stderr, "weft-perf publish-lat: socketpair: %s\n", strerror(errno));
            close(start[0]);
            return -1;
        }
        r->sock_fd = sock[0];
        r->pid = perf_fork(&run->children);
        if (r->pid == 0) {
            /* The parent's ends close here too: a reader that waits for its
             * start must see end of file when the parent gives up. */
            for (int k = 0; k <= m; k++) {
                close_fd(&run->reader[k].start_fd);
                close_fd(&run->reader[k].sock_fd);
            }
            _exit(reader_main(run, (enum lat_mode)m, start[0], sock[1]));
        }
        close(start[0]);
        if (sock[1] >= 0) {
            close(sock[1]);
        }
        if (r->pid < 0) {
            return -1;
        }
    }
    return 0;
}

/* Spins, bounded, until the reader says it is about to wait again.
 * Returns the time it was seen, or 0 on failure. */
static uint64_t await_ack(lat_run_t *run, enum lat_mode mode)
{
    _Atomic uint64_t *ack = &run->shared->result[mode].ack;
    uint64_t          expected = ++run->acks[mode];
    /* Twice the reader's own timeouts: a reader that is stuck says where
     * before the producer gives up on it. */
    uint64_t          deadline = perf_now_ns() + (uint64_t)LAT_ROUND_TIMEOUT * 2000000u;

    for (unsigned n = 1;; n++) {
        if (atomic_load_explicit(ack, memory_order_acquire) == expected) {
            return perf_now_ns();
        }
        if (n % 4096 == 0) {
            int   status;
            /* Peeked, not reaped: a reader acknowledges its stop, then
             * exits, and may do both between the load above and this. */
            pid_t pid = perf_peek_exited(&run->children, &status);

            if (pid > 0 && atomic_load_explicit(ack, memory_order_acquire) == expected) {
                return perf_now_ns(); /* its exit is collected by measure() */
            }
            if (pid != 0 || perf_interrupted || perf_now_ns() > deadline) {
                char what[96];

                if (pid > 0) {
                    perf_describe_status(status, what, sizeof(what));
                }
                fprintf(stderr, "weft-perf publish-lat: %s reader: %s\n", mode_names[mode],
                        pid > 0 ? what : perf_interrupted ? "interrupted" : "no acknowledgement within 10 s");
                return 0;
            }
            if (!run->pinned) {
                sched_yield(); /* the reader needs this CPU to get there */
            }
        }
    }
}

static int create_registry(lat_run_t *run)
{
    weft_tensor_desc_t desc = {
        .name = LAT_TENSOR,
        .layer = -1,
        .expert = -1,
        .role = WEFT_ROLE_W,
        .dtype = WEFT_DTYPE_INT64,
        .ndim = 1,
        .shape = {2}, /* the producer's timestamp, the round number */
    };
    weft_status_t status;

    status = weft_registry_create(run->name, NULL, &run->reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: cannot create registry '%s': %s\n", run->name,
                weft_status_string(status));
        return -1;
    }
    run->created = 1;
    status = weft_registry_declare(run->reg, &desc, &run->tensor);
    if (status == WEFT_OK) {
        status = weft_registry_seal(run->reg);
    }
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: cannot declare and seal registry '%s': %s\n", run->name,
                weft_status_string(status));
        return -1;
    }
    return 0;
}

/* One notification: a version whose tensor holds t0 and the round, or the
 * 8-byte t0 on the socket. t0 is taken just before the call that wakes. */
static int notify(lat_run_t *run, enum lat_mode mode, uint64_t round, uint64_t publish_at)
{
    weft_status_t status;
    uint64_t     *word;
    void         *data;

    if (mode == MODE_SOCKET) {
        uint64_t t0;
        ssize_t  n;

        perf_spin_until_ns(publish_at);
        t0 = round == LAT_STOP_ROUND ? LAT_SOCK_STOP : round == LAT_PAUSE_ROUND ? LAT_SOCK_PAUSE : perf_now_ns();
        n = send(run->reader[mode].sock_fd, &t0, sizeof(t0), MSG_NOSIGNAL);
        if (n != (ssize_t)sizeof(t0)) {
            fprintf(stderr, "weft-perf publish-lat: socket write: %s\n",
                    n < 0 ? strerror(errno) : "short write");
            return -1;
        }
        return 0;
    }
    /* The reader released its lease before it acknowledged: a slot is free
     * at once; the timeout only bounds a registry that misbehaves. */
    status = weft_registry_write_begin(run->reg, (uint64_t)LAT_ROUND_TIMEOUT * 1000u, NULL);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: write_begin failed: %s\n", weft_status_string(status));
        return -1;
    }
    status = weft_registry_write_tensor(run->reg, run->tensor, &data);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: write_tensor failed: %s\n", weft_status_string(status));
        (void)weft_registry_write_abort(run->reg);
        return -1;
    }
    word = data;
    word[1] = round;
    perf_spin_until_ns(publish_at);
    word[0] = perf_now_ns();
    status = weft_registry_publish(run->reg, 0, NULL);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf publish-lat: publish failed: %s\n", weft_status_string(status));
        (void)weft_registry_write_abort(run->reg);
        return -1;
    }
    return 0;
}

/* One turn of a mode: rounds [first, first + count), then the message that
 * pauses or stops its reader (end_round). */
static int run_turn(lat_run_t *run, enum lat_mode mode, uint64_t first, uint64_t count, uint64_t end_round)
{
    uint64_t acked;

    if (write_byte(run->reader[mode].start_fd, "start signal") != 0) {
        return -1;
    }
    for (uint64_t round = first; round < first + count; round++) {
        acked = await_ack(run, mode);
        if (acked == 0 || notify(run, mode, round, acked + round_delay_ns(run, round)) != 0) {
            return -1;
        }
    }
    acked = await_ack(run, mode);
    if (acked == 0 || notify(run, mode, end_round, acked) != 0) {
        return -1;
    }
    /* The reader saw the pause (or stop) before anyone publishes again. */
    return await_ack(run, mode) == 0 ? -1 : 0;
}

/* The measurement: turns of every mode in order until the rounds are done
 * or the time is up, then the stop of every reader. */
static int measure(lat_run_t *run)
{
    uint64_t deadline = UINT64_MAX;

    run->rounds = 0;
    while (run->rounds < run->capacity) {
        uint64_t count = run->capacity - run->rounds;

        count = count < LAT_TURN_ROUNDS ? count : LAT_TURN_ROUNDS;
        for (int m = 0; m < MODE_COUNT; m++) {
            if (run_turn(run, (enum lat_mode)m, run->rounds, count, LAT_PAUSE_ROUND) != 0) {
                return -1;
            }
        }
        run->rounds += count;
        if (deadline == UINT64_MAX && run->rounds >= run->opt.warmup) {
            deadline = perf_now_ns() + (uint64_t)(run->opt.seconds * 1e9);
        }
        if (perf_now_ns() >= deadline) {
            break;
        }
    }
    for (int m = 0; m < MODE_COUNT; m++) {
        lat_reader_t *r = &run->reader[m];
        char          what[96];
        int           status;

        if (run_turn(run, (enum lat_mode)m, run->rounds, 0, LAT_STOP_ROUND) != 0 ||
            perf_wait_child(&run->children, r->pid, LAT_EXIT_TIMEOUT, &status) != 0) {
            return -1;
        }
        r->pid = 0;
        if (status != 0) {
            perf_describe_status(status, what, sizeof(what));
            fprintf(stderr, "weft-perf publish-lat: %s reader %s\n", mode_names[m], what);
            return -1;
        }
    }
    return 0;
}

/* ----------------------------------------------------------------- report */

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

static const char *met(int ok)
{
    return ok ? "met" : "NOT met";
}

/* A mode's row: the table's columns, and the JSON's among them (each
 * mode's keys after its prefix). */
enum { COL_MODE, COL_SAMPLES, COL_P50, COL_P99, COL_P999, COL_MAX, COL_WRONG, COLS };

static const perf_column_t columns[COLS] = {
    [COL_MODE] = {NULL, "mode", -12, 0, PERF_COLUMN_TEXT},
    [COL_SAMPLES] = {"samples", "samples", 9, 0, PERF_COLUMN_UINT},
    [COL_P50] = {"p50_us", "p50_us", 9, 2, PERF_COLUMN_DOUBLE},
    [COL_P99] = {"p99_us", "p99_us", 9, 2, PERF_COLUMN_DOUBLE},
    [COL_P999] = {"p999_us", "p99.9_us", 9, 2, PERF_COLUMN_DOUBLE},
    [COL_MAX] = {"max_us", "max_us", 9, 2, PERF_COLUMN_DOUBLE},
    [COL_WRONG] = {NULL, "wrong", 6, 0, PERF_COLUMN_UINT}, /* the JSON has their sum */
};

static const char *const json_prefix[MODE_COUNT] = {
    [MODE_DEFAULT] = "", [MODE_FUTEX] = "futex_", [MODE_SOCKET] = "baseline_"};

static void mode_cells(const perf_latency_t *lat, uint64_t wrong, enum lat_mode mode, perf_cell_t cells[COLS])
{
    cells[COL_MODE] = (perf_cell_t){.text = mode_names[mode]};
    cells[COL_SAMPLES] = (perf_cell_t){.u = lat->samples};
    cells[COL_P50] = (perf_cell_t){.d = lat->p50_us};
    cells[COL_P99] = (perf_cell_t){.d = lat->p99_us};
    cells[COL_P999] = (perf_cell_t){.d = lat->p999_us};
    cells[COL_MAX] = (perf_cell_t){.d = lat->max_us};
    cells[COL_WRONG] = (perf_cell_t){.u = wrong};
}

static void report(const lat_run_t *run, const perf_latency_t lat[MODE_COUNT], uint64_t wrong[MODE_COUNT])
{
    const perf_latency_t *dflt = &lat[MODE_DEFAULT], *futex = &lat[MODE_FUTEX], *sock = &lat[MODE_SOCKET];
    double speedup = ratio(sock->p50_us, dflt->p50_us);
    double futex_speedup = ratio(sock->p50_us, futex->p50_us);
    int    targets = speedup >= TARGET_SPEEDUP_P50 && futex_speedup >= TARGET_FUTEX_SPEEDUP_P50 &&
                  dflt->p99_us <= TARGET_P99_US;
    char        host[256];
    perf_cell_t cells[COLS];

    if (run->opt.json) {
        perf_json_t json;

        perf_host_name(host, sizeof(host));
        perf_json_begin(&json, stdout);
        perf_json_str(&json, "command", "publish-lat");
        perf_json_str(&json, "version", weft_version());
        perf_json_str(&json, "host", host);
        perf_json_int(&json, "cpus", run->cpus);
        perf_json_bool(&json, "pinned", run->pinned);
        perf_json_int(&json, "spin_us", run->spin_us);
        perf_json_uint(&json, "delay_min_us", run->opt.delay_min_us);
        perf_json_uint(&json, "delay_max_us", run->opt.delay_max_us);
        perf_json_uint(&json, "warmup", run->opt.warmup);
        for (int m = 0; m < MODE_COUNT; m++) {
            mode_cells(&lat[m], wrong[m], (enum lat_mode)m, cells);
            perf_columns_json(&json, json_prefix[m], columns, COLS, cells);
        }
        perf_json_double(&json, "speedup_p50", speedup);
        perf_json_double(&json, "speedup_p99", ratio(sock->p99_us, dflt->p99_us));
        perf_json_double(&json, "futex_speedup_p50", futex_speedup);
        perf_json_double(&json, "futex_speedup_p99", ratio(sock->p99_us, futex->p99_us));
        perf_json_uint(&json, "wrong", wrong[MODE_DEFAULT] + wrong[MODE_FUTEX] + wrong[MODE_SOCKET]);
        perf_json_bool(&json, "targets_met", targets);
        perf_json_end(&json);
        return;
    }
    printf("#\n");
    perf_columns_header(stdout, "# ", columns, COLS);
    printf("\n");
    for (int m = 0; m < MODE_COUNT; m++) {
        mode_cells(&lat[m], wrong[m], (enum lat_mode)m, cells);
        perf_columns_row(stdout, "  ", columns, COLS, cells);
        printf("\n");
    }
    printf("#\n# speedup over unix-socket, p50: default %.1fx (target >= %.0fx: %s), futex %.2fx "
           "(target >= %.1fx: %s)\n", speedup, TARGET_SPEEDUP_P50, met(speedup >= TARGET_SPEEDUP_P50),
           futex_speedup, TARGET_FUTEX_SPEEDUP_P50, met(futex_speedup >= TARGET_FUTEX_SPEEDUP_P50));
    printf("# speedup over unix-socket, p99: default %.1fx, futex %.2fx\n",
           ratio(sock->p99_us, dflt->p99_us), ratio(sock->p99_us, futex->p99_us));
    printf("# default p99: %.2f us (target <= %.0f us: %s)\n", dflt->p99_us, TARGET_P99_US,
           met(dflt->p99_us <= TARGET_P99_US));
}

static void print_preamble(const lat_run_t *run)
{
    printf("# weft-perf publish-lat: publish -> waiting reader woken, across two processes\n");
    perf_print_host(stdout, run->cpus);
    if (run->pinned) {
        printf("# producer pinned to CPU %d, each reader to CPU %d\n", run->cpu[0], run->cpu[1]);
    } else {
        printf("# one CPU allowed: processes not pinned; both share it\n");
    }
    printf("# spin budget: WEFT_REGISTRY_SPIN_US=%ld (default mode); the futex reader runs with "
           "WEFT_REGISTRY_SPIN_US=0\n", run->spin_us);
    printf("# pacing: the reader acknowledges in shared memory, then waits; the producer sees it, busy-waits a "
           "uniform random %" PRIu64 "..%" PRIu64 " us, then timestamps and publishes\n",
           run->opt.delay_min_us, run->opt.delay_max_us);
    if (run->spin_us == 0) {
        printf("# WEFT_REGISTRY_SPIN_US=0: the default mode is futex-only as well\n");
    } else if (run->opt.delay_max_us < (uint64_t)run->spin_us) {
        printf("# the delay lies below the %ld us spin budget: a default-mode reader is still "
               "spinning when the publish comes\n", run->spin_us);
    } else {
        printf("# warning: the delay reaches the %ld us spin budget: default-mode wake-ups may "
               "come through the futex\n", run->spin_us);
    }
    printf("# rounds per mode: %" PRIu64 " warm-up, then %" PRIu64 " (or until %.1f s have passed); "
           "modes take turns of %d rounds, with the same delays\n",
           run->opt.warmup, run->opt.iterations, run->opt.seconds, LAT_TURN_ROUNDS);
    printf("# baseline: the producer's timestamp as an 8-byte message on a SOCK_SEQPACKET socketpair, "
           "the reader blocked in read()\n");
    fflush(stdout);
}

/* Decides the delay range from the spin budget in force (the default
 * mode's), unless the options fixed it. */
static void choose_delays(lat_run_t *run)
{
    if (run->opt.delay_max_us == 0) {
        uint64_t half = run->spin_us > 0 ? (uint64_t)run->spin_us / 2 : 0;

        run->opt.delay_max_us = half >= run->opt.delay_min_us + 10 ? half : run->opt.delay_min_us + 10;
    }
}

static int read_spin_budget(lat_run_t *run)
{
    const char *value = perf_config_value("WEFT_REGISTRY_SPIN_US");
    char       *end;

    if (value == NULL) {
        fprintf(stderr, "weft-perf publish-lat: this libweft does not know WEFT_REGISTRY_SPIN_US\n");
        return -1;
    }
    errno = 0;
    run->spin_us = strtol(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || run->spin_us < 0) {
        fprintf(stderr, "weft-perf publish-lat: WEFT_REGISTRY_SPIN_US='%s' is not a number of µs\n",
                value);
        return -1;
    }
    return 0;
}

int perf_cmd_publish_lat(int argc, char **argv)
{
    lat_run_t      run;
    perf_latency_t lat[MODE_COUNT];
    uint64_t       wrong[MODE_COUNT];
    int            rc = 1, parsed;

    memset(&run, 0, sizeof(run));
    for (int m = 0; m < MODE_COUNT; m++) {
        run.reader[m] = (lat_reader_t){.pid = 0, .start_fd = -1, .sock_fd = -1};
    }
    parsed = parse_options(argc, argv, &run.opt);
    if (parsed != 0) {
        return parsed > 0 ? 0 : 2;
    }
    run.capacity = run.opt.warmup + run.opt.iterations;
    run.shared_size = sizeof(lat_shared_t) + (size_t)MODE_COUNT * run.capacity * sizeof(uint64_t);
    run.shared = mmap(NULL, run.shared_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (run.shared == MAP_FAILED) {
        fprintf(stderr, "weft-perf publish-lat: cannot map %zu bytes for the samples: %s\n",
                run.shared_size, strerror(errno));
        return 1;
    }
    run.cpus = perf_cpus_allowed(run.cpu);
    run.pinned = run.cpus >= 2;
    snprintf(run.name, sizeof(run.name), "weft-perf-lat-%d", (int)getpid());
    if (perf_catch_interrupts() != 0 || start_readers(&run) != 0) {
        goto out;
    }

    /* Readers are forked: libweft may read its configuration now. */
    if (run.pinned && perf_pin_cpu(run.cpu[0]) != 0) {
        goto out;
    }
    if (read_spin_budget(&run) != 0) {
        goto out;
    }
    choose_delays(&run);
    if (!run.opt.json) {
        print_preamble(&run);
    }
    if (create_registry(&run) != 0) {
        goto out;
    }
    if (measure(&run) != 0) {
        goto out;
    }
    for (int m = 0; m < MODE_COUNT; m++) {
        const lat_result_t *result = &run.shared->result[m];
        uint64_t           *samples = run.shared->samples + (size_t)m * run.capacity;
        uint64_t            rounds = result->rounds < run.capacity ? result->rounds : run.capacity;
        uint64_t            skip = rounds < run.opt.warmup ? rounds : run.opt.warmup;

        if (m == MODE_DEFAULT && result->spin_us != run.spin_us) {
            fprintf(stderr, "weft-perf publish-lat: the default reader saw WEFT_REGISTRY_SPIN_US=%ld, "
                            "the producer %ld\n", result->spin_us, run.spin_us);
            goto out;
        }
        perf_latency_summarize(samples + skip, rounds - skip, &lat[m]);
        wrong[m] = result->wrong;
    }
    report(&run, lat, wrong);
    rc = wrong[MODE_DEFAULT] + wrong[MODE_FUTEX] + wrong[MODE_SOCKET] == 0 ? 0 : 1;
    if (rc != 0) {
        fprintf(stderr, "weft-perf publish-lat: readers woke with unexpected versions or rounds\n");
    }
out:
    /* Closing the start pipes ends readers that never started. */
    for (int m = 0; m < MODE_COUNT; m++) {
        close_fd(&run.reader[m].start_fd);
        close_fd(&run.reader[m].sock_fd);
    }
    perf_kill_children(&run.children);
    if (run.reg != NULL) {
        weft_status_t status = weft_registry_close(run.reg);

        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf publish-lat: close failed: %s\n", weft_status_string(status));
            rc = 1;
        }
    }
    if (run.created) {
        weft_status_t status = weft_registry_unlink(run.name);

        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf publish-lat: cannot unlink registry '%s': %s\n", run.name,
                    weft_status_string(status));
            rc = 1;
        }
    }
    munmap(run.shared, run.shared_size);
    return rc;
}
