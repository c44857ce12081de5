#!/usr/bin/env bash
# Incremental checkpoints of the example training loop one step apart
# (docs/engine.md, "Block hashes and PATCH chunks"): the incremental image
# holds PATCH chunks (only the blocks the step changed) and is a small
# fraction of the full one; `gpuckpt verify` reads it back whole through its
# parent; with the parent moved away, or with the bytes under its patches
# damaged, it is refused (exit 1: cannot be opened; 7: corrupt) with a
# message naming the parent.
. "$(dirname "$0")/lib.sh"

# 2 s between steps, so that a loaded machine still takes the second
# checkpoint before the step after next (at 500 ms a fresh-clone run once
# measured 0.32 of the full size, most likely over more than one step)
start_bg "$WORK/run.out" "$GPUCKPT" run -- "$TRAIN" --mb 128 --steps 100000 --sleep-ms 2000 --print-every 1
pid=$BG
wait_for_socket "$pid"
wait_for_line "$WORK/run.out" '^step 1 '
one_step() { local n; n=$(grep -c '^step ' "$WORK/run.out"); wait_for_line "$WORK/run.out" "^step $n "; }

one_step
"$GPUCKPT" checkpoint "$pid" -D "$WORK/A" -q || fail "full checkpoint failed"
n_at_a=$(grep -c '^step ' "$WORK/run.out")
one_step
"$GPUCKPT" checkpoint "$pid" -D "$WORK/B" --parent auto -q || fail "incremental checkpoint failed"
between=$(( $(grep -c '^step ' "$WORK/run.out") - n_at_a ))
kill "$pid"

"$GPUCKPT" inspect "$WORK/B" >"$WORK/inspect.out" || fail "inspect failed"
grep -q '^codec patch' "$WORK/inspect.out" || fail "no PATCH chunks in the incremental image: $(grep '^codec' "$WORK/inspect.out")"
full=$(du -sb "$WORK/A" | cut -f1) inc=$(du -sb "$WORK/B" | cut -f1)
[ $((inc * 4)) -lt "$full" ] ||
    fail "the incremental image ($inc bytes) is not under a quarter of the full one ($full), $between step(s) later"
"$GPUCKPT" verify "$WORK/B" >"$WORK/verify.out" 2>&1 || fail "verify of the incremental image: $(cat "$WORK/verify.out")"

# The parent moved away: refused (it cannot be opened: exit 1).
mv "$WORK/A" "$WORK/A-moved"
rc=0; "$GPUCKPT" verify "$WORK/B" >"$WORK/verify.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q "parent image of $WORK/B: cannot open $WORK/A/manifest" "$WORK/verify.out" ||
    fail "verify without the parent: exit $rc, $(cat "$WORK/verify.out")"
mv "$WORK/A-moved" "$WORK/A"

# The parent's data damaged in the middle (under one of the patches or not,
# verify reads it all): refused, naming the parent's data file.
size=$(stat -c %s "$WORK/A/data.0")
printf '\xff\xff\xff\xff' | dd of="$WORK/A/data.0" bs=1 seek=$((size / 2)) conv=notrunc status=none
rc=0; "$GPUCKPT" verify "$WORK/B" >"$WORK/verify.out" 2>&1 || rc=$?
[ "$rc" -eq 7 ] && grep -q "$WORK/A/data.0" "$WORK/verify.out" ||
    fail "verify with a damaged parent: exit $rc, $(cat "$WORK/verify.out")"
echo "ok: incremental image of $inc bytes (full $full), refused without or with a damaged parent"
