#!/usr/bin/env bash
# Per-job memory limits: enforced in the interposer (beyond the limit:
# CUDA_ERROR_OUT_OF_MEMORY), and cuMemGetInfo reports the job's view.
# Without tcgpud (--gpu-mem alone); with tcgpud (a project's default_limit,
# or --gpu-mem): hard whatever the project's borrowing (issue 33: a project
# that may borrow let a job under --gpu-mem 64M allocate 128 MiB), and the
# job's log names the limit. A job's negative priority is shown with its sign.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"
PROBE=$PROGS/tcgpud_meminfo

# --- no daemon ---
export TCGPU_DAEMON_SOCKET=$WORK/no-such.sock
out=$("$GPUCKPT" run --gpu-mem 256M -- "$PROBE" 100 200) || fail "probe failed: $out"
grep -q '^total=256 free=15[0-9]$' <<<"$out" || fail "cuMemGetInfo under a 256M limit: $out"
grep -q '^more=oom$' <<<"$out" || fail "an allocation beyond the limit succeeded: $out"
out=$("$GPUCKPT" run --gpu-mem 512M -- "$PROBE" 100 200) || fail "probe failed: $out"
grep -q '^more=ok$' <<<"$out" || fail "an allocation within the limit failed: $out"
out=$("$GPUCKPT" run -- "$PROBE" 100 200) || fail "probe failed: $out"
grep -q '^total=1024 ' <<<"$out" || fail "without a limit cuMemGetInfo is the device's: $out"
# a share of the GPU (tcgpu-slurm's translation of Slurm shards): 25% of 1 GiB
out=$("$GPUCKPT" run --gpu-mem 25% -- "$PROBE" 100 200) || fail "probe failed: $out"
grep -q '^total=256 free=15[0-9]$' <<<"$out" || fail "cuMemGetInfo under --gpu-mem 25%: $out"
grep -q '^more=oom$' <<<"$out" || fail "an allocation beyond 25% of the GPU succeeded: $out"
out=$(TCGPU_GPU_MEM=50% "$GPUCKPT" run -- "$PROBE" 100 200) || fail "probe failed: $out"
grep -q '^total=512 ' <<<"$out" && grep -q '^more=ok$' <<<"$out" || fail "TCGPU_GPU_MEM=50%: $out"
rc=0; "$GPUCKPT" run --gpu-mem 300M -- "$TRAIN" --mb 400 --steps 2 >"$WORK/t.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q OUT_OF_MEMORY "$WORK/t.out" || fail "train beyond its limit: exit $rc, $(tail -n 2 "$WORK/t.out")"
note "limits without tcgpud ok"

# --- with tcgpud ---
export TCGPU_DAEMON_SOCKET=$WORK/tcgpud.sock
write_config "
[project strict]
priority = 10
members = *
borrow = no
default_limit = 256M

[project flex]
priority = 10
members = *
borrow = yes
default_limit = 256M
"
start_tcgpud
out=$("$GPUCKPT" run --project strict -- "$PROBE" 100 200) || fail "probe failed: $out"
grep -q '^total=256 ' <<<"$out" && grep -q '^more=oom$' <<<"$out" || fail "strict project: $out"
# a project that may borrow: its jobs' limits hold all the same
out=$("$GPUCKPT" run --project flex -- "$PROBE" 100 200 2>"$WORK/flex.err") || fail "probe failed: $out"
grep -q '^total=256 ' <<<"$out" && grep -q '^more=oom$' <<<"$out" ||
    fail "flex project: its default_limit 256M did not hold: $out"
grep -q "memory limit is 256.0 MiB (given by tcgpud: the project's default_limit); a job's limit is hard" \
    "$WORK/flex.err" || fail "the job's log does not name the limit: $(cat "$WORK/flex.err")"
out=$("$GPUCKPT" run --project flex --gpu-mem 64M -- "$PROBE" 32 96 2>"$WORK/flex.err") ||
    fail "probe failed: $out"
grep -q '^total=64 ' <<<"$out" && grep -q '^more=oom$' <<<"$out" ||
    fail "flex project: --gpu-mem 64M let the job hold 128 MiB: $out"
grep -q "memory limit is 64.0 MiB (TCGPU_GPU_MEM, gpuckpt run --gpu-mem)" "$WORK/flex.err" ||
    fail "the job's log does not name --gpu-mem: $(cat "$WORK/flex.err")"
evs=$("$GPUCKPT" events)                  # (not piped into grep -q: pipefail and SIGPIPE)
! grep -q 'granted' <<<"$evs" || fail "tcgpud granted room beyond a job's limit: $evs"
# a job's own --gpu-mem beats the project's default
out=$("$GPUCKPT" run --project strict --gpu-mem 512M -- "$PROBE" 100 200) || fail "probe failed: $out"
grep -q '^total=512 ' <<<"$out" && grep -q '^more=ok$' <<<"$out" || fail "--gpu-mem 512M: $out"
# a priority below the project's, negative: shown with its sign everywhere
start_bg "$WORK/neg.out" "$GPUCKPT" run --project strict --priority -5 -- "$TRAIN" --mb 16 --steps 100000 --print-every 0 --sleep-ms 5
neg=$BG
wait_registered "$neg"
[ "$(job_field "$neg" priority)" = -5 ] || fail "ps --json: priority $(job_field "$neg" priority), not -5"
ps=$("$GPUCKPT" ps)
grep -qE "^$neg +[^ ]+ +strict +-5 " <<<"$ps" || fail "gpuckpt ps does not show priority -5: $ps"
evs=$("$GPUCKPT" events)
grep -qE "registered +pid $neg \([^,]+, strict, prio -5\) .*priority asked -5(,|\$)" <<<"$evs" ||
    fail "the registered event does not show priority -5: $(grep "pid $neg " <<<"$evs")"
grep -q "pid $neg registered: .*priority -5," "$WORK/tcgpud.log" || fail "not logged with priority -5"
kill "$neg"
# the dispatcher: an unknown word, a request from a process that is no job,
# a suspend without its pid=, a resume of no job (first line, decoded)
ask() {
    python3 -c '
import socket, sys, urllib.parse
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
s.send(sys.argv[2].encode())
print(urllib.parse.unquote(s.recv(65536).decode().split("\n")[0]))' "$TCGPU_DAEMON_SOCKET" "$1"
}
r=$(ask frobnicate); [ "$r" = "error EINVAL 22 unknown command 'frobnicate'" ] || fail "unknown command: $r"
r=$(ask "request bytes=1 device=0"); [[ "$r" == "error ENOENT 2 process "*" is not a registered job" ]] ||
    fail "a request from no job: $r"
r=$(ask suspend); [ "$r" = "error EINVAL 22 suspend needs pid=N" ] || fail "suspend without pid=: $r"
r=$(ask "resume pid=1"); [ "$r" = "error ENOENT 2 process 1 is not managed by tcgpud" ] || fail "resume of no job: $r"
echo "ok: limits enforced and hard in a project that may borrow, cuMemGetInfo shows the job's view, negative priorities"
