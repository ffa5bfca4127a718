/*
 * The control channel's sealed session (ctl/auth.h), on a
 * socket pair: messages open in order with their payloads and types;
 * a replayed, reordered, altered, retyped, reflected, clear or
 * other-session message does not (WEFT_ERR_AUTH), and a failed open
 * leaves the session where it was, so the next real message still opens.
 * Neither the token, the keys nor a payload's bytes appear on the wire.
 */
#include "config.h"

#include "common/time_util.h"
#include "transport/ctl/bootstrap.h"
#include "transport/ctl/auth.h"

#include "lib/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft/weft.h>

#define TOKEN    "a-token-that-never-crosses"
#define PROTOCOL 7u
#define WAIT_US  5000000u

/* Both ends of one connection after its handshake. */
typedef struct pair {
    int                 consumer_fd, server_fd;
    weft_auth_session_t consumer, server;
} pair_t;

static void pair_open_with(pair_t *p, const uint8_t *server_nonce)
{
    uint8_t nonce_c[WEFT_AUTH_NONCE_BYTES], nonce_s[WEFT_AUTH_NONCE_BYTES];
    int     fds[2];

    ck_assert_int_eq(weft_auth_init(), WEFT_OK);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    weft_auth_nonce(nonce_c);
    weft_auth_nonce(nonce_s);
    *p = (pair_t){.consumer_fd = fds[0], .server_fd = fds[1]};
    weft_auth_session_start(&p->consumer, WEFT_AUTH_CONSUMER, TOKEN, PROTOCOL, nonce_c, nonce_s, "c");
    weft_auth_session_start(&p->server, WEFT_AUTH_SERVER, TOKEN, PROTOCOL, nonce_c,
                            server_nonce != NULL ? server_nonce : nonce_s, "c");
}

static void pair_close(pair_t *p)
{
    close(p->consumer_fd);
    close(p->server_fd);
    weft_auth_session_end(&p->consumer);
    weft_auth_session_end(&p->server);
}

static uint64_t deadline(void)
{
    return weft_deadline_ns(weft_time_ns(), WAIT_US);
}

static void send_text(int fd, weft_auth_session_t *s, uint32_t type, const char *text)
{
    ck_assert_int_eq(weft_auth_send(fd, s, type, text, (uint32_t)strlen(text), deadline()), WEFT_OK);
}

/* The next message on fd as it came, then opened: the status of the open. */
static weft_status_t receive(int fd, weft_auth_session_t *s, weft_ctl_msg_t *msg)
{
    ck_assert_int_eq(weft_ctl_recv(fd, msg, deadline()), WEFT_OK);
    return weft_auth_open(s, msg);
}

static void expect_text(int fd, weft_auth_session_t *s, uint32_t type, const char *text)
{
    weft_ctl_msg_t msg;

    ck_assert_int_eq(receive(fd, s, &msg), WEFT_OK);
    ck_assert_uint_eq(msg.type, type);
    ck_assert_uint_eq(msg.length, strlen(text));
    ck_assert_str_eq((const char *)msg.payload, text); /* NUL-terminated past its length */
    free(msg.payload);
}

static void expect_refused(int fd, weft_auth_session_t *s, const char *what)
{
    weft_ctl_msg_t msg;
    weft_status_t   status = receive(fd, s, &msg);

    ck_assert_msg(status == WEFT_ERR_AUTH, "%s opened (%s)", what, weft_status_string(status));
    ck_assert_ptr_null(msg.payload);
}

START_TEST(messages_open_in_order_both_ways)
{
    pair_t p;

    pair_open_with(&p, NULL);
    for (int i = 0; i < 3; i++) {
        send_text(p.consumer_fd, &p.consumer, WEFT_CTL_WANT, "want");
        send_text(p.server_fd, &p.server, WEFT_CTL_VERSION, "version");
    }
    ck_assert_int_eq(weft_auth_send(p.server_fd, &p.server, WEFT_CTL_ROUND, NULL, 0, deadline()), WEFT_OK);
    for (int i = 0; i < 3; i++) {
        expect_text(p.server_fd, &p.server, WEFT_CTL_WANT, "want");
        expect_text(p.consumer_fd, &p.consumer, WEFT_CTL_VERSION, "version");
    }
    expect_text(p.consumer_fd, &p.consumer, WEFT_CTL_ROUND, "");
    ck_assert_uint_eq(p.server.received, 3);
    ck_assert_uint_eq(p.server.sent, 4);
    pair_close(&p);
}
END_TEST

START_TEST(a_replayed_message_does_not_open)
{
    pair_t              p;
    weft_auth_session_t before;

    pair_open_with(&p, NULL);
    before = p.consumer; /* sealing again from here makes the same bytes */
    send_text(p.consumer_fd, &p.consumer, WEFT_CTL_ACK, "ack 1");
    send_text(p.consumer_fd, &before, WEFT_CTL_ACK, "ack 1");
    send_text(p.consumer_fd, &p.consumer, WEFT_CTL_ACK, "ack 2");
    expect_text(p.server_fd, &p.server, WEFT_CTL_ACK, "ack 1");
    expect_refused(p.server_fd, &p.server, "a replay");
    expect_text(p.server_fd, &p.server, WEFT_CTL_ACK, "ack 2"); /* the session went on */
    pair_close(&p);
}
END_TEST

START_TEST(a_reordered_message_does_not_open)
{
    pair_t              p;
    weft_auth_session_t first;

    pair_open_with(&p, NULL);
    first = p.consumer;
    p.consumer.sent++; /* the second message goes first */
    send_text(p.consumer_fd, &p.consumer, WEFT_CTL_ACK, "second");
    send_text(p.consumer_fd, &first, WEFT_CTL_ACK, "first");
    expect_refused(p.server_fd, &p.server, "the second message first");
    expect_text(p.server_fd, &p.server, WEFT_CTL_ACK, "first");
    pair_close(&p);
}
END_TEST

/* A sealed message taken apart: its header (16 bytes) and sealed payload. */
static size_t capture(weft_auth_session_t *s, uint32_t type, const char *text, uint8_t *wire, size_t size)
{
    int     fds[2];
    ssize_t n;

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    send_text(fds[0], s, type, text);
    n = recv(fds[1], wire, size, 0);
    ck_assert_int_eq(n, (ssize_t)(16 + strlen(text) + WEFT_AUTH_SEAL_BYTES));
    close(fds[0]);
    close(fds[1]);
    return (size_t)n;
}

START_TEST(an_altered_or_retyped_message_does_not_open)
{
    static const char text[] = "views: the memory keys of the consumer";
    pair_t            p;
    uint8_t           wire[256];
    size_t            n;

    pair_open_with(&p, NULL);
    for (size_t at = 16; at < 16 + sizeof(text) - 1 + WEFT_AUTH_SEAL_BYTES; at += 7) {
        weft_auth_session_t copy = p.consumer; /* each capture the next message, unopened */
        n = capture(&copy, WEFT_CTL_VIEWS, text, wire, sizeof(wire));
        wire[at] ^= 0x01;
        ck_assert_int_eq(send(p.consumer_fd, wire, n, 0), (ssize_t)n);
        expect_refused(p.server_fd, &p.server, "a payload or tag with one bit flipped");
    }
    n = capture(&p.consumer, WEFT_CTL_VIEWS, text, wire, sizeof(wire));
    wire[4] = WEFT_CTL_ACK; /* the header's type */
    ck_assert_int_eq(send(p.consumer_fd, wire, n, 0), (ssize_t)n);
    expect_refused(p.server_fd, &p.server, "a message whose type was changed");
    pair_close(&p);
}
END_TEST

START_TEST(nothing_secret_is_on_the_wire)
{
    static const char text[] = "rkey:0123456789abcdef address:fedcba9876543210";
    pair_t            p;
    uint8_t           wire[256];
    size_t            n;

    pair_open_with(&p, NULL);
    n = capture(&p.consumer, WEFT_CTL_VIEWS, text, wire, sizeof(wire));
    ck_assert_ptr_null(memmem(wire, n, TOKEN, strlen(TOKEN)));
    ck_assert_ptr_null(memmem(wire, n, p.consumer.send_key, 8));
    for (size_t i = 0; i + 8 <= sizeof(text) - 1; i++) {
        ck_assert_msg(memmem(wire, n, text + i, 8) == NULL, "plain bytes at %zu are on the wire", i);
    }
    pair_close(&p);
}
END_TEST

START_TEST(a_reflected_clear_or_foreign_message_does_not_open)
{
    pair_t              p, other;
    uint8_t             nonce[WEFT_AUTH_NONCE_BYTES];
    weft_auth_session_t off = {0};

    pair_open_with(&p, NULL);
    /* Reflected: the server's own message sent back to it. */
    {
        weft_auth_session_t copy = p.server;
        uint8_t             wire[128];
        const size_t        n = capture(&copy, WEFT_CTL_VERSION, "v7", wire, sizeof(wire));

        ck_assert_int_eq(send(p.consumer_fd, wire, n, 0), (ssize_t)n);
        expect_refused(p.server_fd, &p.server, "the server's own message");
    }
    /* In clear. */
    send_text(p.consumer_fd, &off, WEFT_CTL_ACK, "clear ack, as before the handshake");
    expect_refused(p.server_fd, &p.server, "a clear message");
    /* From another session: sealed with a key the server's side did not
     * derive (the handshakes' nonces differed). */
    weft_auth_nonce(nonce);
    pair_open_with(&other, nonce);
    send_text(other.consumer_fd, &other.consumer, WEFT_CTL_ACK, "ack");
    expect_refused(other.server_fd, &other.server, "a message of another session");
    /* A payload shorter than a tag. */
    ck_assert_int_eq(weft_ctl_send(p.consumer_fd, WEFT_CTL_ACK, "short", 5, deadline()), WEFT_OK);
    expect_refused(p.server_fd, &p.server, "a payload shorter than its tag");
    /* The real next message still opens. */
    send_text(p.consumer_fd, &p.consumer, WEFT_CTL_ACK, "real");
    expect_text(p.server_fd, &p.server, WEFT_CTL_ACK, "real");
    pair_close(&other);
    pair_close(&p);
}
END_TEST

START_TEST(the_token_and_names_make_the_keys)
{
    uint8_t             nonce_c[WEFT_AUTH_NONCE_BYTES] = {1}, nonce_s[WEFT_AUTH_NONCE_BYTES] = {2};
    weft_auth_session_t a, b, c, d;

    ck_assert_int_eq(weft_auth_init(), WEFT_OK);
    weft_auth_session_start(&a, WEFT_AUTH_SERVER, TOKEN, PROTOCOL, nonce_c, nonce_s, "c");
    weft_auth_session_start(&b, WEFT_AUTH_CONSUMER, TOKEN, PROTOCOL, nonce_c, nonce_s, "c");
    weft_auth_session_start(&c, WEFT_AUTH_SERVER, "another token", PROTOCOL, nonce_c, nonce_s, "c");
    weft_auth_session_start(&d, WEFT_AUTH_SERVER, TOKEN, PROTOCOL, nonce_c, nonce_s, "d");
    ck_assert_mem_eq(a.send_key, b.receive_key, WEFT_AUTH_KEY_BYTES);
    ck_assert_mem_eq(a.receive_key, b.send_key, WEFT_AUTH_KEY_BYTES);
    ck_assert(memcmp(a.send_key, a.receive_key, WEFT_AUTH_KEY_BYTES) != 0);
    ck_assert(memcmp(a.send_key, c.send_key, WEFT_AUTH_KEY_BYTES) != 0);
    ck_assert(memcmp(a.send_key, d.send_key, WEFT_AUTH_KEY_BYTES) != 0);
    weft_auth_session_end(&a);
    ck_assert_int_eq(a.on, 0);
}
END_TEST

static Suite *remote_auth_suite(void)
{
    Suite *s = suite_create("remote_auth");
    TCase *tc = tcase_create("session");

    tcase_add_test(tc, messages_open_in_order_both_ways);
    tcase_add_test(tc, a_replayed_message_does_not_open);
    tcase_add_test(tc, a_reordered_message_does_not_open);
    tcase_add_test(tc, an_altered_or_retyped_message_does_not_open);
    tcase_add_test(tc, nothing_secret_is_on_the_wire);
    tcase_add_test(tc, a_reflected_clear_or_foreign_message_does_not_open);
    tcase_add_test(tc, the_token_and_names_make_the_keys);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(remote_auth_suite)
