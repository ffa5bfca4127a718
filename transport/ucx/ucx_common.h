/*
 * What the ucx server and the remote consumer share: the UCX context and
 * worker they each make, status translation, and the payloads of the
 * bootstrap messages (ctl/bootstrap.h carries them). Internal.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_COMMON_H
#define WEFT_TRANSPORT_UCX_UCX_COMMON_H

#include "transport/core/desc.h"
#include "transport/ctl/bootstrap.h"
#include "transport/ctl/wire.h"

#include <stdint.h>
#include <weft/transport.h>
#include <weft/ucx.h>

#include "transport/ucx/ucx_api.h" /* UCX's headers; its functions, loaded at run time */

/* 2: VIEWS ends with the staging ring's half (plan/rounds.h).
 * 3: then the consumer's receive lanes' worker addresses (ucx_lanes.h).
 * 4: SENDING before a version's puts (ucx_remote.c stays awake for the
 *    notice).
 * 5: delta versions: VIEWS ends with the consumer's inbox, WANT carries
 *    the version its views hold, SENDING whether a delta comes, DELTA and
 *    REDO (docs/protocol.md, "Delta versions on the wire").
 * 6: bytes delivered as active messages where UCX would emulate puts,
 *    and SENT before each ROUND and notice (ucx_deliver.h).
 * 7: a staged consumer's VIEWS may carry an inbox, the region after its
 *    ring; its deltas go into the inbox, not in ROUNDs.
 * 8: DELTA entries carry rows, cols and a checksum: a WT's view may be
 *    patched by its W's delta, transposed (PATCH_T, ctl/wire.h). */
#define WEFT_UCX_PROTOCOL 8u

/* A UCX context with RMA, and one worker (serialized use). */
typedef struct weft_ucx {
    ucp_context_h context;
    ucp_worker_h  worker;
    int           efd;         /* becomes readable when the worker has work (after arm) */
    int           peer_errors; /* WEFT_UCX_ERR_MODE=peer: endpoints report peer failures */
} weft_ucx_t;

/* Makes the context and worker and reads WEFT_UCX_ERR_MODE (a value other
 * than peer or none: WEFT_ERR_INVALID_PARAM, logged). `shared`: other
 * threads will drive workers of this context too (weft_ucx_open_worker),
 * so UCX guards the context's shared state. */
weft_status_t weft_ucx_open(weft_ucx_t *ucx, const char *who, int shared);

/* The same without the worker (ucx->worker NULL): a context that only
 * workers made with weft_ucx_open_worker drive (ucx_memory.h).
 * weft_ucx_close frees it. */
weft_status_t weft_ucx_open_context(weft_ucx_t *ucx, const char *who, int shared);

/* weft_ucx_open for a process that only checks addresses and keys (the
 * sandbox): a context without active messages, as before deliveries
 * (UCX 1.13 asserts in ucp_worker_destroy over TCP without peer failure
 * reports when the sandbox's context has them). */
weft_status_t weft_ucx_open_checker(weft_ucx_t *ucx, const char *who);

/* Another worker on parent's context (opened `shared`), with its error
 * mode; weft_ucx_close_worker destroys it and leaves the context. */
weft_status_t weft_ucx_open_worker(weft_ucx_t *ucx, const weft_ucx_t *parent);
void          weft_ucx_close_worker(weft_ucx_t *ucx);

/* Closes ep (forced where `force`: only with peer failure reports) and
 * waits up to deadline_ns. A failure only means the peer went first: it is
 * logged at info level, not as an error. */
void weft_ucx_close_ep(weft_ucx_t *ucx, ucp_ep_h ep, int force, uint64_t deadline_ns);

/*
 * Creates an endpoint to `address` on ucx's worker, reporting its failures
 * to `on_error` where ucx->peer_errors and its transport can (shared
 * memory in UCX 1.13 cannot: then without, logged once per call as
 * `who`). *reports says which it got, for closing (force only then).
 */
weft_status_t weft_ucx_connect(weft_ucx_t *ucx, const void *address, ucp_err_handler_cb_t on_error,
                               void *arg, const char *who, ucp_ep_h *ep, int *reports);
void          weft_ucx_close(weft_ucx_t *ucx);

/* Logs a UCX failure and translates it. */
weft_status_t weft_ucx_status(ucs_status_t status, const char *what);

/* Drives the worker until it has nothing more to do right now. Returns
 * whether it did anything. */
int weft_ucx_progress(weft_ucx_t *ucx);

/* Progresses, then arms the worker's wake-up: 1 when the caller may sleep
 * in poll() on ucx->efd (it becomes readable on new work), 0 when more
 * work is already there. */
int weft_ucx_arm(weft_ucx_t *ucx);

/* Where a server's puts go: a consumer's endpoint and registered regions,
 * and whether the bytes go as active messages instead (ucx_deliver.h). */
typedef struct weft_ucx_target {
    ucp_ep_h                ep;
    const weft_wire_span_t *regions;
    const ucp_rkey_h       *rkeys; /* one per region */
    uint32_t                region_count;
    int                     by_messages;
} weft_ucx_target_t;

/*
 * Puts n bytes from src (registered as memh) to the consumer's address
 * dst, which must lie inside one of its regions (or sends them there as
 * one active message, target->by_messages). The request's completion
 * calls cb(request, status, user_data), which frees it. Returns what
 * ucp_put_nbx returns: NULL when already done, an error pointer, or the
 * request; an address outside the regions is UCS_ERR_INVALID_ADDR.
 */
ucs_status_ptr_t weft_ucx_put(const weft_ucx_target_t *target, const void *src, uint64_t n,
                              uint64_t dst, ucp_mem_h memh, ucp_send_nbx_callback_t cb,
                              void *user_data);

/*
 * VIEWS: blob worker address; u32 regions, each u64 base, u64 bytes, blob
 *        packed rkey; then the views (ctl/wire.h); then u64 ring half:
 *        0, or the half of the staging ring that is the one region, for
 *        device views staged in rounds (plan/rounds.h: ROUND, ROUND_DONE);
 *        then u32 receive lanes (0..WEFT_UCX_LANES_MAX), each a blob
 *        worker address: the server's put lanes connect to them in turn
 *        (to the first worker address when there are none).
 * WELCOME: the server's worker address. READY: the head of server/server.h.
 * The other payloads, and their helpers, are ctl/wire.h's.
 */

/* The ucx backend's tables and probe (ucx_desc.c names them). */
extern const weft_server_ops_t weft_ucx_server_ops; /* ucx_server.c */
extern const weft_remote_ops_t weft_ucx_remote_ops; /* ucx_remote.c */
void weft_ucx_probe(weft_backend_info_t *info);     /* ucx_probe.c */

#endif
