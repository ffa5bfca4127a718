/*
 * weft-perf delta: how much of a version a byte-sparse delta
 * (<weft/delta.h>) saves between real optimizer steps, on the host.
 *
 * For each optimizer and learning rate: expert masters ~N(0, 0.02) step
 * with libweft's optimizer (host placement, or staged: --placement) on
 * random gradients; after each step the FP8 writer makes the version (W,
 * WT, scale_inv); its delta from the previous version is encoded as
 * libweft's transports send it (W's delta once, for W and, transposed,
 * WT; the scales'; a tensor whole where that is no larger), applied to a
 * copy of the previous version, and the copy compared with the version
 * byte for byte. Reported: the changed fraction of W's bytes, the bytes a
 * delta version puts on the wire against the full version (and had every
 * tensor its own delta), encode and apply time against a copy of the
 * full version's bytes (memcpy, the ceiling of any host transfer), and
 * the wrong bytes.
 *
 * With --link RATE, each case is also served over a link held to RATE
 * between two network namespaces, whole and as deltas (delta_link.c):
 * the update times and their ratio, speedup_rate_limited.
 *
 * Here: the options and the table or JSON of each case; the host codec's
 * measurement is delta_host.c's, the GPU codec's delta_gpu.c's.
 */
#include "lib/args.h"
#include "lib/columns.h"
#include "lib/gpu_buf.h"
#include "lib/json.h"
#include "lib/sysinfo.h"
#include "delta.h"
#include "perf.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>


static int delta_usage(FILE *out)
{
    fprintf(out, "usage: weft-perf delta [options]\n"
                 "  Delta versions on the host: real optimizer steps, each version's FP8 tensors\n"
                 "  against the previous one's; wire bytes, encode and apply time vs a memcpy.\n"
                 "  --experts N        AdamW's experts (16)\n"
                 "  --shape RxC        their matrices (1536x2048)\n"
                 "  --muon-shape ExRxC Muon's experts and matrices (4x512x1024 with --placement\n"
                 "                     host, where Newton-Schulz runs in FP32 on the CPU; with\n"
                 "                     staged, AdamW's experts and shape)\n"
                 "  --steps N          optimizer steps, each a version after the first (4)\n"
                 "  --warmup N         steps before the first version, so that the optimizer's\n"
                 "                     state is a trained one's, as in RL fine-tuning (10)\n"
                 "  --lr X[,X...]      learning rates (1e-6,1e-5)\n"
                 "  --optimizer O      adamw, muon or both (both)\n"
                 "  --threads N        optimizer threads (online CPUs)\n"
                 "  --placement P      where the optimizer's masters live and its steps run: host\n"
                 "                     (its threads) or staged (pinned host memory, the update on\n"
                 "                     GPU 0 through slots: libweft's staged producer, the\n"
                 "                     same bytes for AdamW) (host)\n"
                 "  --link RATE        also serve each case from a ucx server in one network\n"
                 "                     namespace to a consumer in another over a veth link held\n"
                 "                     to RATE by tc (e.g. 1gbit), whole then as deltas; needs\n"
                 "                     root, ip and tc (skipped otherwise)\n"
                 "  --link-gpu         with --link: the server's registry and the consumer's views\n"
                 "                     in GPU memory (GPU 0), the deltas encoded and applied there\n"
                 "  --gpu              also the GPU codec on the same versions: a version's tensors\n"
                 "                     encoded in one batch and applied in one batch in device\n"
                 "                     memory, against a D2D copy of the version; every GPU delta\n"
                 "                     checked against the host encoder's (skipped without a GPU);\n"
                 "                     paired: only W and the scales encoded, each WT patched by\n"
                 "                     its W's delta transposed\n"
                 "  --json             one JSON object per case instead of the table; with --gpu a\n"
                 "                     second one, device cuda: the paired GPU codec under the\n"
                 "                     same keys (against a D2D copy), with --link-gpu's link\n");
    return out == stdout ? 0 : 2;
}

static int parse_lrs(const char *text, delta_options_t *o)
{
    const char *p = text;

    o->lr_count = 0;
    while (*p != '\0' && o->lr_count < MAX_LRS) {
        char  *end;
        double v = strtod(p, &end);
        if (end == p || !(v > 0.0 && v < 1.0)) {
            break;
        }
        o->lrs[o->lr_count++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') {
            break;
        }
    }
    if (o->lr_count == 0 || *p != '\0') {
        fprintf(stderr, "weft-perf delta: --lr takes up to %d rates in (0, 1), comma-separated\n", MAX_LRS);
        return 2;
    }
    return 0;
}

static int parse_options(int argc, char **argv, delta_options_t *o)
{
    static const struct option longopts[] = {
        {"experts", required_argument, NULL, 'e'}, {"shape", required_argument, NULL, 's'},
        {"muon-shape", required_argument, NULL, 'm'}, {"steps", required_argument, NULL, 'n'},
        {"lr", required_argument, NULL, 'l'},      {"optimizer", required_argument, NULL, 'o'},
        {"threads", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {"warmup", required_argument, NULL, 'w'},
        {"link", required_argument, NULL, 'L'},    {"gpu", no_argument, NULL, 'g'},
        {"link-gpu", no_argument, NULL, 'K'},      {"placement", required_argument, NULL, 'P'},
        /* Hidden: the link measurement's processes (delta_link.c). */
        {"role", required_argument, NULL, 'R'},    {"registry", required_argument, NULL, 'G'},
        {"listen", required_argument, NULL, 'I'},  {"connect", required_argument, NULL, 'C'},
        {"token", required_argument, NULL, 'T'},   {"role-optimizer", required_argument, NULL, 'O'},
        {"role-lr", required_argument, NULL, 'r'}, {"role-gpu", no_argument, NULL, 'U'},
        {NULL, 0, NULL, 0},
    };
    static const perf_arg_word_t optimizers[] = {{"adamw", 0}, {"muon", 1}, {"both", 2}, {NULL, 0}};
    int                          opt, which = 2, placement = WEFT_OPTIM_HOST, muon_shape_given = 0;

    *o = (delta_options_t){.experts = 16, .rows = 1536, .cols = 2048, .steps = 4, .warmup = 10, .muon_experts = 4,
                           .muon_rows = 512, .muon_cols = 1024, .lrs = {1e-6, 1e-5}, .lr_count = 2};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case 'e': bad = perf_arg_u64("--experts", optarg, 1, 4096, &o->experts); break;
        case 's':
            bad = sscanf(optarg, "%llux%llu", (unsigned long long *)&o->rows, (unsigned long long *)&o->cols) != 2 ||
                  o->rows < 2 || o->cols < 2 || o->rows > 65536 || o->cols > 65536;
            break;
        case 'm':
            muon_shape_given = 1;
            bad = sscanf(optarg, "%llux%llux%llu", (unsigned long long *)&o->muon_experts,
                         (unsigned long long *)&o->muon_rows, (unsigned long long *)&o->muon_cols) != 3 ||
                  o->muon_experts < 1 || o->muon_rows < 2 || o->muon_cols < 2 || o->muon_rows > 16384 ||
                  o->muon_cols > 16384;
            break;
        case 'n': bad = perf_arg_u64("--steps", optarg, 2, 1000, &o->steps); break;
        case 'w': bad = perf_arg_u64("--warmup", optarg, 0, 10000, &o->warmup); break;
        case 'l': bad = parse_lrs(optarg, o) != 0; break;
        case 'o': bad = perf_arg_word("--optimizer", optarg, optimizers, &which); break;
        case 'P': bad = perf_arg_word("--placement", optarg, delta_placements, &placement); break;
        case 't': bad = perf_arg_u64("--threads", optarg, 1, 1024, &o->threads); break;
        case 'j': o->json = 1; break;
        case 'g': o->gpu = 1; break;
        case 'K': o->link_gpu = 1; break;
        case 'U': o->role_gpu = 1; break;
        case 'L': o->link = optarg; bad = optarg[0] == '\0' || strpbrk(optarg, " \t") != NULL; break;
        case 'R': o->role = optarg; break;
        case 'G': o->registry = optarg; break;
        case 'I': o->listen = optarg; break;
        case 'C': o->connect = optarg; break;
        case 'T': o->token = optarg; break;
        case 'O': o->role_muon = strcmp(optarg, "muon") == 0; break;
        case 'r': o->role_lr = strtod(optarg, NULL); break;
        case 'h': return delta_usage(stdout) + 1;
        default: return delta_usage(stderr);
        }
        if (bad) {
            fprintf(stderr, "weft-perf delta: bad value for an option (see --help)\n");
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "weft-perf delta: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (o->link_gpu && o->link == NULL) {
        fprintf(stderr, "weft-perf delta: --link-gpu needs --link RATE\n");
        return 2;
    }
    o->adamw = which != 1;
    o->muon = which != 0;
    o->placement = (weft_optim_placement_t)placement;
    if (o->placement != WEFT_OPTIM_HOST && !muon_shape_given) { /* the GPU's Newton-Schulz: the experts' shape */
        o->muon_experts = o->experts;
        o->muon_rows = o->rows;
        o->muon_cols = o->cols;
    }
    return 0;
}

enum {
    D_OPTIMIZER, D_LR, D_SHAPE, D_CHANGED, D_WIRE, D_WIRE_PER_TENSOR, D_WIRE_BYTES, D_FULL_BYTES, D_WHOLE, D_ENCODE_MS, D_APPLY_MS,
    D_COPY_MS, D_ENCODE_RATIO, D_APPLY_RATIO, D_GPU_ENCODE_MS, D_GPU_APPLY_MS, D_GPU_COPY_MS, D_GPU_ENCODE_RATIO,
    D_GPU_APPLY_RATIO, D_GPU_ENCODE_STORED_MS, D_GPU_ENCODE_STORED_RATIO, D_GPU_PAIRED_ENCODE_MS,
    D_GPU_PAIRED_ENCODE_RATIO, D_GPU_PAIRED_APPLY_MS, D_GPU_PAIRED_APPLY_RATIO, D_GPU_PAIRED_WIRE, D_GPU_SAME, D_LINK_WHOLE_MS, D_LINK_DELTA_MS, D_LINK_DELTAS, D_SPEEDUP, D_WRONG,
    D_COLUMNS
};

static const perf_column_t delta_columns[D_COLUMNS] = {
    [D_OPTIMIZER]    = {"optimizer", "optimizer", -9, 0, PERF_COLUMN_TEXT},
    [D_LR]           = {"lr", "lr", 7, 0, PERF_COLUMN_G},
    [D_SHAPE]        = {"shape", "shape", -14, 0, PERF_COLUMN_TEXT},
    [D_CHANGED]      = {"w_bytes_changed", "W_changed", 10, 4, PERF_COLUMN_G},
    [D_WIRE]         = {"wire_ratio", "wire_ratio", 11, 4, PERF_COLUMN_G},
    [D_WIRE_PER_TENSOR] = {"wire_ratio_per_tensor", "per_tensor", 11, 4, PERF_COLUMN_G},
    [D_WIRE_BYTES]   = {"wire_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [D_FULL_BYTES]   = {"full_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [D_WHOLE]        = {"tensors_sent_whole", NULL, 0, 0, PERF_COLUMN_UINT},
    [D_ENCODE_MS]    = {"encode_ms", "encode_ms", 10, 2, PERF_COLUMN_DOUBLE},
    [D_APPLY_MS]     = {"apply_ms", "apply_ms", 9, 2, PERF_COLUMN_DOUBLE},
    [D_COPY_MS]      = {"copy_ms", "copy_ms", 8, 2, PERF_COLUMN_DOUBLE},
    [D_ENCODE_RATIO] = {"encode_ratio_copy", "enc/copy", 9, 2, PERF_COLUMN_DOUBLE},
    [D_APPLY_RATIO]  = {"apply_ratio_copy", "apply/copy", 11, 2, PERF_COLUMN_DOUBLE},
    [D_GPU_ENCODE_MS] = {"gpu_encode_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [D_GPU_APPLY_MS]  = {"gpu_apply_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [D_GPU_COPY_MS]   = {"gpu_copy_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [D_GPU_ENCODE_RATIO] = {"gpu_encode_ratio_copy", "gpu_enc/d2d", 12, 2, PERF_COLUMN_DOUBLE},
    [D_GPU_APPLY_RATIO]  = {"gpu_apply_ratio_copy", "gpu_app/d2d", 12, 2, PERF_COLUMN_DOUBLE},
    [D_GPU_ENCODE_STORED_MS] = {"gpu_encode_stored_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [D_GPU_ENCODE_STORED_RATIO] = {"gpu_encode_stored_ratio_copy", "gpu_enc_st/d2d", 15, 2, PERF_COLUMN_DOUBLE},
    [D_GPU_PAIRED_ENCODE_MS] = {"gpu_encode_paired_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [D_GPU_PAIRED_ENCODE_RATIO] = {"gpu_encode_paired_ratio_copy", "gpu_enc_pair/d2d", 17, 2, PERF_COLUMN_DOUBLE},
    [D_GPU_PAIRED_APPLY_MS] = {"gpu_apply_paired_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [D_GPU_PAIRED_APPLY_RATIO] = {"gpu_apply_paired_ratio_copy", "gpu_app_pair/d2d", 17, 2, PERF_COLUMN_DOUBLE},
    [D_GPU_PAIRED_WIRE] = {"wire_ratio_paired", "wire_pair", 10, 4, PERF_COLUMN_G},
    [D_GPU_SAME]      = {"gpu_deltas_equal_host", "gpu=host", 9, 0, PERF_COLUMN_BOOL},
    [D_LINK_WHOLE_MS] = {"link_whole_ms", "whole_ms", 9, 1, PERF_COLUMN_DOUBLE},
    [D_LINK_DELTA_MS] = {"link_delta_ms", "delta_ms", 9, 1, PERF_COLUMN_DOUBLE},
    [D_LINK_DELTAS]   = {"link_versions_as_deltas", NULL, 0, 0, PERF_COLUMN_UINT},
    [D_SPEEDUP]      = {"speedup_rate_limited", "speedup", 8, 2, PERF_COLUMN_DOUBLE},
    [D_WRONG]        = {"wrong_bytes", "wrong", 6, 0, PERF_COLUMN_UINT},
};

/* With --gpu and --json, a second object per case, device "cuda": the
 * paired GPU codec (as the ucx server encodes a GPU registry's versions
 * and a consumer applies them into device views) under the same keys as
 * the host codec's, against a D2D copy of the version; the link figures
 * there when the link ran from GPU memory (--link-gpu). */
enum {
    G_OPTIMIZER, G_LR, G_SHAPE, G_CHANGED, G_WIRE, G_WIRE_BYTES, G_FULL_BYTES, G_ENCODE_MS, G_APPLY_MS, G_COPY_MS,
    G_ENCODE_RATIO, G_APPLY_RATIO, G_SAME, G_LINK_WHOLE_MS, G_LINK_DELTA_MS, G_LINK_DELTAS, G_SPEEDUP, G_WRONG,
    G_COLUMNS
};

static const perf_column_t gpu_columns[G_COLUMNS] = {
    [G_OPTIMIZER]     = {"optimizer", NULL, 0, 0, PERF_COLUMN_TEXT},
    [G_LR]            = {"lr", NULL, 0, 0, PERF_COLUMN_G},
    [G_SHAPE]         = {"shape", NULL, 0, 0, PERF_COLUMN_TEXT},
    [G_CHANGED]       = {"w_bytes_changed", NULL, 0, 4, PERF_COLUMN_G},
    [G_WIRE]          = {"wire_ratio", NULL, 0, 4, PERF_COLUMN_G},
    [G_WIRE_BYTES]    = {"wire_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [G_FULL_BYTES]    = {"full_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
    [G_ENCODE_MS]     = {"encode_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [G_APPLY_MS]      = {"apply_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [G_COPY_MS]       = {"copy_ms", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [G_ENCODE_RATIO]  = {"encode_ratio_copy", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [G_APPLY_RATIO]   = {"apply_ratio_copy", NULL, 0, 3, PERF_COLUMN_DOUBLE},
    [G_SAME]          = {"deltas_equal_host", NULL, 0, 0, PERF_COLUMN_BOOL},
    [G_LINK_WHOLE_MS] = {"link_whole_ms", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [G_LINK_DELTA_MS] = {"link_delta_ms", NULL, 0, 1, PERF_COLUMN_DOUBLE},
    [G_LINK_DELTAS]   = {"link_versions_as_deltas", NULL, 0, 0, PERF_COLUMN_UINT},
    [G_SPEEDUP]       = {"speedup_rate_limited", NULL, 0, 2, PERF_COLUMN_DOUBLE},
    [G_WRONG]         = {"wrong_bytes", NULL, 0, 0, PERF_COLUMN_UINT},
};

/* WEFT_DELTA_WT_REWRITE's value in force ("off" where libweft does not
 * know it). */
static const char *delta_wt_rewrite(void)
{
    const char *value = perf_config_value("WEFT_DELTA_WT_REWRITE");

    return value != NULL ? value : "off";
}

static void print_gpu_case(const delta_options_t *o, const char *optimizer, double lr, const char *shape,
                           const delta_case_result_t *res, const delta_link_result_t *link, int linked)
{
    const uint64_t    wire = res->gpu_wire_paired_bytes;
    const perf_cell_t cells[G_COLUMNS] = {
        [G_OPTIMIZER] = {.text = optimizer},
        [G_LR] = {.d = lr},
        [G_SHAPE] = {.text = shape},
        [G_CHANGED] = {.d = res->changed_w},
        [G_WIRE] = {.d = (double)wire / (double)res->full_bytes},
        [G_WIRE_BYTES] = {.u = wire},
        [G_FULL_BYTES] = {.u = res->full_bytes},
        [G_ENCODE_MS] = {.d = res->gpu_encode_paired_s * 1e3},
        [G_APPLY_MS] = {.d = res->gpu_apply_paired_s * 1e3},
        [G_COPY_MS] = {.d = res->gpu_copy_s * 1e3},
        [G_ENCODE_RATIO] = {.d = res->gpu_encode_paired_s / res->gpu_copy_s},
        [G_APPLY_RATIO] = {.d = res->gpu_apply_paired_s / res->gpu_copy_s},
        [G_SAME] = {.u = res->gpu_mismatched == 0},
        [G_LINK_WHOLE_MS] = {.d = link->full_s * 1e3, .null = !linked},
        [G_LINK_DELTA_MS] = {.d = link->delta_s * 1e3, .null = !linked},
        [G_LINK_DELTAS] = {.u = link->deltas_sent, .null = !linked},
        [G_SPEEDUP] = {.d = link->full_s / link->delta_s, .null = !linked},
        [G_WRONG] = {.u = res->gpu_wrong + (linked ? link->wrong_bytes : 0)},
    };
    perf_json_t json;

    perf_json_begin(&json, stdout);
    perf_json_str(&json, "command", "delta");
    perf_json_str(&json, "device", "cuda");
    perf_json_str(&json, "codec", "paired");
    /* The apply's way with WT (a scatter, or rewritten whole where dense):
     * a record must say which it timed. */
    perf_json_str(&json, "wt_rewrite", delta_wt_rewrite());
    perf_json_str(&json, "placement", delta_placement_name(o->placement));
    perf_json_int(&json, "warmup_steps", (int64_t)o->warmup);
    perf_json_int(&json, "steps", (int64_t)o->steps);
    if (linked) {
        perf_json_str(&json, "link_rate", o->link);
        perf_json_str(&json, "link_memory", "gpu");
    }
    perf_columns_json(&json, "", gpu_columns, G_COLUMNS, cells);
    perf_json_str(&json, "libweft", weft_version());
    perf_json_end(&json);
}

int perf_cmd_delta(int argc, char **argv)
{
    delta_options_t o;
    int             rc = parse_options(argc, argv, &o), failed = 0;

    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    if (o.role != NULL) {
        return delta_link_role(&o);
    }
    if (o.placement != WEFT_OPTIM_HOST && perf_gpu_count() == 0) {
        fprintf(stderr, "weft-perf delta: --placement %s needs a GPU (none usable here); skipped\n",
                delta_placement_name(o.placement));
        return 77;
    }
    if (!o.json) {
        int cpu[2];

        perf_print_host(stdout, perf_cpus_allowed(cpu));
        printf("# delta versions on the host: each version's W, WT (e4m3) and scale_inv against the previous\n"
               "# one's, after a real optimizer step (libweft's, %s placement) on N(0, 1e-2) gradients, %llu\n"
               "# warm-up steps first; each\n"
               "# tensor a delta (32 B + 4 B a 4 KiB chunk + 3 B a changed byte) or whole when that is no larger,\n"
               "# WT patched by its W's delta transposed, as libweft's transports send them (wire_ratio);\n"
               "# per_tensor: the wire had every tensor, WT too, its own delta;\n"
               "# times: medians over %llu steps of a whole version's encode or apply, against memcpy of its bytes;\n"
               "# %s\n",
               delta_placement_name(o.placement), (unsigned long long)o.warmup, (unsigned long long)o.steps,
               o.link == NULL ? "no transport here (--link RATE adds one): the link columns are null"
                              : "link: a ucx server and a consumer in two network namespaces, a veth pair held to "
                                "the rate by tc;\n# whole_ms and delta_ms: median update (publish to acknowledged, "
                                "every byte checked) with WEFT_DELTA=off, then auto");
        if (o.link != NULL) {
            printf("# link rate: %s, registry and views in %s memory\n", o.link, o.link_gpu ? "GPU" : "host");
        }
        printf("# %s\n", o.gpu ? "gpu (--gpu): the same versions in device memory, all tensors encoded in one batch and applied\n"
                                 "# in one batch, each against a D2D copy of the whole version (CUDA events, medians);\n"
                                 "# pair: only W and the scales encoded, each WT patched by its W's delta transposed;\n"
                                 "# gpu=host: every GPU delta byte for byte the host encoder's"
                               : "no --gpu: the gpu columns are null");
        if (o.gpu) {
            const char *wt = delta_wt_rewrite();

            printf("# WEFT_DELTA_WT_REWRITE=%s: a dense pair's WT %s\n", wt,
                   strcmp(wt, "auto") == 0 ? "written whole as W's new bytes transposed" : "scattered into by W's delta");
        }
        perf_columns_header(stdout, "", delta_columns, D_COLUMNS);
        putchar('\n');
    }
    for (int which = 0; which < 2; which++) {
        const weft_optim_algo_t algo = which == 0 ? WEFT_OPTIM_ADAMW : WEFT_OPTIM_MUON;
        const uint64_t          e = which == 0 ? o.experts : o.muon_experts;
        const uint64_t          r = which == 0 ? o.rows : o.muon_rows, c = which == 0 ? o.cols : o.muon_cols;

        if ((which == 0 && !o.adamw) || (which == 1 && !o.muon)) {
            continue;
        }
        for (int l = 0; l < o.lr_count; l++) {
            delta_case_result_t res;
            delta_link_result_t link = {0};
            int                 linked = 0;
            char                shape[48];

            snprintf(shape, sizeof(shape), "%llux%llux%llu", (unsigned long long)e, (unsigned long long)r,
                     (unsigned long long)c);
            if (delta_host_case(&o, algo, o.lrs[l], e, r, c, &res) != 0) {
                failed = 1;
                continue;
            }
            failed |= res.wrong_bytes != 0 || res.gpu_mismatched != 0 || res.gpu_wrong != 0;
            if (o.link != NULL) {
                int lrc = delta_link_case(&o, algo, o.lrs[l], e, r, c, &link);

                linked = lrc == 0;
                if (lrc == 77) {
                    fprintf(stderr, "weft-perf delta: --link skipped: %s\n", link.note);
                } else if (lrc != 0) {
                    fprintf(stderr, "weft-perf delta: --link failed: %s\n", link.note);
                    failed = 1;
                }
                failed |= linked && link.wrong_bytes != 0;
            }
            {
                /* With the GPU's own object, the link figures of a link
                 * from GPU memory, and its wrong bytes, are that one's. */
                const int         gpu_object = o.json && res.gpu_ran == 1;
                const int         link_here = linked && !(gpu_object && o.link_gpu);
                const perf_cell_t cells[D_COLUMNS] = {
                    [D_OPTIMIZER] = {.text = which == 0 ? "adamw" : "muon"},
                    [D_LR] = {.d = o.lrs[l]},
                    [D_SHAPE] = {.text = shape},
                    [D_CHANGED] = {.d = res.changed_w},
                    [D_WIRE] = {.d = res.wire_ratio},
                    [D_WIRE_PER_TENSOR] = {.d = (double)res.wire_per_tensor_bytes / (double)res.full_bytes},
                    [D_WIRE_BYTES] = {.u = res.wire_bytes},
                    [D_FULL_BYTES] = {.u = res.full_bytes},
                    [D_WHOLE] = {.u = res.tensors_whole},
                    [D_ENCODE_MS] = {.d = res.encode_s * 1e3},
                    [D_APPLY_MS] = {.d = res.apply_s * 1e3},
                    [D_COPY_MS] = {.d = res.copy_s * 1e3},
                    [D_ENCODE_RATIO] = {.d = res.encode_s / res.copy_s},
                    [D_APPLY_RATIO] = {.d = res.apply_s / res.copy_s},
                    [D_GPU_ENCODE_MS] = {.d = res.gpu_encode_s * 1e3, .null = res.gpu_ran != 1},
                    [D_GPU_APPLY_MS] = {.d = res.gpu_apply_s * 1e3, .null = res.gpu_ran != 1},
                    [D_GPU_COPY_MS] = {.d = res.gpu_copy_s * 1e3, .null = res.gpu_ran != 1},
                    [D_GPU_ENCODE_RATIO] = {.d = res.gpu_encode_s / res.gpu_copy_s, .null = res.gpu_ran != 1},
                    [D_GPU_APPLY_RATIO] = {.d = res.gpu_apply_s / res.gpu_copy_s, .null = res.gpu_ran != 1},
                    [D_GPU_ENCODE_STORED_MS] = {.d = res.gpu_encode_stored_s * 1e3, .null = res.gpu_ran != 1},
                    [D_GPU_ENCODE_STORED_RATIO] = {.d = res.gpu_encode_stored_s / res.gpu_copy_s,
                                                   .null = res.gpu_ran != 1},
                    [D_GPU_PAIRED_ENCODE_MS] = {.d = res.gpu_encode_paired_s * 1e3, .null = res.gpu_ran != 1},
                    [D_GPU_PAIRED_ENCODE_RATIO] = {.d = res.gpu_encode_paired_s / res.gpu_copy_s,
                                                   .null = res.gpu_ran != 1},
                    [D_GPU_PAIRED_APPLY_MS] = {.d = res.gpu_apply_paired_s * 1e3, .null = res.gpu_ran != 1},
                    [D_GPU_PAIRED_APPLY_RATIO] = {.d = res.gpu_apply_paired_s / res.gpu_copy_s,
                                                  .null = res.gpu_ran != 1},
                    [D_GPU_PAIRED_WIRE] = {.d = (double)res.gpu_wire_paired_bytes / (double)res.full_bytes,
                                           .null = res.gpu_ran != 1},
                    [D_GPU_SAME] = {.u = res.gpu_mismatched == 0, .null = res.gpu_ran != 1},
                    [D_LINK_WHOLE_MS] = {.d = link.full_s * 1e3, .null = !link_here},
                    [D_LINK_DELTA_MS] = {.d = link.delta_s * 1e3, .null = !link_here},
                    [D_LINK_DELTAS] = {.u = link.deltas_sent, .null = !link_here},
                    [D_SPEEDUP] = {.d = link.full_s / link.delta_s, .null = !link_here},
                    [D_WRONG] = {.u = res.wrong_bytes + (link_here ? link.wrong_bytes : 0) +
                                      (gpu_object ? 0 : res.gpu_wrong)},
                };
                if (o.json) {
                    perf_json_t json;

                    perf_json_begin(&json, stdout);
                    perf_json_str(&json, "command", "delta");
                    perf_json_str(&json, "device", "host");
                    perf_json_str(&json, "placement", delta_placement_name(o.placement));
                    if (res.gpu_ran == 1) { /* its gpu_* columns, too, depend on the apply's way with WT */
                        perf_json_str(&json, "wt_rewrite", delta_wt_rewrite());
                    }
                    perf_json_int(&json, "warmup_steps", (int64_t)o.warmup);
                    perf_json_int(&json, "steps", (int64_t)o.steps);
                    if (o.link != NULL && link_here) {
                        perf_json_str(&json, "link_rate", o.link);
                        perf_json_str(&json, "link_memory", o.link_gpu ? "gpu" : "host");
                    }
                    perf_columns_json(&json, "", delta_columns, D_COLUMNS, cells);
                    perf_json_str(&json, "libweft", weft_version());
                    perf_json_end(&json);
                    if (gpu_object) {
                        print_gpu_case(&o, which == 0 ? "adamw" : "muon", o.lrs[l], shape, &res, &link,
                                       linked && o.link_gpu);
                    }
                } else {
                    perf_columns_row(stdout, "", delta_columns, D_COLUMNS, cells);
                    putchar('\n');
                }
            }
            fflush(stdout);
        }
    }
    return failed ? 1 : 0;
}
