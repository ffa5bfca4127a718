/*
 * weft-perf: the host's copy ceiling. What a put over shared memory does
 * is one copy of the bytes into another process's mapping; the most this
 * host can copy, with every CPU at it, bounds any transport's figure
 * there, libweft's and ucx_perftest's alike.
 */
#ifndef WEFT_PERF_COPY_CEILING_H
#define WEFT_PERF_COPY_CEILING_H

#include "baseline.h"

#include <stdint.h>

/* What the copy ceiling runs with (perf_baseline_run's arg). */
typedef struct perf_copy_ceiling_arg {
    uint32_t threads, iterations;
} perf_copy_ceiling_arg_t;

/*
 * The copy ceiling as a baseline: copies the result's bytes from one
 * buffer into another on `threads` threads (the calling one among them),
 * each its block, `iterations` times after one untimed; before each, the source is written again on the calling
 * thread (a fresh version, never zeros), and the threads spin, so no
 * wake-up is timed. seconds gets the median time from the start signal
 * to the last thread done: the smaller of that median and one thread's
 * alone (threads spinning for each other lose whole time slices where
 * the CPUs are shared). At most 256 threads and 1001 iterations are
 * used. Its note on failure (out of memory or threads; said on stderr
 * too): "no copy ceiling".
 */
extern const perf_baseline_t perf_copy_ceiling_baseline;

#endif
