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
# (An IPC handle's refusal: progs/ipc_hold.desc, every mode.)
. "$(dirname "$0")/lib.sh"

expect_exit() { # CODE CMD... : CMD exits with CODE; its output goes to $WORK/last.out
    local want=$1 rc=0; shift
    "$@" >"$WORK/last.out" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, expected $want: $(cat "$WORK/last.out")"
}

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
*) fail "unknown case $which" ;;
esac
echo "ok: $which"
