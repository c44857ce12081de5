#!/usr/bin/env bash
# The fault campaign (not in CI; bounded): faults at random moments of every
# operation, on real jobs under libtcgpu.so on simcuda, and a table of what
# the jobs made of them.
#
#   TCGPU_BUILD_ROOT=build tests/faults/campaign.sh [TRIES]      (root: ENOSPC mounts a tmpfs)
#
# Each try starts a training job with a known checksum, injects one fault
# while an operation runs (its moment drawn at random), undoes what the
# fault left (resumes a job left suspended, repairs a damaged image, frees
# the device) and lets the job finish. A job that finishes with the checksum
# of an uninterrupted run survived; one that dies, hangs past 120 s or ends
# with another checksum is lost; a job or tcgpud that dies of a signal the
# campaign did not send crashed; "bit" counts the tries where the fault
# had an effect (the operation was cut short, stopped, refused or failed:
# a kill after the operation had finished has none). Faults:
#
#   kill-gpuckpt-*   kill -9 of gpuckpt during a suspend, a checkpoint (the
#                    image must then be whole or absent), a resume
#   kill-tcgpud      kill -9 of tcgpud during a preemption, restarted
#                    0-600 ms later (two jobs a try: the victim and the asker)
#   sigstop-*        SIGSTOP of the job during a suspend / a resume, SIGCONT
#                    0.1-1.5 s later
#   enospc-*         a checkpoint / a suspend to a small tmpfs filled at random
#   damaged-image    a suspend to an image, then one of 9 kinds of damage, a
#                    resume that must be refused, the image repaired, resumed
#   full-device      resume while another process holds the device (exit 8),
#                    until it lets go at a random moment
#
# TCGPU_FAULT_SEED replays a campaign; it prints its seed.
TRIES=${1:-${TCGPU_FAULT_TRIES:-5}}
export TEST_NAME=faults
. "$(dirname "$0")/../sim/lib.sh"
. "$(dirname "$0")/../sim/tcgpud_lib.sh"
set +e                                  # faults are the point: every result is looked at
SEED=${TCGPU_FAULT_SEED:-$$}
RANDOM=$SEED
ARGS=(--mb 64 --steps 500 --print-every 100 --seed 31)
JOB_TIMEOUT=120
declare -A N_TRIES N_SURVIVED N_LOST N_CRASHED N_BIT
HIT=0                                   # set by a fault that had an effect this try
KINDS=()
DETAILS=()

REF=$(reference job "${ARGS[@]}")
[ -n "$REF" ] || fail "no reference checksum"

# --- bookkeeping ---------------------------------------------------------------

# record KIND RESULT [WHY]: RESULT survived|lost|crashed; counts HIT (the
# fault had an effect: an operation was cut short, refused, or failed)
record() {
    [ -n "${N_TRIES[$1]:-}" ] || { KINDS+=("$1"); N_TRIES[$1]=0; N_SURVIVED[$1]=0; N_LOST[$1]=0; N_CRASHED[$1]=0; N_BIT[$1]=0; }
    N_TRIES[$1]=$(( N_TRIES[$1] + 1 ))
    N_BIT[$1]=$(( N_BIT[$1] + HIT ))
    HIT=0
    case "$2" in
        survived) N_SURVIVED[$1]=$(( N_SURVIVED[$1] + 1 )) ;;
        lost) N_LOST[$1]=$(( N_LOST[$1] + 1 )); DETAILS+=("$1: lost: ${3:-}") ;;
        crashed) N_CRASHED[$1]=$(( N_CRASHED[$1] + 1 )); DETAILS+=("$1: crashed: ${3:-}") ;;
    esac
}

state_of() { "$GPUCKPT" status "$1" --json --timeout 20 2>/dev/null | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }

# settle PID: wait until the job is not between states; resume it if suspended.
settle() {
    local i s
    for i in $(seq 1 300); do
        s=$(state_of "$1")
        case "$s" in running|"") return 0 ;; suspended) break ;; esac
        sleep 0.1
    done
    for i in $(seq 1 100); do
        "$GPUCKPT" resume "$1" -q --timeout 60 >/dev/null 2>&1 && return 0
        [ "$(state_of "$1")" = running ] && return 0
        sleep 0.2
    done
}

# outcome PID OUT [REF]: let the job end (bounded); sets RESULT (survived,
# lost, crashed) and WHY.
outcome() {
    local pid=$1 out=$2 ref=${3:-$REF} i rc
    RESULT=survived WHY=
    for i in $(seq 1 $((JOB_TIMEOUT * 10))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        RESULT=lost WHY="pid $pid hung (state $(state_of "$pid")): $(tail -n 2 "$out" | tr '\n' ' ')"
        kill -9 "$pid"
        wait "$pid" 2>/dev/null
        return
    fi
    wait "$pid"; rc=$?
    if [ "$rc" -gt 128 ]; then
        RESULT=crashed WHY="pid $pid died of signal $((rc - 128)): $(tail -n 2 "$out" | tr '\n' ' ')"
    elif [ "$rc" -ne 0 ] || [ "$(checksum_of "$out")" != "$ref" ]; then
        RESULT=lost WHY="pid $pid exit $rc, checksum '$(checksum_of "$out")': $(tail -n 2 "$out" | tr '\n' ' ')"
    fi
}

# finish KIND PID OUT [REF]: outcome, recorded under KIND.
finish() {
    outcome "$2" "$3" "${4:-}"
    record "$1" "$RESULT" "$WHY"
}

running() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null; }

job() {                                 # job OUT: start one; sets J
    start_bg "$1" "$GPUCKPT" run -- "$TRAIN" "${ARGS[@]}" --sleep-ms 5
    J=$BG
    wait_for_socket "$J"
    wait_for_line "$1" '^step 0 '
    sleep_ms "$(random_ms 0 400)"
}

# --- the faults ----------------------------------------------------------------

kill_gpuckpt() {                        # kill_gpuckpt OP (suspend|checkpoint|resume)
    local op=$1 out=$WORK/kg.out c img=$WORK/img-kg-$RANDOM
    job "$out"
    [ "$op" = resume ] && "$GPUCKPT" suspend "$J" -q >/dev/null 2>&1
    case "$op" in
        checkpoint) "$GPUCKPT" checkpoint "$J" -D "$img" -q >/dev/null 2>&1 & ;;
        *) "$GPUCKPT" "$op" "$J" -q >/dev/null 2>&1 & ;;
    esac
    c=$!
    sleep_ms "$(random_ms 0 250)"
    running "$c" && HIT=1
    kill -9 "$c" 2>/dev/null
    wait "$c" 2>/dev/null
    settle "$J"
    outcome "$J" "$out"
    # a checkpoint's image: whole or absent, once the job is done with it
    if [ "$op" = checkpoint ] && [ -e "$img" ] && ! "$GPUCKPT" verify "$img" >/dev/null 2>&1; then
        RESULT=lost WHY="a torn image at $img"
    fi
    rm -rf "$img"
    record "kill-gpuckpt-$op" "$RESULT" "$WHY"
}

kill_tcgpud() {
    local low high
    start_bg "$WORK/low.out" "$GPUCKPT" run --project research -- "$TRAIN" --mb 500 --steps 400 \
        --print-every 100 --seed 31 --sleep-ms 5
    low=$BG
    wait_registered "$low"
    wait_for_line "$WORK/low.out" '^step 0 '
    sleep 1.1
    start_bg "$WORK/high.out" "$GPUCKPT" run --project prod -- "$TRAIN" --mb 500 --steps 500 \
        --print-every 100 --seed 31 --sleep-ms 1
    high=$BG
    sleep_ms "$(random_ms 0 900)"
    kill -9 "$DAEMON"
    wait "$DAEMON" 2>/dev/null
    sleep_ms "$(random_ms 0 600)"
    start_tcgpud
    HIT=1
    finish kill-tcgpud "$high" "$WORK/high.out" "$REF_HIGH"
    grep -q "suspend (.*): done" "$WORK/low.out" && HIT=1
    finish kill-tcgpud "$low" "$WORK/low.out" "$REF_LOW"
    kill -0 "$DAEMON" 2>/dev/null || DAEMON_CRASHED="tcgpud died by itself: $(tail -n 3 "$WORK/tcgpud.log")"
}

sigstop() {                             # sigstop OP (suspend|resume)
    local op=$1 out=$WORK/ss.out c
    job "$out"
    [ "$op" = resume ] && "$GPUCKPT" suspend "$J" -q >/dev/null 2>&1
    "$GPUCKPT" "$op" "$J" -q --timeout 10 >/dev/null 2>&1 &
    c=$!
    sleep_ms "$(random_ms 0 200)"
    running "$c" && HIT=1
    kill -STOP "$J"
    sleep_ms "$(random_ms 100 1500)"
    kill -CONT "$J"
    wait "$c" 2>/dev/null
    settle "$J"
    finish "sigstop-$op" "$J" "$out"
}

enospc() {                              # enospc OP (checkpoint|suspend)
    local op=$1 out=$WORK/en.out rc
    rm -rf "$SMALL"/*
    dd if=/dev/zero of="$SMALL/fill" bs=64k count="$(random_ms 0 56)" status=none 2>/dev/null
    job "$out"
    rc=0; "$GPUCKPT" "$op" "$J" -D "$SMALL/img" -q >"$WORK/en.err" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] && HIT=1
    if [ "$rc" -eq 0 ]; then
        # it fitted after all: it must be a whole image
        "$GPUCKPT" verify "$SMALL/img" >/dev/null 2>&1 || record "enospc-$op" lost "a torn image that was reported written"
    elif [ -n "$(ls "$SMALL" | grep -v '^fill$')" ]; then
        record "enospc-$op" lost "a failed $op left $(ls "$SMALL" | tr '\n' ' ')"
    fi
    settle "$J"
    finish "enospc-$op" "$J" "$out"
}

# damage KIND DIR: one of 9 ways to spoil an image
damage() {
    local d=$2 size
    size=$(stat -c %s "$d/data.0")
    case "$1" in
        0) printf '\xa5' | dd of="$d/data.0" bs=1 seek=$(( RANDOM % size )) conv=notrunc status=none ;;
        1) printf '\xa5' | dd of="$d/manifest" bs=1 seek=$(( RANDOM % $(stat -c %s "$d/manifest") )) conv=notrunc status=none ;;
        2) truncate -s $(( RANDOM % size )) "$d/data.0" ;;
        3) truncate -s $(( RANDOM % $(stat -c %s "$d/manifest") )) "$d/manifest" ;;
        4) rm -f "$d/data.0" ;;
        5) : >"$d/manifest" ;;
        6) rm -f "$d/data.0"; mkfifo "$d/data.0" ;;
        7) rm -f "$d/data.0"; mkdir "$d/data.0" ;;
        8) rm -f "$d/manifest"; ln -s /etc/passwd "$d/manifest" ;;
    esac
}

damaged_image() {
    local out=$WORK/di.out img=$WORK/img-di rc kind=$(( RANDOM % 9 ))
    job "$out"
    rm -rf "$img" "$img.good"
    "$GPUCKPT" suspend "$J" -D "$img" -q >/dev/null 2>&1 || { settle "$J"; finish damaged-image "$J" "$out"; return; }
    cp -a "$img" "$img.good"
    damage "$kind" "$img"
    rc=0; "$GPUCKPT" resume "$J" -q --timeout 20 >"$WORK/di.err" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ] && [ "$kind" -ne 0 ]; then
        record damaged-image lost "damage $kind: a damaged image was resumed from"
    fi
    if [ "$rc" -ne 0 ]; then
        HIT=1
        [ "$(state_of "$J")" = suspended ] || DETAILS+=("damaged-image: damage $kind: after the refusal the job is '$(state_of "$J")'")
        rm -rf "$img"
        cp -a "$img.good" "$img"
    fi
    settle "$J"
    finish damaged-image "$J" "$out"
}

full_device() {
    local out=$WORK/fd.out holder rc tries=0 i
    job "$out"
    "$GPUCKPT" suspend "$J" -q >/dev/null 2>&1
    start_bg "$WORK/holder.out" "$TRAIN" --mb 900 --steps 100000 --print-every 100000 --sleep-ms 5
    holder=$BG
    for i in $(seq 1 100); do grep -q '^step 0 ' "$WORK/holder.out" && break; sleep 0.05; done
    ( sleep_ms "$(random_ms 200 3000)"; kill "$holder" ) &
    while :; do
        rc=0; "$GPUCKPT" resume "$J" -q >/dev/null 2>&1 || rc=$?
        [ "$rc" -eq 0 ] && break
        [ "$rc" -eq 8 ] && HIT=1
        if [ "$rc" -ne 8 ] || [ $(( ++tries )) -gt 100 ]; then
            DETAILS+=("full-device: resume exit $rc (want 0, or 8 while the device is full)")
            break
        fi
        sleep 0.1
    done
    wait "$holder" 2>/dev/null
    settle "$J"
    finish full-device "$J" "$out"
}

# --- the campaign --------------------------------------------------------------

t0=$(date +%s)
note "seed $SEED (TCGPU_FAULT_SEED), $TRIES tries a fault"
SMALL=$WORK/small
mkdir -p "$SMALL"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=4m tmpfs "$SMALL"; then
    trap 'umount "$SMALL" 2>/dev/null; cleanup' EXIT
else
    SMALL=
    note "not root: no ENOSPC faults"
fi
for i in $(seq 1 "$TRIES"); do
    for op in suspend checkpoint resume; do kill_gpuckpt "$op"; done
    for op in suspend resume; do sigstop "$op"; done
    if [ -n "$SMALL" ]; then for op in checkpoint suspend; do enospc "$op"; done; fi
    damaged_image
    full_device
done

REF_HIGH=$(reference high --mb 500 --steps 500 --print-every 100 --seed 31)
REF_LOW=$(reference low --mb 500 --steps 400 --print-every 100 --seed 31)
DAEMON_CRASHED=
start_research_prod
for i in $(seq 1 "$TRIES"); do kill_tcgpud; done

printf '\n%-24s %6s %5s %9s %5s %8s\n' fault tries bit survived lost crashed
tt=0 tb=0 ts=0 tl=0 tc=0
for k in "${KINDS[@]}"; do
    printf '%-24s %6d %5d %9d %5d %8d\n' "$k" "${N_TRIES[$k]}" "${N_BIT[$k]}" "${N_SURVIVED[$k]}" \
        "${N_LOST[$k]}" "${N_CRASHED[$k]}"
    tt=$((tt + N_TRIES[$k])) tb=$((tb + N_BIT[$k])) ts=$((ts + N_SURVIVED[$k]))
    tl=$((tl + N_LOST[$k])) tc=$((tc + N_CRASHED[$k]))
done
if [ -n "$DAEMON_CRASHED" ]; then tc=$((tc + 1)); DETAILS+=("$DAEMON_CRASHED"); fi
printf '%-24s %6d %5d %9d %5d %8d\n' total "$tt" "$tb" "$ts" "$tl" "$tc"
printf '(seed %s, %d s)\n' "$SEED" $(( $(date +%s) - t0 ))
for d in "${DETAILS[@]}"; do echo "  $d"; done
[ "$tl" -eq 0 ] && [ "$tc" -eq 0 ]
