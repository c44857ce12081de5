#!/usr/bin/env bash
# A real Prometheus (Debian's) scrapes tcgpud's /metrics on loopback every
# second during the demo's preemption; the series are then read back through
# Prometheus's HTTP API, PromQL over the histograms included:
# - up, tcgpud_build_info, a fresh tcgpud_last_update_timestamp_seconds;
# - one preemption, one job suspended (in research), prod's memory in use
#   and its reservation, the suspend's latency as a histogram whose median
#   PromQL computes, a grant that waited, an events_total counter;
# - the per-GPU series carry the GPU's UUID as simcuda-smi shows it (label
#   UUID, as NVIDIA's DCGM exporter names it), and a PromQL join on UUID with
#   a series labelled as the exporter labels its own (a constant, standing in
#   for DCGM_FI_DEV_FB_USED) matches both projects' series;
# - once the prod job ends, the research job's resume.
# promtool checks the exposition format on the way. Prometheus runs from a
# temporary directory on a free port and is stopped at the end.
. "$(dirname "$0")/../sim/lib.sh"
. "$(dirname "$0")/../sim/tcgpud_lib.sh"
. "$(dirname "$0")/lib.sh"

command -v prometheus >/dev/null || fail "prometheus is not installed (scripts/setup.sh installs it)"
command -v promtool >/dev/null || fail "promtool is not installed (Debian's prometheus package has it)"

preemption no

# Prometheus, scraping tcgpud every second
pport=$(free_ports 1)
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tcgpud
    static_configs:
      - targets: ['127.0.0.1:$HTTP']
EOF
start_bg "$WORK/prometheus.log" prometheus --config.file="$WORK/prometheus.yml" \
    --storage.tsdb.path="$WORK/tsdb" --web.listen-address="127.0.0.1:$pport" --log.level=warn
prom=$BG
for i in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$pport/-/ready" >/dev/null 2>&1 && break
    kill -0 "$prom" 2>/dev/null || fail "prometheus died: $(tail -n 5 "$WORK/prometheus.log")"
    sleep 0.1
done
curl -sf "http://127.0.0.1:$pport/-/ready" >/dev/null || fail "prometheus not ready after 30 s"

curl -sf "http://127.0.0.1:$HTTP/metrics" | promtool check metrics ||
    fail "promtool check metrics refuses tcgpud's exposition"

# query PROMQL : the value of a one-element instant vector ("" when empty)
query() {
    curl -sf -G "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["status"] == "success", r
v = r["data"]["result"]
print(v[0]["value"][1] if v else "")'
}

# until_true PROMQL : PROMQL gives a non-empty result within 30 s (Prometheus scraped it)
until_true() {
    local i v
    for i in $(seq 1 300); do
        v=$(query "$1" 2>/dev/null || true)
        [ -n "$v" ] && return 0
        sleep 0.1
    done
    fail "Prometheus never saw: $1 (last scrape: $(query 'up{job="tcgpud"}'))"
}

# is PROMQL VALUE : PROMQL evaluates to VALUE now
is() {
    local v
    v=$(query "$1")
    [ "$v" = "$2" ] || fail "Prometheus: $1 = '$v', not $2"
}

until_true 'tcgpud_preemptions_total >= 1'
is 'up{job="tcgpud"}' 1
is 'tcgpud_build_info{version="0.1.0"}' 1
[ -n "$(query 'time() - tcgpud_last_update_timestamp_seconds < 10')" ] || fail "tcgpud's metrics are stale"
is 'tcgpud_preemptions_total' 1
until_true 'tcgpud_jobs{state="suspended"} == 1'
is 'tcgpud_project_jobs{project="research",state="suspended"}' 1
is 'tcgpud_project_jobs{project="prod",state="running"}' 1
is 'tcgpud_project_reservation_bytes{project="prod",device="0"}' $((700 << 20))
[ -n "$(query 'tcgpud_project_memory_used_bytes{project="prod",device="0"} > 500 * 1024 * 1024')" ] ||
    fail "prod's memory in use: $(query 'tcgpud_project_memory_used_bytes{project="prod",device="0"}')"
# the GPU's UUID, as the driver gives it, joins a DCGM exporter's series
uuid=$("$SMI" --query-gpu=uuid --format=csv,noheader -i 0)
is "count(tcgpud_device_memory_capacity_bytes{device=\"0\",UUID=\"$uuid\"})" 1
is "count(tcgpud_project_memory_used_bytes{project=\"prod\",device=\"0\",UUID=\"$uuid\"})" 1
is "count(tcgpud_project_memory_used_bytes * on(UUID) group_left() label_replace(vector(1), \"UUID\", \"$uuid\", \"\", \"\"))" 2
is 'tcgpud_suspend_latency_seconds_count' 1
is 'tcgpud_events_total{type="suspended"}' 1
# the histograms, through PromQL: a median between a bucket's bounds, a grant that waited
med=$(query 'histogram_quantile(0.5, sum by (le) (tcgpud_suspend_latency_seconds_bucket))')
python3 -c "import sys; v = float(sys.argv[1]); sys.exit(0 if 0 < v <= 300 else 1)" "$med" ||
    fail "the suspend latency's median from the histogram: '$med'"
[ -n "$(query 'tcgpud_grant_wait_seconds_count >= 1')" ] || fail "no grant wait in the histogram"

# the prod job ends: the research job resumes, and Prometheus sees it
kill "$high"
wait_state "$low" running 60
until_true 'tcgpud_resume_latency_seconds_count == 1'
until_true 'tcgpud_jobs{state="suspended"} == 0'
note "Prometheus scraped tcgpud through the preemption (median suspend latency ${med} s)"
