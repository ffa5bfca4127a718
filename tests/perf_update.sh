#!/bin/sh
# The main job, small: a trainer's AdamW (then Muon) steps written as FP8
# into the registry, two consumers verifying every tensor against the
# producer's checksums. It must finish and report every version, the
# model's size and no wrong tensor. On the host; then, where a GPU is, on
# the GPU (staged optimizer, GPU registry, engines through cuda_ipc that
# also compare a sampled expert's every byte).
set -u
: "${top_builddir:=..}"
perf="$top_builddir/perf/weft-perf"
out=$("$perf" update --device host --layers 2 --experts 3 --hidden 256 --intermediate 192 --versions 4 \
    --consumers 2 --threads 2 --json) || { echo "FAIL: weft-perf update exited $?"; echo "$out"; exit 1; }
echo "$out"
fail=0
field() { echo "$out" | sed -n "s/.*\"$1\": *\([^,}]*\).*/\1/p"; }
[ "$(field versions)" = 4 ] || { echo "FAIL: versions $(field versions), not 4"; fail=1; }
[ "$(field wrong_tensors)" = 0 ] || { echo "FAIL: wrong_tensors $(field wrong_tensors)"; fail=1; }
# 2 layers x 3 experts x (W, WT, scale) x 2 projections
[ "$(field tensors)" = 36 ] || { echo "FAIL: tensors $(field tensors), not 36"; fail=1; }
# 2 x 3 x (384 x 256 + 256 x 192) parameters
[ "$(field parameters)" = 884736 ] || { echo "FAIL: parameters $(field parameters)"; fail=1; }
out=$("$perf" update --device host --optimizer muon --layers 1 --experts 2 --hidden 128 --intermediate 64 \
    --versions 2 --consumers 1 --json) || { echo "FAIL: weft-perf update --optimizer muon exited $?"; echo "$out"; exit 1; }
echo "$out"
[ "$(field optimizer)" = '"muon"' ] || { echo "FAIL: optimizer $(field optimizer), not muon"; fail=1; }
[ "$(field versions)" = 2 ] || { echo "FAIL: muon: versions $(field versions), not 2"; fail=1; }
[ "$(field wrong_tensors)" = 0 ] || { echo "FAIL: muon: wrong_tensors $(field wrong_tensors)"; fail=1; }
"$perf" update --device tpu >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: an unknown --device must be a usage error"; fail=1; }
"$perf" update --optimizer sgd >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: an unknown --optimizer must be a usage error"; fail=1; }
"$perf" update --lr -1 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: a negative --lr must be a usage error"; fail=1; }
for optimizer in adamw muon; do
    out=$("$perf" update --device cuda --optimizer $optimizer --layers 2 --experts 3 --hidden 256 \
        --intermediate 192 --versions 4 --consumers 2 --json 2>&1)
    rc=$?
    case $out in
    *"no GPU"*) echo "no GPU: the GPU job is not run here"; break ;;
    esac
    echo "$out"
    [ $rc -eq 0 ] || { echo "FAIL: weft-perf update --device cuda --optimizer $optimizer exited $rc"; fail=1; continue; }
    [ "$(field memory)" = '"cuda"' ] || { echo "FAIL: cuda: memory $(field memory)"; fail=1; }
    [ "$(field versions)" = 4 ] || { echo "FAIL: cuda $optimizer: versions $(field versions), not 4"; fail=1; }
    [ "$(field wrong_tensors)" = 0 ] || { echo "FAIL: cuda $optimizer: wrong_tensors $(field wrong_tensors)"; fail=1; }
    [ "$(field wrong_sampled_bytes)" = 0 ] || { echo "FAIL: cuda $optimizer: wrong sampled bytes"; fail=1; }
    # each engine compares one expert of every layer and kind, every version
    [ "$(field sampled_bytes)" -gt 0 ] 2>/dev/null || { echo "FAIL: cuda $optimizer: nothing sampled"; fail=1; }
done
exit $fail
