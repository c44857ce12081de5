#!/usr/bin/env bash
# A stand-in for CRIU in the sim suite (save_files.sh): it writes what
# gpuckpt's checks of a save read (inventory.img, pstree.img, core-PID.img per
# process, pages-1.img with bytes of the dumped memory's size, stats-dump,
# dump.log) and keeps or stops the tree as `criu dump` does. It cannot
# restore: `restore` records that it was asked (RESTORE_MARK) and fails, so a
# test sees whether gpuckpt got that far. The criu suite runs the real CRIU.
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
