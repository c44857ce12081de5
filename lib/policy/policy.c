/*
 * policy.c - tcgpud's decisions; see policy.h for the model and the rules.
 *
 * Per-device used/claimed bytes and per-project-per-device usage are kept
 * up to date incrementally: every change to a job's memory, state, device or
 * request goes through unaccount() ... account(), so the sums never drift,
 * and policy_check() recomputes them from scratch to prove it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

struct policy {
    struct pol_config cfg;
    int ndev;
    uint64_t *cap;
    uint64_t *used;               /* per device */
    uint64_t *claimed;            /* per device */
    int nproj, projcap;
    struct pol_project *proj;
    uint64_t *proj_used;          /* [proj * ndev + dev] */
    struct pol_job *jobs;
    size_t njobs, jobcap;
    unsigned char *may_wait;      /* parallel to jobs */
};

/* ---------------------------------------------------------------------------
 * Action lists
 * ------------------------------------------------------------------------- */

void pol_actions_clear(struct pol_actions *a)
{
    a->n = 0;
    a->oom = 0;
}

void pol_actions_free(struct pol_actions *a)
{
    free(a->v);
    memset(a, 0, sizeof(*a));
}

static void push(struct pol_actions *out, enum pol_act_kind kind, const struct pol_job *j,
                 uint64_t for_job, uint64_t bytes, enum pol_why why)
{
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 16;
        struct pol_action *v = realloc(out->v, cap * sizeof(*v));
        if (!v) {
            out->oom = 1;
            return;
        }
        out->v = v;
        out->cap = cap;
    }
    out->v[out->n++] = (struct pol_action){
        .kind = kind, .job = j->id, .for_job = for_job, .device = j->device,
        .bytes = bytes, .why = why,
    };
}

/* ---------------------------------------------------------------------------
 * Accounting
 * ------------------------------------------------------------------------- */

static uint64_t contrib_used(const struct pol_job *j)
{
    return j->device >= 0 && j->state != POL_SUSPENDED ? j->mem : 0;
}

static uint64_t contrib_claimed(const struct pol_job *j)
{
    return j->device >= 0 && j->req == POL_REQ_PREEMPTING ? j->want : 0;
}

static void account(struct policy *p, const struct pol_job *j)
{
    if (j->device < 0)
        return;
    p->used[j->device] += contrib_used(j);
    p->claimed[j->device] += contrib_claimed(j);
    p->proj_used[(size_t)j->project * p->ndev + j->device] += contrib_used(j);
}

static void unaccount(struct policy *p, const struct pol_job *j)
{
    if (j->device < 0)
        return;
    p->used[j->device] -= contrib_used(j);
    p->claimed[j->device] -= contrib_claimed(j);
    p->proj_used[(size_t)j->project * p->ndev + j->device] -= contrib_used(j);
}

/* Recompute every sum from the jobs (after devices or projects were added). */
static void recount(struct policy *p)
{
    memset(p->used, 0, (size_t)p->ndev * sizeof(*p->used));
    memset(p->claimed, 0, (size_t)p->ndev * sizeof(*p->claimed));
    if (p->proj_used)
        memset(p->proj_used, 0, (size_t)p->nproj * p->ndev * sizeof(*p->proj_used));
    for (size_t i = 0; i < p->njobs; i++)
        account(p, &p->jobs[i]);
}

static uint64_t dev_free(const struct policy *p, int dev)
{
    uint64_t taken = p->used[dev] + p->claimed[dev];

    return taken >= p->cap[dev] ? 0 : p->cap[dev] - taken;
}

uint64_t pol_project_reserved(const struct pol_project *pr, int dev)
{
    for (int i = 0; i < pr->nreserve; i++)
        if (pr->reserve[i].device == dev)
            return pr->reserve[i].bytes;
    return 0;
}

uint64_t policy_reserved(const struct policy *p, int idx, int dev)
{
    if (idx < 0 || idx >= p->nproj)
        return 0;
    return pol_project_reserved(&p->proj[idx], dev);
}

uint64_t policy_project_used(const struct policy *p, int idx, int dev)
{
    if (idx < 0 || idx >= p->nproj || dev < 0 || dev >= p->ndev)
        return 0;
    return p->proj_used[(size_t)idx * p->ndev + dev];
}

/* ---------------------------------------------------------------------------
 * Set-up: devices, projects, jobs
 * ------------------------------------------------------------------------- */

struct policy *policy_new(const struct pol_config *cfg)
{
    struct policy *p = calloc(1, sizeof(*p));

    if (p && cfg)
        p->cfg = *cfg;
    return p;
}

void policy_free(struct policy *p)
{
    if (!p)
        return;
    free(p->cap);
    free(p->used);
    free(p->claimed);
    free(p->proj);
    free(p->proj_used);
    free(p->jobs);
    free(p->may_wait);
    free(p);
}

/* Grow the per-device arrays and the project matrix to n devices / m projects. */
static int resize(struct policy *p, int ndev, int nproj)
{
    uint64_t *cap = calloc((size_t)ndev, sizeof(*cap));
    uint64_t *used = calloc((size_t)ndev, sizeof(*used));
    uint64_t *claimed = calloc((size_t)ndev, sizeof(*claimed));
    uint64_t *pu = calloc((size_t)(nproj ? nproj : 1) * ndev, sizeof(*pu));

    if (!cap || !used || !claimed || !pu) {
        free(cap);
        free(used);
        free(claimed);
        free(pu);
        return -ENOMEM;
    }
    if (p->ndev)
        memcpy(cap, p->cap, (size_t)p->ndev * sizeof(*cap));
    free(p->cap);
    free(p->used);
    free(p->claimed);
    free(p->proj_used);
    p->cap = cap;
    p->used = used;
    p->claimed = claimed;
    p->proj_used = pu;
    p->ndev = ndev;
    p->nproj = nproj;
    recount(p);
    return 0;
}

int policy_set_device(struct policy *p, int dev, uint64_t capacity)
{
    int r;

    if (dev < 0 || dev >= POL_MAX_DEVICES)
        return -EINVAL;
    if (dev >= p->ndev && (r = resize(p, dev + 1, p->nproj)) < 0)
        return r;
    p->cap[dev] = capacity;
    return 0;
}

int policy_device_count(const struct policy *p)
{
    return p->ndev;
}

uint64_t policy_device_capacity(const struct policy *p, int dev)
{
    return dev >= 0 && dev < p->ndev ? p->cap[dev] : 0;
}

uint64_t policy_device_used(const struct policy *p, int dev)
{
    return dev >= 0 && dev < p->ndev ? p->used[dev] : 0;
}

uint64_t policy_device_claimed(const struct policy *p, int dev)
{
    return dev >= 0 && dev < p->ndev ? p->claimed[dev] : 0;
}

int policy_project_find(const struct policy *p, const char *name)
{
    for (int i = 0; i < p->nproj; i++)
        if (!strcmp(p->proj[i].name, name))
            return i;
    return -1;
}

int policy_add_project(struct policy *p, const struct pol_project *proj)
{
    int r;

    if (!proj->name[0] || memchr(proj->name, '\0', POL_NAME_MAX) == NULL ||
        policy_project_find(p, proj->name) >= 0 || proj->nreserve < 0 || proj->nreserve > 8)
        return -EINVAL;
    for (int i = 0; i < proj->nreserve; i++)
        if (proj->reserve[i].device < 0 || proj->reserve[i].device >= POL_MAX_DEVICES)
            return -EINVAL;
    if (p->nproj == p->projcap) {
        int cap = p->projcap ? p->projcap * 2 : 8;
        struct pol_project *v = realloc(p->proj, (size_t)cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        p->proj = v;
        p->projcap = cap;
    }
    p->proj[p->nproj] = *proj;
    /* The matrix gains a row; nothing uses the project yet. */
    if ((r = resize(p, p->ndev, p->nproj + 1)) < 0)
        return r;
    return p->nproj - 1;
}

int policy_project_count(const struct policy *p)
{
    return p->nproj;
}

const struct pol_project *policy_project(const struct policy *p, int idx)
{
    return idx >= 0 && idx < p->nproj ? &p->proj[idx] : NULL;
}

static struct pol_job *find(struct policy *p, uint64_t id)
{
    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].id == id)
            return &p->jobs[i];
    return NULL;
}

static size_t index_of(const struct policy *p, const struct pol_job *j)
{
    return (size_t)(j - p->jobs);
}

int policy_admit(struct policy *p, const struct pol_job_spec *s, uint64_t now)
{
    struct pol_job *j;

    if (s->id == 0 || s->project < 0 || s->project >= p->nproj ||
        s->device < POL_DEVICE_ANY || s->device >= p->ndev ||
        (s->state != POL_RUNNING && s->state != POL_SUSPENDED) ||
        (s->state == POL_SUSPENDED && s->device < 0))
        return -EINVAL;
    if (find(p, s->id))
        return -EEXIST;
    if (p->njobs == p->jobcap) {
        size_t cap = p->jobcap ? p->jobcap * 2 : 64;
        struct pol_job *v = realloc(p->jobs, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        p->jobs = v;
        unsigned char *w = realloc(p->may_wait, cap);
        if (!w)
            return -ENOMEM;
        p->may_wait = w;
        p->jobcap = cap;
    }
    j = &p->jobs[p->njobs];
    *j = (struct pol_job){
        .id = s->id, .project = s->project, .priority = s->priority, .device = s->device,
        .limit = s->limit, .mem = s->mem, .state = s->state, .start_ns = now, .since_ns = now,
        .queued_ns = now, .run_ns = s->run_ns, .preemptions = s->preemptions,
    };
    if (s->state == POL_SUSPENDED) {
        j->suspended_by = s->suspended_by ? s->suspended_by : POL_BY_POLICY;
        j->why = j->suspended_by == POL_BY_MANUAL ? POL_WHY_MANUAL : POL_WHY_PRIORITY;
        j->auto_resume = s->auto_resume;
        /* As after policy_job_suspended(): `now` is when it was suspended
         * (tcgpud re-learning it), and its requester comes first. */
        if (j->suspended_by == POL_BY_POLICY)
            j->retry_ns = now + p->cfg.min_runtime_ns;
    }
    p->may_wait[p->njobs] = 0;
    p->njobs++;
    account(p, j);
    return 0;
}

static void remove_job(struct policy *p, struct pol_job *j)
{
    size_t i = index_of(p, j);

    unaccount(p, j);
    memmove(&p->jobs[i], &p->jobs[i + 1], (p->njobs - i - 1) * sizeof(*p->jobs));
    memmove(&p->may_wait[i], &p->may_wait[i + 1], p->njobs - i - 1);
    p->njobs--;
}

size_t policy_job_count(const struct policy *p)
{
    return p->njobs;
}

const struct pol_job *policy_job_at(const struct policy *p, size_t i)
{
    return i < p->njobs ? &p->jobs[i] : NULL;
}

const struct pol_job *policy_job(const struct policy *p, uint64_t id)
{
    return find((struct policy *)p, id);
}

uint64_t policy_job_runtime(const struct pol_job *j, uint64_t now)
{
    int on = j->state == POL_RUNNING || j->state == POL_SUSPENDING;

    return j->run_ns + (on && now > j->since_ns ? now - j->since_ns : 0);
}

int policy_job_borrowing(const struct policy *p, const struct pol_job *j)
{
    if (j->device < 0)
        return 0;
    return policy_project_used(p, j->project, j->device) > policy_reserved(p, j->project, j->device);
}

int policy_set_usage(struct policy *p, uint64_t id, uint64_t bytes)
{
    struct pol_job *j = find(p, id);

    if (!j)
        return -ENOENT;
    if (j->state != POL_RUNNING || j->req != POL_REQ_NONE || j->device < 0)
        return 0;
    unaccount(p, j);
    j->mem = bytes;
    account(p, j);
    return 0;
}

int policy_set_limit(struct policy *p, uint64_t id, uint64_t limit)
{
    struct pol_job *j = find(p, id);

    if (!j)
        return -ENOENT;
    j->limit = limit;
    return 0;
}

/* ---------------------------------------------------------------------------
 * Victims
 * ------------------------------------------------------------------------- */

struct pick {
    size_t *idx;                  /* chosen victims, in order */
    size_t n;
    uint64_t freed;
};

/* Jobs on device dev, in admission order, into idx (room for njobs). */
static size_t jobs_on(const struct policy *p, int dev, size_t *idx)
{
    size_t n = 0;

    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].device == dev)
            idx[n++] = i;
    return n;
}

static int may_be_victim(const struct policy *p, const struct pol_job *v, uint64_t now)
{
    return v->state == POL_RUNNING && v->req == POL_REQ_NONE && v->mem > 0 &&
           now >= v->since_ns && now - v->since_ns >= p->cfg.min_runtime_ns;
}

/*
 * Class of V as a victim for R (policy.h, "Preemption"): 0 a borrower,
 * 1 a protected job, -1 not eligible. tent_used is V's project's usage on
 * the device with the victims picked so far taken off.
 */
static int victim_class(const struct policy *p, const struct pol_job *r, int reclaim,
                        const struct pol_job *v, uint64_t tent_used, enum pol_why *why)
{
    int borrowing = tent_used > policy_reserved(p, v->project, v->device);

    if (borrowing && (reclaim || r->priority > v->priority)) {
        *why = reclaim ? POL_WHY_RECLAIM : POL_WHY_PRIORITY;
        return 0;
    }
    if (!borrowing && reclaim && r->priority > v->priority) {
        *why = POL_WHY_PRIORITY;
        return 1;
    }
    return -1;
}

/* Is a a better victim than b (both of class ca, cb)? */
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

/*
 * Choose victims on dev among cand[0..n) that free at least `need` bytes for
 * r (which asks for `bytes`). Fills pk (idx has room for n) and why[] (per
 * job index). Returns 1 when enough were found, 0 otherwise.
 */
static int select_victims(struct policy *p, const struct pol_job *r, int dev, uint64_t bytes,
                          uint64_t need, const size_t *cand, size_t n, uint64_t now,
                          struct pick *pk, enum pol_why *why_of, uint64_t *tent)
{
    uint64_t r_used = policy_project_used(p, r->project, dev) + (r->device == dev ? 0 : r->mem);
    int reclaim = r_used + bytes <= policy_reserved(p, r->project, dev);
    unsigned char *taken = calloc(n ? n : 1, 1);

    pk->n = 0;
    pk->freed = 0;
    if (!taken)
        return 0;
    for (int i = 0; i < p->nproj; i++)
        tent[i] = policy_project_used(p, i, dev);
    while (pk->freed < need) {
        long best = -1;
        int best_cls = 0;
        enum pol_why best_why = POL_WHY_NONE;

        for (size_t k = 0; k < n; k++) {
            const struct pol_job *v = &p->jobs[cand[k]];
            enum pol_why w;
            int cls;
            if (taken[k] || v == r || !may_be_victim(p, v, now))
                continue;
            cls = victim_class(p, r, reclaim, v, tent[v->project], &w);
            if (cls < 0)
                continue;
            if (best < 0 || better_victim(v, cls, &p->jobs[cand[best]], best_cls)) {
                best = (long)k;
                best_cls = cls;
                best_why = w;
            }
        }
        if (best < 0)
            break;
        taken[best] = 1;
        const struct pol_job *v = &p->jobs[cand[best]];
        pk->idx[pk->n++] = cand[best];
        why_of[cand[best]] = best_why;
        pk->freed += v->mem;
        tent[v->project] -= v->mem;
    }
    free(taken);
    return pk->freed >= need;
}

/* Mark the picked victims SUSPENDING for r and emit their SUSPEND actions. */
static void start_preemption(struct policy *p, struct pol_job *r, uint64_t bytes,
                             const struct pick *pk, const enum pol_why *why_of,
                             struct pol_actions *out)
{
    for (size_t k = 0; k < pk->n; k++) {
        struct pol_job *v = &p->jobs[pk->idx[k]];
        v->state = POL_SUSPENDING;      /* still holds its memory: sums unchanged */
        v->suspended_by = POL_BY_POLICY;
        v->why = why_of[pk->idx[k]];
        v->for_job = r->id;
        v->suspended_for = r->id;
        v->auto_resume = 0;
        push(out, POL_ACT_SUSPEND, v, r->id, v->mem, v->why);
    }
    unaccount(p, r);
    r->req = POL_REQ_PREEMPTING;
    r->want = bytes;
    r->victims_pending = (unsigned)pk->n;
    r->victim_failed = 0;
    r->failed_victim = 0;
    account(p, r);
}

/* ---------------------------------------------------------------------------
 * Requests
 * ------------------------------------------------------------------------- */

static void grant(struct policy *p, struct pol_job *j, int dev, uint64_t bytes, enum pol_why why,
                  uint64_t now, struct pol_actions *out)
{
    unaccount(p, j);
    if (j->mem == 0)
        j->since_ns = now;              /* its first memory: nothing to lose before this */
    j->device = dev;
    j->mem += bytes;
    j->req = POL_REQ_NONE;
    j->want = 0;
    j->victims_pending = 0;
    account(p, j);
    push(out, POL_ACT_GRANT, j, 0, bytes, why);
}

static void end_request(struct policy *p, struct pol_job *j)
{
    unaccount(p, j);
    j->req = POL_REQ_NONE;
    j->want = 0;
    j->victims_pending = 0;
    account(p, j);
}

/* The device with the least room left after placing bytes (best fit), or -1. */
static int best_fit(const struct policy *p, uint64_t bytes, const unsigned char *blocked)
{
    int best = -1;
    uint64_t best_left = 0;

    for (int d = 0; d < p->ndev; d++) {
        uint64_t f = dev_free(p, d);
        if ((blocked && blocked[d]) || f < bytes)
            continue;
        if (best < 0 || f - bytes < best_left) {
            best = d;
            best_left = f - bytes;
        }
    }
    return best;
}

/* Try to make room for j (bytes on dev) among the jobs cand[0..n) on dev.
 * 1: started; 0: no way; -ENOMEM. */
static int preempt_among(struct policy *p, struct pol_job *j, int dev, uint64_t bytes,
                         uint64_t freemem, const size_t *cand, size_t n, enum pol_why *why_of,
                         uint64_t now, struct pol_actions *out)
{
    size_t *picked = malloc((n ? n : 1) * sizeof(*picked));
    uint64_t *tent = calloc((size_t)(p->nproj ? p->nproj : 1), sizeof(*tent));
    struct pick pk = { .idx = picked };
    int r = -ENOMEM;

    if (!picked || !why_of || !tent)
        goto out;
    r = 0;
    if (select_victims(p, j, dev, bytes, bytes - freemem, cand, n, now, &pk, why_of, tent)) {
        if (j->device < 0) {            /* an unplaced job lands where room is made */
            unaccount(p, j);
            j->device = dev;
            account(p, j);
        }
        start_preemption(p, j, bytes, &pk, why_of, out);
        r = 1;
    }
out:
    free(picked);
    free(tent);
    return r;
}

static int try_preempt_on(struct policy *p, struct pol_job *j, int dev, uint64_t bytes,
                          uint64_t freemem, uint64_t now, struct pol_actions *out)
{
    size_t *cand;
    enum pol_why *why_of;
    int r = -ENOMEM;

    if (p->cfg.no_preemption)
        return 0;
    cand = malloc((p->njobs ? p->njobs : 1) * sizeof(*cand));
    why_of = malloc((p->njobs ? p->njobs : 1) * sizeof(*why_of));   /* written before read */
    if (cand && why_of)
        r = preempt_among(p, j, dev, bytes, freemem, cand, jobs_on(p, dev, cand), why_of, now, out);
    free(cand);
    free(why_of);
    return r;
}

/* Preemption for an unplaced job: the devices with most free memory first.
 * Jobs are bucketed by device once (counting sort), so that trying hundreds
 * of devices costs one pass over the jobs, not one per device. */
static int try_preempt_any(struct policy *p, struct pol_job *j, uint64_t bytes, uint64_t now,
                           struct pol_actions *out)
{
    size_t nd = (size_t)(p->ndev ? p->ndev : 1);
    size_t *start = calloc(nd + 1, sizeof(*start));
    size_t *order = malloc((p->njobs ? p->njobs : 1) * sizeof(*order));
    size_t *fill = calloc(nd, sizeof(*fill));
    unsigned char *tried = calloc(nd, 1);
    enum pol_why *why_of = malloc((p->njobs ? p->njobs : 1) * sizeof(*why_of));
    int r = -ENOMEM;

    if (p->cfg.no_preemption) {
        r = 0;
        goto out;
    }
    if (!start || !order || !fill || !tried || !why_of)
        goto out;
    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].device >= 0)
            start[p->jobs[i].device + 1]++;
    for (size_t d = 0; d < nd; d++)
        start[d + 1] += start[d];
    for (size_t i = 0; i < p->njobs; i++) {
        int d = p->jobs[i].device;
        if (d >= 0)
            order[start[d] + fill[d]++] = i;
    }
    r = 0;
    for (int round = 0; round < p->ndev && r == 0; round++) {
        int best = -1;
        for (int d = 0; d < p->ndev; d++)
            if (!tried[d] && p->cap[d] >= bytes && (best < 0 || dev_free(p, d) > dev_free(p, best)))
                best = d;
        if (best < 0)
            break;
        tried[best] = 1;
        r = preempt_among(p, j, best, bytes, dev_free(p, best), order + start[best],
                          start[best + 1] - start[best], why_of, now, out);
    }
out:
    free(why_of);
    free(start);
    free(order);
    free(fill);
    free(tried);
    return r;
}

static int project_may_take(const struct policy *p, const struct pol_job *j, int dev, uint64_t bytes)
{
    const struct pol_project *pr = &p->proj[j->project];

    if (pr->may_borrow || dev < 0)
        return 1;
    return policy_project_used(p, j->project, dev) + bytes <= policy_reserved(p, j->project, dev);
}

/*
 * The decision for a request (new, or retried by tick/acks). in_tick: a
 * waiting request that still does not fit stays waiting silently.
 * Returns 1 when the request was settled or preemption started, 0 when it
 * waits or was denied, -ENOMEM.
 */
static int decide(struct policy *p, struct pol_job *j, uint64_t bytes, uint64_t observed_free,
                  int in_tick, uint64_t now, struct pol_actions *out)
{
    int dev = j->device;
    int r;

    if (dev < 0) {
        int d = best_fit(p, bytes, NULL);
        if (d >= 0) {
            grant(p, j, d, bytes, POL_WHY_FITS, now, out);
            return 1;
        }
        r = try_preempt_any(p, j, bytes, now, out);
    } else {
        uint64_t f = dev_free(p, dev);
        if (j->req == POL_REQ_PREEMPTING)
            f += j->want;               /* its own claim is room for itself */
        if (observed_free != POL_FREE_UNKNOWN && observed_free < f)
            f = observed_free;
        if (!project_may_take(p, j, dev, bytes)) {
            end_request(p, j);
            push(out, POL_ACT_DENY, j, 0, bytes, POL_WHY_NO_BORROW);
            return 0;
        }
        if (bytes <= f) {
            grant(p, j, dev, bytes, j->req == POL_REQ_PREEMPTING ? POL_WHY_PREEMPTED : POL_WHY_FITS,
                  now, out);
            return 1;
        }
        if (j->req == POL_REQ_PREEMPTING)
            end_request(p, j);
        r = try_preempt_on(p, j, dev, bytes, f, now, out);
    }
    if (r != 0)
        return r;
    if (p->may_wait[index_of(p, j)]) {
        if (j->req != POL_REQ_WAITING) {
            unaccount(p, j);
            j->req = POL_REQ_WAITING;
            j->want = bytes;
            j->queued_ns = now;
            account(p, j);
            push(out, POL_ACT_WAIT, j, 0, bytes, POL_WHY_NO_ROOM);
        }
        return 0;
    }
    (void)in_tick;
    end_request(p, j);
    push(out, POL_ACT_DENY, j, 0, bytes, POL_WHY_NO_ROOM);
    return 0;
}

int policy_request(struct policy *p, uint64_t id, int device, uint64_t bytes,
                   uint64_t observed_free, int may_wait, uint64_t now, struct pol_actions *out)
{
    struct pol_job *j = find(p, id);
    int r;

    if (!j)
        return -ENOENT;
    if (bytes == 0 || device < POL_DEVICE_ANY || device >= p->ndev)
        return -EINVAL;
    if (j->state != POL_RUNNING || j->req != POL_REQ_NONE)
        return -EBUSY;
    if (device != POL_DEVICE_ANY && device != j->device) {
        if (j->mem != 0 && j->device >= 0)
            return -EINVAL;             /* one device per job */
        unaccount(p, j);
        j->device = device;
        account(p, j);
    }
    if (j->limit && !p->proj[j->project].may_borrow && j->mem + bytes > j->limit) {
        push(out, POL_ACT_DENY, j, 0, bytes, POL_WHY_NO_BORROW);
        return out->oom ? -ENOMEM : 0;
    }
    p->may_wait[index_of(p, j)] = may_wait != 0;
    r = decide(p, j, bytes, observed_free, 0, now, out);
    return r < 0 ? r : out->oom ? -ENOMEM : 0;
}

int policy_request_cancel(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out)
{
    struct pol_job *j = find(p, id);

    (void)now;
    if (!j)
        return -ENOENT;
    if (j->req == POL_REQ_NONE)
        return -EINVAL;
    uint64_t want = j->want;
    end_request(p, j);
    push(out, POL_ACT_DENY, j, 0, want, POL_WHY_CANCELLED);
    return 0;
}

/* A requester whose last victim has answered: grant, deny, or decide again. */
static int finish_preemption(struct policy *p, struct pol_job *r, uint64_t now,
                             struct pol_actions *out)
{
    if (r->victim_failed) {
        uint64_t want = r->want, victim = r->failed_victim;
        end_request(p, r);
        push(out, POL_ACT_DENY, r, victim, want, POL_WHY_VICTIM_FAILED);
        return 0;
    }
    /* Usually it fits now; if measured usage grew meanwhile, decide again. */
    int d = decide(p, r, r->want, POL_FREE_UNKNOWN, 0, now, out);
    return d < 0 ? d : 0;
}

static int victim_done(struct policy *p, uint64_t requester, uint64_t victim, int failed,
                       uint64_t now, struct pol_actions *out)
{
    struct pol_job *r = requester ? find(p, requester) : NULL;

    if (!r || r->req != POL_REQ_PREEMPTING || r->victims_pending == 0)
        return 0;
    r->victims_pending--;
    if (failed) {
        r->victim_failed = 1;
        r->failed_victim = victim;
    }
    return r->victims_pending ? 0 : finish_preemption(p, r, now, out);
}

int policy_job_suspended(struct policy *p, uint64_t id, int err, uint64_t now,
                         struct pol_actions *out)
{
    struct pol_job *j = find(p, id);
    uint64_t requester;

    if (!j)
        return -ENOENT;
    if (j->state != POL_SUSPENDING)
        return -EINVAL;
    requester = j->for_job;
    unaccount(p, j);
    if (err == 0) {
        j->run_ns = policy_job_runtime(j, now);
        j->state = POL_SUSPENDED;
        j->queued_ns = now;
        if (j->suspended_by == POL_BY_POLICY) {
            j->preemptions++;
            /* Hold it off for min_runtime: its requester needs time to
             * allocate the rest of what it came for; resuming the victim
             * into memory that only looks free would fail or thrash. */
            j->retry_ns = now + p->cfg.min_runtime_ns;
        }
    } else {
        j->state = POL_RUNNING;
        j->suspended_by = POL_BY_NONE;
        j->why = POL_WHY_NONE;
        j->auto_resume = 0;
    }
    j->for_job = 0;
    account(p, j);
    int r = victim_done(p, requester, id, err != 0, now, out);
    return r < 0 ? r : out->oom ? -ENOMEM : 0;
}

int policy_job_resumed(struct policy *p, uint64_t id, int err, uint64_t now,
                       struct pol_actions *out)
{
    struct pol_job *j = find(p, id);

    (void)out;
    if (!j)
        return -ENOENT;
    if (j->state != POL_RESUMING)
        return -EINVAL;
    unaccount(p, j);
    if (err == 0) {
        j->state = POL_RUNNING;
        j->since_ns = now;
        j->resumes++;
        j->suspended_by = POL_BY_NONE;
        j->why = POL_WHY_NONE;
        j->auto_resume = 0;
    } else {
        j->state = POL_SUSPENDED;
        j->retry_ns = now + p->cfg.resume_retry_ns;
    }
    account(p, j);
    return 0;
}

int policy_job_exited(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out)
{
    struct pol_job *j = find(p, id);
    uint64_t requester;

    if (!j)
        return -ENOENT;
    /* A victim that died while suspending freed its memory all the same. */
    requester = j->state == POL_SUSPENDING ? j->for_job : 0;
    remove_job(p, j);
    int r = victim_done(p, requester, id, 0, now, out);
    return r < 0 ? r : out->oom ? -ENOMEM : 0;
}

/* ---------------------------------------------------------------------------
 * Manual operations
 * ------------------------------------------------------------------------- */

int policy_manual_suspend(struct policy *p, uint64_t id, int auto_resume, uint64_t now,
                          struct pol_actions *out)
{
    struct pol_job *j = find(p, id);

    (void)now;
    if (!j)
        return -ENOENT;
    if (j->state == POL_SUSPENDED) {
        if (j->suspended_by == POL_BY_MANUAL)
            return -EALREADY;
        j->suspended_by = POL_BY_MANUAL;     /* the user's word now: no automatic resume */
        j->why = POL_WHY_MANUAL;
        j->auto_resume = auto_resume != 0;
        return 0;
    }
    if (j->state != POL_RUNNING || j->req != POL_REQ_NONE || j->device < 0)
        return -EBUSY;
    j->state = POL_SUSPENDING;
    j->suspended_by = POL_BY_MANUAL;
    j->why = POL_WHY_MANUAL;
    j->for_job = 0;
    j->auto_resume = auto_resume != 0;
    push(out, POL_ACT_SUSPEND, j, 0, j->mem, POL_WHY_MANUAL);
    return out->oom ? -ENOMEM : 0;
}

static void start_resume(struct policy *p, struct pol_job *j, enum pol_why why,
                         struct pol_actions *out)
{
    unaccount(p, j);
    j->state = POL_RESUMING;
    account(p, j);
    push(out, POL_ACT_RESUME, j, 0, j->mem, why);
}

int policy_manual_resume(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out)
{
    struct pol_job *j = find(p, id);

    (void)now;
    if (!j)
        return -ENOENT;
    if (j->state == POL_RUNNING)
        return -EALREADY;
    if (j->state != POL_SUSPENDED)
        return -EBUSY;
    if (j->mem > dev_free(p, j->device))
        return -ENOMEM;
    start_resume(p, j, POL_WHY_MANUAL, out);
    return out->oom ? -ENOMEM : 0;
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

static int resumable(const struct pol_job *j, uint64_t now)
{
    return j->state == POL_SUSPENDED && now >= j->retry_ns &&
           (j->suspended_by == POL_BY_POLICY || j->auto_resume);
}

/* Collect and order the jobs tick serves; returns how many (ids: their ids). */
static size_t tick_candidates(struct policy *p, uint64_t now, size_t *idx, uint64_t *ids)
{
    size_t n = 0;

    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *j = &p->jobs[i];
        if (resumable(j, now) || (j->state == POL_RUNNING && j->req == POL_REQ_WAITING))
            idx[n++] = i;
    }
    qsort_r(idx, n, sizeof(*idx), cmp_candidates, p);
    /* Decisions may reorder jobs[] (none remove jobs here, but stay safe): work by id. */
    for (size_t k = 0; k < n; k++)
        ids[k] = p->jobs[idx[k]].id;
    return n;
}

/* Serve one candidate. Returns 1 if it blocks its device (or everyone, for
 * an unplaced job), 0 otherwise, -ENOMEM. */
static int tick_one(struct policy *p, struct pol_job *j, unsigned char *blocked, int *blocked_any,
                    uint64_t now, struct pol_actions *out)
{
    if (j->state == POL_SUSPENDED) {
        if (blocked[j->device])
            return 0;
        if (j->mem <= dev_free(p, j->device)) {
            start_resume(p, j, POL_WHY_FITS, out);
            return 0;
        }
        blocked[j->device] = 1;
        return 0;
    }
    /* a waiting request */
    if (j->device < 0) {
        if (*blocked_any)
            return 0;
        int d = best_fit(p, j->want, blocked);
        if (d >= 0) {
            grant(p, j, d, j->want, POL_WHY_FITS, now, out);
            return 0;
        }
        int r = try_preempt_any(p, j, j->want, now, out);
        if (r < 0)
            return r;
        if (r == 0)
            *blocked_any = 1;
        else
            blocked[j->device] = 1;
        return 0;
    }
    if (blocked[j->device])
        return 0;
    int r = decide(p, j, j->want, POL_FREE_UNKNOWN, 1, now, out);
    if (r < 0)
        return r;
    if (j->req != POL_REQ_NONE)
        blocked[j->device] = 1;         /* still waiting, or room is being made for it */
    return 0;
}

int policy_tick(struct policy *p, uint64_t now, struct pol_actions *out)
{
    size_t *idx = malloc((p->njobs ? p->njobs : 1) * sizeof(*idx));
    uint64_t *ids = malloc((p->njobs ? p->njobs : 1) * sizeof(*ids));
    unsigned char *blocked = calloc((size_t)(p->ndev ? p->ndev : 1), 1);
    int blocked_any = 0, r = 0;
    size_t n;

    if (!idx || !ids || !blocked) {
        r = -ENOMEM;
        goto out;
    }
    n = tick_candidates(p, now, idx, ids);
    for (size_t k = 0; k < n && r >= 0; k++) {
        struct pol_job *j = find(p, ids[k]);
        if (j)
            r = tick_one(p, j, blocked, &blocked_any, now, out);
    }
    if (r >= 0 && out->oom)
        r = -ENOMEM;
out:
    free(idx);
    free(ids);
    free(blocked);
    return r < 0 ? r : 0;
}

/* ---------------------------------------------------------------------------
 * Names and the self-check
 * ------------------------------------------------------------------------- */

static const char *const state_names[] = { "running", "suspending", "suspended", "resuming" };
static const char *const why_names[] = {
    "none", "reclaim", "priority", "manual", "fits", "preempted", "no-room", "no-borrow",
    "victim-failed", "cancelled",
};
static const char *const act_names[] = { "?", "grant", "deny", "wait", "suspend", "resume" };
static const char *const by_names[] = { "none", "policy", "manual" };

const char *pol_state_name(enum pol_state s)
{
    return (unsigned)s < 4 ? state_names[s] : "?";
}

const char *pol_why_name(enum pol_why w)
{
    return (unsigned)w < sizeof(why_names) / sizeof(*why_names) ? why_names[w] : "?";
}

const char *pol_act_name(enum pol_act_kind k)
{
    return (unsigned)k < sizeof(act_names) / sizeof(*act_names) ? act_names[k] : "?";
}

const char *pol_by_name(enum pol_by b)
{
    return (unsigned)b < 3 ? by_names[b] : "?";
}

int pol_state_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, state_names[i]))
            return i;
    return -1;
}

int pol_by_parse(const char *s)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, by_names[i]))
            return i;
    return -1;
}

static int check_sums(const struct policy *p, char *msg, size_t len)
{
    for (int d = 0; d < p->ndev; d++) {
        uint64_t used = 0, claimed = 0;
        for (size_t i = 0; i < p->njobs; i++) {
            const struct pol_job *j = &p->jobs[i];
            if (j->device == d) {
                used += contrib_used(j);
                claimed += contrib_claimed(j);
            }
        }
        if (used != p->used[d] || claimed != p->claimed[d]) {
            snprintf(msg, len, "device %d: used %llu/claimed %llu, sums say %llu/%llu", d,
                     (unsigned long long)p->used[d], (unsigned long long)p->claimed[d],
                     (unsigned long long)used, (unsigned long long)claimed);
            return -EFAULT;
        }
        if (used > p->cap[d]) {
            snprintf(msg, len, "device %d: %llu bytes used, capacity %llu", d,
                     (unsigned long long)used, (unsigned long long)p->cap[d]);
            return -EFAULT;
        }
        for (int k = 0; k < p->nproj; k++) {
            uint64_t pu = 0;
            for (size_t i = 0; i < p->njobs; i++)
                if (p->jobs[i].device == d && p->jobs[i].project == k)
                    pu += contrib_used(&p->jobs[i]);
            if (pu != p->proj_used[(size_t)k * p->ndev + d]) {
                snprintf(msg, len, "project %s on device %d: usage drifted", p->proj[k].name, d);
                return -EFAULT;
            }
        }
    }
    return 0;
}

static int check_job(const struct policy *p, const struct pol_job *j, char *msg, size_t len)
{
    unsigned pending = 0;

    if (j->req != POL_REQ_NONE && j->state != POL_RUNNING) {
        snprintf(msg, len, "job %llu: a request while %s", (unsigned long long)j->id,
                 pol_state_name(j->state));
        return -EFAULT;
    }
    if (j->state == POL_SUSPENDED && j->suspended_by == POL_BY_NONE) {
        snprintf(msg, len, "job %llu: suspended by nobody", (unsigned long long)j->id);
        return -EFAULT;
    }
    if (j->req == POL_REQ_PREEMPTING) {
        for (size_t i = 0; i < p->njobs; i++)
            if (p->jobs[i].state == POL_SUSPENDING && p->jobs[i].for_job == j->id)
                pending++;
        if (pending != j->victims_pending) {
            snprintf(msg, len, "job %llu: %u victims pending, %u suspending for it",
                     (unsigned long long)j->id, j->victims_pending, pending);
            return -EFAULT;
        }
    }
    return 0;
}

int policy_check(const struct policy *p, char *msg, size_t len)
{
    int r = check_sums(p, msg, len);

    for (size_t i = 0; i < p->njobs && r == 0; i++)
        r = check_job(p, &p->jobs[i], msg, len);
    return r;
}
