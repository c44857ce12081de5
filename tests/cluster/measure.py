#!/usr/bin/env python3
"""tests/cluster/measure.py - the experiment's figures (tests/cluster/run.sh).

From what run.sh kept of each policy's run (RUNS/runs-POLICY: the submit
times, one squeue poll a second, the jobs' logs) and tcgpu-replay's JSON on
the same trace, the measured and the predicted figures side by side, as JSON
and as a markdown table. Exits 1 when a job did not complete or did not end
with the checksum of an uninterrupted run (each one named).

Definitions (those of tcgpu-replay, docs/replay.md, "The metrics"):
  work      a job's duration x its share of a GPU (shards / 4): GPU-seconds
  held      a run's time on its GPU x the share it holds (a whole GPU under
            static); a run is from its batch script's start (its log) to the
            first poll that no longer sees it running (its end, for the last)
  goodput   work done inside the arrival window (first to last arrival) /
            (8 GPUs x the window), each piece of a job's work counted once, when
            it was first done (a run goes on from where the last one stopped
            when restored, from step 0 otherwise), of the jobs that ended with
            the right checksum
  busy      held inside the window / (8 x the window): the share of GPUs held
            (the replay's busy counts a GPU with any job on it as busy, which
            is more under shards: which GPU a shard job had is not polled)
  lost      held by runs whose work was thrown away (a killed run restarts from
            step 0; under tcgpu, a run whose successor was not restored; every
            run of a job that did not end with the right checksum)
  hi wait   submit -> first start of the high-priority jobs (p50 / p95 / max)
  requeue gap  a preempted run's end -> the next run's start (the replay's
            --requeue-delay)
"""
import argparse
import json
import os
import re
import statistics
import sys

GPUS = 8
REPLAY_NAME = {'static': 'static-whole', 'shared': 'shared-none', 'kill': 'slurm-shared-kill',
               'tcgpu': 'slurm-shared-save'}
FINAL = ('COMPLETED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'OUT_OF_MEMORY')


def load_trace(path):
    jobs = []
    for line in open(path):
        if line.startswith('#') or line.startswith('arrival_s'):
            continue
        at, dept, prio, mem, dur, gpus, pct = line.strip().split(',')
        jobs.append({'arrival': float(at), 'dept': dept, 'prio': int(prio),
                     'shards': int(pct) // 25, 'dur': float(dur)})
    return jobs


def load_refs(path):
    refs = {}
    for line in open(path):
        mb, steps, ck = line.split()
        refs[(int(mb), int(steps))] = ck
    return refs


def quantile(v, q):
    v = sorted(v)
    return v[int(q * (len(v) - 1) + 0.5)] if v else 0.0


def overlap(a, b, w0, w1):
    return max(0.0, min(b, w1) - max(a, w0))


def job_runs(log, polls):
    """[(start, end)] of a job's runs: starts from its log, ends from the polls."""
    starts = [float(x) for x in re.findall(r'^cluster: run start ([0-9.]+)', log, re.M)]
    ends = [float(x) for x in re.findall(r'^cluster: run end ([0-9.]+)', log, re.M)]
    runs = []
    for k, s in enumerate(starts):
        nxt = starts[k + 1] if k + 1 < len(starts) else float('inf')
        # the first poll after the start that does not see the job running
        gone = [t for t, st in polls if s < t < nxt and st != 'RUNNING']
        e = min(gone) if gone else None
        if k + 1 == len(starts) and ends:
            e = ends[-1] if e is None else min(e, ends[-1])
        runs.append((s, e if e is not None else s))
    return runs


def first_done(runs, restored, dur, w0, w1):
    """Seconds of a job's work first done inside [w0, w1] (tcgpu-replay's way)."""
    done_max = pos = inside = 0.0
    for s, e in runs:
        start = pos if restored else 0.0
        pos = min(start + (e - s), dur)
        if pos > done_max:
            inside += overlap(s + max(0.0, done_max - start), s + (pos - start), w0, w1)
            done_max = pos
    return inside


def measure_policy(pol, d, trace, refs, slo):
    t0 = float(open(os.path.join(d, 't0')).read())
    submitted = {}
    for line in open(os.path.join(d, 'submitted')):
        i, jid, ts = line.split()
        submitted[int(i)] = (jid, float(ts))
    polls = {}
    for line in open(os.path.join(d, 'poll')):
        t, name, jid, state = line.strip().split('|')[:4]
        polls.setdefault(int(name.split('-')[1]), []).append((float(t), state))
    w0, w1 = t0 + min(j['arrival'] for j in trace), t0 + max(j['arrival'] for j in trace)
    errors, rows = [], []
    work_in = held_in = held_all = lost = 0.0
    hi_wait, done_at, gaps = [], [], []
    jct = {}
    for i, j in enumerate(trace):
        log = open(os.path.join(d, f'job{i}.out'), errors='replace').read()
        states = polls.get(i, [])
        final = states[-1][1] if states else 'never seen'
        runs = job_runs(log, states)
        frac = 1.0 if pol == 'static' else j['shards'] / 4
        mb, steps = 16 * j['shards'], int(j['dur'] * 10)
        got = re.findall(r'^rank 0 checksum: (\S+)', log, re.M)
        want = refs[(mb, steps)]
        if final != 'COMPLETED':
            errors.append(f'{pol}: job {i} ({submitted[i][0]}) ended {final}')
        elif not got or got[-1] != want:
            errors.append(f'{pol}: job {i} ({submitted[i][0]}) checksum {got[-1] if got else "none"}, '
                          f'uninterrupted {want}')
        restores = len(re.findall(r'restored from its save', log))
        restored = restores == len(runs) - 1
        ok = final == 'COMPLETED' and bool(got) and got[-1] == want
        if pol == 'tcgpu' and len(runs) > 1 and not restored:
            errors.append(f'{pol}: job {i} ({submitted[i][0]}) ran {len(runs)} times, '
                          f'restored {restores} times')
        if not ok:
            # a job that failed: everything it held
            lost += sum(e - s for s, e in runs) * frac
        elif not restored:
            # started again from step 0: every run but the last was thrown away
            lost += sum(e - s for s, e in runs[:-1]) * frac
        held_all += sum(e - s for s, e in runs) * frac
        gaps += [runs[k + 1][0] - runs[k][1] for k in range(len(runs) - 1)]
        held_in += sum(overlap(s, e, w0, w1) for s, e in runs) * frac
        if ok:
            work_in += first_done(runs, restored, j['dur'], w0, w1) * j['shards'] / 4
        sub = submitted[i][1]
        if runs:
            if j['prio'] >= 100:
                hi_wait.append(runs[0][0] - sub)
            jct.setdefault(j['prio'], []).append(runs[-1][1] - sub)
            done_at.append(runs[-1][1])
        rows.append({'job': i, 'slurm_id': submitted[i][0], 'dept': j['dept'], 'priority': j['prio'],
                     'shards': j['shards'], 'duration_s': j['dur'], 'state': final,
                     'runs': len(runs), 'restores': restores,
                     'wait_s': round(runs[0][0] - sub, 2) if runs else None,
                     'completion_s': round(runs[-1][1] - sub, 2) if runs else None,
                     'checksum_ok': bool(got) and got[-1] == want})
    cap = GPUS * (w1 - w0)
    res = {
        'goodput': work_in / cap if cap > 0 else 0, 'busy': held_in / cap if cap > 0 else 0,
        'held_gpu_s': held_all, 'work_gpu_s': sum(j['dur'] * j['shards'] / 4 for j in trace),
        'lost_gpu_s': lost, 'preemptions': sum(r['runs'] - 1 for r in rows),
        'requeue_gap_p50_s': quantile(gaps, 0.5),
        'hi_wait_p50_s': quantile(hi_wait, 0.5), 'hi_wait_p95_s': quantile(hi_wait, 0.95),
        'hi_wait_max_s': max(hi_wait, default=0),
        'slo_met': sum(w <= slo for w in hi_wait) / len(hi_wait) if hi_wait else 1,
        'makespan_s': max(done_at, default=t0) - t0,
        'completion': [{'priority': p, 'p50_s': quantile(v, 0.5), 'p95_s': quantile(v, 0.95)}
                       for p, v in sorted(jct.items(), reverse=True)],
        'checksums_ok': sum(r['checksum_ok'] for r in rows), 'jobs': len(rows), 'per_job': rows}
    return res, errors


def predicted(replay, pol):
    for s in replay['schedulers']:
        if s['name'] == REPLAY_NAME[pol]:
            return s
    return None


def pct(x):
    return f'{100 * x:.1f} %'


def markdown(meas, replay, scale, slo):
    lines = [f'| policy | replay scheduler | goodput | busy | lost GPU-s | preemptions | '
             f'hi wait p50 / p95 | hi on GPU within {slo:g} s | completion p50 hi / lo | last job ends | '
             f'checksums |',
             '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for pol, m in meas.items():
        p = predicted(replay, pol)
        c = {x['priority']: x['p50_s'] for x in m['completion']}
        pc = {x['priority']: x['p50_s'] for x in p['completion']} if p else {}
        lines.append(
            f"| {pol} measured | | {pct(m['goodput'])} | {pct(m['busy'])} | {m['lost_gpu_s']:.0f} | "
            f"{m['preemptions']} | {m['hi_wait_p50_s']:.1f} / {m['hi_wait_p95_s']:.1f} s | "
            f"{pct(m['slo_met'])} | {c.get(100, 0):.0f} / {c.get(10, 0):.0f} s | {m['makespan_s']:.0f} s | "
            f"{m['checksums_ok']} of {m['jobs']} |")
        if p:
            lines.append(
                f"| {pol} predicted | {p['name']} | {pct(p['goodput'])} | {pct(p['busy'])} | "
                f"{3600 * p['lost_gpu_hours']:.0f} | {p['preemptions']} | "
                f"{p['hi_wait_p50_s']:.1f} / {p['hi_wait_p95_s']:.1f} s | {pct(p['slo_met'])} | "
                f"{pc.get(100, 0):.0f} / {pc.get(10, 0):.0f} s | {p['makespan_s']:.0f} s | |")
    return '\n'.join(lines) + '\n'


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--trace', required=True)
    ap.add_argument('--refs', required=True)
    ap.add_argument('--runs', required=True)
    ap.add_argument('--replay', required=True)
    ap.add_argument('--slo', type=float, default=15)
    ap.add_argument('--scale', default='')
    ap.add_argument('--json', required=True)
    ap.add_argument('--md', required=True)
    ap.add_argument('--expect-preemption', action='store_true',
                    help='kill and tcgpu must have preempted (the smoke trace is made to)')
    ap.add_argument('policies', nargs='+')
    a = ap.parse_args()
    trace, refs = load_trace(a.trace), load_refs(a.refs)
    replay = json.load(open(a.replay))
    meas, errors = {}, []
    for pol in a.policies:
        meas[pol], e = measure_policy(pol, os.path.join(a.runs, f'runs-{pol}'), trace, refs, a.slo)
        errors += e
        if a.expect_preemption and pol in ('kill', 'tcgpu') and not meas[pol]['preemptions']:
            errors.append(f'{pol}: nothing was preempted')
    out = {'scale': a.scale, 'gpus': GPUS, 'jobs': len(trace), 'slo_s': a.slo,
           'measured': meas,
           'predicted': {pol: predicted(replay, pol) for pol in a.policies},
           'replay_costs': replay.get('costs')}
    with open(a.json, 'w') as f:
        json.dump(out, f, indent=1)
    with open(a.md, 'w') as f:
        f.write(markdown(meas, replay, a.scale, a.slo))
    for e in errors:
        print('FAIL: ' + e, file=sys.stderr)
    return 1 if errors else 0


sys.exit(main())
