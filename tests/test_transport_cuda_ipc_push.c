/*
 * The cuda_ipc transport pushed by the producer's process: a server
 * (weft_server_* with WEFT_TRANSPORT_CUDA_IPC) over a GPU registry on GPU
 * 0 maps the cudaMalloc'd views of consumers in other processes
 * (weft_remote_*) and copies every new version into them itself before
 * telling them. Covered: exact bytes over many versions with the consumer
 * on the registry's GPU (the default batched kernel, the copy engines
 * only, strided and contiguous views into fused gate_up/down tensors with
 * their scales) and on a second GPU; four consumers of one server spread
 * over the GPUs; refusals (a wrong token and an unknown tensor name with
 * nothing registered, host-memory views, a host registry refused by
 * weft_server_create), after which a good consumer is still served; a
 * consumer whose handshake (written by hand here) declares an allocation
 * larger than the memory its IPC handle exports is refused before any
 * copy could write past the server's mapping, while the same handshake
 * with the true size is accepted; a
 * consumer SIGKILLed mid-stream (the server drops it and keeps no record
 * of it, the other goes on exactly, a restarted one rejoins and gets the
 * next version exactly); rebinding by close, new memory and connect (the
 * server writes nothing more into the closed views; memory freed and
 * allocated again at likely the same addresses is mapped anew); the
 * views keep their version while a newer one is published and the
 * consumer does not ask; the server's stats (versions_sent, bytes_sent,
 * last_version, transfer_ns).
 * Exits 77 (skipped) without a GPU; with one GPU the second-GPU case says
 * so and returns.
 *
 * The server writes into a consumer's views only while that consumer
 * asks for a version (weft_remote_receive); a test checks that a version
 * published meanwhile stays out of the views until then. The other tests
 * still run in lockstep (each consumer posts every version it checked on
 * a pipe, and the producer publishes the next once all have posted), so
 * that a failure names the version it happened at.
 *
 * Every process that uses CUDA is forked before it touches CUDA: the test
 * process itself never does (Check forks each test from the runner), so
 * WEFT_* variables set in a test reach its children before libweft reads
 * them. Every wait is bounded: a hang fails the test, and the processes
 * of a failed test are killed.
 */
#include "config.h"

#include "common/cuda_util.h"
#include "common/time_util.h"
#include "lib/child.h"
#include "lib/gpu_skip.h"
#include "lib/transport_fixture.h"
#include "lib/harness.h"
#include "perf/lib/payload.h"
#include "transport/ctl/wire.h"
#include "transport/cuda_ipc/push.h"
#include "transport/remote/remote.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#define EXPERTS            8
#define HIDDEN             200 /* H: columns of gate_up, rows of down */
#define INTER              150 /* I: gate_up has 2I rows, down I columns */
#define KINDS              4   /* gate_up W and scales, down W and scales, per expert */
#define TENSORS            (EXPERTS * KINDS)
#define PAD                40  /* bytes of row padding of strided W views */
#define POISON             0xA5
#define TOKEN              "ipc-push-s3cret"
#define SERVER_GPU         0
#define MAX_CONSUMERS      16
#define CONSUMER_IDS       4096 /* the most consumer records a registry has */
#define WAIT_US            30000000u /* receive, write_begin, wait_consumers */
#define SERVER_TIMEOUT_US  10000000u
#define CONNECT_TIMEOUT_US 20000000u
#define STEP_S             30  /* a lockstep post, a cue, a stats change */
#define START_S            90  /* a process starts CUDA, its registry and listens */
#define READY_S            60  /* consumers connected and ready */
#define REAP_S             180 /* every process of a test has ended */
#define CASE_S             240 /* Check's limit for one test */
#define NS_PER_S           1000000000ull

static int gpu_count;

/* ------------------------------------------------------------ the data */

/* One tensor of each expert, as SGLang fuses them: w13 is
 * gate_up_proj[E, 2I, H], w2 is down_proj[E, H, I]; block scales fp32. */
typedef struct kind {
    const char        *suffix;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint64_t           rows, cols; /* elements */
    uint64_t           esize;      /* bytes per element */
} kind_t;

static const kind_t kinds[KINDS] = {
    {"gate_up_proj.weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 2 * INTER, HIDDEN, 1},
    {"gate_up_proj.weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 3, 2, 4}, /* ⌈300/128⌉, ⌈200/128⌉ */
    {"down_proj.weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, HIDDEN, INTER, 1},
    {"down_proj.weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, 2, 2, 4}, /* ⌈200/128⌉, ⌈150/128⌉ */
};

#define MAX_TENSOR_BYTES ((uint64_t)2 * INTER * HIDDEN)

/* Tensor t is kind t % KINDS of expert t / KINDS. */
static void tensor_name(char *buf, size_t size, uint32_t t)
{
    snprintf(buf, size, "model.layers.0.mlp.experts.%u.%s", t / KINDS, kinds[t % KINDS].suffix);
}

static uint64_t row_bytes(uint32_t k)
{
    return kinds[k].cols * kinds[k].esize;
}

static uint64_t tensor_bytes(uint32_t k)
{
    return kinds[k].rows * row_bytes(k);
}

static uint64_t version_bytes(void)
{
    uint64_t bytes = 0;

    for (uint32_t k = 0; k < KINDS; k++) {
        bytes += EXPERTS * tensor_bytes(k);
    }
    return bytes;
}

#define CHILD_OK(call)                                                                           \
    do {                                                                                         \
        weft_status_t st_ = (call);                                                              \
        if (st_ != WEFT_OK) {                                                                    \
            CHILD_FAIL("%s: %s", #call, weft_status_string(st_));                                \
        }                                                                                        \
    } while (0)

#define CUDA_OK(call)                                                                            \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess) {                                                               \
            CHILD_FAIL("%s: %s", #call, cudaGetErrorString(err_));                               \
        }                                                                                        \
    } while (0)

/* --------------------------------------------------- processes, pipes */

static int port_pipe[2];    /* server → test process: its port */
static int check_pipe[2];   /* consumers → server: each version they checked (lockstep) */
static int server_cue[2];   /* → the server */
static int parent_cue[2];   /* → the test process */
static int consumer_cue[2]; /* → a consumer */

static void pipes_open(void)
{
    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(check_pipe), 0);
    ck_assert_int_eq(pipe(server_cue), 0);
    ck_assert_int_eq(pipe(parent_cue), 0);
    ck_assert_int_eq(pipe(consumer_cue), 0);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* Reads exactly n bytes from fd within `seconds`: 0, or -1 on a timeout,
 * the end of the pipe or an error. */
static int read_within(int fd, void *buf, size_t n, int seconds)
{
    uint8_t *p = buf;
    uint64_t deadline = now_ns() + (uint64_t)seconds * NS_PER_S;
    size_t   got = 0;

    while (got < n) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        uint64_t      now = now_ns();
        ssize_t       r;

        if (now >= deadline) {
            return -1;
        }
        r = poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1);
        if (r < 0 && errno != EINTR) {
            return -1;
        }
        if (r <= 0) {
            continue;
        }
        r = read(fd, p + got, n - got);
        if (r == 0 || (r < 0 && errno != EINTR)) {
            return -1;
        }
        if (r > 0) {
            got += (size_t)r;
        }
    }
    return 0;
}

/* A child's message on a pipe; the child fails, naming the caller's
 * `line`, when it cannot be written. */
static void post(int fd, const void *buf, size_t n, int line)
{
    CHILD_CHECK_AT(line, write(fd, buf, n) == (ssize_t)n);
}

/* The test process's children, killed if the test fails before reaping. */
#define MAX_CHILDREN 8
static pid_t children[MAX_CHILDREN];
static pid_t test_process;

static void forget_child(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == pid) {
            children[i] = 0;
        }
    }
}

static void kill_children(void)
{
    if (getpid() != test_process) {
        return; /* a child that exits through exit(): not its business */
    }
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0) {
            kill(children[i], SIGKILL);
            (void)waitpid(children[i], NULL, 0);
            children[i] = 0;
        }
    }
}

/* Forks a child that runs body(arg) and exits 0 (or CHILD_FAILED, child.h). */
static pid_t spawn(void (*body)(const void *arg), const void *arg)
{
    int   slot = -1;
    pid_t pid;

    if (test_process != getpid()) {
        test_process = getpid();
        ck_assert_int_eq(atexit(kill_children), 0);
    }
    for (int i = 0; i < MAX_CHILDREN && slot < 0; i++) {
        if (children[i] == 0) {
            slot = i;
        }
    }
    ck_assert_int_ge(slot, 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        body(arg);
        CHILD_EXIT();
    }
    children[slot] = pid;
    return pid;
}

static int exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The child's exit code (128 + the signal that ended it), or -1 when it
 * had not ended by deadline_ns: it is killed then. */
static int reap_by(pid_t pid, uint64_t deadline_ns)
{
    int status;

    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);

        if (r == pid) {
            forget_child(pid);
            return exit_code(status);
        }
        if (r < 0 && errno != EINTR) {
            forget_child(pid);
            return -2;
        }
        if (now_ns() >= deadline_ns) {
            fprintf(stderr, "process %d still running at its deadline: killed\n", (int)pid);
            kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
            forget_child(pid);
            return -1;
        }
        usleep(10000);
    }
}

/* Every child in pids ends within REAP_S (else it is killed) with 0. */
static void expect_clean_exits(const pid_t *pids, const char *const *what, int n)
{
    uint64_t deadline = now_ns() + REAP_S * NS_PER_S;
    int      failed = 0;

    for (int i = 0; i < n; i++) {
        int code = reap_by(pids[i], deadline);

        if (code != 0) {
            fprintf(stderr, "%s (pid %d) ended with %d\n", what[i], (int)pids[i], code);
            failed++;
        }
    }
    ck_assert_msg(failed == 0, "%d of %d processes failed (see above)", failed, n);
}

/* The port the server process listens on, once it says so. */
static uint16_t await_port(pid_t server)
{
    uint16_t port = 0;

    for (int s = 0; s < START_S; s++) {
        int status;

        if (read_within(port_pipe[0], &port, sizeof(port), 1) == 0) {
            return port;
        }
        if (waitpid(server, &status, WNOHANG) == server) {
            forget_child(server);
            ck_abort_msg("the server ended with %d before it listened", exit_code(status));
        }
    }
    ck_abort_msg("the server did not listen within %d s", START_S);
    return 0;
}

/* A server and one consumer, each in a process of its own, the consumer
 * given the server's port; both must exit cleanly. */
static void server_and_consumer(void (*server)(const void *arg), void (*consumer)(const void *arg))
{
    static const char *const what[] = {"server", "consumer"};
    pid_t                    pids[2];
    uint16_t                 port;

    pipes_open();
    pids[0] = spawn(server, NULL);
    port = await_port(pids[0]);
    pids[1] = spawn(consumer, &port);
    expect_clean_exits(pids, what, 2);
}

/* The next byte on parent_cue is `want`, within `seconds`. */
static void await_cue(char want, int seconds)
{
    char got = '-';

    ck_assert_msg(read_within(parent_cue[0], &got, 1, seconds) == 0 && got == want,
                  "no cue '%c' within %d s (got '%c')", want, seconds, got);
}

/* ------------------------------------------------------------- lockstep */

static void lockstep_post(uint64_t v)
{
    post(check_pipe[1], &v, sizeof(v), __LINE__);
}

/* Every one of `consumers` checking consumers posted version v. */
static void lockstep_collect(uint64_t v, uint32_t consumers)
{
    for (uint32_t i = 0; i < consumers; i++) {
        uint64_t got = 0;

        if (read_within(check_pipe[0], &got, sizeof(got), STEP_S) != 0 || got != v) {
            CHILD_FAIL("server: version %llu: %u of %u consumers checked it (last post %llu)",
                       (unsigned long long)v, i, consumers, (unsigned long long)got);
        }
    }
}

/* ------------------------------------------------------------- server */

typedef struct server {
    char            name[WEFT_REGISTRY_NAME_MAX];
    weft_registry_h reg;
    weft_server_h   server;
    uint16_t        port;
    uint32_t        index[TENSORS];
} server_t;

static const weft_server_params_t server_params = {
    .field_mask = WEFT_SERVER_FIELD_TIMEOUT,
    .transport  = WEFT_TRANSPORT_CUDA_IPC,
    .listen     = "127.0.0.1:0",
    .token      = TOKEN,
    .timeout_us = SERVER_TIMEOUT_US,
};

/* A sealed registry of the TENSORS tensors, on SERVER_GPU or in host memory. */
static void registry_start(server_t *s, int on_gpu)
{
    /* With checksums: consumers whose views hold their tensors verbatim
     * check every version against them. */
    weft_registry_params_t rp = {
        .field_mask    = WEFT_REGISTRY_FIELD_MEMORY | WEFT_REGISTRY_FIELD_MAX_CONSUMERS | WEFT_REGISTRY_FIELD_CHECKSUMS,
        .max_consumers = MAX_CONSUMERS,
        .checksums     = 1,
        .memory        = on_gpu ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST,
        .device        = on_gpu ? SERVER_GPU : -1,
    };

    snprintf(s->name, sizeof(s->name), "t-ipcpush-%d-%s", (int)getpid(), on_gpu ? "gpu" : "host");
    weft_registry_unlink(s->name);
    if (on_gpu) {
        CUDA_OK(cudaSetDevice(SERVER_GPU));
    }
    CHILD_OK(weft_registry_create(s->name, &rp, &s->reg));
    for (uint32_t t = 0; t < TENSORS; t++) {
        const kind_t      *k = &kinds[t % KINDS];
        char               tname[WEFT_TENSOR_NAME_MAX];
        weft_tensor_desc_t d = {.name = tname, .layer = 0, .expert = (int32_t)(t / KINDS),
                                .role = k->role, .dtype = k->dtype, .ndim = 2,
                                .shape = {k->rows, k->cols}};

        tensor_name(tname, sizeof(tname), t);
        CHILD_OK(weft_registry_declare(s->reg, &d, &s->index[t]));
    }
    CHILD_OK(weft_registry_seal(s->reg));
}

/* A GPU registry served through cuda_ipc; tells the test process the port. */
static void server_start(server_t *s)
{
    registry_start(s, 1);
    CHILD_OK(weft_server_create(s->reg, &server_params, &s->server));
    CHILD_OK(weft_server_port(s->server, &s->port));
    CHILD_CHECK(s->port != 0);
    post(port_pipe[1], &s->port, sizeof(s->port), __LINE__);
}

/* Writes version v's bytes into a free slot and publishes it. */
static void server_publish(server_t *s, uint64_t v)
{
    static uint8_t host[MAX_TENSOR_BYTES];

    CHILD_OK(weft_registry_write_begin(s->reg, WAIT_US, NULL));
    for (uint32_t t = 0; t < TENSORS; t++) {
        uint64_t bytes = tensor_bytes(t % KINDS);
        void    *dst;

        payload_fill(host, bytes, v, t);
        CHILD_OK(weft_registry_write_tensor(s->reg, s->index[t], &dst));
        CUDA_OK(cudaMemcpy(dst, host, bytes, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaDeviceSynchronize());
    CHILD_OK(weft_registry_publish(s->reg, v, NULL));
}

/* Publishes v, waits until every registered consumer has it, then until
 * `checkers` consumers checked its bytes (lockstep). */
static void server_deliver(server_t *s, uint64_t v, uint32_t checkers)
{
    uint32_t      lagging = 0;
    weft_status_t status;

    server_publish(s, v);
    status = weft_registry_wait_consumers(s->reg, v, WAIT_US, &lagging);
    if (status != WEFT_OK) {
        CHILD_FAIL("server: version %llu: %s, %u consumers lagging", (unsigned long long)v,
                   weft_status_string(status), lagging);
    }
    lockstep_collect(v, checkers);
}

static void server_wait_ready(server_t *s, uint32_t consumers)
{
    fixture_wait_ready(s->server, consumers, READY_S);
}

static void server_stop(server_t *s)
{
    fixture_server_stop(s->server, s->reg, s->name);
}

static void print_stats(const char *what, const weft_server_stats_t *st)
{
    fprintf(stderr,
            "%s: consumers %u, accepted %llu, refused %llu, dropped %llu, versions_sent %llu, "
            "bytes_sent %llu, last_version %llu, transfer_ns %llu\n",
            what, st->consumers, (unsigned long long)st->accepted,
            (unsigned long long)st->refused, (unsigned long long)st->dropped,
            (unsigned long long)st->versions_sent, (unsigned long long)st->bytes_sent,
            (unsigned long long)st->last_version, (unsigned long long)st->transfer_ns);
}

#define STATS_CHECK(st, cond)                                                                    \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            print_stats("server", &(st));                                                        \
            CHILD_FAIL("server stats: not %s", #cond);                                           \
        }                                                                                        \
    } while (0)

typedef int (*stats_test_t)(const weft_server_stats_t *st, uint64_t n);

static int stats_idle(const weft_server_stats_t *st, uint64_t n)
{
    (void)n;
    return st->consumers == 0;
}

static int stats_dropped(const weft_server_stats_t *st, uint64_t n)
{
    return st->dropped >= n;
}

static int stats_ready_at_most(const weft_server_stats_t *st, uint64_t n)
{
    return st->consumers <= n;
}

/* The server's stats once test(stats, n) holds, within STEP_S; else the
 * child fails, naming the caller's `line`. */
static weft_server_stats_t server_stats_when(const server_t *s, stats_test_t test, uint64_t n,
                                             int line)
{
    weft_server_stats_t st = {0};

    for (int i = 0; i < STEP_S * 1000; i++) {
        weft_status_t status = weft_server_get_stats(s->server, &st);

        if (status != WEFT_OK) {
            CHILD_FAIL_AT(line, "weft_server_get_stats: %s", weft_status_string(status));
        }
        if (test(&st, n)) {
            return st;
        }
        usleep(1000);
    }
    print_stats("server: gave up waiting", &st);
    CHILD_FAIL_AT(line, "the server's stats did not get there within %d s", STEP_S);
}

/* 1 when a consumer record named `name` is in the registry. */
static int registry_has_consumer(weft_registry_h reg, const char *name)
{
    for (uint32_t id = 0; id < CONSUMER_IDS; id++) {
        weft_consumer_info_t info;

        if (weft_registry_consumer_info(reg, id, &info) == WEFT_OK && strcmp(info.name, name) == 0) {
            return 1;
        }
    }
    return 0;
}

static uint32_t registry_consumers(weft_registry_h reg)
{
    weft_registry_stats_t rs;

    CHILD_OK(weft_registry_get_stats(reg, &rs));
    return rs.consumers;
}

/* The registry holds `n` consumer records within STEP_S (a record goes
 * when the server drops or says goodbye to its consumer); else the child
 * fails, naming the caller's `line`. */
static void registry_settles_at(weft_registry_h reg, uint32_t n, int line)
{
    uint32_t now = 0;

    for (int i = 0; i < STEP_S * 1000; i++) {
        now = registry_consumers(reg);
        if (now == n) {
            return;
        }
        usleep(1000);
    }
    CHILD_FAIL_AT(line, "server: %u consumer records in the registry, want %u", now, n);
}

/* ----------------------------------------------------------- consumer */

typedef struct consumer {
    int              gpu;     /* -1: views in host memory */
    int              strided; /* W rows padded by PAD bytes */
    uint8_t         *fused[KINDS]; /* [EXPERTS, rows, pitch] per kind */
    weft_remote_h    remote;
    weft_recv_view_t views[TENSORS];
    char             names[TENSORS][WEFT_TENSOR_NAME_MAX];
} consumer_t;

static uint64_t pitch_of(const consumer_t *c, uint32_t k)
{
    /* Scales stay contiguous; W rows get padding when strided. */
    return row_bytes(k) + (c->strided && kinds[k].role == WEFT_ROLE_W ? PAD : 0);
}

static uint64_t fused_bytes(const consumer_t *c, uint32_t k)
{
    return EXPERTS * kinds[k].rows * pitch_of(c, k);
}

/* Allocates the fused tensors on `gpu` (cudaMalloc; -1: malloc), all
 * POISON, and the views of every expert into them. */
static void consumer_alloc(consumer_t *c, int gpu, int strided)
{
    memset(c, 0, sizeof(*c));
    c->gpu = gpu;
    c->strided = strided;
    if (gpu >= 0) {
        CUDA_OK(cudaSetDevice(gpu));
    }
    for (uint32_t k = 0; k < KINDS; k++) {
        uint64_t bytes = fused_bytes(c, k);

        if (gpu >= 0) {
            CUDA_OK(cudaMalloc((void **)&c->fused[k], bytes));
            CUDA_OK(cudaMemset(c->fused[k], POISON, bytes));
        } else {
            c->fused[k] = malloc(bytes);
            CHILD_CHECK(c->fused[k] != NULL);
            memset(c->fused[k], POISON, bytes);
        }
    }
    if (gpu >= 0) {
        CUDA_OK(cudaDeviceSynchronize()); /* poisoned before the server writes */
    }
    for (uint32_t t = 0; t < TENSORS; t++) {
        uint32_t          k = t % KINDS, e = t / KINDS;
        const kind_t     *kd = &kinds[k];
        uint64_t          pitch = pitch_of(c, k);
        weft_recv_view_t *v = &c->views[t];

        tensor_name(c->names[t], sizeof(c->names[t]), t);
        *v = (weft_recv_view_t){
            .field_mask = WEFT_RECV_VIEW_FIELD_STRIDES | WEFT_RECV_VIEW_FIELD_MEMORY,
            .name       = c->names[t],
            .role       = kd->role,
            .dtype      = kd->dtype,
            .ndim       = 2,
            .data       = c->fused[k] + (uint64_t)e * kd->rows * pitch,
            .memory     = gpu >= 0 ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST,
        };
        v->shape[0] = kd->rows;
        v->shape[1] = kd->cols;
        v->strides[0] = pitch / kd->esize;
        v->strides[1] = 1;
    }
}

/* The parameters of a consumer of the server on `port` (addr: its
 * buffer for the address, ADDR_BYTES). */
#define ADDR_BYTES 32
static weft_remote_params_t consumer_params(char *addr, uint16_t port, const char *token, const char *name)
{
    snprintf(addr, ADDR_BYTES, "127.0.0.1:%u", (unsigned)port);
    return (weft_remote_params_t){.field_mask = WEFT_REMOTE_FIELD_TIMEOUT,
                                  .transport  = WEFT_TRANSPORT_CUDA_IPC,
                                  .server     = addr,
                                  .token      = token,
                                  .name       = name,
                                  .timeout_us = CONNECT_TIMEOUT_US};
}

static weft_status_t consumer_connect(consumer_t *c, uint16_t port, const char *token,
                                      const char *name)
{
    char                       addr[ADDR_BYTES];
    const weft_remote_params_t params = consumer_params(addr, port, token, name);

    c->remote = NULL;
    return weft_remote_connect(&params, c->views, TENSORS, &c->remote);
}

/* Bytes of the fused tensors that differ from version v, padding
 * included (it must stay POISON); v = 0: every byte must still be POISON.
 * The first few are printed with where they are. */
static uint64_t consumer_wrong_bytes(const consumer_t *c, uint64_t v)
{
    uint64_t wrong = 0;

    for (uint32_t k = 0; k < KINDS; k++) {
        uint64_t bytes = fused_bytes(c, k), pitch = pitch_of(c, k), rb = row_bytes(k);
        uint8_t *host = malloc(bytes);

        CHILD_CHECK(host != NULL);
        if (c->gpu >= 0) {
            CUDA_OK(cudaMemcpy(host, c->fused[k], bytes, cudaMemcpyDeviceToHost));
        } else {
            memcpy(host, c->fused[k], bytes);
        }
        for (uint32_t e = 0; e < EXPERTS; e++) {
            uint32_t       t = e * KINDS + k;
            const uint8_t *base = host + (uint64_t)e * kinds[k].rows * pitch;

            for (uint64_t r = 0; r < kinds[k].rows; r++) {
                for (uint64_t col = 0; col < pitch; col++) {
                    uint8_t want = v != 0 && col < rb ? payload_byte(v, t, r * rb + col) : POISON;
                    uint8_t got = base[r * pitch + col];

                    if (got != want && wrong++ < 5) {
                        fprintf(stderr,
                                "pid %d: version %llu, tensor %u (%s), row %llu, byte %llu: "
                                "0x%02x, want 0x%02x%s\n",
                                (int)getpid(), (unsigned long long)v, t, c->names[t],
                                (unsigned long long)r, (unsigned long long)col, got, want,
                                col >= rb ? " (padding)" : "");
                    }
                }
            }
        }
        free(host);
    }
    if (wrong > 0) {
        fprintf(stderr, "pid %d: version %llu: %llu wrong bytes\n", (int)getpid(),
                (unsigned long long)v, (unsigned long long)wrong);
    }
    return wrong;
}

/* Receives the version after `after`, which must be `want`, and checks
 * every byte of it. */
static void consumer_receive_check(consumer_t *c, uint64_t after, uint64_t want)
{
    uint64_t      got = 0;
    weft_status_t status = weft_remote_receive(c->remote, after, WAIT_US, &got);

    if (status != WEFT_OK || got != want) {
        CHILD_FAIL("pid %d: receive after version %llu: %s, version %llu (want %llu)",
                   (int)getpid(), (unsigned long long)after, weft_status_string(status),
                   (unsigned long long)got, (unsigned long long)want);
    }
    CHILD_CHECK(consumer_wrong_bytes(c, want) == 0);
}

/* The same, then lets the producer go on. */
static void consumer_receive_exact(consumer_t *c, uint64_t after, uint64_t want)
{
    consumer_receive_check(c, after, want);
    lockstep_post(want);
}

static void consumer_close(consumer_t *c)
{
    CHILD_OK(weft_remote_close(c->remote));
    c->remote = NULL;
}

static void consumer_free(consumer_t *c)
{
    for (uint32_t k = 0; k < KINDS; k++) {
        if (c->gpu >= 0) {
            CUDA_OK(cudaFree(c->fused[k]));
        } else {
            free(c->fused[k]);
        }
        c->fused[k] = NULL;
    }
}

/* ----------------------------------------- versions to N consumers */

typedef struct consumer_job {
    uint16_t port;
    char     name[32];
    int      gpu, strided;
    uint64_t versions; /* receives 1..versions, each exactly */
} consumer_job_t;

static void consumer_body(const void *arg)
{
    const consumer_job_t *job = arg;
    consumer_t            c;

    consumer_alloc(&c, job->gpu, job->strided);
    CHILD_OK(consumer_connect(&c, job->port, TOKEN, job->name));
    for (uint64_t v = 1; v <= job->versions; v++) {
        consumer_receive_exact(&c, v - 1, v);
    }
    consumer_close(&c);
    consumer_free(&c);
}

#define MAX_CASE_CONSUMERS 4

typedef struct versions_case {
    const char *kernel_max; /* WEFT_CUDA_IPC_KERNEL_MAX; NULL: the default */
    uint32_t    consumers;
    int         gpu[MAX_CASE_CONSUMERS];
    int         strided[MAX_CASE_CONSUMERS];
    uint64_t    versions;
} versions_case_t;

static void versions_server_body(const void *arg)
{
    const versions_case_t *vc = arg;
    server_t               s;
    weft_server_stats_t    st;

    server_start(&s);
    server_wait_ready(&s, vc->consumers);
    for (uint64_t v = 1; v <= vc->versions; v++) {
        server_deliver(&s, v, vc->consumers);
    }
    /* They leave between versions: a departure, not a drop. */
    st = server_stats_when(&s, stats_idle, 0, __LINE__);
    STATS_CHECK(st, st.versions_sent == vc->versions * vc->consumers);
    STATS_CHECK(st, st.bytes_sent == st.versions_sent * version_bytes());
    STATS_CHECK(st, st.accepted == vc->consumers && st.refused == 0 && st.dropped == 0);
    STATS_CHECK(st, st.last_version == vc->versions && st.transfer_ns > 0);
    registry_settles_at(s.reg, 0, __LINE__);
    server_stop(&s);
}

static void run_versions(const versions_case_t *vc)
{
    static const char *const what[] = {"server", "consumer 0", "consumer 1", "consumer 2",
                                       "consumer 3"};
    pid_t                    pids[1 + MAX_CASE_CONSUMERS];
    uint16_t                 port;

    ck_assert_uint_le(vc->consumers, MAX_CASE_CONSUMERS);
    pipes_open();
    if (vc->kernel_max != NULL) {
        ck_assert_int_eq(setenv("WEFT_CUDA_IPC_KERNEL_MAX", vc->kernel_max, 1), 0);
    }
    pids[0] = spawn(versions_server_body, vc);
    port = await_port(pids[0]);
    for (uint32_t i = 0; i < vc->consumers; i++) {
        consumer_job_t job = {.port = port, .gpu = vc->gpu[i], .strided = vc->strided[i],
                              .versions = vc->versions};

        snprintf(job.name, sizeof(job.name), "rollout-%u", i);
        printf("  consumer %u on GPU %d, %s views, kernel max %s\n", i, job.gpu,
               job.strided ? "strided" : "contiguous",
               vc->kernel_max != NULL ? vc->kernel_max : "default");
        pids[1 + i] = spawn(consumer_body, &job);
    }
    fflush(stdout);
    expect_clean_exits(pids, what, (int)(1 + vc->consumers));
}

/* 1. */
START_TEST(push_same_gpu_versions_exact)
{
    /* _i: 0 the default (on one GPU every range through the batched
     * kernel), strided views; 1 the copy engines only, strided views;
     * 2 the default, contiguous fused tensors. */
    static const char *kernel_max[] = {NULL, "0", NULL};
    versions_case_t    vc = {.kernel_max = kernel_max[_i], .consumers = 1, .gpu = {SERVER_GPU},
                             .strided = {_i != 2}, .versions = 20};

    run_versions(&vc);
}
END_TEST

/* 2. */
START_TEST(push_other_gpu_versions_exact)
{
    /* _i: 0 the default split between kernel and copy engines, 1 the copy
     * engines only. */
    static const char *kernel_max[] = {NULL, "0"};
    versions_case_t    vc = {.kernel_max = kernel_max[_i], .consumers = 1, .gpu = {1},
                             .strided = {1}, .versions = 20};

    if (gpu_count < 2) {
        printf("push_other_gpu_versions_exact: needs 2 GPUs, %d here: not run\n", gpu_count);
        return;
    }
    run_versions(&vc);
}
END_TEST

/* 3. */
START_TEST(push_many_consumers_exact)
{
    versions_case_t vc = {.consumers = 4, .versions = 15};

    for (uint32_t i = 0; i < vc.consumers; i++) {
        vc.gpu[i] = (int)i % gpu_count;
        vc.strided[i] = i >= 2;
    }
    run_versions(&vc);
}
END_TEST

/* ------------------------------------------------------------ refusals */

static void refusals_server_body(const void *arg)
{
    server_t              s, host;
    weft_server_stats_t   st;
    weft_server_h         refused = NULL;
    char                  byte;

    (void)arg;
    server_start(&s);
    /* The consumer tried a wrong token, an unknown tensor, host views. */
    CHILD_CHECK(read_within(server_cue[0], &byte, 1, START_S + STEP_S) == 0);
    CHILD_OK(weft_server_get_stats(s.server, &st));
    /* The host views may be refused by the consumer before they reach us. */
    STATS_CHECK(st, st.accepted == 0 && st.refused >= 2 && st.consumers == 0);
    CHILD_CHECK(registry_consumers(s.reg) == 0);
    post(consumer_cue[1], "g", 1, __LINE__);
    /* Still serving: a good consumer gets version 1 exactly. */
    server_wait_ready(&s, 1);
    server_deliver(&s, 1, 1);
    st = server_stats_when(&s, stats_idle, 0, __LINE__);
    STATS_CHECK(st, st.accepted == 1 && st.versions_sent == 1 && st.dropped == 0);
    server_stop(&s);
    /* The server copies from GPU memory only. */
    registry_start(&host, 0);
    CHILD_CHECK(weft_server_create(host.reg, &server_params, &refused) == WEFT_ERR_UNSUPPORTED);
    CHILD_CHECK(refused == NULL);
    CHILD_OK(weft_registry_close(host.reg));
    weft_registry_unlink(host.name);
}

static void refusals_consumer_body(const void *arg)
{
    const uint16_t *port = arg;
    consumer_t      c;
    weft_status_t   status;
    char            byte;

    consumer_alloc(&c, SERVER_GPU, 1);
    status = consumer_connect(&c, *port, "not-the-token", "intruder");
    if (status != WEFT_ERR_AUTH) {
        CHILD_FAIL("wrong token: %s, want WEFT_ERR_AUTH", weft_status_string(status));
    }
    /* A tensor the registry does not have (kind, dtype and shape right). */
    c.views[KINDS].name = "model.layers.0.mlp.experts.99.gate_up_proj.weight";
    status = consumer_connect(&c, *port, TOKEN, "unknown-tensor");
    if (status != WEFT_ERR_NOT_FOUND) {
        CHILD_FAIL("unknown tensor: %s, want WEFT_ERR_NOT_FOUND", weft_status_string(status));
    }
    consumer_free(&c);
    /* Views in host memory: nothing the server's process can map. */
    consumer_alloc(&c, -1, 1);
    status = consumer_connect(&c, *port, TOKEN, "host-views");
    if (status != WEFT_ERR_UNSUPPORTED && status != WEFT_ERR_INVALID_PARAM) {
        CHILD_FAIL("host views: %s, want WEFT_ERR_UNSUPPORTED or WEFT_ERR_INVALID_PARAM",
                   weft_status_string(status));
    }
    consumer_free(&c);
    post(server_cue[1], "r", 1, __LINE__);
    CHILD_CHECK(read_within(consumer_cue[0], &byte, 1, STEP_S) == 0);
    consumer_alloc(&c, SERVER_GPU, 1);
    CHILD_OK(consumer_connect(&c, *port, TOKEN, "welcome"));
    consumer_receive_exact(&c, 0, 1);
    consumer_close(&c);
    consumer_free(&c);
}

/* 4. */
START_TEST(push_refusals_register_nothing)
{
    server_and_consumer(refusals_server_body, refusals_consumer_body);
}
END_TEST

/* ------------------------------------ an allocation declared too large */

/*
 * The handshake of the push consumer (push_remote.c's VIEWS message),
 * written by hand: each fused tensor's allocation with its IPC handle and
 * the size it declares, which for the first is `extra` bytes more than
 * the allocation holds. A consumer that lies so could make the server's
 * copies write past its mapping (views reaching into the bytes it
 * declared but did not export) and fault the server's context, every
 * consumer's. The base connection is left open on success.
 */
static weft_status_t declared_connect(const consumer_t *c, uint16_t port, const char *name, uint64_t extra,
                                      weft_remote_base_t *base)
{
    char                       addr[ADDR_BYTES];
    const weft_remote_params_t params = consumer_params(addr, port, TOKEN, name);
    weft_ctl_buf_t             buf = {0};
    weft_ctl_msg_t             msg = {0};
    uint64_t                   deadline;
    weft_status_t              status;

    memset(base, 0, sizeof(*base));
    deadline = weft_deadline_ns(weft_time_ns(), weft_remote_base_init(base, &params));
    status = weft_remote_base_connect(base, deadline);
    if (status == WEFT_OK) {
        status = weft_remote_base_hello(base, WEFT_CUDA_IPC_PUSH_PROTOCOL, &params, deadline, &msg);
        free(msg.payload);
        msg.payload = NULL;
    }
    if (status != WEFT_OK) {
        weft_remote_base_disconnect(base);
        return status;
    }
    weft_ctl_put_u32(&buf, KINDS);
    for (uint32_t k = 0; k < KINDS; k++) {
        uint64_t           at = 0, bytes = 0;
        cudaIpcMemHandle_t handle;

        CHILD_OK(weft_cuda_allocation_range(c->fused[k], "test", &at, &bytes));
        CUDA_OK(cudaIpcGetMemHandle(&handle, (void *)(uintptr_t)at));
        weft_ctl_put_blob(&buf, &handle, (uint32_t)sizeof(handle));
        weft_ctl_put_u64(&buf, at);
        weft_ctl_put_u64(&buf, bytes + (k == 0 ? extra : 0));
    }
    weft_ctl_put_u64(&buf, 0); /* no inbox */
    weft_ctl_put_u64(&buf, 0);
    weft_wire_put_views(&buf, c->views, TENSORS);
    CHILD_CHECK(!buf.failed);
    status = weft_remote_base_views(base, &buf, deadline, &msg);
    free(msg.payload);
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        weft_remote_base_disconnect(base);
    }
    return status;
}

static void declared_server_body(const void *arg)
{
    server_t            s;
    weft_server_stats_t st;
    char                byte;

    (void)arg;
    server_start(&s);
    /* The consumer connected by hand with its true sizes (accepted), left,
     * then declared 2 MB more than its first allocation (refused). */
    CHILD_CHECK(read_within(server_cue[0], &byte, 1, START_S + STEP_S) == 0);
    CHILD_OK(weft_server_get_stats(s.server, &st));
    STATS_CHECK(st, st.accepted == 1 && st.refused == 1);
    registry_settles_at(s.reg, 0, __LINE__);
    post(consumer_cue[1], "g", 1, __LINE__);
    /* Still serving, its context sound: a consumer gets version 1 exactly. */
    server_wait_ready(&s, 1);
    server_deliver(&s, 1, 1);
    st = server_stats_when(&s, stats_idle, 0, __LINE__);
    STATS_CHECK(st, st.accepted == 2 && st.versions_sent == 1);
    server_stop(&s);
}

static void declared_consumer_body(const void *arg)
{
    const uint16_t    *port = arg;
    consumer_t         c;
    weft_remote_base_t base;
    weft_status_t      status;
    char               byte;

    consumer_alloc(&c, SERVER_GPU, 1);
    /* The hand-written handshake is the library's: with the true sizes
     * the server takes it. */
    CHILD_OK(declared_connect(&c, *port, "declared-true", 0, &base));
    /* Left as the library leaves: the server unmaps before it closes, so
     * the next handshake maps the same allocations afresh. */
    weft_remote_base_bye(&base);
    CHILD_OK(weft_remote_base_await_close(&base, "it unmapped the views", NULL, NULL, NULL));
    status = declared_connect(&c, *port, "declared-larger", 2u << 20, &base);
    if (status != WEFT_ERR_CORRUPT) {
        CHILD_FAIL("allocation declared 2 MB larger than exported: %s, want WEFT_ERR_CORRUPT",
                   weft_status_string(status));
    }
    post(server_cue[1], "r", 1, __LINE__);
    CHILD_CHECK(read_within(consumer_cue[0], &byte, 1, STEP_S) == 0);
    CHILD_OK(consumer_connect(&c, *port, TOKEN, "honest"));
    consumer_receive_exact(&c, 0, 1);
    consumer_close(&c);
    consumer_free(&c);
}

/* 4b. */
START_TEST(push_allocation_declared_larger_than_exported_refused)
{
    server_and_consumer(declared_server_body, declared_consumer_body);
}
END_TEST

/* --------------------------------------------- a consumer killed */

#define KILL_VERSIONS 20

typedef struct kill_case {
    uint16_t port;
    int      gpu; /* of the victim and its restarted successor */
} kill_case_t;

static void kill_server_body(const void *arg)
{
    server_t            s;
    weft_server_stats_t st;

    (void)arg;
    server_start(&s);
    server_wait_ready(&s, 2);
    for (uint64_t v = 1; v <= KILL_VERSIONS; v++) {
        /* The victim dies meanwhile: its record goes, the wait ends; only
         * the survivor checks (the victim never holds us). */
        server_deliver(&s, v, 1);
        usleep(20000);
    }
    (void)server_stats_when(&s, stats_dropped, 1, __LINE__);
    st = server_stats_when(&s, stats_ready_at_most, 1, __LINE__);
    STATS_CHECK(st, st.consumers == 1);
    /* Nothing of the victim is left in the registry: only the survivor. */
    registry_settles_at(s.reg, 1, __LINE__);
    CHILD_CHECK(!registry_has_consumer(s.reg, "victim"));
    CHILD_CHECK(registry_has_consumer(s.reg, "survivor"));
    /* A consumer restarted after the crash joins and gets the next one. */
    post(parent_cue[1], "r", 1, __LINE__);
    server_wait_ready(&s, 2);
    server_deliver(&s, KILL_VERSIONS + 1, 2);
    st = server_stats_when(&s, stats_idle, 0, __LINE__);
    STATS_CHECK(st, st.accepted == 3 && st.dropped == 1);
    STATS_CHECK(st, st.last_version == KILL_VERSIONS + 1 && st.transfer_ns > 0);
    server_stop(&s);
}

/* Receives whatever comes, checks nothing (it does not hold the
 * producer), says when it has version 2, and waits to be killed. */
static void victim_body(const void *arg)
{
    const kill_case_t *kc = arg;
    consumer_t         c;
    uint64_t           v = 0;
    int                told = 0;

    consumer_alloc(&c, kc->gpu, 1);
    CHILD_OK(consumer_connect(&c, kc->port, TOKEN, "victim"));
    for (;;) {
        uint64_t got = 0;

        CHILD_OK(weft_remote_receive(c.remote, v, WAIT_US, &got));
        v = got;
        if (!told && v >= 2) {
            post(parent_cue[1], "v", 1, __LINE__);
            told = 1;
        }
    }
}

static void rejoin_body(const void *arg)
{
    const kill_case_t *kc = arg;
    consumer_t         c;

    consumer_alloc(&c, kc->gpu, 1);
    CHILD_OK(consumer_connect(&c, kc->port, TOKEN, "victim-restarted"));
    /* Whatever the server pushes of older versions on joining is passed
     * over; the next one must land exactly. */
    consumer_receive_exact(&c, KILL_VERSIONS, KILL_VERSIONS + 1);
    consumer_close(&c);
    consumer_free(&c);
}

/* 5. */
START_TEST(push_consumer_killed_others_go_on_restarted_rejoins)
{
    static const char *const what[] = {"restarted consumer", "survivor", "server"};
    kill_case_t              kc = {.gpu = gpu_count > 1 ? 1 : 0};
    consumer_job_t           survivor = {.name = "survivor", .gpu = SERVER_GPU, .strided = 0,
                                         .versions = KILL_VERSIONS + 1};
    pid_t                    server, victim, pids[3];

    pipes_open();
    server = spawn(kill_server_body, NULL);
    kc.port = survivor.port = await_port(server);
    victim = spawn(victim_body, &kc);
    pids[1] = spawn(consumer_body, &survivor);
    pids[2] = server;
    /* Killed once it received version 2: between or in later versions. */
    await_cue('v', START_S + READY_S);
    usleep(30000);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(reap_by(victim, now_ns() + STEP_S * NS_PER_S), 128 + SIGKILL);
    /* The server saw the drop and has gone on without it. */
    await_cue('r', REAP_S);
    pids[0] = spawn(rejoin_body, &kc);
    expect_clean_exits(pids, what, 3);
}
END_TEST

/* ------------------------------------------------------------ rebinding */

#define REBIND_VERSIONS 8

static void rebind_server_body(const void *arg)
{
    server_t            s;
    weft_server_stats_t st;

    (void)arg;
    server_start(&s);
    for (uint64_t v = 1; v <= REBIND_VERSIONS; v++) {
        /* The consumer posts a version only once it is connected again. */
        server_wait_ready(&s, 1);
        server_deliver(&s, v, 1);
    }
    st = server_stats_when(&s, stats_idle, 0, __LINE__);
    /* Three connections, each left between versions: no drop. */
    STATS_CHECK(st, st.accepted == 3 && st.dropped == 0 && st.refused == 0);
    STATS_CHECK(st, st.versions_sent >= REBIND_VERSIONS);
    STATS_CHECK(st, st.last_version == REBIND_VERSIONS);
    registry_settles_at(s.reg, 0, __LINE__);
    server_stop(&s);
}

static void rebind_consumer_body(const void *arg)
{
    const uint16_t *port = arg;
    int             gpu = SERVER_GPU; /* colocated: the engine re-allocates next to the trainer */
    consumer_t      c, old;

    consumer_alloc(&c, gpu, 1);
    CHILD_OK(consumer_connect(&c, *port, TOKEN, "rebinder"));
    consumer_receive_exact(&c, 0, 1);
    consumer_receive_exact(&c, 1, 2);
    consumer_receive_check(&c, 2, 3);
    /* New memory (another layout) while the old stays allocated, poisoned
     * again: after close the server must not write there any more. */
    consumer_close(&c);
    for (uint32_t k = 0; k < KINDS; k++) {
        CUDA_OK(cudaMemset(c.fused[k], POISON, fused_bytes(&c, k)));
    }
    CUDA_OK(cudaDeviceSynchronize());
    old = c;
    consumer_alloc(&c, gpu, 0);
    CHILD_OK(consumer_connect(&c, *port, TOKEN, "rebinder"));
    lockstep_post(3);
    consumer_receive_check(&c, 3, 4);
    CHILD_CHECK(consumer_wrong_bytes(&old, 0) == 0);
    consumer_free(&old);
    lockstep_post(4);
    consumer_receive_exact(&c, 4, 5);
    consumer_receive_check(&c, 5, 6);
    /* Freed first, then the same sizes again: the allocator likely hands
     * back the same addresses, which the server must map anew. */
    consumer_close(&c);
    consumer_free(&c);
    consumer_alloc(&c, gpu, 0);
    CHILD_OK(consumer_connect(&c, *port, TOKEN, "rebinder"));
    lockstep_post(6);
    consumer_receive_exact(&c, 6, 7);
    consumer_receive_exact(&c, 7, 8);
    consumer_close(&c);
    consumer_free(&c);
}

/* 6. */
START_TEST(push_rebind_by_close_and_connect)
{
    server_and_consumer(rebind_server_body, rebind_consumer_body);
}
END_TEST

/* ------------------------------------------- views change only when asked */

#define QUIET_MS 200 /* how long the consumer looks at its views after a publish */

static void asked_server_body(const void *arg)
{
    server_t s;
    uint32_t lagging = 0;

    (void)arg;
    server_start(&s);
    server_wait_ready(&s, 1);
    server_deliver(&s, 1, 1);
    /* Version 2 is published while the consumer is not asking. */
    server_publish(&s, 2);
    post(consumer_cue[1], "p", 1, __LINE__);
    CHILD_OK(weft_registry_wait_consumers(s.reg, 2, WAIT_US, &lagging));
    lockstep_collect(2, 1);
    server_stop(&s);
}

static void asked_consumer_body(const void *arg)
{
    const uint16_t *port = arg;
    consumer_t      c;
    char            byte = 0;

    consumer_alloc(&c, 0, 1);
    CHILD_OK(consumer_connect(&c, *port, TOKEN, "asker"));
    consumer_receive_exact(&c, 0, 1);
    CHILD_CHECK(read_within(consumer_cue[0], &byte, 1, STEP_S) == 0 && byte == 'p');
    /* The server had time to copy version 2 if it were going to: the views
     * must still hold version 1, every byte. */
    usleep(QUIET_MS * 1000);
    CHILD_CHECK(consumer_wrong_bytes(&c, 1) == 0);
    consumer_receive_exact(&c, 1, 2);
    consumer_close(&c);
    consumer_free(&c);
}

START_TEST(push_views_change_only_while_asking)
{
    server_and_consumer(asked_server_body, asked_consumer_body);
}
END_TEST

/* ---------------------------------------------------------------- stats */

#define STATS_VERSIONS 10

static uint64_t transfer_ns_before; /* the server's transfer_ns after the version before */

/* Every count of version v is in (the fields are not updated at once). */
static int stats_version_counted(const weft_server_stats_t *st, uint64_t v)
{
    return st->versions_sent >= v && st->last_version == v &&
           st->bytes_sent == st->versions_sent * version_bytes() &&
           st->transfer_ns > transfer_ns_before; /* every transfer takes some time */
}

static void stats_server_body(const void *arg)
{
    server_t            s;
    weft_server_stats_t st = {0};
    uint64_t            t0, t1;

    (void)arg;
    server_start(&s);
    server_wait_ready(&s, 1);
    t0 = now_ns();
    for (uint64_t v = 1; v <= STATS_VERSIONS; v++) {
        server_deliver(&s, v, 1);
        st = server_stats_when(&s, stats_version_counted, v, __LINE__);
        transfer_ns_before = st.transfer_ns;
    }
    t1 = now_ns();
    STATS_CHECK(st, st.versions_sent >= STATS_VERSIONS && st.transfer_ns > 0);
    /* One consumer, served one version after the other: its transfers
     * (lease to bytes in place) lie within our loop and do not overlap. */
    STATS_CHECK(st, st.transfer_ns <= t1 - t0);
    printf("  %llu versions of %llu bytes: %.1f us a transfer on average\n",
           (unsigned long long)st.versions_sent, (unsigned long long)version_bytes(),
           (double)st.transfer_ns / 1e3 / (double)st.versions_sent);
    fflush(stdout);
    st = server_stats_when(&s, stats_idle, 0, __LINE__);
    STATS_CHECK(st, st.dropped == 0 && st.accepted == 1);
    server_stop(&s);
}

/* 7. */
START_TEST(push_stats_count_versions_and_transfer_time)
{
    static const char *const what[] = {"server", "consumer"};
    consumer_job_t           job = {.name = "counted", .gpu = SERVER_GPU, .strided = 1,
                                    .versions = STATS_VERSIONS};
    pid_t                    pids[2];

    pipes_open();
    pids[0] = spawn(stats_server_body, NULL);
    job.port = await_port(pids[0]);
    pids[1] = spawn(consumer_body, &job);
    expect_clean_exits(pids, what, 2);
}
END_TEST

static Suite *transport_cuda_ipc_push_suite(void)
{
    Suite *s;
    TCase *tc;

    gpu_count = weft_test_gpu_count();
    if (gpu_count == 0) {
        printf("test_transport_cuda_ipc_push: no GPU: skipped\n");
        return NULL;
    }
    printf("test_transport_cuda_ipc_push: %d GPU%s: %s\n", gpu_count, gpu_count == 1 ? "" : "s",
           gpu_count > 1 ? "same-GPU and GPU-to-GPU cases" : "same-GPU cases only");
    s = suite_create("transport_cuda_ipc_push");
    /* One case per test: CK_RUN_CASE=<name> runs one alone. */
#define ADD_LOOP(test, n)                          \
    do {                                           \
        tc = tcase_create(#test);                  \
        tcase_set_timeout(tc, CASE_S);             \
        tcase_add_loop_test(tc, test, 0, (n));     \
        suite_add_tcase(s, tc);                    \
    } while (0)
#define ADD(test) ADD_LOOP(test, 1)
    ADD_LOOP(push_same_gpu_versions_exact, 3);
    ADD_LOOP(push_other_gpu_versions_exact, 2);
    ADD(push_many_consumers_exact);
    ADD(push_refusals_register_nothing);
    ADD(push_allocation_declared_larger_than_exported_refused);
    ADD(push_consumer_killed_others_go_on_restarted_rejoins);
    ADD(push_rebind_by_close_and_connect);
    ADD(push_views_change_only_while_asking);
    ADD(push_stats_count_versions_and_transfer_time);
#undef ADD
#undef ADD_LOOP
    return s;
}

WEFT_TEST_MAIN(transport_cuda_ipc_push_suite)
