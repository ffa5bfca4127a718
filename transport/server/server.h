/*
 * What the servers of every transport across nodes share: the listening
 * socket, token and stats (weft_server_base_t, embedded first in each server),
 * and the transport-neutral life of one consumer (weft_server_peer_t,
 * embedded in each server's peer): the hello and its token, the plan of
 * its views, its registry record, the lease of the version in flight, the
 * ack, and the record of its failure when it is dropped. weft_server_base_t
 * also keeps the table of peers (accepted, polled, offered versions,
 * reaped), calling each server's weft_server_peer_ops_t for what differs.
 * Each server's thread drives these; the bytes are the transport's.
 * Internal.
 */
#ifndef WEFT_TRANSPORT_SERVER_SERVER_H
#define WEFT_TRANSPORT_SERVER_SERVER_H

#include "transport/plan/plan.h"
#include "transport/ctl/wire.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <weft/transport.h>

#define WEFT_SERVER_MAX_PEERS 1024u
/* Connections that have not proved the token yet, from one address: a new
 * one beyond this makes the oldest of them go (as does one that finds the
 * table full), so that idle or hostile connections cannot keep a consumer
 * out: a real consumer proves itself within a round trip. */
#define WEFT_SERVER_PREAUTH_PER_ADDRESS 16u

typedef struct weft_server_peer weft_server_peer_t;

/*
 * Where a consumer is in the life every server gives it. The handshake is
 * weft_server_base_t's: HELLO (and the PROOF that answers our CHALLENGE),
 * then VIEWS, whose checks and set-up are the transport's (peer_ops->views);
 * once that sent READY, the consumer is SERVING and every message it sends
 * is the transport's (peer_ops->message).
 */
typedef enum weft_server_phase {
    WEFT_SERVER_PHASE_HELLO,
    WEFT_SERVER_PHASE_VIEWS,
    WEFT_SERVER_PHASE_SERVING
} weft_server_phase_t;

/*
 * What a server does with its own peers (each starts with a
 * weft_server_peer_t), for the peer table and the handshake that
 * weft_server_base_t runs. On the server thread.
 */
typedef struct weft_server_peer_ops {
    size_t size;                                          /* of the server's peer */
    void (*init)(weft_server_peer_t *p);                   /* accepted: zeroed, base set */
    /* VIEWS came from a consumer that proved the token: its checks, its
     * plan (weft_server_base_plan), its registration and READY. WEFT_OK
     * once READY went out, WEFT_INPROGRESS when the transport sends it
     * later from its own turns (the ucx server's sandbox check): the peer
     * is SERVING then; otherwise the peer was dropped or refused, and the
     * status says why. */
    weft_status_t (*views)(weft_server_peer_t *p, const weft_ctl_msg_t *msg);
    void (*message)(weft_server_peer_t *p, const weft_ctl_msg_t *msg); /* from a SERVING peer */
    int (*idle)(const weft_server_peer_t *p);              /* SERVING, no version in flight */
    void (*start)(weft_server_peer_t *p, uint64_t latest); /* latest is published (> 0) */
    int (*reap)(weft_server_peer_t *p);                    /* 1 when it was freed */
    void (*drop)(weft_server_peer_t *p, weft_status_t why, const char *what); /* the transport's dropping */
} weft_server_peer_ops_t;

typedef struct weft_server_base {
    weft_registry_h     reg;
    int                 listen_fd;
    uint16_t            port;
    char                token[WEFT_TOKEN_MAX + 1];
    uint32_t            protocol;   /* the transport's HELLO protocol */
    uint64_t            timeout_us;
    uint64_t            window;     /* params.window_bytes or the transport's default */
    /* What WELCOME carries (the ucx server's worker address; may be none),
     * and whether the server's thread could not use its GPU (every VIEWS
     * is refused then). */
    const void         *welcome;
    uint32_t            welcome_length;
    int                 broken;
    pthread_t           thread;
    int                 thread_started;
    atomic_int          stop;
    pthread_mutex_t     stats_lock;
    weft_server_stats_t stats;
    uint64_t            accepted; /* connections accepted so far */
    /* Out of descriptors: the listener is not polled until accept_resume_ns
     * (a waiting connection would wake every poll), and the log says so once
     * a second with how many accepts failed. */
    uint64_t            accept_resume_ns, accept_log_ns, accept_failures;
    /* The consumers, touched by the server thread alone. */
    const weft_server_peer_ops_t *peer_ops;
    weft_server_peer_t           *peers[WEFT_SERVER_MAX_PEERS];
    uint32_t                     peer_count;
} weft_server_base_t;

/* Fills s from validated params (timeout, window, token). */
void weft_server_base_init(weft_server_base_t *s, weft_registry_h reg, const weft_server_params_t *params,
                     uint32_t protocol, uint64_t default_window,
                     const weft_server_peer_ops_t *peer_ops);
/* Listens on params->listen; s->port gets the port. */
weft_status_t weft_server_base_listen(weft_server_base_t *s, const char *listen);
/* Starts main(arg) on the server thread. */
weft_status_t weft_server_base_start(weft_server_base_t *s, void *(*main)(void *), void *arg);
/* Asks the thread to stop and joins it (no-op when it never started). */
void weft_server_base_join(weft_server_base_t *s);
/* Closes the socket and wipes the token. */
void weft_server_base_fini(weft_server_base_t *s);

void weft_server_base_stats_add(weft_server_base_t *s, uint64_t *field, uint64_t n);
void weft_server_base_set_consumers(weft_server_base_t *s, uint32_t ready);
void weft_server_base_get_stats(weft_server_base_t *s, weft_server_stats_t *stats);

/* weft_server_ops_t's port and get_stats, for servers whose first member
 * is their weft_server_base_t. */
uint16_t weft_server_base_port_of(void *server);
void     weft_server_base_stats_of(void *server, weft_server_stats_t *stats);

/*
 * For the servers that send from GPU registries only (built with CUDA):
 * the registry's arenas must be in device memory (WEFT_ERR_UNSUPPORTED,
 * logged with host_hint, what to use instead) of a GPU this process sees
 * (WEFT_ERR_NO_DEVICE), whose context is made now. *device gets it.
 */
weft_status_t weft_server_gpu_registry(weft_registry_h reg, const char *transport,
                                      const char *host_hint, int *device);

/* What the server thread waits for between two turns. */
typedef enum weft_server_base_wait {
    WEFT_SERVER_BUSY,    /* transfers in flight: no wait, they are polled */
    WEFT_SERVER_SPIN,    /* something ends soon that no fd announces at once: no
                         * wait, but the CPU is yielded to any thread that
                         * waits for it (the transfer's own, say) */
    WEFT_SERVER_SOCKETS, /* a handshake or an ack: the fds, and new versions every
                         * WEFT_SERVER_POLL_US (1 ms with no consumer) */
    WEFT_SERVER_VERSION, /* every consumer idle, waiting for a version newer than
                         * `after`: the registry (a publish wakes it at once), the
                         * fds looked at every WEFT_SERVER_IDLE_WAIT_US */
    WEFT_SERVER_QUIET    /* nothing to do until a consumer speaks: the fds, up to
                         * WEFT_SERVER_IDLE_WAIT_US */
} weft_server_base_wait_t;

#define WEFT_SERVER_IDLE_WAIT_US 10000u
#define WEFT_SERVER_POLL_US      50u

/* Waits as `what` says on fds[0..n) (weft_server_base_poll_fds's, and any fd
 * of the transport's). */
void weft_server_base_sleep(weft_server_base_t *s, struct pollfd *fds, uint32_t n, weft_server_base_wait_t what,
                      uint64_t after);

/* The latest version published, 0 when none (or on error). */
uint64_t weft_server_base_latest(weft_server_base_t *s);

struct weft_server_peer {
    weft_server_base_t *server;
    int           fd;
    char          addr[64];
    char          name[WEFT_CONSUMER_NAME_MAX];
    uint64_t      deadline;
    weft_plan_h   plan;
    /* The handshake (ctl/auth.h): the nonces, and whether the
     * CHALLENGE went out (the next message must be the PROOF). */
    uint8_t       consumer_nonce[32], server_nonce[32];
    int           challenged, authenticated;
    /* On once the PROOF checked out: every later message both ways sealed. */
    weft_auth_session_t session;
    uint64_t      accepted_seq; /* order of acceptance, for the eviction of the oldest */
    weft_server_phase_t phase;
    /* What arrived of a message not yet whole: the server's thread never
     * waits for one peer's bytes. */
    weft_ctl_reader_t reader;
    uint32_t      consumer;
    int           registered;
    uint64_t      acked;   /* the last version it acknowledged */
    uint64_t      version; /* the version in flight */
    weft_lease_t  lease;   /* of `version`, for this consumer alone */
    int           leased;
    uint64_t      leased_ns;   /* when `version` was leased */
    uint64_t      in_place_ns; /* when its bytes were in place, if the transport knows; 0 */
    /* Transports whose consumers ask for each version (ucx, cuda_ipc): a
     * WANT came and no version answered it yet, and its argument. */
    int           wanting;
    uint64_t      want_after;
    /* What the consumer said its views hold verbatim with its last WANT
     * (delta versions; 0: nothing it vouches for). */
    uint64_t      want_holds;
};

/*
 * WANT(a, holds): the consumer waits in weft_remote_receive for a
 * version > a, its views holding version `holds` (wire.h); it may come in
 * any state (a request after one that timed out).
 * WEFT_ERR_CORRUPT when malformed.
 */
weft_status_t weft_server_base_want(weft_server_peer_t *p, const weft_ctl_msg_t *msg);

/* 1 when the consumer asked for a version that `latest` answers. */
int weft_server_base_wants(const weft_server_peer_t *p, uint64_t latest);

/* For the server's sleep: the newest version the consumer has or asked
 * past (a publish beyond it is work); UINT64_MAX when it is not asking. */
uint64_t weft_server_base_want_floor(const weft_server_peer_t *p);

/*
 * The peer table, on the server thread. weft_server_base_poll_fds puts the
 * listener, then each peer's connection, at fds (room for 1 +
 * WEFT_SERVER_MAX_PEERS) and returns how many; after the poll,
 * weft_server_base_poll_events accepts new consumers (peer_ops->init) and reads
 * the peers whose connection spoke (peer_ops->read).
 */
uint32_t weft_server_base_poll_fds(const weft_server_base_t *s, struct pollfd *fds);
void     weft_server_base_poll_events(weft_server_base_t *s, const struct pollfd *fds, uint32_t n);

/* Offers `latest` (weft_server_base_latest, read once by the caller for
 * its whole turn), if any, to every peer (peer_ops->start). */
void weft_server_base_start_versions(weft_server_base_t *s, uint64_t latest);

/* Removes the peers that peer_ops->reap freed. */
void weft_server_base_reap(weft_server_base_t *s);

/* The plan's backend for a consumer's remote addresses: copies nothing. */
weft_status_t weft_server_remote_post(struct weft_plan *plan, const weft_lease_t *lease);

/* A connection just accepted: waits for its hello within the timeout. */
void weft_server_peer_init(weft_server_peer_t *p, weft_server_base_t *s, int fd, const char *addr);

/* Logs and counts a refusal and tells the consumer (the caller drops it). */
void weft_server_base_refuse(weft_server_peer_t *p, weft_status_t status, const char *reason);

/* Refuses the consumer (weft_server_base_refuse) and drops it through the
 * transport (peer_ops->drop, "refused"). */
void weft_server_base_refuse_drop(weft_server_peer_t *p, weft_status_t status, const char *reason);

/*
 * Reads what a peer's readable connection holds and handles it: the
 * handshake here (HELLO checked (protocol) and answered with a CHALLENGE;
 * then the PROOF, checked, and WELCOME with s->welcome; then VIEWS, given
 * to peer_ops->views), every later message to peer_ops->message. A
 * consumer that closes, sends what is not a message, fails the handshake
 * (malformed, another protocol, a proof made without the token, no proof
 * at all) or says BYE is dropped through peer_ops->drop. Nothing is set up
 * for a consumer before its proof is checked. (ctl/auth.h)
 */
void weft_server_peer_read(weft_server_peer_t *p);

/*
 * Builds the consumer's plan from its views with the checks of
 * weft_plan_create (ops: the transport's remote backend, which copies
 * nothing). Refuses on error (the log and the refusal say why).
 */
weft_status_t weft_server_base_plan(weft_server_peer_t *p, weft_transport_t transport,
                              const weft_plan_ops_t *ops, const weft_recv_view_t *views,
                              uint32_t count);

/*
 * The end of a consumer's VIEWS: registers it in the registry under its
 * name, then sends READY (u32 consumer id, u64 bytes per version, u64
 * ranges, then `tail`, the transport's part; may be NULL). WEFT_OK, or the
 * consumer was refused or dropped (peer_ops->drop) and the status says why.
 */
weft_status_t weft_server_base_ready(weft_server_peer_t *p, const weft_ctl_buf_t *tail);

/* Sends a built payload, sealed once the session is on; WEFT_ERR_NO_MEMORY
 * when building it failed. */
weft_status_t weft_server_base_send(weft_server_peer_t *p, uint32_t type, weft_ctl_buf_t *buf);

/*
 * Tells the consumer that every byte of the version in flight landed:
 * VERSION (wire.h) with the checksum of each of its views that holds its
 * tensor verbatim, when the registry keeps checksums. Sealed; the
 * connection's errors.
 */
weft_status_t weft_server_base_send_version(weft_server_peer_t *p, uint64_t deadline_ns);

/*
 * DELTA (wire.h) for the version in flight, from version `holds`: one
 * entry per view of the consumer's plan (map), laid out in its inbox.
 * Sealed; the connection's errors, WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_server_base_send_delta(weft_server_peer_t *p, uint64_t holds, const weft_wire_delta_entry_t *map);

/*
 * Leases the latest version when it is newer than the one acknowledged:
 * 1 and p->version, p->lease and a new deadline set; 0 otherwise (nothing
 * new, or the registry is offloaded or changing: look again soon).
 */
int weft_server_base_lease_next(weft_server_peer_t *p, uint64_t latest);

/* Releases the lease of the version in flight, if held. */
void weft_server_base_release(weft_server_peer_t *p);

/*
 * An ACK of the version in flight: counts it (its transfer time from the
 * lease to p->in_place_ns, or to now where the transport left that 0),
 * records it with
 * weft_registry_consumer_received and releases the lease (the transport
 * must no longer read the slot). A request (WANT) that the version
 * answers, come while it was in flight, is answered too. WEFT_ERR_CORRUPT
 * for anything else.
 */
weft_status_t weft_server_base_ack(weft_server_peer_t *p, const weft_ctl_msg_t *msg);

/* weft_server_base_ack of a version that went as a delta of delta_bytes
 * (counted in deltas_sent and delta_bytes too). */
weft_status_t weft_server_base_ack_delta(weft_server_peer_t *p, const weft_ctl_msg_t *msg, uint64_t delta_bytes);

/*
 * REDO(v, flags) (wire.h): the consumer's views did not check out after
 * the delta of the version in flight, v, which it asks for whole; *flags
 * bit 0: a WT patched by its W's delta failed. Logged and counted in
 * deltas_redone. WEFT_ERR_CORRUPT when malformed or not of v.
 */
weft_status_t weft_server_base_redo(weft_server_peer_t *p, const weft_ctl_msg_t *msg, uint32_t *flags);

/* Before the peer proved the token its messages are this long at most. */
#define WEFT_SERVER_PREAUTH_MAX 4096u

/*
 * The registry side of dropping a consumer: logs why, records
 * weft_registry_consumer_failed(version, why) when a version was in
 * flight (telling the consumer with FAILED when tell is set), removes its
 * record, counts it as dropped unless why is WEFT_OK (it left between
 * versions), closes its connection. The lease stays: release it once the
 * transport no longer reads the slot.
 */
void weft_server_base_drop(weft_server_peer_t *p, weft_status_t why, const char *what, int mid_version,
                     int tell);

/* Frees what the peer holds besides the lease (its plan). */
void weft_server_peer_fini(weft_server_peer_t *p);

#endif
