#!/usr/bin/env bash
# Processes that share device memory (legacy CUDA IPC, lib/core/ipcmem.h)
# are suspended together: a PyTorch-multiprocessing-style producer and
# consumer (progs/ipc_stream.c) pass data through the producer's memory
# step by step, each checking every word and keeping a checksum, under
# `gpuckpt run`, while they are suspended at random moments:
#
#   - the consumer alone, three times, then resumed: its next step reads
#     the same bytes at the same address (printed each step);
#   - the consumer to an image in a directory that exists: the suspend
#     fails (EEXIST) after what it opened was released, opens it again and
#     the consumer runs on at the same address;
#   - the consumer, then the producer: while both are suspended
#     simcuda-smi accounts no device memory to either, and the GPU's used
#     memory is that of neither (the shared memory is freed); resumed
#     producer first;
#   - the producer first, while the consumer maps its memory and runs:
#     refused (exit 4) naming the consumer, within about a second;
#   - a checkpoint of either: refused (exit 4) naming the other, no image;
#   - the consumer then the producer again; the consumer's resume while the
#     producer is suspended fails within its bound (TCGPU_GATE_TIMEOUT_MS,
#     2000 ms here) with exit 8 naming the producer, leaves it suspended,
#     and succeeds once the producer resumed.
#
# At the end both checksums equal those of an uninterrupted run (without
# tcgpu, on a simulated device of its own, run meanwhile). Prints each
# suspend's and resume's time.
#
# `ipc_group.sh --vmm` (test ipc-vmm-group): the same through shareable
# handles (progs/ipc_stream.c --vmm: the producer's cuMemCreate memory,
# its descriptor passed over a Unix socket, imported and mapped by the
# consumer, as NCCL's cuMem path shares its buffers), and at the end
# (--orphan) the producer lets its block go while the consumer still maps
# it: both suspended and resumed, the consumer still finds its last answers
# there (the driver keeps memory while any process maps it; tcgpu keeps it
# the producer's to carry).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/ipc_stream_lib.sh"

STEPS=${IPC_STEPS:-1500}
MODE=("$@")                     # --vmm, or nothing (legacy IPC)
[ "${MODE[*]}" = --vmm ] && MODE+=(--orphan)

# timed OP PID: gpuckpt OP PID must succeed; prints its time
timed() {
    local t0 ms
    t0=$(date +%s%N)
    "$GPUCKPT" "$1" "$2" >"$WORK/$1.out" 2>&1 || fail "$1 of $2 failed: $(cat "$WORK/$1.out")"
    ms=$(ms_since "$t0")
    echo "$1 of $(who_is "$2"): $ms ms"
}

state_of() { json_get "$("$GPUCKPT" status "$1" --json)" state; }

# after a resume: the consumer goes past step $1, at the address it opened
goes_on_at_same_address() {
    local before=$1 end=$((SECONDS + 60))
    while [ "$(last_step)" = "$before" ]; do
        [ "$SECONDS" -lt "$end" ] || fail "the consumer did not go past step $before: $(tail_of "$WORK/c.out")"
        sleep 0.02
    done
    [ "$(last_addr)" = "$addr" ] || fail "the consumer reads at $(last_addr), opened at $addr"
}

# the job must still be running: tries past 80 % of it prove nothing
still_running() {
    local s
    s=$(last_step)
    [ "${s:-0}" -lt $((STEPS * 8 / 10)) ] || fail "the job is at step $s of $STEPS: raise IPC_STEPS"
}

phase "an uninterrupted run, on a device of its own"
mkdir -p "$WORK/ref"
SIMCUDA_SHM=$SIMCUDA_SHM-ref start_bg "$WORK/ref-p.out" "$STREAM" produce "$WORK/ref" "$STEPS" 0 "${MODE[@]}"
refp=$BG
SIMCUDA_SHM=$SIMCUDA_SHM-ref start_bg "$WORK/ref-c.out" "$STREAM" consume "$WORK/ref" "$STEPS" "${MODE[@]}"
refc=$BG
touch "$WORK/ref/go"            # --orphan: the uninterrupted consumer does not linger

phase "producer and consumer under tcgpu"
start_bg "$WORK/p.out" "$GPUCKPT" run -- "$STREAM" produce "$WORK" "$STEPS" "$SLEEP_MS" "${MODE[@]}"
ppid=$BG
start_bg "$WORK/c.out" env TCGPU_GATE_TIMEOUT_MS=2000 "$GPUCKPT" run -- "$STREAM" consume "$WORK" "$STEPS" "${MODE[@]}"
cpid=$BG
wait_line "$WORK/c.out" '^step 10 ' 60 "$cpid" || fail "the consumer did not start: $(tail_of "$WORK/c.out")"
addr=$(sed -n 's/^opened at //p' "$WORK/c.out")
[ -n "$addr" ] || fail "the consumer did not say where it opened the memory"

for i in 1 2 3; do
    phase "the consumer alone, try $i"
    sleep_ms "$(random_ms 20 300)"
    still_running
    timed suspend "$cpid"
    s=$(last_step)
    [ "$(state_of "$cpid")" = suspended ] && [ "$(state_of "$ppid")" = running ] || fail "states after the consumer's suspend"
    sleep_ms "$(random_ms 20 200)"
    timed resume "$cpid"
    goes_on_at_same_address "$s"
done

phase "a suspend of the consumer to an image it cannot write fails after the release: it runs on"
still_running
mkdir -p "$WORK/exists"
expect_exit 1 "$GPUCKPT" suspend "$cpid" -D "$WORK/exists"
grep -q EEXIST "$WORK/last.out" || fail "the failed suspend: $(cat "$WORK/last.out")"
[ "$(state_of "$cpid")" = running ] || fail "the consumer is $(state_of "$cpid") after a failed suspend"
goes_on_at_same_address "$(last_step)"
echo "failed suspend of consumer: $(cat "$WORK/last.out")"

phase "the consumer, then the producer; both suspended free the shared memory"
sleep_ms "$(random_ms 20 300)"
still_running
timed suspend "$cpid"
timed suspend "$ppid"
s=$(last_step)
for p in "$ppid" "$cpid"; do
    held=$(device_bytes_of "$p")
    [ "$held" -le "$SC_HELD_RELEASED" ] || fail "suspended $(who_is "$p") holds $held bytes of device memory"
done
used=$("$SMI" --query-gpu=memory.used_bytes --format=csv,noheader,nounits -i 0)
[ "$used" -le "$SC_HELD_RELEASED" ] || fail "GPU 0 has $used bytes in use while both are suspended"
note "both suspended: simcuda-smi: $used bytes used on GPU 0"
timed resume "$ppid"
timed resume "$cpid"
goes_on_at_same_address "$s"

phase "the producer first, while the consumer maps its memory and runs: refused"
sleep_ms "$(random_ms 20 300)"
still_running
t0=$(date +%s%N)
expect_exit 4 "$GPUCKPT" suspend "$ppid"
ms=$(ms_since "$t0")
grep -q "process $cpid maps this process's memory (CUDA IPC) and is running; suspend it first, or both together" \
    "$WORK/last.out" || fail "the producer's refusal: $(cat "$WORK/last.out")"
[ "$(state_of "$ppid")" = running ] || fail "the refused producer is $(state_of "$ppid")"
echo "suspend of producer refused in $ms ms: $(cat "$WORK/last.out")"

phase "a checkpoint of either is refused while the memory is shared, naming the other"
still_running
case " ${MODE[*]} " in
*" --vmm "*) exported=cuMemExportToShareableHandle imported=cuMemImportFromShareableHandle ;;
*) exported=cuIpcGetMemHandle imported=cuIpcOpenMemHandle ;;
esac
expect_exit 4 "$GPUCKPT" checkpoint "$ppid" -D "$WORK/img-p"
grep -q "$exported.*process $cpid maps it" "$WORK/last.out" || fail "the producer's refusal: $(cat "$WORK/last.out")"
expect_exit 4 "$GPUCKPT" checkpoint "$cpid" -D "$WORK/img-c"
grep -q "$imported.*process $ppid exported it" "$WORK/last.out" || fail "the consumer's refusal: $(cat "$WORK/last.out")"
[ ! -e "$WORK/img-p" ] && [ ! -e "$WORK/img-c" ] || fail "a refused checkpoint left an image"
goes_on_at_same_address "$(last_step)"

phase "the consumer's resume waits for the producer's, bounded"
still_running
timed suspend "$cpid"
timed suspend "$ppid"
s=$(last_step)
t0=$(date +%s%N)
expect_exit 8 "$GPUCKPT" resume "$cpid"
ms=$(ms_since "$t0")
grep -q "the memory opened from process $ppid (IPC) is not available: process $ppid is suspended; resume it first" \
    "$WORK/last.out" || fail "the consumer's failed resume: $(cat "$WORK/last.out")"
[ "$ms" -lt 6000 ] || fail "the consumer's resume failed after $ms ms (bound 2000 ms)"
[ "$(state_of "$cpid")" = suspended ] || fail "the consumer is $(state_of "$cpid") after its failed resume"
held=$(device_bytes_of "$cpid")
[ "$held" -le "$SC_HELD_RELEASED" ] || fail "the consumer holds $held bytes of device memory after its failed resume"
echo "resume of consumer while the producer is suspended: exit 8 after $ms ms: $(cat "$WORK/last.out")"
timed resume "$ppid"
timed resume "$cpid"
goes_on_at_same_address "$s"

case " ${MODE[*]} " in *" --orphan "*)
    phase "the producer lets its block go while the consumer maps it; both suspended and resumed"
    wait_line "$WORK/p.out" '^dropped' 120 "$ppid" || fail "the producer did not let go: $(tail_of "$WORK/p.out")"
    wait_line "$WORK/c.out" '^lingering' 120 "$cpid" || fail "the consumer did not linger: $(tail_of "$WORK/c.out")"
    timed suspend "$cpid"
    timed suspend "$ppid"
    used=$("$SMI" --query-gpu=memory.used_bytes --format=csv,noheader,nounits -i 0)
    [ "$used" -le "$SC_HELD_RELEASED" ] || fail "GPU 0 has $used bytes in use while both are suspended"
    timed resume "$ppid"
    timed resume "$cpid"
    touch "$WORK/go"
    wait_line "$WORK/c.out" '^still there' 60 "$cpid" || fail "the consumer's block: $(tail_of "$WORK/c.out")"
    ;;
esac
stream_finish 120
note "ok: checksums $(checksum_of "$WORK/p.out") / $(checksum_of "$WORK/c.out") = uninterrupted"
