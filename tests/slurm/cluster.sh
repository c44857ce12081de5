# tests/slurm/cluster.sh - a real Slurm cluster on loopback for one test
# (sourced by tests/slurm/*.sh; docs/slurm.md, "Testing").
#
# munged, slurmctld and two slurmd (nodes na on 127.0.0.2 and nb on
# 127.0.0.3, `slurmd -N`), in the foreground, with a generated slurm.conf:
# (TCGPU_SLURM_NODES=N, set by the sourcing script: N nodes na, nb, nc, ...
# on 127.0.0.2, .3, .4, ...; tests/cluster runs 4)
# private state, spool and log directories, ports free at start, a
# munge key and socket of their own. Each node is its own simulated machine
# (SIMCUDA_SHM) of two GPUs, with its own tcgpud (root); a TaskProlog gives
# a task its node's machine and tcgpud. Partitions: low (preemptable,
# PreemptMode=REQUEUE, GraceTime 30 s) and high, over both nodes; borrow
# (as low) and dept-a, dept-b (as high, one node each) for departments. Jobs run as
# nobody. Everything is stopped and removed at exit, and a process of the
# test left behind fails it. Slurm that cannot start is a failure, not a skip.
# A sourcing script may replace the partitions and preemption lines by
# defining cluster_conf_policy after sourcing this (tests/cluster/run.sh),
# and give each node more CPUs than the machine has (TCGPU_SLURM_CPUS: shard
# jobs take a core each, and a node of 2 GPUs of 4 shards runs 8).
. "$(dirname "$0")/../common/lib.sh"
set -euo pipefail

B=${TCGPU_BUILD_ROOT:?run through meson test}
GPUCKPT=$B/tools/gpuckpt/gpuckpt
TCGPUD=$B/tools/tcgpud/tcgpud
TCGPU_SLURM=$B/slurm/tcgpu-slurm
PAIR=$B/tests/slurm/pair_train
NODE_COUNT=${TCGPU_SLURM_NODES:-2}
NODE_CPUS=${TCGPU_SLURM_CPUS:-2}
[ "$NODE_COUNT" -ge 2 ] && [ "$NODE_COUNT" -le 26 ] || fail "TCGPU_SLURM_NODES=$NODE_COUNT: 2..26"
read -r CTLD_PORT PORTS <<<"$(free_ports $((NODE_COUNT + 1)))"
NODES=()
declare -A NODE_PORT NODE_ADDR
for i in $(seq 0 $((NODE_COUNT - 1))); do
    n=n$(echo abcdefghijklmnopqrstuvwxyz | cut -c$((i + 1)))     # na, nb, nc, ...
    NODES+=("$n")
    NODE_PORT[$n]=$(echo "$PORTS" | cut -d' ' -f$((i + 1)))
    NODE_ADDR[$n]=127.0.0.$((2 + i))
done
NODE_LIST=$(IFS=,; echo "${NODES[*]}")
NA_PORT=${NODE_PORT[na]} NB_PORT=${NODE_PORT[nb]}
NOBODY=65534

if [ "$(id -u)" -ne 0 ]; then
    # CI runs as root; a developer's own account cannot start slurmd
    [ -n "${CI:-}" ] && fail "the slurm suite needs root"
    echo "skipped: the slurm suite needs root (slurmd, munged, CRIU)"; exit 77
fi
for c in munged slurmctld slurmd sbatch squeue scontrol scancel setpriv; do
    command -v "$c" >/dev/null || fail "$c not found: scripts/setup.sh installs slurm-wlm and munge"
done
[ -x "$TCGPU_SLURM" ] || fail "tcgpu-slurm was not built (libslurm-dev missing: scripts/setup.sh)"
CRIU=${TCGPU_CRIU:-$(command -v criu || echo /usr/local/sbin/criu)}
[ -x "$CRIU" ] || fail "criu not found (scripts/setup.sh builds CRIU 4.1.1)"

W=$(mktemp -d /tmp/tcgpu-slurm-XXXXXX)
chmod 711 "$W"
SAVES=$W/saves                     # TCGPU_SLURM_DIR: writable by all, sticky, as /tmp
HOME_N=$W/nobody                   # the jobs' working directory
mkdir -m 1777 "$SAVES"
mkdir -m 700 "$HOME_N"
chown "$NOBODY:$NOBODY" "$HOME_N"
DAEMONS=()
SHM_PREFIX=/tcgpu-slurm-$$
export SLURM_CONF=$W/slurm.conf
export TCGPU_SLURM_DIR=$SAVES
export TCGPU_CRIU=$CRIU
export TCGPU_REAL_LIBCUDA=$B/simcuda/libcuda.so.1
export SIMCUDA_DEVICES=2 SIMCUDA_DEVICE_MEM=256M

cluster_cleanup() {
    local p j
    set +e
    for j in $(squeue -h -o %i 2>/dev/null); do scancel "$j" 2>/dev/null; done
    for p in "${DAEMONS[@]}"; do kill "$p" 2>/dev/null; done
    sleep 0.5
    for p in "${DAEMONS[@]}"; do kill -9 "$p" 2>/dev/null; done
    # slurmstepd and the jobs' processes, restored ones included
    kill_test_processes
    kill_bg
    wait 2>/dev/null
    check_nothing_left
    # the simulated machines and the jobs' pair segments: this test's alone
    rm -f /dev/shm"$SHM_PREFIX"* 2>/dev/null
    # TCGPU_KEEP=1 keeps the logs and saves for a look after a failure
    [ -n "${TCGPU_KEEP:-}" ] && echo "kept $W" >&2 || rm -rf "$W"
}
trap cluster_cleanup EXIT
trap 'stopped_in_phase TERM' TERM
trap 'stopped_in_phase INT' INT

# test_processes: the pids of this test's processes, found through /proc,
# never by name: a file open or the working directory under $W (slurmstepd,
# the jobs), or the simulated machine's name in the environment (a job's
# process reparented to PID 1, or one CRIU restored: its cwd and files may
# lie elsewhere, its environment is its own).
test_processes() {
    local pid
    for pid in /proc/[0-9]*; do
        pid=${pid#/proc/}
        [ "$pid" = $$ ] && continue
        if ls -l /proc/"$pid"/fd 2>/dev/null | grep -q -- "$W/" ||
            [[ "$(readlink /proc/"$pid"/cwd 2>/dev/null)" == "$W"/* ]] ||
            grep -qz "^SIMCUDA_SHM=$SHM_PREFIX-" "/proc/$pid/environ" 2>/dev/null; then
            echo "$pid"
        fi
    done
}

kill_test_processes() {
    local pid
    for pid in $(test_processes); do kill -9 "$pid" 2>/dev/null || true; done
}

# check_nothing_left: fails the test (exit 1 from the EXIT trap) when a
# process of it outlived the cleanup by 5 s.
check_nothing_left() {
    local i left
    for i in $(seq 1 50); do
        left=$(test_processes)
        [ -z "$left" ] && return 0
        kill_test_processes
        sleep 0.1
    done
    echo "FAIL: processes of the test left behind: $(for p in $left; do tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null; echo "(pid $p)"; done)" >&2
    exit 1
}

as_nobody() { setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups "$@"; }

# cluster_conf_policy: the preemption and partition lines of slurm.conf (the
# suite slurm's); a sourcing script may define its own after sourcing.
cluster_conf_policy() {
    cat <<EOF
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=low Nodes=$NODE_LIST Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=30 OverSubscribe=NO
PartitionName=high Nodes=$NODE_LIST PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
# departments (docs/cluster.md): each owns a node, anyone borrows idle GPUs
# through borrow, and a borrower is saved and requeued when an owner needs them
PartitionName=borrow Nodes=$NODE_LIST PriorityTier=1 PreemptMode=REQUEUE GraceTime=30 OverSubscribe=NO
PartitionName=dept-a Nodes=na PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
PartitionName=dept-b Nodes=nb PriorityTier=10 PreemptMode=OFF OverSubscribe=NO
EOF
}

# The nodes: two GPUs, 8 shards each.
cluster_conf_nodes() {
    local n host
    host=$(hostname)
    for n in "${NODES[@]}"; do
        echo "NodeName=$n NodeHostname=$host NodeAddr=${NODE_ADDR[$n]} Port=${NODE_PORT[$n]}" \
            "CPUs=$NODE_CPUS RealMemory=2000 Gres=gpu:2,shard:8 State=UNKNOWN"
    done
}

write_conf() {
    cat >"$W/slurm.conf" <<EOF
ClusterName=tcgputest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$NA_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this long (plus a little) before it may
# run again; Slurm's default is 120 s (docs/slurm.md)
AuthInfo=socket=$W/munge/munge.sock,cred_expire=10
StateSaveLocation=$W/ctld
SlurmdSpoolDir=$W/spool-%n
SlurmctldPidFile=$W/ctld/slurmctld.pid
SlurmdPidFile=$W/spool-%n/slurmd.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog=$W/task_prolog.sh
# every job's end, a job cancelled while it waits included, runs this: the
# saves of a job that will not run again go (docs/slurm.md)
JobCompType=jobcomp/script
JobCompLoc=$W/jobcomp.sh
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# shards: up to 4 jobs share a GPU, each held to its share by tcgpu-slurm
# (docs/slurm.md, "Fractional GPUs")
GresTypes=gpu,shard
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# sched_interval: a requeued job that becomes eligible (cred_expire) is
# started by the next pass of the main scheduler, which runs on events and
# every sched_interval (Slurm's default: 60 s); backfill passes skip it
# when nothing changed (docs/slurm.md)
SchedulerParameters=preempt_send_user_signal,bf_interval=1,sched_interval=2
JobRequeue=1
# KillWait: the time from the SIGTERM of scancel or scontrol requeue to the
# SIGKILL; a requeue by hand is saved within it (docs/slurm.md)
KillWait=15
MinJobAge=600
InactiveLimit=0
Waittime=0
MailProg=/bin/true
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
EOF
    # more CPUs than the machine has: slurmd would drain its node without this
    [ "$NODE_CPUS" -gt "$(nproc)" ] && echo "SlurmdParameters=config_overrides" >>"$W/slurm.conf"
    cluster_conf_nodes >>"$W/slurm.conf"
    cluster_conf_policy >>"$W/slurm.conf"
    # GPUs: Slurm wants device files; character devices that are /dev/null
    mkdir -p "$W/dev"
    local i n g=0
    : >"$W/gres.conf"
    for n in "${NODES[@]}"; do
        for i in 0 1; do
            mknod "$W/dev/gpu$((g + i))" c 1 3
            echo "NodeName=$n Name=shard Count=4 File=$W/dev/gpu$((g + i))" >>"$W/gres.conf"
        done
        echo "NodeName=$n Name=gpu File=$W/dev/gpu[$g-$((g + 1))]" >>"$W/gres.conf"
        g=$((g + 2))
    done
    # a task's node: its simulated machine and its tcgpud
    cat >"$W/task_prolog.sh" <<EOF
#!/bin/sh
echo "export SIMCUDA_SHM=$SHM_PREFIX-\$SLURMD_NODENAME"
echo "export TCGPU_DAEMON_SOCKET=$W/node-\$SLURMD_NODENAME/tcgpud.sock"
EOF
    cat >"$W/jobcomp.sh" <<EOF
#!/bin/sh
SLURM_CONF=$W/slurm.conf TCGPU_SLURM_DIR=$SAVES exec $TCGPU_SLURM epilog >>$W/log/epilog.log 2>&1
EOF
    chmod 755 "$W/task_prolog.sh" "$W/jobcomp.sh"
}

start_munge() {
    mkdir -p "$W/munge"
    dd if=/dev/urandom of="$W/munge/munge.key" bs=1024 count=1 2>/dev/null
    chmod 600 "$W/munge/munge.key"
    munged -F --key-file="$W/munge/munge.key" --socket="$W/munge/munge.sock" \
        --pid-file="$W/munge/munged.pid" --log-file="$W/munge/munged.log" \
        --seed-file="$W/munge/seed" --force >/dev/null 2>&1 &
    DAEMONS+=("$!")
    local i
    for i in $(seq 1 100); do [ -S "$W/munge/munge.sock" ] && return 0; sleep 0.05; done
    fail "munged did not start: $(tail_of "$W/munge/munged.log")"
}

# One tcgpud per node (root), on that node's simulated machine.
start_tcgpuds() {
    local n
    for n in "${NODES[@]}"; do
        mkdir -p "$W/node-$n"
        chmod 711 "$W/node-$n"
        cat >"$W/node-$n/tcgpud.ini" <<EOF
[daemon]
socket = $W/node-$n/tcgpud.sock
state_file = $W/node-$n/tcgpud.state
EOF
        SIMCUDA_SHM=$SHM_PREFIX-$n "$TCGPUD" --config "$W/node-$n/tcgpud.ini" \
            >>"$W/log/tcgpud-$n.log" 2>&1 &
        DAEMONS+=("$!")
    done
    for n in "${NODES[@]}"; do
        local i
        for i in $(seq 1 100); do [ -S "$W/node-$n/tcgpud.sock" ] && break; sleep 0.05; done
        [ -S "$W/node-$n/tcgpud.sock" ] || fail "tcgpud of $n did not start: $(tail_of "$W/log/tcgpud-$n.log")"
    done
}

start_slurm() {
    mkdir -p "$W/ctld" "$W/log"
    for n in "${NODES[@]}"; do mkdir -p "$W/spool-$n"; done
    slurmctld -D -i -f "$SLURM_CONF" >>"$W/log/slurmctld.out" 2>&1 &
    DAEMONS+=("$!")
    local n i
    for n in "${NODES[@]}"; do
        slurmd -D -N "$n" -f "$SLURM_CONF" >>"$W/log/slurmd-$n.out" 2>&1 &
        DAEMONS+=("$!")
    done
    for i in $(seq 1 200); do
        [ "$(sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr -d '\n')" = idle ] && return 0
        sleep 0.1
    done
    fail "Slurm did not start: sinfo: $(sinfo 2>&1 | tail -n 3 | tr '\n' ' ') slurmctld: $(tail_of "$W/log/slurmctld.log" 5)"
}

start_cluster() {
    phase "starting the cluster"
    write_conf
    start_munge
    mkdir -p "$W/log"
    start_tcgpuds
    start_slurm
    note "cluster up: slurmctld on 127.0.0.1:$CTLD_PORT, slurmd $(for n in "${NODES[@]}"; do printf '%s on :%s ' "$n" "${NODE_PORT[$n]}"; done)"
}

# job_field JOB KEY : a field of scontrol show job (e.g. JobState, Restarts, NodeList).
job_field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }

# wait_job_state JOB STATE SECONDS
wait_job_state() {
    local i s=""
    set_phase "waiting for job $1 to be $2"
    for i in $(seq 1 $(( $3 * 5 ))); do
        s=$(job_field "$1" JobState)
        [ "$s" = "$2" ] && return 0
        sleep 0.2
    done
    fail "job $1 is $s, not $2, after $3 s: $(scontrol show job -o "$1" | tr ' ' '\n' | grep -E 'Reason|Restarts|NodeList' | tr '\n' ' ')"
}

# wait_file_line FILE PATTERN SECONDS
wait_file_line() {
    wait_line "$1" "$2" "$3" || fail "'$2' never appeared in $1 in $3 s: $(tail_of "$1" 6)"
}

# The pair program's uninterrupted checksums (both ranks), on a machine of its own.
pair_reference() { # ARGS...
    local shm=$SHM_PREFIX-ref
    SIMCUDA_SHM=$shm CUDA_VISIBLE_DEVICES=0 "$PAIR" --rank 0 --shm $SHM_PREFIX-pair-ref "$@" >"$W/ref0.out" 2>&1 &
    local p0=$!
    SIMCUDA_SHM=$shm CUDA_VISIBLE_DEVICES=1 "$PAIR" --rank 1 --shm $SHM_PREFIX-pair-ref "$@" >"$W/ref1.out" 2>&1 ||
        fail "reference rank 1 failed: $(tail_of "$W/ref1.out")"
    wait "$p0" || fail "reference rank 0 failed: $(tail_of "$W/ref0.out")"
    rm -f /dev/shm"$shm"
    REF0=$(sed -n 's/^rank 0 checksum: //p' "$W/ref0.out")
    REF1=$(sed -n 's/^rank 1 checksum: //p' "$W/ref1.out")
    [ -n "$REF0" ] && [ -n "$REF1" ] || fail "no reference checksums"
}

# stamp LINE_PATTERN FILE : the HH:MM:SS.mmm of tcgpu-slurm's first line matching it, in seconds.
stamp() {
    grep -m1 -- "$1" "$2" | sed -n 's/^tcgpu-slurm[^ ]* \([0-9:.]*\):.*/\1/p' |
        awk -F: '{ printf "%.3f\n", $1 * 3600 + $2 * 60 + $3 }'
}
