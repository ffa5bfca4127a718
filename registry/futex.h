/* Futex wait and wake on words in shared memory (not FUTEX_PRIVATE: the
 * waiters are in other processes). Internal. */
#ifndef WEFT_REGISTRY_FUTEX_H
#define WEFT_REGISTRY_FUTEX_H

#include <stdint.h>

/*
 * Sleeps while *word == expected, up to timeout_ns. Returns when woken,
 * when *word differs already, on timeout or on a signal: the caller
 * re-checks its condition in every case.
 */
void weft_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns);

/* Wakes every process sleeping on word. */
void weft_futex_wake_all(uint32_t *word);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t weft_time_ns(void);

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
