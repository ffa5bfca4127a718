/*
 * The cuda_ipc push server's state (push_server.c), shared with its delta
 * versions (push_server_delta.c). On the server's thread. Internal.
 */
#ifndef WEFT_TRANSPORT_CUDA_IPC_PUSH_SERVER_H
#define WEFT_TRANSPORT_CUDA_IPC_PUSH_SERVER_H

#include "common/cuda_util.h"
#include "transport/server/delta_cache.h"
#include "transport/server/server.h"

#include <cuda_runtime_api.h>

typedef enum peer_state {
    PEER_HANDSHAKE, /* HELLO, PROOF, VIEWS (server.h) */
    PEER_READY,  /* idle; gets a version newer than want_after once wanting */
    PEER_ACKING, /* its copy done and VERSION sent, waiting for ACK (or, after a delta, REDO) */
    PEER_CLOSING /* dropped: freed at the next reap */
} peer_state_t;

typedef struct peer {
    weft_server_peer_t   base; /* connection, plan, registry record, lease */
    struct push_server *server;
    peer_state_t        state;
    void              **mapped; /* its allocations, opened here */
    uint32_t            mapped_count;
    int                 device; /* its views' GPU */
    /* Delta versions (server/delta_cache.h): its inbox as mapped here
     * (NULL: it takes none), the version its views hold as far as we
     * know (its last ack; 0 once a version went whole), whether the
     * version in flight went as a delta (its lease then kept until the
     * answer: a REDO is answered from it), its entries (laid out in its
     * inbox) and the copies into the inbox. */
    uint8_t                 *inbox;
    uint64_t                 inbox_bytes;
    uint64_t                 holds;
    int                      delta;
    weft_wire_delta_entry_t *delta_map;
    weft_range_list_t        delta_puts;
    uint64_t                 delta_bytes;
    uint32_t                 redos; /* REDOs in a row: at WEFT_DELTA_REDOS_MAX it gets no more deltas */
} peer_t;

struct push_server {
    weft_server_base_t base; /* socket, token, timeout, thread, stats */
    int                device;
    uint8_t            uuid[WEFT_CUDA_UUID_BYTES]; /* the registry's GPU's: the WELCOME */
    uint64_t           slot_bytes;
    /* Delta versions: the cache (made when the first consumer that takes
     * deltas is ready; encoded on the registry's GPU into pinned host
     * buffers), and the stream the deltas are copied into inboxes on. */
    weft_delta_mode_t  delta_mode;
    weft_delta_cache_t delta;
    int                delta_made;
    cudaStream_t       delta_stream;
};

/* push_server_delta.c */

/*
 * Whether a consumer whose views are on GPU `device` takes deltas: with
 * WEFT_DELTA=auto only on another GPU than the registry's (on the same
 * GPU a copy of the version at HBM speed beats an encode and an apply);
 * with force, everywhere; with off, never.
 */
int weft_push_delta_pays(const struct push_server *s, int device);

/* Keeps the delta cache at `latest` while a consumer that takes deltas is
 * served (weft_delta_cache_turn). */
void weft_push_delta_refresh(struct push_server *s, uint64_t latest);

/* 1 while the cache encodes (the server's thread keeps turning). */
int weft_push_delta_busy(const struct push_server *s);

/* 1 when the consumer should wait for the delta to `latest` being made. */
int weft_push_delta_coming(const peer_t *p, uint64_t latest);

/*
 * Whether the leased version goes to the consumer as a delta: 1 when it
 * has an inbox, its views hold (its WANT says so, and we agree) the
 * version it last acknowledged, and the cache's current buffer holds the
 * delta from there to the leased version, fitting its inbox (auto: and
 * smaller than the version); the entries are then laid out in its inbox
 * (p->delta_map) and copied there, and have landed. 0: the version goes
 * whole (also when the copy failed, logged).
 */
int weft_push_peer_delta(peer_t *p);

/* Room for a consumer's entries and copies, one per view. */
weft_status_t weft_push_delta_peer_init(peer_t *p, uint8_t *inbox, uint64_t inbox_bytes);
void          weft_push_delta_peer_fini(peer_t *p);

/* Frees the cache and its stream (the registry's GPU current). */
void weft_push_delta_free(struct push_server *s);

#endif
