/*
 * sim.c - one scheduler over one trace: an event loop around the policy.
 *
 * Every scheduler is the policy module (lib/policy) configured as that
 * scheduler would decide, and the loop carries its actions out the way
 * that scheduler's mechanism would (docs/tcgpud.md, "Replay at scale"):
 *
 *   fifo    one queue in arrival order; a job takes whole GPUs (Slurm's
 *           gres/gpu, Kubernetes' nvidia.com/gpu), runs to the end.
 *   static  the same, each project alone on the GPUs it reserves (projects
 *           without a reservation share the rest).
 *   kill    priorities; whole GPUs; a victim is killed and requeued (Slurm
 *           PreemptMode=REQUEUE without tcgpu): it loses the work since its
 *           last own checkpoint, waits out the requeue, restarts.
 *   ckpt    the same, but the victim is saved first (Slurm REQUEUE with
 *           tcgpu: gpuckpt save of GPU and host memory to disk) and restored
 *           where it runs next: no work lost, the save and restore cost.
 *   tcgpud  tcgpud: jobs share GPUs by memory and compute share (the
 *           throttle holds each to its share), reservations with lending
 *           and borrowing, fair shares, backfill; a victim is suspended to
 *           host memory in place and resumed there.
 *
 * A job progresses only when every one of its tasks is granted and none is
 * being suspended or resumed; a job's tasks are one gang.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "common/log.h"

#define EPS 1e-6
#define TASK_ID(job, t) ((((uint64_t)(job) + 1) << 4) | (uint64_t)(t))
#define JOB_OF(id) ((size_t)((id) >> 4) - 1)
#define TASK_OF(id) ((int)((id) & 15))

enum phase {
    PH_FUTURE = 0,                /* not arrived */
    PH_QUEUED,                    /* in the policy, not every task granted */
    PH_RUN,                       /* every task granted */
    PH_SAVING,                    /* ckpt: victim being saved (its tasks still hold the GPUs) */
    PH_REQUEUED,                  /* kill/ckpt: out of the policy until phase_end */
    PH_DONE,
};

enum op { OP_NONE = 0, OP_SUSPEND, OP_RESUME };

struct task {
    enum op op;
    double op_done;
};

struct jstate {
    enum phase phase;
    double phase_end;             /* SAVING, REQUEUED */
    double remaining;             /* work left, s */
    double redo;                  /* s of running before work counts again (restart, restore) */
    double max_done;              /* furthest progress ever: work below it is done again */
    double start, finish;
    int granted;                  /* tasks granted in the current stay in the policy */
    int restore;                  /* ckpt: restore its image when it runs next */
    int rejected;
    unsigned preemptions;
    struct task task[REPLAY_MAX_GANG];
};

struct sim {
    const struct trace *tr;
    const struct opts *o;
    enum sched sched;
    struct policy *p;
    struct jstate *js;            /* per job of the trace */
    size_t *act;                  /* active jobs (arrived, not done) */
    size_t nact;
    const size_t *order;          /* the jobs of this run, by arrival */
    size_t norder, next;
    int ngpus;
    struct pol_actions acts;
    double t, w0, w1;
    /* integrals over the window */
    double util_int, alloc_int, mem_int;
    double lost, overhead;        /* GPU seconds */
    unsigned long preemptions, migrations;
};

const char *sched_name(enum sched s)
{
    static const char *const n[] = { "fifo", "static", "kill", "ckpt", "tcgpud" };
    return (unsigned)s < SCHED_COUNT ? n[s] : "?";
}

const char *sched_title(enum sched s)
{
    static const char *const n[] = { "FIFO", "static", "kill+requeue", "ckpt+requeue", "tcgpud" };
    return (unsigned)s < SCHED_COUNT ? n[s] : "?";
}

static uint64_t ns(double t)
{
    return (uint64_t)(t * 1e9 + 0.5);
}

static int whole_gpus(const struct sim *s)
{
    return s->sched != SCHED_TCGPUD;
}

static const struct rjob *job(const struct sim *s, size_t i)
{
    return &s->tr->jobs[i];
}

/* ---------------------------------------------------------------------------
 * The policy as each scheduler configures it
 * ------------------------------------------------------------------------- */

static int add_projects(struct sim *s, int first_gpu, int ngpus)
{
    const struct trace *tr = s->tr;

    for (int k = 0; k < tr->nproj; k++) {
        const struct rproject *rp = &tr->proj[k];
        struct pol_project pr = { .priority = rp->priority, .may_borrow = 1, .weight = rp->weight };
        snprintf(pr.name, sizeof(pr.name), "%s", rp->name);
        if (s->sched == SCHED_TCGPUD) {
            snprintf(pr.cohort, sizeof(pr.cohort), "%s", rp->cohort);
            for (int g = 0; g < rp->reserve_gpus && pr.nreserve < POL_MAX_RESERVE; g++) {
                /* a range of whole GPUs; the policy keeps 8 per project: beyond,
                 * reservations are the first 8 GPUs of the range */
                pr.reserve[pr.nreserve].device = rp->first_gpu + g - first_gpu;
                pr.reserve[pr.nreserve].bytes = s->o->gpu_mem;
                pr.nreserve++;
            }
            if (rp->lend_pct < 100) {
                pr.quota_flags |= POL_Q_LENDING_LIMIT;
                pr.lend_pct = rp->lend_pct;
            }
        }
        (void)ngpus;
        if (policy_add_project(s->p, &pr) < 0)
            return -1;
    }
    return 0;
}

static struct pol_config config_of(const struct sim *s)
{
    struct pol_config c = { .min_runtime_ns = s->o->min_runtime_ns, .resume_retry_ns = ns(1) };

    switch (s->sched) {
    case SCHED_FIFO:
    case SCHED_STATIC:
        c.fifo = c.no_preemption = c.strict = 1;
        break;
    case SCHED_KILL:
    case SCHED_CKPT:
        c.strict = 1;
        break;
    default:
        c.backfill = c.pack_compute = 1;
        break;
    }
    return c;
}

/* ---------------------------------------------------------------------------
 * Jobs entering and leaving the policy
 * ------------------------------------------------------------------------- */

static int enter_policy(struct sim *s, size_t i)
{
    const struct rjob *j = job(s, i);
    struct jstate *st = &s->js[i];
    uint64_t now = ns(s->t), bytes = whole_gpus(s) ? s->o->gpu_mem : (uint64_t)j->mem;

    st->phase = PH_QUEUED;
    st->granted = 0;
    for (int k = 0; k < j->gpus; k++) {
        struct pol_job_spec spec = {
            .id = TASK_ID(i, k), .project = j->project, .priority = j->prio,
            .device = POL_DEVICE_ANY, .state = POL_RUNNING,
            .compute = whole_gpus(s) ? POL_COMPUTE_FULL : j->compute,
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

static void leave_policy(struct sim *s, size_t i)
{
    for (int k = 0; k < job(s, i)->gpus; k++)
        policy_job_exited(s->p, TASK_ID(i, k), ns(s->t), &s->acts);
}

static void finish(struct sim *s, size_t i)
{
    s->js[i].phase = PH_DONE;
    s->js[i].finish = s->t;
    leave_policy(s, i);
}

/* kill: the victim dies now; it restarts from its last own checkpoint. */
static void kill_job(struct sim *s, size_t i)
{
    const struct rjob *j = job(s, i);
    struct jstate *st = &s->js[i];
    double done = j->dur - st->remaining, kept = 0;

    if (s->o->app_ckpt_s > 0)
        kept = floor(done / s->o->app_ckpt_s) * s->o->app_ckpt_s;
    if (st->phase == PH_RUN) {
        st->remaining = j->dur - kept;
        s->lost += (done - kept) * j->gpus;
    }
    for (int k = 0; k < j->gpus; k++) {
        const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
        if (pj && pj->state == POL_SUSPENDING)
            policy_job_suspended(s->p, TASK_ID(i, k), 0, ns(s->t), &s->acts);
    }
    leave_policy(s, i);
    st->redo = 0;
    st->phase = PH_REQUEUED;
    st->phase_end = s->t + s->o->requeue_s;
    st->restore = 0;
}

static double image_bytes(const struct sim *s, size_t i)
{
    return job(s, i)->mem + s->o->host_bytes;
}

static void count_preemption(struct sim *s, size_t i)
{
    s->js[i].preemptions++;
    s->preemptions++;
}

/* ---------------------------------------------------------------------------
 * Carrying out the actions
 * ------------------------------------------------------------------------- */

static void granted(struct sim *s, size_t i)
{
    const struct rjob *j = job(s, i);
    struct jstate *st = &s->js[i];

    if (++st->granted < j->gpus)
        return;
    st->phase = PH_RUN;
    if (st->start < 0)
        st->start = s->t;
    if (s->sched == SCHED_KILL && st->max_done > 0)
        st->redo = s->o->restart_s;
    if (st->restore) {
        st->redo = s->o->fixed_s + image_bytes(s, i) / s->o->disk_read_bps;
        st->restore = 0;
    }
    s->overhead += st->redo * j->gpus;
}

static void suspend_action(struct sim *s, size_t i, int k)
{
    const struct rjob *j = job(s, i);
    struct jstate *st = &s->js[i];
    int first = 1;

    if (s->sched == SCHED_KILL) {
        count_preemption(s, i);
        kill_job(s, i);
        return;
    }
    if (s->sched == SCHED_CKPT) {
        if (st->phase == PH_SAVING)
            return;
        count_preemption(s, i);
        st->phase = PH_SAVING;
        st->phase_end = s->t + s->o->fixed_s + image_bytes(s, i) / s->o->disk_write_bps;
        s->overhead += (st->phase_end - s->t) * j->gpus;
        return;
    }
    for (int t = 0; t < j->gpus; t++)
        first &= st->task[t].op != OP_SUSPEND;
    if (first)
        count_preemption(s, i);
    st->task[k].op = OP_SUSPEND;
    st->task[k].op_done = s->t + s->o->fixed_s + j->mem / s->o->suspend_bps;
    s->overhead += st->task[k].op_done - s->t;
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
            suspend_action(s, i, k);
            break;
        case POL_ACT_RESUME:
            st->task[k].op = OP_RESUME;
            st->task[k].op_done = s->t + s->o->fixed_s + job(s, i)->mem / s->o->resume_bps;
            s->overhead += st->task[k].op_done - s->t;
            break;
        case POL_ACT_DENY:
            st->rejected = 1;
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
    for (int k = 0; k < job(s, i)->gpus; k++)
        if (st->task[k].op != OP_NONE)
            return 0;
    if (s->sched == SCHED_TCGPUD)
        for (int k = 0; k < job(s, i)->gpus; k++) {
            const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
            if (!pj || pj->state != POL_RUNNING)
                return 0;
        }
    return 1;
}

/* When the regime of a progressing job changes: redo over, old work caught up, done. */
static double next_boundary(const struct sim *s, size_t i)
{
    const struct jstate *st = &s->js[i];
    double done = job(s, i)->dur - st->remaining;

    if (st->redo > EPS)
        return s->t + st->redo;
    if (done + EPS < st->max_done)
        return s->t + (st->max_done - done);
    return s->t + st->remaining;
}

static double next_event(const struct sim *s)
{
    double tn = s->next < s->norder ? job(s, s->order[s->next])->arrival : INFINITY;

    for (size_t a = 0; a < s->nact; a++) {
        size_t i = s->act[a];
        const struct jstate *st = &s->js[i];
        if ((st->phase == PH_SAVING || st->phase == PH_REQUEUED) && st->phase_end < tn)
            tn = st->phase_end;
        for (int k = 0; k < job(s, i)->gpus; k++)
            if (st->task[k].op && st->task[k].op_done < tn)
                tn = st->task[k].op_done;
        if (progressing(s, i) && next_boundary(s, i) < tn)
            tn = next_boundary(s, i);
    }
    return tn;
}

/* Memory (bytes) job i holds now, and whether it holds GPUs at all. */
static double held(const struct sim *s, size_t i)
{
    double m = 0;

    for (int k = 0; k < job(s, i)->gpus; k++) {
        const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
        if (pj && pj->mem && pj->device >= 0 && pj->state != POL_SUSPENDED)
            m += job(s, i)->mem;
    }
    return m;
}

static void advance(struct sim *s, double tn)
{
    double dt = tn - s->t;
    double lo = s->t > s->w0 ? s->t : s->w0, hi = tn < s->w1 ? tn : s->w1;
    double dw = hi > lo ? hi - lo : 0;
    int busy = 0;

    for (int d = 0; d < s->ngpus; d++)
        busy += policy_device_used(s->p, d) > 0;
    s->alloc_int += dw * busy;
    for (size_t a = 0; a < s->nact; a++) {
        size_t i = s->act[a];
        struct jstate *st = &s->js[i];
        const struct rjob *j = job(s, i);
        s->mem_int += dw * held(s, i);
        if (!progressing(s, i))
            continue;
        if (st->redo > EPS) {
            st->redo -= dt;
            continue;
        }
        double done = j->dur - st->remaining;
        if (done + EPS >= st->max_done)
            s->util_int += dw * j->gpus * (j->compute / 1000.0);
        st->remaining -= dt;
        if (j->dur - st->remaining > st->max_done)
            st->max_done = j->dur - st->remaining;
    }
    s->t = tn;
}

/* ---------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------- */

static void task_op_done(struct sim *s, size_t i, int k)
{
    struct task *tk = &s->js[i].task[k];
    enum op op = tk->op;

    tk->op = OP_NONE;
    if (op == OP_SUSPEND)
        policy_job_suspended(s->p, TASK_ID(i, k), 0, ns(s->t), &s->acts);
    else
        policy_job_resumed(s->p, TASK_ID(i, k), 0, ns(s->t), &s->acts);
}

/* Timers and progress of job i at the current time. */
static int job_events(struct sim *s, size_t i)
{
    struct jstate *st = &s->js[i];

    if (st->phase == PH_SAVING && st->phase_end <= s->t + EPS) {
        kill_job(s, i);                 /* saved: nothing lost, out until requeued */
        st->restore = 1;
    } else if (st->phase == PH_REQUEUED && st->phase_end <= s->t + EPS) {
        int restore = st->restore;
        if (enter_policy(s, i) < 0)
            return -1;
        st->restore = restore;
    }
    apply(s);
    for (int k = 0; k < job(s, i)->gpus && st->phase != PH_DONE; k++) {
        if (st->task[k].op && st->task[k].op_done <= s->t + EPS) {
            task_op_done(s, i, k);
            apply(s);
        }
    }
    if (st->phase == PH_RUN && st->remaining <= EPS && st->redo <= EPS) {
        finish(s, i);
        apply(s);
    }
    return 0;
}

/* tcgpud: is every task of job i suspended by the policy, for longer than
 * the migration delay, and would the job fit on GPUs now free of others? */
static int should_migrate(const struct sim *s, size_t i)
{
    const struct rjob *j = job(s, i);
    int fit = 0;

    if (s->sched != SCHED_TCGPUD || s->o->migrate_s <= 0 || s->js[i].phase != PH_RUN)
        return 0;
    for (int k = 0; k < j->gpus; k++) {
        const struct pol_job *pj = policy_job(s->p, TASK_ID(i, k));
        if (!pj || pj->state != POL_SUSPENDED || pj->req != POL_REQ_NONE ||
            pj->suspended_by != POL_BY_POLICY || s->t - (double)pj->queued_ns / 1e9 < s->o->migrate_s)
            return 0;
    }
    for (int d = 0; d < s->ngpus && fit < j->gpus; d++)
        fit += policy_room(s->p, j->project, d) >= (uint64_t)j->mem &&
               policy_device_compute(s->p, d) + j->compute <= POL_COMPUTE_FULL;
    return fit >= j->gpus;
}

/* Move it: its image (already in host memory) is written out, the job
 * requeued, and restored from the image where it is placed next. */
static void migrate(struct sim *s, size_t i)
{
    struct jstate *st = &s->js[i];

    leave_policy(s, i);
    st->phase = PH_REQUEUED;
    st->phase_end = s->t + s->o->fixed_s + image_bytes(s, i) / s->o->disk_write_bps + s->o->requeue_s;
    st->restore = 1;
    s->migrations++;
}

static int events_at(struct sim *s)
{
    while (s->next < s->norder && job(s, s->order[s->next])->arrival <= s->t + EPS) {
        size_t i = s->order[s->next++];
        const struct rjob *j = job(s, i);
        s->act[s->nact++] = i;
        if (j->mem > (double)s->o->gpu_mem || j->gpus > s->ngpus) {
            s->js[i].rejected = 1;
            s->js[i].phase = PH_DONE;
            s->js[i].finish = s->t;
            continue;
        }
        if (enter_policy(s, i) < 0)
            return -1;
        apply(s);
    }
    for (size_t a = 0; a < s->nact; a++)
        if (job_events(s, s->act[a]) < 0)
            return -1;
    if (policy_tick(s->p, ns(s->t), &s->acts) < 0)
        return -1;
    apply(s);
    for (size_t a = 0; a < s->nact; a++)
        if (should_migrate(s, s->act[a]))
            migrate(s, s->act[a]);
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
        policy_check_backfill(s->p, ns(s->t), msg, sizeof(msg)) < 0) {
        log_err("%s: invariant broken at t=%.1f s: %s", sched_name(s->sched),
                s->t, msg);
        return -1;
    }
    return 0;
}

/* Run the jobs order[0..n) on ngpus GPUs (the first GPU of the range is first_gpu). */
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
    s->t = 0;
    if (!s->p)
        goto out;
    for (int d = 0; d < ngpus; d++)
        if (policy_set_device(s->p, d, s->o->gpu_mem) < 0)
            goto out;
    if (add_projects(s, first_gpu, ngpus) < 0)
        goto out;
    for (;;) {
        double tn = next_event(s);
        if (tn == INFINITY)
            break;
        advance(s, tn);
        if (events_at(s) < 0) {
            log_err("%s: the policy failed at t=%.1f s",
                    sched_name(s->sched), s->t);
            goto out;
        }
        if (s->o->check && self_check(s) < 0)
            goto out;
    }
    for (size_t k = 0; k < n; k++) {
        if (s->js[order[k]].phase != PH_DONE) {
            log_err("%s: job %zu (%.0f GiB x %d) never finished: stuck",
                    sched_name(s->sched), order[k] + 1, job(s, order[k])->mem / GiB,
                    job(s, order[k])->gpus);
            goto out;
        }
    }
    rc = 0;
out:
    pol_actions_free(&s->acts);
    policy_free(s->p);
    s->p = NULL;
    return rc;
}

/* ---------------------------------------------------------------------------
 * Summary
 * ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double p95(double *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof(*v), cmp_double);
    return v[(size_t)(0.95 * (double)(n - 1) + 0.5)];
}

static void summarise(const struct sim *s, int hi, struct result *r)
{
    const struct trace *tr = s->tr;
    double *jct = malloc(tr->n * sizeof(*jct)), *wait = malloc(tr->n * sizeof(*wait));
    double sum = 0, sum_hi = 0, wsum = 0, cap = (double)s->o->gpus * (s->w1 - s->w0);
    size_t n = 0, nhi = 0;

    r->sched = s->sched;
    r->window = s->w1 - s->w0;
    r->util = cap > 0 ? s->util_int / cap : 0;
    r->alloc = cap > 0 ? s->alloc_int / cap : 0;
    r->memutil = cap > 0 ? s->mem_int / (cap * (double)s->o->gpu_mem) : 0;
    r->work_lost_gpuh = s->lost / 3600;
    r->overhead_gpuh = s->overhead / 3600;
    r->preemptions = s->preemptions;
    r->migrations = s->migrations;
    for (size_t i = 0; i < tr->n && jct && wait; i++) {
        const struct jstate *st = &s->js[i];
        if (st->rejected) {
            r->rejected++;
            continue;
        }
        r->finished++;
        if (st->finish > r->makespan)
            r->makespan = st->finish;
        jct[n++] = st->finish - tr->jobs[i].arrival;
        sum += st->finish - tr->jobs[i].arrival;
        if (tr->jobs[i].prio >= hi) {
            sum_hi += st->finish - tr->jobs[i].arrival;
            wait[nhi++] = st->start - tr->jobs[i].arrival;
            wsum += st->start - tr->jobs[i].arrival;
        }
    }
    r->jct_mean = n ? sum / (double)n : 0;
    r->jct_hi = nhi ? sum_hi / (double)nhi : 0;
    r->hi_wait_mean = nhi ? wsum / (double)nhi : 0;
    r->jct_p95 = jct ? p95(jct, n) : 0;
    r->hi_wait_p95 = wait ? p95(wait, nhi) : 0;
    r->preempt_per_job = r->finished ? (double)s->preemptions / (double)r->finished : 0;
    free(jct);
    free(wait);
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

int simulate(const struct trace *tr, const struct opts *o, enum sched sched, int hi,
             struct result *r)
{
    struct sim s = { .tr = tr, .o = o, .sched = sched };
    size_t *order = malloc(tr->n * sizeof(*order));
    int rc = -1;

    s.js = calloc(tr->n, sizeof(*s.js));
    s.act = malloc(tr->n * sizeof(*s.act));
    if (!order || !s.js || !s.act)
        goto out;
    for (size_t i = 0; i < tr->n; i++) {
        s.js[i].remaining = tr->jobs[i].dur;
        s.js[i].start = s.js[i].finish = -1;
        order[i] = i;
    }
    s.w0 = tr->jobs[0].arrival;
    s.w1 = tr->jobs[tr->n - 1].arrival;
    if (s.w1 <= s.w0)
        s.w1 = s.w0 + 1;
    memset(r, 0, sizeof(*r));
    if (sched != SCHED_STATIC) {
        rc = run(&s, order, tr->n, 0, o->gpus);
    } else {
        /* each project with a reservation alone on its GPUs; the others on the rest */
        int shared = o->gpus - tr->reserved_gpus;
        rc = 0;
        if (tr->reserved_gpus > o->gpus) {
            log_err("the projects reserve %d GPUs of %d", tr->reserved_gpus,
                    o->gpus);
            rc = -1;
        }
        for (int k = 0; k < tr->nproj && rc == 0; k++) {
            size_t n = partition(tr, k, order);
            if (tr->proj[k].reserve_gpus && n)
                rc = run(&s, order, n, tr->proj[k].first_gpu, tr->proj[k].reserve_gpus);
        }
        size_t n = partition(tr, -1, order);
        if (rc == 0 && n)
            rc = shared > 0 ? run(&s, order, n, tr->reserved_gpus, shared) : -1;
        if (rc == 0 && n && shared <= 0)
            log_err("static: no GPUs left for the projects without a reservation");
    }
    if (rc == 0)
        summarise(&s, hi, r);
out:
    free(order);
    free(s.js);
    free(s.act);
    return rc;
}
