/*
 * weft-perf ucx's processes: a child run on one side of a transport (its
 * network namespace and UCX settings), the notes on those that failed,
 * and the tcp-netns transport's namespaces, made and removed with ip.
 */
#include "config.h"

#include "lib/sysinfo.h"
#include "ucx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ children */

static void child_env(const ucx_transport_t *tr, const ucx_side_t *side)
{
    setenv("UCX_TLS", tr->tls, 1);
    setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
    if (side->dev != NULL) {
        setenv("UCX_NET_DEVICES", side->dev, 1);
    } else {
        unsetenv("UCX_NET_DEVICES");
    }
}

/* In the child: runs argv, under `ip netns exec` when ns is set. */
static void child_exec(const char *ns, char *const argv[])
{
    char *wrapped[64] = {"ip", "netns", "exec", (char *)ns};
    int   n = 4;

    if (ns == NULL) {
        execvp(argv[0], argv);
    } else {
        for (int i = 0; argv[i] != NULL && n < 63; i++) {
            wrapped[n++] = argv[i];
        }
        wrapped[n] = NULL;
        execvp("ip", wrapped);
    }
    fprintf(stderr, "weft-perf ucx: cannot run %s: %s\n", ns == NULL ? argv[0] : "ip", strerror(errno));
}

/* Where a child runs: side `side` of tr. */
typedef struct ucx_where {
    const ucx_transport_t *tr;
    int                    side;
} ucx_where_t;

/* In the child: UCX's settings of its side, then argv in its namespace. */
static void side_exec(const void *arg, char *const argv[])
{
    const ucx_where_t *where = arg;

    child_env(where->tr, &where->tr->side[where->side]);
    child_exec(where->tr->side[where->side].ns, argv);
}

/* Starts argv on side `side` of tr (tr NULL: here, environment as is). */
int ucx_proc_start(ucx_ctx_t *ctx, perf_run_t *p, const char *what, const ucx_transport_t *tr, int side,
                   char *const argv[], int merge_stderr)
{
    const ucx_where_t where = {.tr = tr, .side = side};

    return perf_run_start(&ctx->runner, p, what, argv, merge_stderr, tr != NULL ? side_exec : NULL, &where);
}

void ucx_add_note(char *note, size_t size, const char *fmt, ...)
{
    size_t  used = strlen(note);
    va_list ap;

    if (used + 2 >= size) {
        return;
    }
    if (used > 0) {
        snprintf(note + used, size - used, "; ");
        used += 2;
    }
    va_start(ap, fmt);
    vsnprintf(note + used, size - used, fmt, ap);
    va_end(ap);
}

/* A generous bound on a run moving `bytes` `versions` times. */
double ucx_time_limit_s(uint64_t bytes, uint64_t versions)
{
    return 120.0 + (double)versions * (2.0 + (double)bytes / SLOW_BYTES_S);
}

/* Notes why each failed proc failed, with its last line. */
void ucx_note_failures(const perf_run_t *procs, int n, char *note, size_t size)
{
    for (int i = 0; i < n; i++) {
        char how[160], last[200];

        if (!perf_run_failed(&procs[i]) && (procs[i].exited || procs[i].pid == 0)) {
            continue;
        }
        perf_run_describe(&procs[i], how, sizeof(how));
        last[0] = '\0';
        if (procs[i].merged) {
            perf_run_last_line(&procs[i], last, sizeof(last));
        }
        ucx_add_note(note, size, "%s%s%s", how, last[0] ? ": " : "", last);
    }
}

/* ------------------------------------------------------ ip and netns */

/* Runs `ip ARGS` (ARGS split at spaces) with a 10 s limit; out (may be
 * NULL) gets its output. 0 when it exited with 0. */
static int run_ip(ucx_ctx_t *ctx, char *out, size_t size, const char *fmt, ...)
{
    char       cmd[512], *argv[24] = {"ip"}, *save = NULL;
    int        argc = 1, rc;
    va_list    ap;
    perf_run_t p;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    for (char *tok = strtok_r(cmd, " ", &save); tok != NULL && argc < 23; tok = strtok_r(NULL, " ", &save)) {
        argv[argc++] = tok;
    }
    argv[argc] = NULL;
    if (ucx_proc_start(ctx, &p, "ip", NULL, 0, argv, 1) != 0) {
        return -1;
    }
    rc = perf_run_wait(&ctx->runner, &p, 1, NULL, perf_deadline_in_s(10), 1);
    if (out != NULL && size > 0) {
        size_t n = p.len < size - 1 ? p.len : size - 1;

        memcpy(out, p.out, n);
        out[n] = '\0';
    }
    return rc;
}

/* UCX takes only interfaces that are running: waits for the carrier. */
static int wait_carrier(ucx_ctx_t *ctx, const char *ns, const char *dev)
{
    char out[2048];

    for (int i = 0; i < 100 && !perf_run_interrupted(&ctx->runner); i++) {
        if (run_ip(ctx, out, sizeof(out), "-n %s link show %s", ns, dev) == 0 && strstr(out, "LOWER_UP") != NULL) {
            return 0;
        }
        perf_sleep_us(50000);
    }
    return -1;
}

void ucx_netns_teardown(ucx_ctx_t *ctx)
{
    ctx->runner.cleaning = 1;
    for (int i = 0; i < 2; i++) {
        if (ctx->ns[i][0] != '\0' && run_ip(ctx, NULL, 0, "netns del %s", ctx->ns[i]) != 0) {
            fprintf(stderr, "weft-perf ucx: could not delete network namespace %s\n", ctx->ns[i]);
        }
        ctx->ns[i][0] = '\0';
    }
    ctx->runner.cleaning = 0;
}

/* One command of the set-up; on failure, why gets its output. */
#define NETNS_STEP(...)                                                                                              \
    do {                                                                                                           \
        if (run_ip(ctx, out, sizeof(out), __VA_ARGS__) != 0) {                                                     \
            snprintf(why, size, "ip failed: %.200s", out);                                                         \
            return -1;                                                                                             \
        }                                                                                                          \
    } while (0)

/*
 * Two namespaces joined by a veth pair: A (the side that puts) 10.202.0.1
 * on weftpa0, B 10.202.0.2 on weftpb0. Fills tr; on failure why says why
 * and the caller tears down what was made.
 */
int ucx_netns_setup(ucx_ctx_t *ctx, ucx_transport_t *tr, char *why, size_t size)
{
    const char *a = ctx->ns[0], *b = ctx->ns[1];
    char        out[1024];

    if (geteuid() != 0) {
        snprintf(why, size, "needs root (network namespaces)");
        return -1;
    }
    snprintf(ctx->ns[0], sizeof(ctx->ns[0]), "weftPA%d", (int)getpid());
    if (run_ip(ctx, out, sizeof(out), "netns add %s", a) != 0) {
        ctx->ns[0][0] = '\0';
        snprintf(why, size, "cannot create network namespaces (is ip installed?): %.200s", out);
        return -1;
    }
    snprintf(ctx->ns[1], sizeof(ctx->ns[1]), "weftPB%d", (int)getpid());
    if (run_ip(ctx, out, sizeof(out), "netns add %s", b) != 0) {
        ctx->ns[1][0] = '\0';
        snprintf(why, size, "cannot create network namespaces: %.200s", out);
        return -1;
    }
    NETNS_STEP("link add weftpa0 netns %s type veth peer name weftpb0 netns %s", a, b);
    NETNS_STEP("-n %s addr add 10.202.0.1/24 dev weftpa0", a);
    NETNS_STEP("-n %s addr add 10.202.0.2/24 dev weftpb0", b);
    NETNS_STEP("-n %s link set lo up", a);
    NETNS_STEP("-n %s link set lo up", b);
    NETNS_STEP("-n %s link set weftpa0 up", a);
    NETNS_STEP("-n %s link set weftpb0 up", b);
    if (wait_carrier(ctx, a, "weftpa0") != 0 || wait_carrier(ctx, b, "weftpb0") != 0) {
        snprintf(why, size, "the veth pair has no carrier");
        return -1;
    }
    *tr = (ucx_transport_t){.name = "tcp-netns", .tls = "tcp",
                            .side = {{.ns = a, .dev = "weftpa0", .ip = "10.202.0.1"},
                                     {.ns = b, .dev = "weftpb0", .ip = "10.202.0.2"}}};
    return 0;
}
