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

# json OBJECT EXPECTED-EXIT [EXPECTATION...] -- CMD... : gpuckpt CMD exits
# EXPECTED-EXIT, and its stdout is a valid OBJECT holding the expectations
# (jsoncheck.py's PATH=JSON, PATH~TEXT, PATH>NUMBER); one parse per command.
json() {
    local obj=$1 want=$2 rc=0 exp=(); shift 2
    while [ "$1" != -- ]; do exp+=("$1"); shift; done; shift
    "$GPUCKPT" "$@" >"$WORK/out.json" 2>"$WORK/err" || rc=$?
    [ "$rc" -eq "$want" ] || fail "gpuckpt $*: exit $rc, not $want: $(cat "$WORK/out.json" "$WORK/err")"
    $CHECK "$obj" "${exp[@]}" <"$WORK/out.json" >&2 ||
        fail "gpuckpt $*: not the '$obj' docs/cli.md describes: $(cat "$WORK/out.json")"
}

start_bg "$WORK/run.out" "$GPUCKPT" run -- "$bindir/train" --mb 64 --steps 100000 --print-every 0 --sleep-ms 5
pid=$BG
wait_for_socket "$pid"

json status 0 state='"running"' pid="$pid" -- status "$pid" --json
json status 0 trigger_installed=true -- status "$pid" -o json

# a checkpoint into a directory whose name is not UTF-8: U+FFFD for its bytes
json operation 0 op='"checkpoint"' status.image_bytes\>0 dir~$'\xef\xbf\xbd\xef\xbf\xbd' -- \
    checkpoint "$pid" -D "$WORK/ck-$bad" --json
# the executable's path, from /proc/self/exe, had the invalid bytes too
json inspect 0 kind='"image"' process.pid="$pid" process.exe~$'bin-\xef\xbf\xbd\xef\xbf\xbd/train' -- \
    inspect "$WORK/ck-$bad" --json
json verify 0 kind='"image"' chunks\>0 -- verify "$WORK/ck-$bad" --json

json operation 0 status.state='"suspended"' through='"process"' context='"released"' dir=null -- \
    suspend "$pid" --json
# refused: the failure object, with the errno and exit 4
json failure 4 ok=false errno='"EALREADY"' exit_code=4 -- suspend "$pid" --json

# ps lists every tcgpu process root can see, other tests' too, maybe of
# another tcgpu version reporting keys this one does not know (docs/cli.md,
# status-fields): the schema is checked on this test's process only.
"$GPUCKPT" ps --json >"$WORK/ps-all.json" || fail "ps --json: exit $?: $(cat "$WORK/ps-all.json")"
python3 -c 'import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8")); pid = int(sys.argv[2])
d["processes"] = [x for x in d["processes"] if x["pid"] == pid]
json.dump(d, sys.stdout, ensure_ascii=False)' "$WORK/ps-all.json" "$pid" >"$WORK/ps.json" ||
    fail "ps --json is not JSON: $(cat "$WORK/ps-all.json")"
$CHECK ps-local tcgpud=false processes.0.pid="$pid" processes.0.status.state='"suspended"' \
    processes.0.command='"train"' <"$WORK/ps.json" >&2 ||
    fail "ps without tcgpud does not list $pid as the suspended train ps-local describes: $(cat "$WORK/ps-all.json")"
"$GPUCKPT" ps | grep -E "^$pid +[^ ]+ +suspended " >/dev/null || fail "ps text: $("$GPUCKPT" ps)"

json operation 0 status.state='"running"' context='"taken-back"' -- resume "$pid" --json
json operation 0 status.image_bytes\>0 -- suspend "$pid" -D "$WORK/img-$bad" --json
json operation 0 status.state='"running"' -- resume "$pid" --json

# a usage error in JSON mode is still one failure object
json failure 2 exit_code=2 -- status "$pid" --json --bogus
# ... whichever comes first (getopt met the error before --json, and printed
# no object)
json failure 2 exit_code=2 -- status "$pid" --bogus --json
json failure 2 exit_code=2 -- suspend "$pid" --timeout 1e3 -o json
# a corrupt image: exit 7 and the failure object
printf 'XXXX' | dd of="$WORK/ck-$bad/data.0" bs=1 seek=64 conv=notrunc 2>/dev/null
json failure 7 exit_code=7 -- verify "$WORK/ck-$bad" --json

json check 0 ok=true -- check --json

kill "$pid"
note "every JSON output is valid and typed as docs/cli.md says"
