/*
 * Delta versions' pieces without a transport. A remote consumer's side
 * (remote/remote_delta.h) on host views: which views take deltas
 * (contiguous, rows of one stride, padded, dimensions of size 1 with any
 * stride; not others), the DELTA checked against the inbox and the
 * views, patches and whole tensors applied into strided views and
 * checked (on threads where there is enough), a WT's view patched by
 * its W's delta transposed and checked against WT's own checksum (a
 * wrong one, or matrices that do not tile the view, refused), a delta
 * for a base the
 * views do not hold refused, the VERSION's checksums vouched for without
 * a second reading (and a carried checksum that is not the version's
 * refused), and the checksum of rows equal to that of the same bytes end
 * to end. A server's delta cache (server/delta_cache.h) over a host
 * registry: the base leased, an encode deferred while puts read its
 * buffer, consumers told to wait only while it runs, and tensors padded
 * in the registry never sent as deltas.
 * (test_ucx_delta runs both end to end.)
 */
#include "config.h"

#include "common/env_table.h"
#include "kernels/checksum.h"
#include "lib/harness.h"
#include "transport/core/delta_mode.h"
#include "transport/remote/remote_delta.h"
#include "transport/server/delta_cache.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <weft/weft.h>

#define ROWS  64
#define COLS  300 /* not a multiple of 8 */
#define PITCH 320 /* the padded views' row stride */
#define BYTES ((uint64_t)ROWS * COLS)

static uint8_t fused[2][ROWS * PITCH];

/* Two padded FP8 views [ROWS, COLS] of fused[0] and fused[1]. */
static void padded_views(weft_recv_view_t views[2])
{
    for (int i = 0; i < 2; i++) {
        views[i] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_STRIDES, .name = i ? "b" : "a",
                                      .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                      .shape = {ROWS, COLS}, .strides = {PITCH, 1}, .data = fused[i]};
    }
}

/* Version v of tensor i's bytes, contiguous. */
static void version_bytes(uint8_t *out, int i, int v)
{
    for (uint64_t k = 0; k < BYTES; k++) {
        out[k] = (uint8_t)(k * 31 + (uint64_t)i * 7);
        if (v >= 2 && k % 97 == (uint64_t)v) { /* each version its own bytes */
            out[k] ^= (uint8_t)(v * 3 + 1);
        }
    }
}

/* The views hold version v (their padding 0xEE). */
static void hold(int v)
{
    uint8_t t[BYTES];

    memset(fused, 0xEE, sizeof(fused));
    for (int i = 0; i < 2; i++) {
        version_bytes(t, i, v);
        for (int r = 0; r < ROWS; r++) {
            memcpy(fused[i] + r * PITCH, t + r * COLS, COLS);
        }
    }
}

/* Every byte of the views, padding included, is version v's. */
static int views_hold(int v)
{
    uint8_t t[BYTES];

    for (int i = 0; i < 2; i++) {
        version_bytes(t, i, v);
        for (int r = 0; r < ROWS; r++) {
            if (memcmp(fused[i] + r * PITCH, t + r * COLS, COLS) != 0) {
                return 0;
            }
            for (int c = COLS; c < PITCH; c++) {
                if (fused[i][r * PITCH + c] != 0xEE) {
                    return 0;
                }
            }
        }
    }
    return 1;
}

/* A DELTA message of version `to` from `from`: view 0 as a patch, view
 * 1 whole; their bytes written into the inbox. */
static void delta_message(weft_remote_delta_t *d, int from, int to, weft_ctl_buf_t *buf, weft_ctl_msg_t *msg)
{
    uint8_t                 older[BYTES], newer[BYTES];
    weft_wire_delta_entry_t e[2];
    uint64_t                n = 0;

    version_bytes(older, 0, from);
    version_bytes(newer, 0, to);
    ck_assert_int_eq(weft_delta_encode_host(older, newer, BYTES, d->inbox, BYTES, &n), WEFT_OK);
    e[0] = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_PATCH, .offset = 0, .bytes = n};
    e[1] = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_WHOLE, .offset = 4096 * 2, .bytes = BYTES};
    version_bytes(d->inbox + e[1].offset, 1, to);
    memset(buf, 0, sizeof(*buf));
    weft_wire_put_delta(buf, (uint64_t)to, (uint64_t)from, e, 2);
    ck_assert(!buf->failed);
    *msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf->length, .payload = buf->data};
}

static void ready(weft_remote_delta_t *d)
{
    weft_recv_view_t views[2];

    padded_views(views);
    ck_assert_int_eq(weft_remote_delta_init(d, views, 2, -1, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_ptr_nonnull(d->inbox);
    ck_assert_uint_ge(d->inbox_bytes, UINT64_C(1) << 20); /* auto: at least 1M */
}

/* A consumer whose views hold version `held` and that believes they hold
 * `from`, given the DELTA of `to` from `from` (kept in buf). */
static void given_delta(weft_remote_delta_t *d, int held, int from, int to, weft_ctl_buf_t *buf)
{
    weft_ctl_msg_t msg;

    ready(d);
    hold(held);
    d->holds = (uint64_t)from;
    delta_message(d, from, to, buf, &msg);
    ck_assert_int_eq(weft_remote_delta_on_map(d, &msg), WEFT_OK);
}

START_TEST(which_views_take_deltas)
{
    weft_remote_delta_t d;
    weft_recv_view_t    views[2];
    static uint8_t      cube[4 * 8 * 16 * 2];

    ready(&d); /* padded rows */
    ck_assert_uint_eq(d.targets[0].row_bytes, COLS);
    ck_assert_uint_eq(d.targets[0].row_stride, PITCH);
    weft_remote_delta_fini(&d);

    padded_views(views); /* contiguous: one row */
    views[0].field_mask = 0;
    ck_assert_int_eq(weft_remote_delta_init(&d, views, 2, -1, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_uint_eq(d.targets[0].row_bytes, BYTES);
    weft_remote_delta_fini(&d);

    /* [4, 8, 16] with each expert's rows padded apart: not one stride. */
    views[0] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_STRIDES, .name = "c", .role = WEFT_ROLE_W,
                                  .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 3, .shape = {4, 8, 16},
                                  .strides = {8 * 16 * 2, 16, 1}, .data = cube};
    ck_assert_int_eq(weft_remote_delta_init(&d, views, 2, -1, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_ptr_null(d.inbox);
    /* The same with the experts a whole number of padded rows apart. */
    views[0].strides[0] = 8 * 32;
    views[0].strides[1] = 32;
    ck_assert_int_eq(weft_remote_delta_init(&d, views, 2, -1, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_ptr_nonnull(d.inbox);
    ck_assert_uint_eq(d.targets[0].row_stride, 32);
    weft_remote_delta_fini(&d);

    /* [1, COLS] with any stride for its one row (PyTorch's transposes). */
    views[0] = (weft_recv_view_t){.field_mask = WEFT_RECV_VIEW_FIELD_STRIDES, .name = "r", .role = WEFT_ROLE_W,
                                  .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2, .shape = {1, COLS}, .strides = {1, 1},
                                  .data = fused[0]};
    ck_assert_int_eq(weft_remote_delta_init(&d, views, 2, -1, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_ptr_nonnull(d.inbox);
    ck_assert_uint_eq(d.targets[0].row_bytes, COLS);
    ck_assert_uint_eq(d.targets[0].row_stride, COLS);
    weft_remote_delta_fini(&d);

#ifndef HAVE_CUDA
    /* Without CUDA, device views take every version whole (with it,
     * test_ucx_delta's GPU cases apply deltas into them). */
    padded_views(views);
    ck_assert_int_eq(weft_remote_delta_init(&d, views, 2, 0, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_ptr_null(d.inbox);
#endif
}
END_TEST

START_TEST(a_delta_applies_into_strided_views)
{
    weft_remote_delta_t d;
    weft_ctl_buf_t      buf;
    int                 applied;

    given_delta(&d, 1, 1, 2, &buf);
    ck_assert_int_eq(weft_remote_delta_apply(&d, 2, &applied), WEFT_OK);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(d.holds, 2);
    ck_assert(views_hold(2));
    ck_assert_int_eq(d.patched[0], 1);
    ck_assert_int_eq(d.patched[1], 0); /* whole: checked with the version's sums */
    /* A VERSION with no DELTA before it: nothing applied. */
    ck_assert_int_eq(weft_remote_delta_apply(&d, 3, &applied), WEFT_OK);
    ck_assert_int_eq(applied, 0);
    weft_ctl_buf_free(&buf);
    weft_remote_delta_fini(&d);
}
END_TEST

START_TEST(a_delta_for_other_bytes_is_refused)
{
    weft_remote_delta_t d;
    weft_ctl_buf_t      buf;
    weft_ctl_msg_t      msg;
    int                 applied;

    /* The consumer believes its views hold 1; they hold 3. */
    given_delta(&d, 3, 1, 2, &buf);
    msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
    ck_assert_int_eq(weft_remote_delta_apply(&d, 2, &applied), WEFT_ERR_CORRUPT);
    ck_assert_int_eq(applied, 1);
    ck_assert_uint_eq(d.holds, 0);
    /* A delta from a version the consumer does not claim: refused unread. */
    hold(1);
    d.holds = 3;
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_OK);
    ck_assert_int_eq(weft_remote_delta_apply(&d, 2, &applied), WEFT_ERR_CORRUPT);
    ck_assert(views_hold(1));
    weft_ctl_buf_free(&buf);
    weft_remote_delta_fini(&d);
}
END_TEST

/* A WT's entry (PATCH_T): its W's delta, applied transposed into WT's
 * view and checked against WT's checksum, which the entry carries. */
START_TEST(wt_patch_is_w_delta_transposed)
{
    static uint8_t          w[BYTES], wt[BYTES];
    uint8_t                 older[BYTES], newer[BYTES], older_t[BYTES], newer_t[BYTES];
    weft_recv_view_t        views[2] = {{.name = "w", .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                         .shape = {ROWS, COLS}, .data = w},
                                        {.name = "wt", .role = WEFT_ROLE_WT, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                         .shape = {COLS, ROWS}, .data = wt}};
    weft_remote_delta_t     d;
    weft_wire_delta_entry_t e[2];
    weft_ctl_buf_t          buf;
    weft_ctl_msg_t          msg;
    uint64_t                n = 0;
    int                     applied;

    version_bytes(older, 0, 1);
    version_bytes(newer, 0, 2);
    for (uint64_t r = 0; r < ROWS; r++) {
        for (uint64_t c = 0; c < COLS; c++) {
            older_t[c * ROWS + r] = older[r * COLS + c];
            newer_t[c * ROWS + r] = newer[r * COLS + c];
        }
    }
    ck_assert_int_eq(weft_remote_delta_init(&d, views, 2, -1, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_int_eq(weft_delta_encode_host(older, newer, BYTES, d.inbox, BYTES, &n), WEFT_OK);
    e[0] = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_PATCH, .offset = 0, .bytes = n};
    e[1] = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_PATCH_T, .offset = 0, .bytes = n, .rows = ROWS,
                                     .cols = COLS, .checksum = weft_checksum_host(newer_t, BYTES)};
    for (int k = 0; k < 3; k++) {
        /* 0: as sent; 1: another checksum; 2: matrices that do not tile WT. */
        memcpy(w, older, BYTES);
        memcpy(wt, older_t, BYTES);
        e[1].checksum ^= k == 1;
        e[1].rows = k == 2 ? ROWS + 1 : ROWS;
        memset(&buf, 0, sizeof(buf));
        weft_wire_put_delta(&buf, 2, 1, e, 2);
        msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
        ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_OK);
        d.holds = 1;
        ck_assert_int_eq(weft_remote_delta_apply(&d, 2, &applied), k == 0 ? WEFT_OK : WEFT_ERR_CORRUPT);
        ck_assert_int_eq(applied, 1);
        ck_assert_int_eq(memcmp(w, newer, BYTES), 0);
        ck_assert_int_eq(memcmp(wt, k == 2 ? older_t : newer_t, BYTES), 0); /* 1: applied, then caught */
        ck_assert_uint_eq(d.holds, k == 0 ? 2 : 0);
        e[1].checksum ^= k == 1;
        weft_ctl_buf_free(&buf);
    }
    weft_remote_delta_fini(&d);
}
END_TEST

START_TEST(malformed_deltas_are_refused)
{
    weft_remote_delta_t     d;
    weft_ctl_buf_t          buf = {0};
    weft_ctl_msg_t          msg;
    weft_wire_delta_entry_t e[2] = {{.kind = WEFT_WIRE_DELTA_PATCH, .offset = 0, .bytes = 64},
                                    {.kind = WEFT_WIRE_DELTA_WHOLE, .offset = 4096, .bytes = BYTES}};

    ready(&d);
    /* One entry for two views. */
    weft_wire_put_delta(&buf, 2, 1, e, 1);
    msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_ERR_CORRUPT);
    weft_ctl_buf_free(&buf);
    /* An entry past the inbox's end. */
    memset(&buf, 0, sizeof(buf));
    e[1].offset = d.inbox_bytes - 10;
    weft_wire_put_delta(&buf, 2, 1, e, 2);
    msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_ERR_CORRUPT);
    /* Cut short by a byte. */
    msg.length--;
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_ERR_CORRUPT);
    weft_ctl_buf_free(&buf);
    /* An unknown kind. */
    memset(&buf, 0, sizeof(buf));
    e[1].offset = 4096;
    e[0].kind = 4;
    weft_wire_put_delta(&buf, 2, 1, e, 2);
    msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_ERR_CORRUPT);
    weft_ctl_buf_free(&buf);
    /* A whole tensor of the wrong size: refused at the apply. */
    memset(&buf, 0, sizeof(buf));
    e[0].kind = WEFT_WIRE_DELTA_WHOLE;
    e[0].bytes = BYTES - 1;
    weft_wire_put_delta(&buf, 2, 1, e, 2);
    msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_OK);
    {
        int applied;

        hold(1);
        d.holds = 1;
        ck_assert_int_eq(weft_remote_delta_apply(&d, 2, &applied), WEFT_ERR_CORRUPT);
        ck_assert(views_hold(1));
    }
    weft_ctl_buf_free(&buf);
    weft_remote_delta_fini(&d);
}
END_TEST

START_TEST(patched_views_are_vouched_for_without_a_second_reading)
{
    weft_remote_delta_t d;
    weft_ctl_buf_t      buf;
    weft_wire_sums_t    sums = {0};
    uint8_t             t[BYTES];
    int                 applied;

    given_delta(&d, 1, 1, 2, &buf);
    ck_assert_int_eq(weft_remote_delta_apply(&d, 2, &applied), WEFT_OK);
    sums.count = 2;
    sums.known = calloc(2, 1);
    sums.sums = calloc(2, sizeof(*sums.sums));
    ck_assert(sums.known != NULL && sums.sums != NULL);
    for (int i = 0; i < 2; i++) {
        version_bytes(t, i, 2);
        sums.known[i] = 1;
        sums.sums[i] = weft_checksum_host(t, BYTES);
    }
    ck_assert_int_eq(weft_remote_delta_vouch(&d, &sums), WEFT_OK);
    ck_assert_int_eq(sums.known[0], 0); /* patched and summed: not read again */
    ck_assert_int_eq(sums.known[1], 1); /* whole: read by the version's check */
    /* The version's sum is not the one the delta carried. */
    sums.known[0] = 1;
    sums.sums[0] ^= 1;
    ck_assert_int_eq(weft_remote_delta_vouch(&d, &sums), WEFT_ERR_CORRUPT);
    weft_wire_sums_free(&sums);
    weft_ctl_buf_free(&buf);
    weft_remote_delta_fini(&d);
}
END_TEST

/* 16 contiguous views of 1 MiB: applied and checked on threads (where
 * the machine has more than one CPU), one view refused among them. */
START_TEST(many_views_apply_on_threads)
{
    enum { VIEWS = 16 };
    const uint64_t           bytes = UINT64_C(1) << 20;
    uint8_t                 *held = malloc(VIEWS * bytes), *newer = malloc(bytes);
    weft_recv_view_t         views[VIEWS];
    char                     names[VIEWS][8];
    weft_wire_delta_entry_t  e[VIEWS];
    weft_remote_delta_t      d;
    weft_ctl_buf_t           buf = {0};
    weft_ctl_msg_t           msg;
    uint64_t                 at = 0;
    int                      applied;

    ck_assert(held != NULL && newer != NULL);
    for (uint32_t i = 0; i < VIEWS; i++) {
        snprintf(names[i], sizeof(names[i]), "v%u", i);
        views[i] = (weft_recv_view_t){.name = names[i], .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_UINT8, .ndim = 1,
                                      .shape = {bytes}, .data = held + i * bytes};
        for (uint64_t k = 0; k < bytes; k++) {
            held[i * bytes + k] = (uint8_t)(k * 13 + i);
        }
    }
    ck_assert_int_eq(weft_remote_delta_init(&d, views, VIEWS, -1, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_ptr_nonnull(d.inbox);
    for (uint32_t i = 0; i < VIEWS; i++) {
        uint64_t n = 0;

        memcpy(newer, held + i * bytes, bytes);
        for (uint64_t k = i; k < bytes; k += 1000) {
            newer[k] ^= 0x5A;
        }
        ck_assert_int_eq(weft_delta_encode_host(held + i * bytes, newer, bytes, d.inbox + at, d.inbox_bytes - at, &n),
                         WEFT_OK);
        e[i] = (weft_wire_delta_entry_t){.kind = WEFT_WIRE_DELTA_PATCH, .offset = at, .bytes = n};
        at = (at + n + 63) / 64 * 64;
    }
    weft_wire_put_delta(&buf, 2, 1, e, VIEWS);
    msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_OK);
    d.holds = 1;
    ck_assert_int_eq(weft_remote_delta_apply(&d, 2, &applied), WEFT_OK);
    for (uint32_t i = 0; i < VIEWS; i++) {
        uint64_t wrong = 0;

        for (uint64_t k = 0; k < bytes; k++) {
            const uint8_t want = (uint8_t)((k * 13 + i) ^ (k >= i && (k - i) % 1000 == 0 ? 0x5A : 0));

            wrong += held[i * bytes + k] != want;
        }
        ck_assert_msg(wrong == 0, "view %u: %llu wrong bytes", i, (unsigned long long)wrong);
        ck_assert_int_eq(d.patched[i], 1);
    }
    /* Again (the views hold 2, which the delta's values give again),
     * with a byte of view 11 that the delta does not touch made wrong:
     * its thread refuses it. */
    held[11 * bytes + 5] ^= 1;
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_OK);
    d.holds = 1;
    ck_assert_int_eq(weft_remote_delta_apply(&d, 2, &applied), WEFT_ERR_CORRUPT);
    ck_assert_uint_eq(d.holds, 0);
    weft_ctl_buf_free(&buf);
    weft_remote_delta_fini(&d);
    free(held);
    free(newer);
}
END_TEST

START_TEST(the_checksum_of_rows_is_that_of_their_bytes)
{
    static uint8_t spread[40 * 64], packed[40 * 64];
    const uint64_t widths[] = {1, 3, 7, 8, 9, 16, 21, 40};

    for (size_t i = 0; i < sizeof(spread); i++) {
        spread[i] = (uint8_t)(i * 131 + 17);
    }
    for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
        for (uint64_t rows = 0; rows <= 40; rows += 13) {
            for (uint64_t r = 0; r < rows; r++) {
                memcpy(packed + r * widths[w], spread + r * 64, widths[w]);
            }
            ck_assert_uint_eq(weft_checksum_host_rows(spread, widths[w], 64, rows),
                              weft_checksum_host(packed, widths[w] * rows));
        }
    }
}
END_TEST

/* Writes and publishes version v of the cache test's registry: tensor 0
 * dense, tensor 1 padded, each byte k of both (k * 7 + v) where k % 50 ==
 * v, k * 7 elsewhere. */
static void publish_cached(weft_registry_h reg, uint64_t v)
{
    ck_assert_int_eq(weft_registry_write_begin(reg, 1000000, NULL), WEFT_OK);
    for (uint32_t t = 0; t < 2; t++) {
        uint8_t *data;

        ck_assert_int_eq(weft_registry_write_tensor(reg, t, (void **)&data), WEFT_OK);
        for (uint64_t r = 0; r < ROWS; r++) {
            for (uint64_t c = 0; c < COLS; c++) {
                const uint64_t k = r * COLS + c;

                data[r * (t ? PITCH : COLS) + c] = (uint8_t)(k * 7 + (k % 50 == v ? v : 0));
            }
        }
    }
    ck_assert_int_eq(weft_registry_publish(reg, v, NULL), WEFT_OK);
}

START_TEST(the_server_cache_encodes_dense_tensors_between_puts)
{
    char                    name[64];
    weft_registry_h         reg;
    weft_delta_cache_t      c;
    weft_plan_view_t        dense_view = {.tensor = 0}, padded_view = {.tensor = 1};
    weft_wire_delta_entry_t e;
    uint64_t                bytes = 0;
    int                     which = -1;

    snprintf(name, sizeof(name), "t-delta-cache-%d", (int)getpid());
    weft_registry_unlink(name);
    ck_assert_int_eq(weft_registry_create(name, NULL, &reg), WEFT_OK);
    for (uint32_t t = 0; t < 2; t++) {
        const weft_tensor_desc_t d = {.field_mask = t ? WEFT_TENSOR_FIELD_STRIDES : 0,
                                      .name = t ? "padded" : "dense", .role = WEFT_ROLE_W,
                                      .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2, .shape = {ROWS, COLS},
                                      .strides = {PITCH, 1}};

        ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_OK);
    }
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    ck_assert_int_eq(weft_delta_cache_init(&c, reg, WEFT_DELTA_AUTO, UINT64_C(1) << 20), WEFT_OK);
    ck_assert_int_eq(c.dense[0], 1);
    ck_assert_int_eq(c.dense[1], 0);
    publish_cached(reg, 1);
    ck_assert_int_eq(weft_delta_cache_update(&c, 1, 0, UINT64_MAX / 2), WEFT_OK);
    ck_assert_uint_eq(c.base.version, 1);
    publish_cached(reg, 2);
    /* Consumers holding 1 wait only while the encode runs. */
    ck_assert_int_eq(weft_delta_cache_coming(&c, 1, 2), 0);
    ck_assert_int_eq(weft_delta_cache_update(&c, 2, 0, 0), WEFT_OK); /* one tensor a call */
    ck_assert_int_eq(weft_delta_cache_busy(&c), 1);
    ck_assert_int_eq(weft_delta_cache_coming(&c, 1, 2), 1);
    ck_assert_int_eq(weft_delta_cache_coming(&c, 3, 2), 0);
    ck_assert_int_eq(weft_delta_cache_update(&c, 2, 0, 0), WEFT_OK);
    ck_assert_int_eq(weft_delta_cache_busy(&c), 0);
    ck_assert_uint_eq(c.base.version, 2);
    ck_assert_int_eq(weft_delta_cache_entries(&c, 1, 2, &dense_view, 1, BYTES, UINT64_C(1) << 20, &which, &e, &bytes),
                     1);
    ck_assert_int_eq(e.kind, WEFT_WIRE_DELTA_PATCH);
    ck_assert_uint_lt(bytes, BYTES / 4); /* 4 % of the bytes changed (1 and 2 of every 50) */
    /* The padded tensor: never as a delta. */
    ck_assert_int_eq(
        weft_delta_cache_entries(&c, 1, 2, &padded_view, 1, BYTES, UINT64_C(1) << 20, &which, &e, &bytes), 0);
    /* Version 3 while a consumer's puts read the other buffer: not
     * encoded yet, nobody waits; once they are done, it is. */
    publish_cached(reg, 3);
    ck_assert_int_eq(weft_delta_cache_update(&c, 3, 1u << (1 - which), UINT64_MAX / 2), WEFT_OK);
    ck_assert_int_eq(weft_delta_cache_busy(&c), 0);
    ck_assert_uint_eq(c.base.version, 2);
    ck_assert_int_eq(weft_delta_cache_coming(&c, 2, 3), 0);
    ck_assert_int_eq(weft_delta_cache_update(&c, 3, 0, UINT64_MAX / 2), WEFT_OK);
    ck_assert_uint_eq(c.base.version, 3);
    ck_assert_int_eq(weft_delta_cache_entries(&c, 2, 3, &dense_view, 1, BYTES, UINT64_C(1) << 20, &which, &e, &bytes),
                     1);
    /* Versions 4 and 5 published before the server's turn read 4: the
     * encode takes 5, the newest, and a consumer offered 4 waits for it
     * (its lease would take 5 too). */
    publish_cached(reg, 4);
    publish_cached(reg, 5);
    ck_assert_int_eq(weft_delta_cache_update(&c, 4, 0, 0), WEFT_OK);
    ck_assert_int_eq(weft_delta_cache_busy(&c), 1);
    ck_assert_uint_eq(c.next.version, 5);
    ck_assert_int_eq(weft_delta_cache_coming(&c, 3, 4), 1);
    ck_assert_int_eq(weft_delta_cache_update(&c, 5, 0, UINT64_MAX / 2), WEFT_OK);
    ck_assert_int_eq(weft_delta_cache_busy(&c), 0);
    ck_assert_int_eq(weft_delta_cache_coming(&c, 3, 5), 0);
    ck_assert_int_eq(weft_delta_cache_entries(&c, 3, 5, &dense_view, 1, BYTES, UINT64_C(1) << 20, &which, &e, &bytes),
                     1);
    /* The base and nothing else leased; none once forgotten. */
    {
        weft_registry_stats_t st;

        ck_assert_int_eq(weft_registry_get_stats(reg, &st), WEFT_OK);
        ck_assert_uint_eq(st.leases_held, 1);
        weft_delta_cache_forget(&c);
        ck_assert_int_eq(weft_registry_get_stats(reg, &st), WEFT_OK);
        ck_assert_uint_eq(st.leases_held, 0);
    }
    weft_delta_cache_fini(&c);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
    weft_registry_unlink(name);
}
END_TEST

/* Version v of an expert's W [ROWS, COLS] (tensor 0: byte k is k * 7,
 * plus v where k % 50 == v) and its WT (tensor 1: W's bytes transposed,
 * as the FP8 writer makes it). */
static void publish_pair(weft_registry_h reg, uint64_t v)
{
    uint8_t *w, *wt;

    ck_assert_int_eq(weft_registry_write_begin(reg, 1000000, NULL), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_tensor(reg, 0, (void **)&w), WEFT_OK);
    ck_assert_int_eq(weft_registry_write_tensor(reg, 1, (void **)&wt), WEFT_OK);
    for (uint64_t r = 0; r < ROWS; r++) {
        for (uint64_t c = 0; c < COLS; c++) {
            const uint64_t k = r * COLS + c;

            w[k] = (uint8_t)(k * 7 + (k % 50 == v ? v : 0));
            wt[c * ROWS + r] = w[k];
        }
    }
    ck_assert_int_eq(weft_registry_publish(reg, v, NULL), WEFT_OK);
}

/* A WT's entry shares its W's bytes, counted once, whether the consumer
 * declared the W view before or after it; without the W view, WT's
 * entry carries them itself. */
START_TEST(the_server_cache_puts_w_bytes_once_for_wt_in_any_view_order)
{
    const weft_registry_params_t rp = {.field_mask = WEFT_REGISTRY_FIELD_CHECKSUMS, .checksums = 1};
    const weft_plan_view_t       w_first[2] = {{.tensor = 0}, {.tensor = 1}}, wt_first[2] = {{.tensor = 1}, {.tensor = 0}};
    char                         name[64];
    weft_registry_h              reg;
    weft_delta_cache_t           c;
    weft_wire_delta_entry_t      e[2];
    uint64_t                     bytes_w_first = 0, bytes_wt_first = 0, bytes_wt_alone = 0;
    int                          which = -1;

    snprintf(name, sizeof(name), "t-delta-pair-%d", (int)getpid());
    weft_registry_unlink(name);
    ck_assert_int_eq(weft_registry_create(name, &rp, &reg), WEFT_OK);
    for (uint32_t t = 0; t < 2; t++) {
        const weft_tensor_desc_t d = {.name = t ? "model.layers.0.mlp.experts.0.wt" : "model.layers.0.mlp.experts.0.w",
                                      .expert = 0, .role = t ? WEFT_ROLE_WT : WEFT_ROLE_W,
                                      .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2,
                                      .shape = {t ? COLS : ROWS, t ? ROWS : COLS}};

        ck_assert_int_eq(weft_registry_declare(reg, &d, NULL), WEFT_OK);
    }
    ck_assert_int_eq(weft_registry_seal(reg), WEFT_OK);
    ck_assert_int_eq(weft_delta_cache_init(&c, reg, WEFT_DELTA_AUTO, UINT64_C(1) << 20), WEFT_OK);
    ck_assert_int_eq(c.pair[1], 0);
    publish_pair(reg, 1);
    ck_assert_int_eq(weft_delta_cache_update(&c, 1, 0, UINT64_MAX / 2), WEFT_OK);
    publish_pair(reg, 2);
    ck_assert_int_eq(weft_delta_cache_update(&c, 2, 0, UINT64_MAX / 2), WEFT_OK);
    ck_assert_int_eq(weft_delta_cache_busy(&c), 0);

    ck_assert_int_eq(weft_delta_cache_entries(&c, 1, 2, w_first, 2, 2 * BYTES, UINT64_C(1) << 20, &which, e,
                                              &bytes_w_first),
                     1);
    ck_assert_int_eq(e[0].kind, WEFT_WIRE_DELTA_PATCH);
    ck_assert_int_eq(e[1].kind, WEFT_WIRE_DELTA_PATCH_T);
    ck_assert_int_eq(e[0].shares, 0);
    ck_assert_int_eq(e[1].shares, 1);
    ck_assert_uint_eq(e[1].shared_view, 0);
    ck_assert_uint_eq(e[1].rows, ROWS);
    ck_assert_uint_eq(e[1].cols, COLS);
    ck_assert_uint_eq(bytes_w_first, e[0].bytes);

    ck_assert_int_eq(weft_delta_cache_entries(&c, 1, 2, wt_first, 2, 2 * BYTES, UINT64_C(1) << 20, &which, e,
                                              &bytes_wt_first),
                     1);
    ck_assert_int_eq(e[0].kind, WEFT_WIRE_DELTA_PATCH_T);
    ck_assert_int_eq(e[0].shares, 1);
    ck_assert_uint_eq(e[0].shared_view, 1);
    ck_assert_int_eq(e[1].shares, 0);
    ck_assert_uint_eq(bytes_wt_first, bytes_w_first);

    ck_assert_int_eq(weft_delta_cache_entries(&c, 1, 2, wt_first, 1, BYTES, UINT64_C(1) << 20, &which, e,
                                              &bytes_wt_alone),
                     1);
    ck_assert_int_eq(e[0].kind, WEFT_WIRE_DELTA_PATCH_T);
    ck_assert_int_eq(e[0].shares, 0);
    ck_assert_uint_eq(bytes_wt_alone, e[0].bytes);
    ck_assert_uint_eq(bytes_wt_alone, bytes_w_first);

    weft_delta_cache_fini(&c);
    ck_assert_int_eq(weft_registry_close(reg), WEFT_OK);
    weft_registry_unlink(name);
}
END_TEST

/*
 * A server that sends a delta's pieces one after the other (nccl) lays
 * the entries out in the consumer's inbox (weft_delta_inbox_layout); the
 * consumer, from the DELTA alone, finds the same places in the same
 * order (weft_remote_delta_places): each W's delta once, also for its WT
 * whether the WT's view comes after the W's or before it. Entries that
 * overlap in the inbox are refused.
 */
START_TEST(the_consumer_finds_the_servers_pieces_from_the_delta_alone)
{
    /* As weft_delta_cache_entries gives them: offsets into the cache's
     * buffer; view 1 is view 0's WT, view 3 is view 4's. */
    weft_wire_delta_entry_t map[5] = {
        {.kind = WEFT_WIRE_DELTA_PATCH, .offset = 0, .bytes = 1000},
        {.kind = WEFT_WIRE_DELTA_PATCH_T, .offset = 0, .bytes = 1000, .shares = 1, .shared_view = 0},
        {.kind = WEFT_WIRE_DELTA_WHOLE, .offset = 1024, .bytes = 300},
        {.kind = WEFT_WIRE_DELTA_PATCH_T, .offset = 2048, .bytes = 200, .shares = 1, .shared_view = 4},
        {.kind = WEFT_WIRE_DELTA_PATCH, .offset = 2048, .bytes = 200},
    };
    weft_copy_range_t       ranges[5];
    weft_range_list_t       puts = {.ranges = ranges, .capacity = 5};
    static uint8_t          inbox[UINT64_C(1) << 16];
    weft_remote_delta_t     d = {.inbox = inbox, .inbox_bytes = sizeof(inbox), .view_count = 5};
    uint64_t                offsets[5], sizes[5];
    uint32_t                count = 99;
    weft_ctl_buf_t          buf = {0};
    weft_ctl_msg_t          msg;

    ck_assert_uint_eq(weft_delta_inbox_layout(map, 5, 0, &puts), 1344 + 200);
    ck_assert_uint_eq(puts.count, 3);
    /* Each piece from the cache (src) to its place in the inbox (dst). */
    ck_assert_uint_eq(ranges[0].src, 0);
    ck_assert_uint_eq((uintptr_t)ranges[0].dst, 0);
    ck_assert_uint_eq(ranges[1].src, 1024);
    ck_assert_uint_eq((uintptr_t)ranges[1].dst, 1024);
    ck_assert_uint_eq(ranges[2].src, 2048);
    ck_assert_uint_eq((uintptr_t)ranges[2].dst, 1344);
    ck_assert_uint_eq(map[1].offset, 0);
    ck_assert_uint_eq(map[3].offset, 1344);

    weft_wire_put_delta(&buf, 2, 1, map, 5);
    msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_OK);
    ck_assert_int_eq(weft_remote_delta_places(&d, offsets, sizes, &count), WEFT_OK);
    ck_assert_uint_eq(count, puts.count);
    for (uint32_t k = 0; k < count; k++) {
        ck_assert_uint_eq(offsets[k], (uintptr_t)ranges[k].dst);
        ck_assert_uint_eq(sizes[k], ranges[k].bytes);
    }
    weft_ctl_buf_free(&buf);
    free(d.map);

    /* Two entries that overlap: the map is refused. */
    map[2].offset = 1300;
    memset(&buf, 0, sizeof(buf));
    weft_wire_put_delta(&buf, 2, 1, map, 5);
    msg = (weft_ctl_msg_t){.type = WEFT_CTL_DELTA, .length = (uint32_t)buf.length, .payload = buf.data};
    d.map = NULL;
    ck_assert_int_eq(weft_remote_delta_on_map(&d, &msg), WEFT_OK);
    ck_assert_int_eq(weft_remote_delta_places(&d, offsets, sizes, &count), WEFT_ERR_CORRUPT);
    ck_assert_uint_eq(count, 0);
    weft_ctl_buf_free(&buf);
    free(d.map);
}
END_TEST

/* WEFT_DELTA with a value it does not take: logged, and taken as off (it
 * chooses only how versions travel, <weft/weft.h>): the consumer sets up
 * no inbox, so every version comes whole; weft_config_check flags it. The
 * environment is read once a process: each test runs in one of its own. */
START_TEST(a_bad_weft_delta_is_taken_as_off)
{
    weft_recv_view_t    views[2];
    weft_remote_delta_t d;

    ck_assert_int_eq(setenv("WEFT_DELTA", "fast", 1), 0);
    ck_assert_int_eq(weft_config_check(WEFT_CONFIG_DELTA, NULL, 0), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_delta_mode(), WEFT_DELTA_OFF);
    padded_views(views);
    ck_assert_int_eq(weft_remote_delta_init(&d, views, 2, -1, WEFT_MEMORY_HOST), WEFT_OK);
    ck_assert_ptr_null(d.inbox);
    ck_assert_ptr_null(d.targets);
    weft_remote_delta_fini(&d);
}
END_TEST

static Suite *remote_delta_suite(void)
{
    Suite *s = suite_create("remote_delta");
    TCase *tc = tcase_create("delta");

    tcase_add_test(tc, which_views_take_deltas);
    tcase_add_test(tc, a_delta_applies_into_strided_views);
    tcase_add_test(tc, a_delta_for_other_bytes_is_refused);
    tcase_add_test(tc, malformed_deltas_are_refused);
    tcase_add_test(tc, wt_patch_is_w_delta_transposed);
    tcase_add_test(tc, patched_views_are_vouched_for_without_a_second_reading);
    tcase_add_test(tc, many_views_apply_on_threads);
    tcase_add_test(tc, the_checksum_of_rows_is_that_of_their_bytes);
    tcase_add_test(tc, the_server_cache_encodes_dense_tensors_between_puts);
    tcase_add_test(tc, the_server_cache_puts_w_bytes_once_for_wt_in_any_view_order);
    tcase_add_test(tc, the_consumer_finds_the_servers_pieces_from_the_delta_alone);
    tcase_add_test(tc, a_bad_weft_delta_is_taken_as_off);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(remote_delta_suite)
