"""The transports (<weft/transport.h>) into a consumer's own tensors, the
receive views.

Pulled (weft_plan_*): the consumer's process copies each version of a
registry it opened (host, cuda_ipc):

    with weft.Plan(reg, {"layers.0.w": w13[e]}, transport="cuda_ipc") as plan:
        version = plan.receive(consumer, after=0, timeout=30)

Pushed (weft_server_* / weft_remote_*): the producer's Server writes into
the views a Remote exported, across nodes (ucx, nccl) or from the
producer's process (cuda_ipc):

    server = weft.Server(reg, "0.0.0.0:0", token, transport="ucx")
    remote = weft.Remote("trainer:port", token, "engine-0",
                         {"layers.0.w": weft.View(w13[e], "fp8_e4m3")}, transport="ucx")
    version = remote.receive(after=0, timeout=30)

A view is any array libweft can use in place (weft._tensors): a NumPy
array, a torch tensor (CPU or CUDA), or a slice of a fused engine tensor
(strided); its shape and element size must be the registry tensor's.
"""

from . import _tensors
from ._errors import check
from ._handle import Handle
from ._lib import load
from .registry import _ROLES, _timeout_us

_TRANSPORTS = ("host", "cuda_ipc")
_ALL_TRANSPORTS = {"host": "WEFT_TRANSPORT_HOST", "cuda_ipc": "WEFT_TRANSPORT_CUDA_IPC",
                   "ucx": "WEFT_TRANSPORT_UCX", "nccl": "WEFT_TRANSPORT_NCCL"}


def _transport_code(transport, allowed):
    if transport not in allowed:
        raise ValueError("transport must be one of %s, not %r" % (", ".join(allowed), transport))
    return getattr(load()[1], _ALL_TRANSPORTS[transport])


class View:
    """A receive view for a Remote, which has no registry to read the
    tensor's description from: the array (no copy), the tensor's dtype
    (libweft's name, a NumPy or torch dtype) and role ("w", "wt", "scale").
    The shape is the array's."""

    def __init__(self, array, dtype, role="w"):
        self.array, self.dtype, self.role = array, _tensors.dtype_name(dtype), role


class _Described:
    """What a view must match: a registry tensor's description."""

    def __init__(self, name, shape, dtype, role):
        self.name, self.shape, self.dtype, self.role = name, tuple(shape), dtype, role


def _registry_views(registry, views):
    """{name or index: array} against the registry's tensors."""
    out = []
    for key, array in views.items():
        info = registry.tensors[registry.index(key)]
        out.append((_Described(info.name, info.shape, info.dtype, info.role), array))
    return out


def _remote_views(views):
    """{name: View or (array, dtype[, role])}: described by the caller."""
    out = []
    for name, view in views.items():
        if not isinstance(view, View):
            view = View(*view)
        shape = _tensors.array_ref(view.array).shape
        out.append((_Described(name, shape, view.dtype, view.role), view.array))
    return out


def _views(described):
    """The C receive views of [(description, array)], and what they hold."""
    ffi, lib = load()
    c_views = ffi.new("weft_recv_view_t[]", max(1, len(described)))
    keep = []
    for i, (info, array) in enumerate(described):
        ref = _tensors.array_ref(array)
        dtype = _tensors.dtype_code(info.dtype)
        size = lib.weft_dtype_size(dtype)
        if ref.itemsize != size:
            raise ValueError("view of %s: %d-byte elements, the tensor's are %d" % (info.name, ref.itemsize, size))
        if tuple(ref.shape) != info.shape:
            raise ValueError("view of %s: shape %s, the tensor's is %s" % (info.name, tuple(ref.shape), info.shape))
        name = ffi.new("char[]", info.name.encode())
        view = c_views[i]
        view.field_mask = lib.WEFT_RECV_VIEW_FIELD_STRIDES | lib.WEFT_RECV_VIEW_FIELD_MEMORY
        view.name = name
        if info.role not in _ROLES:
            raise ValueError("view of %s: role must be one of %s, not %r" % (info.name, ", ".join(_ROLES), info.role))
        view.role = _ROLES[info.role]
        view.dtype = dtype
        view.ndim = len(info.shape)
        for d, (n, s) in enumerate(zip(info.shape, ref.strides)):
            view.shape[d], view.strides[d] = n, s
        view.data = ffi.cast("void *", ref.ptr)
        view.memory = lib.WEFT_MEMORY_CUDA if ref.memory == "cuda" else lib.WEFT_MEMORY_HOST
        keep.extend((name, ref))
    return c_views, len(described), keep


class Plan(Handle):
    """A consumer's plan: which bytes of each version go where (the C
    plan's checks, made at creation). transport: "host" or "cuda_ipc"."""

    _destroy = "weft_plan_destroy"

    def __init__(self, registry, views, transport="host"):
        ffi, lib = load()
        code = _transport_code(transport, _TRANSPORTS)
        self._handle, self._registry, self.transport = None, registry, transport
        c_views, count, self._keep = _views(_registry_views(registry, views))
        handle = ffi.new("weft_plan_h *")
        check(lib.weft_plan_create(registry.handle, code, c_views, count, handle), "weft_plan_create")
        self._handle = handle[0]

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("the plan was destroyed")
        return self._handle

    def copy(self, lease):
        """Copies the leased version into the views (complete on return)."""
        status = load()[1].weft_plan_copy(self.handle, lease.c_lease)
        if status != 0:
            check(status, "weft_plan_copy")

    def receive(self, consumer, after=0, timeout=None):
        """Waits for a version newer than `after`, copies it into the views
        and records it for `consumer` (a weft.Consumer); returns it."""
        ffi, lib = load()
        version = ffi.new("uint64_t *")
        check(lib.weft_plan_receive(self.handle, consumer.id, after, _timeout_us(timeout), version),
              "weft_plan_receive")
        return version[0]

    def rebind(self, views):
        """Points the plan at new arrays (the same tensors, new memory)."""
        _, lib = load()
        c_views, count, keep = _views(_registry_views(self._registry, views))
        check(lib.weft_plan_rebind(self.handle, c_views, count), "weft_plan_rebind")
        self._keep = keep

    def stats(self):
        ffi, lib = load()
        stats = ffi.new("weft_plan_stats_t *")
        check(lib.weft_plan_get_stats(self.handle, stats), "weft_plan_get_stats")
        return {field: getattr(stats, field) for field, _ in ffi.typeof("weft_plan_stats_t").fields}


class Server(Handle):
    """Serves a registry's versions to remote consumers (ucx, nccl) or to
    local ones whose views it copies into (cuda_ipc), on a thread of its
    own: listen "host:port" (port 0 picks one: .port), token the shared
    secret, timeout seconds for a handshake, a transfer or an ack, window
    bytes in flight a consumer."""

    _destroy = "weft_server_destroy"

    def __init__(self, registry, listen, token, transport="ucx", timeout=None, window=None):
        ffi, lib = load()
        self._handle, self._registry = None, registry
        params = ffi.new("weft_server_params_t *")
        params.transport = _transport_code(transport, ("ucx", "nccl", "cuda_ipc"))
        keep = [ffi.new("char[]", listen.encode()), ffi.new("char[]", token.encode())]
        params.listen, params.token = keep
        if timeout is not None:
            params.field_mask |= lib.WEFT_SERVER_FIELD_TIMEOUT
            params.timeout_us = _timeout_us(timeout)
        if window is not None:
            params.field_mask |= lib.WEFT_SERVER_FIELD_WINDOW
            params.window_bytes = window
        handle = ffi.new("weft_server_h *")
        check(lib.weft_server_create(registry.handle, params, handle), "weft_server_create", listen)
        self._handle, self.transport = handle[0], transport
        port = ffi.new("uint16_t *")
        check(lib.weft_server_port(self._handle, port), "weft_server_port")
        self.port = port[0]

    def stats(self):
        ffi, lib = load()
        stats = ffi.new("weft_server_stats_t *")
        check(lib.weft_server_get_stats(self._handle, stats), "weft_server_get_stats")
        return {field: getattr(stats, field) for field, _ in ffi.typeof("weft_server_stats_t").fields}


class Remote(Handle):
    """A consumer of a Server: connects to "host:port" with the token under
    `name`, exports its views ({name: View or (array, dtype[, role])}) and
    receives versions into them; they change only inside receive()."""

    _destroy = "weft_remote_close"

    def __init__(self, server, token, name, views, transport="ucx", timeout=None):
        ffi, lib = load()
        self._handle = None
        params = ffi.new("weft_remote_params_t *")
        params.transport = _transport_code(transport, ("ucx", "nccl", "cuda_ipc"))
        keep = [ffi.new("char[]", server.encode()), ffi.new("char[]", token.encode()),
                ffi.new("char[]", name.encode())]
        params.server, params.token, params.name = keep
        if timeout is not None:
            params.field_mask |= lib.WEFT_REMOTE_FIELD_TIMEOUT
            params.timeout_us = _timeout_us(timeout)
        c_views, count, self._keep = _views(_remote_views(views))
        handle = ffi.new("weft_remote_h *")
        check(lib.weft_remote_connect(params, c_views, count, handle), "weft_remote_connect", server)
        self._handle, self.name, self.transport = handle[0], name, transport

    def receive(self, after=0, timeout=None):
        """Waits for a version newer than `after` and returns it once every
        byte of it is in the views (and, with checksums, checked)."""
        ffi, lib = load()
        version = ffi.new("uint64_t *")
        check(lib.weft_remote_receive(self._handle, after, _timeout_us(timeout), version), "weft_remote_receive")
        return version[0]

