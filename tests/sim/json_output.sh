#!/usr/bin/env bash
# gpuckpt's JSON, checked with a strict parser against the schemas of
# docs/cli.md (tests/common/jsoncheck.py: UTF-8, no duplicate keys, every
# key documented and of its documented type, every required key present):
# status, checkpoint, suspend, resume (to host memory and to an image),
# inspect, verify, ps without tcgpud, check, and the failure object of a
# refused and of a mistyped command. The program runs from a directory whose
# name is not UTF-8 and checkpoints into another: the output stays valid
# JSON (the bytes become U+FFFD), and the values keep their types.
. "$(dirname "$0")/lib.sh"

CHECK="python3 $TCGPU_SOURCE_ROOT/tests/common/jsoncheck.py $TCGPU_SOURCE_ROOT/docs/cli.md"
bad=$'\xff\xfe'                                # not UTF-8
bindir="$WORK/bin-$bad"
mkdir "$bindir"
cp "$TRAIN" "$B/examples/train/train_kernels.so" "$bindir/"

# json OBJECT CMD... : run gpuckpt CMD, check its stdout against OBJECT; the output in $OUT.
json() {
    local obj=$1 rc=0; shift
    OUT=$("$GPUCKPT" "$@" 2>"$WORK/err") || rc=$?
    printf '%s\n' "$OUT" | $CHECK "$obj" >&2 || fail "gpuckpt $* --json: not a valid '$obj' object: $OUT"
    RC=$rc
}
field() { printf '%s' "$OUT" | python3 -c 'import json, sys; v = json.load(sys.stdin)
for k in sys.argv[1].split("."): v = v[k]
print(json.dumps(v))' "$1"; }

start_bg "$WORK/run.out" "$GPUCKPT" run -- "$bindir/train" --mb 64 --steps 100000 --print-every 0 --sleep-ms 5
pid=$BG
wait_for_socket "$pid"

json status status "$pid" --json
[ "$RC" -eq 0 ] && [ "$(field state)" = '"running"' ] && [ "$(field pid)" = "$pid" ] ||
    fail "status: exit $RC, $OUT"
json status status "$pid" -o json
[ "$(field trigger_installed)" = true ] || fail "-o json: $OUT"

# a checkpoint into a directory whose name is not UTF-8
json operation checkpoint "$pid" -D "$WORK/ck-$bad" --json
[ "$RC" -eq 0 ] && [ "$(field op)" = '"checkpoint"' ] && [ "$(field status.image_bytes)" -gt 0 ] ||
    fail "checkpoint: exit $RC, $OUT"
case "$(field dir)" in *'\ufffd\ufffd"'|*'��"') ;; *) fail "checkpoint dir not shown with U+FFFD: $(field dir)" ;; esac

json inspect inspect "$WORK/ck-$bad" --json
[ "$RC" -eq 0 ] && [ "$(field kind)" = '"image"' ] && [ "$(field process.pid)" = "$pid" ] ||
    fail "inspect: exit $RC, $OUT"
# the executable's path came from /proc/self/exe, with the invalid bytes
field process.exe | grep -q 'bin-' || fail "inspect: exe $(field process.exe)"
printf '%s' "$OUT" | python3 -c 'import json, sys; e = json.load(sys.stdin)["process"]["exe"]
sys.exit(0 if "\ufffd\ufffd/train" in e else 1)' || fail "inspect: exe not shown with U+FFFD: $(field process.exe)"
json verify verify "$WORK/ck-$bad" --json
[ "$RC" -eq 0 ] && [ "$(field chunks)" -gt 0 ] || fail "verify: exit $RC, $OUT"

json operation suspend "$pid" --json
[ "$RC" -eq 0 ] && [ "$(field status.state)" = '"suspended"' ] && [ "$(field through)" = '"process"' ] &&
    [ "$(field context)" = '"released"' ] && [ "$(field dir)" = null ] || fail "suspend: exit $RC, $OUT"

# refused: the failure object, with the errno and exit 4
json failure suspend "$pid" --json
[ "$RC" -eq 4 ] && [ "$(field ok)" = false ] && [ "$(field errno)" = '"EALREADY"' ] &&
    [ "$(field exit_code)" = 4 ] || fail "a second suspend: exit $RC, $OUT"

json ps-local ps --json
[ "$RC" -eq 0 ] || fail "ps without tcgpud: exit $RC, $OUT"
printf '%s' "$OUT" | python3 -c 'import json, sys
d = json.load(sys.stdin); pid = int(sys.argv[1])
p = [x for x in d["processes"] if x["pid"] == pid]
assert p and p[0]["status"]["state"] == "suspended" and p[0]["command"] == "train", d' "$pid" ||
    fail "ps without tcgpud does not list $pid as suspended: $OUT"
"$GPUCKPT" ps | grep -E "^$pid +[^ ]+ +suspended " >/dev/null || fail "ps text: $("$GPUCKPT" ps)"

json operation resume "$pid" --json
[ "$RC" -eq 0 ] && [ "$(field status.state)" = '"running"' ] && [ "$(field context)" = '"taken-back"' ] ||
    fail "resume: exit $RC, $OUT"

json operation suspend "$pid" -D "$WORK/img-$bad" --json
[ "$RC" -eq 0 ] && [ "$(field status.image_bytes)" -gt 0 ] || fail "suspend -D: exit $RC, $OUT"
json operation resume "$pid" --json
[ "$RC" -eq 0 ] || fail "resume from the image: exit $RC, $OUT"

# a usage error in JSON mode is still one failure object
json failure status "$pid" --json --bogus
[ "$RC" -eq 2 ] && [ "$(field exit_code)" = 2 ] || fail "usage error: exit $RC, $OUT"
# a corrupt image: exit 7 and the failure object
printf 'XXXX' | dd of="$WORK/ck-$bad/data.0" bs=1 seek=64 conv=notrunc 2>/dev/null
json failure verify "$WORK/ck-$bad" --json
[ "$RC" -eq 7 ] || fail "verify of a corrupt image: exit $RC, $OUT"

json check check --json
[ "$RC" -eq 0 ] && [ "$(field ok)" = true ] || fail "check: exit $RC, $OUT"

kill "$pid"
note "every JSON output is valid and typed as docs/cli.md says"
