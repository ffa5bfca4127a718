#!/bin/sh
# weft-perf delta on small shapes: real AdamW and Muon steps on the host,
# each version sent as deltas (or whole) into a held copy: 0 wrong bytes,
# fewer bytes on the wire than the full version, every JSON key there;
# then --link and --link-gpu (below).
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
# W's delta patching WT: fewer bytes than every tensor's own delta.
echo "$out" | awk '{ w = $0; sub(/.*"wire_ratio": /, "", w); sub(/,.*/, "", w);
                     p = $0; if (!sub(/.*"wire_ratio_per_tensor": /, "", p)) { bad = 1; next }
                     sub(/,.*/, "", p); if (w + 0 >= p + 0) bad = 1 }
                   END { exit bad }' || { echo "FAIL: wire_ratio not below wire_ratio_per_tensor"; fail=1; }
[ $fail = 0 ] || exit 1
host_out=$out
host_adamw=$(echo "$out" | grep '"optimizer": "adamw", "lr": 1e-05,')

# --gpu: the GPU codec on the same versions. With a GPU every GPU delta
# must be the host encoder's and every applied byte right (weft-perf exits
# 1 otherwise); without one the gpu columns are null and it says so.
out=$("$perf" delta --experts 2 --shape 256x512 --optimizer adamw --lr 1e-5 --steps 2 --warmup 2 --gpu --json \
      2>&1) || { echo "FAIL: weft-perf delta --gpu exited $?"; echo "$out"; exit 1; }
echo "$out"
if echo "$out" | grep -q -- "--gpu skipped"; then
    echo "$out" | grep -q '"gpu_deltas_equal_host": null' || { echo "FAIL: skipped, yet gpu columns not null"; exit 1; }
else
    echo "$out" | grep -q '"gpu_deltas_equal_host": true' || { echo "FAIL: a GPU delta is not the host's"; exit 1; }
    echo "$out" | grep -q '"gpu_encode_ratio_copy": [0-9]' || { echo "FAIL: no GPU encode time"; exit 1; }
    # The GPU's own object: the paired codec under the host's keys.
    gpu=$(echo "$out" | grep '"device": "cuda"')
    for key in optimizer lr wire_ratio encode_ratio_copy apply_ratio_copy speedup_rate_limited wrong_bytes; do
        echo "$gpu" | grep -q "\"$key\": " || { echo "FAIL: the cuda object has no $key"; exit 1; }
    done
    echo "$gpu" | grep -q '"deltas_equal_host": true' || { echo "FAIL: a paired GPU delta is not the host's"; exit 1; }
    echo "$gpu" | grep -q '"wrong_bytes": 0[,}]' || { echo "FAIL: the GPU codec's wrong bytes"; exit 1; }
    echo "$gpu" | grep -q '"wt_rewrite": "off"' || { echo "FAIL: the cuda object does not name WT's scatter"; exit 1; }
    # The same with each dense pair's WT written whole from W's new bytes
    # (256x512 matrices, ~1 % of the bytes changed: every pair rewritten).
    out=$(WEFT_DELTA_WT_REWRITE=auto "$perf" delta --experts 2 --shape 256x512 --optimizer adamw --lr 1e-5 \
          --steps 2 --warmup 2 --gpu --json 2>&1) || {
        echo "FAIL: weft-perf delta --gpu (WEFT_DELTA_WT_REWRITE=auto) exited $?"; echo "$out"; exit 1; }
    echo "$out"
    gpu=$(echo "$out" | grep '"device": "cuda"')
    echo "$gpu" | grep -q '"deltas_equal_host": true' || { echo "FAIL: rewrite: a paired GPU delta is not the host's"; exit 1; }
    echo "$gpu" | grep -q '"wrong_bytes": 0[,}]' || { echo "FAIL: rewrite: the GPU codec's wrong bytes"; exit 1; }
    echo "$gpu" | grep -q '"wt_rewrite": "auto"' || { echo "FAIL: the cuda object does not name the rewrite"; exit 1; }
fi

# --placement staged: the versions made by the staged producer (masters in
# pinned host memory, the update on the GPU). AdamW's arithmetic is the
# same in every placement, so are its versions: the same bytes changed and
# the same wire bytes as the host placement's. Without a GPU it is skipped
# (77) and says so; a placement it does not know is refused.
echo "$host_out" | grep -q '"placement": "host"' || { echo "FAIL: no host placement in the output"; exit 1; }
"$perf" delta --placement resident >/dev/null 2>&1; rc=$?
[ $rc = 2 ] || { echo "FAIL: --placement resident exited $rc, not 2"; exit 1; }
staged=$("$perf" delta --experts 2 --shape 256x512 --optimizer adamw --lr 1e-5 --steps 2 --warmup 2 \
         --placement staged --json 2>&1); rc=$?
if [ $rc = 77 ]; then
    echo "$staged" | grep -q -- "--placement staged needs a GPU" || { echo "FAIL: skipped without saying why"; exit 1; }
elif [ $rc = 0 ]; then
    echo "$staged"
    echo "$staged" | grep -q '"placement": "staged"' || { echo "FAIL: no staged placement in the output"; exit 1; }
    echo "$staged" | grep -q '"wrong_bytes": 0[,}]' || { echo "FAIL: staged versions: wrong bytes"; exit 1; }
    for key in w_bytes_changed wire_bytes; do
        a=$(echo "$host_adamw" | grep -o "\"$key\": [0-9.e+-]*")
        b=$(echo "$staged" | grep -o "\"$key\": [0-9.e+-]*")
        [ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: staged $key ($b) is not the host placement's ($a)"; exit 1; }
    done
else
    echo "FAIL: weft-perf delta --placement staged exited $rc"; echo "$staged"; exit 1
fi

# --link: the same served over a veth link held to 100 Mbit/s between two
# network namespaces, whole then as deltas. Needs root, ip and tc; where
# TESTS_MUST_RUN=1 says this machine has them (CI), their absence fails.
# Only that it ran, every version after the first went as a delta and no
# byte was wrong are checked here: its speed is weft-perf's to report.
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    [ "${TESTS_MUST_RUN:-0}" = 1 ] && { echo "FAIL: --link needs root, ip and tc (TESTS_MUST_RUN=1)"; exit 1; }
    echo "perf_delta: --link not run (needs root, ip and tc)"
    exit 0
fi
err=$(mktemp)
trap 'rm -f "$err"' EXIT
out=$("$perf" delta --experts 2 --shape 512x1024 --optimizer adamw --lr 1e-5 --steps 3 --warmup 2 \
      --link 100mbit --json 2>"$err") || { echo "FAIL: weft-perf delta --link exited $?"; cat "$err"; echo "$out"; exit 1; }
echo "$out"
if grep -q -- "--link skipped" "$err"; then
    cat "$err"
    [ "${TESTS_MUST_RUN:-0}" = 1 ] && { echo "FAIL: --link skipped (TESTS_MUST_RUN=1)"; exit 1; }
    exit 0
fi
echo "$out" | grep -q '"link_rate": "100mbit"' || { echo "FAIL: no link rate"; exit 1; }
echo "$out" | grep -q '"link_versions_as_deltas": 3[,}]' || { echo "FAIL: not every version after the first went as a delta"; exit 1; }
echo "$out" | grep -q '"speedup_rate_limited": [0-9]' || { echo "FAIL: no speedup measured"; exit 1; }
echo "$out" | grep -q '"wrong_bytes": 0[,}]' || { echo "FAIL: wrong bytes"; exit 1; }

# --link-gpu: from a GPU registry into device views (deltas encoded and
# applied on the GPU); where there is no GPU it says so and is skipped.
out=$("$perf" delta --experts 2 --shape 512x1024 --optimizer adamw --lr 1e-5 --steps 3 --warmup 2 \
      --link 100mbit --link-gpu --json 2>"$err") || {
    echo "FAIL: weft-perf delta --link-gpu exited $?"; cat "$err"; echo "$out"; exit 1; }
echo "$out"
if grep -q -- "--link skipped: --link-gpu needs a GPU" "$err"; then
    echo "perf_delta: --link-gpu not run (no GPU)"
    exit 0
fi
echo "$out" | grep -q '"link_memory": "gpu"' || { echo "FAIL: --link-gpu not in GPU memory"; cat "$err"; exit 1; }
echo "$out" | grep -q '"link_versions_as_deltas": 3[,}]' || { echo "FAIL: --link-gpu: not every version after the first went as a delta"; cat "$err"; exit 1; }
echo "$out" | grep -q '"wrong_bytes": 0[,}]' || { echo "FAIL: --link-gpu: wrong bytes"; exit 1; }
# And with the consumer's dense pairs rewritten: WT checked against its
# own checksum, so a wrong rewrite would be redone whole (fewer deltas).
out=$(WEFT_DELTA_WT_REWRITE=auto "$perf" delta --experts 2 --shape 512x1024 --optimizer adamw --lr 1e-5 --steps 3 \
      --warmup 2 --link 100mbit --link-gpu --json 2>"$err") || {
    echo "FAIL: weft-perf delta --link-gpu (WEFT_DELTA_WT_REWRITE=auto) exited $?"; cat "$err"; echo "$out"; exit 1; }
echo "$out"
echo "$out" | grep -q '"link_versions_as_deltas": 3[,}]' || { echo "FAIL: --link-gpu, rewrite: not every version after the first went as a delta"; cat "$err"; exit 1; }
echo "$out" | grep -q '"wrong_bytes": 0[,}]' || { echo "FAIL: --link-gpu, rewrite: wrong bytes"; exit 1; }
exit 0
