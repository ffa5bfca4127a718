/* Child processes for weft-perf: recorded, bounded, never left behind. */
#include "config.h"

#include "proc.h"

#include "sysinfo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

volatile sig_atomic_t perf_interrupted;

static void on_interrupt(int signo)
{
    perf_interrupted = signo; /* nonzero: the signal that came, for 128 + signo */
}

int perf_catch_interrupts(void)
{
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction action;

    /* A reader that died must show as EPIPE, not kill the producer. */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
        fprintf(stderr, "weft-perf: cannot ignore SIGPIPE: %s\n", strerror(errno));
        return -1;
    }
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
        if (sigaction(signals[i], &action, NULL) != 0) {
            fprintf(stderr, "weft-perf: cannot catch signal %d: %s\n", signals[i], strerror(errno));
            return -1;
        }
    }
    return 0;
}

static void forget(perf_children_t *children, pid_t pid)
{
    for (int i = 0; i < children->count; i++) {
        if (children->pid[i] == pid) {
            children->pid[i] = children->pid[--children->count];
            return;
        }
    }
}

pid_t perf_fork(perf_children_t *children)
{
    pid_t parent = getpid();
    pid_t pid;

    if (children->count >= PERF_CHILDREN_MAX) {
        fprintf(stderr, "weft-perf: more than %d child processes\n", PERF_CHILDREN_MAX);
        return -1;
    }
    fflush(NULL); /* or the child's exit would write the parent's buffers again */
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "weft-perf: fork failed: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        children->count = 0;
        /* A child must not outlive a parent killed without cleanup; the
         * getppid() test closes the race with a parent that died first. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) {
            _exit(1);
        }
        return 0;
    }
    children->pid[children->count++] = pid;
    return pid;
}

void perf_outlive_parent(void)
{
    (void)prctl(PR_SET_PDEATHSIG, 0);
}

int perf_wait_child(perf_children_t *children, pid_t pid, unsigned timeout_ms, int *status)
{
    uint64_t deadline = perf_now_ns() + (uint64_t)timeout_ms * 1000000u;

    for (;;) {
        pid_t done = waitpid(pid, status, WNOHANG);

        if (done == pid) {
            forget(children, pid);
            return 0;
        }
        if (done < 0 && errno != EINTR) {
            fprintf(stderr, "weft-perf: waitpid(%d) failed: %s\n", (int)pid, strerror(errno));
            return -1;
        }
        if (perf_now_ns() >= deadline) {
            fprintf(stderr, "weft-perf: process %d did not exit within %u ms\n", (int)pid, timeout_ms);
            return -1;
        }
        perf_sleep_us(1000);
    }
}

pid_t perf_reap_exited(perf_children_t *children, int *status)
{
    for (int i = 0; i < children->count; i++) {
        pid_t pid = children->pid[i];
        pid_t done = waitpid(pid, status, WNOHANG);

        if (done == pid) {
            forget(children, pid);
            return pid;
        }
        if (done < 0 && errno != EINTR) {
            fprintf(stderr, "weft-perf: waitpid(%d) failed: %s\n", (int)pid, strerror(errno));
            return -1;
        }
    }
    return 0;
}

pid_t perf_peek_exited(const perf_children_t *children, int *status)
{
    for (int i = 0; i < children->count; i++) {
        siginfo_t info;

        memset(&info, 0, sizeof(info));
        if (waitid(P_PID, (id_t)children->pid[i], &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
            if (errno == EINTR) {
                continue;
            }
            fprintf(stderr, "weft-perf: waitid(%d) failed: %s\n", (int)children->pid[i], strerror(errno));
            return -1;
        }
        if (info.si_pid == children->pid[i]) {
            /* The wait status waitpid would give. */
            *status = info.si_code == CLD_EXITED ? (info.si_status & 0xff) << 8 : info.si_status & 0x7f;
            return info.si_pid;
        }
    }
    return 0;
}

void perf_kill_children(perf_children_t *children)
{
    while (children->count > 0) {
        pid_t pid = children->pid[children->count - 1];
        int   status;

        if (kill(pid, SIGKILL) != 0 && errno != ESRCH) {
            fprintf(stderr, "weft-perf: cannot kill process %d: %s\n", (int)pid, strerror(errno));
        }
        /* SIGKILL cannot be caught: the only bound needed is EINTR. */
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        forget(children, pid);
    }
}

void perf_describe_status(int status, char *buf, size_t size)
{
    if (WIFEXITED(status)) {
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    } else {
        snprintf(buf, size, "wait status 0x%x", (unsigned)status);
    }
}
