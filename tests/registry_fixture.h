/* What the registry's test programs share: a registry name unique to the
 * test process (unlinked by the teardown), and the wait for a byte that
 * another process writes once it got somewhere. Header-only, included
 * once per test program. */
#ifndef WEFT_TESTS_REGISTRY_FIXTURE_H
#define WEFT_TESTS_REGISTRY_FIXTURE_H

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <weft/weft.h>

/* How long a test waits for another process's signal (a byte on a pipe, a
 * word in the segment): only there to turn a hang into a failure. */
#define SIGNAL_TIMEOUT_US UINT64_C(30000000)

static char reg_name[64];

/* A name unique to this test process; unlinked by the teardown. */
static inline const char *test_name(void)
{
    if (reg_name[0] == '\0') {
        snprintf(reg_name, sizeof(reg_name), "test-registry-%d", (int)getpid());
    }
    weft_registry_unlink(reg_name);
    return reg_name;
}

static inline void unlink_registry(void)
{
    if (reg_name[0] != '\0') {
        weft_registry_unlink(reg_name);
    }
}

/* Reads the byte another process writes once it got somewhere. 0 when it
 * came, -1 when it did not within SIGNAL_TIMEOUT_US or the writer died. */
static inline int await_byte(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    char          byte;

    return poll(&pfd, 1, (int)(SIGNAL_TIMEOUT_US / 1000)) == 1 && read(fd, &byte, 1) == 1 ? 0 : -1;
}

#endif
