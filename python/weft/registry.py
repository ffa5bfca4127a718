"""The versioned registry (<weft/registry.h>) from Python.

    with weft.Registry.create("model", slots=3) as reg:
        reg.declare("layers.0.w", (2048, 768), "fp8_e4m3")
        reg.seal()
        with reg.write() as v:
            v["layers.0.w"][:] = ...       # the slot's memory, no copy
            v.publish()
    with weft.Registry.open("model") as reg, reg.read() as v:
        w = v["layers.0.w"]               # the version's bytes, read-only

A handle closes on `with`'s exit, on close(), or when collected; a writer
that was not published is aborted, a lease released. Handles follow the C
API's threading rules: one handle, one thread at a time.
"""

from . import _tensors
from ._errors import WeftError, check
from ._handle import Handle
from ._lib import load

_ROLES = {"w": 1, "wt": 2, "scale": 3}
_ROLE_NAMES = {v: k for k, v in _ROLES.items()}
_FOREVER_US = (1 << 64) - 1


def _timeout_us(timeout):
    """seconds (None: wait forever) → the C API's microseconds."""
    return _FOREVER_US if timeout is None else max(0, int(timeout * 1e6))


class TensorInfo:
    """A declared tensor: index, name, shape, strides (elements), dtype
    (libweft's name), role ("w", "wt", "scale"), layer, expert, bytes,
    memory ("host" or "cuda") and device."""

    def __init__(self, index, c):
        ffi, lib = load()
        self.index = index
        self.name = ffi.string(c.name).decode()
        self.shape = tuple(c.shape[i] for i in range(c.ndim))
        self.strides = tuple(c.strides[i] for i in range(c.ndim))
        self.dtype = _tensors.dtype_of_code(c.dtype)
        self.role = _ROLE_NAMES.get(c.role, c.role)
        self.layer, self.expert, self.bytes = c.layer, c.expert, c.bytes
        self.memory = "cuda" if c.memory == lib.WEFT_MEMORY_CUDA else "host"
        self.device = c.device

    def __repr__(self):
        return "TensorInfo(%d, %r, %s, %s, %s)" % (self.index, self.name, self.shape, self.dtype, self.role)


class Registry(Handle):
    """A handle on a registry: Registry.create (the producer) or
    Registry.open (a reader, or a producer taking one over)."""

    _destroy = "weft_registry_close"

    def __init__(self, handle, name, producer):
        self._handle, self.name, self.producer = handle, name, producer
        self._infos = None

    @classmethod
    def create(cls, name, slots=None, max_tensors=None, max_leases=None, max_consumers=None, mode=None,
               memory="host", device=0, checksums=False):
        """A new registry (WEFT_ERR_EXISTS when the name is taken). memory:
        "host" or "cuda" (on GPU `device`)."""
        ffi, lib = load()
        params = ffi.new("weft_registry_params_t *")
        for field, value, attr in ((lib.WEFT_REGISTRY_FIELD_SLOTS, slots, "slot_count"),
                                   (lib.WEFT_REGISTRY_FIELD_MAX_TENSORS, max_tensors, "max_tensors"),
                                   (lib.WEFT_REGISTRY_FIELD_MAX_LEASES, max_leases, "max_leases"),
                                   (lib.WEFT_REGISTRY_FIELD_MAX_CONSUMERS, max_consumers, "max_consumers"),
                                   (lib.WEFT_REGISTRY_FIELD_MODE, mode, "mode")):
            if value is not None:
                params.field_mask |= field
                setattr(params, attr, value)
        if memory not in ("host", "cuda"):
            raise ValueError("memory must be \"host\" or \"cuda\", not %r" % (memory,))
        if memory == "cuda":
            params.field_mask |= lib.WEFT_REGISTRY_FIELD_MEMORY
            params.memory, params.device = lib.WEFT_MEMORY_CUDA, device
        if checksums:
            params.field_mask |= lib.WEFT_REGISTRY_FIELD_CHECKSUMS
            params.checksums = 1
        handle = ffi.new("weft_registry_h *")
        check(lib.weft_registry_create(name.encode(), params, handle), "weft_registry_create", name)
        return cls(handle[0], name, True)

    @classmethod
    def open(cls, name, producer=False):
        """A sealed registry; producer=True takes it over (its producer
        died). WEFT_ERR_NOT_FOUND / WEFT_ERR_STATE while it is not there
        or not sealed yet."""
        ffi, lib = load()
        handle = ffi.new("weft_registry_h *")
        mode = lib.WEFT_REGISTRY_OPEN_PRODUCER if producer else lib.WEFT_REGISTRY_OPEN_READ
        check(lib.weft_registry_open(name.encode(), mode, handle), "weft_registry_open", name)
        return cls(handle[0], name, producer)

    @staticmethod
    def unlink(name):
        """Removes the name (processes that hold the registry keep it)."""
        _, lib = load()
        status = lib.weft_registry_unlink(name.encode())
        if status != lib.WEFT_ERR_NOT_FOUND:
            check(status, "weft_registry_unlink", name)

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("registry %r is closed" % self.name)
        return self._handle

    # ---------------------------------------------------------- declaring

    def declare(self, name, shape, dtype, role="w", layer=-1, expert=-1, strides=None, block=None):
        """Declares a tensor before seal; returns its index."""
        ffi, lib = load()
        desc = ffi.new("weft_tensor_desc_t *")
        name_c = ffi.new("char[]", name.encode())
        desc.name = name_c
        desc.layer, desc.expert = layer, expert
        if role not in _ROLES:
            raise ValueError("role must be one of %s, not %r" % (", ".join(_ROLES), role))
        desc.role = _ROLES[role]
        desc.dtype = _tensors.dtype_code(dtype)
        shape = tuple(int(n) for n in shape)
        if not 1 <= len(shape) <= lib.WEFT_TENSOR_MAX_DIMS:
            raise ValueError("a tensor has 1 to %d dimensions, not %d" % (lib.WEFT_TENSOR_MAX_DIMS, len(shape)))
        desc.ndim = len(shape)
        for i, n in enumerate(shape):
            desc.shape[i] = n
        if strides is not None:
            desc.field_mask |= lib.WEFT_TENSOR_FIELD_STRIDES
            for i, s in enumerate(strides):
                desc.strides[i] = s
        if block is not None:
            desc.field_mask |= lib.WEFT_TENSOR_FIELD_BLOCK
            desc.block[0], desc.block[1] = block
        index = ffi.new("uint32_t *")
        check(lib.weft_registry_declare(self.handle, desc, index), "weft_registry_declare", name)
        self._infos = None
        return index[0]

    def seal(self):
        _, lib = load()
        check(lib.weft_registry_seal(self.handle), "weft_registry_seal", self.name)
        self._infos = None

    # ------------------------------------------------------------ tensors

    @property
    def tensors(self):
        """Every tensor's TensorInfo, by index."""
        if self._infos is None:
            ffi, lib = load()
            count = ffi.new("uint32_t *")
            check(lib.weft_registry_tensor_count(self.handle, count), "weft_registry_tensor_count")
            info = ffi.new("weft_tensor_info_t *")
            infos = []
            for i in range(count[0]):
                check(lib.weft_registry_tensor_info(self.handle, i, info), "weft_registry_tensor_info")
                infos.append(TensorInfo(i, info))
            self._infos = infos
        return self._infos

    def index(self, key):
        """A tensor's index from its name (or its index)."""
        if isinstance(key, int):
            if not 0 <= key < len(self.tensors):
                raise IndexError("tensor %d of %d" % (key, len(self.tensors)))
            return key
        ffi, lib = load()
        index = ffi.new("uint32_t *")
        status = lib.weft_registry_lookup(self.handle, key.encode(), index)
        if status == lib.WEFT_ERR_NOT_FOUND:
            raise KeyError(key)
        check(status, "weft_registry_lookup", key)
        return index[0]

    def _array(self, ptr, index, writable, owner):
        info = self.tensors[index]
        return _tensors.array_at(ptr, info.shape, info.strides, info.dtype, info.memory, info.device, writable,
                                 owner)

    # ----------------------------------------------------------- versions

    def write(self, timeout=None):
        """A Writer of the next version (a free slot, waited for up to
        `timeout` seconds; None: forever)."""
        return Writer(self, timeout)

    def read(self, after=None, timeout=None):
        """A Lease of the latest version (after=None), or of the first one
        newer than `after`, waited for up to `timeout` seconds."""
        return Lease(self, after, timeout)

    def consumer(self, name):
        """Registers a consumer under `name` (weft_registry_consumer_register)."""
        return Consumer(self, name)

    def stats(self):
        """weft_registry_get_stats as a dict."""
        ffi, lib = load()
        stats = ffi.new("weft_registry_stats_t *")
        check(lib.weft_registry_get_stats(self.handle, stats), "weft_registry_get_stats")
        return {field: getattr(stats, field) for field, _ in ffi.typeof("weft_registry_stats_t").fields}

    def wait_consumers(self, version, timeout=None):
        """Waits until every registered consumer received (or failed)
        `version`, up to `timeout` seconds; returns how many had not
        (WEFT_ERR_TIMEOUT is that count, not an error)."""
        ffi, lib = load()
        lagging = ffi.new("uint32_t *")
        status = lib.weft_registry_wait_consumers(self.handle, version, _timeout_us(timeout), lagging)
        if status != lib.WEFT_ERR_TIMEOUT:
            check(status, "weft_registry_wait_consumers")
        return lagging[0]


class Writer:
    """The version being written: writer[name] is the slot's memory of that
    tensor (a NumPy array, or a DeviceArray for a GPU registry), valid until
    publish() or abort(). Leaving `with` without publishing aborts."""

    def __init__(self, registry, timeout):
        ffi, lib = load()
        self._registry, self._open = registry, False
        slot = ffi.new("uint32_t *")
        check(lib.weft_registry_write_begin(registry.handle, _timeout_us(timeout), slot),
              "weft_registry_write_begin", registry.name)
        self.slot, self._open, self.version = slot[0], True, None

    def __getitem__(self, key):
        if not self._open:
            raise ValueError("the version was published or aborted")
        ffi, lib = load()
        index = self._registry.index(key)
        data = ffi.new("void **")
        check(lib.weft_registry_write_tensor(self._registry.handle, index, data), "weft_registry_write_tensor",
              str(key))
        return self._registry._array(data[0], index, True, self)

    def publish(self, version=0):
        """Publishes what was written; returns the version number (0: the
        next one)."""
        ffi, lib = load()
        published = ffi.new("uint64_t *")
        check(lib.weft_registry_publish(self._registry.handle, version, published), "weft_registry_publish")
        self._open, self.version = False, published[0]
        return self.version

    def abort(self):
        if self._open:
            _, lib = load()
            self._open = False
            check(lib.weft_registry_write_abort(self._registry.handle), "weft_registry_write_abort")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.abort()


class Lease:
    """A version held for reading: lease[name] is its bytes (read-only, no
    copy), valid until release(). .version says which version."""

    def __init__(self, registry, after, timeout):
        ffi, lib = load()
        self._registry, self._lease, self._held = registry, ffi.new("weft_lease_t *"), False
        if after is None:
            status = lib.weft_registry_acquire(registry.handle, self._lease)
            call = "weft_registry_acquire"
        else:
            status = lib.weft_registry_wait(registry.handle, after, _timeout_us(timeout), self._lease)
            call = "weft_registry_wait"
        check(status, call, registry.name)
        self._held, self.version, self.slot = True, self._lease.version, self._lease.slot

    @property
    def c_lease(self):
        """The weft_lease_t, for the transports."""
        if not self._held:
            raise ValueError("the lease was released")
        return self._lease

    def __getitem__(self, key):
        ffi, lib = load()
        index = self._registry.index(key)
        data = ffi.new("const void **")
        check(lib.weft_registry_lease_tensor(self._registry.handle, self.c_lease, index, data),
              "weft_registry_lease_tensor", str(key))
        return self._registry._array(data[0], index, False, self)

    def verify(self, key=None):
        """Checks the version's checksums (all tensors, or one): raises
        WeftError (WEFT_ERR_CORRUPT) on a mismatch."""
        ffi, lib = load()
        if key is None:
            bad = ffi.new("uint32_t *")
            check(lib.weft_registry_verify_version(self._registry.handle, self.c_lease, bad),
                  "weft_registry_verify_version")
        else:
            check(lib.weft_registry_verify(self._registry.handle, self.c_lease, self._registry.index(key)),
                  "weft_registry_verify", str(key))

    def release(self):
        if self._held:
            _, lib = load()
            self._held = False
            check(lib.weft_registry_release(self._registry.handle, self._lease), "weft_registry_release")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            if self._registry._handle is not None:
                self.release()
        except Exception:  # noqa: BLE001
            pass


class Consumer:
    """A consumer's record in the registry: received(v) and failed(v) tell
    the producer; close() unregisters it."""

    def __init__(self, registry, name):
        ffi, lib = load()
        self._registry, self.name = registry, name
        ident = ffi.new("uint32_t *")
        check(lib.weft_registry_consumer_register(registry.handle, name.encode(), ident),
              "weft_registry_consumer_register", name)
        self.id = ident[0]

    def received(self, version):
        _, lib = load()
        check(lib.weft_registry_consumer_received(self._registry.handle, self.id, version),
              "weft_registry_consumer_received")

    def failed(self, version, status):
        _, lib = load()
        status = status.status if isinstance(status, WeftError) else int(status)
        check(lib.weft_registry_consumer_failed(self._registry.handle, self.id, version, status),
              "weft_registry_consumer_failed")

    def close(self):
        if self.id is not None and self._registry._handle is not None:
            _, lib = load()
            ident, self.id = self.id, None
            check(lib.weft_registry_consumer_unregister(self._registry.handle, ident),
                  "weft_registry_consumer_unregister")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
