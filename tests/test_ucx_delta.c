/*
 * Delta versions over the ucx transport (docs/protocol.md, "Delta
 * versions on the wire"): a server over a host registry and remote
 * consumers in other processes, each step driven from here through pipes
 * so that every case is one exact sequence. Each version changes a few
 * bytes of each tensor (or all of them); a consumer checks every byte of
 * its views, padding included, after each receive, and the server's
 * stats say which versions went as deltas:
 *
 * - consecutive versions go as deltas, far smaller than the version; one
 *   whose every byte changed goes whole;
 * - a consumer that missed a version, and one that connected anew, get
 *   the version whole, then deltas again;
 * - a consumer whose views changed under it (the delta then applies to
 *   the wrong bytes) refuses the delta and gets the version whole; after
 *   three such in a row, every version whole;
 * - an expert's W and WT (WT W's bytes transposed): WT is patched by W's
 *   delta, transposed, which crosses once (also where the WT view comes
 *   before the W view); a WT view changed under the
 *   consumer fails WT's checksum and the version comes whole; a
 *   producer whose WT is not W's transpose gets one version whole, then
 *   each WT's own delta;
 * - WEFT_DELTA=off sends every version whole; force sends even a version
 *   whose every byte changed as a delta (its tensors whole in the inbox),
 *   here on put and receive lanes over shared memory;
 * - with a GPU (libweft built with CUDA), the same from a GPU registry
 *   (its deltas encoded on the GPU) and into device views (applied and
 *   checked on the GPU, through a consumer's staging ring or not): into
 *   device views, from a GPU registry into host views, a host registry
 *   into device views changed under the consumer, and forced, every
 *   tensor whole through the GPU paths. The bytes of device views are
 *   read back to be checked.
 * - with a GPU and NCCL, the nccl transport (a GPU registry into device
 *   views, the pieces of each delta sent by NCCL into the consumer's
 *   inbox on its GPU): small deltas and a version whole, a WT patched by
 *   its W's delta (its view first or not), a WT view changed under the
 *   consumer and views changed three times in a row, a producer whose WT
 *   is not its W's transpose, a new connection whole, and forced. The
 *   consumer runs under an NCCL_HOSTID of its own, so one GPU serves both
 *   ranks through NCCL's network transport. (The nccl server sends every
 *   version to every consumer unasked: a consumer cannot skip one, so
 *   the missed-version case is ucx's alone.)
 * - with a GPU, the cuda_ipc transport's push mode (a GPU registry into
 *   device views of another process, the delta's entries copied into
 *   the consumer's inbox on its GPU): on one GPU WEFT_DELTA=auto sends
 *   every version whole (a delta pays only between GPUs), and with force
 *   the delta cases run as over nccl, a missed version and a new
 *   connection included.
 *
 * libweft reads its WEFT_* variables once per process, and this program
 * has read them before any case runs: the cases that need other values
 * run this program again with them (run_with), where only they are
 * registered (MODE_CASE in the environment).
 */
#include "config.h"

#include "lib/child.h"
#include "lib/harness.h"
#include "lib/transport_fixture.h"

#include <check.h>
#include <errno.h>
#ifdef HAVE_CUDA
#include "lib/gpu_skip.h"

#include <cuda_runtime_api.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft/weft.h>

#define TENSORS  8
#define ROWS     128
#define COLS     2044 /* not a multiple of 8: checksum words straddle rows */
#define PAD      20   /* the padded views' row padding */
#define TOKEN    "delta-token"
#define WAIT_US  30000000u
#define VERSIONS 8
#define TENSOR_BYTES ((uint64_t)ROWS * COLS)
#define VERSION_BYTES ((uint64_t)TENSORS * TENSOR_BYTES)
#define ALL      1000 /* a rate of 1000 per mille: every byte changes */

/* Of each tensor's bytes, how many per mille version v changes (v ≥ 2;
 * version 1 is the start). Set by each test before it forks. */
static int rate_of[VERSIONS + 1];

static void set_rates(int rate)
{
    for (int v = 0; v <= VERSIONS; v++) {
        rate_of[v] = rate;
    }
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Tensor t's bytes at version 1. */
static void start_bytes(uint8_t *data, uint32_t t)
{
    for (uint64_t i = 0; i < TENSOR_BYTES; i++) {
        data[i] = (uint8_t)mix(((uint64_t)t << 40) ^ i);
    }
}

/* Tensor t from version v − 1 to v: each byte the version picks is XORed
 * with a non-zero byte, so it changes. */
static void step_bytes(uint8_t *data, uint32_t t, uint64_t v)
{
    for (uint64_t i = 0; i < TENSOR_BYTES; i++) {
        uint64_t h = mix((v << 44) ^ ((uint64_t)t << 36) ^ i);

        if ((int)(h % 1000) < rate_of[v]) {
            data[i] ^= (uint8_t)(1 + (h >> 32) % 255);
        }
    }
}

/* Set by a case before it forks: tensors 1, 3, ... are the WT of the
 * tensor before them (same expert, [COLS, ROWS], its bytes transposed). */
static int paired;
/* With paired: WT's bytes are its own, not W's transposed (a producer
 * other than libweft's writer). */
static int wt_own_bytes;
/* With paired: the consumer declares each expert's WT view before its W
 * view (its bytes still come once). */
static int wt_first;

static int is_wt(uint32_t t)
{
    return paired && t % 2 == 1;
}

static uint64_t rows_of(uint32_t t)
{
    return is_wt(t) ? COLS : ROWS;
}

static uint64_t cols_of(uint32_t t)
{
    return is_wt(t) ? ROWS : COLS;
}

/* Every tensor's bytes as they are in version `to`, from `from` (0: none). */
static void advance(uint8_t *tensors, uint64_t from, uint64_t to)
{
    for (uint32_t t = 0; t < TENSORS; t++) {
        uint8_t *data = tensors + (uint64_t)t * TENSOR_BYTES;

        if (from == 0) {
            start_bytes(data, t);
        }
        for (uint64_t v = from == 0 ? 2 : from + 1; v <= to; v++) {
            step_bytes(data, t, v);
        }
        if (is_wt(t) && !wt_own_bytes) { /* the writer's WT: W's bytes transposed */
            const uint8_t *w = data - TENSOR_BYTES;

            for (uint64_t r = 0; r < ROWS; r++) {
                for (uint64_t c = 0; c < COLS; c++) {
                    data[c * ROWS + r] = w[r * COLS + c];
                }
            }
        }
    }
}

static void tensor_name(char *buf, size_t size, uint32_t t)
{
    snprintf(buf, size, "model.layers.0.mlp.experts.%u.up_proj.weight", t);
}

static void send_cmd(int fd, char cmd, uint64_t arg)
{
    unsigned char msg[9] = {(unsigned char)cmd};

    memcpy(msg + 1, &arg, sizeof(arg));
    CHILD_CHECK(write(fd, msg, sizeof(msg)) == (ssize_t)sizeof(msg));
}

static char read_cmd(int fd, uint64_t *arg)
{
    int c = read_byte(fd, CHILD_SIGNAL_WAIT_S);

    CHILD_CHECK(c >= 0 && read(fd, arg, sizeof(*arg)) == (ssize_t)sizeof(*arg));
    return (char)c;
}

static void read_all(int fd, void *out, size_t bytes)
{
    CHILD_CHECK(read_byte(fd, CHILD_SIGNAL_WAIT_S) == 'k');
    CHILD_CHECK(read(fd, out, bytes) == (ssize_t)bytes);
}

static void reply(int fd, const void *data, size_t bytes)
{
    CHILD_CHECK(write(fd, "k", 1) == 1);
    CHILD_CHECK(bytes == 0 || write(fd, data, bytes) == (ssize_t)bytes);
}

/* A child driven through a pipe pair: `cmd` to it, `out` from it. */
typedef struct driven {
    pid_t pid;
    int   cmd, out;
} driven_t;

/* ------------------------------------------------------------- server */

/* Lanes on both sides (0: WEFT_UCX_LANES, one on a small machine). */
static uint32_t lanes;
/* Set by a case before it forks: the transport (nccl: a GPU registry,
 * device views, the consumer under an NCCL host id of its own). */
static weft_transport_t transport = WEFT_TRANSPORT_UCX;
/* Set by a case before it forks: the server's registry on GPU 0, the
 * consumers' views on GPU 0. */
static int gpu_registry, device_views;

/* How long a side waits for progress. nccl: a padded version whole goes
 * as thousands of row-sized sends, 64 to a group, each group through
 * NCCL's socket transport here; with 30 test processes on 16 CPUs the
 * first version took over 5 s on an H100's machine. */
static uint64_t progress_timeout_us(void)
{
    return transport == WEFT_TRANSPORT_NCCL ? 60000000u : 5000000u;
}

/* Copies n bytes into (to_device) or out of memory that is device memory
 * where `device` says so. */
static void copy_bytes(void *dst, const void *src, size_t n, int device, int to_device)
{
    if (!device) {
        memcpy(dst, src, n);
        return;
    }
#ifdef HAVE_CUDA
    CHILD_CHECK(cudaMemcpy(dst, src, n, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) ==
                cudaSuccess);
#else
    (void)to_device;
    CHILD_FAIL("device memory in a build without CUDA");
#endif
}

/* n bytes of `device` or host memory, each `fill`. */
static uint8_t *alloc_bytes(size_t n, int device, uint8_t fill)
{
    uint8_t *p = NULL;

    if (!device) {
        p = malloc(n);
        CHILD_CHECK(p != NULL);
        memset(p, fill, n);
        return p;
    }
#ifdef HAVE_CUDA
    CHILD_CHECK(cudaSetDevice(0) == cudaSuccess && cudaMalloc((void **)&p, n) == cudaSuccess);
    CHILD_CHECK(cudaMemset(p, fill, n) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess);
#else
    CHILD_FAIL("device memory in a build without CUDA");
#endif
    return p;
}

static void free_bytes(uint8_t *p, int device)
{
#ifdef HAVE_CUDA
    if (device) {
        CHILD_CHECK(cudaFree(p) == cudaSuccess);
        return;
    }
#endif
    free(p);
}

/* p: publish the next version; s: the stats; q: stop. */
static void server_main(int cmd_fd, int out_fd)
{
    const weft_ucx_server_params_t own = {.field_mask = WEFT_UCX_SERVER_FIELD_LANES, .lanes = lanes};
    weft_server_params_t           params = {
        .field_mask = WEFT_SERVER_FIELD_TIMEOUT | (lanes ? WEFT_SERVER_FIELD_TRANSPORT : 0),
        .transport = transport, .listen = "127.0.0.1:0", .token = TOKEN, .timeout_us = progress_timeout_us(),
        .transport_params = &own};
    weft_registry_params_t rp = {.field_mask = WEFT_REGISTRY_FIELD_CHECKSUMS | WEFT_REGISTRY_FIELD_MEMORY,
                                 .checksums = 1, .memory = gpu_registry ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST,
                                 .device = gpu_registry ? 0 : -1};
    weft_registry_h        reg;
    weft_server_h          server;
    uint16_t               port;
    char                   name[64];
    uint8_t               *current = malloc(VERSION_BYTES);
    uint64_t               v = 0, arg;

    CHILD_CHECK(current != NULL);
    snprintf(name, sizeof(name), "t-ucx-delta-%d", (int)getpid());
    weft_registry_unlink(name);
    CHILD_CHECK(weft_registry_create(name, &rp, &reg) == WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        char               tname[WEFT_TENSOR_NAME_MAX];
        weft_tensor_desc_t d = {.name = tname, .expert = (int32_t)(paired ? t / 2 : t),
                                .role = is_wt(t) ? WEFT_ROLE_WT : WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3,
                                .ndim = 2, .shape = {rows_of(t), cols_of(t)}};

        tensor_name(tname, sizeof(tname), t);
        CHILD_CHECK(weft_registry_declare(reg, &d, NULL) == WEFT_OK);
    }
    CHILD_CHECK(weft_registry_seal(reg) == WEFT_OK);
    CHILD_CHECK(weft_server_create(reg, &params, &server) == WEFT_OK);
    CHILD_CHECK(weft_server_port(server, &port) == WEFT_OK);
    reply(out_fd, &port, sizeof(port));
    for (;;) {
        char cmd = read_cmd(cmd_fd, &arg);

        if (cmd == 'p') {
            CHILD_CHECK(v < VERSIONS);
            advance(current, v, v + 1);
            v++;
            CHILD_CHECK(weft_registry_write_begin(reg, WAIT_US, NULL) == WEFT_OK);
            for (uint32_t t = 0; t < TENSORS; t++) {
                void *data;

                CHILD_CHECK(weft_registry_write_tensor(reg, t, &data) == WEFT_OK);
                copy_bytes(data, current + (uint64_t)t * TENSOR_BYTES, TENSOR_BYTES, gpu_registry, 1);
            }
            CHILD_CHECK(weft_registry_publish(reg, v, NULL) == WEFT_OK);
            reply(out_fd, NULL, 0);
        } else if (cmd == 's') {
            weft_server_stats_t st;

            CHILD_CHECK(weft_server_get_stats(server, &st) == WEFT_OK);
            reply(out_fd, &st, sizeof(st));
        } else {
            CHILD_CHECK(cmd == 'q');
            break;
        }
    }
    free(current);
    fixture_server_stop(server, reg, name);
    reply(out_fd, NULL, 0);
}

/* ----------------------------------------------------------- consumer */

/* r(after): receive, answer the version and its wrong bytes; c: the
 * same without receiving (the views must still hold the version last
 * received); t(after): a receive that must time out (nothing newer: its
 * request stands); x: change
 * one byte of the first view (its engine wrote into it), y: of the
 * second; q: close. Each view's rows are `padded` apart in one buffer. */
static void consumer_main(uint16_t port, int padded, int cmd_fd, int out_fd)
{
    uint64_t                 pitch[TENSORS], at[TENSORS + 1] = {0};
    for (uint32_t t = 0; t < TENSORS; t++) {
        pitch[t] = cols_of(t) + (padded ? PAD : 0);
        at[t + 1] = at[t] + rows_of(t) * pitch[t];
    }
    const uint64_t           fused_bytes = at[TENSORS];
    uint8_t                 *fused = alloc_bytes(fused_bytes, device_views, 0xA5);
    uint8_t                 *seen = malloc(fused_bytes); /* the views' bytes, read back */
    uint8_t                 *expected = malloc(VERSION_BYTES);
    char                     names[TENSORS][WEFT_TENSOR_NAME_MAX], addr[64];
    weft_recv_view_t         views[TENSORS];
    weft_ucx_remote_params_t own = {.field_mask = WEFT_UCX_REMOTE_FIELD_LANES, .lanes = lanes};
    weft_remote_params_t     params = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT | (lanes ? WEFT_REMOTE_FIELD_TRANSPORT : 0),
                                       .transport = transport, .server = addr, .token = TOKEN,
                                       .name = padded ? "padded" : "contiguous", .timeout_us = progress_timeout_us(),
                                       .transport_params = &own};
    weft_remote_h            remote;
    uint64_t                 have = 0, arg;

    CHILD_CHECK(seen != NULL && expected != NULL);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    if (transport == WEFT_TRANSPORT_NCCL) {
        /* Before NCCL starts here: another host to NCCL, even on the
         * server's GPU (nccl_common.h, weft_nccl_host_id). */
        CHILD_CHECK(setenv("NCCL_HOSTID", "weft-test-delta-consumer", 1) == 0);
    }
    for (uint32_t k = 0; k < TENSORS; k++) {
        const uint32_t t = paired && wt_first ? k ^ 1 : k; /* view k is tensor t's */

        tensor_name(names[t], sizeof(names[t]), t);
        views[k] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_STRIDES, .name = names[t],
                                      .role = is_wt(t) ? WEFT_ROLE_WT : WEFT_ROLE_W,
                                      .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                      .shape = {rows_of(t), cols_of(t)}, .strides = {pitch[t], 1},
                                      .data = fused + at[t]};
        if (device_views) {
            views[k].field_mask |= WEFT_RECV_VIEW_FIELD_MEMORY;
            views[k].memory = WEFT_MEMORY_CUDA;
        }
    }
    CHILD_CHECK(weft_remote_connect(&params, views, TENSORS, &remote) == WEFT_OK);
    reply(out_fd, NULL, 0);
    for (;;) {
        char cmd = read_cmd(cmd_fd, &arg);

        if (cmd == 'r' || cmd == 'c') {
            uint64_t got = have, answer[2];

            if (cmd == 'r') {
                CHILD_CHECK(weft_remote_receive(remote, arg, WAIT_US, &got) == WEFT_OK && got > have);
                advance(expected, have, got);
                have = got;
            }
            answer[0] = got;
            answer[1] = 0;
            copy_bytes(seen, fused, fused_bytes, device_views, 0);
            for (uint32_t t = 0; t < TENSORS; t++) {
                for (uint64_t row = 0; row < rows_of(t); row++) {
                    for (uint64_t col = 0; col < pitch[t]; col++) {
                        uint8_t want = col < cols_of(t) ? expected[t * TENSOR_BYTES + row * cols_of(t) + col] : 0xA5;

                        answer[1] += seen[at[t] + row * pitch[t] + col] != want;
                    }
                }
            }
            reply(out_fd, answer, sizeof(answer));
        } else if (cmd == 't') {
            uint64_t got = 0;

            CHILD_CHECK(weft_remote_receive(remote, arg, 100000, &got) == WEFT_ERR_TIMEOUT);
            reply(out_fd, NULL, 0);
        } else if (cmd == 'x' || cmd == 'y') {
            const uint32_t t = cmd == 'x' ? 0 : 1;
            uint8_t       *p = fused + at[t] + rows_of(t) / 2 * pitch[t] + 7;
            uint8_t        byte;

            copy_bytes(&byte, p, 1, device_views, 0);
            byte ^= 0x40;
            copy_bytes(p, &byte, 1, device_views, 1);
            reply(out_fd, NULL, 0);
        } else {
            CHILD_CHECK(cmd == 'q');
            break;
        }
    }
    CHILD_CHECK(weft_remote_close(remote) == WEFT_OK);
    free_bytes(fused, device_views);
    free(seen);
    free(expected);
    reply(out_fd, NULL, 0);
}

/* ------------------------------------------------------------- driving */

static driven_t fork_driven(void)
{
    driven_t d;
    int      cmd[2], out[2];

    ck_assert_int_eq(pipe(cmd), 0);
    ck_assert_int_eq(pipe(out), 0);
    d.pid = fork();
    ck_assert_int_ge(d.pid, 0);
    if (d.pid == 0) {
        close(cmd[1]);
        close(out[0]);
        d.cmd = cmd[0];
        d.out = out[1];
        return d;
    }
    close(cmd[0]);
    close(out[1]);
    d.cmd = cmd[1];
    d.out = out[0];
    return d;
}

static driven_t start_server(uint16_t *port)
{
    driven_t s = fork_driven();

    if (s.pid == 0) {
        server_main(s.cmd, s.out);
        CHILD_EXIT();
    }
    read_all(s.out, port, sizeof(*port));
    return s;
}

static driven_t start_consumer(uint16_t port, int padded)
{
    driven_t c = fork_driven();

    if (c.pid == 0) {
        consumer_main(port, padded, c.cmd, c.out);
        CHILD_EXIT();
    }
    read_all(c.out, NULL, 0);
    return c;
}

static void publish(const driven_t *s)
{
    send_cmd(s->cmd, 'p', 0);
    read_all(s->out, NULL, 0);
}

static weft_server_stats_t stats(const driven_t *s)
{
    weft_server_stats_t st;

    send_cmd(s->cmd, 's', 0);
    read_all(s->out, &st, sizeof(st));
    return st;
}

/* The consumer receives a version after `after`: it must be `want`, every
 * byte right. */
static void receive(const driven_t *c, uint64_t after, uint64_t want)
{
    uint64_t answer[2];

    send_cmd(c->cmd, 'r', after);
    read_all(c->out, answer, sizeof(answer));
    ck_assert_uint_eq(answer[0], want);
    ck_assert_msg(answer[1] == 0, "version %llu: %llu wrong bytes in the views", (unsigned long long)want,
                  (unsigned long long)answer[1]);
}

/* The consumer's views still hold version `want`, every byte. */
static void check_views(const driven_t *c, uint64_t want)
{
    uint64_t answer[2];

    send_cmd(c->cmd, 'c', 0);
    read_all(c->out, answer, sizeof(answer));
    ck_assert_uint_eq(answer[0], want);
    ck_assert_msg(answer[1] == 0, "%llu bytes of the views are not version %llu's, which they should still hold",
                  (unsigned long long)answer[1], (unsigned long long)want);
}

static void stop(driven_t *d)
{
    send_cmd(d->cmd, 'q', 0);
    read_all(d->out, NULL, 0);
    ck_assert_int_eq(wait_child(d->pid), 0);
    close(d->cmd);
    close(d->out);
}

/* Versions first .. last published, each received by c right after. */
static void publish_and_receive(const driven_t *s, const driven_t *c, uint64_t first, uint64_t last)
{
    for (uint64_t v = first; v <= last; v++) {
        publish(s);
        receive(c, v - 1, v);
    }
}

/* The server's delta counters are these. A consumer reports a version
 * once it sent its ACK, which the server's thread may not have taken yet:
 * the counters (which only grow) are read again until they match, or
 * one of them went past, or 10 s passed. */
static void expect_deltas(const driven_t *s, uint64_t sent, uint64_t redone, uint64_t versions_sent)
{
    weft_server_stats_t st = stats(s);

    for (int tries = 0; tries < 1000; tries++) {
        if ((st.deltas_sent == sent && st.deltas_redone == redone && st.versions_sent == versions_sent) ||
            st.deltas_sent > sent || st.deltas_redone > redone || st.versions_sent > versions_sent) {
            break;
        }
        usleep(10000);
        st = stats(s);
    }

    ck_assert_msg(st.deltas_sent == sent && st.deltas_redone == redone && st.versions_sent == versions_sent,
                  "deltas sent %llu (want %llu), redone %llu (want %llu), versions sent %llu (want %llu)",
                  (unsigned long long)st.deltas_sent, (unsigned long long)sent,
                  (unsigned long long)st.deltas_redone, (unsigned long long)redone,
                  (unsigned long long)st.versions_sent, (unsigned long long)versions_sent);
}

/* --------------------------------------------------------------- tests */

static void consecutive_versions_go_as_small_deltas(void)
{
    driven_t            s, c;
    uint16_t            port;
    weft_server_stats_t st;

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    set_rates(5);
    rate_of[4] = ALL; /* a delta of it is no smaller: it goes whole */
    s = start_server(&port);
    c = start_consumer(port, 1);
    publish_and_receive(&s, &c, 1, 6);
    /* 2, 3, 5 and 6 as deltas; 1 (nothing held yet) and 4 whole. */
    expect_deltas(&s, 4, 0, 6);
    st = stats(&s);
    /* 0.5 % of the bytes changed, 3 bytes a change and a little more:
     * under 2 % of the four versions' bytes on the wire. */
    ck_assert_msg(st.delta_bytes < 4 * VERSION_BYTES / 50, "the deltas took %llu bytes of %llu",
                  (unsigned long long)st.delta_bytes, (unsigned long long)(4 * VERSION_BYTES));
    ck_assert_uint_gt(st.delta_bytes, 4 * VERSION_BYTES * 5 / 1000 * 3);
    stop(&c);
    stop(&s);
}

START_TEST(ucx_consecutive_versions_go_as_small_deltas)
{
    consecutive_versions_go_as_small_deltas();
}
END_TEST

static void missed_version_and_new_connection_come_whole(void)
{
    driven_t a, b, c, s;
    uint16_t port;

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    set_rates(5);
    s = start_server(&port);
    a = start_consumer(port, 1);
    b = start_consumer(port, 0); /* contiguous views */
    publish(&s);
    receive(&a, 0, 1);
    receive(&b, 0, 1);
    /* a does not ask for 2 or 3; b takes each, so the server's delta
     * moves on from 1 (a delta 1 → 3 would do for a, had it not). */
    publish(&s);
    receive(&b, 1, 2);
    publish(&s);
    receive(&b, 2, 3);
    expect_deltas(&s, 2, 0, 4);
    receive(&a, 1, 3); /* a holds 1, the server has 2 → 3 */
    expect_deltas(&s, 2, 0, 5);
    publish(&s);
    receive(&a, 3, 4);
    receive(&b, 3, 4);
    expect_deltas(&s, 4, 0, 7);
    /* A new connection holds nothing the server knows of. */
    stop(&b);
    c = start_consumer(port, 0);
    receive(&c, 0, 4);
    expect_deltas(&s, 4, 0, 8);
    publish(&s);
    receive(&c, 4, 5);
    receive(&a, 4, 5);
    expect_deltas(&s, 6, 0, 10);
    stop(&a);
    stop(&c);
    stop(&s);
}

/* A receive that timed out leaves its request standing: the server sends
 * the next version (deltas_sent of the versions after the first as
 * deltas), and the consumer's next receive (after an older version: a
 * request of its own) is sent before it reads that version's notice. The
 * server takes the new request while it waits for the ack, and the
 * consumer gets the version, every byte. That version answered the new
 * request too: the next one published is not put into the views until
 * the consumer asks. */
static void request_after_a_timed_out_one_stands(uint64_t deltas_sent)
{
    driven_t s, c;
    uint16_t port;

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    set_rates(5);
    s = start_server(&port);
    c = start_consumer(port, 1);
    publish_and_receive(&s, &c, 1, 1);
    send_cmd(c.cmd, 't', 1);
    read_all(c.out, NULL, 0);
    publish(&s);
    usleep(300000); /* its bytes land and the notice waits (if the server was slower, the case is as usual) */
    receive(&c, 0, 2);
    publish(&s);
    usleep(300000); /* had the server kept the request, version 3 would be in the views by now */
    check_views(&c, 2);
    receive(&c, 2, 3);
    expect_deltas(&s, deltas_sent, 0, 3);
    stop(&c);
    stop(&s);
}

START_TEST(ucx_request_after_a_timed_out_one_stands)
{
    request_after_a_timed_out_one_stands(2);
}
END_TEST

START_TEST(ucx_missed_version_and_new_connection_come_whole)
{
    missed_version_and_new_connection_come_whole();
}
END_TEST

static void delta_onto_changed_views_is_refused_and_comes_whole(void)
{
    driven_t s, c;
    uint16_t port;

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    set_rates(5);
    s = start_server(&port);
    c = start_consumer(port, 1);
    publish(&s);
    receive(&c, 0, 1);
    /* The engine wrote into a view: the delta of 2 applies to bytes that
     * are not version 1's, and the view's checksum tells. */
    send_cmd(c.cmd, 'x', 0);
    read_all(c.out, NULL, 0);
    publish(&s);
    receive(&c, 1, 2);
    expect_deltas(&s, 0, 1, 2);
    publish(&s);
    receive(&c, 2, 3);
    expect_deltas(&s, 1, 1, 3);
    /* Three in a row refused: from then on every version whole, even onto
     * views left alone. */
    for (uint64_t v = 4; v <= 6; v++) {
        send_cmd(c.cmd, 'x', 0);
        read_all(c.out, NULL, 0);
        publish(&s);
        receive(&c, v - 1, v);
    }
    expect_deltas(&s, 1, 4, 6);
    publish(&s);
    receive(&c, 6, 7);
    expect_deltas(&s, 1, 4, 7);
    stop(&c);
    stop(&s);
}

START_TEST(ucx_delta_onto_changed_views_is_refused_and_comes_whole)
{
    delta_onto_changed_views_is_refused_and_comes_whole();
}
END_TEST

/* Experts' W and WT: each WT patched by its W's delta, which crosses once
 * (about half the bytes of the deltas of every tensor); then a WT view
 * changed under the consumer: W's delta applies, WT's checksum tells,
 * and the version comes whole. */
static void wt_patched_by_w_delta(void)
{
    driven_t            s, c;
    uint16_t            port;
    weft_server_stats_t st;
    const uint64_t      own = 4 * VERSION_BYTES * 5 / 1000 * 3; /* every tensor's own deltas, 3 bytes a change */

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    set_rates(5);
    paired = 1;
    s = start_server(&port);
    c = start_consumer(port, 1);
    publish_and_receive(&s, &c, 1, 5);
    expect_deltas(&s, 4, 0, 5);
    st = stats(&s);
    ck_assert_msg(st.delta_bytes < own * 6 / 10 && st.delta_bytes > own * 4 / 10,
                  "the deltas took %llu bytes; every tensor's own would take about %llu",
                  (unsigned long long)st.delta_bytes, (unsigned long long)own);
    send_cmd(c.cmd, 'y', 0);
    read_all(c.out, NULL, 0);
    publish(&s);
    receive(&c, 5, 6);
    expect_deltas(&s, 4, 1, 6);
    publish(&s);
    receive(&c, 6, 7);
    expect_deltas(&s, 5, 1, 7);
    stop(&c);
    stop(&s);
}

START_TEST(ucx_wt_patched_by_w_delta)
{
    wt_patched_by_w_delta();
}
END_TEST

/* The same with each WT view declared before its W view: W's delta still
 * crosses once, for both. */
START_TEST(ucx_wt_view_before_its_w_view)
{
    wt_first = 1;
    wt_patched_by_w_delta();
}
END_TEST

/* A producer whose WT is not its W's transpose: version 2's WT views do
 * not check out after W's delta, the consumer says so in its REDO, the
 * version comes whole, and from then on each WT goes as its own delta
 * (about as many bytes as every tensor's own). */
static void wt_not_transposed_goes_as_its_own_delta(void)
{
    driven_t            s, c;
    uint16_t            port;
    weft_server_stats_t st;
    uint64_t            before;
    const uint64_t      own = 2 * VERSION_BYTES * 5 / 1000 * 3; /* two versions' deltas of every tensor */

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    set_rates(5);
    paired = wt_own_bytes = 1;
    s = start_server(&port);
    c = start_consumer(port, 0);
    publish_and_receive(&s, &c, 1, 2);
    expect_deltas(&s, 0, 1, 2);
    before = stats(&s).delta_bytes;
    publish_and_receive(&s, &c, 3, 4);
    expect_deltas(&s, 2, 1, 4);
    st = stats(&s);
    ck_assert_msg(st.delta_bytes - before > own * 9 / 10, "versions 3 and 4 took %llu delta bytes, want about %llu",
                  (unsigned long long)(st.delta_bytes - before), (unsigned long long)own);
    stop(&c);
    stop(&s);
}

START_TEST(ucx_wt_not_transposed_goes_as_its_own_delta)
{
    wt_not_transposed_goes_as_its_own_delta();
}
END_TEST

#ifdef HAVE_CUDA
START_TEST(gpu_registry_wt_patched_into_device_views)
{
    gpu_registry = device_views = 1;
    wt_patched_by_w_delta();
}
END_TEST

START_TEST(gpu_registry_wt_view_before_its_w_view_into_device_views)
{
    gpu_registry = device_views = wt_first = 1;
    wt_patched_by_w_delta();
}
END_TEST

START_TEST(gpu_registry_wt_not_transposed_into_device_views)
{
    gpu_registry = device_views = 1;
    wt_not_transposed_goes_as_its_own_delta();
}
END_TEST

START_TEST(gpu_registry_deltas_into_device_views)
{
    gpu_registry = device_views = 1;
    consecutive_versions_go_as_small_deltas();
}
END_TEST

START_TEST(gpu_registry_missed_version_into_host_views)
{
    gpu_registry = 1;
    missed_version_and_new_connection_come_whole();
}
END_TEST

START_TEST(host_registry_delta_onto_changed_device_views)
{
    device_views = 1;
    delta_onto_changed_views_is_refused_and_comes_whole();
}
END_TEST

/* nccl: a GPU registry into device views. */
static void over_nccl(void)
{
    transport = WEFT_TRANSPORT_NCCL;
    gpu_registry = device_views = 1;
}

START_TEST(nccl_consecutive_versions_go_as_small_deltas)
{
    over_nccl();
    consecutive_versions_go_as_small_deltas();
}
END_TEST

START_TEST(nccl_delta_onto_changed_views_is_refused_and_comes_whole)
{
    over_nccl();
    delta_onto_changed_views_is_refused_and_comes_whole();
}
END_TEST

START_TEST(nccl_wt_patched_by_w_delta)
{
    over_nccl();
    wt_patched_by_w_delta();
}
END_TEST

START_TEST(nccl_wt_view_before_its_w_view)
{
    over_nccl();
    wt_first = 1;
    wt_patched_by_w_delta();
}
END_TEST

START_TEST(nccl_wt_not_transposed_goes_as_its_own_delta)
{
    over_nccl();
    wt_not_transposed_goes_as_its_own_delta();
}
END_TEST

/* A new connection holds nothing the server knows of: its first version
 * whole, then deltas. */
START_TEST(nccl_new_connection_comes_whole)
{
    driven_t s, a, b;
    uint16_t port;

    over_nccl();
    set_rates(5);
    s = start_server(&port);
    a = start_consumer(port, 1);
    publish_and_receive(&s, &a, 1, 2);
    expect_deltas(&s, 1, 0, 2);
    stop(&a);
    b = start_consumer(port, 0);
    receive(&b, 0, 2);
    expect_deltas(&s, 1, 0, 3);
    publish_and_receive(&s, &b, 3, 4);
    expect_deltas(&s, 3, 0, 5);
    stop(&b);
    stop(&s);
}
END_TEST
#endif

/* The variable that makes this program register only the case it names,
 * run again by run_with with the environment that case needs. */
#define MODE_CASE "TEST_UCX_DELTA_CASE"

/* Runs case `name` in this program again, with WEFT_DELTA=mode and
 * WEFT_DELTA_INBOX=inbox (NULL: unset); it must pass. */
static void run_with(const char *name, const char *mode, const char *inbox)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setenv(MODE_CASE, name, 1);
        setenv("CK_RUN_CASE", name, 1);
        setenv("WEFT_DELTA", mode, 1);
        if (inbox != NULL) {
            setenv("WEFT_DELTA_INBOX", inbox, 1);
        } else {
            unsetenv("WEFT_DELTA_INBOX");
        }
        execl("/proc/self/exe", "test_ucx_delta", (char *)NULL);
        fprintf(stderr, "test_ucx_delta: cannot run itself again: %s\n", strerror(errno));
        _exit(CHILD_FAILED);
    }
    ck_assert_msg(wait_child(pid) == 0, "case %s with WEFT_DELTA=%s failed (its lines are above)", name, mode);
}

START_TEST(ucx_deltas_off)
{
    run_with("with_deltas_off", "off", NULL);
}
END_TEST

START_TEST(ucx_deltas_forced_on_lanes_over_shared_memory)
{
    run_with("with_deltas_forced_on_lanes", "force", "4M"); /* a whole version fits the inbox */
}
END_TEST

#ifdef HAVE_CUDA
START_TEST(gpu_deltas_forced_every_tensor_whole)
{
    run_with("with_deltas_forced_gpu", "force", "4M");
}
END_TEST

START_TEST(nccl_deltas_forced_every_tensor_whole)
{
    run_with("with_deltas_forced_nccl", "force", "4M");
}
END_TEST
#endif

/* Registered only when run_with runs it: WEFT_DELTA=off. */
START_TEST(with_deltas_off)
{
    driven_t s, c;
    uint16_t port;

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    set_rates(5);
    s = start_server(&port);
    c = start_consumer(port, 1);
    publish_and_receive(&s, &c, 1, 3);
    expect_deltas(&s, 0, 0, 3);
    stop(&c);
    stop(&s);
}
END_TEST

/* Registered only when run_with runs it: WEFT_DELTA=force, an inbox a
 * whole version fits in. */
/* WEFT_DELTA=force over `tls`: versions 2 to 4 as deltas, 2 (every byte
 * changed) as a delta of every tensor whole in the inbox. */
static void forced_deltas(const char *tls)
{
    driven_t s, c;
    uint16_t port;

    ck_assert_int_eq(setenv("UCX_TLS", tls, 1), 0);
    set_rates(5);
    rate_of[2] = ALL;
    s = start_server(&port);
    c = start_consumer(port, 1);
    publish_and_receive(&s, &c, 1, 4);
    expect_deltas(&s, 3, 0, 4);
    stop(&c);
    stop(&s);
}

START_TEST(with_deltas_forced_on_lanes)
{
    lanes = 2;
    forced_deltas("sm,self");
}
END_TEST

#ifdef HAVE_CUDA
/* Registered only when run_with runs it: WEFT_DELTA=force, a GPU registry
 * into device views; a version whose every byte changed goes as a delta
 * of tensors whole (from the registry's slots into the inbox, from there
 * into the views on the GPU). */
START_TEST(with_deltas_forced_gpu)
{
    gpu_registry = device_views = 1;
    forced_deltas("tcp,self");
}
END_TEST

/* The same over nccl. */
START_TEST(with_deltas_forced_nccl)
{
    over_nccl();
    forced_deltas("tcp,self");
}
END_TEST

/* cuda_ipc: a GPU registry into device views (the push mode: another
 * process on the same GPU). */
static void over_cuda_ipc(void)
{
    transport = WEFT_TRANSPORT_CUDA_IPC;
    gpu_registry = device_views = 1;
}

/* On one GPU a copy of the version beats an encode and an apply:
 * WEFT_DELTA=auto sends every version whole. */
START_TEST(cuda_ipc_same_gpu_gets_every_version_whole)
{
    driven_t s, c;
    uint16_t port;

    over_cuda_ipc();
    set_rates(5);
    s = start_server(&port);
    c = start_consumer(port, 1);
    publish_and_receive(&s, &c, 1, 3);
    expect_deltas(&s, 0, 0, 3);
    stop(&c);
    stop(&s);
}
END_TEST

START_TEST(cuda_ipc_request_after_a_timed_out_one_stands)
{
    over_cuda_ipc();
    request_after_a_timed_out_one_stands(0);
}
END_TEST

/* Registered only when run_with runs them: WEFT_DELTA=force, so that
 * one GPU sends deltas. */
START_TEST(with_cuda_ipc_every_tensor_whole)
{
    over_cuda_ipc();
    forced_deltas("tcp,self");
}
END_TEST

START_TEST(with_cuda_ipc_missed_version_and_new_connection)
{
    over_cuda_ipc();
    missed_version_and_new_connection_come_whole();
}
END_TEST

START_TEST(with_cuda_ipc_changed_views_refused)
{
    over_cuda_ipc();
    delta_onto_changed_views_is_refused_and_comes_whole();
}
END_TEST

START_TEST(with_cuda_ipc_wt_patched_by_w_delta)
{
    over_cuda_ipc();
    wt_patched_by_w_delta();
}
END_TEST

START_TEST(with_cuda_ipc_wt_view_before_its_w_view)
{
    over_cuda_ipc();
    wt_first = 1;
    wt_patched_by_w_delta();
}
END_TEST

START_TEST(with_cuda_ipc_wt_not_transposed)
{
    over_cuda_ipc();
    wt_not_transposed_goes_as_its_own_delta();
}
END_TEST

/* Each of the above, run again with WEFT_DELTA=force and an inbox a whole
 * version fits in. */
#define CUDA_IPC_FORCED(name)                                     \
    START_TEST(cuda_ipc_forced_##name)                            \
    {                                                             \
        run_with("with_cuda_ipc_" #name, "force", "4M");          \
    }                                                             \
    END_TEST
CUDA_IPC_FORCED(every_tensor_whole)
CUDA_IPC_FORCED(missed_version_and_new_connection)
CUDA_IPC_FORCED(changed_views_refused)
CUDA_IPC_FORCED(wt_patched_by_w_delta)
CUDA_IPC_FORCED(wt_view_before_its_w_view)
CUDA_IPC_FORCED(wt_not_transposed)
#undef CUDA_IPC_FORCED
#endif

static Suite *ucx_delta_suite(void)
{
    Suite              *s;
    TCase              *tc;
    weft_backend_info_t info;

    if (weft_backend_query(WEFT_BACKEND_UCX, &info) != WEFT_OK || !info.compiled) {
        printf("test_ucx_delta: libweft was built without UCX\n");
        return NULL;
    }
    const char         *mode_case = getenv(MODE_CASE);

    s = suite_create("ucx_delta");
#define ADD(test)                                  \
    do {                                           \
        tc = tcase_create(#test);                  \
        tcase_set_tags(tc, #test);                 \
        tcase_set_timeout(tc, 120);                \
        tcase_add_test(tc, test);                  \
        suite_add_tcase(s, tc);                    \
    } while (0)
#define ADD_IF_NAMED(test)                     \
    if (strcmp(mode_case, #test) == 0) {       \
        ADD(test);                             \
        return s;                              \
    }
    if (mode_case != NULL) {
        ADD_IF_NAMED(with_deltas_off);
#ifdef HAVE_CUDA
        ADD_IF_NAMED(with_deltas_forced_gpu);
        ADD_IF_NAMED(with_deltas_forced_nccl);
        ADD_IF_NAMED(with_cuda_ipc_every_tensor_whole);
        ADD_IF_NAMED(with_cuda_ipc_missed_version_and_new_connection);
        ADD_IF_NAMED(with_cuda_ipc_changed_views_refused);
        ADD_IF_NAMED(with_cuda_ipc_wt_patched_by_w_delta);
        ADD_IF_NAMED(with_cuda_ipc_wt_view_before_its_w_view);
        ADD_IF_NAMED(with_cuda_ipc_wt_not_transposed);
#endif
        ADD(with_deltas_forced_on_lanes);
        return s;
    }
#undef ADD_IF_NAMED
    ADD(ucx_consecutive_versions_go_as_small_deltas);
    ADD(ucx_missed_version_and_new_connection_come_whole);
    ADD(ucx_request_after_a_timed_out_one_stands);
    ADD(ucx_delta_onto_changed_views_is_refused_and_comes_whole);
    ADD(ucx_wt_patched_by_w_delta);
    ADD(ucx_wt_view_before_its_w_view);
    ADD(ucx_wt_not_transposed_goes_as_its_own_delta);
    ADD(ucx_deltas_off);
    ADD(ucx_deltas_forced_on_lanes_over_shared_memory);
#ifdef HAVE_CUDA
    if (weft_test_gpu_count() > 0) {
        ADD(gpu_registry_deltas_into_device_views);
        ADD(gpu_registry_wt_patched_into_device_views);
        ADD(gpu_registry_wt_view_before_its_w_view_into_device_views);
        ADD(gpu_registry_wt_not_transposed_into_device_views);
        ADD(gpu_registry_missed_version_into_host_views);
        ADD(host_registry_delta_onto_changed_device_views);
        ADD(gpu_deltas_forced_every_tensor_whole);
        ADD(cuda_ipc_same_gpu_gets_every_version_whole);
        ADD(cuda_ipc_request_after_a_timed_out_one_stands);
        ADD(cuda_ipc_forced_every_tensor_whole);
        ADD(cuda_ipc_forced_missed_version_and_new_connection);
        ADD(cuda_ipc_forced_changed_views_refused);
        ADD(cuda_ipc_forced_wt_patched_by_w_delta);
        ADD(cuda_ipc_forced_wt_view_before_its_w_view);
        ADD(cuda_ipc_forced_wt_not_transposed);
        if (weft_backend_query(WEFT_BACKEND_NCCL, &info) == WEFT_OK && info.compiled) {
            /* Bootstrap and socket traffic on loopback, unless told otherwise. */
            setenv("NCCL_SOCKET_IFNAME", "lo", 0);
            ADD(nccl_consecutive_versions_go_as_small_deltas);
            ADD(nccl_delta_onto_changed_views_is_refused_and_comes_whole);
            ADD(nccl_wt_patched_by_w_delta);
            ADD(nccl_wt_view_before_its_w_view);
            ADD(nccl_wt_not_transposed_goes_as_its_own_delta);
            ADD(nccl_new_connection_comes_whole);
            ADD(nccl_deltas_forced_every_tensor_whole);
        } else {
            printf("test_ucx_delta: libweft was built without NCCL: the nccl cases are left out\n");
        }
    } else {
        printf("test_ucx_delta: no GPU: the GPU registry and device view cases are left out\n");
    }
#endif
#undef ADD
    return s;
}

WEFT_TEST_MAIN(ucx_delta_suite)
