/*
 * weft-perf's child-process runner: a program run as a child of this one
 * (perf_fork: recorded, killed with its parent), its stdout (and stderr,
 * when merged) captured into a bounded tail, waited for with a deadline
 * that kills it. For a measurement that runs other programs (weft-perf
 * itself in another role, a peer benchmark, `ip`) and reads the lines
 * they print.
 */
#ifndef WEFT_PERF_LIB_RUNNER_H
#define WEFT_PERF_LIB_RUNNER_H

#include "proc.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PERF_RUN_OUT_MAX 16384 /* the tail of a child's output that is kept */

/* The children of one measurement. */
typedef struct perf_runner {
    const char     *name; /* "weft-perf ucx": the start of its messages */
    perf_children_t children;
    int             cleaning; /* set while cleaning up: interrupts no longer cut waits short */
} perf_runner_t;

/* A child: its output is read into out (NUL-terminated). */
typedef struct perf_run {
    const char *what;
    pid_t       pid; /* 0: not started */
    int         fd;  /* -1 at EOF */
    int         exited, killed, status;
    int         merged; /* out has its stderr too */
    char        out[PERF_RUN_OUT_MAX];
    size_t      len;
} perf_run_t;

/* In the child, after its output is redirected: sets the environment up
 * and execs argv (returns only on failure). NULL: execvp(argv[0]). */
typedef void (*perf_run_exec_fn)(const void *arg, char *const argv[]);

/* Starts argv as `what`, through exec (with arg) unless NULL. 0, or -1
 * (printed). */
int perf_run_start(perf_runner_t *r, perf_run_t *p, const char *what, char *const argv[], int merge_stderr,
                   perf_run_exec_fn exec, const void *arg);

/* Reads what the runs wrote within wait_ms and reaps those that exited. */
void perf_run_pump(perf_runner_t *r, perf_run_t *runs, int n, int wait_ms);

/* Exited with a status other than 0, or killed. */
int perf_run_failed(const perf_run_t *p);

/* Not started, exited with its output read to the end, or killed. */
int perf_run_done(const perf_run_t *p);

/* Kills every child of r still running (all are this measurement's). */
void perf_run_kill_all(perf_runner_t *r, perf_run_t *runs, int n);

/* The rest of the line after `prefix` at a line start, or NULL. */
const char *perf_run_line(const perf_run_t *p, const char *prefix);

/* An interrupt came and r is not cleaning up. */
int perf_run_interrupted(const perf_runner_t *r);

/*
 * Pumps until every run is done or, with `line`, until runs[0] printed
 * it. The deadline or an interrupt kills them all; so does a run that
 * fails, with kill_on_failure (otherwise the others finish on their own).
 * Returns 0 when what was waited for came and nothing failed.
 */
int perf_run_wait(perf_runner_t *r, perf_run_t *runs, int n, const char *line, uint64_t deadline_ns,
                  int kill_on_failure);

/* perf_now_ns() `seconds` from now. */
uint64_t perf_deadline_in_s(double seconds);

/* "server exited with status 1", "server killed (...)". */
void perf_run_describe(const perf_run_t *p, char *buf, size_t size);

/* The last non-empty line of p's output, for a note. */
void perf_run_last_line(const perf_run_t *p, char *buf, size_t size);

#endif
