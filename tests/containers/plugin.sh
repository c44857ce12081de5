#!/usr/bin/env bash
# criu dump / restore of a tcgpu process with tcgpu's CRIU plugin, no
# container runtime in between.
#
#   plugin.sh dump-restore|leave-running|watcher|failed-dump|corrupt|ownership|ending-thread
#
# dump-restore   the training job dumped mid-run: its GPU image and the
#                plugin's index in CRIU's images directory, its GPU memory
#                freed while dumped; restored, it finishes with the checksum
#                of an uninterrupted run
# leave-running  dump -R: the job runs on at once (tcgpu and driver state
#                running) and finishes right; the dump, restored after the
#                original has ended, finishes right too
# watcher        a dump CRIU does not end (its post-dump script fails, as
#                runc's RPC would leave it running): the plugin's watcher
#                gives the job its GPU state back; it finishes right
# failed-dump    CRIU fails after the plugin took the job off (an external
#                socket): the job is running again when criu returns, and
#                finishes right
# corrupt        a flipped byte in a GPU image, an image of another dump, a
#                damaged index: restore refuses each before anything is
#                restored, naming it; the intact dump then restores right
# ownership      a tree of a plain process and a tcgpu one, with a probe
#                plugin after ours: the probe sees only the plain process
# ending-thread  the job has a thread named like tcgpu's (tcgpu-ops) that
#                ends by itself as soon as it runs after the restore: the
#                plugin lets only the threads tcgpu lists run, so the thread
#                ends once CRIU has let the task go, and the restore holds
. "$(dirname "$0")/lib.sh"

mode=${1:?mode}
TRAIN_ARGS=(--mb 64 --steps 400 --print-every 50)

reference() { "$TRAIN" "${TRAIN_ARGS[@]}" >"$WORK/ref.out" 2>&1 || fail "reference run failed"; checksum_of "$WORK/ref.out"; }

# start_job OUT [SLEEP_MS] : the example under tcgpu in its own session; sets pid.
start_job() {
    setsid "$GPUCKPT" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms "${2:-10}" >"$1" 2>&1 </dev/null &
    pid=$!
    KILL_PIDS+=("$pid")
    wait_for_socket "$pid"
    wait_for_line "$1" '^step 50 '
}

# dump DIR [CRIU OPTS...] : criu dump of $pid with the plugin; its exit status in rc.
dump() {
    local dir=$1; shift
    mkdir -p "$dir"
    rc=0
    "$CRIU" dump -t "$pid" -D "$dir" -o dump.log -v4 -L "$PLUGDIR" "$@" >"$WORK/criu.out" 2>&1 || rc=$?
}

restore() {     # restore DIR : criu restore -d with the plugin; its exit status in rc
    rc=0
    "$CRIU" restore -d -D "$1" -o restore.log -v4 -L "$PLUGDIR" >"$WORK/criu.out" 2>&1 || rc=$?
}

# The job, running on: tcgpu and the driver say running.
assert_running() {
    "$GPUCKPT" status "$pid" | grep -q ": running" || fail "$1: tcgpu state is not running: $("$GPUCKPT" status "$pid" | head -1)"
    [ "$(smi_state "$pid")" = running ] || fail "$1: driver state $(smi_state "$pid")"
}

finish_right() {  # finish_right WHAT : the job ends with the reference checksum
    wait_gone "$pid" 120
    got=$(checksum_of "$WORK/run.out")
    [ "$got" = "$ref" ] || fail "$1: checksum $got, uninterrupted: $ref"
}

case "$mode" in
dump-restore)
    ref=$(reference)
    start_job "$WORK/run.out"
    before=$(device_used)
    dump "$WORK/img" --file-locks
    [ "$rc" -eq 0 ] || fail "dump failed ($rc): $(grep -a Error "$WORK/img/dump.log" | tail -n 3)"
    wait_gone "$pid" 10
    grep -q '^checksum' "$WORK/run.out" && fail "the job finished before the dump: make it longer"
    grep -q "^process pid=$pid vpid=$pid .*suspended=1 released=1" "$WORK/img/tcgpu.img" ||
        fail "the index does not record the job: $(cat "$WORK/img/tcgpu.img")"
    [ -f "$WORK/img/tcgpu/$pid/manifest" ] && [ -f "$WORK/img/tcgpu/$pid/data.0" ] ||
        fail "no GPU image in CRIU's images directory: $(ls -R "$WORK/img/tcgpu")"
    [ "$(device_used)" -eq 0 ] || fail "GPU memory not freed while dumped: $(device_used) bytes used (was $before)"
    note "dumped: $(du -sk "$WORK/img/tcgpu" | cut -f1) KiB of GPU image, $before bytes of GPU memory freed"
    restore "$WORK/img"
    [ "$rc" -eq 0 ] || fail "restore failed ($rc): $(grep -a Error "$WORK/img/restore.log" | tail -n 3)"
    grep -aq "tcgpu_plugin: process $pid (train): back on the GPU" "$WORK/img/restore.log" ||
        fail "the plugin did not bring it back: $(plugin_lines "$WORK/img/restore.log")"
    [ "$(device_used)" -eq "$before" ] || fail "GPU memory after restore: $(device_used), before the dump: $before"
    assert_running "after restore"
    finish_right "after dump and restore"
    echo "ok: dumped and restored with the plugin, checksum $got"
    ;;
leave-running)
    # no output until the end, tcgpu's log off: the copy restores only onto
    # a stdout as big as it was at the dump (CRIU's rule for open files)
    TRAIN_ARGS=(--mb 64 --steps 300 --print-every 0)
    ref=$(reference)
    TCGPU_LOG=quiet setsid "$GPUCKPT" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms 10 >"$WORK/run.out" 2>&1 </dev/null &
    pid=$!
    KILL_PIDS+=("$pid")
    wait_for_socket "$pid"
    sleep 1
    size=$(stat -c %s "$WORK/run.out")
    dump "$WORK/img" -R
    [ "$rc" -eq 0 ] || fail "dump -R failed ($rc): $(grep -a Error "$WORK/img/dump.log" | tail -n 3)"
    assert_running "right after dump -R"
    grep -q '^checksum' "$WORK/run.out" && fail "the job finished before the dump: make it longer"
    finish_right "the original after dump -R"
    # the dump's copy, later: simcuda keeps the checkpointed state in the process (docs/simcuda.md)
    truncate -s "$size" "$WORK/run.out"
    restore "$WORK/img"
    [ "$rc" -eq 0 ] || fail "restore of the -R dump failed ($rc): $(grep -a Error "$WORK/img/restore.log" | tail -n 3)"
    assert_running "the copy"
    finish_right "the copy of a -R dump"
    echo "ok: dump -R ran on and finished right; its copy restored later finished right too"
    ;;
watcher)
    ref=$(reference)
    start_job "$WORK/run.out"
    cat >"$WORK/post-dump.sh" <<'EOF'
#!/bin/sh
[ "$CRTOOLS_SCRIPT_ACTION" = post-dump ] && exit 3
exit 0
EOF
    chmod +x "$WORK/post-dump.sh"
    dump "$WORK/img" --action-script "$WORK/post-dump.sh"
    [ "$rc" -ne 0 ] || fail "the post-dump script's failure did not fail the dump"
    grep -aq "tcgpu-criu-helper watches" "$WORK/img/dump.log" || fail "no watcher: $(plugin_lines "$WORK/img/dump.log")"
    for i in $(seq 1 200); do
        [ "$(smi_state "$pid")" = running ] && "$GPUCKPT" status "$pid" | grep -q ": running" && break
        sleep 0.05
    done
    assert_running "10 s after CRIU let it go"
    finish_right "after the watcher gave it back"
    echo "ok: CRIU let the dumped job run on; the watcher gave it its GPU back; checksum $got"
    ;;
failed-dump)
    ref=$(reference)
    # stdout is a socket whose peer is outside the tree: CRIU refuses it after the freeze
    python3 -c '
import socket, subprocess, sys, time
a, b = socket.socketpair()
p = subprocess.Popen(sys.argv[2:], stdout=b, stderr=b, stdin=subprocess.DEVNULL, start_new_session=True)
b.close()
open(sys.argv[1], "w").write("%d\n" % p.pid)
with open(sys.argv[1] + ".out", "wb") as f:
    while True:
        d = a.recv(65536)
        if not d: break
        f.write(d); f.flush()
p.wait()' "$WORK/pid" "$GPUCKPT" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms 10 &
    KILL_PIDS+=($!)
    for i in $(seq 1 200); do [ -s "$WORK/pid" ] && break; sleep 0.02; done
    pid=$(cat "$WORK/pid")
    KILL_PIDS+=("$pid")
    ln -sf "$WORK/pid.out" "$WORK/run.out"
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^step 50 '
    dump "$WORK/img"
    [ "$rc" -ne 0 ] || fail "the dump of a job with an external socket succeeded"
    grep -aq "tcgpu_plugin: process $pid (train.*): off the GPU" "$WORK/img/dump.log" ||
        fail "the plugin did not take the job off before CRIU failed: $(plugin_lines "$WORK/img/dump.log")"
    grep -aq "the dump failed: every tcgpu process gets its GPU state back" "$WORK/img/dump.log" ||
        fail "no give-back: $(plugin_lines "$WORK/img/dump.log")"
    assert_running "right after the failed dump"
    note "criu said: $(grep -a Error "$WORK/img/dump.log" | grep -v tcgpu | head -n 1)"
    finish_right "after the failed dump"
    echo "ok: the failed dump gave the job back before criu returned; checksum $got"
    ;;
corrupt)
    ref=$(reference)
    start_job "$WORK/other.out"
    dump "$WORK/other" --leave-running
    [ "$rc" -eq 0 ] || fail "the other dump failed"
    kill -9 "$pid"; wait_gone "$pid" 10
    start_job "$WORK/run.out"
    dump "$WORK/img"
    [ "$rc" -eq 0 ] || fail "dump failed ($rc): $(grep -a Error "$WORK/img/dump.log" | tail -n 3)"
    wait_gone "$pid" 10
    cp -a "$WORK/img" "$WORK/pristine"
    data=$WORK/img/tcgpu/$pid/data.0
    size=$(stat -c %s "$data")
    refused() {   # refused WHAT PATTERN : restore fails, says PATTERN, nothing restored
        restore "$WORK/img"
        [ "$rc" -ne 0 ] || fail "restore with $1 succeeded"
        grep -aq "$2" "$WORK/img/restore.log" || fail "$1: restore.log does not say '$2': $(plugin_lines "$WORK/img/restore.log")"
        kill -0 "$pid" 2>/dev/null && fail "$1: the process was restored"
        note "$1 refused: $(grep -a "Error (tcgpu_plugin)" "$WORK/img/restore.log" | head -n 1)"
        rm -rf "$WORK/img" && cp -a "$WORK/pristine" "$WORK/img"
    }
    printf '\x5a' | dd of="$data" bs=1 seek=$((size / 2)) conv=notrunc status=none
    cmp -s "$data" "$WORK/pristine/tcgpu/$pid/data.0" && fail "the byte flip changed nothing"
    refused "a flipped byte" "GPU image of process $pid (train), tcgpu/$pid, is refused: .*data.0"
    truncate -s $((size - 4096)) "$data"
    refused "a truncated image" "GPU image of process $pid (train), tcgpu/$pid, is refused: .*truncated"
    opid=$(sed -n 's/^process pid=\([0-9]*\) .*/\1/p' "$WORK/other/tcgpu.img")
    rm -rf "$WORK/img/tcgpu/$pid" && cp -a "$WORK/other/tcgpu/$opid" "$WORK/img/tcgpu/$pid"
    refused "another dump's image" "not the image this dump wrote"
    sed -i 's/comm=train/comm=trXin/' "$WORK/img/tcgpu.img"
    refused "a damaged index" "tcgpu.img: checksum mismatch"
    rm -rf "$WORK/img/tcgpu/$pid"
    refused "a missing image" "tcgpu/$pid: missing"
    restore "$WORK/img"
    [ "$rc" -eq 0 ] || fail "restore of the intact dump failed ($rc): $(grep -a Error "$WORK/img/restore.log" | tail -n 3)"
    finish_right "after the refusals"
    echo "ok: flipped, truncated, swapped and missing images and a damaged index refused; intact dump restored, $got"
    ;;
ownership)
    ref=$(reference)
    # CRIU loads plugins in its directory's order, and chains their hooks so;
    # a tmpfs lists the newest entry first: the probe, then ours
    mkdir -p "$WORK/chain" && mount -t tmpfs -o size=64M,mode=0755 chain "$WORK/chain" || fail "no tmpfs"
    MOUNTS+=("$WORK/chain")
    cp "$B/tests/containers/probe.so" "$WORK/chain/"
    cp "$PLUGDIR"/* "$WORK/chain/"
    [ "$(ls -f "$WORK/chain" | grep '\.so$' | head -n 1)" = tcgpu_plugin.so ] || fail "this tmpfs lists entries in another order"
    PLUGDIR=$WORK/chain
    export PROBE_LOG=$WORK/probe.log
    setsid bash -c '"$@" & wait' _ "$GPUCKPT" run -- "$TRAIN" "${TRAIN_ARGS[@]}" --sleep-ms 10 >"$WORK/run.out" 2>&1 </dev/null &
    parent=$!
    KILL_PIDS+=("$parent")
    for i in $(seq 1 200); do pid=$(cat /proc/"$parent"/task/*/children 2>/dev/null | tr -d ' '); [ -n "$pid" ] && break; sleep 0.02; done
    KILL_PIDS+=("$pid")
    wait_for_socket "$pid"
    wait_for_line "$WORK/run.out" '^step 50 '
    tpid=$pid; pid=$parent
    dump "$WORK/img"
    [ "$rc" -eq 0 ] || fail "dump failed ($rc): $(grep -a Error "$WORK/img/dump.log" | tail -n 3)"
    wait_gone "$parent" 10      # reaped: CRIU restores them with their pids
    wait_gone "$tpid" 10
    order=$(grep -ao 'Plugin "[a-z_]*"' "$WORK/img/dump.log" | tr -d '"' | awk '{print $2}' | tr '\n' ' ')
    [ "$order" = "tcgpu_plugin probe " ] || fail "CRIU's plugin order is '$order', not ours first"
    grep -q "^pause $parent$" "$WORK/probe.log" || fail "the probe did not see the plain process: $(cat "$WORK/probe.log")"
    grep -q " $tpid$" "$WORK/probe.log" && fail "the probe was called for the tcgpu process: $(cat "$WORK/probe.log")"
    restore "$WORK/img"
    [ "$rc" -eq 0 ] || { grep -a -B8 Error "$WORK/img/restore.log" | tail -n 30 >&2; fail "restore failed ($rc)"; }
    grep -q "^resume $parent$" "$WORK/probe.log" || fail "the probe did not see the plain process restored: $(cat "$WORK/probe.log")"
    grep -q " $tpid$" "$WORK/probe.log" && fail "the probe was called for the restored tcgpu process: $(cat "$WORK/probe.log")"
    pid=$tpid
    finish_right "the tree"
    echo "ok: the tcgpu process was ours alone, the plain one went on to the next plugin; checksum $got"
    ;;
ending-thread)
    ref=$(reference)
    export ENDING_THREAD_FILE=$WORK/end-now
    LD_PRELOAD=$B/tests/containers/ending_thread.so start_job "$WORK/run.out"
    # no operation ran yet: the one tcgpu-ops is the planted thread
    planted=$(grep -l '^tcgpu-ops$' /proc/"$pid"/task/*/comm | cut -d/ -f5)
    [ -n "$planted" ] || fail "no thread named tcgpu-ops in the job"
    dump "$WORK/img" --file-locks
    [ "$rc" -eq 0 ] || fail "dump failed ($rc): $(grep -a Error "$WORK/img/dump.log" | tail -n 3)"
    wait_gone "$pid" 10
    touch "$ENDING_THREAD_FILE"
    restore "$WORK/img"
    [ "$rc" -eq 0 ] || fail "restore failed ($rc): $(grep -a -E 'Error|cannot stop' "$WORK/img/restore.log" | tail -n 3)"
    grep -aq "tcgpu_plugin: process $pid (train): back on the GPU" "$WORK/img/restore.log" ||
        fail "the plugin did not bring it back: $(plugin_lines "$WORK/img/restore.log")"
    assert_running "after restore"
    for i in $(seq 1 100); do [ -d "/proc/$pid/task/$planted" ] || break; sleep 0.05; done
    [ -d "/proc/$pid/task/$planted" ] && fail "the planted thread $planted did not end after the restore"
    finish_right "after a restore whose thread ended"
    echo "ok: a tcgpu-named thread that ended at the restore did not fail it; checksum $got"
    ;;
*) fail "unknown mode $mode" ;;
esac
