#!/usr/bin/env python3
"""The peer of `weft-perf update` on a GPU: the sequential path a PyTorch
user would write for the same model, on the same GPU, one version a step:

  1. the staged AdamW step (peer_torch.staged_adamw: pinned FP32 masters and
     state of every group, chunks through two GPU buffer sets on three
     streams, torch._fused_adamw_; gradients on the GPU);
  2. then, group by group (a layer's gate_up_proj or down_proj, all its
     experts), the updated master copied to the GPU again (after the step
     it is only in pinned memory) and quantized by the torch.compile'd block
     FP8 quantizer (peer_torch.block_fp8_quantizer): W, WT, scale_inv;
  3. each expert tensor shared over CUDA IPC with an engine process and
     copied into the engine's own tensor, as SGLang's
     update_weights_from_tensor does (ipc_peer.consumer).

Times each version with time.perf_counter: step (1, synchronized), quant
(2), ipc (3, to the engine's "done" after its synchronize), tail (2 + 3:
what follows the step) and e2e; after the last version the engine's bytes
are checked against the trainer's (ipc_peer.checksums).

Prints one JSON object, the medians over --versions after --warmup:
{"peer", "torch", "parameters", "tensors", "bytes", "versions", "step_ms",
"quant_ms", "ipc_ms", "tail_ms", "e2e_ms"}; or {"peer", "error"} (exit 3
without torch or a GPU, 1 when the run fails or a byte differs).
"""
import argparse
import json
import statistics
import sys
import time

from ipc_peer import PeerError, checksums, consumer, wait_reply
from peer_torch import block_fp8_quantizer, staged_adamw, torch_with_gpu


def fail(msg, code):
    print("update_peer: " + msg, file=sys.stderr)
    print(json.dumps({"peer": "torch_sequential", "error": msg.strip().splitlines()[-1]}), flush=True)
    return code


def main():
    ap = argparse.ArgumentParser(description="torch staged AdamW, compiled quantizer, per-tensor CUDA IPC")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--versions", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=32 << 20, help="elements a staging chunk")
    ap.add_argument("--lr", type=float, default=1e-5)
    args = ap.parse_args()
    b, E, H, I = args.block, args.experts, args.hidden, args.intermediate
    if min(args.layers, E, H, I, args.versions) < 1 or H % b or I % b:
        return fail("layers, experts and versions >= 1; hidden and intermediate multiples of the block", 2)
    torch = torch_with_gpu()
    if torch is None:
        return 3
    import torch.multiprocessing as mp
    from torch.multiprocessing.reductions import reduce_tensor

    dev = torch.device("cuda", 0)
    projs = ((2 * I, H), (H, I))   # gate_up_proj [2I, H], down_proj [H, I]
    groups = [(l, r, c) for l in range(args.layers) for r, c in projs]
    n = sum(E * r * c for _, r, c in groups)
    master = torch.empty(n, dtype=torch.float32, pin_memory=True).uniform_(-0.05, 0.05)
    exp_avg = torch.zeros(n, dtype=torch.float32, pin_memory=True)
    exp_avg_sq = torch.zeros(n, dtype=torch.float32, pin_memory=True)
    grad = torch.randn(n, dtype=torch.float32, device=dev) * 1e-2
    step = staged_adamw(torch, master, exp_avg, exp_avg_sq, grad, args.chunk, args.lr)
    quant = torch.compile(block_fp8_quantizer(torch, b), dynamic=False)

    # The engine's tensors in the registry's order: layer, kind (gate_up W,
    # WT, scale; down W, WT, scale), expert.
    specs = []
    for _ in range(args.layers):
        for r, c in projs:
            for shape, dt in (((r, c), "uint8"), ((c, r), "uint8"), ((r // b, c // b), "float32")):
                specs += [(shape, dt)] * E

    ctx = mp.get_context("spawn")   # CUDA cannot be used in a forked child
    work_q, done_q = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=consumer, args=(0, specs, work_q, done_q), daemon=True)
    child.start()
    times = {k: [] for k in ("step_ms", "quant_ms", "ipc_ms", "tail_ms", "e2e_ms")}
    try:
        wait_reply(done_q, child, "ready")
        for it in range(args.warmup + args.versions):
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize(dev)
            t1 = time.perf_counter()
            tensors, off = [], 0
            for _, r, c in groups:
                x = master[off:off + E * r * c].view(E, r, c).to(dev, non_blocking=True)
                off += E * r * c
                w, wt, s = quant(x)
                for t in (w.view(torch.uint8), wt.view(torch.uint8), s):
                    tensors += [t[e] for e in range(E)]
            torch.cuda.synchronize(dev)
            t2 = time.perf_counter()
            items = [reduce_tensor(t) for t in tensors]
            work_q.put(("copy", items))
            wait_reply(done_q, child, "done")
            t3 = time.perf_counter()
            items = None
            if it >= args.warmup:
                for k, v in (("step_ms", t1 - t0), ("quant_ms", t2 - t1), ("ipc_ms", t3 - t2),
                             ("tail_ms", t3 - t1), ("e2e_ms", t3 - t0)):
                    times[k].append(v * 1e3)
        work_q.put(("sums", None))
        got = wait_reply(done_q, child, "sums")
        want = checksums(torch, tensors)
        if got != want:
            bad = sum(1 for g, w in zip(got, want) if g != w)
            raise PeerError("the engine's bytes differ from the trainer's in %d of %d tensors" % (bad, len(want)))
        work_q.put(("stop", None))
        child.join(60)
    except PeerError as e:
        return fail(str(e), 1)
    finally:
        if child.is_alive():
            child.terminate()
            child.join(10)
    out = {"peer": "torch_sequential", "torch": str(torch.__version__), "parameters": n,
           "tensors": len(specs), "bytes": sum(t.numel() * t.element_size() for t in tensors),
           "versions": args.versions}
    out.update({k: statistics.median(v) for k, v in times.items()})
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
