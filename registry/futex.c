/* Futex wrappers, and the registry's counted sleep and wake on them. */
#include "futex.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void weft_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    struct timespec ts = {
        .tv_sec = (time_t)(timeout_ns / 1000000000u),
        .tv_nsec = (long)(timeout_ns % 1000000000u),
    };

    (void)syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

void weft_futex_wake_all(uint32_t *word)
{
    (void)syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void weft_registry_wake(uint32_t *seq, uint32_t *waiters)
{
    __atomic_fetch_add(seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(waiters, __ATOMIC_SEQ_CST) != 0) {
        weft_futex_wake_all(seq);
    }
}

void weft_registry_sleep(uint32_t *seq, uint32_t *waiters, uint32_t expected, uint64_t timeout_ns)
{
    __atomic_fetch_add(waiters, 1, __ATOMIC_SEQ_CST);
    weft_futex_wait(seq, expected, timeout_ns);
    __atomic_fetch_sub(waiters, 1, __ATOMIC_SEQ_CST);
}
