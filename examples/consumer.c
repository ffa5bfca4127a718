/*
 * A rollout-engine-shaped consumer: the engine keeps each layer's gate and
 * up projections fused, w13 [EXPERTS, 2·INTER, HIDDEN] in FP8 with rows
 * padded to ROW_BYTES, and their block scales fused the same way; one
 * receive view per registry tensor points at its slice (strided: the
 * padding is skipped). Receives versions until VERSIONS, checks every byte
 * against the FP8 of the master it expects, and leaves.
 *
 *   consumer NAME ENGINE_NAME VERSIONS
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <weft/quant.h>
#include <weft/transport.h>

#include "example_model.h"

#define ROW_BYTES (HIDDEN + 64) /* the engine's padded rows */
#define SCALE_ROWS (INTER / BLOCK)
#define SCALE_COLS (HIDDEN / BLOCK)

static uint8_t w13[EXPERTS][2 * INTER][ROW_BYTES];
static float   w13_scale[EXPERTS][2 * SCALE_ROWS][SCALE_COLS];

static void make_views(weft_recv_view_t *views, char names[][96])
{
    int k = 0;
    for (int e = 0; e < EXPERTS; e++) {
        for (int proj = 0; proj < 2; proj++, k += 2) {
            views[k] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_STRIDES,
                                          .name = tensor_name(names[k], 96, e, proj, 0), .role = WEFT_ROLE_W,
                                          .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2, .shape = {INTER, HIDDEN},
                                          .strides = {ROW_BYTES, 1}, .data = &w13[e][proj * INTER][0]};
            views[k + 1] = (weft_recv_view_t){.name = tensor_name(names[k + 1], 96, e, proj, 1),
                                              .role = WEFT_ROLE_SCALE, .dtype = WEFT_DTYPE_FP32, .ndim = 2,
                                              .shape = {SCALE_ROWS, SCALE_COLS},
                                              .data = &w13_scale[e][proj * SCALE_ROWS][0]};
        }
    }
}

/* Bytes of the engine's tensors that differ from version v's FP8. */
static uint64_t wrong_bytes(uint64_t v)
{
    static float   master[INTER * HIDDEN], scale[SCALE_ROWS * SCALE_COLS];
    static uint8_t w[INTER * HIDDEN];
    const weft_quant_params_t q = {.field_mask = WEFT_QUANT_PARAM_WRITE_WT, .write_wt = 0};
    uint64_t       wrong = 0;

    for (int e = 0; e < EXPERTS; e++) {
        for (int proj = 0; proj < 2; proj++) {
            for (uint64_t i = 0; i < (uint64_t)INTER * HIDDEN; i++) {
                master[i] = master_at(v, e, proj, i);
            }
            const weft_quant_matrix_t m = {.x = master, .w = w, .scale_inv = scale};
            if (weft_quant_host(&q, WEFT_DTYPE_FP32, INTER, HIDDEN, &m, 1) != WEFT_OK) {
                return UINT64_MAX;
            }
            for (int r = 0; r < INTER; r++) {
                for (int c = 0; c < HIDDEN; c++) {
                    wrong += w13[e][proj * INTER + r][c] != w[r * HIDDEN + c];
                }
            }
            wrong += memcmp(&w13_scale[e][proj * SCALE_ROWS][0], scale, sizeof(scale)) != 0;
        }
    }
    return wrong;
}

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
        if (weft_plan_receive(plan, me, version, 30000000, &version) != WEFT_OK) {
            fprintf(stderr, "%s: no version after %llu\n", argv[2], (unsigned long long)version);
            rc = 1;
            break;
        }
        const uint64_t wrong = wrong_bytes(version);
        printf("%s: version %llu, %llu wrong bytes\n", argv[2], (unsigned long long)version,
               (unsigned long long)wrong);
        rc = wrong == 0 ? 0 : 1;
    }
    weft_plan_destroy(plan);
    weft_registry_consumer_unregister(reg, me);
    weft_registry_close(reg);
    return rc;
}
