/* tcgpud's connections: the socket, replies, refusals, events to followers; see conns.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "conns.h"
#include "daemon.h"
#include "jobs.h"
#include "metrics.h"
#include "state.h"

#define READ_WAIT_NS     2000000000ull   /* a client that connects must send within this */

/* ---------------------------------------------------------------------------
 * Events: a ring of finished "event ..." messages, pushed to followers
 * ------------------------------------------------------------------------- */

void send_msg(int ci, const struct ctl_buf *b)
{
    long n = ctl_buf_finish(b);

    if (n < 0 || d.conns[ci].fd < 0)
        return;
    /* a client that never reads fills its socket at will: logged as a refusal is */
    if (send(d.conns[ci].fd, b->data, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        note_for_uid(d.conns[ci].peer.uid, "reply to uid %u pid %d not delivered: %s",
                     (unsigned)d.conns[ci].peer.uid, (int)d.conns[ci].peer.pid, strerror(errno));
}

void event(const char *type, pid_t pid, ...)
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
    metrics_count_event(type);
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

const char *u64s(uint64_t v, char *buf)
{
    snprintf(buf, 24, "%llu", (unsigned long long)v);
    return buf;
}

/* A signed value (a priority) with its sign: never through u64s(). */
const char *i64s(int64_t v, char *buf)
{
    snprintf(buf, 24, "%lld", (long long)v);
    return buf;
}

const char *msecs(uint64_t ns, char *buf)
{
    snprintf(buf, 24, "%.1f", (double)ns / 1e6);
    return buf;
}

/* ---------------------------------------------------------------------------
 * Connections
 * ------------------------------------------------------------------------- */

void conn_close(int ci)
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

void reply_error(int ci, int err, const char *fmt, ...)
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
 * Refusals, and other lines a user can cause at will
 * ------------------------------------------------------------------------- */

/*
 * What a user can cause at will (a flood of connections, requests it may
 * not make, replies it never reads) is logged at most once a second per
 * uid, so that one user can neither fill the log nor push everyone else's
 * events out of the ring.
 */
#define NOTE_EVERY_NS 1000000000ull
#define NOTE_UIDS     64

static struct refusal_note {
    uid_t uid;
    uint64_t last_ns;             /* 0: a free entry */
    unsigned long held;           /* lines not logged since */
} notes[NOTE_UIDS];

static struct refusal_note *note_of(uid_t uid)
{
    struct refusal_note *oldest = &notes[0];

    for (int i = 0; i < NOTE_UIDS; i++) {
        if (notes[i].last_ns && notes[i].uid == uid)
            return &notes[i];
        if (notes[i].last_ns < oldest->last_ns)
            oldest = &notes[i];
    }
    *oldest = (struct refusal_note){ .uid = uid };
    return oldest;
}

long note_for_uid(uid_t uid, const char *fmt, ...)
{
    struct refusal_note *n = note_of(uid);
    uint64_t now = now_ns();
    unsigned long held = n->held;
    char text[640];
    va_list ap;

    if (n->last_ns && now - n->last_ns < NOTE_EVERY_NS) {
        n->held++;
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (held)
        log_info("%s (and %lu more lines of uid %u not logged)", text, held, (unsigned)uid);
    else
        log_info("%s", text);
    n->last_ns = now;
    n->held = 0;
    return (long)held;
}

void refuse(int ci, const char *what, const char *why)
{
    const struct ucred *p = &d.conns[ci].peer;
    char uid[24], pid[24], more[24];
    long held;

    d.refused_total++;
    held = note_for_uid(p->uid, "refused %s from uid %u pid %d: %s", what, (unsigned)p->uid,
                        (int)p->pid, why);
    if (held >= 0)
        event("refused", 0, "what", what, "uid", u64s(p->uid, uid), "from_pid",
              u64s((uint64_t)p->pid, pid), "why", why, "not_shown", u64s((uint64_t)held, more),
              NULL);
    reply_error(ci, -EACCES, "%s: %s", what, why);
}

/* ---------------------------------------------------------------------------
 * Socket
 * ------------------------------------------------------------------------- */

int open_socket(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int fd, probe;

    if (strlen(path) >= sizeof(a.sun_path)) {
        log_info("socket path %s is too long", path);
        return -ENAMETOOLONG;
    }
    memcpy(a.sun_path, path, strlen(path) + 1);
    /* A live tcgpud on the path must not be displaced; a stale file may. */
    probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&a, sizeof(a)) == 0) {
        close(probe);
        log_info("another tcgpud is serving %s", path);
        return -EADDRINUSE;
    }
    if (probe >= 0)
        close(probe);
    unlink(path);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        chmod(path, 0666) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        log_info("cannot listen on %s: %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    return fd;
}

/* ---------------------------------------------------------------------------
 * Who may hold how many connections (daemon.h, docs/tcgpud.md "Threat model")
 * ------------------------------------------------------------------------- */

/* The peer is a registered job itself: its pid, its uid, the same process. */
static int peer_is_job(const struct ucred *peer)
{
    const struct djob *j = job_of(peer->pid);

    return j && j->uid == peer->uid && tcgpud_proc_start_ticks(peer->pid) == j->start_ticks;
}

static enum conn_class class_of(const struct ucred *peer)
{
    if (peer->uid == 0)
        return CLASS_ROOT;
    return peer_is_job(peer) ? CLASS_JOB : CLASS_USER;
}

struct conn_counts {
    int total, users;             /* all; CLASS_USER of every uid */
    int mine;                     /* of this peer's uid and class */
    int this_job;                 /* CLASS_JOB: of this very pid */
};

static void count_conns(const struct ucred *peer, enum conn_class cls, struct conn_counts *n)
{
    memset(n, 0, sizeof(*n));
    for (int ci = 0; ci < MAX_CONNS; ci++) {
        const struct conn *c = &d.conns[ci];
        if (c->kind == C_FREE)
            continue;
        n->total++;
        n->users += c->cls == CLASS_USER;
        if (c->cls == cls && c->peer.uid == peer->uid) {
            n->mine++;
            n->this_job += c->peer.pid == peer->pid;
        }
    }
}

/* The oldest other user's connection that is idle or only follows events:
 * root and the jobs' requests come first when the table is full. -1: none. */
static int evictable(void)
{
    int best = -1;

    for (int ci = 0; ci < MAX_CONNS; ci++) {
        const struct conn *c = &d.conns[ci];
        if (c->cls != CLASS_USER || (c->kind != C_FOLLOW && c->kind != C_READ))
            continue;
        if (best < 0 || c->opened_ns < d.conns[best].opened_ns)
            best = ci;
    }
    return best;
}

/* Whether a new connection of peer may have a slot: 0, or -EAGAIN with why. */
static int admit(const struct ucred *peer, enum conn_class cls, char *why, size_t len)
{
    struct conn_counts n;
    int per_user = d.cfg.max_connections_per_user;

    count_conns(peer, cls, &n);
    if (cls == CLASS_JOB && n.this_job >= CONNS_PER_JOB) {
        snprintf(why, len, "process %d holds %d connections to tcgpud already (at most %d)",
                 (int)peer->pid, n.this_job, CONNS_PER_JOB);
        return -EAGAIN;
    }
    if (cls == CLASS_JOB && n.mine >= JOB_CONNS_PER_USER) {
        snprintf(why, len, "the jobs of uid %u hold %d connections to tcgpud already (at most %d)",
                 (unsigned)peer->uid, n.mine, JOB_CONNS_PER_USER);
        return -EAGAIN;
    }
    if (cls == CLASS_USER && n.mine >= per_user) {
        snprintf(why, len, "uid %u holds %d connections to tcgpud already (at most %d per user; "
                 "[daemon] max_connections_per_user)", (unsigned)peer->uid, n.mine, per_user);
        return -EAGAIN;
    }
    if (cls == CLASS_USER && n.users >= MAX_CONNS - CONNS_RESERVED) {
        snprintf(why, len, "tcgpud serves %d connections of users already", n.users);
        return -EAGAIN;
    }
    if (n.total >= MAX_CONNS) {
        int victim = cls == CLASS_USER ? -1 : evictable();
        if (victim < 0) {
            snprintf(why, len, "tcgpud serves %d connections already", n.total);
            return -EAGAIN;
        }
        reply_error(victim, -EAGAIN, "tcgpud needs the connection for root or a job's request");
    }
    return 0;
}

/* Tell a peer that was not admitted, without waiting for it, and log it (a
 * flood is logged once a second per uid, with how many were refused). */
static void turn_away(int fd, const struct ucred *peer, const char *why)
{
    static struct ctl_buf b;
    long n;

    ctl_buf_error(&b, -EAGAIN, why);
    n = ctl_buf_finish(&b);
    if (n > 0 && send(fd, b.data, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* its loss: the connection closes anyway */
    }
    close(fd);
    note_for_uid(peer->uid, "connection from pid %d turned away: %s", (int)peer->pid, why);
}

/* At most ACCEPTS_PER_ROUND at a time: a peer that connects in a loop must
 * not keep the loop from serving the others. */
void accept_all(void)
{
    for (int k = 0; k < ACCEPTS_PER_ROUND; k++) {
        struct ucred peer;
        socklen_t len = sizeof(peer);
        enum conn_class cls;
        char why[192];
        int fd, ci;

        fd = accept4(d.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE)
                log_info("accept: %s", strerror(errno));
            return;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) < 0) {
            log_info("cannot read peer credentials: %s", strerror(errno));
            close(fd);
            continue;
        }
        cls = class_of(&peer);
        if (admit(&peer, cls, why, sizeof(why)) < 0) {
            turn_away(fd, &peer, why);
            continue;
        }
        for (ci = 0; ci < MAX_CONNS && d.conns[ci].kind != C_FREE; ci++)
            ;
        if (ci == MAX_CONNS) {        /* admit() keeps a slot free: cannot happen */
            close(fd);
            continue;
        }
        d.conns[ci] = (struct conn){ .kind = C_READ, .cls = cls, .fd = fd, .peer = peer,
                                     .opened_ns = now_ns(),
                                     .deadline_ns = now_ns() + READ_WAIT_NS };
    }
}

int followers_of(uid_t uid)
{
    int n = 0;

    for (int ci = 0; ci < MAX_CONNS; ci++)
        n += d.conns[ci].kind == C_FOLLOW && d.conns[ci].peer.uid == uid;
    return n;
}

const struct ctl_msg *read_request(int ci)
{
    static char buf[CTL_MSG_MAX + 1];
    static struct ctl_msg m;
    ssize_t n = recv(d.conns[ci].fd, buf, sizeof(buf), MSG_TRUNC | MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return NULL;
    if (n <= 0) {
        conn_close(ci);
        return NULL;
    }
    if (n > CTL_MSG_MAX) {
        reply_error(ci, -EMSGSIZE, "request too large");
        return NULL;
    }
    if (ctl_parse(buf, (size_t)n, &m) < 0) {
        reply_error(ci, -EPROTO, "malformed request");
        return NULL;
    }
    d.conns[ci].kind = C_OP;      /* handled: no more reading as a request */
    return &m;
}

void peer_gone(int ci)
{
    struct conn *c = &d.conns[ci];
    struct djob *j = job_of(c->job);

    if (c->kind == C_REQUEST && j && j->req_conn == ci) {
        j->req_conn = -1;
        j->req_gen = 0;
        if (policy_request_cancel(d.pol, (uint64_t)j->pid, now_ns(), &acts) == 0)
            pol_actions_clear(&acts);     /* nobody to tell */
    }
    /* nobody would know the job is suspended, nor resume it (jobs.c) */
    if (c->kind == C_OP && j && j->waiter == ci && j->waiter_suspends)
        undo_manual_suspend(j, "the suspend's asker left before the reply");
    conn_close(ci);
}
