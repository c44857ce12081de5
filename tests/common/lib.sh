# tests/common/lib.sh - the shell helpers every test script shares
# (tests/README.md): sourced by tests/sim/lib.sh, tests/common/scenario.sh and
# tests/gpu/run.sh. Functions and the list BG_PIDS only (sourced once): no
# options, no traps. The callers set those, and WORK (a scratch directory),
# GPUCKPT and SMI where a helper below uses them.

[ -z "${TC_TESTS_LIB:-}" ] || return 0        # sourced once: BG_PIDS stays
TC_TESTS_LIB=1
BG_PIDS=()          # background jobs that the caller's cleanup kills

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- $*" >&2; }

# phase TEXT: what the test does now (the waits below set it too, quietly).
# A test that meson's timeout stops (SIGTERM to its process group, SIGKILL
# half a second later) says it: the libraries that set the traps call
# stopped_in_phase on TERM and INT, then their EXIT trap cleans up. Commands
# the test waits on stay in its process group (run_fg), so the trap runs
# before the SIGKILL.
phase() { set_phase "$*"; note "phase: $*"; }
set_phase() { TC_PHASE=$*; }
stopped_in_phase() { # SIGNAL
    echo "FAIL: stopped by SIG$1 (meson's timeout?) in phase: ${TC_PHASE:-set-up}" >&2
    [ "$1" = INT ] && exit 130
    exit 143
}

# free_ports N: N distinct TCP ports that nobody listens on now, on any
# address (all held at once while they are chosen). Fixed ports collide
# with another instance of the same server on the machine.
free_ports() {
    python3 -c '
import socket, sys
held = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("", 0))
    held.append(s)
print(" ".join(str(s.getsockname()[1]) for s in held))' "$1"
}

# checksum_of FILE: the last "checksum: <hex>" a program printed.
checksum_of() { sed -n 's/^checksum: *\([0-9a-f]*\).*/\1/p' "$1" | tail -n 1; }

# tail_of FILE [N]: its last N (3) lines on one line, for a failure's detail.
tail_of() { tail -n "${2:-3}" "$1" 2>/dev/null | tr '\n' ' ' | cut -c1-300; }

# random_ms LO HI, sleep_ms MS
random_ms() { echo $(( $1 + RANDOM % ($2 - $1 + 1) )); }
sleep_ms() { sleep "$(awk -v m="$1" 'BEGIN { printf "%.3f", m / 1000 }')"; }

# json_field JSON KEY: a top-level number or string of a flat JSON object
# (gpuckpt status --json), empty if absent; bash alone, as it is polled.
json_field() {
    local re="\"$2\"[[:space:]]*:[[:space:]]*\"?([^,\"}]*)"
    if [[ $1 =~ $re ]]; then echo "${BASH_REMATCH[1]}"; fi
}

# json_get JSON KEY[.KEY...]...: fields of any JSON object, one line each
# (empty where absent).
json_get() {
    python3 -c '
import json, sys
try:
    doc = json.loads(sys.argv[1])
except ValueError:
    doc = {}
for path in sys.argv[2:]:
    v = doc
    try:
        for k in path.split("."):
            v = v[k]
    except (KeyError, TypeError):
        v = ""
    print(v)' "$@"
}

# status_of PID KEY: a field of `gpuckpt status PID --json` (empty when PID
# does not answer).
status_of() { json_field "$("$GPUCKPT" status "$1" --json 2>/dev/null || true)" "$2"; }

# device_bytes_of PID: device memory simcuda ($SMI, simcuda-smi) accounts to
# PID, all devices (its nvidia-smi-style query; used_memory_bytes is
# simcuda's exact count).
device_bytes_of() {
    "$SMI" --query-compute-apps=pid,used_memory_bytes --format=csv,noheader,nounits |
        awk -F', ' -v want="$1" '$1 == want { sum += $2 } END { print sum + 0 }'
}

# start_bg OUTFILE CMD...: CMD in the background, its output in OUTFILE;
# sets BG (its pid) and adds it to BG_PIDS. OUTFILE is emptied before the
# fork: the child's own redirection may come after the caller's first
# wait_line, which would then match what an earlier job left there.
start_bg() {
    local out=$1; shift
    : >"$out"
    "$@" >"$out" 2>&1 &
    BG=$!
    BG_PIDS+=("$BG")
}

# kill_bg: kills what start_bg started (the callers' cleanup).
kill_bg() {
    local p
    for p in "${BG_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}

# run_fg NAME SECONDS CMD...: CMD to its end (killed after SECONDS), its
# output in $WORK/NAME.out; returns CMD's exit status. CMD stays in the
# test's process group (--foreground), so that meson's timeout stops it and
# the test's cleanup runs, instead of the test waiting on it until SIGKILL.
run_fg() {
    local name=$1 secs=$2 rc=0; shift 2
    note "run $name: $*"
    set_phase "running $name: $*"
    timeout --foreground -k 5 "$secs" "$@" >"$WORK/$name.out" 2>&1 || rc=$?
    note "$name exited $rc: $(tail_of "$WORK/$name.out" 2)"
    return $rc
}

# wait_line FILE PATTERN SECONDS [PID]: 0 once a line of FILE matches
# PATTERN; 1 after SECONDS, or when PID ended without printing it.
wait_line() {
    local end=$((SECONDS + $3))
    set_phase "waiting for '$2' in $1"
    while ! grep -q -- "$2" "$1" 2>/dev/null; do
        if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then
            grep -q -- "$2" "$1" 2>/dev/null
            return
        fi
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep 0.02
    done
}

# wait_job PID SECONDS: the exit status of a child, or 124 after killing it
# at the deadline.
wait_job() {
    local end=$((SECONDS + $2)) rc=0
    set_phase "waiting for process $1 to end"
    while kill -0 "$1" 2>/dev/null; do
        if [ "$SECONDS" -ge "$end" ]; then
            kill -9 "$1" 2>/dev/null || true
            wait "$1" 2>/dev/null || true
            return 124
        fi
        sleep 0.05
    done
    wait "$1" 2>/dev/null || rc=$?
    return $rc
}

# wait_gone PID [SEC]: the process no longer exists (restored ones are not our
# children: polled); fails after SEC (120).
wait_gone() {
    local i n=$(( ${2:-120} * 20 ))
    set_phase "waiting for process $1 to be gone"
    for i in $(seq 1 "$n"); do
        kill -0 "$1" 2>/dev/null || return 0
        # a zombie whose parent is gone is reaped by init soon; ours we reap
        [ "$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null)" = Z ] && { wait "$1" 2>/dev/null || true; }
        sleep 0.05
    done
    fail "process $1 still runs after ${2:-120} s: $(tail -n 3 "$WORK"/*.out 2>/dev/null)"
}
