#!/usr/bin/env bash
# The README's two commands:
#   scripts/quickstart.sh demo   set up, build, run the tcgpud demo on a simulated GPU
#   scripts/quickstart.sh test   set up, build, run the whole test suite
#                                (unit, sim, criu, web, containers, peers,
#                                slurm and cluster suites; then unit and sim
#                                again under ASan+UBSan)
# Set-up needs root (apt, CRIU); as a user it re-runs scripts/setup.sh with sudo.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
BUILD=${TCGPU_BUILD_DIR:-$top/build}
ASAN_BUILD=${TCGPU_ASAN_BUILD_DIR:-$top/build-asan}

log() { printf '\n== %s\n' "$*" >&2; }

setup() {
    if [ "$(id -u)" -eq 0 ]; then
        scripts/setup.sh "$@"
    elif ! scripts/setup.sh "$@" 2>/dev/null; then
        command -v sudo >/dev/null || { echo "setup needs root: run scripts/setup.sh as root" >&2; exit 1; }
        sudo scripts/setup.sh "$@"
    fi
}

configure() { # dir [meson options...]
    local dir=$1; shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@" >/dev/null
    fi
    ninja -C "$dir" >/dev/null
}

# meson's test log -> "N passed, N failed, N skipped" (the line CI reads).
summarize() { # build dirs...
    python3 - "$@" <<'PY'
import json, sys
counts = {'OK': 0, 'FAIL': 0, 'SKIP': 0, 'TIMEOUT': 0, 'ERROR': 0, 'EXPECTEDFAIL': 0, 'UNEXPECTEDPASS': 0}
for d in sys.argv[1:]:
    for log in ('testlog.json', 'testlog-slurm.json'):   # one per meson test run
        try:
            with open(d + '/meson-logs/' + log) as f:
                for line in f:
                    r = json.loads(line)['result']
                    counts[r] = counts.get(r, 0) + 1
        except FileNotFoundError:
            pass
passed = counts['OK'] + counts['EXPECTEDFAIL']
failed = counts['FAIL'] + counts['TIMEOUT'] + counts['ERROR'] + counts['UNEXPECTEDPASS']
print('tests: %d passed, %d failed, %d skipped' % (passed, failed, counts['SKIP']))
PY
}

run_tests() {
    local rc=0
    log "setup (apt packages, CRIU >= 4 and its plugin header, podman and runc)"
    setup
    log "build ($BUILD)"
    configure "$BUILD"
    log "tests: unit, sim, multi, criu, web, containers, peers"
    meson test -C "$BUILD" --suite unit --suite sim --suite multi --suite criu --suite web --suite containers --suite peers \
        --print-errorlogs --num-processes 2 || rc=1
    # a real Slurm on loopback, one test at a time (docs/slurm.md): it fails, not skips,
    # when Slurm cannot start; cluster: the experiment's smoke test, 4 slurmd (docs/cluster.md)
    log "tests: slurm, cluster"
    meson test -C "$BUILD" --suite slurm --suite cluster --print-errorlogs --num-processes 1 \
        --logbase testlog-slurm || rc=1
    log "build with ASan+UBSan ($ASAN_BUILD)"
    configure "$ASAN_BUILD" -Db_sanitize=address,undefined -Db_lundef=false
    log "tests under ASan+UBSan: unit, sim"
    meson test -C "$ASAN_BUILD" --suite unit --suite sim --print-errorlogs --num-processes 2 || rc=1
    summarize "$BUILD" "$ASAN_BUILD"
    return $rc
}

run_demo() {
    log "setup"
    setup --no-criu --no-test-tools
    log "build ($BUILD)"
    configure "$BUILD"
    log "demo: tcgpud shares a simulated 1 GiB GPU; a high-priority job preempts a low one, which resumes by itself"
    "$top/scripts/demo.sh" "$BUILD"
}

case "${1:-}" in
    test) run_tests ;;
    demo) run_demo ;;
    *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac
