/*
 * The library's host worker threads: one job at a time cut into parts,
 * the caller working on them too. Internal.
 *
 * Why not a thread a part: a thread made for a job of a millisecond is
 * placed by the kernel where its parent runs and rarely moved in time,
 * so the "parallel" parts ran one after the other (measured in the ucx
 * server's delta encode on a 2-vCPU VM: the second CPU idle, process CPU
 * time equal to the wall time). A parked worker that is woken is put on
 * an idle CPU.
 */
#ifndef WEFT_COMMON_POOL_H
#define WEFT_COMMON_POOL_H

#include <stdint.h>

typedef void (*weft_pool_fn)(void *arg, uint32_t part);

/*
 * Runs fn(arg, p) for every p in [0, parts) and returns when all have
 * returned: the caller takes parts as the workers do, so every part runs
 * even when no worker could be started. Workers (at most one fewer than
 * the host's CPUs, and 7) are started on first need and stay parked
 * between jobs. Jobs of different callers run one after the other.
 * Thread-safe; fork-safe (a child starts its own workers); fn must not
 * call weft_pool_run itself.
 */
void weft_pool_run(uint32_t parts, weft_pool_fn fn, void *arg);

/* The parts worth cutting a job into: the host's CPUs, at most 8. */
uint32_t weft_pool_width(void);

#endif
