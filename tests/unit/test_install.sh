#!/usr/bin/env bash
# meson install into a staging directory, as Debian's package build makes it
# (--prefix=/usr, the multiarch libdir lib/x86_64-linux-gnu, DESTDIR), from a
# build of its own configured so; then every installed program does its real
# job from the staging tree, and from another place after the tree is moved:
# - every piece is installed: gpuckpt, tcgpu-replay, tcgpud, tcgpu-slurm and
#   its libtcgpu-slurm-defer.so, libtcgpu.so, the CRIU plugin and its helper,
#   tcgpu.h, tcgpu.pc, the systemd unit, the docs and the example config, the
#   man pages, the bash completions;
# - a tcgpu-slurm task, started as srun starts it (Slurm's environment, no
#   Slurm needed for a task that is not preempted), runs its program with the
#   staged libtcgpu-slurm-defer.so and libtcgpu.so preloaded, to the
#   checksum of a run without tcgpu;
# - as root with CRIU: the staged gpuckpt saves a job with the staged CRIU
#   plugin (gpuckpt check names it) and restores it, to the same checksum;
# - moved elsewhere: the installed gpuckpt runs a CUDA program (simcuda) with
#   the installed libtcgpu.so preloaded, suspends and resumes it; gpuckpt
#   check finds that library and that plugin; tcgpud checks the installed
#   example configuration;
# - pkg-config gives the relocated include dir and library; a program
#   including tcgpu.h compiles with its flags;
# - the man pages render, gpuckpt(1) names every command gpuckpt --help
#   lists, tcgpud.ini(5) every key tcgpud knows;
# - the unit passes systemd-analyze verify; it keeps tcgpud (and the gpuckpt
#   and CRIU it runs for users) in the node's namespaces, with every
#   capability, no syscall filter and no no_new_privs, which an ordinary
#   user's save through tcgpud needs and which would otherwise stay on every
#   job it restores (tcgpud.service.in; the save itself under systemd is the
#   test containers/tcgpud-unit-save); it keeps what it restricts
#   (security's exposure stays at 9.4, where those leave it);
# - bash completes gpuckpt's commands, options, pids and tcgpud's options.
#
# The build is tests/common/debian_build.sh's (BUILD/install-debian, kept
# between runs; the project's options of BUILD).
set -euo pipefail
B=${TCGPU_BUILD_ROOT:?run through meson test}
SRC=${TCGPU_SOURCE_ROOT:?run through meson test}
. "$SRC/tests/common/debian_build.sh"
prefix=/usr bindir=bin sbindir=sbin libdir=$DEBIAN_LIBDIR
D=$B/install-debian               # debian_stage's
STAGE=$(mktemp -d /tmp/tcgpu-install-XXXXXX)
export SIMCUDA_SHM=/simcuda-t-install-$$ SIMCUDA_DEVICE_MEM=512M
export TCGPU_RUN_DIR=$STAGE/run TCGPU_DAEMON_SOCKET=off TCGPU_REAL_LIBCUDA=$D/simcuda/libcuda.so.1
TRAIN=$D/examples/train/train
job= daemon=
cleanup() {
    [ -n "$job" ] && kill -9 "$job" 2>/dev/null || true
    [ -n "$daemon" ] && kill -9 "$daemon" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -f "/dev/shm$SIMCUDA_SHM"
    rm -rf "$STAGE"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -m 700 "$TCGPU_RUN_DIR"

# the build, configured as Debian's meson would
debian_stage "$B" "$SRC" "$STAGE/root" "$STAGE" \
    examples/train/train examples/train/train_kernels.so simcuda/libcuda.so.1 || fail "the Debian build"
P=$STAGE/root$prefix
man=no
[ -e "$D/man/gpuckpt.1" ] && man=yes
for f in "$bindir/gpuckpt" "$bindir/tcgpu-replay" "$sbindir/tcgpud" "$libdir/libtcgpu.so" \
         "$bindir/tcgpu-slurm" "$libdir/tcgpu/libtcgpu-slurm-defer.so" \
         "$libdir/tcgpu/libtcgpu-criu-rlimits.so" lib/criu/tcgpu_plugin.so lib/criu/tcgpu-criu-helper \
         include/tcgpu.h "$libdir/pkgconfig/tcgpu.pc" lib/systemd/system/tcgpud.service \
         share/doc/tcgpu/README.md share/doc/tcgpu/examples/tcgpud.ini \
         share/bash-completion/completions/gpuckpt share/bash-completion/completions/tcgpud; do
    [ -e "$P/$f" ] || fail "not installed: $prefix/$f"
done
if [ "$man" = yes ]; then
    for f in man1/gpuckpt.1 man1/tcgpu-replay.1 man1/tcgpu-slurm.1 man5/tcgpud.ini.5 man7/tcgpu.7 man8/tcgpud.8; do
        [ -s "$P/share/man/$f" ] || fail "not installed: $prefix/share/man/$f"
    done
fi
! find "$STAGE/root" -name '*simcuda*' ! -name '*.md' | grep -q . || fail "the test double simcuda was installed"

# the unit names the installed programs, and stays hardened
unit=$P/lib/systemd/system/tcgpud.service
# (with no --config: tcgpud's default file, which may be absent, below)
[ "$(grep '^Exec' "$unit")" = "ExecStart=$prefix/$sbindir/tcgpud" ] || fail "the unit's commands: $(grep '^Exec' "$unit")"
if command -v systemd-analyze >/dev/null; then
    sed "s|$prefix/|$P/|g" "$unit" >"$STAGE/tcgpud.service"     # its programs where they are staged
    MANPATH=$P/share/man systemd-analyze verify "$STAGE/tcgpud.service" >"$STAGE/verify.log" 2>&1 ||
        fail "systemd-analyze verify: $(cat "$STAGE/verify.log")"
    # (9.4: the restrictions the unit keeps; a tighter unit breaks the save
    # path, tcgpud.service.in says why)
    systemd-analyze security --offline=yes --threshold=94 "$STAGE/tcgpud.service" >"$STAGE/security.log" 2>&1 ||
        fail "systemd-analyze security: $(tail -n 1 "$STAGE/security.log")"
    echo "unit: $(tail -n 1 "$STAGE/security.log")"
fi
# none of the options that broke users' saves through tcgpud, or that CRIU
# cannot take off the jobs it restores, and the restrictions it keeps
for o in CapabilityBoundingSet AmbientCapabilities NoNewPrivileges SystemCallFilter SystemCallArchitectures \
         RestrictAddressFamilies RestrictNamespaces MemoryDenyWriteExecute LockPersonality RestrictRealtime \
         RestrictSUIDSGID ProtectClock ProtectKernelTunables ProtectKernelModules ProtectKernelLogs \
         ProtectControlGroups ProtectSystem ProtectHome ReadWritePaths ReadOnlyPaths InaccessiblePaths \
         PrivateTmp PrivateDevices PrivateMounts PrivateNetwork PrivateIPC PrivateUsers ProtectHostname \
         ProtectProc ProcSubset DevicePolicy DeviceAllow User DynamicUser; do
    ! grep -q "^$o=" "$unit" || fail "the unit sets $o=, which breaks users' saves through tcgpud or stays on the jobs it restores (tcgpud.service.in): $(grep "^$o=" "$unit")"
done
for o in UMask=0077 KeyringMode=private IPAddressDeny=any KillMode=process; do
    grep -qx "$o" "$unit" || fail "the unit no longer sets $o"
done

# the reference: the job's checksum without tcgpu
"$TRAIN" --mb 16 --steps 300 --print-every 0 >"$STAGE/ref.log" 2>&1 || fail "train alone: $(tail -n 3 "$STAGE/ref.log")"
ref=$(grep '^checksum:' "$STAGE/ref.log") || fail "train printed no checksum: $(tail -n 3 "$STAGE/ref.log")"

# a tcgpu-slurm task as srun starts one (Slurm's environment; a task that is
# not preempted never asks slurmctld): the staged libraries preloaded into its
# program, which runs to the same checksum
mkdir -m 1777 "$STAGE/slurm"
SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_RESTART_COUNT=0 \
    timeout 120 "$P/$bindir/tcgpu-slurm" --dir "$STAGE/slurm" -- \
    sh -c 'tr "\0" "\n" </proc/$$/environ | grep ^LD_PRELOAD=; exec "$@"' sh \
    "$TRAIN" --mb 16 --steps 300 --print-every 0 >"$STAGE/task.out" 2>"$STAGE/task.err" ||
    fail "the tcgpu-slurm task: $(cat "$STAGE/task.err"; tail -n 3 "$STAGE/task.out")"
preload=$(sed -n 's/^LD_PRELOAD=//p' "$STAGE/task.out")
for lib in "$P/$libdir/tcgpu/libtcgpu-slurm-defer.so" "$P/$libdir/libtcgpu.so"; do
    grep -qx "$lib" <<<"${preload//:/$'\n'}" ||
        fail "the task's program preloads '$preload', not $lib"
done
grep -qx "$ref" "$STAGE/task.out" || fail "the task's checksum: $(tail -n 3 "$STAGE/task.out"), expected $ref"
echo "a tcgpu-slurm task ran with $preload"

# as root with CRIU: the staged gpuckpt saves a job with the staged plugin and restores it
G=$P/$bindir/gpuckpt
CRIU=${TCGPU_CRIU:-$(command -v criu || echo /usr/local/sbin/criu)}
if [ "$(id -u)" -ne 0 ] || [ ! -x "$CRIU" ] || [ ! -e "$D/plugins/criu/tcgpu_plugin.so" ]; then
    echo "not checked: a save and a restore from the staged tree (needs root, CRIU and the plugin built)"
else
    export TCGPU_CRIU=$CRIU
    "$G" check --json | python3 -c 'import json, sys
c = {x["name"]: x for x in json.load(sys.stdin)["checks"]}["criu"]
assert c["result"] == "ok" and c["detail"].endswith(sys.argv[1]), c' "; tcgpu's plugin: $P/lib/criu/tcgpu_plugin.so" ||
        fail "gpuckpt check does not name the staged plugin: $("$G" check 2>&1 | grep -A1 criu)"
    setsid "$G" run -- "$TRAIN" --mb 16 --steps 300 --print-every 0 --sleep-ms 10 \
        >"$STAGE/saved.log" 2>&1 </dev/null &
    job=$!
    "$G" status "$job" --wait 30 -q >/dev/null 2>"$STAGE/op.err" ||
        fail "status: $(cat "$STAGE/op.err"; tail -n 3 "$STAGE/saved.log")"
    "$G" save "$job" -D "$STAGE/save" >"$STAGE/save.out" 2>&1 || fail "save: $(cat "$STAGE/save.out")"
    { wait "$job" || true; } 2>/dev/null     # ended by the dump
    grep -q "criu images: present" <("$G" inspect "$STAGE/save") || fail "the save has no CRIU images"
    timeout 120 "$G" restore -D "$STAGE/save" >"$STAGE/restore.out" 2>&1 ||
        fail "restore: $(cat "$STAGE/restore.out"; tail -n 3 "$STAGE/saved.log")"
    job=
    grep -qx "$ref" "$STAGE/saved.log" || fail "the restored job's checksum: $(tail -n 3 "$STAGE/saved.log"), expected $ref"
    echo "saved and restored with $P/lib/criu/tcgpu_plugin.so"
fi

# move the whole tree elsewhere: it must not depend on where it was installed
R=$STAGE/moved/opt/tcgpu
mkdir -p "$(dirname "$R")"
mv "$P" "$R"
G=$R/$bindir/gpuckpt
"$G" --version | grep -qx "gpuckpt [0-9.]*" || fail "gpuckpt --version: $("$G" --version)"
"$R/$sbindir/tcgpud" --version | grep -q "^tcgpud " || fail "tcgpud --version"
"$R/$bindir/tcgpu-replay" --version | grep -q "^tcgpu-replay " || fail "tcgpu-replay --version"
"$R/$sbindir/tcgpud" --check-config "$R/share/doc/tcgpu/examples/tcgpud.ini" >/dev/null 2>&1 ||
    fail "the installed example configuration: $("$R/$sbindir/tcgpud" --check-config "$R/share/doc/tcgpu/examples/tcgpud.ini" 2>&1)"
"$G" check --json | python3 -c 'import json, sys
c = {x["name"]: x for x in json.load(sys.stdin)["checks"]}
lib = c["library"]
assert lib["result"] == "ok" and lib["detail"].startswith(sys.argv[1] + " "), lib' "$R/$libdir/libtcgpu.so" ||
    fail "gpuckpt check does not find the moved install's libtcgpu.so: $("$G" check 2>&1)"
if [ -e "$R/lib/criu/tcgpu_plugin.so" ] && [ -x "$CRIU" ]; then
    "$G" check --json | python3 -c 'import json, sys
c = {x["name"]: x for x in json.load(sys.stdin)["checks"]}["criu"]
assert sys.argv[1] in c["detail"], c' "$R/lib/criu/tcgpu_plugin.so" ||
        fail "gpuckpt check does not find the moved install's plugin: $("$G" check 2>&1 | grep -A1 criu)"
fi

# tcgpud without its configuration file (/etc/tcgpud.ini, as the unit runs
# it): the defaults, and it says so; a file named by --config must be there
if [ -e /etc/tcgpud.ini ]; then
    echo "not checked: tcgpud without /etc/tcgpud.ini (this machine has one)"
else
    "$R/$sbindir/tcgpud" --socket "$STAGE/tcgpud.sock" --state "$STAGE/tcgpud.state" 2>"$STAGE/tcgpud.log" &
    daemon=$!
    for _ in $(seq 100); do
        [ -S "$STAGE/tcgpud.sock" ] || ! kill -0 "$daemon" 2>/dev/null && break
        sleep 0.1
    done
    TCGPU_DAEMON_SOCKET=$STAGE/tcgpud.sock "$G" ps --daemon >/dev/null 2>"$STAGE/op.err" ||
        fail "tcgpud without /etc/tcgpud.ini: $(cat "$STAGE/op.err" "$STAGE/tcgpud.log")"
    grep -q "no /etc/tcgpud.ini: running with the defaults" "$STAGE/tcgpud.log" ||
        fail "tcgpud did not say it runs with the defaults: $(cat "$STAGE/tcgpud.log")"
    kill "$daemon"
    wait "$daemon" || fail "tcgpud's exit on SIGTERM: $(tail -n 3 "$STAGE/tcgpud.log")"
    daemon=
fi
rc=0
"$R/$sbindir/tcgpud" --config "$STAGE/none.ini" --socket "$STAGE/tcgpud.sock" 2>"$STAGE/tcgpud.log" || rc=$?
[ "$rc" -eq 1 ] && grep -q "none.ini: No such file" "$STAGE/tcgpud.log" ||
    fail "tcgpud --config of a missing file: exit $rc, $(cat "$STAGE/tcgpud.log")"

# a real program under the installed gpuckpt and library
"$G" run -- "$TRAIN" --mb 32 --steps 100000 --print-every 0 --sleep-ms 5 \
    >"$STAGE/job.log" 2>&1 &
job=$!
"$G" status "$job" --wait 30 -q >/dev/null 2>"$STAGE/op.err" ||
    fail "status: $(cat "$STAGE/op.err"; tail -n 3 "$STAGE/job.log")"
grep -q "$R/$libdir/libtcgpu.so" "/proc/$job/maps" || fail "the job did not load the installed libtcgpu.so"
"$G" suspend "$job" -q 2>"$STAGE/op.err" && "$G" status "$job" --json | grep -q '"state":"suspended"' ||
    fail "suspend with the installed gpuckpt: $(cat "$STAGE/op.err"; tail -n 3 "$STAGE/job.log")"
"$G" resume "$job" -q 2>"$STAGE/op.err" && "$G" status "$job" --json | grep -q '"state":"running"' ||
    fail "resume with the installed gpuckpt: $(cat "$STAGE/op.err"; tail -n 3 "$STAGE/job.log")"
kill "$job"

# the installed README's relative links (docs/, images) lead to installed files
doc=$R/share/doc/tcgpu
links=$(grep -o '\]([^)]*)' "$doc/README.md" | sed 's/^](//; s/)$//; s/#.*//' | grep -v '^[a-z]*:' | grep . | sort -u)
[ -n "$links" ] || fail "no relative links found in the installed README"
for l in $links; do
    [ -e "$doc/$l" ] || fail "the installed README links $l, which is not installed"
done

# pkg-config: the moved tree's header and library; a program compiles with it
export PKG_CONFIG_PATH=$R/$libdir/pkgconfig
inc=$(pkg-config --cflags tcgpu | sed 's/^-I//; s/ *$//')
[ "$(readlink -f "$inc")" = "$(readlink -f "$R/include")" ] || fail "pkg-config --cflags tcgpu: $(pkg-config --cflags tcgpu)"
[ -r "$(pkg-config --variable=preload tcgpu)" ] || fail "pkg-config's preload: $(pkg-config --variable=preload tcgpu)"
version=$("$G" --version | cut -d' ' -f2)
printf '#include <tcgpu.h>\n#include <stdio.h>\nint main(void) { puts(TCGPU_VERSION_STRING); return 0; }\n' >"$STAGE/use.c"
# shellcheck disable=SC2046
cc $(pkg-config --cflags tcgpu) -o "$STAGE/use" "$STAGE/use.c" || fail "compiling against tcgpu.h"
"$STAGE/use" | grep -qx "$version" || fail "tcgpu.h's version is not gpuckpt's"
# the installed README's C API example, as it says to build it: it links libtcgpu.so and runs
sed -n '/^### The C API/,/^## /p' "$doc/README.md" | sed -n '/^```c$/,/^```$/p' | sed '1d;$d' >"$STAGE/pause.c"
grep -q 'pkg-config --cflags --libs tcgpu' "$STAGE/pause.c" || fail "the README's C example: $(cat "$STAGE/pause.c")"
# shellcheck disable=SC2046
cc "$STAGE/pause.c" $(pkg-config --cflags --libs tcgpu) -o "$STAGE/pause" >"$STAGE/cc.log" 2>&1 ||
    fail "the README's C API example does not build with pkg-config --cflags --libs tcgpu: $(cat "$STAGE/cc.log")"
out=$(LD_LIBRARY_PATH=$R/$libdir "$STAGE/pause" 2>&1) && [ "$out" = "linked with tcgpu $version" ] ||
    fail "the README's C API example: $out"

# the man pages: they render, and they cover the commands and keys
if [ "$man" = yes ]; then
    for f in "$R"/share/man/man*/*; do
        out=$(MANWIDTH=100 man -l "$f" 2>&1) || fail "man -l $f: $out"
        grep -q '^NAME' <<<"$out" || fail "$f has no NAME section"
    done
    page=$(MANWIDTH=200 man -l "$R/share/man/man1/gpuckpt.1" 2>/dev/null)
    for c in $("$G" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }'); do
        [ "$c" = help ] && continue
        grep -qE "gpuckpt $c( |$)|^ +$c( |$)" <<<"$page" || fail "gpuckpt(1) does not describe '$c'"
    done
    page=$(MANWIDTH=200 man -l "$R/share/man/man5/tcgpud.ini.5" 2>/dev/null)
    for k in $(sed -n '/_keys\[\] = {/,/};/p' "$SRC/tools/tcgpud/config.c" | grep -o '"[a-z_]*"' | tr -d '"') capacity; do
        grep -qE "^ +$k = " <<<"$page" || fail "tcgpud.ini(5) does not describe the key '$k'"
    done
fi

# bash completion, from the installed file
if [ -r /usr/share/bash-completion/bash_completion ]; then
    touch "$TCGPU_RUN_DIR/4242.sock" 2>/dev/null || true
    python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$TCGPU_RUN_DIR/4243.sock"
    complete_words() {  # LINE... : what bash offers after the words
        PATH=$R/$bindir:$R/$sbindir:$PATH bash -c '
            source /usr/share/bash-completion/bash_completion
            source "$1"; shift
            COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
            COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
            complete -p "$1" >/dev/null
            f=$(complete -p "$1" | sed -n "s/.*-F \([^ ]*\) .*/\1/p")
            "$f" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            printf "%s\n" "${COMPREPLY[@]}"' _ "$R/share/bash-completion/completions/gpuckpt" "$@"
    }
    got=$(complete_words gpuckpt "")
    for c in run status checkpoint suspend resume save restore inspect verify ps events check help; do
        grep -qx "$c" <<<"$got" || fail "bash does not complete the command '$c': $got"
    done
    [ "$(complete_words gpuckpt ch | sort | tr '\n' ' ')" = "check checkpoint " ] || fail "gpuckpt ch: $(complete_words gpuckpt ch)"
    # (the words are taken first: grep -q may leave early, and a completion
    # still writing would then die of SIGPIPE and fail the pipeline)
    got=$(complete_words gpuckpt suspend 4243 --k)
    grep -qx -- --keep-context <<<"$got" || fail "gpuckpt suspend PID --k: $got"
    got=$(complete_words gpuckpt ps -o "")
    grep -qx json <<<"$got" || fail "gpuckpt ps -o: $got"
    got=$(complete_words gpuckpt run -a "")
    grep -qx checkpoint <<<"$got" || fail "gpuckpt run -a: $got"
    got=$(complete_words gpuckpt resume "")
    grep -qx 4243 <<<"$got" && ! grep -qx 4242 <<<"$got" ||
        fail "gpuckpt resume: the pids of control sockets (not of other files), not '$got'"
    got=$(complete_words tcgpud --ch)
    grep -qx -- --check-config <<<"$got" || fail "tcgpud --ch: $got"
fi
echo "installed to a staging prefix, moved, and run from there: all checks passed"
