#!/usr/bin/env bash
# TCGPU_TRACE_ALLOC=1 records where large allocations were made, and
# `gpuckpt inspect` shows it; without it no call site is recorded. The image
# of a running job verifies, and the job carries on to the right checksum.
. "$(dirname "$0")/lib.sh"

args=(--mb 64 --steps 200 --print-every 100)
"$TRAIN" "${args[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed"
ref=$(checksum_of "$WORK/ref.out")

for trace in 1 0; do
    TCGPU_TRACE_ALLOC=$trace start_bg "$WORK/run-$trace.out" "$GPUCKPT" run -- "$TRAIN" "${args[@]}" --sleep-ms 5
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run-$trace.out" '^step'
    "$GPUCKPT" checkpoint "$pid" -D "$WORK/img-$trace" || fail "checkpoint failed"
    "$GPUCKPT" verify "$WORK/img-$trace" || fail "the image does not verify"
    "$GPUCKPT" inspect "$WORK/img-$trace" --json >"$WORK/inspect-$trace.json" || fail "inspect failed"
    sites=$({ grep -o '"callsite" *: *"[^"]*train+0x[0-9a-f]*' "$WORK/inspect-$trace.json" || true; } | wc -l)
    if [ "$trace" = 1 ]; then
        [ "$sites" -ge 3 ] || fail "expected call sites of the 3 large bank allocations, found $sites: $(head -c 2000 "$WORK/inspect-$trace.json")"
    else
        [ "$sites" -eq 0 ] || fail "call sites recorded without TCGPU_TRACE_ALLOC"
    fi
    wait "$pid" || fail "the job failed: $(tail -n 5 "$WORK/run-$trace.out")"
    [ "$(checksum_of "$WORK/run-$trace.out")" = "$ref" ] || fail "checksum changed by a checkpoint"
done
echo "ok: call sites recorded and shown"
