#!/usr/bin/env bash
# What tcgpu refuses, and that refusing loses nothing:
#
#   refusals.sh gate-timeout   a kernel that never ends: suspend times out at the
#                              gate naming the thread and call; the job is untouched
#   refusals.sh corrupt-image  resume from a damaged image is refused before
#                              anything is touched; with the image repaired the job
#                              resumes and finishes with the right checksum
#   refusals.sh disk-full      a checkpoint onto a full disk fails with ENOSPC,
#                              leaves nothing behind, and the job finishes correctly
#   refusals.sh busy-kernel    device work that never ends while no thread is in
#   refusals.sh busy-ptsz      a driver call (a kernel polled with cuStreamQuery,
#   refusals.sh busy-hostfn    on a stream or the per-thread default stream; a
#                              host function waiting for a thread of the program):
#                              suspend fails after TCGPU_GATE_TIMEOUT_MS naming the
#                              stream and the work, status answers while it waits
#                              (state suspending), a second request is queued
#                              behind it, and the job runs on to the right checksum
# (An IPC handle's refusal: progs/ipc_hold.desc, every mode.)
. "$(dirname "$0")/lib.sh"

which=${1:?which refusal}
case "$which" in
gate-timeout)
    export TCGPU_GATE_TIMEOUT_MS=300
    start_bg "$WORK/spin.out" "$GPUCKPT" run -- "$PROGS/spin" "$PROGS/spin_kernel.so"
    pid=$BG
    wait_for_line "$WORK/spin.out" spinning
    wait_for_socket "$pid"
    expect_exit 5 "$GPUCKPT" suspend "$pid"
    grep -q "cuCtxSynchronize" "$WORK/last.out" || fail "the timeout does not name the call: $(cat "$WORK/last.out")"
    [ "$(status_of "$pid" state)" = running ] || fail "after the timeout the job is not running"
    tcgpu_threads_block_signals "$pid" 3
    held=$(device_bytes_of "$pid")
    [ "$held" -ge $((1 << 20)) ] || fail "the job lost its memory after a refused suspend ($held bytes)"
    ;;
corrupt-image)
    start_mid_run "$which" 5 train "$TRAIN" --mb 64 --steps 300 --print-every 100
    "$GPUCKPT" suspend "$pid" -D "$WORK/img" || fail "suspend to an image failed"
    cp "$WORK/img/data.0" "$WORK/data.good"
    size=$(stat -c %s "$WORK/img/data.0")
    printf '\xff' | dd of="$WORK/img/data.0" bs=1 seek=$((size / 2)) conv=notrunc status=none
    cmp -s "$WORK/img/data.0" "$WORK/data.good" && printf '\x00' | dd of="$WORK/img/data.0" bs=1 seek=$((size / 2)) conv=notrunc status=none
    expect_exit 7 "$GPUCKPT" resume "$pid"
    grep -q "data.0" "$WORK/last.out" || fail "the refusal does not name the file: $(cat "$WORK/last.out")"
    [ "$(status_of "$pid" state)" = suspended ] || fail "after a refused resume the job is not suspended"
    truncate -s $((size / 3)) "$WORK/img/data.0"
    expect_exit 7 "$GPUCKPT" resume "$pid"
    cp "$WORK/data.good" "$WORK/img/data.0"
    "$GPUCKPT" resume "$pid" || fail "resume from the repaired image failed"
    sc_end
    ;;
disk-full)
    [ "$(id -u)" -eq 0 ] || { echo "skip: needs root to mount a small tmpfs"; exit 77; }
    mkdir -p "$WORK/small"
    mount -t tmpfs -o size=4m tmpfs "$WORK/small" || { echo "skip: cannot mount tmpfs"; exit 77; }
    trap 'umount "$WORK/small" 2>/dev/null; cleanup' EXIT
    start_mid_run "$which" 5 train "$TRAIN" --mb 64 --steps 300 --print-every 100
    # Random-looking weights do not compress into 4 MiB.
    expect_exit 1 "$GPUCKPT" checkpoint "$pid" -D "$WORK/small/img"
    grep -qi "space" "$WORK/last.out" || fail "the failure does not say the disk is full: $(cat "$WORK/last.out")"
    [ -z "$(ls -A "$WORK/small")" ] || fail "a failed checkpoint left files behind: $(ls -A "$WORK/small")"
    expect_exit 1 "$GPUCKPT" suspend "$pid" -D "$WORK/small/img2"
    [ "$(status_of "$pid" state)" = running ] || fail "after a failed suspend the job is not running"
    sc_end
    ;;
busy-kernel|busy-ptsz|busy-hostfn)
    mode=${1#busy-}
    t0=$(date +%s%N)
    "$PROGS/busy" "$PROGS/busy_kernel.so" "$mode" 100 >"$WORK/ref.out" 2>&1 ||
        fail "reference run failed: $(tail -n 3 "$WORK/ref.out")"
    # The bound of the device wait: long enough for statuses and a second
    # gpuckpt to be queued behind the suspend; 4 times the reference run
    # (slow in a sanitizer build), 1.5 s at least.
    gate_ms=$(( ($(date +%s%N) - t0) / 1000000 * 4 ))
    [ "$gate_ms" -ge 1500 ] || gate_ms=1500
    export TCGPU_GATE_TIMEOUT_MS=$gate_ms
    ref=$(checksum_of "$WORK/ref.out")
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$PROGS/busy" "$PROGS/busy_kernel.so" "$mode" $((gate_ms * 4 + 1000))
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^busy'
    # What a status takes here with no operation running (a sanitizer build, a
    # loaded machine): a status during the suspend may take three times that,
    # and 1 s at least; one that waited for the suspend would say "running".
    t0=$(date +%s%N)
    status_of "$pid" state >/dev/null
    bound=$(( ($(date +%s%N) - t0) / 1000000 * 3 ))
    [ "$bound" -ge 1000 ] || bound=1000
    ( rc=0; "$GPUCKPT" suspend "$pid" --timeout 30 >"$WORK/suspend.out" 2>&1 || rc=$?
      echo "$rc" >"$WORK/suspend.rc" ) &
    sus=$!
    # Status answers at once while the suspend waits for the device.
    seen=
    for i in $(seq 1 40); do
        t0=$(date +%s%N)
        st=$(status_of "$pid" state)
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        [ "$ms" -lt "$bound" ] || fail "status took $ms ms while a suspend was running (bound $bound ms)"
        if [ "$st" = suspending ]; then
            seen=1
            [ "$(status_of "$pid" op_running)" = suspend ] || fail "status does not name the running suspend"
            break
        fi
        [ -e "$WORK/suspend.rc" ] && break
        sleep 0.03
    done
    [ -n "$seen" ] || fail "status never said 'suspending' while the suspend waited"
    if [ "$mode" = kernel ]; then
        # a second operation waits its turn, then meets the same busy device
        expect_exit 5 "$GPUCKPT" checkpoint "$pid" -D "$WORK/ck" --timeout 30
        grep -q "queued behind the running suspend" "$WORK/run.out" ||
            fail "the checkpoint was not queued behind the suspend: $(tail -n 5 "$WORK/run.out")"
        [ ! -e "$WORK/ck" ] || fail "a failed checkpoint left $WORK/ck behind"
    fi
    wait "$sus" || true
    [ "$(cat "$WORK/suspend.rc")" -eq 5 ] ||
        fail "suspend exited $(cat "$WORK/suspend.rc"), not 5 (timeout): $(cat "$WORK/suspend.out")"
    grep -q "did not finish within $gate_ms ms" "$WORK/suspend.out" ||
        fail "the failure does not say what timed out: $(cat "$WORK/suspend.out")"
    grep -q "stream" "$WORK/suspend.out" && grep -Eq "wait_flag|wait_for_app" "$WORK/suspend.out" ||
        fail "the failure does not name the stream and its work: $(cat "$WORK/suspend.out")"
    [ "$(status_of "$pid" state)" = running ] || fail "after the timeout the job is not running"
    tcgpu_threads_block_signals "$pid" 3
    held=$(device_bytes_of "$pid")
    [ "$held" -ge $((4 << 20)) ] || fail "the job lost its memory after a failed suspend ($held bytes)"
    # Once the work has ended, the job suspends and resumes as usual.
    wait_for_line "$WORK/run.out" '^done waiting'
    "$GPUCKPT" suspend "$pid" -q || fail "suspend after the work ended failed"
    "$GPUCKPT" resume "$pid" -q || fail "resume failed"
    finish_train
    ;;
*) fail "unknown case $which" ;;
esac
echo "ok: $which"
