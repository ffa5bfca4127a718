#!/bin/sh
# UCX, NCCL and libibverbs are loaded at run time, not linked (nor the CUDA
# runtime, where it is linked statically): libweft.so
# names none of them (NEEDED), and on a host without them (simulated: their
# library files hidden in a mount namespace of this test's own, which needs
# root; NCCL stays, as weft-perf links it for its own NCCL baseline)
# libweft still loads, weft-perf info says why UCX and libibverbs did not
# load, a UCX server is refused with WEFT_ERR_UNSUPPORTED, and the host
# transport works (examples/minimal).
set -u
: "${top_builddir:=..}" "${OBJDUMP:=objdump}"
lib="$top_builddir/.libs/libweft.so"
[ -f "$lib" ] || { echo "no shared library built ($lib): skipped"; exit 77; }
if [ "${WEFT_LINKS_OPTIONAL:-no}" = yes ]; then
    echo "a sanitizer build links UCX, NCCL and libibverbs (configure.ac says why): skipped"
    exit 77
fi
fail=0
needed=$($OBJDUMP -p "$lib" | awk '$1 == "NEEDED" { print $2 }')
deps="libucp libuct libucs libnccl libibverbs"
# Built with the CUDA toolkit's static runtime (configure's default where it
# links), libweft needs no libcudart.so either.
grep -q '^CUDA_LIB_LIBS = .*-lcudart_static' "$top_builddir/Makefile" 2>/dev/null && deps="$deps libcudart"
for dep in $deps; do
    if echo "$needed" | grep -q "^$dep\."; then
        echo "FAIL: libweft.so links $dep"; fail=1
    fi
done
[ $fail -eq 0 ] && echo "ok: libweft.so links none of $deps ($(echo $needed | tr '\n' ' '))"

if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
    echo "cannot make a mount namespace here (not root): the host without them is not simulated"
    exit $fail
fi
perf="$top_builddir/perf/weft-perf"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Where the loader could find UCX's and libibverbs' libraries: the system's
# folders, LD_LIBRARY_PATH's, and those configure found them in (libweft
# looks there too).
dirs="/usr/lib /usr/local/lib"
for d in $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' ') \
         $(sed -n 's/^#define WEFT_\(UCX\|VERBS\)_LIBDIRS "\(.*\)"$/\2/p' "$top_builddir/config.h" 2>/dev/null | tr ':' ' '); do
    [ -d "$d" ] && dirs="$dirs $d"
done
# Every file of those libraries, covered by an empty one; then the checks,
# inside the namespace.
unshare -m sh -c '
    hidden=0
    for f in $(ldconfig -p | awk "/lib(ucp|uct|ucs|ibverbs)\\.so/ { print \$NF }") \
             $(find $2 -maxdepth 3 \( -name "libucp.so*" -o -name "libibverbs.so*" \) 2>/dev/null); do
        [ -f "$f" ] && mount --bind /dev/null "$(readlink -f "$f")" 2>/dev/null && hidden=$((hidden + 1))
    done
    echo "hidden $hidden"
    "$1/perf/weft-perf" info
    echo "info exit $?"
    "$1/examples/minimal" "weft-test-nodeps-$$"
    echo "minimal exit $?"
    EXAMPLE_TOKEN=t "$1/examples/producer" "weft-test-nodeps-srv-$$" 1 1 127.0.0.1:0
    echo "producer exit $?"
' sh "$top_builddir" "$dirs" > "$out" 2>&1
cat "$out"
if grep -q "^hidden 0$" "$out"; then
    echo "no library file could be hidden here: the host without them is not simulated"
    exit $fail
fi
grep -q "^info exit 0$" "$out" || { echo "FAIL: weft-perf info did not run"; fail=1; }
grep -q "^minimal exit 0$" "$out" || { echo "FAIL: the host transport did not work"; fail=1; }
if "$perf" info --json | grep -q '"backend_ucx_built": true'; then
    grep -q "UCX could not be loaded" "$out" || { echo "FAIL: info does not say UCX could not be loaded"; fail=1; }
    grep -q "not supported" "$out" && grep -q "^producer exit 1$" "$out" ||
        { echo "FAIL: a UCX server was not refused as unsupported"; fail=1; }
fi
if "$perf" info --json | grep -q '"backend_verbs_built": true'; then
    grep -q "libibverbs could not be loaded" "$out" || { echo "FAIL: info does not say libibverbs could not be loaded"; fail=1; }
fi
[ $fail -eq 0 ] && echo "ok: without UCX and libibverbs, libweft loads and says why they did not"
exit $fail
