/*
 * sched.c - the schedulers compared: each a placement (whole GPUs, or GPUs
 * shared by memory and compute share) and a preemption (none, kill, save,
 * suspend, suspend+migrate). Every one gets the same policy otherwise
 * (priorities, backfill, the departments' reservations with whole-GPU
 * lending), so a difference between two rows is the axis that differs
 * (docs/replay.md, "The schedulers").
 *
 * `shipped` says whether this tree ships what the row needs, on Slurm
 * (tests/slurm, tests/cluster): whole GPUs (gres/gpu) or Slurm's shards
 * (gres/shard, held to their share by tcgpu-slurm), and REQUEUE with
 * tcgpu-slurm's save and restore. Not Slurm's SUSPEND preemption: Slurm
 * keeps a suspended job's GRES, so it never hands a GPU over
 * (slurm-suspend-preempt-gres); tcgpud suspends only within one node.
 * Everything else is modelled.
 */
#include <stdlib.h>
#include <string.h>

#include "replay.h"

const struct sched_def sched_table[] = {
    { "static-whole", "static ownership per department (no preemption)", PL_WHOLE, PR_NONE, 1, 0 },
    { "static-shared", "static ownership per department, GPUs shared inside", PL_SHARED, PR_NONE, 1, 0 },
    { "whole-none", "Slurm-style backfill, no preemption", PL_WHOLE, PR_NONE, 0, 0 },
    { "whole-kill", "Slurm/Kueue preemption that kills and requeues", PL_WHOLE, PR_KILL, 0, 0 },
    { "whole-save", "tcgpu as it ships: Slurm REQUEUE + tcgpu-slurm save/restore", PL_WHOLE, PR_SAVE,
      0, 1 },
    { "whole-suspend", "whole GPUs, suspend in place, tcgpu frees the GPU", PL_WHOLE, PR_SUSPEND,
      0, 0 },
    { "whole-migrate", "whole GPUs, suspend, move by save/restore", PL_WHOLE, PR_MIGRATE, 0, 0 },
    { "shared-none", "shared-GPU pool, no preemption (Slurm shards; HAMi/MIG/MPS-like)", PL_SHARED,
      PR_NONE, 0, 1 },
    { "shared-kill", "shared pool, preemption that kills", PL_SHARED, PR_KILL, 0, 0 },
    { "shared-save", "tcgpu as it ships: Slurm shards, REQUEUE + tcgpu-slurm save/restore",
      PL_SHARED, PR_SAVE, 0, 1 },
    { "shared-suspend", "shared pool, suspend in place", PL_SHARED, PR_SUSPEND, 0, 0 },
    { "shared-migrate", "cluster-wide tcgpud (the old replay's model)", PL_SHARED, PR_MIGRATE, 0, 0 },
};
const size_t sched_count = sizeof(sched_table) / sizeof(sched_table[0]);

_Static_assert(sizeof(sched_table) / sizeof(sched_table[0]) <= SCHED_MAX, "SCHED_MAX");

const char *placement_name(enum placement p)
{
    return p == PL_SHARED ? "shared" : "whole";
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
