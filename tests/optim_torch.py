#!/usr/bin/env python3
"""libweft's AdamW (host reference and CUDA kernel) against PyTorch's fused
CUDA AdamW (torch._fused_adamw_) on the same inputs, one step at many step
counts and hyperparameters, random and adversarial values.

m and v must be byte-identical. The master is byte-identical or differs by
at most one ulp: PyTorch raises the betas to the step with CUDA's powf, which
is not always correctly rounded, and libweft rounds the power once from
double. The report says how many elements differ and by how much.

Then libweft's Muon on the GPU (muon_files) against the reference Muon in
PyTorch (the momentum lerp, Nesterov, the quintic Newton-Schulz iteration in
BF16 of Keller Jordan's formulation, the shape scale), expert stacks shaped
like a MoE layer: the orthogonalized update of every matrix within 2e-2
(relative Frobenius norm), and the batched launch against one matrix at a
time within the same: that is the EAGER rounding, which rounds where eager
PyTorch does. The FUSED rounding (the default: the sums in the GEMM
epilogues) against the reference under torch.compile (the form Muon runs in
practice, whose Inductor kernels also round each sum once), against the same
iteration written with torch.baddbmm, which rounds the same sums once, and
against the iteration in FP64: within 2e-2 of each.

  optim_torch.py BUILD_TESTS_DIR [--json FILE]
Exit: 0 pass, 1 fail, 77 without PyTorch or a GPU."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    print("optim_torch: no PyTorch or NumPy: skipped")
    sys.exit(77)
if not torch.cuda.is_available():
    print("optim_torch: no GPU: skipped")
    sys.exit(77)

HPARAMS = [
    # lr, beta1, beta2, eps, weight_decay
    (1e-3, 0.9, 0.999, 1e-8, 1e-2),
    (3e-4, 0.9, 0.95, 1e-8, 0.1),
    (1e-5, 0.8, 0.99, 1e-6, 0.0),
    (2.5e-2, 0.5, 0.9, 1e-10, 5e-4),
]
STEPS = [1, 2, 3, 10, 100, 1000, 12345, 1000000]
N = 1 << 20


def inputs(seed, adversarial):
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(N, generator=g) * 0.02
    m = torch.randn(N, generator=g) * 1e-3
    v = torch.rand(N, generator=g) * 1e-6
    grad = torch.randn(N, generator=g) * torch.exp(torch.randn(N, generator=g) * 3)
    if adversarial:
        special = torch.tensor([0.0, -0.0, 1e-45, -1.1754942e-38, 3.4028235e38, -3.4028235e38,
                                float("inf"), float("-inf"), float("nan"), 1e-30, 1e30])
        for t in (p, m, grad):
            idx = torch.randint(0, N, (N // 8,), generator=g)
            t[idx] = special[torch.randint(0, len(special), (N // 8,), generator=g)]
        v[torch.randint(0, N, (N // 16,), generator=g)] = 0.0
    return p, m, v, grad


def canonical(a):
    """torch's NaN bytes as the GPU leaves them; libweft stores 0x7FFFFFFF."""
    out = a.view(np.uint32).copy()
    out[np.isnan(a)] = 0x7FFFFFFF
    return out


def ulp_gap(a, b):
    """|a - b| in ulps for finite values of one sign; huge otherwise."""
    ai = a.view(np.int32).astype(np.int64)
    bi = b.view(np.int32).astype(np.int64)
    ai = np.where(ai < 0, -(ai & 0x7FFFFFFF), ai)
    bi = np.where(bi < 0, -(bi & 0x7FFFFFFF), bi)
    gap = np.abs(ai - bi)
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, gap)


def main():
    tests_dir = sys.argv[1] if len(sys.argv) > 1 else "."
    json_out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    tool = os.path.join(tests_dir, "adamw_files")
    cases, failures = [], 0
    with tempfile.TemporaryDirectory() as d:
        for hi, (lr, b1, b2, eps, wd) in enumerate(HPARAMS):
            for si, t in enumerate(STEPS):
                adversarial = (si % 2) == 1
                p, m, v, grad = inputs(1000 * hi + si, adversarial)
                for name, a in (("p", p), ("m", m), ("v", v), ("g", grad)):
                    a.numpy().astype(np.float32).tofile(os.path.join(d, name + ".f32"))
                tp, tm, tv, tg = (x.cuda() for x in (p, m, v, grad))
                step = torch.tensor(float(t), dtype=torch.float32, device="cuda")
                torch._fused_adamw_([tp], [tg], [tm], [tv], [], [step], lr=lr, beta1=b1, beta2=b2,
                                    weight_decay=wd, eps=eps, amsgrad=False, maximize=False)
                torch.cuda.synchronize()
                ref = {"p": tp.cpu().numpy(), "m": tm.cpu().numpy(), "v": tv.cpu().numpy()}
                for mode in ("host", "cuda"):
                    subprocess.run([tool, mode, d, str(N), str(t), repr(lr), repr(b1), repr(b2), repr(eps),
                                    repr(wd)], check=True)
                    case = {"mode": mode, "step": t, "lr": lr, "beta1": b1, "beta2": b2, "eps": eps,
                            "weight_decay": wd, "adversarial": adversarial}
                    for name in ("p", "m", "v"):
                        ours = np.fromfile(os.path.join(d, "%s.%s.f32" % (name, mode)), dtype=np.float32)
                        differ = canonical(ours) != canonical(ref[name])
                        gap = ulp_gap(ours, ref[name])
                        case[name + "_differ"] = int(differ.sum())
                        case[name + "_max_ulp"] = int(gap.max())
                    ok = (case["m_differ"] == 0 and case["v_differ"] == 0 and case["p_max_ulp"] <= 1)
                    case["ok"] = ok
                    failures += not ok
                    cases.append(case)
                    print("optim_torch: %-4s step %-7d lr %-7g b1 %-4g b2 %-5g eps %-6g wd %-6g %-11s "
                          "p differ %d (max %d ulp)  m differ %d  v differ %d  %s"
                          % (mode, t, lr, b1, b2, eps, wd, "adversarial" if adversarial else "random",
                             case["p_differ"], case["p_max_ulp"], case["m_differ"], case["v_differ"],
                             "ok" if ok else "FAIL"))
    identical = sum(1 for c in cases if c["p_differ"] == 0 and c["m_differ"] == 0 and c["v_differ"] == 0)
    print("optim_torch: torch %s: %d of %d cases byte-identical, %d within one ulp of the master, %d failed"
          % (torch.__version__, identical, len(cases), len(cases) - identical - failures, failures))
    muon_cases, muon_failures = muon(tests_dir)
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"torch": torch.__version__, "elements": N, "cases": cases, "muon": muon_cases}, f, indent=1)
    return 1 if failures or muon_failures else 0


def ns_reference(G, steps, rounding="eager"):
    """Newton-Schulz as the reference Muon computes it, in BF16 (eager);
    with each sum in a GEMM epilogue (fused: torch.baddbmm rounds b*A +
    c*A@A and a*X + B@X once); or every step in FP64 from the same BF16
    start (fp64)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.bfloat16()
    tall = G.size(-2) > G.size(-1)
    if tall:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    if rounding == "fp64":
        X = X.double()
    for _ in range(steps):
        A = X @ X.mT
        if rounding == "fused":
            B = torch.baddbmm(A, A, A, beta=b, alpha=c)
            X = torch.baddbmm(X, B, X, beta=a, alpha=1.0)
        else:
            B = b * A + c * A @ A
            X = a * X + B @ X
    return X.mT if tall else X


def rel_frobenius(a, b):
    """Per matrix of a stack: ||a - b||_F / ||b||_F."""
    return ((a - b).norm(dim=(-2, -1)) / b.norm(dim=(-2, -1))).cpu().tolist()


def muon(tests_dir):
    tool = os.path.join(tests_dir, "muon_files")
    lr, beta, wd, steps = 0.02, 0.95, 0.01, 5
    cases, failures = [], 0
    compiled = torch.compile(ns_reference)
    with tempfile.TemporaryDirectory() as d:
        for experts, rows, cols, nesterov in ((8, 1536, 2048, 1), (8, 2048, 768, 1), (4, 512, 512, 0)):
            g = torch.Generator().manual_seed(rows * 7 + cols)
            p = torch.randn(experts, rows, cols, generator=g) * 0.02
            m = torch.randn(experts, rows, cols, generator=g) * 0.01
            grad = torch.randn(experts, rows, cols, generator=g) + torch.arange(rows).view(1, rows, 1) % 5 * 0.3
            for name, t in (("p", p), ("m", m), ("g", grad)):
                t.numpy().astype(np.float32).tofile(os.path.join(d, name + ".f32"))
            subprocess.run([tool, d, str(experts), str(rows), str(cols), repr(lr), repr(beta), repr(wd),
                            str(nesterov), str(steps)], check=True)
            shape = (experts, rows, cols)
            ours_p = torch.from_numpy(np.fromfile(os.path.join(d, "p.batched.f32"), dtype=np.float32)).view(shape)
            ours_m = torch.from_numpy(np.fromfile(os.path.join(d, "m.batched.f32"), dtype=np.float32)).view(shape)
            single = torch.from_numpy(np.fromfile(os.path.join(d, "p.single.f32"), dtype=np.float32)).view(shape)
            full = torch.from_numpy(np.fromfile(os.path.join(d, "p.full.f32"), dtype=np.float32)).view(shape)
            fused = torch.from_numpy(np.fromfile(os.path.join(d, "p.fused.f32"), dtype=np.float32)).view(shape)
            tm, tg = m.cuda(), grad.cuda()
            tm.lerp_(tg, 1 - beta)
            u = tg.lerp(tm, beta) if nesterov else tm
            scale = max(1.0, rows / cols) ** 0.5
            ref = ns_reference(u, steps).float() * scale
            ref_fused = ns_reference(u, steps, "fused").float() * scale
            ref_compiled = compiled(u, steps).float() * scale
            ref_fp64 = ns_reference(u, steps, "fp64") * scale
            decayed = p * (1 - lr * wd)
            ours = ((decayed - ours_p) / lr).cuda()
            ours_single = ((decayed - single) / lr).cuda()
            ours_full = ((decayed - full) / lr).cuda()
            ours_fused = ((decayed - fused) / lr).cuda()
            err = rel_frobenius(ours, ref)
            err_fused = rel_frobenius(ours_fused, ref_fused)
            err_fused_fp64 = rel_frobenius(ours_fused.double(), ref_fp64)
            err_fused_compiled = rel_frobenius(ours_fused, ref_compiled)
            err_compiled_eager = rel_frobenius(ref_compiled, ref)
            err_eager_fp64 = rel_frobenius(ours.double(), ref_fp64)
            err_single = rel_frobenius(ours_single, ours)
            err_full = rel_frobenius(ours_full, ref)
            m_differ = int((tm.cpu().numpy().view(np.uint32) != ours_m.numpy().view(np.uint32)).sum())
            ok = (max(err) <= 2e-2 and max(err_single) <= 2e-2 and max(err_full) <= 2e-2 and
                  max(err_fused) <= 2e-2 and max(err_fused_fp64) <= 2e-2 and max(err_fused_compiled) <= 2e-2)
            failures += not ok
            case = {"experts": experts, "rows": rows, "cols": cols, "nesterov": nesterov,
                    "update_rel_err_max": max(err), "update_rel_err_mean": sum(err) / len(err),
                    "batched_vs_single_max": max(err_single), "whole_gram_rel_err_max": max(err_full),
                    "fused_vs_baddbmm_max": max(err_fused), "fused_vs_fp64_max": max(err_fused_fp64),
                    "eager_vs_fp64_max": max(err_eager_fp64), "fused_vs_compiled_max": max(err_fused_compiled),
                    "compiled_vs_eager_reference_max": max(err_compiled_eager),
                    "momentum_differ": m_differ, "ok": ok}
            cases.append(case)
            print("optim_torch: muon %dx%dx%d nesterov %d: update vs the reference %.4f max, %.4f mean "
                  "(relative Frobenius; %.4f with X.X^T multiplied whole); batched vs one at a time %.2g; "
                  "momentum bytes differing %d; fused rounding vs the compiled reference %.4f, vs baddbmm %.4f, "
                  "vs FP64 %.4f (eager vs FP64 %.4f; the compiled reference vs the eager one %.4f)  %s"
                  % (experts, rows, cols, nesterov, max(err), sum(err) / len(err), max(err_full), max(err_single),
                     m_differ, max(err_fused_compiled), max(err_fused), max(err_fused_fp64), max(err_eager_fp64),
                     max(err_compiled_eager), "ok" if ok else "FAIL"))
    return cases, failures


if __name__ == "__main__":
    sys.exit(main())
