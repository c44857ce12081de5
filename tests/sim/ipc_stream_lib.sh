# tests/sim/ipc_stream_lib.sh - what ipc_group.sh and ipc_gang.sh share about
# progs/ipc_stream.c's producer ($ppid, $WORK/p.out) and consumer ($cpid,
# $WORK/c.out), with their uninterrupted runs ($refp, $refc, $WORK/ref-*.out)
# on a machine of their own ($SIMCUDA_SHM-ref). Sourced after lib.sh.

STREAM=$PROGS/ipc_stream
SLEEP_MS=${IPC_SLEEP_MS:-8}
unset TCGPU_IPC

stream_cleanup() {
    rm -f "/dev/shm$SIMCUDA_SHM-ref"
    cleanup
}
trap stream_cleanup EXIT

ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# producer or consumer, by pid
who_is() { if [ "$1" = "$ppid" ]; then echo producer; else echo consumer; fi; }

# the consumer's last step, and the address it read at
last_step() { sed -n 's/^step \([0-9]*\) addr.*/\1/p' "$WORK/c.out" | tail -n 1; }
last_addr() { sed -n 's/^step [0-9]* addr \(0x[0-9a-f]*\)/\1/p' "$WORK/c.out" | tail -n 1; }

# stream_finish SECONDS: both sides and their uninterrupted runs end, and
# each side's checksum is its uninterrupted run's.
stream_finish() {
    local side got want
    phase "to the end"
    wait_job "$cpid" "$1" || fail "the consumer failed: $(tail_of "$WORK/c.out" 5)"
    wait_job "$ppid" "$1" || fail "the producer failed: $(tail_of "$WORK/p.out" 5)"
    wait_job "$refc" 120 || fail "the uninterrupted consumer failed: $(tail_of "$WORK/ref-c.out" 5)"
    wait_job "$refp" 120 || fail "the uninterrupted producer failed: $(tail_of "$WORK/ref-p.out" 5)"
    for side in p c; do
        got=$(checksum_of "$WORK/$side.out")
        want=$(checksum_of "$WORK/ref-$side.out")
        [ -n "$want" ] && [ "$got" = "$want" ] || fail "$side: checksum '$got', uninterrupted '$want'"
    done
}
