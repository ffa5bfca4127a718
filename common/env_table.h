/*
 * The WEFT_* environment variables: one table (name, module, default, help,
 * accepted values) and the values in force, read once per process at the
 * first access. Internal, and below the logger: nothing here logs, so that
 * log.c can read WEFT_LOG_LEVEL through it and env_config.c (the typed
 * readers, which log) can sit above both.
 *
 * To add a variable, add one line to WEFT_CONFIG_TABLE; its id is
 * WEFT_CONFIG_<NAME>. `weft-perf info` lists it with no further work.
 */
#ifndef WEFT_COMMON_ENV_TABLE_H
#define WEFT_COMMON_ENV_TABLE_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, module, default, help, accepted): the variable is WEFT_<NAME>;
 * `accepted` says which values are valid, for weft_config_check: "any";
 * "words:a,b,c" (any case); "long:MIN:MAX"; "size:MIN:[MAX]" (bytes, K, M,
 * G or T suffixes); alternatives joined by '|'. The readers at each use
 * apply the same bounds (tests/test_common.c holds them to it). */
#define WEFT_CONFIG_TABLE(X)                                                              \
    X(LOG_LEVEL, "common", "warn",                                                        \
      "log verbosity: off, error, warn, info, debug or trace",                            \
      "words:off,error,warn,info,debug,trace")                                            \
    X(LOG_FILE, "common", "",                                                             \
      "append log lines to this file instead of stderr (%p: pid, %h: host name)",         \
      "any")                                                                              \
    X(REGISTRY_SPIN_US, "registry", "200",                                                \
      "microseconds a reader spins on the latest version before sleeping on a futex "     \
      "(0: futex only)",                                                                  \
      "long:0:10000000")                                                                  \
    X(VERIFY, "registry", "transfers",                                                    \
      "what is checked against the checksums of registries created with them: none; "     \
      "transfers (a remote consumer checks every view that holds a whole tensor before "  \
      "it acknowledges a version, a plan its views before it records one; both "          \
      "fail with WEFT_ERR_CORRUPT); all (also "                                           \
      "weft_registry_lease_tensor, each tensor of a published version)",                  \
      "words:none,transfers,all")                                                         \
    X(CUDA_IPC_KERNEL_MAX, "transport", "auto",                                           \
      "cuda_ipc: copy ranges up to this many bytes (K, M, G suffixes) go through one "   \
      "batched kernel, larger ones through the copy engines (0: copy engines only); "     \
      "auto: every range when the arena and the views share a GPU, 16M otherwise",        \
      "words:auto|size:0:")                                                               \
    X(CUDA_IPC_STREAMS, "transport", "1",                                                 \
      "cuda_ipc: streams the copy-engine ranges are spread over (1..16)",                 \
      "long:1:16")                                                                        \
    X(UCX_CUDA, "transport", "auto",                                                      \
      "ucx: how GPU memory moves: direct (registered with UCX, GPUDirect RDMA where the "  \
      "NIC allows), staged (through pinned host bounce buffers), auto (direct where UCX " \
      "reports GPUDirect RDMA, staged otherwise)",                                        \
      "words:direct,staged,auto")                                                         \
    X(UCX_STAGE_BYTES, "transport", "256M",                                               \
      "ucx: pinned host memory a consumer with staged device views receives through (K, " \
      "M, G suffixes; at least 128K): two halves, a version larger than one half comes "  \
      "in rounds; no more than the views span is taken",                                  \
      "size:131072:")                                                                     \
    X(UCX_LANES, "transport", "auto",                                                     \
      "ucx: lanes, threads with a UCX worker each, that a host registry's server spreads " \
      "its puts to one consumer over, and that a consumer with host views receives "      \
      "them on (1..16; 1: the server's or the consumer's own thread); auto: half the "    \
      "online CPUs, 1 to 8",                                                              \
      "words:auto|long:1:16")                                                             \
    X(UCX_ERR_MODE, "transport", "peer",                                                  \
      "ucx: peer (endpoints report a peer's failure, and the server drops that consumer " \
      "at once; UCX then emulates puts over TCP in software, at about half the "          \
      "bandwidth) or none (UCX's native TCP puts; a failed peer is caught by its "         \
      "bootstrap connection and the timeout, and UCX treats the endpoint's failure as "   \
      "unhandled)",                                                                       \
      "words:peer,none")                                                                  \
    X(UCX_DELIVERY, "transport", "auto",                                                  \
      "ucx: how a server's bytes reach a consumer: put (RMA puts) or am (eager active "    \
      "messages, which the consumer never answers: UCX ends a consumer that answers an "   \
      "emulated put on the endpoint of a server that died); auto: am where UCX would "     \
      "emulate puts (TCP), put where it has native puts (shared memory, RDMA)",          \
      "words:auto,am,put")                                                                \
    X(UCX_SANDBOX, "transport", "",                                                       \
      "ucx: the program in which a peer's worker addresses and memory keys are first "    \
      "handed to UCX, which may crash on forged ones (default: the installed "            \
      "weft-ucx-sandbox); off: hand them to UCX in this process",                        \
      "any")                                                                              \
    X(DELTA, "transport", "auto",                                                         \
      "delta versions (ucx, nccl, cuda_ipc pushed; host and GPU registries): auto (a "   \
      "consumer whose views hold the version before gets only the bytes that changed, "  \
      "where that is smaller; over cuda_ipc only into views on another GPU), off (every " \
      "version whole), force (a delta even where it is no smaller, on one GPU too; for "  \
      "tests)",                                                                           \
      "words:auto,off,force")                                                             \
    X(DELTA_INBOX, "transport", "auto",                                                   \
      "ucx, nccl, cuda_ipc: the memory a consumer receives deltas into (K, M, G "         \
      "suffixes; 0: no "                                                                  \
      "deltas); a version whose delta does not fit comes whole; auto: a sixteenth of "    \
      "its version's bytes, at least 1M",                                                 \
      "words:auto|size:0:")                                                               \
    X(DELTA_WT_REWRITE, "kernels", "off",                                                \
      "the GPU apply of a W's delta followed by its WT's (the same delta, transposed): "  \
      "off (WT scattered into, as any transposed target) or auto (where the delta has "   \
      "at least one change in 256 bytes and the targets allow it, WT written whole as "   \
      "W's new bytes transposed, once W is patched)",                                     \
      "words:off,auto")                                                                   \
    X(LIBRARY, "python", "",                                                              \
      "the Python binding: the libweft.so it loads (default: pkg-config weft's libdir, "  \
      "then the loader's path); libweft itself does not read it",                         \
      "any")                                                                              \
    X(INCLUDE, "python", "",                                                              \
      "the Python binding: the folder holding weft/weft.h whose declarations it uses "    \
      "(default: pkg-config weft's includedir); libweft itself does not read it",         \
      "any")

typedef enum weft_config_id {
#define WEFT_CONFIG_ENUM_(name, module, dflt, help, accepted) WEFT_CONFIG_##name,
    WEFT_CONFIG_TABLE(WEFT_CONFIG_ENUM_)
#undef WEFT_CONFIG_ENUM_
    WEFT_CONFIG_COUNT
} weft_config_id_t;

/* One variable's entry; the strings are static. */
typedef struct weft_env_entry {
    const char *name; /* with the WEFT_ prefix */
    const char *module;
    const char *default_value;
    const char *help;
    const char *accepted; /* the table's spec, above */
} weft_env_entry_t;

/* The entry of `id`, or NULL for an id out of range. */
const weft_env_entry_t *weft_env_entry(weft_config_id_t id);

/*
 * The value in force: the environment's when set (even to ""), else the
 * default; "" for an id out of range. Never NULL; valid until the process
 * exits (a copy: later setenv() calls do not change it). Logs nothing.
 */
const char *weft_config_value_quiet(weft_config_id_t id);

/* 1 when the environment set the variable at the first read. */
int weft_env_is_set(weft_config_id_t id);

/* The WEFT_* variables of the environment that the table does not know,
 * "WEFT_A, WEFT_B", or NULL when there are none. */
const char *weft_env_unknown(void);

#ifdef __cplusplus
}
#endif

#endif
