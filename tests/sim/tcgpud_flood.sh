#!/usr/bin/env bash
# A flood of connections from one unprivileged user does not lock anyone
# else out of tcgpud: while a throwaway user keeps 300 `events follow=1`
# connections and 300 idle ones going, root's and another user's gpuckpt ps
# and suspend work, the other user's new job registers and its request
# for more than the GPU has free is answered by tcgpud (a denial with its
# reason, not a timeout), and
# the flooder is told why it is turned away (EAGAIN), in a log that it
# cannot fill (neither by connections nor by replies it never reads).
# A third flood asks and hangs up, again and again. Needs root (useradd): skips otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"
needs_users
throwaway_user mallory m
throwaway_user alice a

write_config "
[project batch]
priority = 10
members = *
"
start_tcgpud

# Two floods from mallory: followers (never read) and idle connections.
# shellcheck disable=SC2046
start_bg "$WORK/flood-follow.out" setpriv $(user_ids "$mallory") "$PY" "$CLIENT" "$TCGPU_DAEMON_SOCKET" flood 300 14 follow
flood1=$BG
# shellcheck disable=SC2046
start_bg "$WORK/flood-idle.out" setpriv $(user_ids "$mallory") "$PY" "$CLIENT" "$TCGPU_DAEMON_SOCKET" flood 300 14 idle
flood2=$BG
# shellcheck disable=SC2046
start_bg "$WORK/flood-hangup.out" setpriv $(user_ids "$mallory") "$PY" "$CLIENT" "$TCGPU_DAEMON_SOCKET" flood 300 14 hangup
flood3=$BG
sleep 2                                  # the table as full as mallory can make it

for i in $(seq 1 5); do
    "$GPUCKPT" ps >/dev/null 2>"$WORK/ps.err" || fail "root's ps under the flood: $(cat "$WORK/ps.err")"
    as_user "$alice" "$GPUCKPT" ps >/dev/null 2>"$WORK/ps.err" ||
        fail "alice's ps under the flood: $(cat "$WORK/ps.err")"
done
note "ps answered for root and alice under the flood"

# alice's job registers, and asks tcgpud when the GPU has no room for it
# (1 GiB, no job to preempt: tcgpud denies, with its reason)
user_run_dir "$alice"
out=$(TCGPU_RUN_DIR=$RUN_DIR as_user "$alice" "$GPUCKPT" run --project batch -- \
      "$PROGS/tcgpud_meminfo" 100 960 2>&1) || fail "alice's probe failed: $out"
grep -q '^more=oom$' <<<"$out" || fail "alice's allocation beyond the GPU succeeded: $out"
! grep -q "running without policy\|no answer from tcgpud" <<<"$out" || fail "alice's job ran without policy: $out"
evs=$("$GPUCKPT" events)                  # (not piped into grep -q: pipefail and SIGPIPE)
grep -q "denied .*no room on GPU" <<<"$evs" || fail "tcgpud did not answer alice's request: $evs"
note "alice's job registered and tcgpud answered its request"

# a long job of alice's, suspended and resumed by root through tcgpud
# shellcheck disable=SC2046
start_bg "$WORK/job.out" env TCGPU_RUN_DIR="$RUN_DIR" setpriv $(user_ids "$alice") \
    "$GPUCKPT" run --project batch -- "$TRAIN" --mb 64 --steps 100000 --print-every 0 --sleep-ms 5
job=$BG
wait_registered "$job"
"$GPUCKPT" suspend "$job" -q 2>"$WORK/s.err" || fail "root's suspend under the flood: $(cat "$WORK/s.err")"
[ "$(job_field "$job" state)" = suspended ] || fail "alice's job is $(job_field "$job" state)"
as_user "$alice" "$GPUCKPT" resume "$job" -q 2>"$WORK/s.err" ||
    fail "alice's resume under the flood: $(cat "$WORK/s.err")"
wait_state "$job" running 10
kill "$job"

wait "$flood1" "$flood2" "$flood3" || fail "the flood clients failed"
read -r hung < <(sed -n 's/^opened=\([0-9]*\) .*/\1/p' "$WORK/flood-hangup.out")
[ "${hung:-0}" -gt 1000 ] || fail "flood hangup: $(cat "$WORK/flood-hangup.out")"
note "flood hangup: $hung requests whose asker hung up"
for f in follow idle; do
    read -r opened away held < <(sed -n 's/^opened=\([0-9]*\) turned_away=\([0-9]*\) held_max=\([0-9]*\)$/\1 \2 \3/p' "$WORK/flood-$f.out")
    [ -n "$opened" ] || fail "flood $f: $(cat "$WORK/flood-$f.out")"
    [ "$away" -gt 0 ] || fail "flood $f: nothing was turned away ($(cat "$WORK/flood-$f.out"))"
    note "flood $f: opened $opened, turned away $away, held at most $held"
done
# (held_max counts what mallory's side sees open, its connections still in the
# listen backlog among them: tcgpud's own count is in its log below)
lines=$(grep -c "turned away" "$WORK/tcgpud.log" || true)
[ "$lines" -le 40 ] || fail "$lines log lines of turned-away connections in 14 s: the log is floodable"
# requests whose asker hung up: the replies tcgpud cannot deliver are
# logged at most once a second too (3119 lines in 0.3 s, they were)
lines=$(grep -c "not delivered" "$WORK/tcgpud.log" || true)
[ "$lines" -le 40 ] || fail "$lines log lines of undelivered replies in 14 s: the log is floodable"
# at most 16 at a time for mallory (the default): the 17th is turned away
grep -q "turned away: uid $(id -u "$mallory") holds 16 connections" "$WORK/tcgpud.log" ||
    fail "the turned-away connections were not logged with the reason: $(grep -m3 'turned' "$WORK/tcgpud.log")"
echo "ok: a flood from one user locked nobody else out"
