#!/usr/bin/env bash
# A stand-in for CRIU in the sim suite (save_files.sh): it writes what
# gpuckpt's checks of a save read (inventory.img, pstree.img, core-PID.img per
# process, pages-1.img with bytes of the dumped memory's size, stats-dump,
# dump.log) and keeps or stops the tree as `criu dump` does. What tcgpu's
# plugin does inside a real dump is done with gpuckpt: every tcgpu process is
# suspended to $TCGPU_CRIU_GPU_DIR/PID, and with --leave-running resumed from
# there (the image stays: it is the save's). It cannot
# restore: `restore` records that it was asked (RESTORE_MARK) and fails, so a
# test sees whether gpuckpt got that far. CRIU_STANDIN_FAIL=early|log: the
# dump fails, before CRIU's log exists or with Error lines in it. The criu
# suite runs the real CRIU.
set -euo pipefail

cmd=${1:?}; shift
dir= pid= leave=0
while [ $# -gt 0 ]; do
    case "$1" in
    -D) dir=$2; shift ;;
    -t) pid=$2; shift ;;
    --leave-running) leave=1 ;;
    esac
    shift
done
case "$cmd" in
dump)
    # CRIU_STANDIN_FAIL: a dump that fails as CRIU's do, before its log
    # exists (early: what it printed is all there is) or in it (log)
    case "${CRIU_STANDIN_FAIL:-}" in
    early)
        echo "Error (criu/kerndat.c:1724): kdat_x86_has_ptrace_fpu_xsave_bug failed" >&2
        exit 1 ;;
    log)
        { echo "(00.001) Dumping processes (pid: $pid comm: train)"
          echo "(00.002) Error (criu/cr-dump.c:2098): Dumping FAILED."
          echo "(00.002) Error (criu/proc_parse.c:1021): stand-in reason"; } >"$dir/dump.log"
        exit 1 ;;
    esac
    pids=("$pid")
    for ((i = 0; i < ${#pids[@]}; i++)); do
        for c in $(cat /proc/"${pids[i]}"/task/*/children 2>/dev/null); do pids+=("$c"); done
    done
    printf 'stand-in inventory\n' >"$dir/inventory.img"
    printf '%s\n' "${pids[@]}" >"$dir/pstree.img"
    for p in "${pids[@]}"; do
        head -c 4096 /dev/urandom >"$dir/core-$p.img"
    done
    head -c $((1 << 20)) /dev/urandom >"$dir/pages-1.img"
    printf 'stats\n' >"$dir/stats-dump"
    echo "stand-in dump of ${pids[*]}" >"$dir/dump.log"
    gpuckpt=${TCGPU_BUILD_ROOT:?}/tools/gpuckpt/gpuckpt
    for p in "${pids[@]}"; do
        "$gpuckpt" status "$p" >/dev/null 2>&1 || continue     # not a tcgpu process
        "$gpuckpt" suspend "$p" -D "${TCGPU_CRIU_GPU_DIR:?}/$p" -q >>"$dir/dump.log" 2>&1 ||
            { echo "Error (stand-in): suspend of $p failed" >>"$dir/dump.log"; exit 1; }
    done
    if [ "$leave" -eq 1 ]; then
        for p in "${pids[@]}"; do
            [ -d "$TCGPU_CRIU_GPU_DIR/$p" ] || continue
            "$gpuckpt" resume "$p" -D "$TCGPU_CRIU_GPU_DIR/$p" -q >>"$dir/dump.log" 2>&1 ||
                { echo "Error (stand-in): resume of $p failed" >>"$dir/dump.log"; exit 1; }
        done
    fi
    if [ "$leave" -eq 0 ]; then
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    fi
    ;;
restore)
    echo "restore $dir" >>"${RESTORE_MARK:?}"
    echo "Error (stand-in): cannot restore" >"$dir/restore.log"
    exit 1
    ;;
*) echo "criu stand-in: $cmd not supported" >&2; exit 1 ;;
esac
