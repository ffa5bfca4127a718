/*
 * The nccl transport across processes: a server over a GPU registry on
 * GPU 0, remote consumers receiving into device views on GPU 1 through
 * 127.0.0.1; with one GPU, on GPU 0 too, each consumer under an
 * NCCL_HOSTID of its own, so that NCCL takes it for another host and
 * carries the bytes through its network transport (sockets on loopback).
 * Exact bytes over many versions (strided views into fused tensors,
 * contiguous scale tensors), the same through NCCL's network (socket)
 * path with P2P and shared memory disabled, a version cut into many sends
 * and groups by a small window, a wrong token and a
 * consumer on the server's GPU refused with nothing registered, a host
 * registry refused, a consumer killed mid-stream (the others go on, the
 * server records it, a restarted one rejoins and gets the next version),
 * a server killed (the consumer gets an error in time and keeps what it
 * had). Exits 77 (skipped) without NCCL or without a GPU.
 *
 * Every process that uses CUDA is forked before it touches CUDA: the test
 * process itself never does (Check forks each test from the runner), so
 * NCCL_* variables set in a test reach its children before NCCL starts.
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
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#define W_TENSORS   12
#define ROWS        64
#define COLS        1000 /* bytes per row of a W tensor */
#define S_ROWS      4
#define S_COLS      8    /* fp32 */
#define TENSORS     (2 * W_TENSORS) /* W, then its scales */
#define PAD         24   /* row padding of the strided consumer views */
#define POISON      0xA5
#define TOKEN       "nccl-s3cret"
#define WAIT_US     30000000u
#define SERVER_GPU  0
#define W_BYTES     ((uint64_t)ROWS * COLS)
#define S_BYTES     ((uint64_t)S_ROWS * S_COLS * 4)

static void tensor_name(char *buf, size_t size, uint32_t t)
{
    uint32_t e = t % W_TENSORS;

    snprintf(buf, size, "model.layers.%u.mlp.experts.%u.down_proj.%s", e / 4, e % 4,
             t < W_TENSORS ? "weight" : "weight_scale_inv");
}

static uint64_t tensor_bytes(uint32_t t)
{
    return t < W_TENSORS ? W_BYTES : S_BYTES;
}

/* The consumers' GPU: GPU 1, or with one GPU the server's, where each
 * consumer runs under consumer_host_id (set by the suite). */
static int         consumer_gpu = 1;
static const char *consumer_host_id;

/* In a consumer's process, before NCCL starts there: its GPU. */
static int consumer_side_gpu(void)
{
    if (consumer_host_id != NULL) {
        CHILD_CHECK(setenv("NCCL_HOSTID", consumer_host_id, 1) == 0);
    }
    return consumer_gpu;
}

/* ------------------------------------------------------------- server */

typedef struct server_side {
    char            name[64];
    weft_registry_h reg;
    weft_server_h   server;
    uint16_t        port;
} server_side_t;

static void registry_start(server_side_t *s, int gpu_registry)
{
    /* With checksums: the consumers check their verbatim views (the
     * scales) against them every version. */
    weft_registry_params_t rp = {.field_mask = WEFT_REGISTRY_FIELD_MEMORY | WEFT_REGISTRY_FIELD_CHECKSUMS,
                                 .memory = gpu_registry ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST,
                                 .device = gpu_registry ? SERVER_GPU : -1, .checksums = 1};

    snprintf(s->name, sizeof(s->name), "t-nccl-%d", (int)getpid());
    weft_registry_unlink(s->name);
    CHILD_CHECK(!gpu_registry || cudaSetDevice(SERVER_GPU) == cudaSuccess);
    CHILD_CHECK(weft_registry_create(s->name, &rp, &s->reg) == WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        char               tname[WEFT_TENSOR_NAME_MAX];
        uint32_t           e = t % W_TENSORS;
        weft_tensor_desc_t d = {.name = tname, .layer = (int32_t)(e / 4), .expert = (int32_t)(e % 4),
                                .role = t < W_TENSORS ? WEFT_ROLE_W : WEFT_ROLE_SCALE,
                                .dtype = t < W_TENSORS ? WEFT_DTYPE_FP8_E4M3 : WEFT_DTYPE_FP32,
                                .ndim = 2};

        d.shape[0] = t < W_TENSORS ? ROWS : S_ROWS;
        d.shape[1] = t < W_TENSORS ? COLS : S_COLS;
        tensor_name(tname, sizeof(tname), t);
        CHILD_CHECK(weft_registry_declare(s->reg, &d, NULL) == WEFT_OK);
    }
    CHILD_CHECK(weft_registry_seal(s->reg) == WEFT_OK);
}

static void server_start(server_side_t *s, uint64_t window)
{
    weft_server_params_t params = {
        .field_mask   = WEFT_SERVER_FIELD_TIMEOUT | WEFT_SERVER_FIELD_WINDOW,
        .transport    = WEFT_TRANSPORT_NCCL,
        .listen       = "127.0.0.1:0",
        .token        = TOKEN,
        .timeout_us   = 10000000,
        .window_bytes = window,
    };

    registry_start(s, 1);
    CHILD_CHECK(weft_server_create(s->reg, &params, &s->server) == WEFT_OK);
    CHILD_CHECK(weft_server_port(s->server, &s->port) == WEFT_OK && s->port != 0);
}

static void server_publish(server_side_t *s, uint64_t v)
{
    static uint8_t host[W_BYTES];

    CHILD_CHECK(weft_registry_write_begin(s->reg, WAIT_US, NULL) == WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        void *dst;

        payload_fill(host, tensor_bytes(t), v, t);
        CHILD_CHECK(weft_registry_write_tensor(s->reg, t, &dst) == WEFT_OK);
        CHILD_CHECK(cudaMemcpy(dst, host, tensor_bytes(t), cudaMemcpyHostToDevice) == cudaSuccess);
    }
    CHILD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHILD_CHECK(weft_registry_publish(s->reg, v, NULL) == WEFT_OK);
}

static void server_wait_ready(server_side_t *s, uint32_t consumers)
{
    fixture_wait_ready(s->server, consumers, 60);
}

static void server_stop(server_side_t *s)
{
    fixture_server_stop(s->server, s->reg, s->name);
}

/* ----------------------------------------------------------- consumer */

typedef struct consumer_side {
    uint64_t         pitch;  /* bytes between rows of the fused W tensor */
    uint8_t         *fused;  /* device: [W_TENSORS, ROWS, pitch] */
    uint8_t         *scales; /* device: [W_TENSORS, S_ROWS, S_COLS] fp32, contiguous */
    weft_remote_h    remote;
    weft_recv_view_t views[TENSORS];
    char             names[TENSORS][WEFT_TENSOR_NAME_MAX];
} consumer_side_t;

#define FUSED_BYTES(c)  ((uint64_t)W_TENSORS * ROWS * (c)->pitch)
#define SCALES_BYTES    ((uint64_t)W_TENSORS * S_BYTES)

/* Views on `gpu`: W rows padded by `pad` bytes (0: contiguous). */
static weft_status_t consumer_connect(consumer_side_t *c, uint16_t port, const char *token,
                                      const char *name, int gpu, uint64_t pad)
{
    char                 addr[64];
    weft_remote_params_t params = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT,
                                   .transport  = WEFT_TRANSPORT_NCCL,
                                   .server     = addr,
                                   .token      = token,
                                   .name       = name,
                                   .timeout_us = 20000000};

    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    memset(c, 0, sizeof(*c));
    c->pitch = COLS + pad;
    CHILD_CHECK(cudaSetDevice(gpu) == cudaSuccess);
    CHILD_CHECK(cudaMalloc((void **)&c->fused, FUSED_BYTES(c)) == cudaSuccess);
    CHILD_CHECK(cudaMalloc((void **)&c->scales, SCALES_BYTES) == cudaSuccess);
    CHILD_CHECK(cudaMemset(c->fused, POISON, FUSED_BYTES(c)) == cudaSuccess);
    CHILD_CHECK(cudaMemset(c->scales, POISON, SCALES_BYTES) == cudaSuccess);
    CHILD_CHECK(cudaDeviceSynchronize() == cudaSuccess);
    for (uint32_t t = 0; t < TENSORS; t++) {
        weft_recv_view_t *v = &c->views[t];
        int               w = t < W_TENSORS;

        tensor_name(c->names[t], sizeof(c->names[t]), t);
        *v = (weft_recv_view_t){
            .field_mask = WEFT_RECV_VIEW_FIELD_STRIDES | WEFT_RECV_VIEW_FIELD_MEMORY,
            .name       = c->names[t],
            .role       = w ? WEFT_ROLE_W : WEFT_ROLE_SCALE,
            .dtype      = w ? WEFT_DTYPE_FP8_E4M3 : WEFT_DTYPE_FP32,
            .ndim       = 2,
            .memory     = WEFT_MEMORY_CUDA,
        };
        if (w) {
            v->shape[0] = ROWS;
            v->shape[1] = COLS;
            v->strides[0] = c->pitch;
            v->strides[1] = 1;
            v->data = c->fused + (uint64_t)t * ROWS * c->pitch;
        } else {
            v->shape[0] = S_ROWS;
            v->shape[1] = S_COLS;
            v->strides[0] = S_COLS;
            v->strides[1] = 1;
            v->data = c->scales + (uint64_t)(t - W_TENSORS) * S_BYTES;
        }
    }
    return weft_remote_connect(&params, c->views, TENSORS, &c->remote);
}

/* Bytes that differ from version v (padding must still be poison); the
 * first few are printed with where they are. */
static uint64_t consumer_wrong(const consumer_side_t *c, uint64_t v)
{
    uint8_t *fused = malloc(FUSED_BYTES(c)), *scales = malloc(SCALES_BYTES);
    uint64_t wrong = 0;

    CHILD_CHECK(fused != NULL && scales != NULL);
    CHILD_CHECK(cudaMemcpy(fused, c->fused, FUSED_BYTES(c), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHILD_CHECK(cudaMemcpy(scales, c->scales, SCALES_BYTES, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (uint32_t t = 0; t < TENSORS; t++) {
        int      w = t < W_TENSORS;
        uint64_t rows = w ? ROWS : S_ROWS, pitch = w ? c->pitch : S_COLS * 4,
                 row_bytes = w ? COLS : S_COLS * 4;
        const uint8_t *base = w ? fused + (uint64_t)t * ROWS * c->pitch
                                : scales + (uint64_t)(t - W_TENSORS) * S_BYTES;

        for (uint64_t r = 0; r < rows; r++) {
            for (uint64_t col = 0; col < pitch; col++) {
                uint8_t want = col < row_bytes ? payload_byte(v, t, r * row_bytes + col) : POISON;
                uint8_t got = base[r * pitch + col];

                if (got != want && wrong++ < 5) {
                    fprintf(stderr, "pid %d: version %llu, tensor %u (%s), row %llu, byte %llu: "
                            "0x%02x, want 0x%02x%s\n",
                            (int)getpid(), (unsigned long long)v, t, c->names[t],
                            (unsigned long long)r, (unsigned long long)col, got, want,
                            col >= row_bytes ? " (padding)" : "");
                }
            }
        }
    }
    if (wrong > 0) {
        fprintf(stderr, "pid %d: version %llu: %llu wrong bytes\n", (int)getpid(),
                (unsigned long long)v, (unsigned long long)wrong);
    }
    free(fused);
    free(scales);
    return wrong;
}

static void consumer_free(consumer_side_t *c)
{
    CHILD_CHECK(cudaFree(c->fused) == cudaSuccess);
    CHILD_CHECK(cudaFree(c->scales) == cudaSuccess);
}

/* Receives up to version `last`, checking every byte each time; writes a
 * byte to `signal_fd` (if ≥ 0) after version `signal_at`. */
static void consumer_run(uint16_t port, const char *name, uint64_t pad, uint64_t last,
                         int signal_fd, uint64_t signal_at)
{
    consumer_side_t c;
    uint64_t        v = 0;
    weft_status_t   status;

    status = consumer_connect(&c, port, TOKEN, name, consumer_side_gpu(), pad);
    if (status != WEFT_OK) {
        CHILD_FAIL("consumer %s: connect: %s", name, weft_status_string(status));
    }
    while (v < last) {
        uint64_t got = 0;

        status = weft_remote_receive(c.remote, v, WAIT_US, &got);
        if (status != WEFT_OK) {
            CHILD_FAIL("consumer %s: receive after version %llu: %s", name,
                       (unsigned long long)v, weft_status_string(status));
        }
        CHILD_CHECK(got > v);
        CHILD_CHECK(consumer_wrong(&c, got) == 0);
        v = got;
        if (signal_fd >= 0 && v == signal_at) {
            CHILD_CHECK(write(signal_fd, "v", 1) == 1);
        }
    }
    CHILD_CHECK(weft_remote_close(c.remote) == WEFT_OK);
    consumer_free(&c);
}

/* --------------------------------------------------------------- tests */

static int port_pipe[2];

static uint16_t read_port(void)
{
    uint16_t port = 0;

    ck_assert_int_eq(read(port_pipe[0], &port, sizeof(port)), (ssize_t)sizeof(port));
    return port;
}

static pid_t fork_server(uint32_t consumers, uint64_t versions, uint64_t window)
{
    pid_t pid;

    ck_assert_int_eq(pipe(port_pipe), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        server_side_t       s;
        weft_server_stats_t st;

        server_start(&s, window);
        CHILD_CHECK(write(port_pipe[1], &s.port, sizeof(s.port)) == sizeof(s.port));
        server_wait_ready(&s, consumers);
        for (uint64_t v = 1; v <= versions; v++) {
            uint32_t lagging = 0;

            server_publish(&s, v);
            if (weft_registry_wait_consumers(s.reg, v, WAIT_US, &lagging) != WEFT_OK) {
                CHILD_FAIL("server: version %llu: %u consumers lagging",
                           (unsigned long long)v, lagging);
            }
        }
        CHILD_CHECK(weft_server_get_stats(s.server, &st) == WEFT_OK);
        if (st.versions_sent != versions * consumers || st.dropped != 0 ||
            st.bytes_sent != st.versions_sent * (W_TENSORS * (W_BYTES + S_BYTES))) {
            CHILD_FAIL("server: %llu versions (%llu bytes) sent to %u consumers, %llu dropped",
                       (unsigned long long)st.versions_sent, (unsigned long long)st.bytes_sent,
                       consumers, (unsigned long long)st.dropped);
        }
        server_stop(&s);
        CHILD_EXIT();
    }
    return pid;
}

static void run_versions(uint32_t consumers, uint64_t versions, uint64_t window, uint64_t pad)
{
    pid_t    server, pids[4];
    uint16_t port;

    server = fork_server(consumers, versions, window);
    port = read_port();
    for (uint32_t i = 0; i < consumers; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            char name[32];

            snprintf(name, sizeof(name), "rollout-%u", i);
            consumer_run(port, name, pad, versions, -1, 0);
            CHILD_EXIT();
        }
    }
    for (uint32_t i = 0; i < consumers; i++) {
        ck_assert_int_eq(wait_child(pids[i]), 0);
    }
    ck_assert_int_eq(wait_child(server), 0);
}

START_TEST(nccl_versions_exact)
{
    run_versions(2, 10, 64u << 20, PAD);
}
END_TEST

START_TEST(nccl_versions_exact_over_the_network_path)
{
    /* Before any child starts NCCL: no P2P, no shared memory, so the
     * bytes go through NCCL's network transport (sockets on loopback). */
    ck_assert_int_eq(setenv("NCCL_P2P_DISABLE", "1", 1), 0);
    ck_assert_int_eq(setenv("NCCL_SHM_DISABLE", "1", 1), 0);
    ck_assert_int_eq(setenv("NCCL_NET", "Socket", 1), 0);
    run_versions(1, 6, 64u << 20, PAD);
}
END_TEST

START_TEST(nccl_version_larger_than_one_send)
{
    /* Contiguous views: the W tensors merge into one 768 000-byte range,
     * cut into 64 KiB sends, one group each. */
    run_versions(1, 4, 64u << 10, 0);
}
END_TEST

START_TEST(nccl_wrong_token_same_gpu_and_host_registry_are_refused)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        server_side_t         s, host;
        consumer_side_t       c;
        weft_server_stats_t   st;
        weft_registry_stats_t rs;
        weft_server_h         refused = NULL;
        weft_server_params_t  params = {.transport = WEFT_TRANSPORT_NCCL, .listen = "127.0.0.1:0",
                                        .token = TOKEN};

        server_start(&s, 64u << 20);
        CHILD_CHECK(consumer_connect(&c, s.port, "not-the-token", "intruder", consumer_gpu, PAD) ==
                        WEFT_ERR_AUTH);
        consumer_free(&c);
        /* Views on the server's GPU under the server's NCCL host id (this
         * process's): NCCL cannot put both ranks there. */
        CHILD_CHECK(consumer_connect(&c, s.port, TOKEN, "same-gpu", SERVER_GPU, PAD) ==
                        WEFT_ERR_UNSUPPORTED);
        consumer_free(&c);
        CHILD_CHECK(weft_server_get_stats(s.server, &st) == WEFT_OK);
        CHILD_CHECK(st.refused == 2 && st.accepted == 0);
        /* Nothing was registered for either. */
        CHILD_CHECK(weft_registry_get_stats(s.reg, &rs) == WEFT_OK && rs.consumers == 0);
        server_stop(&s);
        /* The nccl transport sends from GPU memory only. */
        registry_start(&host, 0);
        CHILD_CHECK(weft_server_create(host.reg, &params, &refused) == WEFT_ERR_UNSUPPORTED &&
                        refused == NULL);
        CHILD_CHECK(weft_registry_close(host.reg) == WEFT_OK);
        weft_registry_unlink(host.name);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(pid), 0);
}
END_TEST

START_TEST(nccl_consumer_killed_others_go_on_restarted_rejoins)
{
    pid_t    server, victim, survivor, rejoined;
    uint16_t port;
    int      go[2], victim_pipe[2];
    char     byte;

    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(victim_pipe), 0);
    server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        server_side_t       s;
        weft_server_stats_t st;
        uint64_t            v;

        server_start(&s, 64u << 10); /* many groups: the victim dies in one */
        CHILD_CHECK(write(port_pipe[1], &s.port, sizeof(s.port)) == sizeof(s.port));
        server_wait_ready(&s, 2);
        for (v = 1; v <= 20; v++) {
            server_publish(&s, v);
            /* The victim dies meanwhile: its record goes, the wait ends. */
            CHILD_CHECK(weft_registry_wait_consumers(s.reg, v, WAIT_US, NULL) == WEFT_OK);
            usleep(20000);
        }
        CHILD_CHECK(weft_server_get_stats(s.server, &st) == WEFT_OK);
        if (st.dropped < 1) {
            CHILD_FAIL("server: the killed consumer was not dropped");
        }
        /* A consumer restarted after the crash joins and gets the next one. */
        CHILD_CHECK(read(go[0], &byte, 1) == 1);
        server_wait_ready(&s, 2);
        server_publish(&s, 21);
        CHILD_CHECK(weft_registry_wait_consumers(s.reg, 21, WAIT_US, NULL) == WEFT_OK);
        server_stop(&s);
        CHILD_EXIT();
    }
    port = read_port();
    victim = fork();
    ck_assert_int_ge(victim, 0);
    if (victim == 0) {
        consumer_run(port, "victim", PAD, 1000, victim_pipe[1], 2); /* never ends by itself */
        CHILD_EXIT();
    }
    survivor = fork();
    ck_assert_int_ge(survivor, 0);
    if (survivor == 0) {
        consumer_run(port, "survivor", PAD, 21, -1, 0);
        CHILD_EXIT();
    }
    /* Killed once it received version 2: in the middle of a later one. */
    ck_assert_int_eq(read(victim_pipe[0], &byte, 1), 1);
    usleep(30000);
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(wait_child(victim), 128 + SIGKILL);
    rejoined = fork();
    ck_assert_int_ge(rejoined, 0);
    if (rejoined == 0) {
        consumer_side_t c;
        uint64_t        got = 0;
        weft_status_t   status;

        status = consumer_connect(&c, port, TOKEN, "victim-restarted", consumer_side_gpu(), PAD);
        if (status != WEFT_OK) {
            CHILD_FAIL("restarted consumer: connect: %s", weft_status_string(status));
        }
        CHILD_CHECK(write(go[1], "g", 1) == 1);
        status = weft_remote_receive(c.remote, 20, WAIT_US, &got);
        if (status != WEFT_OK || got != 21) {
            CHILD_FAIL("restarted consumer: got version %llu: %s", (unsigned long long)got,
                       weft_status_string(status));
        }
        CHILD_CHECK(consumer_wrong(&c, 21) == 0);
        weft_remote_close(c.remote);
        consumer_free(&c);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(rejoined), 0);
    ck_assert_int_eq(wait_child(survivor), 0);
    ck_assert_int_eq(wait_child(server), 0);
}
END_TEST

START_TEST(nccl_server_killed_consumer_gets_an_error_in_time)
{
    pid_t    server, consumer;
    uint16_t port;
    int      acked[2], waiting[2];

    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(acked), 0);
    ck_assert_int_eq(pipe(waiting), 0);
    server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        server_side_t s;

        server_start(&s, 64u << 20);
        CHILD_CHECK(write(port_pipe[1], &s.port, sizeof(s.port)) == sizeof(s.port));
        server_wait_ready(&s, 1);
        server_publish(&s, 1);
        CHILD_CHECK(weft_registry_wait_consumers(s.reg, 1, WAIT_US, NULL) == WEFT_OK);
        CHILD_CHECK(write(acked[1], "a", 1) == 1);
        pause(); /* killed here */
        _exit(0);
    }
    port = read_port();
    consumer = fork();
    ck_assert_int_ge(consumer, 0);
    if (consumer == 0) {
        consumer_side_t c;
        uint64_t        got = 0, t0;
        struct timespec ts;
        weft_status_t   status;

        CHILD_CHECK(consumer_connect(&c, port, TOKEN, "orphan", consumer_side_gpu(), PAD) == WEFT_OK);
        CHILD_CHECK(weft_remote_receive(c.remote, 0, WAIT_US, &got) == WEFT_OK && got == 1);
        CHILD_CHECK(consumer_wrong(&c, 1) == 0);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (uint64_t)ts.tv_sec;
        CHILD_CHECK(write(waiting[1], "w", 1) == 1);
        /* The server dies while we wait: an error, well before the 30 s. */
        status = weft_remote_receive(c.remote, 1, WAIT_US, &got);
        if (status != WEFT_ERR_CONNECTION) {
            CHILD_FAIL("orphan: receive after the server died: %s", weft_status_string(status));
        }
        clock_gettime(CLOCK_MONOTONIC, &ts);
        CHILD_CHECK((uint64_t)ts.tv_sec - t0 < 10);
        /* Nothing new in the views. */
        CHILD_CHECK(consumer_wrong(&c, 1) == 0);
        CHILD_CHECK(weft_remote_receive(c.remote, 1, 1000, &got) == WEFT_ERR_CONNECTION);
        weft_remote_close(c.remote);
        consumer_free(&c);
        CHILD_EXIT();
    }
    /* Killed once the server took the ack of version 1 and the consumer
     * is at its receive of the next. Guaranteed: no transfer is in flight
     * (the server publishes nothing more) and the consumer asks after
     * version 1; not: that it is already blocked in the call when the
     * kill lands. Either way the connection is gone and the call must
     * say so. */
    ck_assert_int_eq(read_byte(acked[0], CHILD_SIGNAL_WAIT_S), 'a');
    ck_assert_int_eq(read_byte(waiting[0], CHILD_SIGNAL_WAIT_S), 'w');
    ck_assert_int_eq(kill(server, SIGKILL), 0);
    ck_assert_int_eq(wait_child(server), 128 + SIGKILL);
    ck_assert_int_eq(wait_child(consumer), 0);
    {
        char name[64];

        snprintf(name, sizeof(name), "t-nccl-%d", (int)server);
        weft_registry_unlink(name);
    }
}
END_TEST

static Suite *transport_nccl_suite(void)
{
    Suite              *s;
    TCase              *tc;
    int                 gpus;
    weft_backend_info_t info;

    if (weft_backend_query(WEFT_BACKEND_NCCL, &info) != WEFT_OK || !info.compiled) {
        printf("test_transport_nccl: libweft was built without NCCL\n");
        return NULL;
    }
    gpus = weft_test_gpu_count();
    if (gpus < 1) {
        printf("test_transport_nccl: no GPU\n");
        return NULL;
    }
    if (gpus == 1) {
        consumer_gpu = SERVER_GPU;
        consumer_host_id = "weft-test-consumer";
        printf("test_transport_nccl: one GPU: the consumers on the server's, as another NCCL host "
               "(NCCL_HOSTID=%s: NCCL's network transport)\n", consumer_host_id);
    }
    /* Bootstrap and socket traffic on loopback, unless told otherwise. */
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    s = suite_create("transport_nccl");
    /* One case per test: CK_RUN_CASE=<name> runs one alone. */
#define ADD(test)                                  \
    do {                                           \
        tc = tcase_create(#test);                  \
        tcase_set_timeout(tc, 100);                \
        tcase_add_test(tc, test);                  \
        suite_add_tcase(s, tc);                    \
    } while (0)
    ADD(nccl_versions_exact);
    ADD(nccl_versions_exact_over_the_network_path);
    ADD(nccl_version_larger_than_one_send);
    ADD(nccl_wrong_token_same_gpu_and_host_registry_are_refused);
    ADD(nccl_consumer_killed_others_go_on_restarted_rejoins);
    ADD(nccl_server_killed_consumer_gets_an_error_in_time);
#undef ADD
    return s;
}

WEFT_TEST_MAIN(transport_nccl_suite)
