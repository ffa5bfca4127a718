"""weft: libweft from Python (cffi over the installed C library).

Versioned expert weights in a shared-memory registry, the FP8 writer and
the transports, with PyTorch, NumPy, CuPy or JAX arrays in and out and no
copies on the data path. See the package README and help(weft.Registry).
"""

from ._errors import WeftError
from ._lib import load as _load
from .delta import checksum, delta_apply, delta_encode
from .optim import Group, Optimizer, RegistryWriter
from .quant import e4m3_decode, e4m3_encode, quantize
from .registry import Consumer, Lease, Registry, TensorInfo, Writer
from .transport import Plan, Remote, Server, View

__all__ = ["WeftError", "Registry", "Writer", "Lease", "Consumer", "TensorInfo", "Plan", "Server", "Remote", "View", "quantize",
           "e4m3_encode", "e4m3_decode", "Optimizer", "Group", "RegistryWriter", "checksum", "delta_encode", "delta_apply",
           "version", "info"]


def version():
    """The loaded library's version ("0.1.0")."""
    ffi, lib = _load()
    return ffi.string(lib.weft_version()).decode()


def info():
    """What `weft-perf info` prints, as a dict: the library's version, each
    backend (built, found, version, details) and each WEFT_* setting (its
    value, default, and why it is invalid where it is)."""
    ffi, lib = _load()
    backends = {}
    backend = ffi.new("weft_backend_info_t *")
    for b in range(lib.WEFT_BACKEND_LAST):
        if lib.weft_backend_query(b, backend) != 0:
            continue
        backends[ffi.string(backend.name).decode()] = {
            "built": bool(backend.compiled), "available": bool(backend.available),
            "version": ffi.string(backend.version).decode(),
            "detail": ffi.string(backend.detail).decode().splitlines()}
    settings = {}
    var = ffi.new("weft_config_var_t *")
    why = ffi.new("char[]", 512)
    for i in range(lib.weft_config_count()):
        if lib.weft_config_describe(i, var) != 0:
            continue
        entry = {}
        for field, _ in ffi.typeof("weft_config_var_t").fields:
            value = getattr(var, field)
            if isinstance(value, ffi.CData):
                value = ffi.string(value).decode() if value != ffi.NULL else None
            entry[field] = value
        entry["invalid"] = (ffi.string(why).decode() if lib.weft_config_check(i, why, 512) != 0 else None)
        settings[entry.pop("name", str(i))] = entry
    return {"libweft": version(), "backends": backends, "settings": settings}
