/*
 * Helpers the transport suites share (test_transport_ucx, _ucx_cuda,
 * _nccl, _cuda_ipc_push, test_ucx_wire): a server process's wait for its
 * consumers and its stop. A failure ends the child with CHILD_FAILED,
 * naming its line here (child.h). What versions carry is
 * perf/lib/payload.h's.
 */
#ifndef WEFT_TESTS_LIB_TRANSPORT_FIXTURE_H
#define WEFT_TESTS_LIB_TRANSPORT_FIXTURE_H

#include "child.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <weft/weft.h>

/* Waits up to `seconds` for `consumers` ready consumers. */
static inline void fixture_wait_ready(weft_server_h server, uint32_t consumers, int seconds)
{
    weft_server_stats_t st = {0};

    for (int i = 0; i < seconds * 1000; i++) {
        CHILD_CHECK(weft_server_get_stats(server, &st) == WEFT_OK);
        if (st.consumers >= consumers) {
            return;
        }
        usleep(1000);
    }
    CHILD_FAIL("server: %u of %u consumers ready after %d s", st.consumers, consumers, seconds);
}

/* Destroys the server, closes and removes its registry. */
static inline void fixture_server_stop(weft_server_h server, weft_registry_h reg, const char *name)
{
    CHILD_CHECK(weft_server_destroy(server) == WEFT_OK);
    CHILD_CHECK(weft_registry_close(reg) == WEFT_OK);
    weft_registry_unlink(name);
}

#endif
