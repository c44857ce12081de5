#!/usr/bin/env bash
# tcgpud: a high-priority job arrives on a full GPU; the low-priority job is
# suspended (its memory really freed: simcuda-smi), the high job runs, the
# low job is resumed automatically; both checksums equal uninterrupted runs.
# Metrics and events record it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

low_args=(--mb 500 --steps 400 --print-every 100 --seed 3)
high_args=(--mb 500 --steps 150 --print-every 50 --seed 4)
low_then_high 20        # 150 steps of 20 ms: the high job still runs when its victim is looked at
wait_state "$low" suspended
held=$(device_bytes_of "$low")
[ "$held" -le "$SLACK" ] || fail "the suspended low job still holds $held bytes"
# one snapshot of tcgpud's view, taken at once: separate ps calls, each
# slow on a loaded machine, saw the fields change under them
read -r state by why for < <("$GPUCKPT" ps --daemon --json 2>/dev/null | python3 -c '
import json, sys
for j in json.load(sys.stdin)["jobs"]:
    if j["pid"] == int(sys.argv[1]):
        print(*(j.get(k, "-") for k in ("state", "suspended_by", "why", "for")))' "$low")
[ "$state" = suspended ] || fail "the victim is $state, not suspended, just after it was seen suspended"
[ "$by" = policy ] || fail "suspended_by: '$by', want policy"
[ "$why" = priority ] || fail "why: '$why', want priority"
[ "$for" = "$high" ] || fail "for: '$for', want $high"
note "low job suspended for the high one; it holds $held bytes"

wait "$high" || fail "the high job failed: $(tail -n 5 "$WORK/high.out")"
wait_state "$low" running 20
wait "$low" || fail "the low job failed: $(tail -n 5 "$WORK/low.out")"
[ "$(checksum_of "$WORK/low.out")" = "$ref_low" ] || fail "low checksum $(checksum_of "$WORK/low.out") != $ref_low"
[ "$(checksum_of "$WORK/high.out")" = "$ref_high" ] || fail "high checksum $(checksum_of "$WORK/high.out") != $ref_high"

evs=$(events_of "$low" | tr '\n' ' ')
case "$evs" in
    *registered*suspending*suspended*resuming*resumed*) ;;
    *) fail "events of the low job: $evs" ;;
esac
# the text: the high job's request shows sizes in MiB, never raw bytes (its
# free memory was)
evs=$("$GPUCKPT" events)
grep -qE "request +pid $high .*bytes [0-9.]+ [MGK]iB.*free [0-9.]+ [MGK]iB" <<<"$evs" ||
    fail "events text: the high job's request without bytes and free memory in MiB: $evs"
grep -qE "(bytes|free|gpu memory now) [0-9]+(,|$)" <<<"$evs" && fail "events text has a size in raw bytes: $evs"
sleep 1                                    # the next tick rewrites the metrics
grep -q '^tcgpud_preemptions_total 1$' "$WORK/tcgpud.prom" || fail "metrics: $(cat "$WORK/tcgpud.prom")"
grep -q '^tcgpud_suspend_latency_seconds_count 1$' "$WORK/tcgpud.prom" || fail "no suspend latency in the metrics"
grep -q '^tcgpud_resume_latency_seconds_count 1$' "$WORK/tcgpud.prom" || fail "no resume latency in the metrics"
# One suspend and one resume, each in its histogram: the buckets below the
# observation (_sum) hold 0, those from it up, +Inf included, hold 1.
python3 - "$WORK/tcgpud.prom" <<'PY' || fail "latency histograms: $(grep _latency_ "$WORK/tcgpud.prom")"
import re, sys
text = open(sys.argv[1]).read()
for name in ("tcgpud_suspend_latency_seconds", "tcgpud_resume_latency_seconds"):
    obs = float(re.search(r"^%s_sum (\S+)$" % name, text, re.M).group(1))
    buckets = re.findall(r'^%s_bucket\{le="([^"]+)"\} (\d+)$' % name, text, re.M)
    assert buckets and buckets[-1][0] == "+Inf", (name, buckets)
    for le, n in buckets:
        want = 1 if le == "+Inf" or float(le) >= obs else 0
        assert int(n) == want, (name, obs, le, n)
PY
echo "ok: preempted and resumed automatically, checksums $ref_low $ref_high"
