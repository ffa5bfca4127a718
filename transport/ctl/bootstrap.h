/*
 * The bootstrap connection between a server (the trainer's node) and a
 * remote consumer: one TCP connection per consumer that carries the
 * handshake (proofs of a shared token, the transport's addresses and keys, the
 * consumer's views), then the per-version notifications and acks. Bytes
 * themselves never go through it. Shared by the ucx and nccl transports;
 * knows nothing of either. Internal.
 *
 * Messages are framed: a 16-byte header (magic "WEFB", type, payload
 * length, reserved), then the payload. Integers are little-endian.
 * Every call takes a deadline (weft_time_ns() clock) and fails with
 * WEFT_ERR_TIMEOUT past it, WEFT_ERR_CONNECTION when the peer closed or
 * the network failed.
 */
#ifndef WEFT_TRANSPORT_CTL_BOOTSTRAP_H
#define WEFT_TRANSPORT_CTL_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>
#include <weft/weft.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_CTL_MAX_PAYLOAD (UINT32_C(64) << 20) /* a handshake with many views fits */

typedef enum weft_ctl_type {
    WEFT_CTL_HELLO    = 1, /* consumer → server: protocol, nonce, name (ctl/auth.h) */
    WEFT_CTL_WELCOME  = 2, /* server → consumer: proof accepted; server's transport address */
    WEFT_CTL_VIEWS    = 3, /* consumer → server: its views, memory keys, transport address */
    WEFT_CTL_READY    = 4, /* server → consumer: plan built, consumer registered */
    WEFT_CTL_REFUSED  = 5, /* either way: a status and a reason; the connection ends */
    WEFT_CTL_VERSION  = 6, /* server → consumer: every byte of version v has landed */
    WEFT_CTL_ACK      = 7, /* consumer → server: version v received */
    WEFT_CTL_FAILED   = 8, /* server → consumer: version v failed for you (status) */
    WEFT_CTL_BYE      = 9, /* consumer → server: leaving on purpose */
    WEFT_CTL_WANT     = 10, /* consumer → server: write a version newer than v now (cuda_ipc push) */
    WEFT_CTL_ROUND    = 11, /* server → consumer: a round of v is in its staging ring (ucx) */
    WEFT_CTL_ROUND_DONE = 12, /* consumer → server: that round was copied out of the ring (ucx) */
    WEFT_CTL_SENDING  = 13, /* server → consumer: the puts of v have begun; its notice is near (ucx) */
    WEFT_CTL_CHALLENGE = 14, /* server → consumer: its nonce and its proof of the token */
    WEFT_CTL_PROOF    = 15, /* consumer → server: the consumer's proof of the token */
    WEFT_CTL_DELTA    = 16, /* server → consumer: v came as a delta into its inbox: the map (ucx) */
    /* consumer → server: v's delta did not check out; send v whole (ucx).
     * u64 v, u32 flags (bit 0: a WT's view patched by its W's delta). */
    WEFT_CTL_REDO     = 17,
    WEFT_CTL_SENT     = 18  /* server → consumer: bytes delivered as active messages in all (ucx) */
} weft_ctl_type_t;

/* A set of message types, for calls that take several. */
#define WEFT_CTL_TYPE_BIT(type) (UINT32_C(1) << (type))

typedef struct weft_ctl_msg {
    uint32_t type;
    uint32_t length;
    uint8_t *payload; /* malloc'd by recv; the caller frees it */
} weft_ctl_msg_t;

/* Parses "host:port" (an IPv4 address or a name; "[v6]:port" too).
 * WEFT_ERR_INVALID_PARAM with a log line when malformed. */
weft_status_t weft_ctl_parse_addr(const char *text, char *host, size_t host_size, uint16_t *port);

/* Listens on host:port (port 0: any; the port is written back). */
weft_status_t weft_ctl_listen(const char *addr, int *fd, uint16_t *port);

/* Accepts one connection if one is waiting (the listening socket is
 * non-blocking): *fd = -1 when none. WEFT_ERR_NO_SPACE, not logged, when
 * the process or system is out of descriptors or memory for it. */
weft_status_t weft_ctl_accept(int listen_fd, int *fd, char *peer, size_t peer_size);

/* Connects to host:port before the deadline. */
weft_status_t weft_ctl_connect(const char *addr, uint64_t deadline_ns, int *fd);

/*
 * Makes the kernel give up on the connection about timeout_us after its
 * peer stops answering, even while neither side has anything to say: TCP
 * keepalive probes from a third of the timeout on (at least a second),
 * and TCP_USER_TIMEOUT, after which unanswered data or probes end it. A
 * peer whose link or host went away then shows as an error on fd within
 * about 1.3 × timeout_us, where Linux's defaults take hours for an idle
 * connection. A peer that is alive answers the probes from its kernel, so
 * an engine busy elsewhere keeps its connection. Failures are logged at
 * debug level and otherwise ignored: the connection works without it.
 */
void weft_ctl_dead_peer_timeout(int fd, uint64_t timeout_us);

/* Sends one message, whole. */
weft_status_t weft_ctl_send(int fd, uint32_t type, const void *payload, uint32_t length,
                             uint64_t deadline_ns);

/* Receives one message, whole. The payload is NUL-terminated one byte past
 * its length, for text. */
weft_status_t weft_ctl_recv(int fd, weft_ctl_msg_t *msg, uint64_t deadline_ns);

/* The same; when it fails because the peer closed its end (its FIN or
 * its reset came: its socket is gone), also sets *peer_closed to 1. A
 * peer that went silent (the keepalive's or the deadline's verdict) leaves
 * it as it was. */
weft_status_t weft_ctl_recv_closed(int fd, weft_ctl_msg_t *msg, uint64_t deadline_ns,
                                    int *peer_closed);

/*
 * A message read piece by piece, for a thread that serves many peers and
 * must never wait for one: whatever arrived is kept until the message is
 * whole. Zero-initialized to start.
 */
typedef struct weft_ctl_reader {
    uint8_t  header[16];
    uint32_t have; /* bytes of the header, then of the payload, read so far */
    uint32_t type, length;
    uint8_t *payload;
} weft_ctl_reader_t;

/*
 * Reads what fd holds now, without waiting. WEFT_OK with *msg when a
 * message is whole (the caller frees its payload; the reader starts
 * over); WEFT_INPROGRESS when more must come; WEFT_ERR_CORRUPT for a bad
 * header or a payload longer than max_payload (refused before anything
 * is allocated for it); WEFT_ERR_CONNECTION when the peer closed
 * (*peer_closed set) or the socket failed; WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_ctl_read_some(int fd, weft_ctl_reader_t *r, uint32_t max_payload, weft_ctl_msg_t *msg,
                                  int *peer_closed);

/* Frees what a reader holds of a message not yet whole. */
void weft_ctl_reader_free(weft_ctl_reader_t *r);

/* 1 when a message (or the peer's close) is waiting on fd. */
int weft_ctl_readable(int fd);

/* 1 when the peer closed its side of fd (or the connection failed), also
 * with messages it sent before still unread; 0 otherwise. Reads nothing. */
int weft_ctl_closed(int fd);

/* A growing buffer for building payloads, and a cursor for reading them. */
typedef struct weft_ctl_buf {
    uint8_t *data;
    size_t   length, capacity;
    int      failed; /* an allocation failed: the buffer is unusable */
} weft_ctl_buf_t;

void weft_ctl_put(weft_ctl_buf_t *buf, const void *bytes, size_t length);
void weft_ctl_put_u32(weft_ctl_buf_t *buf, uint32_t value);
void weft_ctl_put_u64(weft_ctl_buf_t *buf, uint64_t value);
void weft_ctl_put_str(weft_ctl_buf_t *buf, const char *text); /* u32 length + bytes */
void weft_ctl_put_blob(weft_ctl_buf_t *buf, const void *bytes, uint32_t length);
void weft_ctl_buf_free(weft_ctl_buf_t *buf);

typedef struct weft_ctl_cursor {
    const uint8_t *data;
    size_t         length, at;
    int            failed; /* read past the end, or a bad string */
} weft_ctl_cursor_t;

uint32_t    weft_ctl_get_u32(weft_ctl_cursor_t *cur);
uint64_t    weft_ctl_get_u64(weft_ctl_cursor_t *cur);
/* A string of at most max-1 bytes, copied NUL-terminated into out. */
void        weft_ctl_get_str(weft_ctl_cursor_t *cur, char *out, size_t max);
/* A blob: points into the payload; *length its size. */
const void *weft_ctl_get_blob(weft_ctl_cursor_t *cur, uint32_t *length);

#ifdef __cplusplus
}
#endif

#endif
