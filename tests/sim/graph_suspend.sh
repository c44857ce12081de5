#!/usr/bin/env bash
# A training step captured once into a CUDA graph (graph memory inside it,
# a workspace allocated in relaxed capture mode) and replayed many times
# under tcgpu, suspended and resumed at random moments: between replays and
# while a replay runs, to host memory and to an image, with and without the
# context; checkpointed once. Its checksum equals an uninterrupted run's
# (which equals the same step run without a graph), and while suspended it
# holds no device memory but its context: the graph's memory was released
# and came back at the same addresses.
#
#   graph_suspend.sh cycles CYCLES   the scenario above
#   graph_suspend.sh self            the job suspends and resumes itself right
#                                    after launching a replay, every few replays:
#                                    the replay's result, in graph memory it
#                                    left allocated, survives; same checksum
#   graph_suspend.sh capture         a suspend while the program is inside its
#                                    capture is refused (it would invalidate
#                                    the capture), naming it; the job finishes
#                                    with the right checksum
. "$(dirname "$0")/lib.sh"

GRAPH_TRAIN=$PROGS/graph_train
slack=$((4 << 20))
context=$((32 << 20))          # SIMCUDA_CONTEXT_MEM (lib.sh)

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

case "${1:?cycles|self|capture|explicit}" in
cycles)
    cycles=${2:-12}
    args=(--mb 8 --replays 120 --print-every 20)
    reference "${args[@]}"
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$GRAPH_TRAIN" "${args[@]}" --sleep-ms 12
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^captured'
    for i in $(seq 1 "$cycles"); do
        sleep_ms "$(random_ms 0 60)"
        kill -0 "$pid" 2>/dev/null || fail "the job ended after $((i - 1)) cycles: make it longer"
        opts=()
        [ $((i % 4)) -eq 2 ] && opts+=(-D "$WORK/img-$i")
        [ $((i % 3)) -ne 0 ] && opts+=(--keep-context)
        "$GPUCKPT" suspend "$pid" "${opts[@]}" || fail "suspend $i failed"
        held=$(device_bytes_of "$pid")
        if [[ " ${opts[*]} " == *" --keep-context "* ]]; then
            [ "$held" -le $((context + slack)) ] ||
                fail "suspended with its context kept, the job holds $held bytes (context: $context)"
        else
            [ "$held" -le "$slack" ] || fail "the suspended job still holds $held bytes of device memory"
        fi
        sleep_ms "$(random_ms 0 30)"
        "$GPUCKPT" resume "$pid" || fail "resume $i failed"
        if [ "$i" -eq 5 ]; then
            "$GPUCKPT" checkpoint "$pid" -D "$WORK/ckpt" || fail "a checkpoint of the graph job was refused"
            "$GPUCKPT" verify "$WORK/ckpt" >/dev/null || fail "the checkpoint does not verify"
        fi
        note "cycle $i ok (held $held bytes while suspended)"
    done
    finish
    echo "ok: $cycles cycles, checksum $got"
    ;;
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
