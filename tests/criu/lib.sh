# Helpers of the save/restore tests (sourced by tests/criu/*.sh), on top of
# tests/sim/lib.sh: a private simulated device and run dir per test, gpuckpt
# aimed at simcuda. CRIU needs root: skip (77) without it or without criu.
#
# Processes restored by CRIU are not children of the test shell: wait for
# them by polling /proc, and read what they print from files (their stdout is
# redirected to a file before the save; CRIU restores the descriptor).
if [ "$(id -u)" -ne 0 ]; then echo "skipped: needs root (CRIU)"; exit 77; fi
CRIU=${TCGPU_CRIU:-$(command -v criu || echo /usr/local/sbin/criu)}
if [ ! -x "$CRIU" ]; then echo "skipped: criu not found"; exit 77; fi
export TCGPU_CRIU=$CRIU

. "$(dirname "$0")/../sim/lib.sh"
# gpuckpt save/restore drive tcgpu's CRIU plugin: built with CRIU's plugin header
[ -f "$B/plugins/criu/tcgpu_plugin.so" ] || { echo "skipped: the CRIU plugin is not built (scripts/setup.sh)"; exit 77; }

GPU_TREE=$B/tests/criu/gpu_tree
KILL_PIDS=()
MOUNTS=()

criu_cleanup() {
    local p m
    for p in "${KILL_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null || true; done
    cleanup
}
trap criu_cleanup EXIT

# children_of PID : pids of PID's children (every thread's).
children_of() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -v '^$' || true; }

# expect_fail CODE MESSAGE_PATTERN CMD... : CMD exits with CODE and says MESSAGE_PATTERN.
expect_fail() {
    local code=$1 pat=$2 rc=0; shift 2
    "$@" >"$WORK/cmd.out" 2>"$WORK/cmd.err" || rc=$?
    [ "$rc" -eq "$code" ] || fail "$* exited $rc, expected $code: $(cat "$WORK/cmd.err")"
    grep -q -- "$pat" "$WORK/cmd.err" || fail "$* did not say '$pat': $(cat "$WORK/cmd.err")"
    note "refused as expected: $(head -n 1 "$WORK/cmd.err")"
}
