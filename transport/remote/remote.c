/* The consumer's half of the bootstrap conversation, for every transport. */
#include "config.h"

#include "transport/remote/remote.h"

#include "transport/ctl/auth.h"

#include "common/env_config.h"
#include "common/log.h"
#include "common/time_util.h"

#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <weft/checksum.h>

#define DEFAULT_TIMEOUT_US 30000000u
#define MESSAGE_US         5000000u /* a message of the server that is already arriving */
#define GOODBYE_US         100000u  /* BYE to a server that may be gone */
#define WAIT_POLL_MS       100      /* at most, between looks at a deadline */

uint64_t weft_remote_base_init(weft_remote_base_t *c, const weft_remote_params_t *p)
{
    c->fd = -1;
    c->wanting = 0;
    c->want_after = 0;
    c->server_closed = 0;
    c->session = (weft_auth_session_t){0};
    c->sums = (weft_wire_sums_t){0};
    c->sum_scratch = (weft_checksum_scratch_t){0};
    c->view_count = 0;
    c->view_data = NULL;
    c->view_bytes = NULL;
    snprintf(c->server, sizeof(c->server), "%s", p->server);
    c->timeout_us = (p->field_mask & WEFT_REMOTE_FIELD_TIMEOUT) ? p->timeout_us : DEFAULT_TIMEOUT_US;
    return c->timeout_us;
}

weft_status_t weft_remote_base_connect(weft_remote_base_t *c, uint64_t deadline_ns)
{
    weft_status_t status = weft_ctl_connect(c->server, deadline_ns, &c->fd);

    if (status == WEFT_OK) {
        weft_ctl_dead_peer_timeout(c->fd, c->timeout_us);
    }
    return status;
}

weft_status_t weft_remote_base_refused(const weft_remote_base_t *c, const weft_ctl_msg_t *msg,
                                   const char *what)
{
    char          reason[256];
    weft_status_t status;

    if (msg->type != WEFT_CTL_REFUSED) {
        weft_log_error("remote: %s answered %s with message %u", c->server, what, msg->type);
        return WEFT_ERR_CORRUPT;
    }
    status = weft_wire_parse_refused(msg, reason, sizeof(reason));
    weft_log_error("remote: %s refused %s: %s", c->server, what, reason);
    return status;
}

weft_status_t weft_remote_base_recv(weft_remote_base_t *c, weft_ctl_msg_t *msg, uint64_t deadline_ns)
{
    weft_status_t status = weft_ctl_recv_closed(c->fd, msg, deadline_ns, &c->server_closed);

    if (status == WEFT_OK) {
        status = weft_auth_open(&c->session, msg);
        if (status == WEFT_ERR_AUTH) {
            weft_log_error("remote: a message from %s does not open with the session's key (forged, altered, "
                           "replayed or out of order)",
                           c->server);
        }
    }
    return status;
}

/* Sends type with buf's payload, then reads the answer into *answer. */
static weft_status_t exchange(weft_remote_base_t *c, uint32_t type, const weft_ctl_buf_t *buf,
                              uint64_t deadline_ns, weft_ctl_msg_t *answer)
{
    weft_status_t status = buf->failed ? WEFT_ERR_NO_MEMORY
                                       : weft_auth_send(c->fd, &c->session, type, buf->data,
                                                        (uint32_t)buf->length, deadline_ns);

    return status == WEFT_OK ? weft_remote_base_recv(c, answer, deadline_ns) : status;
}

/* OK when the answer is of type expect; else the refusal, the payload freed. */
static weft_status_t expect(weft_remote_base_t *c, weft_ctl_msg_t *answer, uint32_t type,
                            const char *what)
{
    weft_status_t status;

    if (answer->type == type) {
        return WEFT_OK;
    }
    status = weft_remote_base_refused(c, answer, what);
    free(answer->payload);
    answer->payload = NULL;
    return status;
}

weft_status_t weft_remote_base_hello(weft_remote_base_t *c, uint32_t protocol,
                                 const weft_remote_params_t *p, uint64_t deadline_ns,
                                 weft_ctl_msg_t *welcome)
{
    uint8_t         consumer_nonce[WEFT_AUTH_NONCE_BYTES], server_nonce[WEFT_AUTH_NONCE_BYTES];
    uint8_t         got[WEFT_AUTH_MAC_BYTES], want[WEFT_AUTH_MAC_BYTES];
    weft_ctl_buf_t buf = {0};
    weft_ctl_msg_t challenge;
    weft_status_t   status = weft_auth_init();

    if (status != WEFT_OK) {
        return status;
    }
    weft_auth_nonce(consumer_nonce);
    weft_wire_put_hello(&buf, protocol, consumer_nonce, p->name);
    status = exchange(c, WEFT_CTL_HELLO, &buf, deadline_ns, &challenge);
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        weft_log_error("remote: no answer from %s to the handshake: %s", c->server,
                       weft_status_string(status));
        return status;
    }
    status = expect(c, &challenge, WEFT_CTL_CHALLENGE, "this consumer");
    if (status != WEFT_OK) {
        return status;
    }
    /* The server proves it knows the token before this consumer proves
     * anything: one that does not is told so and left. */
    status = weft_wire_get_auth(&challenge, server_nonce, got);
    free(challenge.payload);
    weft_auth_mac(want, WEFT_AUTH_SERVER, p->token, protocol, consumer_nonce, server_nonce, p->name);
    if (status != WEFT_OK || !weft_auth_mac_ok(want, got, sizeof(got))) {
        weft_log_error("remote: %s did not prove it knows the token (another server, or this consumer's token is "
                       "wrong): refused",
                       c->server);
        (void)weft_wire_send_refused(c->fd, NULL, WEFT_ERR_AUTH, "the server's proof is wrong", deadline_ns);
        return WEFT_ERR_AUTH;
    }
    weft_auth_mac(want, WEFT_AUTH_CONSUMER, p->token, protocol, consumer_nonce, server_nonce, p->name);
    weft_ctl_put_blob(&buf, want, WEFT_AUTH_MAC_BYTES);
    status = buf.failed ? WEFT_ERR_NO_MEMORY
                        : weft_ctl_send(c->fd, WEFT_CTL_PROOF, buf.data, (uint32_t)buf.length, deadline_ns);
    weft_ctl_buf_free(&buf);
    if (status == WEFT_OK) {
        status = weft_ctl_recv_closed(c->fd, welcome, deadline_ns, &c->server_closed);
    }
    if (status != WEFT_OK) {
        weft_log_error("remote: no answer from %s to this consumer's proof: %s", c->server,
                       weft_status_string(status));
        return status;
    }
    /* A server that refuses the proof has no session: its REFUSED comes in
     * clear. Anything else is the first sealed message, the WELCOME. */
    if (welcome->type == WEFT_CTL_REFUSED) {
        return expect(c, welcome, WEFT_CTL_WELCOME, "this consumer");
    }
    weft_auth_session_start(&c->session, WEFT_AUTH_CONSUMER, p->token, protocol, consumer_nonce, server_nonce,
                            p->name);
    status = weft_auth_open(&c->session, welcome);
    if (status != WEFT_OK) {
        weft_log_error("remote: %s's answer to this consumer's proof does not open with the session's key: refused",
                       c->server);
        return status;
    }
    return expect(c, welcome, WEFT_CTL_WELCOME, "this consumer");
}

weft_status_t weft_remote_base_views(weft_remote_base_t *c, const weft_ctl_buf_t *buf,
                                 uint64_t deadline_ns, weft_ctl_msg_t *ready)
{
    weft_status_t status = exchange(c, WEFT_CTL_VIEWS, buf, deadline_ns, ready);

    return status == WEFT_OK ? expect(c, ready, WEFT_CTL_READY, "the views") : status;
}

weft_status_t weft_remote_base_notice(weft_remote_base_t *c, uint64_t *version, uint32_t extra_types,
                                  weft_ctl_msg_t *extra)
{
    weft_ctl_msg_t    msg;
    weft_ctl_cursor_t cur;
    weft_status_t      status;
    uint64_t           v;

    status = weft_remote_base_recv(c, &msg, weft_deadline_ns(weft_time_ns(), MESSAGE_US));
    if (status == WEFT_ERR_AUTH) {
        weft_remote_base_disconnect(c);
        return WEFT_ERR_AUTH;
    }
    if (status != WEFT_OK) {
        weft_log_error("remote: lost the connection to %s: %s", c->server,
                       weft_status_string(status));
        weft_remote_base_disconnect(c);
        return WEFT_ERR_CONNECTION;
    }
    if (msg.type < 32 && (extra_types & WEFT_CTL_TYPE_BIT(msg.type)) != 0) {
        *extra = msg;
        return WEFT_INPROGRESS;
    }
    if (msg.type == WEFT_CTL_VERSION && weft_wire_get_version(&msg, &v, &c->sums) == WEFT_OK) {
        free(msg.payload);
        c->wanting = 0;
        *version = v;
        return WEFT_OK;
    }
    cur = (weft_ctl_cursor_t){.data = msg.payload, .length = msg.length};
    v = weft_ctl_get_u64(&cur);
    if (msg.type == WEFT_CTL_FAILED) {
        weft_log_error("remote: %s dropped this consumer during version %" PRIu64, c->server, v);
        status = WEFT_ERR_CANCELED;
    } else {
        weft_log_error("remote: unexpected message %u from %s", msg.type, c->server);
        status = WEFT_ERR_CORRUPT;
    }
    free(msg.payload);
    weft_remote_base_disconnect(c);
    return status;
}

weft_status_t weft_remote_base_ask(weft_remote_base_t *c, uint64_t after, uint64_t holds)
{
    if (c->wanting && c->want_after == after && c->want_holds == holds) {
        return WEFT_OK;
    }
    if (weft_wire_send_want(c->fd, &c->session, after, holds, weft_deadline_ns(weft_time_ns(), MESSAGE_US)) !=
        WEFT_OK) {
        weft_log_error("remote: lost the connection to %s", c->server);
        weft_remote_base_disconnect(c);
        return WEFT_ERR_CONNECTION;
    }
    c->wanting = 1;
    c->want_after = after;
    c->want_holds = holds;
    return WEFT_OK;
}

weft_status_t weft_remote_base_send(weft_remote_base_t *c, uint32_t type, const weft_ctl_buf_t *buf)
{
    if (buf->failed) {
        return WEFT_ERR_NO_MEMORY;
    }
    return weft_auth_send(c->fd, &c->session, type, buf->data, (uint32_t)buf->length,
                          weft_deadline_ns(weft_time_ns(), MESSAGE_US)) == WEFT_OK
               ? WEFT_OK
               : WEFT_ERR_CONNECTION;
}

weft_status_t weft_remote_base_keep_views(weft_remote_base_t *c, const weft_recv_view_t *views, uint32_t count,
                                      weft_memory_kind_t memory)
{
    c->view_data = calloc(count, sizeof(*c->view_data));
    c->view_bytes = calloc(count, sizeof(*c->view_bytes));
    if (c->view_data == NULL || c->view_bytes == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < count; i++) {
        uint64_t elements = 1;

        for (uint32_t d = 0; d < views[i].ndim && d < WEFT_TENSOR_MAX_DIMS; d++) {
            elements *= views[i].shape[d]; /* checked when the views were */
        }
        c->view_data[i] = views[i].data;
        c->view_bytes[i] = elements * weft_dtype_size(views[i].dtype);
    }
    c->view_count = count;
    c->view_memory = memory;
    return WEFT_OK;
}

weft_status_t weft_remote_base_check(weft_remote_base_t *c, uint64_t version)
{
    weft_status_t status = WEFT_OK;

    if (c->sums.count == 0 || weft_verify_mode() == WEFT_VERIFY_NONE) {
        return WEFT_OK;
    }
    if (c->sums.count != c->view_count) {
        weft_log_error("remote: %s's notice of version %" PRIu64 " has checksums of %u views; this consumer has %u",
                       c->server, version, c->sums.count, c->view_count);
        return WEFT_ERR_CORRUPT;
    }
    /* A view the server does not vouch for (not its tensor verbatim) is
     * not checked. Every failing view is named. */
    uint64_t       *got = calloc(c->view_count, sizeof(*got));
    const uint8_t **ptrs = calloc(c->view_count, sizeof(*ptrs));
    uint64_t       *bytes = calloc(c->view_count, sizeof(*bytes));
    uint32_t       *which = calloc(c->view_count, sizeof(*which));
    uint32_t        n = 0;

    if (got == NULL || ptrs == NULL || bytes == NULL || which == NULL) {
        status = WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t i = 0; i < c->view_count && status == WEFT_OK; i++) {
        if (c->sums.known[i]) {
            ptrs[n] = c->view_data[i];
            bytes[n] = c->view_bytes[i];
            which[n++] = i;
        }
    }
    if (status == WEFT_OK && c->view_memory == WEFT_MEMORY_CUDA) {
        status = weft_checksum_cuda_ranges(ptrs, bytes, n, got, &c->sum_scratch);
    } else if (status == WEFT_OK && weft_checksum_host_batch((const void *const *)ptrs, bytes, n, got) != 0) {
        status = WEFT_ERR_NO_MEMORY;
    }
    for (uint32_t k = 0; k < n && status != WEFT_ERR_NO_MEMORY && status != WEFT_ERR_CUDA; k++) {
        const uint32_t i = which[k];

        if (got[k] != c->sums.sums[i]) {
            weft_log_error("remote: view %u (%" PRIu64 " bytes) of version %" PRIu64 " from %s fails its checksum "
                           "(0x%016" PRIx64 ", published 0x%016" PRIx64 "): not acknowledged",
                           i, c->view_bytes[i], version, c->server, got[k], c->sums.sums[i]);
            status = WEFT_ERR_CORRUPT;
        }
    }
    if (status == WEFT_OK) {
        weft_log_debug("remote: version %" PRIu64 " from %s: %u of %u views checked against its checksums", version,
                       c->server, n, c->view_count);
    }
    free(got);
    free(ptrs);
    free(bytes);
    free(which);
    return status;
}

weft_status_t weft_remote_base_ack(weft_remote_base_t *c, uint64_t v)
{
    weft_status_t status =
        weft_wire_send_u64(c->fd, &c->session, WEFT_CTL_ACK, v, weft_deadline_ns(weft_time_ns(), MESSAGE_US));

    return status == WEFT_OK ? WEFT_OK : WEFT_ERR_CONNECTION;
}

/*
 * The server closed its end before we closed ours and we have not read
 * that yet: TCP then sits in CLOSE_WAIT. (A FIN or reset that a read saw
 * is noted there, weft_ctl_recv_closed; the keepalive's verdict on a
 * silent peer says nothing of whether the server still writes.)
 */
static int peer_closed(int fd)
{
    struct tcp_info info;
    socklen_t       length = sizeof(info);

    return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) == 0 &&
           info.tcpi_state == TCP_CLOSE_WAIT;
}

void weft_remote_base_disconnect(weft_remote_base_t *c)
{
    if (c->fd >= 0) {
        c->server_closed |= peer_closed(c->fd);
        close(c->fd);
        c->fd = -1;
    }
    weft_auth_session_end(&c->session);
    weft_wire_sums_free(&c->sums);
    weft_checksum_scratch_free(&c->sum_scratch);
    free(c->view_data);
    free(c->view_bytes);
    c->view_data = NULL;
    c->view_bytes = NULL;
    c->view_count = 0;
}

weft_status_t weft_remote_base_wait_readable(const weft_remote_base_t *c, uint64_t deadline_ns)
{
    while (!weft_ctl_readable(c->fd)) {
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        uint64_t      now = weft_time_ns();
        int           ms;

        if (now >= deadline_ns) {
            return WEFT_ERR_TIMEOUT;
        }
        /* poll's milliseconds, rounded up, so the deadline is reached. */
        ms = (int)((deadline_ns - now) / 1000000u);
        (void)poll(&pfd, 1, ms < WAIT_POLL_MS ? ms + 1 : WAIT_POLL_MS);
    }
    return WEFT_OK;
}

void weft_remote_base_bye(weft_remote_base_t *c)
{
    if (c->fd >= 0) {
        (void)weft_auth_send(c->fd, &c->session, WEFT_CTL_BYE, NULL, 0,
                             weft_deadline_ns(weft_time_ns(), GOODBYE_US));
    }
}

weft_status_t weft_remote_base_await_close(weft_remote_base_t *c, const char *what,
                                       void (*drive)(void *arg),
                                       void (*wait)(void *arg, int fd, int ms), void *arg)
{
    const uint64_t deadline_ns = weft_deadline_ns(weft_time_ns(), c->timeout_us);
    weft_status_t  status = WEFT_ERR_CONNECTION; /* lost before the goodbye, or while waiting */

    while (c->fd >= 0) {
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        uint64_t      now, left_ms;
        int           ms;

        if (drive != NULL) {
            drive(arg);
        }
        if (weft_ctl_readable(c->fd)) {
            weft_ctl_msg_t msg;

            if (weft_remote_base_recv(c, &msg, weft_deadline_ns(weft_time_ns(), MESSAGE_US)) != WEFT_OK) {
                break;
            }
            free(msg.payload); /* a notice sent before the server read our BYE */
            continue;
        }
        now = weft_time_ns();
        if (now >= deadline_ns) {
            status = WEFT_ERR_TIMEOUT;
            break;
        }
        left_ms = (deadline_ns - now) / 1000000 + 1;
        ms = left_ms < WAIT_POLL_MS ? (int)left_ms : WAIT_POLL_MS;
        if (wait != NULL) {
            wait(arg, c->fd, ms);
        } else {
            (void)poll(&pfd, 1, ms);
        }
    }
    weft_remote_base_disconnect(c); /* notes a close of the server's not yet read */
    if (c->server_closed) {
        return WEFT_OK;
    }
    weft_log_warn("remote: %s did not confirm within %" PRIu64 " us that %s (%s)", c->server,
                  c->timeout_us, what, weft_status_string(status));
    return status;
}
