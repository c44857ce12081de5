#!/usr/bin/env bash
# What gpuckpt says about tcgpud's jobs, checked strictly (tests/common/
# jsoncheck.py against docs/cli.md): a project named "2024" stays a string
# and a priority an integer in ps --json and events --json; suspend and
# resume of a managed job with --json say they went through tcgpud; a
# refusal is the failure object with its errno; gpuckpt events' text shows
# dates, sizes in MiB and "limit none", as ps does; gpuckpt check finds
# tcgpud.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

CHECK="python3 $TCGPU_SOURCE_ROOT/tests/common/jsoncheck.py $TCGPU_SOURCE_ROOT/docs/cli.md"
write_config "
[project 2024]
priority = 7
members = *
"
start_tcgpud
start_bg "$WORK/job.out" "$GPUCKPT" run --project 2024 -- "$TRAIN" --mb 64 --steps 100000 --print-every 0 --sleep-ms 5
job=$BG
wait_registered "$job"

"$GPUCKPT" ps --json >"$WORK/ps.json" || fail "ps --json"
$CHECK ps ok=true tcgpud=true <"$WORK/ps.json" || fail "ps --json: $(cat "$WORK/ps.json")"
python3 - "$WORK/ps.json" "$job" <<'PY' || fail "ps --json types: $(cat "$WORK/ps.json")"
import json, sys
d = json.load(open(sys.argv[1]))
j = [x for x in d["jobs"] if x["pid"] == int(sys.argv[2])][0]
assert j["project"] == "2024" and isinstance(j["project"], str), j
assert j["priority"] == 7 and isinstance(j["borrowing"], bool) and j["limit"] == 0, j
PY

"$GPUCKPT" suspend "$job" --json >"$WORK/suspend.json" || fail "suspend through tcgpud: $(cat "$WORK/suspend.json")"
$CHECK operation ok=true through='"tcgpud"' <"$WORK/suspend.json" || fail "suspend --json: $(cat "$WORK/suspend.json")"
wait_state "$job" suspended
rc=0; "$GPUCKPT" suspend "$job" --json >"$WORK/again.json" 2>/dev/null || rc=$?
[ "$rc" -eq 4 ] || fail "a second suspend through tcgpud: exit $rc"
$CHECK failure ok=false errno='"EALREADY"' <"$WORK/again.json" || fail "refusal: $(cat "$WORK/again.json")"
"$GPUCKPT" resume "$job" --json >"$WORK/resume.json" || fail "resume through tcgpud"
$CHECK operation ok=true through='"tcgpud"' <"$WORK/resume.json" || fail "resume --json: $(cat "$WORK/resume.json")"
wait_state "$job" running

"$GPUCKPT" events --json >"$WORK/events.json" || fail "events --json"
$CHECK event --lines <"$WORK/events.json" || fail "events --json: $(head -c 2000 "$WORK/events.json")"
python3 - "$WORK/events.json" "$job" <<'PY' || fail "events --json types"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
mine = [e for e in ev if e.get("pid") == int(sys.argv[2])]
types = [e["type"] for e in mine]
assert "registered" in types and "manual-suspend" in types and "resumed" in types, types
assert all(e["project"] == "2024" and e["priority"] == 7 for e in mine), mine
reg = [e for e in mine if e["type"] == "registered"][0]
assert reg["limit"] == 0 and reg["priority_given"] is None, reg
PY

# the text: dates, MiB, limit none
evs=$("$GPUCKPT" events)
grep -qE "^20[0-9]{2}-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9]\.[0-9]{3}  registered +pid $job \([^,]+, 2024, prio 7\)  limit none" <<<"$evs" ||
    fail "events text (date, job, limit none): $evs"
grep -qE "request +pid $job .*bytes [0-9]+ MiB" <<<"$evs" || grep -qE "manual-suspend +pid $job" <<<"$evs" ||
    fail "events text: $evs"
grep -qE "resumed +pid $job .*latency [0-9.]+ ms" <<<"$evs" || fail "events text has no latency: $evs"

"$GPUCKPT" check --json >"$WORK/check.json" || true
$CHECK check <"$WORK/check.json" || fail "check --json: $(cat "$WORK/check.json")"
python3 -c 'import json, sys
c = {x["name"]: x for x in json.load(open(sys.argv[1]))["checks"]}
assert c["tcgpud"]["result"] in ("ok", "warning") and "tcgpud " in c["tcgpud"]["detail"], c["tcgpud"]' "$WORK/check.json" ||
    fail "gpuckpt check does not find tcgpud: $(cat "$WORK/check.json")"
kill "$job"
note "ps, events, suspend and resume through tcgpud: typed by key, a project 2024 a string"
