"""Arrays in and out of libweft without copies.

In: NumPy arrays (and anything with __array_interface__), anything with
__cuda_array_interface__ (CuPy, Numba, PyTorch CUDA tensors), PyTorch
tensors on either side (their data_ptr, shape and strides), and anything
else that speaks DLPack (__dlpack__: JAX arrays, ...). Out: NumPy
arrays over host memory (which PyTorch, JAX and CuPy take through DLPack),
and DeviceArray over GPU memory (__cuda_array_interface__; PyTorch takes it
with torch.as_tensor(a, device="cuda")). libweft's dtypes that NumPy lacks
come out as their raw bits: BF16 as uint16, the FP8 formats and UE8M0 as
uint8 (as_torch() views them as torch.bfloat16 / float8_e4m3fn where
PyTorch has them).
"""

import numpy as np

from ._lib import load

# libweft's dtype names → the NumPy dtype that holds their bits.
NUMPY = {
    "fp32": np.float32, "bf16": np.uint16, "fp16": np.float16, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8,
    "ue8m0": np.uint8, "uint8": np.uint8, "int32": np.int32, "int64": np.int64,
}

# Names callers may use for a dtype, beside libweft's own.
_ALIASES = {
    "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float": "fp32",
    "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "e4m3": "fp8_e4m3", "int": "int32",
    "long": "int64",
}

_TORCH = {"bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def dtype_name(dtype):
    """libweft's name for dtype: one of its names, an alias, a NumPy dtype
    or a torch.dtype."""
    if isinstance(dtype, str):
        name = dtype
    elif hasattr(dtype, "is_floating_point") or type(dtype).__module__ == "torch":
        name = str(dtype).replace("torch.", "")
    else:
        name = np.dtype(dtype).name
    name = _ALIASES.get(name, name)
    if name not in NUMPY:
        raise ValueError("dtype %r: libweft has %s" % (dtype, ", ".join(sorted(NUMPY))))
    return name


def dtype_code(dtype):
    ffi, lib = load()
    code = ffi.new("weft_dtype_t *")
    if lib.weft_dtype_from_name(dtype_name(dtype).encode(), code) != 0:
        raise ValueError("dtype %r unknown to this libweft" % (dtype,))
    return code[0]


def dtype_of_code(code):
    ffi, lib = load()
    return ffi.string(lib.weft_dtype_name(code)).decode()


class ArrayRef:
    """Where an array's elements are: pointer, shape, strides in elements,
    bytes an element, memory ("host" or "cuda") and the GPU, and the object
    that keeps them alive."""

    __slots__ = ("ptr", "shape", "strides", "itemsize", "memory", "device", "owner")

    def __init__(self, ptr, shape, strides, itemsize, memory, device, owner):
        self.ptr, self.shape, self.strides, self.itemsize = ptr, tuple(shape), tuple(strides), itemsize
        self.memory, self.device, self.owner = memory, device, owner

    def contiguous(self):
        return all(s == e for s, e, n in zip(self.strides, row_major(self.shape), self.shape) if n > 1)


def row_major(shape):
    """The strides, in elements, of a contiguous row-major array."""
    strides, stride = [], 1
    for n in reversed(shape):
        strides.insert(0, stride)
        stride *= n
    return tuple(strides)


def _from_interface(ptr, shape, strides_bytes, itemsize, memory, device, owner):
    if strides_bytes is None:
        strides = row_major(shape)
    else:
        if any(s % itemsize for s in strides_bytes):
            raise ValueError("strides not a whole number of elements")
        strides = [s // itemsize for s in strides_bytes]
    return ArrayRef(ptr, shape, strides, itemsize, memory, device, owner)


_DLPACK_CDEF = """
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data; DLDevice device; int32_t ndim; DLDataType dtype;
    int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor { DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *); }
    DLManagedTensor;
"""
_dlpack_ffi = None
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3


def _from_dlpack(obj):
    """An ArrayRef of an object that only speaks DLPack (JAX, ...): the
    capsule is kept (unconsumed, so that its producer still owns the
    memory) as long as the ArrayRef."""
    import ctypes

    import cffi

    global _dlpack_ffi
    if _dlpack_ffi is None:
        ffi = cffi.FFI()
        ffi.cdef(_DLPACK_CDEF)
        _dlpack_ffi = ffi
    ffi = _dlpack_ffi
    capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    managed = ffi.cast("DLManagedTensor *", get(capsule, b"dltensor"))
    t = managed.dl_tensor
    if t.dtype.lanes != 1 or t.dtype.bits % 8:
        raise ValueError("a DLPack tensor of %d-bit, %d-lane elements" % (t.dtype.bits, t.dtype.lanes))
    if t.device.device_type not in (_DL_CPU, _DL_CUDA, _DL_CUDA_HOST):
        raise ValueError("a DLPack tensor on device type %d: libweft takes host and CUDA memory"
                         % t.device.device_type)
    itemsize = t.dtype.bits // 8
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = [t.strides[i] for i in range(t.ndim)] if t.strides != ffi.NULL else None
    ptr = int(ffi.cast("uintptr_t", t.data)) + t.byte_offset
    memory = "cuda" if t.device.device_type == _DL_CUDA else "host"
    ref = _from_interface(ptr, shape, [s * itemsize for s in strides] if strides is not None else None,
                          itemsize, memory, t.device.device_id if memory == "cuda" else -1, (obj, capsule))
    return ref


def array_ref(obj):
    """An ArrayRef of obj, without copying it."""
    if type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr"):
        memory = "cuda" if obj.is_cuda else "host"
        if memory == "host" and obj.device.type != "cpu":
            raise ValueError("a tensor on %s: libweft takes host (CPU) and CUDA memory" % obj.device)
        return ArrayRef(obj.data_ptr(), obj.shape, obj.stride(), obj.element_size(), memory,
                        obj.device.index if memory == "cuda" else -1, obj)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        itemsize = np.dtype(cai["typestr"]).itemsize
        device = getattr(obj, "device_index", None)
        return _from_interface(cai["data"][0], cai["shape"], cai.get("strides"), itemsize, "cuda",
                               device if device is not None else -1, obj)
    if isinstance(obj, np.ndarray):
        array = obj
    elif hasattr(obj, "__array_interface__"):
        array = np.asarray(obj)
    elif hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj)
    else:
        try:
            array = np.asarray(memoryview(obj))  # the buffer protocol: no copy
        except TypeError:
            raise TypeError("%s is not an array libweft can use in place (NumPy, the buffer protocol, "
                            "__cuda_array_interface__ or a torch tensor)" % type(obj).__name__) from None
    ai = array.__array_interface__
    if array.dtype.itemsize == 0:
        raise ValueError("an array of zero-sized elements")
    return _from_interface(ai["data"][0], array.shape, ai.get("strides"), array.dtype.itemsize, "host", -1,
                           array)


def array_at(ptr, shape, strides, dtype, memory, device, writable, owner):
    """libweft's memory at ptr (a cffi pointer) as an array: a HostArray
    for host memory, a DeviceArray on GPU `device`; owner is kept alive by
    it."""
    address = int(load()[0].cast("uintptr_t", ptr))
    if memory == "cuda":
        return DeviceArray(address, shape, strides, dtype, device, writable, owner)
    return host_array(address, shape, strides, dtype, writable, owner)


def host_array(ptr, shape, strides, dtype, writable, owner):
    """A NumPy array over host memory at ptr (strides in elements); owner
    is kept alive by it."""
    ffi, _ = load()
    np_dtype = np.dtype(NUMPY[dtype])
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
    buffer = ffi.buffer(ffi.cast("char *", ptr), span * np_dtype.itemsize)
    array = np.ndarray(shape=tuple(shape), dtype=np_dtype, buffer=buffer,
                       strides=tuple(s * np_dtype.itemsize for s in strides))
    array.flags.writeable = writable
    view = array.view(HostArray)
    view._weft_owner = owner
    return view


class HostArray(np.ndarray):
    """A NumPy array over libweft's memory (a registry slot): it keeps the
    lease or writer it came from, and so the registry's mapping, alive.
    Its elements are valid until that lease is released or that version
    published; a lease's are read-only."""

    def __array_finalize__(self, obj):
        self._weft_owner = getattr(obj, "_weft_owner", None)


class DeviceArray:
    """GPU memory that libweft owns or maps, as __cuda_array_interface__
    (version 3). It stays valid while the lease or writer it came from is
    open; torch.as_tensor(a, device="cuda") views it without a copy."""

    def __init__(self, ptr, shape, strides, dtype, device, writable, owner):
        self.ptr, self.shape, self.strides, self.dtype = ptr, tuple(shape), tuple(strides), dtype
        self.device_index, self.readonly, self._owner = device, not writable, owner

    def _interface(self, readonly):
        np_dtype = np.dtype(NUMPY[self.dtype])
        return {"shape": self.shape, "typestr": np_dtype.str, "data": (self.ptr, readonly),
                "strides": tuple(s * np_dtype.itemsize for s in self.strides), "version": 3,
                "stream": None}

    @property
    def __cuda_array_interface__(self):
        return self._interface(self.readonly)

    def as_torch(self):
        """A torch tensor over the same memory, in libweft's dtype. PyTorch
        has no read-only tensors (torch.as_tensor refuses an interface that
        says read-only): a lease's tensor is handed over writable, and must
        not be written."""
        import torch

        tensor = torch.as_tensor(_Writable(self), device="cuda:%d" % self.device_index
                                 if self.device_index >= 0 else "cuda")
        return tensor.view(getattr(torch, _TORCH[self.dtype])) if self.dtype in _TORCH else tensor


class _Writable:
    """A DeviceArray's interface with the read-only flag off, for PyTorch;
    it keeps the array (and so its lease or writer) alive."""

    def __init__(self, array):
        self._array = array
        self.__cuda_array_interface__ = array._interface(False)


def as_torch(array, dtype):
    """A host array from libweft as a torch tensor in libweft's dtype."""
    if isinstance(array, DeviceArray):
        return array.as_torch()
    import warnings

    import torch

    with warnings.catch_warnings():
        # A read-only array (a lease's) becomes a tensor over the same
        # memory, which must not be written: the same contract as the lease.
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(array)
    return tensor.view(getattr(torch, _TORCH[dtype])) if dtype in _TORCH else tensor
