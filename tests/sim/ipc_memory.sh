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
#   - while the consumer maps the memory, a checkpoint of either process is
#     refused (exit 4) naming the other's pid, and status shows it; so is a
#     suspend of the producer while the consumer runs;
#   - the consumer suspends alone (what it opened is released); then the
#     producer suspends; the consumer's resume waits for the producer
#     (TCGPU_GATE_TIMEOUT_MS, 2 s here), fails with exit 8 naming it and
#     leaves the consumer suspended; once the producer resumed, the consumer
#     resumes and finds the same bytes at the same address;
#   - once the consumer closes, the producer suspends (its handle does
#     not open meanwhile) and resumes with its bytes intact;
#   - a consumer killed while it maps the memory releases the producer too;
#   - a consumer suspended while the producer exits: its resume fails at
#     once (exit 1) saying the memory is gone, and it stays suspended.
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
start_bg "$WORK/consumer.out" env TCGPU_GATE_TIMEOUT_MS=2000 "$GPUCKPT" run -- "$PAIR" consume "$WORK"
cpid=$BG
wait_for_line "$WORK/consumer.out" '^forged refused'
wait_for_line "$WORK/consumer.out" '^read ok'
wait_for_line "$WORK/consumer.out" '^double open ok'
wait_for_line "$WORK/consumer.out" '^wrote'
touch "$WORK/go/check-writes"
wait_for_line "$WORK/producer.out" '^writes seen'

phase "checkpoint of either, and suspend of the producer, are refused while the memory is shared"
expect_exit 4 "$GPUCKPT" checkpoint "$ppid" -D "$WORK/img-p"
grep -q "cuIpcGetMemHandle.*process $cpid maps it" "$WORK/last.out" || fail "the producer's refusal: $(cat "$WORK/last.out")"
expect_exit 4 "$GPUCKPT" checkpoint "$cpid" -D "$WORK/img-c"
grep -q "cuIpcOpenMemHandle.*process $ppid exported it" "$WORK/last.out" || fail "the consumer's refusal: $(cat "$WORK/last.out")"
[ ! -e "$WORK/img-p" ] && [ ! -e "$WORK/img-c" ] || fail "a refused checkpoint left an image"
expect_exit 4 "$GPUCKPT" suspend "$ppid"
grep -q "process $cpid maps this process's memory (CUDA IPC) and is running; suspend it first" "$WORK/last.out" ||
    fail "the producer's suspend refusal: $(cat "$WORK/last.out")"
[ "$(blockers_of "$ppid")" = 1 ] || fail "the producer's status: $("$GPUCKPT" status "$ppid" --json)"
[ "$(blockers_of "$cpid")" = 1 ] || fail "the consumer's status: $("$GPUCKPT" status "$cpid" --json)"

phase "the consumer suspends alone; its resume waits for the producer's"
"$GPUCKPT" suspend "$cpid" >"$WORK/suspend-c.out" 2>&1 || fail "the consumer's suspend: $(cat "$WORK/suspend-c.out")"
wait_unblocked "$ppid"
"$GPUCKPT" suspend "$ppid" >"$WORK/suspend-p.out" 2>&1 || fail "the producer's suspend: $(cat "$WORK/suspend-p.out")"
t0=$(date +%s%N)
expect_exit 8 "$GPUCKPT" resume "$cpid"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
grep -q "process $ppid is suspended; resume it first" "$WORK/last.out" || fail "the consumer's resume: $(cat "$WORK/last.out")"
[ "$ms" -ge 1900 ] && [ "$ms" -lt 6000 ] || fail "the consumer's resume failed after $ms ms (bound 2000 ms)"
note "the consumer's resume failed after $ms ms, waiting for the suspended producer"
[ "$(json_get "$("$GPUCKPT" status "$cpid" --json)" state)" = suspended ] || fail "the consumer is not suspended"
"$GPUCKPT" resume "$ppid" >"$WORK/resume-p.out" 2>&1 || fail "the producer's resume: $(cat "$WORK/resume-p.out")"
"$GPUCKPT" resume "$cpid" >"$WORK/resume-c.out" 2>&1 || fail "the consumer's resume: $(cat "$WORK/resume-c.out")"

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
expect_refused "$ppid" "of the producer" "process $c2 maps"
# gpuckpt run execs the program: $c2 is the consumer itself
kill -9 "$c2"
wait "$c2" 2>/dev/null || true
wait_unblocked "$ppid"
"$GPUCKPT" suspend "$ppid" >"$WORK/suspend2.out" 2>&1 || fail "suspend after the consumer died failed: $(cat "$WORK/suspend2.out")"
"$GPUCKPT" resume "$ppid" >"$WORK/resume2.out" 2>&1 || fail "resume failed: $(cat "$WORK/resume2.out")"

phase "a suspended consumer whose producer is gone: its resume fails at once, naming it"
rm -f "$WORK/go/quit-consumer"
start_bg "$WORK/consumer3.out" "$GPUCKPT" run -- "$PAIR" consume "$WORK" --no-close
c3=$BG
wait_for_line "$WORK/consumer3.out" '^wrote'
"$GPUCKPT" suspend "$c3" >"$WORK/suspend3.out" 2>&1 || fail "the consumer's suspend: $(cat "$WORK/suspend3.out")"
touch "$WORK/go/quit"
wait_job "$ppid" 30 || fail "the producer failed: $(tail_of "$WORK/producer.out" 5)"
t0=$(date +%s%N)
expect_exit 1 "$GPUCKPT" resume "$c3"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
grep -q "the memory opened from process $ppid (IPC) is gone" "$WORK/last.out" || fail "the resume: $(cat "$WORK/last.out")"
[ "$ms" -lt 1500 ] || fail "the resume took $ms ms to find the producer gone"
[ "$(json_get "$("$GPUCKPT" status "$c3" --json)" state)" = suspended ] || fail "the consumer is not suspended"
note "resume with the producer gone: exit 1 after $ms ms: $(cat "$WORK/last.out")"
kill -9 "$c3"
wait "$c3" 2>/dev/null || true
note "ok"
