#!/usr/bin/env bash
# gpuckpt refuses what it should, and says what happened in words: sizes
# and durations that are not decimal (0x10, 1e3; 500ms is one), --signal 0,
# a TCGPU_LIB that is not libtcgpu.so (the program must not run without
# tcgpu), a job over its own --gpu-mem (a line names the limit), unknown
# options (named, for every command), status without a loadable driver (says why, not "no checkpoint
# API"), save as non-root (says it needs root), an image directory that
# exists (no option that does not exist is offered), and resume after a
# signal's suspend that failed at the gate (the job runs: exit 0, and why).
. "$(dirname "$0")/lib.sh"

expect() { # CODE PATTERN CMD... : CMD exits CODE and its output matches PATTERN
    local want=$1 pat=$2 rc=0; shift 2
    "$@" >"$WORK/out" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, want $want: $(cat "$WORK/out")"
    grep -q -- "$pat" "$WORK/out" || fail "$*: no '$pat' in: $(cat "$WORK/out")"
}

expect 2 "--gpu-mem 0x10: not a size" "$GPUCKPT" run --gpu-mem 0x10 -- true
expect 2 "--gpu-mem 1e3: not a size" "$GPUCKPT" run --gpu-mem 1e3 -- true
expect 2 "--wait-timeout 1e3: not a duration" "$GPUCKPT" run --project p --wait-timeout 1e3 -- true
expect 2 "--signal 0: unknown or unusable signal" "$GPUCKPT" run --signal 0 -- true
expect 2 "--timeout wants" "$GPUCKPT" status 1 --timeout 1e3
expect 2 "--wait wants" "$GPUCKPT" status 1 --wait 0x10
TCGPU_LIB=/etc/passwd expect 1 "TCGPU_LIB=/etc/passwd: not a shared library" \
    "$GPUCKPT" run -- touch "$WORK/ran"
[ ! -e "$WORK/ran" ] || fail "the program ran without tcgpu"
TCGPU_LIB=$(ldd "$GPUCKPT" | awk '/libc.so/ {print $3}') expect 1 "not libtcgpu.so" \
    "$GPUCKPT" run -- touch "$WORK/ran"
[ ! -e "$WORK/ran" ] || fail "the program ran without tcgpu (libc as TCGPU_LIB)"
note "sizes, signals and libraries refused"

expect 1 "memory limit is 300.0 MiB (TCGPU_GPU_MEM, gpuckpt run --gpu-mem)" \
    "$GPUCKPT" run --gpu-mem 300M -- "$TRAIN" --mb 400 --steps 2
note "over its --gpu-mem: $(grep -m1 'memory limit' "$WORK/out")"

for c in "save 1 -D $WORK/s --frob" "restore -D $WORK/s -x" "inspect $WORK --jsno" "verify $WORK -q" \
         "ps --frob" "events --jsno" "status 1 --frob" "run --frob -- true"; do
    # shellcheck disable=SC2086
    expect 2 "unknown option '-" "$GPUCKPT" $c
done
expect 2 "option '-D' needs a value" "$GPUCKPT" save 1 -D
note "unknown options named"

start_bg "$WORK/job.out" "$GPUCKPT" run -- "$TRAIN" --mb 16 --steps 100000 --print-every 0 --sleep-ms 5
job=$BG
wait_for_socket "$job"
TCGPU_REAL_LIBCUDA=/nonexistent/libcuda.so.1 expect 0 "no driver checkpoint: cannot load the CUDA driver /nonexistent" \
    "$GPUCKPT" status "$job"
mkdir "$WORK/exists"
expect 1 "already exists: an image goes to a directory that does not exist yet" \
    "$GPUCKPT" checkpoint "$job" -D "$WORK/exists"
! grep -q overwrite "$WORK/out" || fail "an option that does not exist is named: $(cat "$WORK/out")"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    expect 6 "save needs root" setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$GPUCKPT" save "$job" -D /tmp/tcgpu-nobody-save-$$
fi
expect 4 "not suspended" "$GPUCKPT" resume "$job"    # a plain resume of a running job
# durations as docs/cli.md writes them
expect 0 "running" "$GPUCKPT" status "$job" --timeout 500ms --wait 1.5s
kill "$job"

# a signal's toggle stuck at the gate (a kernel that never ends), and resume meanwhile
export TCGPU_GATE_TIMEOUT_MS=1500
start_bg "$WORK/spin.out" "$GPUCKPT" run -- "$PROGS/spin" "$PROGS/spin_kernel.so"
spin=$BG
wait_for_line "$WORK/spin.out" spinning
wait_for_socket "$spin"
kill -s SIGRTMIN+4 "$spin"
# The toggle starts in the process's own time: a resume sent before it would
# rightly say "not suspended". Wait until it is seen at the gate (or already
# failed there, on a slow machine).
for _ in $(seq 200); do
    case $(status_of "$spin" state) in suspending) break ;; esac
    "$GPUCKPT" status "$spin" 2>/dev/null | grep -q "last op *suspend: ETIMEDOUT" && break
    sleep 0.05
done
expect 0 "is running: its last suspend failed (ETIMEDOUT: .*cuCtxSynchronize" "$GPUCKPT" resume "$spin"
note "resume after a failed toggle: $(head -n 1 "$WORK/out")"

# Status, polled through a toggle that fails: once it said "suspending", it
# says "running" only with the failed suspend's result beside it (a fresh
# job: no earlier result to mistake for it).
kill "$spin"
start_bg "$WORK/spin2.out" "$GPUCKPT" run -- "$PROGS/spin" "$PROGS/spin_kernel.so"
spin=$BG
wait_for_line "$WORK/spin2.out" spinning
wait_for_socket "$spin"
kill -s SIGRTMIN+4 "$spin"
seen=
for _ in $(seq 1000); do
    j=$("$GPUCKPT" status "$spin" --json 2>/dev/null || true)
    st=$(json_field "$j" state)
    [ "$st" = suspending ] && seen=1
    if [ -n "$seen" ] && [ "$st" = running ]; then
        [ "$(json_field "$j" last_op)" = suspend ] && [ "$(json_field "$j" last_result)" != 0 ] ||
            fail "running again after suspending, without the failed suspend's result: $j"
        break
    fi
    sleep 0.005
done
[ "$st" = running ] || fail "the second toggle did not end at the gate (state '$st', seen suspending: ${seen:-no})"
echo "ok: refused and said in words"
