/*
 * victims.c - choosing whom to suspend to make room, and starting it.
 *
 * A request makes room for a *unit*: one task on one device (a request, a
 * resume), or every task of a gang on its own device (a gang placed or
 * resumed at once). Victims are whole gangs (a lone job is a gang of one),
 * chosen one at a time, best first (policy.h, "Preemption"), against a
 * tentative copy of the usage with the victims so far taken off, so that the
 * classes and the room are recomputed after each pick. Only when every task
 * of the unit has its room is anything changed: all or none.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int pol_tent_init(const struct policy *p, struct tent *t)
{
    size_t cells = (size_t)(p->nproj ? p->nproj : 1) * (size_t)(p->ndev ? p->ndev : 1);

    t->used = malloc(cells * sizeof(*t->used));
    t->compute = malloc((size_t)(p->ndev ? p->ndev : 1) * sizeof(*t->compute));
    t->init = calloc((size_t)(p->ndev ? p->ndev : 1), 1);
    t->taken = calloc(p->njobs ? p->njobs : 1, 1);
    if (!t->used || !t->compute || !t->init || !t->taken) {
        pol_tent_free(t);
        return -ENOMEM;
    }
    return 0;
}

void pol_tent_free(struct tent *t)
{
    free(t->used);
    free(t->compute);
    free(t->init);
    free(t->taken);
    memset(t, 0, sizeof(*t));
}

void pol_tent_column(const struct policy *p, struct tent *t, int dev)
{
    if (t->init[dev])
        return;
    for (int q = 0; q < p->nproj; q++)
        t->used[(size_t)q * p->ndev + dev] = pol_pu(p, q, dev);
    t->compute[dev] = p->compute[dev];
    t->init[dev] = 1;
}

/* Take job k off the tentative usage. */
static void tent_take(const struct policy *p, struct tent *t, size_t k)
{
    const struct pol_job *v = &p->jobs[k];

    t->taken[k] = 1;
    if (v->device < 0 || v->state == POL_SUSPENDED)
        return;
    pol_tent_column(p, t, v->device);
    t->used[(size_t)v->project * p->ndev + v->device] -= v->mem;
    if (v->mem)
        t->compute[v->device] -= pol_job_share(v);
}

/* ---------------------------------------------------------------------------
 * One need
 * ------------------------------------------------------------------------- */

struct pick {
    size_t job;                   /* index into p->jobs */
    enum pol_why why;
    size_t need;                  /* the task of the unit it makes room for */
};

struct picks {
    struct pick *v;
    size_t n, cap;
};

static int picks_add(struct picks *pk, size_t job, enum pol_why why, size_t need)
{
    if (pk->n == pk->cap) {
        size_t cap = pk->cap ? pk->cap * 2 : 16;
        struct pick *v = realloc(pk->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        pk->v = v;
        pk->cap = cap;
    }
    pk->v[pk->n++] = (struct pick){ .job = job, .why = why, .need = need };
    return 0;
}

void pol_need_for(const struct policy *p, struct pol_need *nd, struct pol_job *j, int dev,
                  uint64_t bytes)
{
    int here = j->device == dev;
    int holds = here && j->state != POL_SUSPENDED && j->mem;

    (void)p;
    *nd = (struct pol_need){ .j = j, .dev = dev, .bytes = bytes };
    if (here && j->req == POL_REQ_PREEMPTING) {
        nd->own_claim = j->want;
        nd->own_compute = holds ? 0 : pol_job_share(j);
    }
    nd->compute = holds ? 0 : pol_job_share(j);
}

int pol_need_met(const struct policy *p, const struct tent *t, const struct pol_need *nd)
{
    if (pol_room(p, t, nd->j->project, nd->dev, nd->own_claim) < nd->bytes)
        return 0;
    if (!p->cfg.pack_compute || !nd->compute)
        return 1;
    return pol_compute_room(p, t, nd->dev, nd->own_compute) >= nd->compute;
}

/* May the whole gang of v be suspended now (every task running, no request
 * of its own, not picked already, not the requester's own gang)? */
static int unit_free(const struct policy *p, const struct tent *t, const struct pol_job *v,
                     const struct pol_job *r)
{
    if (v->gang && v->gang == r->gang)
        return 0;
    if (!v->gang)
        return v->state == POL_RUNNING && v->req == POL_REQ_NONE;
    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *u = &p->jobs[i];
        if (u->gang == v->gang && (t->taken[i] || u->state != POL_RUNNING || u->req != POL_REQ_NONE))
            return 0;
    }
    return 1;
}

/* Is a a better victim than b (of classes ca, cb)? */
static int better_victim(const struct pol_job *a, int ca, const struct pol_job *b, int cb)
{
    if (ca != cb)
        return ca < cb;
    if (a->priority != b->priority)
        return a->priority < b->priority;
    if (a->since_ns != b->since_ns)           /* later resume = less work lost */
        return a->since_ns > b->since_ns;
    return a->id > b->id;
}

int pol_dev_jobs_take(const struct policy *p, struct pol_dev_jobs *dj)
{
    size_t nd = (size_t)(p->ndev > 0 ? p->ndev : 0);

    dj->idx = malloc((p->njobs ? p->njobs : 1) * sizeof(*dj->idx));
    dj->start = calloc(nd + 2, sizeof(*dj->start));
    if (!dj->idx || !dj->start) {
        pol_dev_jobs_free(dj);
        return -ENOMEM;
    }
    /* counting sort by device: counts at start[dev + 2], then offsets */
    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].device >= 0 && (size_t)p->jobs[i].device < nd)
            dj->start[p->jobs[i].device + 2]++;
    for (size_t d = 2; d <= nd + 1; d++)
        dj->start[d] += dj->start[d - 1];
    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].device >= 0 && (size_t)p->jobs[i].device < nd)
            dj->idx[dj->start[p->jobs[i].device + 1]++] = i;
    return 0;
}

void pol_dev_jobs_free(struct pol_dev_jobs *dj)
{
    free(dj->idx);
    free(dj->start);
    dj->idx = dj->start = NULL;
}

/* Jobs of one device, for the victim search: the indexes of the jobs on dev,
 * in the order of p->jobs. */
static size_t jobs_on(const struct policy *p, const struct pol_need *nd, size_t *idx)
{
    size_t n = 0;

    if (nd->on_dev) {
        n = nd->on_dev->start[nd->dev + 1] - nd->on_dev->start[nd->dev];
        memcpy(idx, &nd->on_dev->idx[nd->on_dev->start[nd->dev]], n * sizeof(*idx));
        return n;
    }
    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].device == nd->dev)
            idx[n++] = i;
    return n;
}

/* Victims for need number ni until it is satisfied. 1: enough; 0: not; -ENOMEM. */
static int pick_for(struct policy *p, struct tent *t, const struct pol_need *need, size_t ni,
                    int jumpers_only, uint64_t now, size_t *cand, size_t *gang, struct picks *pk)
{
    const struct pol_need *nd = &need[ni];
    struct pol_asker a;
    size_t n = jobs_on(p, nd, cand);

    pol_asker_init(p, &a, nd->j, nd->dev, nd->bytes, now);
    pol_tent_column(p, t, nd->dev);
    while (!pol_need_met(p, t, nd)) {
        long best = -1;
        int best_cls = 0;
        enum pol_why best_why = POL_WHY_NONE;
        for (size_t k = 0; k < n; k++) {
            const struct pol_job *v = &p->jobs[cand[k]];
            enum pol_why w = POL_WHY_NONE;
            if (t->taken[cand[k]] || v == nd->j || !v->mem || !unit_free(p, t, v, nd->j))
                continue;
            int cls = (int)pol_victim_class(p, &a, v, t, &w);
            if (cls < 0 || (jumpers_only && cls != POL_CLASS_JUMPER))
                continue;
            if (best < 0 || better_victim(v, cls, &p->jobs[cand[best]], best_cls)) {
                best = (long)k;
                best_cls = cls;
                best_why = w;
            }
        }
        if (best < 0)
            return 0;
        size_t ng = pol_gang_of(p, &p->jobs[cand[best]], gang);
        for (size_t g = 0; g < ng; g++) {
            enum pol_why w = gang[g] == cand[best] ? best_why : POL_WHY_GANG;
            tent_take(p, t, gang[g]);
            if (picks_add(pk, gang[g], w, ni) < 0)
                return -ENOMEM;
        }
    }
    return 1;
}

/* ---------------------------------------------------------------------------
 * Committing
 * ------------------------------------------------------------------------- */

/* Reserve a satisfied need in the tentative usage, for the next needs of the unit. */
static void tent_reserve(const struct policy *p, struct tent *t, const struct pol_need *nd)
{
    pol_tent_column(p, t, nd->dev);
    t->used[(size_t)nd->j->project * p->ndev + nd->dev] += nd->bytes - nd->own_claim;
    t->compute[nd->dev] += nd->compute - nd->own_compute;
}

/*
 * Each victim task answers to the need on its own device, if the unit has
 * one there (its memory is what that task waits for), else to the need that
 * picked it.
 */
static void assign_owners(const struct policy *p, const struct pol_need *need, size_t n,
                          struct picks *pk)
{
    for (size_t k = 0; k < pk->n; k++) {
        int dev = p->jobs[pk->v[k].job].device;
        for (size_t i = 0; i < n; i++) {
            if (need[i].dev == dev) {
                pk->v[k].need = i;
                break;
            }
        }
    }
}

/* Mark the victims of need ni SUSPENDING for its task and emit their SUSPENDs. */
static void start_preemption(struct policy *p, const struct pol_need *nd, size_t ni,
                             const struct picks *pk, struct pol_actions *out)
{
    struct pol_job *r = nd->j;
    unsigned pending = 0;

    for (size_t k = 0; k < pk->n; k++) {
        if (pk->v[k].need != ni)
            continue;
        struct pol_job *v = &p->jobs[pk->v[k].job];
        v->state = POL_SUSPENDING;      /* still holds its memory: sums unchanged */
        v->suspended_by = POL_BY_POLICY;
        v->why = pk->v[k].why;
        v->for_job = r->id;
        v->suspended_for = r->id;
        v->auto_resume = 0;
        pending++;
        pol_push(out, POL_ACT_SUSPEND, v, r->id, v->mem, v->why);
    }
    pol_unaccount(p, r);
    r->device = nd->dev;                /* an unplaced job lands where room is made */
    r->req = POL_REQ_PREEMPTING;
    r->want = nd->bytes;
    r->victims_pending = pending;
    r->victim_failed = 0;
    r->failed_victim = 0;
    pol_account(p, r);
}

int pol_make_room(struct policy *p, struct pol_need *need, size_t n, int jumpers_only,
                  uint64_t now, int *fits_now, struct pol_actions *out)
{
    struct tent t = { 0 };
    struct picks pk = { 0 };
    size_t *cand = malloc((p->njobs ? p->njobs : 1) * sizeof(*cand));
    size_t *gang = malloc((p->njobs ? p->njobs : 1) * sizeof(*gang));
    int r = -ENOMEM;

    if (p->cfg.no_preemption) {
        r = 0;
        goto out;
    }
    if (!cand || !gang || pol_tent_init(p, &t) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        r = pick_for(p, &t, need, i, jumpers_only, now, cand, gang, &pk);
        if (r <= 0)
            goto out;
        tent_reserve(p, &t, &need[i]);
    }
    assign_owners(p, need, n, &pk);
    for (size_t i = 0; i < n; i++) {
        fits_now[i] = 1;
        for (size_t k = 0; k < pk.n; k++)
            if (pk.v[k].need == i)
                fits_now[i] = 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!fits_now[i])
            start_preemption(p, &need[i], i, &pk, out);
    r = 1;
out:
    free(pk.v);
    free(cand);
    free(gang);
    pol_tent_free(&t);
    return r;
}
