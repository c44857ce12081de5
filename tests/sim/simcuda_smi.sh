#!/usr/bin/env bash
# simcuda-smi speaks nvidia-smi's options (docs/simcuda.md): the queries
# scripts use (--query-gpu, --query-compute-apps with --format=csv and its
# noheader/nounits), -q as the human report, -L, -i; the numbers agree
# with what the device accounts, and the UUID is cuDeviceGetUuid's; an
# unknown field or a missing --format is an error (exit 2), as there.
. "$(dirname "$0")/lib.sh"

export SIMCUDA_DEVICES=2 SIMCUDA_DEVICE_MEM=512M
start_bg "$WORK/job.out" "$GPUCKPT" run -- "$TRAIN" --mb 100 --steps 100000 --print-every 0 --sleep-ms 5
pid=$BG
for i in $(seq 1 500); do
    [ "$(device_bytes_of "$pid")" -ge $((100 << 20)) ] && break
    sleep 0.02
done

out=$("$SMI" --query-gpu=index,memory.total,memory.used,memory.free --format=csv)
head -n 1 <<<"$out" | grep -qx 'index, memory.total \[MiB\], memory.used \[MiB\], memory.free \[MiB\]' ||
    fail "--query-gpu header: $out"
grep -qx '0, 512 MiB, [0-9]* MiB, [0-9]* MiB' <<<"$out" || fail "--query-gpu rows: $out"
[ "$(wc -l <<<"$out")" -eq 3 ] || fail "two GPUs, a header: $out"
out=$("$SMI" --query-gpu=memory.used,memory.free --format=csv,noheader,nounits -i 0)
used=${out%%,*}; free=${out##*, }
[ "$used" -ge 100 ] && [ $((used + free)) -ge 511 ] && [ $((used + free)) -le 512 ] || fail "nounits: used $used, free $free"

out=$("$SMI" --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader)
grep -q "^$pid, train, [0-9]* MiB, GPU-" <<<"$out" || fail "--query-compute-apps: $out"
mib=$(grep "^$pid," <<<"$out" | head -n 1 | cut -d, -f3 | tr -dc 0-9)
[ "$mib" -eq $(( $(device_bytes_of "$pid") >> 20 )) ] || fail "used_memory $mib MiB is not the bytes' $(device_bytes_of "$pid")"
[ "$(smi_state "$pid")" = running ] || fail "checkpoint_state: $(smi_state "$pid")"

# the UUID is the one the driver gives, in nvidia-smi's form
uuid=$("$SMI" --query-gpu=uuid --format=csv,noheader -i 0)
[[ "$uuid" =~ ^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ ]] || fail "uuid $uuid"
"$SMI" -L | grep -qx "GPU 0: simcuda H100 (simulated) (UUID: $uuid)" || fail "-L: $("$SMI" -L)"
"$GPUCKPT" checkpoint "$pid" -D "$WORK/ck" -q --wait 10 || fail "checkpoint for the image's uuid"
"$GPUCKPT" inspect "$WORK/ck" --json | python3 -c 'import json, sys
d = json.load(sys.stdin)["devices"][0]["uuid"]
want = sys.argv[1][4:].replace("-", "")
sys.exit(0 if d == want else 1)' "$uuid" || fail "simcuda-smi's uuid $uuid is not cuDeviceGetUuid's"

# -q: the report for people, not key=value lines
rep=$("$SMI" -q)
grep -q '^Attached GPUs  *: 2$' <<<"$rep" && grep -q "Process ID  *: $pid$" <<<"$rep" &&
    grep -q 'Used GPU Memory  *: [0-9]* MiB' <<<"$rep" || fail "-q: $rep"
! grep -q '=' <<<"$(grep -v '=====' <<<"$rep")" || fail "-q still prints key=value lines: $rep"
"$SMI" | grep -qE "^\|  +0 +$pid +C  running +train " || fail "the table has no row for $pid: $("$SMI")"

# errors, as nvidia-smi's
rc=0; "$SMI" --query-gpu=index,bogus --format=csv >"$WORK/err" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q 'Field "bogus" is not a valid field to query' "$WORK/err" || fail "unknown field: exit $rc, $(cat "$WORK/err")"
rc=0; "$SMI" --query-gpu=index >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "no --format: exit $rc"
rc=0; "$SMI" -i 7 >/dev/null 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "-i of a GPU that is not there: exit 0"
kill "$pid"
note "simcuda-smi answers nvidia-smi's queries"
