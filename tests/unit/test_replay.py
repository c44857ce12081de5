#!/usr/bin/env python3
"""tcgpu-replay (tools/replay/): the comparison's invariants and targets.

- The checked-in trace (tests/data/trace-small.csv: 300 jobs on 16 GPUs) is
  what the generator makes from the arguments in its first line; replayed
  through all five schedulers with every policy invariant checked after
  every event (--check, which includes the backfill check), every job
  finishes or is rejected for being larger than its partition, nothing is
  lost where the mechanism loses nothing, the baselines without preemption
  never preempt, kill+requeue loses work and ckpt+requeue does not,
  utilisations are fractions with compute used never above GPUs held.
- On a generated trace of the documented shape (3000 jobs on 64 GPUs, load
  0.8), tcgpud meets the targets of docs/tcgpud.md against the others, as
  the report's own "targets" say and as recomputed here from its numbers.
- The text report has the table and the targets; bad input is refused with
  the file and line.

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
SCHEDS = ("fifo", "static", "kill", "ckpt", "tcgpud")


def check(cond, msg):
    global failures
    if not cond:
        print("FAIL:", msg)
        failures += 1


def run(*args, ok=True):
    r = subprocess.run([replay, *args], capture_output=True, text=True, timeout=600)
    if ok and r.returncode != 0:
        print(r.stderr)
        raise SystemExit("FAIL: tcgpu-replay %s exited %d" % (" ".join(args), r.returncode))
    return r if not ok else r.stdout


def invariants(rep, what):
    n = rep["jobs"]
    for name in SCHEDS:
        r = rep[name]
        where = "%s/%s" % (what, name)
        check(r["finished"] + r["rejected"] == n, "%s: %d finished + %d rejected of %d"
              % (where, r["finished"], r["rejected"], n))
        check(name == "static" or r["rejected"] == 0, "%s: jobs rejected" % where)
        check(0 < r["util"] <= r["alloc"] + 1e-9 <= 1 + 1e-9, "%s: utilisation %.3f, GPUs held %.3f"
              % (where, r["util"], r["alloc"]))
        check(0 < r["memutil"] <= r["alloc"] + 1e-9, "%s: memory held %.3f" % (where, r["memutil"]))
        check(r["hi_wait_mean"] >= 0 and r["hi_wait_p95"] >= 0, "%s: negative waits" % where)
        check(r["jct_mean"] > 0 and r["jct_p95"] >= r["jct_mean"] * 0.5 and r["makespan"] > 0,
              "%s: times" % where)
        if name != "kill":
            check(r["work_lost_gpuh"] == 0, "%s: work lost %.2f GPU h" % (where, r["work_lost_gpuh"]))
    for name in ("fifo", "static"):
        check(rep[name]["preemptions"] == 0 and rep[name]["overhead_gpuh"] == 0,
              "%s/%s: a baseline without preemption preempted" % (what, name))
    check(rep["kill"]["preemptions"] > 0 and rep["kill"]["work_lost_gpuh"] > 0,
          "%s: kill+requeue never lost work (the trace does not exercise it)" % what)
    check(rep["ckpt"]["preemptions"] > 0 and rep["ckpt"]["overhead_gpuh"] > 0,
          "%s: ckpt+requeue: %d preemptions cost %.2f GPU h" % (what, rep["ckpt"]["preemptions"],
                                                                rep["ckpt"]["overhead_gpuh"]))
    check(rep["tcgpud"]["preemptions"] > 0 and rep["tcgpud"]["overhead_gpuh"] > 0,
          "%s: tcgpud never preempted, or for free" % what)
    check(rep["tcgpud"]["hi_wait_p95"] <= rep["fifo"]["hi_wait_p95"], "%s: high-priority p95 wait" % what)


def targets(rep, what):
    tc, ff, st, kl = rep["tcgpud"], rep["fifo"], rep["static"], rep["kill"]
    mine = [tc["util"] >= 1.8 * st["util"], tc["util"] >= ff["util"] + 0.15,
            tc["jct_mean"] <= 0.9 * ff["jct_mean"], tc["hi_wait_p95"] <= 1.0,
            tc["work_lost_gpuh"] == 0 and kl["work_lost_gpuh"] > 0]
    theirs = [t["met"] for t in rep["targets"]]
    check(mine == theirs, "%s: the report's targets %s, recomputed %s" % (what, theirs, mine))
    for t, ok in zip(rep["targets"], mine):
        check(ok, "%s: target not met: %s (%s)" % (what, t["what"], t["value"]))


def strict(text, what):
    """The report against docs/tcgpud.md's `replay` schema, with the strict parser."""
    src = os.environ.get("TCGPU_SOURCE_ROOT", "")
    r = subprocess.run([sys.executable, os.path.join(src, "tests", "common", "jsoncheck.py"),
                        os.path.join(src, "docs", "tcgpud.md"), "replay"], input=text.encode(),
                       capture_output=True)
    check(r.returncode == 0, "%s: --json is not what docs/tcgpud.md says: %s" % (what, r.stderr.decode()))
    return json.loads(text)


# The checked-in trace is the generator's output for the arguments it records.
with open(trace) as f:
    first = f.readline().strip()
    content = first + "\n" + f.read()
args = first.split()[2:]            # "# tcgpu-replay --generate ..."
check(run(*args) == content, "tests/data/trace-small.csv is not what '%s' generates" % " ".join(args))

# Every scheduler on it, every policy invariant checked after every event.
small = strict(run(trace, "--gpus", "16", "--compare", "--check", "--json"), "small")
check(small["jobs"] == 300 and small["gpus"] == 16, "small trace: %d jobs on %d GPUs"
      % (small["jobs"], small["gpus"]))
invariants(small, "small")

# The documented shape, larger: the targets.
big_path = os.path.join(tmp, "big.csv")
with open(big_path, "w") as f:
    f.write(run("--generate", "--jobs", "3000", "--gpus", "64", "--load", "0.8", "--seed", "2"))
big = strict(run(big_path, "--gpus", "64", "--compare", "--json"), "big")
invariants(big, "big")
targets(big, "big")

# The text report: one column per scheduler, the targets under it.
text = run(trace, "--gpus", "16", "--compare")
for word in ("FIFO", "static", "kill+requeue", "ckpt+requeue", "tcgpud", "work lost (GPU hours)",
             "tcgpud against the targets"):
    check(word in text, "the table lacks %r" % word)
check(len(run(trace, "--gpus", "16").splitlines()[4].split()) >= 2, "default: tcgpud and FIFO")

check(run("--version").startswith("tcgpu-replay "), "--version")

# Bad input is refused, with the file and line.
cases = [
    ("bad.csv", "arrival_s,project,priority,mem_gib,duration_s\n0,a,1,10,100\n5,b,1,ten,100\n", "bad.csv:3"),
    ("cols.csv", "arrival_s,project,priority,mem_gib,duration_s,gpus,compute_pct\n0,a,1,10,100,17,50\n",
     "cols.csv:2"),
    ("proj.csv", "#project name=a reserve_gpus=x\narrival_s,project,priority,mem_gib,duration_s\n", "proj.csv:1"),
    ("head.csv", "arrival,project\n0,a\n", "head.csv:1"),
]
for name, body, where in cases:
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(body)
    r = run(path, ok=False)
    check(r.returncode == 1 and where in r.stderr, "%s: not refused with %s: %r" % (name, where, r.stderr))
r = run(trace, "--sched", "fifo,nope", ok=False)
check(r.returncode == 2 and "--sched" in r.stderr, "a bad --sched is refused: %r" % r.stderr)
for name in os.listdir(tmp):
    os.unlink(os.path.join(tmp, name))
os.rmdir(tmp)

print("ok" if not failures else "%d failures" % failures)
sys.exit(1 if failures else 0)
