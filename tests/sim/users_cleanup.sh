#!/usr/bin/env bash
# The hostile-user tests' throwaway users go with the test: on a normal exit,
# on a failure, and when meson ends a test past its timeout (SIGTERM). They
# used to stay: throwaway_user ran in a $(...) and listed them in a subshell's
# copy of the list. One of them took a later test's name once its pid came
# round again (pids wrap at 32768) and failed it ("useradd: user 'tcm11244'
# already exists"). And a name taken already (a run killed by SIGKILL) is not
# reused.
# Needs root (useradd): skips otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/users_lib.sh"
needs_users
child="$WORK/child.sh"
# child.sh HOW : makes two users, prints their names and the first one's uid,
# then ends as HOW says. The uid comes from the child: once it has exited
# its users are gone, and the parent may only look after that.
cat >"$child" <<CHILD
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/users_lib.sh"
needs_users
throwaway_user one m
throwaway_user two v
as_user "\$one" mkdir /tmp/tcgpu-\$(id -u "\$one").leftover
echo "users: \$one \$two \$(id -u "\$one")"
case \$1 in
    exit) exit 0 ;;
    fail) fail "on purpose" ;;
    term) sleep 60 ;;
esac
CHILD

for how in exit fail term; do
    out="$WORK/child-$how.out"
    start_bg "$out" setsid bash "$child" "$how"
    pid=$BG
    wait_for_line "$out" "^users: "
    read -r _ one two uid < <(grep "^users: " "$out")
    [ "$how" = term ] && kill -TERM -- "-$pid"
    rc=0; wait "$pid" || rc=$?
    case $how in exit) want=0 ;; fail) want=1 ;; term) want=143 ;; esac
    [ "$rc" -eq "$want" ] || fail "$how: the child exited $rc, not $want: $(tail_of "$out")"
    for u in "$one" "$two"; do
        ! getent passwd "$u" >/dev/null || fail "$how: user $u is still there after the test"
    done
    [ ! -e "/tmp/tcgpu-$uid.leftover" ] || fail "$how: what $one owned in /tmp is still there"
    note "$how: $one and $two removed, with what they owned in /tmp"
done

# a name taken already is not reused (nor removed: it is not this test's)
taken="tcm$$"
useradd -M -N -s /usr/sbin/nologin "$taken" >/dev/null || fail "useradd $taken"
throwaway_user mine m
userdel "$taken" || fail "userdel $taken"
[ "$mine" != "$taken" ] || fail "throwaway_user reused the name $taken"
getent passwd "$mine" >/dev/null || fail "no user $mine"
echo "ok: throwaway users are removed on exit, failure and SIGTERM; a taken name is not reused"
