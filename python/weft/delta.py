"""Delta versions (<weft/delta.h>): the bytes of a tensor that changed
between two versions, encoded on the host and applied in place to a copy
of the older one (contiguous, or rows of a fused tensor)."""

import numpy as np

from . import _tensors
from ._errors import WeftError, check
from ._lib import load


def _host_bytes(array, name):
    ref = _tensors.array_ref(array)
    if ref.memory != "host":
        raise ValueError("%s must be a host array" % name)
    if not ref.contiguous():
        raise ValueError("%s must be contiguous" % name)
    n = ref.itemsize
    for s in ref.shape:
        n *= s
    return ref, n


def _checksum_of(array):
    ffi, lib = load()
    ref, n = _host_bytes(array, "array")
    return lib.weft_checksum_host(ffi.cast("void *", ref.ptr), n)


def checksum(array):
    """The checksum (<weft/checksum.h>) of a contiguous host array's bytes:
    what a registry stores for a tensor at publish, and what a delta
    carries of its new version."""
    return _checksum_of(array)


def delta_encode(old, new):
    """The delta from `old` to `new` (host arrays of the same number of
    bytes) as a NumPy uint8 array, or None when it would not be smaller
    than `new` (send the tensor whole then)."""
    ffi, lib = load()
    ro, n = _host_bytes(old, "old")
    rn, n_new = _host_bytes(new, "new")
    if n != n_new:
        raise ValueError("old and new differ in size (%d and %d bytes)" % (n, n_new))
    out = np.empty(n, np.uint8)
    size = ffi.new("uint64_t *")
    status = lib.weft_delta_encode_host(ffi.cast("void *", ro.ptr), ffi.cast("void *", rn.ptr), n,
                                        ffi.cast("void *", out.ctypes.data), n, size)
    if status == lib.WEFT_ERR_NO_SPACE:
        return None
    check(status, "weft_delta_encode_host")
    return out[:size[0]].copy()


def delta_apply(delta, target, verify=True, transposed=None, checksum=None):
    """Applies `delta` (from delta_encode) in place to `target`, which must
    hold the older bytes: a contiguous host array, or a 2-D one whose rows
    are apart (a slice of a fused tensor). A malformed delta raises
    WeftError (WEFT_ERR_CORRUPT) and changes nothing; with `verify`, the
    result's checksum is held against the one the delta carries, and a
    mismatch (a delta applied to other bytes than its older version's)
    raises WeftError(WEFT_ERR_CORRUPT). Returns that checksum.

    transposed=(rows, cols): `delta` is W's (matrices of rows x cols
    bytes) and `target` holds W transposed (WT, as the FP8 writer lays it
    out): WT is patched where W changed. The delta carries W's checksum,
    so verifying takes WT's own as `checksum` (weft.checksum of the new
    WT, or the one a registry stored)."""
    ffi, lib = load()
    delta = np.ascontiguousarray(delta, dtype=np.uint8)
    ref = _tensors.array_ref(target)
    if ref.memory != "host":
        raise ValueError("target must be a host array")
    if ref.contiguous():
        n = ref.itemsize
        for s in ref.shape:
            n *= s
        row_bytes = row_stride = max(n, 1)
    elif len(ref.shape) == 2 and ref.strides[1] == 1:
        row_bytes, row_stride = ref.shape[1] * ref.itemsize, ref.strides[0] * ref.itemsize
        n = ref.shape[0] * row_bytes
    else:
        raise ValueError("target must be contiguous, or 2-D with contiguous rows")
    if transposed is not None and verify and checksum is None:
        raise ValueError("a transposed apply is verified against WT's own checksum: pass checksum= or verify=False")
    t = ffi.new("weft_delta_target_t *")
    t.data, t.tensor_bytes, t.row_bytes, t.row_stride = ffi.cast("void *", ref.ptr), n, row_bytes, row_stride
    if transposed is not None:
        t.transpose_rows, t.transpose_cols = transposed
    carried = ffi.new("uint64_t *")
    check(lib.weft_delta_apply_host(ffi.cast("void *", delta.ctypes.data), delta.nbytes, t, carried),
          "weft_delta_apply_host")
    if verify:
        if _checksum_of(np.ascontiguousarray(target)) != (carried[0] if checksum is None else checksum):
            raise WeftError(lib.WEFT_ERR_CORRUPT, "weft_delta_apply_host",
                            "the bytes after the delta are not the version it was made for")
    return carried[0]
