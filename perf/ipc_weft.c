/*
 * weft-perf ipc's weft measurement: the producer (a GPU registry, every
 * version written on the GPU from the pattern ring) and the consumer
 * (fused engine tensors, a cuda_ipc plan, every byte verified at the end),
 * pulled or pushed; each runs in a process of its own and hands its
 * figures back through the shared mapping.
 */
#include "config.h"

#include "ipc.h"

#ifdef HAVE_CUDA /* without CUDA, weft-perf ipc only says it is skipped */

#include "lib/payload.h"
#include "lib/sysinfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft/registry.h>
#include <weft/transport.h>

#define RING_BYTES  ((UINT64_C(16) << 20) + 4093) /* period of the fill pattern; not a power of 2 */
#define CHECK_CHUNK (UINT64_C(64) << 20)          /* bytes copied back to the host at once */
#define WAIT_US     UINT64_C(120000000)           /* a version's wait, on either side */

/* ------------------------------------------------------------ pattern */

/*
 * Byte i of tensor id at version v is ring[(ring_offset(v, id) + i) mod
 * RING_BYTES], ring a fixed random sequence both sides compute. The
 * producer copies it from a device copy of the ring; the consumer compares
 * against its host copy. A byte of another version, another tensor or
 * another position is wrong with probability 255/256.
 *
 * Not lib/payload.h's words themselves: the producer fills device memory
 * with device-to-device copies from the ring, as no kernel computes the
 * payload on the GPU and uploading every version from the host would take
 * longer than the copy it feeds. The ring's bytes come from the payload's
 * mix: the top byte of payload_mix((i + 1) × PAYLOAD_STEP).
 */
static uint64_t ring_offset(uint64_t version, uint32_t id)
{
    return (version * 1000003u + (uint64_t)id * 7919u) % RING_BYTES;
}

static uint8_t *ring_make(void)
{
    uint8_t *ring = malloc(RING_BYTES);

    if (ring == NULL) {
        fprintf(stderr, "weft-perf ipc: out of memory\n");
        return NULL;
    }
    for (uint64_t i = 0; i < RING_BYTES; i++) {
        ring[i] = (uint8_t)(payload_mix((i + 1) * PAYLOAD_STEP) >> 56);
    }
    return ring;
}

/* Bytes of got[0..n) that differ from the ring from offset off on. */
static uint64_t ring_compare(const uint8_t *got, uint64_t n, uint64_t off, const uint8_t *ring)
{
    uint64_t wrong = 0;

    for (uint64_t pos = 0; pos < n;) {
        uint64_t len = n - pos < RING_BYTES - off ? n - pos : RING_BYTES - off;

        if (memcmp(got + pos, ring + off, len) != 0) {
            for (uint64_t i = 0; i < len; i++) {
                wrong += got[pos + i] != ring[off + i];
            }
        }
        pos += len;
        off = 0;
    }
    return wrong;
}

static int weft_ok(weft_status_t status, const char *what)
{
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf ipc: %s: %s\n", what, weft_status_string(status));
        return 0;
    }
    return 1;
}

/* Keeps the figure of version v (1, 2, ...) unless it is a warm-up one. */
static void sample_add(ipc_samples_t *s, const ipc_options_t *o, uint64_t v, uint64_t ns)
{
    if (v > o->warmup && s->n < MAX_ITERS) {
        s->ns[s->n++] = ns;
    }
}

/* ----------------------------------------------------------- producer */

static weft_status_t create_registry(const char *name, const ipc_case_t *c, const ipc_tensor_t *tensors,
                                     size_t count, weft_registry_h *out)
{
    weft_registry_params_t params = {.field_mask = WEFT_REGISTRY_FIELD_MEMORY | WEFT_REGISTRY_FIELD_MAX_TENSORS,
                                     .max_tensors = (uint32_t)count,
                                     .memory = WEFT_MEMORY_CUDA,
                                     .device = c->src};
    weft_registry_h        reg = NULL;
    weft_status_t          status = weft_registry_create(name, &params, &reg);

    for (size_t i = 0; i < count && status == WEFT_OK; i++) {
        const perf_expert_kind_t *k = &c->w->kind[tensors[i].kind];
        weft_tensor_desc_t        d = {.name = tensors[i].name, .layer = (int32_t)tensors[i].layer,
                                       .expert = (int32_t)tensors[i].expert, .role = k->role, .dtype = k->dtype,
                                       .ndim = 2, .shape = {k->rows, k->cols}};
        uint32_t                  index = 0;

        status = weft_registry_declare(reg, &d, &index);
        if (status == WEFT_OK && index != i) {
            fprintf(stderr, "weft-perf ipc: tensor %zu declared as index %u\n", i, index);
            status = WEFT_ERR_STATE;
        }
    }
    if (status == WEFT_OK) {
        status = weft_registry_seal(reg);
    }
    if (status != WEFT_OK) {
        if (reg != NULL) {
            (void)weft_registry_close(reg);
            (void)weft_registry_unlink(name);
        }
        return status;
    }
    *out = reg;
    return WEFT_OK;
}

/* Copies the tensor's pattern from the device ring into dst. */
static int fill_tensor(uint8_t *dst, uint64_t bytes, uint64_t off, const uint8_t *ring_dev, cudaStream_t stream)
{
    for (uint64_t pos = 0; pos < bytes;) {
        uint64_t len = bytes - pos < RING_BYTES - off ? bytes - pos : RING_BYTES - off;

        if (!CU(cudaMemcpyAsync(dst + pos, ring_dev + off, len, cudaMemcpyDeviceToDevice, stream))) {
            return -1;
        }
        pos += len;
        off = 0;
    }
    return 0;
}

/* Consumers register as they start: wait for the one of this case, so
 * that no version is published to nobody. */
static int wait_for_consumer(weft_registry_h reg)
{
    uint64_t deadline = perf_now_ns() + WAIT_US * 1000;

    for (;;) {
        weft_registry_stats_t stats;

        if (!weft_ok(weft_registry_get_stats(reg, &stats), "weft_registry_get_stats")) {
            return -1;
        }
        if (stats.consumers >= 1) {
            return 0;
        }
        if (perf_interrupted || perf_now_ns() > deadline) {
            fprintf(stderr, "weft-perf ipc: no consumer registered\n");
            return -1;
        }
        perf_sleep_us(1000);
    }
}

/* What a producer process holds: the registry and the pattern's source. */
typedef struct ipc_producer {
    ipc_tensor_t   *tensors;
    size_t          count;
    uint8_t        *ring, *ring_dev;
    cudaStream_t    stream;
    weft_registry_h reg;
} ipc_producer_t;

/* The first CUDA call: this process's context is on the source GPU. */
static int producer_open(ipc_ctx_t *ctx, const ipc_case_t *c, ipc_producer_t *p)
{
    memset(p, 0, sizeof(*p));
    p->tensors = ipc_tensor_list(c->w, ctx->o->by_expert, &p->count);
    p->ring = ring_make();
    if (p->tensors == NULL || p->ring == NULL || !CU(cudaSetDevice(c->src)) ||
        !CU(cudaMalloc((void **)&p->ring_dev, RING_BYTES)) ||
        !CU(cudaMemcpy(p->ring_dev, p->ring, RING_BYTES, cudaMemcpyHostToDevice)) ||
        !CU(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking)) ||
        !weft_ok(create_registry(ctx->registry, c, p->tensors, p->count, &p->reg), "GPU registry")) {
        return -1;
    }
    return 0;
}

static void producer_close(ipc_ctx_t *ctx, ipc_producer_t *p)
{
    if (p->reg != NULL) {
        (void)weft_ok(weft_registry_close(p->reg), "weft_registry_close");
        (void)weft_registry_unlink(ctx->registry);
    }
    if (p->stream != NULL) {
        (void)CU(cudaStreamDestroy(p->stream));
    }
    if (p->ring_dev != NULL) {
        (void)CU(cudaFree(p->ring_dev));
    }
    free(p->ring);
    free(p->tensors);
}

/* Version v: write every tensor on the GPU, publish, wait for the ack.
 * *e2e_ns: from just before the publish to the wait's return, which is
 * what a trainer waits for in either mode. */
static int publish_version(ipc_producer_t *p, const ipc_case_t *c, uint64_t v, uint64_t *e2e_ns)
{
    uint32_t lagging = 0;
    uint64_t t0;

    if (!weft_ok(weft_registry_write_begin(p->reg, WAIT_US, NULL), "weft_registry_write_begin")) {
        return -1;
    }
    for (size_t i = 0; i < p->count; i++) {
        void *data = NULL;

        if (!weft_ok(weft_registry_write_tensor(p->reg, (uint32_t)i, &data), "weft_registry_write_tensor") ||
            fill_tensor(data, perf_expert_kind_bytes(&c->w->kind[p->tensors[i].kind]),
                        ring_offset(v, p->tensors[i].id), p->ring_dev, p->stream) != 0) {
            return -1;
        }
    }
    if (!CU(cudaStreamSynchronize(p->stream))) {
        return -1;
    }
    t0 = perf_now_ns();
    if (!weft_ok(weft_registry_publish(p->reg, v, NULL), "weft_registry_publish") ||
        !weft_ok(weft_registry_wait_consumers(p->reg, v, WAIT_US, &lagging), "weft_registry_wait_consumers")) {
        return -1;
    }
    *e2e_ns = perf_now_ns() - t0;
    return 0;
}

/*
 * What the push server counted for version v, whose wait returned: the
 * server counts a transfer (versions_sent, bytes_sent, transfer_ns) before
 * it records it, so it is in `after` (its last_version is set only after
 * the record: not compared). Exactly one transfer of every byte, else the
 * figure would not be this version's. *transfer_ns: its time, from the
 * lease to the copy done.
 */
static int push_counted(weft_server_h server, const weft_server_stats_t *before, uint64_t v, uint64_t bytes,
                        uint64_t *transfer_ns)
{
    weft_server_stats_t after;

    if (!weft_ok(weft_server_get_stats(server, &after), "weft_server_get_stats")) {
        return -1;
    }
    if (after.versions_sent != before->versions_sent + 1 || after.bytes_sent - before->bytes_sent != bytes) {
        fprintf(stderr,
                "weft-perf ipc: push: version %llu: the server counted %llu transfers of %llu bytes in all, not 1 "
                "of %llu\n",
                (unsigned long long)v, (unsigned long long)(after.versions_sent - before->versions_sent),
                (unsigned long long)(after.bytes_sent - before->bytes_sent), (unsigned long long)bytes);
        return -1;
    }
    *transfer_ns = after.transfer_ns - before->transfer_ns;
    return 0;
}

/* Every version in turn, each timed end to end into e2e. With a push
 * server (else NULL), also the server's transfer time into transfer. */
static int publish_versions(ipc_ctx_t *ctx, const ipc_case_t *c, ipc_producer_t *p, weft_server_h server,
                            ipc_samples_t *e2e, ipc_samples_t *transfer)
{
    const uint64_t versions = ctx->o->warmup + ctx->o->iters;

    for (uint64_t v = 1; v <= versions; v++) {
        weft_server_stats_t before = {0};
        uint64_t            e2e_ns = 0, transfer_ns = 0;

        if (perf_interrupted ||
            (server != NULL && !weft_ok(weft_server_get_stats(server, &before), "weft_server_get_stats")) ||
            publish_version(p, c, v, &e2e_ns) != 0 ||
            (server != NULL && push_counted(server, &before, v, ipc_workload_bytes(c->w), &transfer_ns) != 0)) {
            fprintf(stderr, "weft-perf ipc: producer%s: version %llu failed\n", server != NULL ? " (push)" : "",
                    (unsigned long long)v);
            return -1;
        }
        sample_add(e2e, ctx->o, v, e2e_ns);
        if (server != NULL) {
            sample_add(transfer, ctx->o, v, transfer_ns);
        }
    }
    return 0;
}

int ipc_producer_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    ipc_producer_t p;
    int            rc = 1;

    if (producer_open(ctx, c, &p) == 0 && wait_for_consumer(p.reg) == 0 &&
        publish_versions(ctx, c, &p, NULL, &ctx->sh->weft.e2e, NULL) == 0) {
        rc = 0;
    }
    producer_close(ctx, &p);
    return rc;
}

/* The push server, on loopback. Its port goes to the consumer process
 * through the shared mapping: both were forked before either had CUDA. */
static int start_push_server(ipc_ctx_t *ctx, weft_registry_h reg, weft_server_h *server)
{
    const weft_server_params_t params = {.transport = WEFT_TRANSPORT_CUDA_IPC, .listen = "127.0.0.1:0",
                                         .token = ctx->token};
    uint16_t                   port = 0;

    if (!weft_ok(weft_server_create(reg, &params, server), "weft_server_create (cuda_ipc)") ||
        !weft_ok(weft_server_port(*server, &port), "weft_server_port")) {
        return -1;
    }
    atomic_store(&ctx->sh->push.port, port);
    return 0;
}

/* After the last version the consumer verifies its views and leaves; the
 * server unmaps them before it closes the connection, which is what the
 * consumer's weft_remote_close() waits for. Destroying the server first
 * would drop the consumer instead of letting it leave. */
static int wait_for_departure(weft_server_h server)
{
    const uint64_t deadline = perf_now_ns() + WAIT_US * 1000;

    for (;;) {
        weft_server_stats_t stats;

        if (!weft_ok(weft_server_get_stats(server, &stats), "weft_server_get_stats")) {
            return -1;
        }
        if (stats.consumers == 0) {
            return 0;
        }
        if (perf_interrupted || perf_now_ns() > deadline) {
            fprintf(stderr, "weft-perf ipc: push: the consumer did not leave\n");
            return -1;
        }
        perf_sleep_us(1000);
    }
}

/* The producer of the push mode: the same registry and versions, copied
 * into the consumer's views by this process's server. */
int ipc_push_producer_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    ipc_producer_t p;
    weft_server_h  server = NULL;
    int            rc = 1;

    if (producer_open(ctx, c, &p) == 0 && start_push_server(ctx, p.reg, &server) == 0 &&
        wait_for_consumer(p.reg) == 0 &&
        publish_versions(ctx, c, &p, server, &ctx->sh->push.e2e, &ctx->sh->push.transfer) == 0 &&
        wait_for_departure(server) == 0) {
        rc = 0;
    }
    /* Before the registry: the server copies out of its arenas. */
    if (server != NULL) {
        (void)weft_ok(weft_server_destroy(server), "weft_server_destroy");
    }
    producer_close(ctx, &p);
    return rc;
}

/* ----------------------------------------------------------- consumer */

/* Opens the registry once the producer has sealed it. */
static int open_registry(const char *name, weft_registry_h *reg)
{
    uint64_t deadline = perf_now_ns() + WAIT_US * 1000;

    for (;;) {
        weft_status_t status = weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, reg);

        if (status == WEFT_OK) {
            return 0;
        }
        if ((status != WEFT_ERR_NOT_FOUND && status != WEFT_ERR_STATE) || perf_interrupted ||
            perf_now_ns() > deadline) {
            return weft_ok(status, "weft_registry_open") - 1;
        }
        perf_sleep_us(1000);
    }
}

/* The engine's tensors: per layer and kind, all experts side by side
 * (SGLang's w13_weight[E, 2I, H] and the like), allocated once. */
static int alloc_fused(const ipc_workload_t *w, uint8_t **fused)
{
    for (uint64_t l = 0; l < w->layers; l++) {
        for (uint32_t k = 0; k < w->kinds; k++) {
            uint64_t bytes = perf_expert_kind_bytes(&w->kind[k]) * w->experts;
            uint8_t **f = &fused[l * w->kinds + k];

            if (!CU(cudaMalloc((void **)f, bytes)) || !CU(cudaMemset(*f, 0, bytes))) {
                return -1;
            }
        }
    }
    return 0;
}

/* Expert e's tensor of one kind: a contiguous slice of the fused tensor. */
static uint8_t *view_data(const ipc_workload_t *w, uint8_t *const *fused, const ipc_tensor_t *t)
{
    return fused[t->layer * w->kinds + t->kind] + t->expert * perf_expert_kind_bytes(&w->kind[t->kind]);
}

static void build_views(const ipc_workload_t *w, uint8_t *const *fused, const ipc_tensor_t *tensors, size_t count,
                        weft_recv_view_t *views)
{
    for (size_t i = 0; i < count; i++) {
        const perf_expert_kind_t *k = &w->kind[tensors[i].kind];

        views[i] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_MEMORY, .name = tensors[i].name,
                                      .role = k->role, .dtype = k->dtype, .ndim = 2,
                                      .shape = {k->rows, k->cols}, .data = view_data(w, fused, &tensors[i]),
                                      .memory = WEFT_MEMORY_CUDA};
    }
}

/* Every version in turn; the copies after the warm-up are timed. */
static int receive_versions(ipc_ctx_t *ctx, weft_registry_h reg, weft_plan_h plan, uint32_t consumer)
{
    const uint64_t versions = ctx->o->warmup + ctx->o->iters;
    uint64_t       last = 0, received = 0;

    while (last < versions) {
        weft_lease_t  lease;
        weft_status_t copied, released;
        uint64_t      t0, t1;

        if (perf_interrupted || !weft_ok(weft_registry_wait(reg, last, WAIT_US, &lease), "weft_registry_wait")) {
            return -1;
        }
        t0 = perf_now_ns();
        copied = weft_plan_copy(plan, &lease);
        t1 = perf_now_ns();
        released = weft_registry_release(reg, &lease);
        if (!weft_ok(copied, "weft_plan_copy") || !weft_ok(released, "weft_registry_release")) {
            (void)weft_registry_consumer_failed(reg, consumer, lease.version,
                                                copied != WEFT_OK ? copied : released);
            return -1;
        }
        if (!weft_ok(weft_registry_consumer_received(reg, consumer, lease.version),
                     "weft_registry_consumer_received")) {
            return -1;
        }
        if (received++ >= ctx->o->warmup && ctx->sh->weft.n < MAX_ITERS) {
            ctx->sh->weft.ns[ctx->sh->weft.n++] = t1 - t0;
        }
        last = lease.version;
    }
    ctx->sh->weft.last_version = last;
    return 0;
}

/* Copies every view back to the host and compares it with the pattern
 * of `version`, into *check. Returns -1 when a copy fails. */
static int verify_views(const ipc_workload_t *w, uint8_t *const *fused, const ipc_tensor_t *tensors, size_t count,
                        uint64_t version, ipc_check_t *check)
{
    uint8_t *ring = ring_make(), *host = malloc(CHECK_CHUNK);
    int      rc = -1;

    if (ring == NULL || host == NULL) {
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        const uint8_t *data = view_data(w, fused, &tensors[i]);
        uint64_t       bytes = perf_expert_kind_bytes(&w->kind[tensors[i].kind]);
        uint64_t       off = ring_offset(version, tensors[i].id);

        for (uint64_t pos = 0; pos < bytes; pos += CHECK_CHUNK) {
            uint64_t len = bytes - pos < CHECK_CHUNK ? bytes - pos : CHECK_CHUNK;

            if (!CU(cudaMemcpy(host, data + pos, len, cudaMemcpyDeviceToHost))) {
                goto out;
            }
            check->wrong_bytes += ring_compare(host, len, (off + pos) % RING_BYTES, ring);
            check->verified_bytes += len;
        }
    }
    check->verified = 1;
    rc = 0;
out:
    free(ring);
    free(host);
    return rc;
}

/* What a consumer process holds: the engine's fused tensors and one view
 * per registry tensor into them. */
typedef struct ipc_engine {
    ipc_tensor_t     *tensors;
    size_t            count, nfused;
    weft_recv_view_t *views;
    uint8_t         **fused;
} ipc_engine_t;

static int engine_open(ipc_ctx_t *ctx, const ipc_case_t *c, ipc_engine_t *e)
{
    memset(e, 0, sizeof(*e));
    e->nfused = (size_t)(c->w->layers * c->w->kinds);
    e->tensors = ipc_tensor_list(c->w, ctx->o->by_expert, &e->count);
    e->views = calloc(e->count ? e->count : 1, sizeof(*e->views));
    e->fused = calloc(e->nfused, sizeof(*e->fused));
    if (e->tensors == NULL || e->views == NULL || e->fused == NULL) {
        fprintf(stderr, "weft-perf ipc: out of memory\n");
        return -1;
    }
    /* The first CUDA call: this process's context is on the destination. */
    if (!CU(cudaSetDevice(c->dst)) || alloc_fused(c->w, e->fused) != 0) {
        return -1;
    }
    build_views(c->w, e->fused, e->tensors, e->count, e->views);
    return 0;
}

static void engine_close(ipc_engine_t *e)
{
    for (size_t i = 0; e->fused != NULL && i < e->nfused; i++) {
        if (e->fused[i] != NULL) {
            (void)CU(cudaFree(e->fused[i]));
        }
    }
    free(e->fused);
    free(e->views);
    free(e->tensors);
}

int ipc_consumer_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    ipc_engine_t      e;
    weft_registry_h   reg = NULL;
    weft_plan_h       plan = NULL;
    weft_plan_stats_t stats;
    uint32_t          consumer = 0;
    int               rc = 1;

    if (engine_open(ctx, c, &e) != 0 || open_registry(ctx->registry, &reg) != 0 ||
        !weft_ok(weft_registry_consumer_register(reg, "weft-perf-ipc", &consumer), "consumer_register") ||
        !weft_ok(weft_plan_create(reg, WEFT_TRANSPORT_CUDA_IPC, e.views, e.count, &plan), "weft_plan_create") ||
        !weft_ok(weft_plan_get_stats(plan, &stats), "weft_plan_get_stats")) {
        goto out;
    }
    ctx->sh->weft.tensors = stats.tensor_count;
    ctx->sh->weft.ranges = stats.range_count;
    ctx->sh->weft.ranges_uncoalesced = stats.ranges_uncoalesced;
    ctx->sh->weft.plan_bytes = stats.bytes;
    if (receive_versions(ctx, reg, plan, consumer) != 0 ||
        verify_views(c->w, e.fused, e.tensors, e.count, ctx->sh->weft.last_version, &ctx->sh->weft.check) != 0) {
        goto out;
    }
    rc = ctx->sh->weft.check.wrong_bytes == 0 ? 0 : 5;
out:
    (void)weft_ok(weft_plan_destroy(plan), "weft_plan_destroy");
    (void)weft_ok(weft_registry_close(reg), "weft_registry_close");
    engine_close(&e);
    return rc;
}

/* The push server's "host:port", once its producer has published it. */
static int wait_for_server(ipc_ctx_t *ctx, char *addr, size_t size)
{
    const uint64_t deadline = perf_now_ns() + WAIT_US * 1000;

    for (;;) {
        uint32_t port = atomic_load(&ctx->sh->push.port);

        if (port != 0) {
            snprintf(addr, size, "127.0.0.1:%u", (unsigned)port);
            return 0;
        }
        if (perf_interrupted || perf_now_ns() > deadline) {
            fprintf(stderr, "weft-perf ipc: push: the producer's server did not start\n");
            return -1;
        }
        perf_sleep_us(1000);
    }
}

/* Every pushed version in turn; each is in the views when it is returned
 * (the server's copy completed before its notice). The producer waits for
 * each before it publishes the next, so none may be skipped. */
static int receive_pushed(ipc_ctx_t *ctx, weft_remote_h remote)
{
    const uint64_t versions = ctx->o->warmup + ctx->o->iters;
    uint64_t       last = 0;

    while (last < versions) {
        uint64_t v = 0;

        if (perf_interrupted || !weft_ok(weft_remote_receive(remote, last, WAIT_US, &v), "weft_remote_receive")) {
            return -1;
        }
        if (v != last + 1) {
            fprintf(stderr, "weft-perf ipc: push: version %llu came after %llu\n", (unsigned long long)v,
                    (unsigned long long)last);
            return -1;
        }
        last = v;
    }
    ctx->sh->push.last_version = last;
    return 0;
}

/* The consumer of the push mode: the same engine tensors and views,
 * exported to the producer's server, whose process copies into them. This
 * process does no GPU work until the last version is in. */
int ipc_push_consumer_main(ipc_ctx_t *ctx, const ipc_case_t *c)
{
    char                       addr[32] = "";
    const weft_remote_params_t params = {.transport = WEFT_TRANSPORT_CUDA_IPC, .server = addr,
                                         .token = ctx->token, .name = "weft-perf-ipc-push"};
    ipc_engine_t               e;
    weft_remote_h              remote = NULL;
    int                        rc = 1;

    if (engine_open(ctx, c, &e) != 0 || wait_for_server(ctx, addr, sizeof(addr)) != 0 ||
        !weft_ok(weft_remote_connect(&params, e.views, e.count, &remote), "weft_remote_connect (cuda_ipc)") ||
        receive_pushed(ctx, remote) != 0 ||
        verify_views(c->w, e.fused, e.tensors, e.count, ctx->sh->push.last_version, &ctx->sh->push.check) != 0) {
        goto out;
    }
    rc = ctx->sh->push.check.wrong_bytes == 0 ? 0 : 5;
out:
    /* Before the memory goes: the server maps it until the close returns. */
    (void)weft_ok(weft_remote_close(remote), "weft_remote_close");
    engine_close(&e);
    return rc;
}

#endif /* HAVE_CUDA */
