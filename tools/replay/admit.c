/*
 * admit.c - a job that can never be placed is refused when it arrives, with
 * the reason, instead of waiting forever (it used to stop the replay:
 * "job 7 (76 GiB x 8) never finished: stuck").
 *
 * "Never" is measured on the empty cluster of this run: on how many GPUs
 * could the job's project ever get what one task asks for (its memory, or
 * the whole GPU), the parts of reservations other projects never lend kept
 * out. A gang needs that many distinct GPUs. A static scheduler's run is
 * one department's GPUs, so a job larger than its department is refused
 * there, as a static partition refuses it; so is, under a slurm scheduler,
 * a high-priority job larger than its department's partition.
 */
#include <stdlib.h>

#include "sim.h"

/* Before any job: the room each project has on each GPU of the run. */
int admit_prepare(struct sim *s)
{
    int np = policy_project_count(s->p);

    s->room0 = malloc((size_t)np * (size_t)s->ngpus * sizeof(*s->room0));
    if (!s->room0)
        return -1;
    for (int q = 0; q < np; q++)
        for (int d = 0; d < s->ngpus; d++)
            s->room0[(size_t)q * (size_t)s->ngpus + (size_t)d] = policy_room(s->p, q, d);
    return 0;
}

int admit_never(const struct sim *s, size_t i, char *why, size_t len)
{
    const struct rjob *j = sim_job(s, i);
    uint64_t need = sim_need_bytes(s, i);
    const uint64_t *room = s->room0 + (size_t)j->project * (size_t)s->ngpus;
    int fit = 0, first, count;

    if (j->mem > (double)s->o->gpu_mem) {
        snprintf(why, len, "%.0f GiB per GPU, a GPU has %.0f GiB", j->mem / GiB,
                 (double)s->o->gpu_mem / GiB);
        return 1;
    }
    if (j->gpus > s->ngpus) {
        snprintf(why, len, "%d GPUs, %s has %d", j->gpus, s->sd->statik ? "its department" : "the cluster",
                 s->ngpus);
        return 1;
    }
    sim_partition_of(s, i, &first, &count);
    for (int d = 0; d < s->ngpus; d++)
        fit += room[d] >= need && (!count || (d >= first && d < first + count));
    if (fit >= j->gpus)
        return 0;
    snprintf(why, len, "%d GPUs of %.0f GiB: only %d can ever hold that for project %s "
             "(the rest of what others reserve is not lent)", j->gpus, (double)need / GiB, fit,
             s->tr->proj[j->project].name);
    return 1;
}
