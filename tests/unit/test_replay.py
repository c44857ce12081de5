#!/usr/bin/env python3
"""tcgpu-replay (tools/replay/): what a user of the comparison relies on.

- The checked-in trace (tests/data/trace-small.csv: 300 jobs on 16 GPUs) is
  what the generator makes from the arguments in its first line; replayed
  through every scheduler with every policy invariant and the host-memory
  bound checked after every event (--check), the JSON has every documented
  key (strict, against docs/replay.md), every job finishes or is refused,
  the schedulers without preemption never preempt, nothing is lost where
  the mechanism loses nothing.
- The issue's reproduction (`--generate --jobs 300`, replayed on its
  defaults) runs to the end: the gangs that can never be placed are refused
  at admission, with the reason.
- Hand-made traces with known answers: the SLO share and the waits; kill
  loses the work since the job's own checkpoint and save/suspend lose none;
  a job too large is refused with its reason; whole-GPU lending leaves the
  lent GPUs whole; the host memory a node gives suspended jobs is a bound
  (the next suspension goes to disk); whole vs shared placement without
  preemption differ in busy fraction and goodput in the expected direction.
- --load is whole-GPU demand and --compute-load compute demand; a
  reservation larger than the policy holds is refused, not cut; bad input is
  refused with the file and line.

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
KEYS = ("placement", "preemption", "shipped", "goodput", "busy", "lost_gpu_hours", "hi_wait_p95_s",
        "slo_met", "peak_suspended_host_bytes_per_node")
HEADER = "arrival_s,project,priority,mem_gib,duration_s,gpus,compute_pct\n"


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


def write(name, body):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(body)
    return path


def strict(text, what):
    """The report against docs/replay.md's `replay` schema, with the strict parser."""
    src = os.environ.get("TCGPU_SOURCE_ROOT", "")
    r = subprocess.run([sys.executable, os.path.join(src, "tests", "common", "jsoncheck.py"),
                        os.path.join(src, "docs", "replay.md"), "replay"], input=text.encode(),
                       capture_output=True)
    check(r.returncode == 0, "%s: --json is not what docs/replay.md says: %s" % (what, r.stderr.decode()))
    return json.loads(text)


def by_name(rep):
    return {s["name"]: s for s in rep["schedulers"]}


def replay_json(path, *args):
    return by_name(strict(run(path, "--json", "--check", *args), path))


# The checked-in trace is the generator's output for the arguments it records.
with open(trace) as f:
    first = f.readline().strip()
    content = first + "\n" + f.read()
args = first.split()[2:]            # "# tcgpu-replay --generate ..."
check(run(*args) == content, "tests/data/trace-small.csv is not what '%s' generates" % " ".join(args))

# Every scheduler on it, every invariant checked after every event.
small = strict(run(trace, "--gpus", "16", "--compare", "--check", "--json"), "small")
check(small["jobs"] == 300 and small["gpus"] == 16, "small: %d jobs on %d GPUs" % (small["jobs"], small["gpus"]))
scheds = by_name(small)
axes = {(s["placement"], s["preemption"]) for s in small["schedulers"]}
for pl in ("whole", "shared"):
    for pr in ("none", "kill", "save", "suspend", "suspend+migrate"):
        check((pl, pr) in axes, "no scheduler with placement %s and preemption %s" % (pl, pr))
check(sorted(n for n, s in scheds.items() if s["shipped"]) == ["shared-none", "slurm-shared-save",
                                                                "slurm-whole-save"],
      "shipped: %s" % [n for n, s in scheds.items() if s["shipped"]])
check({s["victims"] for s in small["schedulers"] if s["name"].startswith("slurm-")} == {"partition_prio"}
      and {s["victims"] for s in small["schedulers"] if not s["name"].startswith("slurm-")} == {"tcgpud"},
      "victims: %s" % {n: s.get("victims") for n, s in scheds.items()})
for name, s in scheds.items():
    for k in KEYS:
        check(k in s, "%s: no %r in the JSON" % (name, k))
    check(s["finished"] + s["refused"] == small["jobs"], "%s: %d finished + %d refused of %d"
          % (name, s["finished"], s["refused"], small["jobs"]))
    check(0 < s["goodput"] <= s["busy"] + 1e-9 <= 1 + 1e-9, "%s: goodput %.3f, busy %.3f"
          % (name, s["goodput"], s["busy"]))
    check(0 <= s["slo_met"] <= 1 and s["hi_wait_p50_s"] <= s["hi_wait_p95_s"] <= s["hi_wait_p99_s"],
          "%s: waits" % name)
    if s["preemption"] == "none":
        check(s["preemptions"] == 0 and s["preempt_gpu_hours"] == 0, "%s: preempted" % name)
    if s["preemption"] != "kill":
        check(s["lost_gpu_hours"] == 0, "%s: lost %.2f GPU h" % (name, s["lost_gpu_hours"]))
    if s["preemption"] not in ("suspend", "suspend+migrate"):
        check(s["peak_suspended_host_bytes_per_node"] == 0, "%s: holds host memory" % name)
check(scheds["whole-kill"]["preemptions"] > 0 and scheds["whole-kill"]["lost_gpu_hours"] > 0,
      "whole-kill never lost work (the trace does not exercise it)")

# The reproduction: it used to exit 1, "job 7 (76 GiB x 8) never finished: stuck".
repro = write("repro.csv", run("--generate", "--jobs", "300"))
r = run(repro, ok=False)
check(r.returncode == 0, "the default trace on the defaults: exit %d: %s" % (r.returncode, r.stderr))
check("refused at admission" in r.stderr and "can ever hold" in r.stderr,
      "the refusals are not named with their reason: %r" % r.stderr)

# Who chooses victims (2 GPUs, one reserved by each department): a's two
# high-priority jobs at 0 s, b's at 100 s. tcgpud's policy lends b's GPU to
# a's second job and takes it back for b's (1 preemption, of a high-priority
# job); Slurm's partition_prio keeps a's jobs on a's GPU (the second waits
# 500 s) and b's runs at once on its own: a high-priority job is never a victim.
part = write("part.csv", "#project name=a priority=10 reserve_gpus=1\n"
             "#project name=b priority=10 reserve_gpus=1\n" + HEADER +
             "0,a,100,10,500,1,100\n0,a,100,10,500,1,100\n100,b,100,10,100,1,100\n")
pp = replay_json(part, "--gpus", "2", "--high-priority", "100",
                 "--sched", "whole-save,slurm-whole-save,slurm-whole-kill")
check(pp["whole-save"]["preemptions"] == 1, "whole-save: %d preemptions, want 1 (b reclaims its GPU)"
      % pp["whole-save"]["preemptions"])
for n in ("slurm-whole-save", "slurm-whole-kill"):
    check(pp[n]["preemptions"] == 0 and pp[n]["lost_gpu_hours"] == 0,
          "%s: %d preemptions of high-priority jobs" % (n, pp[n]["preemptions"]))
    check(abs(pp[n]["hi_wait_p99_s"] - 500) < 1, "%s: a's second job waited %.0f s, not 500 (outside its "
          "partition?)" % (n, pp[n]["hi_wait_p99_s"]))

# The SLO on a hand-made trace (1 GPU): a low job runs 0..1000 s; high job B
# arrives at 100 s, high job C at 2000 s. Without preemption B waits 900 s
# (misses a 60 s SLO), C none: half met. With preemption B starts once its
# victim is off the GPU (kill: at once; suspend: 0.5 s + 40 GiB at 50 GB/s).
slo = write("slo.csv", HEADER + "0,low,10,40,1000,1,100\n100,hi,100,10,100,1,100\n"
            "2000,hi,100,10,10,1,100\n")
s = replay_json(slo, "--gpus", "1", "--slo", "60s", "--sched",
                "whole-none,whole-kill,whole-save,whole-suspend,shared-suspend")
check(abs(s["whole-none"]["slo_met"] - 0.5) < 1e-9, "whole-none: SLO met %.3f, want 0.5"
      % s["whole-none"]["slo_met"])
check(abs(s["whole-none"]["hi_wait_p99_s"] - 900) < 1e-6, "whole-none: B waited %.1f s, want 900"
      % s["whole-none"]["hi_wait_p99_s"])
for name in ("whole-kill", "whole-save", "whole-suspend", "shared-suspend"):
    check(s[name]["slo_met"] == 1, "%s: SLO met %.3f, want 1" % (name, s[name]["slo_met"]))
check(s["whole-suspend"]["hi_wait_p99_s"] < 2, "whole-suspend: B waited %.1f s"
      % s["whole-suspend"]["hi_wait_p99_s"])
# kill: the low job had run 100 s with no checkpoint of its own (every 30 min): 100 GPU-seconds lost.
check(abs(s["whole-kill"]["lost_gpu_hours"] - 100 / 3600) < 1e-6, "whole-kill lost %.5f GPU h, want %.5f"
      % (s["whole-kill"]["lost_gpu_hours"], 100 / 3600))
for name in ("whole-save", "whole-suspend"):
    check(s[name]["lost_gpu_hours"] == 0 and s[name]["preemptions"] == 1,
          "%s: lost %.4f GPU h in %d preemptions" % (name, s[name]["lost_gpu_hours"], s[name]["preemptions"]))
check(s["whole-suspend"]["peak_suspended_host_bytes_per_node"] == 40 << 30,
      "whole-suspend: %d bytes held in host memory, want 40 GiB"
      % s["whole-suspend"]["peak_suspended_host_bytes_per_node"])

# A job that can never be placed is refused at admission, with its reason.
big = write("big.csv", HEADER + "0,a,1,10,100,1,100\n5,a,1,10,100,4,100\n10,a,1,90,100,1,100\n")
r = run(big, "--gpus", "2", "--json", ok=False)
check(r.returncode == 0, "a trace with unplaceable jobs: exit %d" % r.returncode)
if r.returncode == 0:
    for name, x in by_name(json.loads(r.stdout)).items():
        check(x["refused"] == 2 and x["finished"] == 1, "%s: %d refused, %d finished" % (name, x["refused"], x["finished"]))
check("4 GPUs, the cluster has 2" in r.stderr, "the gang's refusal lacks its reason: %r" % r.stderr)

# Lending whole GPUs: prod reserves 4 of 8 and lends half: 2 GPUs stay its
# own, whole, so another project's 8-GPU gang can never run (refused) and a
# 6-GPU one can; lending all of it, the 8-GPU gang runs.
for lend, refused in ((50, 1), (100, 0)):
    lent = write("lend%d.csv" % lend, "#project name=prod priority=100 reserve_gpus=4 lend=%d\n" % lend +
                 HEADER + "0,batch,10,70,100,8,100\n1,batch,10,70,100,6,100\n")
    x = replay_json(lent, "--gpus", "8", "--sched", "whole-none")["whole-none"]
    check(x["refused"] == refused and x["finished"] == 2 - refused, "lend=%d: %d refused, want %d"
          % (lend, x["refused"], refused))

# Host memory a node gives suspended jobs is a bound: two low jobs of 40 GiB,
# each displaced by a high one, with room for one of them: the second goes to disk.
host = write("host.csv", HEADER + "0,low,10,40,1000,1,100\n0,low,10,40,1000,1,100\n"
             "100,hi,100,40,100,1,100\n100,hi,100,40,100,1,100\n")
for cap, spilled, peak in (("50G", 1, 40 << 30), ("100G", 0, 80 << 30)):
    x = replay_json(host, "--gpus", "2", "--node-host-mem", cap, "--sched", "whole-suspend")["whole-suspend"]
    check(x["spilled"] == spilled and x["peak_suspended_host_bytes_per_node"] == peak,
          "host memory %s: %d spilled, peak %d bytes; want %d, %d"
          % (cap, x["spilled"], x["peak_suspended_host_bytes_per_node"], spilled, peak))

# Whole vs shared without preemption, on the overload scenario: packing by
# share holds fewer GPUs and does more work.
over = write("over.csv", run("--generate", "--jobs", "300", "--gpus", "16", "--scenario", "overload"))
o = replay_json(over, "--gpus", "16", "--sched", "whole-none,shared-none")
check(o["shared-none"]["busy"] < o["whole-none"]["busy"], "busy: shared %.3f, whole %.3f"
      % (o["shared-none"]["busy"], o["whole-none"]["busy"]))
check(o["shared-none"]["goodput"] > o["whole-none"]["goodput"], "goodput: shared %.3f, whole %.3f"
      % (o["shared-none"]["goodput"], o["whole-none"]["goodput"]))
# ... and with interference as bad as the job's own work, packing gains less.
o2 = replay_json(over, "--gpus", "16", "--sched", "shared-none", "--interference", "0.5")
check(o2["shared-none"]["goodput"] < o["shared-none"]["goodput"], "interference changes nothing")

# --load is whole-GPU demand, --compute-load compute demand.
for opt, word in (("--load", "whole-GPU demand 0.70"), ("--compute-load", "compute demand 0.70")):
    head = run("--generate", "--jobs", "50", opt, "0.7").splitlines()[1]
    check(word in head, "%s 0.7: %r" % (opt, head))
rep = strict(run(over, "--gpus", "16", "--json", "--sched", "whole-none"), "over")
check(1.1 < rep["load_whole"] < 1.5 and rep["load_compute"] < rep["load_whole"],
      "overload: whole %.2f, compute %.2f" % (rep["load_whole"], rep["load_compute"]))

# The text report: the axes, shipped or modelled, and the SLO verdict.
text = run(trace, "--gpus", "16")
for word in ("whole-none", "shared-suspend", "shipped", "modelled", "suspend+migrate", "meet the SLO",
             "whole-GPU demand", "compute demand", "interference"):
    check(word in text, "the report lacks %r" % word)
check(run("--version").startswith("tcgpu-replay "), "--version")

# Bad input is refused, with the file and line; no reservation is cut short.
cases = [
    ("bad.csv", "arrival_s,project,priority,mem_gib,duration_s\n0,a,1,10,100\n5,b,1,ten,100\n", "bad.csv:3"),
    ("cols.csv", HEADER + "0,a,1,10,100,17,50\n", "cols.csv:2"),
    ("proj.csv", "#project name=a reserve_gpus=x\narrival_s,project,priority,mem_gib,duration_s\n", "proj.csv:1"),
    ("head.csv", "arrival,project\n0,a\n", "head.csv:1"),
    ("wide.csv", "#project name=a reserve_gpus=65\n" + HEADER, "reserves 65 GPUs"),
]
for name, body, where in cases:
    r = run(write(name, body), ok=False)
    check(r.returncode == 1 and where in r.stderr, "%s: not refused with %s: %r" % (name, where, r.stderr))
r = run("--generate", "--gpus", "256", ok=False)
check(r.returncode == 1 and "at most 64" in r.stderr, "a 102-GPU reservation generated: %r" % r.stderr)
r = run(trace, "--sched", "whole-none,nope", ok=False)
check(r.returncode == 2 and "--sched" in r.stderr, "a bad --sched is refused: %r" % r.stderr)
for name in os.listdir(tmp):
    os.unlink(os.path.join(tmp, name))
os.rmdir(tmp)

print("ok" if not failures else "%d failures" % failures)
sys.exit(1 if failures else 0)
