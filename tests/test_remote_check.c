/*
 * A remote consumer's check of a version against the server's checksums
 * (weft_remote_base_check, remote/remote.h), on host views: views
 * the notice vouches for are summed and compared, others are left alone;
 * a notice about another number of views is refused; WEFT_VERIFY=none
 * checks nothing. (test_transport_ucx runs it end to end.)
 */
#include "config.h"

#include "transport/remote/remote.h"
#include "lib/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/checksum.h>
#include <weft/weft.h>

static uint8_t a[4096], b[1000];

/* A consumer that keeps two host views, a and b, and a notice with
 * their sums (b's made wrong when wrong_b), b vouched for or not. */
static void consumer_with_sums(weft_remote_base_t *c, int b_known, int wrong_b)
{
    const weft_recv_view_t views[2] = {
        {.name = "a", .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_UINT8, .ndim = 1, .shape = {sizeof(a)}, .data = a},
        {.name = "b", .role = WEFT_ROLE_W, .dtype = WEFT_DTYPE_FP8_E4M3, .ndim = 2, .shape = {10, 100}, .data = b}};

    for (size_t i = 0; i < sizeof(a); i++) {
        a[i] = (uint8_t)(i * 7);
    }
    for (size_t i = 0; i < sizeof(b); i++) {
        b[i] = (uint8_t)(i * 13 + 1);
    }
    memset(c, 0, sizeof(*c));
    snprintf(c->server, sizeof(c->server), "test");
    ck_assert_int_eq(weft_remote_base_keep_views(c, views, 2, WEFT_MEMORY_HOST), WEFT_OK);
    c->sums.count = 2;
    c->sums.known = calloc(2, 1);
    c->sums.sums = calloc(2, sizeof(uint64_t));
    ck_assert_ptr_nonnull(c->sums.known);
    ck_assert_ptr_nonnull(c->sums.sums);
    c->sums.known[0] = 1;
    c->sums.known[1] = (uint8_t)b_known;
    c->sums.sums[0] = weft_checksum_host(a, sizeof(a));
    c->sums.sums[1] = weft_checksum_host(b, sizeof(b)) ^ (wrong_b ? 1u : 0u);
}

static void consumer_done(weft_remote_base_t *c)
{
    c->fd = -1;
    weft_remote_base_disconnect(c); /* frees the sums and the kept views */
    ck_assert_ptr_null(c->view_data);
    ck_assert_uint_eq(c->sums.count, 0);
}

START_TEST(vouched_views_are_checked)
{
    weft_remote_base_t c;

    consumer_with_sums(&c, 1, 0);
    ck_assert_int_eq(weft_remote_base_check(&c, 1), WEFT_OK);
    a[100] ^= 4; /* a byte of a changed after the server summed it */
    ck_assert_int_eq(weft_remote_base_check(&c, 1), WEFT_ERR_CORRUPT);
    a[100] ^= 4;
    ck_assert_int_eq(weft_remote_base_check(&c, 1), WEFT_OK);
    consumer_done(&c);

    consumer_with_sums(&c, 1, 1);
    ck_assert_int_eq(weft_remote_base_check(&c, 2), WEFT_ERR_CORRUPT);
    consumer_done(&c);
}
END_TEST

START_TEST(views_not_vouched_for_and_empty_notices_are_not_checked)
{
    weft_remote_base_t c;

    consumer_with_sums(&c, 0, 1); /* b's sum is wrong, but not vouched for */
    ck_assert_int_eq(weft_remote_base_check(&c, 1), WEFT_OK);
    c.sums.count = 0; /* a notice without checksums (an older server) */
    ck_assert_int_eq(weft_remote_base_check(&c, 1), WEFT_OK);
    c.sums.count = 2;
    consumer_done(&c);
}
END_TEST

START_TEST(a_notice_about_other_views_is_refused)
{
    weft_remote_base_t c;

    consumer_with_sums(&c, 1, 0);
    c.sums.count = 1; /* the server thinks this consumer has one view */
    ck_assert_int_eq(weft_remote_base_check(&c, 1), WEFT_ERR_CORRUPT);
    c.sums.count = 2;
    consumer_done(&c);
}
END_TEST

START_TEST(weft_verify_none_checks_nothing)
{
    weft_remote_base_t c;

    /* Read once per process: this test's own (CK_FORK). */
    ck_assert_int_eq(setenv("WEFT_VERIFY", "none", 1), 0);
    consumer_with_sums(&c, 1, 1);
    ck_assert_int_eq(weft_remote_base_check(&c, 1), WEFT_OK);
    consumer_done(&c);
}
END_TEST

static Suite *remote_check_suite(void)
{
    Suite *s = suite_create("remote_check");
    TCase *tc = tcase_create("check");

    tcase_add_test(tc, vouched_views_are_checked);
    tcase_add_test(tc, views_not_vouched_for_and_empty_notices_are_not_checked);
    tcase_add_test(tc, a_notice_about_other_views_is_refused);
    tcase_add_test(tc, weft_verify_none_checks_nothing);
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(remote_check_suite)
