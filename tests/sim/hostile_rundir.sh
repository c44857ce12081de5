#!/usr/bin/env bash
# A planted run dir does not leave a job uncontrollable. Another user
# (mallory) makes the victim's default run dir /tmp/tcgpu-UID first: a
# world-writable dir of its own, then a symlink to a dir of its own. The
# victim's job refuses it, says so, and falls back to a private
# /tmp/tcgpu-UID.XXXXXX; the victim's gpuckpt (with no TCGPU_RUN_DIR) finds
# it: status, suspend and resume work, and the job finishes with the
# checksum of an uninterrupted run; mallory can neither read nor plant a
# socket there. Needs root (useradd): skips otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/users_lib.sh"
needs_users
throwaway_user mallory m
throwaway_user victim v
vuid=$(id -u "$victim")
args=(--mb 16 --steps 300 --print-every 100 --seed 21)
ref=$(SIMCUDA_SHM=$SIMCUDA_SHM-ref "$TRAIN" "${args[@]}" | sed -n 's/^checksum: *\([0-9a-f]*\).*/\1/p')
rm -f "/dev/shm$SIMCUDA_SHM-ref"
[ -n "$ref" ] || fail "no reference checksum"

# as_victim CMD... : the victim's command with its default run dir (none given).
as_victim() { env -u TCGPU_RUN_DIR -u XDG_RUNTIME_DIR setpriv $(user_ids "$victim") "$@"; }

one_case() {                 # one_case WHAT : mallory has planted /tmp/tcgpu-VUID already
    local what=$1 job fb
    # shellcheck disable=SC2046
    start_bg "$WORK/job-$what.out" env -u TCGPU_RUN_DIR -u XDG_RUNTIME_DIR \
        setpriv $(user_ids "$victim") "$GPUCKPT" run -- "$TRAIN" "${args[@]}" --sleep-ms 10
    job=$BG
    wait_for_line "$WORK/job-$what.out" "using the private /tmp/tcgpu-$vuid\."
    grep -q "run dir /tmp/tcgpu-$vuid .*refusing to use it" "$WORK/job-$what.out" ||
        fail "$what: the job did not say why: $(head -n 3 "$WORK/job-$what.out")"
    fb=$(sed -n "s|.*using the private \(/tmp/tcgpu-$vuid\.[A-Za-z0-9]*\) instead.*|\1|p" "$WORK/job-$what.out" | head -n 1)
    [ "$(stat -c '%u %a' "$fb")" = "$vuid 700" ] || fail "$what: fallback $fb is $(stat -c '%u %a' "$fb")"
    as_victim "$GPUCKPT" status "$job" --wait 10 >"$WORK/st.out" 2>&1 ||
        fail "$what: the victim's gpuckpt status: $(cat "$WORK/st.out")"
    as_victim "$GPUCKPT" suspend "$job" -q 2>"$WORK/s.err" || fail "$what: suspend: $(cat "$WORK/s.err")"
    as_victim "$GPUCKPT" status "$job" | grep -q "^process $job: suspended" || fail "$what: not suspended"
    rc=0; as_user "$mallory" "$GPUCKPT" status "$job" >"$WORK/m.out" 2>&1 || rc=$?
    [ "$rc" -eq 6 ] || fail "$what: mallory's status: exit $rc: $(cat "$WORK/m.out")"
    as_victim "$GPUCKPT" resume "$job" -q 2>"$WORK/s.err" || fail "$what: resume: $(cat "$WORK/s.err")"
    "$GPUCKPT" status "$job" >/dev/null 2>&1 || fail "$what: root's status"
    wait "$job" || fail "$what: the job failed: $(tail -n 3 "$WORK/job-$what.out")"
    [ "$(checksum_of "$WORK/job-$what.out")" = "$ref" ] || fail "$what: checksum changed"
    note "$what: refused, fell back to $fb, controllable, checksum intact"
}

# 1. a dir of mallory's, open to all
as_user "$mallory" mkdir -m 0777 "/tmp/tcgpu-$vuid"
one_case planted-dir
rm -rf "/tmp/tcgpu-$vuid" "/tmp/tcgpu-$vuid".*
# 2. a symlink of mallory's to a dir of its own
mdir=$(as_user "$mallory" mktemp -d /tmp/tcgpu-m-XXXXXX)
as_user "$mallory" ln -s "$mdir" "/tmp/tcgpu-$vuid"
one_case planted-symlink
[ -z "$(ls -A "$mdir")" ] || fail "something was put in mallory's dir: $(ls -A "$mdir")"
echo "ok: a planted run dir was refused, the job fell back to a private one and stayed controllable"
