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
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

struct weft_ucx_probe {
    pid_t    pid;
    int      answer_fd; /* the sandbox's descriptor 3, read end; -1 once at its end */
    uint64_t deadline_ns;
    char     answer[64];
    size_t   got;
};

/* The request as a file of its own (memory-backed where the kernel
 * allows): the sandbox reads it as its stdin at its pace, so that nothing
 * here ever waits on a pipe. -1 on failure. */
static int request_file(const weft_ctl_buf_t *buf)
{
    int    fd = memfd_create("weft-ucx-sandbox-request", MFD_CLOEXEC);
    size_t done = 0;

    if (fd < 0) {
        FILE *f = tmpfile(); /* a kernel without memfd */
        fd = f != NULL ? fcntl(fileno(f), F_DUPFD_CLOEXEC, 0) : -1;
        if (f != NULL) {
            fclose(f);
        }
    }
    while (fd >= 0 && done < buf->length) {
        const ssize_t w = write(fd, buf->data + done, buf->length - done);
        if (w < 0 && errno != EINTR) {
            close(fd);
            return -1;
        }
        done += w > 0 ? (size_t)w : 0;
    }
    if (fd >= 0 && lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

weft_status_t weft_ucx_probe_start(const weft_ucx_blob_t *addresses, uint32_t address_count,
                                   const weft_ucx_blob_t *keys, uint32_t key_count, uint64_t deadline_ns,
                                   weft_ucx_probe_t **probe, char *why, size_t why_size)
{
    const char                *path = sandbox_path();
    char *const                argv[] = {(char *)"weft-ucx-sandbox", NULL};
    posix_spawn_file_actions_t actions;
    weft_ctl_buf_t             buf = {0};
    weft_ucx_probe_t          *pr;
    int                        request = -1, answer[2] = {-1, -1}, spawned;

    *probe = NULL;
    if (path == NULL) {
        return WEFT_OK;
    }
    put_blobs(&buf, addresses, address_count);
    put_blobs(&buf, keys, key_count);
    pr = calloc(1, sizeof(*pr));
    if (pr == NULL || buf.failed || (request = request_file(&buf)) < 0 || pipe2(answer, O_CLOEXEC) != 0) {
        weft_ctl_buf_free(&buf);
        free(pr);
        if (request >= 0) {
            close(request);
        }
        snprintf(why, why_size, "no resources to start the UCX sandbox");
        return WEFT_ERR_NO_MEMORY;
    }
    weft_ctl_buf_free(&buf);
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, request, STDIN_FILENO);
    /* The answer on its descriptor 3: UCX writes its own messages to stdout. */
    posix_spawn_file_actions_adddup2(&actions, answer[1], ANSWER_FD);
    spawned = posix_spawn(&pr->pid, path, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(request);
    close(answer[1]);
    if (spawned != 0) {
        close(answer[0]);
        free(pr);
        snprintf(why, why_size, "the UCX sandbox %s could not start: %s", path, strerror(spawned));
        return WEFT_ERR_IO;
    }
    (void)fcntl(answer[0], F_SETFL, O_NONBLOCK);
    pr->answer_fd = answer[0];
    pr->deadline_ns = deadline_ns;
    *probe = pr;
    return WEFT_INPROGRESS;
}

int weft_ucx_probe_fd(const weft_ucx_probe_t *probe)
{
    return probe->answer_fd;
}

static void probe_free(weft_ucx_probe_t *probe)
{
    if (probe->answer_fd >= 0) {
        close(probe->answer_fd);
    }
    free(probe);
}

void weft_ucx_probe_cancel(weft_ucx_probe_t *probe)
{
    if (probe == NULL) {
        return;
    }
    kill(probe->pid, SIGKILL);
    while (waitpid(probe->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    probe_free(probe);
}

/* What the sandbox's exit says, once it exited. */
static weft_status_t verdict(const weft_ucx_probe_t *probe, int status, char *why, size_t why_size)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && strncmp(probe->answer, "ok", 2) == 0) {
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

/* Reads what the sandbox wrote of its answer, without waiting; the
 * descriptor is closed at its end (the sandbox exited), on an error, or
 * once more than an answer came. */
static void read_answer(weft_ucx_probe_t *probe)
{
    while (probe->answer_fd >= 0) {
        const ssize_t r = read(probe->answer_fd, probe->answer + probe->got, sizeof(probe->answer) - 1 - probe->got);
        if (r > 0) {
            probe->got += (size_t)r;
            probe->answer[probe->got] = '\0';
            if (probe->got < sizeof(probe->answer) - 1) {
                continue;
            }
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (r < 0 && errno == EAGAIN) {
            return;
        }
        close(probe->answer_fd);
        probe->answer_fd = -1;
    }
}

weft_status_t weft_ucx_probe_poll(weft_ucx_probe_t *probe, char *why, size_t why_size)
{
    int   status = 0;
    pid_t ended;

    read_answer(probe);
    do {
        ended = waitpid(probe->pid, &status, WNOHANG);
    } while (ended < 0 && errno == EINTR);
    if (ended == 0 && weft_time_ns() < probe->deadline_ns) {
        return WEFT_INPROGRESS;
    }
    /* It may have answered and exited since the read above: what it wrote
     * is still in the pipe, whose other end its exit closed. */
    read_answer(probe);
    if (ended == 0) {
        weft_ucx_probe_cancel(probe);
        snprintf(why, why_size, "the UCX sandbox did not answer in time");
        return WEFT_ERR_TIMEOUT;
    }
    if (ended < 0) {
        /* Reaped already (the process ignores SIGCHLD): its answer, whole
         * once its descriptor ended, is all there is to go by. */
        status = probe->answer_fd < 0 ? 0 : 1 << 8;
    }
    {
        const weft_status_t answer = verdict(probe, status, why, why_size);
        probe_free(probe);
        return answer;
    }
}

weft_status_t weft_ucx_sandbox_check(const weft_ucx_blob_t *addresses, uint32_t address_count,
                                     const weft_ucx_blob_t *keys, uint32_t key_count, uint64_t deadline_ns,
                                     char *why, size_t why_size)
{
    weft_ucx_probe_t *probe;
    weft_status_t     status =
        weft_ucx_probe_start(addresses, address_count, keys, key_count, deadline_ns, &probe, why, why_size);

    while (status == WEFT_INPROGRESS) {
        /* The answer's descriptor ends as the sandbox exits; a short wait
         * bounds the look at the deadline and at an exit not seen there. */
        struct pollfd fd = {.fd = weft_ucx_probe_fd(probe), .events = POLLIN};
        (void)poll(&fd, fd.fd >= 0 ? 1 : 0, 1);
        status = weft_ucx_probe_poll(probe, why, why_size);
    }
    return status;
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

/* Endpoint to `address`, every key unpacked on it. 0, or -1 (UCX refused
 * one; the endpoint, if any, is closed). */
static int try_address(weft_ucx_t *ucx, const void *address, const weft_ucx_blob_t *keys, uint32_t key_count,
                       ucp_ep_h *ep)
{
    int reports, ok = 1;

    if (weft_ucx_connect(ucx, address, ignore_error, NULL, "sandbox", ep, &reports) != WEFT_OK) {
        fprintf(stderr, "weft-ucx-sandbox: no endpoint to the address\n");
        *ep = NULL;
        return -1;
    }
    for (uint32_t k = 0; k < key_count && ok; k++) {
        ucp_rkey_h         rkey;
        const ucs_status_t unpacked = ucp_ep_rkey_unpack(*ep, keys[k].data, &rkey);

        ok = unpacked == UCS_OK;
        if (ok) {
            ucp_rkey_destroy(rkey);
        } else {
            fprintf(stderr, "weft-ucx-sandbox: key %u: %s\n", k, ucs_status_string(unpacked));
        }
    }
    return ok ? 0 : -1;
}

/*
 * The endpoints' connections run for SETTLE_NS before they close: an
 * address may name a TCP port where something other than a UCX worker
 * answers (a forged one did: an HTTP server's "HTTP/1.1 400" reply made
 * UCX 1.13 assert in its connection handshake, tcp_ep.c "hdr->length <=
 * rx_seg_size"), and that answer has to arrive here, not in the server.
 * A peer that answers later than this still reaches the server's UCX.
 */
#define SETTLE_NS UINT64_C(200000000)

static void settle_and_close(weft_ucx_t *ucx, ucp_ep_h *eps, uint32_t count)
{
    const uint64_t      until = weft_time_ns() + SETTLE_NS;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};

    while (weft_time_ns() < until) {
        if (!weft_ucx_progress(ucx)) {
            usleep(1000);
        }
    }
    for (uint32_t i = 0; i < count; i++) {
        ucs_status_ptr_t closing = eps[i] != NULL ? ucp_ep_close_nbx(eps[i], &param) : NULL;

        if (closing != NULL && !UCS_PTR_IS_ERR(closing)) {
            for (int spins = 0; spins < 100000 && ucp_request_check_status(closing) == UCS_INPROGRESS; spins++) {
                ucp_worker_progress(ucx->worker);
            }
            ucp_request_free(closing);
        }
    }
}

int weft_ucx_sandbox_main(void)
{
    size_t            length = 0;
    uint8_t          *request = read_request(&length);
    weft_ctl_cursor_t cur = {.data = request, .length = length};
    weft_ucx_blob_t  *blobs[2] = {NULL, NULL};
    uint32_t          counts[2] = {0, 0};
    weft_ucx_t        ucx;
    ucp_ep_h         *eps = NULL;
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
    if (weft_ucx_open_checker(&ucx, "sandbox") != WEFT_OK) {
        goto out;
    }
    eps = calloc(counts[0] + 1, sizeof(*eps));
    rc = eps != NULL ? 0 : 2;
    for (uint32_t a = 0; a < counts[0] && rc == 0; a++) {
        rc = try_address(&ucx, blobs[0][a].data, blobs[1], counts[1], &eps[a]) == 0 ? 0 : 3;
    }
    if (eps != NULL) {
        settle_and_close(&ucx, eps, counts[0]);
    }
    free(eps);
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
