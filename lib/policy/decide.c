/*
 * decide.c - requests and their outcomes: grants, waits, denials, the
 * acknowledgements of suspensions and resumptions, jobs leaving, and the
 * operations users ask for by hand (policy.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void pol_remove_job(struct policy *p, struct pol_job *j);

/* ---------------------------------------------------------------------------
 * Grants and resumes
 * ------------------------------------------------------------------------- */

void pol_grant(struct policy *p, struct pol_job *j, int dev, uint64_t bytes, enum pol_why why,
               uint64_t now, struct pol_actions *out)
{
    pol_unaccount(p, j);
    if (j->mem == 0)
        j->since_ns = now;              /* its first memory: nothing to lose before this */
    j->device = dev;
    j->mem += bytes;
    j->req = POL_REQ_NONE;
    j->want = 0;
    j->victims_pending = 0;
    pol_account(p, j);
    pol_mark_start(p, j, dev, j->queued_ns, now);
    pol_push(out, POL_ACT_GRANT, j, 0, bytes, why);
}

void pol_end_request(struct policy *p, struct pol_job *j)
{
    pol_unaccount(p, j);
    j->req = POL_REQ_NONE;
    j->want = 0;
    j->victims_pending = 0;
    pol_account(p, j);
}

void pol_start_resume(struct policy *p, struct pol_job *j, enum pol_why why, uint64_t now,
                      struct pol_actions *out)
{
    pol_unaccount(p, j);
    j->state = POL_RESUMING;
    j->req = POL_REQ_NONE;
    j->want = 0;
    j->victims_pending = 0;
    pol_account(p, j);
    pol_mark_start(p, j, j->device, j->queued_ns, now);
    pol_push(out, POL_ACT_RESUME, j, 0, j->mem, why);
}

/* Can j take bytes (and its compute share) on dev, as things are? */
static int fits_on(const struct policy *p, struct pol_job *j, int dev, uint64_t bytes)
{
    struct pol_need nd;

    if (p->cap[dev] < bytes || !pol_may_take(p, j->project, dev, bytes, 0))
        return 0;
    pol_need_for(p, &nd, j, dev, bytes);
    return pol_need_met(p, NULL, &nd);
}

/*
 * Memory that suspended jobs ahead of j wait to have back, per device: a job
 * placed there would take their room and be suspended again when they
 * resume (backfill), so placement goes elsewhere when it can. NULL when
 * there is none (or out of memory: placement then ignores it).
 */
static uint64_t *waiting_back(const struct policy *p, const struct pol_job *j)
{
    uint64_t *w = NULL;

    for (size_t i = 0; i < p->njobs; i++) {
        const struct pol_job *k = &p->jobs[i];
        uint64_t since = pol_waiting_since(k, 0);
        if (k->state != POL_SUSPENDED || !since || k->device < 0 ||
            !pol_ahead(p, k, since, j->priority, j->queued_ns, j->id))
            continue;
        if (!w && !(w = calloc((size_t)p->ndev, sizeof(*w))))
            return NULL;
        w[k->device] += k->mem;
    }
    return w;
}

int pol_best_fit(const struct policy *p, const struct pol_job *j, uint64_t bytes,
                 const unsigned char *skip)
{
    uint64_t *back = waiting_back(p, j);
    int best = -1, best_free = 0;
    uint64_t best_left = 0;

    for (int d = 0; d < p->ndev; d++) {
        if ((skip && skip[d]) || !pol_may_place(j, d) || !fits_on(p, (struct pol_job *)j, d, bytes))
            continue;
        uint64_t left = pol_room(p, NULL, j->project, d, 0) - bytes;
        int is_free = !back || back[d] <= left;   /* leaves room for those who wait to come back */
        if (best < 0 || is_free > best_free || (is_free == best_free && left < best_left)) {
            best = d;
            best_left = left;
            best_free = is_free;
        }
    }
    free(back);
    return best;
}

/* ---------------------------------------------------------------------------
 * Preemption for one job
 * ------------------------------------------------------------------------- */

/* Make room for j (bytes on dev, plus `extra` the driver says is not free).
 * 1: started (or it fits after all: granted); 0: no way; -ENOMEM. */
static int preempt_on(struct policy *p, struct pol_job *j, int dev, uint64_t bytes, uint64_t extra,
                      const struct pol_dev_jobs *on_dev, uint64_t now, struct pol_actions *out)
{
    struct pol_need nd;
    int fits = 0, r;

    pol_need_for(p, &nd, j, dev, bytes + extra);
    nd.on_dev = on_dev;
    r = pol_make_room(p, &nd, 1, 0, now, &fits, out);
    if (r == 1 && fits)
        pol_grant(p, j, dev, bytes, POL_WHY_FITS, now, out);
    return r;
}

/* Could room be made on dev for j's bytes (and, packing compute, its share)
 * by suspending the jobs there that are its victims now (on_dev: the jobs by
 * device)? A device's room alone says nothing of that: it may be full of
 * j's peers. */
static int room_can_be_made(const struct policy *p, const struct pol_job *j, int dev,
                            uint64_t bytes, uint64_t room, const struct pol_dev_jobs *on_dev,
                            uint64_t now)
{
    unsigned need = p->cfg.pack_compute ? pol_job_share(j) : 0;
    unsigned compute = need ? pol_compute_room(p, NULL, dev, 0) : 0;
    struct pol_asker a;

    pol_asker_init(p, &a, j, dev, bytes, now);
    for (size_t k = on_dev->start[dev]; k < on_dev->start[dev + 1]; k++) {
        const struct pol_job *v = &p->jobs[on_dev->idx[k]];
        enum pol_why why;
        if (room >= bytes && compute >= need)
            break;
        if (v == j || !v->mem || v->state != POL_RUNNING || v->req != POL_REQ_NONE ||
            (v->gang && v->gang == j->gang) ||
            pol_victim_class(p, &a, v, NULL, &why) == POL_CLASS_NONE)
            continue;
        room += v->mem;
        compute += need ? pol_job_share(v) : 0;
    }
    return room >= bytes && compute >= need;
}

/* The device not in skip[] where job j may take bytes (its partition, its
 * borrowing limit) and room can be made for them, the one with the most
 * room first; -1 when there is none. */
static int most_room(const struct policy *p, const struct pol_job *j, uint64_t bytes,
                     const unsigned char *skip, const struct pol_dev_jobs *on_dev, uint64_t now)
{
    int best = -1;
    uint64_t best_room = 0;

    for (int d = 0; d < p->ndev; d++) {
        if (skip[d] || !pol_may_place(j, d) || p->cap[d] < bytes ||
            !pol_may_take(p, j->project, d, bytes, 0))
            continue;
        uint64_t room = pol_room(p, NULL, j->project, d, 0);
        if ((best >= 0 && room <= best_room) ||
            !room_can_be_made(p, j, d, bytes, room, on_dev, now))
            continue;
        best = d;
        best_room = room;
    }
    return best;
}

struct dev_room {
    uint64_t room;
    int dev;
};

/* Most room first; on a tie the lower index, as most_room() picks. */
static int by_most_room(const void *a, const void *b)
{
    const struct dev_room *x = a, *y = b;

    if (x->room != y->room)
        return x->room < y->room ? 1 : -1;
    return (x->dev > y->dev) - (x->dev < y->dev);
}

/*
 * For an unplaced job: the devices with the most room first, each while none
 * succeeds. 1: started; 0: no way; -ENOMEM. The order is taken once: a device
 * where no way was found leaves the policy as it was (pol_make_room changes
 * nothing when it returns 0), so the rooms of the others and the jobs on each stay what they were.
 * Asking most_room() again each round cost ndev^2 room sums per waiting job
 * and tick, most of the replay's time at 64 GPUs.
 */
static int preempt_any(struct policy *p, struct pol_job *j, uint64_t bytes, uint64_t now,
                       struct pol_actions *out)
{
    struct pol_dev_jobs on_dev = { 0 };
    struct dev_room *order;
    int n = 0, r = 0;

    if (p->cfg.no_preemption)
        return 0;
    order = malloc((size_t)(p->ndev ? p->ndev : 1) * sizeof(*order));
    if (!order || pol_dev_jobs_take(p, &on_dev) < 0) {
        free(order);
        return -ENOMEM;
    }
    /* Only devices where room_can_be_made: a victim search on each device
     * at every tick was most of the replay's time. It counts the jobs that
     * are victims now; a search can, rarely, find more (taking a victim can
     * make a job of another project a fair-share victim): such a device is
     * passed over, as place_gang passes it over. */
    for (int d = 0; d < p->ndev; d++) {
        uint64_t room;
        if (!pol_may_place(j, d) || p->cap[d] < bytes || !pol_may_take(p, j->project, d, bytes, 0))
            continue;
        room = pol_room(p, NULL, j->project, d, 0);
        if (room_can_be_made(p, j, d, bytes, room, &on_dev, now))
            order[n++] = (struct dev_room){ room, d };
    }
    qsort(order, (size_t)n, sizeof(*order), by_most_room);
    for (int i = 0; i < n && r == 0; i++)
        r = preempt_on(p, j, order[i].dev, bytes, 0, &on_dev, now, out);
    pol_dev_jobs_free(&on_dev);
    free(order);
    return r;
}

/* ---------------------------------------------------------------------------
 * Gangs not yet placed (the replay's multi-GPU jobs)
 * ------------------------------------------------------------------------- */

/* Place every task of j's gang at once, on distinct devices, or none.
 * 1: placed (granted, or room is being made); 0: waits; -ENOMEM. */
static int place_gang(struct policy *p, struct pol_job *j, uint64_t bytes, uint64_t now,
                      struct pol_actions *out)
{
    size_t *g = malloc(p->njobs * sizeof(*g));
    size_t n = g ? pol_gang_of(p, j, g) : 0;
    unsigned char *skip = calloc((size_t)p->ndev, 1);
    struct pol_need *need = calloc(n ? n : 1, sizeof(*need));
    int *dev = calloc(n ? n : 1, sizeof(*dev)), *fits = calloc(n ? n : 1, sizeof(*fits));
    uint64_t *ids = calloc(n ? n : 1, sizeof(*ids));
    struct pol_dev_jobs on_dev = { 0 };
    int r = -ENOMEM;
    size_t placed = 0;

    if (!g || !skip || !need || !dev || !fits || !ids)
        goto out;
    r = 0;
    for (size_t i = 0; i < n; i++) {
        const struct pol_job *t = &p->jobs[g[i]];
        ids[i] = t->id;
        /* every task must have asked (the request in flight is this one) */
        if (t->device >= 0 || (t != j && t->req != POL_REQ_WAITING))
            goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct pol_job *t = &p->jobs[g[i]];
        uint64_t want = t == j ? bytes : t->want;
        dev[i] = pol_best_fit(p, t, want, skip);
        if (dev[i] < 0)
            break;
        skip[dev[i]] = 1;
        placed++;
    }
    if (placed == n) {
        for (size_t i = 0; i < n; i++) {
            struct pol_job *t = pol_find(p, ids[i]);
            pol_grant(p, t, dev[i], t == j ? bytes : t->want, POL_WHY_FITS, now, out);
        }
        r = 1;
        goto out;
    }
    if (p->cfg.no_preemption)
        goto out;
    /* Not all fit: make room on the devices with the most room where it can
     * be made, one task each. */
    memset(skip, 0, (size_t)p->ndev);
    if (pol_dev_jobs_take(p, &on_dev) < 0) {
        r = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct pol_job *t = &p->jobs[g[i]];
        int best = most_room(p, t, t == j ? bytes : t->want, skip, &on_dev, now);
        if (best < 0)
            goto out;
        skip[best] = 1;
        pol_need_for(p, &need[i], t, best, t == j ? bytes : t->want);
    }
    r = pol_make_room(p, need, n, 0, now, fits, out);
    if (r != 1)
        goto out;
    for (size_t i = 0; i < n; i++) {
        struct pol_job *t = pol_find(p, ids[i]);
        if (fits[i])
            pol_grant(p, t, need[i].dev, need[i].bytes, POL_WHY_FITS, now, out);
    }
out:
    pol_dev_jobs_free(&on_dev);
    free(g);
    free(skip);
    free(need);
    free(dev);
    free(fits);
    free(ids);
    return r;
}

/* ---------------------------------------------------------------------------
 * The decision
 * ------------------------------------------------------------------------- */

static int wait_or_deny(struct policy *p, struct pol_job *j, uint64_t bytes,
                        struct pol_actions *out)
{
    if (p->may_wait[pol_index(p, j)]) {
        if (j->req != POL_REQ_WAITING) {
            pol_unaccount(p, j);
            j->req = POL_REQ_WAITING;
            j->want = bytes;
            pol_account(p, j);
            pol_push(out, POL_ACT_WAIT, j, 0, bytes, POL_WHY_NO_ROOM);
        }
        return 0;
    }
    pol_end_request(p, j);
    pol_push(out, POL_ACT_DENY, j, 0, bytes, POL_WHY_NO_ROOM);
    return 0;
}

/* A job ahead in the queue waits for this device: with cfg.strict, j must
 * not pass it (a fresh request, or one tick serves out of order). */
static int must_queue(const struct policy *p, const struct pol_job *j, int in_tick, uint64_t now)
{
    return p->cfg.strict && !in_tick &&
           pol_waiter_ahead(p, j, j->device, j->priority, j->queued_ns, now);
}

int pol_decide(struct policy *p, struct pol_job *j, uint64_t bytes, uint64_t observed_free,
               int in_tick, uint64_t now, struct pol_actions *out)
{
    int dev = j->device, r;

    if (must_queue(p, j, in_tick, now))
        return wait_or_deny(p, j, bytes, out);
    if (dev < 0 && j->gang) {
        r = place_gang(p, j, bytes, now, out);
        return r != 0 ? r : wait_or_deny(p, j, bytes, out);
    }
    if (dev < 0) {
        int d = pol_best_fit(p, j, bytes, NULL);
        if (d >= 0) {
            pol_grant(p, j, d, bytes, POL_WHY_FITS, now, out);
            return 1;
        }
        r = preempt_any(p, j, bytes, now, out);
        return r != 0 ? r : wait_or_deny(p, j, bytes, out);
    }
    uint64_t own = j->req == POL_REQ_PREEMPTING ? j->want : 0;
    uint64_t f = pol_room(p, NULL, j->project, dev, own), extra = 0;
    if (observed_free != POL_FREE_UNKNOWN && observed_free < f) {
        extra = f - observed_free;      /* the driver knows of memory we do not */
        f = observed_free;
    }
    if (!pol_may_take(p, j->project, dev, bytes, own)) {
        pol_end_request(p, j);
        pol_push(out, POL_ACT_DENY, j, 0, bytes, POL_WHY_NO_BORROW);
        return 0;
    }
    struct pol_need nd;
    pol_need_for(p, &nd, j, dev, bytes);
    if (bytes <= f && pol_need_met(p, NULL, &nd)) {
        pol_grant(p, j, dev, bytes, j->req == POL_REQ_PREEMPTING ? POL_WHY_PREEMPTED : POL_WHY_FITS,
                  now, out);
        return 1;
    }
    if (j->req == POL_REQ_PREEMPTING)
        pol_end_request(p, j);
    r = preempt_on(p, j, dev, bytes, extra, NULL, now, out);
    return r != 0 ? r : wait_or_deny(p, j, bytes, out);
}

int policy_request(struct policy *p, uint64_t id, int device, uint64_t bytes,
                   uint64_t observed_free, int may_wait, uint64_t now, struct pol_actions *out)
{
    struct pol_job *j = pol_find(p, id);
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
        pol_unaccount(p, j);
        j->device = device;
        pol_account(p, j);
    }
    if (j->limit && !p->proj[j->project].may_borrow && j->mem + bytes > j->limit) {
        pol_push(out, POL_ACT_DENY, j, 0, bytes, POL_WHY_NO_BORROW);
        return out->oom ? -ENOMEM : 0;
    }
    p->may_wait[pol_index(p, j)] = may_wait != 0;
    j->queued_ns = now;                 /* its place in the queue, should it wait */
    r = pol_decide(p, j, bytes, observed_free, 0, now, out);
    return r < 0 ? r : out->oom ? -ENOMEM : 0;
}

int policy_request_cancel(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out)
{
    struct pol_job *j = pol_find(p, id);

    (void)now;
    if (!j)
        return -ENOENT;
    if (j->req == POL_REQ_NONE || j->state != POL_RUNNING)
        return -EINVAL;
    uint64_t want = j->want;
    pol_end_request(p, j);
    pol_push(out, POL_ACT_DENY, j, 0, want, POL_WHY_CANCELLED);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Acknowledgements
 * ------------------------------------------------------------------------- */

/* A requester whose last victim has answered: grant, deny, resume, or decide again. */
static int finish_preemption(struct policy *p, struct pol_job *r, uint64_t now,
                             struct pol_actions *out)
{
    if (r->state == POL_SUSPENDED) {
        /* it was resuming: the whole gang comes back when every task fits */
        pol_end_request(p, r);
        return r->victim_failed ? 0 : pol_try_resume(p, r, now, out) < 0 ? -ENOMEM : 0;
    }
    if (r->victim_failed) {
        uint64_t want = r->want, victim = r->failed_victim;
        pol_end_request(p, r);
        pol_push(out, POL_ACT_DENY, r, victim, want, POL_WHY_VICTIM_FAILED);
        return 0;
    }
    /* Usually it fits now; if measured usage grew meanwhile, decide again. */
    int d = pol_decide(p, r, r->want, POL_FREE_UNKNOWN, 1, now, out);
    return d < 0 ? d : 0;
}

static int victim_done(struct policy *p, uint64_t requester, uint64_t victim, int failed,
                       uint64_t now, struct pol_actions *out)
{
    struct pol_job *r = requester ? pol_find(p, requester) : NULL;

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
    struct pol_job *j = pol_find(p, id);
    uint64_t requester;

    if (!j)
        return -ENOENT;
    if (j->state != POL_SUSPENDING)
        return -EINVAL;
    requester = j->for_job;
    pol_unaccount(p, j);
    if (err == 0) {
        j->run_ns = policy_job_runtime(j, now);
        j->state = POL_SUSPENDED;
        j->queued_ns = now;
        j->bf_ns = 0;                   /* it waits in the queue like everyone else now */
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
    pol_account(p, j);
    int r = victim_done(p, requester, id, err != 0, now, out);
    return r < 0 ? r : out->oom ? -ENOMEM : 0;
}

int policy_job_resumed(struct policy *p, uint64_t id, int err, uint64_t now,
                       struct pol_actions *out)
{
    struct pol_job *j = pol_find(p, id);

    (void)out;
    if (!j)
        return -ENOENT;
    if (j->state != POL_RESUMING)
        return -EINVAL;
    pol_unaccount(p, j);
    if (err == 0) {
        j->state = POL_RUNNING;
        j->since_ns = now;
        j->resumes++;
        j->suspended_by = POL_BY_NONE;
        j->why = POL_WHY_NONE;
        j->auto_resume = 0;
    } else {
        j->state = POL_SUSPENDED;
        j->bf_ns = 0;
        j->retry_ns = now + p->cfg.resume_retry_ns;
    }
    pol_account(p, j);
    return 0;
}

int policy_job_exited(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out)
{
    struct pol_job *j = pol_find(p, id);
    uint64_t requester;

    if (!j)
        return -ENOENT;
    /* A victim that died while suspending freed its memory all the same. */
    requester = j->state == POL_SUSPENDING ? j->for_job : 0;
    pol_remove_job(p, j);
    int r = victim_done(p, requester, id, 0, now, out);
    return r < 0 ? r : out->oom ? -ENOMEM : 0;
}

/* ---------------------------------------------------------------------------
 * Manual operations
 * ------------------------------------------------------------------------- */

static void suspend_by_hand(struct pol_job *j, enum pol_why why, int auto_resume,
                            struct pol_actions *out)
{
    j->state = POL_SUSPENDING;
    j->suspended_by = POL_BY_MANUAL;
    j->why = why;
    j->for_job = 0;
    j->auto_resume = auto_resume != 0;
    pol_push(out, POL_ACT_SUSPEND, j, 0, j->mem, why);
}

int policy_manual_suspend(struct policy *p, uint64_t id, int auto_resume, uint64_t now,
                          struct pol_actions *out)
{
    struct pol_job *j = pol_find(p, id);
    size_t *g;
    size_t n;

    (void)now;
    if (!j)
        return -ENOENT;
    if (j->state == POL_SUSPENDED) {
        if (j->suspended_by == POL_BY_MANUAL)
            return -EALREADY;
        if (j->req != POL_REQ_NONE)
            pol_end_request(p, j);      /* it was making room to resume: no more */
    } else if (j->state != POL_RUNNING || j->req != POL_REQ_NONE || j->device < 0) {
        return -EBUSY;
    }
    g = malloc(p->njobs * sizeof(*g));
    if (!g)
        return -ENOMEM;
    n = pol_gang_of(p, j, g);
    for (size_t i = 0; i < n; i++) {
        struct pol_job *t = &p->jobs[g[i]];
        if (t->state == POL_SUSPENDED && t->req == POL_REQ_NONE) {
            t->suspended_by = POL_BY_MANUAL;    /* the user's word now: no automatic resume */
            t->why = POL_WHY_MANUAL;
            t->auto_resume = auto_resume != 0;
        } else if (t->state == POL_RUNNING && t->req == POL_REQ_NONE && t->device >= 0) {
            suspend_by_hand(t, t == j ? POL_WHY_MANUAL : POL_WHY_GANG, auto_resume, out);
        }
    }
    free(g);
    return out->oom ? -ENOMEM : 0;
}

int policy_manual_resume(struct policy *p, uint64_t id, uint64_t now, struct pol_actions *out)
{
    struct pol_job *j = pol_find(p, id);
    struct tent t = { 0 };
    size_t *g;
    size_t n;
    int r = 0;

    if (!j)
        return -ENOENT;
    if (j->state == POL_RUNNING)
        return -EALREADY;
    if (j->state != POL_SUSPENDED || j->req != POL_REQ_NONE)
        return -EBUSY;
    g = malloc(p->njobs * sizeof(*g));
    if (!g || pol_tent_init(p, &t) < 0) {
        free(g);
        return -ENOMEM;
    }
    n = pol_gang_of(p, j, g);
    /* every suspended task must fit, together */
    for (size_t i = 0; i < n && r == 0; i++) {
        struct pol_job *k = &p->jobs[g[i]];
        struct pol_need nd;
        if (k->state != POL_SUSPENDED || k->req != POL_REQ_NONE)
            continue;
        pol_need_for(p, &nd, k, k->device, k->mem);
        pol_tent_column(p, &t, k->device);
        if (!pol_need_met(p, &t, &nd))
            r = -ENOMEM;
        t.used[(size_t)k->project * p->ndev + k->device] += k->mem;
        t.compute[k->device] += nd.compute;
    }
    for (size_t i = 0; i < n && r == 0; i++) {
        struct pol_job *k = &p->jobs[g[i]];
        if (k->state == POL_SUSPENDED && k->req == POL_REQ_NONE)
            pol_start_resume(p, k, k == j ? POL_WHY_MANUAL : POL_WHY_GANG, now, out);
    }
    free(g);
    pol_tent_free(&t);
    return r < 0 ? r : out->oom ? -ENOMEM : 0;
}
