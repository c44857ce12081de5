#!/usr/bin/env bash
# A producer and a consumer that share device memory (legacy CUDA IPC,
# progs/ipc_stream.c, as in ipc_group.sh) as one tcgpud gang (`gpuckpt run
# --job`): $IPC_TRIES (10) times, at a random moment, `gpuckpt suspend` of
# one of the two chosen at random suspends both (tcgpud asks both at once,
# so the producer's suspend waits for the consumer's), and `gpuckpt resume`
# of one chosen at random resumes both (the consumer's waits for the
# producer's). Every try must suspend and resume both; after each the
# consumer reads at the address it opened; at the end both checksums equal
# an uninterrupted run's. Prints each try's times.
#
# As test ipc-gang-mutual (progs/ipc_stream.c --mutual) each maps the
# other's memory: the consumer writes its answers into a block of its own
# that the producer opened; each suspend releases what it opened before it
# waits for the other to release its own, so the two suspend together.
# As ipc-vmm-gang-random and ipc-vmm-gang-mutual the same through shareable
# handles (--vmm: cuMemCreate memory whose descriptor the program passes
# over a Unix socket, as NCCL's cuMem path does).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

. "$(dirname "$0")/ipc_stream_lib.sh"

STEPS=${IPC_STEPS:-2500}
TRIES=${IPC_TRIES:-10}
MUTUAL=()
case $TEST_NAME in *mutual*) MUTUAL=(--mutual) ;; esac
case $TEST_NAME in *vmm*) MUTUAL=(--vmm "${MUTUAL[@]}") ;; esac
fail() { echo "FAIL: $*" >&2; tail -n 25 "$WORK/tcgpud.log" >&2; exit 1; }

write_config "
[gpu 0]
capacity = 1G

[project research]
priority = 10
members = *
"
start_tcgpud

phase "an uninterrupted run, on a device of its own"
mkdir -p "$WORK/ref"
SIMCUDA_SHM=$SIMCUDA_SHM-ref start_bg "$WORK/ref-p.out" "$STREAM" produce "$WORK/ref" "$STEPS" 0 "${MUTUAL[@]}"
refp=$BG
SIMCUDA_SHM=$SIMCUDA_SHM-ref start_bg "$WORK/ref-c.out" "$STREAM" consume "$WORK/ref" "$STEPS" "${MUTUAL[@]}"
refc=$BG

phase "producer and consumer, one gang"
start_bg "$WORK/p.out" "$GPUCKPT" run --project research --job ipc -- "$STREAM" produce "$WORK" "$STEPS" "$SLEEP_MS" "${MUTUAL[@]}"
ppid=$BG
start_bg "$WORK/c.out" "$GPUCKPT" run --project research --job ipc -- "$STREAM" consume "$WORK" "$STEPS" "${MUTUAL[@]}"
cpid=$BG
wait_registered "$ppid"
wait_registered "$cpid"
wait_line "$WORK/c.out" '^step 10 ' 60 "$cpid" || fail "the consumer did not start: $(tail_of "$WORK/c.out")"
addr=$(sed -n 's/^opened at //p' "$WORK/c.out")

pick() { if [ $((RANDOM % 2)) = 0 ]; then echo "$ppid"; else echo "$cpid"; fi; }

for i in $(seq 1 "$TRIES"); do
    s=$(last_step)
    [ "${s:-0}" -lt $((STEPS * 8 / 10)) ] || fail "only $((i - 1)) tries before the job neared its end (raise IPC_STEPS)"
    sleep_ms "$(random_ms 20 300)"
    who=$(pick)
    phase "try $i: suspend of the gang through the $(who_is "$who") after step ~$s"
    t0=$(date +%s%N)
    rc=0
    run_fg "try$i" 60 "$GPUCKPT" suspend "$who" || rc=$?
    sms=$(ms_since "$t0")
    [ "$rc" -eq 0 ] || fail "try $i: gpuckpt suspend of the gang through $who exited $rc after $sms ms: $(cat "$WORK/try$i.out")"
    wait_state "$ppid" suspended 30
    wait_state "$cpid" suspended 30
    s=$(last_step)
    by=$(pick)
    t0=$(date +%s%N)
    expect_exit 0 "$GPUCKPT" resume "$by"
    rms=$(ms_since "$t0")
    wait_state "$ppid" running 30
    wait_state "$cpid" running 30
    end=$((SECONDS + 60))
    while [ "$(last_step)" = "$s" ]; do
        [ "$SECONDS" -lt "$end" ] || fail "try $i: the consumer did not go past step $s: $(tail_of "$WORK/c.out")"
        sleep 0.02
    done
    [ "$(last_addr)" = "$addr" ] || fail "try $i: the consumer reads at $(last_addr), opened at $addr"
    echo "try $i: the gang suspended (through the $(who_is "$who")) in $sms ms, resumed (through the $(who_is "$by")) in $rms ms; the consumer reads at $addr"
done

stream_finish 180
echo "ok${MUTUAL:+ (${MUTUAL[*]})}: $TRIES gang suspends at random moments, each suspended and resumed both; checksums = uninterrupted"
