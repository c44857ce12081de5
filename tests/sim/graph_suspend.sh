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
#   graph_suspend.sh explicit        after a graph with explicit memory nodes
#                                    (cuGraphAddMemAllocNode), checkpoint and
#                                    suspend are refused, naming the call
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
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$GRAPH_TRAIN" "${args[@]}" --explicit-mem-node --sleep-ms 30
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^captured'
    grep -q '^explicit memory node' "$WORK/run.out" || fail "the job did not run its explicit memory node"
    for op in checkpoint suspend; do
        rc=0
        dir=()
        [ "$op" = checkpoint ] && dir=(-D "$WORK/img")
        "$GPUCKPT" "$op" "$pid" "${dir[@]}" >"$WORK/refused.out" 2>&1 || rc=$?
        [ "$rc" -eq 4 ] || fail "$op after an explicit graph memory node exited $rc, expected 4: $(cat "$WORK/refused.out")"
        grep -q cuGraphAddMemAllocNode "$WORK/refused.out" || fail "the refusal does not name the call: $(cat "$WORK/refused.out")"
    done
    [ ! -e "$WORK/img" ] || fail "a refused checkpoint left $WORK/img behind"
    finish
    echo "ok: checkpoint and suspend refused after cuGraphAddMemAllocNode, checksum $got"
    ;;
*)
    fail "unknown scenario $1"
    ;;
esac
