#!/usr/bin/env bash
# tcgpud killed (SIGKILL) at a random point of a preemption, 10 times: a
# low-priority job fills the GPU, a high-priority one arrives and needs the
# memory, and tcgpud dies 0-900 ms later (before the request, while the
# victim is being suspended, after the grant...) and comes back 0-600 ms
# after that. The job that asked never fails its allocation (it retries when
# the memory is free, or asks the new tcgpud), the victim is resumed by the
# new tcgpud once the memory is free again, and both finish with the
# checksums of uninterrupted runs. TCGPU_KILL_SEED replays a run.
export SIMCUDA_DEVICE_MEM=512M             # small jobs, small suspends: 10 rounds stay quick
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"
ROUNDS=${TCGPU_KILL_ROUNDS:-10}
SEED=${TCGPU_KILL_SEED:-$$}
RANDOM=$SEED
note "seed $SEED (TCGPU_KILL_SEED)"

low_args=(--mb 250 --steps 400 --print-every 100 --seed 11)
high_args=(--mb 250 --steps 20 --print-every 10 --seed 12)
ref_low=$(reference low "${low_args[@]}")
ref_high=$(reference high "${high_args[@]}")
start_research_prod

for round in $(seq 1 "$ROUNDS"); do
    kill_ms=$(random_ms 0 900)
    away_ms=$(random_ms 0 600)
    start_bg "$WORK/low.out" "$GPUCKPT" run --project research -- "$TRAIN" "${low_args[@]}" --sleep-ms 5
    low=$BG
    wait_registered "$low"
    wait_for_line "$WORK/low.out" '^step 0 '
    sleep 1.1                              # older than min_runtime (1 s): a victim
    start_bg "$WORK/high.out" "$GPUCKPT" run --project prod -- "$TRAIN" "${high_args[@]}" --sleep-ms 5
    high=$BG
    sleep_ms "$kill_ms"
    kill -9 "$DAEMON"
    wait "$DAEMON" 2>/dev/null || true
    sleep_ms "$away_ms"
    start_tcgpud
    wait "$high" || fail "round $round (kill after $kill_ms ms, away $away_ms ms): the high job failed: $(tail -n 8 "$WORK/high.out"); tcgpud: $(tail -n 12 "$WORK/tcgpud.log"); events: $("$GPUCKPT" events | tail -n 12)"
    wait "$low" || fail "round $round: the low job failed: $(tail -n 5 "$WORK/low.out")"
    [ "$(checksum_of "$WORK/high.out")" = "$ref_high" ] || fail "round $round: high checksum changed"
    [ "$(checksum_of "$WORK/low.out")" = "$ref_low" ] || fail "round $round: low checksum changed"
    # the preemption happened (by the old tcgpud or the new one), and was undone
    grep -q "suspend (.*): done" "$WORK/low.out" && grep -q "resume (.*): done" "$WORK/low.out" ||
        fail "round $round: the low job was not suspended and resumed: $(grep 'tcgpu\[' "$WORK/low.out" | tail -n 4)"
    note "round $round: killed after $kill_ms ms, away $away_ms ms: both finished, low suspended and resumed"
done
echo "ok: tcgpud killed $ROUNDS times in a preemption; every job finished with its reference checksum"
