#!/usr/bin/env bash
# tcgpu inside a container, without a container runtime: the training job
# runs as pid 1 of its own pid and mount namespaces, with its own /proc and
# its run dir on a tmpfs only it can see (as a container's /tmp is). From the
# host, by the host pid:
#   - gpuckpt finds it (its socket inside its root, named by its own pid),
#     suspends it (the memory really freed, the context released) and
#     resumes it; the checksum equals an uninterrupted run's;
#   - tcgpud, whose socket the job reaches, manages it under its host pid
#     (gpuckpt ps), and suspends and resumes it as any other job.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../sim/tcgpud_lib.sh"

TRAIN_ARGS=(--mb 64 --steps 400 --print-every 50)
ref=$("$TRAIN" "${TRAIN_ARGS[@]}" 2>&1 | sed -n 's/^checksum: *//p')
[ -n "$ref" ] || fail "reference run failed"

write_config "
[project research]
priority = 10
members = *
"
start_tcgpud

# The job's own namespaces: a fresh /proc (it cannot see its host pid) and a
# run dir mounted only there.
mkdir -p "$WORK/jobrun"
setsid unshare --pid --mount --fork --kill-child --mount-proc --propagation private bash -c '
    mount -t tmpfs -o mode=0700 jobrun "$1" && shift && exec "$@"' _ "$WORK/jobrun" \
    env TCGPU_RUN_DIR="$WORK/jobrun" TCGPU_PROJECT=research "$GPUCKPT" run -- \
    "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms 10 >"$WORK/job.out" 2>&1 </dev/null &
BG_PIDS+=($!)
wait_for_line "$WORK/job.out" '^step 0 '
pid=$("$SMI" --query-compute-apps=pid --format=csv,noheader | head -n 1)
[ -n "$pid" ] && [ "$pid" != 0 ] || fail "simcuda-smi shows no host pid for the job: $("$SMI" -q)"
BG_PIDS+=("$pid")
grep -q "^NSpid:[[:space:]]*$pid[[:space:]]*1$" /proc/"$pid"/status || fail "the job is not pid 1 of its namespace: $(grep NSpid /proc/"$pid"/status)"
[ -z "$(ls -A "$WORK/jobrun")" ] || fail "the job's run dir is visible from the host"
note "job: host pid $pid, pid 1 in its namespace"

# gpuckpt from the host
"$GPUCKPT" status "$pid" | grep -q "process $pid: running" || fail "gpuckpt status by host pid failed"
wait_registered "$pid"
[ "$(job_field "$pid" project)" = research ] || fail "tcgpud has the job in project '$(job_field "$pid" project)'"
"$GPUCKPT" suspend "$pid" >"$WORK/suspend.out" 2>&1 || fail "suspend through tcgpud failed: $(cat "$WORK/suspend.out")"
wait_state "$pid" suspended
held=$(device_bytes_of "$pid")
[ "$held" -le "$SLACK" ] || fail "the suspended job still holds $held bytes"
note "suspended through tcgpud from the host: it holds $held bytes"
"$GPUCKPT" resume "$pid" >"$WORK/resume.out" 2>&1 || fail "resume by host pid failed: $(cat "$WORK/resume.out")"
wait_state "$pid" running

# direct, without tcgpud in between: the context goes to the driver too
TCGPU_DAEMON_SOCKET=$WORK/none.sock "$GPUCKPT" suspend "$pid" >"$WORK/suspend2.out" 2>&1 ||
    fail "direct suspend failed: $(cat "$WORK/suspend2.out")"
grep -q "context released" "$WORK/suspend2.out" || fail "the context was not released: $(cat "$WORK/suspend2.out")"
[ "$(smi_state "$pid")" = checkpointed ] || fail "driver state after suspend: $(smi_state "$pid")"
[ "$(device_bytes_of "$pid")" -eq 0 ] || fail "the job holds $(device_bytes_of "$pid") bytes with its context released"
TCGPU_DAEMON_SOCKET=$WORK/none.sock "$GPUCKPT" resume "$pid" >/dev/null || fail "direct resume failed"
wait_gone "$pid" 120
got=$(checksum_of "$WORK/job.out")
[ "$got" = "$ref" ] || fail "checksum after suspends from the host: $got, uninterrupted: $ref"
echo "ok: a job in its own namespaces, driven and accounted by host pid; checksum $got"
