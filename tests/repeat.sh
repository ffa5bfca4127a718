#!/bin/sh
# Runs the timing-sensitive tests many times, quiet and then with every CPU
# busy beside them, to show that they pass every time rather than usually.
#   tests/repeat.sh [-q QUIET_RUNS] [-l LOADED_RUNS] BUILD_DIR [TEST...]
# BUILD_DIR is a configured and built tree; each run is that tree's
# `make check TESTS=TEST` (the suite's own environment), its verdict read
# from TEST.trs. TESTs default to the ones that wait on other processes,
# timeouts or the scheduler. The load is one busy loop a CPU (nproc). A
# skipped run counts as a failure: a test that cannot run here proves
# nothing. Prints a line a test and mode, then "N passed, N failed"; exits
# 1 on any failure.
set -u
quiet=20 loaded=10
while getopts q:l: opt; do
    case $opt in
    q) quiet=$OPTARG ;;
    l) loaded=$OPTARG ;;
    *) echo "usage: $0 [-q QUIET_RUNS] [-l LOADED_RUNS] BUILD_DIR [TEST...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-q QUIET_RUNS] [-l LOADED_RUNS] BUILD_DIR [TEST...]" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
shift
[ $# -gt 0 ] || set -- ucx_netns.sh publish_lat.sh registry_stress.sh test_registry test_transport_ucx
log=$(mktemp -d)
load_pids=""
stop_load() {
    for p in $load_pids; do kill "$p" 2>/dev/null; done
    load_pids=""
}
trap 'stop_load; rm -rf "$log"' EXIT
trap 'exit 130' INT TERM

make -C "$build/tests" -j"$(nproc)" check TESTS= >/dev/null 2>&1 || { echo "repeat: cannot build the tests in $build"; exit 2; }
passed=0 failed=0
# One test, N times; a failure's log is kept and shown.
repeat() { # test runs mode
    ok=0
    i=0
    while [ $i -lt "$2" ]; do
        i=$((i + 1))
        rm -f "$build/tests/$1.trs"
        make -C "$build/tests" check TESTS="$1" >"$log/make" 2>&1
        result=$(sed -n 's/^:test-result: //p' "$build/tests/$1.trs" 2>/dev/null)
        if [ "$result" = PASS ]; then
            ok=$((ok + 1))
        else
            echo "repeat: $1 ($3) run $i: ${result:-no result}"
            tail -n 200 "$build/tests/$1.log" 2>/dev/null
        fi
    done
    echo "repeat: $1 $3: $ok of $2 passed"
    passed=$((passed + ok)) failed=$((failed + $2 - ok))
}

for t in "$@"; do
    repeat "$t" "$quiet" quiet
done
if [ "$loaded" -gt 0 ]; then
    n=0
    while [ $n -lt "$(nproc)" ]; do
        sh -c 'while :; do :; done' &
        load_pids="$load_pids $!"
        n=$((n + 1))
    done
    for t in "$@"; do
        repeat "$t" "$loaded" loaded
    done
    stop_load
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
