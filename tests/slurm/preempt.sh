#!/usr/bin/env bash
# Preemption on a real Slurm (docs/slurm.md), jobs of an ordinary user (nobody)
# under tcgpu-slurm, on tests/slurm/cluster.sh's two-node cluster.
#
#   preempt.sh requeue   nobody's two-task job (one GPU per task, the tasks in
#                        lockstep through shared memory) fills a node's GPUs; a
#                        high-priority job arrives there; the low job is saved,
#                        requeued and restored (on the other node, which is free:
#                        its own simulated machine); both jobs end with the checksums
#                        of uninterrupted runs, the restart count is 1, and the
#                        saves are gone once the job completes. Prints the
#                        preemption's timeline and the save's size.
#   preempt.sh departments
#                        the same with department partitions (docs/cluster.md):
#                        a job borrowing a node (partition borrow) is saved and
#                        requeued for the job of the department that owns it
#                        (dept-a owns na, dept-b nb) and restored on the other
#                        node, where it is free
#   preempt.sh ddp       a 2-rank NCCL job (examples/ddp's launcher as the
#                        job's one task, its ranks on the node's two GPUs, as
#                        `srun torchrun` runs) is saved at preemption,
#                        requeued and restored on the other node (another
#                        simulated machine); both ranks end with the
#                        checksum of an uninterrupted run
#   preempt.sh cancel    a job saved and requeued, then cancelled while it waits:
#                        its saves are removed
#   preempt.sh corrupt   a job saved and requeued whose save is damaged while it
#                        waits: the restore refuses it and the job fails, saying
#                        so, instead of starting again from the beginning
#   preempt.sh suspend   scontrol suspend: the job's GPU memory is released before
#                        Slurm stops it (SIGTSTP, then SIGSTOP), and given back on
#                        scontrol resume; the job ends with the uninterrupted checksum
#   preempt.sh suspend-preempt-gres
#                        Slurm's PreemptMode=SUSPEND,GANG between partitions
#                        (partition_prio) for a job that needs the GPUs a
#                        lower-tier job holds: Slurm never suspends that job
#                        (a suspended job keeps its GRES), the high job waits
#                        on Resources until the low one is gone
#   preempt.sh requeue-by-hand
#                        `scontrol requeue` of a running two-task job (how admins
#                        drain nodes): it is saved as at a preemption and restored
#                        when it runs again; its steps continue where they were, its
#                        log says each of the program's lines once, and it ends with
#                        the checksums of an uninterrupted run
#   preempt.sh requeue-twice
#                        the same, requeued by hand twice: restored twice, the
#                        second time from the save made after the first restore
#   preempt.sh cancel-during-save
#                        scancel while the job is being saved at a preemption: the
#                        job ends, the epilog removes its directory only once the
#                        save is over, the log says the job was cancelled and nothing
#                        claims that CRIU or the save failed
. "$(dirname "$0")/cluster.sh"

mode=${1:?mode}
LOW_PART=low HIGH_PART=high
PAIR_ARGS=(--mb 8 --steps 160 --sleep-ms 60)

# submit_low NAME TASKS : nobody's job under tcgpu-slurm, on one node; prints its id.
submit_low() {
    local name=$1 tasks=$2
    cat >"$HOME_N/$name.sh" <<EOF
#!/bin/bash
srun tcgpu-slurm -- $PAIR ${PAIR_ARGS[*]} --shm $SHM_PREFIX-pair-\$SLURM_JOB_ID
EOF
    chmod 755 "$HOME_N/$name.sh"
    chown "$NOBODY" "$HOME_N/$name.sh"
    as_nobody env PATH="$B/slurm:$PATH" TCGPU_RUN_DIR="$HOME_N/run" \
        sbatch --parsable -p "$LOW_PART" -N1 -n"$tasks" --gpus-per-task=1 --requeue --open-mode=append \
        -J "$name" -D "$HOME_N" -o "$HOME_N/$name-%j.out" "$HOME_N/$name.sh"
}

# submit_high NODE : a high-priority job that wants NODE's two GPUs; prints its id.
# It computes what the low job does, only slower (the pause between steps
# changes no result): it still holds NODE when the low job may run again, so
# that one comes back on the other node.
submit_high() {
    sbatch --parsable -p "$HIGH_PART" -w "$1" -N1 -n2 --gpus-per-task=1 -J high -D "$W" \
        -o "$W/high-%j.out" --wrap "srun $PAIR ${PAIR_ARGS[*]} --sleep-ms 150 --shm $SHM_PREFIX-pair-\$SLURM_JOB_ID"
}

# run_low NAME : nobody's one-task job (submit_low), running and past its
# step 25; sets low, out (its log) and node.
run_low() {
    low=$(submit_low "$1" 1)
    out=$HOME_N/$1-$low.out
    wait_job_state "$low" RUNNING 30
    wait_file_line "$out" "rank 0 step 25" 60
    node=$(job_field "$low" NodeList)
}

# preempt LOW TASKS : LOW is mid-run; a high job takes its node; LOW saves and
# is requeued. Sets HIGH, SAVE_BYTES.
preempt() {
    local low=$1 tasks=$2 out
    out=$HOME_N/$(job_field "$low" JobName)-$low.out
    wait_job_state "$low" RUNNING 30
    wait_file_line "$out" "rank 0 step 25" 60
    LOW_NODE=$(job_field "$low" NodeList)
    # departments: the job of the department that owns that node (na: dept-a)
    [ "$HIGH_PART" = owner ] && HIGH_PART=dept-${LOW_NODE#n}
    HIGH=$(submit_high "$LOW_NODE")
    note "high-priority job $HIGH arrives on $LOW_NODE, where job $low runs"
    # a failed save says why (gpuckpt's and CRIU's lines), and the job runs on
    wait_line "$out" "every task saved: requeued job $low\|the save failed" 60 ||
        fail "'every task saved: requeued job $low' never appeared in $out in 60 s: $(tail_of "$out" 6)"
    grep -q "the save failed" "$out" &&
        fail "the save at preemption failed: $(grep -E '^(gpuckpt|  \()' "$out" | head -n 8)"
    SAVE_BYTES=$(du -scb "$SAVES/$low"/step*.run0 | tail -n 1 | cut -f1)
    SAVE_GPU=$(du -scb "$SAVES/$low"/step*.run0/gpu | tail -n 1 | cut -f1)
    SAVE_CRIU=$(du -scb "$SAVES/$low"/step*.run0/criu | tail -n 1 | cut -f1)
    local r
    for r in $(seq 0 $((tasks - 1))); do
        [ -d "$SAVES/$low/step0.task$r.run0" ] || fail "task $r has no save: $(ls "$SAVES/$low")"
    done
    wait_job_state "$low" PENDING 20
}

# save_process DIR: the pid of root's `gpuckpt save ... -D DIR...` (tcgpud's),
# if one runs: by its whole command line, which names this test's paths
# (one pgrep: fast enough to catch a save of a fraction of a second).
save_process() { pgrep -o -f "^$GPUCKPT save [0-9]+ --owner [0-9]+ -D $1"; }

# epilog_process: the pid of a running `tcgpu-slurm epilog` (this test's jobcomp script's).
epilog_process() { pgrep -o -f "^$TCGPU_SLURM epilog"; }

# wait_count FILE PATTERN N SECONDS: 0 once N lines of FILE match PATTERN.
wait_count() {
    local end=$((SECONDS + $4))
    set_phase "waiting for $3 lines '$2' in $1"
    until [ "$(grep -c -- "$2" "$1" 2>/dev/null)" -ge "$3" ]; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.2
    done
}

# submit_ddp NAME : nobody's 2-rank NCCL job, the launcher as one task with
# the node's two GPUs; prints its id.
submit_ddp() {
    local name=$1
    cat >"$HOME_N/$name.sh" <<EOF
#!/bin/bash
srun tcgpu-slurm -- $B/examples/ddp/ddp ${DDP_ARGS[*]} --sleep-ms 60
EOF
    chmod 755 "$HOME_N/$name.sh"
    chown "$NOBODY" "$HOME_N/$name.sh"
    as_nobody env PATH="$B/slurm:$PATH" TCGPU_RUN_DIR="$HOME_N/run" NCCL_BUFFSIZE=262144 \
        LD_LIBRARY_PATH="$B/simnccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        sbatch --parsable -p "$LOW_PART" -N1 -n1 --gpus-per-task=2 --requeue --open-mode=append \
        -J "$name" -D "$HOME_N" -o "$HOME_N/$name-%j.out" "$HOME_N/$name.sh"
}

case "$mode" in
ddp)
    DDP_ARGS=(--nranks 2 --steps 160 --mb 8)
    start_cluster
    SIMCUDA_SHM=$SHM_PREFIX-ref LD_LIBRARY_PATH="$B/simnccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        NCCL_BUFFSIZE=262144 "$B/examples/ddp/ddp" "${DDP_ARGS[@]}" >"$W/ddp-ref.out" 2>&1 ||
        fail "the reference run failed: $(tail_of "$W/ddp-ref.out")"
    rm -f /dev/shm"$SHM_PREFIX-ref"
    ref=$(sed -n 's/^rank 0 checksum: //p' "$W/ddp-ref.out")
    low=$(submit_ddp ddp)
    out=$HOME_N/ddp-$low.out
    wait_job_state "$low" RUNNING 30
    wait_file_line "$out" "rank 0 step 25" 60
    LOW_NODE=$(job_field "$low" NodeList)
    HIGH=$(submit_high "$LOW_NODE")
    note "high-priority job $HIGH arrives on $LOW_NODE, where NCCL job $low runs"
    wait_line "$out" "every task saved: requeued job $low\|the save failed" 60 ||
        fail "'every task saved: requeued job $low' never appeared in $out in 60 s: $(tail_of "$out" 6)"
    grep -q "the save failed" "$out" &&
        fail "the save at preemption failed: $(grep -E '^(gpuckpt|  \()' "$out" | head -n 8)"
    wait_job_state "$low" PENDING 20
    scontrol update NodeName="$LOW_NODE" State=DRAIN Reason=tcgpu-test
    wait_job_state "$low" COMPLETED 180
    grep -q "restored from its save" "$out" || fail "the NCCL job was not restored: $(tail_of "$out" 8)"
    again=$(job_field "$low" NodeList)
    [ "$again" != "$LOW_NODE" ] || fail "the job came back on $LOW_NODE, which is drained"
    for r in 0 1; do
        got=$(sed -n "s/^rank $r checksum: //p" "$out")
        [ "$got" = "$ref" ] || fail "rank $r: checksum '$got', uninterrupted $ref: $(tail_of "$out" 8)"
    done
    wait_job_state "$HIGH" COMPLETED 120
    echo "ok: a 2-rank NCCL job saved at preemption on $LOW_NODE, requeued, restored on $again; both ranks' checksum $ref = uninterrupted"
    ;;
requeue|departments)
    # departments: a job borrows a node; the job of the department that
    # owns it saves and requeues it, and it comes back on the other node
    [ "$mode" = departments ] && LOW_PART=borrow HIGH_PART=owner
    start_cluster
    pair_reference "${PAIR_ARGS[@]}"
    note "uninterrupted: rank 0 $REF0, rank 1 $REF1"
    low=$(submit_low low 2)
    out=$HOME_N/low-$low.out
    preempt "$low" 2
    [ "$(job_field "$low" Restarts)" = 1 ] || fail "restart count $(job_field "$low" Restarts) after the preemption"
    # the node is drained (say, for maintenance): the job comes back on the
    # other, another simulated machine, and the restore moves it there
    [ "$mode" = requeue ] && scontrol update NodeName="$LOW_NODE" State=DRAIN Reason=tcgpu-test
    if [ -n "${TCGPU_DEBUG_SCHED:-}" ]; then
        for i in $(seq 1 15); do squeue -h -o '%i %T %R %N' | tr '\n' ';' >&2; echo >&2; sleep 2; done
    fi
    wait_job_state "$HIGH" COMPLETED 120
    for r in 0 1; do
        got=$(sed -n "s/^rank $r checksum: //p" "$W/high-$HIGH.out")
        want=REF$r
        [ "$got" = "${!want}" ] || fail "high job rank $r: checksum '$got', uninterrupted ${!want}: $(tail_of "$W/high-$HIGH.out")"
    done
    wait_job_state "$low" COMPLETED 120
    grep -q "restored from its save" "$out" || fail "the low job was not restored: $(tail_of "$out" 8)"
    again=$(job_field "$low" NodeList)
    note "saved on $LOW_NODE, restored on $again"
    [ "$again" != "$LOW_NODE" ] || fail "the job came back on $LOW_NODE, which is $([ "$mode" = requeue ] && echo drained || echo "$HIGH_PART's, while the other was free")"
    grep -q "starting from the beginning" "$out" && fail "the low job started again from the beginning"
    for r in 0 1; do
        got=$(sed -n "s/^rank $r checksum: //p" "$out")
        want=REF$r
        [ "$got" = "${!want}" ] || fail "low job rank $r: checksum '$got', uninterrupted ${!want}: $(tail_of "$out" 8)"
    done
    [ "$(job_field "$low" Restarts)" = 1 ] || fail "restart count $(job_field "$low" Restarts), want 1"
    [ "$(job_field "$low" ExitCode)" = 0:0 ] || fail "low job exit code $(job_field "$low" ExitCode)"
    for i in $(seq 1 50); do [ -e "$SAVES/$low" ] || break; sleep 0.2; done
    [ -e "$SAVES/$low" ] && fail "the saves of completed job $low are still there: $(ls "$SAVES/$low")"
    # the timeline, from the job's own log (tcgpu-slurm's lines carry the time)
    t_sig=$(stamp "preempted: saving" "$out")
    t_saved=$(stamp "saved in" "$out")
    t_requeued=$(stamp "every task saved: requeued" "$out")
    t_again=$(stamp "restoring from" "$out")
    t_running=$(stamp "restored from its save" "$out")
    gpu_bytes=$(( 2 * ${PAIR_ARGS[1]} << 20 ))
    awk -v s="$t_sig" -v a="$t_saved" -v q="$t_requeued" -v g="$t_again" -v r="$t_running" 'BEGIN {
        printf "timeline: signal -> saved %.2f s -> requeued %.2f s -> running again %.2f s " \
               "(restored %.2f s later, on the other node)\n", a - s, q - s, g - s, r - g }'
    echo "save: $SAVE_BYTES bytes (GPU images $SAVE_GPU, CRIU images $SAVE_CRIU) for $gpu_bytes bytes of GPU memory in 2 tasks"
    echo "ok: two-task job ($LOW_PART) saved at preemption by $HIGH_PART, requeued, restored; both jobs' checksums right; restarts 1; saves removed"
    ;;
cancel)
    # Long enough to outlast preempt()'s wait for the save (60 s): at 400
    # steps (24 s) a slow preemption once let the job finish first, and the
    # test failed on what it does not test. It is cancelled once saved.
    PAIR_ARGS=(--mb 4 --steps 2000 --sleep-ms 60)
    start_cluster
    low=$(submit_low cancel 1)
    preempt "$low" 1
    scancel "$low"
    wait_job_state "$low" CANCELLED 20
    for i in $(seq 1 50); do [ -e "$SAVES/$low" ] || break; sleep 0.2; done
    [ -e "$SAVES/$low" ] && fail "a cancelled job's saves stay: $(ls "$SAVES/$low"; tail_of "$W/log/epilog.log")"
    grep -q "job $low is over: removed its saves" "$W/log/epilog.log" || fail "the epilog did not say so"
    echo "ok: a saved, requeued job cancelled while pending leaves no save"
    ;;
corrupt)
    PAIR_ARGS=(--mb 4 --steps 400 --sleep-ms 60)
    start_cluster
    low=$(submit_low corrupt 1)
    out=$HOME_N/corrupt-$low.out
    preempt "$low" 1
    # one byte of the GPU image's data, in the middle
    img=$(ls -d "$SAVES/$low"/step0.task0.run0/gpu/*/ | head -n 1)
    data=$(ls "$img"data* | head -n 1)
    size=$(stat -c %s "$data")
    printf '\xa5' | dd of="$data" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
    wait_job_state "$HIGH" COMPLETED 60
    wait_job_state "$low" FAILED 120
    grep -q "could not be restored (above): the job fails rather than start again" "$out" ||
        fail "no clear message: $(tail_of "$out" 8)"
    grep -q "stored checksum mismatch" "$out" || fail "the reason is not said: $(tail_of "$out" 8)"
    [ "$(job_field "$low" ExitCode)" = 7:0 ] || fail "exit code $(job_field "$low" ExitCode), want 7 (corrupt)"
    grep -q "started .* as pid" <(sed -n '/restoring from/,$p' "$out") &&
        fail "the job started again from the beginning after a refused restore"
    grep -q "rank 0 checksum" "$out" && fail "the job ran to the end: $(tail_of "$out" 8)"
    echo "ok: a damaged save is refused at restore and the job fails saying why"
    ;;
suspend)
    PAIR_ARGS=(--mb 32 --steps 200 --sleep-ms 40)
    start_cluster
    SIMCUDA_SHM=$SHM_PREFIX-ref "$PAIR" --peers 1 --shm $SHM_PREFIX-pair-ref1 "${PAIR_ARGS[@]}" >"$W/ref.out" 2>&1 ||
        fail "reference run failed: $(tail_of "$W/ref.out")"
    rm -f /dev/shm"$SHM_PREFIX"-ref
    ref=$(sed -n 's/^rank 0 checksum: //p' "$W/ref.out")
    run_low susp
    pid=$(sed -n 's/.*started .* as pid \([0-9]*\).*/\1/p' "$out" | head -n 1)
    # the job's rows: "PID, USED_BYTES, STATE" per GPU it is on
    smi() {
        SIMCUDA_SHM=$SHM_PREFIX-$node "$B/simcuda/simcuda-smi" \
            --query-compute-apps=pid,used_memory_bytes,checkpoint_state --format=csv,noheader,nounits |
            awk -F', ' -v p="$pid" '$1 == p'
    }
    held=$(smi | awk -F', ' '{ s += $2 } END { print s + 0 }')
    [ "${held:-0}" -ge $((32 << 20)) ] || fail "the job holds ${held:-nothing} on its GPU before the suspend: $(smi)"
    scontrol suspend "$low"
    wait_job_state "$low" SUSPENDED 10
    # srun is stopped too, so the job's log says nothing until the resume: ask the GPU
    for i in $(seq 1 100); do
        smi | grep -v -q ", 0, checkpointed$" || break
        sleep 0.1
    done
    smi | grep -v -q ", 0, checkpointed$" && fail "the suspended job still holds GPU memory: $(smi)"
    # Slurm's SIGSTOP follows its SIGTSTP
    for i in $(seq 1 100); do grep -q "^State:.*T (stopped)" /proc/"$pid"/status && break; sleep 0.1; done
    grep -q "^State:.*T (stopped)" /proc/"$pid"/status || fail "Slurm did not stop the program: $(grep State /proc/$pid/status)"
    scontrol resume "$low"
    wait_file_line "$out" "resumed by Slurm: back on the GPU" 20
    grep -q "suspended by Slurm: GPU memory released" "$out" || fail "no suspend line: $(tail_of "$out" 6)"
    note "$(grep -m1 'GPU memory released' "$out" | sed 's/^[^:]*: //')"
    wait_job_state "$low" COMPLETED 60
    got=$(sed -n 's/^rank 0 checksum: //p' "$out")
    [ "$got" = "$ref" ] || fail "checksum after suspend/resume '$got', uninterrupted $ref"
    echo "ok: scontrol suspend released the job's GPU memory, resume gave it back; checksum $got"
    ;;
suspend-preempt-gres)
    # Slurm's own SUSPEND preemption (partition_prio, PreemptMode=SUSPEND,GANG,
    # OverSubscribe=FORCE:1 as Slurm's preempt.html sets it up) for a job
    # that needs the GPUs a lower-tier job holds: Slurm keeps a suspended
    # job's GRES allocated, so it never suspends one to give its GPU away.
    cluster_conf_policy() {
        cat <<CONF
PreemptType=preempt/partition_prio
PreemptMode=SUSPEND,GANG
PartitionName=low Nodes=$NODE_LIST Default=YES PriorityTier=1 PreemptMode=SUSPEND OverSubscribe=FORCE:1
PartitionName=high Nodes=$NODE_LIST PriorityTier=10 PreemptMode=OFF OverSubscribe=FORCE:1
CONF
    }
    PAIR_ARGS=(--mb 32 --steps 1000 --sleep-ms 40)
    start_cluster
    run_low susp
    high=$(submit_high "$node")
    set_phase "high job $high on $node, where job $low holds a GPU (15 s)"
    for i in $(seq 1 15); do
        sleep 1
        st_low=$(job_field "$low" JobState) st_high=$(job_field "$high" JobState)
        [ "$st_low" = RUNNING ] && [ "$st_high" = PENDING ] ||
            fail "after $i s: job $low $st_low, job $high $st_high ($(job_field "$high" Reason)): Slurm suspended a job to give its GPU away?"
    done
    note "after 15 s: job $low RUNNING, job $high PENDING ($(job_field "$high" Reason))"
    scancel "$low"
    wait_job_state "$high" RUNNING 30
    echo "ok: PreemptMode=SUSPEND,GANG does not suspend a job to give its GPUs to a higher tier (job $high pending on Resources until job $low was cancelled, then ran): Slurm-driven preemption of GPU jobs is REQUEUE"
    ;;
requeue-by-hand|requeue-twice)
    # 240 steps of 60 ms: long enough to be requeued twice, each time with
    # steps left to run after the restore
    PAIR_ARGS=(--mb 8 --steps 240 --sleep-ms 60)
    times=1
    [ "$mode" = requeue-twice ] && times=2
    start_cluster
    pair_reference "${PAIR_ARGS[@]}"
    note "uninterrupted: rank 0 $REF0, rank 1 $REF1"
    low=$(submit_low byhand 2)
    out=$HOME_N/byhand-$low.out
    wait_job_state "$low" RUNNING 30
    for n in $(seq 1 "$times"); do
        # the first time mid-run, the second once the restored job has moved on
        at=$(( n * 50 ))
        wait_file_line "$out" "rank 0 step $at\$" 90
        phase "scontrol requeue $low, time $n (at step $at)"
        scontrol requeue "$low"
        wait_count "$out" "saved in\|the save failed\|the program gets it" $(( 2 * n )) 30 ||
            fail "no save after the requeue: $(tail_of "$out" 6)"
        grep -q "the save failed" "$out" && fail "the save failed: $(tail_of "$out" 8)"
        grep -q "the program gets it" "$out" &&
            fail "the requeue was taken for the end of the job: $(grep 'the program gets it' "$out" | head -n 2)"
        wait_job_state "$low" RUNNING 90
        wait_count "$out" "restored from its save" $(( 2 * n )) 60 ||
            fail "the job was not restored (both tasks, time $n): $(tail_of "$out" 8)"
    done
    wait_job_state "$low" COMPLETED 120
    grep -q "starting from the beginning" "$out" && fail "the job started again from the beginning: $(tail_of "$out" 8)"
    for r in 0 1; do
        got=$(sed -n "s/^rank $r checksum: //p" "$out")
        want=REF$r
        [ "$got" = "${!want}" ] || fail "rank $r: checksum '$got', uninterrupted ${!want}: $(tail_of "$out" 8)"
        # said once each, in order: the program's lines were not said again
        # by a restarted run, and its steps went on from where they were
        [ "$(grep -c "^rank $r: .* MiB on its GPU" "$out")" = 1 ] ||
            fail "rank $r started $(grep -c "^rank $r: .* MiB on its GPU" "$out") times: the log repeats the first run's output"
        steps=$(sed -n "s/^rank $r step //p" "$out" | tr '\n' ' ')
        [ "$(sed -n "s/^rank $r step //p" "$out" | sort -n | uniq | tr '\n' ' ')" = "$steps" ] ||
            fail "rank $r's steps are said again or out of order: $steps"
        [ "$(echo $steps | wc -w)" = $(( (${PAIR_ARGS[3]} + 24) / 25 )) ] ||
            fail "rank $r said $(echo $steps | wc -w) steps: $steps"
    done
    [ "$(grep -c 'restored from its save' "$out")" = $(( 2 * times )) ] ||
        fail "$(grep -c 'restored from its save' "$out") restores, want $(( 2 * times )) (2 tasks, $times requeues)"
    [ "$(job_field "$low" Restarts)" = "$times" ] || fail "restart count $(job_field "$low" Restarts), want $times"
    [ "$(job_field "$low" ExitCode)" = 0:0 ] || fail "exit code $(job_field "$low" ExitCode)"
    for i in $(seq 1 50); do [ -e "$SAVES/$low" ] || break; sleep 0.2; done
    [ -e "$SAVES/$low" ] && fail "the saves of completed job $low are still there: $(ls "$SAVES/$low")"
    echo "ok: requeued by hand $times time(s): saved, restored, steps said once each ($steps), checksums of an uninterrupted run"
    ;;
cancel-during-save)
    # the save is held (root's gpuckpt and its CRIU stopped) while the job is cancelled,
    # so that the epilog runs while the save still writes, every time
    # 64 MiB: a save of a second or so, long enough to be caught running
    PAIR_ARGS=(--mb 64 --steps 2000 --sleep-ms 60)
    start_cluster
    run_low cds
    HIGH=$(submit_high "$node")
    note "high-priority job $HIGH arrives on $node, where job $low runs"
    set_phase "waiting for the save of job $low to start"
    saver=""
    for i in $(seq 1 3000); do
        saver=$(save_process "$SAVES/$low/") && break
        sleep 0.01
    done
    [ -n "$saver" ] || fail "no save of job $low started: $(tail_of "$out" 6)"
    # and its CRIU once it has seized the program: the cancel's signals then
    # reach the program under CRIU, whose dump fails ("Unexpected task
    # interruption"); the plugin's give-back then waits for the stopped
    # program, and the wrapper ends the save KillWait - 3 s after the cancel
    # (or it fails at once). Caught later, the save completes after the
    # cancel. Every way, the assertions below hold.
    criu=""
    for i in $(seq 1 300); do
        criu=$(pgrep -P "$saver" -f "criu dump") && break
        sleep 0.01
    done
    prog=$(sed -n 's/.*started .* as pid \([0-9]*\).*/\1/p' "$out" | head -n 1)
    tracer=0
    for i in $(seq 1 20000); do     # builtins only: a few microseconds a look
        [ -r /proc/"$prog"/status ] || break
        while read -r k v; do [ "$k" = TracerPid: ] && { tracer=$v; break; }; done </proc/"$prog"/status
        [ "$tracer" != 0 ] && break
    done
    kill -STOP $criu "$saver" 2>/dev/null || true
    kill -0 "$saver" 2>/dev/null || fail "the save ended before it could be held: $(tail_of "$out" 4)"
    note "program $prog: traced by ${tracer:-nothing} (CRIU: ${criu:-none yet})"
    held="gpuckpt pid $saver${criu:+, its CRIU dump pid $criu}"
    phase "scancel $low while its save ($held) is held"
    scancel "$low"
    # the epilog runs at the cancel (jobcomp): it must wait for the save
    set_phase "waiting for the epilog of job $low to start"
    for i in $(seq 1 100); do epilog_process >/dev/null && break; sleep 0.2; done
    epilog_process >/dev/null || fail "no epilog runs 20 s after the cancel: $(tail_of "$W/log/epilog.log")"
    sleep 2
    kill -0 "$saver" 2>/dev/null || fail "the held save ($held) was killed before it could end: $(tail_of "$out" 6)"
    [ -e "$SAVES/$low" ] || fail "the epilog removed job $low's directory while its save ran: $(tail_of "$W/log/epilog.log")"
    note "2 s into the epilog, the save (held) and the job's directory are still there: let the save go on"
    kill -CONT $criu "$saver" 2>/dev/null || true
    set_phase "waiting for job $low's directory to go"
    for i in $(seq 1 150); do [ -e "$SAVES/$low" ] || break; sleep 0.2; done
    [ -e "$SAVES/$low" ] && fail "the cancelled job's directory stays: $(ls "$SAVES/$low"; tail_of "$W/log/epilog.log")"
    for i in $(seq 1 25); do kill -0 $criu "$saver" 2>/dev/null || break; sleep 0.2; done
    kill -0 $criu "$saver" 2>/dev/null && fail "the save ($held) outlived the job's directory by 5 s"
    grep -q "job $low is over: waited [0-9.]* s for the save in progress to end" "$W/log/epilog.log" ||
        fail "the epilog did not wait for the save: $(tail_of "$W/log/epilog.log")"
    grep -q "job $low is over: removed its saves" "$W/log/epilog.log" ||
        fail "the epilog did not remove the job's saves: $(tail_of "$W/log/epilog.log")"
    wait_job_state "$low" CANCELLED 30
    set_phase "reading job $low's log"
    wait_line "$out" "save dropped: job $low is cancelled" 20 ||
        fail "the log does not say the save was dropped for the cancel: $(tail_of "$out" 8)"
    # gpuckpt's own line of a save that worked names CRIU's time: no blame
    grep -i "criu\|save failed\|cannot" "$out" | grep -v "^saved the tree under " &&
        fail "the log of a cancelled job blames the save (above)"
    note "$(grep -m1 'save dropped' "$out" | sed 's/^[^:]*: //')"
    note "$(grep -m1 'waited' "$W/log/epilog.log" | sed 's/^[^:]*: //')"
    echo "ok: cancelled while saved: the epilog waited for the save before it removed the directory; the log says the save was dropped for the cancel"
    ;;
*) fail "unknown mode $mode" ;;
esac
