/*
 * Delta versions on the host (<weft/delta.h>): round trips byte-exact on
 * random and adversarial data (none changed, all changed, changes at chunk
 * edges, NaN and special FP8 bytes, ragged sizes), into contiguous and
 * strided targets, and W's delta into WT (transposed targets); the full
 * tensor chosen where a delta is not smaller; a malformed, truncated or
 * damaged delta refused before it writes, and any
 * single flipped bit of a delta either refused or caught by the checksum.
 */
#include "config.h"

#include "lib/harness.h"
#include "lib/delta_inputs.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>

/* Encodes old → new with room for anything, applies it to a copy of old,
 * and checks the copy, the size and the checksum. */
static void round_trip(const uint8_t *old_data, const uint8_t *new_data, uint64_t n)
{
    const uint64_t changes = naive_changes(old_data, new_data, n);
    const uint64_t capacity = weft_delta_bytes(n, n);
    uint8_t       *delta = malloc(capacity), *target = malloc(n ? n : 1);
    uint64_t       size = 0, counted = 0, carried = 0;

    ck_assert(delta != NULL && target != NULL);
    ck_assert_int_eq(weft_delta_count_host(old_data, new_data, n, &counted), WEFT_OK);
    ck_assert_uint_eq(counted, changes);
    ck_assert_int_eq(weft_delta_encode_host(old_data, new_data, n, delta, capacity, &size), WEFT_OK);
    ck_assert_uint_eq(size, weft_delta_bytes(n, changes));
    memcpy(target, old_data, n);
    {
        const weft_delta_target_t t = {.data = target, .tensor_bytes = n, .row_bytes = n ? n : 1,
                                       .row_stride = n ? n : 1};
        if (n > 0) {
            ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, &carried), WEFT_OK);
            ck_assert_int_eq(memcmp(target, new_data, n), 0);
            ck_assert_uint_eq(carried, weft_checksum_host(new_data, n));
        }
    }
    free(delta);
    free(target);
}

START_TEST(round_trips_at_every_rate_and_size)
{
    static const uint64_t sizes[] = {1, 7, 8, 9, 4095, 4096, 4097, 12288, 1000003, (3u << 20) + 5}; /* the last: threads */
    static const double   rates[] = {0.0, 1e-4, 2e-3, 1.25e-2, 0.3, 1.0};

    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        uint8_t *a = malloc(sizes[si]), *b = malloc(sizes[si]);

        ck_assert(a != NULL && b != NULL);
        for (size_t ri = 0; ri < sizeof(rates) / sizeof(rates[0]); ri++) {
            make_pair(a, b, sizes[si], rates[ri], 1000 * si + ri + 1);
            round_trip(a, b, sizes[si]);
        }
        free(a);
        free(b);
    }
}
END_TEST

/* Nothing changed: a header and an empty index; the target unchanged.
 * Everything changed: larger than the tensor, so the tensor's own size is
 * too little room (the caller sends it whole). */
START_TEST(none_and_all_changed)
{
    const uint64_t n = 3 * WEFT_DELTA_CHUNK_BYTES + 5;
    uint8_t       *a = malloc(n), *b = malloc(n), *delta = malloc(weft_delta_bytes(n, n));
    uint64_t       size = 0;

    ck_assert(a != NULL && b != NULL && delta != NULL);
    make_pair(a, b, n, 0.0, 3);
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, n, &size), WEFT_OK);
    ck_assert_uint_eq(size, WEFT_DELTA_HEADER_BYTES + 4 * 4);
    make_pair(a, b, n, 1.0, 4);
    ck_assert_uint_eq(naive_changes(a, b, n), n);
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, n, &size), WEFT_ERR_NO_SPACE);
    round_trip(a, b, n);
    /* The break-even: about a third of the bytes. */
    make_pair(a, b, n, 0.2, 5);
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, n, &size), WEFT_OK);
    make_pair(a, b, n, 0.5, 6);
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, n, &size), WEFT_ERR_NO_SPACE);
    free(a);
    free(b);
    free(delta);
}
END_TEST

/* Changes on the edges of chunks and of the tensor, and FP8's special
 * bytes (NaN 0x7F and 0xFF, ±0, ±448) as old and new values. */
START_TEST(edges_and_special_bytes)
{
    static const uint8_t special[] = {0x7F, 0xFF, 0x00, 0x80, 0x7E, 0xFE};
    const uint64_t       n = 2 * WEFT_DELTA_CHUNK_BYTES + 100;
    const uint64_t       at[] = {0, 1, 7, 8, WEFT_DELTA_CHUNK_BYTES - 1, WEFT_DELTA_CHUNK_BYTES,
                                 WEFT_DELTA_CHUNK_BYTES + 1, 2 * WEFT_DELTA_CHUNK_BYTES - 1, n - 9, n - 1};
    uint8_t             *a = calloc(1, n), *b = calloc(1, n);

    ck_assert(a != NULL && b != NULL);
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        a[at[i]] = special[i % 6];
        b[at[i]] = special[(i + 1) % 6];
    }
    round_trip(a, b, n);
    round_trip(b, a, n);
    free(a);
    free(b);
}
END_TEST

/* A strided target (rows of a fused tensor): the rows change, the gaps
 * between them do not. */
START_TEST(strided_target)
{
    const uint64_t      rows = 300, row_bytes = 100, stride = 130, n = rows * row_bytes;
    uint8_t            *a = malloc(n), *b = malloc(n), *fused = malloc(rows * stride);
    uint8_t            *delta = malloc(weft_delta_bytes(n, n));
    uint64_t            size = 0;
    weft_delta_target_t t = {.data = fused, .tensor_bytes = n, .row_bytes = row_bytes, .row_stride = stride};

    ck_assert(a != NULL && b != NULL && fused != NULL && delta != NULL);
    make_pair(a, b, n, 0.05, 9);
    memset(fused, 0xA5, rows * stride);
    for (uint64_t r = 0; r < rows; r++) {
        memcpy(fused + r * stride, a + r * row_bytes, row_bytes);
    }
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, n, &size), WEFT_OK);
    ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, NULL), WEFT_OK);
    for (uint64_t r = 0; r < rows; r++) {
        ck_assert_int_eq(memcmp(fused + r * stride, b + r * row_bytes, row_bytes), 0);
        for (uint64_t g = row_bytes; g < stride; g++) {
            ck_assert_uint_eq(fused[r * stride + g], 0xA5);
        }
    }
    /* Rows that do not tile the tensor, or a stride below the row. */
    t.row_bytes = 7;
    ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, NULL), WEFT_ERR_INVALID_PARAM);
    t.row_bytes = row_bytes;
    t.row_stride = 99;
    ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, NULL), WEFT_ERR_INVALID_PARAM);
    free(a);
    free(b);
    free(fused);
    free(delta);
}
END_TEST

/* W's delta applied to WT (a transposed target): matrices of ragged
 * shapes that straddle chunks, contiguous and strided WT, every byte of
 * WT right, the gaps of a strided one untouched; targets whose matrices
 * do not tile the tensor refused. */
START_TEST(transposed_target)
{
    static const uint64_t shapes[][3] = {{1, 1, 1}, {3, 37, 129}, {2, 64, 200}, {1, 1000, 7}, {4, 129, 129}};

    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        const uint64_t e = shapes[si][0], rows = shapes[si][1], cols = shapes[si][2], n = e * rows * cols;
        const uint64_t stride = rows + 13; /* WT's rows are W's columns: `rows` bytes each */
        uint8_t       *a = malloc(n), *b = malloc(n), *at = malloc(n), *bt = malloc(n), *wt = malloc(n);
        uint8_t       *fused = malloc(n / rows * stride), *delta = malloc(weft_delta_bytes(n, n));
        uint64_t       size = 0, carried = 0;

        ck_assert(a != NULL && b != NULL && at != NULL && bt != NULL && wt != NULL && fused != NULL && delta != NULL);
        make_pair(a, b, n, si % 2 ? 0.3 : 0.0125, 40 + si);
        transpose_matrices(a, at, e, rows, cols);
        transpose_matrices(b, bt, e, rows, cols);
        ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, weft_delta_bytes(n, n), &size), WEFT_OK);

        weft_delta_target_t t = {.data = wt, .tensor_bytes = n, .row_bytes = n, .row_stride = n,
                                 .transpose_rows = rows, .transpose_cols = cols};
        memcpy(wt, at, n);
        ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, &carried), WEFT_OK);
        ck_assert_int_eq(memcmp(wt, bt, n), 0);
        ck_assert_uint_eq(carried, weft_checksum_host(b, n)); /* W's, as the contract says */

        t = (weft_delta_target_t){.data = fused, .tensor_bytes = n, .row_bytes = rows, .row_stride = stride,
                                  .transpose_rows = rows, .transpose_cols = cols};
        memset(fused, 0xA5, n / rows * stride);
        for (uint64_t r = 0; r < n / rows; r++) {
            memcpy(fused + r * stride, at + r * rows, rows);
        }
        ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, NULL), WEFT_OK);
        for (uint64_t r = 0; r < n / rows; r++) {
            ck_assert_int_eq(memcmp(fused + r * stride, bt + r * rows, rows), 0);
            for (uint64_t g = rows; g < stride; g++) {
                ck_assert_uint_eq(fused[r * stride + g], 0xA5);
            }
        }

        /* Not a target: one dimension without the other, or matrices that
         * do not tile the tensor. Nothing written. */
        memcpy(wt, at, n);
        t = (weft_delta_target_t){.data = wt, .tensor_bytes = n, .row_bytes = n, .row_stride = n,
                                  .transpose_rows = rows, .transpose_cols = 0};
        ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, NULL), WEFT_ERR_INVALID_PARAM);
        t.transpose_rows = 0;
        t.transpose_cols = cols;
        ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, NULL), WEFT_ERR_INVALID_PARAM);
        t.transpose_rows = rows + 1;
        ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, NULL), WEFT_ERR_INVALID_PARAM);
        t.transpose_rows = UINT64_MAX / 2; /* rows × cols overflows */
        ck_assert_int_eq(weft_delta_apply_host(delta, size, &t, NULL), WEFT_ERR_INVALID_PARAM);
        ck_assert_int_eq(memcmp(wt, at, n), 0);
        free(a);
        free(b);
        free(at);
        free(bt);
        free(wt);
        free(fused);
        free(delta);
    }
}
END_TEST

/* A damaged delta writes nothing: truncated, another magic or version,
 * another tensor size, an index or offset out of order. */
START_TEST(malformed_deltas_are_refused_before_writing)
{
    const uint64_t n = 3 * WEFT_DELTA_CHUNK_BYTES;
    uint8_t       *a = malloc(n), *b = malloc(n), *target = malloc(n);
    uint8_t       *delta = malloc(weft_delta_bytes(n, n)), *bad = malloc(weft_delta_bytes(n, n));
    uint64_t       size = 0;

    ck_assert(a != NULL && b != NULL && target != NULL && delta != NULL && bad != NULL);
    make_pair(a, b, n, 0.01, 11);
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, n, &size), WEFT_OK);
    memcpy(target, a, n);
    for (int k = 0; k < DELTA_DAMAGES; k++) {
        uint64_t            len;
        int                 other;
        weft_status_t       expect;
        weft_delta_target_t t = {.data = target, .tensor_bytes = n, .row_bytes = n, .row_stride = n};

        memcpy(bad, delta, size);
        expect = delta_damage(bad, size, k, &len, &other);
        if (other) {
            t.tensor_bytes = t.row_bytes = t.row_stride = n - WEFT_DELTA_CHUNK_BYTES;
        }
        ck_assert_msg(weft_delta_apply_host(bad, len, &t, NULL) == expect, "damage %d not refused as expected", k);
        ck_assert_int_eq(memcmp(target, a, n), 0);
    }
    free(a);
    free(b);
    free(target);
    free(delta);
    free(bad);
}
END_TEST

/* Every single bit of a delta flipped in turn: each damaged delta is
 * refused, or it applies and the checksum it carries does not match what
 * it gave. Never a wrong tensor passed as right. */
START_TEST(every_flipped_bit_is_caught)
{
    const uint64_t      n = 2 * WEFT_DELTA_CHUNK_BYTES + 300;
    uint8_t            *a = malloc(n), *b = malloc(n), *target = malloc(n);
    uint8_t            *delta = malloc(weft_delta_bytes(n, n)), *bad = malloc(weft_delta_bytes(n, n));
    uint64_t            size = 0, refused = 0, mismatched = 0;
    weft_delta_target_t t = {.data = target, .tensor_bytes = n, .row_bytes = n, .row_stride = n};

    ck_assert(a != NULL && b != NULL && target != NULL && delta != NULL && bad != NULL);
    make_pair(a, b, n, 0.004, 13);
    ck_assert_int_eq(weft_delta_encode_host(a, b, n, delta, n, &size), WEFT_OK);
    for (uint64_t bit = 0; bit < 8 * size; bit++) {
        uint64_t carried = 0;

        memcpy(bad, delta, size);
        bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        memcpy(target, a, n);
        if (weft_delta_apply_host(bad, size, &t, &carried) != WEFT_OK) {
            ck_assert_int_eq(memcmp(target, a, n), 0);
            refused++;
        } else {
            ck_assert_msg(weft_checksum_host(target, n) != carried, "bit %llu flipped went unnoticed",
                          (unsigned long long)bit);
            mismatched++;
        }
    }
    printf("every_flipped_bit_is_caught: %llu bits: %llu refused, %llu caught by the checksum\n",
           (unsigned long long)(8 * size), (unsigned long long)refused, (unsigned long long)mismatched);
    free(a);
    free(b);
    free(target);
    free(delta);
    free(bad);
}
END_TEST

START_TEST(argument_errors)
{
    uint8_t  x[8] = {0}, out[64];
    uint64_t v;

    ck_assert_int_eq(weft_delta_count_host(NULL, x, 8, &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_delta_count_host(x, x, 8, NULL), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_delta_encode_host(x, NULL, 8, out, sizeof(out), &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_delta_encode_host(x, x, 8, NULL, sizeof(out), &v), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_delta_encode_host(x, x, 8, out, WEFT_DELTA_HEADER_BYTES, &v), WEFT_ERR_NO_SPACE);
    ck_assert_int_eq(weft_delta_apply_host(NULL, 8, &(weft_delta_target_t){.data = x, .tensor_bytes = 8, .row_bytes = 8, .row_stride = 8}, NULL),
                     WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_delta_apply_host(out, 8, NULL, NULL), WEFT_ERR_INVALID_PARAM);
}
END_TEST

static Suite *delta_suite(void)
{
    Suite *s = suite_create("delta");
    TCase *tc = tcase_create("host");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, round_trips_at_every_rate_and_size);
    tcase_add_test(tc, none_and_all_changed);
    tcase_add_test(tc, edges_and_special_bytes);
    tcase_add_test(tc, strided_target);
    tcase_add_test(tc, transposed_target);
    tcase_add_test(tc, malformed_deltas_are_refused_before_writing);
    tcase_add_test(tc, every_flipped_bit_is_caught);
    tcase_add_test(tc, argument_errors);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(delta_suite)
