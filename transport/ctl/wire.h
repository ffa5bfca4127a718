/*
 * The transport-neutral payloads of the bootstrap messages between a
 * server and a remote consumer, shared by every transport across nodes
 * (ucx, nccl). Internal.
 *
 * HELLO:   u32 protocol (the transport's: a consumer of another transport
 *          is refused), blob nonce (32 bytes), str name.
 * CHALLENGE: blob nonce (32 bytes), blob MAC (32 bytes).  PROOF: blob MAC.
 *          The MACs and why: ctl/auth.h. The token never crosses.
 * REFUSED: u32 status (negative, as int32), str reason.
 * VERSION: u64 version, then (verified versions) u32 count, and per view
 *          of the consumer's, in its order: u32 known (1: the view holds
 *          its tensor verbatim and the sum is that tensor's checksum in
 *          this version), u64 sum. count 0 (or nothing, from an older
 *          server): no checksums.
 * ACK: u64 version.  FAILED: u64 version, u32 status.
 * WANT: u64 after, then (delta versions) u64 holds: the version the
 *          consumer's views hold verbatim, 0 when none it can vouch for.
 * DELTA: u64 version, u64 base (the version the delta applies to), u32
 *          count, and per view of the consumer's, in its order: u32 kind
 *          (WEFT_WIRE_DELTA_*), u64 offset into the consumer's inbox, u64
 *          bytes, u64 rows, u64 cols, u64 checksum (the last three for
 *          PATCH_T, 0 otherwise). Sent just before the VERSION it applies
 *          to.
 * Views (inside each transport's VIEWS): u32 count, then per view str
 *          name, u32 role, u32 dtype, u32 ndim, 4 × u64 shape, 4 × u64
 *          strides (elements, explicit even when contiguous), u64 address.
 * What else a transport's WELCOME, VIEWS and READY carry is described in
 * its own header.
 */
#ifndef WEFT_TRANSPORT_CTL_WIRE_H
#define WEFT_TRANSPORT_CTL_WIRE_H

#include "transport/ctl/auth.h"
#include "transport/ctl/bootstrap.h"

#include <stddef.h>
#include <stdint.h>
#include <weft/transport.h>

void weft_wire_put_hello(weft_ctl_buf_t *buf, uint32_t protocol, const uint8_t *nonce, const char *name);

/*
 * Reads a HELLO and checks it: WEFT_ERR_CORRUPT (malformed),
 * WEFT_ERR_VERSION (another protocol or transport). nonce gets the
 * consumer's nonce (WEFT_AUTH_NONCE_BYTES), name its name
 * (name[WEFT_CONSUMER_NAME_MAX]; control characters made '?', for the
 * logs it goes to). *reason says why, for the refusal.
 */
weft_status_t weft_wire_check_hello(const weft_ctl_msg_t *msg, uint32_t protocol, uint8_t *nonce, char *name,
                                    const char **reason);

/* Reads a CHALLENGE (nonce and MAC, copied out) or a PROOF (nonce NULL):
 * WEFT_ERR_CORRUPT when it is not one, or malformed. */
weft_status_t weft_wire_get_auth(const weft_ctl_msg_t *msg, uint8_t *nonce, uint8_t *mac);

/* Sends REFUSED, sealed when the session is on (weft_auth_send). */
weft_status_t weft_wire_send_refused(int fd, weft_auth_session_t *session, weft_status_t status,
                                     const char *reason, uint64_t deadline_ns);

/* Reads a REFUSED payload: its status, and the reason into reason[size]. */
weft_status_t weft_wire_parse_refused(const weft_ctl_msg_t *msg, char *reason, size_t size);

/* Sends a message whose payload is one u64, sealed (weft_auth_send). */
weft_status_t weft_wire_send_u64(int fd, weft_auth_session_t *session, uint32_t type, uint64_t value,
                                 uint64_t deadline_ns);

/* WANT(after, holds). */
weft_status_t weft_wire_send_want(int fd, weft_auth_session_t *session, uint64_t after, uint64_t holds,
                                  uint64_t deadline_ns);

/* Reads a WANT: *holds 0 when it carries none. WEFT_ERR_CORRUPT. */
weft_status_t weft_wire_get_want(const weft_ctl_msg_t *msg, uint64_t *after, uint64_t *holds);

/* How one view's part of a delta version lies in the inbox. */
enum {
    WEFT_WIRE_DELTA_PATCH = 1, /* a delta of the tensor (<weft/delta.h>) to apply to the base's bytes */
    WEFT_WIRE_DELTA_WHOLE = 2, /* the tensor's bytes, whole (its delta was no smaller) */
    /* A WT's: its W's delta, applied transposed (<weft/delta.h>'s
     * transposed targets: W's matrices rows × cols), then checked
     * against `checksum`, WT's own (the delta carries W's). */
    WEFT_WIRE_DELTA_PATCH_T = 3
};

typedef struct weft_wire_delta_entry {
    uint32_t kind;
    uint64_t offset, bytes;           /* in the inbox */
    uint64_t rows, cols, checksum;    /* PATCH_T */
    /* Not on the wire: set by the server where this view's bytes are view
     * shared_view's (a WT patched by its W's delta, wherever the W view
     * lies among the consumer's views): put once, at one place in the
     * inbox. */
    uint32_t shares, shared_view;
} weft_wire_delta_entry_t;

void weft_wire_put_delta(weft_ctl_buf_t *buf, uint64_t version, uint64_t base,
                         const weft_wire_delta_entry_t *entries, uint32_t count);

/*
 * Reads a DELTA: the entries into *entries (malloc'd, count of them; the
 * caller frees). Checked here: the kinds, and each entry inside
 * [0, inbox_bytes). WEFT_ERR_CORRUPT (a count the message cannot hold is
 * refused before anything is allocated), WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_wire_get_delta(const weft_ctl_msg_t *msg, uint64_t inbox_bytes, uint64_t *version,
                                  uint64_t *base, weft_wire_delta_entry_t **entries, uint32_t *count);

/* A VERSION's checksums, per view of the consumer's (count 0: none). */
typedef struct weft_wire_sums {
    uint32_t  count;
    uint8_t  *known; /* malloc'd, count entries */
    uint64_t *sums;  /* malloc'd, count entries */
} weft_wire_sums_t;

void weft_wire_put_version(weft_ctl_buf_t *buf, uint64_t version, const weft_wire_sums_t *sums);

/*
 * Reads a VERSION: *version, and its checksums into *sums (freed and
 * replaced; count 0 when it has none). WEFT_ERR_CORRUPT when malformed
 * (a count the message cannot hold is refused before anything is
 * allocated), WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_wire_get_version(const weft_ctl_msg_t *msg, uint64_t *version, weft_wire_sums_t *sums);

void weft_wire_sums_free(weft_wire_sums_t *sums);

/* Appends views (count ≥ 1) in the encoding above. */
void weft_wire_put_views(weft_ctl_buf_t *buf, const weft_recv_view_t *views, size_t count);

/*
 * Reads views into *views (calloc'd, with WEFT_RECV_VIEW_FIELD_STRIDES and,
 * when memory is not WEFT_MEMORY_HOST, WEFT_RECV_VIEW_FIELD_MEMORY set);
 * their names point into *names (calloc'd). The caller frees both.
 * The addresses are the consumer's: never dereferenced here.
 * WEFT_ERR_CORRUPT, WEFT_ERR_NO_MEMORY.
 */
weft_status_t weft_wire_get_views(weft_ctl_cursor_t *cur, weft_memory_kind_t memory,
                                  weft_recv_view_t **views,
                                  char (**names)[WEFT_TENSOR_NAME_MAX], uint32_t *count);

/* A stretch of a consumer's receive memory. */
typedef struct weft_wire_span {
    uint64_t base, bytes;
} weft_wire_span_t;

/*
 * The byte spans of views, sorted and merged where they touch or overlap:
 * what a consumer registers, or checks the server's ranges against. Empty
 * views add nothing. *spans is malloc'd (at least one entry's room).
 */
weft_status_t weft_wire_view_spans(const weft_recv_view_t *views, size_t count,
                                   weft_wire_span_t **spans, uint32_t *span_count);

/* The span holding [addr, addr + bytes), or NULL. */
const weft_wire_span_t *weft_wire_span_find(const weft_wire_span_t *spans, uint32_t count,
                                            uint64_t addr, uint64_t bytes);

#endif
