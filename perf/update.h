/*
 * weft-perf update, the main job: what the orchestration (cmd_update.c),
 * the trainer (update_trainer.c) and the consumers (update_consumer.c)
 * share. The model (update_model.c): MoE expert weights laid out as an
 * SGLang engine holds them, their names, initial masters and gradients,
 * and the registry that carries them; and the anonymous shared mapping
 * through which the trainer tells consumers what it wrote (checksums, and
 * sampled bytes on a GPU).
 */
#ifndef WEFT_PERF_UPDATE_H
#define WEFT_PERF_UPDATE_H

#include "lib/fixtures.h"
#include "lib/proc.h"

#include <stdint.h>
#include <sys/types.h>
#include <weft/weft.h>

#define UPDATE_MAX_VERSIONS 10000
#define UPDATE_KINDS        PERF_EXPERT_KINDS /* gate_up W, WT, scale; down W, WT, scale */
#define UPDATE_PROJS        2 /* gate_up, down: kinds 3p .. 3p + 2 */
#define UPDATE_MAX_LAYERS   64

/* Versions whose checksums (and samples) are kept: a consumer verifies
 * version v before acknowledging it (GPU) or just after (host), and the
 * producer publishes v + 2 only after every consumer acknowledged v + 1,
 * so three would do. */
#define UPDATE_RING 4

typedef struct update_options {
    uint64_t layers, experts, hidden, intermediate, versions, consumers, slots, block, threads;
    /* The first `warmup` of the versions are published, received and
     * verified like the others but not timed: an engine maps each
     * registry slot's GPU arena the first time it reads it (several ms a
     * slot, once), so the default on a GPU is the slot count. */
    uint64_t warmup;
    int      versions_given; /* --versions was given (else a GPU run adds its warm-up) */
    /* 1 (--whole-versions): consumers take a version once it is
     * published; 0 (--stream, the default): the trainer announces each
     * layer once it is written and consumers copy it then
     * (weft_registry_write_ready). */
    int      whole_versions;
    double   lr;
    int      json, optimizer; /* WEFT_OPTIM_ADAMW or WEFT_OPTIM_MUON */
    weft_quant_formula_t formula; /* the FP8 writer's (--formula) */
    int      quiet;           /* no progress line a version */
    int      gpu;             /* the trainer's optimizer, registry and the engines on a GPU */
    int      device;          /* that GPU */
    int      engine_device;   /* the engines' GPU (--engine-gpu; the trainer's by default) */
    int      offload;         /* GPU engines free their tensors after each version, allocate anew */
    uint64_t    kill_engine_at; /* engine 0 dies mid-transfer of this version and is restarted; 0: never */
    uint64_t    kill_trainer_at; /* the trainer dies mid-step writing this version; 0: never */
    int         peer;         /* GPU: run the PyTorch sequential path beside (update_peer.py) */
    const char *peer_script;
    const char *model;        /* a preset's name, or NULL */
    uint64_t    model_layers; /* the preset's MoE layers */
    const char *plot;         /* --plot: the timeline's SVG file, or NULL */
} update_options_t;

/* One version's phases as the trainer sees them, in order (ns each):
 * gradients made, the step with its writer, the GPU's finish, the publish
 * call, then until every consumer held the version. */
enum { UPDATE_PHASES = 5 };
typedef struct update_phase {
    uint64_t ns[UPDATE_PHASES];
} update_phase_t;

/* Writes versions 1..count's phases as an SVG timeline (update_plot.c);
 * the versions before timed_from are marked as the warm-up. 0, or -1
 * (said on stderr). */
int update_plot_svg(const char *path, const update_phase_t *phases, uint64_t count, uint64_t timed_from,
                    const char *title);

/* One kind of expert tensor: its name suffix, role, dtype and shape. */
typedef perf_expert_kind_t tensor_kind_t;

/* Shared with the consumers (MAP_SHARED before fork): when each version
 * was published, what each consumer saw; after the struct, the checksums
 * the producer computed of every tensor it wrote (UPDATE_RING rows of
 * `tensors` words, row v % UPDATE_RING for version v), then on a GPU the
 * sampled bytes (UPDATE_RING rows of update_sample_bytes()). */
typedef struct update_shared {
    uint64_t publish_ns[UPDATE_MAX_VERSIONS + 1];
    struct {
        uint64_t wake_ns[UPDATE_MAX_VERSIONS + 1];
        uint64_t versions, wrong_tensors, wrong_sampled_bytes, sampled_bytes, verified_bytes, verify_ns;
        /* The bytes of every tensor found wrong (its checksum, or a
         * sampled byte of it): an upper bound on the wrong bytes, 0 only
         * when every check passed. */
        uint64_t wrong_bytes;
        uint64_t copy_ns;   /* wake to every byte in place (timed versions) */
        uint64_t timed;     /* versions after the warm-up: copy_ns and verify_ns are theirs */
        uint64_t realloc_ns; /* --offload: the new tensors allocated (before timed versions) */
        uint64_t rebind_ns;  /* --offload: the plans rebound to them (weft_plan_rebind) */
        uint64_t timed_rebinds;
        uint64_t rebinds, moved; /* rebinds, and those that got tensors at another address */
        /* --kill-engine: set by the trainer before it starts an engine
         * again: the run it is (0 the first), the version after which it
         * joins; the engine records the first version it received. */
        uint64_t incarnation, join_after, first_version;
        int      status;
        pid_t    pid; /* its process (a restarted engine's too): set by the consumer itself */
    } consumer[PERF_CHILDREN_MAX];
} update_shared_t;

void     update_kinds(const update_options_t *o, tensor_kind_t kinds[UPDATE_KINDS]);
void     update_tensor_name(char *buf, size_t size, uint64_t layer, uint64_t expert, const tensor_kind_t *k);
/* Tensor index in declaration order: layer, kind, expert. Declaring all
 * experts of one kind together puts them side by side in the slot, as the
 * consumer's fused tensors have them: the plan coalesces the copies. */
uint32_t update_tensor_index(const update_options_t *o, uint64_t layer, int kind, uint64_t expert);
uint64_t update_tensor_count(const update_options_t *o);
/* Bytes of every tensor of a version. */
uint64_t update_version_bytes(const update_options_t *o);

/* The initial FP32 master of one expert matrix, and a whole group's
 * gradient at `version` (both deterministic). */
void update_master_fill(float *x, uint64_t rows, uint64_t cols, uint64_t layer, uint64_t expert, int proj);
void update_grad_fill(float *g, uint64_t n, uint64_t cols, uint64_t version, uint32_t group);

/* The registry of every expert tensor, in `memory` (HOST, or CUDA on
 * o->device), created under `name` and sealed. */
weft_status_t update_registry_create(const char *name, const update_options_t *o, weft_memory_kind_t memory,
                                     weft_registry_h *out);

/* The shared mapping: its size, the checksum row and the sample row of a
 * version. The sample of version v is expert v % experts of every layer
 * and kind, one after another in layer, kind order. */
size_t    update_shared_bytes(const update_options_t *o);
uint64_t *update_checksums(update_shared_t *shared, const update_options_t *o, uint64_t version);

/*
 * --kill-trainer V: a process forked before the trainer touches CUDA that
 * waits for the trainer (its parent) to die, then checks what a crash in
 * the middle of writing version V must leave: the registry's latest
 * version is V - 1 and, on the host, every byte of it reads back as the
 * producer wrote it (its checksums); every consumer holds V - 1,
 * verified, and none took anything of V. It stops the orphaned
 * consumers, removes the registry's name, prints one JSON object (or a
 * line) and returns 0 when all of that held.
 */
int update_witness_main(const char *name, const update_options_t *o, update_shared_t *shared, pid_t trainer);
uint64_t  update_sample_bytes(const update_options_t *o);
uint8_t  *update_samples(update_shared_t *shared, const update_options_t *o, uint64_t version);
uint64_t  update_sample_expert(const update_options_t *o, uint64_t version);

/* A consumer process (update_consumer.c): host buffers and the host
 * transport, or (o->gpu) device buffers on o->device and cuda_ipc; every
 * version until o->versions. Exit status 0 when every byte was right. */
int update_consumer_main(const char *name, const update_options_t *o, update_shared_t *shared, int id);

/* ------------------------------------------------------ the trainer */

/* The trainer's side: one AdamW group a layer and projection, all its
 * experts stacked, named so that the FP8 writer finds each expert's
 * tensors; initial masters; and room for the gradients. On a GPU the
 * gradients are made once, two sets on the device that alternate from
 * step to step (a trainer's backward pass leaves them there; making them
 * anew each step would only time this program's filling). */
typedef struct update_trainer {
    weft_optim_h        opt;
    weft_optim_writer_h fp8;
    weft_registry_h     reg;
    const update_options_t *o;
    tensor_kind_t       kinds[UPDATE_KINDS];
    weft_optim_grad_t  *grads;
    uint32_t            groups;
    uint64_t           *checksums; /* the row of the version being written */
    uint8_t            *samples;   /* GPU: the sample row of the version being written */
    uint64_t            version, units; /* the version being written, the matrices written of it */
    uint64_t            layer_units[UPDATE_MAX_LAYERS]; /* matrices written of each layer (streaming) */
    uint64_t            quant_ns, sum_ns;
    void               *dev_grads[2];     /* GPU: two gradient sets, group after group */
    uint64_t           *dev_checksums;    /* GPU: where the writer's sums land */
    void               *stream;           /* GPU: the step's cudaStream_t */
    void               *pinned_samples;   /* GPU: the shared mapping's sample rows, page-locked */
    /* GPU streaming: a layer is announced from a host function on its own
     * stream, once that stream has waited for every slot stream's work so
     * far (the writer's kernels, checksums and sample copies of the layer
     * are on the slot streams the units came with). */
    void               *announce_stream;
    void               *streams[16], *events[16];
    int                 nstreams;
    struct announcement {
        weft_registry_h reg;
        uint64_t        version;
        uint32_t        tensors;
        int            *failed;
    } announcements[UPDATE_MAX_LAYERS];
    int                 announce_failed; /* set by a host function whose write_ready failed */
} update_trainer_t;

/* update_trainer.c. The trainer of one run over `reg`: its groups,
 * masters and gradients (on a GPU, in the device arrays and the shared
 * mapping's pinned sample rows); destroy frees what create made, also
 * after a failed create. */
weft_status_t update_trainer_create(update_trainer_t *t, const update_options_t *o, weft_registry_h reg,
                                    update_shared_t *shared);
void          update_trainer_destroy(update_trainer_t *t);

/* The step's writer (arg: the trainer): the FP8 writer, the checksums of
 * what it wrote, streaming's announcements, --kill-trainer's crash. */
weft_status_t update_write_and_sum(void *arg, const weft_optim_unit_t *unit);

/* GPU: waits for the step's work; then brings its checksums and samples
 * home (WEFT_ERR_UNSUPPORTED in a build without CUDA). */
weft_status_t update_trainer_gpu_wait(update_trainer_t *t);
weft_status_t update_trainer_gpu_finish(update_trainer_t *t);

/* How many GPUs there are and the free memory of `device`, asked in a
 * child so that this process stays free of CUDA until it has forked its
 * engines (0 GPUs in a build without CUDA). */
int update_gpu_probe(perf_children_t *children, int device, uint64_t *free_bytes);

/* Parses weft-perf update's command line into *o (update_options.c):
 * 0, 1 after --help (printed), 2 on a usage error (said on stderr). */
int update_parse(int argc, char **argv, update_options_t *o);

#endif
