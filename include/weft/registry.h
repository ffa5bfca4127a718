/*
 * The versioned shared-memory registry.
 *
 * A producer (the trainer) publishes complete versions of a fixed set of
 * tensors (the expert matrices W, WT and their block scales); any number of
 * consumer processes on the node read them and never see a torn version.
 *
 *   producer                                consumer
 *   --------                                --------
 *   weft_registry_create(name)              weft_registry_open(name, READ)
 *   weft_registry_declare(tensor) × N       weft_registry_lookup(tensor name)
 *   weft_registry_seal()                    weft_registry_consumer_register()
 *   loop:                                   loop:
 *     weft_registry_write_begin()             weft_registry_wait(after v)  → lease
 *     weft_registry_write_tensor() × N        weft_registry_lease_tensor() × N, copy
 *       … write the bytes …                   weft_registry_release(lease)
 *     weft_registry_publish(v)  ──wake──►     weft_registry_consumer_received(v)
 *   weft_registry_wait_consumers(v)
 *
 * The segment holds K ≥ 2 slots (default 3); each slot holds every tensor at
 * the same offset. A slot's tensors live in one arena: in the shared-memory
 * segment (host registries), or in one device allocation per slot on one
 * GPU (GPU registries, WEFT_MEMORY_CUDA), exported once through CUDA IPC so
 * that any process of the node can map it; see "GPU registries" below. Publishing makes a slot the latest version in one atomic
 * store. Readers take a lease on the slot they read; the producer never
 * writes into a leased slot. Leases of processes that died are reclaimed.
 * The segment layout and the protocol are described in registry/PROTOCOL.md.
 *
 * Threads: a handle may be shared by the threads of a process. The producer
 * calls (declare, seal, write_*, publish) must come from one thread at a
 * time; acquire, wait, lease_tensor and release may be called concurrently.
 * Processes: handles do not survive fork(); open the registry again.
 * Errors are logged with the registry's name (WEFT_LOG_LEVEL).
 */
#ifndef WEFT_REGISTRY_H
#define WEFT_REGISTRY_H

#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_REGISTRY_NAME_MAX 64  /* bytes, with the NUL */
#define WEFT_TENSOR_NAME_MAX   128 /* bytes, with the NUL */
#define WEFT_TENSOR_MAX_DIMS   4
#define WEFT_CONSUMER_NAME_MAX 64  /* bytes, with the NUL */

/* What a tensor holds for its expert matrix. */
typedef enum weft_tensor_role {
    WEFT_ROLE_W     = 1, /* the matrix, [N, K] */
    WEFT_ROLE_WT    = 2, /* its transpose, [K, N] */
    WEFT_ROLE_SCALE = 3  /* the block scales of W, [⌈N/b⌉, ⌈K/b⌉] */
} weft_tensor_role_t;

/* Where a tensor's bytes live. */
typedef enum weft_memory_kind {
    WEFT_MEMORY_HOST = 1, /* host memory (the registry's shared memory, or a host view) */
    WEFT_MEMORY_CUDA = 2  /* device memory of one GPU */
} weft_memory_kind_t;

/* ---------------------------------------------------------------- create */

enum weft_registry_params_field {
    WEFT_REGISTRY_FIELD_SLOTS         = 1u << 0,
    WEFT_REGISTRY_FIELD_MAX_TENSORS   = 1u << 1,
    WEFT_REGISTRY_FIELD_MAX_LEASES    = 1u << 2,
    WEFT_REGISTRY_FIELD_MAX_CONSUMERS = 1u << 3,
    WEFT_REGISTRY_FIELD_MODE          = 1u << 4,
    WEFT_REGISTRY_FIELD_GROUP         = 1u << 5,
    WEFT_REGISTRY_FIELD_MEMORY        = 1u << 6, /* memory and device */
    WEFT_REGISTRY_FIELD_CHECKSUMS     = 1u << 7
};

typedef struct weft_registry_params {
    uint64_t field_mask;     /* which fields below are set; others take defaults */
    uint32_t slot_count;     /* versions held at once, 2..16; default 3 */
    uint32_t max_tensors;    /* 1..1048576; default 8192 */
    uint32_t max_leases;     /* leases held at once, all readers; 1..65536; default 1024 */
    uint32_t max_consumers;  /* 1..4096; default 256 */
    uint32_t mode;           /* permission bits: owner rw, none for others to write; default 0600 */
    uint32_t group;          /* group id to give the segment (with mode 0660, say) */
    /* Where the slots' arenas live: WEFT_MEMORY_HOST (default) or
     * WEFT_MEMORY_CUDA on GPU `device` (an ordinal of the calling
     * process). Every tensor of the registry lives there. */
    weft_memory_kind_t memory;
    int32_t            device;
    /* 1: every version carries a checksum of each of its tensors
     * (<weft/checksum.h>'s), computed by weft_registry_publish, that
     * readers check with weft_registry_verify; 0 (default): none. The
     * sums cost a pass over the version at publish: on the CPU for host
     * registries (a few GB/s), on the arena's GPU for GPU registries. */
    uint32_t           checksums;
} weft_registry_params_t;

/*
 * Creates the registry `name` ([A-Za-z0-9._-], 1 to 63 bytes, not "." or
 * ".."): a POSIX
 * shared-memory segment "/weft.<name>", owned by the calling process as its
 * producer. The registry is in the declaring state: declare tensors, then
 * seal. params may be NULL for all defaults.
 * Errors: WEFT_ERR_INVALID_PARAM (name, an unknown field_mask bit, a value
 * out of range), WEFT_ERR_EXISTS (the name is taken: unlink it first, or
 * open it as producer to take it over), WEFT_ERR_PERMISSION, WEFT_ERR_IO,
 * WEFT_ERR_UNSUPPORTED (WEFT_MEMORY_CUDA in a library built without
 * CUDA), WEFT_ERR_NO_DEVICE (no such GPU), WEFT_ERR_CUDA.
 * On success *reg is a handle to close with weft_registry_close().
 */
WEFT_API weft_status_t weft_registry_create(const char *name, const weft_registry_params_t *params,
                                            weft_registry_h *reg);

enum weft_tensor_desc_field {
    WEFT_TENSOR_FIELD_STRIDES = 1u << 0,
    WEFT_TENSOR_FIELD_BLOCK   = 1u << 1
};

typedef struct weft_tensor_desc {
    uint64_t           field_mask; /* optional fields set below */
    const char        *name;       /* canonical name, unique in the registry */
    int32_t            layer;      /* -1 when not a layer's tensor */
    int32_t            expert;     /* -1 when not an expert's tensor */
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint32_t           ndim;       /* 1..WEFT_TENSOR_MAX_DIMS */
    uint64_t           shape[WEFT_TENSOR_MAX_DIMS];
    /* In elements; default row-major contiguous. Padding is allowed;
     * overlapping elements are not. */
    uint64_t           strides[WEFT_TENSOR_MAX_DIMS];
    /* FP8 block rows and columns, powers of two; default 128 × 128. */
    uint32_t           block[2];
} weft_tensor_desc_t;

/*
 * Declares a tensor. Producer only, before seal. *index (may be NULL) gets
 * the tensor's index, which stays valid for every process.
 * Errors: WEFT_ERR_STATE (sealed, or not the producer), WEFT_ERR_EXISTS
 * (duplicate name), WEFT_ERR_INVALID_PARAM (name, role, dtype, shape,
 * strides, block or field_mask invalid; the log says which),
 * WEFT_ERR_NO_SPACE (max_tensors reached), WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_registry_declare(weft_registry_h reg, const weft_tensor_desc_t *desc,
                                             uint32_t *index);

/*
 * Lays the tensors out in every slot (256-byte aligned, in declaration
 * order), sizes the segment and makes the registry visible to readers.
 * GPU registries allocate one arena per slot on their GPU here (the
 * calling thread's current device is left as it was) and export it.
 * A host registry's pages are reserved here (posix_fallocate), so that a
 * /dev/shm too small for its slots is an error now, not SIGBUS when a
 * version is written. Producer only, once. Errors: WEFT_ERR_STATE (sealed
 * already, or no tensor), WEFT_ERR_NO_SPACE (/dev/shm lacks the room: the
 * log says how much is needed and free; the segment is shrunk back),
 * WEFT_ERR_NO_MEMORY / WEFT_ERR_IO (the segment cannot grow),
 * WEFT_ERR_CUDA (a device allocation or export failed; nothing is left
 * allocated).
 */
WEFT_API weft_status_t weft_registry_seal(weft_registry_h reg);

/* ------------------------------------------------------------ open/close */

typedef enum weft_registry_open_mode {
    WEFT_REGISTRY_OPEN_READ     = 0, /* a consumer */
    /* Takes over as producer; allowed only when the recorded producer has
     * exited. A version it left half-written is discarded; the last
     * published one stays readable. */
    WEFT_REGISTRY_OPEN_PRODUCER = 1
} weft_registry_open_mode_t;

/*
 * Opens a sealed registry. Every offset and size in the segment is
 * validated first. Taking over a GPU registry (PRODUCER) allocates new
 * arenas: the old ones died with their process, so the last version is
 * no longer readable and consumers wait for the next one. Errors: WEFT_ERR_NOT_FOUND (no such registry),
 * WEFT_ERR_STATE (not sealed yet), WEFT_ERR_CORRUPT (the segment fails
 * validation), WEFT_ERR_VERSION (another ABI major version),
 * WEFT_ERR_BUSY (PRODUCER: the producer is alive), WEFT_ERR_PERMISSION (the
 * operating system's, or the segment's: refused when every user may write
 * it, or when another user owns it and does not share it through a group
 * of the caller: someone else's segment under this name is a squatter's,
 * not to be read nor taken over). A takeover that finds a damaged latest
 * version (one its slot does not hold) recomputes it from the slots.
 */
WEFT_API weft_status_t weft_registry_open(const char *name, weft_registry_open_mode_t mode,
                                          weft_registry_h *reg);

/*
 * Closes a handle: releases the leases it holds, unregisters the consumers
 * it registered, aborts a write in progress and, for the producer, gives
 * up the producer role. The segment stays until unlinked. NULL is a no-op.
 */
WEFT_API weft_status_t weft_registry_close(weft_registry_h reg);

/* Removes the name; processes that have it open keep using it. */
WEFT_API weft_status_t weft_registry_unlink(const char *name);

/* What weft_registry_inspect finds of a registry. */
typedef enum weft_registry_condition {
    WEFT_REGISTRY_SEALED    = 1, /* valid and sealed: consumers can open it */
    WEFT_REGISTRY_DECLARING = 2, /* created, not sealed yet */
    WEFT_REGISTRY_DAMAGED   = 3  /* truncated or not a valid segment: `problem` says why */
} weft_registry_condition_t;

typedef struct weft_registry_summary {
    weft_registry_condition_t condition;
    weft_memory_kind_t memory;        /* where its versions live (SEALED only; else 0) */
    uint64_t           segment_bytes; /* the segment's size */
    uint64_t           memory_bytes;  /* the segment's pages in memory (tmpfs blocks) */
    uint32_t           owner_uid;     /* the segment's owner */
    int32_t            producer_pid;  /* 0: no process holds the producer role */
    int32_t            producer_alive; /* 1 when that process runs */
    uint32_t           consumers;     /* registered by processes that run */
    uint32_t           leases;        /* held by processes that run */
    uint64_t           latest_version; /* 0: none published (SEALED only) */
    /* 1 when no running process produces into, reads or consumes from
     * it (and, when not sealed, it is over a minute old: one being
     * created has no producer for a moment): weft_registry_unlink loses
     * nobody's data but the last versions (another producer could still
     * take it over and go on). */
    int32_t            stale;
    char               problem[128];  /* DAMAGED: why; "" otherwise */
} weft_registry_summary_t;

/*
 * Describes registry `name` without opening it as a reader or producer:
 * the segment is mapped read-only, nothing in it is written, and no CUDA
 * call is made (operators list and clean up registries with it:
 * `weft-perf registries`). Registries are the files "weft.<name>" of
 * /dev/shm. Any thread. Errors: WEFT_ERR_INVALID_PARAM (name, NULL
 * summary), WEFT_ERR_NOT_FOUND (no such registry), WEFT_ERR_PERMISSION,
 * WEFT_ERR_IO.
 */
WEFT_API weft_status_t weft_registry_inspect(const char *name, weft_registry_summary_t *summary);

/* --------------------------------------------------------------- tensors */

typedef struct weft_tensor_info {
    char               name[WEFT_TENSOR_NAME_MAX];
    int32_t            layer;
    int32_t            expert;
    weft_tensor_role_t role;
    weft_dtype_t       dtype;
    uint32_t           ndim;
    uint64_t           shape[WEFT_TENSOR_MAX_DIMS];
    uint64_t           strides[WEFT_TENSOR_MAX_DIMS];
    uint32_t           block[2];
    uint64_t           bytes;  /* span of the tensor's elements */
    uint64_t           offset; /* from the start of a slot's arena */
    weft_memory_kind_t memory;
    /* WEFT_MEMORY_CUDA: the ordinal, in the calling process, of the GPU
     * that holds the tensor; -1 when that GPU is not visible here (it can
     * still be mapped through CUDA IPC). -1 for host memory. */
    int32_t            device;
} weft_tensor_info_t;

/* Number of tensors declared. */
WEFT_API weft_status_t weft_registry_tensor_count(weft_registry_h reg, uint32_t *count);

/* Describes tensor `index`. WEFT_ERR_INVALID_PARAM when out of range. */
WEFT_API weft_status_t weft_registry_tensor_info(weft_registry_h reg, uint32_t index,
                                                 weft_tensor_info_t *info);

/* Index of the tensor with this exact name; WEFT_ERR_NOT_FOUND if none. */
WEFT_API weft_status_t weft_registry_lookup(weft_registry_h reg, const char *name, uint32_t *index);

/* --------------------------------------------------------------- writing */

/*
 * Takes a slot to write the next version into: one that is neither the
 * latest version nor leased by a reader. When none is free, waits up to
 * timeout_us (0: do not wait) for readers to release one, then returns
 * WEFT_ERR_BUSY with the registry unchanged. Producer only; one write at a
 * time (WEFT_ERR_STATE otherwise). *slot (may be NULL) gets the slot.
 */
WEFT_API weft_status_t weft_registry_write_begin(weft_registry_h reg, uint64_t timeout_us,
                                                 uint32_t *slot);

/* Where tensor `index` is written in the slot being written. The pointer
 * is valid until publish or abort. GPU registries give a device pointer
 * on the registry's GPU. WEFT_ERR_STATE outside a write. */
WEFT_API weft_status_t weft_registry_write_tensor(weft_registry_h reg, uint32_t index, void **data);

/*
 * Publishes the slot being written as `version` (0: the latest version
 * + 1), which must be greater than every version published before
 * (WEFT_ERR_INVALID_PARAM otherwise, the write still open). Readers
 * waiting for a newer version are woken. Producer only; WEFT_ERR_STATE
 * without a write in progress (publishing twice, say).
 * *published (may be NULL) gets the version number.
 * GPU registries: publish synchronizes nothing; the caller's kernels and
 * copies into the slot must be complete (cudaStreamSynchronize, or an
 * event waited on) before it publishes.
 */
WEFT_API weft_status_t weft_registry_publish(weft_registry_h reg, uint64_t version,
                                             uint64_t *published);

/* Gives up the write in progress; the slot's bytes are discarded.
 * Streaming readers of its announced version get WEFT_ERR_CANCELED. */
WEFT_API weft_status_t weft_registry_write_abort(weft_registry_h reg);

/*
 * Streaming: lets readers start on a version before it is published.
 *
 *   producer                                   consumer
 *   write_begin()                              wait_ready(after v) → lease
 *   … tensors 0 .. n−1 written …               lease_ready(lease, n)
 *   write_ready(v + 1, n)   ──wake──►          copy tensors 0 .. n−1
 *   … tensors n .. N−1 written …               lease_ready(lease, PUBLISHED)
 *   publish(v + 1)          ──wake──►          copy the rest; received(v + 1)
 *
 * A version is still one unit for the library's promises: a lease on a
 * version being written reads only the tensors announced final, the
 * producer never writes them again and never takes the slot for another
 * version while the lease is held, and a consumer should call
 * weft_registry_consumer_received only after lease_ready said published
 * (the version may yet be abandoned).
 */

/*
 * Producer, during a write: announces that the version being written
 * will be published as `version` and that its first `tensors` tensors
 * (declaration order) are final. Call it as often as the count grows;
 * `version` must be the same each time, newer than the latest version
 * (publish then takes it, and refuses any other), and `tensors` at most
 * the tensor count and never smaller than before (WEFT_ERR_INVALID_PARAM
 * otherwise, nothing changed). WEFT_ERR_STATE outside a write. GPU
 * registries: as for publish, the work that wrote those tensors must be
 * complete first. Wakes the readers waiting in wait_ready or lease_ready.
 * Does not call CUDA, so it may run in a CUDA host function
 * (cudaLaunchHostFunc) enqueued after the kernels that wrote the tensors:
 * on another thread than the one writing, which may go on calling
 * weft_registry_write_tensor meanwhile, but never concurrently with
 * write_begin, publish or write_abort (synchronize the host functions'
 * stream before publishing).
 */
WEFT_API weft_status_t weft_registry_write_ready(weft_registry_h reg, uint64_t version, uint32_t tensors);

/* --------------------------------------------------------------- reading */

/* A reader's hold on one published version. Filled by acquire and wait;
 * pass it back to release. */
typedef struct weft_lease {
    uint64_t version;
    uint32_t slot;
    uint32_t record; /* internal: the lease record */
    uint64_t ticket; /* internal: tells this lease from a later one */
} weft_lease_t;

/*
 * Leases the latest version. WEFT_ERR_NOT_FOUND when nothing was
 * published yet; WEFT_ERR_NO_SPACE when max_leases leases are held.
 */
WEFT_API weft_status_t weft_registry_acquire(weft_registry_h reg, weft_lease_t *lease);

/*
 * Waits until a version newer than after_version is published, up to
 * timeout_us, and leases the latest one. Spins for up to
 * WEFT_REGISTRY_SPIN_US microseconds first, then sleeps on a futex
 * (WEFT_REGISTRY_SPIN_US=0: futex only). WEFT_ERR_TIMEOUT when none came.
 */
WEFT_API weft_status_t weft_registry_wait(weft_registry_h reg, uint64_t after_version,
                                          uint64_t timeout_us, weft_lease_t *lease);

/*
 * As weft_registry_wait, but a version that a write in progress announced
 * (weft_registry_write_ready) will do too: leases the latest published
 * version newer than after_version if there is one, else the newest
 * announced one. Ask weft_registry_lease_ready how far the leased version
 * is before reading it. Release the lease as any other.
 */
WEFT_API weft_status_t weft_registry_wait_ready(weft_registry_h reg, uint64_t after_version,
                                                uint64_t timeout_us, weft_lease_t *lease);

/* weft_registry_lease_ready's `tensors` that waits for the publish itself. */
#define WEFT_REGISTRY_PUBLISHED UINT32_MAX

/*
 * Waits, up to timeout_us, until the first `tensors` tensors of the leased
 * version are final, or it is published (WEFT_REGISTRY_PUBLISHED: until
 * it is published). *ready gets how many are final (the tensor count once
 * published), *published 1 once it is. WEFT_OK when the wait is over;
 * WEFT_ERR_TIMEOUT (with *ready and *published as they stand); and
 * WEFT_ERR_CANCELED when the version will not be published: its write was
 * aborted, or its producer died (the consumer must then forget what it
 * copied of it, and release the lease). WEFT_ERR_STATE when the lease is
 * not held, WEFT_ERR_INVALID_PARAM for a count over the tensor count.
 */
WEFT_API weft_status_t weft_registry_lease_ready(weft_registry_h reg, const weft_lease_t *lease,
                                                 uint32_t tensors, uint64_t timeout_us, uint32_t *ready,
                                                 int *published);

/*
 * Where tensor `index` of the leased version is, for reading (of a version
 * being written, only a tensor announced final: WEFT_ERR_STATE otherwise).
 * Valid until
 * the lease is released. GPU registries give a device pointer usable in
 * this process: the slot's arena is mapped through CUDA IPC the first time,
 * into the context of the calling thread's current device (the GPU that
 * will read it; peer access to the arena's GPU is enabled lazily), and the
 * mapping is kept for that arena's generation. Make every call on one
 * handle with the same current device. Errors: WEFT_ERR_STATE (the lease
 * is not held), WEFT_ERR_CUDA (the mapping failed; the log says why);
 * with WEFT_VERIFY=all, weft_registry_verify's (WEFT_ERR_CORRUPT: the
 * tensor's bytes changed since publish), *data then NULL.
 */
WEFT_API weft_status_t weft_registry_lease_tensor(weft_registry_h reg, const weft_lease_t *lease,
                                                  uint32_t index, const void **data);

/*
 * Verified versions: checks tensor `index` of a leased version against the
 * checksum its publish stored (registries created with checksums):
 * WEFT_OK when its bytes are the ones published; WEFT_ERR_CORRUPT (logged
 * with both sums) when they are not; WEFT_ERR_UNSUPPORTED when the
 * registry has no checksums; WEFT_ERR_STATE when the lease is not held or
 * the version is not published yet (a streamed tensor can be verified
 * once its version is). GPU registries: summed on the calling thread's
 * current device through the arena's mapping (as lease_tensor), on the
 * legacy default stream, waiting for it (WEFT_ERR_CUDA, logged, when that
 * fails). Any thread.
 *
 * With WEFT_VERIFY=all in the environment, weft_registry_lease_tensor of
 * a published version calls it before it gives the address, and fails
 * with its error.
 */
WEFT_API weft_status_t weft_registry_verify(weft_registry_h reg, const weft_lease_t *lease, uint32_t index);

/*
 * The checksum that the publish of the leased version stored for tensor
 * `index` (<weft/checksum.h>'s, of its `bytes` bytes at its place in the
 * slot), for a consumer that checks a copy itself: WEFT_OK and *sum;
 * otherwise as weft_registry_verify (UNSUPPORTED, STATE), nothing logged
 * for those two.
 */
WEFT_API weft_status_t weft_registry_tensor_checksum(weft_registry_h reg, const weft_lease_t *lease, uint32_t index,
                                                     uint64_t *sum);

/*
 * The same for every tensor of the leased version at once: GPU registries
 * sum them all in one launch. WEFT_ERR_CORRUPT when any fails (each
 * logged), the first one's index in *bad (may be NULL); otherwise as
 * weft_registry_verify.
 */
WEFT_API weft_status_t weft_registry_verify_version(weft_registry_h reg, const weft_lease_t *lease, uint32_t *bad);

/* Releases a lease. WEFT_ERR_STATE when it is not held (released twice). */
WEFT_API weft_status_t weft_registry_release(weft_registry_h reg, weft_lease_t *lease);

/* ------------------------------------------------------------- consumers */

/*
 * Registers a consumer of this registry: one rollout engine, say. name is
 * for operators (1 to 63 bytes). Consumers of a process that dies are
 * dropped. *consumer gets its id. WEFT_ERR_NO_SPACE when max_consumers
 * are registered.
 */
WEFT_API weft_status_t weft_registry_consumer_register(weft_registry_h reg, const char *name,
                                                       uint32_t *consumer);

/* Unregisters a consumer registered through this handle. */
WEFT_API weft_status_t weft_registry_consumer_unregister(weft_registry_h reg, uint32_t consumer);

/*
 * Records that the consumer holds every byte of `version`. Call it only
 * after the transfer completed. A version not newer than the one recorded
 * gives WEFT_ERR_INVALID_PARAM. Wakes weft_registry_wait_consumers().
 */
WEFT_API weft_status_t weft_registry_consumer_received(weft_registry_h reg, uint32_t consumer,
                                                       uint64_t version);

/* Records a failed transfer of `version`: its error, never the version. */
WEFT_API weft_status_t weft_registry_consumer_failed(weft_registry_h reg, uint32_t consumer,
                                                     uint64_t version, weft_status_t error);

typedef struct weft_consumer_info {
    char          name[WEFT_CONSUMER_NAME_MAX];
    int32_t       pid;
    uint64_t      received_version; /* 0: none yet */
    uint64_t      failed_version;   /* the version of last_error; 0: none */
    weft_status_t last_error;       /* WEFT_OK when none */
} weft_consumer_info_t;

/* Describes consumer `consumer`; WEFT_ERR_NOT_FOUND when not registered. */
WEFT_API weft_status_t weft_registry_consumer_info(weft_registry_h reg, uint32_t consumer,
                                                   weft_consumer_info_t *info);

/*
 * Waits until every registered, living consumer has received `version` or
 * a newer one, up to timeout_us. WEFT_ERR_TIMEOUT otherwise; *lagging (may
 * be NULL) gets the number of consumers still behind, on success and on
 * timeout.
 */
WEFT_API weft_status_t weft_registry_wait_consumers(weft_registry_h reg, uint64_t version,
                                                    uint64_t timeout_us, uint32_t *lagging);

/* ----------------------------------------------------------------- stats */

typedef struct weft_registry_stats {
    uint64_t latest_version;   /* 0: none published */
    uint32_t slot_count;
    uint32_t tensor_count;
    uint64_t slot_bytes;       /* bytes of one version */
    uint64_t versions_published;
    uint64_t busy;             /* write_begin calls that found no free slot */
    uint64_t leases_reclaimed; /* leases of dead processes taken back */
    uint32_t leases_held;      /* by live processes */
    uint32_t consumers;        /* registered by live processes */
} weft_registry_stats_t;

WEFT_API weft_status_t weft_registry_get_stats(weft_registry_h reg, weft_registry_stats_t *stats);

/*
 * The memory that holds slot `slot`'s arena in this process, for a
 * transport that registers it with a NIC (RDMA) once. Host registries: the
 * slot's part of the shared-memory mapping (*bytes: the slot stride), valid
 * while the handle is open; its contents are read under a lease only.
 * GPU registries: WEFT_ERR_UNSUPPORTED. WEFT_ERR_INVALID_PARAM for a slot
 * out of range, WEFT_ERR_STATE before seal.
 */
WEFT_API weft_status_t weft_registry_slot_memory(weft_registry_h reg, uint32_t slot, void **base,
                                                 uint64_t *bytes);

/* ------------------------------------------------------- GPU registries */

/*
 * Offload and reload: what a colocated trainer does to give its GPU memory
 * to the rollout engine between steps.
 *
 * weft_registry_offload() frees every slot's device memory. It first makes
 * the slots unleasable, waits for the readers' leases to be released, then
 * waits until every process that mapped an arena has unmapped it (a
 * consumer unmaps when it next calls weft_registry_wait, acquire or
 * weft_plan_receive, or weft_registry_unmap_arenas); only then does it
 * free. The bytes of the published versions are gone: versions never go
 * backwards, but nothing is readable (acquire gives WEFT_ERR_NOT_FOUND and
 * wait keeps waiting) until a version is published after the reload.
 * When leases or mappings remain after timeout_us, everything is put back
 * as it was and WEFT_ERR_BUSY is returned (the log names the processes).
 * Producer only, no write in progress (WEFT_ERR_STATE); a host registry
 * gives WEFT_ERR_UNSUPPORTED.
 *
 * weft_registry_reload() allocates and exports new arenas: a new
 * generation, which consumers map before their next copy. Producer only,
 * after offload (WEFT_ERR_STATE otherwise). WEFT_ERR_CUDA when the
 * allocation fails: the registry stays offloaded; call reload again.
 */
WEFT_API weft_status_t weft_registry_offload(weft_registry_h reg, uint64_t timeout_us);
WEFT_API weft_status_t weft_registry_reload(weft_registry_h reg);

/*
 * Unmaps every GPU arena this handle mapped whose generation is no longer
 * current (offloaded or replaced). Consumers do it on their own in wait,
 * acquire and weft_plan_receive; an engine that is busy elsewhere while a
 * producer offloads calls this so that the offload need not wait for it.
 * No-op for host registries and for arenas still current.
 */
WEFT_API weft_status_t weft_registry_unmap_arenas(weft_registry_h reg);

typedef struct weft_arena_info {
    weft_memory_kind_t memory;     /* of every slot's arena */
    int32_t            device;     /* local ordinal of its GPU; -1 if not visible or host */
    uint64_t           generation; /* grows on every reload; 0 for host */
    int                offloaded;  /* 1 between offload and reload */
} weft_arena_info_t;

/* Describes where the registry's arenas are. */
WEFT_API weft_status_t weft_registry_arena_info(weft_registry_h reg, weft_arena_info_t *info);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_REGISTRY_H */
