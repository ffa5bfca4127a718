#!/bin/sh
# weft-perf info prints the version, every backend and every WEFT_* setting.
set -u
: "${top_builddir:=..}"
perf="$top_builddir/perf/weft-perf"
out=$(WEFT_LOG_LEVEL=info "$perf" info) || { echo "FAIL: weft-perf info exited $?"; exit 1; }
echo "$out"
fail=0
expect() {
    echo "$out" | grep -q -- "$1" || { echo "FAIL: weft-perf info does not print: $1"; fail=1; }
}
expect "^libweft $PACKAGE_VERSION "
for backend in host cuda ucx nccl verbs; do
    expect "^  $backend  *built: \(yes\|no \) found: \(yes\|no \)"
done
expect "^  host   built: yes found: yes"
expect "^  WEFT_LOG_LEVEL=info$"
expect "^  WEFT_LOG_FILE=  (default)$"
expect "log verbosity: off, error, warn, info, debug or trace \[common\]"

# With UCX: both halves of the GPU-memory rule are shown, and a machine
# without RDMA devices has no GPUDirect, so GPU memory is staged.
if echo "$out" | grep -q "^  ucx  *built: yes"; then
    expect "GPUDirect RDMA: an InfiniBand/RoCE memory domain that registers CUDA memory: \(yes\|none\)$"
    if [ ! -d /sys/class/infiniband ] && [ -z "${WEFT_UCX_CUDA:-}" ]; then
        expect "GPUDirect RDMA: an InfiniBand/RoCE memory domain that registers CUDA memory: none$"
        expect "GPU memory: UCX reports no GPUDirect RDMA; GPU memory goes staged"
    fi
fi

# An unknown WEFT_* variable is reported, once, on stderr.
err=$(WEFT_NO_SUCH_SETTING=1 "$perf" info 2>&1 >/dev/null)
[ "$(echo "$err" | grep -c WEFT_NO_SUCH_SETTING)" = 1 ] || {
    echo "FAIL: unknown variable not reported once: $err"; fail=1; }

# --json: the same as one JSON object on one line.
json=$(WEFT_LOG_LEVEL=info "$perf" info --json) || { echo "FAIL: weft-perf info --json exited $?"; fail=1; }
echo "$json"
[ "$(echo "$json" | wc -l)" = 1 ] || { echo "FAIL: info --json is not one line"; fail=1; }
for want in "\"libweft\": \"$PACKAGE_VERSION\"" '"backend_host_built": true' '"backend_host_found": true' \
    '"WEFT_LOG_LEVEL": "info"' '"WEFT_LOG_LEVEL_set": true' '"WEFT_LOG_FILE_set": false'; do
    echo "$json" | grep -qF -- "$want" || { echo "FAIL: info --json lacks $want"; fail=1; }
done
"$perf" info --bogus >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: info with an unknown option must exit 2"; fail=1; }

# Invalid values are flagged, valid ones are not, in the table and in --json.
out=$(WEFT_UCX_LANES=99 WEFT_VERIFY=sometimes WEFT_REGISTRY_SPIN_US=-1 WEFT_UCX_STAGE_BYTES=4K \
      WEFT_CUDA_IPC_KERNEL_MAX=auto WEFT_LOG_LEVEL=DEBUG "$perf" info 2>/dev/null)
for bad in "WEFT_UCX_LANES=99  INVALID" "WEFT_VERIFY=sometimes  INVALID" "WEFT_REGISTRY_SPIN_US=-1  INVALID" \
    "WEFT_UCX_STAGE_BYTES=4K  INVALID" "4 invalid WEFT_\* settings"; do
    echo "$out" | grep -q -- "$bad" || { echo "FAIL: info does not flag: $bad"; fail=1; }
done
for good in "WEFT_CUDA_IPC_KERNEL_MAX=auto$" "WEFT_LOG_LEVEL=DEBUG$"; do
    echo "$out" | grep -q -- "^  $good" || { echo "FAIL: info flags a valid value: $good"; fail=1; }
done
json=$(WEFT_UCX_LANES=0 "$perf" info --json 2>/dev/null)
for want in '"WEFT_UCX_LANES_valid": false' '"WEFT_VERIFY_valid": true'; do
    echo "$json" | grep -qF -- "$want" || { echo "FAIL: info --json lacks $want"; fail=1; }
done

# -V and --version say the same.
[ "$("$perf" -V)" = "weft-perf $PACKAGE_VERSION" ] && [ "$("$perf" --version)" = "weft-perf $PACKAGE_VERSION" ] ||
    { echo "FAIL: -V / --version"; fail=1; }

# Usage errors exit 2.
"$perf" no-such-command >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: an unknown command must exit 2"; fail=1; }
"$perf" >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: no command must exit 2"; fail=1; }
exit $fail
