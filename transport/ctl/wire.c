/* Payloads every transport across nodes shares: hello, refusals, views. */
#include "config.h"

#include "transport/ctl/wire.h"

#include "transport/ctl/auth.h"

#include "common/log.h"
#include "transport/core/view_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void weft_wire_put_hello(weft_ctl_buf_t *buf, uint32_t protocol, const uint8_t *nonce, const char *name)
{
    weft_ctl_put_u32(buf, protocol);
    weft_ctl_put_blob(buf, nonce, WEFT_AUTH_NONCE_BYTES);
    weft_ctl_put_str(buf, name);
}

weft_status_t weft_wire_check_hello(const weft_ctl_msg_t *msg, uint32_t protocol, uint8_t *nonce, char *name,
                                    const char **reason)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    uint32_t           theirs = weft_ctl_get_u32(&cur), length = 0;
    const void        *got = weft_ctl_get_blob(&cur, &length);

    weft_ctl_get_str(&cur, name, WEFT_CONSUMER_NAME_MAX);
    if (msg->type != WEFT_CTL_HELLO || cur.failed || length != WEFT_AUTH_NONCE_BYTES) {
        *reason = "a malformed hello";
        return WEFT_ERR_CORRUPT;
    }
    if (theirs != protocol) {
        *reason = "another transport or protocol version";
        return WEFT_ERR_VERSION;
    }
    memcpy(nonce, got, WEFT_AUTH_NONCE_BYTES);
    /* The name comes from a peer not yet authenticated and goes into logs
     * and the registry's consumer table: no control characters. */
    for (char *c = name; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            *c = '?';
        }
    }
    *reason = NULL;
    return WEFT_OK;
}

weft_status_t weft_wire_get_auth(const weft_ctl_msg_t *msg, uint8_t *nonce, uint8_t *mac)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    uint32_t           nonce_length = WEFT_AUTH_NONCE_BYTES, mac_length = 0;
    const void        *got_nonce = nonce != NULL ? weft_ctl_get_blob(&cur, &nonce_length) : NULL;
    const void        *got_mac = weft_ctl_get_blob(&cur, &mac_length);

    if (msg->type != (nonce != NULL ? WEFT_CTL_CHALLENGE : WEFT_CTL_PROOF) || cur.failed ||
        cur.at != cur.length || nonce_length != WEFT_AUTH_NONCE_BYTES || mac_length != WEFT_AUTH_MAC_BYTES) {
        return WEFT_ERR_CORRUPT;
    }
    if (nonce != NULL) {
        memcpy(nonce, got_nonce, WEFT_AUTH_NONCE_BYTES);
    }
    memcpy(mac, got_mac, WEFT_AUTH_MAC_BYTES);
    return WEFT_OK;
}

weft_status_t weft_wire_send_refused(int fd, weft_auth_session_t *session, weft_status_t status,
                                     const char *reason, uint64_t deadline_ns)
{
    weft_ctl_buf_t buf = {0};
    weft_status_t   sent;

    weft_ctl_put_u32(&buf, (uint32_t)(int32_t)status);
    weft_ctl_put_str(&buf, reason);
    sent = buf.failed ? WEFT_ERR_NO_MEMORY
                      : weft_auth_send(fd, session, WEFT_CTL_REFUSED, buf.data, (uint32_t)buf.length,
                                       deadline_ns);
    weft_ctl_buf_free(&buf);
    return sent;
}

weft_status_t weft_wire_parse_refused(const weft_ctl_msg_t *msg, char *reason, size_t size)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    int32_t            status = (int32_t)weft_ctl_get_u32(&cur);

    weft_ctl_get_str(&cur, reason, size);
    if (cur.failed || status >= 0 || status <= WEFT_ERR_LAST) {
        snprintf(reason, size, "(a malformed refusal)");
        return WEFT_ERR_CORRUPT;
    }
    return (weft_status_t)status;
}

weft_status_t weft_wire_send_u64(int fd, weft_auth_session_t *session, uint32_t type, uint64_t value,
                                 uint64_t deadline_ns)
{
    return weft_auth_send(fd, session, type, &value, sizeof(value), deadline_ns);
}

void weft_wire_put_version(weft_ctl_buf_t *buf, uint64_t version, const weft_wire_sums_t *sums)
{
    weft_ctl_put_u64(buf, version);
    weft_ctl_put_u32(buf, sums != NULL ? sums->count : 0);
    for (uint32_t i = 0; sums != NULL && i < sums->count; i++) {
        weft_ctl_put_u32(buf, sums->known[i]);
        weft_ctl_put_u64(buf, sums->sums[i]);
    }
}

weft_status_t weft_wire_send_want(int fd, weft_auth_session_t *session, uint64_t after, uint64_t holds,
                                  uint64_t deadline_ns)
{
    weft_ctl_buf_t buf = {0};
    weft_status_t  status;

    weft_ctl_put_u64(&buf, after);
    weft_ctl_put_u64(&buf, holds);
    status = buf.failed ? WEFT_ERR_NO_MEMORY
                        : weft_auth_send(fd, session, WEFT_CTL_WANT, buf.data, (uint32_t)buf.length, deadline_ns);
    weft_ctl_buf_free(&buf);
    return status;
}

weft_status_t weft_wire_get_want(const weft_ctl_msg_t *msg, uint64_t *after, uint64_t *holds)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};

    *after = weft_ctl_get_u64(&cur);
    *holds = cur.at < cur.length ? weft_ctl_get_u64(&cur) : 0;
    return msg->type != WEFT_CTL_WANT || cur.failed || cur.at != cur.length ? WEFT_ERR_CORRUPT : WEFT_OK;
}

void weft_wire_put_delta(weft_ctl_buf_t *buf, uint64_t version, uint64_t base,
                         const weft_wire_delta_entry_t *entries, uint32_t count)
{
    weft_ctl_put_u64(buf, version);
    weft_ctl_put_u64(buf, base);
    weft_ctl_put_u32(buf, count);
    for (uint32_t i = 0; i < count; i++) {
        weft_ctl_put_u32(buf, entries[i].kind);
        weft_ctl_put_u64(buf, entries[i].offset);
        weft_ctl_put_u64(buf, entries[i].bytes);
        weft_ctl_put_u64(buf, entries[i].rows);
        weft_ctl_put_u64(buf, entries[i].cols);
        weft_ctl_put_u64(buf, entries[i].checksum);
    }
}

#define DELTA_ENTRY_WIRE_BYTES 44u /* u32 kind, u64 offset, bytes, rows, cols, checksum */

weft_status_t weft_wire_get_delta(const weft_ctl_msg_t *msg, uint64_t inbox_bytes, uint64_t *version,
                                  uint64_t *base, weft_wire_delta_entry_t **entries, uint32_t *count)
{
    weft_ctl_cursor_t        cur = {.data = msg->payload, .length = msg->length};
    weft_wire_delta_entry_t *e;

    *entries = NULL;
    *version = weft_ctl_get_u64(&cur);
    *base = weft_ctl_get_u64(&cur);
    *count = weft_ctl_get_u32(&cur);
    if (msg->type != WEFT_CTL_DELTA || cur.failed ||
        (uint64_t)(cur.length - cur.at) != (uint64_t)*count * DELTA_ENTRY_WIRE_BYTES) {
        return WEFT_ERR_CORRUPT;
    }
    e = calloc(*count ? *count : 1, sizeof(*e));
    if (e == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < *count; i++) {
        e[i].kind = weft_ctl_get_u32(&cur);
        e[i].offset = weft_ctl_get_u64(&cur);
        e[i].bytes = weft_ctl_get_u64(&cur);
        e[i].rows = weft_ctl_get_u64(&cur);
        e[i].cols = weft_ctl_get_u64(&cur);
        e[i].checksum = weft_ctl_get_u64(&cur);
        cur.failed |= (e[i].kind != WEFT_WIRE_DELTA_PATCH && e[i].kind != WEFT_WIRE_DELTA_WHOLE &&
                       e[i].kind != WEFT_WIRE_DELTA_PATCH_T) ||
                      e[i].offset > inbox_bytes || e[i].bytes > inbox_bytes - e[i].offset;
    }
    if (cur.failed) {
        free(e);
        return WEFT_ERR_CORRUPT;
    }
    *entries = e;
    return WEFT_OK;
}

void weft_wire_sums_free(weft_wire_sums_t *sums)
{
    free(sums->known);
    free(sums->sums);
    *sums = (weft_wire_sums_t){0};
}

weft_status_t weft_wire_get_version(const weft_ctl_msg_t *msg, uint64_t *version, weft_wire_sums_t *sums)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    uint32_t           count;

    weft_wire_sums_free(sums);
    *version = weft_ctl_get_u64(&cur);
    if (msg->type != WEFT_CTL_VERSION || cur.failed) {
        return WEFT_ERR_CORRUPT;
    }
    if (cur.at == cur.length) {
        return WEFT_OK; /* an older server's: no checksums */
    }
    count = weft_ctl_get_u32(&cur);
    if (cur.failed || count > (cur.length - cur.at) / 12 || (cur.length - cur.at) != (size_t)count * 12) {
        return WEFT_ERR_CORRUPT;
    }
    if (count == 0) {
        return WEFT_OK;
    }
    sums->known = malloc(count);
    sums->sums = malloc((size_t)count * sizeof(*sums->sums));
    if (sums->known == NULL || sums->sums == NULL) {
        weft_wire_sums_free(sums);
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t known = weft_ctl_get_u32(&cur);

        sums->known[i] = known == 1;
        sums->sums[i] = weft_ctl_get_u64(&cur);
        cur.failed |= known > 1;
    }
    if (cur.failed) {
        weft_wire_sums_free(sums);
        return WEFT_ERR_CORRUPT;
    }
    sums->count = count;
    return WEFT_OK;
}

void weft_wire_put_views(weft_ctl_buf_t *buf, const weft_recv_view_t *views, size_t count)
{
    weft_ctl_put_u32(buf, (uint32_t)count);
    for (size_t i = 0; i < count; i++) {
        const weft_recv_view_t *v = &views[i];
        uint64_t                strides[WEFT_TENSOR_MAX_DIMS];

        weft_view_strides(v, strides);
        weft_ctl_put_str(buf, v->name != NULL ? v->name : "");
        weft_ctl_put_u32(buf, (uint32_t)v->role);
        weft_ctl_put_u32(buf, (uint32_t)v->dtype);
        weft_ctl_put_u32(buf, v->ndim);
        for (int d = 0; d < WEFT_TENSOR_MAX_DIMS; d++) {
            weft_ctl_put_u64(buf, v->shape[d]);
        }
        for (int d = 0; d < WEFT_TENSOR_MAX_DIMS; d++) {
            weft_ctl_put_u64(buf, strides[d]);
        }
        weft_ctl_put_u64(buf, (uint64_t)(uintptr_t)v->data);
    }
}

weft_status_t weft_wire_get_views(weft_ctl_cursor_t *cur, weft_memory_kind_t memory,
                                  weft_recv_view_t **views_out,
                                  char (**names_out)[WEFT_TENSOR_NAME_MAX], uint32_t *count_out)
{
    uint32_t          count = weft_ctl_get_u32(cur);
    weft_recv_view_t *views;
    char (*names)[WEFT_TENSOR_NAME_MAX];

    /* The least a view takes on the wire: its name's length, role, dtype,
     * ndim, shape, strides and address. A count the rest of the message
     * cannot hold is refused before anything is allocated for it. */
    const size_t least = 4 + 3 * 4 + 2 * WEFT_TENSOR_MAX_DIMS * 8 + 8;

    if (cur->failed || count == 0 || count > (1u << 20) || count > (cur->length - cur->at) / least) {
        return WEFT_ERR_CORRUPT;
    }
    views = calloc(count, sizeof(*views));
    names = calloc(count, sizeof(*names));
    if (views == NULL || names == NULL) {
        free(views);
        free(names);
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < count && !cur->failed; i++) {
        weft_recv_view_t *v = &views[i];

        weft_ctl_get_str(cur, names[i], sizeof(names[i]));
        v->field_mask = WEFT_RECV_VIEW_FIELD_STRIDES;
        if (memory != WEFT_MEMORY_HOST) {
            v->field_mask |= WEFT_RECV_VIEW_FIELD_MEMORY;
            v->memory = memory;
        }
        v->name = names[i];
        v->role = (weft_tensor_role_t)weft_ctl_get_u32(cur);
        v->dtype = (weft_dtype_t)weft_ctl_get_u32(cur);
        v->ndim = weft_ctl_get_u32(cur);
        for (int d = 0; d < WEFT_TENSOR_MAX_DIMS; d++) {
            v->shape[d] = weft_ctl_get_u64(cur);
        }
        for (int d = 0; d < WEFT_TENSOR_MAX_DIMS; d++) {
            v->strides[d] = weft_ctl_get_u64(cur);
        }
        v->data = (void *)(uintptr_t)weft_ctl_get_u64(cur);
        /* A view that runs past the end of the address space is no view:
         * every range arithmetic on it would wrap. */
        {
            uint64_t span;

            if (!cur->failed && weft_view_span(v, &span) == 0 && span > UINT64_MAX - (uint64_t)(uintptr_t)v->data) {
                cur->failed = 1;
            }
        }
    }
    if (cur->failed) {
        free(views);
        free(names);
        return WEFT_ERR_CORRUPT;
    }
    *views_out = views;
    *names_out = names;
    *count_out = count;
    return WEFT_OK;
}

static int compare_spans(const void *a, const void *b)
{
    const weft_wire_span_t *x = a, *y = b;
    return x->base < y->base ? -1 : x->base > y->base;
}

weft_status_t weft_wire_view_spans(const weft_recv_view_t *views, size_t count,
                                   weft_wire_span_t **spans_out, uint32_t *span_count)
{
    weft_wire_span_t *spans = calloc(count + 1, sizeof(*spans));
    uint32_t          n = 0, merged = 0;

    if (spans == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < count; i++) {
        uint64_t span;

        /* A layout that overflows, or that runs past the end of the
         * address space, is left out: the server refuses it. */
        if (weft_view_span(&views[i], &span) == 0 && span > 0 &&
            span <= UINT64_MAX - (uint64_t)(uintptr_t)views[i].data) {
            spans[n++] = (weft_wire_span_t){.base = (uint64_t)(uintptr_t)views[i].data, .bytes = span};
        }
    }
    qsort(spans, n, sizeof(*spans), compare_spans);
    for (uint32_t i = 0; i < n; i++) {
        weft_wire_span_t *last = merged ? &spans[merged - 1] : NULL;

        if (last != NULL && spans[i].base <= last->base + last->bytes) {
            uint64_t end = spans[i].base + spans[i].bytes;
            if (end > last->base + last->bytes) {
                last->bytes = end - last->base;
            }
        } else {
            spans[merged++] = spans[i];
        }
    }
    *spans_out = spans;
    *span_count = merged;
    return WEFT_OK;
}

const weft_wire_span_t *weft_wire_span_find(const weft_wire_span_t *spans, uint32_t count,
                                            uint64_t addr, uint64_t bytes)
{
    for (uint32_t i = 0; i < count; i++) {
        if (addr >= spans[i].base && bytes <= spans[i].bytes &&
            addr - spans[i].base <= spans[i].bytes - bytes) {
            return &spans[i];
        }
    }
    return NULL;
}
