#!/usr/bin/env bash
# tests/cluster/run.sh SCALE [POLICY...] - the experiment on a real Slurm
# (docs/cluster.md, "The experiment"): one trace of three departments
# (trace.py SCALE: smoke or full) run on a 4-node Slurm on loopback
# (tests/slurm/cluster.sh: munged, slurmctld, 4 slurmd of 2 simulated GPUs
# of 4 shards, a tcgpud each), once under each policy:
#
#   static   each department its own nodes, whole GPUs, no borrowing
#   shared   one pool, shards, no preemption (jobs under tcgpu-slurm)
#   kill     owners' partitions + borrow, shards, PreemptMode=REQUEUE
#            without tcgpu: a preempted job starts again from step 0
#   tcgpu    the same partitions, jobs under tcgpu-slurm: a preempted job
#            is saved, requeued and restored (docs/slurm.md)
#
# Every job is pair_train alone (--peers 1) on its GPU or shards, at 100 ms
# a step: its duration in the trace is its work. Measured by polling squeue
# (no slurmdbd: no sacct) and from the jobs' own logs; every job must end
# with the checksum of an uninterrupted run. Then tcgpu-replay on the same
# trace, for the predicted column. Writes cluster-SCALE.json and .md under
# TCGPU_CLUSTER_OUT (default: the build's meson-logs).
export TCGPU_SLURM_NODES=4 TCGPU_SLURM_CPUS=8
. "$(dirname "$0")/../slurm/cluster.sh"

HERE=$(cd "$(dirname "$0")" && pwd)
export TZ=UTC
SCALE=${1:?smoke or full}
shift
POLICIES=("${@:-static}")
[ $# -eq 0 ] && POLICIES=(static shared kill tcgpu)
OUT=${TCGPU_CLUSTER_OUT:-$B/meson-logs}
REPLAY=$B/tools/replay/tcgpu-replay
SLEEP_MS=100
SLO=15

# The partitions of every policy at once (a policy's jobs use its own, and
# the policies run one after the other). Only borrow is preemptable.
cluster_conf_policy() {
    cat <<CONF
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
# static: a department's nodes only, urgent jobs first
PartitionName=st-a-hi Nodes=na,nb PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
PartitionName=st-a-lo Nodes=na,nb PriorityTier=5 PreemptMode=OFF OverSubscribe=NO
PartitionName=st-b-hi Nodes=nc PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
PartitionName=st-b-lo Nodes=nc PriorityTier=5 PreemptMode=OFF OverSubscribe=NO
PartitionName=st-c-hi Nodes=nd PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
PartitionName=st-c-lo Nodes=nd PriorityTier=5 PreemptMode=OFF OverSubscribe=NO
# shared: one pool, urgent jobs first, nothing preempted
PartitionName=pool-hi Nodes=$NODE_LIST PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
PartitionName=pool-lo Nodes=$NODE_LIST PriorityTier=5 PreemptMode=OFF OverSubscribe=NO
# kill and tcgpu: departments own nodes (docs/cluster.md); everything
# low-priority borrows, and an owner's job preempts borrowers on its nodes
PartitionName=dept-a Nodes=na,nb PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
PartitionName=dept-b Nodes=nc PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
PartitionName=dept-c Nodes=nd PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
PartitionName=borrow Nodes=$NODE_LIST Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=30 OverSubscribe=NO
# kill: the same without a grace time, Slurm's requeue as it comes (within
# a grace time, a job that ends at the SIGTERM is complete, not requeued)
PartitionName=borrow-kill Nodes=$NODE_LIST PriorityTier=1 PreemptMode=REQUEUE GraceTime=0 OverSubscribe=NO
CONF
}

# job_spec POLICY DEPT PRIO SHARDS: "PARTITION GRES WRAPPER" of a job.
job_spec() {
    local hi=lo
    [ "$3" -ge 100 ] && hi=hi
    case $1 in
    static) echo "st-$2-$hi gpu:1 -" ;;
    shared) echo "pool-$hi shard:$4 tcgpu-slurm" ;;
    kill) [ $hi = hi ] && echo "dept-$2 shard:$4 -" || echo "borrow-kill shard:$4 -" ;;
    tcgpu) [ $hi = hi ] && echo "dept-$2 shard:$4 tcgpu-slurm" || echo "borrow shard:$4 tcgpu-slurm" ;;
    *) fail "unknown policy $1" ;;
    esac
}

# The trace's jobs, one a line: "INDEX ARRIVAL DEPT PRIO SHARDS DURATION".
jobs_of_trace() {
    awk -F, '!/^#/ && NR > 1 && $1 != "arrival_s" { printf "%d %s %s %s %d %d\n", n++, $1, $2, $3, $7 / 25, $5 }' "$W/trace.csv"
}

# Each job's uninterrupted checksum, by "MB STEPS", on a machine of its own
# (no pause between steps: the pause changes no result).
references() {
    local mb steps shm=$SHM_PREFIX-ref
    phase "reference checksums"
    jobs_of_trace | awk -v s=$SLEEP_MS '{ print 16 * $5, $6 * 1000 / s }' | sort -u |
        while read -r mb steps; do
            SIMCUDA_SHM=$shm "$PAIR" --peers 1 --mb "$mb" --steps "$steps" --shm $SHM_PREFIX-pair-ref \
                >"$W/ref.out" 2>&1 || fail "reference $mb MiB $steps steps failed: $(tail_of "$W/ref.out")"
            echo "$mb $steps $(sed -n 's/^rank 0 checksum: //p' "$W/ref.out")"
        done >"$W/refs"
    rm -f /dev/shm"$shm"
}

# submit POLICY DIR INDEX DEPT PRIO SHARDS DURATION: nobody's job; prints its id.
submit() {
    local pol=$1 d=$2 i=$3 part gres wrap mb steps
    read -r part gres wrap <<<"$(job_spec "$pol" "$4" "$5" "$6")"
    [ "$wrap" = - ] && wrap="" || wrap="$wrap --"
    mb=$((16 * $6)) steps=$(($7 * 1000 / SLEEP_MS))
    cat >"$d/job$i.sh" <<JOB
#!/bin/bash
echo "cluster: run start \$(date +%s.%N) restart \${SLURM_RESTART_COUNT:-0} on \$SLURMD_NODENAME"
srun $wrap $PAIR --peers 1 --mb $mb --steps $steps --sleep-ms $SLEEP_MS --shm $SHM_PREFIX-pair-\$SLURM_JOB_ID
rc=\$?
echo "cluster: run end \$(date +%s.%N) status \$rc"
exit \$rc
JOB
    chmod 755 "$d/job$i.sh"
    as_nobody env PATH="$B/slurm:$PATH" TCGPU_RUN_DIR="$HOME_N/run" \
        sbatch --parsable -p "$part" -N1 -n1 --gres="$gres" --requeue --open-mode=append \
        -t $(( ($7 * 3 + 120) / 60 + 1 )) -J "$pol-$i" -D "$d" -o "$d/job$i.out" "$d/job$i.sh"
}

# The jobs at their arrival times; "INDEX JOBID SUBMIT_EPOCH" to DIR/submitted.
submitter() {
    local pol=$1 d=$2 t0=$3 i at dept prio shards dur now id
    jobs_of_trace | while read -r i at dept prio shards dur; do
        now=$(date +%s.%N)
        sleep "$(awk -v a="$at" -v t0="$t0" -v n="$now" 'BEGIN { w = t0 + a - n; printf "%.3f", (w > 0 ? w : 0) }')"
        now=$(date +%s.%N)
        id=$(submit "$pol" "$d" "$i" "$dept" "$prio" "$shards" "$dur") || fail "sbatch of job $i failed"
        echo "$i $id $now" >>"$d/submitted"
    done
}

# run_policy POLICY LIMIT_S: the trace under POLICY until every job ended.
run_policy() {
    local pol=$1 d=$HOME_N/$1 n t0 sub left end
    phase "policy $pol"
    mkdir -m 700 "$d" && chown "$NOBODY" "$d"
    : >"$d/submitted"
    n=$(jobs_of_trace | wc -l)
    t0=$(date +%s.%N)
    echo "$t0" >"$d/t0"
    submitter "$pol" "$d" "$t0" &
    sub=$!
    end=$((SECONDS + $2))
    set_phase "policy $pol: waiting for its $n jobs"
    while :; do
        # one poll a second: each job's state, start and end as Slurm says
        squeue -h -t all -o '%j|%i|%T|%S|%e|%N' 2>/dev/null | grep "^$pol-" |
            sed "s/^/$(date +%s.%N)|/" >>"$d/poll" || true
        left=$(awk -F'|' -v t="$(tail -n 1 "$d/poll" | cut -d'|' -f1)" \
            '$1 == t && $4 !~ /^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)$/' "$d/poll" | wc -l)
        [ "$(wc -l <"$d/submitted")" -eq "$n" ] && [ "$left" -eq 0 ] && break
        kill -0 "$sub" 2>/dev/null || [ "$(wc -l <"$d/submitted")" -eq "$n" ] ||
            fail "policy $pol: the submissions stopped at $(wc -l <"$d/submitted") of $n jobs"
        [ $SECONDS -ge $end ] && fail "policy $pol: jobs left after $2 s: $(squeue -h -o '%j %T %r' | head -n 5 | tr '\n' ';')"
        sleep 1
    done
    wait "$sub" || fail "policy $pol: a submission failed"
    note "policy $pol: $n jobs ended in $(awk -v t0="$t0" -v n="$(date +%s.%N)" 'BEGIN { printf "%.0f", n - t0 }') s"
    cp -r "$d" "$W/runs-$pol"
}

# predicted: tcgpu-replay on the same trace, the costs of this cluster.
predict() {
    phase "tcgpu-replay on the same trace"
    "$REPLAY" "$W/trace.csv" --gpus 8 --gpus-per-node 2 --gpu-mem 256M --high-priority 100 \
        --sched static-whole,shared-none,slurm-shared-kill,slurm-shared-save --slo ${SLO}s --min-runtime 0 \
        --requeue-delay 12s --restart 1s --app-ckpt 0 --interference 0 --host-mem 256M \
        --json >"$W/replay.json" || fail "tcgpu-replay failed"
}

python3 "$HERE/trace.py" "$SCALE" >"$W/trace.csv"
limit=$(awk -F, '!/^#/ && $1 + 0 > m { m = $1 } END { printf "%d", m * 3 + 240 }' "$W/trace.csv")
references
start_cluster
for p in "${POLICIES[@]}"; do run_policy "$p" "$limit"; done
predict
mkdir -p "$OUT"
phase "measuring"
python3 "$HERE/measure.py" --trace "$W/trace.csv" --refs "$W/refs" --runs "$W" --replay "$W/replay.json" \
    --slo $SLO --scale "$SCALE" $([ "$SCALE" = smoke ] && echo --expect-preemption) --json "$OUT/cluster-$SCALE.json" --md "$OUT/cluster-$SCALE.md" \
    "${POLICIES[@]}" || fail "the measure found a job wrong (above)"
cat "$OUT/cluster-$SCALE.md"
echo "ok: $SCALE trace under ${POLICIES[*]}: every job ended with its uninterrupted checksum ($OUT/cluster-$SCALE.json)"
