/* The ucx consumer's VIEWS, checked before UCX sees them (ctl/ucx_views.h). */
#include "config.h"

#include "transport/ctl/ucx_views.h"

#include <stdlib.h>
#include <string.h>

void weft_ucx_views_msg_free(weft_ucx_views_msg_t *m)
{
    free(m->regions);
    free(m->rkeys);
    free(m->views);
    free(m->names);
    m->regions = NULL;
    m->rkeys = NULL;
    m->views = NULL;
    m->names = NULL;
}

static weft_status_t refuse(weft_ucx_views_msg_t *m, weft_status_t status, const char *why, const char **reason)
{
    weft_ucx_views_msg_free(m);
    *reason = why;
    return status;
}

weft_status_t weft_ucx_views_parse(const weft_ctl_msg_t *msg, weft_ucx_views_msg_t *out, const char **reason)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    weft_status_t      status;

    memset(out, 0, sizeof(*out));
    out->address.data = weft_ctl_get_blob(&cur, &out->address.length);
    out->region_count = weft_ctl_get_u32(&cur);
    /* A region takes at least its base, size and a key of one byte: a count
     * the rest of the message cannot hold is refused before anything is
     * allocated for it. */
    if (cur.failed || out->region_count == 0 || out->region_count > WEFT_UCX_REGIONS_MAX ||
        out->region_count > (cur.length - cur.at) / (8 + 8 + 4 + 1)) {
        return refuse(out, WEFT_ERR_CORRUPT, "malformed views", reason);
    }
    out->regions = calloc(out->region_count, sizeof(*out->regions));
    out->rkeys = calloc(out->region_count, sizeof(*out->rkeys));
    if (out->regions == NULL || out->rkeys == NULL) {
        return refuse(out, WEFT_ERR_NO_MEMORY, "no memory", reason);
    }
    for (uint32_t r = 0; r < out->region_count && !cur.failed; r++) {
        out->regions[r].base = weft_ctl_get_u64(&cur);
        out->regions[r].bytes = weft_ctl_get_u64(&cur);
        out->rkeys[r].data = weft_ctl_get_blob(&cur, &out->rkeys[r].length);
        /* UCX reads a packed key from its own header on: an empty one
         * would be read past the end of the message. */
        cur.failed |= out->rkeys[r].length == 0;
    }
    status = cur.failed ? WEFT_ERR_CORRUPT
                        : weft_wire_get_views(&cur, WEFT_MEMORY_HOST, &out->views, &out->names, &out->view_count);
    if (status != WEFT_OK) {
        return refuse(out, status, status == WEFT_ERR_NO_MEMORY ? "no memory" : "malformed views or keys", reason);
    }
    out->ring_half = weft_ctl_get_u64(&cur);
    out->lane_count = weft_ctl_get_u32(&cur);
    for (uint32_t i = 0; i < out->lane_count && i < WEFT_UCX_LANES_MAX; i++) {
        out->lanes[i].data = weft_ctl_get_blob(&cur, &out->lanes[i].length);
        /* UCX reads a worker address without its length: an empty one
         * would be read past the end of the message. */
        cur.failed |= out->lanes[i].length == 0;
    }
    out->inbox_base = weft_ctl_get_u64(&cur);
    out->inbox_bytes = weft_ctl_get_u64(&cur);
    if (out->inbox_bytes != 0) {
        const weft_wire_span_t *in =
            weft_wire_span_find(out->regions, out->region_count, out->inbox_base, out->inbox_bytes);

        /* With a ring, the inbox is the region after it. */
        cur.failed |= in == NULL || (out->ring_half != 0 && in != &out->regions[1]);
    }
    if (cur.failed || cur.at != cur.length || out->address.length == 0 || out->lane_count > WEFT_UCX_LANES_MAX ||
        (out->ring_half != 0 && (out->region_count != 1u + (out->inbox_bytes != 0) ||
                                 out->regions[0].bytes / 2 < out->ring_half))) {
        return refuse(out, WEFT_ERR_CORRUPT, "malformed views or keys", reason);
    }
    *reason = NULL;
    return WEFT_OK;
}
