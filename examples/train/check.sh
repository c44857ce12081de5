#!/usr/bin/env bash
# Test driver for the example training loops (suite 'sim').
#
#   check.sh determinism EXE ARGS...  run EXE ARGS --seed 7 twice and --seed 8 once:
#                                     the two checksums of seed 7 must match, seed 8's
#                                     must differ, and the loss must go down.
#   check.sh bad-kernels EXE ARGS...  --kernels pointing at a missing file must fail
#                                     with "cuModuleLoad failed: CUDA_ERROR_... (N)".
#
# SIMCUDA_SHM (the test's own simulated device) is removed at exit.
set -uo pipefail

mode=${1:?usage: check.sh determinism|bad-kernels EXE ARGS...}
exe=${2:?usage: check.sh MODE EXE ARGS...}
shift 2
tmp=$(mktemp -d)
cleanup() {
    rm -rf "$tmp"
    [ -n "${SIMCUDA_SHM:-}" ] && rm -f "/dev/shm${SIMCUDA_SHM}"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# run NAME ARGS...: run the example, keep its output in $tmp/NAME, print it.
run() {
    local name=$1
    shift
    echo "+ $exe $*"
    "$exe" "$@" >"$tmp/$name" 2>&1
    local rc=$?
    cat "$tmp/$name"
    return $rc
}

checksum() {
    local n
    n=$(grep -c '^checksum: ' "$1")
    [ "$n" = 1 ] || fail "$1: $n checksum lines, want 1"
    tail -n 1 "$1" | grep -Eq '^checksum: [0-9a-f]{16}$' || fail "$1: last line is not 'checksum: <16 hex>'"
    tail -n 1 "$1" | cut -d' ' -f2
}

# First and last loss of thread 0 (train prints no thread field).
losses() {
    grep -E '^step [0-9]+ loss [-0-9.e+naif]+( thread 0)?$' "$1" | awk '{print $4}' | sed -n '1p;$p'
}

case $mode in
determinism)
    run a "$@" --seed 7 || fail "first run exited $?"
    run b "$@" --seed 7 || fail "second run exited $?"
    run c "$@" --seed 8 || fail "third run exited $?"
    a=$(checksum "$tmp/a") || exit 1
    b=$(checksum "$tmp/b") || exit 1
    c=$(checksum "$tmp/c") || exit 1
    [ "$a" = "$b" ] || fail "same seed, different checksums: $a $b"
    [ "$a" != "$c" ] || fail "different seeds, same checksum: $a"
    read -r first last < <(losses "$tmp/a" | tr '\n' ' ')
    [ -n "${first:-}" ] && [ -n "${last:-}" ] || fail "no 'step N loss X' lines"
    awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }' || fail "loss did not go down: $first -> $last"
    echo "ok: checksum $a twice, $c for another seed; loss $first -> $last"
    ;;
bad-kernels)
    run a "$@" --kernels /nonexistent/train_kernels.so
    rc=$?
    [ $rc = 1 ] || fail "exit status $rc, want 1"
    grep -Eq '^cuModuleLoad failed: CUDA_ERROR_[A-Z_]+ \([0-9]+\)$' "$tmp/a" || fail "no 'cuModuleLoad failed: NAME (code)' line"
    echo "ok"
    ;;
*)
    fail "unknown mode $mode"
    ;;
esac
