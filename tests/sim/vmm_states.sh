#!/usr/bin/env bash
# The states a PyTorch-shaped allocator (progs/expandable.c) passes through,
# caught by suspend, checkpoint and resume: the job never notices.
#
#   vmm_states.sh no-access   pages mapped, access not set yet (PyTorch's
#                             ExpandableSegment::map maps every page first)
#   vmm_states.sh unmapped    a handle with bytes in it and no mapping (a page
#                             pool parks pages so)
#   vmm_states.sh created     a handle created, not mapped yet
#   vmm_states.sh random      CYCLES (default 30) random suspends (host and
#                             image), resumes and checkpoints while the job
#                             runs, many landing in the states above
#
# Each case: the job ends with the checksum of an uninterrupted run; while
# it is suspended it holds (nearly) no device memory; a mapping without
# access still answers PROT_NONE afterwards (the program checks that itself)
# and a parked page comes back with its bytes.
. "$(dirname "$0")/lib.sh"

which=${1:?which state}
cycles=${2:-30}
prog=$PROGS/expandable
kernels=$PROGS/expandable_kernels.so
slack=$((4 << 20))

steps=120
[ "$which" = random ] && steps=600
"$prog" "$kernels" --steps "$steps" >"$WORK/ref.out" 2>&1 ||
    fail "reference run failed: $(tail -n 3 "$WORK/ref.out")"
ref=$(checksum_of "$WORK/ref.out")
[ -n "$ref" ] || fail "no checksum in the reference run"

suspended_holds_nothing() {
    local held
    held=$(device_bytes_of "$pid")
    [ "$held" -le "$slack" ] || fail "suspended ($1), the job still holds $held bytes"
}

case "$which" in
no-access|unmapped|created)
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$prog" "$kernels" --pause "$which" --go "$WORK/go"
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" "^paused $which"
    "$GPUCKPT" suspend "$pid" -q || fail "suspend in state $which failed"
    suspended_holds_nothing "$which"
    "$GPUCKPT" resume "$pid" -q || fail "resume in state $which failed"
    "$GPUCKPT" checkpoint "$pid" -D "$WORK/img" -q || fail "checkpoint in state $which failed"
    "$GPUCKPT" verify "$WORK/img" >/dev/null || fail "the checkpoint in state $which does not verify"
    "$GPUCKPT" suspend "$pid" -D "$WORK/img2" -q || fail "suspend to an image in state $which failed"
    suspended_holds_nothing "$which, to an image"
    "$GPUCKPT" resume "$pid" -q || fail "resume from the image in state $which failed"
    touch "$WORK/go"
    finish_train
    ;;
random)
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$prog" "$kernels" --steps "$steps" --think-ms 3
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^step'
    for i in $(seq 1 "$cycles"); do
        sleep_ms "$(random_ms 0 80)"
        kill -0 "$pid" 2>/dev/null || fail "the job ended after only $((i - 1)) cycles: make it longer"
        case $((RANDOM % 4)) in
        0)  "$GPUCKPT" checkpoint "$pid" -D "$WORK/ck-$i" -q || fail "checkpoint $i failed"
            rm -rf "$WORK/ck-$i" ;;
        1)  "$GPUCKPT" suspend "$pid" -D "$WORK/img-$i" -q || fail "suspend $i (image) failed"
            suspended_holds_nothing "cycle $i, image"
            sleep_ms "$(random_ms 0 30)"
            "$GPUCKPT" resume "$pid" -q || fail "resume $i failed" ;;
        *)  "$GPUCKPT" suspend "$pid" -q || fail "suspend $i failed"
            suspended_holds_nothing "cycle $i"
            sleep_ms "$(random_ms 0 30)"
            "$GPUCKPT" resume "$pid" -q || fail "resume $i failed" ;;
        esac
    done
    finish_train
    ;;
*) fail "unknown state $which" ;;
esac
echo "ok: $which"
