#!/usr/bin/env bash
# tcgpud's authorisation by peer credentials: another user (nobody) may look
# (ps) but may not suspend or resume root's job, nor register a job in a
# project it is not a member of; each refusal is logged. Owners and admins
# may; a manual suspension through tcgpud is not undone automatically
# unless asked (--auto-resume). Needs root (to become nobody): skip otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root to act as another user"; exit 77; }
command -v setpriv >/dev/null || { echo "skip: no setpriv"; exit 77; }
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
chmod 711 "$WORK"                 # nobody must reach the socket in it (not list it)

write_config "
[project research]
priority = 10
members = root
"
start_tcgpud
start_bg "$WORK/job.out" "$GPUCKPT" run --project research -- "$TRAIN" --mb 200 --steps 100000 --print-every 0 --sleep-ms 5
job=$BG
wait_registered "$job"

as_nobody "$GPUCKPT" ps --daemon >/dev/null || fail "nobody may look at the jobs"
rc=0; as_nobody "$GPUCKPT" suspend "$job" 2>"$WORK/nobody.err" || rc=$?
[ "$rc" -eq 6 ] || fail "nobody's suspend: exit $rc (want 6): $(cat "$WORK/nobody.err")"
grep -q EACCES "$WORK/nobody.err" || fail "no EACCES: $(cat "$WORK/nobody.err")"
grep -q "refused suspend from uid 65534" "$WORK/tcgpud.log" || fail "the refusal was not logged"
[ "$(job_field "$job" state)" = running ] || fail "the job was touched"
evs=$("$GPUCKPT" events)
grep -q "refused suspend, from uid 65534" <<<"$evs" || fail "no refused event: $evs"

# nobody registering in a project it does not belong to (a second apart from
# the refusal above: tcgpud logs one refusal a second per uid, and counts the
# rest as not_shown; docs/tcgpud.md, "Threat model")
sleep 1.1
nobody_run=$(mktemp -d /tmp/tcgpu-test-XXXXXX)
chown 65534:65534 "$nobody_run"
TCGPU_RUN_DIR=$nobody_run as_nobody "$GPUCKPT" run --project research -- "$PROGS/alloc_probe" 10 \
    >"$WORK/nobody-job.out" 2>&1 || true
rm -rf "$nobody_run"
grep -q "not a member of project research" "$WORK/nobody-job.out" ||
    fail "the job was not told why: $(tail -n 5 "$WORK/nobody-job.out")"
grep -q "refused register from uid 65534" "$WORK/tcgpud.log" || fail "registration not refused: $(tail -n 3 "$WORK/tcgpud.log"); the job said: $(tail -n 5 "$WORK/nobody-job.out")"
grep -q "running without policy" "$WORK/nobody-job.out" || fail "the refused job was not told: $(cat "$WORK/nobody-job.out")"

# the owner (root, also an admin) suspends by hand: not resumed automatically
"$GPUCKPT" suspend "$job" -q || fail "owner's suspend through tcgpud failed"
[ "$(job_field "$job" state)" = suspended ] && [ "$(job_field "$job" suspended_by)" = manual ] ||
    fail "state $(job_field "$job" state) by $(job_field "$job" suspended_by)"
sleep 2
[ "$(job_field "$job" state)" = suspended ] || fail "a manual suspension was undone automatically"
rc=0; as_nobody "$GPUCKPT" resume "$job" 2>/dev/null || rc=$?
[ "$rc" -eq 6 ] || fail "nobody's resume: exit $rc"
"$GPUCKPT" resume "$job" -q || fail "owner's resume failed"
wait_state "$job" running 5
# --auto-resume: tcgpud resumes it as soon as the memory fits (at once here)
"$GPUCKPT" suspend "$job" --auto-resume -q || fail "suspend --auto-resume failed"
wait_state "$job" running 5
kill "$job"
echo "ok: refused and logged for another user; manual suspensions stay until asked"
