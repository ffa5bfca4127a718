"""The FP8 writer (<weft/quant.h>): blockwise e4m3 W, its transpose WT and
the block scales, from FP32 or BF16, on the host or on a GPU."""

from . import _tensors
from ._errors import check
from ._lib import load


def _matrices(x, w, wt, scale_inv):
    """(memory, x dtype, rows, cols, experts, the C matrices and what keeps
    them alive) of [E,] rows × cols inputs."""
    refs = [_tensors.array_ref(a) if a is not None else None for a in (x, w, wt, scale_inv)]
    rx, rw, rwt, rs = refs
    memories = {r.memory for r in refs if r is not None}
    if len(memories) != 1:
        raise ValueError("x, w, wt and scale_inv must all be host arrays or all be GPU arrays")
    if len(rx.shape) not in (2, 3):
        raise ValueError("x must be [rows, cols] or [experts, rows, cols], not %s" % (rx.shape,))
    experts = rx.shape[0] if len(rx.shape) == 3 else 1
    rows, cols = rx.shape[-2:]
    if rx.itemsize == 4:
        x_dtype = "fp32"
    elif rx.itemsize == 2:
        x_dtype = "bf16"
    else:
        raise ValueError("x must be FP32 or BF16 (%d-byte elements given)" % rx.itemsize)
    if rx.strides[-1] != 1 or (experts > 1 and rx.strides[0] < rows * rx.strides[-2]):
        raise ValueError("x's rows must be contiguous and its experts apart")
    for name, r, shape in (("w", rw, (rows, cols)), ("wt", rwt, (cols, rows)),
                           ("scale_inv", rs, None)):
        if r is None:
            continue
        if r.itemsize != (4 if name == "scale_inv" else 1):
            raise ValueError("%s must have %d-byte elements" % (name, 4 if name == "scale_inv" else 1))
        if not r.contiguous():
            raise ValueError("%s must be contiguous" % name)
        if shape is not None and tuple(r.shape[-2:]) != shape:
            raise ValueError("%s must be %s a matrix, not %s" % (name, shape, tuple(r.shape[-2:])))
        if (len(r.shape) == 3 and r.shape[0] != experts) or (len(r.shape) == 2 and experts != 1):
            raise ValueError("%s must have as many experts as x (%d)" % (name, experts))
    ffi, _ = load()
    matrices = ffi.new("weft_quant_matrix_t[]", experts)
    for e in range(experts):
        m = matrices[e]
        m.x = ffi.cast("void *", rx.ptr + e * (rx.strides[0] if experts > 1 else 0) * rx.itemsize)
        m.x_row_stride = rx.strides[-2]
        m.w = ffi.cast("uint8_t *", rw.ptr + e * rows * cols)
        if rwt is not None:
            m.wt = ffi.cast("uint8_t *", rwt.ptr + e * rows * cols)
        per = rs.shape[-1] * rs.shape[-2]
        m.scale_inv = ffi.cast("float *", rs.ptr + e * per * 4)
    return memories.pop(), x_dtype, rows, cols, experts, matrices, refs


def formula_code(formula):
    """The weft_quant_formula_t of "exact" or "reference" (WeftError for
    any other name)."""
    ffi, lib = load()
    out = ffi.new("weft_quant_formula_t *")
    check(lib.weft_quant_formula_parse(str(formula).encode(), out), "weft_quant_formula_parse")
    return out[0]


def quantize(x, w, wt, scale_inv, block=128, ue8m0=False, stream=None, formula="exact"):
    """Quantizes x ([rows, cols] or [experts, rows, cols], FP32 or BF16 as
    raw uint16) into w (e4m3 bytes, x's shape), wt (its transpose per
    expert; None: not written) and scale_inv (FP32 [⌈rows/b⌉, ⌈cols/b⌉] per
    expert), in place. formula "exact" (libweft's default) or "reference"
    (the bytes of DeepGEMM's per_block_cast_to_fp8 as PyTorch computes it;
    quant.h). Host arrays run weft_quant_host; GPU arrays
    weft_quant_cuda on `stream` (an int handle, or anything with
    .cuda_stream such as a torch.cuda.Stream; None: the legacy default
    stream), returning once the work is queued."""
    ffi, lib = load()
    memory, x_dtype, rows, cols, experts, matrices, _refs = _matrices(x, w, wt, scale_inv)
    params = ffi.new("weft_quant_params_t *")
    params.field_mask = (lib.WEFT_QUANT_FIELD_BLOCK | lib.WEFT_QUANT_FIELD_UE8M0 | lib.WEFT_QUANT_FIELD_WRITE_WT |
                         lib.WEFT_QUANT_FIELD_FORMULA)
    params.block, params.ue8m0, params.write_wt = block, int(bool(ue8m0)), int(wt is not None)
    params.formula = formula_code(formula)
    code = _tensors.dtype_code(x_dtype)
    if memory == "host":
        check(lib.weft_quant_host(params, code, rows, cols, matrices, experts), "weft_quant_host")
    else:
        handle = getattr(stream, "cuda_stream", stream) or 0
        check(lib.weft_quant_cuda(params, code, rows, cols, matrices, experts, ffi.cast("void *", handle)),
              "weft_quant_cuda")


def e4m3_encode(value):
    """One float's e4m3 byte, as libweft rounds it."""
    return load()[1].weft_fp8_e4m3_encode(value)


def e4m3_decode(byte):
    return load()[1].weft_fp8_e4m3_decode(byte)
