#!/usr/bin/env bash
# Set up a Debian 12 machine to build and test tcgpu.
#
# Installs missing build dependencies with apt (and what the tests start:
# Prometheus, chromium; --no-test-tools skips them) and provides CRIU >= 4.0
# (--no-criu skips it).
# Debian 12's criu (3.17) fails `criu check` on current kernels, so when the
# installed criu is missing, too old or failing its check, we build CRIU 4.1.1
# from Debian 13's source tarball (checksum verified) into /usr/local.
# The CRIU plugin (plugins/criu) is built against CRIU's plugin header, which
# no Debian package ships: it is taken from the same tarball into
# /usr/local/include/criu. The containers suite needs podman and runc
# (crun fails on hybrid cgroups: docs/kubernetes.md).
#
# --no-criu skips CRIU; --fuzz also installs clang for the fuzz suite
# (tests/fuzz/README.md), which CI does not run.
#
# Idempotent: a second run checks and returns within a second or two.
# Needs root for installing; as a normal user it only reports what is missing.
set -euo pipefail

CRIU_VERSION=4.1.1
CRIU_TARBALL=criu_${CRIU_VERSION}.orig.tar.xz
CRIU_SHA256=f80a66cb3726bb2116266d4759ce3bcbfab7abdb6b6d430bf20dd41911717afe

BUILD_PKGS=(gcc g++ make pkg-config meson ninja-build python3 xz-utils curl ca-certificates
            libzstd-dev zstd liburing-dev libinih-dev libxxhash-dev
            libjansson-dev libmicrohttpd-dev scdoc bash-completion python3-yaml)
# /usr/bin/time: the memory bound of a verify (tests/sim/images.sh)
BUILD_PKGS+=(time)
# tcgpu-slurm builds against libslurm; the suite slurm runs a real Slurm
# (slurmctld, slurmd, munged) on loopback (docs/slurm.md)
SLURM_PKGS=(slurm-wlm munge libslurm-dev util-linux)
# What the tests start for real: Prometheus scraping tcgpud (promtool checks
# the exposition format), a headless browser loading its dashboard.
# The suite peers installs numba-cuda from PyPI into a venv (tests/peers).
TEST_PKGS=(prometheus chromium python3-venv)
# For the fuzz suite only (tests/fuzz/README.md; not in CI): clang with libFuzzer.
FUZZ_PKGS=(clang)
# The plugin header and what it includes (only libc headers besides itself).
CRIU_HEADERS=(criu/include/criu-plugin.h)
CRIU_INCLUDE_DIR=/usr/local/include/criu
CONTAINER_PKGS=(podman runc conmon containernetworking-plugins)
CRIU_BUILD_PKGS=(libprotobuf-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler python3-protobuf
                 libnl-3-dev libnl-route-3-dev libnet1-dev libcap-dev libbsd-dev uuid-dev
                 libgnutls28-dev libnftables-dev iproute2)

log() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

missing_pkgs() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

apt_install() {
    local missing
    missing=$(missing_pkgs "$@")
    [ -z "$missing" ] && return 0
    [ "$(id -u)" -eq 0 ] || die "missing packages (run as root to install): $(echo $missing)"
    log "installing: $(echo $missing)"
    export DEBIAN_FRONTEND=noninteractive
    if [ ! -f /var/lib/apt/.tcgpu-updated ] || [ -n "$(find /var/lib/apt/.tcgpu-updated -mmin +1440 2>/dev/null)" ]; then
        apt-get update -qq && touch /var/lib/apt/.tcgpu-updated
    fi
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
}

criu_ok() {
    command -v criu >/dev/null 2>&1 || return 1
    local v
    v=$(criu --version 2>/dev/null | sed -n 's/^Version: *\([0-9]*\).*/\1/p')
    [ -n "$v" ] && [ "$v" -ge 4 ] || return 1
    # criu check needs root; as a user accept the version alone.
    [ "$(id -u)" -ne 0 ] && return 0
    criu check >/dev/null 2>&1
}

# The Debian archive this machine already uses (never hard-coded here).
debian_mirror() {
    local uri=""
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
              /etc/apt/sources.list.d/debian.sources)
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' \
              /etc/apt/sources.list)
    fi
    [ -n "$uri" ] || die "cannot find a Debian archive URI in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
    echo "${uri%/}"
}

# The CRIU source tarball, checksum verified, in the cache: prints its path.
criu_tarball() {
    local cache=/var/cache/tcgpu url
    mkdir -p "$cache"
    if ! echo "$CRIU_SHA256  $cache/$CRIU_TARBALL" | sha256sum -c --status 2>/dev/null; then
        url="$(debian_mirror)/pool/main/c/criu/$CRIU_TARBALL"
        log "downloading $url"
        curl -fsSL --retry 3 -o "$cache/$CRIU_TARBALL.part" "$url" || die "download of $url failed"
        echo "$CRIU_SHA256  $cache/$CRIU_TARBALL.part" | sha256sum -c --status \
            || die "checksum mismatch for $CRIU_TARBALL (expected $CRIU_SHA256)"
        mv "$cache/$CRIU_TARBALL.part" "$cache/$CRIU_TARBALL"
    fi
    echo "$cache/$CRIU_TARBALL"
}

# The plugin header is installed when missing or not the one of this CRIU.
criu_headers_ok() {
    local h
    [ -f "$CRIU_INCLUDE_DIR/.version" ] && [ "$(cat "$CRIU_INCLUDE_DIR/.version")" = "$CRIU_VERSION" ] || return 1
    for h in "${CRIU_HEADERS[@]}"; do
        [ -f "$CRIU_INCLUDE_DIR/$(basename "$h")" ] || return 1
    done
}

install_criu_headers() {
    [ "$(id -u)" -eq 0 ] || die "CRIU's plugin header is missing; run this script as root to install it"
    local tarball work h
    tarball=$(criu_tarball)
    work=$(mktemp -d)
    for h in "${CRIU_HEADERS[@]}"; do
        tar -xJf "$tarball" -C "$work" "criu-$CRIU_VERSION/$h" || die "$h is not in $tarball"
        install -D -m 0644 "$work/criu-$CRIU_VERSION/$h" "$CRIU_INCLUDE_DIR/$(basename "$h")"
    done
    echo "$CRIU_VERSION" >"$CRIU_INCLUDE_DIR/.version"
    rm -rf "$work"
    log "installed CRIU $CRIU_VERSION's plugin header in $CRIU_INCLUDE_DIR"
}

build_criu() {
    [ "$(id -u)" -eq 0 ] || die "CRIU >= 4 is missing; run this script as root to build it"
    apt_install "${CRIU_BUILD_PKGS[@]}"
    local work tarball
    tarball=$(criu_tarball)
    work=$(mktemp -d)
    tar -xJf "$tarball" -C "$work"
    log "building CRIU $CRIU_VERSION (a few minutes)"
    make -C "$work/criu-$CRIU_VERSION" -j"$(nproc)" criu >"$work/build.log" 2>&1 \
        || { tail -n 30 "$work/build.log" >&2; die "CRIU build failed (log: $work/build.log)"; }
    install -D -m 0755 "$work/criu-$CRIU_VERSION/criu/criu" /usr/local/sbin/criu
    rm -rf "$work"
    hash -r
    criu_ok || die "built CRIU $CRIU_VERSION but 'criu check' fails: $(criu check 2>&1 | tail -n 3)"
    log "installed CRIU $CRIU_VERSION in /usr/local/sbin"
}

main() {
    local want_criu=1 want_tests=1 want_fuzz=0
    for a in "$@"; do
        case "$a" in
            --no-criu) want_criu=0 ;;
            --no-test-tools) want_tests=0 ;;
            --fuzz) want_fuzz=1 ;;
            *) die "unknown option: $a" ;;
        esac
    done
    apt_install "${BUILD_PKGS[@]}"
    apt_install "${SLURM_PKGS[@]}"
    if [ "$want_tests" -eq 1 ]; then
        apt_install "${TEST_PKGS[@]}"
    fi
    [ "$want_fuzz" -eq 1 ] && apt_install "${FUZZ_PKGS[@]}"
    if [ "$want_criu" -eq 1 ]; then
        criu_ok || build_criu
        criu_headers_ok || install_criu_headers
        apt_install "${CONTAINER_PKGS[@]}"
    fi
}

main "$@"
