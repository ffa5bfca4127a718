/* The ucx server's delta versions (server/delta_cache.h, docs/protocol.md
 * "Delta versions on the wire"): the cache made for the first consumer
 * with an inbox, its two buffers registered for puts, its encode a
 * time-bounded share of each turn of the server's thread, and a
 * consumer's entries laid out in its inbox. On the server thread. */
#include "config.h"

#include "transport/ucx/ucx_server.h"

#include <inttypes.h>

/* Each buffer: a sixteenth of a version (a delta any larger is more than
 * a consumer's default inbox; RL steps make 0.4-3 %), at least this
 * much; with WEFT_DELTA=force, a whole version and its alignment. */
#define DELTA_BUF_MIN    (UINT64_C(1) << 20)
/* Encoding a turn of the server's thread, at most (a tensor may take
 * longer): the other consumers are served between. */
#define DELTA_ENCODE_NS  UINT64_C(2000000)

/* The cache, made for the first consumer that takes deltas. 0 when it
 * cannot be (deltas off from here, logged). */
static int make_delta_cache(struct ucx_server *s)
{
    uint32_t      tensors = 0;
    uint64_t      capacity = s->slot_bytes / 16 > DELTA_BUF_MIN ? s->slot_bytes / 16 : DELTA_BUF_MIN;
    weft_status_t status;

    if (s->delta_mode == WEFT_DELTA_FORCE && weft_registry_tensor_count(s->base.reg, &tensors) == WEFT_OK) {
        capacity = s->slot_bytes + (uint64_t)tensors * WEFT_DELTA_ENTRY_ALIGN;
    }
    status = weft_delta_cache_init(&s->delta, s->base.reg, s->delta_mode, capacity);
    for (int i = 0; i < 2 && status == WEFT_OK; i++) {
        status = weft_ucx_mem_map(s->ucx.context, s->delta.buf[i].data, s->delta.capacity, WEFT_MEMORY_HOST,
                                  &s->delta_memh[i], "registering the delta cache");
    }
    if (status != WEFT_OK) {
        for (int i = 0; i < 2; i++) {
            if (s->delta_memh[i] != NULL) {
                (void)ucp_mem_unmap(s->ucx.context, s->delta_memh[i]);
                s->delta_memh[i] = NULL;
            }
        }
        weft_delta_cache_fini(&s->delta);
        weft_log_warn("server: no delta cache (%s): every version goes whole", weft_status_string(status));
        s->delta_mode = WEFT_DELTA_OFF;
        return 0;
    }
    s->delta_made = 1;
    weft_log_info("server: delta versions (%s), two buffers of %" PRIu64 " bytes",
                  weft_delta_mode_name(s->delta_mode), s->delta.capacity);
    return 1;
}

void weft_ucx_delta_refresh(struct ucx_server *s, uint64_t latest)
{
    unsigned      reading = 0;
    int           takers = 0;
    weft_status_t status;

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
    if (takers == 0) {
        if (s->delta_made) {
            weft_delta_cache_forget(&s->delta); /* the producer's slots back */
        }
        return;
    }
    if (!s->delta_made && !make_delta_cache(s)) {
        return;
    }
    status = weft_delta_cache_update(&s->delta, latest, reading, DELTA_ENCODE_NS);
    if (status != WEFT_OK) {
        weft_log_warn("server: the delta of the latest version was not made (%s): it goes whole",
                      weft_status_string(status));
    }
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
    uint64_t           at = 0;

    if (!s->delta_made || p->inbox_bytes == 0 || p->holds == 0 || p->base.want_holds != p->holds ||
        plan->view_count == 0) {
        return 0;
    }
    if (!weft_delta_cache_entries(&s->delta, p->holds, p->base.version, plan->views, plan->view_count,
                                  plan->bytes, p->inbox_bytes, &p->delta_buf, p->delta_map, &p->delta_bytes)) {
        return 0;
    }
    p->delta_puts.count = 0;
    for (uint32_t i = 0; i < plan->view_count; i++) {
        weft_wire_delta_entry_t *e = &p->delta_map[i];

        if (e->shares) {
            continue; /* below, once its W's place is known */
        }
        at = (at + WEFT_DELTA_ENTRY_ALIGN - 1) / WEFT_DELTA_ENTRY_ALIGN * WEFT_DELTA_ENTRY_ALIGN;
        if (e->bytes != 0) {
            p->delta_puts.ranges[p->delta_puts.count++] = (weft_copy_range_t){
                .src = e->offset, .dst = (uint8_t *)(uintptr_t)(p->inbox_base + at), .bytes = e->bytes, .view = i};
        }
        e->offset = at; /* from here: where it lies in the inbox */
        at += e->bytes;
    }
    for (uint32_t i = 0; i < plan->view_count; i++) {
        if (p->delta_map[i].shares) {
            p->delta_map[i].offset = p->delta_map[p->delta_map[i].shared_view].offset; /* W's delta, put once */
        }
    }
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
