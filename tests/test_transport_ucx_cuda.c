/*
 * GPU memory over the ucx transport, across processes on this host
 * through 127.0.0.1, over UCX's TCP and shared-memory transports: a GPU
 * registry into device views (exact bytes over many versions, read back
 * to the host; strided and contiguous views), on the path UCX's support
 * picks and with the staged path forced (WEFT_UCX_CUDA=staged), a version
 * larger than the server's window, versions through a consumer staging
 * ring far smaller than they are (in rounds; a ring under the minimum
 * refused), a host registry into device views, a
 * GPU registry into host views, a consumer killed mid-run while another
 * goes on, WEFT_UCX_CUDA=direct where UCX reports no GPUDirect RDMA (a clear
 * refusal), host and device views mixed (refused). The server is on GPU
 * 0; consumers on GPU 1 where there are two GPUs, else on GPU 0 too.
 * Exits 77 without UCX in the build or without a GPU.
 *
 * WEFT_* variables are read once per process: the test runner itself
 * never calls libweft (its probes run in children), so each test sets
 * WEFT_UCX_CUDA (and WEFT_UCX_STAGE_BYTES) before its processes start.
 */
#include "config.h"

#include "lib/child.h"
#include "lib/transport_fixture.h"
#include "lib/gpu_skip.h"
#include "lib/harness.h"
#include "perf/lib/payload.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <weft/weft.h>

#define TENSORS  24
#define ROWS     192
#define COLS     1000 /* bytes per row of a tensor */
#define PAD      24   /* row padding of the strided views */
#define POISON   0xA5
#define TOKEN    "ucx-cuda-s3cret"
#define WAIT_US  30000000u
#define VERSION_BYTES ((uint64_t)TENSORS * ROWS * COLS) /* 4.6 MB: over a 4 MiB window */
#define SERVER_GPU 0

static int consumer_gpu;     /* 1 with two GPUs, else 0 */
static int ucx_reports_cuda; /* from weft-perf info's UCX detail, probed in a child */

static void tensor_name(char *buf, size_t size, uint32_t t)
{
    snprintf(buf, size, "model.layers.%u.mlp.experts.%u.gate_up_proj.weight", t / 8, t % 8);
}

#define CUDA_CHILD_CHECK(call)                                                                   \
    do {                                                                                         \
        cudaError_t err_ = (call);                                                               \
        if (err_ != cudaSuccess) {                                                               \
            CHILD_FAIL("%s: %s (%s)", #call, cudaGetErrorString(err_), cudaGetErrorName(err_));  \
        }                                                                                        \
    } while (0)

#define WEFT_CHILD_CHECK(call, want)                                                             \
    do {                                                                                         \
        weft_status_t st_ = (call);                                                              \
        if (st_ != (want)) {                                                                     \
            CHILD_FAIL("%s gave %s, not %s", #call, weft_status_string(st_),                     \
                       weft_status_string(want));                                                \
        }                                                                                        \
    } while (0)

/* ------------------------------------------------------------- server */

typedef struct server_side {
    char            name[64];
    int             gpu; /* a GPU registry */
    weft_registry_h reg;
    weft_server_h   server;
    uint16_t        port;
} server_side_t;

static void registry_start(server_side_t *s, int gpu)
{
    weft_registry_params_t rp = {.field_mask = WEFT_REGISTRY_FIELD_MEMORY,
                                 .memory = gpu ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST,
                                 .device = gpu ? SERVER_GPU : -1};

    s->gpu = gpu;
    snprintf(s->name, sizeof(s->name), "t-ucxc-%d", (int)getpid());
    weft_registry_unlink(s->name);
    if (gpu) {
        CUDA_CHILD_CHECK(cudaSetDevice(SERVER_GPU));
    }
    WEFT_CHILD_CHECK(weft_registry_create(s->name, &rp, &s->reg), WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        char               tname[WEFT_TENSOR_NAME_MAX];
        weft_tensor_desc_t d = {.name = tname, .layer = (int32_t)(t / 8), .expert = (int32_t)(t % 8),
                                .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                .shape = {ROWS, COLS}};

        tensor_name(tname, sizeof(tname), t);
        WEFT_CHILD_CHECK(weft_registry_declare(s->reg, &d, NULL), WEFT_OK);
    }
    WEFT_CHILD_CHECK(weft_registry_seal(s->reg), WEFT_OK);
}

static weft_status_t server_create(server_side_t *s, uint64_t window)
{
    weft_server_params_t params = {
        .field_mask   = WEFT_SERVER_FIELD_TIMEOUT | WEFT_SERVER_FIELD_WINDOW,
        .transport    = WEFT_TRANSPORT_UCX,
        .listen       = "127.0.0.1:0",
        .token        = TOKEN,
        .timeout_us   = 10000000,
        .window_bytes = window,
    };
    weft_status_t status = weft_server_create(s->reg, &params, &s->server);

    if (status == WEFT_OK) {
        WEFT_CHILD_CHECK(weft_server_port(s->server, &s->port), WEFT_OK);
    }
    return status;
}

static void server_publish(server_side_t *s, uint64_t v)
{
    static uint8_t host[(uint64_t)ROWS * COLS];

    WEFT_CHILD_CHECK(weft_registry_write_begin(s->reg, WAIT_US, NULL), WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        uint8_t *dst;

        WEFT_CHILD_CHECK(weft_registry_write_tensor(s->reg, t, (void **)&dst), WEFT_OK);
        if (s->gpu) {
            payload_fill(host, (uint64_t)ROWS * COLS, v, t);
            CUDA_CHILD_CHECK(cudaMemcpy(dst, host, sizeof(host), cudaMemcpyHostToDevice));
        } else {
            payload_fill(dst, (uint64_t)ROWS * COLS, v, t);
        }
    }
    if (s->gpu) {
        CUDA_CHILD_CHECK(cudaDeviceSynchronize());
    }
    WEFT_CHILD_CHECK(weft_registry_publish(s->reg, v, NULL), WEFT_OK);
}

static void server_wait_ready(server_side_t *s, uint32_t consumers)
{
    weft_server_stats_t st = {0};

    for (int i = 0; i < 60000; i++) {
        WEFT_CHILD_CHECK(weft_server_get_stats(s->server, &st), WEFT_OK);
        if (st.consumers >= consumers) {
            return;
        }
        usleep(1000);
    }
    CHILD_FAIL("server: %u of %u consumers ready after 60 s", st.consumers, consumers);
}

static void server_stop(server_side_t *s)
{
    WEFT_CHILD_CHECK(weft_server_destroy(s->server), WEFT_OK);
    WEFT_CHILD_CHECK(weft_registry_close(s->reg), WEFT_OK);
    weft_registry_unlink(s->name);
}

/* ----------------------------------------------------------- consumer */

typedef struct consumer_side {
    const char      *name;
    int              device; /* device views, else host views */
    uint64_t         pitch;  /* bytes between rows: COLS + pad */
    uint8_t         *fused;  /* [TENSORS, ROWS, pitch], device or host */
    uint8_t         *check;  /* a host copy of fused, to compare */
    weft_remote_h    remote;
    weft_recv_view_t views[TENSORS];
    char             names[TENSORS][WEFT_TENSOR_NAME_MAX];
} consumer_side_t;

static uint64_t fused_bytes(const consumer_side_t *c)
{
    return (uint64_t)TENSORS * ROWS * c->pitch;
}

/* Views into one fused buffer, rows padded by `pad` bytes (0: contiguous,
 * so the server merges every tensor into one range). */
static void consumer_setup(consumer_side_t *c, const char *name, int device, uint64_t pad)
{
    memset(c, 0, sizeof(*c));
    c->name = name;
    c->device = device;
    c->pitch = COLS + pad;
    c->check = malloc(fused_bytes(c));
    CHILD_CHECK(c->check != NULL);
    if (device) {
        CUDA_CHILD_CHECK(cudaSetDevice(consumer_gpu));
        CUDA_CHILD_CHECK(cudaMalloc((void **)&c->fused, fused_bytes(c)));
        CUDA_CHILD_CHECK(cudaMemset(c->fused, POISON, fused_bytes(c)));
        CUDA_CHILD_CHECK(cudaDeviceSynchronize());
    } else {
        c->fused = malloc(fused_bytes(c));
        CHILD_CHECK(c->fused != NULL);
        memset(c->fused, POISON, fused_bytes(c));
    }
    for (uint32_t t = 0; t < TENSORS; t++) {
        weft_recv_view_t *v = &c->views[t];

        tensor_name(c->names[t], sizeof(c->names[t]), t);
        *v = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_STRIDES,
                                .name = c->names[t], .role = WEFT_ROLE_W,
                                .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                .shape = {ROWS, COLS}, .strides = {c->pitch, 1},
                                .data = c->fused + (uint64_t)t * ROWS * c->pitch};
        if (device) {
            v->field_mask |= WEFT_RECV_VIEW_FIELD_MEMORY;
            v->memory = WEFT_MEMORY_CUDA;
        }
    }
}

static weft_status_t consumer_connect(consumer_side_t *c, uint16_t port)
{
    char                 addr[64];
    weft_remote_params_t params = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT,
                                   .transport  = WEFT_TRANSPORT_UCX,
                                   .server     = addr,
                                   .token      = TOKEN,
                                   .name       = c->name,
                                   .timeout_us = 10000000};

    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    return weft_remote_connect(&params, c->views, TENSORS, &c->remote);
}

/* Every byte of the views is version v's, every padding byte untouched;
 * the first wrong byte is named. */
static void consumer_verify(consumer_side_t *c, uint64_t v)
{
    uint64_t wrong = 0;
    int      named = 0;

    if (c->device) {
        CUDA_CHILD_CHECK(cudaMemcpy(c->check, c->fused, fused_bytes(c), cudaMemcpyDeviceToHost));
    } else {
        memcpy(c->check, c->fused, fused_bytes(c));
    }
    for (uint32_t t = 0; t < TENSORS; t++) {
        const uint8_t *base = c->check + (uint64_t)t * ROWS * c->pitch;

        for (uint64_t r = 0; r < ROWS; r++) {
            for (uint64_t col = 0; col < c->pitch; col++) {
                uint8_t want = col < COLS ? payload_byte(v, t, r * COLS + col) : POISON;
                uint8_t got = base[r * c->pitch + col];

                if (got != want && !named) {
                    fprintf(stderr, "consumer \"%s\" (%s views, pitch %llu): version %llu, tensor "
                            "%u, row %llu, byte %llu: 0x%02x, want 0x%02x\n",
                            c->name, c->device ? "device" : "host", (unsigned long long)c->pitch,
                            (unsigned long long)v, t, (unsigned long long)r,
                            (unsigned long long)col, got, want);
                    named = 1;
                }
                wrong += got != want;
            }
        }
    }
    if (wrong > 0) {
        fprintf(stderr, "consumer \"%s\": version %llu: %llu wrong bytes of %llu\n", c->name,
                (unsigned long long)v, (unsigned long long)wrong,
                (unsigned long long)fused_bytes(c));
    }
    CHILD_CHECK(wrong == 0);
}

static void consumer_free(consumer_side_t *c)
{
    if (c->remote != NULL) {
        WEFT_CHILD_CHECK(weft_remote_close(c->remote), WEFT_OK);
    }
    if (c->device) {
        CUDA_CHILD_CHECK(cudaFree(c->fused));
    } else {
        free(c->fused);
    }
    free(c->check);
}

/* Receives up to version `last`, checking every byte each time. */
/* Receives up to version `last`, checking every version; writes a byte
 * to tell_fd (unless -1) once it has tell_at or a newer one. */
static void consumer_run(uint16_t port, const char *name, int device, uint64_t pad, uint64_t last,
                         int tell_fd, uint64_t tell_at)
{
    consumer_side_t c;
    uint64_t        v = 0;

    consumer_setup(&c, name, device, pad);
    WEFT_CHILD_CHECK(consumer_connect(&c, port), WEFT_OK);
    while (v < last) {
        uint64_t      got = 0;
        weft_status_t st = weft_remote_receive(c.remote, v, WAIT_US, &got);

        if (st != WEFT_OK || got <= v) {
            CHILD_FAIL("consumer \"%s\": after version %llu: %s, version %llu", name,
                       (unsigned long long)v, weft_status_string(st), (unsigned long long)got);
        }
        consumer_verify(&c, got);
        CHILD_CHECK(tell_fd < 0 || v >= tell_at || got < tell_at || write(tell_fd, "t", 1) == 1);
        v = got;
    }
    consumer_free(&c);
}

/* --------------------------------------------------------------- runs */

typedef struct run {
    const char *tls;        /* UCX_TLS */
    const char *path;       /* WEFT_UCX_CUDA */
    int         gpu_registry;
    int         device_views;
    uint32_t    consumers;  /* consumer i: rows padded when i is odd */
    uint64_t    versions;
    uint64_t    window;
} run_t;

/* The TLS list for a path: UCX puts device memory through its cuda_copy
 * transport when the memory is registered directly. */
static void set_env(const run_t *run)
{
    char tls[128];

    snprintf(tls, sizeof(tls), "%s%s", run->tls,
             ucx_reports_cuda && strcmp(run->path, "staged") != 0 ? ",cuda_copy" : "");
    ck_assert_int_eq(setenv("UCX_TLS", tls, 1), 0);
    ck_assert_int_eq(setenv("WEFT_UCX_CUDA", run->path, 1), 0);
    printf("# UCX_TLS=%s WEFT_UCX_CUDA=%s, %s registry into %s views, %u consumers, %llu "
           "versions of %llu bytes, window %llu\n",
           tls, run->path, run->gpu_registry ? "GPU" : "host", run->device_views ? "device" : "host",
           run->consumers, (unsigned long long)run->versions, (unsigned long long)VERSION_BYTES,
           (unsigned long long)run->window);
    fflush(stdout);
}

static int port_pipe[2];

static uint16_t read_port(void)
{
    uint16_t port = 0;

    /* A server that fails before it writes its port ends the read. */
    ck_assert_int_eq(close(port_pipe[1]), 0);
    ck_assert_int_eq(read(port_pipe[0], &port, sizeof(port)), (ssize_t)sizeof(port));
    return port;
}

/* A server that publishes `versions` once `consumers` are ready, each
 * acknowledged by every consumer still registered. */
static pid_t fork_server(const run_t *run, uint32_t consumers, uint32_t lost)
{
    pid_t pid;

    ck_assert_int_eq(pipe(port_pipe), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        server_side_t       s;
        weft_server_stats_t st;

        registry_start(&s, run->gpu_registry);
        WEFT_CHILD_CHECK(server_create(&s, run->window), WEFT_OK);
        CHILD_CHECK(write(port_pipe[1], &s.port, sizeof(s.port)) == sizeof(s.port));
        server_wait_ready(&s, consumers);
        for (uint64_t v = 1; v <= run->versions; v++) {
            weft_status_t status;

            server_publish(&s, v);
            status = weft_registry_wait_consumers(s.reg, v, WAIT_US, NULL);
            if (status != WEFT_OK) {
                CHILD_FAIL("server: version %llu not acknowledged by every consumer: %s",
                           (unsigned long long)v, weft_status_string(status));
            }
        }
        WEFT_CHILD_CHECK(weft_server_get_stats(s.server, &st), WEFT_OK);
        if (st.dropped < lost || (lost == 0 && st.versions_sent != run->versions * consumers)) {
            CHILD_FAIL("server: %llu versions sent to %u consumers, %llu dropped (want %u)",
                       (unsigned long long)st.versions_sent, consumers,
                       (unsigned long long)st.dropped, lost);
        }
        server_stop(&s);
        CHILD_EXIT();
    }
    return pid;
}

static void run_versions(const run_t *run)
{
    pid_t    server, pids[4];
    uint16_t port;

    set_env(run);
    server = fork_server(run, run->consumers, 0);
    port = read_port();
    for (uint32_t i = 0; i < run->consumers; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            char name[32];

            snprintf(name, sizeof(name), "rollout-%u", i);
            consumer_run(port, name, run->device_views, i % 2 ? PAD : 0, run->versions, -1, 0);
            CHILD_EXIT();
        }
    }
    for (uint32_t i = 0; i < run->consumers; i++) {
        ck_assert_int_eq(wait_child(pids[i]), 0);
    }
    ck_assert_int_eq(wait_child(server), 0);
}

/* --------------------------------------------------------------- tests */

START_TEST(gpu_registry_to_device_views_auto_over_tcp)
{
    run_t run = {"tcp,self", "auto", 1, 1, 2, 10, 64u << 20};
    run_versions(&run);
}
END_TEST

START_TEST(gpu_registry_to_device_views_staged_over_tcp)
{
    run_t run = {"tcp,self", "staged", 1, 1, 2, 10, 64u << 20};
    run_versions(&run);
}
END_TEST

START_TEST(gpu_registry_to_device_views_staged_over_shared_memory)
{
    run_t run = {"sm,self", "staged", 1, 1, 2, 10, 64u << 20};
    run_versions(&run);
}
END_TEST

START_TEST(staged_version_larger_than_the_window)
{
    /* 4.6 MB per version through a 4 MiB ring of four 1 MiB chunks; the
     * contiguous consumer's one merged range spans every chunk. */
    run_t run = {"tcp,self", "staged", 1, 1, 2, 6, 1};
    run_versions(&run);
}
END_TEST

/*
 * In a child: a server of a host registry starts, and a consumer with
 * device views named `name` is refused with `want`; else the child fails,
 * naming the caller's `line`.
 */
static void device_views_refused(const char *name, weft_status_t want, int line)
{
    server_side_t   host;
    consumer_side_t c;
    weft_status_t   status;

    registry_start(&host, 0);
    status = server_create(&host, 64u << 20);
    if (status != WEFT_OK) {
        CHILD_FAIL_AT(line, "server_create: %s", weft_status_string(status));
    }
    consumer_setup(&c, name, 1, 0);
    status = consumer_connect(&c, host.port);
    if (status != want) {
        CHILD_FAIL_AT(line, "consumer_connect gave %s, not %s", weft_status_string(status),
                      weft_status_string(want));
    }
    c.remote = NULL;
    consumer_free(&c);
    server_stop(&host);
}

/*
 * Device views staged through a ring much smaller than a version: 256 KiB
 * (two halves of 128 KiB) for 4.6 MB, so each version comes in 36 rounds
 * (plan/rounds.h), with strided views (consumer 1), over TCP and shared
 * memory, and with the server's own bounce ring cut to one put at a time.
 * First a ring under the minimum is refused, which shows the variable
 * reaches the consumers of this test.
 */
START_TEST(staged_in_rounds_through_a_small_ring)
{
    run_t run = {"tcp,self", "staged", 1, 1, 2, 8, 64u << 20};
    pid_t pid;

    set_env(&run);
    ck_assert_int_eq(setenv("WEFT_UCX_STAGE_BYTES", "64K", 1), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        device_views_refused("small-ring", WEFT_ERR_INVALID_PARAM, __LINE__);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(pid), 0);
    ck_assert_int_eq(setenv("WEFT_UCX_STAGE_BYTES", "256K", 1), 0);
    run_versions(&run);
    run.tls = "sm,self";
    run_versions(&run);
    run.tls = "tcp,self";
    run.window = 1;
    run_versions(&run);
    run.gpu_registry = 0;
    run_versions(&run);
    ck_assert_int_eq(unsetenv("WEFT_UCX_STAGE_BYTES"), 0);
}
END_TEST

START_TEST(host_registry_to_device_views)
{
    run_t run = {"tcp,self", "staged", 0, 1, 2, 8, 64u << 20};
    run_versions(&run);
    run.path = "auto";
    run_versions(&run);
}
END_TEST

START_TEST(gpu_registry_to_host_views)
{
    run_t run = {"tcp,self", "staged", 1, 0, 2, 8, 64u << 20};
    run_versions(&run);
    run.path = "auto";
    run_versions(&run);
}
END_TEST

START_TEST(consumer_killed_others_go_on)
{
    run_t    run = {"tcp,self", "staged", 1, 1, 2, 15, 8u << 20};
    pid_t    server, victim, survivor;
    uint16_t port;
    int      got3[2], got4[2];

    set_env(&run);
    ck_assert_int_eq(pipe(got3), 0);
    ck_assert_int_eq(pipe(got4), 0);
    server = fork_server(&run, 2, 1);
    port = read_port();
    victim = fork();
    ck_assert_int_ge(victim, 0);
    if (victim == 0) {
        consumer_side_t c;
        uint64_t        v = 0, got;

        /* Three versions, then it stops taking part in version 4 (no
         * progress, no ack) and is killed in the middle of it. */
        consumer_setup(&c, "victim", 1, 0);
        WEFT_CHILD_CHECK(consumer_connect(&c, port), WEFT_OK);
        while (v < 3) {
            WEFT_CHILD_CHECK(weft_remote_receive(c.remote, v, WAIT_US, &got), WEFT_OK);
            consumer_verify(&c, got);
            v = got;
        }
        CHILD_CHECK(write(got3[1], "3", 1) == 1);
        pause();
        _exit(0);
    }
    survivor = fork();
    ck_assert_int_ge(survivor, 0);
    if (survivor == 0) {
        consumer_run(port, "survivor", 1, PAD, run.versions, got4[1], 4);
        CHILD_EXIT();
    }
    /* Killed once version 4 is under way: published (the survivor has it)
     * and not acknowledged by the victim, which the server waits for.
     * Guaranteed: the victim acknowledged 3 and never asks for 4, so the
     * server is waiting on it in the registry when it dies; not: that any
     * put of 4 to it was in flight (the server sends only when asked). */
    ck_assert_int_eq(read_byte(got3[0], CHILD_SIGNAL_WAIT_S), '3');
    ck_assert_int_eq(read_byte(got4[0], CHILD_SIGNAL_WAIT_S), 't');
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(wait_child(victim), 128 + SIGKILL);
    ck_assert_int_eq(wait_child(survivor), 0);
    ck_assert_int_eq(wait_child(server), 0);
}
END_TEST

START_TEST(direct_without_ucx_cuda_support_is_refused)
{
    run_t run = {"tcp,self", "direct", 1, 1, 1, 4, 64u << 20};
    pid_t pid;

    if (ucx_reports_cuda) {
        /* UCX can: the direct path runs. */
        run_versions(&run);
        return;
    }
    set_env(&run);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        server_side_t gpu;

        /* A GPU registry cannot be served directly... */
        registry_start(&gpu, 1);
        WEFT_CHILD_CHECK(server_create(&gpu, 64u << 20), WEFT_ERR_UNSUPPORTED);
        WEFT_CHILD_CHECK(weft_registry_close(gpu.reg), WEFT_OK);
        weft_registry_unlink(gpu.name);
        /* ...nor device views received directly; host memory still works. */
        device_views_refused("direct", WEFT_ERR_UNSUPPORTED, __LINE__);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(pid), 0);
}
END_TEST

START_TEST(mixed_host_and_device_views_are_refused)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        consumer_side_t c;
        uint8_t        *host = malloc((uint64_t)ROWS * COLS);

        CHILD_CHECK(host != NULL);
        consumer_setup(&c, "mixed", 1, 0);
        c.views[3].field_mask &= ~(uint64_t)WEFT_RECV_VIEW_FIELD_MEMORY;
        c.views[3].data = host;
        /* Refused before anything connects (nobody listens there). */
        WEFT_CHILD_CHECK(consumer_connect(&c, 1), WEFT_ERR_INVALID_PARAM);
        c.remote = NULL;
        consumer_free(&c);
        free(host);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(pid), 0);
}
END_TEST

/* Probed in a child: UCX built in (exit 0 or 2: 2 when UCX reports
 * GPUDirect RDMA), or not (1). Prints UCX's GPU-memory line. */
static int probe_ucx(void)
{
    int   status;
    pid_t pid = fork();

    if (pid < 0) {
        return 1;
    }
    if (pid == 0) {
        weft_backend_info_t info;
        const char         *line;

        if (weft_backend_query(WEFT_BACKEND_UCX, &info) != WEFT_OK || !info.compiled) {
            _exit(1);
        }
        line = strstr(info.detail, "GPU memory:");
        if (line != NULL) {
            printf("# UCX %s: %.*s\n", info.version, (int)strcspn(line, "\n"), line);
            fflush(stdout);
        }
        _exit(line != NULL && strstr(line, "reports GPUDirect RDMA") != NULL ? 2 : 0);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        return 1;
    }
    return WEXITSTATUS(status);
}

static Suite *transport_ucx_cuda_suite(void)
{
    Suite *s;
    TCase *tc;
    int    gpus, ucx;

    ucx = probe_ucx();
    if (ucx == 1) {
        printf("test_transport_ucx_cuda: libweft was built without UCX\n");
        return NULL;
    }
    gpus = weft_test_gpu_count();
    if (gpus == 0) {
        printf("test_transport_ucx_cuda: no GPU\n");
        return NULL;
    }
    ucx_reports_cuda = ucx == 2;
    consumer_gpu = gpus > 1 ? 1 : 0;
    printf("# %d GPUs: server on GPU %d, consumers on GPU %d\n", gpus, SERVER_GPU, consumer_gpu);
    s = suite_create("transport_ucx_cuda");
    /* One case per test: CK_RUN_CASE=<name> runs one alone. */
#define ADD(test)                                  \
    do {                                           \
        tc = tcase_create(#test);                  \
        tcase_set_timeout(tc, 120);                \
        tcase_add_test(tc, test);                  \
        suite_add_tcase(s, tc);                    \
    } while (0)
    ADD(gpu_registry_to_device_views_auto_over_tcp);
    ADD(gpu_registry_to_device_views_staged_over_tcp);
    ADD(gpu_registry_to_device_views_staged_over_shared_memory);
    ADD(staged_version_larger_than_the_window);
    ADD(staged_in_rounds_through_a_small_ring);
    ADD(host_registry_to_device_views);
    ADD(gpu_registry_to_host_views);
    ADD(consumer_killed_others_go_on);
    ADD(direct_without_ucx_cuda_support_is_refused);
    ADD(mixed_host_and_device_views_are_refused);
#undef ADD
    return s;
}

WEFT_TEST_MAIN(transport_ucx_cuda_suite)
