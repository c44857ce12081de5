/* tcgpud's requests: one handler each, and the table that dispatches them; see commands.h. */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/macros.h"
#include "commands.h"
#include "conns.h"
#include "daemon.h"
#include "devices.h"
#include "jobs.h"
#include "save.h"
#include "state.h"

/* ---------------------------------------------------------------------------
 * Who may do what
 * ------------------------------------------------------------------------- */

struct identity {
    char user[64];
    int ngroups;
    char groups[64][64];
    int admin;
};

/* The peer's user name, groups, and whether it is an admin (root, or in [daemon] admins). */
static void identify(uid_t uid, struct identity *id)
{
    struct passwd pw, *pwp = NULL;
    char buf[4096];
    gid_t gids[64];
    int n = 64;

    memset(id, 0, sizeof(*id));
    id->admin = uid == 0;
    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &pwp) != 0 || !pwp) {
        snprintf(id->user, sizeof(id->user), "uid%u", (unsigned)uid);
        return;
    }
    snprintf(id->user, sizeof(id->user), "%s", pw.pw_name);
    if (getgrouplist(pw.pw_name, pw.pw_gid, gids, &n) < 0)
        n = 64;                   /* truncated: the first 64 groups count */
    for (int i = 0; i < n && id->ngroups < 64; i++) {
        struct group gr, *grp = NULL;
        char gbuf[4096];
        if (getgrgid_r(gids[i], &gr, gbuf, sizeof(gbuf), &grp) == 0 && grp) {
            snprintf(id->groups[id->ngroups++], 64, "%s", gr.gr_name);
            if (d.cfg.admins[0] && !strcmp(gr.gr_name, d.cfg.admins))
                id->admin = 1;
        }
    }
}

/* Who may send a command: the dispatcher checks it before the handler runs. */
enum access {
    ACCESS_ANY_PROCESS,           /* ps, events, status; register, for itself, checks the
                                     members of the project it names */
    ACCESS_THE_JOB,               /* a registered job, about itself (its peer pid and uid) */
    ACCESS_OWNER_OR_ADMIN,        /* pid=N: that job's owner (same uid), or an admin */
};

/* One command of tcgpud's protocol (docs/tcgpud.md, "Protocol"). */
struct command {
    const char *word;
    enum access access;
    /* j: the job the access check found (NULL for ACCESS_ANY_PROCESS) */
    void (*handle)(int ci, const struct ctl_msg *m, struct djob *j);
};

/* While a restarted tcgpud re-learns its jobs it decides nothing: come back. */
static void reply_relearning(int ci)
{
    reply_error(ci, -EAGAIN, "tcgpud has just restarted and is asking its jobs how they are: "
                "ask again in a moment");
}

/* ---------------------------------------------------------------------------
 * Register
 * ------------------------------------------------------------------------- */

/* A register request on its way through its steps. */
struct registration {
    const struct ucred *peer;     /* the job */
    const char *proj;
    const struct tcgpud_project *cp;
    struct identity id;
    struct pol_job_spec spec;
    const char *job_name;         /* a task of this gang, or NULL */
};

/* The project exists and the peer may run in it. 0, or -errno (replied). */
static int register_member(int ci, const struct ctl_msg *m, struct registration *rg)
{
    const char *groups[64];
    char why[160];

    rg->proj = ctl_get(m, "project");
    identify(rg->peer->uid, &rg->id);
    rg->cp = rg->proj ? tcgpud_config_project(&d.cfg, rg->proj) : NULL;
    if (!rg->cp) {
        reply_error(ci, -ENOENT, "no project '%s' in %s", rg->proj ? rg->proj : "", d.cfg.path);
        return -ENOENT;
    }
    for (int g = 0; g < rg->id.ngroups; g++)
        groups[g] = rg->id.groups[g];
    if (!rg->id.admin && !tcgpud_project_has_member(rg->cp, rg->id.user, groups, rg->id.ngroups)) {
        snprintf(why, sizeof(why), "user %s is not a member of project %s", rg->id.user, rg->proj);
        refuse(ci, "register", why);
        return -EACCES;
    }
    rg->spec.project = policy_project_find(d.pol, rg->proj);
    return 0;
}

/* The project's priority, or the one asked for: at most the project's
 * unless the peer is an admin. 0, or -errno (replied). */
static int register_priority(int ci, const struct ctl_msg *m, struct registration *rg)
{
    const char *given = ctl_get(m, "priority");
    int64_t prio;
    char why[160];

    rg->spec.priority = rg->cp->pol.priority;
    if (!given)
        return 0;
    if (ctl_get_i64(m, "priority", &prio) < 0 || prio < -1000000 || prio > 1000000) {
        reply_error(ci, -EINVAL, "priority '%s' is not an integer", given);
        return -EINVAL;
    }
    if (prio > rg->cp->pol.priority && !rg->id.admin) {
        snprintf(why, sizeof(why), "priority %lld is above project %s's %d", (long long)prio,
                 rg->proj, rg->cp->pol.priority);
        refuse(ci, "register", why);
        return -EACCES;
    }
    rg->spec.priority = (int)prio;
    return 0;
}

/* Its memory limit and its device (one tcgpud manages: what the job says of
 * the device's size is not asked for, and ignored). 0, or -errno (replied). */
static int register_memory(int ci, const struct ctl_msg *m, struct registration *rg)
{
    uint64_t gpu_mem = 0;
    char why[160];
    int r;

    if (ctl_get(m, "gpu_mem") && ctl_get_u64(m, "gpu_mem", &gpu_mem) < 0) {
        reply_error(ci, -EINVAL, "gpu_mem '%s' is not a number of bytes", ctl_get(m, "gpu_mem"));
        return -EINVAL;
    }
    r = job_device(m, &rg->spec.device, why, sizeof(why));
    if (r < 0) {
        reply_error(ci, r, "%s", why);
        return r;
    }
    rg->spec.limit = gpu_mem ? gpu_mem : rg->cp->pol.default_limit;
    return 0;
}

static int jobs_of(uid_t uid)
{
    int n = 0;

    for (size_t i = 0; i < d.njobs; i++)
        n += d.jobs[i].uid == uid;
    return n;
}

/* A gang name: 1..63 of [A-Za-z0-9._:-] ("slurm:4242", "train-7"). */
static int valid_job_name(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n >= sizeof(((struct djob *)0)->job_name))
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("._:-", *s))
            return 0;
    return 1;
}

/* Its compute share (compute=PERMILLE, else the project's default) and the
 * gang it is a task of (job=NAME). 0, or -errno (replied). */
static int register_share(int ci, const struct ctl_msg *m, struct registration *rg)
{
    uint64_t compute = rg->cp->pol.compute;

    if ((ctl_get(m, "compute") && (ctl_get_u64(m, "compute", &compute) < 0 || compute == 0 ||
                                   compute > POL_COMPUTE_FULL)) ||
        (ctl_get(m, "job") && !valid_job_name(ctl_get(m, "job")))) {
        reply_error(ci, -EINVAL, "malformed register request (compute=1..1000, job=NAME)");
        return -EINVAL;
    }
    rg->spec.compute = (unsigned)compute;
    rg->job_name = ctl_get(m, "job");
    return 0;
}

/* Into the policy and the job list. 0, or -errno (replied). */
static int register_admit(int ci, struct registration *rg)
{
    pid_t pid = rg->peer->pid;
    uint64_t start = tcgpud_proc_start_ticks(pid);
    struct djob *old = job_of(pid), *j;
    int r;

    /* A pid registering again (an exec'd program, a restarted job) starts afresh. */
    if (old)
        job_gone(old, "registered again");
    if (rg->peer->uid != 0 && jobs_of(rg->peer->uid) >= d.cfg.max_jobs_per_user) {
        char why[160];
        snprintf(why, sizeof(why), "user %s has %d jobs registered already ([daemon] "
                 "max_jobs_per_user)", rg->id.user, d.cfg.max_jobs_per_user);
        refuse(ci, "register", why);
        return -EACCES;
    }
    rg->spec.gang = rg->job_name ? gang_for(rg->peer->uid, rg->job_name) : 0;
    r = policy_admit(d.pol, &rg->spec, now_ns());
    if (r < 0 || !(j = add_job(pid, rg->peer->uid, rg->id.user, rg->spec.project, start))) {
        if (r == 0)
            policy_job_exited(d.pol, rg->spec.id, now_ns(), &acts);
        r = r < 0 ? r : -ENOMEM;
        reply_error(ci, r, "cannot admit the job: %s", strerror(-r));
        return r;
    }
    j->gang = rg->spec.gang;
    snprintf(j->job_name, sizeof(j->job_name), "%s", rg->job_name ? rg->job_name : "");
    pol_actions_clear(&acts);
    return 0;
}

static void reply_registered(int ci, const struct ctl_msg *m, const struct registration *rg)
{
    static struct ctl_buf b;
    const struct pol_job_spec *s = &rg->spec;
    char pr[24], lim[24];

    log_info("pid %d registered: user %s, project %s, priority %d, limit %s%s, compute %u%%%s%s",
             (int)rg->peer->pid, rg->id.user, rg->proj, s->priority,
             s->limit ? u64s(s->limit / MiB, lim) : "none", s->limit ? " MiB" : "",
             s->compute ? s->compute / 10 : 100, rg->job_name ? ", job " : "",
             rg->job_name ? rg->job_name : "");
    event("registered", rg->peer->pid, "limit", u64s(s->limit, lim), "priority_given",
          ctl_get(m, "priority") ? i64s(s->priority, pr) : "", NULL);
    d.dirty = 1;
    ctl_buf_ok(&b);
    ctl_buf_put(&b, "project", rg->proj);
    ctl_buf_put_i64(&b, "priority", s->priority);
    ctl_buf_put_u64(&b, "limit", s->limit);
    ctl_buf_put_u64(&b, "may_borrow", (uint64_t)rg->cp->pol.may_borrow);
    ctl_buf_put_u64(&b, "compute", s->compute);
    send_msg(ci, &b);
    conn_close(ci);
}

static void register_job(int ci, const struct ctl_msg *m, struct djob *unused)
{
    const struct ucred *peer = &d.conns[ci].peer;
    struct registration rg = { .peer = peer,
                               .spec = { .id = (uint64_t)peer->pid, .state = POL_RUNNING } };

    (void)unused;
    if (register_member(ci, m, &rg) < 0 || register_priority(ci, m, &rg) < 0 ||
        register_memory(ci, m, &rg) < 0 || register_share(ci, m, &rg) < 0 ||
        register_admit(ci, &rg) < 0)
        return;
    reply_registered(ci, m, &rg);
}

static const struct command cmd_register = {
    .word = "register", .access = ACCESS_ANY_PROCESS, .handle = register_job,
};

/* ---------------------------------------------------------------------------
 * Memory requests
 * ------------------------------------------------------------------------- */

static void request_memory(int ci, const struct ctl_msg *m, struct djob *j)
{
    const struct ucred *peer = &d.conns[ci].peer;
    const struct pol_job *pj = policy_job(d.pol, (uint64_t)j->pid);
    uint64_t wait_ms = 0, over = 0, cap;
    char by[24], fr[24], why[160];
    int dev, r;

    if (d.relearning) {
        reply_relearning(ci);
        return;
    }
    if (pj->state != POL_RUNNING) {
        /* It was chosen as a victim just before it asked: it retries after its
         * resume (suspending=1 tells it so: it waits at the gate). */
        static struct ctl_buf b;
        ctl_buf_error(&b, -EAGAIN, "this process is being suspended");
        ctl_buf_put(&b, "suspending", "1");
        send_msg(ci, &b);
        conn_close(ci);
        return;
    }
    if (j->req_conn >= 0 || pj->req != POL_REQ_NONE) {
        reply_error(ci, -EBUSY, "process %d already has a request in flight", (int)peer->pid);
        return;
    }
    j->req_free = POL_FREE_UNKNOWN;
    j->req_used = 0;
    if (ctl_get_u64(m, "bytes", &j->req_bytes) < 0 || j->req_bytes == 0 ||
        (ctl_get(m, "used") && ctl_get_u64(m, "used", &j->req_used) < 0) ||
        (ctl_get(m, "free") && ctl_get_u64(m, "free", &j->req_free) < 0) ||
        (ctl_get(m, "wait_ms") && ctl_get_u64(m, "wait_ms", &wait_ms) < 0) ||
        (ctl_get(m, "over_limit") && ctl_get_u64(m, "over_limit", &over) < 0)) {
        reply_error(ci, -EINVAL, "malformed request");
        return;
    }
    /* An older libtcgpu asks for room beyond the job's own limit: the limit
     * is a partition, which borrowing never lifts (docs/tcgpud.md). */
    if (over) {
        reply_error(ci, -ENOMEM, "beyond the job's memory limit (%llu MiB): a limit is hard, and "
                    "borrowing never lifts it", (unsigned long long)(pj->limit / MiB));
        return;
    }
    r = job_device(m, &dev, why, sizeof(why));
    if (r < 0) {
        reply_error(ci, r, "%s", why);
        return;
    }
    /* What the job reports informs, within what tcgpud knows: no more than
     * the GPU has (a job that says the device is fuller than it is only
     * makes its own request harder to grant). */
    cap = policy_device_capacity(d.pol, dev);
    if (j->req_bytes > cap) {
        reply_error(ci, -ENOMEM, "%llu MiB is more than GPU %d has (%llu MiB)",
                    (unsigned long long)(j->req_bytes / MiB), dev, (unsigned long long)(cap / MiB));
        return;
    }
    if (j->req_free != POL_FREE_UNKNOWN && j->req_free > cap)
        j->req_free = cap;
    if (j->req_used > cap)
        j->req_used = cap;
    if (wait_ms > 7 * 24 * 3600 * 1000ull)
        wait_ms = 7 * 24 * 3600 * 1000ull;
    j->req_device = dev;
    j->req_wait_ms = wait_ms;
    j->req_conn = ci;
    j->req_t0 = now_ns();
    d.conns[ci].kind = C_REQUEST;
    d.conns[ci].job = j->pid;
    d.conns[ci].deadline_ns = 0;
    event("request", j->pid, "bytes", u64s(j->req_bytes, by),
          "free", j->req_free == POL_FREE_UNKNOWN ? "" : u64s(j->req_free, fr), NULL);
    /* Decide on fresh numbers: after a status poll that starts from now. */
    j->req_gen = d.poll_started + 1;
    kick_poll();
}

static const struct command cmd_request = {
    .word = "request", .access = ACCESS_THE_JOB, .handle = request_memory,
};

/* ---------------------------------------------------------------------------
 * Compute shares
 * ------------------------------------------------------------------------- */

/*
 * compute [device=D] active=0|1 [busy=PERMILLE]: the job says whether it
 * launched work since it last said (and on which device, the share of it
 * it measured); the answer is the cap its throttle applies until it asks
 * again (policy_compute_cap). Active jobs ask twice a second.
 */
static void report_compute(int ci, const struct ctl_msg *m, struct djob *j)
{
    static struct ctl_buf b;
    uint64_t active = 0, busy = 0;
    const struct pol_job *pj;
    char why[160];
    int dev, r;

    if (ctl_get_u64(m, "active", &active) < 0 ||
        (ctl_get(m, "busy") && ctl_get_u64(m, "busy", &busy) < 0)) {
        reply_error(ci, -EINVAL, "malformed compute report");
        return;
    }
    if (ctl_get(m, "device")) {
        r = job_device(m, &dev, why, sizeof(why));
        if (r < 0) {
            reply_error(ci, r, "%s", why);
            return;
        }
        policy_job_relocate(d.pol, (uint64_t)j->pid, dev);
    }
    policy_compute_report(d.pol, (uint64_t)j->pid, active != 0,
                          busy > POL_COMPUTE_FULL ? POL_COMPUTE_FULL : (unsigned)busy, now_ns());
    pj = policy_job(d.pol, (uint64_t)j->pid);
    ctl_buf_ok(&b);
    ctl_buf_put_u64(&b, "cap", policy_compute_cap(d.pol, (uint64_t)j->pid, now_ns()));
    ctl_buf_put_u64(&b, "share", pj ? pj->compute : 0);
    send_msg(ci, &b);
    conn_close(ci);
}

static const struct command cmd_compute = {
    .word = "compute", .access = ACCESS_THE_JOB, .handle = report_compute,
};

/* ---------------------------------------------------------------------------
 * ps, events, manual suspend/resume
 * ------------------------------------------------------------------------- */

void put_job(struct ctl_buf *b, const struct djob *j, const struct pol_job *pj, uint64_t now)
{
    ctl_buf_request(b, "job");
    ctl_buf_put_u64(b, "pid", (uint64_t)j->pid);
    ctl_buf_put(b, "user", j->user);
    ctl_buf_put_u64(b, "uid", (uint64_t)j->uid);
    ctl_buf_put(b, "project", project_name(j->project));
    ctl_buf_put_i64(b, "priority", pj->priority);
    ctl_buf_put(b, "state", display_state(pj));
    ctl_buf_put_i64(b, "device", pj->device);
    ctl_buf_put_u64(b, "mem", pj->mem);
    ctl_buf_put_u64(b, "limit", pj->limit);
    ctl_buf_put_u64(b, "runtime_ms", policy_job_runtime(pj, now) / 1000000u);
    ctl_buf_put_u64(b, "preemptions", pj->preemptions);
    ctl_buf_put_u64(b, "borrowing", (uint64_t)policy_job_borrowing(d.pol, pj));
    ctl_buf_put(b, "job", j->job_name);
    ctl_buf_put_u64(b, "compute", pj->compute);
    ctl_buf_put_u64(b, "compute_cap", policy_compute_cap(d.pol, pj->id, now));
    ctl_buf_put_u64(b, "compute_busy", pj->compute_busy);
    if (pj->state == POL_SUSPENDED || pj->state == POL_SUSPENDING) {
        ctl_buf_put(b, "suspended_by", pol_by_name(pj->suspended_by));
        ctl_buf_put(b, "why", pol_why_name(pj->why));
        if (pj->suspended_by == POL_BY_POLICY)
            ctl_buf_put_u64(b, "for", pj->suspended_for);
        ctl_buf_put_u64(b, "auto_resume", (uint64_t)(pj->suspended_by == POL_BY_POLICY || pj->auto_resume));
    }
}

static void list_jobs(int ci, const struct ctl_msg *m, struct djob *unused)
{
    static struct ctl_buf b;
    uint64_t now = now_ns();

    (void)m;
    (void)unused;
    for (int dev = 0; dev < policy_device_count(d.pol); dev++) {
        char uuid[DEVICE_UUID_TEXT_LEN];
        ctl_buf_request(&b, "device");
        ctl_buf_put_u64(&b, "id", (uint64_t)dev);
        device_uuid_text(dev, uuid);
        if (uuid[0])
            ctl_buf_put(&b, "uuid", uuid);
        ctl_buf_put_u64(&b, "capacity", policy_device_capacity(d.pol, dev));
        ctl_buf_put_u64(&b, "used", policy_device_used(d.pol, dev));
        send_msg(ci, &b);
    }
    for (size_t i = 0; i < d.njobs; i++) {
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)d.jobs[i].pid);
        if (!pj)
            continue;
        put_job(&b, &d.jobs[i], pj, now);
        send_msg(ci, &b);
    }
    ctl_buf_ok(&b);
    ctl_buf_put_u64(&b, "jobs", d.njobs);
    ctl_buf_put_u64(&b, "preemptions_total", d.preemptions_total);
    send_msg(ci, &b);
    conn_close(ci);
}

static const struct command cmd_ps = {
    .word = "ps", .access = ACCESS_ANY_PROCESS, .handle = list_jobs,
};

static void send_events(int ci, const struct ctl_msg *m, struct djob *unused)
{
    static struct ctl_buf b;
    uint64_t first = d.event_seq >= EVENTS_MAX ? d.event_seq - EVENTS_MAX + 1 : 1;
    const char *f = ctl_get(m, "follow");

    (void)unused;
    if (f && !strcmp(f, "1") && d.conns[ci].peer.uid != 0 &&
        followers_of(d.conns[ci].peer.uid) >= FOLLOWERS_PER_USER) {
        reply_error(ci, -EAGAIN, "uid %u follows events on %d connections already (at most %d)",
                    (unsigned)d.conns[ci].peer.uid, FOLLOWERS_PER_USER, FOLLOWERS_PER_USER);
        return;
    }
    for (uint64_t s = first; s <= d.event_seq; s++) {
        const char *e = d.events[s % EVENTS_MAX];
        if (send(d.conns[ci].fd, e, strlen(e), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            conn_close(ci);
            return;
        }
    }
    if (f && !strcmp(f, "1")) {
        d.conns[ci].kind = C_FOLLOW;      /* stays open; event() pushes to it */
        return;
    }
    ctl_buf_ok(&b);
    ctl_buf_put_u64(&b, "events", d.event_seq - first + 1);
    send_msg(ci, &b);
    conn_close(ci);
}

static const struct command cmd_events = {
    .word = "events", .access = ACCESS_ANY_PROCESS, .handle = send_events,
};

/* The job named by pid=, if the peer may act on it. Replies and returns NULL otherwise. */
static struct djob *authorised_job(int ci, const struct ctl_msg *m, const char *what)
{
    const struct ucred *peer = &d.conns[ci].peer;
    struct identity id;
    struct djob *j;
    uint64_t pid;
    char why[320];

    if (ctl_get_u64(m, "pid", &pid) < 0 || pid == 0 || pid > INT32_MAX) {
        reply_error(ci, -EINVAL, "%s needs pid=N", what);
        return NULL;
    }
    j = job_of((pid_t)pid);
    if (!j) {
        reply_error(ci, -ENOENT, "process %llu is not managed by tcgpud", (unsigned long long)pid);
        return NULL;
    }
    identify(peer->uid, &id);
    if (peer->uid != j->uid && !id.admin) {
        snprintf(why, sizeof(why), "process %d belongs to %s, and %s is not an admin", (int)j->pid,
                 j->user, id.user);
        refuse(ci, what, why);
        return NULL;
    }
    if (j->busy || j->waiter >= 0) {
        reply_error(ci, -EBUSY, "process %d is being suspended or resumed", (int)j->pid);
        return NULL;
    }
    return j;
}

/* A new manual operation on j's gang: what the last one left is forgotten. */
static void forget_gang_results(const struct djob *j)
{
    for (size_t i = 0; i < d.njobs; i++) {
        struct djob *t = &d.jobs[i];
        if (t == j || (j->gang && t->gang == j->gang)) {
            t->result_ready = 0;
            t->gang_err = 0;
        }
    }
}

/* Takes the suspension of pid out of a, the rest kept in order. */
static void drop_suspend_of(struct pol_actions *a, pid_t pid)
{
    size_t kept = 0;

    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].kind != POL_ACT_SUSPEND || a->v[i].job != (uint64_t)pid)
            a->v[kept++] = a->v[i];
    a->n = kept;
}

static void manual_op(int ci, const struct ctl_msg *m, struct djob *j, int suspend)
{
    static struct ctl_buf b;
    const char *ar = ctl_get(m, "auto_resume");
    const char *dir = ctl_get(m, "dir");
    char who[24];
    int r;

    if (dir && dir[0] != '/') {
        reply_error(ci, -EINVAL, "dir must be an absolute path");
        return;
    }
    if (d.relearning) {
        reply_relearning(ci);
        return;
    }
    if (suspend)
        r = policy_manual_suspend(d.pol, (uint64_t)j->pid, ar && !strcmp(ar, "1"), now_ns(), &acts);
    else
        r = policy_manual_resume(d.pol, (uint64_t)j->pid, now_ns(), &acts);
    if (r < 0) {
        pol_actions_clear(&acts);
        if (r == -ENOMEM)
            reply_error(ci, r, "no room on the GPU for process %d now", (int)j->pid);
        else if (r == -EALREADY)
            reply_error(ci, r, "process %d is already %s", (int)j->pid,
                        suspend ? "suspended" : "running");
        else
            reply_error(ci, r, "process %d is busy (a transition or a request in flight)",
                        (int)j->pid);
        return;
    }
    log_info("%s of pid %d asked by uid %u pid %d", suspend ? "suspend" : "resume", (int)j->pid,
             (unsigned)d.conns[ci].peer.uid, (int)d.conns[ci].peer.pid);
    event(suspend ? "manual-suspend" : "manual-resume", j->pid, "by_uid",
          u64s(d.conns[ci].peer.uid, who), NULL);
    if (acts.n == 0) {
        /* suspended by the policy before: now a manual suspension, nothing to do */
        ctl_buf_ok(&b);
        ctl_buf_put(&b, "state", "suspended");
        send_msg(ci, &b);
        conn_close(ci);
        d.dirty = 1;
        return;
    }
    forget_gang_results(j);
    j->waiter = ci;
    j->waiter_suspends = suspend;
    d.conns[ci].kind = C_OP;
    d.conns[ci].job = j->pid;
    if (suspend && dir) {
        /* j's suspend action would go to host memory: start it here, with
         * the directory, and carry out the rest (its gang's tasks) */
        pid_t pid = j->pid;
        drop_suspend_of(&acts, pid);
        do_actions(&acts);
        if ((j = job_of(pid))) {
            event("suspending", j->pid, "why", "manual", "dir", dir, NULL);
            start_op(j, WORK_SUSPEND, dir);
        }
        d.dirty = 1;
        return;
    }
    do_actions(&acts);
}

static void suspend_job(int ci, const struct ctl_msg *m, struct djob *j)
{
    manual_op(ci, m, j, 1);
}

static const struct command cmd_suspend = {
    .word = "suspend", .access = ACCESS_OWNER_OR_ADMIN, .handle = suspend_job,
};

static void resume_job(int ci, const struct ctl_msg *m, struct djob *j)
{
    manual_op(ci, m, j, 0);
}

static const struct command cmd_resume = {
    .word = "resume", .access = ACCESS_OWNER_OR_ADMIN, .handle = resume_job,
};

static void report_status(int ci, const struct ctl_msg *m, struct djob *unused)
{
    static struct ctl_buf b;

    (void)m;
    (void)unused;
    ctl_buf_ok(&b);
    ctl_buf_put(&b, "version", TCGPU_VERSION_STRING);
    ctl_buf_put(&b, "config", d.cfg.path);
    ctl_buf_put_u64(&b, "jobs", d.njobs);
    ctl_buf_put_u64(&b, "uptime_ms", (now_ns() - d.start_ns) / 1000000u);
    ctl_buf_put_u64(&b, "relearning", (uint64_t)d.relearning);
    send_msg(ci, &b);
    conn_close(ci);
}

static const struct command cmd_status = {
    .word = "status", .access = ACCESS_ANY_PROCESS, .handle = report_status,
};

/* A user's own process trees through CRIU, which needs root (save.c checks the rest). */
static const struct command cmd_save = {
    .word = "save", .access = ACCESS_ANY_PROCESS, .handle = priv_save,
};

static const struct command cmd_restore = {
    .word = "restore", .access = ACCESS_ANY_PROCESS, .handle = priv_restore,
};

static const struct command *const commands[] = {
    &cmd_register, &cmd_request, &cmd_compute, &cmd_ps, &cmd_events, &cmd_suspend, &cmd_resume,
    &cmd_status, &cmd_save, &cmd_restore,
};

/* The peer's own registered job. Replies and returns NULL otherwise. */
static struct djob *own_job(int ci)
{
    const struct ucred *peer = &d.conns[ci].peer;
    struct djob *j = job_of(peer->pid);

    if ((!j || !policy_job(d.pol, (uint64_t)peer->pid)) && d.relearning) {
        /* it may be one of the jobs being re-learnt: not "register again" yet */
        reply_relearning(ci);
        return NULL;
    }
    if (!j || !policy_job(d.pol, (uint64_t)peer->pid) || j->uid != peer->uid) {
        reply_error(ci, -ENOENT, "process %d is not a registered job", (int)peer->pid);
        return NULL;
    }
    return j;
}

void handle(int ci, const struct ctl_msg *m)
{
    const struct command *cmd = NULL;
    struct djob *j = NULL;

    for (size_t i = 0; i < NELEM(commands) && !cmd; i++)
        if (!strcmp(m->word, commands[i]->word))
            cmd = commands[i];
    if (!cmd) {
        reply_error(ci, -EINVAL, "unknown command '%s'", m->word);
        return;
    }
    if (cmd->access == ACCESS_THE_JOB)
        j = own_job(ci);
    else if (cmd->access == ACCESS_OWNER_OR_ADMIN)
        j = authorised_job(ci, m, cmd->word);
    if (cmd->access != ACCESS_ANY_PROCESS && !j)
        return;                   /* refused, and replied */
    cmd->handle(ci, m, j);
}
