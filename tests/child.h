/*
 * Helpers for tests that fork processes: a child reports a failed check by
 * its exit code (and a line on stderr naming the place), the parent waits
 * for it and turns a signal into 128 + the signal.
 */
#ifndef WEFT_TESTS_CHILD_H
#define WEFT_TESTS_CHILD_H

#include <check.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_FAIL(code)                                                                         \
    do {                                                                                         \
        fprintf(stderr, "%s:%d: child %d failed (code %d)\n", __FILE__, __LINE__, (int)getpid(), \
                (code));                                                                         \
        _exit(code);                                                                             \
    } while (0)

#define CHILD_CHECK(cond, code)                                                                  \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            CHILD_FAIL(code);                                                                    \
        }                                                                                        \
    } while (0)

/* The child's exit status, or 128 + the signal that ended it. */
static inline int wait_child(pid_t pid)
{
    int status;

    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
