#!/usr/bin/env bash
# Steady-state overhead of libtcgpu.so on the example training loop: step time
# with the library preloaded vs without, measured in the same run, alternating
# runs so that machine noise hits both sides alike. Prints a table, then one
# `name value` line per figure.
#
#   overhead.sh BUILD_DIR [ROUNDS]
set -euo pipefail
B=${1:?usage: overhead.sh BUILD_DIR [ROUNDS]}
rounds=${2:-5}
export SIMCUDA_SHM=/simcuda-bench-overhead-$$
export SIMCUDA_DEVICE_MEM=2G
trap 'rm -f /dev/shm$SIMCUDA_SHM /dev/shm$SIMCUDA_SHM.keep.*' EXIT
args=(--mb 64 --steps 300 --print-every 0)

step_ms() { sed -n 's/^time: *\([0-9.]*\) ms\/step.*/\1/p' | tail -n 1; }

plain=(); preloaded=()
for r in $(seq 1 "$rounds"); do
    plain+=("$("$B/examples/train/train" "${args[@]}" | step_ms)")
    preloaded+=("$("$B/tools/gpuckpt/gpuckpt" run -- "$B/examples/train/train" "${args[@]}" | step_ms)")
done

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
p=$(median "${plain[@]}")
t=$(median "${preloaded[@]}")
ratio=$(awk -v a="$t" -v b="$p" 'BEGIN { printf "%.4f", a / b }')

printf '%-28s %12s\n' "example train (simcuda)" "ms/step"
printf '%-28s %12s\n' "without libtcgpu (median)" "$p"
printf '%-28s %12s\n' "with libtcgpu (median)" "$t"
printf '%-28s %12s\n' "ratio" "$ratio"
echo "train_step_ms_plain $p"
echo "train_step_ms_tcgpu $t"
echo "train_step_overhead_ratio $ratio"
