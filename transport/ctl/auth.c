/* The handshake's nonces and MACs and the sealed session (auth.h), on libsodium. */
#include "config.h"

#include "transport/ctl/auth.h"

#include "common/log.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(WEFT_AUTH_KEY_BYTES == crypto_aead_chacha20poly1305_ietf_KEYBYTES, "key size");
_Static_assert(WEFT_AUTH_SEAL_BYTES == crypto_aead_chacha20poly1305_ietf_ABYTES, "tag size");
_Static_assert(WEFT_AUTH_MAC_BYTES == crypto_auth_hmacsha256_BYTES, "MAC size");
_Static_assert(WEFT_AUTH_MAC_BYTES == WEFT_AUTH_KEY_BYTES, "a key is a MAC");

weft_status_t weft_auth_init(void)
{
    /* 0 the first time, 1 later: both fine; -1 only when it cannot start. */
    if (sodium_init() < 0) {
        weft_log_error("remote: libsodium does not start (no entropy source?)");
        return WEFT_ERR_IO;
    }
    return WEFT_OK;
}

void weft_auth_nonce(uint8_t nonce[WEFT_AUTH_NONCE_BYTES])
{
    randombytes_buf(nonce, WEFT_AUTH_NONCE_BYTES);
}

/* HMAC(token, label ‖ protocol ‖ first ‖ second ‖ name); the label's NUL
 * is in it, so that no label is the prefix of another's input. */
static void handshake_mac(uint8_t mac[WEFT_AUTH_MAC_BYTES], const char *label, const char *token, uint32_t protocol,
                          const uint8_t *first, const uint8_t *second, const char *name)
{
    crypto_auth_hmacsha256_state st;
    const uint8_t                le[4] = {(uint8_t)protocol, (uint8_t)(protocol >> 8), (uint8_t)(protocol >> 16),
                                          (uint8_t)(protocol >> 24)};

    crypto_auth_hmacsha256_init(&st, (const unsigned char *)token, strlen(token));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label) + 1);
    crypto_auth_hmacsha256_update(&st, le, sizeof(le));
    crypto_auth_hmacsha256_update(&st, first, WEFT_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, second, WEFT_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)name, strlen(name) + 1);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
}

void weft_auth_mac(uint8_t mac[WEFT_AUTH_MAC_BYTES], weft_auth_role_t role, const char *token, uint32_t protocol,
                   const uint8_t consumer_nonce[WEFT_AUTH_NONCE_BYTES],
                   const uint8_t server_nonce[WEFT_AUTH_NONCE_BYTES], const char *name)
{
    /* The label is part of the MAC, so that one role's MAC is never the
     * other's; the nonce answered comes first. */
    if (role == WEFT_AUTH_SERVER) {
        handshake_mac(mac, "weft server", token, protocol, consumer_nonce, server_nonce, name);
    } else {
        handshake_mac(mac, "weft consumer", token, protocol, server_nonce, consumer_nonce, name);
    }
}

int weft_auth_mac_ok(const uint8_t expected[WEFT_AUTH_MAC_BYTES], const uint8_t *got, uint32_t got_length)
{
    return got != NULL && got_length == WEFT_AUTH_MAC_BYTES && sodium_memcmp(expected, got, WEFT_AUTH_MAC_BYTES) == 0;
}

void weft_auth_session_start(weft_auth_session_t *s, weft_auth_role_t self, const char *token, uint32_t protocol,
                             const uint8_t consumer_nonce[WEFT_AUTH_NONCE_BYTES],
                             const uint8_t server_nonce[WEFT_AUTH_NONCE_BYTES], const char *name)
{
    uint8_t to_consumer[WEFT_AUTH_KEY_BYTES], to_server[WEFT_AUTH_KEY_BYTES];

    /* Keys of their own labels: neither is a MAC that crossed the wire. */
    handshake_mac(to_consumer, "weft key to consumer", token, protocol, consumer_nonce, server_nonce, name);
    handshake_mac(to_server, "weft key to server", token, protocol, consumer_nonce, server_nonce, name);
    memcpy(s->send_key, self == WEFT_AUTH_SERVER ? to_consumer : to_server, WEFT_AUTH_KEY_BYTES);
    memcpy(s->receive_key, self == WEFT_AUTH_SERVER ? to_server : to_consumer, WEFT_AUTH_KEY_BYTES);
    sodium_memzero(to_consumer, sizeof(to_consumer));
    sodium_memzero(to_server, sizeof(to_server));
    s->sent = 0;
    s->received = 0;
    s->on = 1;
}

void weft_auth_session_end(weft_auth_session_t *s)
{
    sodium_memzero(s, sizeof(*s));
}

/* The AEAD nonce of message n of a direction (each direction has its own
 * key, so the same n in the other direction is another nonce), and the
 * associated data: the message's type. */
static void seal_nonce(uint8_t nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES], uint64_t n)
{
    memset(nonce, 0, crypto_aead_chacha20poly1305_ietf_NPUBBYTES);
    for (int i = 0; i < 8; i++) {
        nonce[i] = (uint8_t)(n >> (8 * i));
    }
}

static void seal_ad(uint8_t ad[4], uint32_t type)
{
    for (int i = 0; i < 4; i++) {
        ad[i] = (uint8_t)(type >> (8 * i));
    }
}

weft_status_t weft_auth_send(int fd, weft_auth_session_t *s, uint32_t type, const void *payload, uint32_t length,
                             uint64_t deadline_ns)
{
    uint8_t            nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES], ad[4];
    unsigned long long sealed_length = 0;
    uint8_t           *sealed;
    weft_status_t      status;

    if (s == NULL || !s->on) {
        return weft_ctl_send(fd, type, payload, length, deadline_ns);
    }
    if (length > WEFT_CTL_MAX_PAYLOAD - WEFT_AUTH_SEAL_BYTES) {
        return WEFT_ERR_INVALID_PARAM;
    }
    sealed = malloc((size_t)length + WEFT_AUTH_SEAL_BYTES);
    if (sealed == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    seal_nonce(nonce, s->sent++);
    seal_ad(ad, type);
    crypto_aead_chacha20poly1305_ietf_encrypt(sealed, &sealed_length, length > 0 ? payload : (const void *)"", length,
                                              ad, sizeof(ad), NULL, nonce, s->send_key);
    status = weft_ctl_send(fd, type, sealed, (uint32_t)sealed_length, deadline_ns);
    free(sealed);
    return status;
}

weft_status_t weft_auth_open(weft_auth_session_t *s, weft_ctl_msg_t *msg)
{
    uint8_t            nonce[crypto_aead_chacha20poly1305_ietf_NPUBBYTES], ad[4];
    unsigned long long plain_length = 0;
    uint8_t           *plain;

    if (s == NULL || !s->on) {
        return WEFT_OK;
    }
    plain = msg->length >= WEFT_AUTH_SEAL_BYTES ? malloc((size_t)msg->length - WEFT_AUTH_SEAL_BYTES + 1) : NULL;
    seal_nonce(nonce, s->received);
    seal_ad(ad, msg->type);
    if (plain == NULL || crypto_aead_chacha20poly1305_ietf_decrypt(plain, &plain_length, NULL, msg->payload,
                                                                   msg->length, ad, sizeof(ad), nonce,
                                                                   s->receive_key) != 0) {
        const int no_memory = plain == NULL && msg->length >= WEFT_AUTH_SEAL_BYTES;

        free(plain);
        free(msg->payload);
        msg->payload = NULL;
        msg->length = 0;
        return no_memory ? WEFT_ERR_NO_MEMORY : WEFT_ERR_AUTH;
    }
    s->received++;
    plain[plain_length] = 0;
    free(msg->payload);
    msg->payload = plain;
    msg->length = (uint32_t)plain_length;
    return WEFT_OK;
}
