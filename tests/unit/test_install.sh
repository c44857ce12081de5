#!/usr/bin/env bash
# meson install into a staging directory, as a system package is made, then
# the installed tools run from there, and from another place after the tree
# is moved (a relocated install, Debian's multiarch libdir: it finds its
# own library):
# - every piece is installed: gpuckpt, tcgpu-replay, tcgpud, libtcgpu.so,
#   tcgpu.h, tcgpu.pc, the systemd unit, the docs and the example config,
#   the man pages, the bash completions;
# - the installed gpuckpt runs a CUDA program (simcuda) with the installed
#   libtcgpu.so preloaded, suspends and resumes it; gpuckpt check finds that
#   library; tcgpud checks the installed example configuration;
# - pkg-config gives the relocated include dir and library; a program
#   including tcgpu.h compiles with its flags;
# - the man pages render, gpuckpt(1) names every command gpuckpt --help
#   lists, tcgpud.ini(5) every key tcgpud knows;
# - the unit passes systemd-analyze verify, and security scores it below 2.5;
# - bash completes gpuckpt's commands, options, pids and tcgpud's options.
#
#   test_install.sh PREFIX BINDIR SBINDIR LIBDIR MAN(yes/no)
set -euo pipefail
prefix=$1 bindir=$2 sbindir=$3 libdir=$4 man=$5
B=${TCGPU_BUILD_ROOT:?run through meson test}
SRC=${TCGPU_SOURCE_ROOT:?run through meson test}
STAGE=$(mktemp -d /tmp/tcgpu-install-XXXXXX)
export SIMCUDA_SHM=/simcuda-t-install-$$ SIMCUDA_DEVICE_MEM=512M
export TCGPU_RUN_DIR=$STAGE/run TCGPU_DAEMON_SOCKET=off TCGPU_REAL_LIBCUDA=$B/simcuda/libcuda.so.1
job=
cleanup() {
    [ -n "$job" ] && kill -9 "$job" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -f "/dev/shm$SIMCUDA_SHM"
    rm -rf "$STAGE"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -m 700 "$TCGPU_RUN_DIR"

meson install -C "$B" --destdir "$STAGE/root" --no-rebuild >"$STAGE/install.log" 2>&1 ||
    fail "meson install: $(tail -n 5 "$STAGE/install.log")"
P=$STAGE/root$prefix
for f in "$bindir/gpuckpt" "$bindir/tcgpu-replay" "$sbindir/tcgpud" "$libdir/libtcgpu.so" \
         include/tcgpu.h "$libdir/pkgconfig/tcgpu.pc" lib/systemd/system/tcgpud.service \
         share/doc/tcgpu/tcgpud.md share/doc/tcgpu/cli.md share/doc/tcgpu/examples/tcgpud.ini \
         share/bash-completion/completions/gpuckpt share/bash-completion/completions/tcgpud; do
    [ -e "$P/$f" ] || fail "not installed: $prefix/$f"
done
if [ "$man" = yes ]; then
    for f in man1/gpuckpt.1 man1/tcgpu-replay.1 man5/tcgpud.ini.5 man7/tcgpu.7 man8/tcgpud.8; do
        [ -s "$P/share/man/$f" ] || fail "not installed: $prefix/share/man/$f"
    done
fi
! find "$STAGE/root" -name '*simcuda*' ! -name '*.md' | grep -q . || fail "the test double simcuda was installed"

# the unit names the installed programs, and stays hardened
unit=$P/lib/systemd/system/tcgpud.service
grep -q "^ExecStart=$prefix/$sbindir/tcgpud --config " "$unit" || fail "the unit's ExecStart: $(grep ExecStart "$unit")"
if command -v systemd-analyze >/dev/null; then
    sed "s|$prefix/|$P/|g" "$unit" >"$STAGE/tcgpud.service"     # its programs where they are staged
    MANPATH=$P/share/man systemd-analyze verify "$STAGE/tcgpud.service" >"$STAGE/verify.log" 2>&1 ||
        fail "systemd-analyze verify: $(cat "$STAGE/verify.log")"
    systemd-analyze security --offline=yes --threshold=25 "$STAGE/tcgpud.service" >"$STAGE/security.log" 2>&1 ||
        fail "systemd-analyze security: $(tail -n 1 "$STAGE/security.log")"
    echo "unit: $(tail -n 1 "$STAGE/security.log")"
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

# a real program under the installed gpuckpt and library
"$G" run -- "$B/examples/train/train" --mb 32 --steps 100000 --print-every 0 --sleep-ms 5 \
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

# pkg-config: the moved tree's header and library; a program compiles with it
export PKG_CONFIG_PATH=$R/$libdir/pkgconfig
inc=$(pkg-config --cflags tcgpu | sed 's/^-I//; s/ *$//')
[ "$(readlink -f "$inc")" = "$(readlink -f "$R/include")" ] || fail "pkg-config --cflags tcgpu: $(pkg-config --cflags tcgpu)"
[ -r "$(pkg-config --variable=preload tcgpu)" ] || fail "pkg-config's preload: $(pkg-config --variable=preload tcgpu)"
printf '#include <tcgpu.h>\n#include <stdio.h>\nint main(void) { puts(TCGPU_VERSION_STRING); return 0; }\n' >"$STAGE/use.c"
# shellcheck disable=SC2046
cc $(pkg-config --cflags tcgpu) -o "$STAGE/use" "$STAGE/use.c" || fail "compiling against tcgpu.h"
"$STAGE/use" | grep -qx "$("$G" --version | cut -d' ' -f2)" || fail "tcgpu.h's version is not gpuckpt's"

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
