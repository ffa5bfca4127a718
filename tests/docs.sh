#!/bin/sh
# The documents say what the code does: each section-3 page names every
# call its header exports (docs/man/gen_synopsis.py wrote their SYNOPSIS),
# the README's program is examples/minimal.c verbatim, and the README
# stays short (issue 23: about 200 lines).
set -u
: "${top_srcdir:=..}"
fail=0
for header in "$top_srcdir"/include/weft/*.h; do
    h=$(basename "$header" .h)
    case $h in
    weft | types) page="$top_srcdir/docs/man/weft.3" ;; # weft.3 documents both
    ucx) page="$top_srcdir/docs/man/weft_transport.3" ;; # with the transports
    *) page="$top_srcdir/docs/man/weft_$h.3" ;;
    esac
    [ -f "$page" ] || { echo "FAIL: no man page for weft/$h.h ($page)"; fail=1; continue; }
    for fn in $(sed -n 's/^WEFT_API[^(]*[ *]\(weft_[a-z0-9_]*\)(.*/\1/p' "$header"); do
        grep -q "$fn" "$page" || { echo "FAIL: $page does not name $fn (weft/$h.h)"; fail=1; }
    done
    [ $fail -eq 0 ] && echo "ok: $page names every call of weft/$h.h"
done
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
awk '/^```c$/ { inside = 1; next } /^```$/ { if (inside) exit } inside' "$top_srcdir/README.md" > "$tmp"
if cmp -s "$tmp" "$top_srcdir/examples/minimal.c"; then
    echo "ok: the README's program is examples/minimal.c"
else
    echo "FAIL: the README's C block differs from examples/minimal.c:"; diff "$tmp" "$top_srcdir/examples/minimal.c" | head -20; fail=1
fi
lines=$(wc -l < "$top_srcdir/README.md")
[ "$lines" -le 220 ] && echo "ok: README.md is $lines lines" || { echo "FAIL: README.md is $lines lines (keep it near 200)"; fail=1; }
exit $fail
