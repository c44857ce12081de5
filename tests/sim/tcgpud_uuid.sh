#!/usr/bin/env bash
# GPUs by UUID (docs/tcgpud.md, "GPUs"): on a machine of two simulated GPUs,
# two jobs that each see one GPU as their device 0 (CUDA_VISIBLE_DEVICES=1,
# =0, as Slurm's GRES sets it) are accounted to two GPUs, each to the one it
# runs on; a job naming its GPU by UUID (CUDA_VISIBLE_DEVICES=GPU-...) lands
# on the same one; the numbers survive a restart of tcgpud (state file);
# made-up UUIDs in a flood of registrations are refused (tcgpud knows the
# GPUs' UUIDs from the driver) and do not lock a real GPU out.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"
export SIMCUDA_DEVICES=3                # no job is on GPU 2 before the flood

# job_on VISIBLE MB : a long job under tcgpud that sees VISIBLE; sets BG.
job_on() {
    start_bg "$WORK/job-$1.out" env CUDA_VISIBLE_DEVICES="$1" "$GPUCKPT" run --project research -- \
        "$TRAIN" --mb "$2" --steps 1000000 --print-every 0 --sleep-ms 5
    wait_registered "$BG"
}

# device_field N KEY : KEY of tcgpud's GPU N in gpuckpt ps --json.
device_field() {
    "$GPUCKPT" ps --json | python3 -c '
import json, sys
for d in json.load(sys.stdin)["devices"]:
    if d["id"] == int(sys.argv[1]): print(d.get(sys.argv[2], ""))' "$1" "$2"
}

# wait_used N MIN : tcgpud accounts at least MIN bytes to GPU N.
wait_used() {
    local i
    for i in $(seq 1 200); do
        [ "$(device_field "$1" used)" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.05
    done
    fail "GPU $1: $(device_field "$1" used) bytes accounted, not $2: $("$GPUCKPT" ps)"
}

write_config "
[project research]
priority = 10
members = *
"
start_tcgpud
job_on 1 96
a=$BG
job_on 0 32
b=$BG
[ "$(job_field "$a" device)" = 1 ] || fail "the job on physical GPU 1 is accounted to GPU $(job_field "$a" device)"
[ "$(job_field "$b" device)" = 0 ] || fail "the job on physical GPU 0 is accounted to GPU $(job_field "$b" device)"
u0=$(device_field 0 uuid)
u1=$(device_field 1 uuid)
[[ "$u0" =~ ^GPU-[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}$ ]] || fail "GPU 0's UUID: '$u0'"
[ -n "$u1" ] && [ "$u1" != "$u0" ] || fail "GPU 1's UUID '$u1' (GPU 0's is $u0)"
wait_used 1 $((96 << 20))
used0=$(device_field 0 used)
[ "$used0" -lt $((96 << 20)) ] || fail "GPU 0 is charged $used0 bytes: the job on GPU 1 too"
"$GPUCKPT" ps | grep -q "^GPU 1 ($u1): " || fail "gpuckpt ps does not name GPU 1's UUID: $("$GPUCKPT" ps)"
note "CUDA_VISIBLE_DEVICES=1 and =0: GPUs 1 ($u1) and 0 ($u0), each charged its own job"

job_on "$u1" 16
c=$BG
[ "$(job_field "$c" device)" = 1 ] || fail "CUDA_VISIBLE_DEVICES=$u1 is accounted to GPU $(job_field "$c" device)"
kill "$c"

kill "$DAEMON"
wait "$DAEMON" 2>/dev/null || true
start_tcgpud
wait_for_line "$WORK/tcgpud.log" "re-learnt [0-9]* of the"   # ps answers while it asks the jobs
dev=$(job_field "$a" device)                                # one read: the failure says what was seen
[ "$dev" = 1 ] || fail "after a restart the job on GPU 1 is on '$dev'"
[ "$(device_field 1 uuid)" = "$u1" ] || fail "after a restart GPU 1 is '$(device_field 1 uuid)', not $u1"
job_on "$u0" 16
[ "$(job_field "$BG" device)" = 0 ] || fail "after a restart $u0 is accounted to GPU $(job_field "$BG" device)"
kill "$BG"

# a process registers 70 times, each time with another made-up UUID (more
# than tcgpud has numbers): each is refused as a GPU tcgpud does not manage;
# then a job on GPU 2, which no job was on, is accounted there
python3 -c '
import socket, sys
for i in range(70):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sys.argv[1])
    s.send(("register project=research device=0 uuid=%08x000000000000000000000000" % i).encode())
    r = s.recv(65536).decode().split("\n")[0]
    s.close()
    if not r.startswith("error") or "ENODEV" not in r:
        sys.exit("registration %d with a made-up UUID: %s" % (i, r))' "$TCGPU_DAEMON_SOCKET" ||
    fail "a made-up UUID was not refused as a GPU tcgpud does not manage"
job_on 2 16
[ "$(job_field "$BG" device)" = 2 ] || fail "the job on GPU 2 is accounted to GPU '$(job_field "$BG" device)'"
[ "$(job_field "$a" device)" = 1 ] && [ "$(job_field "$b" device)" = 0 ] ||
    fail "after the flood the jobs are on GPUs $(job_field "$a" device) and $(job_field "$b" device)"
kill "$BG" "$a" "$b"
echo "ok: GPUs accounted by UUID"
