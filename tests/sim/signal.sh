#!/usr/bin/env bash
# The signal trigger: the default signal toggles suspend and resume, handled
# outside the signal handler; the job finishes with the uninterrupted checksum.
. "$(dirname "$0")/lib.sh"

args=(--mb 64 --steps 400 --print-every 100)
"$TRAIN" "${args[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed"
ref=$(checksum_of "$WORK/ref.out")

start_bg "$WORK/run.out" "$GPUCKPT" run -- "$TRAIN" "${args[@]}" --sleep-ms 3
pid=$BG
wait_for_socket "$pid"
wait_for_line "$WORK/run.out" '^step'

state() { "$GPUCKPT" status "$pid" --json | sed -n 's/.*"state" *: *"\([a-z]*\)".*/\1/p'; }
wait_state() {
    local i
    for i in $(seq 1 500); do
        [ "$(state)" = "$1" ] && return 0
        sleep 0.01
    done
    fail "state never became $1 (is $(state))"
}

for i in 1 2 3; do
    kill -s "${TCGPU_TEST_SIGNAL:-RTMIN+4}" "$pid"
    wait_state suspended
    held=$(device_bytes_of "$pid")
    # The signal suspends from inside the process: device memory only; the
    # context (SIMCUDA_CONTEXT_MEM, 32 MiB in lib.sh) stays, as it can only be
    # handed to the driver from outside (gpuckpt suspend).
    [ "$held" -le $(((32 << 20) + (4 << 20))) ] || fail "suspended by signal but still holds $held bytes"
    kill -s "${TCGPU_TEST_SIGNAL:-RTMIN+4}" "$pid"
    wait_state running
done
wait "$pid" || fail "the job failed: $(tail -n 5 "$WORK/run.out")"
got=$(checksum_of "$WORK/run.out")
[ "$got" = "$ref" ] || fail "checksum $got, uninterrupted $ref"
echo "ok: signal toggled 3 times, checksum $got"
