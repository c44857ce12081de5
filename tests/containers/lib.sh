# Helpers of the containers suite (sourced by tests/containers/*.sh), on top
# of tests/sim/lib.sh: a private simulated device and run dir per test.
#
# tcgpu's CRIU plugin is taken from the build tree into a plugin directory
# of the test's own, with a tcgpu_plugin.conf that names the test's
# simulated device (CRIU's caller passes it no environment of ours). Tests
# need root, CRIU >= 4, and the plugin (built when scripts/setup.sh has
# installed CRIU's plugin header); podman tests need podman and runc too.
# Without them a test skips (77).
if [ "$(id -u)" -ne 0 ]; then echo "skipped: needs root (CRIU)"; exit 77; fi
CRIU=${TCGPU_CRIU:-$(command -v criu || echo /usr/local/sbin/criu)}
if [ ! -x "$CRIU" ]; then echo "skipped: criu not found"; exit 77; fi
export TCGPU_CRIU=$CRIU

. "$(dirname "${BASH_SOURCE[0]}")/../sim/lib.sh"

PLUGIN=$B/plugins/criu/tcgpu_plugin.so
HELPER=$B/plugins/criu/tcgpu-criu-helper
if [ ! -f "$PLUGIN" ]; then echo "skipped: the CRIU plugin is not built (no criu-plugin.h: scripts/setup.sh)"; exit 77; fi
TRAIN_KERNELS=$B/examples/train/train_kernels.so
LIBTCGPU=$B/interpose/libtcgpu.so
LIBCUDA=$B/simcuda/libcuda.so.1

# The test's plugin directory: the plugin, its helper, and its configuration.
PLUGDIR=$WORK/criu-plugins
mkdir -p "$PLUGDIR"
cp "$PLUGIN" "$HELPER" "$PLUGDIR/"
cat >"$PLUGDIR/tcgpu_plugin.conf" <<EOF
[plugin]
timeout = 120
[environment]
TCGPU_REAL_LIBCUDA = $LIBCUDA
SIMCUDA_SHM = $SIMCUDA_SHM
SIMCUDA_DEVICE_MEM = $SIMCUDA_DEVICE_MEM
SIMCUDA_CONTEXT_MEM = $SIMCUDA_CONTEXT_MEM
EOF
chmod 0644 "$PLUGDIR/tcgpu_plugin.conf"

KILL_PIDS=()
CONTAINERS=()
IMAGES=()
MOUNTS=()

containers_cleanup() {
    local p c i m
    for p in "${KILL_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for c in "${CONTAINERS[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
    for i in "${IMAGES[@]}"; do podman rmi -f "$i" >/dev/null 2>&1 || true; done
    for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null || true; done
    cleanup
}
trap containers_cleanup EXIT

# Device memory in use on the simulated device, all processes.
device_used() { "$SMI" --query-gpu=memory.used_bytes --format=csv,noheader | awk '{ sum += $1 } END { print sum + 0 }'; }

# ---- podman ------------------------------------------------------------------

need_podman() {
    command -v podman >/dev/null || { echo "skipped: podman not installed (scripts/setup.sh)"; exit 77; }
    command -v runc >/dev/null || { echo "skipped: runc not installed (scripts/setup.sh)"; exit 77; }
}

# podman with what this VM needs: runc (crun fails on its hybrid cgroups),
# rlimits within the hard limits (no CAP_SYS_RESOURCE), no network.
PODMAN_RUN=(--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --network none)

# The simulated GPU holds an io_uring while a process is attached (what CRIU
# cannot dump, as it cannot dump /dev/nvidia*: docs/simcuda.md); podman's
# default seccomp profile forbids io_uring, so containers get that profile
# with io_uring allowed, and nothing else changed.
SECCOMP=$WORK/seccomp.json
python3 - /usr/share/containers/seccomp.json "$SECCOMP" <<'PY' || fail "cannot make the seccomp profile"
import json, sys
profile = json.load(open(sys.argv[1]))
profile['syscalls'].append({'names': ['io_uring_setup', 'io_uring_enter', 'io_uring_register'],
                            'action': 'SCMP_ACT_ALLOW'})
json.dump(profile, open(sys.argv[2], 'w'))
PY
PODMAN_RUN+=(--security-opt "seccomp=$SECCOMP")

# The CRIU configuration runc reads for a container (annotation org.criu.config):
# it points CRIU at the test's plugin directory.
CRIU_CONF=$WORK/criu.conf
printf 'libdir %s\n' "$PLUGDIR" >"$CRIU_CONF"

# copy_shared_libs ROOT FILE... : the shared libraries FILEs need (ldd), at
# their paths under ROOT; not the driver, which the runtime mounts.
copy_shared_libs() {
    local root=$1 lib; shift
    for lib in $(ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/lib/ { print $1 }' | sort -u); do
        case "$lib" in */libcuda.so.1) continue ;; esac
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

# build_image NAME [PROGRAM...] : a local image from a root filesystem
# assembled here: the training example and its kernels (and PROGRAMs), in
# /opt/train, and the shared libraries they, libtcgpu.so and the driver need.
# No registry, no network. libtcgpu.so and the driver are not in it: they
# are bind-mounted at run (docs/kubernetes.md).
build_image() {
    local name=$1 root=$WORK/rootfs; shift
    mkdir -p "$root/opt/train" "$root/tmp" "$root/dev/shm" "$root/proc" "$root/sys" \
        "$root/opt/tcgpu/lib" "$root/usr/lib/x86_64-linux-gnu" "$root/etc"
    chmod 1777 "$root/tmp"
    cp "$TRAIN" "$TRAIN_KERNELS" "$@" "$root/opt/train/"
    copy_shared_libs "$root" "$TRAIN" "$LIBTCGPU" "$LIBCUDA" "$@"
    touch "$root/opt/tcgpu/lib/libtcgpu.so" "$root/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    tar -C "$root" -cf "$WORK/rootfs.tar" .
    podman import -q "$WORK/rootfs.tar" "$name" >/dev/null || fail "podman import failed"
    IMAGES+=("$name")
    rm -rf "$root" "$WORK/rootfs.tar"
}

# podman_train NAME IMAGE ARGS... : the training example under tcgpu in a container.
podman_train() {
    local name=$1 image=$2; shift 2
    podman run -d "${PODMAN_RUN[@]}" --name "$name" \
        --annotation org.criu.config="$CRIU_CONF" \
        -v "$LIBTCGPU:/opt/tcgpu/lib/libtcgpu.so:ro" \
        -v "$LIBCUDA:/usr/lib/x86_64-linux-gnu/libcuda.so.1:ro" \
        -v "/dev/shm$SIMCUDA_SHM:/dev/shm$SIMCUDA_SHM" \
        -e LD_PRELOAD=/opt/tcgpu/lib/libtcgpu.so -e SIMCUDA_SHM -e SIMCUDA_DEVICE_MEM \
        -e SIMCUDA_CONTEXT_MEM \
        "$image" /opt/train/train "$@" >/dev/null || fail "podman run of $name failed"
    CONTAINERS+=("$name")
}

# The plugin's last lines in a CRIU log.
plugin_lines() { grep -a "tcgpu_plugin" "$1" | tail -n 5; }

# The plugin's last lines in the CRIU log of a container's restore.
restore_plugin_lines() { plugin_lines "$(podman inspect -f '{{.StaticDir}}' "$1")/restore.log" 2>&1; }

# The container's process on this host, once it runs.
container_pid() { podman inspect -f '{{.State.Pid}}' "$1"; }

# wait_log NAME PATTERN : a line matching PATTERN appeared in the container's output.
wait_log() {
    local i
    for i in $(seq 1 1200); do
        podman logs "$1" >"$WORK/$1.log" 2>&1
        grep -q "$2" "$WORK/$1.log" && return 0
        sleep 0.05
    done
    fail "'$2' never appeared in $1's output: $(podman logs "$1" 2>&1 | tail -n 5)"
}

# The container's checksum line, once it has exited.
container_checksum() {
    podman wait "$1" >/dev/null 2>&1 || true
    podman logs "$1" 2>&1 | sed -n 's/^checksum: *\([0-9a-f]*\).*/\1/p' | tail -n 1
}

# The simulated device must exist before a container binds it in.
ensure_device() { [ -e "/dev/shm$SIMCUDA_SHM" ] || "$SMI" -q >/dev/null; }
