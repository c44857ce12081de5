# Other users, for the hostile-user tests (sourced after lib.sh; tcgpud_lib.sh
# sources it too).
#
# throwaway_user VAR TAG : a user made for this test with useradd (no home, no
# login; uid chosen by useradd), removed at exit with what it owns in /tmp. Sets
# VAR to its name (not printed: the list of users to remove lives in this shell,
# and a $(...) would add to a subshell's copy). Needs root and useradd (callers
# skip otherwise: needs_users). Their processes must be in BG_PIDS (or ended)
# by then: cleanup kills those.
THROWAWAY_USERS=()
THROWAWAY_DIRS=()
CLIENT=$(dirname "${BASH_SOURCE[0]}")/tcgpud_client.py
PY=/usr/bin/python3                     # every user can run it (not a per-user install)

needs_users() {
    [ "$(id -u)" -eq 0 ] || { echo "skip: needs root to create users"; exit 77; }
    command -v useradd >/dev/null && command -v setpriv >/dev/null ||
        { echo "skip: no useradd/setpriv"; exit 77; }
    chmod 711 "$WORK"                   # other users reach what is in it (not list it)
    trap 'cleanup; remove_throwaway_users' EXIT
}

throwaway_user() {
    local -n name_of=$1
    # The pid alone is not unique across runs: pids wrap (pid_max 32768 in CI),
    # and a run killed past its cleanup leaves its users behind. Never reuse one.
    local name="tc$2$$"
    while getent passwd "$name" >/dev/null; do name="tc$2$$r$RANDOM"; done
    useradd -M -N -s /usr/sbin/nologin "$name" >/dev/null || fail "useradd $name failed"
    THROWAWAY_USERS+=("$name")
    # what an earlier user of this (free) uid left behind is not this one's
    rm -rf "/tmp/tcgpu-$(id -u "$name")" "/tmp/tcgpu-$(id -u "$name")".*
    name_of=$name
}

remove_throwaway_users() {
    local u
    rm -rf "${THROWAWAY_DIRS[@]}"
    for u in "${THROWAWAY_USERS[@]}"; do
        # its run dirs (the uid may be another's next time)
        find /tmp -maxdepth 1 -user "$u" -exec rm -rf {} + 2>/dev/null || true
        userdel "$u" 2>/dev/null || userdel -f "$u" 2>/dev/null || true
    done
}

# as_user NAME CMD... : CMD as user NAME (its uid, primary group and groups).
# In the background: start_bg OUT setpriv $(user_ids NAME) CMD... (one pid throughout).
user_ids() { echo "--reuid=$(id -u "$1") --regid=$(id -g "$1") --init-groups"; }
as_user() {
    local u=$1; shift
    # shellcheck disable=SC2046
    setpriv $(user_ids "$u") "$@"
}

# user_run_dir NAME : a private run dir owned by NAME (for its jobs' control sockets).
# Sets RUN_DIR (not printed: the list of dirs to remove lives in this shell).
user_run_dir() {
    RUN_DIR=$(mktemp -d /tmp/tcgpu-test-XXXXXX)
    chown "$1" "$RUN_DIR"
    THROWAWAY_DIRS+=("$RUN_DIR")
}
