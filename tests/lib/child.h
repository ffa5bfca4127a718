/*
 * Helpers for tests that fork processes. A child checks with
 * CHILD_CHECK(cond) or gives up with CHILD_FAIL(fmt, ...): either writes
 * "file:line: child PID failed: what" on stderr and ends the child with
 * CHILD_FAILED, so the place is named by its line, not by a code. A child
 * that ends well ends with CHILD_EXIT(), which in an AddressSanitizer
 * build first has LeakSanitizer look for leaks (_exit skips the check it
 * makes at exit). The parent waits with wait_child(), which turns a
 * signal into 128 + the signal. Processes tell each other where they are
 * through pipes: read_byte() waits for one byte, up to a deadline that
 * only turns a hang into a failure.
 */
#ifndef WEFT_TESTS_LIB_CHILD_H
#define WEFT_TESTS_LIB_CHILD_H

#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define CHILD_ASAN 1
#elif defined(__has_feature) /* clang */
#if __has_feature(address_sanitizer)
#define CHILD_ASAN 1
#endif
#endif
#ifdef CHILD_ASAN
#include <sanitizer/lsan_interface.h>
#endif

/* The exit code of a child that leaked (LeakSanitizer's report is above
 * it on stderr); no check uses it. */
#define CHILD_LEAKED 250

/* The exit code of a child whose check failed (the line above it on
 * stderr says where and what): neither CHILD_LEAKED nor 128 + a signal,
 * and above the codes a child may exit with on purpose. */
#define CHILD_FAILED 251

/* Generous: a deadline on a signal from another process only turns a
 * hang into a failure. */
#define CHILD_SIGNAL_WAIT_S 60

/* One write: lines of children failing together do not interleave. */
__attribute__((noreturn, format(printf, 3, 4)))
static inline void child_fail_at(const char *file, int line, const char *fmt, ...)
{
    char    what[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d: child %d failed: %s\n", file, line, (int)getpid(), what);
    _exit(CHILD_FAILED);
}

#define CHILD_FAIL(...) child_fail_at(__FILE__, __LINE__, __VA_ARGS__)

#define CHILD_CHECK(cond)                                                                        \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            child_fail_at(__FILE__, __LINE__, "%s", #cond);                                      \
        }                                                                                        \
    } while (0)

/* For a helper of this file that checks on its caller's behalf: `line`
 * is the caller's __LINE__. */
#define CHILD_CHECK_AT(line, cond)                                                               \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            child_fail_at(__FILE__, (line), "%s", #cond);                                        \
        }                                                                                        \
    } while (0)
#define CHILD_FAIL_AT(line, ...) child_fail_at(__FILE__, (line), __VA_ARGS__)

__attribute__((noreturn)) static inline void child_exit_at(const char *file, int line)
{
#ifdef CHILD_ASAN
    /* With detect_leaks=0 it checks nothing and returns 0. */
    if (__lsan_do_recoverable_leak_check() != 0) {
        fprintf(stderr, "%s:%d: child %d leaked (LeakSanitizer's report above)\n", file, line,
                (int)getpid());
        _exit(CHILD_LEAKED);
    }
#else
    (void)file;
    (void)line;
#endif
    _exit(0);
}

/* A child's successful end (a failure's may stay _exit: it failed anyway). */
#define CHILD_EXIT() child_exit_at(__FILE__, __LINE__)

/* The next byte from fd (a pipe another process writes when it reached
 * a point), or -1 when none came within timeout_s, at end of file or on
 * an error. */
static inline int read_byte(int fd, int timeout_s)
{
    struct timespec now;
    int64_t         deadline_ms;
    unsigned char   byte;

    clock_gettime(CLOCK_MONOTONIC, &now);
    deadline_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000 + (int64_t)timeout_s * 1000;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t       left;
        int           n;

        clock_gettime(CLOCK_MONOTONIC, &now);
        left = deadline_ms - ((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000);
        if (left <= 0) {
            return -1;
        }
        n = poll(&pfd, 1, (int)left);
        if (n < 0 && errno != EINTR) {
            return -1;
        }
        if (n > 0) {
            ssize_t r = read(fd, &byte, 1);

            if (r == 1) {
                return byte;
            }
            if (r == 0 || errno != EINTR) {
                return -1;
            }
        }
    }
}

/* The child's exit status, or 128 + the signal that ended it. */
static inline int wait_child(pid_t pid)
{
    int status;

    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#endif
