# tests/common/debian_build.sh - tcgpu built as Debian's meson builds it
# (meson setup --prefix=/usr --libdir=lib/MULTIARCH), and its install
# staged (meson install --destdir): sourced by tests/unit/test_install.sh
# and tests/containers/deploy.sh, which test the installed product where
# it lands.
#
# The build lies in BUILD/install-debian and is kept between runs (ninja
# rebuilds what changed); it takes the project's options of BUILD. Tests
# that run at once share it: one of them configures and builds at a time
# (flock on BUILD/install-debian.lock).
#
#   debian_stage BUILD SRC ROOT LOGDIR [TARGET...]
#       builds what the project installs, and the TARGETs (programs a test
#       runs from the build: not installed), and stages the install into
#       ROOT (ROOT/usr/...). Sets DEBIAN_BUILD (the build's directory) and
#       DEBIAN_LIBDIR (lib/MULTIARCH). Returns 0, or 1 having said why on
#       stderr (the logs are in LOGDIR).

DEBIAN_LIBDIR=lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

# debian_options BUILD : BUILD's project options as -Dname=value lines.
debian_options() {
    meson introspect "$1" --buildoptions | python3 -c 'import json, sys
for o in json.load(sys.stdin):
    if o["section"] == "user":
        v = o["value"]
        v = ",".join(v) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else v
        print("-D%s=%s" % (o["name"], v))'
}

# debian_build_locked BUILD SRC LOGDIR TARGET... : configure (once) and build, the lock held.
debian_build_locked() {
    local build=$1 src=$2 logs=$3 opts targets; shift 3
    if [ ! -f "$DEBIAN_BUILD/build.ninja" ]; then
        mapfile -t opts < <(debian_options "$build")
        meson setup "$DEBIAN_BUILD" "$src" --prefix=/usr --libdir="$DEBIAN_LIBDIR" "${opts[@]}" \
            >"$logs/setup.log" 2>&1 || { echo "meson setup: $(tail -n 5 "$logs/setup.log")" >&2; return 1; }
    fi
    # (meson regenerates the build's files first when a meson.build changed)
    ninja -C "$DEBIAN_BUILD" build.ninja >"$logs/build.log" 2>&1 ||
        { echo "meson's regeneration: $(tail -n 20 "$logs/build.log")" >&2; return 1; }
    # what it installs, and the programs asked for: not the tests' own programs
    mapfile -t targets < <(cd "$DEBIAN_BUILD" && meson introspect --installed . | python3 -c 'import json, os, sys
built = set(l.split(":")[0] for l in open(sys.argv[1]))
wanted = [os.path.relpath(k) for k in json.load(sys.stdin)] + sys.argv[2:]
print("\n".join(t for t in wanted if t in built))' <(ninja -C "$DEBIAN_BUILD" -t targets all) "$@")
    ninja -C "$DEBIAN_BUILD" "${targets[@]}" >"$logs/build.log" 2>&1 ||
        { echo "build: $(tail -n 20 "$logs/build.log")" >&2; return 1; }
}

debian_stage() {
    local build=$1 src=$2 root=$3 logs=$4 lock; shift 4
    DEBIAN_BUILD=$build/install-debian
    exec {lock}>"$DEBIAN_BUILD.lock"
    flock "$lock"
    debian_build_locked "$build" "$src" "$logs" "$@" || { exec {lock}>&-; return 1; }
    meson install -C "$DEBIAN_BUILD" --destdir "$root" --no-rebuild >"$logs/install.log" 2>&1 ||
        { echo "meson install: $(tail -n 5 "$logs/install.log")" >&2; exec {lock}>&-; return 1; }
    exec {lock}>&-
}
