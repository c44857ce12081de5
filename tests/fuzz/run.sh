#!/usr/bin/env bash
# run.sh FUZZER SEEDS WORKDIR : fuzz for TCGPU_FUZZ_SECONDS (default 60),
# new inputs into WORKDIR (the checked-in SEEDS are read, never written),
# crashes into WORKDIR/crashes. Exit 0 when nothing crashed (suite fuzz).
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3
secs=${TCGPU_FUZZ_SECONDS:-60}
mkdir -p "$work/crashes"
"$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/crashes/" "$work" "$seeds" 2>"$work/log" || {
    tail -n 40 "$work/log" >&2
    echo "FAIL: $(basename "$fuzzer") crashed; the input is in $work/crashes" >&2
    exit 1
}
grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$work/log" || true
echo "ok: $(basename "$fuzzer"): no crash in $secs s"
