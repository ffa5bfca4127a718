/*
 * weft-perf ucx's weft measurement: a case's tensors, the server and
 * consumer roles (this program run again with the hidden --role option),
 * and the run of both that gives a row its weft figures.
 */
#include "config.h"

#include "lib/fixtures.h"
#include "lib/gpu_buf.h"
#include "lib/payload.h"
#include "lib/sysinfo.h"
#include "ucx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft/registry.h>
#include <weft/transport.h>
#include <weft/ucx.h>

/* ----------------------------------------------------------- workloads */

static void add_tensor(ucx_workload_t *w, int32_t expert, weft_tensor_role_t role, weft_dtype_t dtype,
                       uint32_t ndim, uint64_t rows, uint64_t cols)
{
    ucx_tensor_t *t = &w->t[w->count++];

    t->expert = expert;
    t->role = role;
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->bytes = rows * (ndim == 2 ? cols : 1) * weft_dtype_size(dtype);
    t->offset = w->bytes;
    w->bytes += t->bytes;
}

/* A size case's tensors a version: version_bytes of them, at least one. */
uint64_t ucx_case_tensors(uint64_t case_bytes, uint64_t version_bytes)
{
    uint64_t k = case_bytes > 0 ? version_bytes / case_bytes : 1;

    return k < 1 ? 1 : k > MAX_TENSORS ? MAX_TENSORS : k;
}

/*
 * case_bytes > 0: `tensors` FP8 tensors of that many bytes, which the
 * consumer holds in the reverse order: the registry's arena has them side
 * by side, the views do not, so each is a put of its own. 0: the expert
 * version, declared kind by kind, each kind's experts side by side, so
 * that the consumer's buffer holds one fused tensor per kind.
 */
int ucx_workload_make(uint64_t case_bytes, uint64_t tensors, ucx_workload_t *w)
{
    memset(w, 0, sizeof(*w));
    w->t = calloc(case_bytes > 0 ? tensors : PERF_EXPERT_KINDS * PERF_QWEN3_EXPERTS, sizeof(*w->t));
    if (w->t == NULL) {
        fprintf(stderr, "weft-perf ucx: out of memory\n");
        return -1;
    }
    if (case_bytes > 0) {
        for (uint64_t i = 0; i < tensors; i++) {
            add_tensor(w, -1, WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, 1, case_bytes, 0);
            w->t[i].offset = (tensors - 1 - i) * case_bytes;
            snprintf(w->t[i].name, sizeof(w->t[i].name), "weft_perf.ucx.tensor_%llu.%llu",
                     (unsigned long long)case_bytes, (unsigned long long)i);
        }
        return 0;
    }
    for (uint32_t k = 0; k < PERF_EXPERT_KINDS; k++) {
        const perf_expert_kind_t *kd = &perf_qwen3_expert_kinds[k];

        for (int32_t e = 0; e < PERF_QWEN3_EXPERTS; e++) {
            add_tensor(w, e, kd->role, kd->dtype, 2, kd->rows, kd->cols);
            snprintf(w->t[w->count - 1].name, sizeof(w->t[0].name), "model.layers.0.mlp.experts.%d.%s.%s", (int)e,
                     kd->proj, kd->suffix);
        }
    }
    return 0;
}

static int weft_ok(weft_status_t status, const char *what)
{
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf ucx: %s: %s\n", what, weft_status_string(status));
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------ the server role */

static int create_registry(const char *name, const ucx_workload_t *w, int gpu, int checksums, weft_registry_h *out)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_MEMORY | WEFT_REGISTRY_FIELD_MAX_TENSORS |
                                                   WEFT_REGISTRY_FIELD_CHECKSUMS,
                                     .memory = gpu ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST, .device = 0,
                                     .max_tensors = w->count, .checksums = (uint32_t)checksums};
    weft_registry_h        reg = NULL;
    weft_status_t          status;

    (void)weft_registry_unlink(name);
    status = weft_registry_create(name, &params, &reg);
    for (uint32_t i = 0; i < w->count && status == WEFT_OK; i++) {
        const ucx_tensor_t *t = &w->t[i];
        weft_tensor_desc_t  d = {.name = t->name, .layer = t->expert >= 0 ? 0 : -1, .expert = t->expert,
                                 .role = t->role, .dtype = t->dtype, .ndim = t->ndim,
                                 .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0}};

        status = weft_registry_declare(reg, &d, NULL);
    }
    if (status == WEFT_OK) {
        status = weft_registry_seal(reg);
    }
    if (!weft_ok(status, "creating the registry")) {
        (void)weft_registry_close(reg);
        (void)weft_registry_unlink(name);
        return -1;
    }
    *out = reg;
    return 0;
}

/* Waits for the consumer's handshake: versions published before it are
 * not sent to it. */
static int wait_for_consumer(weft_server_h server)
{
    uint64_t deadline = perf_now_ns() + (uint64_t)READY_MS * 1000000u;

    for (;;) {
        weft_server_stats_t st;

        if (!weft_ok(weft_server_get_stats(server, &st), "weft_server_get_stats")) {
            return -1;
        }
        if (st.consumers >= 1) {
            return 0;
        }
        if (perf_now_ns() > deadline) {
            fprintf(stderr, "weft-perf ucx: no consumer connected within %u ms\n", READY_MS);
            return -1;
        }
        perf_sleep_us(1000);
    }
}

/* Writes version v (not timed); a GPU registry's tensors through `host`,
 * as large as the largest tensor (NULL for a host registry). */
static int fill_version(weft_registry_h reg, const ucx_workload_t *w, uint64_t v, uint8_t *host)
{
    if (!weft_ok(weft_registry_write_begin(reg, WAIT_US, NULL), "weft_registry_write_begin")) {
        return -1;
    }
    for (uint32_t i = 0; i < w->count; i++) {
        void *data = NULL;

        if (!weft_ok(weft_registry_write_tensor(reg, i, &data), "weft_registry_write_tensor")) {
            return -1;
        }
        if (host == NULL) {
            payload_fill(data, w->t[i].bytes, v, i);
        } else {
            payload_fill(host, w->t[i].bytes, v, i);
            if (perf_gpu_upload(data, host, w->t[i].bytes) != 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* The largest tensor's bytes. */
static uint64_t largest_tensor(const ucx_workload_t *w)
{
    uint64_t most = 0;

    for (uint32_t i = 0; i < w->count; i++) {
        most = w->t[i].bytes > most ? w->t[i].bytes : most;
    }
    return most;
}

/* Publishes version v; *ns gets the time until the consumer acked it. */
static int send_version(weft_registry_h reg, weft_server_h server, uint64_t v, uint64_t *ns)
{
    weft_server_stats_t st;
    uint32_t            lagging = 0;
    uint64_t            t0 = perf_now_ns(), t1;

    if (!weft_ok(weft_registry_publish(reg, v, NULL), "weft_registry_publish") ||
        !weft_ok(weft_registry_wait_consumers(reg, v, WAIT_US, &lagging), "weft_registry_wait_consumers")) {
        return -1;
    }
    t1 = perf_now_ns();
    /* A dropped consumer leaves the table and wait_consumers returns:
     * the server's stats tell. (One that got the last version may have
     * left already, on purpose: that is not a drop.) */
    if (!weft_ok(weft_server_get_stats(server, &st), "weft_server_get_stats")) {
        return -1;
    }
    if (lagging != 0 || st.dropped != 0) {
        fprintf(stderr, "weft-perf ucx: version %llu: the consumer was dropped\n", (unsigned long long)v);
        return -1;
    }
    *ns = t1 - t0;
    return 0;
}

static int serve_versions(const ucx_options_t *o, const ucx_workload_t *w, weft_registry_h reg,
                          weft_server_h server)
{
    const uint64_t versions = o->warmup + o->iters;
    uint64_t      *ns = calloc(o->iters, sizeof(*ns)), n = 0;
    uint8_t       *host = o->gpu ? malloc(largest_tensor(w)) : NULL;
    perf_latency_t lat;
    int            rc = -1;

    if (ns == NULL || (o->gpu && host == NULL)) {
        free(ns);
        free(host);
        return -1;
    }
    for (uint64_t v = 1; v <= versions; v++) {
        uint64_t t;

        if (fill_version(reg, w, v, host) != 0 || send_version(reg, server, v, &t) != 0) {
            goto out;
        }
        if (v > o->warmup) {
            ns[n++] = t;
        }
    }
    perf_latency_summarize(ns, n, &lat);
    printf("result iterations %llu median_ns %llu min_ns %llu max_ns %llu bytes %llu\n", (unsigned long long)n,
           (unsigned long long)perf_percentile(ns, n, 500), (unsigned long long)ns[0],
           (unsigned long long)ns[n - 1], (unsigned long long)w->bytes);
    fflush(stdout);
    rc = 0;
out:
    free(ns);
    free(host);
    return rc;
}

static int server_role(const ucx_options_t *o, const ucx_workload_t *w)
{
    char                 listen[128];
    weft_server_params_t params = {.field_mask = WEFT_SERVER_FIELD_TIMEOUT, .transport = WEFT_TRANSPORT_UCX,
                                   .listen = listen, .token = o->token, .timeout_us = STEP_US};
    weft_registry_h      reg = NULL;
    weft_server_h        server = NULL;
    uint16_t             port = 0;
    int                  rc = 1;

    if (o->listen == NULL || o->token == NULL || o->registry == NULL) {
        fprintf(stderr, "weft-perf ucx: --role server needs --listen, --token and --registry\n");
        return 2;
    }
    snprintf(listen, sizeof(listen), "%s:0", o->listen);
    if (create_registry(o->registry, w, o->gpu, o->checksums, &reg) != 0) {
        return 1;
    }
    if (weft_ok(weft_server_create(reg, &params, &server), "weft_server_create") &&
        weft_ok(weft_server_port(server, &port), "weft_server_port")) {
        printf("port %u\n", (unsigned)port);
        fflush(stdout);
        if (wait_for_consumer(server) == 0 && serve_versions(o, w, reg, server) == 0) {
            rc = 0;
        }
    }
    if (server != NULL) {
        (void)weft_ok(weft_server_destroy(server), "weft_server_destroy");
    }
    (void)weft_registry_close(reg);
    (void)weft_registry_unlink(o->registry);
    return rc;
}

/* ---------------------------------------------------- the consumer role */

static void build_views(const ucx_workload_t *w, uint8_t *buf, int gpu, weft_recv_view_t *views)
{
    for (uint32_t i = 0; i < w->count; i++) {
        const ucx_tensor_t *t = &w->t[i];

        views[i] = (weft_recv_view_t){.name = t->name, .role = t->role, .dtype = t->dtype, .ndim = t->ndim,
                                      .shape = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0},
                                      .data = buf + t->offset};
        if (gpu) {
            views[i].field_mask |= WEFT_RECV_VIEW_FIELD_MEMORY;
            views[i].memory = WEFT_MEMORY_CUDA;
        }
    }
}

/* Wrong bytes of the last version in the views (device views through
 * `host`, as large as the largest tensor); UINT64_MAX when a copy failed. */
static uint64_t check_views(const ucx_workload_t *w, const uint8_t *buf, uint8_t *host, uint64_t v)
{
    uint64_t wrong = 0;

    for (uint32_t i = 0; i < w->count; i++) {
        const uint8_t *at = buf + w->t[i].offset;

        if (host != NULL) {
            if (perf_gpu_download(host, at, w->t[i].bytes) != 0) {
                return UINT64_MAX;
            }
            at = host;
        }
        wrong += payload_count_wrong(at, w->t[i].bytes, v, i);
    }
    return wrong;
}

/* Receives every version; returns the last one, 0 on failure. */
static uint64_t receive_versions(weft_remote_h remote, uint64_t versions)
{
    uint64_t last = 0;

    while (last < versions) {
        uint64_t      got = 0;
        weft_status_t status = weft_remote_receive(remote, last, WAIT_US, &got);

        if (!weft_ok(status, "weft_remote_receive")) {
            return 0;
        }
        last = got;
    }
    return last;
}

static int consumer_role(const ucx_options_t *o, const ucx_workload_t *w)
{
    weft_remote_params_t params = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT, .transport = WEFT_TRANSPORT_UCX,
                                   .server = o->connect, .token = o->token, .name = "weft-perf-ucx",
                                   .timeout_us = (uint64_t)READY_MS * 1000};
    weft_ucx_remote_params_t own = {0}; /* ucx's own: the memory below, when given */
    uint8_t             *buf = NULL, *host = NULL; /* the views' memory; GPU: where they are checked */
    weft_ucx_memory_h    memory = NULL; /* buf's, for host views in UCX's memory */
    weft_recv_view_t    *views = calloc(w->count, sizeof(*views));
    weft_remote_h        remote = NULL;
    uint64_t             last = 0, wrong = 0;
    int                  rc = 1;

    if (o->connect == NULL || o->token == NULL) {
        fprintf(stderr, "weft-perf ucx: --role consumer needs --connect and --token\n");
        rc = 2;
        goto out;
    }
    if (o->gpu) {
        /* The other GPU than the registry's where there are two. */
        if (perf_gpu_alloc(perf_gpu_count() > 1 ? 1 : 0, w->bytes, (void **)&buf) != 0) {
            goto out;
        }
        host = malloc(largest_tensor(w));
    } else if (!o->recv_user) {
        if (!weft_ok(weft_ucx_memory_alloc(w->bytes, &memory, (void **)&buf), "weft_ucx_memory_alloc")) {
            goto out; /* said why */
        }
        memset(buf, 0, w->bytes); /* every page faulted in before the first put */
        own.field_mask |= WEFT_UCX_REMOTE_FIELD_MEMORY;
        own.memory = memory;
        params.field_mask |= WEFT_REMOTE_FIELD_TRANSPORT;
        params.transport_params = &own;
    } else if ((buf = malloc(w->bytes)) != NULL) {
        memset(buf, 0, w->bytes);
    }
    if (buf == NULL || views == NULL || (o->gpu && host == NULL)) {
        fprintf(stderr, "weft-perf ucx: out of memory (%llu bytes)\n", (unsigned long long)w->bytes);
        goto out;
    }
    build_views(w, buf, o->gpu, views);
    if (!weft_ok(weft_remote_connect(&params, views, w->count, &remote), "weft_remote_connect")) {
        goto out;
    }
    last = receive_versions(remote, o->warmup + o->iters);
    if (last != 0) {
        /* Nothing is sent after the last version: its bytes stay put. */
        wrong = check_views(w, buf, host, last);
        printf("received %llu wrong %llu\n", (unsigned long long)last, (unsigned long long)wrong);
        fflush(stdout);
        rc = wrong == 0 ? 0 : 4;
    }
out:
    (void)weft_remote_close(remote);
    free(views);
    if (o->gpu) {
        perf_gpu_free(buf);
    } else if (memory != NULL) {
        (void)weft_ok(weft_ucx_memory_free(memory), "weft_ucx_memory_free");
    } else if (o->recv_user) {
        free(buf);
    }
    free(host);
    return rc;
}

int ucx_run_role(const ucx_options_t *o)
{
    ucx_workload_t w;
    int            rc;

    if (ucx_workload_make(o->case_bytes, o->tensors, &w) != 0) {
        return 1;
    }
    if (strcmp(o->role, "server") == 0) {
        rc = server_role(o, &w);
    } else if (strcmp(o->role, "consumer") == 0) {
        rc = consumer_role(o, &w);
    } else {
        fprintf(stderr, "weft-perf ucx: --role '%s': expected server or consumer\n", o->role);
        rc = 2;
    }
    free(w.t);
    return rc;
}

/* ------------------------------------------------------- a row's run */

static void case_text(const ucx_case_t *c, char *buf, size_t size)
{
    if (c->bytes == 0) {
        snprintf(buf, size, "expert");
    } else {
        snprintf(buf, size, "%llu", (unsigned long long)c->bytes);
    }
}

static void parse_server(const perf_run_t *p, uint64_t iters, ucx_row_t *r)
{
    const char        *s = perf_run_line(p, "result ");
    unsigned long long n, med, lo, hi, bytes;

    if (s != NULL && sscanf(s, "iterations %llu median_ns %llu min_ns %llu max_ns %llu bytes %llu", &n, &med, &lo,
                            &hi, &bytes) == 5) {
        r->iterations = n;
        r->weft_s = (double)med / 1e9;
        r->weft_min_s = (double)lo / 1e9;
        r->weft_max_s = (double)hi / 1e9;
        if (n != iters) {
            ucx_add_note(r->note, sizeof(r->note), "the server timed %llu versions, not %llu", n,
                     (unsigned long long)iters);
            r->ok = 0;
        }
        if (bytes != r->bytes) {
            ucx_add_note(r->note, sizeof(r->note), "the server sent %llu bytes a version, not %llu", bytes,
                     (unsigned long long)r->bytes);
            r->ok = 0;
        }
    } else {
        r->ok = 0;
    }
}

static void parse_consumer(const perf_run_t *p, uint64_t versions, ucx_row_t *r)
{
    const char        *s = perf_run_line(p, "received ");
    unsigned long long last, wrong;

    if (s == NULL || sscanf(s, "%llu wrong %llu", &last, &wrong) != 2) {
        r->ok = 0;
        return;
    }
    if (last != versions || wrong != 0) {
        ucx_add_note(r->note, sizeof(r->note), "the consumer got version %llu of %llu with %llu wrong bytes", last,
                 (unsigned long long)versions, wrong);
        r->ok = 0;
    }
}

/* weft: a server role on side 0, a consumer role on side 1. */
void ucx_run_weft(ucx_ctx_t *ctx, const ucx_transport_t *tr, ucx_row_t *r)
{
    const ucx_options_t *o = ctx->o;
    const uint64_t       versions = o->warmup + o->iters;
    char                 reg[WEFT_REGISTRY_NAME_MAX], cs[32], it[32], wu[32], ks[32], addr[128];
    perf_run_t           p[2];
    const char          *port;

    memset(p, 0, sizeof(p));
    snprintf(reg, sizeof(reg), "weft-perf-ucx-%d-%d", (int)getpid(), ctx->number++);
    case_text(&r->c, cs, sizeof(cs));
    snprintf(it, sizeof(it), "%llu", (unsigned long long)o->iters);
    snprintf(wu, sizeof(wu), "%llu", (unsigned long long)o->warmup);
    snprintf(ks, sizeof(ks), "%llu", (unsigned long long)r->c.tensors);
    {
        char *const argv[] = {ctx->self,     "ucx",      "--role",   "server",
                              "--case",      cs,         "--tensors", ks,
                              "--iterations", it,        "--warmup", wu,
                              "--listen",    (char *)tr->side[0].ip, "--token", ctx->token,
                              "--registry",  reg,        "--memory", o->gpu ? "cuda" : "host",
                              "--checksums", o->checksums ? "on" : "off", NULL};

        if (ucx_proc_start(ctx, &p[0], "weft server", tr, 0, argv, 0) != 0 ||
            perf_run_wait(&ctx->runner, p, 1, "port ", perf_deadline_in_s(READY_MS / 1000.0), 1) != 0) {
            goto out;
        }
    }
    port = perf_run_line(&p[0], "port ");
    snprintf(addr, sizeof(addr), "%s:%u", tr->side[0].ip, (unsigned)strtoul(port, NULL, 10));
    {
        char *const argv[] = {ctx->self,     "ucx",      "--role",   "consumer",
                              "--case",      cs,         "--tensors", ks,
                              "--iterations", it,        "--warmup", wu,
                              "--connect",   addr,       "--token",  ctx->token,
                              "--memory",    o->gpu ? "cuda" : "host",
                              "--recv-memory", o->recv_user ? "user" : "ucx", NULL};

        if (ucx_proc_start(ctx, &p[1], "weft consumer", tr, 1, argv, 0) != 0) {
            perf_run_kill_all(&ctx->runner, p, 2);
            goto out;
        }
    }
    /* A process that fails is left to end the other: the consumer of a
     * dead server gets a connection error; the server of a dead consumer
     * sees it dropped. The deadline is the backstop. */
    (void)perf_run_wait(&ctx->runner, p, 2, NULL, perf_deadline_in_s(ucx_time_limit_s(r->bytes, versions)), 0);
    r->ok = !perf_run_failed(&p[1]);
    parse_server(&p[0], o->iters, r);
    parse_consumer(&p[1], versions, r);
out:
    /* Every version acked and the last one right, but a process that
     * then failed (in weft_server_destroy, say) is not a clean exit. */
    r->clean = !perf_run_failed(&p[0]) && !perf_run_failed(&p[1]) && p[1].pid != 0;
    if (!r->clean) {
        ucx_note_failures(p, 2, r->note, sizeof(r->note));
    }
    if (!r->ok) {
        ucx_add_note(r->note, sizeof(r->note), "the weft transfer failed");
    }
    (void)weft_registry_unlink(reg); /* the server's, if it died */
}
