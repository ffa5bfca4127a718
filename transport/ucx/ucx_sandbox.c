/* UCX's first look at a peer's addresses and keys, in a process of its own
 * (ucx_sandbox.h). The request: u32 address count, the addresses as
 * blobs, u32 key count, the keys as blobs (ctl/bootstrap.h's encoding). */
#include "config.h"

#include "transport/ucx/ucx_sandbox.h"

#include "common/env_config.h"
#include "common/log.h"
#include "common/time_util.h"
#include "transport/ctl/bootstrap.h"
#include "transport/ucx/ucx_common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define REQUEST_MAX (UINT32_C(64) << 20) /* what the sandbox reads at most */
#define ANSWER_FD   3                       /* where the sandbox says "ok" */

extern char **environ;

/* ------------------------------------------------------- the caller's side */

/* The program, NULL when none runs (off, or not found: warned once). */
static const char *sandbox_path(void)
{
    static atomic_int warned;
    const char       *path = weft_config_value(WEFT_CONFIG_UCX_SANDBOX);

    if (strcmp(path, "off") == 0) {
        return NULL;
    }
    if (path[0] == '\0') {
        path = WEFT_PKGLIBEXECDIR "/weft-ucx-sandbox";
    }
    if (access(path, X_OK) != 0) {
        if (atomic_exchange(&warned, 1) == 0) {
            weft_log_warn("ucx: no sandbox program at %s (WEFT_UCX_SANDBOX): a peer's worker addresses and keys "
                          "go to UCX unchecked",
                          path);
        }
        return NULL;
    }
    return path;
}

static void put_blobs(weft_ctl_buf_t *buf, const weft_ucx_blob_t *blobs, uint32_t count)
{
    weft_ctl_put_u32(buf, count);
    for (uint32_t i = 0; i < count; i++) {
        weft_ctl_put_blob(buf, blobs[i].data, blobs[i].length);
    }
}

/* Writes all of buf to fd, then reads fd to its end into out, by the
 * deadline. 0, or -1 (timeout or an error). */
static int converse(int in, int out_fd, const weft_ctl_buf_t *buf, char *out, size_t out_size, uint64_t deadline)
{
    size_t written = 0, got = 0;

    while (written < buf->length || out_fd >= 0) {
        struct pollfd fds[2];
        nfds_t        n = 0;
        int           ms;

        if (written < buf->length) {
            fds[n++] = (struct pollfd){.fd = in, .events = POLLOUT};
        }
        fds[n++] = (struct pollfd){.fd = out_fd, .events = POLLIN};
        if (weft_time_ns() >= deadline) {
            return -1;
        }
        ms = (int)((deadline - weft_time_ns()) / 1000000) + 1;
        if (poll(fds, n, ms) < 0 && errno != EINTR) {
            return -1;
        }
        if (written < buf->length && (fds[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = write(in, buf->data + written, buf->length - written);
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
                written = buf->length; /* it went away: its status says why */
            } else if (w > 0) {
                written += (size_t)w;
            }
            if (written == buf->length) {
                close(in); /* the end of the request */
                in = -1;
            }
        }
        if (fds[n - 1].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = read(out_fd, out + got, out_size - 1 - got);
            if (r <= 0 && (r == 0 || (errno != EAGAIN && errno != EINTR))) {
                break; /* its end */
            }
            got += r > 0 ? (size_t)r : 0;
            if (got == out_size - 1) {
                break;
            }
        }
    }
    if (in >= 0) {
        close(in);
    }
    out[got] = '\0';
    return 0;
}

/* converse() with SIGPIPE blocked on this thread: a sandbox that died
 * mid-request must not end the caller's process; a SIGPIPE this raised is
 * taken back, so the process's own handling never sees it. */
static int converse_quietly(int in, int out_fd, const weft_ctl_buf_t *buf, char *out, size_t out_size,
                            uint64_t deadline)
{
    sigset_t              pipe_set, old, pending;
    const struct timespec zero = {0, 0};
    int                   was_pending, rc;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    rc = converse(in, out_fd, buf, out, out_size, deadline);
    sigpending(&pending);
    if (!was_pending && sigismember(&pending, SIGPIPE)) {
        (void)sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

weft_status_t weft_ucx_sandbox_check(const weft_ucx_blob_t *addresses, uint32_t address_count,
                                     const weft_ucx_blob_t *keys, uint32_t key_count, uint64_t deadline_ns,
                                     char *why, size_t why_size)
{
    const char                *path = sandbox_path();
    char *const                argv[] = {(char *)"weft-ucx-sandbox", NULL};
    posix_spawn_file_actions_t actions;
    weft_ctl_buf_t             buf = {0};
    int                        to[2] = {-1, -1}, from[2] = {-1, -1}, status = 0, talked;
    char                       answer[64];
    pid_t                      pid;

    if (path == NULL) {
        return WEFT_OK;
    }
    put_blobs(&buf, addresses, address_count);
    put_blobs(&buf, keys, key_count);
    if (buf.failed || pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
        weft_ctl_buf_free(&buf);
        snprintf(why, why_size, "no resources to start the UCX sandbox");
        for (int i = 0; i < 2; i++) {
            if (to[i] >= 0) {
                close(to[i]);
            }
            if (from[i] >= 0) {
                close(from[i]);
            }
        }
        return WEFT_ERR_NO_MEMORY;
    }
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to[0], STDIN_FILENO);
    /* The answer on its descriptor 3: UCX writes its own messages to stdout. */
    posix_spawn_file_actions_adddup2(&actions, from[1], ANSWER_FD);
    status = posix_spawn(&pid, path, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(to[0]);
    close(from[1]);
    if (status != 0) {
        close(to[1]);
        close(from[0]);
        weft_ctl_buf_free(&buf);
        snprintf(why, why_size, "the UCX sandbox %s could not start: %s", path, strerror(status));
        return WEFT_ERR_IO;
    }
    (void)fcntl(to[1], F_SETFL, O_NONBLOCK);
    (void)fcntl(from[0], F_SETFL, O_NONBLOCK);
    talked = converse_quietly(to[1], from[0], &buf, answer, sizeof(answer), deadline_ns);
    close(from[0]);
    weft_ctl_buf_free(&buf);
    if (talked != 0) {
        kill(pid, SIGKILL);
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (talked != 0) {
        snprintf(why, why_size, "the UCX sandbox did not answer in time");
        return WEFT_ERR_TIMEOUT;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && strncmp(answer, "ok", 2) == 0) {
        return WEFT_OK;
    }
    if (WIFSIGNALED(status)) {
        snprintf(why, why_size, "UCX died of signal %d on its worker address or keys (in the sandbox)",
                 WTERMSIG(status));
    } else {
        snprintf(why, why_size, "UCX refused its worker address or keys (in the sandbox: exit %d)",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return WEFT_ERR_INVALID_PARAM;
}

/* ------------------------------------------------------- the sandbox's side */

static void ignore_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    (void)status;
}

/* Reads stdin to its end (REQUEST_MAX at most). */
static uint8_t *read_request(size_t *length)
{
    size_t   capacity = 1 << 16, used = 0;
    uint8_t *data = malloc(capacity);

    while (data != NULL) {
        ssize_t r;

        if (used == capacity) {
            uint8_t *grown = capacity < REQUEST_MAX ? realloc(data, capacity * 2) : NULL;
            if (grown == NULL) {
                free(data);
                return NULL;
            }
            data = grown;
            capacity *= 2;
        }
        r = read(STDIN_FILENO, data + used, capacity - used);
        if (r == 0) {
            *length = used;
            return data;
        }
        if (r < 0 && errno != EINTR) {
            break;
        }
        used += r > 0 ? (size_t)r : 0;
    }
    free(data);
    return NULL;
}

/* Endpoint to `address`, every key unpacked on it, then a forced close.
 * 0, or -1 (UCX refused one). */
static int try_address(weft_ucx_t *ucx, const void *address, const weft_ucx_blob_t *keys, uint32_t key_count)
{
    ucp_ep_h            ep;
    int                 reports, ok = 1;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t    closing;

    if (weft_ucx_connect(ucx, address, ignore_error, NULL, "sandbox", &ep, &reports) != WEFT_OK) {
        fprintf(stderr, "weft-ucx-sandbox: no endpoint to the address\n");
        return -1;
    }
    for (uint32_t k = 0; k < key_count && ok; k++) {
        ucp_rkey_h         rkey;
        const ucs_status_t unpacked = ucp_ep_rkey_unpack(ep, keys[k].data, &rkey);

        ok = unpacked == UCS_OK;
        if (ok) {
            ucp_rkey_destroy(rkey);
        } else {
            fprintf(stderr, "weft-ucx-sandbox: key %u: %s\n", k, ucs_status_string(unpacked));
        }
    }
    closing = ucp_ep_close_nbx(ep, &param);
    if (closing != NULL && !UCS_PTR_IS_ERR(closing)) {
        for (int spins = 0; spins < 100000 && ucp_request_check_status(closing) == UCS_INPROGRESS; spins++) {
            ucp_worker_progress(ucx->worker);
        }
        ucp_request_free(closing);
    }
    return ok ? 0 : -1;
}

int weft_ucx_sandbox_main(void)
{
    size_t            length = 0;
    uint8_t          *request = read_request(&length);
    weft_ctl_cursor_t cur = {.data = request, .length = length};
    weft_ucx_blob_t  *blobs[2] = {NULL, NULL};
    uint32_t          counts[2] = {0, 0};
    weft_ucx_t        ucx;
    int               rc = 2;

    if (request == NULL) {
        fprintf(stderr, "weft-ucx-sandbox: no request\n");
        return 2;
    }
    for (int part = 0; part < 2; part++) {
        counts[part] = weft_ctl_get_u32(&cur);
        if (cur.failed || counts[part] > length) {
            goto out;
        }
        blobs[part] = calloc(counts[part] + 1, sizeof(**blobs));
        for (uint32_t i = 0; blobs[part] != NULL && i < counts[part]; i++) {
            blobs[part][i].data = weft_ctl_get_blob(&cur, &blobs[part][i].length);
        }
        if (blobs[part] == NULL || cur.failed) {
            goto out;
        }
    }
    if (weft_ucx_open(&ucx, "sandbox", 0) != WEFT_OK) {
        goto out;
    }
    rc = 0;
    for (uint32_t a = 0; a < counts[0] && rc == 0; a++) {
        rc = try_address(&ucx, blobs[0][a].data, blobs[1], counts[1]) == 0 ? 0 : 3;
    }
    weft_ucx_close(&ucx);
    if (rc == 0 && write(ANSWER_FD, "ok\n", 3) != 3) {
        rc = 4;
    }
out:
    free(blobs[0]);
    free(blobs[1]);
    free(request);
    return rc;
}
