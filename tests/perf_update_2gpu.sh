#!/bin/sh
# The main job with its engines on a second GPU (--engine-gpu 1): the
# trainer's registry on GPU 0, the engines' tensors on GPU 1, the bytes
# through cuda_ipc over the GPUs' link; every version verified, streaming
# and whole, with --offload. Skipped (77) without two GPUs.
set -u
: "${top_builddir:=..}"
perf="$top_builddir/perf/weft-perf"
fail=0
field() { echo "$out" | sed -n "s/.*\"$1\": *\([^,}]*\).*/\1/p"; }
for run in "--stream" "--whole-versions" "--stream --offload"; do
    out=$("$perf" update --device cuda --engine-gpu 1 --no-peer $run --layers 2 --experts 3 --hidden 256 \
        --intermediate 192 --versions 4 --consumers 2 --json 2>&1)
    rc=$?
    case $out in
    *"no GPU"* | *"no such GPU"*) echo "$out"; echo "fewer than two GPUs: skipped"; exit 77 ;;
    esac
    echo "$out"
    [ $rc -eq 0 ] || { echo "FAIL: --engine-gpu 1 $run exited $rc"; fail=1; continue; }
    [ "$(field engine_device)" = 1 ] || { echo "FAIL: $run: engine_device $(field engine_device)"; fail=1; }
    [ "$(field versions)" = 4 ] || { echo "FAIL: $run: versions $(field versions), not 4"; fail=1; }
    [ "$(field wrong_tensors)" = 0 ] && [ "$(field wrong_bytes)" = 0 ] &&
        [ "$(field wrong_sampled_bytes)" = 0 ] || { echo "FAIL: $run: wrong bytes"; fail=1; }
    [ "$(field sampled_bytes)" -gt 0 ] 2>/dev/null || { echo "FAIL: $run: nothing sampled"; fail=1; }
done
exit $fail
