/*
 * Put lanes (ucx_lanes.h): each lane is a thread with a UCX worker, a list
 * of consumers' entries, and an eventfd that wakes it when a job is
 * posted. The server thread raises an entry's `posted` count after
 * writing the job; the lane does it and raises `finished` to match, after
 * writing the result. Neither side touches the other's fields in between.
 */
#include "config.h"

#include "ucx_lanes.h"

#include "common/env_config.h"
#include "common/log.h"
#include "common/time_util.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* An idle lane sleeps on its worker and its eventfd at most this long. */
#define LANE_IDLE_WAIT_MS 10
/* After its worker last had work, a lane keeps driving it this long
 * before sleeping: puts arrive (or complete) as many small events, and a
 * sleep and wake-up between each costs more than the event. */
#define LANE_SPIN_NS      UINT64_C(200000)
/* A stopping lane gives its endpoints this long to close. */
#define LANE_STOP_NS      UINT64_C(1000000000)

typedef enum job_kind {
    JOB_CONNECT,
    JOB_SEND
} job_kind_t;

typedef struct lane lane_t;

/* One consumer on one lane. */
typedef struct lane_entry {
    struct lane_entry   *next; /* in its lane's list, under the lane's lock */
    weft_ucx_lane_set_t *set;
    lane_t              *lane;

    /* The job, written by the server thread before it raises `posted`. */
    job_kind_t               kind;
    const void              *address;    /* connect: the consumer's worker (for this lane) */
    const void *const       *rkey_blobs; /* connect: one per region */
    const weft_range_list_t *ranges;     /* send */
    const uint8_t           *arena;      /* send */
    ucp_mem_h                memh;       /* send */

    _Atomic uint32_t posted;      /* jobs handed to the lane */
    _Atomic uint32_t finished;    /* jobs the lane finished; result is the last one's */
    _Atomic int      close_asked; /* 0, or 1 (close) / 2 (close, forced) */
    _Atomic int      closed;      /* the lane is done with this entry */
    weft_status_t    result;

    /* The lane thread's own. */
    uint32_t         started; /* the job being done is number started */
    int              active;
    ucp_ep_h         ep;
    int              reports; /* the endpoint reports peer failures */
    int              ep_failed;
    ucp_rkey_h      *rkeys;
    uint64_t         piece, range, offset; /* the next piece of a send */
    uint64_t         in_flight;
    int              put_failed;
    ucs_status_ptr_t flush;
    ucs_status_ptr_t close;
    int              closing;
} lane_entry_t;

struct weft_ucx_lane_set {
    weft_ucx_lanes_t       *lanes;
    const weft_wire_span_t *regions;
    uint32_t                region_count;
    int                     by_messages; /* ucx_deliver.h */
    char                    name[64];
    /* connect: the addresses and keys, copied (the entries point in) */
    uint8_t                *copy;
    const void            **rkey_copies;
    lane_entry_t            entry[]; /* one per lane */
};

struct lane {
    weft_ucx_lanes_t *all;
    uint32_t          index;
    weft_ucx_t        ucx; /* its own worker on the server's context */
    ucp_address_t    *address; /* of that worker, taken before the thread starts */
    size_t            address_length;
    int               wake_fd;
    pthread_mutex_t   lock; /* guards `entries` (the list, not the entries) */
    lane_entry_t     *entries;
    pthread_t         thread;
    int               running;
    /* Odd while the thread is inside its worker's progress (see
     * weft_ucx_lanes_sync). */
    _Atomic uint64_t progress_gen;
};

struct weft_ucx_lanes {
    uint32_t    count;
    uint64_t    chunk, max_in_flight;
    int         done_fd; /* the server thread's wake-up */
    _Atomic int stop;
    _Atomic uint64_t handoff; /* raised by weft_ucx_lanes_sync */
    lane_t      lane[];
};

weft_status_t weft_ucx_lanes_count_for(int given, uint32_t params_lanes, uint32_t *count)
{
    long n = params_lanes;

    if (given) {
        if (n < 1 || n > (long)WEFT_UCX_LANES_MAX) {
            weft_log_error("ucx: lanes %ld: 1 to %u expected", n, WEFT_UCX_LANES_MAX);
            return WEFT_ERR_INVALID_PARAM;
        }
    } else if (strcasecmp(weft_config_value(WEFT_CONFIG_UCX_LANES), "auto") == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);

        /* Eight lanes on each side of the H200 host's 16 CPUs moved 3-4
         * times what one did over shared memory, four about 3 times. */
        n = cpus / 2;
        n = n < 1 ? 1 : n > 8 ? 8 : n;
    } else if (weft_config_long(WEFT_CONFIG_UCX_LANES, 1, WEFT_UCX_LANES_MAX, &n) != WEFT_OK) {
        return WEFT_ERR_INVALID_PARAM; /* logged, with the variable's name */
    }
    *count = (uint32_t)n;
    return WEFT_OK;
}

static void signal_fd(int fd)
{
    uint64_t one = 1;

    /* A full counter still wakes its reader: nothing to do on failure. */
    (void)!write(fd, &one, sizeof(one));
}

static void drain_fd(int fd)
{
    uint64_t n;

    (void)!read(fd, &n, sizeof(n));
}

/* --------------------------------------------------------- lane thread */

static void finish(lane_entry_t *e, weft_status_t result)
{
    e->result = result;
    e->active = 0;
    atomic_store_explicit(&e->finished, e->started, memory_order_release);
    signal_fd(e->lane->all->done_fd);
}

static void lane_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    lane_entry_t *e = arg;

    (void)ep;
    e->ep_failed = 1;
    weft_log_info("server: consumer \"%s\": lane %u's endpoint failed: %s", e->set->name,
                  e->lane->index, ucs_status_string(status));
}

static void do_connect(lane_entry_t *e)
{
    const weft_ucx_lane_set_t *set = e->set;
    char                       who[112];
    weft_status_t              status;

    snprintf(who, sizeof(who), "lane %u connecting to consumer \"%s\"", e->lane->index, set->name);
    status = weft_ucx_connect(&e->lane->ucx, e->address, lane_ep_error, e, who, &e->ep, &e->reports);
    if (status == WEFT_OK) {
        e->rkeys = calloc(set->region_count, sizeof(*e->rkeys));
        status = e->rkeys == NULL ? WEFT_ERR_NO_MEMORY : WEFT_OK;
    }
    for (uint32_t r = 0; r < set->region_count && status == WEFT_OK; r++) {
        status = weft_ucx_status(ucp_ep_rkey_unpack(e->ep, e->rkey_blobs[r], &e->rkeys[r]),
                                 "unpacking a consumer's key on a lane");
    }
    finish(e, status);
}

static void put_done(void *request, ucs_status_t status, void *arg)
{
    lane_entry_t *e = arg;

    e->in_flight--;
    if (status != UCS_OK) {
        e->put_failed = 1;
    }
    ucp_request_free(request);
}

/* Posts this lane's pieces until its window is full or none is left. */
static void post_puts(lane_entry_t *e)
{
    const weft_ucx_lanes_t  *all = e->lane->all;
    const weft_range_list_t *list = e->ranges;
    const weft_ucx_target_t  target = {.ep = e->ep, .regions = e->set->regions, .rkeys = e->rkeys,
                                       .region_count = e->set->region_count,
                                       .by_messages = e->set->by_messages};

    while (e->range < list->count && e->in_flight < all->max_in_flight && !e->put_failed) {
        const weft_copy_range_t *r = &list->ranges[e->range];
        uint64_t                 left = r->bytes - e->offset;
        uint64_t                 n = left < all->chunk ? left : all->chunk;

        if (e->piece % all->count == e->lane->index) {
            ucs_status_ptr_t req = weft_ucx_put(&target, e->arena + r->src + e->offset, n,
                                                (uint64_t)(uintptr_t)r->dst + e->offset, e->memh,
                                                put_done, e);

            if (UCS_PTR_IS_ERR(req)) {
                e->put_failed = 1;
                break;
            }
            e->in_flight += req != NULL;
        }
        e->piece++;
        e->offset += n;
        if (e->offset == r->bytes) {
            e->range++;
            e->offset = 0;
        }
    }
}

/* Advances a send: puts, then the flush. Returns 1 while it runs. */
static int advance_send(lane_entry_t *e)
{
    ucs_status_t status;

    if (e->flush == NULL) {
        if (!e->put_failed && !e->ep_failed) {
            post_puts(e);
        }
        if (e->in_flight > 0) {
            return 1;
        }
        if (e->put_failed || e->ep_failed) {
            finish(e, WEFT_ERR_CONNECTION);
            return 0;
        }
        if (e->range < e->ranges->count) {
            return 1;
        }
        /* Every put of this lane done locally; the flush makes them done
         * in the consumer's memory. */
        ucp_request_param_t param = {0};

        e->flush = ucp_ep_flush_nbx(e->ep, &param);
        if (e->flush == NULL) {
            finish(e, WEFT_OK);
            return 0;
        }
        if (UCS_PTR_IS_ERR(e->flush)) {
            e->flush = NULL;
            finish(e, WEFT_ERR_CONNECTION);
            return 0;
        }
    }
    status = ucp_request_check_status(e->flush);
    if (status == UCS_INPROGRESS) {
        return 1;
    }
    ucp_request_free(e->flush);
    e->flush = NULL;
    finish(e, status == UCS_OK && !e->ep_failed ? WEFT_OK : WEFT_ERR_CONNECTION);
    return 0;
}

/*
 * Closes the entry's endpoint, ending its job. Returns 1 while puts it
 * started may still be completing (they need progress, not sleep); a close
 * that only waits for its peer (a graceful close towards a host that went
 * away may never end) lets the lane sleep on its worker between looks.
 */
static int advance_close(lane_entry_t *e, int forced)
{
    if (!e->closing) {
        e->closing = 1;
        if (e->ep != NULL) {
            int                 force = e->reports && (e->ep_failed || forced);
            ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                         .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};

            e->close = ucp_ep_close_nbx(e->ep, &param);
            e->ep = NULL;
            if (UCS_PTR_IS_ERR(e->close)) {
                e->close = NULL;
            }
        }
    }
    if (e->close != NULL) {
        if (ucp_request_check_status(e->close) == UCS_INPROGRESS) {
            return e->in_flight > 0;
        }
        ucp_request_free(e->close);
        e->close = NULL;
    }
    if (e->flush != NULL) {
        if (ucp_request_check_status(e->flush) == UCS_INPROGRESS) {
            return e->in_flight > 0;
        }
        ucp_request_free(e->flush);
        e->flush = NULL;
    }
    if (e->in_flight > 0) {
        return 1;
    }
    for (uint32_t r = 0; e->rkeys != NULL && r < e->set->region_count; r++) {
        if (e->rkeys[r] != NULL) {
            ucp_rkey_destroy(e->rkeys[r]);
        }
    }
    free(e->rkeys);
    e->rkeys = NULL;
    if (e->active) {
        finish(e, WEFT_ERR_CANCELED);
    }
    atomic_store_explicit(&e->closed, 1, memory_order_release);
    signal_fd(e->lane->all->done_fd);
    return 0;
}

/* Does what is asked of one entry now. Returns 1 while work is left. */
static int advance_entry(lane_entry_t *e)
{
    int      close = atomic_load_explicit(&e->close_asked, memory_order_acquire);
    uint32_t posted;

    if (atomic_load_explicit(&e->closed, memory_order_relaxed)) {
        return 0;
    }
    if (close) {
        return advance_close(e, close == 2);
    }
    posted = atomic_load_explicit(&e->posted, memory_order_acquire);
    if (!e->active && posted != e->started) {
        e->started = posted;
        e->active = 1;
        if (e->kind == JOB_CONNECT) {
            do_connect(e);
            return 0;
        }
        e->piece = e->range = e->offset = 0;
        e->put_failed = 0;
    }
    return e->active ? advance_send(e) : 0;
}

/*
 * The end of a lane: what it still holds of its consumers, then its
 * worker. A close or flush still in flight (a graceful close towards a
 * host that went away) is released to UCX, which completes it as the
 * worker goes; puts still in flight complete then too, calling put_done
 * on entries that are still there (sets are freed after the stop).
 */
static void lane_teardown(lane_t *l)
{
    pthread_mutex_lock(&l->lock);
    for (lane_entry_t *e = l->entries; e != NULL; e = e->next) {
        if (e->close != NULL) {
            ucp_request_free(e->close);
            e->close = NULL;
        }
        if (e->flush != NULL) {
            ucp_request_free(e->flush);
            e->flush = NULL;
        }
        for (uint32_t r = 0; e->rkeys != NULL && r < e->set->region_count; r++) {
            if (e->rkeys[r] != NULL) {
                ucp_rkey_destroy(e->rkeys[r]);
            }
        }
        free(e->rkeys);
        e->rkeys = NULL;
    }
    pthread_mutex_unlock(&l->lock);
    if (l->address != NULL) {
        ucp_worker_release_address(l->ucx.worker, l->address);
        l->address = NULL;
    }
    weft_ucx_close_worker(&l->ucx);
}

/*
 * A stopping lane closes, forced, what it still has open, for a bounded
 * time: endpoints then go with no puts in flight and keys after them, as
 * UCX asks. What does not close in time is left to lane_teardown.
 */
static void lane_close_all(lane_t *l)
{
    uint64_t deadline = weft_time_ns() + LANE_STOP_NS;
    int      open;

    do {
        open = 0;
        pthread_mutex_lock(&l->lock);
        for (lane_entry_t *e = l->entries; e != NULL; e = e->next) {
            if (!atomic_load_explicit(&e->closed, memory_order_relaxed)) {
                atomic_store_explicit(&e->close_asked, 2, memory_order_relaxed);
                (void)advance_entry(e);
                open |= !atomic_load_explicit(&e->closed, memory_order_relaxed);
            }
        }
        pthread_mutex_unlock(&l->lock);
        weft_ucx_progress(&l->ucx);
    } while (open && weft_time_ns() < deadline);
}

/* A call that may run the worker's handlers (its progress, or arming
 * it, which progresses it first: weft_ucx_arm), bracketed for
 * weft_ucx_lanes_sync: the generation made odd, then the hand-off read
 * (acquire), both seq_cst so that a sync that saw the generation even
 * has its hand-off seen here; the generation made even (release) after.
 * An arm outside the bracket once let a put's copy into a consumer's
 * views run unordered with the sync (ThreadSanitizer in CI). */
static int lane_worker_call(lane_t *l, int (*call)(weft_ucx_t *ucx))
{
    int result;

    atomic_fetch_add(&l->progress_gen, 1);
    (void)atomic_load(&l->all->handoff);
    result = call(&l->ucx);
    atomic_fetch_add_explicit(&l->progress_gen, 1, memory_order_release);
    return result;
}

static void *lane_main(void *arg)
{
    lane_t  *l = arg;
    uint64_t last_work = 0;

    while (!atomic_load(&l->all->stop)) {
        int busy = 0;

        pthread_mutex_lock(&l->lock);
        for (lane_entry_t *e = l->entries; e != NULL; e = e->next) {
            busy |= advance_entry(e);
        }
        pthread_mutex_unlock(&l->lock);
        if (lane_worker_call(l, weft_ucx_progress)) {
            last_work = weft_time_ns();
            busy = 1;
        }
        /* Puts and closes in flight need progress, not sleep. */
        if (!busy && weft_time_ns() - last_work >= LANE_SPIN_NS && lane_worker_call(l, weft_ucx_arm)) {
            struct pollfd fds[2] = {{.fd = l->ucx.efd, .events = POLLIN},
                                    {.fd = l->wake_fd, .events = POLLIN}};

            if (poll(fds, 2, LANE_IDLE_WAIT_MS) > 0 && (fds[1].revents & POLLIN)) {
                drain_fd(l->wake_fd);
            }
        }
    }
    lane_close_all(l);
    lane_teardown(l);
    return NULL;
}

/* ---------------------------------------------------------- the lanes */

weft_status_t weft_ucx_lanes_create(const weft_ucx_t *ucx, uint32_t count, uint64_t chunk,
                                    uint64_t max_in_flight, weft_ucx_deliver_sink_t *sink,
                                    weft_ucx_lanes_t **out)
{
    weft_ucx_lanes_t *all;
    weft_status_t     status = WEFT_OK;

    if (count < 2 || count > WEFT_UCX_LANES_MAX || chunk == 0 || max_in_flight == 0) {
        return WEFT_ERR_INVALID_PARAM;
    }
    all = calloc(1, sizeof(*all) + count * sizeof(all->lane[0]));
    if (all == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    all->count = count;
    all->chunk = chunk;
    all->max_in_flight = max_in_flight;
    all->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    for (uint32_t i = 0; i < count; i++) {
        all->lane[i].wake_fd = -1;
    }
    if (all->done_fd < 0) {
        weft_log_error("ucx: lanes: eventfd: %s", strerror(errno));
        status = WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < count && status == WEFT_OK; i++) {
        lane_t *l = &all->lane[i];

        l->all = all;
        l->index = i;
        pthread_mutex_init(&l->lock, NULL);
        l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (l->wake_fd < 0) {
            weft_log_error("ucx: lanes: eventfd: %s", strerror(errno));
            status = WEFT_ERR_NO_MEMORY;
            break;
        }
        status = weft_ucx_open_worker(&l->ucx, ucx);
        if (status == WEFT_OK) {
            status = sink != NULL ? weft_ucx_deliver_sink_attach(sink, l->ucx.worker)
                                  : weft_ucx_deliver_refuse(l->ucx.worker);
        }
        if (status == WEFT_OK) {
            status = weft_ucx_status(ucp_worker_get_address(l->ucx.worker, &l->address,
                                                            &l->address_length),
                                     "ucp_worker_get_address");
        }
        if (status == WEFT_OK) {
            int rc = pthread_create(&l->thread, NULL, lane_main, l);

            if (rc != 0) {
                weft_log_error("ucx: lanes: pthread_create: %s", strerror(rc));
                status = WEFT_ERR_NO_MEMORY;
            }
            l->running = rc == 0;
        }
    }
    if (status != WEFT_OK) {
        weft_ucx_lanes_destroy(all);
        return status;
    }
    *out = all;
    return WEFT_OK;
}

uint32_t weft_ucx_lanes_count(const weft_ucx_lanes_t *lanes)
{
    return lanes->count;
}

void weft_ucx_lanes_address(const weft_ucx_lanes_t *lanes, uint32_t i, const void **address,
                            size_t *length)
{
    *address = lanes->lane[i].address;
    *length = lanes->lane[i].address_length;
}

int weft_ucx_lanes_fd(const weft_ucx_lanes_t *lanes)
{
    return lanes->done_fd;
}

void weft_ucx_lanes_drain(weft_ucx_lanes_t *lanes)
{
    drain_fd(lanes->done_fd);
}

/*
 * Both directions in one (Dekker's pattern, seq_cst): the hand-off
 * raised, then each lane's generation read until even. An even value
 * was stored by the end of a progress, after everything UCX did in it
 * and before; an odd one is a progress running, perhaps the one that
 * wrote what the caller was told of, so wait for its end (progress calls
 * are short: one pass over the worker's transports). A lane's next
 * progress reads the hand-off after making its generation odd, so it
 * sees the raise and everything the caller did before it.
 */
void weft_ucx_lanes_sync(weft_ucx_lanes_t *lanes)
{
    atomic_fetch_add(&lanes->handoff, 1);
    for (uint32_t i = 0; i < lanes->count; i++) {
        lane_t *l = &lanes->lane[i];

        while (atomic_load(&l->progress_gen) & 1) {
            (void)sched_yield();
        }
    }
}

void weft_ucx_lanes_stop(weft_ucx_lanes_t *lanes)
{
    /* Every lane wakes first, so that their last closes run together. */
    atomic_store(&lanes->stop, 1);
    for (uint32_t i = 0; i < lanes->count; i++) {
        if (lanes->lane[i].running) {
            signal_fd(lanes->lane[i].wake_fd);
        }
    }
    for (uint32_t i = 0; i < lanes->count; i++) {
        lane_t *l = &lanes->lane[i];

        if (l->running) {
            pthread_join(l->thread, NULL);
            l->running = 0;
        }
    }
}

void weft_ucx_lanes_destroy(weft_ucx_lanes_t *lanes)
{
    if (lanes == NULL) {
        return;
    }
    weft_ucx_lanes_stop(lanes);
    for (uint32_t i = 0; i < lanes->count; i++) {
        lane_t *l = &lanes->lane[i];

        if (l->all == NULL) {
            continue; /* creation stopped before this lane */
        }
        lane_teardown(l); /* a lane whose thread never started */
        if (l->wake_fd >= 0) {
            close(l->wake_fd);
        }
        pthread_mutex_destroy(&l->lock);
    }
    if (lanes->done_fd >= 0) {
        close(lanes->done_fd);
    }
    free(lanes);
}

/* ----------------------------------------------------- one consumer */

weft_status_t weft_ucx_lane_set_create(weft_ucx_lanes_t *lanes, const weft_wire_span_t *regions,
                                       uint32_t region_count, int by_messages, const char *name,
                                       weft_ucx_lane_set_t **out)
{
    weft_ucx_lane_set_t *set = calloc(1, sizeof(*set) + lanes->count * sizeof(set->entry[0]));

    if (set == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    set->lanes = lanes;
    set->regions = regions;
    set->region_count = region_count;
    set->by_messages = by_messages;
    snprintf(set->name, sizeof(set->name), "%s", name);
    for (uint32_t i = 0; i < lanes->count; i++) {
        lane_entry_t *e = &set->entry[i];
        lane_t       *l = &lanes->lane[i];

        e->set = set;
        e->lane = l;
        pthread_mutex_lock(&l->lock);
        e->next = l->entries;
        l->entries = e;
        pthread_mutex_unlock(&l->lock);
    }
    *out = set;
    return WEFT_OK;
}

/* Hands the job written into every entry to its lane. */
static void post(weft_ucx_lane_set_t *set)
{
    for (uint32_t i = 0; i < set->lanes->count; i++) {
        atomic_fetch_add_explicit(&set->entry[i].posted, 1, memory_order_release);
        signal_fd(set->lanes->lane[i].wake_fd);
    }
}

weft_status_t weft_ucx_lane_set_poll(const weft_ucx_lane_set_t *set)
{
    weft_status_t result = WEFT_OK;
    int           running = 0;

    for (uint32_t i = 0; i < set->lanes->count; i++) {
        const lane_entry_t *e = &set->entry[i];

        if (atomic_load_explicit(&e->finished, memory_order_acquire) !=
            atomic_load_explicit(&e->posted, memory_order_relaxed)) {
            running = 1;
        } else if (result == WEFT_OK) {
            result = e->result;
        }
    }
    /* One lane that failed ends the job for all: the version cannot be
     * whole, and the others may wait on the same consumer for as long as
     * the timeout. */
    return result != WEFT_OK ? result : running ? WEFT_INPROGRESS : WEFT_OK;
}

/* Copies the addresses and keys into set->copy; *at[i]: address i's copy. */
static weft_status_t copy_blobs(weft_ucx_lane_set_t *set, const weft_ucx_blob_t *addresses,
                                uint32_t address_count, const weft_ucx_blob_t *rkeys,
                                const void **at)
{
    uint64_t bytes = 0, used = 0;

    for (uint32_t i = 0; i < address_count; i++) {
        bytes += addresses[i].length;
    }
    for (uint32_t r = 0; r < set->region_count; r++) {
        bytes += rkeys[r].length;
    }
    set->copy = malloc(bytes ? bytes : 1);
    set->rkey_copies = calloc(set->region_count ? set->region_count : 1, sizeof(*set->rkey_copies));
    if (set->copy == NULL || set->rkey_copies == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < address_count; i++) {
        memcpy(set->copy + used, addresses[i].data, addresses[i].length);
        at[i] = set->copy + used;
        used += addresses[i].length;
    }
    for (uint32_t r = 0; r < set->region_count; r++) {
        memcpy(set->copy + used, rkeys[r].data, rkeys[r].length);
        set->rkey_copies[r] = set->copy + used;
        used += rkeys[r].length;
    }
    return WEFT_OK;
}

weft_status_t weft_ucx_lane_set_connect(weft_ucx_lane_set_t *set, const weft_ucx_blob_t *addresses,
                                        uint32_t address_count, const weft_ucx_blob_t *rkeys,
                                        uint64_t deadline_ns)
{
    const void   *address_copies[WEFT_UCX_LANES_MAX];
    weft_status_t status;

    if (address_count == 0 || address_count > WEFT_UCX_LANES_MAX || set->copy != NULL) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = copy_blobs(set, addresses, address_count, rkeys, address_copies);
    if (status != WEFT_OK) {
        return status;
    }
    for (uint32_t i = 0; i < set->lanes->count; i++) {
        set->entry[i].kind = JOB_CONNECT;
        set->entry[i].address = address_copies[i % address_count];
        set->entry[i].rkey_blobs = set->rkey_copies;
    }
    post(set);
    /* Making an endpoint by address and unpacking keys is local work: the
     * lanes answer within microseconds of waking. */
    while ((status = weft_ucx_lane_set_poll(set)) == WEFT_INPROGRESS &&
           weft_time_ns() < deadline_ns) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000};

        nanosleep(&ts, NULL);
    }
    if (status == WEFT_INPROGRESS) {
        weft_log_error("server: consumer \"%s\": the put lanes did not connect in time", set->name);
        return WEFT_ERR_TIMEOUT;
    }
    return status;
}

void weft_ucx_lane_set_send(weft_ucx_lane_set_t *set, const weft_range_list_t *ranges,
                            const uint8_t *arena, ucp_mem_h memh)
{
    for (uint32_t i = 0; i < set->lanes->count; i++) {
        set->entry[i].kind = JOB_SEND;
        set->entry[i].ranges = ranges;
        set->entry[i].arena = arena;
        set->entry[i].memh = memh;
    }
    post(set);
}

void weft_ucx_lane_set_close(weft_ucx_lane_set_t *set, int force)
{
    for (uint32_t i = 0; i < set->lanes->count; i++) {
        atomic_store_explicit(&set->entry[i].close_asked, force ? 2 : 1, memory_order_release);
        signal_fd(set->lanes->lane[i].wake_fd);
    }
}

int weft_ucx_lane_set_closed(const weft_ucx_lane_set_t *set)
{
    for (uint32_t i = 0; i < set->lanes->count; i++) {
        if (!atomic_load_explicit(&set->entry[i].closed, memory_order_acquire)) {
            return 0;
        }
    }
    return 1;
}

void weft_ucx_lane_set_free(weft_ucx_lane_set_t *set)
{
    if (set == NULL) {
        return;
    }
    for (uint32_t i = 0; i < set->lanes->count; i++) {
        lane_entry_t *e = &set->entry[i];
        lane_t       *l = e->lane;

        pthread_mutex_lock(&l->lock);
        for (lane_entry_t **at = &l->entries; *at != NULL; at = &(*at)->next) {
            if (*at == e) {
                *at = e->next;
                break;
            }
        }
        pthread_mutex_unlock(&l->lock);
    }
    free(set->rkey_copies);
    free(set->copy);
    free(set);
}
