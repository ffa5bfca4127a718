/*
 * Lanes: threads, each driving a UCX worker of its own on a shared
 * context. The ucx server's put lanes share the puts of a host registry's
 * version to one consumer; a remote consumer's receive lanes only drive
 * their workers, where puts that UCX emulates land. Internal.
 *
 * Why: UCX moves a put's bytes on the threads that post and progress it.
 * Into memory a consumer allocated itself, UCX 1.13's shared-memory
 * transports emulate puts with messages (the consumer's thread copies
 * them out of its FIFO: about 6 GB/s on the H200 host at every size);
 * over TCP the consumer's thread reads them off the socket. Each side's
 * one thread is the limit, so both sides spread the work: each server
 * lane connects to one of the consumer's receive lanes (round robin).
 *
 * How: each lane has its own endpoint to every consumer and its own
 * unpacked keys. A version's ranges are cut into pieces of at most
 * `chunk` bytes; piece i goes on lane i mod count. Each lane flushes its
 * endpoint after its last put, so when every lane finished, every byte
 * of the version is in the consumer's memory.
 *
 * Threads: a lane's worker, endpoints, keys and requests are touched only
 * by its own thread. Everything below is called from one thread (the
 * server's) except where it says otherwise: it hands a job to a
 * consumer's lane set and reads the outcome once every lane finished;
 * while a job runs it may only ask for the close.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_LANES_H
#define WEFT_TRANSPORT_UCX_UCX_LANES_H

#include "transport/plan/plan_ranges.h"
#include "ucx_common.h"
#include "ucx_deliver.h"
#include "transport/ctl/ucx_views.h" /* weft_ucx_blob_t, WEFT_UCX_LANES_MAX */

#include <stdint.h>

typedef struct weft_ucx_lanes    weft_ucx_lanes_t;
typedef struct weft_ucx_lane_set weft_ucx_lane_set_t;

/*
 * The lane count in force: params_lanes where the caller's params set it
 * (`given`), else WEFT_UCX_LANES (auto: half the online CPUs, 1 to 8).
 * 1 means no lanes: the server's (or the consumer's) own thread does the
 * work. A value outside 1..WEFT_UCX_LANES_MAX is WEFT_ERR_INVALID_PARAM,
 * logged.
 */
weft_status_t weft_ucx_lanes_count_for(int given, uint32_t params_lanes, uint32_t *count);

/*
 * Starts `count` (2..WEFT_UCX_LANES_MAX) lanes on ucx's context, which
 * must have been opened for shared workers (weft_ucx_open's `shared`).
 * Each lane has at most max_in_flight puts of at most `chunk` bytes in
 * flight per consumer. A consumer's receive lanes pass its delivery sink
 * (ucx_deliver.h): each lane's worker takes deliveries into it; the
 * server passes NULL, and its lanes' workers refuse them. The lanes end with weft_ucx_lanes_destroy, after the context's
 * other users stopped using it.
 */
weft_status_t weft_ucx_lanes_create(const weft_ucx_t *ucx, uint32_t count, uint64_t chunk,
                                    uint64_t max_in_flight, weft_ucx_deliver_sink_t *sink,
                                    weft_ucx_lanes_t **out);
uint32_t      weft_ucx_lanes_count(const weft_ucx_lanes_t *lanes);

/* Lane i's worker address (for a consumer's VIEWS), valid until destroy.
 * Any thread. */
void weft_ucx_lanes_address(const weft_ucx_lanes_t *lanes, uint32_t i, const void **address,
                            size_t *length);

/* Readable when a job finished or a close ended; weft_ucx_lanes_drain
 * empties it. For the server's poll set. */
int  weft_ucx_lanes_fd(const weft_ucx_lanes_t *lanes);
void weft_ucx_lanes_drain(weft_ucx_lanes_t *lanes);

/*
 * Orders the caller's memory with the lanes' in both directions: what
 * UCX wrote on a lane before the call is visible to the caller after it,
 * and what the caller wrote or read before it comes before anything UCX
 * does on a lane after it. A consumer calls it when the server says a
 * version's puts are done (before it reads its views) and before it asks
 * for more puts (after it read or patched them). UCX emulates puts over
 * some transports (TCP, and shared memory into memory it did not
 * allocate) by copying on the target's lane threads, and the news that
 * they are done, like the request that starts them, goes through another
 * process (the server, over its socket): that orders nothing in this
 * process's memory model, and ThreadSanitizer rightly sees a race. Any
 * one thread at a time; it waits at most for the progress calls running
 * now.
 */
void weft_ucx_lanes_sync(weft_ucx_lanes_t *lanes);

/* Ends the threads: each releases what it still holds of its consumers
 * (keys, a close still in flight) and destroys its worker and endpoints.
 * The lane sets may be freed after. Idempotent. */
void weft_ucx_lanes_stop(weft_ucx_lanes_t *lanes);

/* Stops the lanes and frees them. Every lane set must have been freed.
 * NULL is a no-op. */
void weft_ucx_lanes_destroy(weft_ucx_lanes_t *lanes);

/*
 * One consumer on every lane. `regions` (the consumer's registered memory)
 * must outlive the set; by_messages: its bytes go as active messages
 * (ucx_deliver.h), not puts; `name` is for the log.
 */
weft_status_t weft_ucx_lane_set_create(weft_ucx_lanes_t *lanes, const weft_wire_span_t *regions,
                                       uint32_t region_count, int by_messages, const char *name,
                                       weft_ucx_lane_set_t **out);

/*
 * Lane i makes its endpoint to the consumer's worker addresses[i mod
 * address_count] (with peer-failure reports where weft_ucx_connect gives
 * them) and unpacks the regions' packed keys (rkeys[r] for regions[r]).
 * The set keeps copies of both (a lane may still read them after a
 * timeout), so the caller's need to live only during the call. Blocks
 * until every lane answered or deadline_ns (WEFT_ERR_TIMEOUT). Once only;
 * on failure the set must still be closed.
 */
weft_status_t weft_ucx_lane_set_connect(weft_ucx_lane_set_t *set, const weft_ucx_blob_t *addresses,
                                        uint32_t address_count, const weft_ucx_blob_t *rkeys,
                                        uint64_t deadline_ns);

/*
 * Starts putting every range of `ranges` (src: bytes into `arena`,
 * registered as memh; dst: the consumer's addresses, inside its regions)
 * and flushing. `ranges` and the arena must stay as they are until
 * weft_ucx_lane_set_poll says WEFT_OK, or, once it said an error, until
 * weft_ucx_lane_set_closed after weft_ucx_lane_set_close. One job at a
 * time.
 */
void weft_ucx_lane_set_send(weft_ucx_lane_set_t *set, const weft_range_list_t *ranges,
                            const uint8_t *arena, ucp_mem_h memh);

/* The outcome of the last connect or send: WEFT_INPROGRESS while a lane
 * still works on it, WEFT_OK when every byte landed, else the error of a
 * lane that failed (WEFT_ERR_CONNECTION: a put, flush or endpoint
 * failed) as soon as one did, while the others may still be at work:
 * the caller then closes the set (weft_ucx_lane_set_close), which stops
 * them. */
weft_status_t weft_ucx_lane_set_poll(const weft_ucx_lane_set_t *set);

/*
 * Asks every lane to end the set's job (its puts stop) and close its
 * endpoint: forced where the endpoint reports peer failures and it failed
 * or `force`, gracefully otherwise (letting its puts end: force-closing a
 * TCP endpoint with puts in flight has crashed UCX 1.13). Returns at once;
 * weft_ucx_lane_set_closed says when every lane is done with the set.
 */
void weft_ucx_lane_set_close(weft_ucx_lane_set_t *set, int force);
int  weft_ucx_lane_set_closed(const weft_ucx_lane_set_t *set);

/* Frees a set that is closed, or whose lanes were stopped. NULL: no-op.
 * Any thread, while the lanes run (it takes each lane's lock). */
void weft_ucx_lane_set_free(weft_ucx_lane_set_t *set);

#endif
