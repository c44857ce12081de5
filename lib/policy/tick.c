/*
 * tick.c - serving the queue: suspended jobs to resume and waiting requests,
 * in priority/FIFO order, and the backfill bookkeeping that keeps jobs which
 * ran ahead of a waiting one from delaying it (policy.h, "Resume").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---------------------------------------------------------------------------
 * Queue positions and backfill marks
 * ------------------------------------------------------------------------- */

uint64_t pol_waiting_since(const struct pol_job *j, uint64_t now)
{
    uint64_t since = j->queued_ns ? j->queued_ns : 1;

    (void)now;
    if (j->state == POL_RUNNING && j->req == POL_REQ_WAITING)
        return since;
    /* a suspended job the policy will resume waits in the queue, held off or not */
    if (j->state == POL_SUSPENDED && j->req == POL_REQ_NONE &&
        (j->suspended_by == POL_BY_POLICY || j->auto_resume))
        return since;
    return 0;
}

int pol_ahead(const struct policy *p, const struct pol_job *h, uint64_t h_since, int b_prio,
              uint64_t b_since, uint64_t b_id)
{
    if (!p->cfg.fifo && h->priority != b_prio)
        return h->priority > b_prio;
    if (h_since != b_since)
        return h_since < b_since;
    return h->id < b_id;
}

/* Could waiting job h use device dev (dev < 0: some device)? */
static int could_use(const struct policy *p, const struct pol_job *h, int dev)
{
    if (dev < 0 || h->device < 0)
        return dev < 0 || p->cap[dev] >= h->want;
    return h->device == dev;
}

int pol_waiter_ahead(const struct policy *p, const struct pol_job *self, int dev, int prio,
                     uint64_t since, uint64_t now)
{
    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *h = &p->jobs[i];
        uint64_t hs;
        if (h == self || (self->gang && h->gang == self->gang))
            continue;
        /* h waited already when self asked: a job that displaced h (its
         * victim, now waiting) did not jump it */
        if ((hs = pol_waiting_since(h, now)) && hs <= since && could_use(p, h, dev) &&
            pol_ahead(p, h, hs, prio, since, self->id))
            return 1;
    }
    return 0;
}

void pol_mark_start(struct policy *p, struct pol_job *j, int dev, uint64_t since, uint64_t now)
{
    /* A mark stays until the job is suspended; a new jump moves it later, which
     * keeps every job it jumped before and adds the new ones. */
    if (!p->cfg.backfill || !pol_waiter_ahead(p, j, dev, j->priority, since, now))
        return;
    j->bf_ns = now ? now : 1;
    j->bf_priority = j->priority;
    j->bf_queued = since;
    j->bf_tick = p->in_tick ? p->tick_gen : 0;
}

int policy_job_jumped(const struct policy *p, const struct pol_job *h, const struct pol_job *v)
{
    if (!p->cfg.backfill || !v->bf_ns || v == h || (h->gang && h->gang == v->gang))
        return 0;
    /* one that jumped it in this very tick was served after it: the next tick's */
    if (v->bf_tick && v->bf_tick == p->tick_gen)
        return 0;
    if (h->state == POL_RUNNING && h->req == POL_REQ_NONE)
        return 0;                       /* not in the queue */
    return h->queued_ns <= v->bf_queued &&
           pol_ahead(p, h, h->queued_ns, v->bf_priority, v->bf_queued, v->id);
}

/* ---------------------------------------------------------------------------
 * Resuming a job (and its gang)
 * ------------------------------------------------------------------------- */

/* The suspended tasks of j's gang, one need per device (their memory summed:
 * pol_make_room wants distinct devices). Returns how many, -1 when a task is
 * not to be resumed now, -ENOMEM. */
static long resume_needs(struct policy *p, struct pol_job *j, uint64_t now, struct pol_need *need,
                         size_t *g, size_t *ng)
{
    size_t n = 0;

    *ng = pol_gang_of(p, j, g);
    for (size_t i = 0; i < *ng; i++) {
        struct pol_job *t = &p->jobs[g[i]];
        size_t k;
        if (t->state != POL_SUSPENDED)
            continue;
        if (!pol_resumable(t, now))
            return -1;
        for (k = 0; k < n && need[k].dev != t->device; k++)
            ;
        if (k == n)
            pol_need_for(p, &need[n++], t, t->device, 0);
        need[k].bytes += t->mem;
        need[k].compute += pol_job_share(t) * (need[k].j != t);
    }
    return (long)n;
}

int pol_try_resume(struct policy *p, struct pol_job *j, uint64_t now, struct pol_actions *out)
{
    size_t *g = malloc(p->njobs * sizeof(*g)), ng;
    struct pol_need *need = calloc(p->njobs ? p->njobs : 1, sizeof(*need));
    int *fits = calloc(p->njobs ? p->njobs : 1, sizeof(*fits));
    long n;
    int r = -ENOMEM, all = 1;

    if (!g || !need || !fits)
        goto out;
    r = 0;
    n = resume_needs(p, j, now, need, g, &ng);
    if (n <= 0)
        goto out;
    for (long k = 0; k < n; k++)
        all &= pol_need_met(p, NULL, &need[k]);
    if (all) {
        for (size_t i = 0; i < ng; i++) {
            struct pol_job *t = &p->jobs[g[i]];
            if (t->state == POL_SUSPENDED)
                pol_start_resume(p, t, t == j || !t->gang ? POL_WHY_FITS : POL_WHY_GANG, now, out);
        }
        r = 1;
        goto out;
    }
    /* With backfill, the jobs that jumped it make way; the tasks resume
     * together when the last of those suspensions is acknowledged. */
    if (p->cfg.backfill)
        r = pol_make_room(p, need, (size_t)n, 1, now, fits, out);
out:
    free(g);
    free(need);
    free(fits);
    return r;
}

/* ---------------------------------------------------------------------------
 * Tick
 * ------------------------------------------------------------------------- */

static int cmp_candidates(const void *a, const void *b, void *arg)
{
    const struct policy *p = arg;
    const struct pol_job *x = &p->jobs[*(const size_t *)a];
    const struct pol_job *y = &p->jobs[*(const size_t *)b];

    if (!p->cfg.fifo && x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    if (x->queued_ns != y->queued_ns)
        return x->queued_ns < y->queued_ns ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Collect and order the jobs tick serves; returns how many (ids: their ids). */
static size_t tick_candidates(struct policy *p, uint64_t now, size_t *idx, uint64_t *ids)
{
    size_t n = 0;

    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *j = &p->jobs[i];
        if (pol_resumable(j, now) || (j->state == POL_RUNNING && j->req == POL_REQ_WAITING))
            idx[n++] = i;
    }
    qsort_r(idx, n, sizeof(*idx), cmp_candidates, p);
    /* Decisions may reorder jobs[] (none remove jobs here, but stay safe): work by id. */
    for (size_t k = 0; k < n; k++)
        ids[k] = p->jobs[idx[k]].id;
    return n;
}

struct tick_state {
    unsigned char *blocked;       /* per device: a job ahead did not fit (no backfill) */
    int blocked_any;              /* an unplaced job ahead did not fit */
    uint64_t *gangs;              /* gangs served this tick */
    size_t ngangs;
};

static int gang_seen(struct tick_state *ts, uint64_t gang)
{
    for (size_t i = 0; i < ts->ngangs; i++)
        if (ts->gangs[i] == gang)
            return 1;
    ts->gangs[ts->ngangs++] = gang;
    return 0;
}

/* Does any task of j's gang sit on a blocked device? (blocked: mark them all) */
static int gang_blocked(struct policy *p, const struct pol_job *j, struct tick_state *ts, int block)
{
    int any = 0;

    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *t = &p->jobs[i];
        if ((t == j || (j->gang && t->gang == j->gang)) && t->device >= 0) {
            any |= ts->blocked[t->device];
            if (block)
                ts->blocked[t->device] = 1;
        }
    }
    return any;
}

static int tick_suspended(struct policy *p, struct pol_job *j, struct tick_state *ts,
                          uint64_t now, struct pol_actions *out)
{
    int bf = p->cfg.backfill;

    if (!bf && gang_blocked(p, j, ts, 0))
        return 0;
    int r = pol_try_resume(p, j, now, out);
    if (r == 0 && !bf)
        gang_blocked(p, j, ts, 1);
    return r < 0 ? r : 0;
}

static int tick_waiting(struct policy *p, struct pol_job *j, struct tick_state *ts, uint64_t now,
                        struct pol_actions *out)
{
    int bf = p->cfg.backfill, r;

    if (j->device < 0) {
        if (!bf && ts->blocked_any)
            return 0;
        r = pol_decide(p, j, j->want, POL_FREE_UNKNOWN, 1, now, out);
        if (r < 0)
            return r;
        if (!bf && r == 0)
            ts->blocked_any = 1;
        else if (!bf && j->req != POL_REQ_NONE && j->device >= 0)
            ts->blocked[j->device] = 1;
        return 0;
    }
    if (!bf && ts->blocked[j->device])
        return 0;
    r = pol_decide(p, j, j->want, POL_FREE_UNKNOWN, 1, now, out);
    if (r < 0)
        return r;
    if (!bf && j->req != POL_REQ_NONE)
        ts->blocked[j->device] = 1;     /* still waiting, or room is being made for it */
    return 0;
}

/* One pass over the queue. */
static int tick_pass(struct policy *p, uint64_t now, size_t *idx, uint64_t *ids,
                     struct tick_state *ts, struct pol_actions *out)
{
    size_t n = tick_candidates(p, now, idx, ids);
    int r = 0;

    memset(ts->blocked, 0, (size_t)(p->ndev ? p->ndev : 1));
    ts->blocked_any = 0;
    ts->ngangs = 0;
    for (size_t k = 0; k < n && r >= 0; k++) {
        struct pol_job *j = pol_find(p, ids[k]);
        if (!j || (j->gang && gang_seen(ts, j->gang)))
            continue;
        if (pol_resumable(j, now))
            r = tick_suspended(p, j, ts, now, out);
        else if (j->state == POL_RUNNING && j->req == POL_REQ_WAITING)
            r = tick_waiting(p, j, ts, now, out);
    }
    return r;
}

/*
 * With backfill, the queue is served again while a pass changes anything: a
 * job served late in a pass (a request denied, a job granted) may be what
 * an earlier one needed (a victim it could not take then). Jobs that jumped
 * a waiting one in this tick are not its victims until the next tick, so the
 * passes do not start and suspend the same job.
 */
int policy_tick(struct policy *p, uint64_t now, struct pol_actions *out)
{
    size_t cap = p->njobs ? p->njobs : 1;
    size_t *idx = malloc(cap * sizeof(*idx));
    uint64_t *ids = malloc(cap * sizeof(*ids));
    struct tick_state ts = { .blocked = calloc((size_t)(p->ndev ? p->ndev : 1), 1),
                             .gangs = malloc(cap * sizeof(uint64_t)) };
    int r = 0;

    if (!idx || !ids || !ts.blocked || !ts.gangs) {
        r = -ENOMEM;
        goto out;
    }
    p->tick_gen++;
    p->in_tick = 1;
    for (int pass = 0; pass < 8 && r >= 0; pass++) {
        size_t before = out->n;
        r = tick_pass(p, now, idx, ids, &ts, out);
        if (!p->cfg.backfill || out->n == before)
            break;
    }
    p->in_tick = 0;
    if (r >= 0 && out->oom)
        r = -ENOMEM;
out:
    free(idx);
    free(ids);
    free(ts.blocked);
    free(ts.gangs);
    return r < 0 ? r : 0;
}

/* ---------------------------------------------------------------------------
 * The backfill self-check
 * ------------------------------------------------------------------------- */

/* Would h fit on dev if every job that jumped it there were gone? */
static int fits_without_jumpers(const struct policy *p, const struct pol_job *h, int dev,
                                struct tent *t)
{
    struct pol_need nd;

    if (p->cap[dev] < h->want || !pol_may_take(p, h->project, dev, h->want, 0))
        return 0;
    memset(t->init, 0, (size_t)p->ndev);
    pol_tent_column(p, t, dev);
    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *v = &p->jobs[i];
        if (v->device == dev && v->state == POL_RUNNING && v->req == POL_REQ_NONE && v->mem &&
            !v->gang && policy_job_jumped(p, h, v)) {
            t->used[(size_t)v->project * p->ndev + dev] -= v->mem;
            t->compute[dev] -= pol_job_share(v);
        }
    }
    pol_need_for(p, &nd, (struct pol_job *)h, dev, h->want);
    return pol_need_met(p, t, &nd);
}

/* Is a job ahead of h waiting for a device h could use too? */
static int someone_ahead(const struct policy *p, const struct pol_job *h, uint64_t hs,
                         uint64_t now)
{
    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *g = &p->jobs[i];
        uint64_t gs = pol_waiting_since(g, now);
        if (g == h)
            continue;
        if (g->req == POL_REQ_PREEMPTING && (g->device == h->device || h->device < 0))
            return 1;                   /* room is being made for it there */
        if (gs && (g->device < 0 || h->device < 0 || g->device == h->device) &&
            pol_ahead(p, g, gs, h->priority, hs, h->id))
            return 1;
    }
    return 0;
}

int policy_check_backfill(const struct policy *p, uint64_t now, char *msg, size_t len)
{
    struct tent t = { 0 };
    int r = 0;

    /* with partition_prio a job that jumped the queue is no victim for
     * that: nothing to check */
    if (!p->cfg.backfill || p->cfg.no_preemption || p->cfg.partition_prio)
        return 0;
    if (pol_tent_init(p, &t) < 0)
        return 0;
    for (size_t i = 0; i < p->njobs && r == 0; i++) {
        const struct pol_job *h = &p->jobs[i];
        uint64_t hs = pol_waiting_since(h, now);
        struct pol_job view = *h;
        if (!hs || h->gang || someone_ahead(p, h, hs, now))
            continue;
        if (h->state == POL_SUSPENDED) {
            if (!pol_resumable(h, now))
                continue;
            view.want = h->mem;
            view.mem = 0;
        }
        for (int d = h->device < 0 ? 0 : h->device; d < (h->device < 0 ? p->ndev : h->device + 1);
             d++) {
            if ((h->device >= 0 || pol_may_place(h, d)) && fits_without_jumpers(p, &view, d, &t)) {
                snprintf(msg, len, "job %llu waits for %llu MiB, which it would have on device %d "
                         "by suspending the jobs that jumped it", (unsigned long long)h->id,
                         (unsigned long long)(view.want >> 20), d);
                r = -EFAULT;
                break;
            }
        }
    }
    pol_tent_free(&t);
    return r;
}
