/*
 * The main of every Check test program: the file defines
 * `static Suite *x_suite(void)` and ends with WEFT_TEST_MAIN(x_suite).
 *
 * The contract:
 * - x_suite() runs first, in the test program's own process, before any
 *   test: it may probe (a GPU count, UCX built in, root or not), choose
 *   the cases to add, set environment every test inherits, and print a
 *   line saying what runs. It returns NULL to skip the whole program,
 *   having printed why: main exits WEFT_TEST_SKIP (77, automake's skip).
 * - Every test runs in a process of its own (CK_FORK, whatever CK_FORK
 *   in the environment says): tests read WEFT_* afresh, start CUDA (a
 *   CUDA context does not survive fork) and kill children of their own.
 * - stdout is flushed before the first test forks: a line still in the
 *   buffer would be written again by every test's process.
 * - main exits 0 when every test passed, 1 when one failed.
 * - Check's own variables work as ever: CK_RUN_SUITE, CK_RUN_CASE,
 *   CK_INCLUDE_TAGS, CK_EXCLUDE_TAGS, CK_DEFAULT_TIMEOUT,
 *   CK_TIMEOUT_MULTIPLIER.
 */
#ifndef WEFT_TESTS_LIB_HARNESS_H
#define WEFT_TESTS_LIB_HARNESS_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#define WEFT_TEST_SKIP 77

static inline int weft_test_run(Suite *suite)
{
    SRunner *sr;
    int      failed;

    if (suite == NULL) {
        return WEFT_TEST_SKIP;
    }
    fflush(stdout);
    sr = srunner_create(suite);
    /* Each test in a process of its own, unless CK_FORK=no says otherwise
     * (one process: a debugger follows the tests). */
    srunner_set_fork_status(sr, getenv("CK_FORK") != NULL ? CK_FORK_GETENV : CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

#define WEFT_TEST_MAIN(suite_fn)                                                                 \
    int main(void)                                                                               \
    {                                                                                            \
        return weft_test_run(suite_fn());                                                        \
    }

#endif
