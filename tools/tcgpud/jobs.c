/* tcgpud's jobs and what happens to them; see jobs.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/names.h"
#include "conns.h"
#include "devices.h"
#include "jobs.h"
#include "metrics.h"
#include "state.h"

#define OP_TIMEOUT_MS    600000   /* a suspend of a very large job to disk takes minutes */

/* ---------------------------------------------------------------------------
 * Jobs
 * ------------------------------------------------------------------------- */

struct djob *add_job(pid_t pid, uid_t uid, const char *user, int project, uint64_t start)
{
    struct djob *j;

    if (d.njobs == d.cap) {
        size_t cap = d.cap ? d.cap * 2 : 32;
        struct djob *v = realloc(d.jobs, cap * sizeof(*v));
        if (!v)
            return NULL;
        d.jobs = v;
        d.cap = cap;
    }
    j = &d.jobs[d.njobs++];
    memset(j, 0, sizeof(*j));
    j->pid = pid;
    j->uid = uid;
    snprintf(j->user, sizeof(j->user), "%s", user);
    j->project = project;
    j->start_ticks = start;
    j->waiter = -1;
    j->req_conn = -1;
    return j;
}

uint64_t gang_for(uid_t uid, const char *name)
{
    /* by user and name: nobody joins, and so gets suspended with, another user's job */
    for (size_t i = 0; i < d.njobs; i++)
        if (d.jobs[i].gang && d.jobs[i].uid == uid && !strcmp(d.jobs[i].job_name, name))
            return d.jobs[i].gang;
    return ++d.last_gang;
}

static void remove_job(struct djob *j)
{
    size_t i = (size_t)(j - d.jobs);

    if (j->req_conn >= 0)
        conn_close(j->req_conn);
    if (j->waiter >= 0)
        reply_error(j->waiter, -ESRCH, "process %d exited", (int)j->pid);
    memmove(&d.jobs[i], &d.jobs[i + 1], (d.njobs - i - 1) * sizeof(*d.jobs));
    d.njobs--;
    d.dirty = 1;
}

void job_gone(struct djob *j, const char *how)
{
    const struct pol_job *pj = policy_job(d.pol, (uint64_t)j->pid);
    char rt[24];

    log_info("pid %d (project %s) %s", (int)j->pid, project_name(j->project), how);
    event("exited", j->pid, "how", how, "runtime_ms",
          msecs(pj ? policy_job_runtime(pj, now_ns()) : 0, rt), NULL);
    policy_job_exited(d.pol, (uint64_t)j->pid, now_ns(), &acts);
    remove_job(j);
    do_actions(&acts);
}

/* ---------------------------------------------------------------------------
 * Carrying out the policy's actions
 * ------------------------------------------------------------------------- */

/*
 * The state file is written before the job is asked (and so before any
 * effect): tcgpud killed at any moment after this leaves a state file that
 * calls the job suspended by whoever asked, so that the next tcgpud resumes
 * a victim the policy suspended, whether or not the suspend had finished.
 */
void start_op(struct djob *j, enum work_kind kind, const char *dir)
{
    struct work *w = calloc(1, sizeof(*w));
    int r;

    if (d.dirty)
        save_state();
    if (!w) {
        log_info("out of memory starting an operation on pid %d", (int)j->pid);
        return;
    }
    w->kind = kind;
    w->pid = j->pid;
    w->timeout_ms = OP_TIMEOUT_MS;
    if (dir)
        snprintf(w->dir, sizeof(w->dir), "%s", dir);
    j->busy = 1;
    j->op_t0 = now_ns();
    r = tcgpud_work_start(w);
    if (r < 0) {
        /* Report it as the operation's failure, through the same path. */
        w->err = r;
        snprintf(w->msg, sizeof(w->msg), "cannot start a worker: %s", strerror(-r));
        log_info("pid %d: %s", (int)j->pid, w->msg);
        j->busy = 0;
        struct pol_actions more = { 0 };
        if (kind == WORK_SUSPEND)
            policy_job_suspended(d.pol, (uint64_t)j->pid, r, now_ns(), &more);
        else
            policy_job_resumed(d.pol, (uint64_t)j->pid, r, now_ns(), &more);
        pol_actions_free(&more);
        free(w);
    }
}

static void reply_grant(struct djob *j, uint64_t bytes)
{
    static struct ctl_buf b;
    const struct pol_job *pj = policy_job(d.pol, (uint64_t)j->pid);
    uint64_t limit = pj ? pj->limit : 0;
    char t[24], by[24];

    latency_add(&d.grant_wait, (double)(now_ns() - j->req_t0) / 1e9);
    event("granted", j->pid, "bytes", u64s(bytes, by), "wait_ms", msecs(now_ns() - j->req_t0, t), NULL);
    if (j->req_conn >= 0) {
        ctl_buf_ok(&b);
        ctl_buf_put_u64(&b, "granted", bytes);
        ctl_buf_put_u64(&b, "limit", limit);
        send_msg(j->req_conn, &b);
        conn_close(j->req_conn);
    }
    j->req_conn = -1;
    j->req_gen = 0;
}

static void reply_deny(struct djob *j, const struct pol_action *a)
{
    char why[160], by[24];

    if (a->why == POL_WHY_VICTIM_FAILED)
        snprintf(why, sizeof(why), "process %llu did not suspend to make room",
                 (unsigned long long)a->for_job);
    else if (a->why == POL_WHY_NO_BORROW)
        snprintf(why, sizeof(why), "project %s may not use more than its reservation",
                 project_name(j->project));
    else if (a->why == POL_WHY_CANCELLED)
        snprintf(why, sizeof(why), "no room within the wait timeout");
    else
        snprintf(why, sizeof(why), "no room on GPU %d and no job that may be preempted for it",
                 a->device);
    event("denied", j->pid, "bytes", u64s(a->bytes, by), "why", pol_why_name(a->why), "text", why,
          NULL);
    log_info("pid %d (project %s): %llu MiB denied: %s", (int)j->pid, project_name(j->project),
             (unsigned long long)(a->bytes / MiB), why);
    if (j->req_conn >= 0)
        reply_error(j->req_conn, -ENOMEM, "%s", why);
    j->req_conn = -1;
    j->req_gen = 0;
}

/* Is suspension i of the list the first of its gang's for the same requester?
 * (A gang is preempted once, though each of its tasks is suspended.) */
static int first_of_gang(const struct pol_actions *a, size_t i, const struct djob *j)
{
    for (size_t k = 0; j->gang && k < i; k++) {
        const struct djob *o = job_of((pid_t)a->v[k].job);
        if (a->v[k].kind == POL_ACT_SUSPEND && o && o->gang == j->gang &&
            a->v[k].for_job == a->v[i].for_job)
            return 0;
    }
    return 1;
}

void do_actions(struct pol_actions *a)
{
    char b1[24], b2[24];

    if (a->n)
        d.dirty = 1;              /* the state file is rewritten only when something changed */
    for (size_t i = 0; i < a->n; i++) {
        const struct pol_action *x = &a->v[i];
        struct djob *j = job_of((pid_t)x->job);
        if (!j)
            continue;
        switch (x->kind) {
        case POL_ACT_GRANT:
            reply_grant(j, x->bytes);
            break;
        case POL_ACT_DENY:
            reply_deny(j, x);
            break;
        case POL_ACT_WAIT:
            event("waiting", j->pid, "bytes", u64s(x->bytes, b1), NULL);
            break;
        case POL_ACT_SUSPEND:
            if (x->for_job) {
                d.preemptions_total += first_of_gang(a, i, j);
                log_info("preempting pid %d (project %s, %llu MiB%s%s) for pid %llu: %s", (int)j->pid,
                         project_name(j->project), (unsigned long long)(x->bytes / MiB),
                         j->gang ? ", job " : "", j->job_name, (unsigned long long)x->for_job,
                         pol_why_name(x->why));
            }
            event("suspending", j->pid, "why", pol_why_name(x->why), "for", u64s(x->for_job, b1),
                  "bytes", u64s(x->bytes, b2), "job", j->job_name, NULL);
            start_op(j, WORK_SUSPEND, NULL);
            break;
        case POL_ACT_RESUME:
            event("resuming", j->pid, "why", pol_why_name(x->why), "bytes", u64s(x->bytes, b1), NULL);
            start_op(j, WORK_RESUME, NULL);
            break;
        }
    }
    pol_actions_clear(a);
}

/* ---------------------------------------------------------------------------
 * Memory requests
 * ------------------------------------------------------------------------- */

static void decide_request(struct djob *j)
{
    int r;

    j->req_gen = 0;
    /* The job knows its device; tcgpud assumed device 0 at registration. */
    policy_job_relocate(d.pol, (uint64_t)j->pid, j->req_device);
    r = policy_request(d.pol, (uint64_t)j->pid, j->req_device, j->req_bytes, j->req_free,
                       j->req_wait_ms > 0, now_ns(), &acts);
    if (r < 0) {
        if (j->req_conn >= 0)
            reply_error(j->req_conn, r, "the policy refused the request: %s", strerror(-r));
        j->req_conn = -1;
        pol_actions_clear(&acts);
        return;
    }
    if (j->req_wait_ms && j->req_conn >= 0)
        d.conns[j->req_conn].deadline_ns = now_ns() + j->req_wait_ms * 1000000u;
    do_actions(&acts);
}

/* ---------------------------------------------------------------------------
 * Status polls
 * ------------------------------------------------------------------------- */

void kick_poll(void)
{
    struct work *w;
    size_t n = 0;

    if (d.poll_in_flight)
        return;
    w = calloc(1, sizeof(*w));
    if (!w || !(w->items = calloc(d.njobs ? d.njobs : 1, sizeof(*w->items)))) {
        free(w);
        return;
    }
    for (size_t i = 0; i < d.njobs; i++)
        if (!d.jobs[i].busy)      /* a job in an operation answers after it: skip it */
            w->items[n++].pid = d.jobs[i].pid;
    w->kind = WORK_POLL;
    w->n = n;
    w->gen = ++d.poll_started;
    d.poll_in_flight = 1;
    if (tcgpud_work_start(w) < 0) {
        d.poll_in_flight = 0;
        d.poll_done = w->gen;     /* nothing learnt, but nobody waits forever */
        tcgpud_work_free(w);
    }
}

/* A job's state as the job itself reports it differs from the policy's:
 * someone used its control socket or the signal directly. Believe the job. */
static void reconcile(struct djob *j, const struct pol_job *pj, const struct tcgpu_status *st)
{
    uint64_t now = now_ns();

    if (pj->state == POL_RUNNING && pj->req == POL_REQ_NONE && st->state == TCGPU_STATE_SUSPENDED) {
        log_info("pid %d was suspended outside tcgpud: a manual suspension now", (int)j->pid);
        if (policy_manual_suspend(d.pol, (uint64_t)j->pid, 0, now, &acts) == 0) {
            pol_actions_clear(&acts);     /* already done: acknowledge instead of acting */
            policy_job_suspended(d.pol, (uint64_t)j->pid, 0, now, &acts);
        }
        event("suspended", j->pid, "why", "manual", "by", "outside", NULL);
    } else if (pj->state == POL_SUSPENDED && st->state == TCGPU_STATE_RUNNING) {
        log_info("pid %d was resumed outside tcgpud", (int)j->pid);
        if (policy_manual_resume(d.pol, (uint64_t)j->pid, now, &acts) == 0) {
            pol_actions_clear(&acts);
            policy_job_resumed(d.pol, (uint64_t)j->pid, 0, now, &acts);
        }
        event("resumed", j->pid, "why", "manual", "by", "outside", NULL);
    }
    do_actions(&acts);
}

void poll_done(struct work *w)
{
    for (size_t i = 0; i < w->n; i++) {
        const struct poll_item *it = &w->items[i];
        struct djob *j = job_of(it->pid);
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)it->pid);
        if (!j || !pj || j->busy || it->err)
            continue;
        if (it->st.state == TCGPU_STATE_RUNNING)
            policy_set_usage(d.pol, (uint64_t)it->pid, it->st.gpu_bytes);
        reconcile(j, policy_job(d.pol, (uint64_t)it->pid), &it->st);
    }
    d.poll_in_flight = 0;
    d.poll_done = w->gen;
    int later = 0;
    for (size_t i = 0; i < d.njobs; i++) {
        if (d.jobs[i].req_gen && d.jobs[i].req_gen <= d.poll_done)
            decide_request(&d.jobs[i]);
        else if (d.jobs[i].req_gen)
            later = 1;
    }
    if (later)
        kick_poll();              /* a request arrived during this round: it needs the next */
}

/* ---------------------------------------------------------------------------
 * Finished operations
 * ------------------------------------------------------------------------- */

/* Is any task of j's gang (j alone when it has none) in an operation? */
static int gang_busy(const struct djob *j)
{
    for (size_t i = 0; i < d.njobs; i++) {
        const struct djob *t = &d.jobs[i];
        if ((t == j || (j->gang && t->gang == j->gang)) && t->busy)
            return 1;
    }
    return 0;
}

/*
 * The asker of a manual operation hears about the job: once its own
 * operation is done and no task of its gang is still in one. A task of the
 * gang that failed the suspend makes it a failure, naming that task.
 */
static void reply_waiter_when_settled(struct djob *j)
{
    static struct ctl_buf b;

    if (j->waiter < 0 || !j->result_ready || gang_busy(j))
        return;
    if (j->result_err) {
        ctl_buf_error(&b, j->result_err, j->result_msg);
    } else if (j->waiter_suspends && j->gang_err) {
        ctl_buf_error(&b, j->gang_err, j->gang_msg);
    } else {
        ctl_buf_ok(&b);
        ctl_put_status(&b, &j->result_st);
    }
    send_msg(j->waiter, &b);
    conn_close(j->waiter);
    j->waiter = -1;
    j->result_ready = 0;
}

static void keep_result(struct djob *j, const struct work *w, int err)
{
    j->result_ready = 1;
    j->result_err = err;
    snprintf(j->result_msg, sizeof(j->result_msg), "%s", w->msg);
    j->result_st = w->st;
}

/* Resume j's gang now: the tasks the policy holds suspended for a manual
 * suspend (one manual resume brings back every one of them that fits). */
static void resume_gang_now(struct djob *j, const char *why)
{
    const struct pol_job *pj;

    for (size_t i = 0; i < d.njobs; i++) {
        struct djob *t = &d.jobs[i];
        if ((t != j && (!j->gang || t->gang != j->gang)) ||
            !(pj = policy_job(d.pol, (uint64_t)t->pid)) || pj->state != POL_SUSPENDED)
            continue;
        log_info("pid %d: %s; resuming%s", (int)t->pid, why, j->gang ? " its job's tasks" : "");
        event("manual-resume", t->pid, "by", "undo", NULL);
        if (policy_manual_resume(d.pol, (uint64_t)t->pid, now_ns(), &acts) < 0) {
            pol_actions_clear(&acts);
            log_info("pid %d stays suspended (no room to resume it now); resume it with: gpuckpt "
                     "resume %d", (int)t->pid, (int)t->pid);
        }
        return;
    }
}

void undo_manual_suspend(struct djob *j, const char *why)
{
    for (size_t i = 0; i < d.njobs; i++) {
        struct djob *t = &d.jobs[i];
        if ((t == j || (j->gang && t->gang == j->gang)) && t->busy) {
            t->undo_suspend = 1;      /* op_done resumes it */
            snprintf(t->undo_why, sizeof(t->undo_why), "%s", why);
        }
    }
    resume_gang_now(j, why);
    do_actions(&acts);
}

/* Task j of a gang did not suspend by hand: the other tasks must not stay
 * suspended, and whoever asked hears which task failed and why. */
static void gang_suspend_failed(struct djob *j, int err, const char *msg)
{
    char why[96];

    for (size_t i = 0; i < d.njobs; i++) {
        struct djob *t = &d.jobs[i];
        if (t->gang != j->gang || t == j)
            continue;
        t->gang_err = err;
        snprintf(t->gang_msg, sizeof(t->gang_msg), "process %d, a task of job %s, did not suspend: "
                 "%s; the job's other tasks are being resumed", (int)j->pid, j->job_name, msg);
    }
    snprintf(why, sizeof(why), "task %d of its job did not suspend", (int)j->pid);
    undo_manual_suspend(j, why);
}

static void suspend_done(struct djob *j, const struct work *w, int err)
{
    const struct pol_job *pj = policy_job(d.pol, (uint64_t)j->pid);
    int manual = pj && pj->suspended_by == POL_BY_MANUAL;
    char t[24], by[24];

    if (err == 0) {
        latency_add(&d.suspend_lat, (double)w->ns / 1e9);
        log_info("pid %d suspended in %.0f ms (GPU memory now %llu MiB)", (int)j->pid,
                 (double)w->ns / 1e6, (unsigned long long)(w->st.gpu_bytes / MiB));
        event("suspended", j->pid, "latency_ms", msecs(w->ns, t),
              "gpu_bytes", u64s(w->st.gpu_bytes, by), NULL);
    } else {
        log_info("pid %d did not suspend: %s", (int)j->pid, w->msg);
        event("suspend-failed", j->pid, "error", errno_name(err), "text", w->msg, NULL);
    }
    policy_job_suspended(d.pol, (uint64_t)j->pid, err, now_ns(), &acts);
    if (err && manual && j->gang)
        gang_suspend_failed(j, err, w->msg);
    else if (!err && j->undo_suspend)
        resume_gang_now(j, j->undo_why);
    j->undo_suspend = 0;
}

static void resume_done(struct djob *j, const struct work *w, int err)
{
    char t[24];

    if (err == 0) {
        latency_add(&d.resume_lat, (double)w->ns / 1e9);
        log_info("pid %d resumed in %.0f ms", (int)j->pid, (double)w->ns / 1e6);
        event("resumed", j->pid, "latency_ms", msecs(w->ns, t), NULL);
    } else {
        log_info("pid %d did not resume: %s", (int)j->pid, w->msg);
        event("resume-failed", j->pid, "error", errno_name(err), "text", w->msg, NULL);
    }
    policy_job_resumed(d.pol, (uint64_t)j->pid, err, now_ns(), &acts);
}

void op_done(struct work *w)
{
    struct djob *j = job_of(w->pid);
    uint64_t gang;
    int err = w->err;

    if (!j)
        return;                   /* exited meanwhile */
    j->busy = 0;
    d.dirty = 1;                  /* a state changed, even when no action follows */
    /* Already in the state asked for: done, as far as the policy goes. */
    if (err == -EALREADY && w->from_server)
        err = 0;
    if (j->waiter >= 0)
        keep_result(j, w, err);
    if (w->kind == WORK_SUSPEND)
        suspend_done(j, w, err);
    else
        resume_done(j, w, err);
    gang = j->gang;
    /* the asker of any task of the gang may hear now (j's, or one whose
     * task finished earlier and waited for this one) */
    for (size_t i = 0; i < d.njobs; i++)
        if (&d.jobs[i] == j || (gang && d.jobs[i].gang == gang))
            reply_waiter_when_settled(&d.jobs[i]);
    do_actions(&acts);
}

/* ---------------------------------------------------------------------------
 * State file
 * ------------------------------------------------------------------------- */

void save_state(void)
{
    struct tcgpud_saved_job *v = calloc(d.njobs ? d.njobs : 1, sizeof(*v));
    char err[512];
    size_t n = 0;

    if (!v) {
        log_info("out of memory saving the state");
        return;
    }
    for (size_t i = 0; i < d.njobs; i++) {
        const struct djob *j = &d.jobs[i];
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)j->pid);
        struct tcgpud_saved_job *s = &v[n++];
        if (!pj) {
            n--;
            continue;
        }
        s->pid = j->pid;
        s->start_ticks = j->start_ticks;
        s->uid = j->uid;
        snprintf(s->user, sizeof(s->user), "%s", j->user);
        snprintf(s->project, sizeof(s->project), "%s", project_name(j->project));
        s->priority = pj->priority;
        s->limit = pj->limit;
        s->device = pj->device;
        s->dev_capacity = policy_device_capacity(d.pol, pj->device);
        device_uuid_text(pj->device, s->uuid);
        s->mem = pj->mem;
        /* In between as such: the next tcgpud asks the job and believes it,
         * and only a job saved as not running and found suspended is resumed
         * by it (a suspending one was heading there; a resuming one may not
         * have left it). */
        snprintf(s->state, sizeof(s->state), "%s", pol_state_name(pj->state));
        snprintf(s->suspended_by, sizeof(s->suspended_by), "%s", pol_by_name(pj->suspended_by));
        s->auto_resume = pj->auto_resume;
        s->preemptions = pj->preemptions;
        /* Its age (the time it was last started or resumed), so that a
         * restarted tcgpud does not make every job younger than min_runtime
         * again (and so unpreemptable); a suspended job's place in the
         * resume queue and its hold-off. */
        s->run_ns = pj->run_ns;
        s->since_ns = pj->since_ns;
        s->queued_ns = pj->state == POL_SUSPENDED || pj->state == POL_RESUMING ? pj->queued_ns : 0;
        snprintf(s->job, sizeof(s->job), "%s", j->job_name);
        s->compute = pj->compute;
    }
    if (tcgpud_state_save(d.cfg.state_file, v, n, err, sizeof(err)) < 0)
        log_info("%s", err);
    else
        d.dirty = 0;
    free(v);
}
