#!/usr/bin/env bash
# What gpuckpt save / restore refuse, and that a refusal or failure leaves
# everything as it was.
#
#   refusals.sh non-tcgpu|corrupt|pids-in-use|device|disk-full
#
# non-tcgpu    a GPU process not under tcgpu in the tree: save refuses before
#              touching anything, names it; the tree finishes correctly
# corrupt      a flipped byte, a truncated data file, a damaged tree manifest,
#              a GPU image of another save, a missing CRIU image: restore
#              refuses naming the file and restores nothing; the intact save
#              then restores and finishes with the right checksum
# pids-in-use  restore while the saved tree (--leave-running) still runs
# device       restore where the device is another model (simcuda with another
#              memory size): a clear error, nothing restored
# disk-full    save into a small tmpfs: fails in the GPU images, and (another
#              tree) in CRIU's dump; each time the tree runs on and finishes right
. "$(dirname "$0")/lib.sh"

mode=${1:?mode}
TRAIN_ARGS=(--mb 64 --steps 400 --print-every 50)

start_job() {
    local out=$1; shift
    setsid "$GPUCKPT" run -- "$@" >"$out" 2>&1 </dev/null &
    BG=$!
    BG_PIDS+=("$BG")
}

train_job() {   # starts train under tcgpu, waits for step 50; sets pid, ref
    "$TRAIN" "${TRAIN_ARGS[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed"
    ref=$(checksum_of "$WORK/ref.out")
    start_job "$WORK/run.out" "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms "${1:-10}"
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^step 50 '
}

assert_not_restored() { kill -0 "$1" 2>/dev/null && fail "process $1 exists after a refused restore"; return 0; }

case "$mode" in
non-tcgpu)
    "$GPU_TREE" --steps 60 >"$WORK/ref.out" 2>&1 || fail "reference run failed"
    ref=$(checksum_of "$WORK/ref.out")
    # no gpuckpt run: the workers use the GPU without tcgpu
    setsid "$GPU_TREE" --steps 60 --sleep-ms 20 >"$WORK/run.out" 2>&1 </dev/null &
    pid=$!
    BG_PIDS+=("$pid")
    wait_for_line "$WORK/run.out" '^gpu_tree: parent'
    mapfile -t kids < <(children_of "$pid")
    KILL_PIDS+=("${kids[@]}")
    for i in $(seq 1 200); do [ "$("$SMI" --query-compute-apps=pid --format=csv,noheader | sort -u | wc -l)" -ge 2 ] && break; sleep 0.02; done
    expect_fail 4 "process ${kids[0]} (gpu_tree) uses the GPU but is not under tcgpu" \
        "$GPUCKPT" save "$pid" -D "$WORK/save"
    [ -e "$WORK/save" ] && fail "a refused save left $WORK/save"
    ls -d "$WORK"/save.tmp-* >/dev/null 2>&1 && fail "a refused save left a temporary directory"
    wait "$pid" || fail "the tree failed after the refused save: $(tail -n 3 "$WORK/run.out")"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum after a refused save: $got, expected $ref"
    echo "ok: non-tcgpu GPU process refused, tree finished with $got"
    ;;
corrupt)
    train_job
    "$GPUCKPT" checkpoint "$pid" -D "$WORK/other-img" -q || fail "checkpoint failed"
    "$GPUCKPT" save "$pid" -D "$WORK/save" || fail "save failed"
    wait "$pid" 2>/dev/null || true
    cp -a "$WORK/save" "$WORK/pristine"
    data=$WORK/save/gpu/$pid/data.0
    size=$(stat -c %s "$data")

    printf '\x5a' | dd of="$data" bs=1 seek=$((size / 2)) conv=notrunc status=none
    cmp -s "$data" "$WORK/pristine/gpu/$pid/data.0" && fail "the byte flip changed nothing"
    expect_fail 7 "data.0" "$GPUCKPT" restore -D "$WORK/save"
    assert_not_restored "$pid"
    expect_fail 7 "data.0" "$GPUCKPT" verify "$WORK/save"

    cp "$WORK/pristine/gpu/$pid/data.0" "$data"
    truncate -s $((size - 4096)) "$data"
    expect_fail 7 "data.0" "$GPUCKPT" restore -D "$WORK/save"
    assert_not_restored "$pid"
    cp "$WORK/pristine/gpu/$pid/data.0" "$data"

    sed -i 's/comm=train/comm=trXin/' "$WORK/save/tree"
    expect_fail 7 "tree: checksum mismatch" "$GPUCKPT" restore -D "$WORK/save"
    assert_not_restored "$pid"
    cp "$WORK/pristine/tree" "$WORK/save/tree"

    head -c -20 "$WORK/pristine/tree" >"$WORK/save/tree"
    expect_fail 7 "tree: truncated" "$GPUCKPT" restore -D "$WORK/save"
    cp "$WORK/pristine/tree" "$WORK/save/tree"

    rm -rf "$WORK/save/gpu/$pid" && cp -a "$WORK/other-img" "$WORK/save/gpu/$pid"
    expect_fail 7 "is not the image this save made for process $pid" "$GPUCKPT" restore -D "$WORK/save"
    assert_not_restored "$pid"
    rm -rf "$WORK/save/gpu/$pid" && cp -a "$WORK/pristine/gpu/$pid" "$WORK/save/gpu/$pid"

    rm "$WORK/save/criu/pstree.img"
    expect_fail 7 "pstree.img is missing" "$GPUCKPT" restore -D "$WORK/save"
    assert_not_restored "$pid"
    cp "$WORK/pristine/criu/pstree.img" "$WORK/save/criu/"

    "$GPUCKPT" restore -D "$WORK/save" || fail "restore of the intact save failed (exit $?)"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum after the refusals and a good restore: $got, expected $ref"
    echo "ok: corrupt, truncated, mismatched and missing images refused; intact save restored, $got"
    ;;
pids-in-use)
    train_job 5
    "$GPUCKPT" save "$pid" -D "$WORK/save" --leave-running >/dev/null || fail "save failed"
    expect_fail 4 "pid $pid (train) is in use" "$GPUCKPT" restore -D "$WORK/save"
    "$GPUCKPT" status "$pid" | grep -q ': running' || fail "the original is not running after the refused restore"
    wait "$pid" || fail "the original failed: $(tail -n 3 "$WORK/run.out")"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum: $got, expected $ref"
    echo "ok: restore refused while pid $pid was in use; original finished with $got"
    ;;
device)
    train_job
    "$GPUCKPT" save "$pid" -D "$WORK/save" >/dev/null || fail "save failed"
    wait "$pid" 2>/dev/null || true
    other=/simcuda-t-$TEST_NAME-other-$$
    rc=0
    SIMCUDA_SHM=$other SIMCUDA_DEVICE_MEM=512M "$GPUCKPT" restore -D "$WORK/save" \
        >"$WORK/cmd.out" 2>"$WORK/cmd.err" || rc=$?
    rm -f "/dev/shm$other"
    [ "$rc" -eq 1 ] || fail "restore onto another device model exited $rc: $(cat "$WORK/cmd.err")"
    grep -q "only restores onto the same model" "$WORK/cmd.err" || fail "unclear message: $(cat "$WORK/cmd.err")"
    note "refused: $(head -n 1 "$WORK/cmd.err")"
    assert_not_restored "$pid"
    "$GPUCKPT" restore -D "$WORK/save" || fail "restore on the right device failed"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum: $got, expected $ref"
    echo "ok: another device model refused; restored on the right one, $got"
    ;;
disk-full)
    small=$WORK/small
    mkdir -p "$small"
    mount -t tmpfs -o size=4M tcgpu-test "$small" || fail "cannot mount a tmpfs"
    MOUNTS+=("$small")
    # 1. the GPU image does not fit
    train_job
    rc=0; "$GPUCKPT" save "$pid" -D "$small/save" >"$WORK/cmd.out" 2>"$WORK/cmd.err" || rc=$?
    [ "$rc" -ne 0 ] || fail "save into a full disk succeeded"
    grep -qi "space" "$WORK/cmd.err" || fail "no ENOSPC in the message: $(cat "$WORK/cmd.err")"
    grep -q "the tree runs on as it was" "$WORK/cmd.err" || fail "save did not say the tree runs on: $(cat "$WORK/cmd.err")"
    note "save failed as expected: $(head -n 1 "$WORK/cmd.err")"
    [ -z "$(ls -A "$small")" ] || fail "a failed save left files: $(ls -A "$small")"
    "$GPUCKPT" status "$pid" | grep -q ': running' || fail "not running after the failed save"
    wait "$pid" || fail "the job failed after the failed save: $(tail -n 3 "$WORK/run.out")"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum after a failed save: $got, expected $ref"
    # 2. the GPU images fit, CRIU's dump (48 MiB of host memory) does not
    umount "$small" && mount -t tmpfs -o size=24M tcgpu-test "$small" || fail "cannot remount"
    "$GPU_TREE" --steps 60 --mb 2 --ballast-mb 48 >"$WORK/ref2.out" 2>&1 || fail "reference tree failed"
    ref2=$(checksum_of "$WORK/ref2.out")
    start_job "$WORK/run2.out" "$GPU_TREE" --steps 60 --mb 2 --ballast-mb 48 --sleep-ms 20
    pid=$BG
    wait_for_line "$WORK/run2.out" '^gpu_tree: parent'
    mapfile -t kids < <(children_of "$pid")
    KILL_PIDS+=("${kids[@]}")
    for k in "${kids[@]}"; do wait_for_socket "$k"; done
    rc=0; "$GPUCKPT" save "$pid" -D "$small/save" >"$WORK/cmd.out" 2>"$WORK/cmd.err" || rc=$?
    [ "$rc" -ne 0 ] || fail "save with no room for CRIU's images succeeded"
    grep -q "criu dump of the tree under $pid failed" "$WORK/cmd.err" || fail "not a CRIU failure: $(cat "$WORK/cmd.err")"
    grep -q "the tree runs on as it was" "$WORK/cmd.err" || fail "save did not say the tree runs on: $(cat "$WORK/cmd.err")"
    note "save failed in CRIU as expected: $(head -n 2 "$WORK/cmd.err" | tr '\n' ' ')"
    [ -z "$(ls -A "$small" | grep -v 'failed-dump.log')" ] || fail "a failed save left files: $(ls -A "$small")"
    for k in "${kids[@]}"; do
        "$GPUCKPT" status "$k" | grep -q ': running' || fail "worker $k not running after the failed save"
    done
    wait "$pid" || fail "the tree failed after the failed save: $(tail -n 3 "$WORK/run2.out")"
    got=$(checksum_of "$WORK/run2.out")
    [ "$got" = "$ref2" ] || fail "tree checksum after a failed save: $got, expected $ref2"
    echo "ok: disk full in the GPU images and in CRIU's dump; both trees ran on and finished right"
    ;;
*) fail "unknown mode $mode" ;;
esac
