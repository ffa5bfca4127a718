/*
 * libweft: versioned blockwise-FP8 expert weights, moved from RL trainers to
 * rollout engines.
 *
 * Including <weft/weft.h> is enough to use all of libweft: it includes the
 * leaf header <weft/types.h> (version, status codes, element types, handles
 * and the conventions every call follows), declares the WEFT_*
 * configuration and the query of the backends compiled in, and includes the
 * module headers at its end. The module headers include only <weft/types.h>
 * and headers of modules below them, never this one.
 *
 * Calls in this header are thread-safe.
 */
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Configuration. libweft reads its WEFT_* environment variables once, at the
 * first call that needs one; later changes to the environment are not seen.
 * A WEFT_* variable that libweft does not know is reported once, as a
 * warning. Values given through a call's params struct take precedence over
 * the environment, which takes precedence over the default.
 */
typedef struct weft_config_var {
    const char *name;          /* "WEFT_LOG_LEVEL" */
    const char *module;        /* part of libweft that reads it */
    const char *default_value; /* used when unset; "" for none */
    const char *value;         /* value in force: the environment's or the default */
    int         is_set;        /* 1 when the environment sets it */
    const char *help;          /* one line */
} weft_config_var_t;

/* Number of WEFT_* variables libweft knows. */
WEFT_API size_t weft_config_count(void);

/*
 * Describes variable `index` (0 ≤ index < weft_config_count()). The strings
 * stay valid until the process exits. WEFT_ERR_INVALID_PARAM when index is
 * out of range or var is NULL.
 */
WEFT_API weft_status_t weft_config_describe(size_t index, weft_config_var_t *var);

/*
 * Whether the value in force of variable `index` is one libweft accepts:
 * WEFT_OK, or WEFT_ERR_INVALID_PARAM with what it accepts in
 * why[why_size] (may be NULL; nothing is logged). An invalid value fails
 * the calls that read it, with a logged error, except in the three
 * variables that choose only how work is done, never what is delivered:
 * WEFT_DELTA and WEFT_DELTA_WT_REWRITE are then taken as off and
 * WEFT_VERIFY as transfers (the safe choice), with a logged message.
 * `weft-perf info` flags any invalid value beforehand.
 * WEFT_ERR_INVALID_PARAM too when index is out of range.
 */
WEFT_API weft_status_t weft_config_check(size_t index, char *why, size_t why_size);

/*
 * Backends: the optional dependencies libweft may have been built with, and
 * what each finds on this machine at run time.
 */
typedef enum weft_backend {
    WEFT_BACKEND_HOST  = 0, /* shared memory and memcpy: always built */
    WEFT_BACKEND_CUDA  = 1, /* CUDA runtime: kernels and CUDA IPC */
    WEFT_BACKEND_UCX   = 2, /* UCX: transfers across nodes */
    WEFT_BACKEND_NCCL  = 3, /* NCCL: the baseline transport */
    WEFT_BACKEND_VERBS = 4, /* libibverbs: RDMA device discovery */
    WEFT_BACKEND_LAST  = 5
} weft_backend_t;

#define WEFT_BACKEND_TEXT_MAX 2048

typedef struct weft_backend_info {
    const char *name;      /* "host", "cuda", "ucx", "nccl", "verbs"; static */
    int  compiled;         /* 1 when this library was built with it */
    int  available;        /* 1 when it was found usable at run time */
    char version[128];     /* of what was found at run time; "" when unknown */
    /* One line per item found (devices, transports), or why nothing was. */
    char detail[WEFT_BACKEND_TEXT_MAX];
} weft_backend_info_t;

/*
 * Probes a backend: initializes its runtime if needed (a CUDA probe creates
 * no context but loads the driver) and describes what it finds. A backend
 * that was not compiled in or finds nothing is not an error: info says so.
 * Returns WEFT_ERR_INVALID_PARAM for an unknown backend or a NULL info.
 * Thread-safe; may take a few hundred milliseconds (device enumeration).
 */
WEFT_API weft_status_t weft_backend_query(weft_backend_t backend,
                                          weft_backend_info_t *info);

#ifdef __cplusplus
}
#endif

/* The module headers: <weft/weft.h> gives the whole API. */
#include <weft/registry.h>
#include <weft/transport.h>
#include <weft/ucx.h>
#include <weft/quant.h>
#include <weft/optim.h>
#include <weft/checksum.h>
#include <weft/delta.h>

#endif /* WEFT_WEFT_H */
