#!/usr/bin/env bash
# The example training loop under tcgpu, suspended and resumed at random
# moments (to host memory, and now and then to an image on disk; sometimes
# three requests at once, of which exactly one may win): its final checksum
# equals an uninterrupted run's, every time. While it is suspended
# simcuda accounts (close to) no device memory to it and another process can
# allocate what it gave back, which it could not while the job ran.
#
#   suspend_resume.sh train|train_mt CYCLES
. "$(dirname "$0")/lib.sh"

which=${1:-train}
cycles=${2:-20}
case "$which" in
    train)    prog=$TRAIN;    args=(--mb 256 --steps 800 --print-every 100) ;;
    train_mt) prog=$TRAIN_MT; args=(--mb 128 --steps 300 --threads 4 --print-every 100) ;;
    *) fail "unknown program $which" ;;
esac
slack=$((4 << 20))        # what a suspended process may still hold
context=$((32 << 20))     # SIMCUDA_CONTEXT_MEM (lib.sh): kept with --keep-context

"$prog" "${args[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed: $(tail -n 3 "$WORK/ref.out")"
ref=$(checksum_of "$WORK/ref.out")
[ -n "$ref" ] || fail "no checksum in the reference run"

start_bg "$WORK/run.out" "$GPUCKPT" run -- "$prog" "${args[@]}" --sleep-ms 2
pid=$BG
wait_for_socket "$pid"
wait_for_line "$WORK/run.out" '^step'

# The probe is meaningful: while the job holds its memory, 900 MiB do not fit.
rc=0; "$PROGS/alloc_probe" 900 >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 3 ] || fail "alloc_probe 900 should hit OOM while the job runs (exit $rc)"

# storm OP : three concurrent `gpuckpt OP`: exactly one succeeds, the others
# are refused as already done (exit 4); operations are serialised.
storm() {
    local codes=() p rc ok=0 refused=0
    local pids=()
    for p in 1 2 3; do "$GPUCKPT" "$1" "$pid" -q & pids+=($!); done
    for p in "${pids[@]}"; do rc=0; wait "$p" || rc=$?; codes+=("$rc"); done
    for rc in "${codes[@]}"; do
        [ "$rc" -eq 0 ] && ok=$((ok + 1))
        [ "$rc" -eq 4 ] && refused=$((refused + 1))
    done
    [ "$ok" -eq 1 ] && [ "$refused" -eq 2 ] || fail "three concurrent $1 requests exited ${codes[*]}"
}

for i in $(seq 1 "$cycles"); do
    sleep_ms "$(random_ms 0 150)"
    kill -0 "$pid" 2>/dev/null || fail "the job ended after only $((i - 1)) cycles: make it longer"
    opts=()
    [ $((i % 5)) -eq 0 ] && opts+=(-D "$WORK/img-$i")
    [ $((i % 4)) -eq 1 ] && opts+=(--keep-context)
    if [ $((i % 7)) -eq 3 ]; then
        opts=()     # the storm suspends without options: the context is released
        storm suspend
    else
        "$GPUCKPT" suspend "$pid" "${opts[@]}" || fail "suspend $i failed"
    fi
    held=$(device_bytes_of "$pid")
    if [[ " ${opts[*]} " == *" --keep-context "* ]]; then
        # Only the context is left: the program's memory is free.
        [ "$held" -ge "$context" ] && [ "$held" -le $((context + slack)) ] ||
            fail "suspended with its context kept, the job holds $held bytes (context: $context)"
    else
        [ "$held" -le "$slack" ] || fail "suspended job still holds $held bytes of device memory"
    fi
    if [ "$i" -eq 1 ]; then
        "$PROGS/alloc_probe" 900 >/dev/null || fail "another process could not allocate the memory the suspended job freed"
    fi
    sleep_ms "$(random_ms 0 50)"
    if [ $((i % 7)) -eq 3 ]; then
        storm resume
    else
        "$GPUCKPT" resume "$pid" || fail "resume $i failed"
    fi
    note "cycle $i ok (held $held bytes while suspended)"
done

wait "$pid" || fail "the job failed: $(tail -n 5 "$WORK/run.out")"
got=$(checksum_of "$WORK/run.out")
[ "$got" = "$ref" ] || fail "checksum after $cycles suspend/resume cycles: $got, uninterrupted: $ref"
echo "ok: $cycles cycles, checksum $got"
