#!/usr/bin/env bash
# TCGPU_TRACE_ALLOC=1 records where large allocations were made, and
# `gpuckpt inspect` shows it; without it no call site is recorded. The image
# of a running job verifies, and the job carries on to the right checksum
# (the checkpoint mode of tests/common/scenario.sh, with and without tracing).
. "$(dirname "$0")/lib.sh"

# check_sites checkpointed PID DIR : the image's call sites, as TCGPU_TRACE_ALLOC says.
check_sites() {
    local sites
    [ "$1" = checkpointed ] || return 0
    "$GPUCKPT" inspect "$3" --json >"$WORK/inspect-$trace.json" || fail "inspect failed"
    sites=$({ grep -o '"callsite" *: *"[^"]*train+0x[0-9a-f]*' "$WORK/inspect-$trace.json" || true; } | wc -l)
    if [ "$trace" = 1 ]; then
        [ "$sites" -ge 3 ] || fail "expected call sites of the 3 large bank allocations, found $sites: $(head -c 2000 "$WORK/inspect-$trace.json")"
    else
        [ "$sites" -eq 0 ] || fail "call sites recorded without TCGPU_TRACE_ALLOC"
    fi
}

sc_program train "$TRAIN" --mb 64 --steps 200 --print-every 100
SC_SLOW=(--sleep-ms 5)
SC_OBSERVE=check_sites
sc_reference
for trace in 1 0; do
    SC_ENV=(TCGPU_TRACE_ALLOC=$trace)
    sc_run "trace-$trace" checkpoint
done
