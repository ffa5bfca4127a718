#!/usr/bin/env python3
"""A trainer and an engine, two processes, one registry.

The trainer keeps FP32 master weights of a MoE layer's experts (w13: each
expert's gate and up projections, [2I, H]), steps them, writes each version
straight into the registry with the FP8 writer (weight and its
weight_scale_inv) and publishes it. The engine holds fused tensors the way
SGLang does (w13_weight [E, 2I, H] in FP8, w13_weight_scale_inv [E, 2I/128,
H/128]), receives every version into per-expert views of them, frees and
re-allocates them between versions (offload and reload) and rebinds, then
runs the experts on a batch of tokens with the received weights
(dequantized blockwise) and checks the result against the FP32 masters'
within FP8's tolerance. The engine recomputes the masters from the same
seed and steps, as it has no other copy of them.

    python3 train_and_serve.py [--versions N] [--experts E] [--device cuda]

Host memory and NumPy by default, no GPU needed. With --device cuda the
same flow on a GPU with PyTorch: the trainer's masters are CUDA tensors
and the FP8 writer runs on its stream into a GPU registry; the engine's
fused tensors are torch.float8_e4m3fn CUDA tensors filled by the cuda_ipc
transport, freed and re-allocated through PyTorch's allocator between
versions. Exits 0 when every version checked out.
"""

import argparse
import multiprocessing as mp
import os
import sys

import numpy as np

import weft

HIDDEN, INTER, BLOCK = 256, 128, 128


def masters(experts, step):
    """The FP32 masters after `step` steps (a deterministic stand-in for
    an optimizer: each step moves every weight a little)."""
    rng = np.random.default_rng(1234)
    w = rng.standard_normal((experts, 2 * INTER, HIDDEN), dtype=np.float32) * 0.02
    for s in range(1, step + 1):
        w += np.random.default_rng(s).standard_normal(w.shape, dtype=np.float32) * 1e-3
    return w


def names(e):
    base = "model.layers.0.mlp.experts.%d.w13" % e
    return base + ".weight", base + ".weight_scale_inv"


def trainer(name, experts, versions, ready, device):
    memory = "host" if device == "cpu" else "cuda"
    with weft.Registry.create(name, slots=3, memory=memory) as reg:
        for e in range(experts):
            w, s = names(e)
            reg.declare(w, (2 * INTER, HIDDEN), "fp8_e4m3", layer=0, expert=e)
            reg.declare(s, (2 * INTER // BLOCK, HIDDEN // BLOCK), "fp32", role="scale", layer=0, expert=e)
        reg.seal()
        ready.set()
        # Publish once the engine listens, so that it sees every version.
        while reg.stats()["consumers"] < 1:
            os.sched_yield()
        for step in range(1, versions + 1):
            m = masters(experts, step)
            stream = None
            if device == "cuda":
                import torch

                m, stream = torch.from_numpy(m).cuda(), torch.cuda.current_stream()
            with reg.write(timeout=30) as v:
                for e in range(experts):
                    w, s = names(e)
                    weft.quantize(m[e], v[w], None, v[s], block=BLOCK, stream=stream)  # into the slot, no copy
                if stream is not None:
                    stream.synchronize()  # publish only what the GPU has written
                version = v.publish()
            lagging = reg.wait_consumers(version, timeout=30)
            if lagging:
                print("trainer: %d engine(s) did not take version %d" % (lagging, version), file=sys.stderr)
                return 1
    return 0


def dequantize(w8, scale):
    """FP32 from e4m3 bytes and the block scales."""
    table = np.array([weft.e4m3_decode(b) for b in range(256)], dtype=np.float32)
    w = table[w8]
    return w * np.repeat(np.repeat(scale, BLOCK, axis=-2), BLOCK, axis=-1)[..., :w.shape[-2], :w.shape[-1]]


def allocate_numpy(experts):
    w13 = np.zeros((experts, 2 * INTER, HIDDEN), np.uint8)  # FP8 bytes
    scale = np.zeros((experts, 2 * INTER // BLOCK, HIDDEN // BLOCK), np.float32)
    return w13, scale


def experts_numpy(tokens, w13, scale):
    return np.einsum("th,enh->etn", tokens, dequantize(w13, scale))


def allocate_torch(experts):
    import torch

    w13 = torch.empty((experts, 2 * INTER, HIDDEN), dtype=torch.float8_e4m3fn, device="cuda")
    scale = torch.empty((experts, 2 * INTER // BLOCK, HIDDEN // BLOCK), dtype=torch.float32, device="cuda")
    return w13, scale


def experts_torch(tokens, w13, scale):
    """The experts on the GPU: FP8 weights dequantized blockwise by their
    scales (each 128x128 block times its scale_inv), then one batched GEMM."""
    import torch

    w = w13.float() * scale.repeat_interleave(BLOCK, dim=-2).repeat_interleave(BLOCK, dim=-1)
    return torch.einsum("th,enh->etn", torch.from_numpy(tokens).cuda(), w).cpu().numpy()


def engine(name, experts, versions, ready, device):
    ready.wait(30)
    tokens = np.random.default_rng(99).standard_normal((16, HIDDEN), dtype=np.float32)
    allocate, run_experts = (allocate_numpy, experts_numpy) if device == "cpu" else (allocate_torch, experts_torch)
    transport = "host" if device == "cpu" else "cuda_ipc"
    with weft.Registry.open(name) as reg, reg.consumer("engine-0") as consumer:
        def receive_views(w13, scale):
            views = {}
            for e in range(experts):
                w, s = names(e)
                views[w], views[s] = w13[e], scale[e]
            return views

        w13, scale = allocate(experts)
        with weft.Plan(reg, receive_views(w13, scale), transport) as plan:
            version = 0
            for step in range(1, versions + 1):
                version = plan.receive(consumer, after=version, timeout=30)
                y = run_experts(tokens, w13, scale)
                want = np.einsum("th,enh->etn", tokens, masters(experts, step))
                err = np.linalg.norm(y - want) / np.linalg.norm(want)
                print("engine: version %d, relative error of the experts' output %.4f" % (version, err))
                if version != step or not err < 0.05:  # e4m3: about 2^-4 per weight
                    return 1
                # Offload and reload: new memory, the same plan (which
                # lets go of the old tensors when rebound).
                del w13, scale
                w13, scale = allocate(experts)
                plan.rebind(receive_views(w13, scale))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--name", default="weft-py-example-%d" % os.getpid())
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: host registry and NumPy; cuda: GPU registry, PyTorch and cuda_ipc")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    child = ctx.Process(target=_engine_main, args=(args.name, args.experts, args.versions, ready, args.device))
    child.start()
    try:
        rc = trainer(args.name, args.experts, args.versions, ready, args.device)
    finally:
        child.join(60)
        weft.Registry.unlink(args.name)
    rc = rc or child.exitcode
    print("PASS" if rc == 0 else "FAIL")
    return rc


def _engine_main(name, experts, versions, ready, device):
    sys.exit(engine(name, experts, versions, ready, device))


if __name__ == "__main__":
    sys.exit(main())
