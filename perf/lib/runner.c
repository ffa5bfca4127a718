/* weft-perf's child-process runner: see runner.h. */
#include "config.h"

#include "runner.h"

#include "sysinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int perf_run_start(perf_runner_t *r, perf_run_t *p, const char *what, char *const argv[], int merge_stderr,
                   perf_run_exec_fn exec, const void *arg)
{
    int   fds[2];
    pid_t pid;

    memset(p, 0, sizeof(*p));
    p->what = what;
    p->fd = -1;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", r->name, strerror(errno));
        return -1;
    }
    pid = perf_fork(&r->children);
    if (pid == 0) {
        if (dup2(fds[1], STDOUT_FILENO) < 0 || (merge_stderr && dup2(fds[1], STDERR_FILENO) < 0)) {
            _exit(127);
        }
        signal(SIGPIPE, SIG_DFL);
        if (exec != NULL) {
            exec(arg, argv);
        } else {
            execvp(argv[0], argv);
            fprintf(stderr, "%s: cannot run %s: %s\n", r->name, argv[0], strerror(errno));
        }
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return -1;
    }
    p->pid = pid;
    p->fd = fds[0];
    p->merged = merge_stderr;
    return 0;
}

/* Appends what fd has to p->out, keeping the last PERF_RUN_OUT_MAX - 1
 * bytes. */
static void run_read(perf_run_t *p)
{
    char    buf[4096];
    ssize_t n = read(p->fd, buf, sizeof(buf));

    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
        return;
    }
    if (n <= 0) {
        close(p->fd);
        p->fd = -1;
        return;
    }
    if (p->len + (size_t)n >= PERF_RUN_OUT_MAX) {
        size_t drop = p->len + (size_t)n - (PERF_RUN_OUT_MAX - 1);

        drop = drop > p->len ? p->len : drop;
        memmove(p->out, p->out + drop, p->len - drop);
        p->len -= drop;
    }
    n = (ssize_t)((size_t)n > PERF_RUN_OUT_MAX - 1 - p->len ? PERF_RUN_OUT_MAX - 1 - p->len : (size_t)n);
    memcpy(p->out + p->len, buf, (size_t)n);
    p->len += (size_t)n;
    p->out[p->len] = '\0';
}

void perf_run_pump(perf_runner_t *r, perf_run_t *runs, int n, int wait_ms)
{
    struct pollfd fds[8];
    int           map[8], nfds = 0, status = 0;
    pid_t         pid;

    for (int i = 0; i < n && nfds < 8; i++) {
        if (runs[i].fd >= 0) {
            fds[nfds] = (struct pollfd){.fd = runs[i].fd, .events = POLLIN};
            map[nfds++] = i;
        }
    }
    if (poll(fds, (nfds_t)nfds, wait_ms) > 0) {
        for (int k = 0; k < nfds; k++) {
            if (fds[k].revents != 0) {
                run_read(&runs[map[k]]);
            }
        }
    }
    while ((pid = perf_reap_exited(&r->children, &status)) > 0) {
        for (int i = 0; i < n; i++) {
            if (runs[i].pid == pid) {
                runs[i].exited = 1;
                runs[i].status = status;
            }
        }
    }
}

int perf_run_failed(const perf_run_t *p)
{
    return p->killed || (p->exited && !(WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0));
}

int perf_run_done(const perf_run_t *p)
{
    return p->pid == 0 || (p->exited && p->fd < 0) || p->killed;
}

void perf_run_kill_all(perf_runner_t *r, perf_run_t *runs, int n)
{
    perf_kill_children(&r->children);
    for (int i = 0; i < n; i++) {
        if (runs[i].pid != 0 && !runs[i].exited) {
            runs[i].killed = 1;
        }
        if (runs[i].fd >= 0) {
            close(runs[i].fd);
            runs[i].fd = -1;
        }
    }
}

const char *perf_run_line(const perf_run_t *p, const char *prefix)
{
    for (const char *s = p->out; s != NULL && *s != '\0';) {
        const char *nl = strchr(s, '\n');

        if (nl != NULL && strncmp(s, prefix, strlen(prefix)) == 0) {
            return s + strlen(prefix);
        }
        s = nl != NULL ? nl + 1 : NULL;
    }
    return NULL;
}

int perf_run_interrupted(const perf_runner_t *r)
{
    return perf_interrupted && !r->cleaning;
}

int perf_run_wait(perf_runner_t *r, perf_run_t *runs, int n, const char *line, uint64_t deadline_ns,
                  int kill_on_failure)
{
    for (;;) {
        int done = 1, failed = 0;

        for (int i = 0; i < n; i++) {
            done &= perf_run_done(&runs[i]);
            failed |= perf_run_failed(&runs[i]);
        }
        if (line != NULL && perf_run_line(&runs[0], line) != NULL) {
            return 0;
        }
        if ((done && line == NULL) || (failed && kill_on_failure) || (line != NULL && perf_run_done(&runs[0]))) {
            if (!done) {
                perf_run_kill_all(r, runs, n);
            }
            return done && !failed && line == NULL ? 0 : -1;
        }
        if (perf_run_interrupted(r) || perf_now_ns() > deadline_ns) {
            perf_run_kill_all(r, runs, n);
            return -1;
        }
        perf_run_pump(r, runs, n, 20);
    }
}

uint64_t perf_deadline_in_s(double seconds)
{
    return perf_now_ns() + (uint64_t)(seconds * 1e9);
}

void perf_run_describe(const perf_run_t *p, char *buf, size_t size)
{
    char how[96];

    if (p->killed) {
        snprintf(how, sizeof(how), "killed (time limit, a failed peer or an interrupt)");
    } else if (p->exited) {
        perf_describe_status(p->status, how, sizeof(how));
    } else {
        snprintf(how, sizeof(how), "not started");
    }
    snprintf(buf, size, "%s %s", p->what, how);
}

void perf_run_last_line(const perf_run_t *p, char *buf, size_t size)
{
    size_t end = p->len, start;

    while (end > 0 && (p->out[end - 1] == '\n' || p->out[end - 1] == ' ')) {
        end--;
    }
    start = end;
    while (start > 0 && p->out[start - 1] != '\n') {
        start--;
    }
    snprintf(buf, size, "%.*s", (int)(end - start), p->out + start);
}
