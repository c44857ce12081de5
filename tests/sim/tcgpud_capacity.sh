#!/usr/bin/env bash
# A project member cannot poison tcgpud's view of the GPU: a throwaway user's
# short-lived process registers saying the GPU has 1 byte (total=1) and asks
# with free=0, before any other job; tcgpud keeps the capacity it learnt
# from the driver, and a preemption afterwards runs its course: the victim
# is resumed when the memory frees up, both checksums as uninterrupted runs.
# Needs root (useradd): skips otherwise.
export SIMCUDA_DEVICE_MEM=512M             # small jobs: the preemption is what matters
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"
needs_users
throwaway_user mallory m

capacity() {
    "$GPUCKPT" ps --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["devices"][0]["capacity"])'
}

poison() {
    as_user "$mallory" "$PY" "$CLIENT" "$TCGPU_DAEMON_SOCKET" send \
        "register project=research device=0 total=1" \
        "request bytes=1048576 device=0 total=1 free=0 used=0" \
        "register project=research device=7" \
        "register project=research uuid=not-hex" >"$WORK/poison.out" 2>&1 ||
        fail "the raw client failed: $(cat "$WORK/poison.out")"
    note "mallory's messages: $(tr '\n' '|' <"$WORK/poison.out")"
    sed -n 1p "$WORK/poison.out" | grep -q '^ok' || fail "mallory's registration: $(sed -n 1p "$WORK/poison.out")"
    sed -n 3p "$WORK/poison.out" | grep -q 'ENODEV.*does not manage GPU 7' ||
        fail "a GPU tcgpud does not manage: $(sed -n 3p "$WORK/poison.out")"
    sed -n 4p "$WORK/poison.out" | grep -q 'EINVAL' || fail "a malformed uuid: $(sed -n 4p "$WORK/poison.out")"
    [ "$(capacity)" = $((512 << 20)) ] || fail "GPU 0's capacity is $(capacity) after mallory's report"
}

low_args=(--mb 250 --steps 300 --print-every 100 --seed 5)
high_args=(--mb 250 --steps 100 --print-every 50 --seed 6)
BEFORE_JOBS=poison low_then_high 5
wait_state "$low" suspended
wait "$high" || fail "the high job failed: $(tail -n 5 "$WORK/high.out")"
wait_state "$low" running 20
wait "$low" || fail "the low job failed: $(tail -n 5 "$WORK/low.out")"
[ "$(checksum_of "$WORK/low.out")" = "$ref_low" ] || fail "low checksum changed"
[ "$(checksum_of "$WORK/high.out")" = "$ref_high" ] || fail "high checksum changed"
[ "$(capacity)" = $((512 << 20)) ] || fail "GPU 0's capacity is $(capacity) at the end"
grep -q "GPU 0: 512 MiB (from the driver)" "$WORK/tcgpud.log" || fail "tcgpud did not learn GPU 0 itself"
echo "ok: a job's report did not change what tcgpud knows of the GPU; the victim was resumed"
