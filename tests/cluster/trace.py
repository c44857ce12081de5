#!/usr/bin/env python3
"""tests/cluster/trace.py - the experiment's trace (docs/cluster.md, "The experiment").

    trace.py smoke|full [--seed S]   prints the trace, in tcgpu-replay's CSV format

Three departments on 8 simulated GPUs of 256 MiB (4 Slurm nodes of 2):
a owns 4 GPUs (nodes na, nb), b and c 2 each (nc, nd). Each keeps a
standing backlog of long low-priority jobs (priority 10) and sends short
high-priority jobs (priority 100) in bursts. A job is 1 to 4 of a GPU's 4
Slurm shards: memory shards x 64 MiB, compute 25 % a shard; a job of 4
shards is a whole GPU. Times are seconds: `full` is about 10 minutes of
arrivals, `smoke` (CI) about 30 s, fixed rather than drawn, so that it
always preempts.
"""
import argparse
import random

DEPTS = (('a', 4), ('b', 2), ('c', 2))
HI, LO = 100, 10


def row(t, dept, prio, shards, dur):
    # mem_gib: the job's partition, shards x 64 MiB of a 256 MiB GPU
    return (round(t, 1), dept, prio, shards * 0.0625, int(dur), 1, 25 * shards)


def smoke():
    # b and c fill every GPU with low jobs (borrowing a's); then a, and c,
    # want theirs back
    jobs = [row(0, d, LO, 4, 20) for d in 'bc' for _ in range(4)]
    jobs += [row(4, 'a', HI, 4, 10), row(4, 'a', HI, 2, 10), row(6, 'c', HI, 4, 8)]
    return jobs


def full(rnd):
    jobs = []
    span = 600
    for d, gpus in DEPTS:
        # the backlog: long jobs, arriving through the first 3/4 of the window
        for _ in range(3 * gpus):
            jobs.append(row(rnd.uniform(0, 0.75 * span), d, LO, rnd.choice((2, 4, 4)),
                            rnd.uniform(100, 240)))
        # bursts of 1 to 3 short urgent jobs
        t = rnd.uniform(20, 80)
        while t < span:
            for _ in range(rnd.randint(1, min(3, gpus))):
                jobs.append(row(t + rnd.uniform(0, 3), d, HI, rnd.choice((2, 4)),
                                rnd.uniform(20, 60)))
            t += rnd.expovariate(1 / (150 / gpus ** 0.5))
    return jobs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('scale', choices=('smoke', 'full'))
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()
    jobs = smoke() if a.scale == 'smoke' else full(random.Random(a.seed))
    jobs.sort(key=lambda j: j[0])
    print(f'# tests/cluster/trace.py {a.scale} --seed {a.seed}')
    for d, gpus in DEPTS:
        print(f'#project name={d} priority=10 reserve_gpus={gpus}')
    print('arrival_s,project,priority,mem_gib,duration_s,gpus,compute_pct')
    for j in jobs:
        print(','.join(str(x) for x in j))


main()
