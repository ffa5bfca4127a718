/*
 * weft-perf update: the main job. A trainer process keeps FP32 masters and
 * AdamW state of MoE expert weights (every expert's gate_up_proj and
 * down_proj) and takes real optimizer steps on deterministic gradients with
 * libweft's optimizer (optim.h, on the host's threads); its FP8 writer puts
 * W, WT and block scales of each updated matrix straight into the registry
 * version being written, in host memory. Consumer processes, laid out like
 * an SGLang engine (fused w13/w2 tensors, one view per expert), receive
 * every version through the host transport and verify every byte: each
 * tensor's checksum against the one the producer computed on what it wrote.
 * Reports the step, bytes, bandwidth and publish latency.
 */
#include "args.h"
#include "json.h"
#include "perf.h"
#include "proc.h"
#include "stats.h"
#include "sysinfo.h"

#include <getopt.h>
#include <math.h>
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
    uint64_t layers, experts, hidden, intermediate, versions, consumers, slots, block, threads;
    double   lr;
    int      json, optimizer; /* WEFT_OPTIM_ADAMW or WEFT_OPTIM_MUON */
} update_options_t;

/* Versions whose checksums are kept: a consumer verifies version v after
 * acknowledging it, and the producer publishes v + 2 only after every
 * consumer acknowledged v + 1, so three would do. */
#define CHECKSUM_RING 4

/* One kind of expert tensor: its name suffix, role, dtype and shape. */
typedef struct tensor_kind {
    const char        *proj;
    const char        *suffix;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint64_t           rows, cols;
} tensor_kind_t;

/* Shared with the consumers (MAP_SHARED before fork): when each version
 * was published, what each consumer saw, and the checksums the producer
 * computed of every tensor it wrote (CHECKSUM_RING × tensors words after
 * the struct, row v % CHECKSUM_RING for version v). */
typedef struct update_shared {
    uint64_t publish_ns[MAX_VERSIONS + 1];
    struct {
        uint64_t wake_ns[MAX_VERSIONS + 1];
        uint64_t versions, wrong_tensors, verified_bytes, verify_ns;
        int      status;
    } consumer[PERF_CHILDREN_MAX];
} update_shared_t;

static uint64_t *shared_checksums(update_shared_t *shared, uint64_t tensors, uint64_t version)
{
    return (uint64_t *)(shared + 1) + (version % CHECKSUM_RING) * tensors;
}

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
 * The initial FP32 master of one expert matrix: uniform values whose
 * range, 0.005 to 0.08, changes from row to row (so the block scales
 * differ).
 */
static void master_fill(float *x, uint64_t rows, uint64_t cols, uint64_t layer, uint64_t expert, int proj)
{
    uint32_t seed = hash32(hash32((uint32_t)(layer * 4096 + expert) * 2 + (uint32_t)proj));

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

/* The gradient of a whole group (all experts of one layer's projection)
 * at `version`: deterministic, zero-mean, of magnitude up to 1e-2, with a
 * per-row bias so that the moments grow unevenly. */
static void grad_fill(float *g, uint64_t n, uint64_t cols, uint64_t version, uint32_t group)
{
    const uint32_t seed = hash32((uint32_t)version * 0x9e3779b9U ^ hash32(group + 1));

    for (uint64_t i = 0; i < n; i++) {
        uint32_t h = ((uint32_t)i + seed) * 0x9e3779b1U;
        h ^= h >> 15;
        h *= 0x85ebca77U;
        h ^= h >> 13;
        g[i] = (float)(int32_t)h * (1e-2f / 2147483648.0f) + (float)((i / cols) % 7) * 1e-4f;
    }
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
    tensor_kind_t     kinds[KINDS];
    weft_registry_h   reg = NULL;
    weft_plan_h       plan = NULL;
    uint32_t          consumer;
    uint64_t          last = 0;
    char              label[32];
    weft_status_t     status;

    kinds_for(o, kinds);
    memset(buffers, 0, sizeof(buffers));
    if (views == NULL || names == NULL) {
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
        /* Every byte of every tensor, in the consumer's own layout: its
         * checksum against the producer's of what it wrote. */
        {
            const uint64_t *expect = shared_checksums(shared, count, last);
            uint64_t        t0 = perf_now_ns();

            for (uint64_t l = 0; l < o->layers; l++) {
                for (int k = 0; k < KINDS; k++) {
                    const uint64_t bytes = kind_bytes(&kinds[k]);
                    for (uint64_t e = 0; e < o->experts; e++) {
                        const uint32_t i = tensor_index(o, l, k, e);
                        if (weft_checksum_host(buffers[l][k] + e * bytes, bytes) != expect[i]) {
                            if (shared->consumer[id].wrong_tensors++ == 0) {
                                fprintf(stderr, "consumer %d: version %llu: %s differs from what the producer "
                                                "wrote\n",
                                        id, (unsigned long long)last, names[i]);
                            }
                        }
                        shared->consumer[id].verified_bytes += bytes;
                    }
                }
            }
            shared->consumer[id].verify_ns += perf_now_ns() - t0;
        }
        shared->consumer[id].versions++;
    }
    weft_plan_destroy(plan);
    weft_registry_close(reg);
    return shared->consumer[id].wrong_tensors == 0 ? 0 : 5;
}

static int update_usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf update [options]\n"
            "  A trainer takes AdamW steps on FP32 masters of MoE expert weights and its\n"
            "  FP8 writer puts W, WT and scales of every updated matrix into a host-memory\n"
            "  registry; consumers receive every version and verify every byte (each\n"
            "  tensor's checksum against the one computed by the producer on what it wrote).\n"
            "  --layers N        MoE layers (2)\n"
            "  --experts N       experts per layer (32)\n"
            "  --hidden N        hidden size H (2048)\n"
            "  --intermediate N  expert intermediate size I; gate_up is [2I, H] (768)\n"
            "  --versions N      versions to publish, one optimizer step each (5)\n"
            "  --consumers N     consumer processes (2)\n"
            "  --slots N         registry slots (3)\n"
            "  --block N         FP8 block size, a power of two up to 1024 (128)\n"
            "  --optimizer O     adamw or muon (Muon: FP32 Newton-Schulz on the host's\n"
            "                    threads, slow at these shapes: try --experts 2 --hidden 512)\n"
            "  --lr X            learning rate (1e-5)\n"
            "  --threads N       optimizer threads (online CPUs)\n"
            "  --json            one JSON object instead of the table\n"
            "The default is Qwen3-30B-A3B's expert shapes, 2 layers of 32 experts: 302 M\n"
            "parameters, 0.6 GB of FP8 a version. Memory: 16 B a parameter in the trainer\n"
            "(FP32 master, m, v, gradient: 4.8 GB), slots x 0.6 GB of shared memory and\n"
            "0.6 GB a consumer: about 7.8 GB in all.\n");
    return out == stdout ? 0 : 2;
}

static int update_parse(int argc, char **argv, update_options_t *o)
{
    static const struct option longopts[] = {
        {"layers", required_argument, NULL, 'l'},   {"experts", required_argument, NULL, 'e'},
        {"hidden", required_argument, NULL, 'H'},   {"intermediate", required_argument, NULL, 'I'},
        {"versions", required_argument, NULL, 'v'}, {"consumers", required_argument, NULL, 'c'},
        {"slots", required_argument, NULL, 's'},    {"block", required_argument, NULL, 'b'},
        {"lr", required_argument, NULL, 'r'},       {"threads", required_argument, NULL, 't'},
        {"optimizer", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, 'j'},           {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int opt;

    *o = (update_options_t){.layers = 2, .experts = 32, .hidden = 2048, .intermediate = 768, .versions = 5,
                            .consumers = 2, .slots = 3, .block = 128, .lr = 1e-5, .threads = 0,
                            .optimizer = WEFT_OPTIM_ADAMW};
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
        case 'r': bad = perf_arg_double("--lr", optarg, 0.0, 1.0, &o->lr); break;
        case 'o': {
            static const perf_arg_word_t optimizers[] = {
                {"adamw", WEFT_OPTIM_ADAMW}, {"muon", WEFT_OPTIM_MUON}, {NULL, 0}};
            bad = perf_arg_word("--optimizer", optarg, optimizers, &o->optimizer);
            break;
        }
        case 't': bad = perf_arg_u64("--threads", optarg, 1, 1024, &o->threads); break;
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

/* The trainer's side: one AdamW group a layer and projection, all its
 * experts stacked, named so that the FP8 writer finds each expert's
 * tensors; initial masters; and room for the gradients. */
typedef struct trainer {
    weft_optim_h        opt;
    weft_optim_writer_h fp8;
    weft_registry_h     reg;
    const update_options_t *o;
    tensor_kind_t       kinds[KINDS];
    weft_optim_grad_t  *grads;
    uint32_t            groups;
    uint64_t           *checksums; /* the row of the version being written */
    uint64_t            quant_ns, sum_ns;
} trainer_t;

static weft_status_t trainer_create(trainer_t *t, const update_options_t *o, weft_registry_h reg)
{
    weft_optim_params_t        op = {.field_mask = o->threads ? WEFT_OPTIM_PARAM_THREADS : 0,
                                     .threads    = (uint32_t)o->threads};
    weft_optim_writer_params_t wp = {.field_mask = WEFT_OPTIM_WRITER_QUANT,
                                     .quant      = {.field_mask = WEFT_QUANT_PARAM_BLOCK, .block = (uint32_t)o->block}};
    weft_status_t              status;

    memset(t, 0, sizeof(*t));
    t->o      = o;
    t->reg    = reg;
    t->groups = (uint32_t)(o->layers * PROJS);
    kinds_for(o, t->kinds);
    t->grads = calloc(t->groups, sizeof(*t->grads));
    if (t->grads == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    status = weft_optim_create(&op, &t->opt);
    for (uint64_t l = 0; l < o->layers && status == WEFT_OK; l++) {
        for (int p = 0; p < PROJS && status == WEFT_OK; p++) {
            const tensor_kind_t    *kw = &t->kinds[3 * p];
            const uint32_t          g  = (uint32_t)(l * PROJS + (uint64_t)p);
            char                    gname[WEFT_OPTIM_NAME_MAX];
            weft_optim_group_desc_t d = {.field_mask = WEFT_OPTIM_GROUP_ADAMW | WEFT_OPTIM_GROUP_MUON,
                                         .name = gname, .algo = (weft_optim_algo_t)o->optimizer,
                                         .experts = (uint32_t)o->experts, .rows = kw->rows, .cols = kw->cols,
                                         .adamw = {.lr = o->lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                                   .weight_decay = 0.01},
                                         .muon = {.lr = o->lr, .momentum = 0.95, .weight_decay = 0.01,
                                                  .nesterov = 1, .ns_steps = 5, .scale = WEFT_MUON_SCALE_SHAPE,
                                                  .schedule = WEFT_MUON_NS_SIMPLE}};
            float *master;

            snprintf(gname, sizeof(gname), "model.layers.%llu.mlp.experts.{E}.%s", (unsigned long long)l, kw->proj);
            status = weft_optim_add_group(t->opt, &d, NULL);
            if (status == WEFT_OK) {
                status = weft_optim_group_state(t->opt, g, WEFT_OPTIM_STATE_MASTER, &master);
            }
            for (uint64_t e = 0; e < o->experts && status == WEFT_OK; e++) {
                master_fill(master + e * kw->rows * kw->cols, kw->rows, kw->cols, l, e, p);
            }
            if (status == WEFT_OK) {
                t->grads[g] = (weft_optim_grad_t){.data   = malloc(o->experts * kw->rows * kw->cols * sizeof(float)),
                                                  .dtype  = WEFT_DTYPE_FP32,
                                                  .memory = WEFT_MEMORY_HOST};
                status = t->grads[g].data != NULL ? WEFT_OK : WEFT_ERR_NO_MEMORY;
            }
        }
    }
    if (status == WEFT_OK) {
        status = weft_optim_writer_create(t->opt, reg, &wp, &t->fp8);
    }
    return status;
}

static void trainer_destroy(trainer_t *t)
{
    weft_optim_writer_destroy(t->fp8);
    weft_optim_destroy(t->opt);
    for (uint32_t g = 0; g < t->groups && t->grads != NULL; g++) {
        free((void *)t->grads[g].data);
    }
    free(t->grads);
}

/* The step's writer: the FP8 writer, then the checksums of the three
 * tensors it wrote, while they are in cache. */
static weft_status_t write_and_sum(void *arg, const weft_optim_unit_t *unit)
{
    trainer_t     *t = arg;
    const uint64_t layer = unit->group / PROJS, expert = (uint64_t)unit->expert;
    const int      p = (int)(unit->group % PROJS);
    uint64_t       t0 = perf_now_ns(), t1;
    weft_status_t  status = weft_optim_writer_write(t->fp8, unit);

    t1 = perf_now_ns();
    t->quant_ns += t1 - t0;
    for (int k = 3 * p; k < 3 * p + 3 && status == WEFT_OK; k++) {
        const uint32_t i = tensor_index(t->o, layer, k, expert);
        void          *data;
        status = weft_registry_write_tensor(t->reg, i, &data);
        if (status == WEFT_OK) {
            t->checksums[i] = weft_checksum_host(data, kind_bytes(&t->kinds[k]));
        }
    }
    t->sum_ns += perf_now_ns() - t1;
    return status;
}

int perf_cmd_update(int argc, char **argv)
{
    update_options_t      o;
    update_shared_t      *shared;
    size_t                shared_bytes;
    perf_children_t       children = {0};
    weft_registry_h       reg = NULL;
    weft_registry_stats_t stats;
    weft_status_t         status;
    trainer_t             trainer;
    int                   have_trainer = 0;
    char                  name[64];
    uint64_t             *wake = NULL, step_ns = 0, grad_ns = 0, publish_call_ns = 0, ack_ns = 0, start, wrong = 0;
    uint64_t              verify_ns = 0, verified_versions = 0, tensors, published = 0;
    size_t                nwake = 0;
    perf_latency_t        lat;
    weft_optim_info_t     oinfo = {0};
    int                   rc = 0;

    rc = update_parse(argc, argv, &o);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    tensors      = o.layers * KINDS * o.experts;
    shared_bytes = sizeof(*shared) + CHECKSUM_RING * tensors * sizeof(uint64_t);
    shared = mmap(NULL, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
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

    status = trainer_create(&trainer, &o, reg);
    have_trainer = 1;
    if (status != WEFT_OK) {
        fprintf(stderr, "weft-perf update: optimizer: %s\n", weft_status_string(status));
        rc = 1;
        goto out;
    }
    weft_optim_get_info(trainer.opt, &oinfo);
    start = perf_now_ns();
    for (uint64_t v = 1; v <= o.versions && !perf_interrupted; v++) {
        weft_optim_step_params_t sp = {.field_mask = WEFT_OPTIM_STEP_WRITER, .writer = write_and_sum,
                                       .writer_arg = &trainer};
        uint32_t                 lagging = 0;
        uint64_t                 t0 = perf_now_ns(), tg, t1, t2;

        for (uint32_t g = 0; g < trainer.groups; g++) {
            const tensor_kind_t *kw = &trainer.kinds[3 * (g % PROJS)];
            grad_fill((float *)trainer.grads[g].data, o.experts * kw->rows * kw->cols, kw->cols, v, g);
        }
        tg = perf_now_ns();
        /* One optimizer step; its writer quantizes each updated matrix
         * straight into the slot being written. */
        trainer.checksums = shared_checksums(shared, tensors, v);
        status = weft_registry_write_begin(reg, 60000000, NULL);
        if (status == WEFT_OK) {
            status = weft_optim_step(trainer.opt, trainer.grads, trainer.groups, &sp);
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
        published = v;
        grad_ns += tg - t0;
        step_ns += t1 - tg;
        publish_call_ns += t2 - t1;
        ack_ns += perf_now_ns() - t2;
    }
    if (published < o.versions) {
        /* Interrupted: the consumers wait for versions that will not come. */
        perf_kill_children(&children);
        fprintf(stderr, "weft-perf update: interrupted after %llu versions\n", (unsigned long long)published);
        rc = 1;
    }
    for (int i = children.count - 1; i >= 0 && published == o.versions; i--) {
        int status_code, done = perf_wait_child(&children, children.pid[i], 120000, &status_code);
        if (done != 0 || !WIFEXITED(status_code) || WEXITSTATUS(status_code) != 0) {
            fprintf(stderr, "weft-perf update: a consumer failed\n");
            rc = 1;
        }
    }
    if (published == 0) {
        goto out;
    }
    for (uint64_t c = 0; c < o.consumers; c++) {
        wrong += shared->consumer[c].wrong_tensors;
        verify_ns += shared->consumer[c].verify_ns;
        verified_versions += shared->consumer[c].versions;
        for (uint64_t v = 1; v <= published; v++) {
            if (shared->consumer[c].wake_ns[v] >= shared->publish_ns[v] && shared->publish_ns[v] != 0) {
                wake[nwake++] = shared->consumer[c].wake_ns[v] - shared->publish_ns[v];
            }
        }
    }
    perf_latency_summarize(wake, nwake, &lat);
    weft_registry_get_stats(reg, &stats);
    {
        const double n = (double)published;
        double bytes = (double)stats.slot_bytes, seconds = (double)(perf_now_ns() - start) / 1e9;
        double delivered_gbps = bytes * (double)o.consumers * n / ((double)ack_ns / 1e9) / 1e9;
        double verify_ms = verified_versions ? (double)verify_ns / 1e6 / (double)verified_versions : 0;
        /* What an AdamW step must move through memory at least: master, m
         * and v read and written, the gradient read (28 B a parameter).
         * Muon's step is its Newton-Schulz products: no such figure. */
        double step_gbps = o.optimizer == WEFT_OPTIM_MUON
                               ? NAN
                               : 28.0 * (double)oinfo.parameters /
                                     ((double)(step_ns - trainer.quant_ns - trainer.sum_ns) / n / 1e9) / 1e9;
        char   gbps_text[32];

        if (o.json) {
            perf_json_t j;
            perf_json_begin(&j, stdout);
            perf_json_str(&j, "command", "update");
            perf_json_str(&j, "memory", "host");
            perf_json_str(&j, "optimizer", o.optimizer == WEFT_OPTIM_MUON ? "muon" : "adamw");
            perf_json_uint(&j, "layers", o.layers);
            perf_json_uint(&j, "experts", o.experts);
            perf_json_uint(&j, "parameters", oinfo.parameters);
            perf_json_uint(&j, "tensors", stats.tensor_count);
            perf_json_uint(&j, "bytes_per_version", stats.slot_bytes);
            perf_json_uint(&j, "versions", published);
            perf_json_uint(&j, "consumers", o.consumers);
            perf_json_double(&j, "grad_fill_ms_per_version", (double)grad_ns / 1e6 / n);
            perf_json_double(&j, "step_ms_per_version", (double)step_ns / 1e6 / n);
            perf_json_double(&j, "quant_ms_per_version", (double)trainer.quant_ns / 1e6 / n);
            perf_json_double(&j, "checksum_ms_per_version", (double)trainer.sum_ns / 1e6 / n);
            perf_json_double(&j, "adamw_gb_per_s", step_gbps);
            perf_json_double(&j, "verify_ms_per_version", verify_ms);
            perf_json_double(&j, "publish_call_us", (double)publish_call_ns / 1e3 / n);
            perf_json_double(&j, "publish_to_wake_p50_us", lat.p50_us);
            perf_json_double(&j, "publish_to_wake_max_us", lat.max_us);
            perf_json_double(&j, "publish_to_all_acked_ms", (double)ack_ns / 1e6 / n);
            perf_json_double(&j, "delivered_gb_per_s", delivered_gbps);
            perf_json_uint(&j, "wrong_tensors", wrong);
            perf_json_end(&j);
        } else {
            printf("# weft-perf update: libweft %s, host memory, %llu layers x %llu experts, H=%llu I=%llu, "
                   "block %llu\n",
                   weft_version(), (unsigned long long)o.layers, (unsigned long long)o.experts,
                   (unsigned long long)o.hidden, (unsigned long long)o.intermediate, (unsigned long long)o.block);
            printf("# %u tensors (W, WT, scale_inv of gate_up_proj and down_proj), %.1f MB a version, %llu "
                   "slots, %llu consumers\n",
                   stats.tensor_count, bytes / 1e6, (unsigned long long)o.slots, (unsigned long long)o.consumers);
            printf("# trainer: %s (lr %g, wd 0.01) on %.1f M FP32 masters, %.2f GB of master and state, %u threads;\n"
                   "# its FP8 writer fills the slot; consumers check every tensor's checksum\n",
                   o.optimizer == WEFT_OPTIM_MUON ? "Muon (momentum 0.95, Nesterov, 5 NS steps in FP32)"
                                                  : "AdamW (betas 0.9/0.999)",
                   o.lr, (double)oinfo.parameters / 1e6, (double)oinfo.host_bytes / 1e9,
                   o.threads ? (unsigned)o.threads : (unsigned)sysconf(_SC_NPROCESSORS_ONLN));
            printf("%10s %10s %10s %10s %12s %12s %14s %16s %14s %10s %14s\n", "versions", "grad_ms", "step_ms",
                   "quant_ms", "adamw_GB/s", "publish_us", "wake_p50_us", "all_acked_ms", "delivered_GB/s",
                   "verify_ms", "wrong_tensors");
            printf("%10llu %10.1f %10.1f %10.1f %12s %12.2f %14.1f %16.1f %14.2f %10.1f %14llu\n",
                   (unsigned long long)published, (double)grad_ns / 1e6 / n, (double)step_ns / 1e6 / n,
                   (double)trainer.quant_ns / 1e6 / n, perf_num(gbps_text, sizeof(gbps_text), step_gbps, 2), (double)publish_call_ns / 1e3 / n, lat.p50_us,
                   (double)ack_ns / 1e6 / n, delivered_gbps, verify_ms, (unsigned long long)wrong);
            printf("# grad: deterministic gradients made; step: weft_optim_step with the writer, of which quant:\n"
                   "# the FP8 writer (and %.1f ms checksums); adamw_GB/s: 28 B a parameter over the rest of the\n"
                   "# step; publish_us: the publish call; wake: publish to a waiting consumer's wake-up;\n"
                   "# all_acked: publish to every consumer holding the version (copied; verified after);\n"
                   "# delivered: bytes x consumers / all_acked; verify: a consumer's checksums of its %.2f GB.\n"
                   "# %.1f s in all.\n",
                   (double)trainer.sum_ns / 1e6 / n, bytes / 1e9, seconds);
        }
    }
    if (wrong != 0) {
        rc = 1;
    }
out:
    perf_kill_children(&children);
    if (have_trainer) {
        trainer_destroy(&trainer);
    }
    weft_registry_close(reg);
    weft_registry_unlink(name);
    munmap(shared, shared_bytes);
    free(wake);
    return rc;
}
