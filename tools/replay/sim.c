/*
 * sim.c - one scheduler over one trace: an event loop around the policy.
 *
 * Every scheduler is the policy module (lib/policy) with the same
 * decisions (priorities, backfill, the departments' reservations with
 * whole-GPU lending), differing only in its two axes (sched.c):
 *
 *   placement   whole: a job asks for whole GPUs (all of a GPU's memory and
 *               compute); shared: for its memory and compute share, and
 *               jobs on one GPU slow each other by --interference.
 *   preemption  none: the policy never suspends; otherwise what the policy
 *               asks to suspend is killed, saved, suspended in place or
 *               suspended and later moved (preempt.c).
 *
 * A static scheduler runs each department alone on the GPUs it owns. A
 * slurm one gives the policy no reservations: a department's GPUs are the
 * partition of its high-priority jobs (pol_job_spec.dev_first/dev_count),
 * and only high-priority jobs preempt, only others (pol_config.partition_prio,
 * tier_priority), as Slurm's preempt/partition_prio with the cluster
 * suite's partitions: tier 10 for the owners' high-priority jobs, tier 1
 * for everything else.
 * A job progresses only when every one of its tasks is granted and none is
 * being suspended or resumed; a job's tasks are one gang.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "common/log.h"

uint64_t sim_ns(double t)
{
    return (uint64_t)(t * 1e9 + 0.5);
}

uint64_t sim_need_bytes(const struct sim *s, size_t i)
{
    return s->sd->placement == PL_WHOLE ? s->o->gpu_mem : (uint64_t)sim_job(s, i)->mem;
}

unsigned sim_need_compute(const struct sim *s, size_t i)
{
    return s->sd->placement == PL_WHOLE ? POL_COMPUTE_FULL : sim_job(s, i)->compute;
}

/* ---------------------------------------------------------------------------
 * The policy as every scheduler configures it
 * ------------------------------------------------------------------------- */

/* The departments' reservations (none when each owns its GPUs outright):
 * whole GPUs, lent whole (Kueue's lendingLimit), as many as the policy may
 * hold; a larger one was refused when the run began (admit.c). */
static int add_projects(struct sim *s)
{
    const struct trace *tr = s->tr;

    for (int k = 0; k < tr->nproj; k++) {
        const struct rproject *rp = &tr->proj[k];
        struct pol_project pr = { .priority = rp->priority, .may_borrow = 1, .weight = rp->weight };
        snprintf(pr.name, sizeof(pr.name), "%s", rp->name);
        if (!s->sd->statik && !s->sd->slurm) {
            snprintf(pr.cohort, sizeof(pr.cohort), "%s", rp->cohort);
            for (int g = 0; g < rp->reserve_gpus; g++) {
                pr.reserve[pr.nreserve].device = rp->first_gpu + g;
                pr.reserve[pr.nreserve].bytes = s->o->gpu_mem;
                pr.nreserve++;
            }
            if (rp->lend_pct < 100) {
                pr.quota_flags |= POL_Q_LENDING_LIMIT | POL_Q_LEND_WHOLE;
                pr.lend_pct = rp->lend_pct;
            }
        }
        if (policy_add_project(s->p, &pr) < 0)
            return -1;
    }
    return 0;
}

static struct pol_config config_of(const struct sim *s)
{
    struct pol_config c = { .min_runtime_ns = s->o->min_runtime_ns, .resume_retry_ns = sim_ns(1),
                            .backfill = 1 };

    c.no_preemption = s->sd->preempt == PR_NONE;
    c.pack_compute = s->sd->placement == PL_SHARED;
    c.partition_prio = s->sd->slurm;
    c.tier_priority = s->hi;
    return c;
}

/* ---------------------------------------------------------------------------
 * Jobs entering and leaving the policy
 * ------------------------------------------------------------------------- */

/* Slurm: a high-priority job of a department that owns GPUs runs in its
 * department's partition (those GPUs); every other job borrows anywhere. */
void sim_partition_of(const struct sim *s, size_t i, int *first, int *count)
{
    const struct rjob *j = sim_job(s, i);
    const struct rproject *rp = &s->tr->proj[j->project];

    *first = *count = 0;
    if (s->sd->slurm && j->prio >= s->hi && rp->reserve_gpus > 0) {
        *first = rp->first_gpu;
        *count = rp->reserve_gpus;
    }
}

int sim_enter_policy(struct sim *s, size_t i)
{
    const struct rjob *j = sim_job(s, i);
    struct jstate *st = &s->js[i];
    uint64_t now = sim_ns(s->t), bytes = sim_need_bytes(s, i);
    int first, count;

    st->phase = PH_QUEUED;
    st->granted = 0;
    sim_partition_of(s, i, &first, &count);
    for (int k = 0; k < j->gpus; k++) {
        struct pol_job_spec spec = {
            .id = TASK_ID(i, k), .project = j->project, .priority = j->prio,
            .device = POL_DEVICE_ANY, .dev_first = first, .dev_count = count,
            .state = POL_RUNNING, .compute = sim_need_compute(s, i),
            .gang = j->gpus > 1 ? i + 1 : 0,
        };
        if (policy_admit(s->p, &spec, now) < 0)
            return -1;
    }
    for (int k = 0; k < j->gpus; k++)
        if (policy_request(s->p, TASK_ID(i, k), POL_DEVICE_ANY, bytes, POL_FREE_UNKNOWN, 1, now,
                           &s->acts) < 0)
            return -1;
    return 0;
}

void sim_leave_policy(struct sim *s, size_t i)
{
    for (int k = 0; k < sim_job(s, i)->gpus; k++)
        policy_job_exited(s->p, TASK_ID(i, k), sim_ns(s->t), &s->acts);
}

static void finish(struct sim *s, size_t i)
{
    s->js[i].phase = PH_DONE;
    s->js[i].finish = s->t;
    sim_leave_policy(s, i);
}

/* ---------------------------------------------------------------------------
 * Carrying out the actions
 * ------------------------------------------------------------------------- */

static void granted(struct sim *s, size_t i)
{
    struct jstate *st = &s->js[i];

    if (++st->granted < sim_job(s, i)->gpus)
        return;
    st->phase = PH_RUN;
    if (st->start < 0)
        st->start = s->t;
    preempt_granted(s, i);
}

static void apply(struct sim *s)
{
    for (size_t n = 0; n < s->acts.n; n++) {
        struct pol_action a = s->acts.v[n];      /* the list may grow while we act */
        size_t i = JOB_OF(a.job);
        int k = TASK_OF(a.job);
        struct jstate *st = &s->js[i];
        if (st->phase == PH_DONE || st->phase == PH_REQUEUED)
            continue;
        switch (a.kind) {
        case POL_ACT_GRANT:
            granted(s, i);
            break;
        case POL_ACT_SUSPEND:
            preempt_victim(s, i, k);
            break;
        case POL_ACT_RESUME:
            preempt_resume(s, i, k);
            break;
        case POL_ACT_DENY:
            /* admission refused what can never fit: a denial is a bug */
            log_err("%s: job %zu denied at t=%.1f s", s->sd->name, i + 1, s->t);
            st->refused = 1;
            finish(s, i);
            break;
        case POL_ACT_WAIT:
            break;
        }
    }
    pol_actions_clear(&s->acts);
}

/* ---------------------------------------------------------------------------
 * Time
 * ------------------------------------------------------------------------- */

/* Is job i running its tasks now (every task granted, running, no operation)? */
static int progressing(const struct sim *s, size_t i)
{
    const struct jstate *st = &s->js[i];

    if (st->phase != PH_RUN)
        return 0;
    for (int k = 0; k < sim_job(s, i)->gpus; k++) {
        const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
        if (st->task[k].op != OP_NONE || !pj || pj->state != POL_RUNNING)
            return 0;
    }
    return 1;
}

/* How many progressing tasks each GPU has now: a job sharing a GPU with
 * another one runs slower (--interference). */
static void count_residents(struct sim *s)
{
    memset(s->resident, 0, (size_t)s->ngpus * sizeof(*s->resident));
    for (size_t a = 0; a < s->nact; a++) {
        size_t i = s->act[a];
        if (!progressing(s, i))
            continue;
        for (int k = 0; k < sim_job(s, i)->gpus; k++) {
            const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
            if (pj->device >= 0 && pj->device < s->ngpus)
                s->resident[pj->device]++;
        }
    }
}

/* Work per second of job i: 1, less the interference when one of its GPUs
 * has another job on it (a gang goes at its slowest task's pace). */
static double rate(const struct sim *s, size_t i)
{
    for (int k = 0; k < sim_job(s, i)->gpus; k++) {
        const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
        if (pj && pj->device >= 0 && pj->device < s->ngpus && s->resident[pj->device] > 1)
            return 1 - s->o->interference;
    }
    return 1;
}

/* When the regime of a progressing job changes: redo over, old work caught up, done. */
static double next_boundary(const struct sim *s, size_t i)
{
    const struct jstate *st = &s->js[i];
    double done = sim_job(s, i)->dur - st->remaining, r = rate(s, i);

    if (st->redo > EPS)
        return s->t + st->redo;
    if (done + EPS < st->max_done)
        return s->t + (st->max_done - done) / r;
    return s->t + st->remaining / r;
}

static double next_event(struct sim *s)
{
    double tn = s->next < s->norder ? sim_job(s, s->order[s->next])->arrival : INFINITY;

    count_residents(s);
    for (size_t a = 0; a < s->nact; a++) {
        size_t i = s->act[a];
        const struct jstate *st = &s->js[i];
        if ((st->phase == PH_SAVING || st->phase == PH_REQUEUED) && st->phase_end < tn)
            tn = st->phase_end;
        for (int k = 0; k < sim_job(s, i)->gpus; k++)
            if (st->task[k].op && st->task[k].op_done < tn)
                tn = st->task[k].op_done;
        if (progressing(s, i) && next_boundary(s, i) < tn)
            tn = next_boundary(s, i);
    }
    return tn;
}

/* Memory (bytes) job i holds on GPUs now. */
static double held(const struct sim *s, size_t i)
{
    double m = 0;

    for (int k = 0; k < sim_job(s, i)->gpus; k++) {
        const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
        if (pj && pj->mem && pj->device >= 0 && pj->state != POL_SUSPENDED)
            m += (double)pj->mem;
    }
    return m;
}

/* Move job i on by dt, counting into the window's integrals the part dw of
 * it inside the window. Work done again (after a kill) is not counted. */
static void progress(struct sim *s, size_t i, double dt, double dw)
{
    struct jstate *st = &s->js[i];
    const struct rjob *j = sim_job(s, i);
    double r = rate(s, i), done = j->dur - st->remaining;

    if (st->redo > EPS) {
        st->redo -= dt;
        return;
    }
    if (done + EPS >= st->max_done)
        s->work_int += dw * r * j->gpus * (j->compute / 1000.0);
    st->remaining -= dt * r;
    if (j->dur - st->remaining > st->max_done)
        st->max_done = j->dur - st->remaining;
}

static void advance(struct sim *s, double tn)
{
    double dt = tn - s->t;
    double lo = s->t > s->w0 ? s->t : s->w0, hi = tn < s->w1 ? tn : s->w1;
    double dw = hi > lo ? hi - lo : 0;
    int busy = 0;

    for (int d = 0; d < s->ngpus; d++)
        busy += policy_device_used(s->p, d) > 0;
    s->busy_int += dw * busy;
    for (size_t a = 0; a < s->nact; a++) {
        size_t i = s->act[a];
        s->mem_int += dw * held(s, i);
        if (progressing(s, i))
            progress(s, i, dt, dw);
    }
    s->t = tn;
}

/* ---------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------- */

/* Timers and progress of job i at the current time. */
static int job_events(struct sim *s, size_t i)
{
    struct jstate *st = &s->js[i];

    if (st->phase == PH_SAVING && st->phase_end <= s->t + EPS) {
        preempt_saved(s, i);
    } else if (st->phase == PH_REQUEUED && st->phase_end <= s->t + EPS) {
        int restore = st->restore;
        if (sim_enter_policy(s, i) < 0)
            return -1;
        st->restore = restore;
    }
    apply(s);
    for (int k = 0; k < sim_job(s, i)->gpus && st->phase != PH_DONE; k++) {
        if (st->task[k].op && st->task[k].op_done <= s->t + EPS) {
            preempt_op_done(s, i, k);
            apply(s);
        }
    }
    if (st->phase == PH_RUN && st->remaining <= EPS && st->redo <= EPS) {
        finish(s, i);
        apply(s);
    }
    return 0;
}

/* A new job: refused now if it can never be placed, else into the policy. */
static int arrive(struct sim *s, size_t i)
{
    char why[200];

    s->act[s->nact++] = i;
    if (admit_never(s, i, why, sizeof(why))) {
        s->js[i].refused = 1;
        s->js[i].phase = PH_DONE;
        s->js[i].finish = s->t;
        if (!s->refused_logged++)
            snprintf(s->refused_first, sizeof(s->refused_first), "job %zu: %s", i + 1, why);
        return 0;
    }
    if (sim_enter_policy(s, i) < 0)
        return -1;
    apply(s);
    return 0;
}

static int events_at(struct sim *s)
{
    while (s->next < s->norder && sim_job(s, s->order[s->next])->arrival <= s->t + EPS)
        if (arrive(s, s->order[s->next++]) < 0)
            return -1;
    for (size_t a = 0; a < s->nact; a++)
        if (job_events(s, s->act[a]) < 0)
            return -1;
    /* A kill or a finished save frees GPUs while the actions are carried
     * out, not when the policy decided: tick again until it has nothing to
     * add, so a waiting job is served at the moment that happens. */
    for (int round = 0; round < 8; round++) {
        unsigned long requeued = s->requeued;
        if (policy_tick(s->p, sim_ns(s->t), &s->acts) < 0)
            return -1;
        apply(s);
        if (s->requeued == requeued)
            break;
    }
    preempt_migrations(s);
    apply(s);
    /* forget finished jobs */
    size_t w = 0;
    for (size_t a = 0; a < s->nact; a++)
        if (s->js[s->act[a]].phase != PH_DONE)
            s->act[w++] = s->act[a];
    s->nact = w;
    return 0;
}

static int self_check(struct sim *s)
{
    char msg[256];

    if (policy_check(s->p, msg, sizeof(msg)) < 0 ||
        policy_check_backfill(s->p, sim_ns(s->t), msg, sizeof(msg)) < 0) {
        log_err("%s: invariant broken at t=%.1f s: %s", s->sd->name, s->t, msg);
        return -1;
    }
    for (int n = 0; n < s->nnodes; n++)
        if (s->node_host[n] > s->o->node_host_bytes + 1) {
            log_err("%s: node %d holds %.0f GiB of suspended jobs, over its %.0f GiB",
                    s->sd->name, n, s->node_host[n] / GiB, s->o->node_host_bytes / GiB);
            return -1;
        }
    return 0;
}

static int loop(struct sim *s)
{
    for (;;) {
        double tn = next_event(s);
        if (tn == INFINITY)
            return 0;
        advance(s, tn);
        if (events_at(s) < 0) {
            log_err("%s: the policy failed at t=%.1f s", s->sd->name, s->t);
            return -1;
        }
        if (s->o->check && self_check(s) < 0)
            return -1;
    }
}

/* Run the jobs order[0..n) on GPUs first_gpu .. first_gpu + ngpus of the cluster. */
static int run(struct sim *s, const size_t *order, size_t n, int first_gpu, int ngpus)
{
    struct pol_config cfg = config_of(s);
    int rc = -1;

    s->p = policy_new(&cfg);
    s->order = order;
    s->norder = n;
    s->next = 0;
    s->nact = 0;
    s->ngpus = ngpus;
    s->first_gpu = first_gpu;
    s->t = 0;
    if (!s->p)
        goto out;
    for (int d = 0; d < ngpus; d++)
        if (policy_set_device(s->p, d, s->o->gpu_mem) < 0)
            goto out;
    if (add_projects(s) < 0 || admit_prepare(s) < 0 || loop(s) < 0)
        goto out;
    for (size_t k = 0; k < n; k++) {
        if (s->js[order[k]].phase != PH_DONE) {
            log_err("%s: job %zu (%.0f GiB x %d) never finished: stuck", s->sd->name,
                    order[k] + 1, sim_job(s, order[k])->mem / GiB, sim_job(s, order[k])->gpus);
            goto out;
        }
    }
    rc = 0;
out:
    pol_actions_free(&s->acts);
    policy_free(s->p);
    free(s->room0);
    s->room0 = NULL;
    s->p = NULL;
    return rc;
}

/* The jobs of project k (or, k < 0, of the projects without a reservation). */
static size_t partition(const struct trace *tr, int k, size_t *order)
{
    size_t n = 0;

    for (size_t i = 0; i < tr->n; i++) {
        int p = tr->jobs[i].project;
        if (k >= 0 ? p == k : tr->proj[p].reserve_gpus == 0)
            order[n++] = i;
    }
    return n;
}

/* Each department alone on the GPUs it owns; the others share the rest. */
static int run_static(struct sim *s, size_t *order)
{
    const struct trace *tr = s->tr;
    int rest = s->o->gpus - tr->reserved_gpus;
    size_t n;

    for (int k = 0; k < tr->nproj; k++) {
        n = partition(tr, k, order);
        if (tr->proj[k].reserve_gpus && n &&
            run(s, order, n, tr->proj[k].first_gpu, tr->proj[k].reserve_gpus) < 0)
            return -1;
    }
    n = partition(tr, -1, order);
    if (n && rest <= 0) {
        log_err("%s: no GPUs left for the projects without a reservation", s->sd->name);
        return -1;
    }
    return n ? run(s, order, n, tr->reserved_gpus, rest) : 0;
}

static int sim_alloc(struct sim *s, const struct opts *o)
{
    size_t n = s->tr->n;

    s->nnodes = (o->gpus + o->gpus_per_node - 1) / o->gpus_per_node;
    s->js = calloc(n, sizeof(*s->js));
    s->act = malloc(n * sizeof(*s->act));
    s->resident = calloc((size_t)o->gpus, sizeof(*s->resident));
    s->node_host = calloc((size_t)s->nnodes, sizeof(*s->node_host));
    return s->js && s->act && s->resident && s->node_host ? 0 : -1;
}

static void sim_free(struct sim *s)
{
    free(s->js);
    free(s->act);
    free(s->resident);
    free(s->node_host);
}

int simulate(const struct trace *tr, const struct opts *o, const struct sched_def *sd, int hi,
             struct result *r)
{
    struct sim s = { .tr = tr, .o = o, .sd = sd, .hi = hi };
    size_t *order = malloc(tr->n * sizeof(*order));
    int rc = -1;

    if (!order || sim_alloc(&s, o) < 0) {
        log_err("out of memory");
        goto out;
    }
    if (sd->statik && tr->reserved_gpus > o->gpus) {
        log_err("the projects reserve %d GPUs of %d", tr->reserved_gpus, o->gpus);
        goto out;
    }
    for (size_t i = 0; i < tr->n; i++) {
        s.js[i].remaining = tr->jobs[i].dur;
        s.js[i].start = s.js[i].finish = -1;
        for (int k = 0; k < REPLAY_MAX_GANG; k++)
            s.js[i].task[k].node = -1;
        order[i] = i;
    }
    s.w0 = tr->jobs[0].arrival;
    s.w1 = tr->jobs[tr->n - 1].arrival;
    if (s.w1 <= s.w0)
        s.w1 = s.w0 + 1;
    memset(r, 0, sizeof(*r));
    rc = sd->statik ? run_static(&s, order) : run(&s, order, tr->n, 0, o->gpus);
    if (rc == 0)
        metrics_summarise(&s, hi, r);
    if (s.refused_logged)
        log_info("%s: %lu jobs refused at admission (can never be placed), the first %s", sd->name,
                 s.refused_logged, s.refused_first);
out:
    free(order);
    sim_free(&s);
    return rc;
}
