/*
 * The WEFT_* environment variables: one table (name, module, default, help)
 * and one reader. Values are read once per process, at the first access.
 * Internal.
 *
 * To add a variable, add one line to WEFT_CONFIG_TABLE; its id is
 * WEFT_CONFIG_<NAME>. `weft-perf info` lists it with no further work.
 */
#ifndef WEFT_COMMON_ENV_CONFIG_H
#define WEFT_COMMON_ENV_CONFIG_H

#include <weft/weft.h>

#include <stdint.h>

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
      "words:peer,none")

typedef enum weft_config_id {
#define WEFT_CONFIG_ENUM_(name, module, dflt, help, accepted) WEFT_CONFIG_##name,
    WEFT_CONFIG_TABLE(WEFT_CONFIG_ENUM_)
#undef WEFT_CONFIG_ENUM_
    WEFT_CONFIG_COUNT
} weft_config_id_t;

/*
 * The value in force for a variable: the environment's when set (even to
 * ""), else the default. Never NULL; valid until the process exits.
 * The first call of any weft_config_* reader also warns, once, about
 * WEFT_* variables that are not in the table.
 */
const char *weft_config_value(weft_config_id_t id);

/* 1 when the environment sets the variable. */
int weft_config_is_set(weft_config_id_t id);

/*
 * Typed readers. Each parses the value in force; a value that does not
 * parse or lies outside [min, max] is logged with the variable's name and
 * gives WEFT_ERR_INVALID_PARAM, *out untouched.
 */
weft_status_t weft_config_long(weft_config_id_t id, long min, long max, long *out);

/* 1/0 from y, yes, on, true, 1 / n, no, off, false, 0 (any case). */
weft_status_t weft_config_bool(weft_config_id_t id, int *out);

/* Bytes, with an optional K, M, G or T suffix (powers of 1024). */
weft_status_t weft_config_size(weft_config_id_t id, uint64_t *out);

/* The parsers behind the typed readers; also used for command-line values. */
weft_status_t weft_parse_long(const char *text, long min, long max, long *out);
weft_status_t weft_parse_bool(const char *text, int *out);
weft_status_t weft_parse_size(const char *text, uint64_t *out);

/*
 * Whether the value in force of variable `id` is one its table entry
 * accepts: WEFT_OK, or WEFT_ERR_INVALID_PARAM with what is accepted in
 * why[why_size] (nothing logged). Behind weft_config_check().
 */
weft_status_t weft_config_check_id(weft_config_id_t id, char *why, size_t why_size);

/* WEFT_VERIFY, read once: an unknown value is logged and read as the
 * default, transfers. */
typedef enum weft_verify_mode {
    WEFT_VERIFY_NONE = 0,
    WEFT_VERIFY_TRANSFERS = 1,
    WEFT_VERIFY_ALL = 2
} weft_verify_mode_t;
weft_verify_mode_t weft_verify_mode(void);

/*
 * The value in force without the unknown-variable warning: for the logger,
 * which the warning itself goes through.
 */
const char *weft_config_value_quiet(weft_config_id_t id);

#ifdef __cplusplus
}
#endif

#endif
