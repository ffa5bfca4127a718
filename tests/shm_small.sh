#!/bin/sh
# A /dev/shm too small for the registry (a container's default is 64 MB):
# the main job must stop with an error that says so, at seal, not die of
# SIGBUS while it writes a version, and must leave no segment behind. Run
# in a private mount namespace with a 16 MB tmpfs over /dev/shm; skipped
# (77) where that cannot be made (not root, no unshare).
set -u
: "${top_builddir:=..}"
perf="$top_builddir/perf/weft-perf"
if ! unshare -m sh -c 'mount -t tmpfs -o size=16m none /dev/shm' 2>/dev/null; then
    echo "cannot mount a private /dev/shm here (needs root and unshare): skipped"
    exit 77
fi
out=$(unshare -m sh -c "mount -t tmpfs -o size=16m none /dev/shm &&
    '$perf' update --device host --layers 1 --experts 4 --hidden 1024 --intermediate 768 --versions 2 \
        --consumers 1 --slots 3 --json 2>&1; echo \"rc=\$?\"; echo \"left=\$(ls /dev/shm | wc -l)\"")
echo "$out"
fail=0
rc=$(echo "$out" | sed -n 's/^rc=//p')
[ "$rc" != 135 ] && [ "$rc" != 0 ] || { echo "FAIL: weft-perf update exited $rc (SIGBUS is 135)"; fail=1; }
echo "$out" | grep -q "/dev/shm has" || { echo "FAIL: no message naming /dev/shm's free space"; fail=1; }
[ "$(echo "$out" | sed -n 's/^left=//p')" = 0 ] || { echo "FAIL: a segment was left in /dev/shm"; fail=1; }
exit $fail
