#!/usr/bin/env bash
# Legacy CUDA IPC of the memory tcgpu serves (lib/core/ipcmem.h), as PyTorch
# multiprocessing shares CUDA tensors: a producer and a consumer, both under
# `gpuckpt run` (progs/ipc_pair.c), tcgpu's default (TCGPU_IPC unset).
#
#   - the producer exports a cuMemAlloc block with cuIpcGetMemHandle (not
#     an address inside it); the consumer is refused a handle whose token
#     was changed (CUDA_ERROR_INVALID_VALUE), opens the real one, reads the
#     producer's bytes, opens it twice (same address, counted), writes; the
#     producer sees the writes;
#   - while the consumer maps the memory, checkpoint and suspend of either
#     process are refused (exit 4) naming the other's pid, and status shows
#     it; once the consumer closes, the producer suspends (its handle does
#     not open meanwhile) and resumes with its bytes intact;
#   - a consumer killed while it maps the memory releases the producer too.
. "$(dirname "$0")/lib.sh"

PAIR=$PROGS/ipc_pair
unset TCGPU_IPC
mkdir -p "$WORK/go"

blockers_of() { # PID: status --json's blockers
    json_get "$("$GPUCKPT" status "$1" --json)" blockers
}

wait_unblocked() { # PID: its blockers drop to 0 (5 s)
    local i
    for i in $(seq 1 250); do
        [ "$(blockers_of "$1")" = 0 ] && return 0
        sleep 0.02
    done
    fail "process $1 still has $(blockers_of "$1") blockers: $("$GPUCKPT" status "$1" --json)"
}

phase "producer exports"
start_bg "$WORK/producer.out" "$GPUCKPT" run -- "$PAIR" produce "$WORK"
ppid=$BG
wait_line "$WORK/producer.out" '^exported' 60 "$ppid" ||
    fail "the producer did not export: $(tail_of "$WORK/producer.out" 5)"
[ "$(blockers_of "$ppid")" = 0 ] || fail "an export nobody opened blocks a checkpoint"

phase "consumer opens, reads, writes"
start_bg "$WORK/consumer.out" "$GPUCKPT" run -- "$PAIR" consume "$WORK"
cpid=$BG
wait_for_line "$WORK/consumer.out" '^forged refused'
wait_for_line "$WORK/consumer.out" '^read ok'
wait_for_line "$WORK/consumer.out" '^double open ok'
wait_for_line "$WORK/consumer.out" '^wrote'
touch "$WORK/go/check-writes"
wait_for_line "$WORK/producer.out" '^writes seen'

phase "suspend of either is refused while the memory is shared"
expect_refused "$ppid" "of the producer" cuIpcGetMemHandle "process $cpid maps it"
expect_refused "$cpid" "of the consumer" cuIpcOpenMemHandle "process $ppid exported it"
[ "$(blockers_of "$ppid")" = 1 ] || fail "the producer's status: $("$GPUCKPT" status "$ppid" --json)"
[ "$(blockers_of "$cpid")" = 1 ] || fail "the consumer's status: $("$GPUCKPT" status "$cpid" --json)"

phase "consumer closes: the producer suspends and resumes"
touch "$WORK/go/close"
wait_for_line "$WORK/consumer.out" '^closed'
wait_unblocked "$ppid"
wait_unblocked "$cpid"
"$GPUCKPT" suspend "$ppid" >"$WORK/suspend.out" 2>&1 || fail "suspend after the close failed: $(cat "$WORK/suspend.out")"
# a handle of a suspended process does not open (its memory is off the device)
rm -f "$WORK/go/quit-consumer"
rc=0
run_fg consumer-suspended 30 "$GPUCKPT" run -- "$PAIR" consume "$WORK" || rc=$?
[ "$rc" = 1 ] && grep -q "cuIpcOpenMemHandle failed: CUDA_ERROR_INVALID_VALUE" "$WORK/consumer-suspended.out" &&
    grep -q "suspended" "$WORK/consumer-suspended.out" ||
    fail "opening a suspended process's memory: exit $rc, $(cat "$WORK/consumer-suspended.out")"
"$GPUCKPT" resume "$ppid" >"$WORK/resume.out" 2>&1 || fail "resume failed: $(cat "$WORK/resume.out")"
touch "$WORK/go/check-intact"
wait_for_line "$WORK/producer.out" '^intact'
touch "$WORK/go/quit-consumer"
wait_job "$cpid" 30 || fail "the consumer failed: $(tail_of "$WORK/consumer.out" 5)"

phase "a consumer killed while it maps the memory"
rm -f "$WORK/go/quit-consumer" "$WORK/go/close"
start_bg "$WORK/consumer2.out" "$GPUCKPT" run -- "$PAIR" consume "$WORK" --no-close
c2=$BG
wait_for_line "$WORK/consumer2.out" '^wrote'
expect_refused "$ppid" "of the producer" "process $c2 maps it"
# gpuckpt run execs the program: $c2 is the consumer itself
kill -9 "$c2"
wait "$c2" 2>/dev/null || true
wait_unblocked "$ppid"
"$GPUCKPT" suspend "$ppid" >"$WORK/suspend2.out" 2>&1 || fail "suspend after the consumer died failed: $(cat "$WORK/suspend2.out")"
"$GPUCKPT" resume "$ppid" >"$WORK/resume2.out" 2>&1 || fail "resume failed: $(cat "$WORK/resume2.out")"

touch "$WORK/go/quit"
wait_job "$ppid" 30 || fail "the producer failed: $(tail_of "$WORK/producer.out" 5)"
note "ok"
