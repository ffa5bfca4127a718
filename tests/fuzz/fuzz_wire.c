/*
 * libFuzzer target: arbitrary bytes as what a peer sends on the control
 * channel, before and after it proved the token. The first byte picks
 * the parser: the framing (weft_ctl_read_some, the server's reader, over
 * a socket pair, with the pre-authentication cap or the full one), HELLO,
 * CHALLENGE, PROOF, REFUSED, views and their spans, the ucx server's
 * VIEWS, the opening of a sealed message, a VERSION's checksums, a
 * WANT, or a DELTA's map against an inbox. Each must refuse what is
 * wrong with an error, never crash or read out of bounds
 * (AddressSanitizer watches), and what it accepts must be consistent.
 * Payloads are laid out as received ones are: malloc'd, NUL one byte
 * past their length.
 *
 *   clang -fsanitize=fuzzer,address,undefined ... (see .ci/fuzz)
 */
#include "config.h"

#include "common/log.h"
#include "transport/ctl/bootstrap.h"
#include "transport/ctl/auth.h"
#include "transport/server/server.h"
#include "transport/ctl/wire.h"
#include "transport/ctl/ucx_views.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The library's log, formatted (so its arguments are checked) and dropped. */
weft_log_level_t weft_log_level(void)
{
    return WEFT_LOG_TRACE;
}

void weft_log_write(weft_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char    text[1024];
    va_list ap;

    (void)level;
    (void)file;
    (void)line;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
}

enum target {
    FRAMING_PREAUTH, FRAMING, HELLO, CHALLENGE, PROOF, REFUSED, VIEWS, UCX_VIEWS, SEALED, VERSION_NOTICE, WANT,
    DELTA_MAP, TARGETS
};

/* Bytes fed to the server's reader, whole, then the connection closed:
 * every message it hands over is within the cap, then it ends. */
static void framing(const uint8_t *bytes, size_t size, uint32_t max_payload)
{
    weft_ctl_reader_t r = {0};
    weft_ctl_msg_t    msg;
    weft_status_t      status;
    int                fds[2], closed = 0, messages = 0;

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        return;
    }
    if (size > 0 && send(fds[0], bytes, size, MSG_DONTWAIT) != (ssize_t)size) {
        abort(); /* max_len keeps it within a socket's buffer */
    }
    shutdown(fds[0], SHUT_WR);
    while ((status = weft_ctl_read_some(fds[1], &r, max_payload, &msg, &closed)) == WEFT_OK) {
        if (msg.length > max_payload || msg.payload == NULL || msg.payload[msg.length] != 0) {
            abort();
        }
        free(msg.payload);
        messages++;
    }
    if (status == WEFT_INPROGRESS || (status == WEFT_ERR_CONNECTION && !closed)) {
        abort(); /* all of it was there, then the close */
    }
    if ((size_t)messages * 16 > size) {
        abort();
    }
    weft_ctl_reader_free(&r);
    close(fds[0]);
    close(fds[1]);
}

static void views(const weft_ctl_msg_t *msg)
{
    weft_ctl_cursor_t cur = {.data = msg->payload, .length = msg->length};
    weft_recv_view_t  *v = NULL;
    char (*names)[WEFT_TENSOR_NAME_MAX] = NULL;
    uint32_t          count = 0, span_count = 0;
    weft_wire_span_t *spans = NULL;

    if (weft_wire_get_views(&cur, WEFT_MEMORY_HOST, &v, &names, &count) != WEFT_OK) {
        return;
    }
    if (count == 0 || cur.at > cur.length) {
        abort();
    }
    for (uint32_t i = 0; i < count; i++) {
        if (v[i].name != names[i] || memchr(names[i], 0, WEFT_TENSOR_NAME_MAX) == NULL) {
            abort();
        }
    }
    if (weft_wire_view_spans(v, count, &spans, &span_count) == WEFT_OK) {
        for (uint32_t i = 0; i + 1 < span_count; i++) {
            if (spans[i].base + spans[i].bytes >= spans[i + 1].base) {
                abort(); /* sorted, merged where they touch */
            }
        }
        for (uint32_t i = 0; i < span_count; i++) {
            if (weft_wire_span_find(spans, span_count, spans[i].base, spans[i].bytes) != &spans[i]) {
                abort();
            }
        }
        free(spans);
    }
    free(v);
    free(names);
}

static void ucx_views(const weft_ctl_msg_t *msg)
{
    weft_ucx_views_msg_t m;
    const char          *reason = NULL;

    if (weft_ucx_views_parse(msg, &m, &reason) != WEFT_OK) {
        if (reason == NULL || m.regions != NULL || m.rkeys != NULL || m.views != NULL) {
            abort(); /* a refusal says why and keeps nothing */
        }
        return;
    }
    if (m.address.length == 0 || m.region_count == 0 || m.lane_count > WEFT_UCX_LANES_MAX) {
        abort();
    }
    for (uint32_t r = 0; r < m.region_count; r++) {
        const uint8_t *key = m.rkeys[r].data;
        if (m.rkeys[r].length == 0 || key < msg->payload || key + m.rkeys[r].length > msg->payload + msg->length) {
            abort(); /* every blob inside the message */
        }
    }
    weft_ucx_views_msg_free(&m);
}

/* Opened with a session both ends of which are known here: what opens
 * must be the next message, and a failure must leave the session as it
 * was. */
static void sealed(weft_ctl_msg_t *msg)
{
    static const uint8_t nonce_c[WEFT_AUTH_NONCE_BYTES] = {1}, nonce_s[WEFT_AUTH_NONCE_BYTES] = {2};
    weft_auth_session_t  s;

    weft_auth_session_start(&s, WEFT_AUTH_SERVER, "fuzz-token", 1, nonce_c, nonce_s, "fuzz");
    if (weft_auth_open(&s, msg) == WEFT_OK) {
        if (s.received != 1 || msg->payload[msg->length] != 0) {
            abort();
        }
    } else if (s.received != 0 || msg->payload != NULL) {
        abort();
    }
    weft_auth_session_end(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    weft_ctl_msg_t msg;
    uint8_t         nonce[WEFT_AUTH_NONCE_BYTES], mac[WEFT_AUTH_MAC_BYTES];
    char            name[WEFT_CONSUMER_NAME_MAX], reason[256];
    const char     *why = NULL;

    if (size < 2) {
        return 0;
    }
    const enum target target = (enum target)(data[0] % TARGETS);
    if (target == FRAMING_PREAUTH || target == FRAMING) {
        framing(data + 1, size - 1, target == FRAMING_PREAUTH ? WEFT_SERVER_PREAUTH_MAX : 1u << 16);
        return 0;
    }
    /* data[1]: the type in the header, which sealing binds too. */
    msg = (weft_ctl_msg_t){.type = data[1] % 16u, .length = (uint32_t)(size - 2), .payload = malloc(size - 1)};
    if (msg.payload == NULL) {
        return 0;
    }
    memcpy(msg.payload, data + 2, size - 2);
    msg.payload[msg.length] = 0;
    switch (target) {
    case HELLO:
        msg.type = WEFT_CTL_HELLO;
        if (weft_wire_check_hello(&msg, 1, nonce, name, &why) == WEFT_OK) {
            for (const char *c = name; *c != '\0'; c++) {
                if ((unsigned char)*c < 0x20 || *c == 0x7f) {
                    abort(); /* no control character reaches a log */
                }
            }
        } else if (why == NULL) {
            abort();
        }
        break;
    case CHALLENGE:
        msg.type = WEFT_CTL_CHALLENGE;
        (void)weft_wire_get_auth(&msg, nonce, mac);
        break;
    case PROOF:
        msg.type = WEFT_CTL_PROOF;
        (void)weft_wire_get_auth(&msg, NULL, mac);
        break;
    case REFUSED: {
        const weft_status_t status = weft_wire_parse_refused(&msg, reason, sizeof(reason));
        if (status >= 0 || status <= WEFT_ERR_LAST || memchr(reason, 0, sizeof(reason)) == NULL) {
            abort(); /* an error, never success, and the reason a string */
        }
        break;
    }
    case VIEWS:
        views(&msg);
        break;
    case UCX_VIEWS:
        msg.type = WEFT_CTL_VIEWS;
        ucx_views(&msg);
        break;
    case SEALED:
        sealed(&msg);
        break;
    case VERSION_NOTICE: {
        weft_wire_sums_t sums = {0};
        uint64_t         v;

        msg.type = WEFT_CTL_VERSION;
        if (weft_wire_get_version(&msg, &v, &sums) == WEFT_OK) {
            if (msg.length != 8 && msg.length != 12 + 12 * (size_t)sums.count) {
                abort(); /* what was accepted is exactly what it said */
            }
            for (uint32_t i = 0; i < sums.count; i++) {
                if (sums.known[i] > 1) {
                    abort();
                }
            }
        } else if (sums.count != 0 || sums.known != NULL) {
            abort(); /* a refusal keeps nothing */
        }
        weft_wire_sums_free(&sums);
        break;
    }
    case WANT: {
        uint64_t after, holds;

        msg.type = WEFT_CTL_WANT;
        if (weft_wire_get_want(&msg, &after, &holds) == WEFT_OK && msg.length != 8 && msg.length != 16) {
            abort(); /* one u64, or two */
        }
        break;
    }
    case DELTA_MAP: {
        /* An inbox of 1 MiB: every entry accepted lies inside it. */
        const uint64_t           inbox = UINT64_C(1) << 20;
        weft_wire_delta_entry_t *e = NULL;
        uint64_t                 v, base;
        uint32_t                 count = 0;

        msg.type = WEFT_CTL_DELTA;
        if (weft_wire_get_delta(&msg, inbox, &v, &base, &e, &count) == WEFT_OK) {
            if (msg.length != 20 + 44 * (size_t)count) {
                abort();
            }
            for (uint32_t i = 0; i < count; i++) {
                if ((e[i].kind != WEFT_WIRE_DELTA_PATCH && e[i].kind != WEFT_WIRE_DELTA_WHOLE &&
                     e[i].kind != WEFT_WIRE_DELTA_PATCH_T) ||
                    e[i].offset > inbox || e[i].bytes > inbox - e[i].offset) {
                    abort();
                }
            }
        } else if (e != NULL) {
            abort(); /* a refusal keeps nothing */
        }
        free(e);
        break;
    }
    default:
        break;
    }
    free(msg.payload);
    return 0;
}
