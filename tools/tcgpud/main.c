/*
 * tcgpud - the node's GPU policy daemon: priorities, reservations,
 * borrowing, preemption by transparent suspend, automatic resume.
 *
 *   tcgpud [--config FILE] [--socket PATH] [--state FILE]
 *
 * Foreground, logs to stderr. Decisions come from lib/policy/policy.c; tcgpud
 * carries them out by talking to each job's control socket (suspend,
 * resume, status), persists its jobs to a state file, and re-learns them
 * from it and from the jobs themselves when it starts again.
 * docs/tcgpud.md describes the protocol, the policy and the security model.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "ctl/proto.h"
#include "policy/policy.h"
#include "tcgpu.h"
#include "tcgpud.h"
#include "config.h"
#include "state.h"
#include "common/clock.h"
#include "common/macros.h"
#include "common/names.h"

#define TICK_MS          500
#define OP_TIMEOUT_MS    600000   /* a suspend of a very large job to disk takes minutes */
#define READ_WAIT_NS     2000000000ull
#define MAX_CONNS        256
#define EVENTS_MAX       1024
#define EVENT_LEN        768
#define LATENCY_SAMPLES  256
#define MiB              (1ull << 20)

enum conn_kind { C_FREE = 0, C_READ, C_REQUEST, C_OP, C_FOLLOW };

struct conn {
    enum conn_kind kind;
    int fd;
    struct ucred peer;
    uint64_t deadline_ns;         /* C_READ: request by then; C_REQUEST waiting: give up then */
    pid_t job;                    /* C_REQUEST/C_OP: the job it is about */
};

struct djob {
    pid_t pid;
    uint64_t start_ticks;
    uid_t uid;
    char user[64];
    int project;
    int busy;                     /* a worker is suspending or resuming it */
    int waiter;                   /* conn waiting for a manual operation, -1 */
    uint64_t op_t0;
    /* the memory request in flight, if any */
    int req_conn;                 /* -1: none */
    uint64_t req_bytes, req_used, req_free;
    int req_device, req_over_limit;
    uint64_t req_wait_ms;
    uint64_t req_gen;             /* decide after this poll generation; 0: decided */
    uint64_t req_t0;
};

struct latency {
    double v[LATENCY_SAMPLES];
    size_t n, next;
    double sum;
    uint64_t count;
};

static struct {
    struct tcgpud_config cfg;
    struct policy *pol;
    struct djob *jobs;
    size_t njobs, cap;
    struct conn conns[MAX_CONNS];
    int listen_fd, sig_fd;
    int stop;
    int dirty;                    /* the state file is behind */
    uint64_t poll_started, poll_done;     /* generations */
    int poll_in_flight;
    char events[EVENTS_MAX][EVENT_LEN];
    uint64_t event_seq;
    uint64_t preemptions_total, refused_total;
    struct latency suspend_lat, resume_lat;
    uint64_t start_ns;
} d = { .listen_fd = -1, .sig_fd = -1 };

static struct pol_actions acts;

/* ---------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------- */

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void logmsg(const char *fmt, ...)
{
    va_list ap;
    struct timespec ts;
    struct tm tm;
    char when[32];

    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    fprintf(stderr, "tcgpud %s.%03ld: ", when, ts.tv_nsec / 1000000);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static struct djob *job_of(pid_t pid)
{
    for (size_t i = 0; i < d.njobs; i++)
        if (d.jobs[i].pid == pid)
            return &d.jobs[i];
    return NULL;
}

static const char *project_name(int idx)
{
    const struct pol_project *p = policy_project(d.pol, idx);
    return p ? p->name : "?";
}

static void latency_add(struct latency *l, double secs)
{
    if (l->n == LATENCY_SAMPLES)
        l->sum -= l->v[l->next];
    else
        l->n++;
    l->v[l->next] = secs;
    l->next = (l->next + 1) % LATENCY_SAMPLES;
    l->sum += secs;
    l->count++;
}

/* ---------------------------------------------------------------------------
 * Events: a ring of finished "event ..." messages, pushed to followers
 * ------------------------------------------------------------------------- */

static void conn_close(int ci);

static void send_msg(int ci, const struct ctl_buf *b)
{
    long n = ctl_buf_finish(b);

    if (n < 0 || d.conns[ci].fd < 0)
        return;
    if (send(d.conns[ci].fd, b->data, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        logmsg("reply to uid %u pid %d not delivered: %s", (unsigned)d.conns[ci].peer.uid,
               (int)d.conns[ci].peer.pid, strerror(errno));
}

/*
 * Record an event: `type`, the job, and key=value pairs given as a
 * NULL-terminated list of (key, value) strings. Followers get it at once
 * (a follower that cannot keep up is dropped).
 */
static void event(const char *type, pid_t pid, ...)
{
    static struct ctl_buf b;
    const struct djob *j = job_of(pid);
    const struct pol_job *pj = policy_job(d.pol, (uint64_t)pid);
    va_list ap;
    const char *k;
    long n;

    ctl_buf_request(&b, "event");
    ctl_buf_put_u64(&b, "seq", ++d.event_seq);
    ctl_buf_put_u64(&b, "time_ms", wall_ms());
    ctl_buf_put(&b, "type", type);
    if (pid)
        ctl_buf_put_u64(&b, "pid", (uint64_t)pid);
    if (j) {
        ctl_buf_put(&b, "user", j->user);
        ctl_buf_put(&b, "project", project_name(j->project));
    }
    if (pj)
        ctl_buf_put_i64(&b, "priority", pj->priority);
    va_start(ap, pid);
    while ((k = va_arg(ap, const char *))) {
        const char *v = va_arg(ap, const char *);
        ctl_buf_put(&b, k, v);
    }
    va_end(ap);
    n = ctl_buf_finish(&b);
    if (n < 0 || n >= EVENT_LEN)
        return;
    memcpy(d.events[d.event_seq % EVENTS_MAX], b.data, (size_t)n);
    d.events[d.event_seq % EVENTS_MAX][n] = '\0';
    for (int ci = 0; ci < MAX_CONNS; ci++) {
        if (d.conns[ci].kind != C_FOLLOW)
            continue;
        if (send(d.conns[ci].fd, b.data, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
            conn_close(ci);
    }
}

static const char *u64s(uint64_t v, char *buf)
{
    snprintf(buf, 24, "%llu", (unsigned long long)v);
    return buf;
}

/* A signed value (a priority) with its sign: never through u64s(). */
static const char *i64s(int64_t v, char *buf)
{
    snprintf(buf, 24, "%lld", (long long)v);
    return buf;
}

static const char *msecs(uint64_t ns, char *buf)
{
    snprintf(buf, 24, "%.1f", (double)ns / 1e6);
    return buf;
}

/* ---------------------------------------------------------------------------
 * Connections
 * ------------------------------------------------------------------------- */

static void conn_close(int ci)
{
    struct conn *c = &d.conns[ci];

    if (c->kind == C_FREE)
        return;
    close(c->fd);
    c->fd = -1;
    c->kind = C_FREE;
    for (size_t i = 0; i < d.njobs; i++) {
        if (d.jobs[i].waiter == ci)
            d.jobs[i].waiter = -1;
        if (d.jobs[i].req_conn == ci)
            d.jobs[i].req_conn = -1;
    }
}

static void reply_error(int ci, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void reply_error(int ci, int err, const char *fmt, ...)
{
    static struct ctl_buf b;
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    ctl_buf_error(&b, err, text);
    send_msg(ci, &b);
    conn_close(ci);
}

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

static void refuse(int ci, const char *what, const char *why)
{
    const struct ucred *p = &d.conns[ci].peer;
    char uid[24], pid[24];

    d.refused_total++;
    logmsg("refused %s from uid %u pid %d: %s", what, (unsigned)p->uid, (int)p->pid, why);
    event("refused", 0, "what", what, "uid", u64s(p->uid, uid), "from_pid", u64s((uint64_t)p->pid, pid),
          "why", why, NULL);
    reply_error(ci, -EACCES, "%s: %s", what, why);
}

/* ---------------------------------------------------------------------------
 * Carrying out the policy's actions
 * ------------------------------------------------------------------------- */

static void start_op(struct djob *j, enum work_kind kind, const char *dir)
{
    struct work *w = calloc(1, sizeof(*w));
    int r;

    if (!w) {
        logmsg("out of memory starting an operation on pid %d", (int)j->pid);
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
        logmsg("pid %d: %s", (int)j->pid, w->msg);
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

    /* A job borrowing beyond its own limit gets the limit raised to cover it. */
    if (j->req_over_limit && limit && j->req_used + bytes > limit) {
        limit = (j->req_used + bytes + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
        policy_set_limit(d.pol, (uint64_t)j->pid, limit);
        d.dirty = 1;
    }
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
    logmsg("pid %d (project %s): %llu MiB denied: %s", (int)j->pid, project_name(j->project),
           (unsigned long long)(a->bytes / MiB), why);
    if (j->req_conn >= 0)
        reply_error(j->req_conn, -ENOMEM, "%s", why);
    j->req_conn = -1;
    j->req_gen = 0;
}

static void do_actions(struct pol_actions *a)
{
    char b1[24], b2[24];

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
                d.preemptions_total++;
                logmsg("preempting pid %d (project %s, %llu MiB) for pid %llu: %s", (int)j->pid,
                       project_name(j->project), (unsigned long long)(x->bytes / MiB),
                       (unsigned long long)x->for_job, pol_why_name(x->why));
            }
            event("suspending", j->pid, "why", pol_why_name(x->why), "for", u64s(x->for_job, b1),
                  "bytes", u64s(x->bytes, b2), NULL);
            start_op(j, WORK_SUSPEND, NULL);
            break;
        case POL_ACT_RESUME:
            event("resuming", j->pid, "why", pol_why_name(x->why), "bytes", u64s(x->bytes, b1), NULL);
            start_op(j, WORK_RESUME, NULL);
            break;
        }
    }
    if (a->n)
        d.dirty = 1;              /* the state file is rewritten only when something changed */
    pol_actions_clear(a);
}

/* ---------------------------------------------------------------------------
 * Jobs: register, exit
 * ------------------------------------------------------------------------- */

static struct djob *add_job(pid_t pid, uid_t uid, const char *user, int project, uint64_t start)
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

static void job_gone(struct djob *j, const char *how)
{
    const struct pol_job *pj = policy_job(d.pol, (uint64_t)j->pid);
    char rt[24];

    logmsg("pid %d (project %s) %s", (int)j->pid, project_name(j->project), how);
    event("exited", j->pid, "how", how, "runtime_ms",
          msecs(pj ? policy_job_runtime(pj, now_ns()) : 0, rt), NULL);
    policy_job_exited(d.pol, (uint64_t)j->pid, now_ns(), &acts);
    remove_job(j);
    do_actions(&acts);
}

static uint64_t capacity_for(int dev, uint64_t reported)
{
    for (int i = 0; i < d.cfg.ngpus; i++)
        if (d.cfg.gpus[i].id == dev)
            return d.cfg.gpus[i].capacity;
    return reported;
}

/* Make sure device dev exists in the policy, with its capacity. */
static void learn_device(int dev, uint64_t reported)
{
    uint64_t cap = capacity_for(dev, reported);

    if (dev < 0 || dev >= TCGPUD_MAX_GPUS)
        return;
    if (dev >= policy_device_count(d.pol) || policy_device_capacity(d.pol, dev) == 0) {
        if (cap) {
            policy_set_device(d.pol, dev, cap);
            logmsg("GPU %d: capacity %llu MiB%s", dev, (unsigned long long)(cap / MiB),
                   cap == reported ? " (reported by a job)" : " (from the configuration)");
        } else if (dev >= policy_device_count(d.pol)) {
            policy_set_device(d.pol, dev, 0);
        }
    }
}

/* A register request on its way through its steps. */
struct registration {
    const struct ucred *peer;     /* the job */
    const char *proj;
    const struct tcgpud_project *cp;
    struct identity id;
    struct pol_job_spec spec;
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

/* Its memory limit and its device, which tcgpud learns of. 0, or -errno (replied). */
static int register_memory(int ci, const struct ctl_msg *m, struct registration *rg)
{
    uint64_t gpu_mem = 0, total = 0, dev = 0;

    if ((ctl_get(m, "gpu_mem") && ctl_get_u64(m, "gpu_mem", &gpu_mem) < 0) ||
        (ctl_get(m, "total") && ctl_get_u64(m, "total", &total) < 0) ||
        (ctl_get(m, "device") && (ctl_get_u64(m, "device", &dev) < 0 || dev >= TCGPUD_MAX_GPUS))) {
        reply_error(ci, -EINVAL, "malformed register request");
        return -EINVAL;
    }
    rg->spec.limit = gpu_mem ? gpu_mem : rg->cp->pol.default_limit;
    rg->spec.device = (int)dev;
    learn_device((int)dev, total);
    return 0;
}

/* Into the policy and the job list. 0, or -errno (replied). */
static int register_admit(int ci, struct registration *rg)
{
    pid_t pid = rg->peer->pid;
    uint64_t start = tcgpud_proc_start_ticks(pid);
    struct djob *old = job_of(pid);
    int r;

    /* A pid registering again (an exec'd program, a restarted job) starts afresh. */
    if (old)
        job_gone(old, "registered again");
    r = policy_admit(d.pol, &rg->spec, now_ns());
    if (r < 0 || !add_job(pid, rg->peer->uid, rg->id.user, rg->spec.project, start)) {
        if (r == 0)
            policy_job_exited(d.pol, rg->spec.id, now_ns(), &acts);
        r = r < 0 ? r : -ENOMEM;
        reply_error(ci, r, "cannot admit the job: %s", strerror(-r));
        return r;
    }
    pol_actions_clear(&acts);
    return 0;
}

static void reply_registered(int ci, const struct ctl_msg *m, const struct registration *rg)
{
    static struct ctl_buf b;
    const struct pol_job_spec *s = &rg->spec;
    char pr[24], lim[24];

    logmsg("pid %d registered: user %s, project %s, priority %d, limit %s%s", (int)rg->peer->pid,
           rg->id.user, rg->proj, s->priority, s->limit ? u64s(s->limit / MiB, lim) : "none",
           s->limit ? " MiB" : "");
    event("registered", rg->peer->pid, "limit", u64s(s->limit, lim), "priority_given",
          ctl_get(m, "priority") ? i64s(s->priority, pr) : "", NULL);
    d.dirty = 1;
    ctl_buf_ok(&b);
    ctl_buf_put(&b, "project", rg->proj);
    ctl_buf_put_i64(&b, "priority", s->priority);
    ctl_buf_put_u64(&b, "limit", s->limit);
    ctl_buf_put_u64(&b, "may_borrow", (uint64_t)rg->cp->pol.may_borrow);
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
        register_memory(ci, m, &rg) < 0 || register_admit(ci, &rg) < 0)
        return;
    reply_registered(ci, m, &rg);
}

static const struct command cmd_register = {
    .word = "register", .access = ACCESS_ANY_PROCESS, .handle = register_job,
};

/* ---------------------------------------------------------------------------
 * Memory requests
 * ------------------------------------------------------------------------- */

static void kick_poll(void);

static void request_memory(int ci, const struct ctl_msg *m, struct djob *j)
{
    const struct ucred *peer = &d.conns[ci].peer;
    const struct pol_job *pj = policy_job(d.pol, (uint64_t)j->pid);
    uint64_t dev = 0, total = 0, wait_ms = 0, over = 0;
    char by[24];

    if (pj->state != POL_RUNNING) {
        /* It was chosen as a victim just before it asked: it retries after its resume. */
        reply_error(ci, -EAGAIN, "process %d is being suspended", (int)peer->pid);
        return;
    }
    if (j->req_conn >= 0 || pj->req != POL_REQ_NONE) {
        reply_error(ci, -EBUSY, "process %d already has a request in flight", (int)peer->pid);
        return;
    }
    j->req_free = POL_FREE_UNKNOWN;
    if (ctl_get_u64(m, "bytes", &j->req_bytes) < 0 || j->req_bytes == 0 ||
        ctl_get_u64(m, "device", &dev) < 0 || dev >= TCGPUD_MAX_GPUS ||
        (ctl_get(m, "used") && ctl_get_u64(m, "used", &j->req_used) < 0) ||
        (ctl_get(m, "free") && ctl_get_u64(m, "free", &j->req_free) < 0) ||
        (ctl_get(m, "total") && ctl_get_u64(m, "total", &total) < 0) ||
        (ctl_get(m, "wait_ms") && ctl_get_u64(m, "wait_ms", &wait_ms) < 0) ||
        (ctl_get(m, "over_limit") && ctl_get_u64(m, "over_limit", &over) < 0)) {
        reply_error(ci, -EINVAL, "malformed request");
        return;
    }
    learn_device((int)dev, total);
    j->req_device = (int)dev;
    j->req_over_limit = over != 0;
    j->req_wait_ms = wait_ms;
    j->req_conn = ci;
    j->req_t0 = now_ns();
    d.conns[ci].kind = C_REQUEST;
    d.conns[ci].job = j->pid;
    d.conns[ci].deadline_ns = 0;
    event("request", j->pid, "bytes", u64s(j->req_bytes, by), "over_limit", over ? "1" : "0", NULL);
    /* Decide on fresh numbers: after a status poll that starts from now. */
    j->req_gen = d.poll_started + 1;
    kick_poll();
}

static const struct command cmd_request = {
    .word = "request", .access = ACCESS_THE_JOB, .handle = request_memory,
};

static void decide_request(struct djob *j)
{
    int r;

    j->req_gen = 0;
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

static void kick_poll(void)
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
        logmsg("pid %d was suspended outside tcgpud: a manual suspension now", (int)j->pid);
        if (policy_manual_suspend(d.pol, (uint64_t)j->pid, 0, now, &acts) == 0) {
            pol_actions_clear(&acts);     /* already done: acknowledge instead of acting */
            policy_job_suspended(d.pol, (uint64_t)j->pid, 0, now, &acts);
        }
        event("suspended", j->pid, "why", "manual", "by", "outside", NULL);
    } else if (pj->state == POL_SUSPENDED && st->state == TCGPU_STATE_RUNNING) {
        logmsg("pid %d was resumed outside tcgpud", (int)j->pid);
        if (policy_manual_resume(d.pol, (uint64_t)j->pid, now, &acts) == 0) {
            pol_actions_clear(&acts);
            policy_job_resumed(d.pol, (uint64_t)j->pid, 0, now, &acts);
        }
        event("resumed", j->pid, "why", "manual", "by", "outside", NULL);
    }
    do_actions(&acts);
}

static void poll_done(struct work *w)
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

static void reply_waiter(struct djob *j, const struct work *w)
{
    static struct ctl_buf b;

    if (j->waiter < 0)
        return;
    if (w->err) {
        ctl_buf_error(&b, w->err, w->msg);
    } else {
        ctl_buf_ok(&b);
        ctl_put_status(&b, &w->st);
    }
    send_msg(j->waiter, &b);
    conn_close(j->waiter);
    j->waiter = -1;
}

static void op_done(struct work *w)
{
    struct djob *j = job_of(w->pid);
    int err = w->err;
    char t[24], by[24];

    if (!j)
        return;                   /* exited meanwhile */
    j->busy = 0;
    d.dirty = 1;                  /* a state changed, even when no action follows */
    /* Already in the state asked for: done, as far as the policy goes. */
    if (err == -EALREADY && w->from_server)
        err = 0;
    if (w->kind == WORK_SUSPEND) {
        if (err == 0) {
            latency_add(&d.suspend_lat, (double)w->ns / 1e9);
            logmsg("pid %d suspended in %.0f ms (GPU memory now %llu MiB)", (int)j->pid,
                   (double)w->ns / 1e6, (unsigned long long)(w->st.gpu_bytes / MiB));
            event("suspended", j->pid, "latency_ms", msecs(w->ns, t),
                  "gpu_bytes", u64s(w->st.gpu_bytes, by), NULL);
        } else {
            logmsg("pid %d did not suspend: %s", (int)j->pid, w->msg);
            event("suspend-failed", j->pid, "error", errno_name(err), "text", w->msg, NULL);
        }
        reply_waiter(j, w);
        policy_job_suspended(d.pol, (uint64_t)j->pid, err, now_ns(), &acts);
    } else {
        if (err == 0) {
            latency_add(&d.resume_lat, (double)w->ns / 1e9);
            logmsg("pid %d resumed in %.0f ms", (int)j->pid, (double)w->ns / 1e6);
            event("resumed", j->pid, "latency_ms", msecs(w->ns, t), NULL);
        } else {
            logmsg("pid %d did not resume: %s", (int)j->pid, w->msg);
            event("resume-failed", j->pid, "error", errno_name(err), "text", w->msg, NULL);
        }
        reply_waiter(j, w);
        policy_job_resumed(d.pol, (uint64_t)j->pid, err, now_ns(), &acts);
    }
    do_actions(&acts);
}

static void take_work(void)
{
    struct work *w = tcgpud_work_take();

    while (w) {
        struct work *next = w->next;
        if (w->kind == WORK_POLL)
            poll_done(w);
        else
            op_done(w);
        tcgpud_work_free(w);
        w = next;
    }
}

/* ---------------------------------------------------------------------------
 * ps, events, manual suspend/resume
 * ------------------------------------------------------------------------- */

static const char *display_state(const struct pol_job *pj)
{
    if (pj->state == POL_RUNNING && pj->req != POL_REQ_NONE)
        return "waiting";
    return pol_state_name(pj->state);
}

static void put_job(struct ctl_buf *b, const struct djob *j, const struct pol_job *pj, uint64_t now)
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
        ctl_buf_request(&b, "device");
        ctl_buf_put_u64(&b, "id", (uint64_t)dev);
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
    logmsg("%s of pid %d asked by uid %u pid %d", suspend ? "suspend" : "resume", (int)j->pid,
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
    j->waiter = ci;
    d.conns[ci].kind = C_OP;
    d.conns[ci].job = j->pid;
    if (suspend && dir) {
        /* the suspend action of do_actions would go to host memory: start it here instead */
        pol_actions_clear(&acts);
        event("suspending", j->pid, "why", "manual", "dir", dir, NULL);
        start_op(j, WORK_SUSPEND, dir);
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
    send_msg(ci, &b);
    conn_close(ci);
}

static const struct command cmd_status = {
    .word = "status", .access = ACCESS_ANY_PROCESS, .handle = report_status,
};

static const struct command *const commands[] = {
    &cmd_register, &cmd_request, &cmd_ps, &cmd_events, &cmd_suspend, &cmd_resume, &cmd_status,
};

/* The peer's own registered job. Replies and returns NULL otherwise. */
static struct djob *own_job(int ci)
{
    const struct ucred *peer = &d.conns[ci].peer;
    struct djob *j = job_of(peer->pid);

    if (!j || !policy_job(d.pol, (uint64_t)peer->pid) || j->uid != peer->uid) {
        reply_error(ci, -ENOENT, "process %d is not a registered job", (int)peer->pid);
        return NULL;
    }
    return j;
}

static void handle(int ci, const struct ctl_msg *m)
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

/* ---------------------------------------------------------------------------
 * Socket
 * ------------------------------------------------------------------------- */

static int open_socket(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int fd, probe;

    if (strlen(path) >= sizeof(a.sun_path)) {
        logmsg("socket path %s is too long", path);
        return -ENAMETOOLONG;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    /* A live tcgpud on the path must not be displaced; a stale file may. */
    probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof(a)) == 0) {
        close(probe);
        logmsg("another tcgpud is serving %s", path);
        return -EADDRINUSE;
    }
    if (probe >= 0)
        close(probe);
    unlink(path);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        chmod(path, 0666) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        logmsg("cannot listen on %s: %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    return fd;
}

static void accept_all(void)
{
    int fd;

    while ((fd = accept4(d.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
        socklen_t len = sizeof(struct ucred);
        int ci;
        for (ci = 0; ci < MAX_CONNS && d.conns[ci].kind != C_FREE; ci++)
            ;
        if (ci == MAX_CONNS) {
            logmsg("too many connections; dropping one");
            close(fd);
            continue;
        }
        d.conns[ci] = (struct conn){ .kind = C_READ, .fd = fd, .deadline_ns = now_ns() + READ_WAIT_NS };
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &d.conns[ci].peer, &len) < 0) {
            logmsg("cannot read peer credentials: %s", strerror(errno));
            conn_close(ci);
        }
    }
}

static void read_request(int ci)
{
    static char buf[CTL_MSG_MAX + 1];
    static struct ctl_msg m;
    ssize_t n = recv(d.conns[ci].fd, buf, sizeof(buf), MSG_TRUNC | MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        conn_close(ci);
        return;
    }
    if (n > CTL_MSG_MAX) {
        reply_error(ci, -EMSGSIZE, "request too large");
        return;
    }
    if (ctl_parse(buf, (size_t)n, &m) < 0) {
        reply_error(ci, -EPROTO, "malformed request");
        return;
    }
    d.conns[ci].kind = C_OP;      /* handled: no more reading as a request */
    handle(ci, &m);
}

/* A client waiting for an answer hung up (a job that died in its allocation). */
static void peer_gone(int ci)
{
    struct conn *c = &d.conns[ci];
    struct djob *j = job_of(c->job);

    if (c->kind == C_REQUEST && j && j->req_conn == ci) {
        j->req_conn = -1;
        j->req_gen = 0;
        if (policy_request_cancel(d.pol, (uint64_t)j->pid, now_ns(), &acts) == 0)
            pol_actions_clear(&acts);     /* nobody to tell */
    }
    conn_close(ci);
}

/* ---------------------------------------------------------------------------
 * State file, metrics, tick
 * ------------------------------------------------------------------------- */

static void save_state(void)
{
    struct tcgpud_saved_job *v = calloc(d.njobs ? d.njobs : 1, sizeof(*v));
    char err[512];
    size_t n = 0;

    if (!v) {
        logmsg("out of memory saving the state");
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
        s->mem = pj->mem;
        /* in-between states are saved as where they are heading */
        snprintf(s->state, sizeof(s->state), "%s",
                 pj->state == POL_RUNNING || pj->state == POL_RESUMING ? "running" : "suspended");
        snprintf(s->suspended_by, sizeof(s->suspended_by), "%s", pol_by_name(pj->suspended_by));
        s->auto_resume = pj->auto_resume;
        s->preemptions = pj->preemptions;
        s->run_ns = policy_job_runtime(pj, now_ns());
    }
    if (tcgpud_state_save(d.cfg.state_file, v, n, err, sizeof(err)) < 0)
        logmsg("%s", err);
    else
        d.dirty = 0;
    free(v);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void write_summary(FILE *f, const char *name, const char *help, const struct latency *l)
{
    double v[LATENCY_SAMPLES];
    static const double qs[] = { 0.5, 0.9, 0.99 };

    fprintf(f, "# HELP %s %s\n# TYPE %s summary\n", name, help, name);
    memcpy(v, l->v, l->n * sizeof(double));
    qsort(v, l->n, sizeof(double), cmp_double);
    for (size_t i = 0; i < 3 && l->n; i++)
        fprintf(f, "%s{quantile=\"%g\"} %.6f\n", name, qs[i], v[(size_t)(qs[i] * (double)(l->n - 1) + 0.5)]);
    /* sum over the samples kept; count over all time (a summary's count is a counter) */
    fprintf(f, "%s_sum %.6f\n%s_count %llu\n", name, l->sum, name, (unsigned long long)l->count);
}

static void write_metrics_to(FILE *f)
{
    static const char *const states[] = { "running", "waiting", "suspending", "suspended", "resuming" };
    unsigned long counts[5] = { 0 };

    fprintf(f, "# HELP tcgpud_device_memory_capacity_bytes GPU memory tcgpud manages.\n"
               "# TYPE tcgpud_device_memory_capacity_bytes gauge\n");
    for (int dev = 0; dev < policy_device_count(d.pol); dev++)
        fprintf(f, "tcgpud_device_memory_capacity_bytes{device=\"%d\"} %llu\n", dev,
                (unsigned long long)policy_device_capacity(d.pol, dev));
    fprintf(f, "# HELP tcgpud_device_memory_used_bytes GPU memory held by managed jobs that are not suspended.\n"
               "# TYPE tcgpud_device_memory_used_bytes gauge\n");
    for (int dev = 0; dev < policy_device_count(d.pol); dev++)
        fprintf(f, "tcgpud_device_memory_used_bytes{device=\"%d\"} %llu\n", dev,
                (unsigned long long)policy_device_used(d.pol, dev));
    for (size_t i = 0; i < d.njobs; i++) {
        const struct pol_job *pj = policy_job(d.pol, (uint64_t)d.jobs[i].pid);
        const char *s = pj ? display_state(pj) : "";
        for (int k = 0; k < 5; k++)
            counts[k] += !strcmp(s, states[k]);
    }
    fprintf(f, "# HELP tcgpud_jobs Managed jobs by state.\n# TYPE tcgpud_jobs gauge\n");
    for (int k = 0; k < 5; k++)
        fprintf(f, "tcgpud_jobs{state=\"%s\"} %lu\n", states[k], counts[k]);
    fprintf(f, "# HELP tcgpud_preemptions_total Jobs suspended to make room for others.\n"
               "# TYPE tcgpud_preemptions_total counter\ntcgpud_preemptions_total %llu\n",
            (unsigned long long)d.preemptions_total);
    fprintf(f, "# HELP tcgpud_refused_requests_total Requests refused for lack of permission.\n"
               "# TYPE tcgpud_refused_requests_total counter\ntcgpud_refused_requests_total %llu\n",
            (unsigned long long)d.refused_total);
    write_summary(f, "tcgpud_suspend_latency_seconds", "Time to suspend a job (GPU memory freed).",
                  &d.suspend_lat);
    write_summary(f, "tcgpud_resume_latency_seconds", "Time to resume a job.", &d.resume_lat);
}

/* The textfile, written whole to a temporary name and renamed (node_exporter
 * must never read half a file). */
static void write_metrics(void)
{
    char tmp[PATH_MAX + 16];
    FILE *f;

    if (!d.cfg.metrics[0])
        return;
    snprintf(tmp, sizeof(tmp), "%s.tmp", d.cfg.metrics);
    f = fopen(tmp, "we");
    if (!f) {
        static int warned;
        if (!warned++)
            logmsg("cannot write metrics to %s: %s", tmp, strerror(errno));
        return;
    }
    write_metrics_to(f);
    if (fclose(f) != 0 || rename(tmp, d.cfg.metrics) < 0) {
        logmsg("cannot write metrics to %s: %s", d.cfg.metrics, strerror(errno));
        unlink(tmp);
    }
}

static void check_deaths(void)
{
    for (size_t i = 0; i < d.njobs;) {
        struct djob *j = &d.jobs[i];
        if (tcgpud_proc_start_ticks(j->pid) != j->start_ticks) {
            job_gone(j, "exited");
            continue;
        }
        i++;
    }
}

static void check_deadlines(void)
{
    uint64_t now = now_ns();

    for (int ci = 0; ci < MAX_CONNS; ci++) {
        struct conn *c = &d.conns[ci];
        if (c->kind == C_READ && now > c->deadline_ns) {
            conn_close(ci);
        } else if (c->kind == C_REQUEST && c->deadline_ns && now > c->deadline_ns) {
            struct djob *j = job_of(c->job);
            const struct pol_job *pj = j ? policy_job(d.pol, (uint64_t)j->pid) : NULL;
            /* only a request still waiting for room times out; one whose
             * victims are being suspended gets its answer from their acks */
            if (pj && pj->req == POL_REQ_PREEMPTING)
                continue;
            if (j && policy_request_cancel(d.pol, (uint64_t)j->pid, now, &acts) == 0)
                do_actions(&acts);
            else if (d.conns[ci].kind != C_FREE)
                reply_error(ci, -ENOMEM, "no room within the wait timeout");
        }
    }
}

static void tick(void)
{
    check_deaths();
    check_deadlines();
    if (policy_tick(d.pol, now_ns(), &acts) == 0)
        do_actions(&acts);
    else
        pol_actions_clear(&acts);
    kick_poll();
    write_metrics();
}

/* ---------------------------------------------------------------------------
 * Start-up: configuration, policy, re-learning jobs
 * ------------------------------------------------------------------------- */

static int build_policy(void)
{
    struct pol_config pc = { .min_runtime_ns = d.cfg.min_runtime_ns,
                             .resume_retry_ns = d.cfg.resume_retry_ns };

    d.pol = policy_new(&pc);
    if (!d.pol)
        return -ENOMEM;
    for (int i = 0; i < d.cfg.ngpus; i++)
        if (policy_set_device(d.pol, d.cfg.gpus[i].id, d.cfg.gpus[i].capacity) < 0)
            return -EINVAL;
    for (int i = 0; i < d.cfg.nprojects; i++)
        if (policy_add_project(d.pol, &d.cfg.projects[i].pol) < 0)
            return -EINVAL;
    return 0;
}

/* Ask the job itself how it is (synchronously: at start-up nothing else runs yet). */
static int job_status(pid_t pid, struct tcgpu_status *st, char *err, size_t errlen)
{
    struct ctl_conn c;
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    long len;
    int r = -ENOMEM;

    if (!req || !rep)
        goto out;
    r = ctl_connect(pid, &c, err, errlen);
    if (r < 0)
        goto out;
    ctl_buf_request(req, "status");
    len = ctl_buf_finish(req);
    r = ctl_call(&c, req->data, (size_t)len, rep, 5000, NULL, NULL);
    ctl_close(&c);
    if (r == 0 && (rep->err || ctl_get_status(rep, st) < 0))
        r = rep->err ? rep->err : -EPROTO;
    if (r < 0)
        snprintf(err, errlen, "status of process %d: %s", (int)pid, strerror(-r));
out:
    free(req);
    free(rep);
    return r;
}

static void relearn_one(const struct tcgpud_saved_job *s)
{
    struct pol_job_spec spec = { .id = (uint64_t)s->pid, .priority = s->priority,
                                 .device = s->device, .limit = s->limit,
                                 .preemptions = s->preemptions, .run_ns = s->run_ns };
    struct tcgpu_status st;
    char err[512];
    int proj = policy_project_find(d.pol, s->project);

    if (tcgpud_proc_start_ticks(s->pid) != s->start_ticks) {
        logmsg("pid %d (project %s) ended while tcgpud was away", (int)s->pid, s->project);
        return;
    }
    if (proj < 0) {
        logmsg("pid %d: project %s is no longer configured; not managing it", (int)s->pid, s->project);
        return;
    }
    if (job_status(s->pid, &st, err, sizeof(err)) < 0) {
        logmsg("pid %d: %s; not managing it", (int)s->pid, err);
        return;
    }
    learn_device(s->device, s->dev_capacity);
    spec.project = proj;
    if (st.state == TCGPU_STATE_SUSPENDED) {
        spec.state = POL_SUSPENDED;
        spec.mem = s->mem ? s->mem : st.tracked_bytes;
        /* Saved as running but suspended now: someone did it by hand meanwhile. */
        spec.suspended_by = !strcmp(s->state, "suspended") ? (enum pol_by)pol_by_parse(s->suspended_by)
                                                           : POL_BY_MANUAL;
        if ((int)spec.suspended_by <= 0)
            spec.suspended_by = POL_BY_MANUAL;
        spec.auto_resume = s->auto_resume;
    } else {
        spec.state = POL_RUNNING;
        spec.mem = st.gpu_bytes;
    }
    if (policy_admit(d.pol, &spec, now_ns()) < 0 ||
        !add_job(s->pid, s->uid, s->user, proj, s->start_ticks)) {
        logmsg("pid %d: cannot re-admit it", (int)s->pid);
        return;
    }
    logmsg("pid %d re-learnt: project %s, %s%s", (int)s->pid, s->project, pol_state_name(spec.state),
           spec.state == POL_SUSPENDED ? (spec.suspended_by == POL_BY_MANUAL ? " (by hand)" : " (by policy)") : "");
    event("relearnt", s->pid, "state", pol_state_name(spec.state), NULL);
}

static void relearn(void)
{
    struct tcgpud_saved_job *v;
    size_t n;
    char err[512];

    if (tcgpud_state_load(d.cfg.state_file, &v, &n, err, sizeof(err)) < 0) {
        logmsg("%s: starting without the jobs it held", err);
        return;
    }
    for (size_t i = 0; i < n; i++)
        relearn_one(&v[i]);
    free(v);
    d.dirty = 1;
}

/* ---------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: tcgpud [--config FILE] [--socket PATH] [--state FILE]\n"
               "\n"
               "The GPU policy daemon: priorities, reservations, borrowing, preemption by\n"
               "transparent suspend, automatic resume. Runs in the foreground, logs to stderr.\n"
               "Must run as root (or as the jobs' own user on a single-user machine): it\n"
               "suspends and resumes jobs through their control sockets.\n"
               "\n"
               "  -c, --config FILE   configuration (default /etc/tcgpud.ini; docs/tcgpud.md)\n"
               "  -s, --socket PATH   override [daemon] socket\n"
               "  -S, --state FILE    override [daemon] state_file\n");
}

static int parse_args(int argc, char **argv, const char **config, const char **sock,
                      const char **state)
{
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' },
        { "socket", required_argument, NULL, 's' },
        { "state", required_argument, NULL, 'S' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { 0 },
    };
    int ch;

    while ((ch = getopt_long(argc, argv, "c:s:S:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c': *config = optarg; break;
        case 's': *sock = optarg; break;
        case 'S': *state = optarg; break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("tcgpud %s\n", TCGPU_VERSION_STRING); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return -1;
    }
    return 0;
}

static int setup(int argc, char **argv)
{
    const char *config = "/etc/tcgpud.ini", *sock = NULL, *state = NULL;
    char err[1024];
    sigset_t mask;

    if (parse_args(argc, argv, &config, &sock, &state) < 0)
        return 2;
    if (tcgpud_config_load(&d.cfg, config, err, sizeof(err)) < 0) {
        fprintf(stderr, "tcgpud: %s\n", err);
        return 1;
    }
    if (sock)
        snprintf(d.cfg.socket, sizeof(d.cfg.socket), "%s", sock);
    if (state)
        snprintf(d.cfg.state_file, sizeof(d.cfg.state_file), "%s", state);
    if (build_policy() < 0) {
        fprintf(stderr, "tcgpud: cannot build the policy from %s\n", config);
        return 1;
    }
    if (geteuid() != 0)
        logmsg("not running as root: only jobs of uid %u can be suspended and resumed",
               (unsigned)geteuid());
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    d.sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d.sig_fd < 0 || tcgpud_work_init() < 0) {
        fprintf(stderr, "tcgpud: signalfd/eventfd: %s\n", strerror(errno));
        return 1;
    }
    d.start_ns = now_ns();
    relearn();
    d.listen_fd = open_socket(d.cfg.socket);
    if (d.listen_fd < 0)
        return 1;
    logmsg("serving %s (config %s, state %s, %d projects, min runtime %.1f s)", d.cfg.socket,
           config, d.cfg.state_file, d.cfg.nprojects, (double)d.cfg.min_runtime_ns / 1e9);
    return 0;
}

static void loop(void)
{
    struct pollfd p[3 + MAX_CONNS];
    int idx[MAX_CONNS];
    uint64_t next_tick = now_ns();

    while (!d.stop) {
        int n = 3, wait;
        p[0] = (struct pollfd){ .fd = d.listen_fd, .events = POLLIN };
        p[1] = (struct pollfd){ .fd = tcgpud_work_fd(), .events = POLLIN };
        p[2] = (struct pollfd){ .fd = d.sig_fd, .events = POLLIN };
        for (int ci = 0; ci < MAX_CONNS; ci++) {
            if (d.conns[ci].kind == C_FREE)
                continue;
            idx[n - 3] = ci;
            p[n++] = (struct pollfd){ .fd = d.conns[ci].fd, .events = POLLIN };
        }
        uint64_t now = now_ns();
        wait = now >= next_tick ? 0 : (int)((next_tick - now) / 1000000u) + 1;
        if (poll(p, (nfds_t)n, wait) < 0 && errno != EINTR) {
            logmsg("poll: %s", strerror(errno));
            break;
        }
        if (p[2].revents) {
            struct signalfd_siginfo si;
            if (read(d.sig_fd, &si, sizeof(si)) > 0)
                logmsg("signal %u: stopping (jobs keep running)", si.ssi_signo);
            d.stop = 1;
        }
        if (p[1].revents)
            take_work();
        for (int k = 3; k < n; k++) {
            int ci = idx[k - 3];
            if (!p[k].revents || d.conns[ci].kind == C_FREE || d.conns[ci].fd != p[k].fd)
                continue;
            if (d.conns[ci].kind == C_READ)
                read_request(ci);
            else
                peer_gone(ci);    /* waiting clients send nothing more: readable means gone */
        }
        if (p[0].revents)
            accept_all();
        if (now_ns() >= next_tick) {
            tick();
            next_tick = now_ns() + TICK_MS * 1000000ull;
        }
        if (d.dirty)
            save_state();
    }
}

int main(int argc, char **argv)
{
    int r = setup(argc, argv);

    if (r)
        return r;
    loop();
    save_state();
    unlink(d.cfg.socket);
    for (int ci = 0; ci < MAX_CONNS; ci++)
        conn_close(ci);
    pol_actions_free(&acts);
    policy_free(d.pol);
    free(d.jobs);
    tcgpud_config_free(&d.cfg);
    return 0;
}
