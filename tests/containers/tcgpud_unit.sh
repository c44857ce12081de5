#!/usr/bin/env bash
# An ordinary user's save and restore through tcgpud, under the installed
# tcgpud.service as systemd applies it (issue 36: the unit's restrictions,
# which tcgpud's children gpuckpt and CRIU inherit, broke the save path).
#
# The machine: a container whose PID 1 is systemd (podman --systemd=always,
# privileged, so that the only restrictions on tcgpud are the unit's, as on
# a host), its root an overlay: the staged install (meson install --destdir,
# prefix /usr, Debian's multiarch libdir, tests/common/debian_build.sh) over
# this host's own root (systemd, CRIU, the C library, as a node has them).
# The simulated GPU is the node's driver: simcuda's libcuda.so.1 where
# Debian's driver package puts it (/usr/lib/MULTIARCH, ldconfig run), its
# device the container's /dev/shm/simcuda (default SIMCUDA_SHM). The user is
# tcgpuser (uid 4242), with a home in /home (0700), where its save goes.
#
# 1. systemctl start tcgpud: the installed unit, unchanged (no drop-in);
#    tcgpud runs with the unit's restrictions (its /proc status: the
#    bounding set, NoNewPrivs and the syscall filter the unit names), and
#    it learnt the GPU from the driver (the probe opens the device);
# 2. tcgpuser's training job under libtcgpu.so (gpuckpt run), then
#    tcgpuser's `gpuckpt save PID -D ~/save`, which tcgpud runs as root
#    (gpuckpt save --owner, CRIU) within the unit: it succeeds, the job's
#    tree is gone, the save verifies and holds CRIU's images;
# 3. tcgpuser's `gpuckpt restore -D ~/save` through tcgpud: the tree runs
#    again as tcgpuser, to the checksum of an uninterrupted run, and with
#    nothing of tcgpud's unit: its seccomp state, no_new_privs, capability
#    sets, namespaces and cgroups are the job's before the save (a restored
#    tree is forked from CRIU: a unit with NoNewPrivileges= and a syscall
#    filter that CRIU could work under gave it NoNewPrivs 1 and 3 filters).
# The times of the save and of the restore are printed.
#
# TCGPU_TEST_UNIT=FILE runs the test with another unit file in place of the
# installed one (its programs at /usr: e.g. an older unit, to see it fail).
#
# Needs root, podman, runc, systemd, CRIU and the plugin: without podman,
# runc or systemd it skips (77), except on CI (CI=true), where it fails.
set -euo pipefail
SYSTEMD=/lib/systemd/systemd
missing=
command -v podman >/dev/null || missing="podman"
command -v runc >/dev/null || missing="$missing runc"
[ -x "$SYSTEMD" ] || missing="$missing systemd ($SYSTEMD)"
if [ -n "$missing" ]; then
    if [ "${CI:-}" = true ]; then echo "FAIL: not installed: $missing (CI runs this test)" >&2; exit 1; fi
    echo "skipped: not installed:$missing"
    exit 77
fi
. "$(dirname "$0")/lib.sh"

SRC=${TCGPU_SOURCE_ROOT:?run through meson test}
. "$SRC/tests/common/debian_build.sh"
STAGE=$WORK/stage
tag=$(printf '%s' "${TEST_NAME:-tcgpud-unit}-$$" | tr -c 'a-z0-9-' -)
CT=tcgpu-sd-$tag
USER_UID=4242
UHOME=/home/tcgpuser
ARGS=(--mb 32 --steps 400 --print-every 50)

# in the container, as root / as the user (a bounded time each)
inside() { timeout --foreground -k 5 120 podman exec "$CT" "$@"; }
as_user() { timeout --foreground -k 5 120 podman exec --user "$USER_UID:$USER_UID" -w "$UHOME" "$CT" "$@"; }
journal() { inside journalctl --no-pager -o cat -u tcgpud 2>&1 | tail -n "${1:-20}"; }

phase "staging the install (prefix /usr, libdir $DEBIAN_LIBDIR)"
debian_stage "$B" "$SRC" "$STAGE" "$WORK" examples/train/train examples/train/train_kernels.so \
    simcuda/libcuda.so.1 || fail "the Debian build"

phase "the container's root: the install over this host's root"
# the upper layer on a tmpfs of its own: an upper directory on the root's
# filesystem would overlap its lower layer (overlayfs refuses it)
FS=$WORK/fs
mkdir -p "$FS"
mount -t tmpfs -o mode=0755 tcgpu-unit "$FS" || fail "cannot mount a tmpfs on $FS"
MOUNTS+=("$FS")
UPPER=$FS/upper ROOT=$FS/root
mkdir -p "$UPPER" "$FS/work" "$ROOT"
cp -a "$STAGE/." "$UPPER/"
# the host's scratch directories and runtime state stay out (opaque)
for d in tmp var/tmp run; do
    mkdir -p "$UPPER/$d"
    python3 -c 'import os, sys; os.setxattr(sys.argv[1], "trusted.overlay.opaque", b"y")' "$UPPER/$d" ||
        fail "cannot make $d opaque in the overlay"
done
chmod 1777 "$UPPER/tmp" "$UPPER/var/tmp"
if [ -n "${TCGPU_TEST_UNIT:-}" ]; then
    cp "$TCGPU_TEST_UNIT" "$UPPER/usr/lib/systemd/system/tcgpud.service"
    note "the unit: $TCGPU_TEST_UNIT, not the installed one"
fi
# the driver, where Debian's driver package puts it
cp "$B/simcuda/libcuda.so.1" "$UPPER/usr/$DEBIAN_LIBDIR/libcuda.so.1"
mkdir -p "$UPPER/opt/train"
cp "$TRAIN" "$TRAIN_KERNELS" "$SMI" "$UPPER/opt/train/"
# the user, and its home
mkdir -p "$UPPER/etc" "$UPPER/home"
cp /etc/passwd /etc/group "$UPPER/etc/"
echo "tcgpuser:x:$USER_UID:$USER_UID:tcgpu test user:$UHOME:/bin/sh" >>"$UPPER/etc/passwd"
echo "tcgpuser:x:$USER_UID:" >>"$UPPER/etc/group"
mkdir -m 700 "$UPPER$UHOME"
chown "$USER_UID:$USER_UID" "$UPPER$UHOME"
mount -t overlay tcgpu-unit -o "lowerdir=/,upperdir=$UPPER,workdir=$FS/work" "$ROOT" ||
    fail "cannot mount the overlay on $ROOT"
MOUNTS=("$ROOT" "${MOUNTS[@]}")
ldconfig -r "$ROOT" || fail "ldconfig in the container's root"
# a tcgpu of this host's own would hide the staged one
for f in etc/tcgpud.ini usr/local/bin/gpuckpt usr/local/sbin/tcgpud; do
    [ ! -e "$ROOT/$f" ] || fail "this host has /$f: the container would not run the staged install alone"
done

phase "booting systemd in the container"
# privileged: systemd sets up the unit's sandbox from every privilege, as on
# a host; the restrictions tcgpud runs with are the unit's alone
CONTAINERS+=("$CT")
podman run -d --name "$CT" --privileged --runtime runc --ulimit nofile=1024:1024 \
    --ulimit nproc=4096:4096 --network none --systemd=always --rootfs "$ROOT" \
    "$SYSTEMD" --unit=multi-user.target >/dev/null 2>"$WORK/boot.err" ||
    fail "podman run of systemd: $(cat "$WORK/boot.err")"
state=
for _ in $(seq 1 120); do
    state=$(podman exec "$CT" systemctl is-system-running 2>/dev/null || true)
    case $state in running|degraded) break ;; esac
    sleep 0.5
done
case $state in
running) ;;
degraded) note "systemd is up, degraded: $(inside systemctl --failed --no-legend --plain | tr '\n' ' ')" ;;
*) fail "systemd did not come up in 60 s (state '$state'): $(podman logs "$CT" 2>&1 | tail -n 5)" ;;
esac
[ "$(inside cat /proc/1/comm)" = systemd ] || fail "PID 1 in the container is $(inside cat /proc/1/comm)"

# the node's GPU exists before tcgpud starts (as /dev/nvidia* do): 3 GiB,
# not simcuda's default 2 GiB, which a device of tcgpud's own would have
# (a private /dev, PrivateDevices=, hides the node's)
inside env SIMCUDA_DEVICE_MEM=3G /opt/train/simcuda-smi -q >/dev/null || fail "cannot make the simulated GPU"

phase "systemctl start tcgpud"
inside systemctl show -p FragmentPath -p DropInPaths tcgpud >"$WORK/unit.show"
# (/lib is /usr/lib on a merged-/usr system)
grep -qxE "FragmentPath=(/usr)?/lib/systemd/system/tcgpud.service" "$WORK/unit.show" &&
    grep -qx "DropInPaths=" "$WORK/unit.show" || fail "the unit systemd loads: $(cat "$WORK/unit.show")"
inside systemctl start tcgpud || fail "systemctl start tcgpud: $(journal)"
for _ in $(seq 1 100); do inside test -S /run/tcgpud.sock && break; sleep 0.1; done
inside test -S /run/tcgpud.sock || fail "tcgpud made no socket: $(journal)"
main=$(inside systemctl show -p MainPID --value tcgpud)
[ "$main" -gt 0 ] || fail "tcgpud has no main pid: $(journal)"
# the restrictions, applied: what the unit names is what the process has
inside cat "/proc/$main/status" >"$WORK/tcgpud.status"
inside cat /proc/1/status >"$WORK/pid1.status"
inside systemctl show -p CapabilityBoundingSet -p NoNewPrivileges -p SystemCallFilter tcgpud \
    >"$WORK/unit.props"
python3 - "$WORK/tcgpud.status" "$WORK/pid1.status" "$WORK/unit.props" <<'PY' ||
import sys
names = ["chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
         "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
         "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
         "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
         "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
         "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore"]
def status(path):
    return {k: v.strip() for k, v in (l.split(":", 1) for l in open(path) if ":" in l)}
def caps(st):
    bnd = int(st["CapBnd"], 16)
    return {"cap_" + n for i, n in enumerate(names) if bnd >> i & 1}
st, pid1 = status(sys.argv[1]), status(sys.argv[2])
props = dict(l.rstrip("\n").split("=", 1) for l in open(sys.argv[3]) if "=" in l)
# what systemd itself may hand on (this machine may lack some), of the unit's
want = {w.lower() for w in props["CapabilityBoundingSet"].split()} & caps(pid1)
if caps(st) != want:
    sys.exit("bounding set %s, the unit's %s" % (sorted(caps(st)), sorted(want)))
nnp = "1" if props["NoNewPrivileges"] == "yes" else "0"
if st["NoNewPrivs"] != nnp:
    sys.exit("NoNewPrivs %s, the unit's NoNewPrivileges=%s" % (st["NoNewPrivs"], props["NoNewPrivileges"]))
filtered = "2" if props["SystemCallFilter"] not in ("", "~") else "0"
if st["Seccomp"] != filtered:
    sys.exit("Seccomp %s, the unit's SystemCallFilter=%.40s" % (st["Seccomp"], props["SystemCallFilter"]))
print("-- tcgpud runs with the unit's restrictions: bounding set of %d capabilities, NoNewPrivs %s, "
      "Seccomp %s" % (len(want), nnp, filtered), file=sys.stderr)
PY
    fail "tcgpud does not run with the unit's restrictions"
# in the jobs' namespaces (the mount namespace, above all): what CRIU dumps
for n in mnt uts ipc net pid cgroup; do
    [ "$(inside readlink "/proc/$main/ns/$n")" = "$(inside readlink /proc/1/ns/$n)" ] ||
        note "tcgpud's $n namespace is not the node's"
done
for _ in $(seq 1 50); do journal 200 | grep -q 'GPU 0: [0-9]* MiB' && break; sleep 0.1; done
journal 200 | grep -q 'GPU 0: 3072 MiB (from the driver)' ||
    fail "tcgpud did not learn the node's GPU (3072 MiB) from the driver: $(journal 200 | grep -m 3 -E 'GPU|driver')"
note "tcgpud: $(journal 200 | grep -m 1 'GPU 0:')"

phase "the reference: the job uninterrupted, without tcgpu"
as_user /opt/train/train "${ARGS[@]}" >"$WORK/ref.out" 2>&1 || fail "train alone: $(tail_of "$WORK/ref.out")"
ref=$(checksum_of "$WORK/ref.out")
[ -n "$ref" ] || fail "train printed no checksum: $(tail_of "$WORK/ref.out")"

phase "tcgpuser's job under libtcgpu.so"
# a session of its own (CRIU saves whole sessions), its output in its home
# (the restored tree writes on into the same file); the pid it runs as
as_user sh -c 'setsid sh -c "echo \$\$ >job.pid; exec gpuckpt run -- /opt/train/train $* --sleep-ms 20 \
    >run.out 2>&1" </dev/null >/dev/null 2>&1 &' sh "${ARGS[@]}" || fail "cannot start tcgpuser's job"
RUN_OUT=$ROOT$UHOME/run.out
for _ in $(seq 1 100); do [ -s "$ROOT$UHOME/job.pid" ] && break; sleep 0.05; done
pid=$(cat "$ROOT$UHOME/job.pid" 2>/dev/null) || fail "tcgpuser's job did not start"
wait_for_line "$RUN_OUT" '^step 50 '
grep -q '/libtcgpu.so' <(inside cat "/proc/$pid/maps") || fail "the job did not load libtcgpu.so"

# what the job runs with that tcgpud's restrictions could change, were the
# restored tree to inherit them from CRIU (a syscall filter, no_new_privs,
# the bounding set, namespaces, tcgpud's cgroup): the same after the restore
job_context() {
    inside sh -c 'grep -E "^(Seccomp|Seccomp_filters|NoNewPrivs|CapBnd|CapInh|CapPrm|CapEff|CapAmb):" \
        /proc/$1/status; for n in mnt uts ipc net pid cgroup user; do echo "$n: $(readlink /proc/$1/ns/$n)"; done
        cat /proc/$1/cgroup' \
        sh "$1"
}
job_context "$pid" >"$WORK/context.before" || fail "cannot read the job's status"

phase "tcgpuser saves its job through tcgpud"
t0=$(date +%s%N)
rc=0
as_user gpuckpt save "$pid" -D "$UHOME/save" >"$WORK/save.out" 2>&1 || rc=$?
t1=$(date +%s%N)
[ "$rc" -eq 0 ] || fail "tcgpuser's save through tcgpud exited $rc: $(cat "$WORK/save.out"); tcgpud: $(journal 5)"
grep -q "saved the tree under $pid" "$WORK/save.out" || fail "no summary: $(cat "$WORK/save.out")"
journal 200 | grep -q "save of the tree under $pid to $UHOME/save for uid $USER_UID" ||
    fail "tcgpud did not log the save: $(journal 3)"
note "saved in $(( (t1 - t0) / 1000000 )) ms: $(grep "saved the tree" "$WORK/save.out")"
for _ in $(seq 1 100); do inside test -d "/proc/$pid" || break; sleep 0.1; done
! inside test -d "/proc/$pid" || fail "the job's tree still runs after the save"
grep -q '^checksum' "$RUN_OUT" && fail "the job finished before it was saved: make it longer"
inside gpuckpt verify "$UHOME/save" >"$WORK/verify.out" 2>&1 || fail "the save does not verify: $(cat "$WORK/verify.out")"
inside gpuckpt inspect "$UHOME/save" >"$WORK/inspect.out" 2>&1 || fail "gpuckpt inspect: $(cat "$WORK/inspect.out")"
grep -q "criu images: present" "$WORK/inspect.out" || fail "the save has no CRIU images: $(cat "$WORK/inspect.out")"
[ "$(stat -c '%U %a' "$ROOT$UHOME/save")" = "root 711" ] || fail "the save: $(stat -c '%U %a' "$ROOT$UHOME/save")"

phase "tcgpuser restores its job through tcgpud"
t0=$(date +%s%N)
# attached: the restore lasts as long as the restored tree
timeout --foreground -k 5 120 podman exec --user "$USER_UID:$USER_UID" -w "$UHOME" "$CT" \
    gpuckpt restore -D "$UHOME/save" >"$WORK/restore.out" 2>&1 &
rpid=$!
BG_PIDS+=("$rpid")
wait_line "$WORK/restore.out" "restored the tree under $pid" 60 ||
    fail "the tree was not restored: $(cat "$WORK/restore.out"); tcgpud: $(journal 5)"
t1=$(date +%s%N)
note "restored in $(( (t1 - t0) / 1000000 )) ms"
inside grep "^Uid:" "/proc/$pid/status" | grep -q "^Uid:.*$USER_UID.*$USER_UID.*$USER_UID.*$USER_UID" ||
    fail "restored uids: $(inside grep Uid: "/proc/$pid/status")"
job_context "$pid" >"$WORK/context.after" || fail "cannot read the restored job's status"
diff "$WORK/context.before" "$WORK/context.after" >"$WORK/context.diff" ||
    fail "the restored job does not run as it ran before the save (what it inherited from tcgpud's unit): $(tr '\n' ' ' <"$WORK/context.diff")"
rc=0
wait "$rpid" || rc=$?
[ "$rc" -eq 0 ] || fail "tcgpuser's restore exited $rc: $(cat "$WORK/restore.out"; tail_of "$RUN_OUT")"
got=$(checksum_of "$RUN_OUT")
[ "$got" = "$ref" ] || fail "checksum after the save and restore through tcgpud: '$got', uninterrupted: $ref"
echo "ok: under the installed tcgpud.service (systemd as PID 1), tcgpuser saved its job into $UHOME and restored it through tcgpud; checksum $got"
