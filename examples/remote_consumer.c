/*
 * A rollout engine on another node (example_engine.h: fused, padded w13
 * and its scales): it connects to the producer's UCX server, which puts
 * each version straight into the engine's views and tells it once every
 * byte landed; the engine records nothing itself (the server does, on
 * its acknowledgement). Receives versions until VERSIONS, checks every
 * byte, and leaves. The token comes from EXAMPLE_TOKEN, as the
 * producer's does.
 *
 *   remote_consumer SERVER ENGINE_NAME VERSIONS     (SERVER: "host:port")
 *
 * Exits 77 when libweft was built without UCX.
 */
#include <stdlib.h>
#include <weft/transport.h>

#include "example_engine.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: remote_consumer SERVER ENGINE_NAME VERSIONS\n");
        return 2;
    }
    const uint64_t       last = strtoull(argv[3], NULL, 10);
    weft_backend_info_t  ucx;
    weft_recv_view_t     views[EXPERTS * 4];
    char                 names[EXPERTS * 4][96];
    weft_remote_params_t params = {.transport = WEFT_TRANSPORT_UCX, .server = argv[1],
                                   .token = getenv("EXAMPLE_TOKEN"), .name = argv[2]};
    weft_remote_h        remote;
    uint64_t             version = 0;
    int                  rc = 0;

    if (weft_backend_query(WEFT_BACKEND_UCX, &ucx) != WEFT_OK || !ucx.compiled) {
        fprintf(stderr, "%s: libweft was built without UCX\n", argv[2]);
        return 77;
    }
    if (params.token == NULL) {
        fprintf(stderr, "%s: set EXAMPLE_TOKEN to the producer's secret\n", argv[2]);
        return 1;
    }
    make_views(views, names);
    /* Sends the views; the server checks them against its registry and
     * registers this engine as a consumer. */
    CHECK(weft_remote_connect(&params, views, EXPERTS * 4, &remote));
    while (version < last && rc == 0) {
        /* The server puts the newest version into the views, then says so;
         * the views change only during this call. */
        const weft_status_t received = weft_remote_receive(remote, version, 30000000, &version);
        rc = check_received(argv[2], received, version);
    }
    /* Returns once the server wrote its last byte into the views. */
    if (weft_remote_close(remote) != WEFT_OK && rc == 0) {
        rc = 1;
    }
    return rc;
}
