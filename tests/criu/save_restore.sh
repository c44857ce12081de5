#!/usr/bin/env bash
# gpuckpt save / restore of whole process trees with CRIU, on simcuda.
#
#   save_restore.sh train|leave-running|tree|cycles|at-once|repeat|ddp
#
# train          the example training loop saved mid-run (the tree is gone),
#                restored, run to the end: checksum equal to an uninterrupted run
# leave-running  saved with --leave-running: the original runs on and finishes right
# tree           a parent and two GPU workers sharing a pipe (tests/criu/progs):
#                saved, restored, all three finish with the right results
# cycles         save -> restore three times (restore -d), checksum still right;
#                restore prints its phases, and the plugin does not read every
#                chunk again after gpuckpt's own check
# at-once        three saves, each restored at once (no wait in between): save
#                returns once the tree's pids are free, checksum still right
# repeat         a job that mostly sleeps: five checkpoints leave no io_uring
#                worker thread (iou-wrk) behind, then three saves and restores in
#                a row succeed (a worker of the plugin's image write, ending as
#                CRIU seized it, made a third of the saves fail)
# ddp            a 2-rank NCCL job (examples/ddp's launcher and its ranks,
#                simnccl) saved mid-run, restored (-d), its ranks suspended
#                and resumed at a random moment (the consistent cut must see
#                the restored ranks as alive), saved and restored again: each
#                rank ends with the uninterrupted run's checksum
. "$(dirname "$0")/lib.sh"

mode=${1:?mode}
TRAIN_ARGS=(--mb 64 --steps 400 --print-every 50)
TREE_ARGS=(--steps 120 --mb 4)

reference() {   # reference OUT CMD... : uninterrupted run, prints its checksum
    local out=$1; shift
    "$@" >"$out" 2>&1 || fail "reference run failed: $(tail -n 3 "$out")"
    checksum_of "$out"
}

# start_job OUT CMD... : under tcgpu, in its own session (CRIU dumps whole
# sessions; --shell-job is for jobs that share the caller's), stdin /dev/null.
start_job() {
    local out=$1; shift
    setsid "$GPUCKPT" run -- "$@" >"$out" 2>&1 </dev/null &
    BG=$!
    BG_PIDS+=("$BG")
}

# json OBJECT FILE : FILE is strict JSON of docs/cli.md's OBJECT (tests/common/jsoncheck.py)
json() {
    python3 "$TCGPU_SOURCE_ROOT/tests/common/jsoncheck.py" "$TCGPU_SOURCE_ROOT/docs/cli.md" "$1" ok=true <"$2" ||
        fail "$2 is not a valid '$1' object: $(head -c 2000 "$2")"
}

save() {        # save PID DIR [OPTS...]
    local pid=$1 dir=$2; shift 2
    "$GPUCKPT" save "$pid" -D "$dir" "$@" --json >"$WORK/save.json" || fail "save of $pid failed"
    json save "$WORK/save.json"
    [ "$(stat -c %a "$dir")" = 700 ] || fail "save dir $dir is not private (mode $(stat -c %a "$dir"))"
    ls -d "$dir".tmp-* >/dev/null 2>&1 && fail "a temporary directory was left next to $dir"
    "$GPUCKPT" verify "$dir" --json >"$WORK/verify.json" || fail "verify $dir failed"
    json verify "$WORK/verify.json"
    "$GPUCKPT" inspect "$dir" --json >"$WORK/inspect.json" || fail "inspect --json $dir failed"
    json inspect-save "$WORK/inspect.json"
    "$GPUCKPT" inspect "$dir" >"$WORK/inspect.out" || fail "inspect $dir failed"
    grep -q "criu images: present" "$WORK/inspect.out" || fail "inspect: no CRIU images: $(cat "$WORK/inspect.out")"
}

# The driver state of pid as simcuda-smi sees it.

case "$mode" in
train)
    ref=$(reference "$WORK/ref.out" "$TRAIN" "${TRAIN_ARGS[@]}")
    start_job "$WORK/run.out" "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms 10
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^step 50 '
    save "$pid" "$WORK/save"
    grep -q "tcgpu, image gpu/$pid" "$WORK/inspect.out" || fail "inspect does not show the GPU image: $(cat "$WORK/inspect.out")"
    wait "$pid" 2>/dev/null || true
    kill -0 "$pid" 2>/dev/null && fail "the tree still runs after save without --leave-running"
    grep -q '^checksum' "$WORK/run.out" && fail "the job finished before it was saved: make it longer"
    # as after a reboot: the run dir with the control sockets is gone
    rm -rf "$TCGPU_RUN_DIR"
    "$GPUCKPT" restore -D "$WORK/save" &
    rpid=$!
    wait "$rpid" || fail "the restored job failed (gpuckpt restore exit $?): $(tail -n 3 "$WORK/run.out")"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum after save/restore: $got, uninterrupted: $ref"
    echo "ok: train saved at step 50+ and restored, checksum $got"
    ;;
leave-running)
    # The restored copy of a --leave-running save is not run here: simcuda
    # keeps a process's driver slot in shared memory outside the process
    # (where a real driver keeps the checkpointed state inside it), and the
    # slot goes when the original exits running, so the copy could not take
    # its context back. docs/save-restore.md says so; train checks restore.
    ref=$(reference "$WORK/ref.out" "$TRAIN" "${TRAIN_ARGS[@]}")
    start_job "$WORK/run.out" "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms 5
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^step 50 '
    save "$pid" "$WORK/save" --leave-running
    "$GPUCKPT" status "$pid" | grep -q ': running' || fail "not running after save --leave-running"
    [ "$(smi_state "$pid")" = running ] || fail "driver state after --leave-running: $(smi_state "$pid")"
    grep -q '^checksum' "$WORK/run.out" && fail "the job finished before it was saved: make it longer"
    wait "$pid" || fail "the original failed after save --leave-running: $(tail -n 3 "$WORK/run.out")"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "original after --leave-running: checksum $got, uninterrupted: $ref"
    "$GPUCKPT" verify "$WORK/save" >/dev/null || fail "the save does not verify after the original ended"
    echo "ok: --leave-running: the original ran on and finished with $got; the save verifies"
    ;;
tree)
    ref=$(reference "$WORK/ref.out" "$GPU_TREE" "${TREE_ARGS[@]}")
    start_job "$WORK/run.out" "$GPU_TREE" "${TREE_ARGS[@]}" --sleep-ms 20
    pid=$BG
    wait_for_line "$WORK/run.out" '^gpu_tree: parent'
    mapfile -t kids < <(children_of "$pid")
    [ "${#kids[@]}" -eq 2 ] || fail "expected 2 workers under $pid, found: ${kids[*]}"
    KILL_PIDS+=("${kids[@]}")
    for k in "${kids[@]}"; do wait_for_socket "$k"; done
    sleep 0.5
    save "$pid" "$WORK/save"
    grep -c "tcgpu, image" "$WORK/inspect.out" | grep -qx 2 || fail "inspect should show 2 GPU images: $(cat "$WORK/inspect.out")"
    grep -q "process $pid .*no GPU" "$WORK/inspect.out" || fail "inspect should show the parent without GPU: $(cat "$WORK/inspect.out")"
    wait "$pid" 2>/dev/null || true
    for p in "$pid" "${kids[@]}"; do wait_gone "$p" 5; done
    grep -q '^checksum' "$WORK/run.out" && fail "the tree finished before it was saved: make it longer"
    "$GPUCKPT" restore -D "$WORK/save" || fail "the restored tree failed (exit $?): $(tail -n 3 "$WORK/run.out")"
    for k in "${kids[@]}"; do wait_gone "$k" 30; done
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "tree checksum after save/restore: $got, uninterrupted: $ref"
    for w in 0 1; do
        grep "^worker $w:" "$WORK/ref.out" | cmp -s - <(grep "^worker $w:" "$WORK/run.out") ||
            fail "worker $w's result differs: $(grep "^worker" "$WORK/run.out")"
    done
    echo "ok: tree of 3 (2 GPU workers) saved and restored, checksum $got"
    ;;
cycles)
    ref=$(reference "$WORK/ref.out" "$TRAIN" "${TRAIN_ARGS[@]}")
    start_job "$WORK/run.out" "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms 10
    pid=$BG
    wait_for_socket "$pid"
    for c in 1 2 3; do
        wait_for_line "$WORK/run.out" "^step $((c * 50)) "
        save "$pid" "$WORK/save-$c"
        [ "$c" -eq 1 ] && { wait "$pid" 2>/dev/null || true; }
        wait_gone "$pid" 10
        grep -q '^checksum' "$WORK/run.out" && fail "the job finished before save $c: make it longer"
        if [ "$c" -eq 2 ]; then
            "$GPUCKPT" restore -D "$WORK/save-$c" -d --json >"$WORK/restore.json" || fail "restore $c failed"
            json restore "$WORK/restore.json"
            python3 -c 'import json, sys; p = json.load(sys.stdin)["phase_seconds"]; sys.exit(not (p["gpu"] > 0 and p["criu"] >= p["gpu"]))' \
                <"$WORK/restore.json" || fail "restore $c: phase_seconds: $(cat "$WORK/restore.json")"
        else
            "$GPUCKPT" restore -D "$WORK/save-$c" -d >"$WORK/restore.out" || fail "restore $c failed"
            grep -q "restored the tree under $pid" "$WORK/restore.out" || fail "restore $c said: $(cat "$WORK/restore.out")"
            # its phases (cycle 2's JSON: the time back on the GPU is there, within CRIU's)
            grep -Eq "\(checks [0-9.]+ s, CRIU restore [0-9.]+ s, of which GPU back [0-9.]+ s\)" "$WORK/restore.out" ||
                fail "restore $c: no phases: $(cat "$WORK/restore.out")"
        fi
        # the plugin took gpuckpt's word for the chunks it had just checked
        grep -q "GPU images verified (their chunks by gpuckpt restore)" "$WORK/save-$c/criu/restore.log" ||
            fail "restore $c: the plugin read every chunk again: $(grep -a tcgpu_plugin "$WORK/save-$c/criu/restore.log" | head -n 3)"
        "$GPUCKPT" status "$pid" | grep -q ': running' || fail "not running after restore $c"
        [ "$(smi_state "$pid")" = running ] || fail "driver state after restore $c: $(smi_state "$pid")"
        note "cycle $c ok"
    done
    wait_gone "$pid" 120
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum after 3 save/restore cycles: $got, uninterrupted: $ref"
    echo "ok: 3 save/restore cycles, checksum $got"
    ;;
repeat)
    # a job that mostly waits, as one on a GPU does: a third of its saves failed
    args=(--mb 4 --steps 300 --print-every 25)
    ref=$(reference "$WORK/ref.out" "$TRAIN" "${args[@]}")
    start_job "$WORK/run.out" "$TRAIN" "${args[@]}" --sleep-ms 60
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^step 25 '
    # what the plugin's checkpoint leaves for the dump that follows it
    for c in 1 2 3 4 5; do
        "$GPUCKPT" checkpoint "$pid" -D "$WORK/ckpt-$c" >"$WORK/ckpt.out" 2>&1 ||
            fail "checkpoint $c failed: $(cat "$WORK/ckpt.out")"
        workers=$( (grep -l '^iou-' /proc/"$pid"/task/*/comm 2>/dev/null || true) | wc -l)
        [ "$workers" -eq 0 ] || fail "checkpoint $c left $workers io_uring worker thread(s) in the job"
        rm -rf "$WORK/ckpt-$c"
    done
    for c in 1 2 3; do
        "$GPUCKPT" save "$pid" -D "$WORK/save-$c" >"$WORK/save.out" 2>&1 ||
            fail "save $c of 3 failed: $(cat "$WORK/save.out")"
        [ "$c" -eq 1 ] && { wait "$pid" 2>/dev/null || true; }
        wait_gone "$pid" 10
        "$GPUCKPT" restore -D "$WORK/save-$c" -d >"$WORK/restore.out" 2>&1 ||
            fail "restore $c failed: $(cat "$WORK/restore.out")"
        rm -rf "$WORK/save-$c"
    done
    grep -q '^checksum' "$WORK/run.out" && fail "the job finished before its last save: make it longer"
    wait_gone "$pid" 60
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum after five checkpoints and three saves: $got, uninterrupted: $ref"
    echo "ok: five checkpoints left no io_uring worker; three saves and restores in a row; checksum $got"
    ;;
ddp)
    DDP=$B/examples/ddp/ddp
    export LD_LIBRARY_PATH=$B/simnccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export NCCL_BUFFSIZE=$((256 << 10)) SIMCUDA_DEVICES=2     # a GPU each
    args=(--nranks 2 --steps 300 --mb 1)
    "$DDP" "${args[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed: $(tail -n 3 "$WORK/ref.out")"
    ref=$(sed -n 's/^rank 0 checksum: //p' "$WORK/ref.out")
    [ -n "$ref" ] || fail "the reference run printed no checksum: $(tail -n 3 "$WORK/ref.out")"
    start_job "$WORK/run.out" "$DDP" "${args[@]}" --sleep-ms 20
    pid=$BG
    wait_for_line "$WORK/run.out" '^rank 0 step 30$'
    mapfile -t ranks < <(children_of "$pid")
    [ "${#ranks[@]}" -eq 2 ] || fail "expected 2 ranks under $pid, found: ${ranks[*]}"
    KILL_PIDS+=("${ranks[@]}")
    for c in 1 2; do
        set_phase "ddp: save $c"
        save "$pid" "$WORK/save-$c"
        [ "$(grep -c "tcgpu, image" "$WORK/inspect.out")" -eq 2 ] || fail "inspect should show 2 GPU images: $(cat "$WORK/inspect.out")"
        [ "$c" -eq 1 ] && { wait "$pid" 2>/dev/null || true; }
        for p in "$pid" "${ranks[@]}"; do wait_gone "$p" 10; done
        grep -q 'checksum' "$WORK/run.out" && fail "the job finished before save $c: make it longer"
        set_phase "ddp: restore $c"
        "$GPUCKPT" restore -D "$WORK/save-$c" -d >"$WORK/restore.out" 2>&1 || fail "restore $c failed: $(cat "$WORK/restore.out")"
        [ "$c" -eq 2 ] && break
        # the restored ranks, suspended while they run: each becomes level
        # with a peer whose pid is back with a new start time
        steps=$(grep -c '^rank 0 step' "$WORK/run.out")
        wait_for_line "$WORK/run.out" "^rank 0 step $((steps + 5))\$"
        for r in "${ranks[@]}"; do "$GPUCKPT" suspend "$r" >"$WORK/suspend.out" 2>&1 || fail "suspend of restored rank $r failed: $(cat "$WORK/suspend.out")"; done
        for r in "${ranks[@]}"; do "$GPUCKPT" resume "$r" >/dev/null || fail "resume of restored rank $r failed"; done
        steps=$(grep -c '^rank 0 step' "$WORK/run.out")
        wait_for_line "$WORK/run.out" "^rank 0 step $((steps + 5))\$"
    done
    wait_gone "$pid" 120
    for r in 0 1; do
        got=$(sed -n "s/^rank $r checksum: //p" "$WORK/run.out")
        [ "$got" = "$ref" ] || fail "rank $r: checksum '$got' after two saves and restores, uninterrupted $ref"
    done
    echo "ok: a 2-rank NCCL job saved and restored twice, its restored ranks suspended and resumed between; checksum $ref on both ranks"
    ;;
at-once)
    # restore at once after each save, no wait in between: save returns only
    # once the tree's pids are free (before, its processes were zombies for
    # about a second, and the restore was refused: "pid ... is in use").
    # The first save's root is our child: the shell reaps it while save waits.
    ref=$(reference "$WORK/ref.out" "$TRAIN" "${TRAIN_ARGS[@]}")
    start_job "$WORK/run.out" "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms 10
    pid=$BG
    wait_for_socket "$pid"
    for c in 1 2 3; do
        wait_for_line "$WORK/run.out" "^step $((c * 50)) "
        "$GPUCKPT" save "$pid" -D "$WORK/save-$c" >"$WORK/save.out" 2>&1 ||
            fail "save $c failed: $(cat "$WORK/save.out")"
        grep -q 'gpuckpt' "$WORK/save.out" && fail "save $c warned: $(cat "$WORK/save.out")"
        "$GPUCKPT" restore -D "$WORK/save-$c" -d >"$WORK/restore.out" 2>&1 ||
            fail "restore $c at once after the save failed: $(cat "$WORK/restore.out")"
        note "cycle $c ok"
    done
    grep -q '^checksum' "$WORK/run.out" && fail "the job finished before its last save: make it longer"
    wait_gone "$pid" 120
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum after 3 saves each restored at once: $got, uninterrupted: $ref"
    echo "ok: 3 saves, each restored at once, checksum $got"
    ;;
*) fail "unknown mode $mode" ;;
esac
