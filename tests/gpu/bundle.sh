#!/usr/bin/env bash
# tests/gpu/bundle.sh - what the GPU machine needs from this one, in one folder
# to carry (tests/gpu/README.md, docs/gpu-suite.md).
#
#   tests/gpu/bundle.sh [BUILD_DIR [DEST]]
#
# BUILD_DIR: a meson build configured with -Dgpu_suite=enabled and built
# (default /tmp/build-gpu). DEST: default build-gpu-bundle at the top of the
# repository (ignored by git through .gitignore's /build*/, so it travels only
# when a run call names it in carry). The bundle keeps the build tree's layout
# (tools/gpuckpt/gpuckpt, interpose/libtcgpu.so, examples/train/..., tests/gpu/...),
# so run.sh takes it as BUILD_DIR, and adds:
#   tests/gpu/run.sh, tests/gpu/progs/, tests/common/{lib,scenario}.sh
#           the suite and the scenario harness it runs its programs through,
#           so that the bundle alone is enough: bash DEST/tests/gpu/run.sh
#   deps/   every shared library those programs need beyond glibc (run.sh
#           uses one only when the GPU machine lacks it)
#   bin/    criu, when this machine has one (CRIU >= 4, as scripts/setup.sh builds it)
#   BUNDLE-INFO  the commit and the machine it was built on
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-/tmp/build-gpu}
DEST=${2:-$SRC/build-gpu-bundle}

die() { echo "bundle.sh: $*" >&2; exit 1; }

[ -x "$BUILD/tools/gpuckpt/gpuckpt" ] && [ -f "$BUILD/interpose/libtcgpu.so" ] ||
    die "$BUILD is not a built tcgpu tree (meson setup $BUILD -Dgpu_suite=enabled && ninja -C $BUILD)"

# copy_in REL: BUILD/REL -> DEST/REL, if it exists.
copy_in() {
    [ -e "$BUILD/$1" ] || return 0
    mkdir -p "$DEST/$(dirname "$1")"
    cp -a "$BUILD/$1" "$DEST/$1"
}

# deps_of FILE: the shared libraries FILE loads, less the C library's own
# and the CUDA driver (the GPU machine's must be used).
deps_of() {
    ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
        grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libnvidia[^/]*)\.so' || true
}

rm -rf "$DEST"
mkdir -p "$DEST/deps"
for f in tools/gpuckpt/gpuckpt tools/tcgpud/tcgpud interpose/libtcgpu.so \
         examples/train/train_gpu examples/train/train_mt_gpu examples/train/train_kernels.cubin \
         tests/gpu/rt_train tests/gpu/bw tests/gpu/drv_ckpt; do
    [ -f "$BUILD/$f" ] && copy_in "$f"
done
for f in tests/gpu/run.sh tests/gpu/progs tests/common/lib.sh tests/common/scenario.sh; do
    mkdir -p "$DEST/$(dirname "$f")"
    cp -a "$SRC/$f" "$DEST/$f"
done
if criu=$(command -v criu); then
    mkdir -p "$DEST/bin"
    cp "$criu" "$DEST/bin/criu"
fi

for f in "$DEST"/tools/gpuckpt/gpuckpt "$DEST"/tools/tcgpud/tcgpud "$DEST"/interpose/libtcgpu.so "$DEST"/bin/criu; do
    [ -f "$f" ] || continue
    for lib in $(deps_of "$f"); do
        cp -L "$lib" "$DEST/deps/$(basename "$lib")"
    done
done

{
    echo "tcgpu $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$SRC" diff --quiet 2>/dev/null || echo '+dirty'), bundled $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "built on: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"), glibc $(ldd --version | head -n 1 | awk '{ print $NF }')"
    echo "criu: $([ -f "$DEST/bin/criu" ] && "$DEST/bin/criu" --version | head -n 1 || echo none)"
} >"$DEST/BUNDLE-INFO"

echo "bundle.sh: $DEST ($(du -sh "$DEST" | cut -f1)):"
(cd "$DEST" && find . -type f | sort | sed 's/^\.\//  /')
size=$(du -sm "$DEST" | cut -f1)
[ "$size" -lt 48 ] || echo "bundle.sh: warning: $size MiB; the device tool carries 64 MiB in all" >&2
