#!/usr/bin/env bash
# A privileged restore whose caller hangs up ends with its whole tree
# (tools/tcgpud/save.c, docs/save-restore.md "Ordinary users"), also a
# process that a thread other than the main one forked: the kernel lists it
# under that thread. tcgpud's gpuckpt is a stand-in (TCGPU_GPUCKPT,
# progs/fork_in_thread.c) whose child comes from a second thread; nobody's
# attached restore is killed. Needs root (to act as nobody; tcgpud runs only
# a root-owned gpuckpt): skip otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/tcgpud_lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root to act as another user"; exit 77; }
command -v setpriv >/dev/null || { echo "skip: no setpriv"; exit 77; }
chmod 711 "$WORK"                 # nobody must reach the socket in it (not list it)

# ended PID: the process is gone, or killed and not yet reaped (a zombie)
ended() { ! kill -0 "$1" 2>/dev/null || [ "$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null)" = Z ]; }

export TCGPU_GPUCKPT=$PROGS/fork_in_thread
write_config ""
start_tcgpud
save=$WORK/save
mkdir -m 711 "$save"              # what tcgpud restores: root's, nobody else may write
start_bg "$WORK/restore.out" setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$GPUCKPT" restore -D "$save"
caller=$BG
for i in $(seq 1 200); do [ -s "$save/forked.pid" ] && break; sleep 0.05; done
[ -s "$save/forked.pid" ] || fail "the stand-in gpuckpt did not fork: $(tail_of "$WORK/restore.out")"
forked=$(cat "$save/forked.pid")
BG_PIDS+=("$forked")
kill -9 "$caller"
wait "$caller" 2>/dev/null || true
wait_line "$WORK/tcgpud.log" "the caller (pid [0-9]*) left; ending it" 10 ||
    fail "tcgpud did not see the caller leave: $(tail_of "$WORK/tcgpud.log")"
for i in $(seq 1 100); do ended "$forked" && break; sleep 0.05; done
ended "$forked" || fail "process $forked, forked by a second thread of tcgpud's gpuckpt, outlived the abandoned restore"
echo "ok: an abandoned restore ends its tree, a thread's child too"
