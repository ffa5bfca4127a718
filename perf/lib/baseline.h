/*
 * weft-perf's baselines behind one interface. A baseline is another way of
 * moving the same bytes (the host's copy ceiling, a GPU peer or D2D copy,
 * NCCL send/recv, ucx_perftest, a PyTorch peer) measured beside weft; each
 * gives one result: what was measured, its time or rate, the exact command
 * or setup, the program's version where it has one, and a note when it
 * could not run. The subcommand that ran it prints the result under its
 * own table columns and JSON keys; the baseline only measures and says how.
 */
#ifndef WEFT_PERF_LIB_BASELINE_H
#define WEFT_PERF_LIB_BASELINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct perf_baseline_result {
    const char *what;        /* the baseline's name */
    uint64_t    bytes;       /* moved by one measured unit (a version, a message) */
    double      seconds;     /* the time for `bytes` (the runs' median where it times runs); NaN: none */
    double      gbps;        /* 1e9 bytes/s; NaN: none */
    char        version[64]; /* the program's (torch's), or "" */
    char        setup[2048]; /* the exact command line, or how it was set up */
    char        note[1024];  /* why it could not run, or what else it said or changed; "" */
} perf_baseline_result_t;

typedef struct perf_baseline {
    const char *name; /* "copy ceiling", "ucx_perftest": what the result is of */
    /* Measures with arg, the baseline's own settings, into r (bytes and
     * the rest set up by perf_baseline_run): seconds or gbps, setup, a
     * note. 0, or -1 with a note saying why where the baseline knows
     * (what it printed on stderr already may go unsaid). */
    int (*run)(void *arg, perf_baseline_result_t *r);
} perf_baseline_t;

/*
 * Runs b with arg for `bytes` into r. Whichever of seconds and gbps the
 * baseline left out is computed from the other; on failure both are NaN
 * (the note, where there is one, says why). Returns what b's run returned.
 */
int perf_baseline_run(const perf_baseline_t *b, void *arg, uint64_t bytes, perf_baseline_result_t *r);

/* Adds to r's note, "; " after what is there; cut at its size. */
void perf_baseline_note(perf_baseline_result_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* r's note into dst, cut at `size` as snprintf cuts: for a subcommand
 * whose output always kept a shorter note. */
void perf_baseline_note_to(const perf_baseline_result_t *r, char *dst, size_t size);

#endif
