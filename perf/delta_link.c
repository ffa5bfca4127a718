/*
 * weft-perf delta --link RATE: the same real optimizer steps served by a
 * ucx server to a consumer on another "host" over a link held to RATE
 * (tc's token bucket on both ends of a veth pair between two network
 * namespaces), once with every version whole (WEFT_DELTA=off) and once
 * as deltas (auto), in the same run. Timed: each version's update, from
 * its publish until the consumer acknowledged it (every byte in its
 * views and checked), the first version of each run (nothing held yet)
 * not counted.
 *
 * Processes: this program again, as a trainer (--role trainer: the
 * optimizer, the FP8 writer into a host registry with checksums, the
 * server) in one namespace and a consumer (--role consumer: contiguous
 * host views) in the other. The consumer checks each version against
 * the registry's checksums (WEFT_VERIFY) and, after the last, compares
 * its views byte for byte with the registry's latest version (both
 * namespaces see the same /dev/shm).
 *
 * With --link-gpu the registry is on GPU 0 (the versions quantized on
 * the host, then copied in: the writer is not what is timed) and the
 * consumer's views are device memory of GPU 0: the server encodes its
 * deltas on the GPU and the consumer applies and checks them there.
 */
#include "config.h"

#include "delta.h"
#include "lib/gpu_buf.h"
#include "ucx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINK_READY_MS  60000u
#define LINK_STEP_US   UINT64_C(300000000) /* a version over a slow link, at most */
#define BLOCK          128u

/* ------------------------------------------------------- the versions */

/* A case's tensors: per expert W [rows, cols], WT [cols, rows] (e4m3)
 * and the scales [⌈rows/128⌉, ⌈cols/128⌉] (FP32), in that order. */
typedef struct link_tensors {
    uint64_t experts, rows, cols;
} link_tensors_t;

/* An expert's scales. */
static uint64_t scale_count(const link_tensors_t *t)
{
    return ((t->rows + BLOCK - 1) / BLOCK) * ((t->cols + BLOCK - 1) / BLOCK);
}

static uint32_t tensor_count(const link_tensors_t *t)
{
    return (uint32_t)(3 * t->experts);
}

static void tensor_desc(const link_tensors_t *t, uint32_t i, char *name, size_t size, weft_tensor_desc_t *d)
{
    const uint64_t e = i / 3, kind = i % 3;
    const uint64_t rb = (t->rows + BLOCK - 1) / BLOCK, cb = (t->cols + BLOCK - 1) / BLOCK;

    snprintf(name, size, "model.layers.0.mlp.experts.%llu.%s", (unsigned long long)e,
             kind == 0 ? "w" : kind == 1 ? "wt" : "scale_inv");
    *d = (weft_tensor_desc_t){.name = name, .expert = (int32_t)e, .ndim = 2,
                              .role = kind == 0 ? WEFT_ROLE_W : kind == 1 ? WEFT_ROLE_WT : WEFT_ROLE_SCALE,
                              .dtype = kind == 2 ? WEFT_DTYPE_FP32 : WEFT_DTYPE_FP8_E4M3,
                              .shape = {kind == 0 ? t->rows : kind == 1 ? t->cols : rb,
                                        kind == 0 ? t->cols : kind == 1 ? t->rows : cb}};
}

static uint64_t tensor_bytes(const weft_tensor_desc_t *d)
{
    return d->shape[0] * d->shape[1] * weft_dtype_size(d->dtype);
}

static int ok(weft_status_t status, const char *what)
{
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf delta: %s: %s\n", what, weft_status_string(status));
    }
    return status == WEFT_OK;
}

/* ------------------------------------------------------------ trainer */

/* The masters of the step just taken, quantized into a new version
 * (through `stage`, host memory of one expert's tensors, for a GPU
 * registry). */
static int write_version(weft_registry_h reg, const link_tensors_t *t, const float *master, int gpu, uint8_t *stage)
{
    const uint64_t n = t->rows * t->cols, scale_bytes = scale_count(t) * sizeof(float);

    if (!ok(weft_registry_write_begin(reg, LINK_STEP_US, NULL), "weft_registry_write_begin")) {
        return -1;
    }
    for (uint64_t e = 0; e < t->experts; e++) {
        void               *w, *wt, *scale;
        weft_quant_matrix_t m;

        if (!ok(weft_registry_write_tensor(reg, (uint32_t)(3 * e), &w), "weft_registry_write_tensor") ||
            !ok(weft_registry_write_tensor(reg, (uint32_t)(3 * e + 1), &wt), "weft_registry_write_tensor") ||
            !ok(weft_registry_write_tensor(reg, (uint32_t)(3 * e + 2), &scale), "weft_registry_write_tensor")) {
            return -1;
        }
        m = (weft_quant_matrix_t){.x = master + e * n, .w = gpu ? stage : w, .wt = gpu ? stage + n : wt,
                                  .scale_inv = gpu ? stage + 2 * n : scale};
        if (!ok(weft_quant_host(NULL, WEFT_DTYPE_FP32, t->rows, t->cols, &m, 1), "weft_quant_host")) {
            return -1;
        }
        if (gpu && (perf_gpu_upload(w, stage, n) != 0 || perf_gpu_upload(wt, stage + n, n) != 0 ||
                    perf_gpu_upload(scale, stage + 2 * n, scale_bytes) != 0)) {
            return -1;
        }
    }
    return 0;
}

static int wait_consumers_ready(weft_server_h server, uint32_t want)
{
    const double until = delta_now_s() + LINK_READY_MS / 1000.0;

    for (;;) {
        weft_server_stats_t st;

        if (!ok(weft_server_get_stats(server, &st), "weft_server_get_stats")) {
            return -1;
        }
        if (want > 0 ? st.consumers >= want : st.consumers == 0) {
            return 0;
        }
        if (delta_now_s() > until) {
            fprintf(stderr, "weft-perf delta: the consumer did not %s in time\n", want > 0 ? "connect" : "leave");
            return -1;
        }
        usleep(1000);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Steps, publishes and times each version; prints the result line. */
static int serve(const delta_options_t *o, const link_tensors_t *t, weft_registry_h reg, weft_server_h server)
{
    const uint64_t      n = t->experts * t->rows * t->cols;
    float              *grad = malloc(n * sizeof(float)), *master = NULL;
    uint64_t           *ns = calloc(o->steps, sizeof(*ns));
    uint8_t            *stage = o->role_gpu ? malloc(2 * t->rows * t->cols + scale_count(t) * sizeof(float)) : NULL;
    weft_optim_h        opt = NULL;
    weft_server_stats_t before = {0}, after;
    int                 rc = -1;

    if (grad == NULL || ns == NULL || (o->role_gpu && stage == NULL)) {
        fprintf(stderr, "weft-perf delta: out of memory\n");
        goto out;
    }
    if (delta_optim_make(o, o->role_muon ? WEFT_OPTIM_MUON : WEFT_OPTIM_ADAMW, o->role_lr, t->experts, t->rows,
                         t->cols, grad, &opt, &master) != 0) {
        goto out;
    }
    /* Version 1 (after the warm-up), then one a step. */
    for (uint64_t v = 1; v <= o->steps + 1; v++) {
        double t0;

        if (v > 1 && delta_optim_step(o, opt, grad, n, v - 2) != 0) {
            fprintf(stderr, "weft-perf delta: step %llu failed\n", (unsigned long long)(v - 2));
            goto out;
        }
        if (write_version(reg, t, master, o->role_gpu, stage) != 0) {
            goto out;
        }
        if (v == 2 && !ok(weft_server_get_stats(server, &before), "weft_server_get_stats")) {
            goto out;
        }
        t0 = delta_now_s();
        if (!ok(weft_registry_publish(reg, v, NULL), "weft_registry_publish") ||
            !ok(weft_registry_wait_consumers(reg, v, LINK_STEP_US, NULL), "weft_registry_wait_consumers")) {
            goto out;
        }
        if (v > 1) {
            weft_server_stats_t st;

            ns[v - 2] = (uint64_t)((delta_now_s() - t0) * 1e9);
            if (!ok(weft_server_get_stats(server, &st), "weft_server_get_stats")) {
                goto out;
            }
            /* Each version's own line, for the reader of the output. */
            printf("version %llu update_ms %.3f deltas_so_far %llu redone_so_far %llu\n", (unsigned long long)v,
                   (double)ns[v - 2] * 1e-6, (unsigned long long)st.deltas_sent,
                   (unsigned long long)st.deltas_redone);
        }
    }
    if (!ok(weft_server_get_stats(server, &after), "weft_server_get_stats")) {
        goto out;
    }
    if (after.dropped != 0 || after.versions_sent != o->steps + 1) {
        fprintf(stderr, "weft-perf delta: %llu versions acknowledged of %llu, %llu consumers dropped\n",
                (unsigned long long)after.versions_sent, (unsigned long long)(o->steps + 1),
                (unsigned long long)after.dropped);
        goto out;
    }
    qsort(ns, o->steps, sizeof(*ns), cmp_u64);
    printf("result median_ns %llu versions %llu deltas %llu delta_bytes %llu full_bytes %llu redone %llu\n",
           (unsigned long long)ns[o->steps / 2], (unsigned long long)o->steps,
           (unsigned long long)(after.deltas_sent - before.deltas_sent),
           (unsigned long long)(after.delta_bytes - before.delta_bytes),
           (unsigned long long)(after.bytes_sent - before.bytes_sent), (unsigned long long)after.deltas_redone);

    fflush(stdout);
    rc = 0;
out:
    weft_optim_destroy(opt);
    free(grad);
    free(ns);
    free(stage);
    return rc;
}

static int trainer_role(const delta_options_t *o, const link_tensors_t *t)
{
    char                   listen[128];
    weft_registry_params_t rp = {.field_mask = WEFT_REGISTRY_FIELD_CHECKSUMS | WEFT_REGISTRY_FIELD_MEMORY,
                                 .checksums = 1, .memory = o->role_gpu ? WEFT_MEMORY_CUDA : WEFT_MEMORY_HOST,
                                 .device = o->role_gpu ? 0 : -1};
    weft_server_params_t   sp = {.field_mask = WEFT_SERVER_FIELD_TIMEOUT, .transport = WEFT_TRANSPORT_UCX,
                                 .listen = listen, .token = o->token, .timeout_us = LINK_STEP_US};
    weft_registry_h        reg = NULL;
    weft_server_h          server = NULL;
    uint16_t               port = 0;
    int                    rc = 1;

    snprintf(listen, sizeof(listen), "%s:0", o->listen);
    (void)weft_registry_unlink(o->registry);
    if (!ok(weft_registry_create(o->registry, &rp, &reg), "weft_registry_create")) {
        return 1;
    }
    for (uint32_t i = 0; i < tensor_count(t); i++) {
        char               name[WEFT_TENSOR_NAME_MAX];
        weft_tensor_desc_t d;

        tensor_desc(t, i, name, sizeof(name), &d);
        if (!ok(weft_registry_declare(reg, &d, NULL), "weft_registry_declare")) {
            goto out;
        }
    }
    if (ok(weft_registry_seal(reg), "weft_registry_seal") &&
        ok(weft_server_create(reg, &sp, &server), "weft_server_create") &&
        ok(weft_server_port(server, &port), "weft_server_port")) {
        printf("port %u\n", (unsigned)port);
        fflush(stdout);
        /* After the last version the consumer compares its views with the
         * registry: it stays until the consumer left. */
        if (wait_consumers_ready(server, 1) == 0 && serve(o, t, reg, server) == 0 &&
            wait_consumers_ready(server, 0) == 0) {
            rc = 0;
        }
    }
out:
    if (server != NULL) {
        (void)ok(weft_server_destroy(server), "weft_server_destroy");
    }
    (void)weft_registry_close(reg);
    (void)weft_registry_unlink(o->registry);
    return rc;
}

/* ----------------------------------------------------------- consumer */

/* The views' bytes against the registry's latest version, which must be
 * `version`: the wrong bytes, or UINT64_MAX when it could not be read. */
static uint64_t compare_with_registry(const delta_options_t *o, const link_tensors_t *t, const uint8_t *buf,
                                      uint64_t version)
{
    weft_registry_h reg = NULL;
    weft_lease_t    lease;
    uint64_t        wrong = 0, at = 0;

    if (!ok(weft_registry_open(o->registry, WEFT_REGISTRY_OPEN_READ, &reg), "weft_registry_open")) {
        return UINT64_MAX;
    }
    if (!ok(weft_registry_acquire(reg, &lease), "weft_registry_acquire")) {
        (void)weft_registry_close(reg);
        return UINT64_MAX;
    }
    if (lease.version != version) {
        fprintf(stderr, "weft-perf delta: the registry holds version %llu, the views %llu\n",
                (unsigned long long)lease.version, (unsigned long long)version);
        wrong = UINT64_MAX;
    }
    for (uint32_t i = 0; i < tensor_count(t) && wrong != UINT64_MAX; i++) {
        char               name[WEFT_TENSOR_NAME_MAX];
        weft_tensor_desc_t d;
        const uint8_t     *data;
        uint64_t           bytes;

        tensor_desc(t, i, name, sizeof(name), &d);
        bytes = tensor_bytes(&d);
        if (!ok(weft_registry_lease_tensor(reg, &lease, i, (const void **)&data), "weft_registry_lease_tensor")) {
            wrong = UINT64_MAX;
            break;
        }
        if (o->role_gpu) {
            /* The registry's GPU memory, read back through its mapping here. */
            uint8_t *host = malloc(bytes);

            if (host == NULL || perf_gpu_download(host, data, bytes) != 0) {
                free(host);
                wrong = UINT64_MAX;
                break;
            }
            for (uint64_t b = 0; b < bytes; b++) {
                wrong += buf[at + b] != host[b];
            }
            free(host);
        } else {
            for (uint64_t b = 0; b < bytes; b++) {
                wrong += buf[at + b] != data[b];
            }
        }
        at += bytes;
    }
    (void)weft_registry_release(reg, &lease);
    (void)weft_registry_close(reg);
    return wrong;
}

static int consumer_role(const delta_options_t *o, const link_tensors_t *t)
{
    const uint32_t       count = tensor_count(t);
    weft_remote_params_t rp = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT, .transport = WEFT_TRANSPORT_UCX,
                               .server = o->connect, .token = o->token, .name = "weft-perf-delta",
                               .timeout_us = (uint64_t)LINK_READY_MS * 1000};
    weft_recv_view_t    *views = calloc(count, sizeof(*views));
    char               (*names)[WEFT_TENSOR_NAME_MAX] = calloc(count, sizeof(*names));
    uint8_t             *buf = NULL, *device = NULL; /* the views' memory; device memory with --link-gpu */
    uint64_t             bytes = 0, last = 0, wrong;
    weft_remote_h        remote = NULL;
    int                  rc = 1;

    if (views == NULL || names == NULL) {
        goto out;
    }
    for (uint32_t i = 0; i < count; i++) {
        weft_tensor_desc_t d;

        tensor_desc(t, i, names[i], sizeof(names[i]), &d);
        views[i] = (weft_recv_view_t){.name = names[i], .role = d.role, .dtype = d.dtype, .ndim = 2,
                                      .shape = {d.shape[0], d.shape[1]}, .data = (void *)(uintptr_t)bytes};
        if (o->role_gpu) {
            views[i].field_mask = WEFT_RECV_VIEW_FIELD_MEMORY;
            views[i].memory = WEFT_MEMORY_CUDA;
        }
        bytes += tensor_bytes(&d);
    }
    buf = malloc(bytes);
    if (buf == NULL) {
        fprintf(stderr, "weft-perf delta: out of memory (%llu bytes)\n", (unsigned long long)bytes);
        goto out;
    }
    memset(buf, 0, bytes);
    if (o->role_gpu && perf_gpu_alloc(0, bytes, (void **)&device) != 0) {
        goto out;
    }
    for (uint32_t i = 0; i < count; i++) {
        views[i].data = (device != NULL ? device : buf) + (uintptr_t)views[i].data;
    }
    if (!ok(weft_remote_connect(&rp, views, count, &remote), "weft_remote_connect")) {
        goto out;
    }
    while (last < o->steps + 1) {
        uint64_t got = 0;

        if (!ok(weft_remote_receive(remote, last, LINK_STEP_US, &got), "weft_remote_receive")) {
            goto out;
        }
        last = got;
    }
    if (device != NULL && perf_gpu_download(buf, device, bytes) != 0) {
        goto out;
    }
    wrong = compare_with_registry(o, t, buf, last);
    printf("received %llu wrong %llu\n", (unsigned long long)last, (unsigned long long)wrong);
    fflush(stdout);
    rc = wrong == 0 ? 0 : 4;
out:
    (void)weft_remote_close(remote);
    free(views);
    free(names);
    free(buf);
    if (device != NULL) {
        perf_gpu_free(device);
    }
    return rc;
}

int delta_link_role(const delta_options_t *o)
{
    const link_tensors_t t = {.experts = o->experts, .rows = o->rows, .cols = o->cols};

    if (o->registry == NULL || o->token == NULL) {
        fprintf(stderr, "weft-perf delta: --role needs --registry and --token\n");
        return 2;
    }
    if (strcmp(o->role, "trainer") == 0 && o->listen != NULL) {
        return trainer_role(o, &t);
    }
    if (strcmp(o->role, "consumer") == 0 && o->connect != NULL) {
        return consumer_role(o, &t);
    }
    fprintf(stderr, "weft-perf delta: --role trainer needs --listen, consumer --connect\n");
    return 2;
}

/* ------------------------------------------------------------- parent */

/* Runs argv (a command in a namespace, or here) to its end within 10 s. */
static int run_quick(ucx_ctx_t *ctx, char *const argv[], char *out, size_t size)
{
    perf_run_t p;
    int        rc;

    if (ucx_proc_start(ctx, &p, argv[0], NULL, 0, argv, 1) != 0) {
        return -1;
    }
    rc = perf_run_wait(&ctx->runner, &p, 1, NULL, perf_deadline_in_s(10), 1);
    snprintf(out, size, "%.*s", (int)(p.len < 200 ? p.len : 200), p.out);
    return rc;
}

/* The link held to `rate` both ways: tc's token bucket on each end. */
static int limit_link(ucx_ctx_t *ctx, const ucx_transport_t *tr, const char *rate, char *why, size_t size)
{
    for (int side = 0; side < 2; side++) {
        char *argv[] = {"ip", "netns", "exec", (char *)tr->side[side].ns, "tc", "qdisc", "add", "dev",
                        (char *)tr->side[side].dev, "root", "tbf", "rate", (char *)rate, "burst", "1mb",
                        "latency", "1s", NULL};
        char  out[256];

        if (run_quick(ctx, argv, out, sizeof(out)) != 0) {
            snprintf(why, size, "tc could not hold the link to %s: %s", rate, out);
            return -1;
        }
    }
    return 0;
}

/* One run, WEFT_DELTA=mode: the trainer and the consumer to their end. */
static int run_mode(ucx_ctx_t *ctx, const delta_options_t *o, const ucx_transport_t *tr, const char *mode,
                    const char *case_args[], uint64_t *median_ns, uint64_t *deltas, uint64_t *delta_bytes,
                    uint64_t *full_bytes, uint64_t *wrong, char *note, size_t size)
{
    char        registry[64], listen[32], connect[64], port_text[16] = "";
    char       *argv[40];
    int         n = 0, rc = -1;
    perf_run_t  procs[2] = {{0}, {0}};
    const char *line;
    const double limit = 300.0 + 120.0 * (double)(o->steps + 1);
    unsigned long long versions, received, redone;

    snprintf(registry, sizeof(registry), "weft-perf-delta-%d-%d", (int)getpid(), ctx->number++);
    snprintf(listen, sizeof(listen), "%s", tr->side[0].ip);
    setenv("WEFT_DELTA", mode, 1); /* for both processes */
    argv[n++] = ctx->self;
    argv[n++] = "delta";
    for (int i = 0; case_args[i] != NULL; i++) {
        argv[n++] = (char *)case_args[i];
    }
    argv[n++] = "--registry";
    argv[n++] = registry;
    argv[n++] = "--token";
    argv[n++] = ctx->token;
    argv[n++] = "--role";
    argv[n++] = "trainer";
    argv[n++] = "--listen";
    argv[n++] = listen;
    argv[n] = NULL;
    if (ucx_proc_start(ctx, &procs[0], "trainer", tr, 0, argv, 1) != 0 ||
        perf_run_wait(&ctx->runner, procs, 1, "port ", perf_deadline_in_s(LINK_READY_MS / 1000.0), 1) != 0 ||
        (line = perf_run_line(&procs[0], "port ")) == NULL) {
        ucx_note_failures(procs, 1, note, size);
        goto out;
    }
    snprintf(port_text, sizeof(port_text), "%.*s", (int)strcspn(line, "\n"), line);
    snprintf(connect, sizeof(connect), "%s:%s", tr->side[0].ip, port_text);
    argv[n - 3] = "consumer";
    argv[n - 2] = "--connect";
    argv[n - 1] = connect;
    if (ucx_proc_start(ctx, &procs[1], "consumer", tr, 1, argv, 1) != 0 ||
        perf_run_wait(&ctx->runner, procs, 2, NULL, perf_deadline_in_s(limit), 1) != 0) {
        ucx_note_failures(procs, 2, note, size);
        goto out;
    }
    if ((line = perf_run_line(&procs[0], "result ")) == NULL ||
        sscanf(line, "median_ns %llu versions %llu deltas %llu delta_bytes %llu full_bytes %llu redone %llu",
               (unsigned long long *)median_ns, &versions, (unsigned long long *)deltas,
               (unsigned long long *)delta_bytes, (unsigned long long *)full_bytes, &redone) != 6 ||
        (line = perf_run_line(&procs[1], "received ")) == NULL ||
        sscanf(line, "%llu wrong %llu", &received, (unsigned long long *)wrong) != 2) {
        ucx_add_note(note, size, "WEFT_DELTA=%s: no result line", mode);
        goto out;
    }
    if (redone != 0) {
        ucx_add_note(note, size, "WEFT_DELTA=%s: %llu deltas refused by the consumer's check", mode, redone);
    }
    if (getenv("WEFT_PERF_DELTA_TRACE") != NULL) { /* each version's line, to stderr */
        fprintf(stderr, "%s", procs[0].out);
    }
    rc = 0;
out:
    perf_run_kill_all(&ctx->runner, procs, 2);
    (void)weft_registry_unlink(registry);
    return rc;
}

int delta_link_case(const delta_options_t *o, weft_optim_algo_t algo, double lr, uint64_t experts, uint64_t rows,
                    uint64_t cols, delta_link_result_t *res)
{
    ucx_ctx_t       ctx;
    ucx_transport_t tr;
    char            e_text[24], shape[48], lr_text[32], steps[24], warmup[24], threads[24];
    const char     *case_args[20];
    int             k = 0, rc = -1;
    uint64_t        full_ns = 0, delta_ns = 0, d0, b0, f0, w0 = 0, w1 = 0, full_bytes = 0;
    ssize_t         self;

    memset(res, 0, sizeof(*res));
    {
        weft_backend_info_t info = {0};

        if (weft_backend_query(WEFT_BACKEND_UCX, &info) != WEFT_OK || !info.compiled || !info.available) {
            snprintf(res->note, sizeof(res->note), "libweft has no usable UCX (%s)",
                     info.compiled ? "not found at run time" : "not in this build");
            return 77;
        }
    }
    if (o->link_gpu && perf_gpu_count() == 0) {
        snprintf(res->note, sizeof(res->note), "--link-gpu needs a GPU");
        return 77;
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.runner.name = "weft-perf delta";
    self = readlink("/proc/self/exe", ctx.self, sizeof(ctx.self) - 1);
    if (self <= 0) {
        snprintf(res->note, sizeof(res->note), "cannot find this program");
        return -1;
    }
    ctx.self[self] = '\0';
    snprintf(ctx.token, sizeof(ctx.token), "weft-perf-delta-%d-%llx", (int)getpid(),
             (unsigned long long)(delta_now_s() * 1e9));
    snprintf(e_text, sizeof(e_text), "%llu", (unsigned long long)experts);
    snprintf(shape, sizeof(shape), "%llux%llu", (unsigned long long)rows, (unsigned long long)cols);
    snprintf(lr_text, sizeof(lr_text), "%.17g", lr);
    snprintf(steps, sizeof(steps), "%llu", (unsigned long long)o->steps);
    snprintf(warmup, sizeof(warmup), "%llu", (unsigned long long)o->warmup);
    snprintf(threads, sizeof(threads), "%llu", (unsigned long long)o->threads);
    case_args[k++] = "--experts";
    case_args[k++] = e_text;
    case_args[k++] = "--shape";
    case_args[k++] = shape;
    case_args[k++] = "--role-optimizer";
    case_args[k++] = algo == WEFT_OPTIM_MUON ? "muon" : "adamw";
    case_args[k++] = "--role-lr";
    case_args[k++] = lr_text;
    case_args[k++] = "--steps";
    case_args[k++] = steps;
    case_args[k++] = "--warmup";
    case_args[k++] = warmup;
    if (o->threads != 0) {
        case_args[k++] = "--threads";
        case_args[k++] = threads;
    }
    if (o->placement != WEFT_OPTIM_HOST) {
        case_args[k++] = "--placement";
        case_args[k++] = delta_placement_name(o->placement);
    }
    if (o->link_gpu) {
        case_args[k++] = "--role-gpu";
    }
    case_args[k] = NULL;
    if (ucx_netns_setup(&ctx, &tr, res->note, sizeof(res->note)) != 0) {
        ucx_netns_teardown(&ctx);
        return geteuid() != 0 || strstr(res->note, "cannot create") != NULL ? 77 : -1;
    }
    if (limit_link(&ctx, &tr, o->link, res->note, sizeof(res->note)) != 0) {
        ucx_netns_teardown(&ctx);
        return 77;
    }
    if (run_mode(&ctx, o, &tr, "off", case_args, &full_ns, &d0, &b0, &full_bytes, &w0, res->note,
                 sizeof(res->note)) == 0 &&
        run_mode(&ctx, o, &tr, "auto", case_args, &delta_ns, &res->deltas_sent, &res->delta_bytes, &f0, &w1,
                 res->note, sizeof(res->note)) == 0) {
        res->versions = o->steps;
        res->full_s = (double)full_ns * 1e-9;
        res->delta_s = (double)delta_ns * 1e-9;
        res->full_bytes = f0;
        res->wrong_bytes = w0 + w1;
        if (d0 != 0) {
            snprintf(res->note, sizeof(res->note), "WEFT_DELTA=off sent %llu deltas", (unsigned long long)d0);
        } else {
            rc = 0;
        }
    }
    unsetenv("WEFT_DELTA");
    ucx_netns_teardown(&ctx);
    return rc;
}
