#!/usr/bin/env python3
"""The peer of `weft-perf ipc`: what SGLang's update_weights_from_tensor does
today, run in the same benchmark as our transport so that both numbers come
from the same machine, GPUs and tensor list.

SGLang's path, per tensor: the trainer process pickles each parameter with
torch's CUDA IPC reduction (MultiprocessingSerializer = ForkingPickler, i.e.
reduce_tensor: a cudaIpcMemHandle, a ref-counter slot and an IPC event per
tensor), the engine process rebuilds each tensor from its handle (opening the
IPC mapping, waiting on the event) and copies it into its own parameter with
copy_. We do exactly that between two processes: the producer (this process,
on --src-device) and a spawned consumer (on --dst-device). One iteration is
timed on the producer with time.perf_counter(), from the first reduce_tensor
to the consumer's "done" after torch.cuda.synchronize on the destination and
after dropping the rebuilt tensors (whose deleters release the IPC refs).

Workloads (the same tensor list as the C side, in the same order):
  qwen3-2layer  for each layer < L, for each expert < E: gate_up W u8
                [1536,2048], WT u8 [2048,1536], scale f32 [12,16], down W u8
                [2048,768], WT u8 [768,2048], scale f32 [16,6]
  single-1g     one u8 tensor of 1 GiB

Prints one JSON object as the last stdout line: {"peer", "torch", "workload",
"src_device", "dst_device", "tensors", "bytes", "iterations", "seconds",
"seconds_median", "gb_per_s"}. On failure it prints the reason on stderr and
a {"peer", "error"} line on stdout, and exits 3 (no torch, no CUDA, too few
GPUs) or 1 (the run failed, or the consumer's bytes differ from the source).
"""
import argparse
import json
import math
import queue
import statistics
import sys
import time
import traceback

PEER = "torch_ipc_per_tensor"
REPLY_TIMEOUT_S = 600.0   # per reply from the consumer; a 1 GiB copy takes ms
CHUNK_BYTES = 16 << 20    # checksum chunk: bounds the int64 temporaries


class PeerError(Exception):
    pass


def workload(name, layers, experts):
    """The tensor list as (shape, dtype name); plain data so it pickles to the child."""
    if name == "single-1g":
        return [((1 << 30,), "uint8")]
    per_expert = [((1536, 2048), "uint8"), ((2048, 1536), "uint8"), ((12, 16), "float32"),
                  ((2048, 768), "uint8"), ((768, 2048), "uint8"), ((16, 6), "float32")]
    return [s for _ in range(layers) for _ in range(experts) for s in per_expert]


def checksums(torch, tensors):
    """[byte sum, row-weighted byte sum] per tensor, over its raw bytes.

    The weighted sum (rows of up to 128 bytes, weight = row index mod 65521,
    plus 1) catches moved or swapped rows that a plain sum would miss. Done in
    chunks so that a 1 GiB tensor never needs an 8 GiB int64 copy; one host
    sync at the end for the whole list."""
    sums = []
    for t in tensors:
        b = t.reshape(-1).view(torch.uint8)
        width = math.gcd(b.numel(), 128)
        rows = b.view(-1, width)
        step = max(1, CHUNK_BYTES // width)
        plain = torch.zeros((), dtype=torch.int64, device=t.device)
        weighted = torch.zeros((), dtype=torch.int64, device=t.device)
        for r0 in range(0, rows.shape[0], step):
            rs = rows[r0:r0 + step].sum(dim=1, dtype=torch.int64)
            w = torch.arange(r0, r0 + rs.numel(), dtype=torch.int64, device=t.device) % 65521 + 1
            plain += rs.sum()
            weighted += (rs * w).sum()
        sums.append(torch.stack([plain, weighted]))
    return torch.stack(sums).tolist() if sums else []


def consumer(dst_index, specs, work_q, done_q):
    """The engine side: own destination tensors, filled per tensor from IPC."""
    try:
        import torch
        # First thing, so that no context or allocation lands on device 0.
        torch.cuda.set_device(dst_index)
        dev = torch.device("cuda", dst_index)
        # The engine's parameters exist before any update: allocated once.
        dst = [torch.empty(shape, dtype=getattr(torch, dt), device=dev) for shape, dt in specs]
        torch.cuda.synchronize(dev)
        done_q.put(("ready", None))
        while True:
            kind, payload = work_q.get()
            if kind == "stop":
                break
            if kind == "copy":
                # Rebuild (opens the IPC handle, waits on the producer's event)
                # and copy_, tensor by tensor, as SGLang's weight loaders do.
                # The rebuilt tensors are kept until after the sync: their
                # deleters synchronize the stream and release the producer's
                # ref counter, which must not happen under a pending copy.
                rebuilt = []
                for i, (fn, fargs) in enumerate(payload):
                    r = fn(*fargs)
                    dst[i].copy_(r)
                    rebuilt.append(r)
                    r = None
                torch.cuda.synchronize(dev)
                rebuilt = payload = None   # drop the IPC mappings inside the timed window
                done_q.put(("done", None))
            elif kind == "sums":
                done_q.put(("sums", checksums(torch, dst)))
            else:
                raise PeerError("unknown request %r" % (kind,))
    except BaseException:
        done_q.put(("error", traceback.format_exc()))
        sys.exit(1)


def wait_reply(done_q, child, want):
    """The consumer's next reply, which must be `want`; its errors become ours."""
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while True:
        try:
            kind, payload = done_q.get(timeout=1.0)
        except queue.Empty:
            if not child.is_alive():
                try:   # it may have written its error just before exiting
                    kind, payload = done_q.get(timeout=1.0)
                except queue.Empty:
                    raise PeerError("consumer exited (code %s) while waiting for %r"
                                    % (child.exitcode, want)) from None
            elif time.monotonic() > deadline:
                raise PeerError("no %r from the consumer in %.0f s" % (want, REPLY_TIMEOUT_S))
            else:
                continue
        if kind == "error":
            raise PeerError("consumer failed:\n" + payload.rstrip())
        if kind != want:
            raise PeerError("consumer replied %r, expected %r" % (kind, want))
        return payload


def fail(msg, code):
    print("ipc_peer: " + msg, file=sys.stderr)
    print(json.dumps({"peer": PEER, "error": msg.strip().splitlines()[-1]}), flush=True)
    return code


def main():
    ap = argparse.ArgumentParser(description="torch CUDA IPC per-tensor weight update (SGLang's path)")
    ap.add_argument("--src-device", type=int, required=True, help="producer (trainer) GPU")
    ap.add_argument("--dst-device", type=int, required=True, help="consumer (engine) GPU")
    ap.add_argument("--workload", required=True, choices=("qwen3-2layer", "single-1g"))
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--experts", type=int, default=128)
    args = ap.parse_args()
    if args.iterations < 1 or args.warmup < 0 or args.layers < 1 or args.experts < 1 \
            or args.src_device < 0 or args.dst_device < 0:
        return fail("iterations, layers and experts must be >= 1; warmup and devices >= 0", 2)

    try:
        import torch
        import torch.multiprocessing as mp
        from torch.multiprocessing.reductions import reduce_tensor
    except ImportError as e:
        return fail("torch not available: %s" % e, 3)
    if not torch.cuda.is_available():
        return fail("torch finds no CUDA device", 3)
    need = max(args.src_device, args.dst_device) + 1
    if torch.cuda.device_count() < need:
        return fail("need %d GPUs, torch sees %d" % (need, torch.cuda.device_count()), 3)

    specs = workload(args.workload, args.layers, args.experts)
    torch.cuda.set_device(args.src_device)
    dev = torch.device("cuda", args.src_device)
    # Each tensor its own allocation, random bytes, as a trainer's parameters.
    srcs = []
    for shape, dt in specs:
        if dt == "uint8":
            srcs.append(torch.randint(0, 256, shape, dtype=torch.uint8, device=dev))
        else:
            srcs.append(torch.rand(shape, dtype=torch.float32, device=dev))
    nbytes = sum(t.numel() * t.element_size() for t in srcs)
    expected = checksums(torch, srcs)   # computed here, independent of the IPC path

    # spawn: CUDA cannot be used in a forked child; SGLang's engine is its own process.
    ctx = mp.get_context("spawn")
    work_q, done_q = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=consumer, args=(args.dst_device, specs, work_q, done_q), daemon=True)
    child.start()
    try:
        wait_reply(done_q, child, "ready")   # child start-up and allocation are not timed
        seconds = []
        for it in range(args.warmup + args.iterations):
            torch.cuda.synchronize(dev)      # the fill (or nothing) must not be timed
            t0 = time.perf_counter()
            # One (rebuild_fn, args) per tensor: handle, ref counter and event
            # each; pickled by the queue as MultiprocessingSerializer does.
            items = [reduce_tensor(t) for t in srcs]
            work_q.put(("copy", items))
            wait_reply(done_q, child, "done")
            t1 = time.perf_counter()
            if it >= args.warmup:
                seconds.append(t1 - t0)
            items = None
        work_q.put(("sums", None))
        got = wait_reply(done_q, child, "sums")
        if len(got) != len(expected):
            raise PeerError("consumer has %d tensors, producer %d" % (len(got), len(expected)))
        for i, (e, g) in enumerate(zip(expected, got)):
            if e != g:
                raise PeerError("byte mismatch in tensor %d %s: producer %s, consumer %s"
                                % (i, specs[i], e, g))
        work_q.put(("stop", None))
        child.join(60)
        if child.exitcode != 0:
            raise PeerError("consumer exit code %s" % child.exitcode)
    except PeerError as e:
        return fail(str(e), 1)
    finally:
        if child.is_alive():
            child.terminate()
            child.join(10)

    med = statistics.median(seconds)
    print(json.dumps({"peer": PEER, "torch": str(torch.__version__), "workload": args.workload,
                      "src_device": args.src_device, "dst_device": args.dst_device,
                      "tensors": len(srcs), "bytes": nbytes, "iterations": args.iterations,
                      "seconds": seconds, "seconds_median": med,
                      "gb_per_s": nbytes / med / 1e9 if med > 0 else None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
