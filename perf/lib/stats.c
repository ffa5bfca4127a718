/* Percentiles by nearest rank: every figure reported is a sample that was
 * seen, never an interpolation between two.
 * Also the GB/s and "-" helpers every bandwidth table uses. */

#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

uint64_t perf_percentile(const uint64_t *sorted, size_t n, unsigned permille)
{
    size_t rank;

    if (n == 0) {
        return 0;
    }
    rank = (permille * n + 999) / 1000; /* ceil(permille / 1000 × n) */
    if (rank < 1) {
        rank = 1;
    }
    if (rank > n) {
        rank = n;
    }
    return sorted[rank - 1];
}

void perf_latency_summarize(uint64_t *samples, size_t n, perf_latency_t *out)
{
    qsort(samples, n, sizeof(samples[0]), compare_u64);
    out->samples = n;
    out->p50_us = (double)perf_percentile(samples, n, 500) / 1e3;
    out->p99_us = (double)perf_percentile(samples, n, 990) / 1e3;
    out->p999_us = (double)perf_percentile(samples, n, 999) / 1e3;
    out->max_us = n > 0 ? (double)samples[n - 1] / 1e3 : 0.0;
}

static int compare_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

void perf_spread_of(const double *values, size_t n, perf_spread_t *out)
{
    double finite[PERF_SPREAD_MAX];
    size_t count = 0;

    for (size_t i = 0; i < n && i < PERF_SPREAD_MAX; i++) {
        if (isfinite(values[i])) {
            finite[count++] = values[i];
        }
    }
    out->count = count;
    if (count == 0) {
        out->median = out->min = out->max = NAN;
        return;
    }
    qsort(finite, count, sizeof(finite[0]), compare_double);
    out->median = finite[(count - 1) / 2];
    out->min = finite[0];
    out->max = finite[count - 1];
}

double perf_gbps(uint64_t bytes, double seconds)
{
    return (double)bytes / seconds / 1e9;
}

const char *perf_num(char *buf, size_t size, double value, int decimals)
{
    if (isfinite(value)) {
        snprintf(buf, size, "%.*f", decimals, value);
    } else {
        snprintf(buf, size, "-");
    }
    return buf;
}
