#!/usr/bin/env bash
# tcgpud: a gang (the tasks of one job, on two GPUs) is suspended and resumed
# together and accounted as one. One task names the job with --job, the
# other gets it from Slurm's SLURM_JOB_ID: the same job, slurm:4242. A
# high-priority job needs GPU 0's memory: both tasks are suspended (their
# memory really freed on both GPUs), both resume when it is gone, their data
# intact; one preemption is counted. By hand, suspending one task suspends
# both, resuming one resumes both.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

export SIMCUDA_DEVICES=2
# a failure shows what tcgpud did
fail() { echo "FAIL: $*" >&2; tail -n 25 "$WORK/tcgpud.log" >&2; exit 1; }
HOG=$PROGS/compute_hog
BUSY=$PROGS/busy_kernel.so

write_config "
[gpu 0]
capacity = 1G

[gpu 1]
capacity = 1G

[project research]
priority = 10
members = *

[project prod]
priority = 100
members = *
"
start_tcgpud
STOP=$WORK/stop                              # the tasks run until the test is done with them
start_bg "$WORK/t0.out" "$GPUCKPT" run --project research --job slurm:4242 -- "$HOG" "$BUSY" 150 5000 0 600 "$STOP"
t0=$BG
SLURM_JOB_ID=4242 start_bg "$WORK/t1.out" "$GPUCKPT" run --project research -- "$HOG" "$BUSY" 150 5000 1 600 "$STOP"
t1=$BG
wait_registered "$t0"
wait_registered "$t1"
wait_for_line "$WORK/t0.out" '^running'
wait_for_line "$WORK/t1.out" '^running'
deadline=$((SECONDS + 30))                   # tcgpud learns where each task runs (its reports)
while [ "$SECONDS" -lt "$deadline" ]; do     # by time: a loaded host makes each gpuckpt ps slow
    [ "$(job_field "$t1" device)" = 1 ] && [ "$(job_field "$t0" mem)" -ge $((600 << 20)) ] && break
    sleep 0.1
done
[ "$(job_field "$t1" device)" = 1 ] || fail "task 1 is accounted on GPU $(job_field "$t1" device), not 1"
[ "$(job_field "$t0" job)" = slurm:4242 ] && [ "$(job_field "$t1" job)" = slurm:4242 ] ||
    fail "jobs: '$(job_field "$t0" job)' '$(job_field "$t1" job)'"
sleep 1.2                                    # older than min_runtime

# --- a high-priority job on GPU 0: the whole gang makes way -------------------
start_bg "$WORK/hi.out" "$GPUCKPT" run --project prod -- "$HOG" "$BUSY" 3 5000 0 700
hi=$BG
wait_state "$t0" suspended 60
wait_state "$t1" suspended 60
for t in "$t0" "$t1"; do
    held=$(device_bytes_of "$t")
    [ "$held" -le "$SLACK" ] || fail "suspended task $t still holds $held bytes"
    [ "$(job_field "$t" for)" = "$hi" ] || fail "task $t suspended for $(job_field "$t" for), not $hi"
done
[ "$(job_field "$t0" why)" = priority ] && [ "$(job_field "$t1" why)" = gang ] ||
    fail "why: $(job_field "$t0" why) / $(job_field "$t1" why)"
note "both tasks suspended for $hi; GPU 1's memory freed too"
wait "$hi" || fail "the high-priority job failed: $(tail -n 3 "$WORK/hi.out")"
wait_state "$t0" running 60
wait_state "$t1" running 60
[ "$(job_field "$t0" preemptions)" = 1 ] && [ "$(job_field "$t1" preemptions)" = 1 ] ||
    fail "preemptions: $(job_field "$t0" preemptions) / $(job_field "$t1" preemptions)"
sleep 1                                      # the next tick rewrites the metrics
grep -q '^tcgpud_preemptions_total 1$' "$WORK/tcgpud.prom" ||
    fail "the gang's preemption counted $(grep preemptions_total "$WORK/tcgpud.prom")"

# --- by hand: one task's suspend and resume are the gang's ------------------
"$GPUCKPT" suspend "$t1" >/dev/null || fail "gpuckpt suspend $t1"
wait_state "$t0" suspended 60
wait_state "$t1" suspended 60
[ "$(job_field "$t0" suspended_by)" = manual ] || fail "task 0 suspended by $(job_field "$t0" suspended_by)"
"$GPUCKPT" resume "$t0" >/dev/null || fail "gpuckpt resume $t0"
wait_state "$t0" running 60
wait_state "$t1" running 60
note "suspended by hand together, resumed together"
touch "$STOP"

wait "$t0" || fail "task 0 failed: $(tail -n 3 "$WORK/t0.out")"
wait "$t1" || fail "task 1 failed: $(tail -n 3 "$WORK/t1.out")"
grep -q '^checksum ok' "$WORK/t0.out" && grep -q '^checksum ok' "$WORK/t1.out" || fail "a task's data changed"
evs=$(events_of "$t1" | tr '\n' ' ')
case "$evs" in
    *suspending*suspended*resuming*resumed*) ;;
    *) fail "events of task 1: $evs" ;;
esac
echo "ok: the gang was suspended, resumed and counted as one"
