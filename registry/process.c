/* Process identity from /proc/<pid>/stat: state and start time. */
#include "process.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Reads the state letter and start time (field 22) of pid. 0 on success. */
static int read_stat(int pid, char *state, uint64_t *start_time)
{
    char    path[64], buf[1024];
    ssize_t n;
    int     fd;
    char   *p;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return -1;
    }
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces and parentheses: the
     * fields that follow start after the last ')'. */
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ') {
        return -1;
    }
    p += 2;
    *state = *p;
    /* Field 3 is the state; skip fields 3..21 to reach field 22. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL) {
            return -1;
        }
        p++;
    }
    *start_time = strtoull(p, NULL, 10);
    return 0;
}

static uint64_t owner_word(int pid, uint64_t start_time)
{
    return ((uint64_t)(uint32_t)pid << 32) | (start_time & 0xffffffffu);
}

uint64_t weft_process_self(void)
{
    /* Cached per pid: a forked child must not reuse its parent's word. */
    static __thread int      cached_pid;
    static __thread uint64_t cached_word;
    int                      pid = (int)getpid();
    uint64_t                 start_time;
    char                     state;

    if (cached_pid == pid && cached_word != 0) {
        return cached_word;
    }
    if (read_stat(pid, &state, &start_time) != 0) {
        return 0;
    }
    cached_pid = pid;
    cached_word = owner_word(pid, start_time);
    return cached_word;
}

int weft_process_alive(uint64_t owner)
{
    int      pid = weft_process_pid(owner);
    uint64_t start_time;
    char     state;

    if (pid <= 0 || read_stat(pid, &state, &start_time) != 0) {
        return 0;
    }
    if (state == 'Z' || state == 'X') {
        return 0; /* exited, not yet reaped */
    }
    return owner_word(pid, start_time) == owner;
}
