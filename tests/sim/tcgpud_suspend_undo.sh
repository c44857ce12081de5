#!/usr/bin/env bash
# gpuckpt suspend of a job tcgpud manages, abandoned before tcgpud's reply:
# gpuckpt past its --timeout, or killed. tcgpud finds its asker gone when the
# suspend ends and resumes the job (tools/tcgpud/jobs.c), as the process
# does for a suspend asked of it directly (suspend_undo.sh): the job runs on
# (tcgpud's state and its own, steps going on), and its checksum is an
# uninterrupted run's.
# A job of two tasks (a gang, --job) suspended by hand, one task refusing
# (it holds an IPC event): gpuckpt's suspend fails naming that task, and the
# other task, which had suspended, is resumed: nothing stays stopped.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

write_config "
[project research]
priority = 10
members = *
"
start_tcgpud
ARGS=(--mb 256 --steps 800 --print-every 1)
"$TRAIN" "${ARGS[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed"
ref=$(checksum_of "$WORK/ref.out")
start_bg "$WORK/run.out" "$GPUCKPT" run --project research -- "$TRAIN" "${ARGS[@]}" --sleep-ms 5
pid=$BG
wait_registered "$pid"
wait_for_line "$WORK/run.out" '^step'

# undone N : tcgpud has undone N abandoned suspends, and the job runs on
undone() {
    local end=$((SECONDS + 20)) steps
    until [ "$(grep -c "asker left before the reply; resuming" "$WORK/tcgpud.log")" -ge "$1" ]; do
        [ "$SECONDS" -lt "$end" ] || fail "tcgpud did not undo abandoned suspend $1 (job $(job_field "$pid" state))"
        sleep 0.05
    done
    wait_state "$pid" running 20
    "$GPUCKPT" status "$pid" | grep -q ': running' || fail "the job is not running: $("$GPUCKPT" status "$pid")"
    [ "$(awk '{print $3}' /proc/"$pid"/stat)" != T ] || fail "the job is stopped"
    steps=$(grep -c '^step' "$WORK/run.out")
    wait_line "$WORK/run.out" "^step $((steps + 2)) " 20 "$pid" || fail "no progress after undo $1"
}

rc=0
"$GPUCKPT" suspend "$pid" --timeout 0.001 >"$WORK/s.out" 2>&1 || rc=$?
[ "$rc" -eq 5 ] || fail "suspend --timeout 0.001 exited $rc, expected 5: $(cat "$WORK/s.out")"
undone 1
note "past --timeout: undone, the job runs on"

# tcgpud stopped while gpuckpt asks, so that the kill surely comes first
kill -STOP "$DAEMON"
"$GPUCKPT" suspend "$pid" >"$WORK/s.out" 2>&1 &
sus=$!
sleep 0.3
kill -9 "$sus"
wait "$sus" 2>/dev/null || true
kill -CONT "$DAEMON"
undone 2
note "gpuckpt killed: undone, the job runs on"

# a gang whose second task refuses the suspend
start_bg "$WORK/g0.out" "$GPUCKPT" run --project research --job pair -- "$TRAIN" --mb 64 --steps 100000 \
    --print-every 1 --sleep-ms 5
g0=$BG
start_bg "$WORK/g1.out" "$GPUCKPT" run --project research --job pair -- "$PROGS/ipc_hold" --steps 100000 \
    --sleep-ms 5
g1=$BG
wait_registered "$g0"
wait_registered "$g1"
wait_for_line "$WORK/g0.out" '^step'
wait_for_line "$WORK/g1.out" '^exported'
rc=0
"$GPUCKPT" suspend "$g0" >"$WORK/g.out" 2>&1 || rc=$?
[ "$rc" -eq 4 ] || fail "suspending a job one of whose tasks refuses exited $rc, expected 4: $(cat "$WORK/g.out")"
grep -q "process $g1, a task of job pair, did not suspend: .*cuIpcGetEventHandle" "$WORK/g.out" ||
    fail "the failure does not name the task that refused and why: $(cat "$WORK/g.out")"
for t in "$g0" "$g1"; do
    wait_state "$t" running 20
    "$GPUCKPT" status "$t" | grep -q ': running' || fail "task $t is not running: $("$GPUCKPT" status "$t")"
done
steps=$(grep -c '^step' "$WORK/g0.out")
wait_line "$WORK/g0.out" "^step $((steps + 2)) " 20 "$g0" || fail "task $g0 makes no progress after the undo"
kill "$g0" "$g1"
note "a gang with a task that refuses: the suspend fails naming it, the other task runs on"

grep -q '^checksum' "$WORK/run.out" && fail "the job finished before the last case: make it longer"
wait "$pid" || fail "the job failed: $(tail -n 3 "$WORK/run.out")"
got=$(checksum_of "$WORK/run.out")
[ "$got" = "$ref" ] || fail "checksum $got, uninterrupted $ref"
echo "ok: two abandoned suspends through tcgpud, each undone, and a gang's partial suspend undone; checksum $got"
