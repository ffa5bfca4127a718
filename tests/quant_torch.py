#!/usr/bin/env python3
"""libweft's FP8 writer (host reference and CUDA kernel, via quant_files)
against PyTorch evaluating the same formulas on the GPU, FP32 and BF16
inputs, ragged shapes, zero blocks, NaN and Inf blocks:

- the reference formula (WEFT_QUANT_FORMULA_REFERENCE) against DeepGEMM's
  per_block_cast_to_fp8 as its tests write it: amax = |x|.float().amax
  over 128x128 blocks, clamp(1e-4); q = (x * (448.0 / amax)).to(
  float8_e4m3fn); scale_inv = amax / 448.0;
- the default formula against its statement in quant.h: amax with NaN
  ignored, clamp(1e-4); s = amax / 448 as an IEEE division (a tensor by a
  tensor: PyTorch multiplies by the reciprocal when the divisor is a
  Python scalar); q = (x / s).to(float8_e4m3fn).

W, WT and scale_inv must be identical, byte for byte (NaN words compared
as the GPU leaves them). Exit: 0 pass, 1 fail, 77 without PyTorch or a GPU.

  quant_torch.py BUILD_TESTS_DIR"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    print("quant_torch: no PyTorch or NumPy: skipped")
    sys.exit(77)
if not torch.cuda.is_available():
    print("quant_torch: no GPU: skipped")
    sys.exit(77)

SHAPES = [(1, 5), (7, 131), (128, 128), (129, 1000), (300, 200), (1536, 2048), (2048, 768)]
B = 128


def blocks_of(x):
    """x zero-padded to whole 128x128 blocks, viewed [bm, 128, bn, 128]."""
    m, n = x.shape
    pm, pn = -(-m // B) * B, -(-n // B) * B
    padded = torch.zeros((pm, pn), dtype=x.dtype, device=x.device)
    padded[:m, :n] = x
    return padded.view(pm // B, B, pn // B, B), (pm, pn)


def reference(x):
    blocks, (pm, pn) = blocks_of(x)
    amax = blocks.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    q = (blocks * (448.0 / amax)).to(torch.float8_e4m3fn)
    return q.view(pm, pn)[:x.shape[0], :x.shape[1]], (amax / 448.0).view(pm // B, pn // B)


def exact(x):
    blocks, (pm, pn) = blocks_of(x)
    a = blocks.abs().float()
    amax = torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    s = torch.div(amax, torch.full_like(amax, 448.0))
    q = torch.div(blocks.float(), s).to(torch.float8_e4m3fn)
    return q.view(pm, pn)[:x.shape[0], :x.shape[1]], s.view(pm // B, pn // B)


def inputs(shape, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    m, n = shape
    x = torch.randn(shape, generator=g) * 0.02 * torch.exp(torch.randn((m, 1), generator=g) * 2)
    # A zero block, a block of tiny values, NaN and Inf (both signs) in a few blocks.
    x[:min(m, B), :min(n, B)] = 0.0
    if m > B or n > B:
        x[-min(m, 64):, -min(n, 64):] *= 1e-6
    picks = torch.randint(0, m * n, (max(1, m * n // 20000),), generator=g)
    specials = torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), -0.0])
    x.view(-1)[picks] = specials[torch.arange(len(picks)) % len(specials)]
    return x.to(dtype)


def as_bytes(t):
    return t.contiguous().view(torch.uint8).cpu().numpy().reshape(-1)


def scale_words(t):
    a = t.contiguous().cpu().numpy().astype(np.float32).reshape(-1)
    out = a.view(np.uint32).copy()
    out[np.isnan(a)] = 0x7FFFFFFF
    return out


def main():
    tests_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    tool = os.path.join(tests_dir, "quant_files")
    failures = cases = 0
    with tempfile.TemporaryDirectory() as d:
        for si, shape in enumerate(SHAPES):
            for dname, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                x = inputs(shape, 100 + si, dtype)
                raw = x.view(torch.int32 if dtype == torch.float32 else torch.int16).numpy()
                raw.tofile(os.path.join(d, "x.bin"))
                gx = x.cuda()
                for formula, fn in (("reference", reference), ("exact", exact)):
                    q, s = fn(gx)
                    torch.cuda.synchronize()
                    want = {"w": as_bytes(q), "wt": as_bytes(q.t()), "s": scale_words(s)}
                    for mode in ("host", "cuda"):
                        subprocess.run([tool, mode, d, dname, str(shape[0]), str(shape[1]), formula], check=True)
                        got = {
                            "w": np.fromfile(os.path.join(d, "w.%s.bin" % mode), dtype=np.uint8),
                            "wt": np.fromfile(os.path.join(d, "wt.%s.bin" % mode), dtype=np.uint8),
                            "s": np.fromfile(os.path.join(d, "s.%s.bin" % mode), dtype=np.uint32),
                        }
                        differ = {k: int((got[k] != want[k]).sum()) for k in want}
                        ok = all(v == 0 for v in differ.values())
                        cases += 1
                        failures += not ok
                        print("quant_torch: %-9s %-4s %-4s %5dx%-5d W differ %d, WT differ %d, scales differ %d  %s"
                              % (formula, mode, dname, shape[0], shape[1], differ["w"], differ["wt"], differ["s"],
                                 "ok" if ok else "FAIL"))
    print("quant_torch: torch %s: %d of %d cases identical to PyTorch's evaluation" %
          (torch.__version__, cases - failures, cases))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
