/*
 * The nccl server's state (nccl_server.c), shared with its delta versions
 * (nccl_server_delta.c). On the server's thread. Internal.
 */
#ifndef WEFT_TRANSPORT_NCCL_NCCL_SERVER_H
#define WEFT_TRANSPORT_NCCL_NCCL_SERVER_H

#include "common/cuda_util.h"
#include "nccl_common.h"
#include "transport/server/delta_cache.h"
#include "transport/server/server.h"

typedef enum peer_state {
    PEER_HANDSHAKE, /* HELLO, PROOF, VIEWS (server.h) */
    PEER_INIT,    /* READY sent; its communicator is being made */
    PEER_READY,   /* idle, gets the next version */
    PEER_SENDING, /* VERSION sent, groups in flight */
    PEER_ACKING,  /* every send completed, waiting for ACK */
    PEER_CLOSING  /* dropped; waiting for its stream to be idle */
} peer_state_t;

typedef struct peer {
    weft_server_peer_t   base; /* connection, plan, registry record, lease */
    struct nccl_server *server;
    peer_state_t        state;
    ncclComm_t          comm;
    cudaStream_t        stream;
    uint64_t           *sizes, *offsets; /* of the plan's ranges */
    weft_nccl_xfer_t    xfer;
    /* ACK(v) or REDO(v) read before our stream completed (type; 0: none). */
    uint32_t            early;
    weft_ctl_msg_t      early_msg;
    uint8_t             early_payload[16];
    /* Delta versions (server/delta_cache.h): the bytes of its inbox (0:
     * it takes none), the version its views hold as far as we know (its
     * last ack; 0 once a version went whole), whether the version in
     * flight goes as a delta, and then its entries (laid out in its
     * inbox), its pieces (delta_puts: from the device copy of the cache's
     * buffer delta_buf into the inbox, in inbox order) and their sizes and
     * offsets for the transfer. */
    uint64_t            inbox_bytes;
    uint64_t            holds;
    int                 delta, delta_buf;
    weft_wire_delta_entry_t *delta_map;
    weft_range_list_t   delta_puts;
    uint64_t           *delta_sizes, *delta_offsets;
    uint64_t            delta_bytes;
    uint32_t            redos; /* REDOs in a row: at WEFT_DELTA_REDOS_MAX it gets no more deltas */
} peer_t;

struct nccl_server {
    weft_server_base_t base; /* socket, token, timeout, window, thread, stats */
    int          device;
    uint8_t      uuid[WEFT_CUDA_UUID_BYTES];
    char         host_id[WEFT_NCCL_HOST_ID_MAX + 1]; /* our NCCL_HOSTID, "" when unset */
    uint64_t     slot_bytes;
    /* Delta versions: the cache (made when the first consumer with an
     * inbox is ready, WEFT_DELTA not off; encoded on the registry's GPU
     * into host buffers) and a device copy of each buffer, which NCCL
     * sends from, made once per delta (mirrored: the cache buffer's from
     * and to it holds). */
    weft_delta_mode_t  delta_mode;
    weft_delta_cache_t delta;
    int                delta_made;
    uint8_t           *delta_dev[2];
    uint64_t           mirrored_from[2], mirrored_to[2];
    cudaStream_t       mirror_stream;
};

/* The peer table (weft_server_base_t) holds our peers. */
static inline peer_t *nccl_peer_at(const struct nccl_server *s, uint32_t i)
{
    return (peer_t *)s->base.peers[i];
}

/* nccl_server_delta.c */

/* Keeps the delta cache at `latest` while a consumer that takes deltas
 * is served (server/delta_cache.h, weft_delta_cache_turn). */
void weft_nccl_delta_refresh(struct nccl_server *s, uint64_t latest);

/* 1 while the cache encodes (the server's thread keeps turning). */
int weft_nccl_delta_busy(const struct nccl_server *s);

/* 1 when the consumer should wait for the delta to `latest` being made. */
int weft_nccl_delta_coming(const peer_t *p, uint64_t latest);

/*
 * Whether the leased version goes to the consumer as a delta: 1 when it
 * has an inbox, its views hold the version it last acknowledged, and the
 * cache's current buffer holds the delta from there to the leased
 * version, fitting in its inbox (WEFT_DELTA=auto: and smaller than the
 * version); its entries are then laid out in its inbox (p->delta_map),
 * the buffer is on the device and p->xfer sends the pieces from there.
 * 0: the version goes whole (also when the device copy failed, logged).
 */
int weft_nccl_peer_delta(peer_t *p);

/* Room for a consumer's entries and pieces, one per view. */
weft_status_t weft_nccl_delta_peer_init(peer_t *p, uint64_t inbox_bytes);
void          weft_nccl_delta_peer_fini(peer_t *p);

/* Frees the cache and its device copies (the GPU current). */
void weft_nccl_delta_free(struct nccl_server *s);

#endif
