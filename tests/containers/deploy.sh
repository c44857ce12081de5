#!/usr/bin/env bash
# deploy/'s manifests, run as the kubelet would run them, in an image made of
# tcgpu's install: what `kubectl apply -k deploy/` does on a GPU node.
#
# The install is staged as Debian packages it (meson setup --prefix=/usr
# -Dlibdir=lib/x86_64-linux-gnu, meson install --destdir), from the build
# tests/common/debian_build.sh keeps (the install test's too). The image is that tree, the shared libraries its
# programs need (ldd), a shell and coreutils' install (what a Debian base
# image has), /etc/debian_version (which tells NVIDIA's toolkit where the
# driver's libraries go), and the training example in /opt/train (standing
# for the training image). No registry, no network. The node is a directory
# of the test's, NODE: every hostPath volume is NODE/PATH, shared by all the
# containers, as a node's filesystem is. The containers' commands, env,
# privileges, hostPID and volumes are the manifests' (pod_spec.py reads them
# with PyYAML); what the test changes is said where it does.
#
# 1. the DaemonSet's init container: its script runs to the end, and leaves
#    on the node the staged libtcgpu.so and gpuckpt in /opt/tcgpu (where the
#    training Job mounts the library from), the staged
#    libtcgpu-criu-rlimits.so where the node's gpuckpt looks for it (its
#    bin/ to pkglibdir, as installed), and the staged CRIU plugin and
#    helper in /usr/lib/criu with the ConfigMap's tcgpu_plugin.conf, nothing
#    else; the node's gpuckpt finds the node's libtcgpu.so;
# 2. tcgpud's readiness probe fails while tcgpud does not run (a container
#    of the same spec, before tcgpud's);
# 3. tcgpud's container, its command and env and the ConfigMap's tcgpud.ini:
#    the probe succeeds within 60 s; tcgpud learnt the GPU from the driver the
#    manifest names (TCGPU_REAL_LIBCUDA, where the test mounts simcuda's, as
#    the toolkit mounts the driver's), and its metrics, in the volume that
#    node-exporter serves, give the GPU's capacity;
# 4. the training Job's container (the training example for its command):
#    it preloads the node's libtcgpu.so, reaches tcgpud through the socket
#    of the manifests, and tcgpud's `gpuckpt ps --daemon` (in tcgpud's
#    container) lists it, by its host pid, in the Job's project.
#
# The simulated GPU stands for the real one: simcuda's libcuda.so.1 is
# bind-mounted where the manifests say the driver is, with its device file
# (SIMCUDA_SHM) and environment; containers get io_uring (lib.sh's seccomp).
. "$(dirname "$0")/lib.sh"
need_podman
python3 -c 'import yaml' 2>/dev/null || { echo "skipped: python3-yaml not installed"; exit 77; }

SRC=${TCGPU_SOURCE_ROOT:?run through meson test}
DEPLOY=$SRC/deploy
POD_SPEC=$SRC/tests/containers/pod_spec.py
. "$SRC/tests/common/debian_build.sh"
MULTIARCH=$DEBIAN_LIBDIR
tag=$(printf '%s' "$TEST_NAME-$$" | tr -c 'a-z0-9-' -)
IMAGE=localhost/tcgpu-deploy-$tag:1
STAGE=$WORK/stage
NODE=$WORK/node
mkdir -p "$NODE"

# pod_spec FILE CONTAINER QUERY... : the NUL-separated words of pod_spec.py,
# into the array SPEC (a failure fails the test with pod_spec.py's reason).
pod_spec() {
    python3 "$POD_SPEC" "$DEPLOY" "$@" >"$WORK/spec.out" 2>"$WORK/spec.err" ||
        fail "deploy/$1, container $2: $(cat "$WORK/spec.err")"
    mapfile -d '' -t SPEC <"$WORK/spec.out"
}

# ---- the image ---------------------------------------------------------------

# elf_files DIR : the ELF files under DIR.
elf_files() {
    local f
    find "$1" -type f | while read -r f; do
        [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] && echo "$f"
    done
    return 0
}

# build_deploy_image : IMAGE, from STAGE (see the header).
build_deploy_image() {
    local root=$WORK/rootfs d
    mkdir -p "$root"/usr/{bin,sbin,lib,lib64} "$root"/{tmp,proc,sys,dev,etc,opt/train}
    for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
    chmod 1777 "$root/tmp"
    cp -a "$STAGE/." "$root/"
    cp -L /bin/sh "$root/usr/bin/sh"
    cp -L "$(command -v install)" "$root/usr/bin/install"
    cp /etc/debian_version "$root/etc/debian_version"
    cp "$TRAIN" "$TRAIN_KERNELS" "$root/opt/train/"
    mapfile -t elves < <(elf_files "$STAGE")
    copy_shared_libs "$root" "${elves[@]}" "$root/usr/bin/sh" "$root/usr/bin/install" "$TRAIN" \
        "$LIBCUDA"
    tar -C "$root" -cf "$WORK/rootfs.tar" .
    podman import -q "$WORK/rootfs.tar" "$IMAGE" >/dev/null || fail "podman import failed"
    IMAGES+=("$IMAGE")
    rm -rf "$root" "$WORK/rootfs.tar"
}

# ---- running the manifests' containers ----------------------------------------

# What the simulated GPU needs in a container, the driver mounted at $1.
simulated_gpu() {
    GPU_ARGS=(-v "$LIBCUDA:$1:ro" -v "/dev/shm$SIMCUDA_SHM:/dev/shm$SIMCUDA_SHM"
              -e SIMCUDA_SHM -e SIMCUDA_DEVICE_MEM -e SIMCUDA_CONTEXT_MEM)
}

# run_once NAME FILE CONTAINER CMD... : the container of FILE, with CMD, to its
# end (60 s at most); its output in WORK/NAME.out, its status in rc.
run_once() {
    local name=$1 file=$2 cname=$3; shift 3
    pod_spec "$file" "$cname" "$NODE" "$WORK" args
    CONTAINERS+=("$name")
    rc=0
    timeout 60 podman run --name "$name" "${PODMAN_RUN[@]}" "${SPEC[@]}" "${EXTRA[@]}" "$IMAGE" "$@" \
        >"$WORK/$name.out" 2>&1 || rc=$?
    podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
}

# same_file NODE_PATH WANT : the node's file is WANT, byte for byte (the
# paths checked so in NODE_FILES).
NODE_FILES=()
same_file() {
    [ -f "$NODE$1" ] || fail "the init container did not install $1 on the node"
    cmp -s "$NODE$1" "$2" || fail "$1 on the node is not $2"
    NODE_FILES+=("$1")
}

phase "staging the install (prefix /usr, libdir $MULTIARCH)"
debian_stage "$B" "$SRC" "$STAGE" "$WORK" || fail "the Debian build"
phase "building the image"
build_deploy_image
ensure_device

phase "the DaemonSet's init container"
pod_spec tcgpud-daemonset.yaml install command
EXTRA=()
run_once "install-$tag" tcgpud-daemonset.yaml install "${SPEC[@]}"
[ "$rc" -eq 0 ] || fail "the init container failed (exit $rc): $(tail -n 5 "$WORK/install-$tag.out")"
same_file "/opt/tcgpu/$MULTIARCH/libtcgpu.so" "$STAGE/usr/$MULTIARCH/libtcgpu.so"
same_file /opt/tcgpu/bin/gpuckpt "$STAGE/usr/bin/gpuckpt"
# gpuckpt preloads it into CRIU (root without CAP_SYS_RESOURCE, another
# user's tree), found from gpuckpt's own place: the install's layout
# (bin/ to libdir/tcgpu) is the node's under /opt/tcgpu
rlimits=$(cd "$STAGE/usr" && ls "$MULTIARCH"/tcgpu/libtcgpu-criu-rlimits.so) ||
    fail "the install has no libtcgpu-criu-rlimits.so in $MULTIARCH/tcgpu"
same_file "/opt/tcgpu/$rlimits" "$STAGE/usr/$rlimits"
same_file /usr/lib/criu/tcgpu_plugin.so "$STAGE/usr/lib/criu/tcgpu_plugin.so"
same_file /usr/lib/criu/tcgpu-criu-helper "$STAGE/usr/lib/criu/tcgpu-criu-helper"
same_file /usr/lib/criu/tcgpu_plugin.conf "$WORK/configmap-config/tcgpu_plugin.conf"
find "$NODE" -type f | sed "s|^$NODE||" | sort >"$WORK/node.files"
printf '%s\n' "${NODE_FILES[@]}" | sort >"$WORK/node.checked"
[ -z "$(comm -23 "$WORK/node.files" "$WORK/node.checked")" ] ||
    fail "the init container left files the test does not know of: $(comm -23 "$WORK/node.files" "$WORK/node.checked" | tr '\n' ' ')"
"$NODE/opt/tcgpu/bin/gpuckpt" check --json 2>/dev/null | python3 -c 'import json, sys
lib = {c["name"]: c for c in json.load(sys.stdin)["checks"]}["library"]
assert lib["result"] == "ok" and lib["detail"].startswith(sys.argv[1] + " "), lib' \
    "$NODE/opt/tcgpu/$MULTIARCH/libtcgpu.so" ||
    fail "the node's gpuckpt does not find the node's libtcgpu.so: $("$NODE/opt/tcgpu/bin/gpuckpt" check 2>&1 | grep -A1 library)"

# tcgpud's container: where the manifest says the driver is, simcuda's
pod_spec tcgpud-daemonset.yaml tcgpud env TCGPU_REAL_LIBCUDA
driver=${SPEC[0]}
[ -n "$driver" ] || fail "tcgpud's container does not say where the driver is (TCGPU_REAL_LIBCUDA)"
simulated_gpu "$driver"
pod_spec tcgpud-daemonset.yaml tcgpud probe
probe=("${SPEC[@]}")

phase "tcgpud's readiness probe, tcgpud not running"
EXTRA=("${GPU_ARGS[@]}")
run_once "probe-$tag" tcgpud-daemonset.yaml tcgpud "${probe[@]}"
[ "$rc" -ne 0 ] || fail "the readiness probe (${probe[*]}) succeeds with no tcgpud: $(cat "$WORK/probe-$tag.out")"
note "the probe without tcgpud: exit $rc, $(head -n 1 "$WORK/probe-$tag.out")"

phase "tcgpud's container"
pod_spec tcgpud-daemonset.yaml tcgpud command
cmd=("${SPEC[@]}")
pod_spec tcgpud-daemonset.yaml tcgpud "$NODE" "$WORK" args
CONTAINERS+=("tcgpud-$tag")
podman run -d --name "tcgpud-$tag" "${PODMAN_RUN[@]}" "${SPEC[@]}" "${GPU_ARGS[@]}" "$IMAGE" "${cmd[@]}" \
    >/dev/null 2>"$WORK/tcgpud-run.err" || fail "podman run of tcgpud: $(cat "$WORK/tcgpud-run.err")"
ready=
for _ in $(seq 1 120); do
    if podman exec "tcgpud-$tag" "${probe[@]}" >"$WORK/probe.out" 2>&1; then ready=1; break; fi
    [ "$(podman inspect -f '{{.State.Running}}' "tcgpud-$tag")" = true ] ||
        fail "tcgpud's container ended: $(podman logs "tcgpud-$tag" 2>&1 | tail -n 5)"
    sleep 0.5
done
[ -n "$ready" ] || fail "the readiness probe never succeeded in 60 s: $(tail -n 2 "$WORK/probe.out"); tcgpud: $(podman logs "tcgpud-$tag" 2>&1 | tail -n 5)"
podman logs "tcgpud-$tag" >"$WORK/tcgpud.log" 2>&1
grep -q 'GPU 0: [0-9]* MiB (from the driver)' "$WORK/tcgpud.log" ||
    fail "tcgpud did not learn the GPU from the driver at $driver: $(grep -m 3 -E 'GPU|driver' "$WORK/tcgpud.log")"
podman exec "tcgpud-$tag" /usr/bin/gpuckpt ps --daemon --json >"$WORK/ps.json" 2>&1 || true
python3 -c 'import json, sys
devs = json.load(open(sys.argv[1]))["devices"]
assert any(d["id"] == 0 and d["capacity"] > 0 for d in devs), devs' "$WORK/ps.json" ||
    fail "tcgpud's ps does not show it managing GPU 0: $(head -c 300 "$WORK/ps.json")"
note "tcgpud: $(grep -m 1 'GPU 0:' "$WORK/tcgpud.log")"
prom=$WORK/emptydir-metrics/tcgpud.prom
for _ in $(seq 1 60); do grep -q '^tcgpud_device_memory_capacity_bytes{' "$prom" 2>/dev/null && break; sleep 0.5; done
grep -qE '^tcgpud_device_memory_capacity_bytes\{[^}]*device="0"[^}]*\} [1-9]' "$prom" 2>/dev/null ||
    fail "tcgpud's metrics, in node-exporter's volume, give no capacity for GPU 0: $(grep capacity "$prom" 2>&1 | head -n 3)"

phase "the training Job, reaching tcgpud"
pod_spec train-job.yaml train env TCGPU_PROJECT
project=${SPEC[0]}
# the toolkit mounts the driver in the job's image's library dir (Debian's)
simulated_gpu "/usr/$MULTIARCH/libcuda.so.1"
pod_spec train-job.yaml train "$NODE" "$WORK" args
CONTAINERS+=("job-$tag")
podman run -d --name "job-$tag" "${PODMAN_RUN[@]}" "${SPEC[@]}" "${GPU_ARGS[@]}" "$IMAGE" \
    /opt/train/train --mb 32 --steps 100000 --print-every 50 --sleep-ms 10 \
    >/dev/null 2>"$WORK/job-run.err" || fail "podman run of the job: $(cat "$WORK/job-run.err")"
wait_log "job-$tag" '^step 50 '
hpid=$(container_pid "job-$tag")
grep -q "/opt/tcgpu/lib/libtcgpu.so" "/proc/$hpid/maps" || fail "the job did not preload the node's libtcgpu.so"
listed=
for _ in $(seq 1 40); do
    podman exec "tcgpud-$tag" /usr/bin/gpuckpt ps --daemon --json >"$WORK/ps.json" 2>&1 || true
    if python3 -c 'import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
sys.exit(0 if any(j.get("pid") == int(sys.argv[2]) and j.get("project") == sys.argv[3] for j in jobs) else 1)' \
        "$WORK/ps.json" "$hpid" "$project" 2>/dev/null; then listed=1; break; fi
    sleep 0.5
done
[ -n "$listed" ] || fail "tcgpud does not list the job (host pid $hpid, project $project): $(head -c 400 "$WORK/ps.json"); job: $(podman logs "job-$tag" 2>&1 | grep -m 2 -i tcgpud); tcgpud: $(podman logs "tcgpud-$tag" 2>&1 | tail -n 3)"
note "tcgpud manages the job: host pid $hpid, project $project"
echo "ok: the init container installed tcgpu on the node, tcgpud became ready on the simulated GPU, the Job registered with it"
