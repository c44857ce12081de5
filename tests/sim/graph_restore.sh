#!/usr/bin/env bash
# The captured training step of graph_suspend.sh, saved with CRIU mid-run
# (gpuckpt save: the process is gone) right after a replay was launched and
# before the program read the loss that replay leaves in graph memory,
# restored, and run to the end: the loss survives, the graph, instantiated
# before the save, relaunches in the restored process with its graph memory
# back at the addresses baked into it, and the checksum equals an
# uninterrupted run's. Suite criu (root and criu needed,
# else skipped).
. "$(dirname "$0")/../criu/lib.sh"

GRAPH_TRAIN=$PROGS/graph_train
args=(--mb 4 --replays 80 --print-every 10)
pause_ms=6000                    # the save must land in it

"$GRAPH_TRAIN" "${args[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed: $(tail -n 3 "$WORK/ref.out")"
ref=$(checksum_of "$WORK/ref.out")

# In its own session (CRIU dumps whole sessions), stdin /dev/null.
setsid "$GPUCKPT" run -- "$GRAPH_TRAIN" "${args[@]}" --sleep-ms 5 --pause-at 20:$pause_ms >"$WORK/run.out" 2>&1 </dev/null &
pid=$!
KILL_PIDS+=("$pid")
wait_for_socket "$pid"
wait_for_line "$WORK/run.out" '^paused 20'
t0=$(date +%s%N)
"$GPUCKPT" save "$pid" -D "$WORK/save" || fail "save of the graph job failed"
took=$((($(date +%s%N) - t0) / 1000000))
[ "$took" -lt "$pause_ms" ] || fail "the save took $took ms, longer than the job's pause: make the pause longer"
"$GPUCKPT" verify "$WORK/save" >/dev/null || fail "the save does not verify"
wait "$pid" 2>/dev/null || true
kill -0 "$pid" 2>/dev/null && fail "the job still runs after save"
grep -q '^checksum' "$WORK/run.out" && fail "the job finished before it was saved: make it longer"
rm -rf "$TCGPU_RUN_DIR"          # as after a reboot: the control sockets are gone
"$GPUCKPT" restore -D "$WORK/save" || fail "restore failed (exit $?): $(tail -n 3 "$WORK/run.out")"
got=$(checksum_of "$WORK/run.out")
[ "$got" = "$ref" ] || fail "checksum after save/restore: $got, uninterrupted: $ref"
echo "ok: graph job saved in replay 20, restored, checksum $got"
