/*
 * sched.c - the schedulers compared: each a placement (whole GPUs, or GPUs
 * shared by memory and compute share) and a preemption (none, kill, save,
 * suspend, suspend+migrate). Every one gets the same policy otherwise
 * (priorities, backfill, the departments' reservations with whole-GPU
 * lending), so a difference between two rows is the axis that differs
 * (docs/replay.md, "The schedulers").
 *
 * A third axis is who chooses victims: tcgpud's policy (reservations with
 * lending, reclaim, fair share, any GPU for a high-priority job), or Slurm's
 * preempt/partition_prio as the cluster suite configures it (`slurm-*`
 * rows: each department's partition of its own nodes for its high-priority
 * jobs, every other job in a low-tier partition over all nodes, a higher
 * tier preempting a lower only; docs/cluster.md).
 *
 * `shipped` says whether this tree ships what the row needs, on Slurm
 * (tests/slurm, tests/cluster): whole GPUs (gres/gpu) or Slurm's shards
 * (gres/shard, held to their share by tcgpu-slurm), and REQUEUE with
 * tcgpu-slurm's save and restore, victims chosen by Slurm. Not Slurm's
 * SUSPEND preemption: Slurm keeps a suspended job's GRES, so it never hands
 * a GPU over (slurm-suspend-preempt-gres); tcgpud suspends only within one
 * node. The rows whose victims tcgpud's policy chooses across the cluster
 * are modelled, and so is everything else.
 */
#include <stdlib.h>
#include <string.h>

#include "replay.h"

const struct sched_def sched_table[] = {
    /* name, title, placement, preemption, static, shipped, slurm */
    { "static-whole", "static ownership per department (no preemption)", PL_WHOLE, PR_NONE, 1, 0, 0 },
    { "static-shared", "static ownership per department, GPUs shared inside", PL_SHARED, PR_NONE, 1, 0,
      0 },
    { "whole-none", "Slurm-style backfill, no preemption", PL_WHOLE, PR_NONE, 0, 0, 0 },
    { "whole-kill", "Kueue-style preemption that kills and requeues", PL_WHOLE, PR_KILL, 0, 0, 0 },
    { "whole-save", "save/restore preemption, tcgpud's policy cluster-wide", PL_WHOLE, PR_SAVE, 0, 0,
      0 },
    { "whole-suspend", "whole GPUs, suspend in place, tcgpu frees the GPU", PL_WHOLE, PR_SUSPEND, 0, 0,
      0 },
    { "whole-migrate", "whole GPUs, suspend, move by save/restore", PL_WHOLE, PR_MIGRATE, 0, 0, 0 },
    { "slurm-whole-kill", "Slurm partition_prio, REQUEUE that kills", PL_WHOLE, PR_KILL, 0, 0, 1 },
    { "slurm-whole-save", "tcgpu as it ships: Slurm partition_prio, REQUEUE + tcgpu-slurm "
      "save/restore", PL_WHOLE, PR_SAVE, 0, 1, 1 },
    { "shared-none", "shared-GPU pool, no preemption (Slurm shards; HAMi/MIG/MPS-like)", PL_SHARED,
      PR_NONE, 0, 1, 0 },
    { "shared-kill", "shared pool, preemption that kills", PL_SHARED, PR_KILL, 0, 0, 0 },
    { "shared-save", "shared pool, save/restore preemption, tcgpud's policy cluster-wide", PL_SHARED,
      PR_SAVE, 0, 0, 0 },
    { "shared-suspend", "shared pool, suspend in place", PL_SHARED, PR_SUSPEND, 0, 0, 0 },
    { "shared-migrate", "cluster-wide tcgpud (the old replay's model)", PL_SHARED, PR_MIGRATE, 0, 0,
      0 },
    { "slurm-shared-kill", "Slurm partition_prio with shards, REQUEUE that kills", PL_SHARED, PR_KILL,
      0, 0, 1 },
    { "slurm-shared-save", "tcgpu as it ships: Slurm partition_prio, shards, REQUEUE + tcgpu-slurm "
      "save/restore", PL_SHARED, PR_SAVE, 0, 1, 1 },
};
const size_t sched_count = sizeof(sched_table) / sizeof(sched_table[0]);

_Static_assert(sizeof(sched_table) / sizeof(sched_table[0]) <= SCHED_MAX, "SCHED_MAX");

const char *placement_name(enum placement p)
{
    return p == PL_SHARED ? "shared" : "whole";
}

const char *victims_name(const struct sched_def *s)
{
    return s->slurm ? "partition_prio" : "tcgpud";
}

const char *preempt_name(enum preempt p)
{
    static const char *const n[] = { "none", "kill", "save", "suspend", "suspend+migrate" };
    return (unsigned)p < PR_COUNT ? n[p] : "?";
}

int sched_parse(const char *list, unsigned *mask)
{
    char *copy = strdup(list), *save = NULL;
    int r = 0;

    *mask = 0;
    for (char *t = strtok_r(copy, ",", &save); t && copy; t = strtok_r(NULL, ",", &save)) {
        size_t s;
        for (s = 0; s < sched_count && strcmp(t, sched_table[s].name); s++)
            ;
        if (s == sched_count)
            r = -1;
        else
            *mask |= 1u << s;
    }
    free(copy);
    return !copy || !*mask ? -1 : r;
}
