#!/usr/bin/env python3
"""What the Python binding adds to a version lease: the median time of an
acquire + release pair through weft.Registry.read() (a Lease, released by
`with`) beside the same two C calls made directly through cffi, in one
run, on one host registry. Target: the binding adds <= 20 us a pair.

    WEFT_LIBRARY=... WEFT_INCLUDE=... PYTHONPATH=python python3 perf/py_lease.py [--pairs N] [--json]
"""

import argparse
import json
import os
import statistics
import sys
import time

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    name = "weft-py-lease-%d" % os.getpid()
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
    result = {"command": "py_lease", "libweft": weft.version(), "python": sys.version.split()[0],
              "pairs": args.pairs, "c_calls_us": round(c_us, 3), "binding_us": round(py_us, 3),
              "added_us": round(py_us - c_us, 3), "target_added_us": 20.0, "ok": py_us - c_us <= 20.0}
    if args.json:
        print(json.dumps(result))
    else:
        print("# acquire + release, median of 7 rounds of %d pairs (the C calls made through cffi directly "
              "include cffi's own call cost)" % args.pairs)
        print("%12s %12s %10s %8s" % ("c_calls_us", "binding_us", "added_us", "target"))
        print("%12.3f %12.3f %10.3f %8s" % (c_us, py_us, py_us - c_us, "<= 20"))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
