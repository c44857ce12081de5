#!/usr/bin/env bash
# A training step captured once into a CUDA graph (graph memory inside it,
# a workspace allocated in relaxed capture mode) and replayed under tcgpu,
# in the situations only this program makes; every mode of
# tests/common/scenario.sh is applied to it by progs/graph_train.desc. Each
# case first checks that the graph computes what the same step run eagerly
# does, and ends with the checksum of an uninterrupted run.
#
#   graph_suspend.sh self            the job suspends and resumes itself right
#                                    after launching a replay, every few replays:
#                                    the replay's result, in graph memory it
#                                    left allocated, survives; same checksum
#   graph_suspend.sh capture         a suspend while the program is inside its
#                                    capture is refused (it would invalidate
#                                    the capture), naming it; the job finishes
#                                    with the right checksum
#   graph_suspend.sh explicit        while the job holds an IPC event handle and
#                                    a graph with an explicit memory node
#                                    (cuGraphAddMemAllocNode), checkpoint and
#                                    suspend are refused naming the call, and
#                                    status shows it (when, from where); once
#                                    they are destroyed but the graph's memory
#                                    is still allocated, refused for that; once
#                                    it is freed, nothing blocks: checkpoint,
#                                    suspend and resume work, same checksum
. "$(dirname "$0")/lib.sh"

GRAPH_TRAIN=$PROGS/graph_train

reference() { # ARGS... : sets ref (and checks that the eager step agrees)
    "$GRAPH_TRAIN" "$@" >"$WORK/ref.out" 2>&1 || fail "reference run failed: $(tail -n 3 "$WORK/ref.out")"
    ref=$(checksum_of "$WORK/ref.out")
    [ -n "$ref" ] || fail "no checksum in the reference run"
    "$GRAPH_TRAIN" --eager "$@" >"$WORK/eager.out" 2>&1 || fail "eager run failed"
    [ "$(checksum_of "$WORK/eager.out")" = "$ref" ] ||
        fail "the graph computes $ref, the same step run eagerly $(checksum_of "$WORK/eager.out")"
}

finish() {
    wait "$pid" || fail "the job failed: $(tail -n 5 "$WORK/run.out")"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum $got, uninterrupted $ref"
}

case "${1:?self|capture|explicit}" in
self)
    args=(--mb 4 --replays 40 --print-every 10)
    reference "${args[@]}"
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$GRAPH_TRAIN" "${args[@]}" --self-suspend 4
    pid=$BG
    finish
    echo "ok: 10 self-suspends during replays, checksum $got"
    ;;
capture)
    args=(--mb 4 --replays 30 --print-every 10)
    reference "${args[@]}"
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$GRAPH_TRAIN" "${args[@]}" --capture-pause-ms 1500 --sleep-ms 30
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^capturing'
    rc=0
    "$GPUCKPT" suspend "$pid" >"$WORK/refused.out" 2>&1 || rc=$?
    [ "$rc" -eq 4 ] || fail "a suspend during capture exited $rc, expected 4 (refused): $(cat "$WORK/refused.out")"
    grep -q "stream capture" "$WORK/refused.out" || fail "the refusal does not name the capture: $(cat "$WORK/refused.out")"
    # Once the capture is over, the same job can be suspended.
    wait_for_line "$WORK/run.out" '^captured'
    "$GPUCKPT" suspend "$pid" || fail "suspend after the capture failed"
    "$GPUCKPT" resume "$pid" || fail "resume after the capture failed"
    finish
    echo "ok: refused during capture, checksum $got"
    ;;
explicit)
    args=(--mb 4 --replays 30 --print-every 10)
    reference "${args[@]}"
    mkdir -p "$WORK/go"
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$GRAPH_TRAIN" "${args[@]}" --explicit-mem-node "$WORK/go" \
        --sleep-ms 30
    pid=$BG
    wait_for_socket "$pid"
    blockers() { # N WORDS...: status --json says N blockers, the first naming WORDS
        local js n
        js=$("$GPUCKPT" status "$pid" --json) || fail "status failed"
        n=$(json_get "$js" blockers)
        [ "$n" = "$1" ] || fail "status shows $n blockers, expected $1: $js"
        shift
        for w in "$@"; do
            [[ $(json_get "$js" blocker) == *"$w"* ]] || fail "status's blocker does not say '$w': $js"
        done
    }

    phase "holding an IPC event and an explicit graph"
    wait_for_line "$WORK/run.out" '^holding'
    # the event, the graph and its executable graph
    blockers 3 cuIpcGetEventHandle "until the program destroys event"
    js=$("$GPUCKPT" status "$pid" --json)
    [[ $(json_get "$js" blocker_since) =~ ^20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]T ]] ||
        fail "status does not say when the blocker was made: $js"
    [[ $(json_get "$js" blocker_site) == *graph_train* ]] ||
        fail "status does not name the program's frame that made the call: $js"
    "$GPUCKPT" status "$pid" >"$WORK/status.out" || fail "status failed"
    grep -q "REFUSED while this holds: cuIpcGetEventHandle" "$WORK/status.out" ||
        fail "the status does not say what blocks a checkpoint: $(cat "$WORK/status.out")"
    expect_refused "$pid" "with an IPC event handle" cuIpcGetEventHandle
    touch "$WORK/go/1"

    phase "graphs destroyed, graph memory allocated"
    wait_for_line "$WORK/run.out" '^released'
    blockers 1 "still allocated" "cuMemFree"
    expect_refused "$pid" "with the graph's memory still allocated" cuGraphAddMemAllocNode "still allocated"
    touch "$WORK/go/2"

    phase "everything released"
    wait_for_line "$WORK/run.out" '^captured'
    grep -q '^freed the graph memory' "$WORK/run.out" || fail "the job did not free its graph memory"
    blockers 0
    "$GPUCKPT" status "$pid" | grep -q "checkpoint   possible" || fail "status does not say a checkpoint is possible"
    "$GPUCKPT" checkpoint "$pid" -D "$WORK/img" >"$WORK/ckpt.out" 2>&1 ||
        fail "checkpoint once everything was released failed: $(cat "$WORK/ckpt.out")"
    "$GPUCKPT" suspend "$pid" >"$WORK/suspend.out" 2>&1 ||
        fail "suspend once everything was released failed: $(cat "$WORK/suspend.out")"
    "$GPUCKPT" resume "$pid" || fail "resume failed"
    finish
    echo "ok: refused while an IPC event and an explicit graph lived, then while its memory did; checkpoint, suspend and resume once freed; checksum $got"
    ;;
*)
    fail "unknown scenario $1"
    ;;
esac
