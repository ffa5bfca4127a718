/*
 * Delivery by active messages: how the server's bytes reach a consumer
 * over transports where UCX would emulate its puts and where endpoints
 * report a peer's failure (TCP with WEFT_UCX_ERR_MODE=peer).
 *
 * Why: UCX emulates a put there with a message that the target answers.
 * When the target learns of the server's death while such messages are
 * still buffered, UCX 1.13 (and 1.18) answers one on the failed endpoint
 * and ends the process ("unexpected error" in ucp_request_try_send, from
 * ucp_put_handler); no error mode or endpoint close avoids it. An eager
 * active message is never answered: the consumer only copies its bytes
 * in, and nothing the consumer does over UCX can meet a failed endpoint.
 * The same holds the other way: the server never answers the consumer.
 *
 * The price: the server's flush then only says that its messages left,
 * not that they landed. The consumer counts what landed; the server tells
 * it, before each notice (SENT, on the authenticated bootstrap
 * connection), how many bytes it sent in all, and the consumer reads its
 * memory only once as many landed. Internal.
 */
#ifndef WEFT_TRANSPORT_UCX_UCX_DELIVER_H
#define WEFT_TRANSPORT_UCX_UCX_DELIVER_H

#include "transport/ctl/wire.h"
#include "transport/ucx/ucx_api.h"

#include <stdatomic.h>
#include <stdint.h>
#include <weft/types.h>

/* The active message id of a delivery; its header is the u64 address the
 * bytes go to in the consumer's memory. */
#define WEFT_UCX_AM_DELIVER 1u

/*
 * Whether the server delivers to the consumer behind `ep` by active
 * messages: WEFT_UCX_DELIVERY=am or put; auto (the default) picks
 * messages where the endpoint reports peer failures (`reports`) and UCX
 * has no native put for it (its endpoint lists no put lanes: puts would
 * be emulated). `who` names the consumer in the log line that says which.
 * An unknown WEFT_UCX_DELIVERY value is WEFT_ERR_INVALID_PARAM, logged.
 * Server thread.
 */
weft_status_t weft_ucx_deliver_choose(ucp_ep_h ep, int reports, const char *who, int *by_messages);

/*
 * Sends n bytes at src to address dst in the consumer's memory as one
 * eager active message (never rendezvous: that would have the consumer
 * fetch, and answer). cb(request, status, user_data) as ucp_put_nbx's,
 * called once the bytes left (the caller frees the request there).
 * Returns NULL when already done, an error pointer, or the request.
 */
ucs_status_ptr_t weft_ucx_deliver_send(ucp_ep_h ep, const void *src, uint64_t n, uint64_t dst,
                                       ucp_send_nbx_callback_t cb, void *user_data);

/*
 * The consumer's side: where deliveries may land (its registered regions,
 * host memory), and how many bytes landed (`landed`, raised with release
 * after each copy) since connect. A delivery outside the regions, into
 * device memory, rendezvous, or with a malformed header is dropped and
 * counted in `refused` (a consumer reads nothing after one: the server is
 * not following the protocol).
 */
typedef struct weft_ucx_deliver_sink {
    const weft_wire_span_t *regions;
    uint32_t                region_count;
    int                     host; /* the regions are host memory */
    _Atomic uint64_t        landed;
    _Atomic uint64_t        refused;
} weft_ucx_deliver_sink_t;

/* Sets the sink as the handler of WEFT_UCX_AM_DELIVER on `worker`, before
 * anything progresses it; the sink must outlive the worker. Any worker
 * that the server's endpoints may reach gets it (the consumer's own and
 * its receive lanes'): the handler runs on whichever thread drives it. */
weft_status_t weft_ucx_deliver_sink_attach(weft_ucx_deliver_sink_t *sink, ucp_worker_h worker);

/*
 * A server's workers take no deliveries: this handler drops any that come
 * (a consumer that sends them is not following the protocol; logged once
 * a process). Registering it also gives UCX 1.13 its table of handlers:
 * a worker of a context with active messages and no handler at all
 * crashes on the first message that arrives (ucp_am_handler reads an
 * empty table), where with one it drops unknown ids with a warning.
 */
weft_status_t weft_ucx_deliver_refuse(ucp_worker_h worker);

#endif
