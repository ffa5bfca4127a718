#!/usr/bin/env python3
"""What the Python binding adds, in one run on one host registry:
- to a version lease: the median time of an acquire + release pair through
  weft.Registry.read() (a Lease, released by `with`) beside the same two C
  calls made directly through cffi (target: <= 20 us more a pair);
- to a version's transfer: weft.Plan.copy of a leased version into views
  of a fused engine tensor's experts beside weft_plan_copy called directly
  on the same plan (target: >= 0.98 x its rate): NumPy views and the host
  transport by default; with --memory cuda a GPU registry, PyTorch views
  and the cuda_ipc transport.

    WEFT_LIBRARY=... WEFT_INCLUDE=... PYTHONPATH=python python3 perf/py_binding.py [--memory cuda] [--json]
"""

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import weft
from weft._lib import load


def timed(fn, pairs, rounds=7):
    """The median over `rounds` of the mean time of one pair, in us."""
    results = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(pairs):
            fn()
        results.append((time.perf_counter_ns() - t0) / pairs / 1e3)
    return statistics.median(results)


def fused_and_fill(memory, experts, rows, cols):
    """The engine's fused tensor and a function that fills a version's
    expert e in place: NumPy on the host, PyTorch on the GPU."""
    if memory == "host":
        return np.zeros((experts, rows, cols), np.uint8), lambda v, e: v[e].__setitem__(slice(None), e)
    import torch

    def fill(v, e):
        v[e].as_torch().view(torch.uint8).fill_(e)

    return torch.zeros((experts, rows, cols), dtype=torch.uint8, device="cuda"), fill


def all_experts_landed(fused, experts):
    if not isinstance(fused, np.ndarray):
        fused = fused.cpu().numpy()
    return all((fused[e] == e).all() for e in range(experts))


def measure_copy(name, experts, copies, memory):
    """Plan.copy beside weft_plan_copy on the same plan and lease (both
    return when every byte is in place)."""
    ffi, lib = load()
    rows, cols = 2048, 768
    transport = "host" if memory == "host" else "cuda_ipc"
    fused, fill = fused_and_fill(memory, experts, rows, cols)
    with weft.Registry.create(name, slots=3, memory=memory) as reg:
        for e in range(experts):
            reg.declare("experts.%d.w" % e, (rows, cols), "fp8_e4m3", expert=e)
        reg.seal()
        with reg.write() as v:
            for e in range(experts):
                fill(v, e)
            if memory != "host":
                import torch

                torch.cuda.synchronize()
            v.publish()
        with weft.Registry.open(name) as reader, reader.read() as lease, \
                weft.Plan(reader, {"experts.%d.w" % e: fused[e] for e in range(experts)}, transport) as plan:
            handle, c_lease = plan.handle, lease.c_lease
            c_ns, py_ns = [], []
            for _ in range(copies):
                t0 = time.perf_counter_ns()
                lib.weft_plan_copy(handle, c_lease)
                t1 = time.perf_counter_ns()
                plan.copy(lease)
                t2 = time.perf_counter_ns()
                c_ns.append(t1 - t0)
                py_ns.append(t2 - t1)
            assert all_experts_landed(fused, experts)
    weft.Registry.unlink(name)
    nbytes = experts * rows * cols
    c_gbps = nbytes / statistics.median(c_ns)
    py_gbps = nbytes / statistics.median(py_ns)
    return {"memory": memory, "transport": transport, "copy_bytes": nbytes, "copies": copies,
            "c_copy_gbps": round(c_gbps, 3), "binding_copy_gbps": round(py_gbps, 3),
            "copy_ratio": round(py_gbps / c_gbps, 4), "target_copy_ratio": 0.98}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--experts", type=int, default=32, help="experts of 2048x768 FP8 bytes (default 32: 48 MiB)")
    parser.add_argument("--copies", type=int, default=100)
    parser.add_argument("--memory", choices=("host", "cuda"), default="host",
                        help="where the registry and the engine's tensor are (cuda: the cuda_ipc transport)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    name = "weft-py-binding-%d" % os.getpid()
    ffi, lib = load()
    with weft.Registry.create(name, slots=3) as reg:
        reg.declare("w", (4096,), "uint8")
        reg.seal()
        with reg.write() as v:
            v.publish()
        lease = ffi.new("weft_lease_t *")
        handle = reg.handle

        def c_pair():
            lib.weft_registry_acquire(handle, lease)
            lib.weft_registry_release(handle, lease)

        def py_pair():
            with reg.read() as held:
                held.version

        c_us = timed(c_pair, args.pairs)
        py_us = timed(py_pair, args.pairs)
    weft.Registry.unlink(name)
    copy = measure_copy(name + "-copy", args.experts, args.copies, args.memory)
    result = {"command": "py_binding", "libweft": weft.version(), "python": sys.version.split()[0],
              "pairs": args.pairs, "c_calls_us": round(c_us, 3), "binding_us": round(py_us, 3),
              "added_us": round(py_us - c_us, 3), "target_added_us": 20.0}
    result.update(copy)
    result["ok"] = py_us - c_us <= 20.0 and copy["copy_ratio"] >= 0.98
    if args.json:
        print(json.dumps(result))
    else:
        print("# acquire + release, median of 7 rounds of %d pairs (the C calls made through cffi directly "
              "include cffi's own call cost)" % args.pairs)
        print("%12s %12s %10s %8s" % ("c_calls_us", "binding_us", "added_us", "target"))
        print("%12.3f %12.3f %10.3f %8s" % (c_us, py_us, py_us - c_us, "<= 20"))
        print("# a version of %d MB into %s views (%s transport), median of %d copies each way, interleaved" %
              (copy["copy_bytes"] // 1000000, "NumPy" if args.memory == "host" else "PyTorch CUDA",
               copy["transport"], args.copies))
        print("%12s %12s %10s %8s" % ("c_GB/s", "binding_GB/s", "ratio", "target"))
        print("%12.2f %12.2f %10.3f %8s" % (copy["c_copy_gbps"], copy["binding_copy_gbps"], copy["copy_ratio"],
                                            ">= 0.98"))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
