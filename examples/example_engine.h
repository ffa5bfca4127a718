/*
 * The rollout engine the consumer examples share: it keeps each layer's
 * gate and up projections fused, w13 [EXPERTS, 2·INTER, HIDDEN] in FP8
 * with rows padded to ROW_BYTES, and their block scales fused the same
 * way; one receive view per registry tensor points at its slice (strided:
 * the padding is skipped). wrong_bytes() checks a received version against
 * the FP8 of the master the producer wrote.
 */
#ifndef WEFT_EXAMPLE_ENGINE_H
#define WEFT_EXAMPLE_ENGINE_H

#include <stdint.h>
#include <string.h>
#include <weft/quant.h>
#include <weft/transport.h>

#include "example_model.h"

#define ROW_BYTES (HIDDEN + 64) /* the engine's padded rows */
#define SCALE_ROWS (INTER / BLOCK)
#define SCALE_COLS (HIDDEN / BLOCK)

/* The engine's fused tensors, written only by libweft (a plan's copy, or
 * a server's puts) while the engine waits for a version. */
static uint8_t w13[EXPERTS][2 * INTER][ROW_BYTES];
static float   w13_scale[EXPERTS][2 * SCALE_ROWS][SCALE_COLS];

/* One receive view per registry tensor, at its slice of w13 or
 * w13_scale; names[] holds the views' names. */
static inline void make_views(weft_recv_view_t *views, char names[][96])
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
static inline uint64_t wrong_bytes(uint64_t v)
{
    static float   master[INTER * HIDDEN], scale[SCALE_ROWS * SCALE_COLS];
    static uint8_t w[INTER * HIDDEN];
    const weft_quant_params_t q = {.field_mask = WEFT_QUANT_FIELD_WRITE_WT, .write_wt = 0};
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

/* After a receive call: says how it went and checks the version in the
 * views; 0 when it came and every byte is right. */
static inline int check_received(const char *engine, weft_status_t received, uint64_t version)
{
    if (received != WEFT_OK) {
        fprintf(stderr, "%s: no version: %s\n", engine, weft_status_string(received));
        return 1;
    }
    const uint64_t wrong = wrong_bytes(version);
    printf("%s: version %llu, %llu wrong bytes\n", engine, (unsigned long long)version, (unsigned long long)wrong);
    return wrong == 0 ? 0 : 1;
}

#endif
