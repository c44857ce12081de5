/*
 * internal.h - what the files of lib/policy share (not for callers: policy.h).
 *
 *   policy.c   the action list, devices, projects, jobs and their accounting,
 *              names, the self-checks
 *   quota.c    room on a device (reservations, lending limits), borrowing,
 *              cohorts, fair shares: which jobs may be victims of which
 *   victims.c  choosing victims (whole gangs), on one device or for a unit of
 *              tasks on several, and starting their suspension
 *   decide.c   requests, grants, acknowledgements, manual operations
 *   tick.c     serving waiting requests and suspended jobs; backfill marks
 *   compute.c  compute shares: reports and caps
 *
 * Per-device used/claimed bytes, per-project-per-device used/claimed bytes
 * and per-device compute are kept up to date incrementally: every change to
 * a job's memory, state, device or request goes through unaccount() ...
 * account(), so the sums never drift, and policy_check() recomputes them
 * from scratch to prove it.
 */
#ifndef TCGPU_POLICY_INTERNAL_H
#define TCGPU_POLICY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

struct policy {
    struct pol_config cfg;
    int ndev;
    uint64_t *cap;
    uint64_t *used;               /* per device */
    uint64_t *claimed;            /* per device */
    unsigned *compute;            /* per device: shares of jobs holding memory */
    unsigned *compute_claimed;    /* per device: shares of requesters not yet holding any */
    int nproj, projcap;
    struct pol_project *proj;
    int *cohort;                  /* per project: cohort number, or -1 */
    uint64_t *proj_used;          /* [proj * ndev + dev] */
    uint64_t *proj_claimed;       /* [proj * ndev + dev] */
    uint64_t *reserved;           /* [proj * ndev + dev]: its reservation there ... */
    uint64_t *unlendable;         /* [proj * ndev + dev]: ... and the part it never lends */
    struct pol_job *jobs;
    size_t njobs, jobcap;
    unsigned char *may_wait;      /* parallel to jobs */
    /* id -> index into jobs: open addressing, linear probing, rebuilt when jobs move */
    uint64_t *hkey;               /* 0: empty */
    size_t *hval;
    size_t hcap;                  /* a power of two, > 2 * jobcap */
    uint64_t tick_gen;            /* ticks so far; the one running while in_tick */
    int in_tick;
};

/* ---- policy.c ---------------------------------------------------------- */

void pol_push(struct pol_actions *out, enum pol_act_kind kind, const struct pol_job *j,
              uint64_t for_job, uint64_t bytes, enum pol_why why);
void pol_account(struct policy *p, const struct pol_job *j);
void pol_unaccount(struct policy *p, const struct pol_job *j);
struct pol_job *pol_find(struct policy *p, uint64_t id);
static inline size_t pol_index(const struct policy *p, const struct pol_job *j)
{
    return (size_t)(j - p->jobs);
}
/* A job's compute as placement counts it: its share, or the whole device. */
static inline unsigned pol_job_share(const struct pol_job *j)
{
    return j->compute ? j->compute : POL_COMPUTE_FULL;
}
/* May unplaced job j be placed on dev (its partition, pol_job_spec)? */
static inline int pol_may_place(const struct pol_job *j, int dev)
{
    return !j->dev_count || (dev >= j->dev_first && dev < j->dev_first + j->dev_count);
}
static inline uint64_t pol_pu(const struct policy *p, int proj, int dev)
{
    return p->proj_used[(size_t)proj * p->ndev + dev];
}
static inline uint64_t pol_pc(const struct policy *p, int proj, int dev)
{
    return p->proj_claimed[(size_t)proj * p->ndev + dev];
}
static inline uint64_t pol_res(const struct policy *p, int proj, int dev)
{
    return p->reserved[(size_t)proj * p->ndev + dev];
}
/* Tasks of j's gang (j alone when it has none), as indexes into p->jobs; returns how many. */
size_t pol_gang_of(const struct policy *p, const struct pol_job *j, size_t *out);
/* Is the job one policy_tick may resume (now)? */
int pol_resumable(const struct pol_job *j, uint64_t now);

/* ---- quota.c ----------------------------------------------------------- */

/*
 * Usage as a decision sees it: the real per-project usage, or a tentative
 * copy with some victims already taken off (struct tent, victims.c). A NULL
 * tent means the real numbers.
 */
struct tent {
    uint64_t *used;               /* [proj * ndev + dev], valid where init[dev] */
    unsigned *compute;            /* per device */
    unsigned char *init;          /* per device: column copied */
    unsigned char *taken;         /* per job: picked as a victim */
};

uint64_t pol_tent_used(const struct policy *p, const struct tent *t, int proj, int dev);
/* Bytes of project q's reservation on dev that it never lends. */
uint64_t pol_unlendable(const struct policy *p, int q, int dev);
uint64_t pol_borrow_limit(const struct policy *p, int q);
/*
 * Room for project P on dev: capacity minus what P holds minus what every
 * other project holds or keeps unlent. own_claim: a claim of the requester
 * itself, which is room for it.
 */
uint64_t pol_room(const struct policy *p, const struct tent *t, int P, int dev, uint64_t own_claim);
/* Compute left on dev (permille) under pack_compute; own: the requester's share already counted. */
unsigned pol_compute_room(const struct policy *p, const struct tent *t, int dev, unsigned own);
/* May project P hold `bytes` more on dev (its borrowing limit)? */
int pol_may_take(const struct policy *p, int P, int dev, uint64_t bytes, uint64_t own_claim);

/* Victim classes, best first (policy.h, "Preemption"). */
enum pol_class {
    POL_CLASS_JUMPER = 0,         /* it jumped the requester */
    POL_CLASS_OUTSIDER,           /* a borrower from outside the requester's cohort */
    POL_CLASS_BORROWER,           /* a borrower within it (or of the same project) */
    POL_CLASS_PROTECTED,          /* within its reservation */
    POL_CLASS_NONE = -1,
};

/* What the requester is, for every victim it considers. */
struct pol_asker {
    const struct pol_job *r;
    int dev;
    uint64_t bytes;
    int reclaims_own;             /* stays within its project's reservation */
    int reclaims_cohort;          /* stays within its cohort's reservations */
    uint64_t now;
};
void pol_asker_init(const struct policy *p, struct pol_asker *a, const struct pol_job *r, int dev,
                    uint64_t bytes, uint64_t now);
/* Class of v as a victim of a on a's device (v's own eligibility aside), and why. */
enum pol_class pol_victim_class(const struct policy *p, const struct pol_asker *a,
                                const struct pol_job *v, const struct tent *t, enum pol_why *why);

/* ---- victims.c --------------------------------------------------------- */

int pol_tent_init(const struct policy *p, struct tent *t);
void pol_tent_free(struct tent *t);
void pol_tent_column(const struct policy *p, struct tent *t, int dev);

/* A task that needs room: who, where, how much (a unit is several). */
/*
 * The jobs of each device, taken once for a search that tries device after
 * device while nothing changes (decide.c, preempt_any): the indexes into
 * p->jobs of the jobs on dev are idx[start[dev]] .. idx[start[dev + 1] - 1].
 * Valid until a job is added, removed or moved.
 */
struct pol_dev_jobs {
    size_t *idx;                  /* njobs */
    size_t *start;                /* ndev + 1 */
};
int pol_dev_jobs_take(const struct policy *p, struct pol_dev_jobs *dj);
void pol_dev_jobs_free(struct pol_dev_jobs *dj);

struct pol_need {
    struct pol_job *j;
    int dev;
    uint64_t bytes;
    uint64_t own_claim;           /* of j itself on dev */
    unsigned compute;             /* share that must fit (pack_compute), 0: none */
    unsigned own_compute;         /* of j itself, claimed on dev already */
    const struct pol_dev_jobs *on_dev;  /* the jobs of each device, or NULL: look */
};
/* Does the need fit with the usage t (NULL: the real one)? */
int pol_need_met(const struct policy *p, const struct tent *t, const struct pol_need *nd);
/* Fill a need for job j wanting `bytes` more on dev (own claims worked out). */
void pol_need_for(const struct policy *p, struct pol_need *nd, struct pol_job *j, int dev,
                  uint64_t bytes);
/*
 * Make room for every need of the unit (n tasks on distinct devices), all or
 * none, choosing
 * victims of the classes allowed (jumpers_only: class JUMPER only). On
 * success every task whose room needs victims is PREEMPTING (its SUSPENDs
 * appended) and the others fit already: *fits_now[i] says which. Returns 1
 * (started), 0 (not enough victims: nothing changed), -ENOMEM.
 */
int pol_make_room(struct policy *p, struct pol_need *need, size_t n, int jumpers_only,
                  uint64_t now, int *fits_now, struct pol_actions *out);

/* ---- decide.c ---------------------------------------------------------- */

void pol_grant(struct policy *p, struct pol_job *j, int dev, uint64_t bytes, enum pol_why why,
               uint64_t now, struct pol_actions *out);
void pol_start_resume(struct policy *p, struct pol_job *j, enum pol_why why, uint64_t now,
                      struct pol_actions *out);
void pol_end_request(struct policy *p, struct pol_job *j);
/* The device with the least room left after placing bytes (and compute), not in skip[], or -1. */
int pol_best_fit(const struct policy *p, const struct pol_job *j, uint64_t bytes,
                 const unsigned char *skip);
/*
 * The decision for a request (new, or retried by tick/acks). in_tick: a
 * waiting request that still does not fit stays waiting silently.
 * Returns 1 when the request was settled or preemption started, 0 when it
 * waits or was denied, -ENOMEM.
 */
int pol_decide(struct policy *p, struct pol_job *j, uint64_t bytes, uint64_t observed_free,
               int in_tick, uint64_t now, struct pol_actions *out);

/* ---- tick.c ------------------------------------------------------------ */

/* Since when j waits to run (a waiting request, a resumable suspended job, or
 * one preempting after it waited); 0 when it does not wait. */
uint64_t pol_waiting_since(const struct pol_job *j, uint64_t now);
/* Is h ahead of job b's position in the queue (b waiting since b_since)? */
int pol_ahead(const struct policy *p, const struct pol_job *h, uint64_t h_since, int b_prio,
              uint64_t b_since, uint64_t b_id);
/* j starts (or resumes) on dev now from its queue position (prio, since):
 * mark it as a jumper if a waiting job ahead of it could use dev. */
void pol_mark_start(struct policy *p, struct pol_job *j, int dev, uint64_t since, uint64_t now);
/* With cfg.strict: a waiting job ahead of (prio, since) could use dev. */
int pol_waiter_ahead(const struct policy *p, const struct pol_job *self, int dev, int prio,
                     uint64_t since, uint64_t now);
/* Resume a gang (or a lone job) whose tasks are suspended, when all fit
 * (or, with backfill, by suspending jobs that jumped it). 1: resumed or
 * room is being made; 0: not now; -ENOMEM. */
int pol_try_resume(struct policy *p, struct pol_job *j, uint64_t now, struct pol_actions *out);

#endif
