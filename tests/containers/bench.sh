#!/usr/bin/env bash
# podman checkpoint --export / restore --import of a tcgpu job against
# podman's own checkpoint of the same container without tcgpu: a process
# holding the same bytes in host memory, which is what the raw-copy path
# (cuda-checkpoint + CRIU: the driver copies device memory into the process,
# CRIU writes its pages) would write. Same machine, same run, reps
# interleaved: each rep checkpoints and restores the job, then a process
# started afresh holding exactly the bytes that checkpoint's GPU image holds;
# medians with ranges; ratios tcgpu / raw. podman's default export
# compression (zstd) for both; page cache dropped before each restore.
#
#   bench.sh [MIB] [REPS]       (suite bench: containers-export)
. "$(dirname "$0")/lib.sh"
need_podman

mib=${1:-512}
reps=${2:-3}
export SIMCUDA_DEVICE_MEM=$(( mib * 2 + 1024 ))M
# the bigger device for the plugin's configuration too
sed -i "s/^SIMCUDA_DEVICE_MEM = .*/SIMCUDA_DEVICE_MEM = $SIMCUDA_DEVICE_MEM/" "$PLUGDIR/tcgpu_plugin.conf"
tag=bench-$$
IMAGE=localhost/tcgpu-test-$tag:1
HOST_HOLD=$B/tests/bench/host_hold
[ -x "$HOST_HOLD" ] || fail "no $HOST_HOLD (tests/bench)"
ensure_device
build_image "$IMAGE" "$HOST_HOLD"
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# cycle NAME TAR [KEEP_DIR] : checkpoint NAME with --export to TAR, remove it,
# restore it under NAME again; appends "ckpt_ms restore_ms export_bytes
# uncompressed_bytes" to $WORK/NAME.runs. KEEP_DIR: where to leave the GPU image.
cycle() {
    local t0 c r
    t0=$(date +%s%N)
    podman container checkpoint --export "$2" "$1" >"$WORK/ckpt.out" 2>&1 || fail "checkpoint of $1: $(tail -n 3 "$WORK/ckpt.out")"
    c=$(ms "$t0")
    podman rm "$1" >/dev/null
    if [ -n "${3:-}" ]; then
        rm -rf "$3" && mkdir -p "$3" && tar -C "$3" -xf "$2" checkpoint/tcgpu/1 || fail "no GPU image in $2"
    fi
    sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
    t0=$(date +%s%N)
    podman container restore --import "$2" --name "$1" >"$WORK/restore.out" 2>&1 || fail "restore of $1: $(tail -n 3 "$WORK/restore.out")"
    r=$(ms "$t0")
    echo "$c $r $(stat -c %s "$2") $(zstd -dc "$2" 2>/dev/null | wc -c)" >>"$WORK/$1.runs"
    rm -f "$2"
}

# start_raw IMAGE_DIR : the raw container, holding the bytes of the GPU image in IMAGE_DIR.
start_raw() {
    podman rm -f -t 0 "raw-$tag" >/dev/null 2>&1 || true
    rm -f "$WORK/ready/bytes"
    podman run -d "${PODMAN_RUN[@]}" --name "raw-$tag" --annotation org.criu.config="$CRIU_CONF" \
        -v "$1/checkpoint/tcgpu/1:/dev-image:ro" -v "$WORK/ready:/ready" \
        "$IMAGE" /opt/train/host_hold /dev-image /ready/bytes >/dev/null || fail "podman run of the raw container"
    for _ in $(seq 1 6000); do [ -s "$WORK/ready/bytes" ] && break; sleep 0.05; done
    [ -s "$WORK/ready/bytes" ] || fail "host_hold never got ready: $(podman logs "raw-$tag" 2>&1 | tail -n 3)"
}

# tcgpu: the training loop with MIB of device state
podman_train "gpu-$tag" "$IMAGE" --mb "$mib" --steps 1000000 --print-every 1 --sleep-ms 20
wait_log "gpu-$tag" '^step 3 '
held=$(device_used)
mkdir -p "$WORK/ready"
CONTAINERS+=("raw-$tag")
# each rep: the job, then a process holding exactly the bytes its checkpoint just wrote
for i in $(seq 1 "$reps"); do
    cycle "gpu-$tag" "$WORK/gpu.tar" "$WORK/dev"
    start_raw "$WORK/dev"
    cycle "raw-$tag" "$WORK/raw.tar"
done
podman logs "gpu-$tag" >"$WORK/gpu.log" 2>&1
grep -q "^step" "$WORK/gpu.log" || fail "the tcgpu job did not run on: $(tail -n 5 "$WORK/gpu.log")"

python3 - "$WORK/gpu-$tag.runs" "$WORK/raw-$tag.runs" "$mib" "$held" "$(cat "$WORK/ready/bytes")" <<'PY'
import statistics, sys
def load(p):
    rows = [list(map(int, l.split())) for l in open(p)]
    return [sorted(c) for c in zip(*rows)]
g, r = load(sys.argv[1]), load(sys.argv[2])
mib, held, raw_bytes = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def med(c): return statistics.median(c)
def rng(c, scale=1.0, fmt='%.2f'): return (fmt + ' (' + fmt + ' - ' + fmt + ')') % (med(c) * scale, c[0] * scale, c[-1] * scale)
print('podman checkpoint --export / restore --import, %d MiB model state (%d bytes on the device; raw: %d bytes in host memory), %d reps' % (mib, held, raw_bytes, len(g[0])))
print('| | tcgpu (plugin) | raw copy (no tcgpu) | ratio |')
print('| --- | --- | --- | --- |')
print('| checkpoint --export (s) | %s | %s | %.2f |' % (rng(g[0], 1e-3), rng(r[0], 1e-3), med(g[0]) / med(r[0])))
print('| restore --import (s) | %s | %s | %.2f |' % (rng(g[1], 1e-3), rng(r[1], 1e-3), med(g[1]) / med(r[1])))
print('| export, zstd (MiB) | %s | %s | %.2f |' % (rng(g[2], 2**-20, '%.1f'), rng(r[2], 2**-20, '%.1f'), med(g[2]) / med(r[2])))
print('| export, uncompressed (MiB) | %s | %s | %.2f |' % (rng(g[3], 2**-20, '%.1f'), rng(r[3], 2**-20, '%.1f'), med(g[3]) / med(r[3])))
for n, c in (('tcgpu_ckpt_s', g[0]), ('raw_ckpt_s', r[0]), ('tcgpu_restore_s', g[1]), ('raw_restore_s', r[1])):
    print('%s %.3f' % (n, med(c) / 1000))
print('tcgpu_export_bytes %d' % med(g[2]))
print('raw_export_bytes %d' % med(r[2]))
PY
