#!/usr/bin/env bash
# tcgpud: reservations. A higher-priority borrower (no reservation) fills the
# GPU; a lower-priority project reclaims its 700 MiB reservation and gets it
# (the borrower is suspended, why=reclaim). A third project, lower still and
# without a reservation, is denied (the allocation fails with OOM) rather
# than taking reserved memory. The borrower resumes and finishes intact.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"

bor_args=(--mb 600 --steps 300 --print-every 100 --seed 5)
own_args=(--mb 500 --steps 150 --print-every 50 --seed 6)
ref_bor=$(reference bor "${bor_args[@]}")

write_config "
[project batch]
priority = 50
members = *

[project team]
priority = 10
reservation = 700M on 0
members = *

[project other]
priority = 5
members = *
"
start_tcgpud
start_bg "$WORK/bor.out" "$GPUCKPT" run --project batch -- "$TRAIN" "${bor_args[@]}" --sleep-ms 10
bor=$BG
wait_registered "$bor"
wait_for_line "$WORK/bor.out" '^step 0 '
sleep 1.2
[ "$(job_field "$bor" borrowing)" = true ] || fail "batch should be borrowing"
start_bg "$WORK/own.out" "$GPUCKPT" run --project team -- "$TRAIN" "${own_args[@]}" --sleep-ms 20
own=$BG
wait_state "$bor" suspended
[ "$(job_field "$bor" why)" = reclaim ] || fail "why: $(job_field "$bor" why), want reclaim"
wait_state "$own" running

# Lower priority, no reservation: denied, not given team's reserved memory.
rc=0
"$GPUCKPT" run --project other -- "$TRAIN" --mb 500 --steps 5 >"$WORK/other.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "project other got memory reserved by team"
grep -q OUT_OF_MEMORY "$WORK/other.out" || fail "other failed otherwise: $(tail -n 3 "$WORK/other.out")"
grep -q "denied" "$WORK/tcgpud.log" || fail "tcgpud did not log the denial"
[ "$(job_field "$own" state)" = running ] || fail "team's job was disturbed"

wait "$own" || fail "team's job failed: $(tail -n 5 "$WORK/own.out")"
wait_state "$bor" running 20
wait "$bor" || fail "the borrower failed: $(tail -n 5 "$WORK/bor.out")"
[ "$(checksum_of "$WORK/bor.out")" = "$ref_bor" ] || fail "borrower checksum changed"
echo "ok: reservation reclaimed from a higher-priority borrower, lower project denied"
