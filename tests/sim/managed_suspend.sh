#!/usr/bin/env bash
# Managed memory under suspend: tcgpu prefetches it to the host, so that the
# suspended job holds no device memory but its context (the driver owns
# managed pages; on a GPU they would otherwise stay on the device), and
# back to the device on resume. The job's kernels and its host code see
# every byte as before.
. "$(dirname "$0")/lib.sh"

context=$((32 << 20))          # SIMCUDA_CONTEXT_MEM (lib.sh)
slack=$((4 << 20))
managed=$((64 << 20))
MODULE=${SIMCUDA_TEST_MODULE:?the test kernels}

start_bg "$WORK/run.out" "$GPUCKPT" run -- "$PROGS/managed_hold" "$MODULE" 120
pid=$BG
wait_for_socket "$pid"
wait_for_line "$WORK/run.out" '^ready'
held=$(device_bytes_of "$pid")
[ "$held" -ge $((context + managed)) ] || fail "the running job holds only $held bytes"
for i in 1 2 3; do
    sleep_ms "$(random_ms 20 200)"
    "$GPUCKPT" suspend "$pid" --keep-context || fail "suspend $i failed"
    held=$(device_bytes_of "$pid")
    [ "$held" -le $((context + slack)) ] ||
        fail "suspended with its context kept, the job still holds $held bytes: managed memory stayed on the device"
    "$GPUCKPT" resume "$pid" || fail "resume $i failed"
    held=$(device_bytes_of "$pid")
    [ "$held" -ge $((context + managed)) ] || fail "after resume the managed memory is not back on the device ($held bytes)"
    note "cycle $i ok"
done
wait "$pid" || fail "the job failed: $(tail -n 5 "$WORK/run.out")"
grep -q "managed memory intact" "$WORK/run.out" || fail "the job did not finish its checks"
echo "ok: managed memory off the device while suspended, back after"
