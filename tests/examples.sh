#!/bin/sh
# The examples run as a user would run them: minimal (the README's
# program) on its own, then a producer and two engine-shaped consumers in
# three processes over three versions, every byte checked by each
# consumer. Every process must exit 0.
set -u
: "${top_builddir:=..}"
ex="$top_builddir/examples"
fail=0
for p in minimal producer consumer; do
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
[ $fail -eq 0 ] && echo "ok: the examples ran"
exit $fail
