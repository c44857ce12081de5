#!/usr/bin/env python3
"""tcgpu-replay (tools/tcgpu-replay.c): the report's invariants.

On the checked-in trace (tests/data/trace-small.csv, with the policy's own
invariants checked after every event: --check) and on a larger generated one:
every job finishes in both runs, no work is lost, utilisations are fractions
(memory utilisation never above the busy fraction), the baseline never
preempts and tcgpud does, and high-priority jobs wait no longer under tcgpud
than under FIFO. The checked-in trace is what the generator makes from the
arguments in its first line (the generator is deterministic).

usage: test_replay.py TCGPU_REPLAY TRACE
"""
import json
import os
import subprocess
import sys
import tempfile

replay, trace = sys.argv[1], sys.argv[2]
failures = 0
tmp = tempfile.mkdtemp(prefix="tcgpu-replay-")


def check(cond, msg):
    global failures
    if not cond:
        print("FAIL:", msg)
        failures += 1


def run(*args):
    r = subprocess.run([replay, *args], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit("FAIL: tcgpu-replay %s exited %d" % (" ".join(args), r.returncode))
    return r.stdout


def invariants(rep, what):
    n = rep["jobs"]
    for name in ("tcgpud", "fifo"):
        r = rep[name]
        check(r["finished"] + r["rejected"] == n, "%s/%s: %d finished + %d rejected of %d"
              % (what, name, r["finished"], r["rejected"], n))
        check(r["rejected"] == 0, "%s/%s: jobs rejected" % (what, name))
        check(r["work_lost"] == 0, "%s/%s: work lost %s s" % (what, name, r["work_lost"]))
        check(0 < r["busy"] <= 1 and 0 < r["memutil"] <= 1, "%s/%s: utilisation %s %s"
              % (what, name, r["busy"], r["memutil"]))
        check(r["memutil"] <= r["busy"] + 1e-9, "%s/%s: memory utilisation above busy" % (what, name))
        check(r["hi_wait_mean"] >= 0 and r["hi_wait_p95"] >= 0, "%s/%s: negative waits" % (what, name))
        check(r["jct_all"] > 0 and r["makespan"] > 0, "%s/%s: times" % (what, name))
    check(rep["fifo"]["preemptions"] == 0, "%s: the baseline preempted" % what)
    check(rep["tcgpud"]["preemptions"] > 0, "%s: tcgpud never preempted (the trace does not exercise it)" % what)
    check(rep["tcgpud"]["hi_wait_mean"] <= rep["fifo"]["hi_wait_mean"],
          "%s: high-priority jobs waited longer under tcgpud (%.1f s) than FIFO (%.1f s)"
          % (what, rep["tcgpud"]["hi_wait_mean"], rep["fifo"]["hi_wait_mean"]))
    check(rep["tcgpud"]["hi_wait_p95"] <= rep["fifo"]["hi_wait_p95"], "%s: high-priority p95 wait" % what)


# The checked-in trace, every policy invariant checked after every event.
def strict(text, what):
    """The report against docs/tcgpud.md's `replay` schema, with the strict parser."""
    src = os.environ.get("TCGPU_SOURCE_ROOT", "")
    r = subprocess.run([sys.executable, os.path.join(src, "tests", "common", "jsoncheck.py"),
                        os.path.join(src, "docs", "tcgpud.md"), "replay"], input=text.encode(),
                       capture_output=True)
    check(r.returncode == 0, "%s: --json is not what docs/tcgpud.md says: %s" % (what, r.stderr.decode()))
    return json.loads(text)


small = strict(run(trace, "--check", "--json"), "small")
check(small["jobs"] == 200 and small["gpus"] == 8, "small trace: %d jobs on %d GPUs" % (small["jobs"], small["gpus"]))
invariants(small, "small")

# It is the generator's output for the arguments it records.
with open(trace) as f:
    first = f.readline().strip()
    content = first + "\n" + f.read()
args = first.split()[2:]            # "# tcgpu-replay --generate ..."
check(run(*args) == content, "tests/data/trace-small.csv is not what '%s' generates" % " ".join(args))

# Larger: thousands of jobs on a hundred GPUs (no per-event check: too slow there).
big_trace = run("--generate", "--jobs", "3000", "--gpus", "128", "--load", "0.95", "--seed", "5")
big_path = os.path.join(tmp, "big.csv")
with open(big_path, "w") as f:
    f.write(big_trace)
big = strict(run(big_path, "--gpus", "128", "--json"), "big")
invariants(big, "big")

# Bad input is refused with the line.
bad = os.path.join(tmp, "bad.csv")
with open(bad, "w") as f:
    f.write("arrival_s,project,priority,mem_gib,duration_s\n0,a,1,10,100\n5,b,1,ten,100\n")
r = subprocess.run([replay, bad], capture_output=True, text=True)
check(r.returncode == 1 and "bad.csv:3" in r.stderr, "bad line not reported: %r" % r.stderr)
for name in os.listdir(tmp):
    os.unlink(os.path.join(tmp, name))
os.rmdir(tmp)

print("ok" if not failures else "%d failures" % failures)
sys.exit(1 if failures else 0)
