/* The handshake every server runs with each consumer, on the server's
 * thread: HELLO → CHALLENGE, PROOF → WELCOME (ctl/auth.h), then VIEWS for
 * the transport, and the dispatch of every later message (server.h). */
#include "config.h"

#include "transport/server/server.h"

#include "transport/ctl/auth.h"
#include "transport/ctl/wire.h"

#include "common/log.h"
#include "common/time_util.h"

#include <stdlib.h>

#define GOODBYE_US 100000u /* a refusal to a peer that may be gone */

void weft_server_base_refuse(weft_server_peer_t *p, weft_status_t status, const char *reason)
{
    weft_log_warn("server: refused consumer from %s: %s", p->addr, reason);
    weft_server_base_stats_add(p->server, &p->server->stats.refused, 1); /* before the peer can hear of it */
    (void)weft_wire_send_refused(p->fd, &p->session, status, reason,
                                 weft_deadline_ns(weft_time_ns(), GOODBYE_US));
}

/* HELLO → CHALLENGE. */
static weft_status_t serve_challenge(weft_server_peer_t *p, const weft_ctl_msg_t *msg)
{
    weft_server_base_t   *s = p->server;
    const char     *reason;
    uint8_t         mac[WEFT_AUTH_MAC_BYTES];
    weft_ctl_buf_t buf = {0};
    weft_status_t   status;

    status = weft_wire_check_hello(msg, s->protocol, p->consumer_nonce, p->name, &reason);
    if (status != WEFT_OK) {
        weft_server_base_refuse(p, status, reason);
        return status;
    }
    weft_auth_nonce(p->server_nonce);
    weft_auth_mac(mac, WEFT_AUTH_SERVER, s->token, s->protocol, p->consumer_nonce, p->server_nonce, p->name);
    weft_ctl_put_blob(&buf, p->server_nonce, WEFT_AUTH_NONCE_BYTES);
    weft_ctl_put_blob(&buf, mac, WEFT_AUTH_MAC_BYTES);
    status = buf.failed ? WEFT_ERR_NO_MEMORY
                        : weft_ctl_send(p->fd, WEFT_CTL_CHALLENGE, buf.data, (uint32_t)buf.length,
                                         weft_deadline_ns(weft_time_ns(), s->timeout_us));
    weft_ctl_buf_free(&buf);
    if (status != WEFT_OK) {
        return WEFT_ERR_CONNECTION;
    }
    p->challenged = 1;
    return WEFT_INPROGRESS;
}

/* PROOF → (checked). A consumer that found our CHALLENGE wrong says so
 * with a REFUSED instead: not a proof either. */
static weft_status_t serve_proof(weft_server_peer_t *p, const weft_ctl_msg_t *msg)
{
    weft_server_base_t *s = p->server;
    uint8_t       want[WEFT_AUTH_MAC_BYTES], got[WEFT_AUTH_MAC_BYTES];

    if (weft_wire_get_auth(msg, NULL, got) != WEFT_OK) {
        weft_server_base_refuse(p, WEFT_ERR_AUTH, msg->type == WEFT_CTL_REFUSED ? "it refused this server's proof"
                                                                              : "a malformed proof");
        return WEFT_ERR_AUTH;
    }
    weft_auth_mac(want, WEFT_AUTH_CONSUMER, s->token, s->protocol, p->consumer_nonce, p->server_nonce, p->name);
    if (!weft_auth_mac_ok(want, got, sizeof(got))) {
        weft_server_base_refuse(p, WEFT_ERR_AUTH, "wrong token");
        return WEFT_ERR_AUTH;
    }
    weft_auth_session_start(&p->session, WEFT_AUTH_SERVER, s->token, s->protocol, p->consumer_nonce,
                            p->server_nonce, p->name);
    return WEFT_OK;
}

/* HELLO, then PROOF: WEFT_INPROGRESS after the CHALLENGE went out, WEFT_OK
 * once WELCOME did, or why the consumer was refused (it was told). */
static weft_status_t welcome(weft_server_peer_t *p, const weft_ctl_msg_t *msg)
{
    weft_status_t status = p->challenged ? serve_proof(p, msg) : serve_challenge(p, msg);

    if (status != WEFT_OK) {
        return status;
    }
    /* Sealed: the consumer takes the transport's address in it only from
     * a server that holds the token. */
    if (weft_auth_send(p->fd, &p->session, WEFT_CTL_WELCOME, p->server->welcome, p->server->welcome_length,
                       weft_deadline_ns(weft_time_ns(), p->server->timeout_us)) != WEFT_OK) {
        return WEFT_ERR_CONNECTION;
    }
    p->authenticated = 1; /* its VIEWS may be long */
    return WEFT_OK;
}

/*
 * What the peer's connection holds, without waiting: WEFT_OK and *msg
 * (opened, once the session is on) when a message is whole,
 * WEFT_INPROGRESS when it is not yet, WEFT_ERR_CONNECTION when the
 * connection ended, WEFT_ERR_CORRUPT for a bad header or a message too
 * long (before the peer proved the token, WEFT_SERVER_PREAUTH_MAX bytes at
 * most), WEFT_ERR_AUTH for one that does not open (auth.h).
 */
static weft_status_t read_message(weft_server_peer_t *p, weft_ctl_msg_t *msg)
{
    int           closed = 0;
    weft_status_t status = weft_ctl_read_some(p->fd, &p->reader,
                                               p->authenticated ? WEFT_CTL_MAX_PAYLOAD : WEFT_SERVER_PREAUTH_MAX,
                                               msg, &closed);

    if (status == WEFT_OK) {
        return weft_auth_open(&p->session, msg);
    }
    return status == WEFT_INPROGRESS || status == WEFT_ERR_CORRUPT ? status : WEFT_ERR_CONNECTION;
}

/*
 * 1 and *msg (the caller frees its payload) for a whole message to handle;
 * -1 when what came is not a whole message yet; 0 when the peer must be
 * dropped with *why and *what: its connection closed or sent what is not a
 * message, or it said BYE (WEFT_OK when it was idle, WEFT_ERR_CANCELED when
 * it gave up on a version in flight or on its handshake: busy set).
 */
static int next_message(weft_server_peer_t *p, int busy, weft_ctl_msg_t *msg, weft_status_t *why,
                        const char **what)
{
    const weft_status_t status = read_message(p, msg);

    if (status == WEFT_INPROGRESS) {
        return -1;
    }
    if (status != WEFT_OK) {
        *why = status == WEFT_ERR_CORRUPT || status == WEFT_ERR_AUTH ? status : WEFT_ERR_CONNECTION;
        *what = status == WEFT_ERR_CORRUPT ? "it sent what is not a message it may send"
                : status == WEFT_ERR_AUTH  ? "a message that does not open with its session's key (forged, "
                                             "altered, replayed, out of order or in clear)"
                                           : "its connection closed";
        return 0;
    }
    if (msg->type == WEFT_CTL_BYE) {
        free(msg->payload);
        msg->payload = NULL;
        /* In the middle of a version it gave up on it: that is a failure. */
        *why = busy ? WEFT_ERR_CANCELED : WEFT_OK;
        *what = busy ? "it left in the middle of a version" : "it left";
        return 0;
    }
    return 1;
}

void weft_server_base_refuse_drop(weft_server_peer_t *p, weft_status_t status, const char *reason)
{
    weft_server_base_refuse(p, status, reason);
    p->server->peer_ops->drop(p, status, "refused");
}

/* HELLO and PROOF: WELCOME once the proof checked out, then VIEWS. */
static void on_hello(weft_server_peer_t *p, const weft_ctl_msg_t *msg)
{
    const weft_status_t status = welcome(p, msg);

    if (status == WEFT_INPROGRESS) {
        return; /* challenged: its proof comes next */
    }
    if (status != WEFT_OK) {
        p->server->peer_ops->drop(p, status, status == WEFT_ERR_CONNECTION ? "welcome not sent" : "refused");
        return;
    }
    p->phase = WEFT_SERVER_PHASE_VIEWS;
}

static void on_views(weft_server_peer_t *p, const weft_ctl_msg_t *msg)
{
    if (msg->type != WEFT_CTL_VIEWS) {
        weft_server_base_refuse_drop(p, WEFT_ERR_CORRUPT, "views expected");
        return;
    }
    if (p->server->broken) {
        weft_server_base_refuse_drop(p, WEFT_ERR_CUDA, "the server cannot use its GPU");
        return;
    }
    const weft_status_t status = p->server->peer_ops->views(p, msg);

    if (status == WEFT_OK || status == WEFT_INPROGRESS) {
        p->phase = WEFT_SERVER_PHASE_SERVING;
    }
}

void weft_server_peer_read(weft_server_peer_t *p)
{
    const weft_server_peer_ops_t *ops = p->server->peer_ops;
    const int      serving = p->phase == WEFT_SERVER_PHASE_SERVING;
    weft_ctl_msg_t msg;
    weft_status_t  why;
    const char    *what;
    const int      got = next_message(p, !serving || !ops->idle(p), &msg, &why, &what);

    if (got < 0) {
        return; /* a message not yet whole: the rest comes later */
    }
    if (got == 0) {
        ops->drop(p, why, what);
        return;
    }
    switch (p->phase) {
    case WEFT_SERVER_PHASE_HELLO:
        on_hello(p, &msg);
        break;
    case WEFT_SERVER_PHASE_VIEWS:
        on_views(p, &msg);
        break;
    default:
        ops->message(p, &msg);
        break;
    }
    free(msg.payload);
}
