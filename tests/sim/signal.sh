#!/usr/bin/env bash
# The signal trigger: the default signal toggles suspend and resume, handled
# outside the signal handler; the job finishes with the uninterrupted checksum.
# The signal suspends from inside the process: device memory only; the
# context stays, as it can only be handed to the driver from outside (gpuckpt
# suspend), so each suspend shows what suspend --keep-context does
# (tests/common/scenario.sh).
. "$(dirname "$0")/lib.sh"

start_mid_run signal 3 train "$TRAIN" --mb 64 --steps 400 --print-every 100

wait_state() {
    local i
    for i in $(seq 1 500); do
        [ "$(status_of "$pid" state)" = "$1" ] && return 0
        sleep 0.01
    done
    fail "state never became $1 (is $(status_of "$pid" state))"
}

for i in 1 2 3; do
    kill -s "${TCGPU_TEST_SIGNAL:-RTMIN+4}" "$pid"
    wait_state suspended
    sc_check_suspended suspend-keep-context
    kill -s "${TCGPU_TEST_SIGNAL:-RTMIN+4}" "$pid"
    wait_state running
    SC_DONE+=("signal")
done
sc_end
