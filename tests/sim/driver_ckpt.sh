#!/usr/bin/env bash
# gpuckpt suspend with the driver checkpoint API (docs/save-restore.md): after
# tcgpu has released the device memory, the process's context goes to the
# driver (Lock + Checkpoint): simcuda-smi shows state=checkpointed and
# `gpuckpt status` says so; resume takes it back (Restore + Unlock) before
# tcgpu refills: the final checksum equals an uninterrupted run's.
# --keep-context leaves the context with the process (state=running), and
# the signal trigger does not touch the driver. Without the API (a driver
# that lacks it), suspend still works and says the context was kept.
# What every suspend shows besides: tests/common/scenario.sh.
. "$(dirname "$0")/lib.sh"

start_mid_run driver 3 train "$TRAIN" --mb 128 --steps 400 --print-every 100
[ "$(smi_state "$pid")" = running ] || fail "driver state before suspend: $(smi_state "$pid")"

for i in 1 2 3 4 5; do
    dir=() mode=suspend-host
    [ "$i" -eq 3 ] && dir=(-D "$WORK/img-$i") mode=suspend-image
    "$GPUCKPT" suspend "$pid" "${dir[@]}" >"$WORK/suspend.out" || fail "suspend $i failed"
    grep -q "context released" "$WORK/suspend.out" || fail "suspend $i did not release the context: $(cat "$WORK/suspend.out")"
    sc_check_suspended "$mode"
    [ "$(smi_state "$pid")" = checkpointed ] || fail "driver state after suspend $i: $(smi_state "$pid")"
    "$GPUCKPT" status "$pid" | grep -q "context *released to the driver" || fail "status does not show the released context"
    # suspending again is refused and changes nothing
    rc=0; "$GPUCKPT" suspend "$pid" -q 2>/dev/null || rc=$?
    [ "$rc" -eq 4 ] || fail "second suspend exited $rc, expected 4"
    [ "$(smi_state "$pid")" = checkpointed ] || fail "a refused suspend changed the driver state"
    sleep_ms "$(random_ms 0 80)"
    "$GPUCKPT" resume "$pid" -q || fail "resume $i failed"
    [ "$(smi_state "$pid")" = running ] || fail "driver state after resume $i: $(smi_state "$pid")"
    SC_DONE+=("$mode")
    note "cycle $i ok"
    sleep_ms "$(random_ms 20 120)"
done

# No room to take the context back: resume exits 8 and changes nothing (still
# suspended, still checkpointed); once the room is back it resumes. The holder
# (train without tcgpu) takes 972 MiB + its context of the 1 GiB device,
# leaving less than the job's context needs.
"$GPUCKPT" suspend "$pid" -q || fail "suspend before the no-room case failed"
start_bg "$WORK/holder.out" "$TRAIN" --mb 972 --steps 1000000 --sleep-ms 20 --print-every 1
holder=$BG
wait_for_line "$WORK/holder.out" '^step'
rc=0; "$GPUCKPT" resume "$pid" -q 2>"$WORK/resume.err" || rc=$?
[ "$rc" -eq 8 ] || fail "resume with no room for the context exited $rc: $(cat "$WORK/resume.err")"
grep -q "CUDA_ERROR_OUT_OF_MEMORY" "$WORK/resume.err" || fail "no driver reason: $(cat "$WORK/resume.err")"
[ "$(smi_state "$pid")" = checkpointed ] || fail "after the failed resume: driver state $(smi_state "$pid")"
"$GPUCKPT" status "$pid" | grep -q ': suspended' || fail "after the failed resume the job is not suspended"
note "no room: $(head -n 1 "$WORK/resume.err")"
kill "$holder"; wait "$holder" 2>/dev/null || true
"$GPUCKPT" resume "$pid" -q || fail "resume once the room is back failed"
[ "$(smi_state "$pid")" = running ] || fail "driver state after the late resume: $(smi_state "$pid")"

# --keep-context: device memory only; the context's memory stays
"$GPUCKPT" suspend "$pid" --keep-context -q || fail "suspend --keep-context failed"
[ "$(smi_state "$pid")" = running ] || fail "--keep-context: driver state $(smi_state "$pid")"
sc_check_suspended suspend-keep-context
"$GPUCKPT" status "$pid" | grep -q "context *held by the process" || fail "status should show the context held"
"$GPUCKPT" resume "$pid" -q || fail "resume after --keep-context failed"
SC_DONE+=(suspend-keep-context)

# a driver without the API: suspend works, the context stays
rc=0
TCGPU_REAL_LIBCUDA=/nonexistent/libcuda.so.1 "$GPUCKPT" suspend "$pid" >"$WORK/suspend.out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || fail "suspend without the driver API exited $rc: $(cat "$WORK/suspend.out")"
grep -q "context kept (cannot load the CUDA driver" "$WORK/suspend.out" || fail "no 'context kept' note: $(cat "$WORK/suspend.out")"
[ "$(smi_state "$pid")" = running ] || fail "without the API the driver state changed: $(smi_state "$pid")"
"$GPUCKPT" resume "$pid" -q || fail "resume failed"

sc_end
