"""The FP8 writer on the host against a NumPy oracle written from
<weft/quant.h>'s contract, FP32 and BF16, ragged blocks, zero, NaN and
infinite blocks."""

import numpy as np
import pytest

import weft


def e4m3_table():
    """The 127 non-negative finite e4m3fn values, in code order."""
    values = []
    for code in range(0x7F):
        exponent, mantissa = code >> 3, code & 7
        values.append(mantissa / 8 * 2.0 ** -6 if exponent == 0 else (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return np.array(values, dtype=np.float64)


TABLE = e4m3_table()


def e4m3(y):
    """e4m3fn(y) for float32 y: nearest, ties to the even code, saturated
    to ±448, NaN → 0x7F (the header's rule)."""
    y = np.asarray(y, dtype=np.float32).astype(np.float64)
    mag = np.minimum(np.abs(y), 448.0)
    hi = np.clip(np.searchsorted(TABLE, mag), 0, len(TABLE) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = mag - TABLE[lo], TABLE[hi] - mag
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(mag >= TABLE[-1], 0x7E, code).astype(np.uint8)
    code = np.where(np.signbit(y), code | 0x80, code)
    return np.where(np.isnan(y), 0x7F, code).astype(np.uint8)


def oracle(x, block):
    rows, cols = x.shape
    br, bc = -(-rows // block), -(-cols // block)
    w = np.empty((rows, cols), np.uint8)
    s = np.empty((br, bc), np.float32)
    for i in range(br):
        for j in range(bc):
            tile = x[i * block:(i + 1) * block, j * block:(j + 1) * block]
            finite = tile[~np.isnan(tile)]
            amax = np.float32(max(np.max(np.abs(finite)) if finite.size else 0, 1e-4))
            amax = np.maximum(amax, np.float32(1e-4))
            scale = np.float32(amax) / np.float32(448)
            with np.errstate(invalid="ignore", divide="ignore"):
                w[i * block:(i + 1) * block, j * block:(j + 1) * block] = e4m3(tile / scale)
            s[i, j] = scale
    return w, s


def reference_oracle(x, block):
    """DeepGEMM's per_block_cast_to_fp8 in NumPy's FP32, evaluated as
    PyTorch does on a GPU (quant.h): amax propagates NaN, clamp(1e-4),
    448 / amax as reciprocal × 448, amax / 448 as amax × RN(1/448), the
    GPU's canonical NaN."""
    rows, cols = x.shape
    br, bc = -(-rows // block), -(-cols // block)
    w = np.empty((rows, cols), np.uint8)
    s = np.empty((br, bc), np.float32)
    one, e4m3_max = np.float32(1), np.float32(448)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for i in range(br):
            for j in range(bc):
                tile = x[i * block:(i + 1) * block, j * block:(j + 1) * block]
                amax = np.float32(np.nan) if np.isnan(tile).any() else np.abs(tile).max()
                amax = amax if np.isnan(amax) or amax >= np.float32(1e-4) else np.float32(1e-4)
                f = (one / amax) * e4m3_max
                w[i * block:(i + 1) * block, j * block:(j + 1) * block] = e4m3(tile * f)
                s[i, j] = amax * (one / e4m3_max)
    words = s.view(np.uint32).copy()
    words[np.isnan(s)] = 0x7FFFFFFF
    return w, words.view(np.float32)


def bf16_bits(x):
    """Round-to-nearest-even FP32 → BF16 bits, and their FP32 values."""
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded, (rounded.astype(np.uint32) << 16).view(np.float32)


def special(experts, rows, cols, rng):
    x = (rng.standard_normal((experts, rows, cols)) * 0.02).astype(np.float32)
    x[0, :128, :128] = 0  # an all-zero block
    x[0, 5 % rows, 300 % cols] = np.nan  # a NaN among finite elements
    if experts > 1:
        x[1, 130 % rows, 7] = np.inf  # an infinite element: its block becomes NaN
        x[1, 131 % rows, 8] = -np.inf
    x[-1, -1, -1] = 1e6  # saturates nothing: s follows amax
    return x


@pytest.mark.parametrize("shape", [(2, 300, 200), (1, 128, 128), (3, 1, 129)])
@pytest.mark.parametrize("block", [128, 32])
def test_host_fp32_matches_the_oracle(shape, block):
    rng = np.random.default_rng(7)
    x = special(*shape, rng)
    e, rows, cols = shape
    w = np.zeros((e, rows, cols), np.uint8)
    wt = np.zeros((e, cols, rows), np.uint8)
    s = np.zeros((e, -(-rows // block), -(-cols // block)), np.float32)
    weft.quantize(x, w, wt, s, block=block)
    for k in range(e):
        want_w, want_s = oracle(x[k], block)
        assert np.array_equal(w[k], want_w), np.argwhere(w[k] != want_w)[:5]
        assert np.array_equal(wt[k], want_w.T)
        assert np.array_equal(s[k].view(np.uint32), want_s.view(np.uint32))


def test_host_bf16_matches_the_oracle():
    rng = np.random.default_rng(11)
    x32 = special(2, 256, 192, rng)
    bits, x = bf16_bits(x32)
    w = np.zeros(x.shape, np.uint8)
    s = np.zeros((2, 2, 2), np.float32)
    weft.quantize(bits, w, None, s)
    for k in range(2):
        want_w, want_s = oracle(x[k], 128)
        assert np.array_equal(w[k], want_w)
        assert np.array_equal(s[k].view(np.uint32), want_s.view(np.uint32))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_host_reference_formula_matches_its_oracle(dtype):
    rng = np.random.default_rng(13)
    x32 = special(2, 300, 200, rng)
    x32[1, 200:, :64] = 3e-6  # a tiny block: the clamp
    bits, x = bf16_bits(x32) if dtype == "bf16" else (x32, x32)
    w = np.zeros(x.shape, np.uint8)
    wt = np.zeros((2, 200, 300), np.uint8)
    s = np.zeros((2, 3, 2), np.float32)
    weft.quantize(bits, w, wt, s, formula="reference")
    for k in range(2):
        want_w, want_s = reference_oracle(x[k], 128)
        assert np.array_equal(w[k], want_w), np.argwhere(w[k] != want_w)[:5]
        assert np.array_equal(wt[k], want_w.T)
        assert np.array_equal(s[k].view(np.uint32), want_s.view(np.uint32))
    # It is not the default formula under another name: the scales differ.
    s_exact = np.zeros_like(s)
    weft.quantize(bits, np.zeros_like(w), None, s_exact)
    assert not np.array_equal(s.view(np.uint32), s_exact.view(np.uint32))


def test_an_unknown_formula_is_refused():
    x = np.zeros((4, 4), np.float32)
    with pytest.raises(weft.WeftError) as err:
        weft.quantize(x, np.zeros((4, 4), np.uint8), None, np.zeros((1, 1), np.float32), formula="deepgemm")
    assert err.value.name == "WEFT_ERR_INVALID_PARAM"
    with pytest.raises(weft.WeftError):
        weft.quantize(x, np.zeros((4, 4), np.uint8), None, np.zeros((1, 1), np.float32), ue8m0=True,
                      formula="reference")


def test_codes_round_trip():
    for code in list(range(0x7F)) + [0x80 | c for c in range(1, 0x7F)]:
        assert weft.e4m3_encode(weft.e4m3_decode(code)) == code


def test_bad_arrays_are_refused():
    x = np.zeros((128, 128), np.float32)
    with pytest.raises(ValueError):
        weft.quantize(x, np.zeros((128, 64), np.uint8), None, np.zeros((1, 1), np.float32))
    with pytest.raises(ValueError):
        weft.quantize(x.astype(np.float64), np.zeros((128, 128), np.uint8), None, np.zeros((1, 1), np.float32))
    with pytest.raises(weft.WeftError) as err:
        weft.quantize(x, np.zeros((128, 128), np.uint8), None, np.zeros((1, 1), np.float32), block=100)
    assert err.value.name == "WEFT_ERR_INVALID_PARAM"
    with pytest.raises(TypeError):
        weft.quantize([[1.0]], np.zeros((1, 1), np.uint8), None, np.zeros((1, 1), np.float32))
