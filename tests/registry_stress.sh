#!/bin/sh
# weft-perf stress: a producer and four readers, readers killed while they
# hold leases. No torn read, versions and reads made, dead readers' leases
# reclaimed, exit status 0, and the registry unlinked afterwards. --kills:
# the run goes on until that many readers were killed and their leases
# reclaimed (weft-perf bounds it), however slow the machine.
set -u
: "${top_builddir:=..}"
perf="$top_builddir/perf/weft-perf"

# The value of a numeric key of the one-line JSON object in $out.
json_num() {
    echo "$out" | sed -n "s/.*\"$1\": \(-\{0,1\}[0-9][0-9.]*\).*/\1/p"
}

"$perf" stress --readers 0 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: stress --readers 0 must be a usage error (exit 2)"; exit 1; }

# The wrapper libtool makes for an uninstalled program execs it: $! is the
# pid that names the registry.
tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT
kills=3
"$perf" stress --seconds 8 --readers 4 --kills $kills --json >"$tmp" &
pid=$!
wait $pid
rc=$?
out=$(cat "$tmp")
echo "$out"
fail=0
[ $rc -eq 0 ] || { echo "FAIL: weft-perf stress exited $rc"; fail=1; }
[ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q '^{.*}$' || {
    echo "FAIL: --json must print exactly one JSON object"; fail=1; }

check() { # key, test, value
    value=$(json_num "$1")
    if [ -z "$value" ]; then
        echo "FAIL: no \"$1\" in the JSON"; fail=1
    elif ! [ "$value" "$2" "$3" ]; then
        echo "FAIL: $1 = $value, expected $2 $3"; fail=1
    fi
}
check torn -eq 0
check backwards -eq 0
check errors -eq 0
check versions -gt 0
check reads -gt 0
check readers_killed -ge $kills
check leases_reclaimed -ge $kills

if [ -d /dev/shm ] && [ -e "/dev/shm/weft.weft-perf-stress-$pid" ]; then
    echo "FAIL: registry weft-perf-stress-$pid was left behind"; fail=1
fi
exit $fail
