# Shared by the web tests (suite 'web'): the demo's preemption on simcuda,
# with tcgpud serving HTTP on loopback. Sourced after tests/sim/lib.sh and
# tests/sim/tcgpud_lib.sh.

# http_port : the port tcgpud logged it serves HTTP on (sets HTTP).
http_port() {
    local i
    for i in $(seq 1 200); do
        HTTP=$(sed -n 's|.*http: serving .* on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$WORK/tcgpud.log" | tail -n 1)
        [ -n "$HTTP" ] && return 0
        sleep 0.05
    done
    fail "tcgpud does not say where it serves HTTP: $(tail -n 5 "$WORK/tcgpud.log")"
}

# preemption DASHBOARD : the demo's scenario: a research job (priority 10)
# fills the 1 GiB GPU; a prod job (priority 100, 700 MiB reserved) arrives
# and needs the memory; tcgpud suspends the research job. Returns once the
# prod job runs and the research job is suspended; the prod job runs on
# (long) until the caller kills it. Sets low, high and HTTP.
preemption() {
    write_config "http = 127.0.0.1:0
dashboard = $1

[gpu 0]
capacity = 1G

[project research]
priority = 10
members = *

[project prod]
priority = 100
reservation = 700M on 0
members = *
"
    start_tcgpud
    http_port
    start_bg "$WORK/low.out" "$GPUCKPT" run --project research -- "$TRAIN" --mb 600 --steps 100000 \
        --print-every 0 --sleep-ms 10
    low=$BG
    wait_registered "$low"
    sleep 1.2                              # older than min_runtime (1 s)
    start_bg "$WORK/high.out" "$GPUCKPT" run --project prod -- "$TRAIN" --mb 600 --steps 100000 \
        --print-every 0 --sleep-ms 10
    high=$BG
    wait_state "$low" suspended 60
    wait_registered "$high"
    wait_state "$high" running 60
}
