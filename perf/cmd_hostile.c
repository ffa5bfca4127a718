/*
 * weft-perf hostile: what hostile connections to a ucx server add to a
 * correct consumer's latency (issue target: at most 10 ms).
 *
 * One process: a host registry, its ucx server on 127.0.0.1, a real
 * consumer (weft_remote_connect, host views) on the main thread, a
 * producer thread. Each version is published once the consumer received
 * the one before and waits again (1 ms later); its latency is the time
 * from publish to weft_remote_receive's return. After 5 versions untimed
 * (the endpoints' wire-up), phases of --iterations versions each: quiet; hostile (connections that never prove the token:
 * --slow of them sent half a header and went silent, as many idle ones,
 * one announcing a 64 MiB message, one trickling a HELLO a byte every
 * millisecond, and a thread that connects, sends garbage and closes as
 * fast as it can); quiet again. The figure is the hostile phase's median
 * and 99th percentile less the quiet phases' (both quiet phases pooled).
 * Every byte of every version the consumer received is checked.
 */
#include "lib/args.h"
#include "lib/json.h"
#include "lib/payload.h"
#include "lib/stats.h"
#include "perf.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#define TENSORS      4
#define TENSOR_BYTES (256u * 1024u)
#define TOKEN        "weft-perf-hostile"
#define TARGET_MS    10.0
#define MAX_SLOW     64
#define WARMUP       5 /* versions first, untimed: the endpoints' wire-up */

typedef struct hostile_options {
    uint64_t iters, slow;
    int      json;
} hostile_options_t;

typedef struct bench {
    weft_registry_h reg;
    uint16_t        port;
    uint64_t        versions; /* to publish in all */
    uint64_t       *publish_ns; /* by version */
    /* The consumer's turn: the last version it received (the producer
     * publishes the next one once this reaches the one before). */
    atomic_uint_fast64_t received;
    atomic_int           stop, failed;
} bench_t;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *producer_main(void *arg)
{
    bench_t *b = arg;

    for (uint64_t v = 1; v <= b->versions && !atomic_load(&b->stop); v++) {
        while (atomic_load(&b->received) + 1 < v && !atomic_load(&b->stop)) {
            usleep(100);
        }
        usleep(1000); /* the consumer is back in its receive */
        if (weft_registry_write_begin(b->reg, 5000000, NULL) != WEFT_OK) {
            atomic_store(&b->failed, 1);
            break;
        }
        for (uint32_t t = 0; t < TENSORS; t++) {
            uint8_t *data;
            (void)weft_registry_write_tensor(b->reg, t, (void **)&data);
            payload_fill(data, TENSOR_BYTES, v, t);
        }
        b->publish_ns[v] = now_ns();
        if (weft_registry_publish(b->reg, v, NULL) != WEFT_OK) {
            atomic_store(&b->failed, 1);
            break;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------ hostiles */

static int connect_local(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int                fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

typedef struct hostiles {
    bench_t    *bench;
    int         fds[2 * MAX_SLOW + 2];
    int         count;
    pthread_t   garbage, trickle;
    atomic_int  stop;
    atomic_uint_fast64_t garbage_connections, trickled_bytes;
} hostiles_t;

/* Connects, sends a little garbage, closes: as fast as it can. */
static void *garbage_main(void *arg)
{
    hostiles_t *h = arg;
    uint8_t     junk[64];

    for (size_t i = 0; i < sizeof(junk); i++) {
        junk[i] = (uint8_t)(i * 37 + 11);
    }
    while (!atomic_load(&h->stop)) {
        int fd = connect_local(h->bench->port);

        if (fd >= 0) {
            (void)send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
            close(fd);
            atomic_fetch_add(&h->garbage_connections, 1);
        }
    }
    return NULL;
}

/* A HELLO's header announcing 4 KiB, then a byte a millisecond. */
static void *trickle_main(void *arg)
{
    static const uint8_t header[16] = {'W', 'E', 'F', 'B', 1, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0};
    hostiles_t          *h = arg;
    int                  fd = -1;

    while (!atomic_load(&h->stop)) {
        if (fd < 0) {
            fd = connect_local(h->bench->port);
            if (fd < 0 || send(fd, header, sizeof(header), MSG_NOSIGNAL) != (ssize_t)sizeof(header)) {
                usleep(1000);
                continue;
            }
        }
        if (send(fd, "x", 1, MSG_NOSIGNAL) != 1) { /* the server dropped it: again */
            close(fd);
            fd = -1;
            continue;
        }
        atomic_fetch_add(&h->trickled_bytes, 1);
        usleep(1000);
    }
    if (fd >= 0) {
        close(fd);
    }
    return NULL;
}

static int hostiles_start(hostiles_t *h, bench_t *b, uint64_t slow)
{
    static const uint8_t half[8] = {'W', 'E', 'F', 'B', 1, 0, 0, 0};
    static const uint8_t big[16] = {'W', 'E', 'F', 'B', 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0};

    memset(h, 0, sizeof(*h));
    h->bench = b;
    for (uint64_t i = 0; i < 2 * slow + 1; i++) {
        const int fd = connect_local(b->port);

        if (fd < 0) {
            fprintf(stderr, "weft-perf hostile: cannot connect to the server\n");
            return -1;
        }
        h->fds[h->count++] = fd;
        if (i < slow) {
            (void)send(fd, half, sizeof(half), MSG_NOSIGNAL); /* then silence */
        } else if (i == 2 * slow) {
            (void)send(fd, big, sizeof(big), MSG_NOSIGNAL); /* 64 MiB announced */
        } /* else idle */
    }
    atomic_init(&h->stop, 0);
    if (pthread_create(&h->garbage, NULL, garbage_main, h) != 0 ||
        pthread_create(&h->trickle, NULL, trickle_main, h) != 0) {
        return -1;
    }
    return 0;
}

static void hostiles_stop(hostiles_t *h)
{
    atomic_store(&h->stop, 1);
    pthread_join(h->garbage, NULL);
    pthread_join(h->trickle, NULL);
    for (int i = 0; i < h->count; i++) {
        close(h->fds[i]);
    }
}

/* ------------------------------------------------------------- options */

static int usage(FILE *out)
{
    fprintf(out, "usage: weft-perf hostile [--iterations N] [--slow N] [--json]\n"
                 "  --iterations N  versions in each of the three phases (default 50)\n"
                 "  --slow N        half-header connections, and as many idle ones, in the\n"
                 "                  hostile phase (1..%d, default 8)\n"
                 "  --json          one JSON object\n",
            MAX_SLOW);
    return out == stdout ? 0 : 2;
}

static int parse(int argc, char **argv, hostile_options_t *o)
{
    static const struct option longopts[] = {{"iterations", required_argument, NULL, 'i'},
                                             {"slow", required_argument, NULL, 's'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int                        c, bad = 0;

    *o = (hostile_options_t){.iters = 50, .slow = 8};
    optind = 1;
    while (!bad && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'i': bad = perf_arg_u64("--iterations", optarg, 5, 100000, &o->iters); break;
        case 's': bad = perf_arg_u64("--slow", optarg, 1, MAX_SLOW, &o->slow); break;
        case 'j': o->json = 1; break;
        case 'h': usage(stdout); return 1;
        default: bad = 1;
        }
    }
    return bad || optind != argc ? 2 : 0;
}

/* ---------------------------------------------------------------- main */

static weft_status_t make_registry(const char *name, weft_registry_h *reg)
{
    weft_status_t status;

    (void)weft_registry_unlink(name);
    status = weft_registry_create(name, NULL, reg);
    for (uint32_t t = 0; t < TENSORS && status == WEFT_OK; t++) {
        char               tname[64];
        weft_tensor_desc_t d = {.name = tname, .expert = (int32_t)t, .role = WEFT_ROLE_W,
                                .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2, .shape = {512, TENSOR_BYTES / 512}};
        snprintf(tname, sizeof(tname), "model.layers.0.mlp.experts.%u.down_proj.weight", t);
        status = weft_registry_declare(*reg, &d, NULL);
    }
    return status == WEFT_OK ? weft_registry_seal(*reg) : status;
}

int perf_cmd_hostile(int argc, char **argv)
{
    hostile_options_t      o;
    bench_t                b = {0};
    hostiles_t             h;
    weft_server_h          server = NULL;
    weft_remote_h          remote = NULL;
    weft_recv_view_t       views[TENSORS];
    char                   name[64], names[TENSORS][64], addr[64];
    uint8_t               *bufs[TENSORS] = {0};
    uint64_t              *quiet, *hostile, wrong = 0, v = 0, n_quiet = 0, n_hostile = 0;
    perf_latency_t         lq, lh;
    pthread_t              producer;
    int                    rc = 1, started = 0, hostiles_on = 0;
    weft_server_params_t   sp = {.transport = WEFT_TRANSPORT_UCX, .listen = "127.0.0.1:0", .token = TOKEN};
    weft_remote_params_t   rp = {.transport = WEFT_TRANSPORT_UCX, .server = addr, .token = TOKEN,
                                 .name = "hostile-bench"};
    const int              parsed = parse(argc, argv, &o);

    weft_backend_info_t    info = {0};

    if (parsed != 0) {
        return parsed == 1 ? 0 : usage(stderr);
    }
    if (weft_backend_query(WEFT_BACKEND_UCX, &info) != WEFT_OK || !info.compiled || !info.available) {
        fprintf(stderr, "weft-perf hostile: libweft has no usable UCX (%s): skipped\n",
                info.compiled ? "not found at run time" : "not in this build");
        return 77; /* the automake "skipped" status */
    }
    b.versions = WARMUP + 3 * o.iters;
    b.publish_ns = calloc(b.versions + 1, sizeof(*b.publish_ns));
    quiet = calloc(b.versions, sizeof(*quiet));
    hostile = calloc(b.versions, sizeof(*hostile));
    snprintf(name, sizeof(name), "weft-perf-hostile-%d", (int)getpid());
    if (b.publish_ns == NULL || quiet == NULL || hostile == NULL || make_registry(name, &b.reg) != WEFT_OK ||
        weft_server_create(b.reg, &sp, &server) != WEFT_OK || weft_server_port(server, &b.port) != WEFT_OK) {
        fprintf(stderr, "weft-perf hostile: cannot set up the registry and its ucx server (is UCX there?)\n");
        goto out;
    }
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", b.port);
    for (uint32_t t = 0; t < TENSORS; t++) {
        bufs[t] = calloc(1, TENSOR_BYTES);
        snprintf(names[t], sizeof(names[t]), "model.layers.0.mlp.experts.%u.down_proj.weight", t);
        views[t] = (weft_recv_view_t){.name = names[t], .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3,
                                      .ndim = 2, .shape = {512, TENSOR_BYTES / 512}, .data = bufs[t]};
        if (bufs[t] == NULL) {
            goto out;
        }
    }
    if (weft_remote_connect(&rp, views, TENSORS, &remote) != WEFT_OK) {
        fprintf(stderr, "weft-perf hostile: the consumer cannot connect\n");
        goto out;
    }
    atomic_init(&b.received, 0);
    if (pthread_create(&producer, NULL, producer_main, &b) != 0) {
        goto out;
    }
    started = 1;
    while (v < b.versions) {
        /* -1 warm-up, 0 quiet, 1 hostile, 2 quiet */
        const int64_t phase = v < WARMUP ? -1 : (int64_t)((v - WARMUP) / o.iters);
        uint64_t       got = 0, at;

        if (phase == 1 && !hostiles_on) {
            if (hostiles_start(&h, &b, o.slow) != 0) {
                goto out;
            }
            hostiles_on = 1;
            usleep(20000); /* the server has met them */
        } else if (phase == 2 && hostiles_on == 1) {
            hostiles_stop(&h);
            hostiles_on = 2;
        }
        if (weft_remote_receive(remote, v, 10000000, &got) != WEFT_OK || got != v + 1) {
            fprintf(stderr, "weft-perf hostile: version %llu not received (got %llu)\n",
                    (unsigned long long)(v + 1), (unsigned long long)got);
            goto out;
        }
        at = now_ns();
        if (phase == 1) {
            hostile[n_hostile++] = at - b.publish_ns[got];
        } else if (phase >= 0) {
            quiet[n_quiet++] = at - b.publish_ns[got];
        }
        for (uint32_t t = 0; t < TENSORS; t++) {
            wrong += payload_count_wrong(bufs[t], TENSOR_BYTES, got, t);
        }
        v = got;
        atomic_store(&b.received, v);
    }
    perf_latency_summarize(quiet, n_quiet, &lq);
    perf_latency_summarize(hostile, n_hostile, &lh);
    if (o.json) {
        perf_json_t json;

        perf_json_begin(&json, stdout);
        perf_json_str(&json, "bench", "hostile");
        perf_json_uint(&json, "versions", v);
        perf_json_uint(&json, "slow_connections", o.slow);
        perf_json_uint(&json, "idle_connections", o.slow);
        perf_json_uint(&json, "garbage_connections", atomic_load(&h.garbage_connections));
        perf_json_uint(&json, "trickled_bytes", atomic_load(&h.trickled_bytes));
        perf_json_double(&json, "quiet_p50_ms", lq.p50_us / 1000);
        perf_json_double(&json, "quiet_p99_ms", lq.p99_us / 1000);
        perf_json_double(&json, "hostile_p50_ms", lh.p50_us / 1000);
        perf_json_double(&json, "hostile_p99_ms", lh.p99_us / 1000);
        perf_json_double(&json, "added_p50_ms", (lh.p50_us - lq.p50_us) / 1000);
        perf_json_double(&json, "added_p99_ms", (lh.p99_us - lq.p99_us) / 1000);
        perf_json_double(&json, "target_added_ms", TARGET_MS);
        perf_json_uint(&json, "wrong_bytes", wrong);
        perf_json_end(&json);
    } else {
        printf("publish -> received, %llu versions a phase, %llu slow + %llu idle + 1 oversized + 1 trickling "
               "connections, %llu garbage connections\n",
               (unsigned long long)o.iters, (unsigned long long)o.slow, (unsigned long long)o.slow,
               (unsigned long long)atomic_load(&h.garbage_connections));
        printf("  quiet    p50 %8.3f ms  p99 %8.3f ms\n", lq.p50_us / 1000, lq.p99_us / 1000);
        printf("  hostile  p50 %8.3f ms  p99 %8.3f ms\n", lh.p50_us / 1000, lh.p99_us / 1000);
        printf("  added    p50 %8.3f ms  p99 %8.3f ms  (target: at most %.0f ms)\n", (lh.p50_us - lq.p50_us) / 1000,
               (lh.p99_us - lq.p99_us) / 1000, TARGET_MS);
        printf("  wrong bytes: %llu\n", (unsigned long long)wrong);
    }
    rc = wrong == 0 && !atomic_load(&b.failed) ? 0 : 1;
out:
    atomic_store(&b.stop, 1);
    if (hostiles_on == 1) {
        hostiles_stop(&h);
    }
    if (started) {
        pthread_join(producer, NULL);
    }
    if (remote != NULL) {
        (void)weft_remote_close(remote);
    }
    if (server != NULL) {
        (void)weft_server_destroy(server);
    }
    if (b.reg != NULL) {
        (void)weft_registry_close(b.reg);
        (void)weft_registry_unlink(name);
    }
    for (uint32_t t = 0; t < TENSORS; t++) {
        free(bufs[t]);
    }
    free(b.publish_ns);
    free(quiet);
    free(hostile);
    return rc;
}
