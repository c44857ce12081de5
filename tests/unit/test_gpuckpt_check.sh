#!/usr/bin/env bash
# gpuckpt check (as criu check): each check's verdict, what it found, and a
# fix in words for anything short of ok; exit 1 only when something tcgpu
# cannot do without fails:
# - a driver that does not load: failed, with the fix, exit 1; the checkpoint
#   API is then skipped, not failed;
# - simcuda: the driver and its checkpoint API are ok;
# - a run dir other users may write to: failed, with what to do; a missing
#   one is fine (it is created);
# - no tcgpud: a warning, not a failure;
# - no CRIU: a warning (only save/restore need it);
# - --json: the same verdicts, one object.
#
#   test_gpuckpt_check.sh GPUCKPT LIBCUDA(simcuda)
set -euo pipefail
G=$1 SIM=$2
work=$(mktemp -d /tmp/tcgpu-check-XXXXXX)
trap 'rm -rf "$work"; rm -f /dev/shm/simcuda-t-check-$$' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export SIMCUDA_SHM=/simcuda-t-check-$$ TCGPU_DAEMON_SOCKET=$work/no-tcgpud.sock TCGPU_CRIU=$work/no-criu
# verdict NAME OUTPUT : the verdict word of check NAME in the text output
verdict() { awk -v n="$1" '$2 == n { print $1; exit }' <<<"$2"; }

mkdir -m 700 "$work/run"
rc=0; out=$(TCGPU_REAL_LIBCUDA=$work/missing.so TCGPU_RUN_DIR=$work/run "$G" check) || rc=$?
[ "$rc" -eq 1 ] || fail "no driver: exit $rc: $out"
[ "$(verdict driver "$out")" = failed ] && grep -q "cannot load the CUDA driver $work/missing.so" <<<"$out" &&
    grep -q "fix: install the NVIDIA driver" <<<"$out" || fail "no driver: $out"
[ "$(verdict checkpoint-api "$out")" = skipped ] || fail "checkpoint-api without a driver: $out"
[ "$(verdict tcgpud "$out")" = warning ] && [ "$(verdict criu "$out")" = warning ] || fail "warnings: $out"
grep -q "check failed" <<<"$out" || fail "no verdict line: $out"

rc=0; out=$(TCGPU_REAL_LIBCUDA=$SIM TCGPU_RUN_DIR=$work/run "$G" check) || rc=$?
[ "$rc" -eq 0 ] || fail "simcuda: exit $rc: $out"
[ "$(verdict driver "$out")" = ok ] && [ "$(verdict checkpoint-api "$out")" = ok ] &&
    [ "$(verdict library "$out")" = ok ] && [ "$(verdict run-dir "$out")" = ok ] || fail "simcuda: $out"
grep -q "Looks good, with 2 warnings" <<<"$out" || fail "the summary: $out"

chmod 0777 "$work/run"
rc=0; out=$(TCGPU_REAL_LIBCUDA=$SIM TCGPU_RUN_DIR=$work/run "$G" check) || rc=$?
[ "$rc" -eq 1 ] && [ "$(verdict run-dir "$out")" = failed ] && grep -q "fix: .*chmod 700" <<<"$out" ||
    fail "an unsafe run dir: exit $rc: $out"
rc=0; out=$(TCGPU_REAL_LIBCUDA=$SIM TCGPU_RUN_DIR=$work/not-yet "$G" check) || rc=$?
[ "$rc" -eq 0 ] && grep -q "does not exist yet" <<<"$out" || fail "a missing run dir: exit $rc: $out"

rc=0; TCGPU_REAL_LIBCUDA=$work/missing.so TCGPU_RUN_DIR=$work/run "$G" check --json >"$work/c.json" || rc=$?
[ "$rc" -eq 1 ] || fail "--json without a driver: exit $rc"
python3 "$TCGPU_SOURCE_ROOT/tests/common/jsoncheck.py" "$TCGPU_SOURCE_ROOT/docs/cli.md" check ok=false <"$work/c.json" ||
    fail "--json: $(cat "$work/c.json")"
python3 -c 'import json, sys
c = {x["name"]: x for x in json.load(open(sys.argv[1]))["checks"]}
assert c["driver"]["result"] == "failed" and c["driver"]["fix"], c["driver"]
assert c["run-dir"]["result"] == "failed" and c["criu"]["result"] == "warning", c
assert c["library"]["fix"] is None, c["library"]' "$work/c.json" || fail "--json verdicts: $(cat "$work/c.json")"
echo "gpuckpt check: all checks passed"
