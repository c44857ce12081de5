/*
 * policy.c - the policy's state: the action list, devices, projects, jobs
 * and their accounting, names, and the self-checks. The rules are in
 * policy.h; internal.h says which file holds which part of them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

void pol_push(struct pol_actions *out, enum pol_act_kind kind, const struct pol_job *j,
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

/* A job's share counts where it holds memory; a requester that holds none
 * yet claims its share while its victims suspend. */
static unsigned contrib_compute(const struct pol_job *j)
{
    return contrib_used(j) ? pol_job_share(j) : 0;
}

static unsigned contrib_compute_claimed(const struct pol_job *j)
{
    return !contrib_used(j) && contrib_claimed(j) ? pol_job_share(j) : 0;
}

void pol_account(struct policy *p, const struct pol_job *j)
{
    size_t k;

    if (j->device < 0)
        return;
    k = (size_t)j->project * p->ndev + j->device;
    p->used[j->device] += contrib_used(j);
    p->claimed[j->device] += contrib_claimed(j);
    p->compute[j->device] += contrib_compute(j);
    p->compute_claimed[j->device] += contrib_compute_claimed(j);
    p->proj_used[k] += contrib_used(j);
    p->proj_claimed[k] += contrib_claimed(j);
}

void pol_unaccount(struct policy *p, const struct pol_job *j)
{
    size_t k;

    if (j->device < 0)
        return;
    k = (size_t)j->project * p->ndev + j->device;
    p->used[j->device] -= contrib_used(j);
    p->claimed[j->device] -= contrib_claimed(j);
    p->compute[j->device] -= contrib_compute(j);
    p->compute_claimed[j->device] -= contrib_compute_claimed(j);
    p->proj_used[k] -= contrib_used(j);
    p->proj_claimed[k] -= contrib_claimed(j);
}

/* Recompute every sum from the jobs (after devices or projects were added). */
static void recount(struct policy *p)
{
    size_t cells = (size_t)p->nproj * p->ndev;

    memset(p->used, 0, (size_t)p->ndev * sizeof(*p->used));
    memset(p->claimed, 0, (size_t)p->ndev * sizeof(*p->claimed));
    memset(p->compute, 0, (size_t)p->ndev * sizeof(*p->compute));
    memset(p->compute_claimed, 0, (size_t)p->ndev * sizeof(*p->compute_claimed));
    memset(p->proj_used, 0, cells * sizeof(*p->proj_used));
    memset(p->proj_claimed, 0, cells * sizeof(*p->proj_claimed));
    for (size_t i = 0; i < p->njobs; i++)
        pol_account(p, &p->jobs[i]);
}

uint64_t pol_project_reserved(const struct pol_project *pr, int dev)
{
    for (int i = 0; i < pr->nreserve; i++)
        if (pr->reserve[i].device == dev)
            return pr->reserve[i].bytes;
    return 0;
}

/* POL_Q_LEND_WHOLE: is dev among the devices the project lends whole? */
static int lent_whole(const struct pol_project *pr, int dev)
{
    int lent = pr->nreserve * (int)pr->lend_pct / 100;

    for (int i = 0; i < pr->nreserve && i < lent; i++)
        if (pr->reserve[i].device == dev)
            return 1;
    return 0;
}

uint64_t pol_project_lendable(const struct pol_project *pr, int dev)
{
    uint64_t r = pol_project_reserved(pr, dev), l;

    if (!(pr->quota_flags & POL_Q_LENDING_LIMIT))
        return r;
    if ((pr->quota_flags & POL_Q_LEND_WHOLE) && pr->lend_pct)
        return lent_whole(pr, dev) ? r : 0;
    l = pr->lend_pct ? r / 100 * pr->lend_pct + r % 100 * pr->lend_pct / 100 : pr->lend_bytes;
    return l < r ? l : r;
}

uint64_t policy_reserved(const struct policy *p, int idx, int dev)
{
    if (idx < 0 || idx >= p->nproj || dev < 0 || dev >= p->ndev)
        return 0;
    return pol_res(p, idx, dev);
}

uint64_t policy_project_used(const struct policy *p, int idx, int dev)
{
    if (idx < 0 || idx >= p->nproj || dev < 0 || dev >= p->ndev)
        return 0;
    return pol_pu(p, idx, dev);
}

uint64_t policy_room(const struct policy *p, int idx, int dev)
{
    if (idx < 0 || idx >= p->nproj || dev < 0 || dev >= p->ndev)
        return 0;
    return pol_room(p, NULL, idx, dev, 0);
}

/* ---------------------------------------------------------------------------
 * Set-up: devices, projects
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
    free(p->compute);
    free(p->compute_claimed);
    free(p->proj);
    free(p->cohort);
    free(p->proj_used);
    free(p->proj_claimed);
    free(p->reserved);
    free(p->unlendable);
    free(p->jobs);
    free(p->may_wait);
    free(p->hkey);
    free(p->hval);
    free(p);
}

const struct pol_config *policy_config(const struct policy *p)
{
    return &p->cfg;
}

/* Grow the per-device arrays and the project matrices to ndev devices / nproj projects. */
static int resize(struct policy *p, int ndev, int nproj)
{
    size_t cells = (size_t)(nproj ? nproj : 1) * ndev;
    uint64_t *cap = calloc((size_t)ndev, sizeof(*cap));
    uint64_t *used = calloc((size_t)ndev, sizeof(*used));
    uint64_t *claimed = calloc((size_t)ndev, sizeof(*claimed));
    unsigned *compute = calloc((size_t)ndev, sizeof(*compute));
    unsigned *compute_claimed = calloc((size_t)ndev, sizeof(*compute_claimed));
    uint64_t *pu = calloc(cells, sizeof(*pu));
    uint64_t *pc = calloc(cells, sizeof(*pc));
    uint64_t *res = calloc(cells, sizeof(*res));
    uint64_t *unl = calloc(cells, sizeof(*unl));

    if (!cap || !used || !claimed || !compute || !compute_claimed || !pu || !pc || !res || !unl) {
        free(cap);
        free(used);
        free(claimed);
        free(compute);
        free(compute_claimed);
        free(pu);
        free(pc);
        free(res);
        free(unl);
        return -ENOMEM;
    }
    if (p->ndev)
        memcpy(cap, p->cap, (size_t)p->ndev * sizeof(*cap));
    free(p->cap);
    free(p->used);
    free(p->claimed);
    free(p->compute);
    free(p->compute_claimed);
    free(p->proj_used);
    free(p->proj_claimed);
    free(p->reserved);
    free(p->unlendable);
    p->cap = cap;
    p->used = used;
    p->claimed = claimed;
    p->compute = compute;
    p->compute_claimed = compute_claimed;
    p->proj_used = pu;
    p->proj_claimed = pc;
    p->reserved = res;
    p->unlendable = unl;
    p->ndev = ndev;
    p->nproj = nproj;
    /* the reservations as a matrix: looked up for every project on every decision */
    for (int q = 0; q < nproj && q < p->nproj; q++) {
        for (int d = 0; d < ndev; d++) {
            size_t k = (size_t)q * ndev + d;
            res[k] = pol_project_reserved(&p->proj[q], d);
            if (p->proj[q].quota_flags & POL_Q_LENDING_LIMIT)
                unl[k] = res[k] - pol_project_lendable(&p->proj[q], d);
        }
    }
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

unsigned policy_device_compute(const struct policy *p, int dev)
{
    return dev >= 0 && dev < p->ndev ? p->compute[dev] : 0;
}

int policy_project_find(const struct policy *p, const char *name)
{
    for (int i = 0; i < p->nproj; i++)
        if (!strcmp(p->proj[i].name, name))
            return i;
    return -1;
}

static int valid_project(const struct policy *p, const struct pol_project *proj)
{
    if (!proj->name[0] || memchr(proj->name, '\0', POL_NAME_MAX) == NULL ||
        memchr(proj->cohort, '\0', POL_NAME_MAX) == NULL ||
        policy_project_find(p, proj->name) >= 0 || proj->nreserve < 0 ||
        proj->nreserve > POL_MAX_RESERVE || proj->lend_pct > 100 || proj->weight > 1000 ||
        proj->compute > POL_COMPUTE_FULL)
        return 0;
    for (int i = 0; i < proj->nreserve; i++)
        if (proj->reserve[i].device < 0 || proj->reserve[i].device >= POL_MAX_DEVICES)
            return 0;
    return 1;
}

/* The cohort number of a new project: that of the first project naming the same cohort. */
static int cohort_number(const struct policy *p, const char *cohort)
{
    int next = 0;

    if (!cohort[0])
        return -1;
    for (int i = 0; i < p->nproj; i++) {
        if (p->cohort[i] >= next)
            next = p->cohort[i] + 1;
        if (!strcmp(p->proj[i].cohort, cohort))
            return p->cohort[i];
    }
    return next;
}

int policy_add_project(struct policy *p, const struct pol_project *proj)
{
    int r;

    if (!valid_project(p, proj))
        return -EINVAL;
    if (p->nproj == p->projcap) {
        int cap = p->projcap ? p->projcap * 2 : 8;
        struct pol_project *v = realloc(p->proj, (size_t)cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        p->proj = v;
        int *c = realloc(p->cohort, (size_t)cap * sizeof(*c));
        if (!c)
            return -ENOMEM;
        p->cohort = c;
        p->projcap = cap;
    }
    p->cohort[p->nproj] = cohort_number(p, proj->cohort);
    p->proj[p->nproj] = *proj;
    /* The matrices gain a row; nothing uses the project yet. */
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

/* ---------------------------------------------------------------------------
 * Jobs
 * ------------------------------------------------------------------------- */

static size_t slot_of(uint64_t id, size_t cap)
{
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static void hash_put(struct policy *p, uint64_t id, size_t idx)
{
    size_t k = slot_of(id, p->hcap);

    while (p->hkey[k] && p->hkey[k] != id)
        k = (k + 1) & (p->hcap - 1);
    p->hkey[k] = id;
    p->hval[k] = idx;
}

/* Rebuild the index for cap slots (jobs moved, or more room). 0 or -ENOMEM. */
static int hash_rebuild(struct policy *p, size_t cap)
{
    if (cap != p->hcap) {
        uint64_t *k = calloc(cap, sizeof(*k));
        size_t *v = malloc(cap * sizeof(*v));
        if (!k || !v) {
            free(k);
            free(v);
            return -ENOMEM;
        }
        free(p->hkey);
        free(p->hval);
        p->hkey = k;
        p->hval = v;
        p->hcap = cap;
    } else {
        memset(p->hkey, 0, cap * sizeof(*p->hkey));
    }
    for (size_t i = 0; i < p->njobs; i++)
        hash_put(p, p->jobs[i].id, i);
    return 0;
}

struct pol_job *pol_find(struct policy *p, uint64_t id)
{
    if (!p->hcap || !id)
        return NULL;
    for (size_t k = slot_of(id, p->hcap); p->hkey[k]; k = (k + 1) & (p->hcap - 1))
        if (p->hkey[k] == id)
            return &p->jobs[p->hval[k]];
    return NULL;
}

size_t pol_gang_of(const struct policy *p, const struct pol_job *j, size_t *out)
{
    size_t n = 0;

    if (!j->gang) {
        out[0] = pol_index(p, j);
        return 1;
    }
    for (size_t i = 0; i < p->njobs; i++)
        if (p->jobs[i].gang == j->gang)
            out[n++] = i;
    return n;
}

int pol_resumable(const struct pol_job *j, uint64_t now)
{
    return j->state == POL_SUSPENDED && j->req == POL_REQ_NONE && now >= j->retry_ns &&
           (j->suspended_by == POL_BY_POLICY || j->auto_resume);
}

static int valid_spec(const struct policy *p, const struct pol_job_spec *s)
{
    return s->id != 0 && s->project >= 0 && s->project < p->nproj &&
           s->device >= POL_DEVICE_ANY && s->device < p->ndev &&
           (s->state == POL_RUNNING || s->state == POL_SUSPENDED) &&
           !(s->state == POL_SUSPENDED && s->device < 0) && s->compute <= POL_COMPUTE_FULL &&
           s->dev_first >= 0 && s->dev_count >= 0 && s->dev_count <= p->ndev - s->dev_first;
}

static int grow_jobs(struct policy *p)
{
    size_t cap = p->jobcap ? p->jobcap * 2 : 64;
    struct pol_job *v = realloc(p->jobs, cap * sizeof(*v));
    unsigned char *w;

    if (!v)
        return -ENOMEM;
    p->jobs = v;
    w = realloc(p->may_wait, cap);
    if (!w)
        return -ENOMEM;
    p->may_wait = w;
    if (hash_rebuild(p, cap * 4) < 0)
        return -ENOMEM;
    p->jobcap = cap;
    return 0;
}

int policy_admit(struct policy *p, const struct pol_job_spec *s, uint64_t now)
{
    struct pol_job *j;
    int r;

    if (!valid_spec(p, s))
        return -EINVAL;
    if (pol_find(p, s->id))
        return -EEXIST;
    if (p->njobs == p->jobcap && (r = grow_jobs(p)) < 0)
        return r;
    j = &p->jobs[p->njobs];
    *j = (struct pol_job){
        .id = s->id, .project = s->project, .priority = s->priority, .device = s->device,
        .dev_first = s->dev_first, .dev_count = s->dev_count, .limit = s->limit,
        .compute = s->compute, .gang = s->gang, .mem = s->mem,
        .state = s->state, .start_ns = now, .since_ns = now, .queued_ns = now,
        .run_ns = s->run_ns, .preemptions = s->preemptions,
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
    hash_put(p, j->id, p->njobs);
    p->njobs++;
    pol_account(p, j);
    return 0;
}

void pol_remove_job(struct policy *p, struct pol_job *j);
void pol_remove_job(struct policy *p, struct pol_job *j)
{
    size_t i = pol_index(p, j);

    pol_unaccount(p, j);
    memmove(&p->jobs[i], &p->jobs[i + 1], (p->njobs - i - 1) * sizeof(*p->jobs));
    memmove(&p->may_wait[i], &p->may_wait[i + 1], p->njobs - i - 1);
    p->njobs--;
    hash_rebuild(p, p->hcap);           /* the same size: cannot fail */
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
    return pol_find((struct policy *)p, id);
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
    struct pol_job *j = pol_find(p, id);

    if (!j)
        return -ENOENT;
    if (j->state != POL_RUNNING || j->req != POL_REQ_NONE || j->device < 0)
        return 0;
    pol_unaccount(p, j);
    j->mem = bytes;
    pol_account(p, j);
    return 0;
}

int policy_job_relocate(struct policy *p, uint64_t id, int device)
{
    struct pol_job *j = pol_find(p, id);

    if (!j)
        return -ENOENT;
    if (device < 0 || device >= p->ndev)
        return -EINVAL;
    if (j->device == device)
        return 0;
    if (j->state != POL_RUNNING || j->req != POL_REQ_NONE)
        return -EBUSY;
    pol_unaccount(p, j);
    j->device = device;
    pol_account(p, j);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Names
 * ------------------------------------------------------------------------- */

static const char *const state_names[] = { "running", "suspending", "suspended", "resuming" };
static const char *const why_names[POL_WHY_COUNT] = {
    "none", "reclaim", "priority", "manual", "fits", "preempted", "no-room", "no-borrow",
    "victim-failed", "cancelled", "backfill", "fair-share", "gang",
};
static const char *const act_names[] = { "?", "grant", "deny", "wait", "suspend", "resume" };
static const char *const by_names[] = { "none", "policy", "manual" };

const char *pol_state_name(enum pol_state s)
{
    return (unsigned)s < 4 ? state_names[s] : "?";
}

const char *pol_why_name(enum pol_why w)
{
    return (unsigned)w < POL_WHY_COUNT ? why_names[w] : "?";
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

/* ---------------------------------------------------------------------------
 * The self-check
 * ------------------------------------------------------------------------- */

#define FAIL(...) do { snprintf(msg, len, __VA_ARGS__); return -EFAULT; } while (0)

static int check_device_sums(const struct policy *p, int d, char *msg, size_t len)
{
    uint64_t used = 0, claimed = 0;
    unsigned compute = 0, compute_claimed = 0;

    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *j = &p->jobs[i];
        if (j->device == d) {
            used += contrib_used(j);
            claimed += contrib_claimed(j);
            compute += contrib_compute(j);
            compute_claimed += contrib_compute_claimed(j);
        }
    }
    if (used != p->used[d] || claimed != p->claimed[d])
        FAIL("device %d: used %llu/claimed %llu, sums say %llu/%llu", d,
             (unsigned long long)p->used[d], (unsigned long long)p->claimed[d],
             (unsigned long long)used, (unsigned long long)claimed);
    if (compute != p->compute[d] || compute_claimed != p->compute_claimed[d])
        FAIL("device %d: compute %u/%u, sums say %u/%u", d, p->compute[d], p->compute_claimed[d],
             compute, compute_claimed);
    if (used > p->cap[d])
        FAIL("device %d: %llu bytes used, capacity %llu", d, (unsigned long long)used,
             (unsigned long long)p->cap[d]);
    if (p->cfg.pack_compute && compute > POL_COMPUTE_FULL)
        FAIL("device %d: compute shares %u permille", d, compute);
    return 0;
}

static int check_project_sums(const struct policy *p, int d, char *msg, size_t len)
{
    for (int k = 0; k < p->nproj; k++) {
        uint64_t pu = 0, pc = 0;
        for (size_t i = 0; i < p->njobs; i++) {
            if (p->jobs[i].device == d && p->jobs[i].project == k) {
                pu += contrib_used(&p->jobs[i]);
                pc += contrib_claimed(&p->jobs[i]);
            }
        }
        if (pu != pol_pu(p, k, d) || pc != pol_pc(p, k, d))
            FAIL("project %s on device %d: usage drifted", p->proj[k].name, d);
    }
    return 0;
}

/* Others never hold the part of a reservation its project does not lend. */
static int check_lending(const struct policy *p, int d, char *msg, size_t len)
{
    for (int q = 0; q < p->nproj; q++) {
        uint64_t unl = pol_unlendable(p, q, d), held_q = pol_pu(p, q, d);
        uint64_t others = p->used[d] - held_q;
        uint64_t keep = held_q > unl ? held_q : unl;
        if (unl && others > p->cap[d] - (keep < p->cap[d] ? keep : p->cap[d]))
            FAIL("device %d: others hold %llu MiB, project %s keeps %llu MiB unlent of %llu", d,
                 (unsigned long long)(others >> 20), p->proj[q].name,
                 (unsigned long long)(unl >> 20), (unsigned long long)(p->cap[d] >> 20));
    }
    return 0;
}

static int check_job(const struct policy *p, const struct pol_job *j, char *msg, size_t len)
{
    unsigned pending = 0;

    if (j->req == POL_REQ_WAITING && j->state != POL_RUNNING)
        FAIL("job %llu: waiting while %s", (unsigned long long)j->id, pol_state_name(j->state));
    if (j->req == POL_REQ_PREEMPTING && j->state != POL_RUNNING && j->state != POL_SUSPENDED)
        FAIL("job %llu: preempting while %s", (unsigned long long)j->id, pol_state_name(j->state));
    if (j->state == POL_SUSPENDED && j->suspended_by == POL_BY_NONE)
        FAIL("job %llu: suspended by nobody", (unsigned long long)j->id);
    if (j->req == POL_REQ_PREEMPTING) {
        for (size_t i = 0; i < p->njobs; i++)
            if (p->jobs[i].state == POL_SUSPENDING && p->jobs[i].for_job == j->id)
                pending++;
        if (pending != j->victims_pending)
            FAIL("job %llu: %u victims pending, %u suspending for it", (unsigned long long)j->id,
                 j->victims_pending, pending);
    }
    return 0;
}

int policy_check(const struct policy *p, char *msg, size_t len)
{
    int r = 0;

    for (int d = 0; d < p->ndev && r == 0; d++)
        if ((r = check_device_sums(p, d, msg, len)) == 0 &&
            (r = check_project_sums(p, d, msg, len)) == 0)
            r = check_lending(p, d, msg, len);
    for (size_t i = 0; i < p->njobs && r == 0; i++)
        r = check_job(p, &p->jobs[i], msg, len);
    return r;
}
