/*
 * What the remote consumers of every transport across nodes share: the
 * bootstrap connection to the server (weft_remote_base_t, embedded in each
 * consumer), the hello, the exchange of views for READY, the notices of
 * versions and their acks, and the goodbye. The bytes are the
 * transport's. Internal.
 */
#ifndef WEFT_TRANSPORT_REMOTE_REMOTE_H
#define WEFT_TRANSPORT_REMOTE_REMOTE_H

#include "kernels/checksum.h"
#include "transport/ctl/wire.h"

#include <stdint.h>
#include <weft/transport.h>

typedef struct weft_remote_base {
    int      fd;          /* -1 once closed */
    char     server[256]; /* host:port, for the log */
    int      wanting;     /* a WANT is outstanding (ucx, cuda_ipc) */
    uint64_t want_after;  /* its argument */
    uint64_t want_holds;  /* and the version it said the views hold */
    uint64_t timeout_us;  /* the handshake's, and how soon a dead server shows (bootstrap) */
    /* The server closed its end (its FIN or reset came): its confirmation
     * that none of its writes can land any more, or the end of its
     * process. The server closes only after its writes are over. */
    int      server_closed;
    /* On once the server proved the token and this consumer sent its
     * proof: every later message both ways sealed (auth.h). */
    weft_auth_session_t session;
    /* Verified versions: the checksums of the last VERSION, and where this
     * consumer's views are (weft_remote_base_keep_views) to check them. */
    weft_wire_sums_t    sums;
    uint32_t            view_count;
    const uint8_t     **view_data;  /* malloc'd */
    uint64_t           *view_bytes; /* malloc'd */
    weft_memory_kind_t  view_memory;
    weft_checksum_scratch_t sum_scratch; /* device views: kept between checks */
} weft_remote_base_t;

/* No connection yet; returns the handshake's timeout (params or default). */
uint64_t weft_remote_base_init(weft_remote_base_t *c, const weft_remote_params_t *p);

/* Connects to p->server (weft_remote_base_init named it) before the deadline;
 * a server that stops answering then shows within about the timeout, even
 * between versions (weft_ctl_dead_peer_timeout). */
weft_status_t weft_remote_base_connect(weft_remote_base_t *c, uint64_t deadline_ns);

/*
 * A message the server sent instead of the one expected: its refusal
 * (logged with `what` it refused, its status returned), or WEFT_ERR_CORRUPT.
 */
weft_status_t weft_remote_base_refused(const weft_remote_base_t *c, const weft_ctl_msg_t *msg,
                                   const char *what);

/*
 * HELLO → WELCOME: OK with *welcome (the caller frees its payload), or
 * the server's refusal, or why no answer came (logged).
 */
weft_status_t weft_remote_base_hello(weft_remote_base_t *c, uint32_t protocol,
                                 const weft_remote_params_t *p, uint64_t deadline_ns,
                                 weft_ctl_msg_t *welcome);

/*
 * Sends VIEWS with buf's payload (WEFT_ERR_NO_MEMORY when building it
 * failed) and reads the answer: OK with *ready (the caller frees its
 * payload), or the server's refusal of the views.
 */
weft_status_t weft_remote_base_views(weft_remote_base_t *c, const weft_ctl_buf_t *buf,
                                 uint64_t deadline_ns, weft_ctl_msg_t *ready);

/*
 * Waits until the server's connection is readable (a message, or its
 * close): WEFT_OK, or WEFT_ERR_TIMEOUT at the deadline.
 */
weft_status_t weft_remote_base_wait_readable(const weft_remote_base_t *c, uint64_t deadline_ns);

/*
 * Reads the server's next message, once its connection is readable: OK
 * and *version for a VERSION notice; WEFT_INPROGRESS and *extra (the
 * caller frees its payload) for a message of a type in extra_types
 * (WEFT_CTL_TYPE_BIT of each), which the transport handles (0: none).
 * Otherwise logs why (the connection lost, FAILED, a message that does
 * not open, anything else), closes the connection and returns
 * WEFT_ERR_CONNECTION, WEFT_ERR_CANCELED, WEFT_ERR_AUTH or
 * WEFT_ERR_CORRUPT.
 */
weft_status_t weft_remote_base_notice(weft_remote_base_t *c, uint64_t *version, uint32_t extra_types,
                                  weft_ctl_msg_t *extra);

/*
 * Receives the server's next message before the deadline, opened
 * (auth.h): WEFT_OK and *msg (the caller frees its payload); the
 * connection's errors (server_closed noted); WEFT_ERR_AUTH (logged) for
 * a message that does not open.
 */
weft_status_t weft_remote_base_recv(weft_remote_base_t *c, weft_ctl_msg_t *msg, uint64_t deadline_ns);

/* Sends a message with buf's payload (a transport's own: WEFT_ERR_NO_MEMORY
 * when building it failed): WEFT_ERR_CONNECTION when it could not be sent. */
weft_status_t weft_remote_base_send(weft_remote_base_t *c, uint32_t type, const weft_ctl_buf_t *buf);

/*
 * For transports whose server writes only when asked (ucx, cuda_ipc):
 * sends WANT(after, holds) unless that very request is outstanding (one
 * that timed out stands); holds: the version the views hold verbatim, for
 * a server that sends deltas (0: none vouched for). WEFT_ERR_CONNECTION
 * (logged, the connection closed) when it could not be sent. A VERSION
 * notice answers it (wanting = 0).
 */
weft_status_t weft_remote_base_ask(weft_remote_base_t *c, uint64_t after, uint64_t holds);

/*
 * Keeps where the views are (their addresses and sizes; the views
 * themselves are the caller's), for weft_remote_base_check. Views in
 * `memory`. WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_remote_base_keep_views(weft_remote_base_t *c, const weft_recv_view_t *views, uint32_t count,
                                      weft_memory_kind_t memory);

/*
 * Verified versions (WEFT_VERIFY=transfers or all, with a server whose
 * registry keeps checksums): checks each view that the last VERSION
 * vouched for against its sum, once every byte of `version` is in the
 * views. WEFT_OK (also when there is nothing to check);
 * WEFT_ERR_CORRUPT (logged with the view, both sums and the version) when
 * a view's bytes are not the ones published, or the VERSION spoke of
 * another number of views. Device views: summed on the calling thread's
 * current device (make the views' GPU current), all in one launch,
 * waiting (WEFT_ERR_CUDA when that fails).
 */
weft_status_t weft_remote_base_check(weft_remote_base_t *c, uint64_t version);

/* Acknowledges version v: WEFT_ERR_CONNECTION when it could not be sent. */
weft_status_t weft_remote_base_ack(weft_remote_base_t *c, uint64_t v);

/* Closes the connection, if open, and ends its session; nothing of it is
 * used again. Notes first whether the server had closed its end
 * (server_closed). */
void weft_remote_base_disconnect(weft_remote_base_t *c);

/*
 * After weft_remote_base_bye: waits up to the connect timeout (c->timeout_us)
 * for the server to close the connection, reading and dropping what it
 * still sends. Each turn calls drive(arg) first, when not NULL, and sleeps
 * in wait(arg, fd, ms) when not NULL (in poll() on the connection
 * otherwise), so that a transport keeps its own progress going. Returns
 * WEFT_OK when the server closed its end (server_closed);
 * WEFT_ERR_CONNECTION when the connection was lost otherwise (a reset,
 * the link's keepalive, or lost earlier by this consumer) and
 * WEFT_ERR_TIMEOUT at the deadline, each logged as the server not having
 * confirmed `what` (its writes into the views are over, say). The
 * connection is closed in every case.
 */
weft_status_t weft_remote_base_await_close(weft_remote_base_t *c, const char *what,
                                       void (*drive)(void *arg),
                                       void (*wait)(void *arg, int fd, int ms), void *arg);

/* Tells the server we leave on purpose (it counts that apart from a loss). */
void weft_remote_base_bye(weft_remote_base_t *c);

#endif
