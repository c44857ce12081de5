#!/usr/bin/env bash
# tcgpud --check-config FILE (as nginx -t): a broken file lists every error
# with its line and exits 1 without starting anything; a valid one exits 0,
# with a warning for each member, @group or admins group that does not
# exist here; the shipped example (examples/tcgpud.ini) is valid.
set -euo pipefail
tcgpud=${1:?tcgpud}
example=${2:?examples/tcgpud.ini}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$work/bad.ini" <<'INI'
[daemon]
socket = relative
http = 127.0.0.1:99999
[gpu x]
capacity = 1G
[project prod]
priority = high
members = tcgpu-no-such-user, root
INI
rc=0; out=$("$tcgpud" --check-config "$work/bad.ini" 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "a broken file: exit $rc: $out"
for want in "bad.ini:2: socket:" "bad.ini:3: http:" "bad.ini:4: \[gpu x\]" "bad.ini:7: priority:" \
            "bad.ini:8: warning: \[project prod\]: no user 'tcgpu-no-such-user'" \
            "configuration $work/bad.ini: 4 errors, 1 warning"; do
    grep -q -- "$want" <<<"$out" || fail "'$want' missing from: $out"
done
grep -q "bad.ini:5:" <<<"$out" && fail "a key of the broken [gpu x] is reported: $out"

cat >"$work/good.ini" <<INI
[daemon]
socket = $work/never.sock
admins = tcgpu-no-such-group
http = 9466
dashboard = yes
[project prod]
members = root, @tcgpu-no-such-group
INI
rc=0; out=$("$tcgpud" --check-config "$work/good.ini" 2>&1) || rc=$?
[ "$rc" -eq 0 ] || fail "a valid file: exit $rc: $out"
grep -q "good.ini:3: warning: admins: no group 'tcgpu-no-such-group'" <<<"$out" || fail "$out"
grep -q "good.ini:7: warning: \[project prod\]: no group 'tcgpu-no-such-group'" <<<"$out" || fail "$out"
grep -q "is valid: 1 project, 0 GPUs configured, 2 warnings" <<<"$out" || fail "$out"
[ ! -e "$work/never.sock" ] || fail "--check-config started serving"

rc=0; out=$("$tcgpud" --check-config "$example" 2>&1) || rc=$?
[ "$rc" -eq 0 ] || fail "the example configuration: exit $rc: $out"
rc=0; "$tcgpud" --check-config "$work/missing.ini" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "a missing file: exit $rc"
echo "tcgpud --check-config: all checks passed"
