#!/usr/bin/env python3
"""The peer of `weft-perf optim`: a staged AdamW step written in PyTorch the
way a user would. Masters, exp_avg and exp_avg_sq live in pinned host memory,
flattened; gradients on the GPU. Chunks of --chunk elements go through two
GPU buffers: H2D on one stream, torch._fused_adamw_ on another, D2H on a
third, events between them (double buffering). Timed with CUDA events after
warm-up.

Prints one JSON object {"params", "chunk", "median_ms", "p99_ms", "torch"},
or {"error": ...} (exit 3) without PyTorch or a GPU.

With --ns EXPERTSxROWSxCOLS (repeatable), the Muon peers instead: the
reference Newton-Schulz (5 steps, BF16, transposed when tall, Frobenius
normalization per matrix) batched over the experts and compiled with
torch.compile, one {"ns": shape, "median_ms", "one_iteration_ms" (the same
compiled with one iteration), "step_ms"} line a shape, step_ms a whole Muon
step around that NS compiled as one function (Nesterov momentum, NS, the
update of the FP32 masters: what a libweft RESIDENT step does); and the BF16
GEMM rate torch.mm reaches on 8192x8192x8192, {"gemm_tflops"}."""
import argparse
import json
import sys

from peer_torch import staged_adamw, torch_with_gpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=0, help="parameters in all")
    ap.add_argument("--ns", action="append", default=[], help="EXPERTSxROWSxCOLS: time the compiled NS")
    ap.add_argument("--chunk", type=int, default=32 << 20, help="elements a chunk")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-5)
    args = ap.parse_args()
    torch = torch_with_gpu()
    if torch is None:
        return 3

    if args.ns:
        return ns_peers(torch, args)
    n, c = args.params, args.chunk
    dev = torch.device("cuda")
    master = torch.empty(n, dtype=torch.float32, pin_memory=True).normal_(0, 0.02)
    exp_avg = torch.zeros(n, dtype=torch.float32, pin_memory=True)
    exp_avg_sq = torch.zeros(n, dtype=torch.float32, pin_memory=True)
    grad = torch.randn(n, dtype=torch.float32, device=dev)
    step = staged_adamw(torch, master, exp_avg, exp_avg_sq, grad, c, args.lr)

    times = []
    for it in range(args.warmup + args.iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        if it >= args.warmup:
            times.append(a.elapsed_time(b))
    times.sort()
    print(json.dumps({"params": n, "chunk": c, "median_ms": times[(len(times) - 1) // 2],
                      "p99_ms": times[-1], "torch": torch.__version__}))
    return 0


def ns_peers(torch, args):
    def ns(G, steps=5):
        a, b, c = 3.4445, -4.7750, 2.0315
        X = G.bfloat16()
        tall = G.size(-2) > G.size(-1)
        if tall:
            X = X.mT
        X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
        for _ in range(steps):
            A = X @ X.mT
            B = b * A + c * A @ A
            X = a * X + B @ X
        return X.mT if tall else X

    # Keller Jordan's Muon step as weft-perf's runs it (lr 0.02, momentum
    # 0.95, Nesterov, no weight decay, update scaled by max(1, rows/cols)^1/2),
    # batched over the experts: the same work as a libweft RESIDENT step.
    def muon_step(p, m, g):
        m.lerp_(g, 1 - 0.95)
        u = g.lerp(m, 0.95)
        X = ns(u)
        p.add_(X.to(p.dtype), alpha=-0.02 * max(1.0, p.size(-2) / p.size(-1)) ** 0.5)

    compiled = torch.compile(ns)
    compiled_step = torch.compile(muon_step)
    # One iteration as well, compiled on its own: five less one, × 5/4, is
    # what the iterations alone cost (weft-perf measures its own the same way).
    compiled_one = torch.compile(lambda G: ns(G, 1))

    def timed(fn, *xs):
        times = []
        for it in range(args.warmup + args.iters):
            s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s0.record()
            fn(*xs)
            s1.record()
            torch.cuda.synchronize()
            if it >= args.warmup:
                times.append(s0.elapsed_time(s1))
        times.sort()
        return times[(len(times) - 1) // 2]

    for shape in args.ns:
        e, r, c = (int(v) for v in shape.split("x"))
        G = torch.randn(e, r, c, device="cuda")
        P, M = torch.randn(e, r, c, device="cuda") * 0.02, torch.zeros(e, r, c, device="cuda")
        print(json.dumps({"ns": shape, "median_ms": timed(compiled, G), "one_iteration_ms": timed(compiled_one, G),
                          "step_ms": timed(compiled_step, P, M, G), "torch": torch.__version__}))
        del P, M
        sys.stdout.flush()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = timed(torch.mm, a, a)
    print(json.dumps({"gemm_tflops": 2 * 8192 ** 3 / (ms / 1e3) / 1e12, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
