/*
 * A rollout-engine-shaped consumer on the producer's node
 * (example_engine.h: fused, padded w13 and its scales): a plan copies
 * each version from the registry's shared memory into its views. Receives
 * versions until VERSIONS, checks every byte against the FP8 of the
 * master it expects, and leaves.
 *
 *   consumer NAME ENGINE_NAME VERSIONS
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdlib.h>
#include <time.h>
#include <weft/registry.h>
#include <weft/transport.h>

#include "example_engine.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: consumer NAME ENGINE_NAME VERSIONS\n");
        return 2;
    }
    const uint64_t        last = strtoull(argv[3], NULL, 10);
    const struct timespec tick = {0, 10 * 1000 * 1000};
    weft_registry_h       reg = NULL;
    weft_status_t         st = WEFT_ERR_NOT_FOUND;
    weft_recv_view_t      views[EXPERTS * 4];
    char                  names[EXPERTS * 4][96];
    weft_plan_h           plan;
    uint32_t              me;
    uint64_t              version = 0;
    int                   rc = 0;

    /* The producer may not have sealed its registry yet: retry for 30 s. */
    for (int tries = 0; tries < 3000 && st != WEFT_OK; tries++) {
        st = weft_registry_open(argv[1], WEFT_REGISTRY_OPEN_READ, &reg);
        if (st != WEFT_OK) {
            nanosleep(&tick, NULL);
        }
    }
    CHECK(st);
    make_views(views, names);
    CHECK(weft_plan_create(reg, WEFT_TRANSPORT_HOST, views, EXPERTS * 4, &plan));
    CHECK(weft_registry_consumer_register(reg, argv[2], &me));
    while (version < last && rc == 0) {
        /* Copies the newest version into the views, then records it. */
        const weft_status_t received = weft_plan_receive(plan, me, version, 30000000, &version);
        rc = check_received(argv[2], received, version);
    }
    weft_plan_destroy(plan);
    weft_registry_consumer_unregister(reg, me);
    weft_registry_close(reg);
    return rc;
}
