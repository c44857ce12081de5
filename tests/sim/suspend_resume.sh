#!/usr/bin/env bash
# The example training loop under tcgpu, suspended and resumed at random
# moments (to host memory, and now and then to an image on disk, or with the
# context kept; sometimes three requests at once, of which exactly one may
# win): its final checksum equals an uninterrupted run's, every time. While
# it is suspended it shows what tests/common/scenario.sh checks of a suspend
# (no device memory left, the context with the driver unless kept), and
# another process can allocate what it gave back, which it could not while
# the job ran.
#
#   suspend_resume.sh train|train_mt CYCLES
. "$(dirname "$0")/lib.sh"

cycles=${2:-20}
case "${1:-train}" in
    train)    start_mid_run cycles 2 train "$TRAIN" --mb 256 --steps 800 --print-every 100 ;;
    train_mt) start_mid_run cycles 2 train_mt "$TRAIN_MT" --mb 128 --steps 300 --threads 4 --print-every 100 ;;
    *) fail "unknown program $1" ;;
esac

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
    opts=() mode=suspend-host
    [ $((i % 5)) -eq 0 ] && opts+=(-D "$WORK/img-$i") mode=suspend-image
    [ $((i % 4)) -eq 1 ] && opts+=(--keep-context) mode=suspend-keep-context
    if [ $((i % 7)) -eq 3 ]; then
        opts=() mode=suspend-host     # the storm suspends without options: the context is released
        storm suspend
    else
        "$GPUCKPT" suspend "$pid" "${opts[@]}" || fail "suspend $i failed"
    fi
    sc_check_suspended "$mode"
    SC_DONE+=("$mode")
    if [ "$i" -eq 1 ]; then
        "$PROGS/alloc_probe" 900 >/dev/null || fail "another process could not allocate the memory the suspended job freed"
    fi
    sleep_ms "$(random_ms 0 50)"
    if [ $((i % 7)) -eq 3 ]; then
        storm resume
    else
        "$GPUCKPT" resume "$pid" || fail "resume $i failed"
    fi
    note "cycle $i ok ($mode${opts[*]:+: ${opts[*]}})"
done
sc_end
