#!/bin/sh
# weft-perf delta on small shapes: real AdamW and Muon steps on the host,
# each version sent as deltas (or whole) into a held copy: 0 wrong bytes,
# fewer bytes on the wire than the full version, every JSON key there.
set -u
: "${top_builddir:=..}"
perf="$top_builddir/perf/weft-perf"
out=$("$perf" delta --experts 2 --shape 256x512 --muon-shape 2x128x256 --steps 2 --warmup 2 --json) || {
    echo "FAIL: weft-perf delta exited $?"; echo "$out"; exit 1; }
echo "$out"
fail=0
[ "$(echo "$out" | grep -c '"command": "delta"')" -eq 4 ] || { echo "FAIL: not four cases"; fail=1; }
for key in optimizer lr wire_ratio encode_ratio_copy apply_ratio_copy speedup_rate_limited wrong_bytes; do
    [ "$(echo "$out" | grep -c "\"$key\": ")" -eq 4 ] || { echo "FAIL: a case without $key"; fail=1; }
done
echo "$out" | grep -v '"wrong_bytes": 0[,}]' | grep -q . && { echo "FAIL: wrong bytes"; fail=1; }
# Fewer bytes than the full version: the ratio starts with "0.".
echo "$out" | grep -v '"wire_ratio": 0\.' | grep -q . && { echo "FAIL: a delta version no smaller than the full one"; fail=1; }
exit $fail
