/*
 * Many tensors' checksums on the host's CPUs (kernels/checksum.h): the
 * sum is an addition of per-word terms, so a tensor can be cut into
 * pieces summed on different threads and added up in any order. The
 * mix of each word makes the sum compute-bound (~5 GB/s a core), so a
 * publish of a 100 MB version spent ~20 ms in it on one thread.
 */
#include "config.h"

#include "checksum.h"
#include "common/pool.h"

#include <pthread.h>
#include <stdlib.h>

/* A part of the job (a worker) for each PIECE_BYTES at least. */
#define PIECE_BYTES (UINT64_C(4) << 20)

typedef struct batch {
    const void *const *data;
    const uint64_t    *bytes;
    uint32_t           count;
    uint64_t          *partial;     /* each tensor's sum of terms, added to atomically */
    uint32_t           next_tensor; /* the work queue: a tensor and a piece of it */
    uint64_t           next_at;
    pthread_mutex_t    lock;
} batch_t;

/* The next piece to sum, or 0 when there is none. */
static int take(batch_t *b, uint32_t *tensor, uint64_t *at, uint64_t *n)
{
    int found = 0;

    pthread_mutex_lock(&b->lock);
    while (b->next_tensor < b->count && b->next_at >= b->bytes[b->next_tensor]) {
        b->next_tensor++;
        b->next_at = 0;
    }
    if (b->next_tensor < b->count) {
        const uint64_t left = b->bytes[b->next_tensor] - b->next_at;
        *tensor = b->next_tensor;
        *at = b->next_at;
        *n = left < PIECE_BYTES ? left : PIECE_BYTES;
        b->next_at += *n;
        found = 1;
    }
    pthread_mutex_unlock(&b->lock);
    return found;
}

static void sum_pieces(void *arg, uint32_t part)
{
    batch_t *b = arg;
    uint32_t t;
    uint64_t at, n;

    while (take(b, &t, &at, &n)) {
        __atomic_fetch_add(&b->partial[t], weft_checksum_terms_host(b->data[t], at, n), __ATOMIC_RELAXED);
    }
    (void)part; /* every part takes pieces from the same queue */
}

int weft_checksum_host_batch(const void *const *data, const uint64_t *bytes, uint32_t count, uint64_t *sums)
{
    batch_t  b = {.data = data, .bytes = bytes, .count = count};
    uint64_t total = 0;
    uint32_t want;

    for (uint32_t i = 0; i < count; i++) {
        total += bytes[i];
    }
    b.partial = calloc(count ? count : 1, sizeof(*b.partial));
    if (b.partial == NULL) {
        return -1;
    }
    pthread_mutex_init(&b.lock, NULL);
    want = total / PIECE_BYTES < weft_pool_width() ? (uint32_t)(total / PIECE_BYTES) : weft_pool_width();
    weft_pool_run(want > 0 ? want : 1, sum_pieces, &b);
    for (uint32_t i = 0; i < count; i++) {
        sums[i] = weft_checksum_final(b.partial[i], bytes[i]);
    }
    pthread_mutex_destroy(&b.lock);
    free(b.partial);
    return 0;
}
