/* The bootstrap connection: TCP sockets, framed messages, payload codec. */
#include "config.h"

#include "transport/ctl/bootstrap.h"

#include "common/log.h"
#include "common/time_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BOOT_MAGIC 0x42464557u /* "WEFB" little-endian */

typedef struct boot_header {
    uint32_t magic;
    uint32_t type;
    uint32_t length;
    uint32_t reserved;
} boot_header_t;

_Static_assert(sizeof(boot_header_t) == 16, "the header is 16 bytes (weft_ctl_reader_t)");

weft_status_t weft_ctl_parse_addr(const char *text, char *host, size_t host_size, uint16_t *port)
{
    const char   *colon;
    size_t        host_len;
    char         *end;
    unsigned long value;

    if (text == NULL || (colon = strrchr(text, ':')) == NULL || colon == text) {
        weft_log_error("bootstrap: address \"%s\" is not host:port", text ? text : "(null)");
        return WEFT_ERR_INVALID_PARAM;
    }
    host_len = (size_t)(colon - text);
    if (text[0] == '[' && host_len >= 2 && text[host_len - 1] == ']') {
        text++;
        host_len -= 2;
    }
    if (host_len == 0 || host_len >= host_size) {
        weft_log_error("bootstrap: host of \"%s\" is empty or too long", text);
        return WEFT_ERR_INVALID_PARAM;
    }
    errno = 0;
    value = strtoul(colon + 1, &end, 10);
    if (errno != 0 || end == colon + 1 || *end != '\0' || value > 65535) {
        weft_log_error("bootstrap: port of \"%s\" is not 0..65535", text);
        return WEFT_ERR_INVALID_PARAM;
    }
    memcpy(host, text, host_len);
    host[host_len] = '\0';
    *port = (uint16_t)value;
    return WEFT_OK;
}

static weft_status_t resolve(const char *addr, int passive, struct addrinfo **out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char            host[256], service[8];
    uint16_t        port;
    weft_status_t   status;
    int             rc;

    status = weft_ctl_parse_addr(addr, host, sizeof(host), &port);
    if (status != WEFT_OK) {
        return status;
    }
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    snprintf(service, sizeof(service), "%u", port);
    rc = getaddrinfo(host, service, &hints, out);
    if (rc != 0) {
        weft_log_error("bootstrap: cannot resolve \"%s\": %s", addr, gai_strerror(rc));
        return WEFT_ERR_NOT_FOUND;
    }
    return WEFT_OK;
}

static void socket_options(int fd)
{
    int one = 1;

    /* Notifications are small and latency-bound. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

void weft_ctl_dead_peer_timeout(int fd, uint64_t timeout_us)
{
    const uint64_t ms = timeout_us / 1000 < INT_MAX ? timeout_us / 1000 : INT_MAX;
    const uint64_t third_s = ms / 3000;
    int            idle = third_s < 1 ? 1 : third_s > 32767 ? 32767 : (int)third_s; /* the kernel's bound */
    int            count = 3;
    unsigned int   user_timeout = ms > 0 ? (unsigned int)ms : 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout)) != 0) {
        weft_log_debug("bootstrap: cannot bound the wait for a dead peer: %s", strerror(errno));
    }
}

static int set_nonblocking(int fd)
{
    int flags = fcntl(fd, F_GETFL, 0);

    return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

weft_status_t weft_ctl_listen(const char *addr, int *fd_out, uint16_t *port)
{
    struct addrinfo *res, *ai;
    weft_status_t    status;
    int              fd = -1, one = 1, err = 0;

    status = resolve(addr, 1, &res);
    if (status != WEFT_OK) {
        return status;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0 &&
            set_nonblocking(fd) == 0) {
            break;
        }
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        weft_log_error("bootstrap: cannot listen on %s: %s", addr, strerror(err));
        return err == EADDRINUSE ? WEFT_ERR_BUSY
               : err == EACCES   ? WEFT_ERR_PERMISSION
                                 : WEFT_ERR_IO;
    }
    {
        struct sockaddr_storage ss;
        socklen_t               len = sizeof(ss);

        if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
            *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
        }
    }
    *fd_out = fd;
    return WEFT_OK;
}

weft_status_t weft_ctl_accept(int listen_fd, int *fd_out, char *peer, size_t peer_size)
{
    struct sockaddr_storage ss;
    socklen_t               len = sizeof(ss);
    int                     fd = accept4(listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
    char                    host[INET6_ADDRSTRLEN] = "?";

    *fd_out = -1;
    if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
            return WEFT_OK;
        }
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            return WEFT_ERR_NO_SPACE; /* the caller backs off and says so, not once a call */
        }
        weft_log_error("bootstrap: accept failed: %s", strerror(errno));
        return WEFT_ERR_IO;
    }
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof(host));
    } else if (ss.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host, sizeof(host));
    }
    snprintf(peer, peer_size, "%s", host);
    socket_options(fd);
    if (set_nonblocking(fd) != 0) {
        close(fd);
        return WEFT_ERR_IO;
    }
    *fd_out = fd;
    return WEFT_OK;
}

/* Waits for fd to be ready for `events` until the deadline. */
static weft_status_t wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = events};
        uint64_t      now = weft_time_ns();
        int           ms, rc;

        if (now >= deadline_ns) {
            return WEFT_ERR_TIMEOUT;
        }
        ms = (deadline_ns - now) / 1000000u > 1000 ? 1000 : (int)((deadline_ns - now + 999999u) / 1000000u);
        rc = poll(&pfd, 1, ms);
        if (rc > 0) {
            return WEFT_OK;
        }
        if (rc < 0 && errno != EINTR) {
            return WEFT_ERR_IO;
        }
    }
}

weft_status_t weft_ctl_connect(const char *addr, uint64_t deadline_ns, int *fd_out)
{
    struct addrinfo *res, *ai;
    weft_status_t    status = WEFT_ERR_CONNECTION;
    int              fd = -1, err = ECONNREFUSED;

    status = resolve(addr, 0, &res);
    if (status != WEFT_OK) {
        return status;
    }
    status = WEFT_ERR_CONNECTION;
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        socklen_t len = sizeof(err);

        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0 || set_nonblocking(fd) != 0) {
            err = errno;
            goto next;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            break;
        }
        if (errno != EINPROGRESS) {
            err = errno;
            goto next;
        }
        status = wait_fd(fd, POLLOUT, deadline_ns);
        if (status == WEFT_ERR_TIMEOUT) {
            err = ETIMEDOUT;
            goto next;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
            break;
        }
    next:
        if (fd >= 0) {
            close(fd);
        }
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        weft_log_error("bootstrap: cannot connect to %s: %s", addr, strerror(err));
        return err == ETIMEDOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_CONNECTION;
    }
    socket_options(fd);
    *fd_out = fd;
    return WEFT_OK;
}

static weft_status_t send_all(int fd, const uint8_t *p, size_t n, uint64_t deadline_ns)
{
    while (n > 0) {
        ssize_t sent = send(fd, p, n, MSG_NOSIGNAL);

        if (sent > 0) {
            p += sent;
            n -= (size_t)sent;
            continue;
        }
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            weft_status_t status = wait_fd(fd, POLLOUT, deadline_ns);
            if (status != WEFT_OK) {
                return status;
            }
            continue;
        }
        return WEFT_ERR_CONNECTION;
    }
    return WEFT_OK;
}

static weft_status_t recv_all(int fd, uint8_t *p, size_t n, uint64_t deadline_ns, int *peer_closed)
{
    while (n > 0) {
        ssize_t got = recv(fd, p, n, 0);

        if (got > 0) {
            p += got;
            n -= (size_t)got;
            continue;
        }
        if (got == 0 || errno == ECONNRESET) {
            *peer_closed = 1;
            return WEFT_ERR_CONNECTION;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            weft_status_t status = wait_fd(fd, POLLIN, deadline_ns);
            if (status != WEFT_OK) {
                return status;
            }
            continue;
        }
        return WEFT_ERR_CONNECTION;
    }
    return WEFT_OK;
}

weft_status_t weft_ctl_send(int fd, uint32_t type, const void *payload, uint32_t length,
                             uint64_t deadline_ns)
{
    boot_header_t h = {.magic = BOOT_MAGIC, .type = type, .length = length};
    weft_status_t status;

    if (length > WEFT_CTL_MAX_PAYLOAD) {
        return WEFT_ERR_INVALID_PARAM;
    }
    status = send_all(fd, (const uint8_t *)&h, sizeof(h), deadline_ns);
    if (status == WEFT_OK && length > 0) {
        status = send_all(fd, payload, length, deadline_ns);
    }
    return status;
}

weft_status_t weft_ctl_recv(int fd, weft_ctl_msg_t *msg, uint64_t deadline_ns)
{
    int peer_closed = 0;

    return weft_ctl_recv_closed(fd, msg, deadline_ns, &peer_closed);
}

weft_status_t weft_ctl_recv_closed(int fd, weft_ctl_msg_t *msg, uint64_t deadline_ns,
                                    int *peer_closed)
{
    boot_header_t h;
    weft_status_t status;

    msg->payload = NULL;
    status = recv_all(fd, (uint8_t *)&h, sizeof(h), deadline_ns, peer_closed);
    if (status != WEFT_OK) {
        return status;
    }
    if (h.magic != BOOT_MAGIC || h.length > WEFT_CTL_MAX_PAYLOAD) {
        weft_log_error("bootstrap: a message with a bad header (magic 0x%08x, %u bytes): not a "
                       "libweft peer",
                       h.magic, h.length);
        return WEFT_ERR_CORRUPT;
    }
    msg->payload = malloc((size_t)h.length + 1);
    if (msg->payload == NULL) {
        return WEFT_ERR_NO_MEMORY;
    }
    status = recv_all(fd, msg->payload, h.length, deadline_ns, peer_closed);
    if (status != WEFT_OK) {
        free(msg->payload);
        msg->payload = NULL;
        return status;
    }
    msg->payload[h.length] = 0;
    msg->type = h.type;
    msg->length = h.length;
    return WEFT_OK;
}

weft_status_t weft_ctl_read_some(int fd, weft_ctl_reader_t *r, uint32_t max_payload, weft_ctl_msg_t *msg,
                                  int *peer_closed)
{
    for (;;) {
        const int in_header = r->have < sizeof(boot_header_t);
        uint8_t  *to = in_header ? r->header + r->have : r->payload + (r->have - sizeof(boot_header_t));
        size_t    want = in_header ? sizeof(boot_header_t) - r->have
                                   : (size_t)r->length - (r->have - sizeof(boot_header_t));
        ssize_t   got;

        if (!in_header && want == 0) {
            /* Whole: handed over, and the reader is empty again. */
            r->payload[r->length] = 0;
            msg->type = r->type;
            msg->length = r->length;
            msg->payload = r->payload;
            *r = (weft_ctl_reader_t){0};
            return WEFT_OK;
        }
        got = recv(fd, to, want, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno == ECONNRESET)) {
            *peer_closed = 1;
            return WEFT_ERR_CONNECTION;
        }
        if (got < 0) {
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? WEFT_INPROGRESS
                                                                             : WEFT_ERR_CONNECTION;
        }
        r->have += (uint32_t)got;
        if (in_header && r->have == sizeof(boot_header_t)) {
            boot_header_t h;
            memcpy(&h, r->header, sizeof(h));
            /* The length is checked before anything is allocated for it. */
            if (h.magic != BOOT_MAGIC || h.length > max_payload) {
                weft_log_warn("bootstrap: a message with a bad header (magic 0x%08x, %u bytes, at most %u "
                              "here): not a libweft peer, or not yet allowed that much",
                              h.magic, h.length, max_payload);
                return WEFT_ERR_CORRUPT;
            }
            r->type = h.type;
            r->length = h.length;
            r->payload = malloc((size_t)h.length + 1);
            if (r->payload == NULL) {
                return WEFT_ERR_NO_MEMORY;
            }
        }
    }
}

void weft_ctl_reader_free(weft_ctl_reader_t *r)
{
    free(r->payload);
    *r = (weft_ctl_reader_t){0};
}

int weft_ctl_readable(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    return poll(&pfd, 1, 0) > 0;
}

int weft_ctl_closed(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};

    if (poll(&pfd, 1, 0) <= 0) {
        return 0;
    }
    /* The peer shut its side (or the connection failed), whatever it
     * sent before that is still unread. */
    return (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* ---------------------------------------------------------------- codec */

void weft_ctl_put(weft_ctl_buf_t *buf, const void *bytes, size_t length)
{
    if (buf->failed) {
        return;
    }
    if (buf->length + length > buf->capacity) {
        size_t   capacity = buf->capacity ? buf->capacity : 256;
        uint8_t *data;

        while (capacity < buf->length + length) {
            capacity *= 2;
        }
        data = realloc(buf->data, capacity);
        if (data == NULL) {
            buf->failed = 1;
            return;
        }
        buf->data = data;
        buf->capacity = capacity;
    }
    memcpy(buf->data + buf->length, bytes, length);
    buf->length += length;
}

void weft_ctl_put_u32(weft_ctl_buf_t *buf, uint32_t value)
{
    weft_ctl_put(buf, &value, sizeof(value));
}

void weft_ctl_put_u64(weft_ctl_buf_t *buf, uint64_t value)
{
    weft_ctl_put(buf, &value, sizeof(value));
}

void weft_ctl_put_blob(weft_ctl_buf_t *buf, const void *bytes, uint32_t length)
{
    weft_ctl_put_u32(buf, length);
    weft_ctl_put(buf, bytes, length);
}

void weft_ctl_put_str(weft_ctl_buf_t *buf, const char *text)
{
    weft_ctl_put_blob(buf, text, (uint32_t)strlen(text));
}

void weft_ctl_buf_free(weft_ctl_buf_t *buf)
{
    free(buf->data);
    *buf = (weft_ctl_buf_t){0};
}

static const uint8_t *cursor_take(weft_ctl_cursor_t *cur, size_t n)
{
    const uint8_t *p;

    if (cur->failed || cur->length - cur->at < n) {
        cur->failed = 1;
        return NULL;
    }
    p = cur->data + cur->at;
    cur->at += n;
    return p;
}

uint32_t weft_ctl_get_u32(weft_ctl_cursor_t *cur)
{
    const uint8_t *p = cursor_take(cur, 4);
    uint32_t       v = 0;

    if (p != NULL) {
        memcpy(&v, p, 4);
    }
    return v;
}

uint64_t weft_ctl_get_u64(weft_ctl_cursor_t *cur)
{
    const uint8_t *p = cursor_take(cur, 8);
    uint64_t       v = 0;

    if (p != NULL) {
        memcpy(&v, p, 8);
    }
    return v;
}

const void *weft_ctl_get_blob(weft_ctl_cursor_t *cur, uint32_t *length)
{
    *length = weft_ctl_get_u32(cur);
    return cursor_take(cur, *length);
}

void weft_ctl_get_str(weft_ctl_cursor_t *cur, char *out, size_t max)
{
    uint32_t    length;
    const void *p = weft_ctl_get_blob(cur, &length);

    out[0] = '\0';
    if (p == NULL || length >= max || memchr(p, '\0', length) != NULL) {
        cur->failed = 1;
        return;
    }
    memcpy(out, p, length);
    out[length] = '\0';
}
