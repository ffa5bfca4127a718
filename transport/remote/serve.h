/*
 * What the servers of every transport across nodes share: the listening
 * socket, token and stats (weft_serve_t, embedded first in each server),
 * and the transport-neutral life of one consumer (weft_serve_peer_t,
 * embedded in each server's peer): the hello and its token, the plan of
 * its views, its registry record, the lease of the version in flight, the
 * ack, and the record of its failure when it is dropped. Each server's
 * thread drives these; the bytes are the transport's. Internal.
 */
#ifndef WEFT_TRANSPORT_REMOTE_SERVE_H
#define WEFT_TRANSPORT_REMOTE_SERVE_H

#include "transport/plan.h"
#include "wire.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <weft/transport.h>

typedef struct weft_serve {
    weft_registry_h     reg;
    int                 listen_fd;
    uint16_t            port;
    char                token[WEFT_TOKEN_MAX + 1];
    uint32_t            protocol;   /* the transport's HELLO protocol */
    uint64_t            timeout_us;
    uint64_t            window;     /* params.window_bytes or the transport's default */
    pthread_t           thread;
    int                 thread_started;
    atomic_int          stop;
    pthread_mutex_t     stats_lock;
    weft_server_stats_t stats;
} weft_serve_t;

/* Fills s from validated params (timeout, window, token). */
void weft_serve_init(weft_serve_t *s, weft_registry_h reg, const weft_server_params_t *params,
                     uint32_t protocol, uint64_t default_window);
/* Listens on params->listen; s->port gets the port. */
weft_status_t weft_serve_listen(weft_serve_t *s, const char *listen);
/* Starts main(arg) on the server thread. */
weft_status_t weft_serve_start(weft_serve_t *s, void *(*main)(void *), void *arg);
/* Asks the thread to stop and joins it (no-op when it never started). */
void weft_serve_join(weft_serve_t *s);
/* Closes the socket and wipes the token. */
void weft_serve_fini(weft_serve_t *s);

void weft_serve_stats_add(weft_serve_t *s, uint64_t *field, uint64_t n);
void weft_serve_set_consumers(weft_serve_t *s, uint32_t ready);
void weft_serve_get_stats(weft_serve_t *s, weft_server_stats_t *stats);

/* The latest version published, 0 when none (or on error). */
uint64_t weft_serve_latest(weft_serve_t *s);

typedef struct weft_serve_peer {
    weft_serve_t *server;
    int           fd;
    char          addr[64];
    char          name[WEFT_CONSUMER_NAME_MAX];
    uint64_t      deadline;
    weft_plan_h   plan;
    uint32_t      consumer;
    int           registered;
    uint64_t      acked;   /* the last version it acknowledged */
    uint64_t      version; /* the version in flight */
    weft_lease_t  lease;   /* of `version`, for this consumer alone */
    int           leased;
} weft_serve_peer_t;

/* A connection just accepted: waits for its hello within the timeout. */
void weft_serve_peer_init(weft_serve_peer_t *p, weft_serve_t *s, int fd, const char *addr);

/* Logs and counts a refusal and tells the consumer (the caller drops it). */
void weft_serve_refuse(weft_serve_peer_t *p, weft_status_t status, const char *reason);

/* Checks a HELLO (protocol, token) and keeps the name; refuses on error. */
weft_status_t weft_serve_hello(weft_serve_peer_t *p, const weft_boot_msg_t *msg);

/*
 * Builds the consumer's plan from its views with the checks of
 * weft_plan_create (ops: the transport's remote backend, which copies
 * nothing). Refuses on error (the log and the refusal say why).
 */
weft_status_t weft_serve_plan(weft_serve_peer_t *p, weft_transport_t transport,
                              const weft_transport_ops_t *ops, const weft_recv_view_t *views,
                              uint32_t count);

/* Registers the consumer in the registry under its name; refuses on error. */
weft_status_t weft_serve_register(weft_serve_peer_t *p);

/* The head of READY: u32 consumer id, u64 bytes per version, u64 ranges. */
void weft_serve_put_ready(const weft_serve_peer_t *p, weft_boot_buf_t *buf);

/* Sends a built payload; WEFT_ERR_NO_MEMORY when building it failed. */
weft_status_t weft_serve_send(weft_serve_peer_t *p, uint32_t type, weft_boot_buf_t *buf);

/*
 * Leases the latest version when it is newer than the one acknowledged:
 * 1 and p->version, p->lease and a new deadline set; 0 otherwise (nothing
 * new, or the registry is offloaded or changing: look again soon).
 */
int weft_serve_lease_next(weft_serve_peer_t *p, uint64_t latest);

/* Releases the lease of the version in flight, if held. */
void weft_serve_release(weft_serve_peer_t *p);

/*
 * An ACK of the version in flight: counts it, records it with
 * weft_registry_consumer_received and releases the lease (the transport
 * must no longer read the slot). WEFT_ERR_CORRUPT for anything else.
 */
weft_status_t weft_serve_ack(weft_serve_peer_t *p, const weft_boot_msg_t *msg);

/* Reads one message: WEFT_ERR_CONNECTION when the connection ended. */
weft_status_t weft_serve_read(weft_serve_peer_t *p, weft_boot_msg_t *msg);

/*
 * The registry side of dropping a consumer: logs why, records
 * weft_registry_consumer_failed(version, why) when a version was in
 * flight (telling the consumer with FAILED when tell is set), removes its
 * record, counts it as dropped unless why is WEFT_OK (it left between
 * versions), closes its connection. The lease stays: release it once the
 * transport no longer reads the slot.
 */
void weft_serve_drop(weft_serve_peer_t *p, weft_status_t why, const char *what, int mid_version,
                     int tell);

/* Frees what the peer holds besides the lease (its plan). */
void weft_serve_peer_fini(weft_serve_peer_t *p);

#endif
