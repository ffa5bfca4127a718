/*
 * Mutual authentication of a consumer and a server by their shared token,
 * without the token crossing the wire (libsodium's HMAC-SHA-256):
 *
 *   consumer → server  HELLO      protocol, nonce_c, name
 *   server → consumer  CHALLENGE  nonce_s, HMAC(token, "weft server" ‖ protocol ‖ nonce_c ‖ nonce_s ‖ name)
 *   consumer → server  PROOF      HMAC(token, "weft consumer" ‖ protocol ‖ nonce_s ‖ nonce_c ‖ name)
 *
 * Each side proves it knows the token over the other side's fresh nonce,
 * so neither a captured handshake (replayed: the server's nonce differs)
 * nor a server that does not know the token (the consumer checks the
 * CHALLENGE before it proves anything) gets in. The messages after the
 * handshake are not authenticated yet. Internal.
 */
#ifndef WEFT_TRANSPORT_REMOTE_AUTH_H
#define WEFT_TRANSPORT_REMOTE_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <weft/weft.h>

#define WEFT_AUTH_NONCE_BYTES 32u
#define WEFT_AUTH_MAC_BYTES   32u /* HMAC-SHA-256 */

typedef enum weft_auth_role {
    WEFT_AUTH_SERVER   = 1, /* the CHALLENGE's MAC */
    WEFT_AUTH_CONSUMER = 2  /* the PROOF's */
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

#endif
