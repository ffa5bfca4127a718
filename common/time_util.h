/* The monotonic clock and deadlines, for every wait with a timeout.
 * Internal. */
#ifndef WEFT_COMMON_TIME_UTIL_H
#define WEFT_COMMON_TIME_UTIL_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t weft_time_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The CLOCK_MONOTONIC time timeout_us from start; a timeout too large to
 * represent (UINT64_MAX: wait for ever, say) saturates instead of wrapping
 * around into the past. */
static inline uint64_t weft_deadline_ns(uint64_t start_ns, uint64_t timeout_us)
{
    uint64_t ns, deadline;

    if (__builtin_mul_overflow(timeout_us, 1000u, &ns) || __builtin_add_overflow(start_ns, ns, &deadline)) {
        return UINT64_MAX;
    }
    return deadline;
}

#endif
