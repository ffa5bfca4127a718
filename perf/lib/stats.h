/* weft-perf: latency samples, in nanoseconds, and their percentiles. */
#ifndef WEFT_PERF_STATS_H
#define WEFT_PERF_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct perf_latency {
    size_t samples;
    double p50_us;
    double p99_us;
    double p999_us;
    double max_us;
} perf_latency_t;

/* Sorts samples[0..n) in place and summarizes them (nearest-rank
 * percentiles). With n == 0 every figure is 0. */
void perf_latency_summarize(uint64_t *samples, size_t n, perf_latency_t *out);

/* Nearest-rank percentile of sorted samples, in ns; permille 500 is the
 * median, 999 the 99.9th percentile. */
uint64_t perf_percentile(const uint64_t *sorted, size_t n, unsigned permille);

/* The finite values among n: how many, their median (nearest rank, the
 * lower of two middle ones) and their least and greatest; NaN for each
 * when none is finite. values is left as it was. n <= PERF_SPREAD_MAX. */
#define PERF_SPREAD_MAX 64
typedef struct perf_spread {
    size_t count;
    double median;
    double min;
    double max;
} perf_spread_t;
void perf_spread_of(const double *values, size_t n, perf_spread_t *out);

/* Bytes per second in GB/s (1e9 bytes); NaN stays NaN (not measured). */
double perf_gbps(uint64_t bytes, double seconds);

/* value with `decimals` decimals into buf, or "-" for NaN (not measured). */
const char *perf_num(char *buf, size_t size, double value, int decimals);

#endif
