#!/bin/sh
# weft-perf registries: a registry whose producer was SIGKILLed is listed
# as stale and --remove-stale removes it; one whose producer runs is listed
# as running and survives --remove-stale. The producers are examples/producer
# (it waits for a consumer that never comes).
set -u
: "${top_builddir:=..}"
perf="$top_builddir/perf/weft-perf"
producer="$top_builddir/examples/producer"
[ -x "$producer" ] || { echo "FAIL: $producer not built"; exit 1; }
dead="weft-test-registries-dead-$$"
live="weft-test-registries-live-$$"
fail=0
pids=""
trap 'for p in $pids; do kill -9 "$p" 2>/dev/null; done; "$perf" registries --remove-stale "$dead" "$live" >/dev/null 2>&1' EXIT

# Waits up to 20 s for registry $1 to be listed as sealed; prints its JSON.
sealed() {
    i=0
    while [ $i -lt 200 ]; do
        line=$("$perf" registries --json "$1" 2>/dev/null)
        case "$line" in *'"condition": "sealed"'*) echo "$line"; return 0 ;; esac
        sleep 0.1
        i=$((i + 1))
    done
    echo "FAIL: $1 was not sealed within 20 s: $line" >&2
    return 1
}

"$producer" "$dead" 1 1 >/dev/null 2>&1 & dead_pid=$!
"$producer" "$live" 1 1 >/dev/null 2>&1 & live_pid=$!
pids="$dead_pid $live_pid"
sealed "$dead" >/dev/null || fail=1
sealed "$live" >/dev/null || fail=1
kill -9 "$dead_pid"; wait "$dead_pid" 2>/dev/null

out=$("$perf" registries --json "$dead")
echo "$out"
case "$out" in *'"producer": "dead"'*'"stale": true'*) ;; *) echo "FAIL: $dead is not listed as stale with a dead producer"; fail=1 ;; esac
case "$out" in *"\"producer_pid\": $dead_pid"*) ;; *) echo "FAIL: $dead does not name producer $dead_pid"; fail=1 ;; esac
out=$("$perf" registries --json "$live")
echo "$out"
case "$out" in *'"producer": "running"'*'"stale": false'*) ;; *) echo "FAIL: $live is not listed as running and in use"; fail=1 ;; esac

"$perf" registries --remove-stale "$dead" "$live"
[ -e "/dev/shm/weft.$dead" ] && { echo "FAIL: --remove-stale left $dead"; fail=1; }
[ -e "/dev/shm/weft.$live" ] || { echo "FAIL: --remove-stale removed $live, whose producer runs"; fail=1; }
kill -9 "$live_pid"; wait "$live_pid" 2>/dev/null
"$perf" registries --remove-stale "$live" >/dev/null
[ -e "/dev/shm/weft.$live" ] && { echo "FAIL: --remove-stale left $live once its producer died"; fail=1; }
[ $fail -eq 0 ] && echo "ok: stale registries are found and removed, live ones kept"
exit $fail
