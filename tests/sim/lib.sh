# Shared helpers of the integration tests on simcuda (sourced by tests/sim/*.sh).
#
# Each test gets its own simulated device (SIMCUDA_SHM) and its own run dir for
# control sockets, and cleans both up, so tests run in parallel.
set -euo pipefail

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
export SIMCUDA_CONTEXT_MEM=${SIMCUDA_CONTEXT_MEM:-32M}
export TCGPU_RUN_DIR
TCGPU_RUN_DIR=$(mktemp -d /tmp/tcgpu-test-XXXXXX)
WORK=$(mktemp -d /tmp/tcgpu-work-XXXXXX)
BG_PIDS=()

cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -f "/dev/shm$SIMCUDA_SHM"
    rm -rf "$TCGPU_RUN_DIR" "$WORK"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "-- $*" >&2; }

checksum_of() { sed -n 's/^checksum: *\([0-9a-f]*\).*/\1/p' "$1" | tail -n 1; }

# start_bg OUTFILE CMD... : run CMD in the background; sets BG (its pid).
start_bg() {
    local out=$1; shift
    "$@" >"$out" 2>&1 &
    BG=$!
    BG_PIDS+=("$BG")
}

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

# wait_for_line FILE PATTERN : a line matching PATTERN appeared in FILE
# (within 30 s: programs are slow in the sanitizer builds).
wait_for_line() {
    local i
    for i in $(seq 1 3000); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.01
    done
    fail "'$2' never appeared in $1: $(tail -n 5 "$1")"
}

# device_bytes_of PID : device memory simcuda accounts to PID, all devices
# ("process pid=N device=D used=BYTES ..." lines of simcuda-smi -q).
device_bytes_of() {
    "$SMI" -q | awk -v want="pid=$1" '
        $1 == "process" && $2 == want {
            for (i = 3; i <= NF; i++) if ($i ~ /^used=/) { sub(/^used=/, "", $i); sum += $i }
        }
        END { print sum + 0 }'
}

# random_ms LO HI
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
random_ms() { echo $(( $1 + RANDOM % ($2 - $1 + 1) )); }
sleep_ms() { sleep "$(printf '0.%03d' "$1")"; }

# expect_exit CODE CMD... : CMD exits with CODE; its output goes to $WORK/last.out.
expect_exit() {
    local want=$1 rc=0; shift
    "$@" >"$WORK/last.out" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, expected $want: $(cat "$WORK/last.out")"
}

# status_field PID FIELD : one field of `gpuckpt status PID --json`.
status_field() { "$GPUCKPT" status "$1" --json | sed -n "s/.*\"$2\" *: *\"\\{0,1\\}\\([^,\"}]*\\).*/\\1/p"; }

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
