#!/usr/bin/env python3
"""How far apart BF16 Newton-Schulz implementations land, and how far each
is from the same five iterations in FP64: the scale against which a
"within 2e-2 of the reference" bound should be read.

On stacks shaped like tests/optim_torch.py's (8 x 1536x2048, 8 x 2048x768,
rows-dependent mean like its gradients), from the same normalized BF16 X:
  eager     the reference as written (every product and scaled term
            rounded to BF16, as eager PyTorch rounds them);
  compiled  the same function under torch.compile (Inductor fuses the
            element-wise terms in FP32 and rounds once);
  epilogue  b*A + c*A@A and a*X + B@X as GEMM epilogues (baddbmm: one
            rounding a sum);
  fp64      the same five iterations in FP64.
Prints one JSON object a shape: each variant's max relative Frobenius
distance (over the stack) from eager and from fp64, and epilogue's from
compiled.

  python3 perf/ns_accuracy.py          (needs PyTorch and a GPU)"""
import json
import sys

try:
    import torch
except ImportError:
    print(json.dumps({"error": "no PyTorch"}))
    sys.exit(3)

A_, B_, C_ = 3.4445, -4.7750, 2.0315


def normalized(G):
    X = G.bfloat16()
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)


def eager(X):
    for _ in range(5):
        A = X @ X.mT
        B = B_ * A + C_ * A @ A
        X = A_ * X + B @ X
    return X


def epilogue(X):
    for _ in range(5):
        A = X @ X.mT
        B = torch.baddbmm(A, A, A, beta=B_, alpha=C_)
        X = torch.baddbmm(X, B, X, beta=A_, alpha=1.0)
    return X


def fp64(X):
    X = X.double()
    for _ in range(5):
        A = X @ X.mT
        B = B_ * A + C_ * A @ A
        X = A_ * X + B @ X
    return X


def distance(a, b):
    return ((a.double() - b.double()).norm(dim=(-2, -1)) / b.double().norm(dim=(-2, -1))).max().item()


def main():
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no GPU"}))
        return 3
    compiled = torch.compile(eager)
    for e, r, c in ((8, 1536, 2048), (8, 2048, 768)):
        g = torch.Generator().manual_seed(r * 7 + c)
        G = (torch.randn(e, r, c, generator=g) + torch.arange(r).view(1, r, 1) % 5 * 0.3).cuda()
        X = normalized(G)
        ref, exact = eager(X), fp64(X)
        out = {"shape": [e, r, c], "torch": torch.__version__, "eager_vs_fp64": distance(ref, exact)}
        ys = {}
        for name, fn in (("compiled", compiled), ("epilogue", epilogue)):
            y = ys[name] = fn(X)
            out[name + "_vs_eager"] = distance(y, ref)
            out[name + "_vs_fp64"] = distance(y, exact)
        out["epilogue_vs_compiled"] = distance(ys["epilogue"], ys["compiled"])
        print(json.dumps(out))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
