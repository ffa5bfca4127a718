#!/bin/sh
# Every public header compiles on its own, as C99 and as C++, and can be
# included twice.
set -u
: "${CC:=cc}" "${CXX:=c++}" "${top_srcdir:=..}"
headers=$(cd "$top_srcdir/include" && ls weft/*.h)
[ -n "$headers" ] || { echo "no public headers found under $top_srcdir/include"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for h in $headers; do
    printf '#include <%s>\n#include <%s>\nint weft_header_test_unit;\n' "$h" "$h" > "$tmp/unit.c"
    if ! $CC -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only -I"$top_srcdir/include" "$tmp/unit.c"; then
        echo "FAIL: $h does not compile on its own as C99"; fail=1
    fi
    cp "$tmp/unit.c" "$tmp/unit.cpp"
    if ! $CXX -std=c++11 -pedantic -Wall -Wextra -Wshadow -Werror -fsyntax-only -I"$top_srcdir/include" "$tmp/unit.cpp"; then
        echo "FAIL: $h does not compile on its own as C++"; fail=1
    fi
    [ $fail -eq 0 ] && echo "ok: $h"
done
exit $fail
