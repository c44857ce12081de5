# The setup of the integration tests on simcuda, sourced by tests/sim/*.sh,
# tests/criu/lib.sh and `tests/common/scenario.sh --lib`: with the helpers of
# tests/common/lib.sh and the harness of tests/common/scenario.sh.
#
# Each test gets its own simulated device (SIMCUDA_SHM) and its own run dir for
# control sockets, and cleans both up, so tests run in parallel.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../common/scenario.sh"

B=${TCGPU_BUILD_ROOT:?run through meson test}
GPUCKPT=$B/tools/gpuckpt/gpuckpt
TRAIN=$B/examples/train/train
TRAIN_MT=$B/examples/train/train_mt
SMI=$B/simcuda/simcuda-smi
PROGS=$B/tests/sim
# gpuckpt is not preloaded: it loads the driver itself for the checkpoint API
# (context release on suspend, save/restore). Point it at simcuda.
export TCGPU_REAL_LIBCUDA=$B/simcuda/libcuda.so.1

TEST_NAME=${TEST_NAME:-$(basename "$0" .sh)}
export SIMCUDA_SHM=/simcuda-t-$TEST_NAME-$$
export SIMCUDA_DEVICE_MEM=${SIMCUDA_DEVICE_MEM:-1G}
# A context takes device memory of its own, as on a GPU, so that tests can
# tell "the program's memory was released" from "the context was too".
CONTEXT_BYTES=$((32 << 20))
export SIMCUDA_CONTEXT_MEM=$CONTEXT_BYTES
export TCGPU_RUN_DIR
TCGPU_RUN_DIR=$(mktemp -d /tmp/tcgpu-test-XXXXXX)
WORK=$(mktemp -d /tmp/tcgpu-work-XXXXXX)

cleanup() {
    kill_bg
    wait 2>/dev/null || true
    rm -f "/dev/shm$SIMCUDA_SHM"
    rm -rf "$TCGPU_RUN_DIR"
    # TCGPU_TEST_KEEP=1: the programs' outputs stay, for a failure's post-mortem
    if [ -n "${TCGPU_TEST_KEEP:-}" ]; then echo "-- kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'stopped_in_phase TERM' TERM
trap 'stopped_in_phase INT' INT

# wait_for_socket PID : the process's control socket exists (it initialised CUDA).
wait_for_socket() {
    local i
    for i in $(seq 1 500); do
        [ -S "$TCGPU_RUN_DIR/$1.sock" ] && return 0
        kill -0 "$1" 2>/dev/null || fail "process $1 died before its control socket appeared"
        sleep 0.01
    done
    fail "no control socket for $1 after 5 s"
}

# wait_for_line FILE PATTERN : a line matching PATTERN appeared in FILE (10 s).
# The bound is generous: it only ends a test that would hang (an ASan build
# under load needs tens of seconds to fill a large device buffer).
wait_for_line() {
    wait_line "$1" "$2" 60 || fail "'$2' never appeared in $1 within 60 s: $(tail -n 5 "$1")"
}

# smi_state PID : the driver checkpoint API's state of PID (running, locked, checkpointed)
smi_state() {
    "$SMI" --query-compute-apps=pid,checkpoint_state --format=csv,noheader |
        awk -F', ' -v want="$1" '$1 == want { print $2; exit }'
}

# tcgpu_threads_block_signals PID N : PID has at least N threads of tcgpu's
# (named tcgpu-*), and each blocks SIGINT and SIGTERM, so that the program's
# handlers run on the program's threads (lib/core/thread.h)
tcgpu_threads_block_signals() {
    local t name mask n=0
    for t in /proc/"$1"/task/*; do
        name=$(cat "$t/comm" 2>/dev/null) || continue
        case $name in tcgpu-*) ;; *) continue ;; esac
        mask=$(sed -n 's/^SigBlk:[[:space:]]*//p' "$t/status")
        (( (16#$mask & 0x4002) == 0x4002 )) || fail "tcgpu's thread $name takes the program's signals (SigBlk $mask)"
        n=$((n + 1))
    done
    [ "$n" -ge "$2" ] || fail "$n threads of tcgpu's in $1, expected $2 or more"
}

# expect_exit CODE CMD... : CMD exits with CODE; its output goes to $WORK/last.out.
expect_exit() {
    local want=$1 rc=0; shift
    "$@" >"$WORK/last.out" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, expected $want: $(cat "$WORK/last.out")"
}

# start_train ARGS... : the example's uninterrupted run, then the same under
# tcgpu in the background (--sleep-ms $TRAIN_SLEEP_MS, default 5) until its
# first step; sets pid and ref.
start_train() {
    "$TRAIN" "$@" >"$WORK/ref.out" 2>&1 || fail "reference run failed"
    ref=$(checksum_of "$WORK/ref.out")
    start_bg "$WORK/run.out" "$GPUCKPT" run -- "$TRAIN" "$@" --sleep-ms "${TRAIN_SLEEP_MS:-5}"
    pid=$BG
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^step'
}

# finish_train : the job ($pid, output in $WORK/run.out) ends with the checksum $ref.
finish_train() {
    wait "$pid" || fail "the job failed: $(tail -n 5 "$WORK/run.out")"
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "checksum $got, uninterrupted $ref"
}

# What tests/common/scenario.sh expects of a suspended process here: simcuda
# has the driver's checkpoint API, so a suspend leaves nothing on the device,
# and one with --keep-context its context alone (and a little slack).
SC_DEVICE_BYTES=device_bytes_of
SC_DRIVER_API=required
SC_HELD_RELEASED=0
SC_CONTEXT_MIN=$CONTEXT_BYTES
SC_HELD_KEPT=$((CONTEXT_BYTES + (4 << 20)))

# start_mid_run LABEL SLEEP_MS NAME CMD...: NAME's reference, then NAME under
# tcgpu with --sleep-ms SLEEP_MS, once it is mid-run; sets pid.
start_mid_run() {
    local label=$1 ms=$2
    shift 2
    sc_program "$@"
    SC_SLOW=(--sleep-ms "$ms")
    sc_reference
    sc_start "$label"
    pid=$SC_PID
}

# expect_refused PID WHAT WORDS...: `gpuckpt checkpoint -D` and `gpuckpt
# suspend` of PID each exit 4 with every WORD in the refusal (WHAT names
# the case in a failure), and the refused checkpoint leaves no image.
expect_refused() {
    local pid=$1 what=$2 op rc w img=$WORK/refused-img
    shift 2
    for op in checkpoint suspend; do
        rc=0
        if [ "$op" = checkpoint ]; then
            "$GPUCKPT" checkpoint "$pid" -D "$img" >"$WORK/refused.out" 2>&1 || rc=$?
        else
            "$GPUCKPT" suspend "$pid" >"$WORK/refused.out" 2>&1 || rc=$?
        fi
        [ "$rc" -eq 4 ] || fail "$op $what exited $rc, expected 4: $(cat "$WORK/refused.out")"
        for w in "$@"; do
            grep -q -- "$w" "$WORK/refused.out" ||
                fail "the refusal of $op $what does not say '$w': $(cat "$WORK/refused.out")"
        done
    done
    [ ! -e "$img" ] || fail "a refused checkpoint $what left $img behind"
}
