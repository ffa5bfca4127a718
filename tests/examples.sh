#!/bin/sh
# The examples run as a user would run them: minimal (the README's
# program) on its own, then a producer and two engine-shaped consumers in
# three processes over three versions, every byte checked by each
# consumer; where libweft has UCX, once more with one of the engines
# remote (remote_consumer, over the producer's UCX server on loopback).
# Every process must exit 0.
set -u
: "${top_builddir:=..}"
ex="$top_builddir/examples"
fail=0
for p in minimal producer consumer remote_consumer; do
    [ -x "$ex/$p" ] || { echo "FAIL: $ex/$p not built"; exit 1; }
done
"$ex/minimal" "weft-test-example-minimal-$$" || { echo "FAIL: minimal exited $?"; fail=1; }
name="weft-test-example-$$"
"$ex/producer" "$name" 2 3 & producer=$!
"$ex/consumer" "$name" engine-0 3 & first=$!
"$ex/consumer" "$name" engine-1 3; second=$?
wait $first; first=$?
wait $producer; producer=$?
echo "producer $producer, engine-0 $first, engine-1 $second"
[ $producer -eq 0 ] && [ $first -eq 0 ] && [ $second -eq 0 ] || fail=1
# The remote engine: the producer serves on a port of its choosing, which
# it prints; the token comes through the environment.
if "$top_builddir/perf/weft-perf" info --json | grep -q '"backend_ucx_built": true'; then
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    export EXAMPLE_TOKEN="example-token-$$"
    "$ex/producer" "$name-remote" 2 3 127.0.0.1:0 > "$out" & producer=$!
    port=
    for _ in $(seq 300); do
        port=$(sed -n 's/^producer: serving on port \([0-9][0-9]*\)$/\1/p' "$out")
        [ -n "$port" ] && break
        kill -0 $producer 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "FAIL: the producer did not say where it serves:"; cat "$out"; fail=1
        kill $producer 2>/dev/null
    else
        "$ex/consumer" "$name-remote" engine-local 3 & local_engine=$!
        "$ex/remote_consumer" "127.0.0.1:$port" engine-remote 3; remote=$?
        wait $local_engine; local_engine=$?
        wait $producer; producer=$?
        cat "$out"
        echo "producer $producer, engine-local $local_engine, engine-remote $remote"
        [ $producer -eq 0 ] && [ $local_engine -eq 0 ] && [ $remote -eq 0 ] || fail=1
    fi
else
    echo "libweft was built without UCX: the remote engine is not run"
fi
[ $fail -eq 0 ] && echo "ok: the examples ran"
exit $fail
