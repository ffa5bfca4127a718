"""Pulled transfers (<weft/transport.h>'s weft_plan_*): a consumer's plan
copies each version of a registry into its own tensors, the receive views.

    with weft.Plan(reg, {"layers.0.w": w13[e]}, transport="cuda_ipc") as plan:
        version = plan.receive(consumer, after=0, timeout=30)

A view is any array libweft can use in place (weft._tensors): a NumPy
array, a torch tensor (CPU or CUDA), or a slice of a fused engine tensor
(strided); its shape and element size must be the registry tensor's.
"""

from . import _tensors
from ._errors import check
from ._lib import load
from .registry import _timeout_us

_TRANSPORTS = ("host", "cuda_ipc")


def _views(registry, views):
    """The C receive views of {name or index: array}, and the arrays."""
    ffi, lib = load()
    items = list(views.items())
    c_views = ffi.new("weft_recv_view_t[]", max(1, len(items)))
    keep = []
    for i, (key, array) in enumerate(items):
        info = registry.tensors[registry.index(key)]
        ref = _tensors.array_ref(array)
        size = lib.weft_dtype_size(_tensors.dtype_code(info.dtype))
        if ref.itemsize != size:
            raise ValueError("view of %s: %d-byte elements, the tensor's are %d" % (info.name, ref.itemsize, size))
        if tuple(ref.shape) != info.shape:
            raise ValueError("view of %s: shape %s, the tensor's is %s" % (info.name, tuple(ref.shape), info.shape))
        name = ffi.new("char[]", info.name.encode())
        view = c_views[i]
        view.field_mask = lib.WEFT_RECV_VIEW_FIELD_STRIDES | lib.WEFT_RECV_VIEW_FIELD_MEMORY
        view.name = name
        view.role = {"w": 1, "wt": 2, "scale": 3}[info.role]
        view.dtype = _tensors.dtype_code(info.dtype)
        view.ndim = len(info.shape)
        for d, (n, s) in enumerate(zip(info.shape, ref.strides)):
            view.shape[d], view.strides[d] = n, s
        view.data = ffi.cast("void *", ref.ptr)
        view.memory = lib.WEFT_MEMORY_CUDA if ref.memory == "cuda" else lib.WEFT_MEMORY_HOST
        keep.extend((name, ref))
    return c_views, len(items), keep


class Plan:
    """A consumer's plan: which bytes of each version go where (the C
    plan's checks, made at creation). transport: "host" or "cuda_ipc"."""

    def __init__(self, registry, views, transport="host"):
        ffi, lib = load()
        if transport not in _TRANSPORTS:
            raise ValueError("transport must be one of %s, not %r" % (", ".join(_TRANSPORTS), transport))
        code = lib.WEFT_TRANSPORT_HOST if transport == "host" else lib.WEFT_TRANSPORT_CUDA_IPC
        self._registry, self.transport = registry, transport
        c_views, count, self._keep = _views(registry, views)
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
        _, lib = load()
        check(lib.weft_plan_copy(self.handle, lease.c_lease), "weft_plan_copy")

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
        c_views, count, keep = _views(self._registry, views)
        check(lib.weft_plan_rebind(self.handle, c_views, count), "weft_plan_rebind")
        self._keep = keep

    def stats(self):
        ffi, lib = load()
        stats = ffi.new("weft_plan_stats_t *")
        check(lib.weft_plan_get_stats(self.handle, stats), "weft_plan_get_stats")
        return {field: getattr(stats, field) for field, _ in ffi.typeof("weft_plan_stats_t").fields}

    def close(self):
        if self._handle is not None:
            _, lib = load()
            handle, self._handle = self._handle, None
            check(lib.weft_plan_destroy(handle), "weft_plan_destroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
