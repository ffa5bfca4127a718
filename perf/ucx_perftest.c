/*
 * weft-perf ucx's baseline: ucx_perftest -t ucp_put_bw moving as many
 * puts of the case's size over the same UCX transport, its server on the
 * receiving side, its client (which puts) on the weft server's side;
 * each run is one lib/baseline.h run, its two command lines the setup.
 */
#include "config.h"

#include "lib/baseline.h"
#include "lib/sysinfo.h"
#include "ucx.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* WEFT_UCX_ERR_MODE as weft's processes get it. */
const char *ucx_err_mode(void)
{
    const char *mode = getenv("WEFT_UCX_ERR_MODE");

    return mode != NULL ? mode : "peer";
}

/* WEFT_UCX_LANES as weft's server gets it. */
const char *ucx_lanes(void)
{
    const char *n = getenv("WEFT_UCX_LANES");

    return n != NULL ? n : "auto";
}

/* A TCP port free on this host now, for ucx_perftest's exchange. */
static unsigned free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t          len = sizeof(sa);
    int                fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    unsigned           port = 13337; /* ucx_perftest's own default */

    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
        port = ntohs(sa.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

/* Whether process pid (in its own network namespace) listens on port. */
static int listening(pid_t pid, unsigned port)
{
    static const char *const tables[] = {"tcp", "tcp6"};

    for (size_t i = 0; i < 2; i++) {
        char  path[64], line[512];
        FILE *f;
        int   found = 0;

        snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, tables[i]);
        f = fopen(path, "r");
        while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL) {
            unsigned lport, state;

            found = sscanf(line, " %*u: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x", &lport, &state) == 2 &&
                    lport == port && state == 0x0A; /* TCP_LISTEN */
        }
        if (f != NULL) {
            fclose(f);
        }
        if (found) {
            return 1;
        }
    }
    return 0;
}

/* Until the perftest server listens (or exits); 10 s at most. */
static void wait_listening(ucx_ctx_t *ctx, perf_run_t *p, unsigned port)
{
    uint64_t deadline = perf_deadline_in_s(10);

    while (!listening(p->pid, port) && !perf_run_done(p) && !perf_run_interrupted(&ctx->runner) &&
           perf_now_ns() < deadline) {
        perf_run_pump(&ctx->runner, p, 1, 10);
    }
}

/*
 * The client's put bandwidth from its "Final:" line: iterations, latency
 * (50th percentile, average, overall, usec), bandwidth (average, overall,
 * MB/s), message rate (average, overall). The overall bandwidth, over the
 * whole timed run, is taken. ucx_perftest's MB is 2^20 bytes (1 MiB of a
 * 1 MiB message in 42.976 us reads 23268.72 MB/s: 2^20 / 42.976e-6 /
 * 2^20), so GB/s (1e9) = MB/s × 1048576 / 1e9. NaN when absent.
 */
static double perftest_gbps(const perf_run_t *client)
{
    const char *s = perf_run_line(client, "Final:");
    double      f[6];

    if (s == NULL || sscanf(s, "%lf %lf %lf %lf %lf %lf", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5]) != 6 ||
        !(f[5] > 0)) {
        return NAN;
    }
    return f[5] * 1048576.0 / 1e9;
}

/* One ucx_perftest run: its size and counts, what it gave. */
typedef struct perftest_run {
    uint64_t bytes, iters, warmup;
    int      err_peer; /* -e: peer failure handling, as weft's endpoints */
    int      own_fail; /* the client failed by itself (not killed) */
} perftest_run_t;

/* perf_baseline_run's arg for ucx_perftest: where and how it runs. */
typedef struct perftest_arg {
    ucx_ctx_t             *ctx;
    const ucx_transport_t *tr;
    perftest_run_t        *run;
} perftest_arg_t;

/*
 * ucx_perftest puts as many messages of the case's size as weft does: n
 * × puts, where weft's versions are puts tensors each. Its ucp_put_bw
 * over UCX 1.13's tcp can run at tens of MB/s: past PERFTEST_MAX_BYTES in
 * all, its counts are cut (noted).
 */
static void perftest_counts(const ucx_options_t *o, uint64_t bytes, uint64_t puts, perftest_run_t *run)
{
    const uint64_t iters = o->iters * puts, warmup = o->warmup * puts;

    run->bytes = bytes;
    run->iters = iters;
    run->warmup = warmup;
    if (bytes * (iters + warmup) > PERFTEST_MAX_BYTES) {
        uint64_t n = PERFTEST_MAX_BYTES / bytes;

        run->iters = n < 2 ? 2 : n < iters ? n : iters;
        run->warmup = warmup < 1 ? warmup : 1;
    }
}

/*
 * Whether ucx_perftest was built with MPI (its help offers "-P <0|1>
 * disable/enable MPI mode"). Such a build (Debian 13's 1.18) starts in MPI
 * mode and, run without mpirun, refuses ("exactly 2 processes in p2p
 * case"); older ones (Debian 12's 1.13) have no -P and would refuse it.
 */
int ucx_perftest_has_mpi_mode(ucx_ctx_t *ctx)
{
    char *const argv[] = {ctx->perftest, "-h", NULL};
    perf_run_t  p;

    if (ucx_proc_start(ctx, &p, "ucx_perftest -h", NULL, 0, argv, 1) != 0) {
        return 0;
    }
    (void)perf_run_wait(&ctx->runner, &p, 1, NULL, perf_deadline_in_s(10), 1); /* -h's status does not matter */
    return strstr(p.out, "MPI mode") != NULL;
}

/* argv as one line, after `lead`, into buf. */
static void join_argv(char *buf, size_t size, const char *lead, char *const argv[])
{
    size_t used = (size_t)snprintf(buf, size, "%s", lead);

    for (int i = 0; argv[i] != NULL && used < size; i++) {
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i > 0 ? " " : "", argv[i]);
    }
}

/* Runs ucx_perftest's server on side 1, then its client on side 0; setup
 * gets both command lines. */
static int perftest_start(ucx_ctx_t *ctx, const ucx_transport_t *tr, const perftest_run_t *run, perf_run_t p[2],
                          char *setup, size_t size)
{
    const unsigned port = free_port();
    char           ps[16], sz[32], it[32], wu[32];
    /* The trailing "-P 0" only where perftest_mpi; a NULL ends argv before. */
    char *const    server[] = {ctx->perftest, "-p", ps, ctx->perftest_mpi ? "-P" : NULL, "0", NULL};
    /* The client's options end with "-e" and "-P 0" where they apply. */
    char          *client[16] = {ctx->perftest, (char *)tr->side[1].ip, "-p", ps, "-t", "ucp_put_bw", "-s", sz,
                                 "-n", it, "-w", wu};
    int            c = 12;

    if (run->err_peer) {
        client[c++] = "-e";
    }
    if (ctx->perftest_mpi) {
        client[c++] = "-P";
        client[c++] = "0";
    }
    client[c] = NULL;

    snprintf(ps, sizeof(ps), "%u", port);
    snprintf(sz, sizeof(sz), "%llu", (unsigned long long)run->bytes);
    snprintf(it, sizeof(it), "%llu", (unsigned long long)run->iters);
    snprintf(wu, sizeof(wu), "%llu", (unsigned long long)run->warmup);
    join_argv(setup, size, "server: ", server);
    join_argv(setup + strlen(setup), size - strlen(setup), "; client: ", client);
    if (ucx_proc_start(ctx, &p[1], "ucx_perftest server", tr, 1, server, 1) != 0) {
        return -1;
    }
    wait_listening(ctx, &p[1], port);
    if (ucx_proc_start(ctx, &p[0], "ucx_perftest client", tr, 0, client, 1) != 0) {
        perf_run_kill_all(&ctx->runner, p, 2);
        return -1;
    }
    return 0;
}

/* One ucx_perftest run (arg: a perftest_arg_t), its client's put
 * bandwidth; the note says why there is none. */
static int perftest_measure(void *arg, perf_baseline_result_t *res)
{
    perftest_arg_t *a = arg;
    perf_run_t      p[2]; /* the client, which puts, first */

    memset(p, 0, sizeof(p));
    a->run->own_fail = 0;
    if (perftest_start(a->ctx, a->tr, a->run, p, res->setup, sizeof(res->setup)) != 0) {
        return -1;
    }
    if (perf_run_wait(&a->ctx->runner, p, 2, NULL,
                      perf_deadline_in_s(ucx_time_limit_s(a->run->bytes, a->run->warmup + a->run->iters)), 1) == 0) {
        res->gbps = perftest_gbps(&p[0]);
    }
    if (isnan(res->gbps)) {
        ucx_note_failures(p, 2, res->note, sizeof(res->note));
        if (!perf_run_failed(&p[0])) {
            perf_baseline_note(res, "ucx_perftest at %llu bytes printed no Final line",
                               (unsigned long long)a->run->bytes);
        }
        a->run->own_fail = p[0].exited && !p[0].killed;
        return -1;
    }
    return 0;
}

static const perf_baseline_t perftest_baseline = {"ucx_perftest", perftest_measure};

/* One ucx_perftest run; its note, if any, added to `note`. */
static double perftest_once(ucx_ctx_t *ctx, const ucx_transport_t *tr, perftest_run_t *run, char *note, size_t size)
{
    perftest_arg_t         arg = {ctx, tr, run};
    perf_baseline_result_t res;

    (void)perf_baseline_run(&perftest_baseline, &arg, run->bytes, &res);
    if (res.note[0] != '\0') {
        ucx_add_note(note, size, "%s", res.note);
    }
    return res.gbps;
}

/*
 * ucx_perftest with the error handling of weft's endpoints (see the top):
 * -e where they handle peer failures, unless UCX cannot connect so (as
 * weft's connect then goes without, ucx_common.c).
 */
static void run_perftest_same(ucx_ctx_t *ctx, const ucx_transport_t *tr, const perftest_run_t *first,
                              double first_gbps, ucx_row_t *r)
{
    perftest_run_t same = *first;
    char           why[sizeof(r->note)] = "";
    double         gbps;

    r->perftest_same_gbps = first_gbps;
    if (strcmp(ucx_err_mode(), "peer") != 0) {
        snprintf(r->perftest_same, sizeof(r->perftest_same), "the first run (WEFT_UCX_ERR_MODE=none)");
        return;
    }
    same.err_peer = 1;
    gbps = perftest_once(ctx, tr, &same, why, sizeof(why));
    if (isnan(gbps) && strstr(why, "unreachable") != NULL) {
        snprintf(r->perftest_same, sizeof(r->perftest_same), "the first run (UCX cannot connect with -e here)");
        return;
    }
    r->perftest_same_gbps = gbps;
    snprintf(r->perftest_same, sizeof(r->perftest_same), "-e");
    if (why[0] != '\0') {
        ucx_add_note(r->note, sizeof(r->note), "ucx_perftest -e: %s", why);
    }
}

/*
 * ucx_perftest at the row's put size, as many puts as weft's. For the
 * expert version, one message of the whole version's bytes; should
 * ucx_perftest refuse it (fail on its own, not run out of time), smaller
 * ones, halving, noted. A failure is a note, not a failed row. Then
 * again set up as weft's puts, at the size that worked.
 */
void ucx_run_perftest(ucx_ctx_t *ctx, const ucx_transport_t *tr, ucx_row_t *r)
{
    perftest_run_t run = {.own_fail = 1};
    double         gbps = NAN;
    const uint64_t size = r->c.bytes != 0 ? r->c.bytes : r->bytes;
    const uint64_t puts = r->c.bytes != 0 ? r->c.tensors : 1;
    uint64_t       bytes = size;

    if (ctx->perftest[0] == '\0') {
        ucx_add_note(r->note, sizeof(r->note), "ucx_perftest: not found on PATH (Debian: ucx-utils)");
        return;
    }
    for (int i = 0; i < (r->c.bytes == 0 ? PERFTEST_TRYS : 1) && isnan(gbps) && run.own_fail &&
                    !perf_run_interrupted(&ctx->runner);
         i++, bytes /= 2) {
        perftest_counts(ctx->o, bytes, puts, &run);
        gbps = perftest_once(ctx, tr, &run, r->note, sizeof(r->note));
    }
    r->perftest_gbps = gbps;
    r->perftest_bytes = run.bytes;
    r->perftest_iters = run.iters;
    r->perftest_warmup = run.warmup;
    if (isnan(gbps)) {
        return;
    }
    if (!perf_run_interrupted(&ctx->runner)) {
        run_perftest_same(ctx, tr, &run, gbps, r);
    }
    if (run.bytes != size) {
        ucx_add_note(r->note, sizeof(r->note), "ucx_perftest measured at %llu-byte messages",
                 (unsigned long long)run.bytes);
    }
    if (run.iters != ctx->o->iters * puts || run.warmup != ctx->o->warmup * puts) {
        ucx_add_note(r->note, sizeof(r->note), "ucx_perftest ran -n %llu -w %llu (%llu GiB at most in all)",
                 (unsigned long long)run.iters, (unsigned long long)run.warmup,
                 (unsigned long long)(PERFTEST_MAX_BYTES >> 30));
    }
}
