/*
 * The rounds a version is cut into for a consumer's bounded staging ring
 * (transport/ucx/plan/rounds.h): every byte of the plan's ranges in exactly
 * one piece, in order; each round's bytes inside its half of the ring and
 * at most a half; the server's puts and the consumer's pieces agreeing;
 * ROUND's encoding read back, and malformed or out-of-bounds payloads
 * refused.
 */
#include "config.h"

#include "transport/plan/rounds.h"
#include "lib/harness.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define RING_BASE UINT64_C(0x7f0000000000)
#define VIEWS     UINT64_C(0x100000000)

/* Ranges of the given sizes, sources and destinations each following on
 * with a gap of 16 bytes (as a padded view's rows would). */
static weft_range_list_t make_ranges(const uint64_t *sizes, uint32_t n)
{
    weft_range_list_t list = {.ranges = calloc(n + 1, sizeof(weft_copy_range_t)), .count = n,
                              .capacity = n + 1};
    uint64_t          src = 0, dst = VIEWS;

    ck_assert_ptr_nonnull(list.ranges);
    for (uint32_t i = 0; i < n; i++) {
        list.ranges[i] = (weft_copy_range_t){.src = src, .dst = (uint8_t *)(uintptr_t)dst,
                                             .bytes = sizes[i], .view = i};
        src += sizes[i] + 16;
        dst += sizes[i] + 16;
    }
    return list;
}

/* Checks rounds against ranges byte for byte: the stream of pieces, in
 * order, is the stream of ranges. */
static void check_rounds(const weft_range_list_t *ranges, const weft_rounds_t *rounds,
                         uint64_t half)
{
    uint64_t r = 0, done = 0, total = 0;

    for (uint32_t k = 0; k < rounds->count; k++) {
        const weft_round_t *round = &rounds->round[k];
        uint64_t                in_round = 0;

        ck_assert_uint_eq(round->piece_count, round->puts.count);
        for (uint64_t i = 0; i < round->piece_count; i++) {
            const weft_ucx_piece_t  *p = &round->pieces[i];
            const weft_copy_range_t *put = &round->puts.ranges[i];

            ck_assert_uint_lt(r, ranges->count);
            /* Where this byte stretch comes from and goes. */
            ck_assert_uint_eq(put->src, ranges->ranges[r].src + done);
            ck_assert_uint_eq(p->dst, (uint64_t)(uintptr_t)ranges->ranges[r].dst + done);
            ck_assert_uint_eq(p->bytes, put->bytes);
            ck_assert_uint_gt(p->bytes, 0);
            /* Inside its half, right after the round's bytes before it. */
            ck_assert_uint_eq(p->ring_offset, (k % 2) * half + in_round);
            ck_assert_uint_eq((uint64_t)(uintptr_t)put->dst, RING_BASE + p->ring_offset);
            in_round += p->bytes;
            ck_assert_uint_le(in_round, half);
            done += p->bytes;
            ck_assert_uint_le(done, ranges->ranges[r].bytes);
            if (done == ranges->ranges[r].bytes) {
                r++;
                done = 0;
            }
        }
        /* Only the last round may be short. */
        if (k + 1 < rounds->count) {
            ck_assert_uint_eq(in_round, half);
        }
        total += in_round;
    }
    ck_assert_uint_eq(r, ranges->count);
    for (uint64_t i = 0; i < ranges->count; i++) {
        total -= ranges->ranges[i].bytes;
    }
    ck_assert_uint_eq(total, 0);
}

START_TEST(every_byte_once_in_order_within_its_half)
{
    static const uint64_t sizes[] = {1000, 4096, 1, 70000, 4096, 4096, 123457, 8, 65536, 3};
    const uint32_t        n = sizeof(sizes) / sizeof(sizes[0]);
    weft_range_list_t     ranges = make_ranges(sizes, n);
    static const uint64_t halves[] = {97, 4096, 65536, 100000, 1u << 20};

    for (size_t h = 0; h < sizeof(halves) / sizeof(halves[0]); h++) {
        weft_rounds_t rounds;
        uint64_t          total = 0;

        for (uint32_t i = 0; i < n; i++) {
            total += sizes[i];
        }
        ck_assert_int_eq(weft_rounds_build(&ranges, RING_BASE, halves[h], &rounds), WEFT_OK);
        ck_assert_uint_eq(rounds.count, total / halves[h] + (total % halves[h] != 0));
        check_rounds(&ranges, &rounds, halves[h]);
        weft_rounds_free(&rounds);
        ck_assert_ptr_null(rounds.round);
    }
    free(ranges.ranges);
}
END_TEST

START_TEST(empty_plans_and_bad_halves)
{
    weft_range_list_t empty = {0};
    weft_rounds_t rounds;
    static const uint64_t sizes[] = {10};
    weft_range_list_t one = make_ranges(sizes, 1);

    ck_assert_int_eq(weft_rounds_build(&empty, RING_BASE, 4096, &rounds), WEFT_OK);
    ck_assert_uint_eq(rounds.count, 0);
    weft_rounds_free(&rounds);
    ck_assert_int_eq(weft_rounds_build(&one, RING_BASE, 0, &rounds), WEFT_ERR_INVALID_PARAM);
    one.ranges[0].bytes = (uint64_t)WEFT_ROUNDS_MAX * 2 + 1; /* more rounds than allowed */
    ck_assert_int_eq(weft_rounds_build(&one, RING_BASE, 2, &rounds), WEFT_ERR_INVALID_PARAM);
    free(one.ranges);
}
END_TEST

START_TEST(round_message_read_back_and_checked)
{
    static const uint64_t sizes[] = {3000, 5000, 2000};
    weft_range_list_t     ranges = make_ranges(sizes, 3);
    const weft_wire_span_t views = {.base = VIEWS, .bytes = 10100};
    weft_rounds_t     rounds;
    const uint64_t        half = 4096;

    ck_assert_int_eq(weft_rounds_build(&ranges, RING_BASE, half, &rounds), WEFT_OK);
    ck_assert_uint_eq(rounds.count, 3);
    for (uint32_t k = 0; k < rounds.count; k++) {
        weft_ctl_buf_t   buf = {0};
        weft_ctl_msg_t   msg;
        weft_ucx_piece_t *pieces;
        uint64_t          v, count;
        uint32_t          round, total;

        weft_ucx_put_round(&buf, 42, &rounds, k);
        ck_assert_int_eq(buf.failed, 0);
        msg = (weft_ctl_msg_t){.type = 0, .length = (uint32_t)buf.length, .payload = buf.data};
        ck_assert_int_eq(weft_ucx_get_round(&msg, half, &views, 1, &v, &round, &total, &pieces,
                                            &count),
                         WEFT_OK);
        ck_assert_uint_eq(v, 42);
        ck_assert_uint_eq(round, k);
        ck_assert_uint_eq(total, 3);
        ck_assert_uint_eq(count, rounds.round[k].piece_count);
        ck_assert_int_eq(memcmp(pieces, rounds.round[k].pieces, count * sizeof(*pieces)), 0);
        free(pieces);
        /* Cut short: malformed. */
        msg.length -= 1;
        ck_assert_int_eq(weft_ucx_get_round(&msg, half, &views, 1, &v, &round, &total, &pieces,
                                            &count),
                         WEFT_ERR_CORRUPT);
        msg.length += 1;
        /* Read as the other half's round, or against views that do not
         * hold its pieces: out of bounds. */
        ck_assert_int_eq(weft_ucx_get_round(&msg, half / 4, &views, 1, &v, &round, &total, &pieces,
                                            &count),
                         WEFT_ERR_CORRUPT);
        {
            const weft_wire_span_t small = {.base = VIEWS, .bytes = 100};

            ck_assert_int_eq(weft_ucx_get_round(&msg, half, &small, 1, &v, &round, &total,
                                                &pieces, &count),
                             WEFT_ERR_CORRUPT);
        }
        weft_ctl_buf_free(&buf);
    }
    weft_rounds_free(&rounds);
    free(ranges.ranges);
}
END_TEST

static Suite *ucx_rounds_suite(void)
{
    Suite *s = suite_create("ucx_rounds");
    TCase *tc = tcase_create("rounds");

    tcase_add_test(tc, every_byte_once_in_order_within_its_half);
    tcase_add_test(tc, empty_plans_and_bad_halves);
    tcase_add_test(tc, round_message_read_back_and_checked);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(ucx_rounds_suite)
