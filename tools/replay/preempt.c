/*
 * preempt.c - a preemption carried out as the scheduler's mechanism would,
 * at the engine's costs (docs/engine.md, "Cost model"; parameters printed
 * with every report):
 *
 *   kill      Slurm/Kueue without tcgpu: the victim dies; it restarts from
 *             its own last checkpoint (--app-ckpt) after the requeue delay
 *             and its start-up (--restart). The work since is lost.
 *   save      Slurm REQUEUE with tcgpu-slurm: gpuckpt save writes the
 *             victim's device and host memory to disk, it is requeued and
 *             restored (read back) wherever it is placed next.
 *   suspend   Slurm SUSPEND with tcgpu freeing the GPU (or tcgpud): device
 *             memory to the node's host memory, resumed in place. A node
 *             gives suspended jobs at most --node-host-mem: one that does
 *             not fit goes to disk at the disk's speed (and back from it).
 *   migrate   suspend; one suspended longer than --migrate-after while GPUs
 *             are free elsewhere is written out, requeued and restored there.
 */
#include <math.h>

#include "sim.h"

static void count_preemption(struct sim *s, size_t i)
{
    s->js[i].preemptions++;
    s->preemptions++;
}

static double image_bytes(const struct sim *s, size_t i)
{
    return sim_job(s, i)->mem + s->o->host_bytes;
}

static int node_of(const struct sim *s, size_t i, int k)
{
    const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
    int dev = pj && pj->device >= 0 ? pj->device : 0;

    return (s->first_gpu + dev) / s->o->gpus_per_node;
}

/* Task k of job i goes to its node's host memory if that has room, else to disk. */
static void host_take(struct sim *s, size_t i, int k)
{
    struct task *tk = &s->js[i].task[k];
    int n = node_of(s, i, k);
    double m = sim_job(s, i)->mem;

    tk->on_disk = s->node_host[n] + m > s->o->node_host_bytes;
    if (tk->on_disk) {
        s->spilled++;
        return;
    }
    tk->node = n;
    s->node_host[n] += m;
    if (s->node_host[n] > s->peak_host)
        s->peak_host = s->node_host[n];
}

static void host_release(struct sim *s, size_t i, int k)
{
    struct task *tk = &s->js[i].task[k];

    if (tk->node >= 0)
        s->node_host[tk->node] -= sim_job(s, i)->mem;
    tk->node = -1;
    tk->on_disk = 0;
}

/* kill (or a save done): the job is out of the policy until requeued. */
static void requeue(struct sim *s, size_t i, double delay)
{
    struct jstate *st = &s->js[i];

    for (int k = 0; k < sim_job(s, i)->gpus; k++) {
        const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
        if (pj && pj->state == POL_SUSPENDING)
            policy_job_suspended(s->p, TASK_ID(i, k), 0, sim_ns(s->t), &s->acts);
        st->task[k].op = OP_NONE;
        host_release(s, i, k);
    }
    sim_leave_policy(s, i);
    s->requeued++;
    st->redo = 0;
    st->phase = PH_REQUEUED;
    st->phase_end = s->t + delay;
}

/* The victim dies now; it restarts from its last own checkpoint. */
static void kill_job(struct sim *s, size_t i)
{
    const struct rjob *j = sim_job(s, i);
    struct jstate *st = &s->js[i];
    double done = j->dur - st->remaining, kept = 0;

    if (s->o->app_ckpt_s > 0)
        kept = floor(done / s->o->app_ckpt_s) * s->o->app_ckpt_s;
    if (st->phase == PH_RUN) {
        st->remaining = j->dur - kept;
        s->lost += (done - kept) * j->gpus * (j->compute / 1000.0);
    }
    requeue(s, i, s->o->requeue_s);
    st->restore = 0;
}

static void save_job(struct sim *s, size_t i)
{
    struct jstate *st = &s->js[i];

    if (st->phase == PH_SAVING)
        return;
    count_preemption(s, i);
    st->phase = PH_SAVING;
    st->phase_end = s->t + s->o->fixed_s + image_bytes(s, i) / s->o->disk_write_bps;
    s->overhead += (st->phase_end - s->t) * sim_job(s, i)->gpus;
}

static void suspend_task(struct sim *s, size_t i, int k)
{
    const struct rjob *j = sim_job(s, i);
    struct jstate *st = &s->js[i];
    int first = 1;

    for (int t = 0; t < j->gpus; t++)
        first &= st->task[t].op != OP_SUSPEND;
    if (first)
        count_preemption(s, i);
    host_take(s, i, k);
    st->task[k].op = OP_SUSPEND;
    st->task[k].op_done = s->t + s->o->fixed_s +
                          j->mem / (st->task[k].on_disk ? s->o->disk_write_bps : s->o->suspend_bps);
    s->overhead += st->task[k].op_done - s->t;
}

void preempt_victim(struct sim *s, size_t i, int k)
{
    switch (s->sd->preempt) {
    case PR_KILL:
        count_preemption(s, i);
        kill_job(s, i);
        break;
    case PR_SAVE:
        save_job(s, i);
        break;
    default:                      /* PR_SUSPEND, PR_MIGRATE (PR_NONE: the policy never asks) */
        suspend_task(s, i, k);
        break;
    }
}

void preempt_resume(struct sim *s, size_t i, int k)
{
    struct task *tk = &s->js[i].task[k];
    double bps = tk->on_disk ? s->o->disk_read_bps : s->o->resume_bps;

    tk->op = OP_RESUME;
    tk->op_done = s->t + s->o->fixed_s + sim_job(s, i)->mem / bps;
    s->overhead += tk->op_done - s->t;
}

void preempt_op_done(struct sim *s, size_t i, int k)
{
    struct task *tk = &s->js[i].task[k];
    enum op op = tk->op;

    tk->op = OP_NONE;
    if (op == OP_SUSPEND) {
        policy_job_suspended(s->p, TASK_ID(i, k), 0, sim_ns(s->t), &s->acts);
        return;
    }
    host_release(s, i, k);
    policy_job_resumed(s->p, TASK_ID(i, k), 0, sim_ns(s->t), &s->acts);
}

void preempt_saved(struct sim *s, size_t i)
{
    requeue(s, i, s->o->requeue_s);     /* saved: nothing lost, out until requeued */
    s->js[i].restore = 1;
}

/* Runs again: a killed job restarts, a saved one is restored first. */
void preempt_granted(struct sim *s, size_t i)
{
    struct jstate *st = &s->js[i];

    if (s->sd->preempt == PR_KILL && st->max_done > 0)
        st->redo = s->o->restart_s;
    if (st->restore) {
        st->redo = s->o->fixed_s + image_bytes(s, i) / s->o->disk_read_bps;
        st->restore = 0;
    }
    s->overhead += st->redo * sim_job(s, i)->gpus;
}

/* Is every task of job i suspended by the policy, for longer than the
 * migration delay, and would the job fit on GPUs now free of others? */
static int should_migrate(const struct sim *s, size_t i)
{
    const struct rjob *j = sim_job(s, i);
    uint64_t bytes = sim_need_bytes(s, i);
    unsigned compute = sim_need_compute(s, i);
    int fit = 0;

    if (s->js[i].phase != PH_RUN)
        return 0;
    for (int k = 0; k < j->gpus; k++) {
        const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
        if (!pj || pj->state != POL_SUSPENDED || pj->req != POL_REQ_NONE ||
            pj->suspended_by != POL_BY_POLICY ||
            s->t - (double)pj->queued_ns / 1e9 < s->o->migrate_s)
            return 0;
    }
    for (int d = 0; d < s->ngpus && fit < j->gpus; d++)
        fit += policy_room(s->p, j->project, d) >= bytes &&
               policy_device_compute(s->p, d) + compute <= POL_COMPUTE_FULL;
    return fit >= j->gpus;
}

/* Its image (in host memory, or on disk) is written out, the job requeued,
 * and restored from the image where it is placed next. */
static void migrate(struct sim *s, size_t i)
{
    requeue(s, i, s->o->fixed_s + image_bytes(s, i) / s->o->disk_write_bps + s->o->requeue_s);
    s->js[i].restore = 1;
    s->migrations++;
}

void preempt_migrations(struct sim *s)
{
    if (s->sd->preempt != PR_MIGRATE || s->o->migrate_s <= 0)
        return;
    for (size_t a = 0; a < s->nact; a++)
        if (should_migrate(s, s->act[a]))
            migrate(s, s->act[a]);
}
