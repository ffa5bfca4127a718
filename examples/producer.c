/*
 * A trainer-side producer: creates registry NAME with verified versions
 * (a checksum of every tensor in each version), waits for CONSUMERS
 * consumers to register, then publishes VERSIONS versions, each only once
 * the previous one reached every consumer. Removes the registry at the end.
 * With LISTEN ("host:port", port 0: any) it also serves the registry over
 * UCX to engines on other nodes (remote_consumer.c), with the token in the
 * environment's EXAMPLE_TOKEN (a secret does not belong on a command
 * line, where `ps` shows it); consumers of both kinds count.
 *
 *   producer NAME CONSUMERS VERSIONS [LISTEN]
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdlib.h>
#include <time.h>
#include <weft/quant.h>
#include <weft/registry.h>
#include <weft/transport.h>

#include "example_model.h"

static int declare(weft_registry_h reg)
{
    char name[96];
    for (int e = 0; e < EXPERTS; e++) {
        for (int proj = 0; proj < 2; proj++) {
            weft_tensor_desc_t w = {.name = tensor_name(name, sizeof(name), e, proj, 0), .layer = 0, .expert = e,
                                    .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                    .shape = {INTER, HIDDEN}};
            CHECK(weft_registry_declare(reg, &w, NULL));
            weft_tensor_desc_t s = {.name = tensor_name(name, sizeof(name), e, proj, 1), .layer = 0, .expert = e,
                                    .role = WEFT_ROLE_SCALE, .dtype = WEFT_DTYPE_FP32, .ndim = 2,
                                    .shape = {INTER / BLOCK, HIDDEN / BLOCK}};
            CHECK(weft_registry_declare(reg, &s, NULL));
        }
    }
    return 0;
}

/* Writes version v: each matrix's master quantized straight into the slot. */
static int write_version(weft_registry_h reg, uint64_t v, float *master)
{
    const weft_quant_params_t q = {.field_mask = WEFT_QUANT_FIELD_WRITE_WT, .write_wt = 0};
    CHECK(weft_registry_write_begin(reg, 10000000, NULL));
    for (int e = 0; e < EXPERTS; e++) {
        for (int proj = 0; proj < 2; proj++) {
            const uint32_t index = (uint32_t)(e * 2 + proj) * 2; /* declaration order: W, scale */
            void          *w, *scale;
            for (uint64_t i = 0; i < (uint64_t)INTER * HIDDEN; i++) {
                master[i] = master_at(v, e, proj, i);
            }
            CHECK(weft_registry_write_tensor(reg, index, &w));
            CHECK(weft_registry_write_tensor(reg, index + 1, &scale));
            const weft_quant_matrix_t m = {.x = master, .w = w, .scale_inv = scale};
            CHECK(weft_quant_host(&q, WEFT_DTYPE_FP32, INTER, HIDDEN, &m, 1));
        }
    }
    CHECK(weft_registry_publish(reg, v, NULL));
    return 0;
}

/* Serves reg over UCX on `listen`; prints the port engines connect to. */
static int serve(weft_registry_h reg, const char *listen, weft_server_h *server)
{
    const char                *token = getenv("EXAMPLE_TOKEN");
    const weft_server_params_t params = {.transport = WEFT_TRANSPORT_UCX, .listen = listen, .token = token};
    uint16_t                   port;

    if (token == NULL) {
        fprintf(stderr, "producer: set EXAMPLE_TOKEN to the secret the engines share\n");
        return 1;
    }
    CHECK(weft_server_create(reg, &params, server));
    CHECK(weft_server_port(*server, &port));
    printf("producer: serving on port %u\n", (unsigned)port);
    fflush(stdout); /* whoever starts the engines reads it now */
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: producer NAME CONSUMERS VERSIONS [LISTEN]\n");
        return 2;
    }
    const char              *name = argv[1];
    const uint32_t           consumers = (uint32_t)atoi(argv[2]);
    const uint64_t           versions = strtoull(argv[3], NULL, 10);
    weft_registry_params_t   params = {.field_mask = WEFT_REGISTRY_FIELD_CHECKSUMS, .checksums = 1};
    weft_registry_h          reg;
    weft_server_h            server = NULL;
    weft_registry_stats_t    stats = {0};
    float                   *master = malloc(sizeof(float) * INTER * HIDDEN);
    const struct timespec    tick = {0, 10 * 1000 * 1000};
    int                      rc = 0;

    if (master == NULL) {
        return 1;
    }
    CHECK(weft_registry_create(name, &params, &reg));
    if (declare(reg) != 0) {
        rc = 1;
    }
    if (rc == 0 && weft_registry_seal(reg) != WEFT_OK) {
        rc = 1;
    }
    if (rc == 0 && argc == 5) {
        rc = serve(reg, argv[4], &server);
    }
    /* Consumers register once the registry is sealed; give them 30 s. */
    for (int waited = 0; rc == 0 && stats.consumers < consumers && waited < 3000; waited++) {
        rc = weft_registry_get_stats(reg, &stats) == WEFT_OK ? 0 : 1;
        nanosleep(&tick, NULL);
    }
    if (rc == 0 && stats.consumers < consumers) {
        fprintf(stderr, "producer: %u of %u consumers registered in 30 s\n", stats.consumers, consumers);
        rc = 1;
    }
    for (uint64_t v = 1; v <= versions && rc == 0; v++) {
        uint32_t lagging = 0;
        rc = write_version(reg, v, master);
        if (rc == 0 && weft_registry_wait_consumers(reg, v, 30000000, &lagging) != WEFT_OK) {
            fprintf(stderr, "producer: %u consumers did not receive version %llu\n", lagging, (unsigned long long)v);
            rc = 1;
        }
        if (rc == 0) {
            printf("producer: version %llu reached every consumer\n", (unsigned long long)v);
        }
    }
    weft_server_destroy(server); /* NULL: none */
    weft_registry_close(reg);
    weft_registry_unlink(name);
    free(master);
    return rc;
}
