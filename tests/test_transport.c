/* transport/: the backend query, through the public API of libweft.so. */
#include "config.h"

#include "lib/harness.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft/weft.h>

#ifdef HAVE_CUDA
#include "lib/gpu_skip.h"

static int gpus; /* counted before any test runs */
#endif

static const struct {
    weft_backend_t backend;
    const char    *name;
    int            compiled;
} expected[] = {
    {WEFT_BACKEND_HOST, "host", 1},
#ifdef HAVE_CUDA
    {WEFT_BACKEND_CUDA, "cuda", 1},
#else
    {WEFT_BACKEND_CUDA, "cuda", 0},
#endif
#ifdef HAVE_UCX
    {WEFT_BACKEND_UCX, "ucx", 1},
#else
    {WEFT_BACKEND_UCX, "ucx", 0},
#endif
#ifdef HAVE_NCCL
    {WEFT_BACKEND_NCCL, "nccl", 1},
#else
    {WEFT_BACKEND_NCCL, "nccl", 0},
#endif
#ifdef HAVE_VERBS
    {WEFT_BACKEND_VERBS, "verbs", 1},
#else
    {WEFT_BACKEND_VERBS, "verbs", 0},
#endif
};

START_TEST(query_reports_what_configure_built)
{
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        weft_backend_info_t info;

        memset(&info, 0xa5, sizeof(info)); /* the query must clear what it does not fill */
        ck_assert_int_eq(weft_backend_query(expected[i].backend, &info), WEFT_OK);
        ck_assert_str_eq(info.name, expected[i].name);
        ck_assert_int_eq(info.compiled, expected[i].compiled);
        ck_assert_uint_lt(strnlen(info.version, sizeof(info.version)), sizeof(info.version));
        ck_assert_uint_lt(strnlen(info.detail, sizeof(info.detail)), sizeof(info.detail));
        ck_assert_uint_gt(strlen(info.detail), 0);
        if (!info.compiled) {
            ck_assert_int_eq(info.available, 0);
            ck_assert_str_eq(info.detail, "not compiled in\n");
        }
    }
}
END_TEST

START_TEST(host_backend_is_always_available)
{
    weft_backend_info_t info;

    ck_assert_int_eq(weft_backend_query(WEFT_BACKEND_HOST, &info), WEFT_OK);
    ck_assert_int_eq(info.compiled, 1);
    ck_assert_int_eq(info.available, 1);
}
END_TEST

START_TEST(query_rejects_bad_arguments)
{
    weft_backend_info_t info;

    ck_assert_int_eq(weft_backend_query(WEFT_BACKEND_LAST, &info), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_backend_query((weft_backend_t)-1, &info), WEFT_ERR_INVALID_PARAM);
    ck_assert_int_eq(weft_backend_query(WEFT_BACKEND_HOST, NULL), WEFT_ERR_INVALID_PARAM);
}
END_TEST

#ifdef HAVE_CUDA
START_TEST(cuda_probe_lists_devices)
{
    weft_backend_info_t info;

    ck_assert_int_eq(weft_backend_query(WEFT_BACKEND_CUDA, &info), WEFT_OK);
    ck_assert_ptr_nonnull(strstr(info.version, "runtime "));
    ck_assert_ptr_nonnull(strstr(info.detail, "kernels built for " WEFT_CUDA_ARCH));
    ck_assert_int_eq(info.available, gpus > 0);
    if (gpus > 0) {
        ck_assert_ptr_nonnull(strstr(info.detail, "GPU0: "));
    } else {
        /* Here (no driver) the plain words, not CUDA's "insufficient driver". */
        ck_assert_msg(strstr(info.detail, "no NVIDIA driver or GPU found") != NULL ||
                          strstr(info.detail, "no CUDA device") != NULL,
                      "%s", info.detail);
        ck_assert_ptr_null(strstr(info.detail, "insufficient"));
    }
}
END_TEST
#endif

#ifdef HAVE_UCX
START_TEST(ucx_probe_lists_transports)
{
    weft_backend_info_t info;

    ck_assert_int_eq(weft_backend_query(WEFT_BACKEND_UCX, &info), WEFT_OK);
    ck_assert_int_eq(info.available, 1);
    ck_assert_uint_gt(strlen(info.version), 0);
    /* Every machine has UCX's loopback transport. */
    ck_assert_ptr_nonnull(strstr(info.detail, "self/memory"));
}
END_TEST
#endif

#ifdef HAVE_NCCL
START_TEST(nccl_probe_reports_version)
{
    weft_backend_info_t info;
    int major, minor, patch;

    ck_assert_int_eq(weft_backend_query(WEFT_BACKEND_NCCL, &info), WEFT_OK);
    ck_assert_int_eq(info.available, 1);
    ck_assert_int_eq(sscanf(info.version, "%d.%d.%d", &major, &minor, &patch), 3);
    ck_assert_int_ge(major, 2);
}
END_TEST
#endif

static Suite *transport_suite(void)
{
    Suite *s = suite_create("transport");
    TCase *tc = tcase_create("backend_query");

#ifdef HAVE_CUDA
    gpus = weft_test_gpu_count();
#endif
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, query_reports_what_configure_built);
    tcase_add_test(tc, host_backend_is_always_available);
    tcase_add_test(tc, query_rejects_bad_arguments);
#ifdef HAVE_CUDA
    tcase_add_test(tc, cuda_probe_lists_devices);
#endif
#ifdef HAVE_UCX
    tcase_add_test(tc, ucx_probe_lists_transports);
#endif
#ifdef HAVE_NCCL
    tcase_add_test(tc, nccl_probe_reports_version);
#endif
    suite_add_tcase(s, tc);
    return s;
}

WEFT_TEST_MAIN(transport_suite)
