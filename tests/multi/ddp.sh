#!/usr/bin/env bash
# examples/ddp (data-parallel training over NCCL: simnccl on simcuda), ranks
# as processes of one simulated machine, one GPU each (suite 'multi').
#
#   ddp.sh plain                 2 and 4 ranks without tcgpu: every rank
#                                prints the same checksum, and a second run
#                                the same again; ddp's launcher likewise
#   ddp.sh tcgpu                 the same with every rank under `gpuckpt run`:
#                                the checksum of the plain run
#   ddp.sh suspend-all [N...]    N ranks (2 4 8) under tcgpu, paused together
#                                between two steps (no collective in flight):
#                                `gpuckpt suspend` of every rank, then
#                                `gpuckpt resume` of every rank, $DDP_CYCLES
#                                times; the checksum of the plain run. Prints
#                                each rank's suspend and resume times.
#                                Each suspended rank holds no device memory.
#   ddp.sh release [N]           N (4) ranks suspended together between two
#                                steps, as suspend-all, first with
#                                TCGPU_NCCL_RELEASE=0 (the default), then with
#                                1: every rank releases its communicator's
#                                buffers with ncclCommSuspend (the gang's
#                                vote), so each suspended rank keeps at least
#                                N x NCCL_BUFFSIZE bytes less in host memory
#                                than when they are drained; taken back by
#                                ncclCommResume after the resume, and the
#                                plain run's checksum. A rank suspended alone
#                                (its peers run) releases nothing, and its
#                                peers go on after its resume.
#   ddp.sh release-held          2 ranks, TCGPU_NCCL_RELEASE=1, 3 times: rank
#                                0's suspend begins between two steps; while
#                                it waits for rank 1's vote, rank 1 goes on
#                                into the next all-reduce, which waits in
#                                host code for rank 0's hold; then rank 1 is
#                                suspended too, and both release the
#                                communicator. Resumed, rank 1's all-reduce
#                                must not reach the library before tcgpu has
#                                taken the communicator back (it answered
#                                "invalid usage" before: meson.build runs it
#                                with SIMNCCL_RESUME_DELAY_MS, so that the
#                                resumer comes late); the plain run's
#                                checksum at the end.
#   ddp.sh checkpoint-all        2 ranks under tcgpu, paused together between
#                                two steps: `gpuckpt checkpoint -D` of every
#                                rank, twice; each image verifies, and the job
#                                ends with the plain run's checksum
#   ddp.sh gang-random           $DDP_RANKS (4) ranks of one tcgpud gang
#                                (`gpuckpt run --job`), suspended by hand
#                                through tcgpud $DDP_TRIES (20) times at random
#                                moments, inside collectives too, while the job
#                                runs, and resumed: with tcgpu's consistent cut
#                                every try must suspend every rank; the plain
#                                run's checksum at the end. Prints each try's
#                                time. With NCCL_SHM_DISABLE=1, over simnccl's
#                                P2P transport: every rank maps its peers'
#                                slots through CUDA IPC, so the gang is also
#                                a group of processes sharing memory.
#                                DDP_EXTRA='--split 1 --own-suspend 7': the
#                                ranks also split their communicator by
#                                parity and all-reduce on each half every
#                                step (ncclCommSplit), and release and take
#                                back both communicators' memory themselves
#                                every 7 steps: the cut counts the halves
#                                too (with TCGPU_NCCL_RELEASE=1, gang
#                                suspends release both: ddp-gang-random-release).
#   ddp.sh gang-preempt          2 ranks of one tcgpud gang at priority 10,
#                                64 MiB of weights each; a priority-100 job
#                                needs GPU 0's memory mid-run: tcgpud
#                                suspends the whole gang wherever its ranks
#                                are (the cut), both ranks' memory is freed,
#                                the job runs, the gang resumes by itself,
#                                and ends with the uninterrupted checksum
#   ddp.sh suspend-mid-collective
#                                2 ranks: rank 0 suspended between steps, then
#                                rank 1 let go to the next all-reduce, which
#                                waits for rank 0. With tcgpu's cut (the
#                                default), rank 1 waits in host code before
#                                it issues the all-reduce, and its suspend
#                                succeeds at once; resumed in either order,
#                                the job ends with the plain run's checksum.
#                                Without it (TCGPU_NCCL_CUT=0) rank 1 queues
#                                the all-reduce, whose kernel waits for rank 0
#                                on the GPU, and its suspend fails within the
#                                gate's bound (TCGPU_GATE_TIMEOUT_MS, 2000 ms
#                                here) with exit 5, naming the stream, and
#                                leaves it running: what the cut prevents.
#   ddp.sh suspend-mid-exchange KIND
#                                the cut of suspend-mid-collective with
#                                `ddp --exchange KIND` (alltoall, gather,
#                                scatter): each step's first collective is
#                                NCCL 2.28's ncclAlltoAll, ncclGather or
#                                ncclScatter. First the checksums: a run with
#                                the exchange differs from one without, and
#                                under tcgpu equals the plain run. Then rank
#                                0 suspended between steps and rank 1 let
#                                go: it must wait in host code before its
#                                exchange (tcgpu counts it as a collective)
#                                and its suspend succeed within the gate's
#                                bound; resumed, the plain run's checksum.
#                                Were the exchange not counted, rank 1 would
#                                queue it, its kernel would wait for rank 0
#                                on the GPU, and the suspend would fail
#                                (exit 5).
#   ddp.sh p2p-random            3 ranks summing by ncclReduce, a chain of
#                                ncclSend/ncclRecv and a grouped ring
#                                exchange (`ddp --p2p 1`: counts differ from
#                                rank to rank), under tcgpu; $DDP_TRIES (12)
#                                times one or two ranks chosen at random are
#                                suspended at a random moment, alone (no
#                                gang), and resumed in a random order: every
#                                suspend succeeds, and the job ends with the
#                                all-reduce run's checksum.
#   ddp.sh cut-lost-rank         2 ranks; rank 1 stopped (SIGSTOP) between
#                                steps while rank 0 goes into the next
#                                all-reduce. A suspend of rank 0 fails within
#                                the bound (exit 5) naming rank 1, its pid and
#                                "stopped"; once rank 1 is killed, it fails
#                                at once (exit 1) naming it "exited"; each
#                                time rank 0 runs on as before.
#   ddp.sh threads-random        `ddp --threads 1`: every rank a thread of
#                                one process, the communicators made by
#                                ncclCommInitAll (as PyTorch's DataParallel
#                                makes them): first the same checksum as
#                                ranks in processes, then under tcgpu
#                                $DDP_TRIES (20) suspends of the process at
#                                random moments, inside collectives too,
#                                each within the gate's bound (2000 ms
#                                here), and resumes; the plain run's
#                                checksum at the end. Without the
#                                communicators counted (TCGPU_NCCL_CUT=0)
#                                a thread stopped before the all-reduce its
#                                sibling launched leaves that kernel
#                                waiting, and the suspend fails (exit 5).
. "$(dirname "$0")/../sim/lib.sh"

DDP=$B/examples/ddp/ddp
STEPS=${DDP_STEPS:-40}
MB=${DDP_MB:-2}
CYCLES=${DDP_CYCLES:-3}
export SIMCUDA_DEVICES=8
# one NCCL slot of 256 KiB (DDP_BUFFSIZE): a rank's receive buffers are nranks slots
export NCCL_BUFFSIZE=${DDP_BUFFSIZE:-$((256 << 10))}
T=$((120 * ${TCGPU_TEST_TIME_FACTOR:-1}))
read -ra EXTRA <<<"${DDP_EXTRA:-}"     # more ddp flags (gang-random)
RANK_PIDS=()

# The rendezvous segment of an id that some rank never joined (the last
# rank to join removes it; rank 0 removes the id file once all joined):
# its name is in the id (simnccl's struct snccl_id: the name at byte 16).
ddp_cleanup() {
    local f name
    for f in "$WORK"/*.id; do
        [ -f "$f" ] || continue
        name=$(dd if="$f" bs=1 skip=16 count=64 2>/dev/null | tr -d '\0')
        [[ $name =~ ^/simnccl-[A-Za-z0-9_.-]+$ ]] && rm -f "/dev/shm$name"
    done
    cleanup
}
trap ddp_cleanup EXIT

# start_ranks LABEL N [tcgpu] -- ARGS...: ranks 0..N-1 of a job in the
# background (under `gpuckpt run` with tcgpu), outputs $WORK/LABEL.rR.out;
# sets RANK_PIDS; with tcgpu, waits for each rank's control socket.
start_ranks() {
    local label=$1 n=$2 mode=$3 r
    shift 4
    local pre=()
    [ "$mode" = tcgpu ] && pre=("$GPUCKPT" run --)
    rm -f "$WORK/$label.id"
    RANK_PIDS=()
    for r in $(seq 0 $((n - 1))); do
        start_bg "$WORK/$label.r$r.out" "${pre[@]}" "$DDP" --rank "$r" --nranks "$n" \
            --id-file "$WORK/$label.id" --steps "$STEPS" --mb "$MB" "$@"
        RANK_PIDS+=("$BG")
    done
    if [ "$mode" = tcgpu ]; then
        for r in "${RANK_PIDS[@]}"; do wait_for_socket "$r"; done
    fi
}

# finish_ranks LABEL N: every rank ends (within T s) with status 0 and the
# same checksum; sets SUM to it. (Not in a command substitution: the ranks
# are children of this shell, which alone can wait for them.)
finish_ranks() {
    local label=$1 n=$2 r rc sum first=""
    for r in $(seq 0 $((n - 1))); do
        rc=0
        wait_job "${RANK_PIDS[$r]}" "$T" || rc=$?
        [ "$rc" -eq 0 ] || fail "$label: rank $r exited $rc: $(tail_of "$WORK/$label.r$r.out" 5)"
        sum=$(sed -n "s/^rank $r checksum: \([0-9a-f]\{16\}\)$/\1/p" "$WORK/$label.r$r.out")
        [ -n "$sum" ] || fail "$label: rank $r printed no checksum: $(tail_of "$WORK/$label.r$r.out")"
        [ -z "$first" ] || [ "$sum" = "$first" ] || fail "$label: rank $r checksum $sum, rank 0 $first"
        first=$sum
    done
    SUM=$first
}

# job LABEL N MODE ARGS...: a whole job to its end; sets SUM.
job() {
    local label=$1 n=$2 mode=$3
    shift 3
    phase "$label: $n ranks${mode:+ ($mode)} $*"
    start_ranks "$label" "$n" "$mode" -- "$@"
    finish_ranks "$label" "$n"
}

# reference N: REF, the checksum of an uninterrupted run of N ranks, no tcgpu.
reference() { job "ref$1" "$1" ""; REF=$SUM; }

# wait_all LABEL N PATTERN COUNT: every rank printed COUNT lines matching PATTERN.
wait_all() {
    local label=$1 n=$2 pat=$3 count=$4 r end=$((SECONDS + T))
    set_phase "$label: waiting for $count x '$pat' from $n ranks"
    for r in $(seq 0 $((n - 1))); do
        while [ "$(grep -c -- "$pat" "$WORK/$label.r$r.out")" -lt "$count" ]; do
            kill -0 "${RANK_PIDS[$r]}" 2>/dev/null || fail "$label: rank $r ended: $(tail_of "$WORK/$label.r$r.out")"
            [ "$SECONDS" -lt "$end" ] || fail "$label: rank $r: no $count x '$pat' in $T s: $(tail_of "$WORK/$label.r$r.out")"
            sleep 0.02
        done
    done
}

# op_all OP LABEL N CYCLE: `gpuckpt OP --json` of every rank at once; each
# must succeed. Records per rank: gpuckpt's wall time and the process's
# own last_total_ns (status after the operation) in $WORK/times.
op_all() {
    local op=$1 label=$2 n=$3 cycle=$4 r pids=() rc
    set_phase "$label: $op of $n ranks (cycle $cycle)"
    local g0
    g0=$(date +%s%N)
    for r in $(seq 0 $((n - 1))); do
        (
            t0=$(date +%s%N)
            rc=0
            "$GPUCKPT" "$op" "${RANK_PIDS[$r]}" --json --timeout 60 >"$WORK/$op.$r.json" 2>"$WORK/$op.$r.err" || rc=$?
            t1=$(date +%s%N)
            echo "$rc $(( (t1 - t0) / 1000 ))" >"$WORK/$op.$r.rc"
        ) &
        pids+=($!)
    done
    wait "${pids[@]}"
    echo "$n $op $(( ($(date +%s%N) - g0) / 1000 ))" >>"$WORK/gang"
    for r in $(seq 0 $((n - 1))); do
        read -r rc us <"$WORK/$op.$r.rc"
        [ "$rc" -eq 0 ] || fail "$label: $op of rank $r exited $rc: $(cat "$WORK/$op.$r.err" "$WORK/$op.$r.json")"
        ns=$(json_get "$(cat "$WORK/$op.$r.json")" status.last_total_ns)
        echo "$n $op $cycle $r $us $ns" >>"$WORK/times"
    done
}

# try_suspend I PID WHAT: try I, `gpuckpt suspend PID` (WHAT, for the
# message), must succeed within 60 s; sets ms to how long it took.
try_suspend() {
    local i=$1 pid=$2 what=$3 t0 rc=0
    t0=$(date +%s%N)
    run_fg "try$i" 60 "$GPUCKPT" suspend "$pid" || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ "$rc" -eq 0 ] || fail "try $i: gpuckpt suspend of $what exited $rc after $ms ms: $(cat "$WORK/try$i.out")"
}

# same_sums FILE N WANT WHAT: FILE has N lines "rank R checksum: X", every X WANT.
same_sums() {
    local sums
    sums=$(sed -n 's/^rank [0-9]* checksum: \([0-9a-f]\{16\}\)$/\1/p' "$1" | sort -u)
    [ "$(grep -c '^rank [0-9]* checksum' "$1")" -eq "$2" ] && [ "$sums" = "$3" ] ||
        fail "$4: checksums '$(echo $sums)', want $3"
}

suspend_all() {
    local n=$1 label=sa$1 ref got c step r
    reference "$n"
    ref=$REF
    note "$n ranks: uninterrupted checksum $ref"
    rm -f "$WORK/pause"
    start_ranks "$label" "$n" tcgpu -- --pause-file "$WORK/pause" --sleep-ms 2
    for c in $(seq 1 "$CYCLES"); do
        phase "$label: cycle $c: pausing every rank between two steps"
        touch "$WORK/pause"
        wait_all "$label" "$n" 'paused after step' "$c"
        # the ranks paused after the same step: no collective is in flight
        step=$(grep -h 'paused after step' "$WORK/$label".r*.out | awk -v c="$c" '{ n[$2]++; if (n[$2] == c) print $NF }' | sort -u)
        [ "$(echo "$step" | wc -l)" -eq 1 ] || fail "$label: ranks paused after different steps: $step"
        running=$(device_bytes_of "${RANK_PIDS[0]}")
        [ "$running" -gt 0 ] || fail "$label: simcuda-smi accounts no device memory to running rank 0"
        op_all suspend "$label" "$n" "$c"
        for r in "${RANK_PIDS[@]}"; do
            [ "$(status_of "$r" state)" = suspended ] || fail "$label: rank pid $r is $(status_of "$r" state), not suspended"
            held=$(device_bytes_of "$r")
            [ "$held" -le "$SC_HELD_RELEASED" ] || fail "$label: suspended rank pid $r holds $held bytes of device memory"
        done
        op_all resume "$label" "$n" "$c"
        rm -f "$WORK/pause"
        wait_all "$label" "$n" 'goes on' "$c"
        note "$label: cycle $c: suspended and resumed after step $step (rank 0 held $((running >> 20)) MiB, 0 suspended)"
    done
    finish_ranks "$label" "$n"
    got=$SUM
    [ "$got" = "$ref" ] || fail "$label: checksum $got after $CYCLES suspend/resume cycles, uninterrupted $ref"
    echo "ok: $n ranks, $CYCLES gang suspend/resume cycles between steps: checksum $got = uninterrupted"
}

# carried N: each rank's bytes kept in host memory by its last suspend
# (status image_bytes, as op_all recorded it), one per line.
carried() {
    local r
    for r in $(seq 0 $(($1 - 1))); do json_get "$(cat "$WORK/suspend.$r.json")" status.image_bytes; done
}

# times_table: per N and operation, over ranks and cycles: the process's own
# time (last_total_ns) and gpuckpt's wall time, mean and max, in ms; and the
# whole gang's (first gpuckpt started to last one done).
times_table() {
    echo "per rank:"
    echo "ranks  op       in-process ms (mean/max)  gpuckpt wall ms (mean/max)  samples"
    awk '{ k = $1 " " $2; n[k]++; w[k] += $5; p[k] += $6;
           if ($5 > wm[k]) wm[k] = $5; if ($6 > pm[k]) pm[k] = $6 }
         END { for (k in n) { split(k, a, " ");
                 printf "%-6s %-8s %9.1f / %-9.1f        %9.1f / %-9.1f      %d\n",
                   a[1], a[2], p[k] / n[k] / 1e6, pm[k] / 1e6, w[k] / n[k] / 1e3, wm[k] / 1e3, n[k] } }' \
        "$WORK/times" | sort -n -k1,1 -k2,2r
    echo "whole gang (all ranks at once):"
    echo "ranks  op       wall ms (mean/max)  cycles"
    awk '{ k = $1 " " $2; n[k]++; w[k] += $3; if ($3 > m[k]) m[k] = $3 }
         END { for (k in n) { split(k, a, " ");
                 printf "%-6s %-8s %7.1f / %-7.1f     %d\n", a[1], a[2], w[k] / n[k] / 1e3, m[k] / 1e3, n[k] } }' \
        "$WORK/gang" | sort -n -k1,1 -k2,2r
}

# suspend_r1 LABEL WORDS: `gpuckpt suspend` of rank 1 ($r1), whose
# all-reduce waits for the suspended rank 0, fails within the gate's bound
# (exit 5, ETIMEDOUT) saying WORDS, and rank 1 runs on.
suspend_r1() {
    local what=$1 words=$2 t0 rc=0 ms st
    phase "suspend rank 1 (pid $r1, $what) while its all-reduce waits for rank 0 (gate timeout $TCGPU_GATE_TIMEOUT_MS ms)"
    grep -q "^rank 1 checksum" "$WORK/$label.r1.out" && fail "rank 1 finished without rank 0"
    t0=$(date +%s%N)
    run_fg "suspend-r1-$what" 60 "$GPUCKPT" suspend "$r1" || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "suspend of rank 1 ($what): exit $rc after $ms ms: $(cat "$WORK/suspend-r1-$what.out")"
    [ "$rc" -ne 124 ] || fail "the suspend of rank 1 ($what) hung past 60 s (gate timeout $TCGPU_GATE_TIMEOUT_MS ms)"
    [ "$rc" -eq 5 ] || fail "the suspend of rank 1 ($what) exited $rc, expected 5: $(cat "$WORK/suspend-r1-$what.out")"
    [ "$ms" -lt $((TCGPU_GATE_TIMEOUT_MS + 10000)) ] || fail "the suspend of rank 1 ($what) took $ms ms, gate timeout $TCGPU_GATE_TIMEOUT_MS ms"
    { grep -q 'ETIMEDOUT' "$WORK/suspend-r1-$what.out" && grep -q -- "$words" "$WORK/suspend-r1-$what.out"; } ||
        fail "the failed suspend of rank 1 ($what) does not say ETIMEDOUT and '$words': $(cat "$WORK/suspend-r1-$what.out")"
    st=$(status_of "$r1" state)
    [ "$st" = running ] || fail "rank 1 is '$st' after its failed suspend ($what), expected running"
    [ "$(status_of "$r0" state)" = suspended ] || fail "rank 0 is $(status_of "$r0" state), not suspended"
}

# gang_start GPUS SLEEP_MS: tcgpud with GPUS GPUs of 1 GiB and projects
# research (10) and prod (100); the uninterrupted run's checksum in ref;
# then $n ranks of job $label, one gang (--job) in research, sleeping
# SLEEP_MS a step, registered (RANK_PIDS).
gang_start() {
    local gpus=$1 sleep=$2 g r conf=""
    . "$(dirname "$0")/../sim/tcgpud_lib.sh"
    for g in $(seq 0 $((gpus - 1))); do conf+=$'\n'"[gpu $g]"$'\n'"capacity = 1G"$'\n'; done
    start_research_prod "$conf"
    job "ref$n" "$n" "" "${EXTRA[@]}"     # (tcgpud_lib.sh has a reference() of its own)
    ref=$SUM
    RANK_PIDS=()
    for r in $(seq 0 $((n - 1))); do
        start_bg "$WORK/$label.r$r.out" "$GPUCKPT" run --project research --job ddp -- \
            "$DDP" --rank "$r" --nranks "$n" --id-file "$WORK/$label.id" --steps "$STEPS" --mb "$MB" \
            --sleep-ms "$sleep" "${EXTRA[@]}"
        RANK_PIDS+=("$BG")
    done
    for r in "${RANK_PIDS[@]}"; do wait_registered "$r"; done
}

# gang_wait STATE SECONDS: tcgpud reports every rank of the gang in STATE;
# a rank that does not get there fails the test with what each rank said
# last, whether it still runs, and tcgpud's log.
gang_wait() {
    local want=$1 secs=$2 r i s why="" end=$((SECONDS + $2))
    for r in "${!RANK_PIDS[@]}"; do
        while s=$(job_field "${RANK_PIDS[$r]}" state); [ "$s" != "$want" ]; do
            [ "$SECONDS" -lt "$end" ] && { sleep 0.05; continue; }
            for i in "${!RANK_PIDS[@]}"; do
                why+=$'\n'"rank $i (pid ${RANK_PIDS[$i]}, $(kill -0 "${RANK_PIDS[$i]}" 2>/dev/null && echo alive || echo gone), tcgpud: '$(job_field "${RANK_PIDS[$i]}" state)'): $(tail_of "$WORK/$label.r$i.out" 4)"
            done
            fail "rank $r (pid ${RANK_PIDS[$r]}) is '$s', not '$want', after $secs s:$why"$'\n'"tcgpud: $(tail -n 8 "$WORK/tcgpud.log")"
        done
    done
}

# mid_start: ranks of $label started and paused between two steps, rank 0
# suspended there; sets r0, r1 and k (the step they paused after).
mid_start() {
    rm -f "$WORK/pause" "$WORK/hold"
    start_ranks "$label" 2 tcgpu -- --pause-file "$WORK/pause" --hold-file "$WORK/hold" "${EXTRA[@]}"
    r0=${RANK_PIDS[0]} r1=${RANK_PIDS[1]}
    phase "$label: both ranks paused between two steps"
    touch "$WORK/pause"
    wait_all "$label" 2 'paused after step' 1
    k=$(sed -n 's/^rank 1 paused after step //p' "$WORK/$label.r1.out")
    phase "$label: suspend rank 0 (pid $r0) between steps"
    expect_exit 0 "$GPUCKPT" suspend "$r0"
    [ "$(status_of "$r0" state)" = suspended ] || fail "rank 0 is $(status_of "$r0" state) after its suspend"
}

# mid_cut COLL: with tcgpu's cut, rank 1, let go to the next step's first
# collective COLL while rank 0 is suspended ($label, mid_start's), waits
# for rank 0 in host code before issuing it, and suspends within the gate's
# bound; resumed in either order, the job ends with checksum $ref.
mid_cut() {
    local coll=$1 t0 ms
    mid_start
    phase "rank 1 goes on to the $coll of step $((k + 1)); tcgpu holds it in host code"
    touch "$WORK/hold"
    rm -f "$WORK/pause"
    sleep 1
    ! grep -q "^rank 1 \(step\|holds step\) $((k + 1))\$" "$WORK/$label.r1.out" ||
        fail "rank 1 issued the $coll of step $((k + 1)) while rank 0 was suspended: $(tail_of "$WORK/$label.r1.out")"
    phase "suspend rank 1 (pid $r1), held before its $coll"
    t0=$(date +%s%N)
    expect_exit 0 "$GPUCKPT" suspend "$r1"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ "$ms" -lt "$TCGPU_GATE_TIMEOUT_MS" ] || fail "the suspend of rank 1 took $ms ms (gate timeout $TCGPU_GATE_TIMEOUT_MS ms)"
    echo "suspend of rank 1 before its $coll: done in $ms ms"
    phase "resume rank 1 first: it still waits for rank 0, in host code"
    expect_exit 0 "$GPUCKPT" resume "$r1"
    sleep 0.5
    ! grep -q "^rank 1 \(step\|holds step\) $((k + 1))\$" "$WORK/$label.r1.out" ||
        fail "rank 1 issued its $coll while rank 0 was still suspended"
    [ "$(status_of "$r1" state)" = running ] || fail "rank 1 is $(status_of "$r1" state) after its resume"
    phase "resume rank 0: rank 1 issues its $coll"
    expect_exit 0 "$GPUCKPT" resume "$r0"
    wait_line "$WORK/$label.r1.out" "^rank 1 holds step $((k + 1))\$" 30 "$r1" ||
        fail "rank 1 did not go on once rank 0 resumed: $(tail_of "$WORK/$label.r1.out")"
    rm -f "$WORK/hold"
    finish_ranks "$label" 2
    [ "$SUM" = "$ref" ] || fail "checksum $SUM after the suspend before the $coll, uninterrupted $ref"
    echo "ok: with the cut, rank 1 waited for the suspended rank 0 in host code before its $coll, suspended in $ms ms; checksum $SUM = uninterrupted"
}

# lost_suspend WHAT EXIT WORDS: a suspend of rank 0 while rank 1 is WHAT
# fails with EXIT within the bound, saying WORDS; rank 0 runs on.
lost_suspend() {
    local what=$1 want=$2 words=$3 t0 rc=0 ms
    phase "suspend rank 0 (pid $r0) while rank 1 is $what"
    t0=$(date +%s%N)
    run_fg "lost-$what" 60 "$GPUCKPT" suspend "$r0" || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    echo "suspend of rank 0, rank 1 $what: exit $rc after $ms ms: $(cat "$WORK/lost-$what.out")"
    [ "$rc" -eq "$want" ] || fail "the suspend of rank 0 (rank 1 $what) exited $rc, expected $want"
    [ "$ms" -lt $((TCGPU_GATE_TIMEOUT_MS + 5000)) ] || fail "the suspend of rank 0 (rank 1 $what) took $ms ms"
    grep -qF -- "$words" "$WORK/lost-$what.out" || fail "the failed suspend does not name '$words'"
    [ "$(status_of "$r0" state)" = running ] || fail "rank 0 is $(status_of "$r0" state) after its failed suspend"
}

case ${1:?usage: ddp.sh plain|tcgpu|suspend-all [N...]|release [N]|release-held|checkpoint-all|gang-random|gang-preempt|suspend-mid-collective|suspend-mid-exchange alltoall|gather|scatter|p2p-random|cut-lost-rank|threads-random} in
plain)
    for n in 2 4; do
        job "a$n" "$n" ""
        a=$SUM
        job "b$n" "$n" ""
        b=$SUM
        [ "$a" = "$b" ] || fail "$n ranks: two runs, checksums $a and $b"
        echo "ok: $n ranks without tcgpu: checksum $a on every rank, twice"
    done
    # the launcher (no --rank): its ranks as children, a temporary id file
    run_fg launcher "$T" "$DDP" --nranks 4 --steps "$STEPS" --mb "$MB" || fail "the launcher exited $?: $(tail_of "$WORK/launcher.out" 5)"
    sums=$(sed -n 's/^rank [0-3] checksum: \([0-9a-f]\{16\}\)$/\1/p' "$WORK/launcher.out" | sort | uniq -c)
    [ "$(echo "$sums" | awk '{print $1 " " $2}')" = "4 $a" ] || fail "the launcher's 4 ranks: $sums, want 4 x $a"
    echo "ok: the launcher's 4 ranks: checksum $a"
    ;;
tcgpu)
    for n in 2 4; do
        reference "$n"
        ref=$REF
        job "t$n" "$n" tcgpu
        got=$SUM
        [ "$got" = "$ref" ] || fail "$n ranks under tcgpu: checksum $got, without $ref"
        echo "ok: $n ranks under tcgpu: checksum $got = without tcgpu"
    done
    ;;
suspend-all)
    shift
    : >"$WORK/times"
    : >"$WORK/gang"
    for n in "${@:-2 4 8}"; do
        for n1 in $n; do suspend_all "$n1"; done
    done
    times_table
    ;;
release)
    n=${2:-4}
    : >"$WORK/times"
    : >"$WORK/gang"
    export TCGPU_NCCL_RELEASE=0
    suspend_all "$n"
    mapfile -t kept < <(carried "$n")
    echo "with TCGPU_NCCL_RELEASE=0 (the buffers drained):"
    times_table
    : >"$WORK/times"
    : >"$WORK/gang"
    export TCGPU_NCCL_RELEASE=1
    suspend_all "$n"
    mapfile -t freed < <(carried "$n")
    echo "with TCGPU_NCCL_RELEASE=1 (the buffers released by ncclCommSuspend):"
    times_table
    bufs=$((n * NCCL_BUFFSIZE))
    for r in $(seq 0 $((n - 1))); do
        note "rank $r: ${kept[$r]} bytes carried with TCGPU_NCCL_RELEASE=0, ${freed[$r]} released"
        [ "${freed[$r]}" -gt 0 ] && [ $((kept[r] - freed[r])) -ge "$bufs" ] ||
            fail "rank $r carried ${freed[$r]} bytes with its communicator released, ${kept[$r]} without: not $bufs bytes (its receive buffers) less"
    done
    echo "ok: $n ranks suspended together: each released its communicator's $bufs bytes of buffers (carried ${kept[0]} -> ${freed[0]} bytes, rank 0) and took them back; checksum = uninterrupted"

    # one rank alone: no vote passes, its buffers are carried, peers go on
    label=alone
    rm -f "$WORK/pause"
    start_ranks "$label" 2 tcgpu -- --pause-file "$WORK/pause" --sleep-ms 2
    touch "$WORK/pause"
    wait_all "$label" 2 'paused after step' 1
    "$GPUCKPT" suspend "${RANK_PIDS[0]}" --json >"$WORK/alone.json" || fail "the suspend of rank 0 alone exited $?"
    alone=$(json_get "$(cat "$WORK/alone.json")" status.image_bytes)
    [ "$alone" -ge $((2 * NCCL_BUFFSIZE)) ] || fail "rank 0 suspended alone carried $alone bytes: its buffers were not drained"
    rm -f "$WORK/pause"
    sleep 0.3
    expect_exit 0 "$GPUCKPT" resume "${RANK_PIDS[0]}"
    finish_ranks "$label" 2
    reference 2
    [ "$SUM" = "$REF" ] || fail "checksum $SUM after a rank's suspend alone, uninterrupted $REF"
    echo "ok: a rank suspended alone carried its buffers ($alone bytes) and the job ended with the uninterrupted checksum"
    ;;
release-held)
    export TCGPU_NCCL_RELEASE=1
    reference 2
    ref=$REF
    label=held
    rm -f "$WORK/pause"
    start_ranks "$label" 2 tcgpu -- --pause-file "$WORK/pause" --sleep-ms 2
    r0=${RANK_PIDS[0]} r1=${RANK_PIDS[1]}
    for c in 1 2 3; do
        phase "$label: cycle $c: both ranks paused between two steps"
        touch "$WORK/pause"
        wait_all "$label" 2 'paused after step' "$c"
        k=$(sed -n 's/^rank 1 paused after step //p' "$WORK/$label.r1.out" | tail -n 1)
        phase "$label: cycle $c: rank 0's suspend waits for rank 1's vote; rank 1 goes on to step $((k + 1))"
        "$GPUCKPT" suspend "$r0" >"$WORK/s0.out" 2>&1 &
        s0=$!
        for _ in $(seq 200); do [ "$(status_of "$r0" state)" = suspending ] && break; sleep 0.01; done
        [ "$(status_of "$r0" state)" = suspending ] || fail "rank 0 is not suspending: $(status_of "$r0" state)"
        sleep 0.05                  # its hold comes at once after (ncclcut_hold)
        rm -f "$WORK/pause"
        wait_all "$label" 2 'goes on' "$c"
        sleep 0.05
        ! grep -q "^rank 1 step $((k + 1))\$" "$WORK/$label.r1.out" ||
            fail "rank 1 issued the all-reduce of step $((k + 1)) while rank 0 held the communicator"
        expect_exit 0 "$GPUCKPT" suspend "$r1"
        wait "$s0" || fail "the suspend of rank 0 failed: $(cat "$WORK/s0.out")"
        for r in 0 1; do
            [ "$(grep -c 'NCCL: 1 communicator(s) released with ncclCommSuspend, 0 carried' "$WORK/$label.r$r.out")" -ge "$c" ] ||
                fail "cycle $c: rank $r did not release its communicator: $(grep 'NCCL:' "$WORK/$label.r$r.out" | tail -n 2)"
        done
        phase "$label: cycle $c: resume rank 0, then rank 1, whose all-reduce waits for the communicator"
        expect_exit 0 "$GPUCKPT" resume "$r0"
        expect_exit 0 "$GPUCKPT" resume "$r1"
        wait_line "$WORK/$label.r1.out" "^rank 1 step $((k + 1))\$" 30 "$r1" ||
            fail "cycle $c: rank 1 did not go on after the resume: $(tail_of "$WORK/$label.r1.out" 4)"
    done
    finish_ranks "$label" 2
    [ "$SUM" = "$ref" ] || fail "checksum $SUM after 3 releases with an all-reduce held through them, uninterrupted $ref"
    echo "ok: 3 times, an all-reduce held in host code through its rank's suspend and release went on only once the communicator was back; checksum $SUM = uninterrupted"
    ;;
checkpoint-all)
    label=ck n=2
    reference "$n"
    ref=$REF
    rm -f "$WORK/pause"
    start_ranks "$label" "$n" tcgpu -- --pause-file "$WORK/pause" --sleep-ms 2
    for c in 1 2; do
        phase "$label: cycle $c: pausing every rank between two steps"
        touch "$WORK/pause"
        wait_all "$label" "$n" 'paused after step' "$c"
        for r in $(seq 0 $((n - 1))); do
            expect_exit 0 "$GPUCKPT" checkpoint "${RANK_PIDS[$r]}" -D "$WORK/img$c.$r"
            expect_exit 0 "$GPUCKPT" verify "$WORK/img$c.$r"
            note "rank $r: $(cat "$WORK/last.out")"
        done
        rm -f "$WORK/pause"
        wait_all "$label" "$n" 'goes on' "$c"
    done
    finish_ranks "$label" "$n"
    [ "$SUM" = "$ref" ] || fail "checksum $SUM after checkpoints of every rank, uninterrupted $ref"
    echo "ok: $n ranks checkpointed twice between steps, images verify: checksum $SUM = uninterrupted"
    ;;
gang-random)
    # the job sleeps 40 ms a step, so that it lasts for every try (each
    # about a second under load) and its reference run does not
    STEPS=${DDP_STEPS:-1000} MB=1 tries=${DDP_TRIES:-20} label=gang n=${DDP_RANKS:-4}
    gang_start 4 40
    wait_for_line "$WORK/$label.r0.out" '^rank 0 step 10$'
    done_ok=0 i=0
    while [ "$i" -lt "$tries" ]; do
        # stop trying once the job is near its end: it must still run
        last=$(grep -c '^rank 0 step' "$WORK/$label.r0.out")
        [ "$last" -lt $((STEPS * 8 / 10)) ] || break
        i=$((i + 1))
        sleep_ms "$(random_ms 20 300)"
        phase "$label: try $i: suspend of the gang through rank 0 (pid ${RANK_PIDS[0]}) after step ~$last"
        try_suspend "$i" "${RANK_PIDS[0]}" "the gang"
        gang_wait suspended 30
        expect_exit 0 "$GPUCKPT" resume "${RANK_PIDS[0]}"
        gang_wait running 30
        done_ok=$((done_ok + 1))
        echo "try $i: the gang of $n suspended in $ms ms, resumed"
    done
    [ "$i" -eq "$tries" ] || fail "only $i of $tries tries before the job neared its end (raise DDP_STEPS)"
    finish_ranks "$label" "$n"
    [ "$SUM" = "$ref" ] || fail "checksum $SUM after $i gang suspends at random moments, uninterrupted $ref"
    comms=1
    if [[ " ${EXTRA[*]} " == *" --split 1 "* ]]; then
        comms=2
        grep -q "NCCL: a communicator split from [0-9a-f]* (color 0) is counted as rank 0 of 2" "$WORK/$label.r0.out" ||
            fail "rank 0's split communicator is not counted: $(grep 'NCCL:' "$WORK/$label.r0.out" | sort | uniq -c)"
    fi
    if [ "${TCGPU_NCCL_RELEASE:-0}" = 1 ]; then
        released=$(grep -c "NCCL: $comms communicator(s) released with ncclCommSuspend, 0 carried" "$WORK/$label.r0.out" || true)
        [ "$released" -gt 0 ] || fail "no gang suspend released rank 0's $comms communicator(s): $(grep 'NCCL:' "$WORK/$label.r0.out" | sort | uniq -c)"
        note "rank 0's $comms communicator(s) released by $released of the $i gang suspends"
    fi
    echo "ok: $done_ok gang suspends of $n ranks at random moments, each suspended and resumed; checksum $SUM = uninterrupted"
    ;;
gang-preempt)
    # 64 MiB of weights and as much of gradients per rank: with the 900 MiB
    # job, GPU 0 (1 GiB) cannot hold both
    STEPS=${DDP_STEPS:-120} MB=64 label=pre n=2
    gang_start 2 20
    wait_for_line "$WORK/$label.r0.out" '^rank 0 step 20$'
    sleep 1.2                                  # older than min_runtime
    phase "$label: a priority-100 job needs GPU 0's memory"
    start_bg "$WORK/hi.out" "$GPUCKPT" run --project prod -- "$PROGS/compute_hog" "$PROGS/busy_kernel.so" 3 5000 0 900
    hi=$BG
    gang_wait suspended 60
    for r in "${RANK_PIDS[@]}"; do
        held=$(device_bytes_of "$r")
        [ "$held" -le "$SLACK" ] || fail "suspended rank $r still holds $held bytes"
    done
    at=$(grep -c '^rank 0 step' "$WORK/$label.r0.out")
    note "the gang was suspended after step ~$at for job $hi"
    wait "$hi" || fail "the high-priority job failed: $(tail_of "$WORK/hi.out")"
    gang_wait running 60
    finish_ranks "$label" "$n"
    [ "$SUM" = "$ref" ] || fail "checksum $SUM after the gang's preemption, uninterrupted $ref"
    echo "ok: a 2-rank gang preempted by tcgpud after step ~$at, memory freed on both GPUs, resumed by itself; checksum $SUM = uninterrupted"
    ;;
suspend-mid-collective)
    export TCGPU_GATE_TIMEOUT_MS=${TCGPU_GATE_TIMEOUT_MS:-2000}
    reference 2
    ref=$REF
    # with the cut: rank 1 waits for rank 0 in host code, and suspends
    label=mid
    mid_cut all-reduce

    # without the cut: rank 1's all-reduce waits on the GPU, and its suspend
    # fails within the bound
    label=nocut
    export TCGPU_NCCL_CUT=0
    mid_start
    unset TCGPU_NCCL_CUT
    phase "without the cut: rank 1 queues the all-reduce of step $((k + 1)), which waits for rank 0, and holds"
    touch "$WORK/hold"
    rm -f "$WORK/pause"
    wait_line "$WORK/$label.r1.out" "^rank 1 holds step $((k + 1))\$" 30 "$r1" ||
        fail "rank 1 did not queue step $((k + 1)): $(tail_of "$WORK/$label.r1.out")"
    suspend_r1 queued 'stream'
    phase "resume rank 0: the all-reduce completes"
    expect_exit 0 "$GPUCKPT" resume "$r0"
    rm -f "$WORK/hold"
    finish_ranks "$label" 2
    [ "$SUM" = "$ref" ] || fail "checksum $SUM after the failed mid-collective suspend, uninterrupted $ref"
    echo "ok: without the cut (TCGPU_NCCL_CUT=0), the suspend of rank 1 mid-collective fails within the gate's bound (exit 5), rank 1 runs on; checksum $SUM = uninterrupted"
    ;;
suspend-mid-exchange)
    kind=${2:?usage: ddp.sh suspend-mid-exchange alltoall|gather|scatter}
    export TCGPU_GATE_TIMEOUT_MS=${TCGPU_GATE_TIMEOUT_MS:-2000}
    EXTRA=(--exchange "$kind")
    reference 2
    none=$REF
    job "ref-$kind" 2 "" "${EXTRA[@]}"
    ref=$SUM
    [ "$ref" != "$none" ] || fail "--exchange $kind left the checksum as without it ($ref): the exchange does not show"
    job "t-$kind" 2 tcgpu "${EXTRA[@]}"
    [ "$SUM" = "$ref" ] || fail "--exchange $kind under tcgpu: checksum $SUM, without tcgpu $ref"
    echo "ok: --exchange $kind: checksum $ref (without the exchange $none), the same under tcgpu"
    label=mid-$kind
    mid_cut "$kind"
    ;;
p2p-random)
    STEPS=${DDP_STEPS:-400} MB=1 tries=${DDP_TRIES:-12} label=p2p n=3
    reference "$n"
    ref=$REF
    start_ranks "$label" "$n" tcgpu -- --p2p 1 --sleep-ms 40
    wait_for_line "$WORK/$label.r0.out" '^rank 0 step 5$'
    for i in $(seq 1 "$tries"); do
        last=$(grep -c '^rank 0 step' "$WORK/$label.r0.out")
        [ "$last" -lt $((STEPS * 8 / 10)) ] || fail "only $((i - 1)) of $tries tries before the job neared its end (raise DDP_STEPS)"
        a=$((RANDOM % n))
        b=$(( (a + 1 + RANDOM % (n - 1)) % n ))
        picked=("${RANK_PIDS[$a]}")
        [ $((RANDOM % 2)) -eq 0 ] || picked+=("${RANK_PIDS[$b]}")
        sleep_ms "$(random_ms 20 300)"
        phase "$label: try $i: suspend of ${#picked[@]} rank(s) alone (${picked[*]}) after step ~$last"
        t0=$(date +%s%N)
        for p in "${picked[@]}"; do
            rc=0
            run_fg "try$i.$p" 60 "$GPUCKPT" suspend "$p" || rc=$?
            [ "$rc" -eq 0 ] || fail "try $i: gpuckpt suspend $p exited $rc: $(cat "$WORK/try$i.$p.out")"
        done
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        sleep_ms "$(random_ms 0 200)"
        [ $((RANDOM % 2)) -eq 0 ] || picked=($(printf '%s\n' "${picked[@]}" | tac))
        for p in "${picked[@]}"; do expect_exit 0 "$GPUCKPT" resume "$p"; done
        who="rank $a"
        [ "${#picked[@]}" -eq 1 ] || who="ranks $a and $b"
        echo "try $i: $who suspended alone in $ms ms, resumed"
    done
    finish_ranks "$label" "$n"
    [ "$SUM" = "$ref" ] || fail "checksum $SUM after $tries suspends of ranks alone, all-reduce run $ref"
    echo "ok: $tries suspends of one or two ranks of a send/recv job at random moments, each suspended and resumed; checksum $SUM = the all-reduce run's"
    ;;
threads-random)
    export TCGPU_GATE_TIMEOUT_MS=${TCGPU_GATE_TIMEOUT_MS:-2000}
    STEPS=${DDP_STEPS:-3000} MB=1 tries=${DDP_TRIES:-20} n=${DDP_RANKS:-2}
    reference "$n"
    ref=$REF
    phase "threads: $n ranks as threads of one process, no tcgpu"
    start_bg "$WORK/thr-plain.out" "$DDP" --threads 1 --nranks "$n" --steps "$STEPS" --mb "$MB"
    wait_job "$BG" "$T" || fail "ddp --threads 1 failed: $(tail_of "$WORK/thr-plain.out" 5)"
    same_sums "$WORK/thr-plain.out" "$n" "$ref" "ddp --threads 1 (want: the ranks in processes')"
    label=thr
    start_bg "$WORK/$label.out" "$GPUCKPT" run -- "$DDP" --threads 1 --nranks "$n" --steps "$STEPS" \
        --mb "$MB" --sleep-ms 1
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/$label.out" '^rank 0 step 5$'
    for i in $(seq 1 "$tries"); do
        last=$(grep -c '^rank 0 step' "$WORK/$label.out")
        [ "$last" -lt $((STEPS * 8 / 10)) ] || fail "only $((i - 1)) of $tries tries before the job neared its end (raise DDP_STEPS)"
        sleep_ms "$(random_ms 10 200)"
        phase "$label: try $i: suspend of the process (pid $pid) after step ~$last"
        try_suspend "$i" "$pid" "the process"
        [ "$(status_of "$pid" state)" = suspended ] || fail "try $i: the process is $(status_of "$pid" state), not suspended"
        held=$(device_bytes_of "$pid")
        [ "$held" -le "$SC_HELD_RELEASED" ] || fail "try $i: the suspended process holds $held bytes of device memory"
        sleep_ms "$(random_ms 0 100)"
        expect_exit 0 "$GPUCKPT" resume "$pid"
        echo "try $i: suspended after step ~$last in $ms ms, resumed"
    done
    wait_job "$pid" "$T" || fail "ddp --threads 1 under tcgpu failed: $(tail_of "$WORK/$label.out" 5)"
    same_sums "$WORK/$label.out" "$n" "$ref" "after $tries suspends (want: uninterrupted)"
    echo "ok: $n ranks as threads of one process (ncclCommInitAll), $tries suspends at random moments, each resumed; checksum $ref = uninterrupted"
    ;;
cut-lost-rank)
    export TCGPU_GATE_TIMEOUT_MS=${TCGPU_GATE_TIMEOUT_MS:-2000}
    label=lost
    rm -f "$WORK/pause"
    start_ranks "$label" 2 tcgpu -- --pause-file "$WORK/pause"
    r0=${RANK_PIDS[0]} r1=${RANK_PIDS[1]}
    touch "$WORK/pause"
    wait_all "$label" 2 'paused after step' 1
    k=$(sed -n 's/^rank 0 paused after step //p' "$WORK/$label.r0.out")
    phase "rank 1 (pid $r1) stopped; rank 0 goes into the all-reduce of step $((k + 1))"
    kill -STOP "$r1"
    rm -f "$WORK/pause"
    wait_line "$WORK/$label.r0.out" "^rank 0 step $((k + 1))\$" 30 "$r0" ||
        fail "rank 0 did not issue step $((k + 1)): $(tail_of "$WORK/$label.r0.out")"
    lost_suspend stopped 5 "rank 1 (pid $r1, stopped)"
    phase "rank 1 killed"
    kill -KILL "$r1"
    wait_job "$r1" 30 || true
    lost_suspend exited 1 "rank 1 (pid $r1, exited)"
    kill -KILL "$r0"    # its all-reduce waits for a rank that is gone, as with NCCL alone
    echo "ok: a cut that a stopped rank never joins fails within the bound naming it, one with a killed rank at once, rank 0 running on each time"
    ;;
*)
    fail "unknown mode $1"
    ;;
esac
