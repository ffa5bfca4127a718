/*
 * weft-perf ucx's pieces (see cmd_ucx.c for what it measures): the options,
 * a case's workload, the transports and the processes run on them, a row
 * of results; what the options and output (cmd_ucx.c), the weft
 * measurement (ucx_weft.c), the processes and network namespaces
 * (ucx_fleet.c) and the ucx_perftest baseline (ucx_perftest.c) share.
 */
#ifndef WEFT_PERF_UCX_H
#define WEFT_PERF_UCX_H

#include "lib/runner.h"
#include "lib/stats.h"

#include <stddef.h>
#include <stdint.h>
#include <weft/weft.h>

#define EXIT_SKIP     77 /* the automake "skipped" status */
#define MAX_ITERS     10000
#define MAX_ROUNDS    9
#define MAX_SIZES     16
#define MAX_SIZE      (UINT64_C(16) << 30)
#define TARGET        0.9
#define STEP_US       UINT64_C(120000000) /* the server's timeout for one transfer or ack */
#define WAIT_US       UINT64_C(240000000) /* a version's wait, on either side */
#define READY_MS      60000u              /* a server's port, a consumer's handshake */
#define SLOW_BYTES_S  20e6                /* a transfer slower than this is stuck */
#define PERFTEST_TRYS 5                   /* message sizes tried for the expert version */
#define PERFTEST_MAX_BYTES (UINT64_C(4) << 30) /* moved by one ucx_perftest run at most */
#define VERSION_BYTES UINT64_C(16777216)        /* --version-bytes' default */
#define MAX_TENSORS   65536u                     /* a size case's tensors a version, at most */

enum { TR_TCP_NETNS = 1, TR_SHM = 2, TR_TCP_LO = 4 };

typedef struct ucx_options {
    int      transports; /* TR_* bits */
    uint64_t sizes[MAX_SIZES];
    size_t   nsizes;
    int      expert, json;
    int      err_none; /* --err-mode: 1 none, 0 peer, -1 as the environment says */
    int      gpu;      /* --memory cuda: a GPU registry into device views */
    int      recv_user; /* --recv-memory user: host views in malloc'd memory, not UCX's */
    uint64_t lanes;    /* --lanes: WEFT_UCX_LANES for the server; 0 as the environment says */
    int      checksums; /* --checksums on: the registry keeps them, the consumer checks (WEFT_VERIFY) */
    uint64_t iters, warmup;
    uint64_t rounds;   /* of each row */
    uint64_t version_bytes; /* a size case's versions: this many bytes of its size's tensors */
    /* Hidden: the processes this command runs itself as. */
    const char *role, *listen, *connect, *token, *registry;
    uint64_t    case_bytes; /* 0: the expert version */
    uint64_t    tensors;    /* of case_bytes each */
} ucx_options_t;

typedef struct ucx_tensor {
    char               name[WEFT_TENSOR_NAME_MAX];
    int32_t            expert;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint32_t           ndim;
    uint64_t           shape[2];
    uint64_t           bytes, offset; /* offset: in the consumer's buffer */
} ucx_tensor_t;

typedef struct ucx_workload {
    ucx_tensor_t *t;
    uint32_t      count;
    uint64_t      bytes;
} ucx_workload_t;

/* Where a process runs: a namespace (NULL: this one), UCX's settings. */
typedef struct ucx_side {
    const char *ns, *dev, *ip;
} ucx_side_t;

typedef struct ucx_transport {
    const char *name, *tls;
    /* [0]: the side that puts (weft server, ucx_perftest client);
     * [1]: the side that receives. */
    ucx_side_t side[2];
} ucx_transport_t;

typedef struct ucx_ctx {
    const ucx_options_t *o;
    perf_runner_t        runner;
    char                 self[4096], perftest[4096], token[64], date[32];
    int                  perftest_mpi; /* built with MPI: run it with -P 0 */
    int                  cpus;         /* this process may run on: the copy ceiling's threads */
    char                 ns[2][32]; /* the namespaces made; "" when none */
    int                  number;    /* of the next registry */
} ucx_ctx_t;

typedef struct ucx_case {
    char     name[32];
    uint64_t bytes;   /* of each tensor; 0: the expert version */
    uint64_t tensors; /* a size case's tensors a version (1 for the expert version) */
} ucx_case_t;

typedef struct ucx_row {
    const char *transport;
    ucx_case_t  c;
    uint64_t    bytes, tensors, iterations;
    double      weft_s, weft_min_s, weft_max_s; /* NaN: not measured */
    double      perftest_gbps;
    uint64_t    perftest_bytes, perftest_iters, perftest_warmup;
    double      perftest_same_gbps; /* with weft's endpoints' error handling; NaN: no figure */
    double      ceiling_s; /* shm: the host's copy ceiling for the version's bytes; NaN: none */
    char        perftest_same[80];  /* which: "-e", or why it is the first run */
    int         ok;    /* every version acked, the last one's bytes right */
    int         clean; /* and both weft processes exited with 0 */
    char        note[1024];
    /* A row of rounds (measure_row): the figures above are the rounds'
     * medians; weft's figure over each peer's, each round's own. */
    uint64_t      rounds;
    perf_spread_t ratio, ratio_same, ratio_ceiling;
} ucx_row_t;

/* ucx_weft.c: the weft measurement. */

/* A size case's tensors a version: version_bytes of them, at least one. */
uint64_t ucx_case_tensors(uint64_t case_bytes, uint64_t version_bytes);

/* A case's tensors (see ucx_weft.c); w->t is the caller's to free. */
int ucx_workload_make(uint64_t case_bytes, uint64_t tensors, ucx_workload_t *w);

/* The hidden --role server or consumer: the process's exit status. */
int ucx_run_role(const ucx_options_t *o);

/* weft: a server role on side 0, a consumer role on side 1, into r. */
void ucx_run_weft(ucx_ctx_t *ctx, const ucx_transport_t *tr, ucx_row_t *r);

/* ucx_fleet.c: the processes and where they run. */

/* Starts argv on side `side` of tr (tr NULL: here, environment as is). */
int ucx_proc_start(ucx_ctx_t *ctx, perf_run_t *p, const char *what, const ucx_transport_t *tr, int side,
                   char *const argv[], int merge_stderr);

/* Appends "; " and the formatted text to note (as much as fits). */
void ucx_add_note(char *note, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Notes why each failed proc failed, with its last line. */
void ucx_note_failures(const perf_run_t *procs, int n, char *note, size_t size);

/* A generous bound on a run moving `bytes` `versions` times. */
double ucx_time_limit_s(uint64_t bytes, uint64_t versions);

/* The tcp-netns transport: two namespaces and a veth pair (see
 * ucx_fleet.c); on failure why says why and the caller tears down. */
int  ucx_netns_setup(ucx_ctx_t *ctx, ucx_transport_t *tr, char *why, size_t size);
void ucx_netns_teardown(ucx_ctx_t *ctx);

/* ucx_perftest.c: the ucx_perftest baseline. */

/* WEFT_UCX_ERR_MODE as weft's processes get it; WEFT_UCX_LANES as weft's
 * server gets it. */
const char *ucx_err_mode(void);
const char *ucx_lanes(void);

/* Whether ucx_perftest was built with MPI (then run with -P 0). */
int ucx_perftest_has_mpi_mode(ucx_ctx_t *ctx);

/* ucx_perftest at the row's put size, as many puts as weft's, into r. */
void ucx_run_perftest(ucx_ctx_t *ctx, const ucx_transport_t *tr, ucx_row_t *r);

#endif
