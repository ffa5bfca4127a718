/*
 * The ucx transport across processes on this host: a server over a host
 * registry and remote consumers connected through 127.0.0.1, over UCX's
 * TCP transport and over its shared-memory transports. Exact bytes over
 * many versions (strided views, a version larger than the server's
 * window), the token (a wrong one is refused and nothing is registered),
 * views that do not match, a consumer killed mid-stream (the others go
 * on; a restarted one rejoins and gets the next version), a server killed
 * (the consumer gets an error in time and records nothing), views that
 * stay put between receive calls while newer versions are published;
 * the same into memory from weft_ucx_memory_alloc, which UCX's shared
 * memory writes into directly. Verified versions: a version whose bytes
 * changed after publish is refused by a consumer whose views hold their
 * tensors verbatim.
 * tests/ucx_netns.sh runs the same across network namespaces.
 */
#include "config.h"

#include "lib/child.h"
#include "lib/transport_fixture.h"
#include "lib/harness.h"
#include "perf/lib/payload.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#define TENSORS   24
#define ROWS      96
#define COLS      1000     /* bytes per row of a tensor */
#define PAD       24       /* the consumer's row padding */
#define TOKEN     "s3cret-token"
#define WAIT_US   30000000u

static void tensor_name(char *buf, size_t size, uint32_t t)
{
    snprintf(buf, size, "model.layers.%u.mlp.experts.%u.down_proj.weight", t / 8, t % 8);
}

/* ------------------------------------------------------------- server */

typedef struct server_side {
    char            name[64];
    weft_registry_h reg;
    weft_server_h   server;
    uint16_t        port;
} server_side_t;

/* The server's put lanes and the consumers' receive lanes (the params'
 * `lanes`): 0 leaves them to WEFT_UCX_LANES (auto: one on a small machine
 * such as CI's). The *_on_lanes tests set more, so that each version's
 * puts go over several lanes into several receiving threads. */
static uint32_t server_lanes, consumer_lanes;

static void server_start(server_side_t *s, uint64_t window)
{
    const weft_ucx_server_params_t own = {.field_mask = WEFT_UCX_SERVER_FIELD_LANES, .lanes = server_lanes};
    weft_server_params_t           params = {
        .field_mask   = WEFT_SERVER_FIELD_TIMEOUT | WEFT_SERVER_FIELD_WINDOW |
                        (server_lanes != 0 ? WEFT_SERVER_FIELD_TRANSPORT : 0),
        .transport    = WEFT_TRANSPORT_UCX,
        .listen       = "127.0.0.1:0",
        .token        = TOKEN,
        .timeout_us   = 5000000,
        .window_bytes = window,
        .transport_params = &own,
    };

    /* With checksums: every version's notice carries them (the padded
     * views here are not checked; verbatim ones are). */
    weft_registry_params_t rp = {.field_mask = WEFT_REGISTRY_FIELD_CHECKSUMS, .checksums = 1};

    snprintf(s->name, sizeof(s->name), "t-ucx-%d", (int)getpid());
    weft_registry_unlink(s->name);
    CHILD_CHECK(weft_registry_create(s->name, &rp, &s->reg) == WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        char               tname[WEFT_TENSOR_NAME_MAX];
        weft_tensor_desc_t d = {.name = tname, .layer = (int32_t)(t / 8), .expert = (int32_t)(t % 8),
                                .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                .shape = {ROWS, COLS}};

        tensor_name(tname, sizeof(tname), t);
        CHILD_CHECK(weft_registry_declare(s->reg, &d, NULL) == WEFT_OK);
    }
    CHILD_CHECK(weft_registry_seal(s->reg) == WEFT_OK);
    CHILD_CHECK(weft_server_create(s->reg, &params, &s->server) == WEFT_OK);
    CHILD_CHECK(weft_server_port(s->server, &s->port) == WEFT_OK && s->port != 0);
}

static void server_publish(server_side_t *s, uint64_t v)
{
    CHILD_CHECK(weft_registry_write_begin(s->reg, WAIT_US, NULL) == WEFT_OK);
    for (uint32_t t = 0; t < TENSORS; t++) {
        uint8_t *data;

        CHILD_CHECK(weft_registry_write_tensor(s->reg, t, (void **)&data) == WEFT_OK);
        payload_fill(data, (uint64_t)ROWS * COLS, v, t);
    }
    CHILD_CHECK(weft_registry_publish(s->reg, v, NULL) == WEFT_OK);
}

static void server_wait_ready(server_side_t *s, uint32_t consumers)
{
    fixture_wait_ready(s->server, consumers, 30);
}

static void server_stop(server_side_t *s)
{
    fixture_server_stop(s->server, s->reg, s->name);
}

/* ----------------------------------------------------------- consumer */

/* The consumers' views in memory from weft_ucx_memory_alloc (the
 * *_in_ucx_memory tests) instead of malloc's. */
static int consumer_ucx_memory;

typedef struct consumer_side {
    uint8_t         *fused; /* [TENSORS, ROWS, COLS + PAD] */
    weft_ucx_memory_h memory; /* where fused lies, or NULL: malloc'd */
    weft_remote_h    remote;
    weft_recv_view_t views[TENSORS];
    char             names[TENSORS][WEFT_TENSOR_NAME_MAX];
} consumer_side_t;

#define FUSED_BYTES ((uint64_t)TENSORS * ROWS * (COLS + PAD))

static weft_status_t consumer_connect(consumer_side_t *c, uint16_t port, const char *token,
                                      const char *name, uint64_t rows)
{
    char                     addr[64];
    weft_ucx_remote_params_t own = {.field_mask = consumer_lanes != 0 ? WEFT_UCX_REMOTE_FIELD_LANES : 0,
                                    .lanes = consumer_lanes};
    weft_remote_params_t params = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT | WEFT_REMOTE_FIELD_TRANSPORT,
                                   .transport_params = &own,
                                   .transport  = WEFT_TRANSPORT_UCX,
                                   .server     = addr,
                                   .token      = token,
                                   .name       = name,
                                   .timeout_us = 5000000};

    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    c->memory = NULL;
    if (consumer_ucx_memory) {
        void *base;

        /* The views a page into it: the memory is larger than they span. */
        CHILD_CHECK(weft_ucx_memory_alloc(FUSED_BYTES + 8192, &c->memory, &base) == WEFT_OK);
        c->fused = (uint8_t *)base + 4096;
        own.field_mask |= WEFT_UCX_REMOTE_FIELD_MEMORY;
        own.memory = c->memory;
    } else {
        c->fused = malloc(FUSED_BYTES);
    }
    CHILD_CHECK(c->fused != NULL);
    memset(c->fused, 0xA5, FUSED_BYTES);
    for (uint32_t t = 0; t < TENSORS; t++) {
        tensor_name(c->names[t], sizeof(c->names[t]), t);
        c->views[t] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_STRIDES,
                                         .name = c->names[t], .role = WEFT_ROLE_W,
                                         .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                         .shape = {rows, COLS}, .strides = {COLS + PAD, 1},
                                         .data = c->fused + (uint64_t)t * ROWS * (COLS + PAD)};
    }
    return weft_remote_connect(&params, c->views, TENSORS, &c->remote);
}

/* After weft_remote_close (or a failed connect). */
static void consumer_free(consumer_side_t *c)
{
    if (c->memory != NULL) {
        CHILD_CHECK(weft_ucx_memory_free(c->memory) == WEFT_OK);
    } else {
        free(c->fused);
    }
}

static uint64_t consumer_wrong(const consumer_side_t *c, uint64_t v)
{
    uint64_t wrong = 0;

    for (uint32_t t = 0; t < TENSORS; t++) {
        const uint8_t *base = c->fused + (uint64_t)t * ROWS * (COLS + PAD);

        for (uint64_t r = 0; r < ROWS; r++) {
            for (uint64_t col = 0; col < COLS + PAD; col++) {
                uint8_t want = col < COLS ? payload_byte(v, t, r * COLS + col) : 0xA5;
                wrong += base[r * (COLS + PAD) + col] != want;
            }
        }
    }
    return wrong;
}

/* Receives up to version `last`, checking every byte each time; writes
 * a byte to got_fd (unless -1) once it has the first. */
static void consumer_run(uint16_t port, const char *name, uint64_t last, int got_fd)
{
    consumer_side_t c;
    uint64_t        v = 0;

    CHILD_CHECK(consumer_connect(&c, port, TOKEN, name, ROWS) == WEFT_OK);
    /* UCX memory stays while a consumer uses it. */
    CHILD_CHECK(c.memory == NULL || weft_ucx_memory_free(c.memory) == WEFT_ERR_BUSY);
    while (v < last) {
        uint64_t got;

        CHILD_CHECK(weft_remote_receive(c.remote, v, WAIT_US, &got) == WEFT_OK);
        CHILD_CHECK(got > v);
        CHILD_CHECK(consumer_wrong(&c, got) == 0);
        CHILD_CHECK(v != 0 || got_fd < 0 || write(got_fd, "1", 1) == 1);
        v = got;
    }
    CHILD_CHECK(weft_remote_close(c.remote) == WEFT_OK);
    consumer_free(&c);
}

/* --------------------------------------------------------------- tests */

static int port_pipe[2];

/* In a forked server: started with a 64 MiB window, its port written to
 * port_pipe, back once `consumers` are ready. */
static void server_announce(server_side_t *s, uint32_t consumers)
{
    server_start(s, 64u << 20);
    CHILD_CHECK(write(port_pipe[1], &s->port, sizeof(s->port)) == sizeof(s->port));
    server_wait_ready(s, consumers);
}

static pid_t fork_server(uint32_t consumers, uint64_t versions, uint64_t window)
{
    pid_t pid;

    ck_assert_int_eq(pipe(port_pipe), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        server_side_t         s;
        weft_server_stats_t   st;

        server_start(&s, window);
        CHILD_CHECK(write(port_pipe[1], &s.port, sizeof(s.port)) == sizeof(s.port));
        server_wait_ready(&s, consumers);
        for (uint64_t v = 1; v <= versions; v++) {
            server_publish(&s, v);
            CHILD_CHECK(weft_registry_wait_consumers(s.reg, v, WAIT_US, NULL) == WEFT_OK);
        }
        CHILD_CHECK(weft_server_get_stats(s.server, &st) == WEFT_OK);
        if (st.versions_sent != versions * consumers || st.dropped != 0) {
            fprintf(stderr, "server: %llu versions sent to %u consumers, %llu dropped\n",
                    (unsigned long long)st.versions_sent, consumers, (unsigned long long)st.dropped);
        }
        CHILD_CHECK(st.versions_sent == versions * consumers && st.dropped == 0);
        server_stop(&s);
        CHILD_EXIT();
    }
    return pid;
}

static uint16_t read_port(void)
{
    uint16_t port = 0;

    ck_assert_int_eq(read(port_pipe[0], &port, sizeof(port)), (ssize_t)sizeof(port));
    return port;
}

static void run_versions(const char *tls, uint32_t consumers, uint64_t versions, uint64_t window)
{
    pid_t    server, pids[4];
    uint16_t port;

    ck_assert_int_eq(setenv("UCX_TLS", tls, 1), 0);
    server = fork_server(consumers, versions, window);
    port = read_port();
    for (uint32_t i = 0; i < consumers; i++) {
        pids[i] = fork();
        ck_assert_int_ge(pids[i], 0);
        if (pids[i] == 0) {
            char name[32];
            snprintf(name, sizeof(name), "rollout-%u", i);
            consumer_run(port, name, versions, -1);
            CHILD_EXIT();
        }
    }
    for (uint32_t i = 0; i < consumers; i++) {
        ck_assert_int_eq(wait_child(pids[i]), 0);
    }
    ck_assert_int_eq(wait_child(server), 0);
}

START_TEST(ucx_versions_exact_over_tcp)
{
    run_versions("tcp,self", 2, 12, 64u << 20);
}
END_TEST

START_TEST(ucx_versions_exact_over_shared_memory)
{
    run_versions("sm,self", 2, 12, 64u << 20);
}
END_TEST

/* Three put lanes, 2304 ranges of 1000 bytes: each lane puts every
 * third, into two receive lanes (the third put lane shares the first). */
START_TEST(ucx_versions_exact_on_lanes_over_tcp)
{
    server_lanes = 3;
    consumer_lanes = 2;
    run_versions("tcp,self", 2, 12, 64u << 20);
}
END_TEST

START_TEST(ucx_versions_exact_on_lanes_over_shared_memory)
{
    server_lanes = 3;
    consumer_lanes = 3;
    run_versions("sm,self", 2, 12, 64u << 20);
}
END_TEST

/* Views in memory from weft_ucx_memory_alloc: over shared memory UCX puts
 * straight into it; over TCP as into any memory. */
START_TEST(ucx_versions_exact_in_ucx_memory_over_shared_memory)
{
    consumer_ucx_memory = 1;
    run_versions("sm,self", 2, 12, 64u << 20);
}
END_TEST

START_TEST(ucx_versions_exact_in_ucx_memory_over_tcp)
{
    consumer_ucx_memory = 1;
    run_versions("tcp,self", 2, 12, 64u << 20);
}
END_TEST

START_TEST(ucx_versions_exact_in_ucx_memory_on_lanes)
{
    server_lanes = 3;
    consumer_lanes = 2;
    consumer_ucx_memory = 1;
    run_versions("sm,self", 2, 12, 64u << 20);
}
END_TEST

/* Between two weft_remote_receive calls the views do not change: a
 * version published meanwhile waits until the consumer asks. Over shared
 * memory, UCX 1.13 emulates puts into malloc'd views (they land as the
 * consumer's receive lanes, or its receiving thread, copy them in); into
 * UCX's memory the sender writes by itself (below). A second consumer,
 * always asking, is the witness: once it acknowledged v + 1, the server
 * thread has been through v + 1 for both (it starts a version for every
 * consumer in one pass); a server that sent it unasked would then hold a
 * lease of it for the idle one (deterministic), and had most likely put
 * some of it there (not guaranteed: its puts may still be in flight). */
#define STAY_PUT_VERSIONS 3

static void views_stay_put_between_receives(void)
{
    pid_t    server, engine, witness;
    uint16_t port;
    int      check[2];

    ck_assert_int_eq(setenv("UCX_TLS", "sm,self", 1), 0);
    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(check), 0);
    server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        server_side_t         s;
        weft_server_stats_t   st;
        weft_registry_stats_t rs;

        server_announce(&s, 2);
        server_publish(&s, 1);
        CHILD_CHECK(weft_registry_wait_consumers(s.reg, 1, WAIT_US, NULL) == WEFT_OK);
        for (uint64_t v = 1; v <= STAY_PUT_VERSIONS; v++) {
            /* The engine holds v and does not ask; the witness asks. */
            server_publish(&s, v + 1);
            /* The witness's ack of v + 1 is taken (its lease released
             * before last_version moves). */
            for (time_t until = time(NULL) + 30;;) {
                CHILD_CHECK(weft_server_get_stats(s.server, &st) == WEFT_OK);
                if (st.last_version > v) {
                    break;
                }
                CHILD_CHECK(time(NULL) < until);
                usleep(1000); /* polling the stats: no signal for them */
            }
            /* No lease of v + 1 for the consumer that did not ask. With
             * consumers that take deltas (not those in UCX's memory), one:
             * the server's delta base (server/delta_cache.h), the latest
             * version, which the producer cannot write into anyway. */
            const uint32_t base_leases = consumer_ucx_memory ? 0 : 1;

            CHILD_CHECK(weft_registry_get_stats(s.reg, &rs) == WEFT_OK);
            if (rs.leases_held != base_leases) {
                fprintf(stderr, "server: %u leases held after version %llu, not %u\n", rs.leases_held,
                        (unsigned long long)(v + 1), base_leases);
            }
            CHILD_CHECK(rs.leases_held == base_leases);
            CHILD_CHECK(write(check[1], "v", 1) == 1); /* the engine looks now */
            CHILD_CHECK(weft_registry_wait_consumers(s.reg, v + 1, WAIT_US, NULL) == WEFT_OK);
        }
        server_stop(&s);
        CHILD_EXIT();
    }
    port = read_port();
    witness = fork();
    ck_assert_int_ge(witness, 0);
    if (witness == 0) {
        consumer_run(port, "witness", STAY_PUT_VERSIONS + 1, -1);
        CHILD_EXIT();
    }
    engine = fork();
    ck_assert_int_ge(engine, 0);
    if (engine == 0) {
        consumer_side_t c;
        uint64_t        got = 0;

        CHILD_CHECK(consumer_connect(&c, port, TOKEN, "engine", ROWS) == WEFT_OK);
        CHILD_CHECK(weft_remote_receive(c.remote, 0, WAIT_US, &got) == WEFT_OK && got == 1);
        for (uint64_t v = 1; v <= STAY_PUT_VERSIONS; v++) {
            CHILD_CHECK(consumer_wrong(&c, v) == 0);
            /* v + 1 is published and the witness has it: not here yet. */
            CHILD_CHECK(read_byte(check[0], CHILD_SIGNAL_WAIT_S) == 'v');
            CHILD_CHECK(consumer_wrong(&c, v) == 0);
            CHILD_CHECK(weft_remote_receive(c.remote, v, WAIT_US, &got) == WEFT_OK && got == v + 1);
        }
        CHILD_CHECK(consumer_wrong(&c, got) == 0);
        CHILD_CHECK(weft_remote_close(c.remote) == WEFT_OK);
        consumer_free(&c);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(engine), 0);
    ck_assert_int_eq(wait_child(witness), 0);
    ck_assert_int_eq(wait_child(server), 0);
}

START_TEST(ucx_views_stay_put_between_receives)
{
    views_stay_put_between_receives();
}
END_TEST

/* Into UCX's memory the server's side writes by itself, with no progress
 * of the consumer's: only the protocol holds it back. */
START_TEST(ucx_views_stay_put_between_receives_in_ucx_memory)
{
    consumer_ucx_memory = 1;
    views_stay_put_between_receives();
}
END_TEST

/* A consumer that leaves while a version is being put into UCX's memory
 * (which the server's side writes by itself, and which stays mapped):
 * once weft_remote_close returned, the server is done with it (it holds
 * no lease: no put of it reads the slot) and nothing lands in the memory
 * any more. One 64 MiB tensor on four lanes, so that the puts outlast a
 * close that would not wait: without the wait the lease was still held
 * in every run. The consumer asks for a version once it is published and
 * leaves right after asking. That the close cut the version short with
 * puts under way is checked, not assumed: after the close the memory
 * holds some of the new version and some of the one before. Whether it
 * does is a race. On 2 CPUs, leaving at once, about one attempt in
 * three or four qualified (runs of 30 that did not were seen); the
 * others got the version whole (the lanes put all 64 MiB before the BYE
 * was read) or none of it (the BYE was read before any put landed);
 * waiting for the first bytes to land got it whole every time. So a
 * consumer that missed connects again and leaves during the next
 * version, a little sooner after a whole one, later after none, up to
 * LEAVE_ATTEMPTS times; with that, 5 attempts at most were needed in 22
 * runs, quiet and loaded. The delay only aims at the race. */
#define BIG_BYTES      (UINT64_C(64) << 20)
#define LEAVE_ATTEMPTS 50

static void big_publish(server_side_t *s, uint64_t v)
{
    uint8_t *data;

    CHILD_CHECK(weft_registry_write_begin(s->reg, WAIT_US, NULL) == WEFT_OK);
    CHILD_CHECK(weft_registry_write_tensor(s->reg, 0, (void **)&data) == WEFT_OK);
    memset(data, (int)v, BIG_BYTES);
    CHILD_CHECK(weft_registry_publish(s->reg, v, NULL) == WEFT_OK);
}

static void big_server(int left_fd, int go_fd)
{
    weft_tensor_desc_t    d = {.name = "big", .layer = -1, .expert = -1, .role = WEFT_ROLE_W,
                               .dtype = WEFT_DTYPE_UINT8, .ndim = 1, .shape = {BIG_BYTES}};
    /* The smallest window, one 1 MiB put per lane: what is in flight when
     * the consumer leaves ends, the rest is never put. */
    const weft_ucx_server_params_t own = {.field_mask = WEFT_UCX_SERVER_FIELD_LANES, .lanes = 4};
    weft_server_params_t  params = {.field_mask = WEFT_SERVER_FIELD_TIMEOUT | WEFT_SERVER_FIELD_TRANSPORT |
                                                  WEFT_SERVER_FIELD_WINDOW,
                                    .transport = WEFT_TRANSPORT_UCX, .listen = "127.0.0.1:0",
                                    .token = TOKEN, .timeout_us = 5000000, .transport_params = &own,
                                    .window_bytes = UINT64_C(4) << 20};
    server_side_t         s;
    weft_registry_stats_t rs;
    int                   result;

    snprintf(s.name, sizeof(s.name), "t-ucx-big-%d", (int)getpid());
    weft_registry_unlink(s.name);
    CHILD_CHECK(weft_registry_create(s.name, NULL, &s.reg) == WEFT_OK);
    CHILD_CHECK(weft_registry_declare(s.reg, &d, NULL) == WEFT_OK);
    CHILD_CHECK(weft_registry_seal(s.reg) == WEFT_OK);
    CHILD_CHECK(weft_server_create(s.reg, &params, &s.server) == WEFT_OK);
    CHILD_CHECK(weft_server_port(s.server, &s.port) == WEFT_OK);
    CHILD_CHECK(write(port_pipe[1], &s.port, sizeof(s.port)) == sizeof(s.port));
    server_wait_ready(&s, 1);
    big_publish(&s, 1);
    CHILD_CHECK(weft_registry_wait_consumers(s.reg, 1, WAIT_US, NULL) == WEFT_OK);
    for (uint64_t v = 2;; v++) {
        CHILD_CHECK(v <= 1 + LEAVE_ATTEMPTS);
        big_publish(&s, v);
        CHILD_CHECK(write(go_fd, "p", 1) == 1); /* there to ask for */
        /* The consumer's weft_remote_close returned: by then this server
         * is done with it, its puts and the lease they read from
         * included. */
        CHILD_CHECK(read_byte(left_fd, CHILD_SIGNAL_WAIT_S) == 'c');
        CHILD_CHECK(weft_registry_get_stats(s.reg, &rs) == WEFT_OK);
        if (rs.leases_held != 0) {
            fprintf(stderr, "server: %u leases held after the consumer's close returned\n",
                    rs.leases_held);
        }
        CHILD_CHECK(rs.leases_held == 0);
        result = read_byte(left_fd, CHILD_SIGNAL_WAIT_S);
        if (result == 'i') {
            break; /* it left mid-version */
        }
        /* It did not; it connected again and received v. */
        CHILD_CHECK(result == 'w' && read_byte(left_fd, CHILD_SIGNAL_WAIT_S) == 'r');
    }
    /* Once the server is gone nothing can land: what the consumer sees
     * then is all that landed after its close. */
    server_stop(&s);
    CHILD_CHECK(write(go_fd, "s", 1) == 1);
    CHILD_EXIT();
}

/* A sample of the memory: every 4 KiB page's first byte. */
static uint64_t big_sample(const uint8_t *at)
{
    uint64_t sum = 0;

    for (uint64_t i = 0; i < BIG_BYTES; i += 4096) {
        sum = sum * 31 + at[i];
    }
    return sum;
}

/* The 4 KiB pages whose first byte is `v`. */
static uint64_t big_pages_of(const uint8_t *at, uint64_t v)
{
    uint64_t n = 0;

    for (uint64_t i = 0; i < BIG_BYTES; i += 4096) {
        n += at[i] == (uint8_t)v;
    }
    return n;
}

START_TEST(ucx_nothing_lands_after_close_in_ucx_memory)
{
    pid_t    server, consumer;
    uint16_t port;
    int      left[2], go[2];

    ck_assert_int_eq(setenv("UCX_TLS", "sm,self", 1), 0);
    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(left), 0);
    ck_assert_int_eq(pipe(go), 0);
    server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        big_server(left[0], go[1]);
    }
    port = read_port();
    consumer = fork();
    ck_assert_int_ge(consumer, 0);
    if (consumer == 0) {
        char                 addr[64];
        weft_ucx_remote_params_t own = {.field_mask = WEFT_UCX_REMOTE_FIELD_MEMORY};
        weft_remote_params_t p = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT | WEFT_REMOTE_FIELD_TRANSPORT,
                                  .transport = WEFT_TRANSPORT_UCX, .server = addr, .token = TOKEN,
                                  .name = "leaving", .timeout_us = 5000000, .transport_params = &own};
        weft_recv_view_t     view = {.name = "big", .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_UINT8,
                                     .ndim = 1, .shape = {BIG_BYTES}};
        weft_remote_h        remote;
        volatile uint8_t    *at;
        void                *base;
        uint64_t             got = 0, sum, v;
        useconds_t           linger_us = 0;

        snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
        CHILD_CHECK(weft_ucx_memory_alloc(BIG_BYTES, &own.memory, &base) == WEFT_OK);
        at = base;
        view.data = base;
        CHILD_CHECK(weft_remote_connect(&p, &view, 1, &remote) == WEFT_OK);
        CHILD_CHECK(weft_remote_receive(remote, 0, WAIT_US, &got) == WEFT_OK && got == 1);
        for (v = got;; v = got) {
            CHILD_CHECK(at[0] == (uint8_t)v && at[BIG_BYTES - 1] == (uint8_t)v);
            /* Ask for v + 1 (the request stands after the call timed
             * out) and leave linger_us later. */
            CHILD_CHECK(read_byte(go[0], CHILD_SIGNAL_WAIT_S) == 'p');
            (void)weft_remote_receive(remote, v, 1, &got);
            if (linger_us > 0) {
                usleep(linger_us); /* aims at the race, whose outcome is checked below */
            }
            CHILD_CHECK(weft_remote_close(remote) == WEFT_OK);
            CHILD_CHECK(write(left[1], "c", 1) == 1);
            /* Every page holds v or v + 1. Some of each: its puts were
             * under way at the close, and the server, done with this
             * consumer, left the rest of v + 1 unwritten. */
            CHILD_CHECK(big_pages_of((const uint8_t *)base, v) +
                                big_pages_of((const uint8_t *)base, v + 1) ==
                            BIG_BYTES / 4096);
            if (big_pages_of((const uint8_t *)base, v) > 0 &&
                big_pages_of((const uint8_t *)base, v + 1) > 0) {
                break;
            }
            /* v + 1 came whole (no put was in flight at the close): leave
             * sooner; none of it had landed: later. Again. */
            if (big_pages_of((const uint8_t *)base, v) == 0) {
                linger_us /= 2;
            } else {
                linger_us = linger_us == 0 ? 100 : linger_us < 100000 ? linger_us * 2 : linger_us;
            }
            CHILD_CHECK(write(left[1], "w", 1) == 1);
            CHILD_CHECK(weft_remote_connect(&p, &view, 1, &remote) == WEFT_OK);
            CHILD_CHECK(weft_remote_receive(remote, 0, WAIT_US, &got) == WEFT_OK && got == v + 1);
            CHILD_CHECK(write(left[1], "r", 1) == 1);
        }
        CHILD_CHECK(write(left[1], "i", 1) == 1);
        sum = big_sample((const uint8_t *)base);
        CHILD_CHECK(read_byte(go[0], CHILD_SIGNAL_WAIT_S) == 's'); /* the server is gone */
        CHILD_CHECK(big_sample((const uint8_t *)base) == sum);
        CHILD_CHECK(weft_ucx_memory_free(own.memory) == WEFT_OK);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(consumer), 0);
    ck_assert_int_eq(wait_child(server), 0);
}
END_TEST

START_TEST(ucx_version_larger_than_the_window)
{
    /* 2.3 MB per version through a 4 MiB window of 4 MiB puts: at most
     * one put in flight at a time per consumer. */
    run_versions("tcp,self", 3, 6, 1);
}
END_TEST

START_TEST(ucx_version_larger_than_the_window_on_lanes)
{
    /* Sixteen lanes share that window (four 1 MiB puts): each still has
     * one put in flight. */
    server_lanes = 16;
    consumer_lanes = 4;
    run_versions("tcp,self", 3, 6, 1);
}
END_TEST

START_TEST(ucx_wrong_token_and_bad_views_are_refused)
{
    pid_t pid = fork();

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        server_side_t         s;
        consumer_side_t       c;
        weft_server_stats_t   st;
        weft_registry_stats_t rs;

        setenv("UCX_TLS", "tcp,self", 1);
        server_start(&s, 64u << 20);
        CHILD_CHECK(consumer_connect(&c, s.port, "not-the-token", "intruder", ROWS) ==
                    WEFT_ERR_AUTH);
        consumer_free(&c);
        /* A view whose shape differs from the registry's tensor. */
        CHILD_CHECK(consumer_connect(&c, s.port, TOKEN, "bad-shape", ROWS - 1) ==
                        WEFT_ERR_INVALID_PARAM);
        consumer_free(&c);
        CHILD_CHECK(weft_server_get_stats(s.server, &st) == WEFT_OK);
        CHILD_CHECK(st.refused == 2 && st.accepted == 0);
        /* Nothing was registered for either. */
        CHILD_CHECK(weft_registry_get_stats(s.reg, &rs) == WEFT_OK && rs.consumers == 0);
        server_stop(&s);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(pid), 0);
}
END_TEST

/* The versions after the victim's drop: the survivor's, the rejoined's. */
#define SURVIVED 100000u
#define REJOINED 100001u

static void consumer_killed_others_go_on_restarted_rejoins(const char *tls)
{
    pid_t    server, victim, survivor, rejoined;
    uint16_t port;
    int      go[2], streaming[2];

    ck_assert_int_eq(setenv("UCX_TLS", tls, 1), 0);
    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(streaming), 0);
    server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        server_side_t       s;
        weft_server_stats_t st;
        char                byte;
        uint64_t            v;

        server_start(&s, 1);
        CHILD_CHECK(write(port_pipe[1], &s.port, sizeof(s.port)) == sizeof(s.port));
        server_wait_ready(&s, 2);
        /* Versions until the victim, killed meanwhile, is dropped (however
         * fast this machine moves them): its record goes, the wait ends. */
        for (v = 1;; v++) {
            CHILD_CHECK(v < SURVIVED);
            server_publish(&s, v);
            CHILD_CHECK(weft_registry_wait_consumers(s.reg, v, WAIT_US, NULL) == WEFT_OK);
            CHILD_CHECK(weft_server_get_stats(s.server, &st) == WEFT_OK);
            if (st.dropped >= 1) {
                break;
            }
        }
        /* The survivor goes on. */
        server_publish(&s, SURVIVED);
        CHILD_CHECK(weft_registry_wait_consumers(s.reg, SURVIVED, WAIT_US, NULL) == WEFT_OK);
        /* A consumer restarted after the crash joins and gets the next one. */
        CHILD_CHECK(read(go[0], &byte, 1) == 1);
        server_wait_ready(&s, 2);
        server_publish(&s, REJOINED);
        CHILD_CHECK(weft_registry_wait_consumers(s.reg, REJOINED, WAIT_US, NULL) == WEFT_OK);
        server_stop(&s);
        CHILD_EXIT();
    }
    port = read_port();
    victim = fork();
    ck_assert_int_ge(victim, 0);
    if (victim == 0) {
        consumer_run(port, "victim", UINT64_MAX, streaming[1]); /* never ends by itself */
        CHILD_EXIT();
    }
    survivor = fork();
    ck_assert_int_ge(survivor, 0);
    if (survivor == 0) {
        consumer_run(port, "survivor", REJOINED, -1);
        CHILD_EXIT();
    }
    /* Killed once it has a version: versions go on (the server publishes
     * the next as soon as both have one), so it dies between or, mostly,
     * in the middle of one; either way it must be dropped. */
    ck_assert_int_eq(read_byte(streaming[0], CHILD_SIGNAL_WAIT_S), '1');
    ck_assert_int_eq(kill(victim, SIGKILL), 0);
    ck_assert_int_eq(wait_child(victim), 128 + SIGKILL);
    rejoined = fork();
    ck_assert_int_ge(rejoined, 0);
    if (rejoined == 0) {
        consumer_side_t c;
        uint64_t        got = 0;

        CHILD_CHECK(consumer_connect(&c, port, TOKEN, "victim-restarted", ROWS) == WEFT_OK);
        CHILD_CHECK(write(go[1], "g", 1) == 1);
        /* As a restarted engine would: whatever is newer than what it has
         * (nothing), until the version published for it. */
        while (got < REJOINED) {
            uint64_t v;

            CHILD_CHECK(weft_remote_receive(c.remote, got, WAIT_US, &v) == WEFT_OK);
            CHILD_CHECK(v > got && consumer_wrong(&c, v) == 0);
            got = v;
        }
        weft_remote_close(c.remote);
        consumer_free(&c);
        CHILD_EXIT();
    }
    ck_assert_int_eq(wait_child(rejoined), 0);
    ck_assert_int_eq(wait_child(survivor), 0);
    ck_assert_int_eq(wait_child(server), 0);
}

START_TEST(ucx_consumer_killed_others_go_on_restarted_rejoins)
{
    consumer_killed_others_go_on_restarted_rejoins("tcp,self");
}
END_TEST

/* The victim dies with puts in flight on every lane: its lanes close, the
 * survivor's carry on. */
START_TEST(ucx_consumer_killed_on_lanes_others_go_on)
{
    server_lanes = 4;
    consumer_lanes = 2;
    consumer_killed_others_go_on_restarted_rejoins("tcp,self");
}
END_TEST

/* Over shared memory into UCX's memory, the server's lanes write into the
 * victim's memory themselves, and go on doing so after it died (the
 * mapping outlives it): UCX 1.13 reports no failure there, the bootstrap
 * connection does. */
START_TEST(ucx_consumer_killed_in_ucx_memory_others_go_on)
{
    server_lanes = 2;
    consumer_ucx_memory = 1;
    consumer_killed_others_go_on_restarted_rejoins("sm,self");
}
END_TEST

START_TEST(ucx_server_killed_consumer_gets_an_error_in_time)
{
    pid_t    server, consumer;
    uint16_t port;
    int      acked[2];

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(acked), 0);
    server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        server_side_t s;

        server_announce(&s, 1);
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
        uint64_t        got, t0;
        struct timespec ts;

        CHILD_CHECK(consumer_connect(&c, port, TOKEN, "orphan", ROWS) == WEFT_OK);
        CHILD_CHECK(weft_remote_receive(c.remote, 0, WAIT_US, &got) == WEFT_OK && got == 1);
        CHILD_CHECK(consumer_wrong(&c, 1) == 0);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (uint64_t)ts.tv_sec;
        /* The server dies while we wait: an error, well before the 30 s. */
        CHILD_CHECK(weft_remote_receive(c.remote, 1, WAIT_US, &got) == WEFT_ERR_CONNECTION);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        CHILD_CHECK((uint64_t)ts.tv_sec - t0 < 10);
        /* Nothing new in the views. */
        CHILD_CHECK(consumer_wrong(&c, 1) == 0);
        CHILD_CHECK(weft_remote_receive(c.remote, 1, 1000, &got) == WEFT_ERR_CONNECTION);
        weft_remote_close(c.remote);
        consumer_free(&c);
        CHILD_EXIT();
    }
    /* Killed once version 1 is acknowledged; the consumer then waits for
     * version 2 (or starts to, soon after). */
    ck_assert_int_eq(read_byte(acked[0], CHILD_SIGNAL_WAIT_S), 'a');
    ck_assert_int_eq(kill(server, SIGKILL), 0);
    ck_assert_int_eq(wait_child(server), 128 + SIGKILL);
    ck_assert_int_eq(wait_child(consumer), 0);
    {
        char name[64];
        snprintf(name, sizeof(name), "t-ucx-%d", (int)server);
        weft_registry_unlink(name);
    }
}
END_TEST

/*
 * The server SIGKILLed while its puts are in flight: it streams versions
 * as fast as the consumer asks, and dies at a different moment each
 * round (0.3 to 23 ms after the consumer's first version). Over TCP UCX
 * emulates each put with a message the target answers; the consumer
 * must come back with an error, and never end.
 */
START_TEST(ucx_server_killed_mid_put_consumer_survives)
{
    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    for (int round = 0; round < 8; round++) {
        pid_t    server, consumer;
        uint16_t port;
        int      got_first[2];

        ck_assert_int_eq(pipe(port_pipe), 0);
        ck_assert_int_eq(pipe(got_first), 0);
        server = fork();
        ck_assert_int_ge(server, 0);
        if (server == 0) {
            server_side_t s;

            server_announce(&s, 1);
            for (uint64_t v = 1;; v++) { /* killed in here */
                server_publish(&s, v);
                CHILD_CHECK(weft_registry_wait_consumers(s.reg, v, WAIT_US, NULL) == WEFT_OK);
            }
        }
        port = read_port();
        consumer = fork();
        ck_assert_int_ge(consumer, 0);
        if (consumer == 0) {
            consumer_side_t c;
            uint64_t        v = 0, got;
            weft_status_t   status;

            CHILD_CHECK(consumer_connect(&c, port, TOKEN, "orphan", ROWS) == WEFT_OK);
            while ((status = weft_remote_receive(c.remote, v, WAIT_US, &got)) == WEFT_OK) {
                CHILD_CHECK(got > v && consumer_wrong(&c, got) == 0);
                CHILD_CHECK(v != 0 || write(got_first[1], "1", 1) == 1);
                v = got;
            }
            /* (After a failure the views hold an unspecified mix.) */
            CHILD_CHECK(status == WEFT_ERR_CONNECTION || status == WEFT_ERR_TIMEOUT);
            weft_remote_close(c.remote);
            consumer_free(&c);
            CHILD_EXIT();
        }
        ck_assert_int_eq(read_byte(got_first[0], CHILD_SIGNAL_WAIT_S), '1');
        usleep(300 + (useconds_t)round * 3000);
        ck_assert_int_eq(kill(server, SIGKILL), 0);
        ck_assert_int_eq(wait_child(server), 128 + SIGKILL);
        ck_assert_int_eq(wait_child(consumer), 0);
        close(got_first[0]);
        close(got_first[1]);
        close(port_pipe[0]);
        close(port_pipe[1]);
        {
            char name[64];
            snprintf(name, sizeof(name), "t-ucx-%d", (int)server);
            weft_registry_unlink(name);
        }
    }
}
END_TEST

/*
 * Verified versions: a consumer whose views hold their tensors verbatim
 * checks each version against the server's checksums before it
 * acknowledges it. Version 1 checks out; version 2's bytes change in the
 * server's registry after its publish (as a fault in the server's memory
 * or a write into a published slot would), and the consumer's receive
 * fails with WEFT_ERR_CORRUPT instead of returning it. (WEFT_VERIFY=none
 * is tested in test_remote_check: this program's runner reads the
 * settings before it forks its tests.)
 */
START_TEST(ucx_consumer_refuses_a_version_that_fails_its_checksum)
{
    static uint8_t  views_mem[TENSORS][ROWS * COLS];
    weft_recv_view_t views[TENSORS];
    char            names[TENSORS][WEFT_TENSOR_NAME_MAX], addr[64];
    int             go[2], done[2];
    uint16_t        port;
    uint64_t        got = 0;
    weft_remote_h   remote;
    pid_t           server;

    ck_assert_int_eq(setenv("UCX_TLS", "tcp,self", 1), 0);
    ck_assert_int_eq(pipe(port_pipe), 0);
    ck_assert_int_eq(pipe(go), 0);
    ck_assert_int_eq(pipe(done), 0);
    server = fork();
    ck_assert_int_ge(server, 0);
    if (server == 0) {
        server_side_t s;
        uint8_t      *first = NULL;
        char          byte;

        server_start(&s, 1u << 20);
        CHILD_CHECK(write(port_pipe[1], &s.port, sizeof(s.port)) == sizeof(s.port));
        server_wait_ready(&s, 1);
        server_publish(&s, 1);
        CHILD_CHECK(weft_registry_wait_consumers(s.reg, 1, WAIT_US, NULL) == WEFT_OK);
        /* Version 2, then one byte of its tensor 0 changed in the slot. */
        CHILD_CHECK(weft_registry_write_begin(s.reg, WAIT_US, NULL) == WEFT_OK);
        for (uint32_t t = 0; t < TENSORS; t++) {
            uint8_t *data;
            CHILD_CHECK(weft_registry_write_tensor(s.reg, t, (void **)&data) == WEFT_OK);
            payload_fill(data, (uint64_t)ROWS * COLS, 2, t);
            first = t == 0 ? data : first;
        }
        CHILD_CHECK(weft_registry_publish(s.reg, 2, NULL) == WEFT_OK);
        first[1234] ^= 0x10;
        CHILD_CHECK(write(go[1], "c", 1) == 1);
        CHILD_CHECK(read(done[0], &byte, 1) == 1);
        server_stop(&s);
        CHILD_EXIT();
    }
    port = read_port();
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    for (uint32_t t = 0; t < TENSORS; t++) {
        tensor_name(names[t], sizeof(names[t]), t);
        views[t] = (weft_recv_view_t){.name = names[t], .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3,
                                      .ndim = 2, .shape = {ROWS, COLS}, .data = views_mem[t]};
    }
    {
        const weft_remote_params_t params = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT, .transport = WEFT_TRANSPORT_UCX,
                                             .server = addr, .token = TOKEN, .name = "checker",
                                             .timeout_us = 5000000};
        char                       byte;

        ck_assert_int_eq(weft_remote_connect(&params, views, TENSORS, &remote), WEFT_OK);
        ck_assert_int_eq(weft_remote_receive(remote, 0, WAIT_US, &got), WEFT_OK);
        ck_assert_uint_eq(got, 1);
        ck_assert_uint_eq(views_mem[0][1234], payload_byte(1, 0, 1234));
        ck_assert_int_eq(read(go[0], &byte, 1), 1);
        ck_assert_int_eq(weft_remote_receive(remote, 1, WAIT_US, &got), WEFT_ERR_CORRUPT);
        (void)weft_remote_close(remote);
    }
    ck_assert_int_eq(write(done[1], "d", 1), 1);
    ck_assert_int_eq(wait_child(server), 0);
}
END_TEST

START_TEST(ucx_bad_arguments)
{
    weft_server_params_t sp = {.transport = WEFT_TRANSPORT_UCX, .listen = "127.0.0.1:0",
                               .token = ""};
    weft_remote_params_t rp = {.transport = WEFT_TRANSPORT_UCX, .server = "127.0.0.1",
                               .token = TOKEN, .name = "x"};
    weft_recv_view_t     view = {.name = "x", .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_UINT8,
                                 .ndim = 1, .shape = {1}, .data = &view};
    weft_server_h        server;
    weft_ucx_server_params_t sown = {0};
    weft_backend_info_t      cuda;
    weft_ucx_remote_params_t rown = {0};
    weft_remote_h        remote;
    weft_registry_h      reg;
    weft_ucx_memory_h    memory;
    void                *base;
    weft_tensor_desc_t   d = {.name = "x", .layer = -1, .expert = -1, .role = WEFT_ROLE_W,
                              .dtype = WEFT_DTYPE_UINT8, .ndim = 1, .shape = {1}};
    char                 name[64];

    snprintf(name, sizeof(name), "t-ucx-args-%d", (int)getpid());
    weft_registry_unlink(name);
    ck_assert_int_eq(weft_registry_create(name, NULL, &reg), WEFT_OK);
    ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_ERR_INVALID_PARAM); /* empty token */
    sp.token = TOKEN;
    sp.listen = "127.0.0.1";
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_ERR_INVALID_PARAM); /* no port */
    sp.listen = "127.0.0.1:0";
    sp.field_mask = WEFT_SERVER_FIELD_TRANSPORT;
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_ERR_INVALID_PARAM); /* flagged, not given */
    sp.transport_params = &sown;
    sown.field_mask = WEFT_UCX_SERVER_FIELD_LANES;
    sown.lanes = 0;
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_ERR_INVALID_PARAM);
    sown.lanes = 17;
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_ERR_INVALID_PARAM);
    sown.field_mask = 1u << 31; /* a ucx field this build does not know */
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_ERR_INVALID_PARAM);
    sown.field_mask = WEFT_UCX_SERVER_FIELD_LANES;
    sown.lanes = 2;
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_OK);
    ck_assert_int_eq(weft_server_destroy(server), WEFT_OK);
    /* cuda_ipc takes no parameters of its own: refused (where it is built;
     * otherwise it is unsupported before anything is read). */
    ck_assert_int_eq(weft_backend_query(WEFT_BACKEND_CUDA, &cuda), WEFT_OK);
    sp.transport = WEFT_TRANSPORT_CUDA_IPC;
    ck_assert_int_eq(weft_server_create(reg, &sp, &server),
                     cuda.compiled ? WEFT_ERR_INVALID_PARAM : WEFT_ERR_UNSUPPORTED);
    sp.transport = WEFT_TRANSPORT_UCX;
    sp.field_mask = 1u << 31; /* a field this build does not know */
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_ERR_INVALID_PARAM);
    sp.field_mask = 0;
    sp.transport = WEFT_TRANSPORT_HOST;
    ck_assert_int_eq(weft_server_create(reg, &sp, &server), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_INVALID_PARAM); /* no port */
    rp.server = "127.0.0.1:1"; /* nobody listens there */
    rp.field_mask = WEFT_REMOTE_FIELD_TRANSPORT; /* flagged, not given */
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_INVALID_PARAM);
    rp.transport_params = &rown;
    rown.field_mask = WEFT_UCX_REMOTE_FIELD_LANES; /* lanes 0 or 17: refused before connecting */
    rown.lanes = 0;
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_INVALID_PARAM);
    rown.lanes = 17;
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_INVALID_PARAM);
    rown.field_mask = 1u << 31; /* a ucx field this build does not know */
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_INVALID_PARAM);
    rown.field_mask = 0;
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_CONNECTION);
    /* UCX memory: none given, a view outside it, a failed connect. */
    ck_assert_int_eq(weft_ucx_memory_alloc(0, &memory, &base), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_ucx_memory_alloc(4096, NULL, &base), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_ucx_memory_alloc(4096, &memory, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_ucx_memory_free(NULL), WEFT_OK);
    ck_assert_int_eq(weft_ucx_memory_alloc(4096, &memory, &base), WEFT_OK);
    ck_assert_ptr_nonnull(memory);
    ck_assert_ptr_nonnull(base);
    rown.field_mask = WEFT_UCX_REMOTE_FIELD_MEMORY;
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_INVALID_PARAM); /* NULL */
    rown.memory = memory;
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_INVALID_PARAM); /* outside */
    view.data = (uint8_t *)base + 4096; /* one past its end */
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_INVALID_PARAM);
    view.data = (uint8_t *)base + 4095; /* its last byte */
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 1, &remote), WEFT_ERR_CONNECTION);
    /* Nothing holds it after a failed connect. */
    ck_assert_int_eq(weft_ucx_memory_free(memory), WEFT_OK);
    view.data = &view;
    rp.field_mask = 0;
    ck_assert_int_eq(weft_remote_connect(&rp, &view, 0, &remote), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_plan_create(reg, WEFT_TRANSPORT_UCX, &view, 1, (weft_plan_h *)&remote),
                     WEFT_ERR_UNSUPPORTED);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
    weft_registry_unlink(name);
}
END_TEST

static Suite *transport_ucx_suite(void)
{
    Suite              *s;
    TCase              *tc;
    weft_backend_info_t info;

    if (weft_backend_query(WEFT_BACKEND_UCX, &info) != WEFT_OK || !info.compiled) {
        printf("test_transport_ucx: libweft was built without UCX\n");
        return NULL;
    }
    s = suite_create("transport_ucx");
    /* One case per test, tagged with its name: CK_RUN_CASE=<name> runs one
     * alone, CK_EXCLUDE_TAGS=<name> all but it. */
#define ADD(test)                                  \
    do {                                           \
        tc = tcase_create(#test);                  \
        tcase_set_tags(tc, #test);                 \
        tcase_set_timeout(tc, 120);                \
        tcase_add_test(tc, test);                  \
        suite_add_tcase(s, tc);                    \
    } while (0)
    ADD(ucx_versions_exact_over_tcp);
    ADD(ucx_versions_exact_over_shared_memory);
    ADD(ucx_versions_exact_on_lanes_over_tcp);
    ADD(ucx_versions_exact_on_lanes_over_shared_memory);
    ADD(ucx_version_larger_than_the_window);
    ADD(ucx_version_larger_than_the_window_on_lanes);
    ADD(ucx_versions_exact_in_ucx_memory_over_shared_memory);
    ADD(ucx_versions_exact_in_ucx_memory_over_tcp);
    ADD(ucx_versions_exact_in_ucx_memory_on_lanes);
    ADD(ucx_views_stay_put_between_receives);
    ADD(ucx_views_stay_put_between_receives_in_ucx_memory);
    ADD(ucx_nothing_lands_after_close_in_ucx_memory);
    ADD(ucx_wrong_token_and_bad_views_are_refused);
    ADD(ucx_consumer_killed_others_go_on_restarted_rejoins);
    ADD(ucx_consumer_killed_on_lanes_others_go_on);
    ADD(ucx_consumer_killed_in_ucx_memory_others_go_on);
    ADD(ucx_server_killed_consumer_gets_an_error_in_time);
    ADD(ucx_server_killed_mid_put_consumer_survives);
    ADD(ucx_bad_arguments);
    ADD(ucx_consumer_refuses_a_version_that_fails_its_checksum);
#undef ADD
    return s;
}

WEFT_TEST_MAIN(transport_ucx_suite)
