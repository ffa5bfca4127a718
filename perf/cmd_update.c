/*
 * weft-perf update: the main job. A producer publishes model-shaped
 * versions of MoE expert weights (W, WT and block scales of every expert's
 * gate_up_proj and down_proj) into a registry in host memory; consumer
 * processes, laid out like an SGLang engine (fused w13/w2 tensors, one view
 * per expert), receive every version through the host transport and verify
 * every byte. Reports versions, bytes, bandwidth and publish latency.
 *
 * The payload is real: the producer keeps FP32 masters of each expert
 * matrix (gate_up [2I, H], down [H, I]), gives them new values every
 * version (a hash of version, layer, expert and element, standing in for an
 * optimizer step) and quantizes them with the host FP8 writer straight into
 * the W, WT and scale_inv tensors of the version being written. Consumers
 * derive the same masters, quantize them themselves and compare every byte
 * they received with what they computed.
 */
#include "args.h"
#include "json.h"
#include "perf.h"
#include "proc.h"
#include "stats.h"
#include "sysinfo.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <weft/weft.h>

#define MAX_VERSIONS 10000
#define KINDS        6 /* gate_up W, WT, scale; down W, WT, scale */
#define PROJS        2 /* gate_up, down: kinds 3p .. 3p + 2 */

typedef struct update_options {
    uint64_t layers, experts, hidden, intermediate, versions, consumers, slots, block;
    int      json;
} update_options_t;

/* One kind of expert tensor: its name suffix, role, dtype and shape. */
typedef struct tensor_kind {
    const char        *proj;
    const char        *suffix;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint64_t           rows, cols;
} tensor_kind_t;

/* Shared with the consumers (MAP_SHARED before fork): when each version
 * was published, and what each consumer saw. */
typedef struct update_shared {
    uint64_t publish_ns[MAX_VERSIONS + 1];
    struct {
        uint64_t wake_ns[MAX_VERSIONS + 1];
        uint64_t versions, wrong_bytes, verified_bytes, verify_ns;
        int      status;
    } consumer[PERF_CHILDREN_MAX];
} update_shared_t;

static void kinds_for(const update_options_t *o, tensor_kind_t kinds[KINDS])
{
    uint64_t up = 2 * o->intermediate, b = o->block;
    const tensor_kind_t k[KINDS] = {
        {"gate_up_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, up, o->hidden},
        {"gate_up_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, o->hidden, up},
        {"gate_up_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, (up + b - 1) / b,
         (o->hidden + b - 1) / b},
        {"down_proj", "weight", WEFT_ROLE_W, WEFT_DTYPE_FP8_E4M3, o->hidden, o->intermediate},
        {"down_proj", "weight_t", WEFT_ROLE_WT, WEFT_DTYPE_FP8_E4M3, o->intermediate, o->hidden},
        {"down_proj", "weight_scale_inv", WEFT_ROLE_SCALE, WEFT_DTYPE_FP32, (o->hidden + b - 1) / b,
         (o->intermediate + b - 1) / b},
    };
    memcpy(kinds, k, sizeof(k));
}

static void tensor_name(char *buf, size_t size, uint64_t layer, uint64_t expert, const tensor_kind_t *k)
{
    snprintf(buf, size, "model.layers.%llu.mlp.experts.%llu.%s.%s", (unsigned long long)layer,
             (unsigned long long)expert, k->proj, k->suffix);
}

static uint64_t kind_bytes(const tensor_kind_t *k)
{
    return k->rows * k->cols * weft_dtype_size(k->dtype);
}

static uint32_t hash32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7feb352dU;
    h ^= h >> 15;
    h *= 0x846ca68bU;
    h ^= h >> 16;
    return h;
}

/*
 * The FP32 master of one expert matrix at `version`: uniform values whose
 * range, 0.005 to 0.08, changes from row to row (so the block scales
 * differ) and everything from version to version. Producer and consumers
 * compute the same floats.
 */
static void master_fill(float *x, uint64_t rows, uint64_t cols, uint64_t version, uint64_t layer,
                        uint64_t expert, int proj)
{
    uint32_t seed = hash32((uint32_t)version * 0x9e3779b9U ^ hash32((uint32_t)(layer * 4096 + expert) * 2 +
                                                                     (uint32_t)proj));

    for (uint64_t r = 0; r < rows; r++) {
        uint32_t rs = hash32(seed ^ (uint32_t)r);
        float    amp = (0.005f + 0.075f * (float)(rs >> 8) / 16777216.0f) / 2147483648.0f;
        float   *row = x + r * cols;

        for (uint64_t c = 0; c < cols; c++) {
            uint32_t h = ((uint32_t)c + rs) * 0x9e3779b1U;
            h ^= h >> 15;
            h *= 0x85ebca77U;
            h ^= h >> 13;
            row[c] = (float)(int32_t)h * amp;
        }
    }
}

/* Room for the larger of the two masters. */
static size_t master_bytes(const update_options_t *o)
{
    uint64_t up = 2 * o->intermediate * o->hidden, down = o->hidden * o->intermediate;

    return (size_t)(up > down ? up : down) * sizeof(float);
}

/* The FP8 writer on one expert matrix: W, WT and scale_inv where asked. */
static weft_status_t quantize(const update_options_t *o, const float *master, const tensor_kind_t *w_kind,
                              void *w, void *wt, void *scale_inv)
{
    weft_quant_params_t p = {.field_mask = WEFT_QUANT_PARAM_BLOCK, .block = (uint32_t)o->block};
    weft_quant_matrix_t m = {.x = master, .w = w, .wt = wt, .scale_inv = scale_inv};

    return weft_quant_host(&p, WEFT_DTYPE_FP32, w_kind->rows, w_kind->cols, &m, 1);
}

/* Bytes that differ; 0 for equal buffers (memcmp first: the usual case). */
static uint64_t bytes_differing(const uint8_t *a, const uint8_t *b, uint64_t n)
{
    uint64_t wrong = 0;

    if (memcmp(a, b, n) != 0) {
        for (uint64_t i = 0; i < n; i++) {
            wrong += a[i] != b[i];
        }
    }
    return wrong;
}

/* Tensor index in declaration order: layer, kind, expert. Declaring all
 * experts of one kind together puts them side by side in the slot, as the
 * consumer's fused tensors have them: the plan coalesces the copies. */
static uint32_t tensor_index(const update_options_t *o, uint64_t layer, int kind, uint64_t expert)
{
    return (uint32_t)((layer * KINDS + (uint64_t)kind) * o->experts + expert);
}

static weft_status_t producer_create(const char *name, const update_options_t *o, weft_registry_h *out)
{
    weft_registry_params_t params = {
        .field_mask = WEFT_REGISTRY_PARAM_SLOTS | WEFT_REGISTRY_PARAM_MAX_TENSORS,
        .slot_count = (uint32_t)o->slots,
        .max_tensors = (uint32_t)(o->layers * KINDS * o->experts)};
    tensor_kind_t   kinds[KINDS];
    weft_registry_h reg;
    weft_status_t   status;

    kinds_for(o, kinds);
    status = weft_registry_create(name, &params, &reg);
    if (status != WEFT_OK) {
        return status;
    }
    for (uint64_t l = 0; l < o->layers; l++) {
        for (int k = 0; k < KINDS; k++) {
            for (uint64_t e = 0; e < o->experts; e++) {
                char               tname[WEFT_TENSOR_NAME_MAX];
                weft_tensor_desc_t d = {.field_mask = WEFT_TENSOR_FIELD_BLOCK, .name = tname,
                                        .layer = (int32_t)l, .expert = (int32_t)e, .role = kinds[k].role,
                                        .dtype = kinds[k].dtype, .ndim = 2,
                                        .shape = {kinds[k].rows, kinds[k].cols},
                                        .block = {(uint32_t)o->block, (uint32_t)o->block}};
                tensor_name(tname, sizeof(tname), l, e, &kinds[k]);
                status = weft_registry_declare(reg, &d, NULL);
                if (status != WEFT_OK) {
                    goto err;
                }
            }
        }
    }
    status = weft_registry_seal(reg);
    if (status != WEFT_OK) {
        goto err;
    }
    *out = reg;
    return WEFT_OK;
err:
    weft_registry_close(reg);
    weft_registry_unlink(name);
    return status;
}

/* A consumer process: its own fused buffers (per layer and kind, experts
 * side by side), one view per expert tensor, then every version. */
static int consumer_main(const char *name, const update_options_t *o, update_shared_t *shared, int id)
{
    size_t            count = (size_t)(o->layers * KINDS * o->experts);
    weft_recv_view_t *views = calloc(count, sizeof(*views));
    char            (*names)[WEFT_TENSOR_NAME_MAX] = calloc(count, sizeof(*names));
    uint8_t          *buffers[64][KINDS];
    uint8_t          *expect[KINDS] = {NULL};
    float            *master = NULL;
    int               oom = 0;
    tensor_kind_t     kinds[KINDS];
    weft_registry_h   reg = NULL;
    weft_plan_h       plan = NULL;
    uint32_t          consumer;
    uint64_t          last = 0;
    char              label[32];
    weft_status_t     status;

    kinds_for(o, kinds);
    memset(buffers, 0, sizeof(buffers));
    /* What this consumer computes itself for one expert: its master, and
     * the W, WT and scales it must have received. */
    master = malloc(master_bytes(o));
    for (int k = 0; k < KINDS; k++) {
        expect[k] = malloc(kind_bytes(&kinds[k]));
        oom |= expect[k] == NULL;
    }
    if (views == NULL || names == NULL || master == NULL || oom) {
        fprintf(stderr, "consumer %d: out of memory\n", id);
        return 3;
    }
    status = weft_registry_open(name, WEFT_REGISTRY_OPEN_READ, &reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "consumer %d: open: %s\n", id, weft_status_string(status));
        return 3;
    }
    for (uint64_t l = 0; l < o->layers; l++) {
        for (int k = 0; k < KINDS; k++) {
            /* What SGLang calls w13_weight[E, 2I, H], its transpose, its
             * scales, and the same for w2. */
            buffers[l][k] = malloc(kind_bytes(&kinds[k]) * o->experts);
            if (buffers[l][k] == NULL) {
                fprintf(stderr, "consumer %d: out of memory\n", id);
                return 3;
            }
            for (uint64_t e = 0; e < o->experts; e++) {
                size_t            i = tensor_index(o, l, k, e);
                weft_recv_view_t *v = &views[i];

                tensor_name(names[i], sizeof(names[i]), l, e, &kinds[k]);
                v->name = names[i];
                v->role = kinds[k].role;
                v->dtype = kinds[k].dtype;
                v->ndim = 2;
                v->shape[0] = kinds[k].rows;
                v->shape[1] = kinds[k].cols;
                v->data = buffers[l][k] + e * kind_bytes(&kinds[k]);
                v->memory = WEFT_MEMORY_HOST;
            }
        }
    }
    snprintf(label, sizeof(label), "update-consumer-%d", id);
    status = weft_registry_consumer_register(reg, label, &consumer);
    if (status == WEFT_OK) {
        status = weft_plan_create(reg, WEFT_TRANSPORT_HOST, views, count, &plan);
    }
    if (status != WEFT_OK) {
        fprintf(stderr, "consumer %d: setup: %s\n", id, weft_status_string(status));
        return 3;
    }
    while (last < o->versions) {
        weft_lease_t lease;

        status = weft_registry_wait(reg, last, 120000000, &lease);
        if (status != WEFT_OK) {
            fprintf(stderr, "consumer %d: wait after %llu: %s\n", id, (unsigned long long)last,
                    weft_status_string(status));
            return 4;
        }
        shared->consumer[id].wake_ns[lease.version <= MAX_VERSIONS ? lease.version : 0] = perf_now_ns();
        status = weft_plan_copy(plan, &lease);
        weft_registry_release(reg, &lease);
        if (status != WEFT_OK) {
            weft_registry_consumer_failed(reg, consumer, lease.version, status);
            return 4;
        }
        last = lease.version;
        /* Received: every byte landed. Verifying comes after, on the
         * consumer's own buffers, which the next copy alone changes. */
        weft_registry_consumer_received(reg, consumer, last);
        /* Every byte of every tensor, in the consumer's own layout,
         * against the writer's output on this version's masters. */
        {
            uint64_t t0 = perf_now_ns();

            for (uint64_t l = 0; l < o->layers; l++) {
                for (int p = 0; p < PROJS; p++) {
                    const tensor_kind_t *kw = &kinds[3 * p];

                    for (uint64_t e = 0; e < o->experts; e++) {
                        master_fill(master, kw->rows, kw->cols, last, l, e, p);
                        status = quantize(o, master, kw, expect[3 * p], expect[3 * p + 1], expect[3 * p + 2]);
                        if (status != WEFT_OK) {
                            fprintf(stderr, "consumer %d: quantize: %s\n", id, weft_status_string(status));
                            return 4;
                        }
                        for (int k = 3 * p; k < 3 * p + 3; k++) {
                            uint64_t bytes = kind_bytes(&kinds[k]);

                            shared->consumer[id].wrong_bytes +=
                                bytes_differing(buffers[l][k] + e * bytes, expect[k], bytes);
                            shared->consumer[id].verified_bytes += bytes;
                        }
                    }
                }
            }
            shared->consumer[id].verify_ns += perf_now_ns() - t0;
        }
        shared->consumer[id].versions++;
    }
    weft_plan_destroy(plan);
    weft_registry_close(reg);
    for (int k = 0; k < KINDS; k++) {
        free(expect[k]);
    }
    free(master);
    return shared->consumer[id].wrong_bytes == 0 ? 0 : 5;
}

static int update_usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf update [options]\n"
            "  A producer quantizes FP32 masters of MoE expert weights into FP8 (W, WT,\n"
            "  scales) in a host-memory registry; consumers receive every version and\n"
            "  verify every byte against their own quantization of the same masters.\n"
            "  --layers N        MoE layers (2)\n"
            "  --experts N       experts per layer (128)\n"
            "  --hidden N        hidden size H (2048)\n"
            "  --intermediate N  expert intermediate size I; gate_up is [2I, H] (768)\n"
            "  --versions N      versions to publish (5)\n"
            "  --consumers N     consumer processes (2)\n"
            "  --slots N         registry slots (3)\n"
            "  --block N         FP8 block size, a power of two up to 1024 (128)\n"
            "  --json            one JSON object instead of the table\n"
            "The default is Qwen3-30B-A3B's expert shapes, 2 layers: 2.4 GB a version;\n"
            "shared memory needs slots × that, each consumer one more; FP32 masters\n"
            "are made one expert matrix at a time (75 MB a process).\n");
    return out == stdout ? 0 : 2;
}

static int update_parse(int argc, char **argv, update_options_t *o)
{
    static const struct option longopts[] = {
        {"layers", required_argument, NULL, 'l'},   {"experts", required_argument, NULL, 'e'},
        {"hidden", required_argument, NULL, 'H'},   {"intermediate", required_argument, NULL, 'I'},
        {"versions", required_argument, NULL, 'v'}, {"consumers", required_argument, NULL, 'c'},
        {"slots", required_argument, NULL, 's'},    {"block", required_argument, NULL, 'b'},
        {"json", no_argument, NULL, 'j'},           {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int opt;

    *o = (update_options_t){.layers = 2, .experts = 128, .hidden = 2048, .intermediate = 768, .versions = 5,
                            .consumers = 2, .slots = 3, .block = 128};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'l': bad = perf_arg_u64("--layers", optarg, 1, 64, &o->layers); break;
        case 'e': bad = perf_arg_u64("--experts", optarg, 1, 4096, &o->experts); break;
        case 'H': bad = perf_arg_u64("--hidden", optarg, 1, 65536, &o->hidden); break;
        case 'I': bad = perf_arg_u64("--intermediate", optarg, 1, 65536, &o->intermediate); break;
        case 'v': bad = perf_arg_u64("--versions", optarg, 1, MAX_VERSIONS, &o->versions); break;
        case 'c': bad = perf_arg_u64("--consumers", optarg, 1, 64, &o->consumers); break;
        case 's': bad = perf_arg_u64("--slots", optarg, 2, 16, &o->slots); break;
        case 'b': bad = perf_arg_u64("--block", optarg, 1, 1024, &o->block); break;
        case 'j': o->json = 1; break;
        case 'h': return update_usage(stdout) + 1;
        default: return update_usage(stderr);
        }
        if (bad) {
            return 2;
        }
    }
    if (optind != argc || (o->block & (o->block - 1)) != 0) {
        fprintf(stderr, "weft-perf update: unexpected argument, or --block not a power of two\n");
        return 2;
    }
    if (o->layers * KINDS * o->experts > (1u << 20)) {
        fprintf(stderr, "weft-perf update: more than 2^20 tensors\n");
        return 2;
    }
    return 0;
}

int perf_cmd_update(int argc, char **argv)
{
    update_options_t      o;
    update_shared_t      *shared;
    perf_children_t       children = {0};
    weft_registry_h       reg = NULL;
    weft_registry_stats_t stats;
    weft_status_t         status;
    char                  name[64];
    uint64_t             *wake = NULL, fill_ns = 0, publish_call_ns = 0, ack_ns = 0, start, wrong = 0;
    uint64_t              quant_ns = 0, verify_ns = 0, verified_versions = 0;
    tensor_kind_t         kinds[KINDS];
    float                *master = NULL;
    size_t                nwake = 0;
    perf_latency_t        lat;
    int                   rc = 0;

    rc = update_parse(argc, argv, &o);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    wake = calloc(o.versions * o.consumers, sizeof(*wake));
    if (shared == MAP_FAILED || wake == NULL || perf_catch_interrupts() != 0) {
        fprintf(stderr, "weft-perf update: out of memory\n");
        return 1;
    }
    snprintf(name, sizeof(name), "weft-perf-update-%d", (int)getpid());
    status = producer_create(name, &o, &reg);
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf update: registry: %s (is /dev/shm large enough?)\n",
                weft_status_string(status));
        return 1;
    }
    for (uint64_t c = 0; c < o.consumers; c++) {
        pid_t pid = perf_fork(&children);
        if (pid == 0) {
            _exit(consumer_main(name, &o, shared, (int)c));
        }
        if (pid < 0) {
            rc = 1;
            goto out;
        }
    }

    /* The producer's master of one expert matrix, refilled for each. */
    kinds_for(&o, kinds);
    master = malloc(master_bytes(&o));
    if (master == NULL) {
        fprintf(stderr, "weft-perf update: out of memory\n");
        rc = 1;
        goto out;
    }
    start = perf_now_ns();
    for (uint64_t v = 1; v <= o.versions && !perf_interrupted; v++) {
        uint32_t lagging = 0;
        uint64_t t0 = perf_now_ns(), t1, t2;

        /* Each expert's masters, quantized straight into the slot. */
        status = weft_registry_write_begin(reg, 60000000, NULL);
        for (uint64_t l = 0; l < o.layers && status == WEFT_OK; l++) {
            for (int p = 0; p < PROJS && status == WEFT_OK; p++) {
                for (uint64_t e = 0; e < o.experts && status == WEFT_OK; e++) {
                    void    *out[3];
                    uint64_t tq;

                    for (int k = 0; k < 3 && status == WEFT_OK; k++) {
                        status = weft_registry_write_tensor(reg, tensor_index(&o, l, 3 * p + k, e), &out[k]);
                    }
                    if (status != WEFT_OK) {
                        break;
                    }
                    master_fill(master, kinds[3 * p].rows, kinds[3 * p].cols, v, l, e, p);
                    tq = perf_now_ns();
                    status = quantize(&o, master, &kinds[3 * p], out[0], out[1], out[2]);
                    quant_ns += perf_now_ns() - tq;
                }
            }
        }
        t1 = perf_now_ns();
        shared->publish_ns[v] = t1;
        if (status == WEFT_OK) {
            status = weft_registry_publish(reg, v, NULL);
        }
        t2 = perf_now_ns();
        if (status == WEFT_OK) {
            /* Consumers register as they start: wait for all of them once. */
            while (v == 1 && weft_registry_get_stats(reg, &stats) == WEFT_OK && stats.consumers < o.consumers &&
                   perf_now_ns() - t2 < 60000000000ull) {
                perf_sleep_us(1000);
            }
            status = weft_registry_wait_consumers(reg, v, 120000000, &lagging);
        }
        if (status != WEFT_OK) {
            fprintf(stderr, "weft-perf update: version %llu: %s (%u consumers behind)\n", (unsigned long long)v,
                    weft_status_string(status), lagging);
            rc = 1;
            goto out;
        }
        fill_ns += t1 - t0;
        publish_call_ns += t2 - t1;
        ack_ns += perf_now_ns() - t2;
    }
    for (int i = children.count - 1; i >= 0; i--) {
        int status_code, done = perf_wait_child(&children, children.pid[i], 120000, &status_code);
        if (done != 0 || !WIFEXITED(status_code) || WEXITSTATUS(status_code) != 0) {
            fprintf(stderr, "weft-perf update: a consumer failed\n");
            rc = 1;
        }
    }
    for (uint64_t c = 0; c < o.consumers; c++) {
        wrong += shared->consumer[c].wrong_bytes;
        verify_ns += shared->consumer[c].verify_ns;
        verified_versions += shared->consumer[c].versions;
        for (uint64_t v = 1; v <= o.versions; v++) {
            if (shared->consumer[c].wake_ns[v] >= shared->publish_ns[v] && shared->publish_ns[v] != 0) {
                wake[nwake++] = shared->consumer[c].wake_ns[v] - shared->publish_ns[v];
            }
        }
    }
    perf_latency_summarize(wake, nwake, &lat);
    weft_registry_get_stats(reg, &stats);
    {
        double bytes = (double)stats.slot_bytes, seconds = (double)(perf_now_ns() - start) / 1e9;
        double delivered_gbps = bytes * (double)o.consumers * (double)o.versions / ((double)ack_ns / 1e9) / 1e9;
        double verify_ms = verified_versions ? (double)verify_ns / 1e6 / (double)verified_versions : 0;

        if (o.json) {
            perf_json_t j;
            perf_json_begin(&j, stdout);
            perf_json_str(&j, "command", "update");
            perf_json_str(&j, "memory", "host");
            perf_json_uint(&j, "layers", o.layers);
            perf_json_uint(&j, "experts", o.experts);
            perf_json_uint(&j, "tensors", stats.tensor_count);
            perf_json_uint(&j, "bytes_per_version", stats.slot_bytes);
            perf_json_uint(&j, "versions", stats.versions_published);
            perf_json_uint(&j, "consumers", o.consumers);
            perf_json_double(&j, "fill_ms_per_version", (double)fill_ns / 1e6 / (double)o.versions);
            perf_json_double(&j, "quant_ms_per_version", (double)quant_ns / 1e6 / (double)o.versions);
            perf_json_double(&j, "verify_ms_per_version", verify_ms);
            perf_json_double(&j, "publish_call_us", (double)publish_call_ns / 1e3 / (double)o.versions);
            perf_json_double(&j, "publish_to_wake_p50_us", lat.p50_us);
            perf_json_double(&j, "publish_to_wake_max_us", lat.max_us);
            perf_json_double(&j, "publish_to_all_acked_ms", (double)ack_ns / 1e6 / (double)o.versions);
            perf_json_double(&j, "delivered_gb_per_s", delivered_gbps);
            perf_json_uint(&j, "wrong_bytes", wrong);
            perf_json_end(&j);
        } else {
            printf("# weft-perf update: libweft %s, host memory, %llu layers x %llu experts, H=%llu I=%llu, "
                   "block %llu\n",
                   weft_version(), (unsigned long long)o.layers, (unsigned long long)o.experts,
                   (unsigned long long)o.hidden, (unsigned long long)o.intermediate, (unsigned long long)o.block);
            printf("# %u tensors (W, WT, scale_inv of gate_up_proj and down_proj), %.1f MB a version, %llu "
                   "slots, %llu consumers\n",
                   stats.tensor_count, bytes / 1e6, (unsigned long long)o.slots, (unsigned long long)o.consumers);
            printf("# payload: FP8 e4m3 W/WT and FP32 scales from FP32 masters by weft_quant_host (one thread),\n"
                   "# new masters every version; consumers requantize the masters and compare every byte\n");
            printf("%10s %12s %12s %14s %16s %18s %16s %12s %12s\n", "versions", "fill_ms", "quant_ms",
                   "publish_us", "wake_p50_us", "all_acked_ms", "delivered_GB/s", "verify_ms", "wrong_bytes");
            printf("%10llu %12.1f %12.1f %14.2f %16.1f %18.1f %16.2f %12.1f %12llu\n",
                   (unsigned long long)stats.versions_published, (double)fill_ns / 1e6 / (double)o.versions,
                   (double)quant_ns / 1e6 / (double)o.versions, (double)publish_call_ns / 1e3 / (double)o.versions,
                   lat.p50_us, (double)ack_ns / 1e6 / (double)o.versions, delivered_gbps, verify_ms,
                   (unsigned long long)wrong);
            printf("# fill: masters made and quantized into the slot, of which quant: weft_quant_host;\n"
                   "# publish_us: the publish call; wake: publish to a waiting consumer's wake-up; all_acked:\n"
                   "# publish to every consumer holding the version (copied; verified after); delivered: bytes x\n"
                   "# consumers / all_acked; verify: a consumer's requantization and comparison of all its bytes\n"
                   "# (%.1f GB a version). %.1f s in all.\n",
                   bytes / 1e9, seconds);
        }
    }
    if (wrong != 0) {
        rc = 1;
    }
out:
    perf_kill_children(&children);
    weft_registry_close(reg);
    weft_registry_unlink(name);
    munmap(shared, sizeof(*shared));
    free(wake);
    free(master);
    return rc;
}
