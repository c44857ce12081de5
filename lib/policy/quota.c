/*
 * quota.c - reservations, lending and borrowing limits, cohorts and fair
 * shares: how much room a project has on a device, and which jobs a
 * requester may suspend (policy.h, "Quotas" and "Preemption").
 */
#include <stdlib.h>

#include "internal.h"

uint64_t pol_tent_used(const struct policy *p, const struct tent *t, int proj, int dev)
{
    if (t && t->init[dev])
        return t->used[(size_t)proj * p->ndev + dev];
    return pol_pu(p, proj, dev);
}

uint64_t pol_unlendable(const struct policy *p, int q, int dev)
{
    return p->unlendable[(size_t)q * p->ndev + dev];
}

uint64_t pol_borrow_limit(const struct policy *p, int q)
{
    const struct pol_project *pr = &p->proj[q];

    if (!pr->may_borrow)
        return 0;
    return pr->quota_flags & POL_Q_BORROWING_LIMIT ? pr->borrow_bytes : UINT64_MAX;
}

uint64_t pol_room(const struct policy *p, const struct tent *t, int P, int dev, uint64_t own_claim)
{
    uint64_t taken = 0;

    for (int q = 0; q < p->nproj; q++) {
        uint64_t held = pol_tent_used(p, t, q, dev) + pol_pc(p, q, dev);
        if (q == P) {
            taken += held - (own_claim < held ? own_claim : held);
        } else {
            uint64_t unl = pol_unlendable(p, q, dev);
            taken += held > unl ? held : unl;
        }
    }
    return taken >= p->cap[dev] ? 0 : p->cap[dev] - taken;
}

unsigned pol_compute_room(const struct policy *p, const struct tent *t, int dev, unsigned own)
{
    unsigned taken = (t && t->init[dev] ? t->compute[dev] : p->compute[dev]) + p->compute_claimed[dev];

    taken -= own < taken ? own : taken;
    return taken >= POL_COMPUTE_FULL ? 0 : POL_COMPUTE_FULL - taken;
}

int pol_may_take(const struct policy *p, int P, int dev, uint64_t bytes, uint64_t own_claim)
{
    uint64_t limit = pol_borrow_limit(p, P), held, allowed;

    if (limit == UINT64_MAX || dev < 0)
        return 1;
    held = pol_pu(p, P, dev) + pol_pc(p, P, dev) - own_claim;
    allowed = pol_res(p, P, dev) + limit;
    return held + bytes <= allowed && held + bytes >= held;
}

/* ---------------------------------------------------------------------------
 * Cohorts and fair shares
 * ------------------------------------------------------------------------- */

static uint64_t cohort_used(const struct policy *p, const struct tent *t, int k, int dev)
{
    uint64_t s = 0;

    for (int q = 0; q < p->nproj; q++)
        if (p->cohort[q] == k)
            s += pol_tent_used(p, t, q, dev);
    return s;
}

static uint64_t cohort_reserved(const struct policy *p, int k, int dev)
{
    uint64_t s = 0;

    for (int q = 0; q < p->nproj; q++)
        if (p->cohort[q] == k)
            s += pol_res(p, q, dev);
    return s;
}

static int same_group(const struct policy *p, int P, int Q)
{
    return P == Q || (p->cohort[P] >= 0 && p->cohort[P] == p->cohort[Q]);
}

/* Is Q borrowing on dev, as a requester of project P sees it? Within its
 * cohort a member borrows beyond its own reservation; from outside, only when
 * the cohort as a whole holds more than its reservations. */
static int borrowing_for(const struct policy *p, const struct tent *t, int P, int Q, int dev)
{
    if (pol_tent_used(p, t, Q, dev) <= pol_res(p, Q, dev))
        return 0;
    if (same_group(p, P, Q) || p->cohort[Q] < 0)
        return 1;
    return cohort_used(p, t, p->cohort[Q], dev) > cohort_reserved(p, p->cohort[Q], dev);
}

static unsigned weight_of(const struct policy *p, int q)
{
    return p->proj[q].weight ? p->proj[q].weight : 1;
}

/*
 * The over-quota fair share rule: may a requester of project P (wanting
 * `bytes` more, beyond its reservation) take from borrower Q of equal
 * priority? The borrowable memory on the device (what is not held within a
 * reservation or kept unlent) is divided between the projects borrowing
 * there, and P, in proportion to their weights. Q must borrow more than its
 * share, and P must stay within its own after the grant.
 */
static int fair_share_allows(const struct policy *p, const struct tent *t, int P, int Q, int dev,
                             uint64_t bytes)
{
    uint64_t within = 0, wsum = 0, pool, bQ, bP, heldP;

    for (int q = 0; q < p->nproj; q++) {
        uint64_t u = pol_tent_used(p, t, q, dev), r = pol_res(p, q, dev);
        uint64_t in = u < r ? u : r, unl = pol_unlendable(p, q, dev);
        within += in > unl ? in : unl;
        if (q == P || u > r)
            wsum += weight_of(p, q);
    }
    pool = within >= p->cap[dev] ? 0 : p->cap[dev] - within;
    bQ = pol_tent_used(p, t, Q, dev) - pol_res(p, Q, dev);
    heldP = pol_tent_used(p, t, P, dev) + bytes;
    bP = heldP > pol_res(p, P, dev) ? heldP - pol_res(p, P, dev) : 0;
    /* compare b / share without division: b * wsum against pool * w */
    return (unsigned __int128)bQ * wsum > (unsigned __int128)pool * weight_of(p, Q) &&
           (unsigned __int128)bP * wsum <= (unsigned __int128)pool * weight_of(p, P);
}

/* ---------------------------------------------------------------------------
 * Victim classes
 * ------------------------------------------------------------------------- */

void pol_asker_init(const struct policy *p, struct pol_asker *a, const struct pol_job *r, int dev,
                    uint64_t bytes, uint64_t now)
{
    int P = r->project, k = p->cohort[P];
    uint64_t mine = r->device == dev ? 0 : r->mem;   /* a job moving in brings what it holds */

    a->r = r;
    a->dev = dev;
    a->bytes = bytes;
    a->now = now;
    a->reclaims_own = pol_pu(p, P, dev) + mine + bytes <= pol_res(p, P, dev);
    a->reclaims_cohort = k >= 0 && cohort_used(p, NULL, k, dev) + mine + bytes <=
                                       cohort_reserved(p, k, dev);
}

enum pol_class pol_victim_class(const struct policy *p, const struct pol_asker *a,
                                const struct pol_job *v, const struct tent *t, enum pol_why *why)
{
    const struct pol_job *r = a->r;
    int P = r->project, Q = v->project, dev = a->dev;
    int group = same_group(p, P, Q);
    int reclaims = a->reclaims_own || (!group && a->reclaims_cohort);

    if (p->cfg.partition_prio) {
        if (r->priority < p->cfg.tier_priority || v->priority >= p->cfg.tier_priority ||
            v->since_ns > a->now || a->now - v->since_ns < p->cfg.min_runtime_ns)
            return POL_CLASS_NONE;
        *why = POL_WHY_PRIORITY;
        return POL_CLASS_BORROWER;
    }
    if (policy_job_jumped(p, r, v)) {
        *why = POL_WHY_BACKFILL;
        return POL_CLASS_JUMPER;
    }
    if (v->since_ns > a->now || a->now - v->since_ns < p->cfg.min_runtime_ns)
        return POL_CLASS_NONE;
    if (borrowing_for(p, t, P, Q, dev)) {
        enum pol_class c = group ? POL_CLASS_BORROWER : POL_CLASS_OUTSIDER;
        if (reclaims) {
            *why = POL_WHY_RECLAIM;
            return c;
        }
        if (r->priority > v->priority) {
            *why = POL_WHY_PRIORITY;
            return c;
        }
        if (r->priority == v->priority && P != Q &&
            fair_share_allows(p, t, P, Q, dev, a->bytes + (r->device == dev ? 0 : r->mem))) {
            *why = POL_WHY_FAIR_SHARE;
            return c;
        }
        return POL_CLASS_NONE;
    }
    if (reclaims && r->priority > v->priority) {
        *why = POL_WHY_PRIORITY;
        return POL_CLASS_PROTECTED;
    }
    return POL_CLASS_NONE;
}
