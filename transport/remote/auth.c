/* The handshake's nonces and MACs (auth.h), on libsodium. */
#include "config.h"

#include "auth.h"

#include "common/log.h"

#include <sodium.h>
#include <string.h>

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

void weft_auth_mac(uint8_t mac[WEFT_AUTH_MAC_BYTES], weft_auth_role_t role, const char *token, uint32_t protocol,
                   const uint8_t consumer_nonce[WEFT_AUTH_NONCE_BYTES],
                   const uint8_t server_nonce[WEFT_AUTH_NONCE_BYTES], const char *name)
{
    /* The label is part of the MAC, so that one role's MAC is never the
     * other's; the nonce answered comes first. */
    static const char server_label[] = "weft server", consumer_label[] = "weft consumer";
    crypto_auth_hmacsha256_state st;
    const uint8_t                le[4] = {(uint8_t)protocol, (uint8_t)(protocol >> 8), (uint8_t)(protocol >> 16),
                                          (uint8_t)(protocol >> 24)};
    const int                    server = role == WEFT_AUTH_SERVER;

    crypto_auth_hmacsha256_init(&st, (const unsigned char *)token, strlen(token));
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)(server ? server_label : consumer_label),
                                  server ? sizeof(server_label) : sizeof(consumer_label));
    crypto_auth_hmacsha256_update(&st, le, sizeof(le));
    crypto_auth_hmacsha256_update(&st, server ? consumer_nonce : server_nonce, WEFT_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, server ? server_nonce : consumer_nonce, WEFT_AUTH_NONCE_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)name, strlen(name) + 1);
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
}

int weft_auth_mac_ok(const uint8_t expected[WEFT_AUTH_MAC_BYTES], const uint8_t *got, uint32_t got_length)
{
    return got != NULL && got_length == WEFT_AUTH_MAC_BYTES && sodium_memcmp(expected, got, WEFT_AUTH_MAC_BYTES) == 0;
}
