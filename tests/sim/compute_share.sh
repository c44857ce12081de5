#!/usr/bin/env bash
# A job's share of the GPU's compute (docs/tcgpud.md, "Compute share"), on
# simcuda, where kernels of different processes take turns on the device and
# simcuda-smi counts each process's kernel time:
#  - two jobs limited to 30% and 70% that both always want more get those
#    shares of the device time they use, within 10% of each, and together use
#    as much of it as two unlimited jobs do in the same run (on a loaded host,
#    processes waiting for a CPU leave the device idle whatever the throttle);
#  - a job limited to 30% alone on the device is not held back;
#  - an unlimited job alone under tcgpud runs as fast as without tcgpu;
#  - without tcgpud to say the device is free, a 30% job keeps to 30%.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

HOG=$PROGS/compute_hog
BUSY=$PROGS/busy_kernel.so
KERNEL_US=20000                # long enough that a loaded host's late wakeups (ms) barely lengthen it
# hog NAME [gpuckpt run options] : a job that keeps the GPU busy until $WORK/stop-NAME exists
hog() {
    local name=$1; shift
    start_bg "$WORK/$name.out" "$GPUCKPT" run "$@" -- "$HOG" "$BUSY" 120 $KERNEL_US 0 16 "$WORK/stop-$name"
}

# kernel_ns PID : how long PID's kernels have held device 0 (simcuda-smi's kernel_time_ns).
kernel_ns() {
    "$SMI" --query-compute-apps=pid,gpu_index,kernel_time_ns --format=csv,noheader |
        awk -F', ' -v want="$1" '$1 == want && $2 == 0 { print $3 }'
}

now_ns() { date +%s%N; }

# wait_cap PID PERMILLE : until tcgpud gives PID that cap, then a second for
# the job to get it with its next report's answer (a loaded host may take a
# while: the caps' steady state is what is measured here).
wait_cap() {
    local i
    for ((i = 0; i < 100; i++)); do
        [ "$(job_field "$1" compute_cap)" = "$2" ] && { sleep 1; return 0; }
        sleep 0.2
    done
    fail "job $1's cap stayed $(job_field "$1" compute_cap), not $2"
}

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

# --- the baseline: two unlimited jobs, how much of the device they keep busy --
hog u --project a
u=$BG
hog v --project a
v=$BG
wait_registered "$u"
wait_registered "$v"
wait_for_line "$WORK/u.out" '^running'
wait_for_line "$WORK/v.out" '^running'
sleep 1
read -r su sv < <(shares 3 "$u" "$v")
base=$((su + sv))
note "two unlimited jobs used ${su} + ${sv} = ${base} per mille of the device"
touch "$WORK/stop-u" "$WORK/stop-v"
wait "$u" || fail "job u failed: $(tail -n 3 "$WORK/u.out")"
wait "$v" || fail "job v failed: $(tail -n 3 "$WORK/v.out")"

# --- 30% and 70%, both wanting all of it ------------------------------------
hog a --project a --gpu-compute 30%
a=$BG
hog b --project a --gpu-compute 70%
b=$BG
wait_registered "$a"
wait_registered "$b"
wait_for_line "$WORK/a.out" '^running'
wait_for_line "$WORK/b.out" '^running'
wait_cap "$a" 300
wait_cap "$b" 700
read -r sa sb < <(shares 4 "$a" "$b")
note "30% and 70% jobs got ${sa} and ${sb} per mille of the device"
[ "$(job_field "$a" compute_cap)" = 300 ] || fail "job a's cap: $(job_field "$a" compute_cap)"
used=$((sa + sb))
[ "$used" -gt 0 ] || fail "the 30% and 70% jobs ran no kernels"
within $((sa * 1000 / used)) 300 || fail "the 30% job got ${sa} of the ${used} per mille used"
within $((sb * 1000 / used)) 700 || fail "the 70% job got ${sb} of the ${used} per mille used"
[ $((used * 10)) -ge $((base * 9)) ] ||
    fail "together they left the device idle: ${used} per mille, two unlimited jobs ${base}"
touch "$WORK/stop-a" "$WORK/stop-b"
wait "$a" || fail "job a failed: $(tail -n 3 "$WORK/a.out")"
wait "$b" || fail "job b failed: $(tail -n 3 "$WORK/b.out")"
grep -q '^checksum ok' "$WORK/a.out" && grep -q '^checksum ok' "$WORK/b.out" || fail "data changed"

# --- 30% alone: any share --------------------------------------------------
hog c --project a --gpu-compute 30%
c=$BG
wait_registered "$c"
wait_for_line "$WORK/c.out" '^running'
wait_cap "$c" 1000
sc=$(shares 3 "$c")
note "the 30% job alone got ${sc} per mille"
[ "$sc" -ge 900 ] || fail "alone on the device, the 30% job was held to ${sc} per mille"
[ "$(job_field "$c" compute_cap)" = 1000 ] || fail "its cap alone: $(job_field "$c" compute_cap)"
touch "$WORK/stop-c"
wait "$c" || fail "job c failed"

# --- unlimited alone: as fast as without tcgpu -------------------------------
# Interleaved, the best of three each: load on the host only ever slows a run.
plain=0 managed=0
for rep in 1 2 3; do
    "$HOG" "$BUSY" 2 $KERNEL_US >"$WORK/plain.out" 2>&1 || fail "plain run: $(tail -n 3 "$WORK/plain.out")"
    "$GPUCKPT" run --project a -- "$HOG" "$BUSY" 2 $KERNEL_US >"$WORK/managed.out" 2>&1 ||
        fail "managed run: $(tail -n 3 "$WORK/managed.out")"
    n=$(sed -n 's/^kernels //p' "$WORK/plain.out")
    [ "$n" -gt "$plain" ] && plain=$n
    n=$(sed -n 's/^kernels //p' "$WORK/managed.out")
    [ "$n" -gt "$managed" ] && managed=$n
done
note "unlimited alone, best of 3: $managed kernels under tcgpud, $plain without tcgpu"
# 90%: the runs' own noise on a loaded host is a few percent; a job held to
# any share would lose far more.
[ $((managed * 100)) -ge $((plain * 90)) ] || fail "the unlimited job was slowed: $managed against $plain kernels"

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
echo "ok: 30%/70% got $sa/$sb per mille (unlimited pair $base), 30% alone $sc, unlimited $managed/$plain kernels, 30% without tcgpud $sd"
