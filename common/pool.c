/* The library's host worker threads (common/pool.h). */
#include "config.h"

#include "common/pool.h"

#include <pthread.h>
#include <unistd.h>

#define POOL_WIDTH_MAX 8 /* the caller and up to 7 workers */

static struct {
    pthread_mutex_t run;      /* one job at a time */
    pthread_mutex_t mu;       /* the fields below */
    pthread_cond_t  work;     /* a new job (generation) */
    pthread_cond_t  done;     /* the job's last part returned */
    uint64_t        generation;
    weft_pool_fn    fn;
    void           *arg;
    uint32_t        parts, next, unfinished;
    uint32_t        workers;  /* started in this process */
    int             atfork;
} pool = {.run = PTHREAD_MUTEX_INITIALIZER,
          .mu = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

/* Takes and runs parts of the current job until none is left. Called
 * with pool.mu held; returns with it held. */
static void take_parts(void)
{
    while (pool.next < pool.parts) {
        const uint32_t part = pool.next++;
        weft_pool_fn   fn = pool.fn;
        void          *arg = pool.arg;

        pthread_mutex_unlock(&pool.mu);
        fn(arg, part);
        pthread_mutex_lock(&pool.mu);
        if (--pool.unfinished == 0) {
            pthread_cond_signal(&pool.done);
        }
    }
}

static void *worker(void *unused)
{
    uint64_t seen;

    (void)unused;
    pthread_mutex_lock(&pool.mu);
    seen = pool.generation;
    for (;;) {
        while (pool.generation == seen) {
            pthread_cond_wait(&pool.work, &pool.mu);
        }
        seen = pool.generation;
        take_parts();
    }
    return NULL; /* not reached: workers live as long as the process */
}

/* fork(): no job runs across it (prepare takes `run`, then `mu`, which a
 * worker holds only briefly), and the child, which has none of the
 * workers, starts its own with fresh condition variables (the parent's
 * may count waiters that do not exist in the child). */
static void fork_prepare(void)
{
    pthread_mutex_lock(&pool.run);
    pthread_mutex_lock(&pool.mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool.run);
}

static void fork_child(void)
{
    pool.workers = 0;
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool.run);
}

uint32_t weft_pool_width(void)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    return cpus < 1 ? 1 : cpus > POOL_WIDTH_MAX ? POOL_WIDTH_MAX : (uint32_t)cpus;
}

/* Workers up to one fewer than the width; a thread that cannot start
 * leaves its parts to the others and the caller. Called with pool.run held. */
static void start_workers(void)
{
    const uint32_t want = weft_pool_width() - 1;

    if (!pool.atfork && pthread_atfork(fork_prepare, fork_parent, fork_child) == 0) {
        pool.atfork = 1;
    }
    while (pool.workers < want) {
        pthread_t      thread;
        pthread_attr_t attr;
        int            started;

        if (pthread_attr_init(&attr) != 0) {
            return;
        }
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&thread, &attr, worker, NULL) == 0;
        (void)pthread_attr_destroy(&attr);
        if (!started) {
            return;
        }
        pool.workers++;
    }
}

void weft_pool_run(uint32_t parts, weft_pool_fn fn, void *arg)
{
    if (parts == 0) {
        return;
    }
    if (parts == 1) {
        fn(arg, 0);
        return;
    }
    pthread_mutex_lock(&pool.run);
    start_workers();
    pthread_mutex_lock(&pool.mu);
    pool.fn = fn;
    pool.arg = arg;
    pool.parts = parts;
    pool.next = 0;
    pool.unfinished = parts;
    pool.generation++;
    pthread_cond_broadcast(&pool.work);
    take_parts();
    while (pool.unfinished != 0) {
        pthread_cond_wait(&pool.done, &pool.mu);
    }
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool.run);
}
