/*
 * weft-perf: the processes a measurement forks. Every child is recorded so
 * that a failure kills and reaps them all (no stray processes); a child dies
 * with its parent; every wait is bounded. Children end with _exit(), so that
 * the parent's stdio buffers are not written twice.
 */
#ifndef WEFT_PERF_PROC_H
#define WEFT_PERF_PROC_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#define PERF_CHILDREN_MAX 256

typedef struct perf_children {
    int   count;
    pid_t pid[PERF_CHILDREN_MAX];
} perf_children_t;

/* Set to the signal's number by SIGINT, SIGTERM and SIGHUP once
 * perf_catch_interrupts() ran; loops test it and end through their
 * cleanup path, and a command may exit 128 + it, as a shell reports a
 * process the signal killed. */
extern volatile sig_atomic_t perf_interrupted;

/* Installs the handlers behind perf_interrupted, without SA_RESTART so
 * that a blocking call returns EINTR, and ignores SIGPIPE (a write to a
 * dead child fails with EPIPE instead). Returns -1 on failure (printed). */
int perf_catch_interrupts(void);

/* fork(), recording the child. Returns 0 in the child, which gets SIGKILL
 * when the parent dies; the child's pid in the parent; -1 on failure
 * (printed). */
pid_t perf_fork(perf_children_t *children);

/* In a child of perf_fork that must outlive its parent (a witness of the
 * parent's death, a consumer that keeps what it received): no SIGKILL
 * when the parent dies. */
void perf_outlive_parent(void);

/* Waits up to timeout_ms for child pid to exit and forgets it; *status
 * gets its wait status. Returns 0, or -1 on timeout or failure (printed;
 * the child is still recorded then). */
int perf_wait_child(perf_children_t *children, pid_t pid, unsigned timeout_ms, int *status);

/* Reaps one child that has exited, without waiting. Returns its pid (and
 * *status), 0 when none has exited, -1 on failure. */
pid_t perf_reap_exited(perf_children_t *children, int *status);

/* Like perf_reap_exited, but leaves the child to be reaped (WNOWAIT): for
 * a caller that must look at what the child did before it exited. */
pid_t perf_peek_exited(const perf_children_t *children, int *status);

/* SIGKILLs every recorded child and reaps it. */
void perf_kill_children(perf_children_t *children);

/* "exited with status 1", "killed by signal 9 (Killed)". */
void perf_describe_status(int status, char *buf, size_t size);

#endif
