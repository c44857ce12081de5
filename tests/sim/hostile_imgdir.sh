#!/usr/bin/env bash
# Images do not follow a planted parent. Root's job is checkpointed and
# suspended to /tmp/x/img where /tmp/x is another user's (mallory's) symlink
# to a dir of its own, or mallory's own dir, or a dir anyone may write: each
# is refused before anything is written, naming the untrusted component;
# mallory's dir stays empty; the job runs on untouched (a failed suspend
# leaves it running) and finishes with the checksum of an uninterrupted run.
# The same image to a trusted place works. Needs root (useradd): skips otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/users_lib.sh"
needs_users
throwaway_user mallory m
args=(--mb 16 --steps 300 --print-every 100 --seed 22)
ref=$(SIMCUDA_SHM=$SIMCUDA_SHM-ref "$TRAIN" "${args[@]}" | sed -n 's/^checksum: *\([0-9a-f]*\).*/\1/p')
rm -f "/dev/shm$SIMCUDA_SHM-ref"

mdir=$(as_user "$mallory" mktemp -d /tmp/tcgpu-m-XXXXXX)
as_user "$mallory" chmod 0755 "$mdir"
link=/tmp/tcgpu-x-$$                   # mallory's symlink, in sticky /tmp
as_user "$mallory" ln -s "$mdir" "$link"
open=$(mktemp -d /tmp/tcgpu-open-XXXXXX)      # root's, but anyone may write (no sticky bit)
chmod 0777 "$open"
THROWAWAY_DIRS+=("$link" "$open")

start_bg "$WORK/job.out" "$GPUCKPT" run -- "$TRAIN" "${args[@]}" --sleep-ms 20
job=$BG
wait_for_socket "$job"

refused() {                  # refused CMD DIR WHY : gpuckpt CMD -D DIR fails, saying WHY
    local rc=0
    "$GPUCKPT" "$1" "$job" -D "$2" -q >"$WORK/r.out" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || fail "$1 -D $2 succeeded"
    grep -q "$3" "$WORK/r.out" || fail "$1 -D $2: $(cat "$WORK/r.out")"
    "$GPUCKPT" status "$job" | grep -q "^process $job: running" || fail "$1 -D $2 left the job $(\"$GPUCKPT\" status "$job" | head -n 1)"
    note "$1 -D $2 refused: $(tail -n 1 "$WORK/r.out")"
}
refused checkpoint "$link/img" "symbolic link owned by uid $(id -u "$mallory")"
refused suspend "$link/img" "symbolic link owned by uid $(id -u "$mallory")"
refused checkpoint "$mdir/img" "owned by uid $(id -u "$mallory"), neither root nor uid 0"
refused checkpoint "$open/img" "may be written by others"
[ -z "$(ls -A "$mdir")" ] || fail "root's image went into mallory's dir: $(ls -A "$mdir")"
[ -z "$(ls -A "$open")" ] || fail "something was left in $open: $(ls -A "$open")"

"$GPUCKPT" checkpoint "$job" -D "$WORK/img" -q || fail "a checkpoint to a trusted place failed"
"$GPUCKPT" verify "$WORK/img" >/dev/null || fail "that image does not verify"
wait "$job" || fail "the job failed: $(tail -n 3 "$WORK/job.out")"
[ "$(checksum_of "$WORK/job.out")" = "$ref" ] || fail "checksum changed"
echo "ok: planted and open parents refused; the job ran on"
