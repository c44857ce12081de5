#!/usr/bin/env bash
# gpuckpt save / restore of 1 GiB of device state against a plain CRIU dump /
# restore of a process that holds the same bytes in host memory (what
# cuda-checkpoint + CRIU produce: the driver copies device memory into the
# process, CRIU dumps it uncompressed). Same machine, same filesystem, same
# run; ratios are tcgpu / plain CRIU. Prints a table, then `name value` lines.
#
#   save_restore.sh BUILD_DIR [MIB]
#
# Needs root and criu (exit 77 otherwise). gpuckpt save fsyncs its images,
# CRIU does not: that cost is in gpuckpt's numbers.
set -euo pipefail
B=${1:?usage: save_restore.sh BUILD_DIR [MIB]}
mib=${2:-1024}
[ "$(id -u)" -eq 0 ] || { echo "skipped: needs root"; exit 77; }
CRIU=${TCGPU_CRIU:-$(command -v criu || echo /usr/local/sbin/criu)}
[ -x "$CRIU" ] || { echo "skipped: no criu"; exit 77; }
export TCGPU_CRIU=$CRIU
export SIMCUDA_SHM=/simcuda-bench-save-$$
export SIMCUDA_DEVICE_MEM=$(( mib * 2 + 1024 ))M
# the device keeps freed memory, as a GPU does (simcuda/keep.c; run.sh says why)
export SIMCUDA_DEVICE_KEEP=${SIMCUDA_DEVICE_KEEP:-600}
export TCGPU_REAL_LIBCUDA=$B/simcuda/libcuda.so.1
export TCGPU_RUN_DIR
TCGPU_RUN_DIR=$(mktemp -d /tmp/tcgpu-bench-run-XXXXXX)
WORK=$(mktemp -d "${TCGPU_BENCH_DIR:-/var/tmp}/tcgpu-bench-XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -f "/dev/shm$SIMCUDA_SHM" "/dev/shm$SIMCUDA_SHM".keep.*
    rm -rf "$TCGPU_RUN_DIR" "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
bytes() { du -sb "$1" | cut -f1; }
wait_file() { for _ in $(seq 1 6000); do [ -s "$1" ] && return 0; sleep 0.05; done; fail "$1 never appeared"; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }

# --- tcgpu: the training loop with MIB of device state ---------------------------
setsid "$B/tools/gpuckpt/gpuckpt" run -l quiet -- "$B/examples/train/train" --mb "$mib" --steps 100000 \
    --print-every 1 --sleep-ms 20 >"$WORK/train.out" 2>&1 </dev/null &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1 6000); do grep -q '^step 3 ' "$WORK/train.out" 2>/dev/null && break; sleep 0.05; done
grep -q '^step 3 ' "$WORK/train.out" || fail "train did not start: $(tail -n 3 "$WORK/train.out")"
device_bytes=$("$B/simcuda/simcuda-smi" --query-compute-apps=pid,used_memory_bytes --format=csv,noheader,nounits |
    awk -F', ' -v w="$pid" '$1 == w { sum += $2 } END { printf "%.0f\n", sum }')
[ "$device_bytes" -gt 0 ] || fail "simcuda-smi shows no device memory of train ($pid)"

# the same bytes, for the baseline: a checkpoint image, decoded by host_hold
"$B/tools/gpuckpt/gpuckpt" checkpoint "$pid" -D "$WORK/dev.img" -q || fail "checkpoint failed"

drop_caches
t0=$(now); "$B/tools/gpuckpt/gpuckpt" save "$pid" -D "$WORK/tcgpu-save" >"$WORK/save.out" || fail "gpuckpt save failed"; t1=$(now)
phases=$(sed -n 's/.*(\(GPU images .*sync [0-9.]* s\)).*/\1/p' "$WORK/save.out")
tc_save=$(secs "$t0" "$t1")
tc_size=$(bytes "$WORK/tcgpu-save")
tc_gpu=$(bytes "$WORK/tcgpu-save/gpu")
tc_criu=$(bytes "$WORK/tcgpu-save/criu")
wait "$pid" 2>/dev/null || true
drop_caches
t0=$(now); "$B/tools/gpuckpt/gpuckpt" restore -D "$WORK/tcgpu-save" -d >"$WORK/restore.out" || fail "gpuckpt restore failed"; t1=$(now)
tc_restore=$(secs "$t0" "$t1")
# where the restore's time went: gpuckpt's checks (the save's manifest, every
# GPU image's stored checksums), CRIU's restore, and within it the GPU back
restore_phases=$(sed -n 's/.*(\(checks .*GPU back [0-9.]* s\)).*/\1/p' "$WORK/restore.out")
"$B/tools/gpuckpt/gpuckpt" status "$pid" | grep -q ': running' || fail "restored train is not running"
kill -9 "$pid"

# --- plain CRIU: a process holding the same bytes in host memory -------------------
setsid "$B/tests/bench/host_hold" "$WORK/dev.img" "$WORK/hold.ready" >"$WORK/hold.out" 2>&1 </dev/null &
hpid=$!
PIDS+=("$hpid")
wait_file "$WORK/hold.ready"
host_bytes=$(cat "$WORK/hold.ready")
mkdir "$WORK/criu-save"
drop_caches
t0=$(now); "$CRIU" dump -t "$hpid" -D "$WORK/criu-save" -o dump.log --file-locks || fail "criu dump failed"; t1=$(now)
cr_save=$(secs "$t0" "$t1")
cr_size=$(bytes "$WORK/criu-save")
wait "$hpid" 2>/dev/null || true
drop_caches
t0=$(now); "$CRIU" restore -d -D "$WORK/criu-save" -o restore.log --file-locks || fail "criu restore failed"; t1=$(now)
cr_restore=$(secs "$t0" "$t1")
kill -9 "$hpid"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
mibs() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
printf '%-34s %14s %14s %10s\n' "save/restore, $(mibs "$device_bytes") MiB device state" "gpuckpt" "plain CRIU" "ratio"
printf '%-34s %14s %14s %10s\n' "save (s)" "$tc_save" "$cr_save" "$(ratio "$tc_save" "$cr_save")"
printf '%-34s %14s %14s %10s\n' "restore until running (s)" "$tc_restore" "$cr_restore" "$(ratio "$tc_restore" "$cr_restore")"
printf '%-34s %14s %14s %10s\n' "image size (MiB)" "$(mibs "$tc_size")" "$(mibs "$cr_size")" "$(ratio "$tc_size" "$cr_size")"
printf '%-34s %14s\n' "  of which GPU images (MiB)" "$(mibs "$tc_gpu")"
printf '%-34s %14s\n' "  of which CRIU images (MiB)" "$(mibs "$tc_criu")"
printf '%-34s %s\n' "gpuckpt save phases" "$phases"
printf '%-34s %s\n' "gpuckpt restore phases" "$restore_phases"
echo "device_bytes $device_bytes"
echo "host_hold_bytes $host_bytes"
echo "tcgpu_save_s $tc_save"
echo "tcgpu_restore_s $tc_restore"
echo "tcgpu_size_bytes $tc_size"
echo "tcgpu_gpu_image_bytes $tc_gpu"
echo "tcgpu_criu_image_bytes $tc_criu"
echo "criu_save_s $cr_save"
echo "criu_restore_s $cr_restore"
echo "criu_size_bytes $cr_size"
echo "save_time_ratio $(ratio "$tc_save" "$cr_save")"
echo "restore_time_ratio $(ratio "$tc_restore" "$cr_restore")"
echo "size_ratio $(ratio "$tc_size" "$cr_size")"
