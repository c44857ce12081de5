# Helpers of the tcgpud scenarios (sourced by tests/sim/tcgpud_*.sh after lib.sh).
# Each test runs its own tcgpud on its own simulated device, socket and state file.
. "$(dirname "${BASH_SOURCE[0]}")/users_lib.sh"
TCGPUD=$B/tools/tcgpud/tcgpud
export TCGPU_DAEMON_SOCKET=$WORK/tcgpud.sock
SLACK=$SC_HELD_KEPT                    # what a suspended job may still hold: its context (lib.sh)

# write_config BODY : [daemon] for this test, then BODY (projects, GPUs).
write_config() {
    cat >"$WORK/tcgpud.ini" <<EOF
[daemon]
socket = $TCGPU_DAEMON_SOCKET
state_file = $WORK/tcgpud.state
min_runtime = ${MIN_RUNTIME:-1s}
resume_retry = 1s
metrics = $WORK/tcgpud.prom
$1
EOF
}

# start_tcgpud : tcgpud on $WORK/tcgpud.ini (log appended to $WORK/tcgpud.log); sets DAEMON.
start_tcgpud() {
    "$TCGPUD" --config "$WORK/tcgpud.ini" >>"$WORK/tcgpud.log" 2>&1 &
    DAEMON=$!
    BG_PIDS+=("$DAEMON")
    local i
    for i in $(seq 1 200); do
        "$GPUCKPT" ps --daemon >/dev/null 2>&1 && return 0
        kill -0 "$DAEMON" 2>/dev/null || fail "tcgpud died: $(tail -n 5 "$WORK/tcgpud.log")"
        sleep 0.05
    done
    fail "tcgpud did not answer within 10 s: $(tail -n 5 "$WORK/tcgpud.log")"
}

# job_field PID KEY : a field of PID in gpuckpt ps --json ("" when not managed;
# booleans as true/false).
job_field() {
    "$GPUCKPT" ps --daemon --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
for j in d["jobs"]:
    if j["pid"] == int(sys.argv[1]):
        v = j.get(sys.argv[2], "")
        print(json.dumps(v) if isinstance(v, bool) else v)' "$1" "$2"
}

# wait_state PID STATE [SECONDS] : tcgpud reports PID in STATE.
wait_state() {
    local i s=""
    for i in $(seq 1 $(( ${3:-20} * 20 ))); do
        s=$(job_field "$1" state)
        [ "$s" = "$2" ] && return 0
        sleep 0.05
    done
    fail "pid $1 is '$s', not '$2', after ${3:-20} s: $(tail -n 5 "$WORK/tcgpud.log")"
}

# wait_registered PID : tcgpud manages PID.
wait_registered() {
    local i
    for i in $(seq 1 400); do
        [ -n "$(job_field "$1" state)" ] && return 0
        kill -0 "$1" 2>/dev/null || fail "job $1 died before registering"
        sleep 0.05
    done
    fail "job $1 never registered: $(tail -n 5 "$WORK/tcgpud.log")"
}

# reference NAME ARGS... : checksum of an uninterrupted run of train on a device of its own.
reference() {
    local name=$1; shift
    SIMCUDA_SHM=$SIMCUDA_SHM-ref SIMCUDA_DEVICE_MEM=2G "$TRAIN" "$@" >"$WORK/ref-$name.out" 2>&1 ||
        fail "reference run $name failed: $(tail -n 3 "$WORK/ref-$name.out")"
    rm -f "/dev/shm$SIMCUDA_SHM-ref"
    checksum_of "$WORK/ref-$name.out"
}

# events_of PID : tcgpud's event types for PID, one per line.
events_of() {
    "$GPUCKPT" events --json | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if e.get("pid") == int(sys.argv[1]): print(e["type"])' "$1"
}

# start_research_prod [HEAD] : tcgpud with two projects open to all: research
# (priority 10) and prod (priority 100), the preemption scenarios' pair;
# HEAD, configuration that goes before them (GPU sections).
start_research_prod() {
    write_config "${1:-}
[project research]
priority = 10
members = *

[project prod]
priority = 100
members = *
"
    start_tcgpud
}

# low_then_high HIGH_SLEEP_MS : the preemption scenario. Uses the arrays
# low_args and high_args; sets ref_low, ref_high (uninterrupted checksums),
# low and high (the jobs' pids). A research job (priority 10) fills the
# device, and once it is older than min_runtime a prod job (priority 100)
# arrives that needs the memory. $BEFORE_JOBS, when set, is run (a command)
# once tcgpud is up, before the jobs start.
low_then_high() {
    ref_low=$(reference low "${low_args[@]}")
    ref_high=$(reference high "${high_args[@]}")
    start_research_prod
    if [ -n "${BEFORE_JOBS:-}" ]; then $BEFORE_JOBS; fi
    start_bg "$WORK/low.out" "$GPUCKPT" run --project research -- "$TRAIN" "${low_args[@]}" --sleep-ms 10
    low=$BG
    wait_registered "$low"
    wait_for_line "$WORK/low.out" '^step 0 '
    sleep 1.2                              # older than min_runtime (1 s)
    start_bg "$WORK/high.out" "$GPUCKPT" run --project prod -- "$TRAIN" "${high_args[@]}" --sleep-ms "$1"
    high=$BG
}

