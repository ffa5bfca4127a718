/* The ucx server's delta versions (server/delta_cache.h, docs/protocol.md
 * "Delta versions on the wire"): the cache made for the first consumer
 * with an inbox, its two buffers registered for puts, its encode a
 * time-bounded share of each turn of the server's thread, and a
 * consumer's entries laid out in its inbox. On the server thread. */
#include "config.h"

#include "transport/ucx/ucx_server.h"

#include <inttypes.h>

/* Encoding a turn of the server's thread, at most (a tensor may take
 * longer): the other consumers are served between. */
#define DELTA_ENCODE_NS  UINT64_C(2000000)

/* The cache's buffers registered for the puts; none left on failure. */
static weft_status_t register_buffers(void *arg)
{
    struct ucx_server *s = arg;
    weft_status_t      status = WEFT_OK;

    for (int i = 0; i < 2 && status == WEFT_OK; i++) {
        status = weft_ucx_mem_map(s->ucx.context, s->delta.buf[i].data, s->delta.capacity, WEFT_MEMORY_HOST,
                                  &s->delta_memh[i], "registering the delta cache");
    }
    for (int i = 0; i < 2 && status != WEFT_OK; i++) {
        if (s->delta_memh[i] != NULL) {
            (void)ucp_mem_unmap(s->ucx.context, s->delta_memh[i]);
            s->delta_memh[i] = NULL;
        }
    }
    return status;
}

void weft_ucx_delta_refresh(struct ucx_server *s, uint64_t latest)
{
    unsigned reading = 0;
    int      takers = 0;

    if (s->delta_mode == WEFT_DELTA_OFF) {
        return;
    }
    for (uint32_t i = 0; i < s->base.peer_count; i++) {
        const peer_t *p = peer_at(s, i);

        takers += p->inbox_bytes != 0 && p->state != PEER_HANDSHAKE && p->state != PEER_PROBING &&
                  p->state != PEER_CLOSING;
        /* Puts in flight read their buffer: it is encoded into only after
         * their flush. Not a dropped consumer's: what its puts still carry
         * lands only in an inbox it never applies (the buffer stays
         * allocated and registered), and UCX may hold them as long as a
         * stuck peer lives. */
        if (p->delta && (p->state == PEER_SENDING || p->state == PEER_FLUSHING)) {
            reading |= 1u << p->delta_buf;
        }
    }
    weft_delta_cache_turn(&s->delta, &s->delta_made, &s->delta_mode, s->base.reg, s->slot_bytes, register_buffers, s, takers,
                          reading, latest, DELTA_ENCODE_NS);
}

int weft_ucx_delta_busy(const struct ucx_server *s)
{
    return s->delta_made && weft_delta_cache_busy(&s->delta);
}

int weft_ucx_delta_coming(const peer_t *p, uint64_t latest)
{
    const struct ucx_server *s = p->server;

    return s->delta_made && p->inbox_bytes != 0 && p->holds != 0 && p->base.want_holds == p->holds &&
           weft_delta_cache_coming(&s->delta, p->holds, latest);
}

/*
 * The leased version goes to this consumer as a delta when it has an
 * inbox, says its views hold the version it last acknowledged, and the
 * cache's current buffer holds the delta from that one to this, fitting
 * in the inbox (and, WEFT_DELTA=auto, smaller than the version).
 */
int weft_ucx_peer_delta(peer_t *p)
{
    struct ucx_server *s = p->server;
    const weft_plan_h  plan = p->base.plan;

    if (!s->delta_made || p->inbox_bytes == 0 || p->holds == 0 || p->base.want_holds != p->holds ||
        plan->view_count == 0) {
        return 0;
    }
    if (!weft_delta_cache_entries(&s->delta, p->holds, p->base.version, plan->views, plan->view_count,
                                  plan->bytes, p->inbox_bytes, &p->delta_buf, p->delta_map, &p->delta_bytes)) {
        return 0;
    }
    (void)weft_delta_inbox_layout(p->delta_map, plan->view_count, p->inbox_base, &p->delta_puts);
    return 1;
}

void weft_ucx_delta_free(struct ucx_server *s)
{
    if (!s->delta_made) {
        return;
    }
    for (int i = 0; i < 2; i++) {
        (void)weft_ucx_status(ucp_mem_unmap(s->ucx.context, s->delta_memh[i]), "unregistering the delta cache");
        s->delta_memh[i] = NULL;
    }
    weft_delta_cache_fini(&s->delta);
    s->delta_made = 0;
}
