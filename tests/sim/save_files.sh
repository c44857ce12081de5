#!/usr/bin/env bash
# The CRIU half of a save is checked too: every file CRIU wrote has its size
# and checksum in the save's tree manifest, and gpuckpt verify and restore
# check each before anything is trusted. CRIU itself is stood in for
# (criu_standin.sh: the sim suite runs without root); tests/criu runs the
# real one.
#
#   save_files.sh     a flipped byte in criu/pages-1.img, a truncated
#                     core image, a planted extra image, a FIFO in place of
#                     pages-1.img: verify exits 7 naming the file, restore
#                     refuses naming it before CRIU is run; the intact save
#                     verifies, and its restore gets as far as CRIU;
#                     a failed dump's message carries CRIU's own reason: the
#                     Error lines of its log, or, when it wrote none, what it
#                     printed and why the log is missing (issue 36: it said
#                     only "(no log at ...)")
. "$(dirname "$0")/lib.sh"

export TCGPU_CRIU
TCGPU_CRIU=$(dirname "$0")/criu_standin.sh
export RESTORE_MARK=$WORK/restore-mark

expect_says() { # CODE PATTERN CMD... : CMD exits with CODE and says PATTERN
    local want=$1 pat=$2 rc=0; shift 2
    timeout 30 "$@" >"$WORK/last.out" 2>&1 || rc=$?
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, expected $want: $(cat "$WORK/last.out")"
    grep -q -- "$pat" "$WORK/last.out" || fail "$* does not say '$pat': $(cat "$WORK/last.out")"
}

refused() { # PATTERN : verify and restore both refuse naming it, CRIU never asked
    expect_says 7 "$1" "$GPUCKPT" verify "$WORK/save"
    expect_says 7 "$1" "$GPUCKPT" restore -D "$WORK/save" -d
    [ ! -e "$RESTORE_MARK" ] || fail "restore ran CRIU on a damaged save"
}

start_bg "$WORK/run.out" "$GPUCKPT" run -- "$TRAIN" --mb 16 --steps 400 --print-every 40 --sleep-ms 10
pid=$BG
wait_for_socket "$pid"
wait_for_line "$WORK/run.out" '^step'
CRIU_STANDIN_FAIL=early expect_says 1 "kdat_x86_has_ptrace_fpu_xsave_bug failed" \
    "$GPUCKPT" save "$pid" -D "$WORK/failed" --leave-running
grep -q "CRIU wrote no log at .*dump.log: No such file or directory" "$WORK/last.out" ||
    fail "a failed dump without a log does not say why it has none: $(cat "$WORK/last.out")"
note "$(tr '\n' ' ' <"$WORK/last.out")"
CRIU_STANDIN_FAIL=log expect_says 1 "criu dump of the tree under $pid failed (exit 1):" \
    "$GPUCKPT" save "$pid" -D "$WORK/failed" --leave-running
grep -q "Error (criu/proc_parse.c:1021): stand-in reason" "$WORK/last.out" ||
    fail "a failed dump does not give CRIU's last error: $(cat "$WORK/last.out")"
[ ! -e "$WORK/failed" ] || fail "a failed dump left $WORK/failed"
kill -0 "$pid" 2>/dev/null || fail "the job did not survive the failed dumps: $(tail -n 3 "$WORK/run.out")"
"$GPUCKPT" save "$pid" -D "$WORK/save" --leave-running >"$WORK/save.out" 2>&1 ||
    fail "save failed: $(cat "$WORK/save.out")"
grep -q '^file path=criu/pages-1.img size=1048576 xxh3=' "$WORK/save/tree" ||
    fail "the tree manifest does not vouch for pages-1.img: $(grep -c '^file' "$WORK/save/tree") file records"
"$GPUCKPT" verify "$WORK/save" >"$WORK/last.out" || fail "verify of the intact save failed: $(cat "$WORK/last.out")"
cp -a "$WORK/save" "$WORK/pristine"

pages=$WORK/save/criu/pages-1.img
printf '\x01' | dd of="$pages" bs=1 seek=4096 conv=notrunc status=none
printf '\x02' | dd of="$pages" bs=1 seek=4097 conv=notrunc status=none
cmp -s "$pages" "$WORK/pristine/criu/pages-1.img" && fail "the corruption changed nothing"
refused "criu/pages-1.img: checksum mismatch"
cp "$WORK/pristine/criu/pages-1.img" "$pages"

core=$WORK/save/criu/core-$pid.img
truncate -s 100 "$core"
refused "criu/core-$pid.img is 100 bytes, the save wrote 4096"
cp "$WORK/pristine/criu/core-$pid.img" "$core"

cp "$pages" "$WORK/save/criu/pages-2.img"
refused "criu/pages-2.img is not a file this save wrote"
rm "$WORK/save/criu/pages-2.img"

rm "$pages" && mkfifo "$pages"
refused "criu/pages-1.img: not a regular file"
rm "$pages" && cp "$WORK/pristine/criu/pages-1.img" "$pages"

# Intact again: verified, and a restore (of a save whose tree still runs,
# --leave-running) gets past every check to the pids: refused as in use.
"$GPUCKPT" verify "$WORK/save" >"$WORK/last.out" || fail "verify after repair failed: $(cat "$WORK/last.out")"
expect_says 4 "is in use" "$GPUCKPT" restore -D "$WORK/save" -d
wait "$pid" || fail "the job failed: $(tail -n 3 "$WORK/run.out")"
echo "ok: damaged CRIU files refused by verify and restore, named"
