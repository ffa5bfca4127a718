#!/bin/sh
# weft-perf publish-lat runs its three modes and reports every figure. The
# targets (shared/PERF.md) are the benchmark's business, not this test's:
# a shared machine is too noisy to hold them every time.
set -u
: "${top_builddir:=..}"
perf="$top_builddir/perf/weft-perf"

json_num() {
    echo "$out" | sed -n "s/.*\"$1\": \(-\{0,1\}[0-9][0-9.]*\).*/\1/p"
}

"$perf" publish-lat --iterations 0 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: publish-lat --iterations 0 must be a usage error (exit 2)"; exit 1; }

out=$("$perf" publish-lat --iterations 2000 --warmup 200 --seconds 10 --json)
rc=$?
echo "$out"
fail=0
[ $rc -eq 0 ] || { echo "FAIL: weft-perf publish-lat exited $rc"; fail=1; }
[ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q '^{.*}$' || {
    echo "FAIL: --json must print exactly one JSON object"; fail=1; }

for key in p50_us p99_us futex_p50_us futex_p99_us baseline_p50_us baseline_p99_us \
           speedup_p50 futex_speedup_p50 samples; do
    value=$(json_num "$key")
    if [ -z "$value" ]; then
        echo "FAIL: no \"$key\" in the JSON"; fail=1
    elif ! awk -v v="$value" 'BEGIN { exit !(v > 0) }'; then
        echo "FAIL: $key = $value, expected a positive number"; fail=1
    fi
done
spin=$(json_num spin_us)
case $spin in
    ''|*[!0-9]*) echo "FAIL: spin_us '$spin' is not a number of microseconds"; fail=1 ;;
esac
[ "$(json_num wrong)" = 0 ] || { echo "FAIL: readers woke with unexpected versions"; fail=1; }
exit $fail
