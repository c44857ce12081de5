#!/usr/bin/env bash
# A job's share of the GPU's compute (docs/tcgpud.md, "Compute share"), on
# simcuda, where kernels of different processes take turns on the device and
# simcuda-smi counts each process's kernel time:
#  - two jobs limited to 30% and 70% that both always want more get those
#    shares of the device, within 10% of each;
#  - a job limited to 30% alone on the device is not held back;
#  - an unlimited job alone under tcgpud runs as fast as without tcgpu;
#  - without tcgpud to say the device is free, a 30% job keeps to 30%.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

HOG=$PROGS/compute_hog
BUSY=$PROGS/busy_kernel.so
KERNEL_US=5000
# hog NAME [gpuckpt run options] : a job that keeps the GPU busy until $WORK/stop-NAME exists
hog() {
    local name=$1; shift
    start_bg "$WORK/$name.out" "$GPUCKPT" run "$@" -- "$HOG" "$BUSY" 120 $KERNEL_US 0 16 "$WORK/stop-$name"
}

# kernel_ns PID : how long PID's kernels have held device 0 (simcuda-smi -q).
kernel_ns() {
    "$SMI" -q | awk -v want="pid=$1" '
        $1 == "process" && $2 == want && $3 == "device=0" {
            for (i = 4; i <= NF; i++) if ($i ~ /^kernel_ns=/) { sub(/^kernel_ns=/, "", $i); print $i } }'
}

now_ns() { date +%s%N; }

# shares SECONDS PID... : each PID's share of the device over the next SECONDS, in per mille.
shares() {
    local secs=$1; shift
    local p t0 t1 before=() out=()
    t0=$(now_ns)
    for p in "$@"; do before+=("$(kernel_ns "$p")"); done
    sleep "$secs"
    t1=$(now_ns)
    local i=0
    for p in "$@"; do
        out+=($(( ($(kernel_ns "$p") - ${before[$i]}) * 1000 / (t1 - t0) )))
        i=$((i + 1))
    done
    echo "${out[@]}"
}

# within GOT WANT : GOT is WANT +- 10% of WANT (per mille).
within() { [ $(( $1 * 10 )) -ge $(( $2 * 9 )) ] && [ $(( $1 * 10 )) -le $(( $2 * 11 )) ]; }

write_config "
[project a]
priority = 10
members = *
"
start_tcgpud

# --- 30% and 70%, both wanting all of it ------------------------------------
hog a --project a --gpu-compute 30%
a=$BG
hog b --project a --gpu-compute 70%
b=$BG
wait_registered "$a"
wait_registered "$b"
wait_for_line "$WORK/a.out" '^running'
wait_for_line "$WORK/b.out" '^running'
sleep 2.5                                   # both report; the caps settle
read -r sa sb < <(shares 4 "$a" "$b")
note "30% and 70% jobs got ${sa} and ${sb} per mille of the device"
[ "$(job_field "$a" compute_cap)" = 300 ] || fail "job a's cap: $(job_field "$a" compute_cap)"
within "$sa" 300 || fail "the 30% job got ${sa} per mille"
within "$sb" 700 || fail "the 70% job got ${sb} per mille"
[ $((sa + sb)) -ge 900 ] || fail "together they left the device idle: $((sa + sb)) per mille"
touch "$WORK/stop-a" "$WORK/stop-b"
wait "$a" || fail "job a failed: $(tail -n 3 "$WORK/a.out")"
wait "$b" || fail "job b failed: $(tail -n 3 "$WORK/b.out")"
grep -q '^checksum ok' "$WORK/a.out" && grep -q '^checksum ok' "$WORK/b.out" || fail "data changed"

# --- 30% alone: any share --------------------------------------------------
hog c --project a --gpu-compute 30%
c=$BG
wait_registered "$c"
wait_for_line "$WORK/c.out" '^running'
sleep 1.5
sc=$(shares 3 "$c")
note "the 30% job alone got ${sc} per mille"
[ "$sc" -ge 900 ] || fail "alone on the device, the 30% job was held to ${sc} per mille"
[ "$(job_field "$c" compute_cap)" = 1000 ] || fail "its cap alone: $(job_field "$c" compute_cap)"
touch "$WORK/stop-c"
wait "$c" || fail "job c failed"

# --- unlimited alone: as fast as without tcgpu -------------------------------
"$HOG" "$BUSY" 3 $KERNEL_US >"$WORK/plain.out" 2>&1 || fail "plain run: $(tail -n 3 "$WORK/plain.out")"
"$GPUCKPT" run --project a -- "$HOG" "$BUSY" 3 $KERNEL_US >"$WORK/managed.out" 2>&1 ||
    fail "managed run: $(tail -n 3 "$WORK/managed.out")"
plain=$(sed -n 's/^kernels //p' "$WORK/plain.out")
managed=$(sed -n 's/^kernels //p' "$WORK/managed.out")
note "unlimited alone: $managed kernels under tcgpud, $plain without tcgpu"
[ $((managed * 100)) -ge $((plain * 95)) ] || fail "the unlimited job was slowed: $managed against $plain kernels"

# --- no tcgpud to ask: the share is kept ------------------------------------
TCGPU_DAEMON_SOCKET=$WORK/nobody.sock hog d --gpu-compute 30%
d=$BG
wait_for_line "$WORK/d.out" '^running'
sleep 1
sd=$(shares 3 "$d")
note "30% without tcgpud: ${sd} per mille"
within "$sd" 300 || fail "without tcgpud the 30% job got ${sd} per mille"
touch "$WORK/stop-d"
wait "$d" || fail "job d failed"
echo "ok: 30%/70% got $sa/$sb per mille, 30% alone $sc, unlimited $managed/$plain kernels, 30% without tcgpud $sd"
