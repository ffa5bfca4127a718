/* weft-perf update's options: its usage text and the parsing of its
 * command line into update_options_t (update.h). */
#include "config.h"

#include "lib/args.h"
#include "lib/peer.h"
#include "perf.h"
#include "update.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>

static int update_usage(FILE *out)
{
    fprintf(out,
            "usage: weft-perf update [options]\n"
            "  A trainer takes AdamW steps on FP32 masters of MoE expert weights and its\n"
            "  FP8 writer puts W, WT and scales of every updated matrix into a host-memory\n"
            "  registry; consumers receive every version and verify every byte (each\n"
            "  tensor's checksum against the one computed by the producer on what it wrote).\n"
            "  --model M         expert shapes of a public MoE config: qwen3-30b-a3b (H 2048,\n"
            "                    I 768, 128 experts, 48 layers), qwen3-235b-a22b (4096, 1536,\n"
            "                    128, 94) or deepseek-v3 (7168, 2048, 256, 58 MoE layers);\n"
            "                    its layers are cut to what fits (--layers N to choose)\n"
            "  --layers N        MoE layers (2; with --model: as many as fit, see below)\n"
            "  --experts N       experts per layer (32)\n"
            "  --hidden N        hidden size H (2048)\n"
            "  --intermediate N  expert intermediate size I; gate_up is [2I, H] (768)\n"
            "  --versions N      versions to publish, one optimizer step each (5; on a GPU\n"
            "                    the warm-up and 5 more)\n"
            "  --warmup N        of those, the first N are not timed (on a GPU the slot\n"
            "                    count: an engine maps each slot's GPU memory once, at its\n"
            "                    first read of the slot; 0 on the host)\n"
            "  --consumers N     consumer processes (2)\n"
            "  --slots N         registry slots (3)\n"
            "  --block N         FP8 block size, a power of two up to 1024 (128)\n"
            "  --formula F       the FP8 writer's: exact (default) or reference (DeepGEMM's\n"
            "                    per_block_cast_to_fp8 as PyTorch computes it; quant.h)\n"
            "  --optimizer O     adamw or muon (Muon: FP32 Newton-Schulz on the host's\n"
            "                    threads, slow at these shapes: try --experts 2 --hidden 512)\n"
            "  --lr X            learning rate (1e-5)\n"
            "  --threads N       optimizer threads (online CPUs; host placement)\n"
            "  --device D        host, cuda or auto: the GPU placement when a GPU is present\n"
            "                    (auto, the default)\n"
            "  --gpu N           the GPU of the cuda placement (0)\n"
            "  --engine-gpu N    the engines' GPU (the trainer's by default: colocated);\n"
            "                    another puts them there, still through cuda_ipc (exit 77\n"
            "                    when there is no such GPU)\n"
            "  --offload         GPU engines free their weights after each version and take\n"
            "                    new memory before the next (receive views rebound)\n"
            "  --kill-engine V   engine 0 dies in the middle of version V's transfer (half of\n"
            "                    its tensors copied, its lease held) and is started again: the\n"
            "                    others go on, it gets nothing of V and joins at V + 1\n"
            "  --kill-trainer V  the trainer dies in the middle of writing version V (2 or\n"
            "                    later); a witness process reports what is left: the\n"
            "                    registry's latest is V - 1 and reads back whole (host), every\n"
            "                    consumer holds V - 1 (its report replaces the job's)\n"
            "  --stream          the trainer announces each layer once it is written and the\n"
            "                    consumers copy it then, before the version is published\n"
            "                    (weft_registry_write_ready; the default)\n"
            "  --whole-versions  consumers take a version once it is published\n"
            "                    (--kill-trainer implies it)\n"
            "  --no-peer         on a GPU, skip the PyTorch sequential path beside the job\n"
            "  --peer-script P   that path's script (default %s)\n"
            "  --json            one JSON object instead of the table (no progress lines)\n"
            "  --quiet           no progress line a version (on stderr otherwise)\n"
            "  --plot FILE       write the versions' timeline (each phase of each version) to\n"
            "                    FILE as an SVG\n"
            "The default is Qwen3-30B-A3B's expert shapes, 2 layers of 32 experts: 302 M\n"
            "parameters, 0.6 GB of FP8 a version. Memory: 16 B a parameter in the trainer\n"
            "(FP32 master, m, v, gradient: 4.8 GB), slots x 0.6 GB of shared memory and\n"
            "0.6 GB a consumer: about 7.8 GB in all. With --model, the layers are as many as\n"
            "fit in 60 %% of the GPU's free memory (registry slots, engines' tensors, two\n"
            "FP32 gradient sets) and half the host's (pinned masters and state), at most\n"
            "the model's; on the host placement, half the host's memory.\n",
            perf_peer_script("update_peer.py"));
    return out == stdout ? 0 : 2;
}

int update_parse(int argc, char **argv, update_options_t *o)
{
    static const struct option longopts[] = {
        {"layers", required_argument, NULL, 'l'},   {"experts", required_argument, NULL, 'e'},
        {"hidden", required_argument, NULL, 'H'},   {"intermediate", required_argument, NULL, 'I'},
        {"versions", required_argument, NULL, 'v'}, {"consumers", required_argument, NULL, 'c'},
        {"slots", required_argument, NULL, 's'},    {"block", required_argument, NULL, 'b'},
        {"lr", required_argument, NULL, 'r'},       {"threads", required_argument, NULL, 't'},
        {"optimizer", required_argument, NULL, 'o'}, {"device", required_argument, NULL, 'D'},
        {"gpu", required_argument, NULL, 'g'},      {"model", required_argument, NULL, 'M'},
        {"offload", no_argument, NULL, 'O'},        {"kill-engine", required_argument, NULL, 'K'},
        {"kill-trainer", required_argument, NULL, 'T'}, {"no-peer", no_argument, NULL, 'n'},
        {"peer-script", required_argument, NULL, 'p'}, {"warmup", required_argument, NULL, 'w'},
        {"whole-versions", no_argument, NULL, 'V'}, {"stream", no_argument, NULL, 'S'},
        {"engine-gpu", required_argument, NULL, 'E'}, {"quiet", no_argument, NULL, 'q'},
        {"json", no_argument, NULL, 'j'},           {"help", no_argument, NULL, 'h'},
        {"plot", required_argument, NULL, 'P'},     {"formula", required_argument, NULL, 'F'},
        {NULL, 0, NULL, 0}};
    uint64_t gpu = 0, engine_gpu = UINT64_MAX;
    int      opt, layers_given = 0;

    *o = (update_options_t){.gpu = -1, .peer = 1, .peer_script = perf_peer_script("update_peer.py"), .layers = 2, .experts = 32, .hidden = 2048, .intermediate = 768, .versions = 0,
                            .consumers = 2, .slots = 3, .block = 128, .lr = 1e-5, .threads = 0,
                            .optimizer = WEFT_OPTIM_ADAMW, .warmup = UINT64_MAX,
                            .whole_versions = -1};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'l': bad = perf_arg_u64("--layers", optarg, 1, UPDATE_MAX_LAYERS, &o->layers); layers_given = 1; break;
        case 'e': bad = perf_arg_u64("--experts", optarg, 1, 4096, &o->experts); break;
        case 'H': bad = perf_arg_u64("--hidden", optarg, 1, 65536, &o->hidden); break;
        case 'I': bad = perf_arg_u64("--intermediate", optarg, 1, 65536, &o->intermediate); break;
        case 'v': bad = perf_arg_u64("--versions", optarg, 1, UPDATE_MAX_VERSIONS, &o->versions); break;
        case 'c': bad = perf_arg_u64("--consumers", optarg, 1, 64, &o->consumers); break;
        case 's': bad = perf_arg_u64("--slots", optarg, 2, 16, &o->slots); break;
        case 'b': bad = perf_arg_u64("--block", optarg, 1, 1024, &o->block); break;
        case 'F': bad = weft_quant_formula_parse(optarg, &o->formula) != WEFT_OK; break;
        case 'r': bad = perf_arg_double("--lr", optarg, 0.0, 1.0, &o->lr); break;
        case 'o': {
            static const perf_arg_word_t optimizers[] = {
                {"adamw", WEFT_OPTIM_ADAMW}, {"muon", WEFT_OPTIM_MUON}, {NULL, 0}};
            bad = perf_arg_word("--optimizer", optarg, optimizers, &o->optimizer);
            break;
        }
        case 't': bad = perf_arg_u64("--threads", optarg, 1, 1024, &o->threads); break;
        case 'D': {
            static const perf_arg_word_t devices[] = {{"host", 0}, {"cuda", 1}, {"auto", -1}, {NULL, 0}};
            bad = perf_arg_word("--device", optarg, devices, &o->gpu);
            break;
        }
        case 'g': bad = perf_arg_u64("--gpu", optarg, 0, 63, &gpu); break;
        case 'E': bad = perf_arg_u64("--engine-gpu", optarg, 0, 63, &engine_gpu); break;
        case 'O': o->offload = 1; break;
        case 'K': bad = perf_arg_u64("--kill-engine", optarg, 1, UPDATE_MAX_VERSIONS, &o->kill_engine_at); break;
        case 'T': bad = perf_arg_u64("--kill-trainer", optarg, 2, UPDATE_MAX_VERSIONS, &o->kill_trainer_at); break;
        case 'n': o->peer = 0; break;
        case 'V': o->whole_versions = 1; break;
        case 'S': o->whole_versions = 0; break;
        case 'w': bad = perf_arg_u64("--warmup", optarg, 0, UPDATE_MAX_VERSIONS - 1, &o->warmup); break;
        case 'p': o->peer_script = optarg; break;
        case 'M': {
            /* hidden, moe intermediate, routed experts, MoE layers (their
             * published configs) */
            static const struct {
                const char *name;
                uint64_t    hidden, intermediate, experts, layers;
            } models[] = {{"qwen3-30b-a3b", 2048, 768, 128, 48},
                          {"qwen3-235b-a22b", 4096, 1536, 128, 94},
                          {"deepseek-v3", 7168, 2048, 256, 58}};
            bad = 2;
            for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
                if (strcmp(optarg, models[m].name) == 0) {
                    o->hidden       = models[m].hidden;
                    o->intermediate = models[m].intermediate;
                    o->experts      = models[m].experts;
                    o->model_layers = models[m].layers;
                    o->model        = models[m].name;
                    bad             = 0;
                }
            }
            if (bad) {
                fprintf(stderr, "weft-perf update: --model: qwen3-30b-a3b, qwen3-235b-a22b or deepseek-v3\n");
            }
            break;
        }
        case 'j': o->json = 1; break;
        case 'q': o->quiet = 1; break;
        case 'P': o->plot = optarg; break;
        case 'h': return update_usage(stdout) + 1;
        default: return update_usage(stderr);
        }
        if (bad) {
            return 2;
        }
    }
    o->device        = (int)gpu;
    o->engine_device = engine_gpu == UINT64_MAX ? o->device : (int)engine_gpu;
    o->versions_given = o->versions != 0;
    if (!o->versions_given) {
        o->versions = 5; /* on a GPU the warm-up is added once the placement is known */
    }
    if (o->versions_given && o->warmup != UINT64_MAX && o->warmup >= o->versions) {
        fprintf(stderr, "weft-perf update: --warmup N leaves no version to time (--versions > N)\n");
        return 2;
    }
    if (o->kill_engine_at >= o->versions) {
        fprintf(stderr, "weft-perf update: --kill-engine V needs a version after V (--versions > V)\n");
        return 2;
    }
    if (o->kill_trainer_at != 0) {
        /* The witness checks that consumers still hold V - 1 untouched;
         * a consumer streaming V would hold part of it. */
        if (o->whole_versions == 0) {
            fprintf(stderr, "weft-perf update: --kill-trainer checks whole versions: not with --stream\n");
            return 2;
        }
        o->whole_versions = 1;
    }
    if (o->kill_trainer_at > o->versions || (o->kill_trainer_at != 0 && o->kill_engine_at != 0)) {
        fprintf(stderr, "weft-perf update: --kill-trainer V needs V <= --versions, and not --kill-engine\n");
        return 2;
    }
    if (o->model != NULL && !layers_given) {
        o->layers = 0; /* fitted to the machine once its GPU is known */
    }
    if (optind != argc || (o->block & (o->block - 1)) != 0) {
        fprintf(stderr, "weft-perf update: unexpected argument, or --block not a power of two\n");
        return 2;
    }
    if (o->layers > UPDATE_MAX_LAYERS || (o->layers ? o->layers : 1) * UPDATE_KINDS * o->experts > (1u << 20)) {
        fprintf(stderr, "weft-perf update: more than %d layers or 2^20 tensors\n", UPDATE_MAX_LAYERS);
        return 2;
    }
    return 0;
}
