/*
 * Transports and transfer plans: how a consumer gets the bytes of a
 * published version into its own buffers.
 *
 *   consumer
 *   --------
 *   weft_registry_open(name, READ)
 *   weft_registry_consumer_register()                → consumer id
 *   weft_plan_create(reg, transport, views)          → plan, once
 *   loop:
 *     weft_plan_receive(plan, consumer, after v)     → version
 *       (wait → lease → copy → release → consumer_received)
 *   weft_plan_destroy(plan)
 *
 * A plan maps registry tensors to the consumer's receive views by
 * canonical name and role. Every check (the name exists, role, dtype and
 * shape agree, no view is named twice, no two views share a byte) is done
 * once, when the plan is built; copying a version only replays the plan's
 * list of copy ranges, in which adjacent ranges are merged.
 *
 * A receive view may be strided: a view of expert e in a fused tensor
 * (SGLang's w13_weight[E, 2I, H]) is its data pointer,
 * w13_weight + e·2I·H elements, with the fused tensor's strides.
 *
 * Threads: a plan is used by one thread at a time (weft_plan_copy and
 * weft_plan_receive write into its views); weft_plan_stats may be called
 * from any thread at any time. Distinct plans over one registry handle may
 * run weft_plan_copy() concurrently (the registry's read calls are
 * thread-safe). Processes: a plan does not survive fork().
 * Errors are logged with the tensor's name (WEFT_LOG_LEVEL).
 */
#ifndef WEFT_TRANSPORT_H
#define WEFT_TRANSPORT_H

#include <weft/registry.h>
#include <weft/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * How the bytes move. 0 is never valid. Values never change once released.
 */
typedef enum weft_transport {
    WEFT_TRANSPORT_HOST     = 1, /* memcpy from the registry's shared memory */
    /* Same node, GPU registry to GPU views: the slot's arena is mapped
     * through CUDA IPC (once per arena generation) and copied on a stream
     * of the views' GPU, same GPU or another one over NVLink/PCIe; the
     * copy is complete when an event recorded after it has completed.
     * Built with CUDA only (WEFT_ERR_UNSUPPORTED otherwise).
     * Two ways to use it: pulled, the consumer copies with weft_plan_*;
     * pushed, the producer's process copies into views the consumer
     * exports, through weft_server_* and weft_remote_* below. */
    WEFT_TRANSPORT_CUDA_IPC = 2,
    /* Across nodes: RMA puts into the remote consumer's registered memory,
     * a flush, then a notification. Used through weft_server_* and
     * weft_remote_* below (weft_plan_create refuses it). Built with UCX. */
    WEFT_TRANSPORT_UCX      = 3,
    /* Across nodes (or between two GPUs of one node) through NCCL: a
     * 2-rank communicator per consumer, ncclSend from the registry's GPU
     * arena into ncclRecv on the consumer's device views. GPU registries
     * and device views only. Used through weft_server_* and weft_remote_*
     * (weft_plan_create refuses it). Built with NCCL. */
    WEFT_TRANSPORT_NCCL     = 4
} weft_transport_t;

enum weft_recv_view_field {
    WEFT_RECV_VIEW_FIELD_STRIDES = 1u << 0,
    WEFT_RECV_VIEW_FIELD_MEMORY  = 1u << 1
};

/* One destination: where the consumer wants one registry tensor. */
typedef struct weft_recv_view {
    uint64_t           field_mask; /* optional fields set below */
    const char        *name;       /* canonical name of the registry tensor */
    weft_tensor_role_t role;       /* must equal the registry tensor's */
    weft_dtype_t       dtype;      /* must equal the registry tensor's */
    uint32_t           ndim;       /* must equal the registry tensor's */
    uint64_t           shape[WEFT_TENSOR_MAX_DIMS]; /* must equal the registry tensor's */
    /* In elements; default row-major contiguous. Any layout whose elements
     * do not overlap: padding, a slice of a fused tensor. */
    uint64_t           strides[WEFT_TENSOR_MAX_DIMS];
    void              *data;       /* element [0, …, 0] */
    /* Where data lives; default host. WEFT_MEMORY_CUDA: device memory of
     * the calling process (cudaMalloc, a torch tensor's data_ptr()); every
     * view of one plan on the same GPU. libweft writes device views on
     * streams of its own (or from the server's process), ordered with no
     * stream of the caller's: work of the caller's that writes into the
     * views (a cudaMemset, a kernel) must be complete before the view is
     * handed to a plan or a consumer (synchronize first). */
    weft_memory_kind_t memory;
} weft_recv_view_t;

/*
 * Builds the plan that copies registry tensors into `views` (count ≥ 1)
 * through `transport`. Each view is matched to the registry tensor with
 * exactly its name; role, dtype, ndim and shape must agree. The views
 * array and the names are copied; the memory the views point to is
 * borrowed and must stay valid until weft_plan_destroy(). The registry
 * handle is borrowed too:
 * close it only after destroying its plans. The registry must be sealed.
 * Errors: WEFT_ERR_INVALID_PARAM (a NULL argument, count 0, an unknown
 * field_mask bit, a bad field, a view whose role, dtype, ndim or shape
 * differs from its tensor's, a tensor named by two views, two views that
 * share a byte), WEFT_ERR_NOT_FOUND (no tensor of that name),
 * WEFT_ERR_UNSUPPORTED (a transport not built in, or a memory kind it
 * cannot reach), WEFT_ERR_NO_MEMORY. The log names the view and tensor.
 * On success *plan is a handle to destroy with weft_plan_destroy().
 */
WEFT_API weft_status_t weft_plan_create(weft_registry_h reg, weft_transport_t transport,
                                        const weft_recv_view_t *views, size_t count,
                                        weft_plan_h *plan);

/*
 * Copies the leased version into the views; returns when every byte is in
 * place. The lease comes from weft_registry_acquire() or _wait() on the
 * plan's registry handle and stays the caller's to release. Records no
 * version anywhere: weft_plan_receive() does that.
 * On failure the views hold an unspecified mix of versions.
 * Errors: WEFT_ERR_INVALID_PARAM (NULL argument), the registry's errors
 * for a lease that is not held, WEFT_ERR_CORRUPT (the slot is not laid
 * out as the registry's tensor offsets say, or, verified versions, a view
 * that holds its tensor verbatim is not what the version's publish summed
 * (host views summed on the CPU, device views on their GPU in one launch): registries created with checksums, WEFT_VERIFY transfers, the
 * default, or all; logged), a transport's errors.
 */
WEFT_API weft_status_t weft_plan_copy(weft_plan_h plan, const weft_lease_t *lease);

/*
 * Receives the next version for `consumer` (registered on the plan's
 * registry handle): waits up to timeout_us for a version newer than
 * after_version, leases the latest, copies it, releases the lease and only
 * then records the version with weft_registry_consumer_received(). When
 * the copy or the release fails, records the error with
 * weft_registry_consumer_failed() and never the version.
 * *version gets the version received.
 * Errors: WEFT_ERR_INVALID_PARAM (NULL argument), WEFT_ERR_TIMEOUT (no
 * newer version came; nothing recorded), the errors of weft_plan_copy(),
 * the registry's errors for the consumer.
 */
WEFT_API weft_status_t weft_plan_receive(weft_plan_h plan, uint32_t consumer,
                                         uint64_t after_version, uint64_t timeout_us,
                                         uint64_t *version);

/*
 * Points the plan at new receive memory: the engine re-allocated its
 * weights (after its own offload, say). The views are checked and the
 * ranges rebuilt exactly as weft_plan_create does, for the plan's registry
 * and transport; on any error the plan is left as it was and still
 * usable. Statistics carry on. Not while a copy on the plan runs.
 * Errors: those of weft_plan_create().
 */
WEFT_API weft_status_t weft_plan_rebind(weft_plan_h plan, const weft_recv_view_t *views,
                                        size_t count);

typedef struct weft_plan_stats {
    weft_transport_t transport;
    uint32_t         tensor_count;       /* views, one tensor each */
    uint64_t         bytes;              /* copied per version */
    uint64_t         range_count;        /* copy ranges per version */
    uint64_t         ranges_uncoalesced; /* before adjacent ranges were merged */
    uint64_t         versions_copied;    /* successful copies */
    uint64_t         copy_failures;
    uint64_t         last_version;       /* of the last successful copy; 0: none */
} weft_plan_stats_t;

/* Describes a plan. Thread-safe. WEFT_ERR_INVALID_PARAM for NULL. */
WEFT_API weft_status_t weft_plan_get_stats(weft_plan_h plan, weft_plan_stats_t *stats);

/*
 * Frees a plan and what its transport set up for it. Not while a copy on
 * it runs. The views' memory and the registry handle are the caller's.
 * NULL is a no-op.
 */
WEFT_API weft_status_t weft_plan_destroy(weft_plan_h plan);

/* ----------------------------------------------------- across nodes */

/*
 * A server sends a registry's versions to consumers on other nodes; each
 * consumer connects with weft_remote_connect() and receives with
 * weft_remote_receive().
 *
 *   trainer node                          rollout node
 *   ------------                          ------------
 *   weft_server_create(reg, addr, token)  weft_remote_connect(addr, token, views)
 *     accepts; each side proves    ◄──TCP──   (proves the token, then
 *     the token to the other (an              registers the views' memory,
 *     HMAC over both fresh nonces:            sends keys and views)
 *     the token never crosses),
 *     builds the plan, registers
 *     the consumer in reg
 *   every published version:             loop:
 *     lease, put every range,  ──RMA──►     weft_remote_receive(after v)
 *     flush, notify v         ──TCP──►        returns v only after the notice
 *     ack → consumer_received ◄──TCP──        (acks v)
 *
 * A consumer that dies, or whose link fails or does not answer within the
 * timeout, is dropped and its failure recorded in the registry
 * (weft_registry_consumer_failed); the others go on. That holds between
 * versions too: a consumer whose link or host went away while it was not
 * receiving is dropped, and leaves the registry's table, within about
 * 1.3 × the timeout (TCP keepalive on the bootstrap connection), so that
 * weft_registry_wait_consumers stops waiting for it; one that is alive but
 * busy elsewhere stays (its kernel answers the probes). A consumer whose
 * server dies or whose link fails gets WEFT_ERR_CONNECTION or
 * WEFT_ERR_TIMEOUT and records nothing; it may connect again and receives
 * the next version.
 */

#define WEFT_TOKEN_MAX 255 /* bytes of a token, without the NUL */

enum weft_server_params_field {
    WEFT_SERVER_FIELD_TIMEOUT   = 1u << 0,
    WEFT_SERVER_FIELD_WINDOW    = 1u << 1,
    WEFT_SERVER_FIELD_TRANSPORT = 1u << 2
};

typedef struct weft_server_params {
    uint64_t         field_mask; /* optional fields set below */
    weft_transport_t transport;  /* WEFT_TRANSPORT_UCX, _NCCL or _CUDA_IPC */
    const char      *listen;     /* "host:port"; port 0 picks one (weft_server_port) */
    const char      *token;      /* shared secret, 1..WEFT_TOKEN_MAX bytes */
    /* A handshake, one consumer's transfer of a version, an ack: each must
     * finish within this; a consumer's connection that stops answering
     * ends about 1.3 × this after (even between versions). Default 30 s. */
    uint64_t         timeout_us;
    /* Bytes in flight per consumer at most (bounds the transport's
     * buffers); default 64 MiB. ucx: at least one 4 MiB put, or with
     * lanes (<weft/ucx.h>) one 1 MiB put per lane. nccl: the bytes of
     * one ncclGroupStart/End batch of sends (each send at most this much,
     * at least 64 KiB); a batch starts when the one before it completed. */
    uint64_t         window_bytes;
    /* What only one transport takes (WEFT_SERVER_FIELD_TRANSPORT): ucx,
     * a weft_ucx_server_params_t (<weft/ucx.h>: its put lanes). Read
     * during weft_server_create only. The other transports take none: a
     * pointer given for them is WEFT_ERR_INVALID_PARAM. */
    const void      *transport_params;
} weft_server_params_t;

/*
 * Starts serving `reg` (borrowed: close it only after weft_server_destroy)
 * on a thread of its own. A ready consumer is sent the latest version
 * published: nccl, once it is ready and then each newer one; ucx and
 * cuda_ipc, each time it asks (weft_remote_receive), the latest newer
 * than the one it asked after.
 * ucx: host or GPU registries. A GPU registry's GPU must be visible in
 * this process (WEFT_ERR_NO_DEVICE otherwise); the server thread makes it
 * its current device. Its memory is registered with UCX directly where
 * UCX reports GPUDirect RDMA (a network memory domain registers CUDA
 * memory); otherwise each consumer gets a bounce ring of window_bytes of pinned
 * host memory, through which device-to-host copies and puts are
 * pipelined. WEFT_UCX_CUDA=auto|direct|staged overrides the choice
 * (direct without UCX's CUDA support: WEFT_ERR_UNSUPPORTED); the log
 * and `weft-perf info` say which path is taken.
 * nccl: the registry must be a GPU registry (WEFT_MEMORY_CUDA) whose GPU
 * is visible in this process (WEFT_ERR_UNSUPPORTED for a host registry,
 * WEFT_ERR_NO_DEVICE otherwise); the server thread makes that GPU its
 * current device and sends from it. NCCL refuses two ranks of one
 * communicator on one GPU of one host, so a consumer receiving on the
 * registry's GPU is refused with WEFT_ERR_UNSUPPORTED (use cuda_ipc on
 * one GPU) unless its NCCL_HOSTID differs from the server's process's:
 * NCCL then takes it for another host and moves the bytes through its
 * network transport. Each consumer gets a communicator of its own
 * (the server is rank 0), made while it connects.
 * cuda_ipc (push): consumers on this node, in other processes, whose
 * views are device memory from cudaMalloc (what PyTorch's caching
 * allocator hands out without expandable segments). Each consumer's
 * allocations are mapped here once (CUDA IPC), and every new version is
 * copied by this process, from the slot into the views (the copies of
 * the cuda_ipc plan: the batched kernel and the copy engines), before
 * the consumer is told. On one GPU the copy then runs in the context
 * that wrote the version: without CUDA MPS, a copy made by the engine's
 * own process first waits for the GPU to switch contexts (~0.15 ms a
 * version on an H200). The registry must be a GPU registry whose GPU is
 * visible here (WEFT_ERR_UNSUPPORTED for a host registry,
 * WEFT_ERR_NO_DEVICE otherwise); so must the consumers' GPUs. Consumers
 * are served one after the other on the server's thread. Listen on
 * loopback: the consumers are local. Delta versions (WEFT_DELTA) go
 * only to consumers on another GPU than the registry's (unless forced):
 * on one GPU a copy of the version is faster than an encode and an
 * apply.
 * Errors: WEFT_ERR_INVALID_PARAM (a field), WEFT_ERR_UNSUPPORTED (the
 * transport is not built in, or the registry's memory), WEFT_ERR_BUSY
 * (the port is taken), WEFT_ERR_UCX, WEFT_ERR_CUDA, WEFT_ERR_NO_DEVICE,
 * WEFT_ERR_NO_MEMORY.
 */
WEFT_API weft_status_t weft_server_create(weft_registry_h reg, const weft_server_params_t *params,
                                          weft_server_h *server);

/* The TCP port the server listens on. */
WEFT_API weft_status_t weft_server_port(weft_server_h server, uint16_t *port);

typedef struct weft_server_stats {
    uint32_t consumers;         /* connected and ready now */
    uint64_t accepted;          /* handshakes that succeeded */
    uint64_t refused;           /* bad token, bad views, protocol errors */
    uint64_t dropped;           /* consumers lost: died, link down, timeout */
    uint64_t versions_sent;     /* version × consumer transfers acknowledged */
    uint64_t bytes_sent;
    uint64_t last_version;      /* the newest version sent; 0: none */
    /* Summed over the transfers counted in versions_sent: from the lease
     * of the version to every byte in place as the server knows it
     * (cuda_ipc: its copy completed, or, for a delta, the consumer's
     * ack, which comes after the apply; ucx, nccl: the consumer's ack). */
    uint64_t transfer_ns;
    /* Delta versions (ucx, nccl, cuda_ipc; docs/protocol.md): of versions_sent, how many
     * went as deltas, the bytes those deltas put on the wire (their whole
     * size is in bytes_sent), and how many deltas a consumer's check
     * refused, the version then sent whole. */
    uint64_t deltas_sent;
    uint64_t delta_bytes;
    uint64_t deltas_redone;
} weft_server_stats_t;

/* Thread-safe. */
WEFT_API weft_status_t weft_server_get_stats(weft_server_h server, weft_server_stats_t *stats);

/* Stops the thread, disconnects every consumer (their records go), frees
 * everything. A transfer in flight is abandoned: nobody records it. */
WEFT_API weft_status_t weft_server_destroy(weft_server_h server);

enum weft_remote_params_field {
    WEFT_REMOTE_FIELD_TIMEOUT   = 1u << 0,
    WEFT_REMOTE_FIELD_TRANSPORT = 1u << 1
};

typedef struct weft_remote_params {
    uint64_t         field_mask;
    weft_transport_t transport; /* the server's: WEFT_TRANSPORT_UCX, _NCCL or _CUDA_IPC */
    const char      *server;    /* "host:port" of the server */
    const char      *token;     /* the server's token */
    const char      *name;      /* this consumer, for the registry (1..63 bytes) */
    /* Connecting and the handshake: every wait on the server (ucx: not
     * UCX's own set-up of this consumer's workers and endpoints, local
     * work that can take seconds on a loaded machine); nccl: also the
     * transfer of one version once its notice came; a server's
     * connection that stops answering ends about 1.3 × this after.
     * Default 30 s. */
    uint64_t         timeout_us;
    /* What only one transport takes (WEFT_REMOTE_FIELD_TRANSPORT): ucx,
     * a weft_ucx_remote_params_t (<weft/ucx.h>: receive lanes, memory
     * from weft_ucx_memory_alloc). Read during weft_remote_connect only.
     * The other transports take none (WEFT_ERR_INVALID_PARAM). */
    const void      *transport_params;
} weft_remote_params_t;

/*
 * Connects to a server and sets up the receive side: registers the memory
 * of `views` with the transport, sends the views with its keys; the server
 * checks them against its registry as weft_plan_create() does and
 * registers this consumer there under `name`. The views must stay valid
 * until weft_remote_close(). ucx: views all in host memory or all in
 * device memory (WEFT_MEMORY_CUDA) of one GPU (mixed:
 * WEFT_ERR_INVALID_PARAM). Host views get receive lanes (<weft/ucx.h>:
 * weft_ucx_remote_params_t; default WEFT_UCX_LANES): threads, each with a
 * UCX worker of its own that the server's put lanes connect to, which
 * copy in the puts UCX emulates; they run until weft_remote_close(). Host
 * views in memory from weft_ucx_memory_alloc (the same params) need no
 * registration: the consumer uses that memory's UCX context, and the
 * memory must stay until weft_remote_close() (a view outside it, or
 * device views: WEFT_ERR_INVALID_PARAM). Device views are registered with UCX directly
 * where UCX reports GPUDirect RDMA; otherwise (or with
 * WEFT_UCX_CUDA=staged) the consumer allocates a staging ring of pinned
 * host memory (WEFT_UCX_STAGE_BYTES, default 256 MiB, no more than the
 * views span), receives each version there in rounds and copies each
 * round into the views. nccl:
 * views in device memory (WEFT_MEMORY_CUDA), all on one GPU that is not
 * the server's; that GPU becomes the calling thread's current device, and
 * the call returns once the consumer's NCCL communicator with the server
 * is up. cuda_ipc: views in device memory of one GPU, each inside one
 * allocation made with cudaMalloc in this process (VMM memory, such as
 * PyTorch's expandable segments, cannot be exported: WEFT_ERR_UNSUPPORTED);
 * the server must be another process on this node. The server's process
 * writes into the views, but only while this consumer asks for a version
 * (weft_remote_receive), and never after weft_remote_close() returned.
 * Errors: WEFT_ERR_INVALID_PARAM, WEFT_ERR_AUTH (the server refused the
 * token), WEFT_ERR_NOT_FOUND / WEFT_ERR_INVALID_PARAM (the server refused
 * the views; the log has its reason), WEFT_ERR_CONNECTION,
 * WEFT_ERR_TIMEOUT, WEFT_ERR_UCX, WEFT_ERR_NCCL, WEFT_ERR_CUDA,
 * WEFT_ERR_UNSUPPORTED (the transport is not built in, a memory kind it
 * cannot reach, an nccl consumer on the server's GPU under the server's
 * NCCL host id).
 */
WEFT_API weft_status_t weft_remote_connect(const weft_remote_params_t *params,
                                           const weft_recv_view_t *views, size_t count,
                                           weft_remote_h *remote);

/*
 * Waits up to timeout_us for a version newer than after_version to land
 * completely in the views, acknowledges it to the server and returns it in
 * *version. ucx: the notice comes after every byte and a flush. nccl: the
 * notice comes first; the call then receives every range (ncclRecv on a
 * stream of the views' GPU, within the connect timeout) and acknowledges
 * only after that stream completed. cuda_ipc: the call asks the server for
 * a version newer than after_version, which it copies into the views from
 * its own process (the latest it has) and announces once the copy
 * completed. ucx and cuda_ipc: between calls the server does not touch
 * the views (each call asks it for the next version), except after a
 * call that timed out: its request stands, and the views may change
 * until the next call returns; weft_registry_wait_consumers on the
 * trainer's side therefore waits for the engines to ask. ucx with staged
 * device views: each round of the version is copied from the pinned
 * staging ring into the views inside the call, and the version is
 * acknowledged only once the last copy completed; a failed copy gives
 * WEFT_ERR_CUDA, nothing is acknowledged (connect again). While it waits
 * it also drives the transport's progress, which puts need on some
 * transports (TCP): call it in a loop, from one thread (nccl: with the
 * views' GPU current). CPU: the calling thread sleeps between versions;
 * ucx: once the server says it began putting a version, the thread stays
 * awake (yielding its CPU to any thread that waits) for up to 1 ms when
 * the version before took less, so that the notice is seen without a
 * wake-up; it then sleeps again.
 * Errors: WEFT_ERR_TIMEOUT (nothing came; the connection stays; nccl: or
 * a transfer in flight did not finish in time: the communicator is
 * aborted, connect again), WEFT_ERR_CONNECTION (the server or the link
 * went away: nothing was received; connect again), WEFT_ERR_CANCELED (the
 * server dropped this consumer for a failed transfer), WEFT_ERR_NCCL /
 * WEFT_ERR_CUDA (the transfer failed; connect again), WEFT_ERR_CORRUPT
 * (verified versions: a view that holds its tensor verbatim is not
 * what the server's registry published, by its checksum; logged, nothing
 * acknowledged, the connection closed: connect again). After a failure
 * the views hold an unspecified mix of versions.
 *
 * Verified versions (ucx, nccl, cuda_ipc push): when the server's registry keeps checksums
 * (weft_registry_params_t.checksums) and WEFT_VERIFY is transfers (the
 * default) or all, each view whose layout is its tensor's, end to end
 * (row-major, unpadded, or the registry's own strides), is summed after
 * its version landed and before it is acknowledged: on the CPU for host
 * views, on the views' GPU for device views (all in one launch, then a
 * wait). Views with another layout are not checked.
 */
WEFT_API weft_status_t weft_remote_receive(weft_remote_h remote, uint64_t after_version,
                                           uint64_t timeout_us, uint64_t *version);

/*
 * Disconnects and frees; the handle is gone after, whatever the return.
 * NULL is a no-op (WEFT_OK). WEFT_OK means the server confirmed that
 * nothing of it can land in the views any more: they are the caller's
 * again. ucx and cuda_ipc: the call says goodbye and waits, up to the
 * connect timeout, for the server to close the connection, which it does
 * only once its writes are over (ucx: its endpoint and put lanes to this
 * consumer closed; cuda_ipc: its mapping of the views closed); a server
 * whose process ended confirms as well (its end of the connection
 * closes). Without that (the link or the server's host went away, the
 * server hangs) it returns WEFT_ERR_TIMEOUT after that timeout, or
 * WEFT_ERR_CONNECTION at once where the connection was lost without the
 * server's close before (a reset, the keepalive, an earlier failure), and
 * then:
 *  - ucx: before returning it destroyed this consumer's UCX workers and
 *    unregistered the memory it registered, so no put that needs this
 *    process (TCP, the puts UCX emulates over shared memory) or a key of
 *    it (RDMA: the NIC refuses a key that was revoked) can land. A server
 *    on this same host that writes by the kernel's cross-memory copy
 *    (UCX's cma transport, for memory UCX did not allocate) needs
 *    neither: keep such views' memory until that server's process is
 *    known gone. Views in memory from weft_ucx_memory_alloc may be
 *    written until weft_ucx_memory_free (the server writes its own
 *    mapping of it; freed, it is no longer this process's memory).
 *  - cuda_ipc: the server's process may still map the views: keep their
 *    memory until that process is known gone.
 * nccl: WEFT_OK once its communicator is aborted; NCCL writes nothing
 * into the views after that.
 */
WEFT_API weft_status_t weft_remote_close(weft_remote_h remote);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_TRANSPORT_H */
