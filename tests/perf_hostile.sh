#!/bin/sh
# weft-perf hostile, short: a real ucx consumer's versions while
# connections that never prove the token (half a header then silence,
# idle, a 64 MiB announcement, a byte-a-millisecond HELLO, garbage in a
# loop) hang on its server: every version arrives whole, and the figures
# are there. What they add to its latency is for the benchmark to say,
# not for this test (the machines are noisy).
set -u
: "${top_builddir:=..}"
out=$(UCX_TLS=${UCX_TLS:-tcp,self} "$top_builddir/perf/weft-perf" hostile --iterations 20 --json 2>err.perf_hostile)
rc=$?
trap 'rm -f err.perf_hostile' EXIT
if [ $rc -eq 77 ]; then
    cat err.perf_hostile
    [ "${TESTS_MUST_RUN:-0}" = 1 ] && { echo "FAIL: no usable UCX (TESTS_MUST_RUN=1)"; exit 1; }
    exit 77
fi
echo "$out"
[ $rc -eq 0 ] || { tail -20 err.perf_hostile; echo "FAIL: weft-perf hostile exited $rc"; exit 1; }
for key in quiet_p50_ms hostile_p50_ms added_p50_ms added_p99_ms garbage_connections; do
    echo "$out" | grep -q "\"$key\":" || { echo "FAIL: no $key"; exit 1; }
done
echo "$out" | grep -q '"versions": *65,' || { echo "FAIL: not every version arrived"; exit 1; }
echo "$out" | grep -q '"wrong_bytes": *0[,}]' || { echo "FAIL: wrong bytes"; exit 1; }
echo "PASS"
