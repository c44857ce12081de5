#!/usr/bin/env bash
# The demo, on a small simulated GPU (simcuda, 1 GiB): tcgpud shares it
# between two projects. A low-priority training job (project research) fills
# the GPU; a high-priority job of another project (prod) arrives and needs the
# memory; tcgpud suspends the low job (its memory is visibly freed), the high
# job runs to the end, and the low job resumes by itself and finishes. Both
# checksums must equal those of uninterrupted runs (computed first, on a
# device of their own): no work is lost. About a minute. tcgpud serves its
# dashboard meanwhile (the URL is printed; TCGPU_DEMO_HTTP=127.0.0.1:PORT
# fixes the port).
#
# Usage: scripts/demo.sh BUILD_DIR      (exit 1 if a checksum differs)
set -euo pipefail
build=$(cd "${1:?usage: demo.sh BUILD_DIR}" && pwd)
GPUCKPT=$build/tools/gpuckpt/gpuckpt
TCGPUD=$build/tools/tcgpud/tcgpud
TRAIN=$build/examples/train/train
SMI=$build/simcuda/simcuda-smi
for f in "$GPUCKPT" "$TCGPUD" "$TRAIN" "$SMI"; do
    [ -x "$f" ] || { echo "demo: $f is missing: build first (ninja -C $build)" >&2; exit 1; }
done

LOW_ARGS=(--mb 600 --steps 1200 --print-every 0 --seed 7)
HIGH_ARGS=(--mb 600 --steps 500 --print-every 0 --seed 11)
SLEEP_MS=10                       # per step: makes the jobs long enough to watch

work=$(mktemp -d /tmp/tcgpu-demo-XXXXXX)
export SIMCUDA_DEVICE_MEM=1G
export SIMCUDA_SHM=/simcuda-demo-$$
export TCGPU_RUN_DIR=$work/run
export TCGPU_DAEMON_SOCKET=$work/tcgpud.sock
export TCGPU_LOG=quiet
# The driver tcgpud learns the GPUs from, and gpuckpt checkpoints through: the
# simulated one (the jobs link it; tcgpud and gpuckpt load libcuda.so.1 by name,
# and this machine has no other).
export TCGPU_REAL_LIBCUDA=$build/simcuda/libcuda.so.1
mkdir -m 700 "$TCGPU_RUN_DIR"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -f "/dev/shm$SIMCUDA_SHM" "/dev/shm/simcuda-demo-ref-$$"
    rm -rf "$work"
}
trap cleanup EXIT

t0=$(date +%s.%N)
say() { printf '\n\033[1m[%5.1fs] %s\033[0m\n' "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }')" "$*"; }
checksum_of() { sed -n 's/^checksum: *\([0-9a-f]*\).*/\1/p' "$1" | tail -n 1; }
smi() { "$SMI" --query-compute-apps=pid,process_name,used_memory --format=csv || true; }

say "reference runs, uninterrupted, on a device of their own (2 GiB)"
SIMCUDA_SHM=/simcuda-demo-ref-$$ SIMCUDA_DEVICE_MEM=2G "$TRAIN" "${LOW_ARGS[@]}" >"$work/ref-low.out" 2>&1 &
r1=$!
SIMCUDA_SHM=/simcuda-demo-ref-$$ SIMCUDA_DEVICE_MEM=2G "$TRAIN" "${HIGH_ARGS[@]}" >"$work/ref-high.out" 2>&1 &
r2=$!
pids+=("$r1" "$r2")
wait "$r1" && wait "$r2" || { echo "demo: a reference run failed" >&2; tail -n 3 "$work"/ref-*.out >&2; exit 1; }
ref_low=$(checksum_of "$work/ref-low.out"); ref_high=$(checksum_of "$work/ref-high.out")
echo "low job  (600 MiB, 1200 steps): checksum $ref_low"
echo "high job (600 MiB,  500 steps): checksum $ref_high"

cat >"$work/tcgpud.ini" <<EOF
[daemon]
socket = $TCGPU_DAEMON_SOCKET
state_file = $work/tcgpud.state
min_runtime = 2s
metrics = $work/tcgpud.prom
http = ${TCGPU_DEMO_HTTP:-127.0.0.1:0}
dashboard = yes

[project research]
priority = 10
members = *
borrow = yes

[project prod]
priority = 100
reservation = 700M on 0
members = *
EOF
say "tcgpud starts: GPU 0 (1 GiB) shared by 'research' (priority 10, no reservation)"
echo "                and 'prod' (priority 100, 700 MiB reserved on GPU 0)"
"$TCGPUD" --config "$work/tcgpud.ini" >"$work/tcgpud.log" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do [ -S "$TCGPU_DAEMON_SOCKET" ] && break; sleep 0.05; done
url=$(sed -n 's|.*http: serving .* on \(http://[^ ]*\)$|\1|p' "$work/tcgpud.log" | tail -n 1)
[ -n "$url" ] && echo "                dashboard (while the demo runs): $url   metrics: ${url}metrics"
"$GPUCKPT" events --follow --json >"$work/events.jsonl" 2>/dev/null &
pids+=("$!")

say "low-priority job (research) starts and fills the GPU"
"$GPUCKPT" run --project research -- "$TRAIN" "${LOW_ARGS[@]}" --sleep-ms $SLEEP_MS >"$work/low.out" 2>&1 &
low=$!
pids+=("$low")
sleep 5
"$GPUCKPT" ps
smi

say "high-priority job (prod) arrives and needs 600 MiB: only 420 are free"
"$GPUCKPT" run --project prod -- "$TRAIN" "${HIGH_ARGS[@]}" --sleep-ms $SLEEP_MS >"$work/high.out" 2>&1 &
high=$!
pids+=("$high")
for _ in $(seq 200); do
    grep -q '"type":"granted"' "$work/events.jsonl" 2>/dev/null && break
    sleep 0.05
done
sleep 1
say "tcgpud suspended the low job: its memory is free, the high job runs"
"$GPUCKPT" ps
smi

wait "$high" || { echo "demo: the high job failed" >&2; tail -n 5 "$work/high.out" >&2; exit 1; }
say "high job done; tcgpud resumes the low job by itself"
sleep 1.5
"$GPUCKPT" ps
smi
wait "$low" || { echo "demo: the low job failed" >&2; tail -n 5 "$work/low.out" >&2; exit 1; }
say "low job done"
sleep 0.6                        # tcgpud notices the exit on its next tick
kill "${pids[2]}" 2>/dev/null || true
wait "${pids[2]}" 2>/dev/null || true

got_low=$(checksum_of "$work/low.out"); got_high=$(checksum_of "$work/high.out")
python3 - "$work/events.jsonl" "$low" "$high" "$ref_low" "$got_low" "$ref_high" "$got_high" <<'PY'
import json, sys
path, low, high, ref_low, got_low, ref_high, got_high = sys.argv[1:]
ev = [json.loads(l) for l in open(path) if l.strip()]
t0 = ev[0]["time_ms"] if ev else 0
name = {int(low): "low (research)", int(high): "high (prod)"}
print("\nTimeline (tcgpud's events)")
for e in ev:
    who = name.get(e.get("pid"), "pid %s" % e.get("pid", "-"))
    extra = []
    for k in ("why", "for", "bytes", "latency_ms", "wait_ms"):
        if k in e and e[k] != "":
            v = e[k]
            if k == "bytes": v = "%d MiB" % (int(v) >> 20)
            if k == "for": v = name.get(int(v), v)
            extra.append("%s %s" % (k.replace("_", " "), v))
    print("  t+%6.2fs  %-12s %-16s %s" % ((e["time_ms"] - t0) / 1000, e["type"], who, ", ".join(extra)))
def first(typ, pid):
    for e in ev:
        if e["type"] == typ and e.get("pid") == int(pid):
            return e
    return None
reg_l, reg_h = first("registered", low), first("registered", high)
req = first("request", high); granted = first("granted", high)
susp, resumed = first("suspended", low), first("resumed", low)
ex_l, ex_h = first("exited", low), first("exited", high)
ok = all([reg_l, reg_h, req, granted, susp, resumed, ex_l, ex_h])
print("\nSummary")
if ok:
    # busy: some job runs on the GPU (low until its suspend began, high from its grant, low after resume)
    susp_start = first("suspending", low)["time_ms"]
    spans = [(reg_l["time_ms"], susp_start), (granted["time_ms"], ex_h["time_ms"]),
             (resumed["time_ms"], ex_l["time_ms"])]
    spans.sort()
    busy, cur = 0, None
    for a, b in spans:
        if cur and a <= cur[1]:
            cur = (cur[0], max(cur[1], b))
        else:
            if cur: busy += cur[1] - cur[0]
            cur = (a, b)
    busy += cur[1] - cur[0]
    total = ex_l["time_ms"] - reg_l["time_ms"]
    print("  GPU busy fraction       %5.1f%%  (of %.1f s from the first job's start to the last job's end)"
          % (100.0 * busy / total, total / 1000))
    print("  preemption latency      %6.2f s  (high job's request -> memory granted; the suspend itself %.2f s)"
          % ((granted["time_ms"] - req["time_ms"]) / 1000, float(susp["latency_ms"]) / 1000))
    print("  resume latency          %6.2f s  (high job's exit -> low job back on the GPU: %.2f s to refill)"
          % ((resumed["time_ms"] - ex_h["time_ms"]) / 1000, float(resumed["latency_ms"]) / 1000))
else:
    print("  (events incomplete: %s)" % [k for k, v in dict(reg_l=reg_l, reg_h=reg_h, req=req, granted=granted,
          susp=susp, resumed=resumed, ex_l=ex_l, ex_h=ex_h).items() if not v])
same = got_low == ref_low and got_high == ref_high
print("  checksums               low %s (uninterrupted %s) %s" % (got_low, ref_low, "same" if got_low == ref_low else "DIFFERENT"))
print("                          high %s (uninterrupted %s) %s" % (got_high, ref_high, "same" if got_high == ref_high else "DIFFERENT"))
print("  work lost               %s" % ("none" if same else "YES: a checksum differs"))
sys.exit(0 if same and ok else 1)
PY
