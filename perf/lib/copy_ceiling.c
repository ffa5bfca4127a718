/* weft-perf: the host's copy ceiling (copy_ceiling.h). */
#include "config.h"

#include "copy_ceiling.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 256
#define MAX_RUNS    1001

/* A spinning thread's pause: lets its core's other hyperthread run. */
#if defined(__x86_64__) || defined(__i386__)
#define spin_pause() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define spin_pause() __asm__ __volatile__("yield")
#else
#define spin_pause() ((void)0)
#endif

typedef struct ceiling {
    uint8_t         *src, *dst;
    uint64_t         bytes;
    uint32_t         threads;
    _Atomic uint32_t round; /* raised to start a copy; UINT32_MAX: stop */
    _Atomic uint32_t done;  /* threads done with the current round */
} ceiling_t;

typedef struct worker {
    ceiling_t *c;
    uint32_t   index;
} worker_t;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Thread i's block: the bytes split evenly, 64-byte aligned (the last
 * threads may get less, or nothing). */
static void copy_block(ceiling_t *c, uint32_t i)
{
    uint64_t per = ((c->bytes + c->threads - 1) / c->threads + 63) & ~UINT64_C(63);
    uint64_t begin = per * i;
    uint64_t end = begin + per < c->bytes ? begin + per : c->bytes;

    if (begin < end) {
        memcpy(c->dst + begin, c->src + begin, end - begin);
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    ceiling_t *c = w->c;
    uint32_t   seen = 0;

    for (;;) {
        uint32_t round;

        while ((round = atomic_load_explicit(&c->round, memory_order_acquire)) == seen) {
            spin_pause(); /* the copy, not a wake-up, is what is timed */
        }
        if (round == UINT32_MAX) {
            return NULL;
        }
        seen = round;
        copy_block(c, w->index);
        atomic_fetch_add_explicit(&c->done, 1, memory_order_acq_rel);
    }
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int copy_median(uint64_t bytes, uint32_t threads, uint32_t iterations, double *median_s)
{
    ceiling_t  c = {.bytes = bytes, .threads = threads};
    pthread_t  tid[MAX_THREADS];
    worker_t   w[MAX_THREADS];
    uint64_t  *ns = NULL;
    uint32_t   started = 0;
    int        rc = -1;

    threads = threads > MAX_THREADS ? MAX_THREADS : threads;
    iterations = iterations > MAX_RUNS ? MAX_RUNS : iterations;
    c.threads = threads;
    if (threads == 0 || iterations == 0 || bytes == 0) {
        fprintf(stderr, "weft-perf: copy ceiling: bad arguments\n");
        return -1;
    }
    c.src = aligned_alloc(4096, (bytes + 4095) & ~UINT64_C(4095));
    c.dst = aligned_alloc(4096, (bytes + 4095) & ~UINT64_C(4095));
    ns = calloc(iterations, sizeof(*ns));
    if (c.src == NULL || c.dst == NULL || ns == NULL) {
        fprintf(stderr, "weft-perf: copy ceiling: out of memory (2 x %llu bytes)\n",
                (unsigned long long)bytes);
        goto out;
    }
    memset(c.dst, 0xA5, bytes); /* its pages faulted in; the source's by the untimed round */
    for (uint32_t i = 1; i < threads; i++) {
        w[i] = (worker_t){.c = &c, .index = i};
        if (pthread_create(&tid[i], NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "weft-perf: copy ceiling: cannot start thread %u\n", i);
            goto stop;
        }
        started++;
    }
    for (uint32_t r = 0; r <= iterations; r++) {
        uint64_t t0;

        memset(c.src, (int)(r % 255) + 1, bytes); /* a fresh version */
        atomic_store_explicit(&c.done, 0, memory_order_relaxed);
        t0 = now_ns();
        atomic_store_explicit(&c.round, r + 1, memory_order_release);
        copy_block(&c, 0);
        while (atomic_load_explicit(&c.done, memory_order_acquire) != threads - 1) {
            spin_pause();
        }
        if (r > 0) { /* the first is untimed */
            ns[r - 1] = now_ns() - t0;
        }
    }
    qsort(ns, iterations, sizeof(*ns), compare_u64);
    *median_s = (double)ns[iterations / 2] * 1e-9;
    rc = 0;
stop:
    atomic_store_explicit(&c.round, UINT32_MAX, memory_order_release);
    for (uint32_t i = 1; i <= started; i++) {
        pthread_join(tid[i], NULL);
    }
out:
    free(c.src);
    free(c.dst);
    free(ns);
    return rc;
}

static int ceiling_run(void *arg, perf_baseline_result_t *r)
{
    const perf_copy_ceiling_arg_t *a = arg;
    const uint64_t                 bytes = r->bytes;
    const uint32_t                 threads = a->threads, iterations = a->iterations;
    double                         all, one;

    snprintf(r->setup, sizeof(r->setup),
             "%llu bytes copied from a freshly written buffer on %u threads (and on one), %u times after one "
             "untimed: the median",
             (unsigned long long)bytes, (unsigned)threads, (unsigned)iterations);
    if (copy_median(bytes, threads, iterations, &all) != 0) {
        perf_baseline_note(r, "no copy ceiling");
        return -1;
    }
    /* Where another process holds one of the CPUs, every round of the
     * spinning threads waits for a descheduled one (0.02-0.27 GB/s seen on
     * a 2-CPU machine running tests beside it): one thread alone still
     * copies at the memory's pace, and is as much a ceiling. */
    if (threads > 1 && copy_median(bytes, 1, iterations, &one) == 0 && one < all) {
        all = one;
    }
    r->seconds = all;
    return 0;
}

const perf_baseline_t perf_copy_ceiling_baseline = {"copy ceiling", ceiling_run};
