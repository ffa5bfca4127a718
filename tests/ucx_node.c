/*
 * One node of the multi-host ucx test (tests/ucx_netns.sh runs it inside
 * network namespaces). Not a test by itself.
 *
 *   ucx_node serve PORTFILE TOKEN VERSIONS CONSUMERS TIMEOUT_MS [HOLDFILE]
 *     creates a host registry, serves it on 0.0.0.0 (the port goes to
 *     PORTFILE), waits for CONSUMERS consumers, then publishes VERSIONS
 *     versions back to back, each after every living consumer acked the
 *     one before (or was dropped); with HOLDFILE, the last version waits
 *     until that file exists. Prints "served V dropped D".
 *
 *   ucx_node probe: exits 0 when libweft has UCX, 77 when not.
 *
 *   ucx_node consume ADDR TOKEN NAME VERSIONS TIMEOUT_MS [CONNECT_MS]
 *     connects, receives until version VERSIONS, checks every byte of each
 *     (TIMEOUT_MS: each receive's timeout; CONNECT_MS, by default the
 *     same: the connect timeout, which also bounds the close's wait for
 *     the server). Prints "got V"
 *     for each version and "received V" at the end; on an error prints
 *     "error STATUS after MS ms at T, last V" (T: the wall clock in ms,
 *     for the script to measure from its own events). Then it closes and
 *     prints "closed STATUS after MS ms at T". Exits 0 when every version
 *     came and the close said ok, 3 after an error, 4 on wrong bytes, 5
 *     when only the close failed.
 *
 * Versions are 48 tensors of 1 MiB (48 MiB), so that a link taken down is
 * taken down in the middle of one.
 */
#include "config.h"

#include "perf/lib/payload.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

#define TENSORS 48
#define ROWS    1024
#define COLS    1024

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The wall clock, which the script's `date +%s%3N` reads too. */
static uint64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Closes and says how it went: the server's confirmation, or not. */
static weft_status_t close_remote(weft_remote_h remote)
{
    uint64_t      start = now_ms();
    weft_status_t status = weft_remote_close(remote);

    printf("closed %s after %" PRIu64 " ms at %" PRIu64 "\n",
           status == WEFT_OK ? "ok" : weft_status_string(status), now_ms() - start, wall_ms());
    fflush(stdout);
    return status;
}

static void tensor_name(char *buf, size_t size, uint32_t t)
{
    snprintf(buf, size, "model.layers.%u.mlp.experts.%u.gate_up_proj.weight", t / 16, t % 16);
}

static int serve(const char *portfile, const char *token, uint64_t versions, uint32_t consumers,
                 uint64_t timeout_ms, const char *holdfile)
{
    weft_server_params_t params = {.field_mask = WEFT_SERVER_FIELD_TIMEOUT,
                                   .transport  = WEFT_TRANSPORT_UCX,
                                   .listen     = "0.0.0.0:0",
                                   .token      = token,
                                   .timeout_us = timeout_ms * 1000};
    weft_registry_h      reg;
    weft_server_h        server;
    weft_server_stats_t  st;
    char                 name[64];
    uint16_t             port;
    FILE                *f;

    snprintf(name, sizeof(name), "ucx-node-%d", (int)getpid());
    weft_registry_unlink(name);
    if (weft_registry_create(name, NULL, &reg) != WEFT_OK) {
        return 2;
    }
    for (uint32_t t = 0; t < TENSORS; t++) {
        char               tname[WEFT_TENSOR_NAME_MAX];
        weft_tensor_desc_t d = {.name = tname, .layer = (int32_t)(t / 16), .expert = (int32_t)(t % 16),
                                .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                .shape = {ROWS, COLS}};

        tensor_name(tname, sizeof(tname), t);
        if (weft_registry_declare(reg, &d, NULL) != WEFT_OK) {
            return 2;
        }
    }
    if (weft_registry_seal(reg) != WEFT_OK || weft_server_create(reg, &params, &server) != WEFT_OK ||
        weft_server_port(server, &port) != WEFT_OK) {
        return 2;
    }
    f = fopen(portfile, "w");
    if (f == NULL || fprintf(f, "%u\n", port) < 0 || fclose(f) != 0) {
        return 2;
    }
    do {
        usleep(10000);
        weft_server_get_stats(server, &st);
    } while (st.consumers < consumers);

    for (uint64_t v = 1; v <= versions; v++) {
        /* The script makes the file once the version may go (a host
         * rejoined); 10 minutes only turn a hang into a failure. */
        weft_status_t status;

        for (int i = 0; v == versions && holdfile != NULL && access(holdfile, F_OK) != 0 && i < 60000; i++) {
            usleep(10000);
        }
        if (v == versions && holdfile != NULL) {
            weft_server_get_stats(server, &st);
            fprintf(stderr, "serve: version %" PRIu64 " released at %" PRIu64 ", %" PRIu64 " consumers\n", v,
                    wall_ms(), (uint64_t)st.consumers);
        }
        status = weft_registry_write_begin(reg, 60000000, NULL);
        if (status != WEFT_OK) {
            fprintf(stderr, "serve: write_begin for version %" PRIu64 ": %s\n", v, weft_status_string(status));
            return 2;
        }
        for (uint32_t t = 0; t < TENSORS; t++) {
            void *data;

            weft_registry_write_tensor(reg, t, &data);
            payload_fill(data, (uint64_t)ROWS * COLS, v, t);
        }
        status = weft_registry_publish(reg, v, NULL);
        if (status != WEFT_OK) {
            fprintf(stderr, "serve: publish of version %" PRIu64 ": %s\n", v, weft_status_string(status));
            return 2;
        }
        /* Dropped consumers leave the table: this returns for the rest. */
        if (weft_registry_wait_consumers(reg, v, 2 * timeout_ms * 1000, NULL) != WEFT_OK) {
            fprintf(stderr, "serve: consumers did not ack version %" PRIu64 "\n", v);
            return 2;
        }
    }
    weft_server_get_stats(server, &st);
    printf("served %" PRIu64 " dropped %" PRIu64 " sent %" PRIu64 "\n", versions, st.dropped,
           st.versions_sent);
    fflush(stdout);
    weft_server_destroy(server);
    weft_registry_close(reg);
    weft_registry_unlink(name);
    return 0;
}

static int consume(const char *addr, const char *token, const char *name, uint64_t versions,
                   uint64_t timeout_ms, uint64_t connect_ms)
{
    weft_remote_params_t params = {.field_mask = WEFT_REMOTE_FIELD_TIMEOUT,
                                   .transport  = WEFT_TRANSPORT_UCX,
                                   .server     = addr,
                                   .token      = token,
                                   .name       = name,
                                   .timeout_us = connect_ms * 1000};
    weft_recv_view_t     views[TENSORS];
    char                 names[TENSORS][WEFT_TENSOR_NAME_MAX];
    uint64_t            *buf = malloc((size_t)TENSORS * ROWS * COLS);
    weft_remote_h        remote;
    weft_status_t        status;
    uint64_t             v = 0, start;

    if (buf == NULL) {
        return 2;
    }
    for (uint32_t t = 0; t < TENSORS; t++) {
        tensor_name(names[t], sizeof(names[t]), t);
        views[t] = (weft_recv_view_t){.name = names[t], .role = WEFT_ROLE_W,
                                      .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                      .shape = {ROWS, COLS},
                                      .data = (uint8_t *)buf + (uint64_t)t * ROWS * COLS};
    }
    /* How long connecting took, so that a slow one shows where it went. */
    printf("connecting at %" PRIu64 "\n", wall_ms());
    fflush(stdout);
    start = now_ms();
    status = weft_remote_connect(&params, views, TENSORS, &remote);
    if (status != WEFT_OK) {
        printf("error %s connecting (%" PRIu64 " ms), last 0\n", weft_status_string(status), now_ms() - start);
        free(buf);
        return 3;
    }
    printf("connected in %" PRIu64 " ms\n", now_ms() - start);
    fflush(stdout);
    while (v < versions) {
        uint64_t got;

        start = now_ms();
        status = weft_remote_receive(remote, v, timeout_ms * 1000, &got);
        if (status != WEFT_OK) {
            printf("error %s after %" PRIu64 " ms at %" PRIu64 ", last %" PRIu64 "\n",
                   weft_status_string(status), now_ms() - start, wall_ms(), v);
            fflush(stdout);
            close_remote(remote);
            free(buf);
            return 3;
        }
        for (uint32_t t = 0; t < TENSORS; t++) {
            const uint64_t *data = buf + (uint64_t)t * ROWS * COLS / 8;

            if (payload_check(data, (uint64_t)ROWS * COLS, got, t) != (uint64_t)ROWS * COLS) {
                printf("wrong bytes in version %" PRIu64 " tensor %u\n", got, t);
                close_remote(remote);
                free(buf);
                return 4;
            }
        }
        v = got;
        printf("got %" PRIu64 "\n", v);
        fflush(stdout);
    }
    printf("received %" PRIu64 "\n", v);
    status = close_remote(remote);
    free(buf);
    return status == WEFT_OK ? 0 : 5;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "probe") == 0) {
        weft_backend_info_t info;
        return weft_backend_query(WEFT_BACKEND_UCX, &info) == WEFT_OK && info.compiled ? 0 : 77;
    }
    if ((argc == 7 || argc == 8) && strcmp(argv[1], "serve") == 0) {
        return serve(argv[2], argv[3], strtoull(argv[4], NULL, 10),
                     (uint32_t)strtoul(argv[5], NULL, 10), strtoull(argv[6], NULL, 10),
                     argc == 8 ? argv[7] : NULL);
    }
    if ((argc == 7 || argc == 8) && strcmp(argv[1], "consume") == 0) {
        uint64_t timeout_ms = strtoull(argv[6], NULL, 10);

        return consume(argv[2], argv[3], argv[4], strtoull(argv[5], NULL, 10), timeout_ms,
                       argc == 8 ? strtoull(argv[7], NULL, 10) : timeout_ms);
    }
    fprintf(stderr, "usage: ucx_node serve PORTFILE TOKEN VERSIONS CONSUMERS TIMEOUT_MS [HOLDFILE]\n"
                    "       ucx_node consume ADDR TOKEN NAME VERSIONS TIMEOUT_MS [CONNECT_MS]\n");
    return 2;
}
