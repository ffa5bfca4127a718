#!/usr/bin/env python3
"""The peer of `weft-perf quant`: the same 128x128 block FP8 quantizer in
PyTorch, compiled with torch.compile: amax per block, s = max(amax, 1e-4) /
448, q = float8_e4m3fn(x / s) (saturated), W and WT contiguous, scale_inv;
with --formula reference, q = float8_e4m3fn(x * (448 / amax)).

Prints one JSON object per shape: {"shape", "experts", "rows", "cols",
"median_ms", "p99_ms", "torch"}, or one {"error": ...} line (exit 3) when
PyTorch or a GPU is missing. Timed with CUDA events after warm-up, on
rotating input buffers larger than the L2 cache, filled with random data.
"""
import argparse
import json
import sys

from peer_torch import block_fp8_quantizer, reference_fp8_quantizer, torch_with_gpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="128x1536x2048,128x2048x768,1x8192x8192",
                    help="comma-separated EXPERTSxROWSxCOLS")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--formula", choices=("exact", "reference"), default="exact",
                    help="reference: DeepGEMM's per_block_cast_to_fp8 formula instead")
    args = ap.parse_args()

    torch = torch_with_gpu()
    if torch is None:
        return 3
    b = args.block
    make = reference_fp8_quantizer if args.formula == "reference" else block_fp8_quantizer
    qc = torch.compile(make(torch, b), dynamic=False)
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 << 20)
    for spec in args.shapes.split(","):
        e, n, k = (int(v) for v in spec.split("x"))
        if n % b or k % b:
            print(json.dumps({"shape": spec, "error": "rows and cols must be multiples of the block"}))
            continue
        nbytes = e * n * k * 4
        sets = max(2, min(16, -(-4 * l2 // nbytes)))
        xs = [torch.randn(e, n, k, device="cuda") * (2.0 ** (i % 7 - 3)) for i in range(sets)]
        for i in range(args.warmup):
            qc(xs[i % sets])
        torch.cuda.synchronize()
        times = []
        for i in range(args.iters):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            qc(xs[i % sets])
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        times.sort()
        print(json.dumps({"shape": spec, "experts": e, "rows": n, "cols": k,
                          "median_ms": times[len(times) // 2],
                          "p99_ms": times[min(len(times) - 1, (len(times) * 99 + 99) // 100 - 1)],
                          "torch": torch.__version__}), flush=True)
        del xs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
