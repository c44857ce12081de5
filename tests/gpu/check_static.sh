#!/usr/bin/env bash
# The real-GPU suite, checked without a GPU (suite unit): its programs built,
# its scripts parse, run.sh --dry-run lists every step, torch_train.py and torch_ddp.py parse,
# drv_ckpt reports usage and a missing driver with its documented exits.
#
#   check_static.sh BUILD_DIR_OF_TESTS_GPU nvcc|no-nvcc
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BD=$1
NVCC=$2

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

for s in run.sh bundle.sh check_static.sh; do
    bash -n "$HERE/$s" || fail "$s does not parse"
done
ok "scripts parse"

out=$(OUT=$(mktemp -d) "$HERE/run.sh" --dry-run) || fail "run.sh --dry-run exited $?"
for step in env build bw train rt torch torch_exp drvckpt tcgpud; do
    grep -q "^  $step " <<<"$out" || fail "run.sh --dry-run does not list step $step: $out"
done
ok "run.sh --dry-run lists every step"

rc=0; "$HERE/run.sh" --no-such-option >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "run.sh with a bad option should exit 2, not $rc"

for py in torch_train.py torch_ddp.py; do
    python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' \
        "$HERE/progs/$py" || fail "$py does not parse"
    ok "$py parses"
done

[ -x "$BD/drv_ckpt" ] || fail "drv_ckpt was not built"
rc=0; "$BD/drv_ckpt" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "drv_ckpt without arguments should exit 2, not $rc"
rc=0; DRV_CKPT_LIBCUDA=/nonexistent/libcuda.so.1 "$BD/drv_ckpt" state 1 >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 3 ] || fail "drv_ckpt without a driver should exit 3, not $rc"
ok "drv_ckpt exits"

if [ "$NVCC" = nvcc ]; then
    for p in rt_train bw; do
        [ -x "$BD/$p" ] || fail "$p was not built by nvcc"
        head -c 4 "$BD/$p" | grep -q ELF || fail "$p is not an ELF executable"
    done
    ok "rt_train and bw built with nvcc -arch=sm_90"
else
    echo "nvcc not found or gpu_suite disabled: the CUDA programs were not built (not a failure)"
fi
