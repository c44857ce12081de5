#!/usr/bin/env bash
# Progress names its phase from the start, and the job logs one line per
# operation (docs/cli.md):
# - over the control socket, a suspend to an image reports quiesce, drain
#   (its first message at 0 bytes, before any byte moved), release, then
#   write, each phase starting at 0, never going back within a phase; the
#   resume (the gate is closed already) reports verify then refill, and every
#   byte phase ends at its total;
# - gpuckpt, on a terminal, shows the phase with its bytes and pace;
# - the job's log has exactly one line for each operation, naming who asked.
. "$(dirname "$0")/lib.sh"

export SIMCUDA_DEVICE_MEM=2G
start_bg "$WORK/job.log" "$GPUCKPT" run -- "$TRAIN" --mb 512 --steps 100000 --print-every 0 --sleep-ms 5
pid=$BG
wait_for_socket "$pid"

# phases OP [DIR] : the progress messages of one request, "phase done total" a line
phases() {
    python3 - "$TCGPU_RUN_DIR/$pid.sock" "$@" <<'PY'
import socket, sys, urllib.parse
path, op = sys.argv[1], sys.argv[2]
req = op + ('' if len(sys.argv) < 4 else ' dir=' + urllib.parse.quote(sys.argv[3], safe='/'))
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
s.send(req.encode())
while True:
    m = s.recv(65536).decode()
    if not m.startswith('progress'):
        break
    f = dict(kv.split('=', 1) for kv in m.split()[1:])
    print(f.get('phase', '?'), f['done'], f['total'])
if not m.startswith('ok'):
    sys.exit('reply: ' + m)
PY
}

# check_phases FILE WANT... : the phases appear in this order, each starting at
# 0 bytes and never going back; a phase with bytes ends at its total.
check_phases() {
    local file=$1; shift
    python3 - "$file" "$@" <<'PY' || fail "progress of $(basename "$file"): $(tr '\n' ';' <"$file")"
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
want = sys.argv[2:]
order = []
for name, done, total in rows:
    done, total = int(done), int(total)
    if not order or order[-1][0] != name:
        assert done == 0, '%s starts at %d, not 0' % (name, done)
        order.append([name, 0, total])
    assert done >= order[-1][1], '%s went back from %d to %d' % (name, order[-1][1], done)
    order[-1][1] = done
assert [o[0] for o in order] == want, 'phases %s, not %s' % ([o[0] for o in order], want)
for name, last, total in order:
    assert last == total, '%s ended at %d of %d' % (name, last, total)
PY
}

phases suspend "$WORK/img" >"$WORK/suspend.txt" || fail "suspend: $(cat "$WORK/suspend.txt")"
check_phases "$WORK/suspend.txt" quiesce drain release write
phases resume >"$WORK/resume.txt" || fail "resume: $(cat "$WORK/resume.txt")"
check_phases "$WORK/resume.txt" verify refill

# gpuckpt on a terminal: the phase from the start, bytes and the pace (an
# ETA too, where a message came in the middle of a phase)
python3 - "$GPUCKPT" "$pid" "$WORK/tty.txt" <<'PY' || fail "gpuckpt on a terminal: $(tr '\r' '\n' <"$WORK/tty.txt" | tail -n 5)"
import os, pty, subprocess, sys
gpuckpt, pid, out = sys.argv[1:4]
master, slave = pty.openpty()
p = subprocess.Popen([gpuckpt, 'suspend', pid, '--keep-context'], stderr=slave, stdout=subprocess.DEVNULL)
os.close(slave)
buf = b''
while True:
    try:
        chunk = os.read(master, 4096)
    except OSError:
        break
    if not chunk:
        break
    buf += chunk
p.wait()
open(out, 'wb').write(buf)
text = buf.decode(errors='replace')
assert p.returncode == 0, 'exit %d' % p.returncode
assert 'suspend: quiesce' in text and 'suspend: drain 0 B / ' in text, 'no phase from the start'
assert 'suspend: release' in text, 'no release phase'
import re
assert re.search(r'suspend: drain [0-9.]+ [KMG]?i?B / [0-9.]+ [KMG]?i?B 100%  [0-9.]+ [KMG]?i?B/s', text), \
    'no throughput at the end of the drain'
for m in re.finditer(r'suspend: drain ([^/]+) / ([^ ]+ [^ ]+) +([0-9]+)%([^(]*)\(([0-9.]+) s\)', text):
    if 0 < int(m.group(3)) < 100 and float(m.group(5)) > 0.5:
        assert 'ETA' in m.group(4), 'no ETA in the middle of the drain: ' + m.group(0)
PY
"$GPUCKPT" resume "$pid" -q || fail "resume after the terminal's suspend"

# one line per operation in the job's log, nothing else about them
sleep 0.2
ops=$(grep -cE 'tcgpu\[[0-9]+\]: (suspend|resume) \(uid [0-9]+ pid [0-9]+\): done in ' "$WORK/job.log" || true)
[ "$ops" -eq 4 ] || fail "the job logged $ops operation lines, not 4: $(grep 'tcgpu\[' "$WORK/job.log")"
others=$(grep -E 'tcgpu\[[0-9]+\]: (.*requested by|(checkpoint|suspend|resume) done in )' "$WORK/job.log" || true)
[ -z "$others" ] || fail "more than one line per operation: $others"
grep -qE 'suspend \(uid [0-9]+ pid [0-9]+\): done in .*GPU memory freed, image '"$WORK/img" "$WORK/job.log" ||
    fail "the suspend's line does not say what was freed and where it went: $(grep 'tcgpu\[' "$WORK/job.log")"
kill "$pid"
note "phases in order from the start, a pace on the terminal, one log line per operation"
