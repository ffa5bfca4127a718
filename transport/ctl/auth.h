/*
 * Mutual authentication of a consumer and a server by their shared token,
 * without the token crossing the wire, and the session that seals every
 * message after it (libsodium):
 *
 *   consumer → server  HELLO      protocol, nonce_c, name
 *   server → consumer  CHALLENGE  nonce_s, HMAC(token, "weft server" ‖ protocol ‖ nonce_c ‖ nonce_s ‖ name)
 *   consumer → server  PROOF      HMAC(token, "weft consumer" ‖ protocol ‖ nonce_s ‖ nonce_c ‖ name)
 *   then, both ways, sealed messages, beginning with the server's WELCOME
 *
 * Each side proves it knows the token over the other side's fresh nonce,
 * so neither a captured handshake (replayed: the server's nonce differs)
 * nor a server that does not know the token (the consumer checks the
 * CHALLENGE before it proves anything) gets in.
 *
 * Both sides then derive one key per direction from the token and the
 * whole handshake (HMAC-SHA-256 with the labels "weft key to consumer" and
 * "weft key to server"), and every later message is sealed with
 * ChaCha20-Poly1305 (IETF): encrypted, and authenticated together with
 * its type, under a nonce that is its sequence number in its direction.
 * A message that was forged, altered, replayed (within the session or
 * from another: the keys differ), reordered, dropped from the middle or
 * reflected back to its sender does not open. The addresses and memory
 * keys of the transports therefore reach UCX only from a peer that holds
 * the token, in the order it sent them, and nobody else sees them.
 * Internal.
 */
#ifndef WEFT_TRANSPORT_CTL_AUTH_H
#define WEFT_TRANSPORT_CTL_AUTH_H

#include "transport/ctl/bootstrap.h"

#include <stddef.h>
#include <stdint.h>
#include <weft/weft.h>

#define WEFT_AUTH_NONCE_BYTES 32u
#define WEFT_AUTH_MAC_BYTES   32u /* HMAC-SHA-256 */
#define WEFT_AUTH_KEY_BYTES   32u /* ChaCha20-Poly1305 */
#define WEFT_AUTH_SEAL_BYTES  16u /* what sealing adds to a payload: the Poly1305 tag */

typedef enum weft_auth_role {
    WEFT_AUTH_SERVER   = 1, /* the CHALLENGE's MAC; the server's side of a session */
    WEFT_AUTH_CONSUMER = 2  /* the PROOF's; the consumer's side */
} weft_auth_role_t;

/* Starts libsodium (once; thread-safe). WEFT_ERR_IO if it cannot. */
weft_status_t weft_auth_init(void);

/* A fresh random nonce. */
void weft_auth_nonce(uint8_t nonce[WEFT_AUTH_NONCE_BYTES]);

/*
 * The MAC that `role` sends: keyed by the token, over the role's label,
 * the protocol, the nonces (the peer's first: the one the MAC answers) and
 * the consumer's name.
 */
void weft_auth_mac(uint8_t mac[WEFT_AUTH_MAC_BYTES], weft_auth_role_t role, const char *token, uint32_t protocol,
                   const uint8_t consumer_nonce[WEFT_AUTH_NONCE_BYTES],
                   const uint8_t server_nonce[WEFT_AUTH_NONCE_BYTES], const char *name);

/* 1 when the MAC that arrived is the one expected, in constant time. */
int weft_auth_mac_ok(const uint8_t expected[WEFT_AUTH_MAC_BYTES], const uint8_t *got, uint32_t got_length);

/*
 * One side of a connection's session. Zeroed, it is off: messages go and
 * come as they are (the handshake's). Owned by one thread at a time, like
 * the connection it belongs to.
 */
typedef struct weft_auth_session {
    uint8_t  send_key[WEFT_AUTH_KEY_BYTES], receive_key[WEFT_AUTH_KEY_BYTES];
    uint64_t sent, received; /* messages sealed and opened so far: the next nonces */
    int      on;
} weft_auth_session_t;

/*
 * Turns the session on for `self`'s side, with the keys derived from the
 * token and the handshake's values (the same on both sides). Call it once
 * the peer's proof checked out: the server after the PROOF, the consumer
 * after the CHALLENGE and once its PROOF is sent.
 */
void weft_auth_session_start(weft_auth_session_t *s, weft_auth_role_t self, const char *token, uint32_t protocol,
                             const uint8_t consumer_nonce[WEFT_AUTH_NONCE_BYTES],
                             const uint8_t server_nonce[WEFT_AUTH_NONCE_BYTES], const char *name);

/* Wipes the keys; the session is off. */
void weft_auth_session_end(weft_auth_session_t *s);

/*
 * Sends one message on fd: sealed when the session is on (the payload
 * grows by WEFT_AUTH_SEAL_BYTES on the wire), as it is otherwise.
 * weft_ctl_send's errors, and WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_auth_send(int fd, weft_auth_session_t *s, uint32_t type, const void *payload, uint32_t length,
                             uint64_t deadline_ns);

/*
 * Opens a message that arrived, in place (msg->payload replaced by the
 * plain payload, NUL-terminated one byte past its length, as received
 * ones are): WEFT_OK, or WEFT_ERR_AUTH (the payload freed) when it is not
 * the next message the peer sealed: forged, altered, replayed,
 * reordered, or sent in clear. Nothing to do when the session is off.
 */
weft_status_t weft_auth_open(weft_auth_session_t *s, weft_ctl_msg_t *msg);

#endif
