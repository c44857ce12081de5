#!/usr/bin/env bash
# gpuckpt save / restore by an ordinary user (nobody), through tcgpud (root),
# which runs CRIU for the caller's own trees (docs/save-restore.md,
# "Ordinary users").
#
#   privileged.sh roundtrip   nobody's training job saved and restored by nobody:
#                             the checksum of an uninterrupted run, the restored tree
#                             runs as nobody, the save is root's (nobody's
#                             only its GPU image, in the stage the plugin made)
#   privileged.sh parent-swap  while nobody keeps swapping the parent of its save
#                             directory for a symlink to a directory only root may
#                             write, 20 saves through tcgpud (--leave-running): none
#                             lands in root's directory (root worked by path after
#                             tcgpud's check: 6 of 14 did), each either saves into
#                             nobody's directory or is refused
#   privileged.sh restore-swap while nobody keeps exchanging its save with a symlink to a
#                             save of root's job, 20 restores through tcgpud: none brings
#                             back root's tree (tcgpud checked the path, gpuckpt read it
#                             again: the manifest of one, CRIU's images of the other)
#   privileged.sh leave-running  nobody's save --leave-running through tcgpud: the
#                             job runs on to the uninterrupted checksum, and the save
#                             verifies (the option was dropped on the way: the job ended)
#   privileged.sh refusals    nobody cannot save root's job, a tree with a root
#                             process, into a directory it does not own, nor restore a
#                             directory of its own making or another user's save; every
#                             refusal leaves the job running; a caller that hangs up on
#                             an attached restore takes the tree with it
. "$(dirname "$0")/lib.sh"
command -v setpriv >/dev/null || { echo "skipped: no setpriv"; exit 77; }

mode=${1:?mode}
TCGPUD=$B/tools/tcgpud/tcgpud
export TCGPU_DAEMON_SOCKET=$WORK/tcgpud.sock
ARGS=(--mb 32 --steps 400 --print-every 50)
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# nobody's corner: the work dir is passable, its job dir is nobody's alone
chmod 711 "$WORK"
JOB=$WORK/job
mkdir -m 700 "$JOB"
chown 65534:65534 "$JOB"
NRUN=$JOB/run

cat >"$WORK/tcgpud.ini" <<EOF
[daemon]
socket = $TCGPU_DAEMON_SOCKET
state_file = $WORK/tcgpud.state
EOF
"$TCGPUD" --config "$WORK/tcgpud.ini" >>"$WORK/tcgpud.log" 2>&1 &
BG_PIDS+=("$!")
for i in $(seq 1 100); do [ -S "$TCGPU_DAEMON_SOCKET" ] && break; sleep 0.05; done
[ -S "$TCGPU_DAEMON_SOCKET" ] || fail "tcgpud did not start: $(cat "$WORK/tcgpud.log")"

# start_nobody OUT : train as nobody, in its own session, mid-run; sets pid.
start_nobody() {
    # a simple command, so that no shell waits on it with its output open (it
    # would report the job's end into the file CRIU restores at its size)
    setpriv --reuid=65534 --regid=65534 --clear-groups env TCGPU_RUN_DIR="$NRUN" \
        setsid "$GPUCKPT" run -- "$TRAIN" "${ARGS[@]}" --sleep-ms 20 >"$1" 2>&1 </dev/null &
    BG_PIDS+=("$!")
    # setsid forks when it must: the job is whoever made the control socket
    pid=
    for i in $(seq 1 500); do
        pid=$(ls "$NRUN" 2>/dev/null | sed -n 's/^\([0-9]*\)\.sock$/\1/p' | head -n 1 || true)
        [ -n "$pid" ] && break
        sleep 0.01
    done
    [ -n "$pid" ] || fail "nobody's job has no control socket: $(cat "$1")"
    KILL_PIDS+=("$pid")
    wait_for_line "$1" '^step 50 '
}

# nobody_expect CODE PATTERN CMD... : as nobody, CMD exits CODE saying PATTERN.
nobody_expect() {
    local code=$1 pat=$2 rc=0; shift 2
    as_nobody "$@" >"$WORK/cmd.out" 2>&1 || rc=$?
    [ "$rc" -eq "$code" ] || fail "$* (as nobody) exited $rc, expected $code: $(cat "$WORK/cmd.out")"
    grep -q -- "$pat" "$WORK/cmd.out" || fail "$* did not say '$pat': $(cat "$WORK/cmd.out")"
    note "refused as expected: $(grep -m1 -- "$pat" "$WORK/cmd.out")"
}

case "$mode" in
roundtrip)
    ref=$(SIMCUDA_SHM=$SIMCUDA_SHM-ref "$TRAIN" "${ARGS[@]}" 2>&1 | sed -n 's/^checksum: //p')
    rm -f "/dev/shm$SIMCUDA_SHM-ref"
    start_nobody "$JOB/run.out"
    as_nobody "$GPUCKPT" save "$pid" -D "$JOB/save" >"$WORK/save.out" 2>&1 ||
        fail "nobody's save failed: $(cat "$WORK/save.out")"
    grep -q "saved the tree under $pid" "$WORK/save.out" || fail "no summary: $(cat "$WORK/save.out")"
    grep -q "save of the tree under $pid to $JOB/save for uid 65534" "$WORK/tcgpud.log" ||
        fail "tcgpud did not log the save: $(tail -n 3 "$WORK/tcgpud.log")"
    wait_gone "$pid" 10
    grep -q '^checksum' "$JOB/run.out" && fail "the job finished before it was saved: make it longer"
    # root's save, which nobody cannot change but for its own GPU image
    [ "$(stat -c '%U %a' "$JOB/save")" = "root 711" ] || fail "save dir: $(stat -c '%U %a' "$JOB/save")"
    [ "$(stat -c '%U %a' "$JOB/save/criu")" = "root 700" ] || fail "criu/: $(stat -c '%U %a' "$JOB/save/criu")"
    [ "$(stat -c %U "$JOB/save/tree")" = root ] || fail "the manifest is not root's"
    [ "$(stat -c '%U %a' "$JOB/save/gpu")" = "root 711" ] || fail "gpu/: $(stat -c '%U %a' "$JOB/save/gpu")"
    grep -q ' owner=65534' "$JOB/save/tree" || fail "the manifest does not name its owner"
    as_nobody touch "$JOB/save/criu/x" 2>/dev/null && fail "nobody could write into CRIU's images"
    rm -rf "$NRUN"                           # as after a reboot
    as_nobody "$GPUCKPT" restore -D "$JOB/save" >"$WORK/restore.out" 2>&1 &
    rpid=$!
    # CRIU gives the processes their credentials last: look once the tree runs
    wait_line "$WORK/restore.out" "restored the tree under $pid" 30 ||
        fail "the tree was not restored: $(cat "$WORK/restore.out")"
    grep -q "^Uid:.*65534.*65534.*65534.*65534" /proc/"$pid"/status || fail "restored uids: $(grep Uid /proc/"$pid"/status)"
    wait "$rpid" || fail "nobody's restore exited $?: $(cat "$WORK/restore.out"; tail -n 3 "$JOB/run.out")"
    got=$(checksum_of "$JOB/run.out")
    [ "$got" = "$ref" ] || fail "checksum after nobody's save/restore: $got, uninterrupted: $ref"
    echo "ok: nobody saved and restored its own job through tcgpud, checksum $got, restored as nobody"
    ;;
parent-swap)
    ROOTONLY=$WORK/rootonly
    mkdir -m 700 "$ROOTONLY"
    as_nobody mkdir -m 700 "$JOB/p"
    as_nobody ln -s "$ROOTONLY" "$JOB/p.link"
    start_nobody "$JOB/run.out"
    # nobody's swapper: $JOB/p and p.link (a symlink to root's directory)
    # exchanged atomically, again and again (renameat2 RENAME_EXCHANGE;
    # Debian's python3, which nobody may run)
    as_nobody /usr/bin/python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])
n = 0
while not os.path.exists("stop"):
    if libc.renameat2(-100, b"p", -100, b"p.link", 2) == 0:   # AT_FDCWD, RENAME_EXCHANGE
        n += 1
    os.sched_yield()
print("swaps", n)' "$JOB" >"$WORK/swap.out" 2>&1 &
    swapper=$!
    BG_PIDS+=("$swapper")
    saved=0 refused=0
    for i in $(seq 1 20); do
        rc=0
        as_nobody "$GPUCKPT" save "$pid" -D "$JOB/p/save-$i" --leave-running >"$WORK/save-$i.out" 2>&1 || rc=$?
        if [ "$rc" -eq 0 ]; then saved=$((saved + 1)); else refused=$((refused + 1)); fi
        [ -z "$(ls -A "$ROOTONLY")" ] ||
            fail "try $i: root wrote into its own directory for nobody: $(ls -A "$ROOTONLY"); gpuckpt: $(tail -n 3 "$WORK/save-$i.out")"
    done
    as_nobody touch "$JOB/stop"
    wait "$swapper" || true
    note "20 saves while the parent was swapped: $saved saved, $refused refused ($(cat "$WORK/swap.out"))"
    [ "$(sed -n 's/^swaps //p' "$WORK/swap.out")" -gt 1000 ] || fail "the parent was hardly swapped: $(cat "$WORK/swap.out")"
    kill -0 "$pid" 2>/dev/null || fail "nobody's job ended: $(tail -n 3 "$JOB/run.out")"
    echo "ok: no save of nobody's landed in root's directory ($saved saved into nobody's, $refused refused)"
    ;;
restore-swap)
    start_nobody "$JOB/run.out"
    setsid "$GPUCKPT" run -- "$TRAIN" --mb 4 --steps 100000 --print-every 0 --sleep-ms 50 \
        >"$WORK/root.out" 2>&1 </dev/null &
    rootjob=$!
    KILL_PIDS+=("$rootjob")
    wait_for_socket "$rootjob"
    "$GPUCKPT" save "$rootjob" -D "$WORK/rootsave" >"$WORK/rootsave.out" 2>&1 ||
        fail "root's save of its job failed: $(cat "$WORK/rootsave.out")"
    as_nobody "$GPUCKPT" save "$pid" -D "$JOB/s" >"$WORK/save.out" 2>&1 ||
        fail "nobody's save failed: $(cat "$WORK/save.out")"
    wait_gone "$pid" 10
    wait_gone "$rootjob" 10
    # its output as saved: CRIU restores an open file only at the size it had
    cp -p "$JOB/run.out" "$WORK/run.out.saved"
    as_nobody ln -s "$WORK/rootsave" "$JOB/s.link"
    # nobody's swapper: its save and a symlink to root's save exchanged
    # atomically, again and again (Debian's python3, which nobody may run)
    as_nobody /usr/bin/python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])
n = 0
while not os.path.exists("stop"):
    if libc.renameat2(-100, b"s", -100, b"s.link", 2) == 0:   # AT_FDCWD, RENAME_EXCHANGE
        n += 1
    os.sched_yield()
print("swaps", n)' "$JOB" >"$WORK/swap.out" 2>&1 &
    swapper=$!
    BG_PIDS+=("$swapper")
    restored=0 refused=0
    for i in $(seq 1 20); do
        rc=0
        as_nobody "$GPUCKPT" restore -d -D "$JOB/s" >"$WORK/restore-$i.out" 2>&1 || rc=$?
        kill -0 "$rootjob" 2>/dev/null &&
            fail "try $i: nobody's restore brought back root's tree (pid $rootjob): $(tail -n 3 "$WORK/restore-$i.out")"
        if [ "$rc" -eq 0 ]; then
            restored=$((restored + 1))
            [ "$(stat -c %u /proc/"$pid")" = 65534 ] || fail "try $i: the restored tree is not nobody's"
            kill -9 "$pid" 2>/dev/null || true
        else
            refused=$((refused + 1))
        fi
        wait_gone "$pid" 10                  # the pid free again (a failed CRIU's child too)
        cp -p "$WORK/run.out.saved" "$JOB/run.out"
    done
    as_nobody touch "$JOB/stop"
    wait "$swapper" || true
    note "20 restores while the save was swapped: $restored restored nobody's tree, $refused refused ($(cat "$WORK/swap.out"))"
    [ "$(sed -n 's/^swaps //p' "$WORK/swap.out")" -gt 1000 ] || fail "the save was hardly swapped: $(cat "$WORK/swap.out")"
    echo "ok: no restore of nobody's brought back root's tree ($restored restored nobody's, $refused refused)"
    ;;
leave-running)
    ref=$(SIMCUDA_SHM=$SIMCUDA_SHM-ref "$TRAIN" "${ARGS[@]}" 2>&1 | sed -n 's/^checksum: //p')
    rm -f "/dev/shm$SIMCUDA_SHM-ref"
    start_nobody "$JOB/run.out"
    as_nobody "$GPUCKPT" save "$pid" -D "$JOB/save" --leave-running >"$WORK/save.out" 2>&1 ||
        fail "nobody's save --leave-running failed: $(cat "$WORK/save.out")"
    grep -q "save of the tree under $pid to $JOB/save for uid 65534 (pid [0-9]*), leaving it running" \
        "$WORK/tcgpud.log" || fail "tcgpud did not pass --leave-running on: $(tail -n 3 "$WORK/tcgpud.log")"
    kill -0 "$pid" 2>/dev/null || fail "the job ended: --leave-running was dropped on the way"
    grep -q '^checksum' "$JOB/run.out" && fail "the job finished before it was saved: make it longer"
    wait_gone "$pid" 60
    got=$(checksum_of "$JOB/run.out")
    [ "$got" = "$ref" ] || fail "checksum of the job left running: $got, uninterrupted: $ref"
    "$GPUCKPT" verify "$JOB/save" >/dev/null || fail "the save does not verify"
    echo "ok: nobody's save --leave-running through tcgpud: the job ran on to $got, the save verifies"
    ;;
refusals)
    start_nobody "$JOB/run.out"
    # a tree of root's
    setsid "$GPUCKPT" run -- "$TRAIN" --mb 4 --steps 100000 --print-every 0 --sleep-ms 50 \
        >"$WORK/root.out" 2>&1 </dev/null &
    rootjob=$!
    wait_for_socket "$rootjob"
    BG_PIDS+=("$rootjob")
    nobody_expect 6 "is not uid 65534's" "$GPUCKPT" save "$rootjob" -D "$JOB/s1"
    grep -q "refused save from uid 65534" "$WORK/tcgpud.log" || fail "the refusal was not logged"
    # into a directory nobody does not own (the work dir is root's, 0711)
    nobody_expect 6 "must be a directory of uid 65534" "$GPUCKPT" save "$pid" -D "$WORK/s2"
    # through a symlink to its own dir
    ln -s "$JOB" "$WORK/link"
    nobody_expect 6 "without symlinks" "$GPUCKPT" save "$pid" -D "$WORK/link/s3"
    # gpuckpt itself, as tcgpud runs it, refuses a tree that is not all the owner's
    expect_fail 6 "is not uid 12345's" "$GPUCKPT" save "$pid" --owner 12345 -D "$JOB/s4"
    kill -0 "$pid" || fail "a refused save touched nobody's job"
    "$GPUCKPT" status "$pid" | grep -q ': running' || fail "nobody's job is not running after the refusals"
    # a save dir of nobody's own making is not restored (it could say anything)
    as_nobody mkdir "$JOB/fake"
    nobody_expect 6 "not a save made through tcgpud" "$GPUCKPT" restore -D "$JOB/fake"
    # a save root made of root's job is not restored for nobody
    "$GPUCKPT" save "$rootjob" -D "$WORK/rootsave" >"$WORK/rootsave.out" 2>&1 ||
        fail "root's save of its job failed: $(cat "$WORK/rootsave.out")"
    expect_fail 6 "was uid 0's, not 65534's" "$GPUCKPT" restore --owner 65534 -d -D "$WORK/rootsave"
    # an attached restore ends with its caller: save nobody's job, restore, hang up
    as_nobody "$GPUCKPT" save "$pid" -D "$JOB/save" >"$WORK/save.out" 2>&1 ||
        fail "nobody's save failed: $(cat "$WORK/save.out")"
    wait_gone "$pid" 10
    setpriv --reuid=65534 --regid=65534 --clear-groups "$GPUCKPT" restore -D "$JOB/save" \
        >"$WORK/restore.out" 2>&1 &
    rpid=$!
    wait_line "$WORK/restore.out" "restored the tree under $pid" 30 ||
        fail "the tree was not restored: $(cat "$WORK/restore.out")"
    kill -9 "$rpid"
    wait_gone "$pid" 10
    grep -q "the caller (pid [0-9]*) left; ending it" "$WORK/tcgpud.log" ||
        fail "tcgpud did not end the tree of a caller that left: $(tail -n 3 "$WORK/tcgpud.log")"
    echo "ok: nobody refused root's job, foreign and symlinked directories, a fake and a foreign save; an abandoned restore ends"
    ;;
*) fail "unknown mode $mode" ;;
esac
