/*
 * The ucx server's own state, shared by its three files: ucx_server.c
 * (create, destroy, the server thread), ucx_server_peer.c (a consumer's
 * handshake, its messages, its drop) and ucx_server_send.c (a version's
 * lease, puts, rounds and notice). How the server works as a whole is
 * told at the top of ucx_server.c. Internal.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_SERVER_H
#define WEFT_TRANSPORT_UCX_UCX_SERVER_H

#include "common/log.h"
#include "common/time_util.h"
#include "transport/core/desc.h"
#include "transport/ctl/ucx_views.h"
#include "transport/plan/plan.h"
#include "transport/plan/rounds.h"
#include "transport/server/delta_cache.h"
#include "transport/server/server.h"
#include "transport/ucx/ucx_common.h"
#include "transport/ucx/ucx_cuda.h"
#include "transport/ucx/ucx_gpu.h"
#include "transport/ucx/ucx_deliver.h"
#include "transport/ucx/ucx_lanes.h"
#include "transport/ucx/ucx_sandbox.h"

#include <stdint.h>

#define DEFAULT_WINDOW_BYTES (UINT64_C(64) << 20)
#define CHUNK_BYTES          (UINT64_C(4) << 20) /* one put at most */
/* One put at most on a lane: smaller, so that a version of a few large
 * tensors still spreads over every lane (a 16 MiB tensor over 16 lanes). */
#define LANE_PIECE_BYTES     (UINT64_C(1) << 20)
/* How long the server looks for an ack without sleeping after a notice: a
 * consumer that is waiting answers within microseconds, and a sleep and
 * wake-up cost more than that. */
#define ACK_SPIN_NS          UINT64_C(200000)
/* How long the server looks for its lanes' end without sleeping after it
 * gave them a version, when their version before ended within it: over
 * shared memory a 16 MiB version takes about 0.5 ms, and the wake-up on
 * their eventfd costs more than a look. A transfer that takes longer
 * (TCP) needs the CPUs for the lanes: looking for 2 ms every time, this
 * thread alone slowed 16 MiB versions between two namespaces of one host
 * from 2.5-2.7 to 3.3-3.9 ms. */
#define LANES_SPIN_NS        UINT64_C(1000000)
/* Sandboxes checking consumers' addresses and keys at once: a fleet that
 * connects together waits its turn rather than starting a process each. */
#define UCX_PROBES_MAX       4u

typedef enum peer_state {
    PEER_HANDSHAKE, /* HELLO, PROOF, VIEWS (server.h) */
    PEER_PROBING,  /* VIEWS checked: its addresses and keys in the UCX
                    * sandbox (or waiting for one); READY follows */
    PEER_READY,    /* idle, gets the next version */
    PEER_SENDING,  /* puts in flight */
    PEER_FLUSHING, /* flush in flight */
    PEER_ACKING,   /* VERSION sent, waiting for ACK */
    PEER_CLOSING   /* dropped; waiting for its requests to end */
} peer_state_t;

typedef struct peer {
    weft_server_peer_t   base; /* connection, plan, registry record, lease */
    struct ucx_server  *server;
    peer_state_t        state;
    ucp_ep_h            ep;
    int                 ep_failed;
    int                 ep_err_mode; /* the endpoint reports peer failures */
    /* Its bytes go as active messages (ucx_deliver.h), and how many went
     * since it connected (SENT tells it before each ROUND and notice). */
    int                 by_messages;
    uint64_t            sent_bytes;
    weft_wire_span_t   *regions;     /* its registered memory */
    ucp_rkey_h         *rkeys;       /* one per region */
    uint32_t            region_count;
    uint64_t            range, range_offset; /* next put */
    uint64_t            in_flight;           /* puts not completed yet */
    const uint8_t      *arena;               /* of the leased slot, here */
    weft_ucx_ring_t    *ring;                /* staged GPU registry: its bounce ring */
    weft_ucx_lane_set_t *lanes;              /* its puts go on the lanes */
    int                 put_failed;
    ucs_status_ptr_t    flush;
    ucs_status_ptr_t    close;
    uint64_t            sending_ns;  /* when its version's puts began */
    uint64_t            lanes_ns;    /* how long its last version's lanes took */
    uint64_t            notified_ns; /* when the notice of the version went */
    /* A dropped consumer's connection, held open until no put of it can
     * still land: its close then tells the consumer (weft_remote_close
     * waits for it) that its memory is its own again. -1: none. */
    int                 linger_fd;
    /* PROBING: the VIEWS message (a copy: `wire`'s address, lanes and
     * keys point into it) and the sandbox's check of them; probe NULL
     * while it waits for a sandbox (UCX_PROBES_MAX run at once). */
    weft_ctl_msg_t       held;
    weft_ucx_views_msg_t wire;
    weft_ucx_probe_t    *probe;
    /* A consumer staging through a bounded ring (plan/rounds.h): the
     * version's rounds, the one being sent, and how many it copied. */
    weft_rounds_t   rounds;
    uint32_t            round, rounds_done;
    /* Delta versions (server/delta_cache.h): its inbox (inside a region
     * it registered; 0 bytes: none), the version its views hold as far as
     * this server knows (its last ack; 0 once a version began whole),
     * whether the version in flight goes as a delta, and then its puts
     * (cache → inbox) and the DELTA that precedes its VERSION. */
    uint64_t            inbox_base, inbox_bytes;
    uint64_t            holds;
    int                 delta, delta_buf; /* the cache's buffer it is put from */
    weft_range_list_t   delta_puts;
    weft_wire_delta_entry_t *delta_map; /* one per view */
    uint64_t            delta_bytes;
    uint32_t            redos; /* REDOs in a row: at WEFT_DELTA_REDOS_MAX it gets no more deltas */
} peer_t;

struct ucx_server {
    weft_server_base_t    base; /* socket, token, timeout, window, thread, stats */
    weft_ucx_t      ucx;
    ucp_address_t  *address; /* of the worker, sent to every consumer */
    size_t          address_length;
    ucp_mem_h       slot_memh[16]; /* host registry, or direct: each slot registered */
    uint8_t        *slot_base[16];
    uint32_t        slot_count;
    uint64_t        slot_bytes;
    weft_memory_kind_t memory;     /* of the registry's arenas */
    int             device;        /* their GPU; -1 for host */
    weft_ucx_gpu_path_t path;      /* GPU registry: direct or staged */
    weft_ucx_lanes_t *lanes;       /* host registry with more than one lane */

    /* Delta versions: the cache (made when the first consumer with an
     * inbox is ready, WEFT_DELTA not off; a GPU registry's encoded on its
     * GPU), its memory registered for the puts. */
    weft_delta_mode_t  delta_mode;
    weft_delta_cache_t delta;
    int                delta_made;
    ucp_mem_h          delta_memh[2]; /* one per buffer */

    uint32_t        probes;   /* sandboxes running for PROBING consumers */
    int             stopping; /* the thread is shutting down: close at once */
};

/* The peer table (weft_server_base_t) holds our peers. */
static inline peer_t *peer_at(const struct ucx_server *s, uint32_t i)
{
    return (peer_t *)s->base.peers[i];
}

/* The plan ops of a consumer's plan, as the server sees it (ucx_server.c). */
extern const weft_plan_ops_t weft_ucx_remote_plan_ops;

/* ucx_server_peer.c: what the peer table calls for our peers. */
extern const weft_server_peer_ops_t weft_ucx_peer_ops;
/* A PROBING consumer's turn: its sandbox started, looked at, and READY
 * sent once it passed (or the consumer refused). */
void weft_ucx_peer_probe(peer_t *p);

/* Drops a consumer: its failure recorded, its endpoint closed; freed once
 * no request of it is left (ucx_server_peer.c). */
void weft_ucx_peer_drop(peer_t *p, weft_status_t why, const char *what);

/* Frees a consumer at once (the server is stopping). */
void weft_ucx_peer_free(peer_t *p);

/* A ROUND_DONE of the staged path: that half of its ring is free again
 * (ucx_server_send.c). */
void weft_ucx_on_round_done(peer_t *p, const weft_ctl_msg_t *msg);

/* Moves a consumer's version on as far as it can go now: puts, flush,
 * rounds, notice (ucx_server_send.c). */
void weft_ucx_peer_advance(peer_t *p);

/* Starts the latest version (> 0) for a ready consumer that asked. */
void weft_ucx_peer_start(weft_server_peer_t *base, uint64_t latest);

/* A REDO: the consumer's views did not check out after the delta of the
 * version in flight; it goes again, whole (ucx_server_send.c). */
void weft_ucx_on_redo(peer_t *p, const weft_ctl_msg_t *msg);

/* ucx_server_delta.c: delta versions. */

/* Keeps the delta cache at `latest` (the registry's latest version, as
 * this turn offers it) while a consumer that takes deltas is served: a
 * time-bounded share of an encode each turn. */
void weft_ucx_delta_refresh(struct ucx_server *s, uint64_t latest);

/* 1 while an encode is under way (the server thread does not sleep). */
int weft_ucx_delta_busy(const struct ucx_server *s);

/* 1 when the consumer should wait for the delta to `latest` being made. */
int weft_ucx_delta_coming(const peer_t *p, uint64_t latest);

/* Whether the leased version goes to the consumer as a delta (its
 * entries then laid out in its inbox: p->delta_map, p->delta_puts,
 * p->delta_buf, p->delta_bytes). */
int weft_ucx_peer_delta(peer_t *p);

/* Frees the delta cache and its registration. */
void weft_ucx_delta_free(struct ucx_server *s);

#endif
