#!/usr/bin/env bash
# tcgpud killed (SIGKILL) while a job it preempted is suspended and the job
# it preempted it for runs: the running job keeps running; the new tcgpud
# re-learns both from its state file and the jobs' control sockets, and
# resumes the suspended job once the memory is free. Checksums intact.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

low_args=(--mb 500 --steps 300 --print-every 100 --seed 8)
high_args=(--mb 500 --steps 300 --print-every 10 --seed 9)
low_then_high 15
wait_state "$low" suspended
wait_state "$high" running

kill -9 "$DAEMON"
wait "$DAEMON" 2>/dev/null || true
note "tcgpud killed; the high job runs on without it"
steps_before=$(grep -c '^step' "$WORK/high.out" || true)
sleep 1.5                                 # time for a death tied to tcgpud's to show
deadline=$((SECONDS + 2 * ${TCGPU_TEST_TIME_FACTOR:-1}))   # 10 steps, slower under a sanitizer
until [ "$(grep -c '^step' "$WORK/high.out")" -gt "$steps_before" ] || grep -q '^checksum' "$WORK/high.out"; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the high job made no progress without tcgpud"
    sleep 0.1
done
kill -0 "$high" 2>/dev/null || grep -q '^checksum' "$WORK/high.out" || fail "the high job died with tcgpud"
[ "$(device_bytes_of "$low")" -le "$SLACK" ] || fail "the low job left its suspension without tcgpud"

start_tcgpud
wait_for_line "$WORK/tcgpud.log" "re-learnt [0-9]* of the"   # it serves ps while it asks the jobs
grep -q "pid $low re-learnt: project research, suspended (by policy)" "$WORK/tcgpud.log" ||
    fail "low not re-learnt: $(cat "$WORK/tcgpud.log")"
[ "$(job_field "$low" state)" = suspended ] || fail "after the restart low is '$(job_field "$low" state)'"
if kill -0 "$high" 2>/dev/null; then
    grep -q "pid $high re-learnt" "$WORK/tcgpud.log" || fail "high not re-learnt"
fi
wait "$high" || fail "the high job failed: $(tail -n 5 "$WORK/high.out")"
wait_state "$low" running 20
wait "$low" || fail "the low job failed: $(tail -n 5 "$WORK/low.out")"
[ "$(checksum_of "$WORK/low.out")" = "$ref_low" ] || fail "low checksum changed"
[ "$(checksum_of "$WORK/high.out")" = "$ref_high" ] || fail "high checksum changed"
echo "ok: tcgpud restarted; the suspended job was resumed by the new one"
