#!/usr/bin/env bash
# tcgpu jobs in podman containers (runc, CRIU 4.1.1, tcgpu's CRIU plugin).
#
#   podman.sh export-import|two-restores|corrupt
#
# The image is built here from a root filesystem assembled here (the
# training example, its kernels, the shared libraries: no registry, no
# network); libtcgpu.so and the driver are bind-mounted in, as the NVIDIA
# Container Toolkit mounts libcuda (docs/kubernetes.md).
#
# export-import  the job checkpointed mid-run with --export, the container
#                removed, its GPU memory freed meanwhile; restored with
#                --import under another name: the checksum equals an
#                uninterrupted run's; the GPU image travelled in the export
# two-restores   two containers restored from one export at once: two
#                processes (pid 1 each in their containers, distinct host
#                pids), each driven by its host pid, both finish right
# corrupt        a flipped byte in the GPU image inside the export: the import
#                is refused, CRIU's log naming the image and the problem; no
#                container runs; the intact export then restores right
. "$(dirname "$0")/lib.sh"
need_podman

mode=${1:?mode}
TRAIN_ARGS=(--mb 64 --steps 300 --print-every 50)
tag=$(printf '%s' "$TEST_NAME-$$" | tr -c 'a-z0-9-' -)
IMAGE=localhost/tcgpu-test-$tag:1

ref=$("$TRAIN" "${TRAIN_ARGS[@]}" 2>&1 | sed -n 's/^checksum: *//p')
[ -n "$ref" ] || fail "reference run failed"
ensure_device
build_image "$IMAGE"

# checkpoint NAME TAR : podman's checkpoint with export, timed (ms in ckpt_ms).
checkpoint() {
    local t0=$(date +%s%N)
    podman container checkpoint --export "$2" --compress none "$1" >"$WORK/ckpt.out" 2>&1 ||
        fail "checkpoint of $1 failed: $(tail -n 3 "$WORK/ckpt.out")"
    ckpt_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
}

# import TAR NAME : restore --import under NAME, timed (ms in restore_ms); rc in rc.
# --keep: podman keeps CRIU's restore.log, which the tests read.
import() {
    local t0=$(date +%s%N)
    rc=0
    CONTAINERS+=("$2")
    podman container restore --import "$1" --name "$2" --keep >"$WORK/restore-$2.out" 2>&1 || rc=$?
    restore_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
}

# A running job, checkpointed with --export and removed: EXPORT is the tarball.
job_exported() {
    podman_train "job-$tag" "$IMAGE" "${TRAIN_ARGS[@]}" --sleep-ms 10
    wait_log "job-$tag" '^step 50 '
    local hpid
    hpid=$(container_pid "job-$tag")
    "$GPUCKPT" status "$hpid" | grep -q "process $hpid: running" || fail "gpuckpt on the host does not reach the container's job"
    held=$(device_used)
    EXPORT=$WORK/job.tar
    checkpoint "job-$tag" "$EXPORT"
    [ "$(device_used)" -eq 0 ] || fail "GPU memory not freed while checkpointed: $(device_used) bytes used"
    tar -tf "$EXPORT" >"$WORK/export.list"     # (not piped into grep -q: pipefail)
    grep -qx 'checkpoint/tcgpu/1/data.0' "$WORK/export.list" || fail "no GPU image in the export: $(grep tcgpu "$WORK/export.list")"
    grep -qx 'checkpoint/tcgpu.img' "$WORK/export.list" || fail "no plugin index in the export"
    podman logs "job-$tag" >"$WORK/job.log" 2>&1
    grep -q '^checksum' "$WORK/job.log" && fail "the job finished before the checkpoint: make it longer"
    podman rm "job-$tag" >/dev/null || fail "cannot remove the checkpointed container"
    note "checkpointed in $ckpt_ms ms, $held bytes of GPU memory freed, export $(stat -c %s "$EXPORT") bytes"
}

case "$mode" in
export-import)
    job_exported
    import "$EXPORT" "again-$tag"
    [ "$rc" -eq 0 ] || fail "restore --import failed: $(tail -n 3 "$WORK/restore-again-$tag.out")"
    hpid=$(container_pid "again-$tag")
    [ "$(smi_state "$hpid")" = running ] ||
        fail "driver state after the import: $(smi_state "$hpid"); the plugin: $(restore_plugin_lines "again-$tag")"
    [ "$(device_used)" -eq "$held" ] || fail "GPU memory after the import: $(device_used), before: $held"
    restore_plugin_lines "again-$tag" | grep -q "process $hpid (train): back on the GPU" ||
        fail "the restore log has no plugin line bringing the job back: $(restore_plugin_lines "again-$tag")"
    got=$(container_checksum "again-$tag")
    [ "$got" = "$ref" ] || fail "checksum after export and import: $got, uninterrupted: $ref"
    echo "ok: checkpoint --export ($ckpt_ms ms), restore --import ($restore_ms ms), checksum $got"
    ;;
two-restores)
    TRAIN_ARGS=(--mb 64 --steps 400 --print-every 50)     # long enough to see both run
    ref=$("$TRAIN" "${TRAIN_ARGS[@]}" 2>&1 | sed -n 's/^checksum: *//p')
    job_exported
    CONTAINERS+=("one-$tag")
    import "$EXPORT" "one-$tag" &
    first=$!
    import "$EXPORT" "two-$tag"
    wait "$first" || true
    for c in "one-$tag" "two-$tag"; do
        podman inspect -f '{{.State.Running}}' "$c" 2>/dev/null | grep -q true ||
            fail "$c is not running: $(tail -n 3 "$WORK/restore-$c.out")"
    done
    p1=$(container_pid "one-$tag"); p2=$(container_pid "two-$tag")
    [ "$p1" != "$p2" ] || fail "both containers report host pid $p1"
    for p in "$p1" "$p2"; do
        grep -q "^NSpid:[[:space:]]*$p[[:space:]]*1$" /proc/"$p"/status || fail "$p is not pid 1 of its container"
        "$GPUCKPT" status "$p" | grep -q "process $p: running" || fail "gpuckpt status $p: not running"
        [ "$(smi_state "$p")" = running ] || fail "simcuda-smi: $p is $(smi_state "$p")"
    done
    [ "$("$SMI" --query-compute-apps=pid,nspid --format=csv,noheader | grep -c ', 1$')" -eq 2 ] || fail "simcuda-smi does not show two processes: $("$SMI" -q)"
    for p in "$p1" "$p2"; do        # each has its own 64 MiB model back on the device
        [ "$(device_bytes_of "$p")" -ge $((64 << 20)) ] || fail "$p holds $(device_bytes_of "$p") bytes"
    done
    # one suspended by its host pid leaves the other alone
    "$GPUCKPT" suspend "$p1" >/dev/null || fail "suspend of $p1 failed"
    [ "$(smi_state "$p1")" = checkpointed ] && [ "$(smi_state "$p2")" = running ] ||
        fail "after suspending $p1: $p1 is $(smi_state "$p1"), $p2 is $(smi_state "$p2")"
    "$GPUCKPT" resume "$p1" >/dev/null || fail "resume of $p1 failed"
    for c in "one-$tag" "two-$tag"; do
        got=$(container_checksum "$c")
        [ "$got" = "$ref" ] || fail "$c: checksum $got, uninterrupted: $ref"
    done
    echo "ok: two containers restored from one export at once (host pids $p1, $p2), told apart, both $got"
    ;;
corrupt)
    job_exported
    mkdir -p "$WORK/x" && tar -C "$WORK/x" -xf "$EXPORT"
    data=$WORK/x/checkpoint/tcgpu/1/data.0
    size=$(stat -c %s "$data")
    printf '\x5a' | dd of="$data" bs=1 seek=$((size / 2)) conv=notrunc status=none
    tar -C "$WORK/x" -cf "$WORK/bad.tar" .
    import "$WORK/bad.tar" "bad-$tag"
    [ "$rc" -ne 0 ] || fail "the import of a corrupt GPU image succeeded"
    log=$(sed -n 's/.*log file: \([^ "]*restore.log\).*/\1/p' "$WORK/restore-bad-$tag.out" | head -n 1)
    [ -f "$log" ] || fail "podman names no restore log: $(cat "$WORK/restore-bad-$tag.out")"
    grep -aq "Error (tcgpu_plugin): the GPU image of process 1 (train), tcgpu/1, is refused: .*checksum mismatch.*data.0" "$log" ||
        fail "restore.log does not name the corrupt image: $(grep -a tcgpu_plugin "$log" | tail -n 3)"
    note "refused: $(grep -a 'Error (tcgpu_plugin)' "$log" | head -n 1)"
    podman inspect -f '{{.State.Running}}' "bad-$tag" 2>/dev/null | grep -q true && fail "the corrupt import runs"
    [ -z "$("$SMI" --query-compute-apps=pid --format=csv,noheader)" ] || fail "a process uses the GPU after the refused import: $("$SMI" -q)"
    podman rm -f "bad-$tag" >/dev/null 2>&1 || true
    import "$EXPORT" "good-$tag"
    [ "$rc" -eq 0 ] || fail "restore of the intact export failed: $(tail -n 3 "$WORK/restore-good-$tag.out")"
    got=$(container_checksum "good-$tag")
    [ "$got" = "$ref" ] || fail "checksum after the intact import: $got, uninterrupted: $ref"
    echo "ok: a corrupt GPU image in the export refused on import; the intact one restored, $got"
    ;;
*) fail "unknown mode $mode" ;;
esac
