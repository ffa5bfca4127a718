/*
 * weft-perf: the host's copy ceiling. What a put over shared memory does
 * is one copy of the bytes into another process's mapping; the most this
 * host can copy, with every CPU at it, bounds any transport's figure
 * there, libweft's and ucx_perftest's alike.
 */
#ifndef WEFT_PERF_COPY_CEILING_H
#define WEFT_PERF_COPY_CEILING_H

#include <stdint.h>

/*
 * Copies `bytes` from one buffer into another on `threads` threads (the
 * calling one among them), each its block, `iterations` times after one
 * untimed; before each, the source is written again on the calling
 * thread (a fresh version, never zeros), and the threads spin, so no
 * wake-up is timed. *median_s gets the median time from the start signal
 * to the last thread done: the smaller of that median and one thread's
 * alone (threads spinning for each other lose whole time slices where
 * the CPUs are shared). At most 256 threads and 1001 iterations are
 * used. Returns 0, or -1 (out of memory or threads; said on stderr).
 */
int perf_copy_ceiling(uint64_t bytes, uint32_t threads, uint32_t iterations, double *median_s);

#endif
