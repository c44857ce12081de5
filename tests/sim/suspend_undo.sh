#!/usr/bin/env bash
# A suspend that fails leaves the job as it was (docs/cli.md, "Exit codes"):
# after each failed or interrupted `gpuckpt suspend` below, the job runs
# (tcgpu's state running, the driver's too, not stopped in /proc/PID/stat)
# and its steps go on; at the end its checksum is an uninterrupted run's.
#
#   driver-fail   the driver's step (Lock + Checkpoint) fails after the
#                 process suspended (tests/sim/progs/faulty_driver.c): exit 1,
#                 the suspend undone by gpuckpt
#   timeout       --timeout shorter than the suspend: exit 5; the process
#                 finds its requester gone when it replies, and resumes
#   term-process  SIGTERM to gpuckpt while the process suspends: exit 143;
#                 the process undoes the suspend when it ends
#   kill-process  SIGKILL to gpuckpt while the process suspends: the same,
#                 with nobody left to say it
#   term-driver   SIGTERM to gpuckpt during the driver's step: gpuckpt
#                 finishes that step, then undoes the suspend; exit 143
. "$(dirname "$0")/lib.sh"

FAULTY=$PROGS/faulty_driver.so
export FAULTY_DRIVER_REAL=$TCGPU_REAL_LIBCUDA

# job_status FIELD : a field of the job's status (gpuckpt status --json)
job_status() {
    "$GPUCKPT" status "$pid" --json 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1" 2>/dev/null || echo "?"
}

# job_state : tcgpu's state of the job (running, suspending, suspended, ...)
job_state() { job_status state; }

# wait_state STATE SEC : the job reaches STATE within SEC seconds
wait_state() {
    local end=$((SECONDS + $2)) st
    while st=$(job_state); [ "$st" != "$1" ]; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.01
    done
}

# runs_on CASE : the job runs after the failed command, and makes progress
runs_on() {
    local steps
    wait_state running 20 || fail "$1: the job is $(job_state), not running, after the failed suspend"
    [ "$(awk '{print $3}' /proc/"$pid"/stat)" != T ] || fail "$1: the job is stopped (/proc/$pid/stat)"
    [ "$(smi_state "$pid")" = running ] || fail "$1: driver state $(smi_state "$pid")"
    steps=$(grep -c '^step' "$WORK/run.out")
    wait_line "$WORK/run.out" "^step $((steps + 2)) " 20 "$pid" ||
        fail "$1: no progress after the failed suspend (step $steps): $(tail -n 2 "$WORK/run.out")"
    note "$1: the job runs on (step $steps and on)"
}

# suspend_bg OUT [ENV...] -- [OPTS...] : gpuckpt suspend of the job in the background ($sus)
suspend_bg() {
    local out=$1 envs=(); shift
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$GPUCKPT" suspend "$pid" "$@" >"$out" 2>&1 &
    sus=$!
}

start_train --mb 256 --steps 1200 --print-every 1

# driver-fail
rc=0
TCGPU_REAL_LIBCUDA=$FAULTY FAULTY_DRIVER_FAIL=checkpoint "$GPUCKPT" suspend "$pid" >"$WORK/s.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "driver-fail: exit $rc, expected 1: $(cat "$WORK/s.out")"
grep -q "suspend undone, the process runs" "$WORK/s.out" || fail "driver-fail: said $(cat "$WORK/s.out")"
runs_on driver-fail

# timeout
rc=0
"$GPUCKPT" suspend "$pid" --timeout 0.001 >"$WORK/s.out" 2>&1 || rc=$?
[ "$rc" -eq 5 ] || fail "timeout: exit $rc, expected 5: $(cat "$WORK/s.out")"
grep -q "the suspend is abandoned" "$WORK/s.out" || fail "timeout: said $(cat "$WORK/s.out")"
runs_on timeout
undone=$(grep -c 'left before its reply; resuming' "$WORK/run.out" || true)
[ "$undone" -eq 1 ] || fail "timeout: the job logged $undone undone suspends, expected 1"

# term-process, kill-process: the signal before the process answered. The
# job is stopped (SIGSTOP) while gpuckpt sends its request, so that the
# signal surely comes first; SIGCONT, and the job runs the suspend, finds
# its requester gone, and undoes it.
for sig in TERM KILL; do
    kill -STOP "$pid"
    suspend_bg "$WORK/s.out" --
    sleep 0.3
    kill -"$sig" "$sus"
    rc=0; wait "$sus" || rc=$?
    kill -CONT "$pid"
    if [ "$sig" = TERM ]; then
        [ "$rc" -eq 143 ] || fail "term-process: exit $rc, expected 143: $(cat "$WORK/s.out")"
        grep -q "interrupted by SIGTERM before the process answered" "$WORK/s.out" ||
            fail "term-process: said $(cat "$WORK/s.out")"
    else
        [ "$rc" -eq 137 ] || fail "kill-process: exit $rc, expected 137: $(cat "$WORK/s.out")"
    fi
    # the suspend runs, then its undo, which the job logs
    undone=$((undone + 1))
    end=$((SECONDS + 20))
    until [ "$(grep -c 'left before its reply; resuming' "$WORK/run.out")" -ge "$undone" ]; do
        [ "$SECONDS" -lt "$end" ] || fail "$sig: the job did not undo the suspend (state $(job_state)): $(tail -n 3 "$WORK/run.out")"
        sleep 0.05
    done
    runs_on "$(tr A-Z a-z <<<"$sig")-process"
done

# term-driver: the process has suspended, gpuckpt is in the driver's step
suspend_bg "$WORK/s.out" TCGPU_REAL_LIBCUDA="$FAULTY" FAULTY_DRIVER_DELAY_MS=5000 --
wait_state suspended 10 || fail "term-driver: the job did not suspend (state $(job_state))"
kill -TERM "$sus" 2>/dev/null || fail "term-driver: gpuckpt ended before the signal: $(cat "$WORK/s.out")"
rc=0; wait "$sus" || rc=$?
[ "$rc" -eq 143 ] || fail "term-driver: exit $rc, expected 143: $(cat "$WORK/s.out")"
grep -q "interrupted by SIGTERM: suspend undone" "$WORK/s.out" || fail "term-driver: said $(cat "$WORK/s.out")"
runs_on term-driver

# and a suspend that works still does
"$GPUCKPT" suspend "$pid" -q || fail "a plain suspend failed"
"$GPUCKPT" resume "$pid" -q || fail "its resume failed"
grep -q '^checksum' "$WORK/run.out" && fail "the job finished before the last case: make it longer"
finish_train
echo "ok: five failed suspends, each undone; checksum $got"
