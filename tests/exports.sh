#!/bin/sh
# libweft.so exports weft_* API symbols and nothing else: internal helpers
# (hidden visibility) and symbols of what it links (version script) stay
# inside.
set -u
: "${top_builddir:=..}" "${NM:=nm}"
lib="$top_builddir/.libs/libweft.so"
if [ ! -f "$lib" ]; then
    echo "no shared library built ($lib): skipped"
    exit 77
fi
exports=$($NM -D --defined-only "$lib" | awk '$2 ~ /^[A-Z]$/ && $2 != "A" { print $3 }' | sed 's/@.*//')
[ -n "$exports" ] || { echo "FAIL: $lib exports nothing"; exit 1; }
fail=0
for sym in $exports; do
    case $sym in
    weft_*) ;;
    *) echo "FAIL: exported symbol outside the API: $sym"; fail=1 ;;
    esac
done
for sym in weft_version weft_status_string weft_dtype_size weft_config_describe weft_backend_query \
    weft_registry_create weft_registry_publish weft_registry_wait weft_plan_create weft_plan_receive \
    weft_quant_host weft_quant_cuda weft_dequant_host weft_fp8_e4m3_encode weft_fp8_e4m3_decode; do
    echo "$exports" | grep -qx "$sym" || { echo "FAIL: API symbol not exported: $sym"; fail=1; }
done
# Internal functions share the weft_ prefix; visibility must hide them.
for sym in weft_log_write weft_config_value weft_checksum64 weft_text_append weft_quant_check; do
    if echo "$exports" | grep -qx "$sym"; then
        echo "FAIL: internal symbol exported: $sym"; fail=1
    fi
done
[ $fail -eq 0 ] && echo "ok: $(echo "$exports" | wc -l) symbols exported, all weft_*"
exit $fail
