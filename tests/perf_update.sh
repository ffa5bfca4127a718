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
[ "$(field publication)" = '"per-layer"' ] || { echo "FAIL: publication $(field publication)"; fail=1; }
# No warm-up on the host: every version is timed.
[ "$(field timed_versions)" = 4 ] || { echo "FAIL: timed_versions $(field timed_versions), not 4"; fail=1; }
[ "$(field wrong_tensors)" = 0 ] || { echo "FAIL: wrong_tensors $(field wrong_tensors)"; fail=1; }
[ "$(field wrong_bytes)" = 0 ] || { echo "FAIL: wrong_bytes $(field wrong_bytes)"; fail=1; }
# 2 layers x 3 experts x (W, WT, scale) x 2 projections
[ "$(field tensors)" = 36 ] || { echo "FAIL: tensors $(field tensors), not 36"; fail=1; }
# 2 x 3 x (384 x 256 + 256 x 192) parameters
[ "$(field parameters)" = 884736 ] || { echo "FAIL: parameters $(field parameters)"; fail=1; }
# On the host, the consumers' copies beside memcpy's ceiling, measured in the run.
case $(field copy_ceiling_gbps) in null | "" | 0 | 0.0*) echo "FAIL: copy_ceiling_gbps $(field copy_ceiling_gbps)"; fail=1 ;; esac
case $(field ratio_copy_ceiling) in null | "") echo "FAIL: no ratio_copy_ceiling"; fail=1 ;; esac
# The table's run: a progress line a version on stderr, the verdict last;
# and the timeline, one bar a phase of each version.
plot=/tmp/perf_update_plot.$$.svg
text=$("$perf" update --device host --layers 1 --experts 2 --hidden 128 --intermediate 64 --versions 2 \
    --consumers 1 --plot "$plot" 2>/tmp/perf_update_progress.$$)
grep -q '^<svg ' "$plot" && grep -q '</svg>' "$plot" && [ "$(grep -c '<title>v[12] ' "$plot")" -ge 8 ] ||
    { echo "FAIL: --plot wrote no timeline of the 2 versions"; head -5 "$plot"; fail=1; }
echo "$text" | grep -q "^# the versions' timeline: $plot" || { echo "FAIL: the table does not name the timeline"; fail=1; }
echo "$text" | grep -q '^# copy ceiling (this run' || { echo "FAIL: the table has no copy ceiling"; fail=1; }
rm -f "$plot"
echo "$text" | tail -1
[ "$(grep -c '^weft-perf update: version [12] of 2' /tmp/perf_update_progress.$$)" = 2 ] ||
    { echo "FAIL: not one progress line a version"; cat /tmp/perf_update_progress.$$; fail=1; }
echo "$text" | tail -1 | grep -q '^PASS: 2 of 2 versions published; 1 consumers received and verified' ||
    { echo "FAIL: the verdict is not the last line"; fail=1; }
rm -f /tmp/perf_update_progress.$$
# Muon, with versions published whole (no streaming).
out=$("$perf" update --device host --optimizer muon --layers 1 --experts 2 --hidden 128 --intermediate 64 \
    --versions 2 --consumers 1 --whole-versions --json) ||
    { echo "FAIL: weft-perf update --optimizer muon exited $?"; echo "$out"; exit 1; }
echo "$out"
[ "$(field optimizer)" = '"muon"' ] || { echo "FAIL: optimizer $(field optimizer), not muon"; fail=1; }
[ "$(field publication)" = '"whole"' ] || { echo "FAIL: --whole-versions: publication $(field publication)"; fail=1; }
[ "$(field versions)" = 2 ] || { echo "FAIL: muon: versions $(field versions), not 2"; fail=1; }
[ "$(field wrong_tensors)" = 0 ] || { echo "FAIL: muon: wrong_tensors $(field wrong_tensors)"; fail=1; }
[ "$(field wrong_bytes)" = 0 ] || { echo "FAIL: muon: wrong_bytes $(field wrong_bytes)"; fail=1; }
out=$("$perf" update --device host --model deepseek-v3 --layers 1 --experts 1 --versions 1 --consumers 1 --json) ||
    { echo "FAIL: weft-perf update --model deepseek-v3 exited $?"; echo "$out"; fail=1; }
echo "$out"
[ "$(field model)" = '"deepseek-v3"' ] && [ "$(field hidden)" = 7168 ] && [ "$(field intermediate)" = 2048 ] ||
    { echo "FAIL: --model deepseek-v3: model $(field model), H $(field hidden), I $(field intermediate)"; fail=1; }
[ "$(field wrong_tensors)" = 0 ] || { echo "FAIL: deepseek-v3 shapes: wrong_tensors $(field wrong_tensors)"; fail=1; }
[ "$(field wrong_bytes)" = 0 ] || { echo "FAIL: deepseek-v3 shapes: wrong_bytes $(field wrong_bytes)"; fail=1; }
# Engine 0 dies in the middle of version 2 (half copied, its lease held)
# and is started again: the others and the trainer go on, it never
# acknowledges 2 and joins at 3, every byte right.
out=$("$perf" update --device host --layers 1 --experts 3 --hidden 256 --intermediate 192 --versions 4 \
    --consumers 2 --kill-engine 2 --json) || { echo "FAIL: --kill-engine 2 exited $?"; echo "$out"; fail=1; }
echo "$out"
[ "$(field engine_kills)" = 1 ] && [ "$(field engine0_versions)" = 3 ] &&
    [ "$(field engine0_first_version_after_restart)" = 3 ] && [ "$(field versions)" = 4 ] &&
    [ "$(field wrong_tensors)" = 0 ] && [ "$(field wrong_bytes)" = 0 ] ||
    { echo "FAIL: --kill-engine 2: kills $(field engine_kills), engine 0 versions $(field engine0_versions)," \
        "first after restart $(field engine0_first_version_after_restart), wrong $(field wrong_tensors)" \
        "tensors, $(field wrong_bytes) bytes"; fail=1; }
# The trainer dies with half of version 3 written (SIGKILL: weft-perf exits
# 137); its witness reports: the registry's latest is 2 and reads back
# whole, both consumers hold 2 and took nothing of 3.
kill_trainer() { # device
    out=$("$perf" update --device "$1" --no-peer --layers 2 --experts 3 --hidden 256 --intermediate 192 \
        --versions 4 --consumers 2 --threads 2 --kill-trainer 3 --json 2>&1)
    echo "$out"
    [ "$(field case)" = '"kill-trainer"' ] && [ "$(field ok)" = true ] &&
        [ "$(field consumers_holding_last_version)" = 2 ] && [ "$(field wrong_bytes)" = 0 ] ||
        { echo "FAIL: --kill-trainer 3 ($1): the witness's report"; fail=1; }
}
kill_trainer host
[ "$(field registry_latest)" = 2 ] && [ "$(field registry_wrong_bytes)" = 0 ] ||
    { echo "FAIL: --kill-trainer 3: the registry after the trainer's death"; fail=1; }
"$perf" update --device host --versions 4 --kill-trainer 5 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --kill-trainer past the last version must be a usage error"; fail=1; }
"$perf" update --device host --versions 4 --kill-engine 4 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --kill-engine of the last version must be a usage error"; fail=1; }
"$perf" update --device host --versions 4 --kill-trainer 3 --stream >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --kill-trainer with --stream must be a usage error"; fail=1; }
"$perf" update --device host --versions 4 --warmup 4 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: a warm-up that leaves no version to time must be a usage error"; fail=1; }
"$perf" update --model llama >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: an unknown --model must be a usage error"; fail=1; }
"$perf" update --device host --offload >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --offload without a GPU must be a usage error"; fail=1; }
"$perf" update --device tpu >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: an unknown --device must be a usage error"; fail=1; }
"$perf" update --optimizer sgd >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: an unknown --optimizer must be a usage error"; fail=1; }
"$perf" update --lr -1 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: a negative --lr must be a usage error"; fail=1; }
"$perf" update --device host --engine-gpu 1 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --engine-gpu with --device host must be a usage error"; fail=1; }
for run in adamw muon "adamw --offload" "adamw --kill-engine 2" "adamw --whole-versions" \
    "adamw --whole-versions --offload"; do
    optimizer=${run%% *}
    out=$("$perf" update --device cuda --no-peer --optimizer $run --layers 2 --experts 3 --hidden 256 \
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
    [ "$(field wrong_bytes)" = 0 ] || { echo "FAIL: cuda $optimizer: wrong_bytes $(field wrong_bytes)"; fail=1; }
    [ "$(field wrong_sampled_bytes)" = 0 ] || { echo "FAIL: cuda $optimizer: wrong sampled bytes"; fail=1; }
    # each engine compares one expert of every layer and kind, every version
    [ "$(field sampled_bytes)" -gt 0 ] 2>/dev/null || { echo "FAIL: cuda $optimizer: nothing sampled"; fail=1; }
    case $run in
    *--whole-versions*) want='"whole"' ;;
    *) want='"per-layer"' ;;
    esac
    [ "$(field publication)" = "$want" ] || { echo "FAIL: cuda $run: publication $(field publication)"; fail=1; }
    [ -n "$(field gpu_memory_source)" ] || { echo "FAIL: cuda $run: no gpu_memory_source"; fail=1; }
    case $run in
    *--offload)
        # each engine rebinds after each version but the last: 2 x 3
        [ "$(field rebinds)" = 6 ] || { echo "FAIL: --offload: rebinds $(field rebinds), not 6"; fail=1; }
        echo "--offload: $(field rebinds_moved) of 6 rebinds to another address" ;;
    *--kill-engine*)
        [ "$(field engine_kills)" = 1 ] && [ "$(field engine0_versions)" = 3 ] &&
            [ "$(field engine0_first_version_after_restart)" = 3 ] ||
            { echo "FAIL: cuda --kill-engine 2: kills $(field engine_kills), engine 0 versions" \
                "$(field engine0_versions), first after restart $(field engine0_first_version_after_restart)"; fail=1; } ;;
    esac
done
case $out in
*"no GPU"*) ;;
*) kill_trainer cuda ;;
esac
exit $fail
