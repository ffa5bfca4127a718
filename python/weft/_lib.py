"""Finds and loads libweft and its public headers (cffi, ABI mode).

The library: $WEFT_LIBRARY, else libweft.so.0 in `pkg-config weft`'s
libdir, else the loader's search path. The headers: $WEFT_INCLUDE, else
`pkg-config weft`'s includedir, else those of the prefix the library sits
in. Loaded once, at the first use.
"""

import ctypes.util
import os
import subprocess
import threading

import cffi

from . import _headers

_lock = threading.Lock()
_loaded = None


def _pkg_config(variable):
    try:
        out = subprocess.run(["pkg-config", "--variable=" + variable, "weft"], check=True,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _library_path():
    path = os.environ.get("WEFT_LIBRARY")
    if path:
        return path
    libdir = _pkg_config("libdir")
    if libdir and os.path.exists(os.path.join(libdir, "libweft.so.0")):
        return os.path.join(libdir, "libweft.so.0")
    found = ctypes.util.find_library("weft")
    if found:
        return found
    raise ImportError("libweft not found: install it (make install; pkg-config weft must find it) "
                      "or set WEFT_LIBRARY to the path of libweft.so")


def _include_dir(library):
    path = os.environ.get("WEFT_INCLUDE")
    if path:
        return path
    includedir = _pkg_config("includedir")
    if includedir and os.path.exists(os.path.join(includedir, "weft", "weft.h")):
        return includedir
    # <prefix>/lib[/<triplet>]/libweft.so → <prefix>/include
    prefix = os.path.dirname(os.path.realpath(library))
    for _ in range(3):
        prefix = os.path.dirname(prefix)
        if os.path.exists(os.path.join(prefix, "include", "weft", "weft.h")):
            return os.path.join(prefix, "include")
    raise ImportError("libweft's headers not found: install them, or set WEFT_INCLUDE to the folder "
                      "that holds weft/weft.h")


def load():
    """(ffi, lib): the declarations of the headers and the library."""
    global _loaded
    loaded = _loaded
    if loaded is not None:  # every call after the first: no lock (an assignment is atomic)
        return loaded
    with _lock:
        if _loaded is None:
            library = _library_path()
            ffi = cffi.FFI()
            ffi.cdef(_headers.declarations(_include_dir(library)))
            _loaded = (ffi, ffi.dlopen(library))
        return _loaded
