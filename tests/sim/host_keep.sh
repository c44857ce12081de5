#!/usr/bin/env bash
# The host memory a suspend copies into is kept for the next one
# (docs/engine.md, "Warm host store"): a job suspended and resumed twice
# copies into the pages of the first suspend the second time; while memory
# is plentiful they stay plain pages (no LazyFree in smaps_rollup: MADV_FREE
# would cost the next copy), once it is tight (available under twice
# TCGPU_HOST_KEEP_MIN_FREE) they are MADV_FREE, the kernel's to take; memory
# pressure (available below TCGPU_HOST_KEEP_MIN_FREE) releases them within
# a poll; a budget smaller than the store keeps nothing. The second
# job's final checksum equals an uninterrupted run's (the first runs until
# the test kills it: a slow machine must not end it before the pressure).
# The monitor thread outlives the release, among the threads status lists.
. "$(dirname "$0")/lib.sh"

args=(--mb 128 --steps 250 --print-every 50)
"$TRAIN" "${args[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed: $(tail -n 3 "$WORK/ref.out")"
ref=$(checksum_of "$WORK/ref.out")
[ -n "$ref" ] || fail "no checksum in the reference run"

lazyfree_kb() { awk '$1 == "LazyFree:" { print $2 }' "/proc/$1/smaps_rollup"; }
avail_kb() { awk '$1 == "MemAvailable:" { print $2 }' /proc/meminfo; }
cycle() { # pid : one suspend to host memory and resume
    "$GPUCKPT" suspend "$1" -q || fail "suspend of $1 failed"
    "$GPUCKPT" resume "$1" -q || fail "resume of $1 failed"
}
finish() { # pid out : the job runs to its end with the reference checksum
    wait "$1" || fail "the job failed: $(tail -n 3 "$2")"
    [ "$(checksum_of "$2")" = "$ref" ] || fail "checksum $(checksum_of "$2") after the cycles, want $ref"
}

# --- kept, reused, released under pressure --------------------------------------------
# Pressure is "available memory below the floor": the floor sits 2 GiB under
# what is available now, and a hog of 1 GiB more crosses it. Under
# ThreadSanitizer the jobs' own shadow memory takes gigabytes: 6 GiB there.
margin_gib=2
[ "${TCGPU_TEST_TIME_FACTOR:-1}" -ge 10 ] && margin_gib=6     # TSan
floor_kb=$(( $(avail_kb) - (margin_gib << 20) ))
[ "$floor_kb" -gt $((1 << 20)) ] || { echo "skipped: less than $((margin_gib + 1)) GiB of memory available"; exit 77; }
TCGPU_LOG=debug TCGPU_HOST_KEEP_MIN_FREE=$((floor_kb * 1024)) TCGPU_HOST_KEEP_POLL_MS=50 \
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$TRAIN" --mb 128 --steps 1000000 --print-every 100 --sleep-ms 30
pid=$BG
# The same job beside it, with a budget smaller than its store (checked below).
TCGPU_LOG=debug TCGPU_HOST_KEEP=64M start_bg "$WORK/small.out" "$GPUCKPT" run -- "$TRAIN" "${args[@]}" --sleep-ms 30
small=$BG
# And one with the default floor, which this machine's memory is far above
# (checked below): its kept pages stay plain.
TCGPU_LOG=debug start_bg "$WORK/plain.out" "$GPUCKPT" run -- "$TRAIN" "${args[@]}" --sleep-ms 30
plain=$BG
wait_for_socket "$pid"
wait_for_line "$WORK/run.out" '^step'
wait_for_socket "$small"
wait_for_line "$WORK/small.out" '^step'
cycle "$small"
cycle "$small"
wait_for_socket "$plain"
wait_for_line "$WORK/plain.out" '^step'
cycle "$plain"
total_kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
default_floor_kb=$(( total_kb / 20 > (256 << 10) ? total_kb / 20 : (256 << 10) ))
if [ "$(avail_kb)" -gt $((4 * default_floor_kb)) ]; then
    lf=$(lazyfree_kb "$plain")
    [ "$lf" -lt $((16 << 10)) ] ||
        fail "with $(( $(avail_kb) >> 10 )) MiB available the kept store is MADV_FREE (${lf} kB LazyFree): the next suspend pays for it"
    grep -q 'kernel.s to take' "$WORK/plain.out" && fail "plentiful memory, yet: $(grep 'kernel.s to take' "$WORK/plain.out")"
fi
cycle "$plain"
[ "$(grep -c 'into the pages kept from the last suspend' "$WORK/plain.out")" -eq 1 ] ||
    fail "the default job's second suspend did not copy into the kept pages: $(grep 'host copy' "$WORK/plain.out")"

# others_pressed : whether the kept pages went because the machine's
# memory fell below the floor before the hog (other processes' doing, not
# this test's: a sanitizer run beside it can take gigabytes at once).
others_pressed() {
    grep -qE '(released the host memory kept for the next suspend|not keeping .* of host memory: memory available).*below' \
        "$WORK/run.out" || return 1
    # tcgpu's reading against the test's own: a skip only when the machine
    # is really near the floor (1 GiB of slack for memory given back since)
    [ "$(avail_kb)" -lt $((floor_kb + (1 << 20))) ] ||
        fail "tcgpu saw memory short, yet $(( $(avail_kb) >> 10 )) MiB are available over the $((floor_kb >> 10)) MiB floor: $(grep -E 'released|not keeping' "$WORK/run.out")"
    echo "skipped: the machine's available memory fell below the floor ($((floor_kb >> 10)) MiB, $margin_gib GiB under what was available at the start) before the test pressed it; now $(( $(avail_kb) >> 10 )) MiB"
}
cycle "$pid"
grep -q 'host copy .* into fresh host memory' "$WORK/run.out" || fail "first suspend: no fresh store logged"
others_pressed && exit 77
# Its floor is 2 GiB under what was available: under half of it, tight.
lf=$(lazyfree_kb "$pid")
[ "$lf" -gt $((100 << 10)) ] || fail "memory tight, yet only ${lf} kB of the kept store are MADV_FREE (LazyFree), want the store's ~128 MiB"
grep -q 'kernel.s to take (MADV_FREE)' "$WORK/run.out" || fail "no 'the kernel's to take' logged with memory tight"
cycle "$pid"
others_pressed && exit 77
[ "$(grep -c 'into the pages kept from the last suspend' "$WORK/run.out")" -eq 1 ] ||
    fail "second suspend did not copy into the kept pages: $(grep 'host copy' "$WORK/run.out")"

python3 -c 'import sys, time; b = bytearray(b"\1") * (int(sys.argv[1]) << 30); print("ready", flush=True); time.sleep(30)' \
    "$((margin_gib + 1))" \
    >"$WORK/hog.out" 2>&1 &
hog=$!
BG_PIDS+=("$hog")
for _ in $(seq 600); do grep -q ready "$WORK/hog.out" && break; sleep 0.1; done
grep -q ready "$WORK/hog.out" || fail "the memory hog did not start: $(cat "$WORK/hog.out")"
wait_for_line "$WORK/run.out" 'released the host memory kept for the next suspend.*below'
lf=$(lazyfree_kb "$pid")
[ "$lf" -lt $((16 << 10)) ] || fail "${lf} kB still kept (LazyFree) after the release"
kill "$hog"; wait "$hog" 2>/dev/null || true

# The monitor stays once nothing is kept (the CRIU plugin lets the threads
# status lists run for a resume: one that ended meanwhile would fail the
# restore), and every thread listed is alive.
service_threads() { "$GPUCKPT" status "$pid" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["service_threads"].replace(",", " "))'; }
sleep 0.5                                  # ten polls of nothing kept
listed=$(service_threads) || fail "no service_threads in the status"
names=""
for t in $listed; do
    [ -r "/proc/$pid/task/$t/comm" ] || fail "service thread $t of $listed is not a thread of the job"
    names="$names $(cat "/proc/$pid/task/$t/comm")"
done
for want in tcgpu-control tcgpu-ctl-ops tcgpu-ops tcgpu-hostkeep; do
    [[ " $names " == *" $want "* ]] || fail "no $want among the service threads ($listed:$names)"
done

cycle "$pid"
[ "$(grep -c 'into fresh host memory' "$WORK/run.out")" -eq 2 ] ||
    fail "after the release the suspend should copy into fresh memory: $(grep 'host copy' "$WORK/run.out")"
[ "$(service_threads)" = "$listed" ] || fail "the service threads changed over a suspend and resume: $listed, now $(service_threads)"
kill "$pid"

finish "$plain" "$WORK/plain.out"

# --- a budget smaller than the store keeps nothing ---------------------------------------
[ "$(grep -c 'into fresh host memory' "$WORK/small.out")" -eq 2 ] ||
    fail "a 64 MiB budget kept a 128 MiB store: $(grep 'host copy' "$WORK/small.out")"
finish "$small" "$WORK/small.out"
echo "ok: host store kept, reused, released under pressure, bounded by its budget"
