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
torch.compile, one {"ns": shape, "median_ms"} line a shape; and the BF16
GEMM rate torch.mm reaches on 8192x8192x8192, {"gemm_tflops"}."""
import argparse
import json
import sys

from peer_torch import torch_with_gpu


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
    bufs = [[torch.empty(c, dtype=torch.float32, device=dev) for _ in range(3)] for _ in range(2)]
    steps = [torch.zeros((), dtype=torch.float32, device=dev) for _ in range(2)]
    h2d, comp, d2h = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    loaded = [torch.cuda.Event() for _ in range(2)]
    computed = [torch.cuda.Event() for _ in range(2)]
    freed = [torch.cuda.Event() for _ in range(2)]
    step_no = [0]

    def step():
        step_no[0] += 1
        for k in range(2):
            steps[k].fill_(float(step_no[0]))
        start = torch.cuda.current_stream()
        h2d.wait_stream(start)
        comp.wait_stream(start)
        for i, lo in enumerate(range(0, n, c)):
            k = i % 2
            hi = min(lo + c, n)
            m = hi - lo
            p_dev, m_dev, v_dev = (b[:m] for b in bufs[k])
            with torch.cuda.stream(h2d):
                if i >= 2:
                    h2d.wait_event(freed[k])
                p_dev.copy_(master[lo:hi], non_blocking=True)
                m_dev.copy_(exp_avg[lo:hi], non_blocking=True)
                v_dev.copy_(exp_avg_sq[lo:hi], non_blocking=True)
                loaded[k].record(h2d)
            with torch.cuda.stream(comp):
                comp.wait_event(loaded[k])
                torch._fused_adamw_([p_dev], [grad[lo:hi]], [m_dev], [v_dev], [], [steps[k]], lr=args.lr,
                                    beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                                    maximize=False)
                computed[k].record(comp)
            with torch.cuda.stream(d2h):
                d2h.wait_event(computed[k])
                master[lo:hi].copy_(p_dev, non_blocking=True)
                exp_avg[lo:hi].copy_(m_dev, non_blocking=True)
                exp_avg_sq[lo:hi].copy_(v_dev, non_blocking=True)
                freed[k].record(d2h)
        start.wait_stream(d2h)

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
    def ns(G):
        a, b, c = 3.4445, -4.7750, 2.0315
        X = G.bfloat16()
        tall = G.size(-2) > G.size(-1)
        if tall:
            X = X.mT
        X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
        for _ in range(5):
            A = X @ X.mT
            B = b * A + c * A @ A
            X = a * X + B @ X
        return X.mT if tall else X

    compiled = torch.compile(ns)

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
        print(json.dumps({"ns": shape, "median_ms": timed(compiled, G), "torch": torch.__version__}))
        sys.stdout.flush()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = timed(torch.mm, a, a)
    print(json.dumps({"gemm_tflops": 2 * 8192 ** 3 / (ms / 1e3) / 1e12, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
