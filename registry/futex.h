/* Futex wait and wake on words in shared memory (not FUTEX_PRIVATE: the
 * waiters are in other processes). Internal. */
#ifndef WEFT_REGISTRY_FUTEX_H
#define WEFT_REGISTRY_FUTEX_H

#include "common/time_util.h"

#include <stdint.h>

/*
 * Sleeps while *word == expected, up to timeout_ns. Returns when woken,
 * when *word differs already, on timeout or on a signal: the caller
 * re-checks its condition in every case.
 */
void weft_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns);

/* Wakes every process sleeping on word. */
void weft_futex_wake_all(uint32_t *word);

/* Wakes sleepers on a futex word if any are counted in *waiters (a wake
 * costs a system call; most publishes have nobody asleep). */
void weft_registry_wake(uint32_t *seq, uint32_t *waiters);

/* Sleeps on seq (value seen: expected) up to timeout_ns, counted in
 * *waiters so that a waker knows to call the kernel. */
void weft_registry_sleep(uint32_t *seq, uint32_t *waiters, uint32_t expected, uint64_t timeout_ns);

#endif
