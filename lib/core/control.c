/* The control channel's server side; see control.h. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "ctl/fdpass.h"
#include "ctl/proto.h"
#include "common/log.h"
#include "ops.h"
#include "ctl/rundir.h"
#include "settings.h"
#include "signal_trigger.h"
#include "thread.h"
#include "common/clock.h"
#include "common/names.h"
#include "common/errmsg.h"
#include "common/fdnames.h"
#include "common/units.h"
#include "common/macros.h"
#include "common/proc.h"

#define REQUEST_WAIT_MS   5000      /* a client that connects must send within this */
#define REPLY_SEND_SEC    10        /* a client that stops reading is given up on */
#define PROGRESS_EVERY_NS 200000000 /* at most 5 progress messages a second */
#define OP_QUEUE_MAX      8         /* operations waiting behind the running one */
#define IPC_PEERS_MAX     256       /* connections of processes that map our memory */

static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
    int started;
    pid_t owner;                /* the process that started it; 0 when stopped */
    pthread_t thread;
    int listen_fd;
    int stop_fd;
    int conn_fd;                /* the connection being served, for the fork child */
    char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    int sig;                    /* trigger signal, 0 when off */
    int action;                 /* enum tcgpu_sigaction_kind */
    char ckpt_dir[PATH_MAX];
    unsigned ckpt_seq;
} ctl = { .listen_fd = -1, .stop_fd = -1, .conn_fd = -1 };

static int hooks_registered;

/*
 * Connections of processes that opened our memory with an IPC handle
 * (ipc_export): each stays open while its opener maps the memory, and its
 * end (the opener closed it, or died) is how we learn the memory is no
 * longer mapped there (tcgpu_op_ipc_closed). Only the service thread
 * touches them, but for the fork child and stop.
 */
static struct {
    int fd;
    pid_t pid;
} ipc_peers[IPC_PEERS_MAX];
static int n_ipc_peers;

/* ---------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------- */

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* ---------------------------------------------------------------------------
 * The operation thread: runs the queued operations one at a time
 *
 * The service thread answers status at any time and only queues operations;
 * this thread runs them (tcgpu_op_* of ops.h, which keep one operation at a
 * time process-wide), sends their progress and reply, and closes the
 * connection. A request that finds OP_QUEUE_MAX already waiting is refused
 * at once. (docs/cli.md, "The protocol")
 * ------------------------------------------------------------------------- */

struct queued_op {
    int fd;                     /* the client's connection; -1 for the signal trigger */
    enum tcgpu_op op;
    char dir[PATH_MAX];         /* "" for none */
    char parent[PATH_MAX];      /* checkpoint --parent, "" for none */
    int dirfd;                  /* the directory sent with the request (dir is in it), or -1 */
    char dirfd_at[32];          /* our path of it, /proc/self/fd/N ("" for none) */
    char dirfd_shown[PATH_MAX]; /* the client's name of it (passed_dir=), for messages; "" for none */
    char who[96];               /* "uid 1000 pid 42", "signal SIGRTMIN+4" */
    struct tcgpu_status before; /* at the request, for the toggle signal */
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    struct queued_op *q[OP_QUEUE_MAX + 1];  /* the next to run is here until popped */
    int head, n;
    int stop;
    int started;
    pthread_t thread;
    struct queued_op *running;  /* being run now, or NULL */
    uint64_t since_ns;          /* when it started */
    uint64_t done, total;       /* its progress */
} opq = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

struct progress_sink {
    int fd;                     /* connection, or -1 */
    uint64_t last_ns;
    int phase;                  /* of the last message sent, -1 before the first */
};

/*
 * "progress phase=drain done=N total=M": at most five a second, but always
 * when a phase starts or ends, so that a client shows every phase.
 */
static void send_progress(enum tcgpu_phase phase, uint64_t done, uint64_t total, void *arg)
{
    struct progress_sink *p = arg;
    struct ctl_buf *b;
    uint64_t t = now_ns();
    long n;

    pthread_mutex_lock(&opq.lock);
    opq.done = done;
    opq.total = total;
    pthread_mutex_unlock(&opq.lock);
    if (!p || p->fd < 0)
        return;
    if ((int)phase == p->phase && done < total && t - p->last_ns < PROGRESS_EVERY_NS)
        return;
    p->last_ns = t;
    p->phase = (int)phase;
    b = malloc(sizeof(*b));
    if (!b)
        return;
    ctl_buf_request(b, "progress");
    ctl_buf_put(b, "phase", tcgpu_phase_name(phase));
    ctl_buf_put_u64(b, "done", done);
    ctl_buf_put_u64(b, "total", total);
    n = ctl_buf_finish(b);
    /* Never wait for a slow reader: a progress message may be dropped. The
     * operation goes on if the client has gone away. */
    if (n > 0 && send(p->fd, b->data, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        /* dropped */
    }
    free(b);
}

/* Runs op for `who` (its log line: ops.h), progress to sink (may be NULL). */
static int run_op(enum tcgpu_op op, const char *dir, const char *parent, const char *who,
                  struct progress_sink *sink)
{
    struct tcgpu_op_caller by = { .who = who, .progress = sink ? send_progress : NULL, .arg = sink };

    switch (op) {
    case TCGPU_OP_CHECKPOINT:
        return parent ? tcgpu_op_checkpoint_parent(dir, parent, &by) : tcgpu_op_checkpoint(dir, &by);
    case TCGPU_OP_SUSPEND:
        return tcgpu_op_suspend(dir, &by);
    case TCGPU_OP_RESUME:
        return tcgpu_op_resume_from(dir, &by);
    default:
        return -EINVAL;
    }
}

static int send_reply(int fd, struct ctl_buf *b);
static void put_extras(struct ctl_buf *b);

/*
 * A suspend whose reply found its requester gone (gpuckpt interrupted,
 * killed or past its --timeout; tcgpud past its deadline): nobody knows the
 * job is suspended, and nobody would resume it. Resume it: a suspend must
 * never leave a job stopped unbeknownst to everyone (docs/cli.md).
 */
static void undo_unheard_suspend(const struct queued_op *o)
{
    char who[sizeof(o->who) + 16];
    int r;

    log_warn("suspend requested by %s: the requester left before its reply; resuming", o->who);
    snprintf(who, sizeof(who), "%s, undone", o->who);
    r = run_op(TCGPU_OP_RESUME, NULL, NULL, who, NULL);
    if (r < 0)
        log_err("the suspend requested by %s cannot be undone (%s): the process stays suspended; "
                "resume it with: gpuckpt resume %d", o->who, errmsg_get(), (int)getpid());
}

/* Runs one queued operation; replies on its connection and closes it. */
static void run_queued(struct queued_op *o, struct ctl_buf *b)
{
    struct progress_sink sink = { .fd = o->fd, .phase = -1 };
    struct tcgpu_status st;
    int r;

    /* always a sink: status reports the progress even with no client */
    r = run_op(o->op, o->dir[0] ? o->dir : NULL, o->parent[0] ? o->parent : NULL, o->who, &sink);
    if (o->fd < 0)
        return;
    if (r < 0) {
        char msg[PATH_MAX + 1024];

        /* the client's name of the directory it sent, not ours (/proc/self/fd/N) */
        snprintf(msg, sizeof(msg), "%s", errmsg_get());
        tcgpu_fdnames_show(msg, sizeof(msg), o->dirfd_at, o->dirfd_shown);
        ctl_buf_error(b, r, msg);
    } else
        ctl_buf_ok(b);
    memset(&st, 0, sizeof(st));
    if (tcgpu_op_status(&st) == 0)
        ctl_put_status(b, &st);
    put_extras(b);
    if (send_reply(o->fd, b) < 0 && o->op == TCGPU_OP_SUSPEND && r == 0)
        undo_unheard_suspend(o);
}

/* Discards what a client sent beyond its request, so that closing does not
 * reset the connection before it has read our reply. */
static void drain_request(int fd)
{
    char c;

    while (recv(fd, &c, 1, MSG_DONTWAIT | MSG_TRUNC) > 0)
        ;
}

static void finish_queued(struct queued_op *o)
{
    if (o->fd >= 0) {
        drain_request(o->fd);
        close(o->fd);
    }
    if (o->dirfd >= 0)
        close(o->dirfd);
    free(o);
}

static void *op_thread_main(void *arg)
{
    struct ctl_buf *b = malloc(sizeof(*b));

    (void)arg;
    pthread_mutex_lock(&opq.lock);
    for (;;) {
        while (!opq.n && !opq.stop)
            pthread_cond_wait(&opq.cv, &opq.lock);
        if (opq.stop)
            break;
        struct queued_op *o = opq.q[opq.head];
        opq.head = (opq.head + 1) % (OP_QUEUE_MAX + 1);
        opq.n--;
        opq.running = o;
        opq.since_ns = now_ns();
        opq.done = opq.total = 0;
        pthread_mutex_unlock(&opq.lock);
        errmsg_clear();
        if (b)
            run_queued(o, b);
        else
            log_err("control: out of memory; %s (%s) not run", tcgpu_op_name(o->op), o->who);
        pthread_mutex_lock(&opq.lock);
        opq.running = NULL;
        pthread_mutex_unlock(&opq.lock);
        finish_queued(o);           /* without a reply the client sees the connection close */
        pthread_mutex_lock(&opq.lock);
    }
    pthread_mutex_unlock(&opq.lock);
    free(b);
    return NULL;
}

/* What the toggle signal goes to: the opposite of the last operation queued
 * or running, else of the state (lock held). */
static enum tcgpu_op toggled_op(const struct tcgpu_status *st)
{
    const struct queued_op *last = opq.n ? opq.q[(opq.head + opq.n - 1) % (OP_QUEUE_MAX + 1)]
                                         : opq.running;

    if (last && (last->op == TCGPU_OP_SUSPEND || last->op == TCGPU_OP_RESUME))
        return last->op == TCGPU_OP_SUSPEND ? TCGPU_OP_RESUME : TCGPU_OP_SUSPEND;
    return st->state == TCGPU_STATE_SUSPENDED || st->state == TCGPU_STATE_SUSPENDING
               ? TCGPU_OP_RESUME : TCGPU_OP_SUSPEND;
}

/*
 * Queues o (taking it, and its connection) behind the running operation.
 * Returns 0, or -EBUSY with `why` set when OP_QUEUE_MAX already wait (o is
 * then the caller's still).
 */
static int enqueue(struct queued_op *o, char *why, size_t len)
{
    pthread_mutex_lock(&opq.lock);
    if (opq.n + (opq.running != NULL) > OP_QUEUE_MAX) {
        snprintf(why, len, "%d operations already wait behind the running %s; try again when "
                 "they are done (gpuckpt status %d shows it)", OP_QUEUE_MAX,
                 opq.running ? tcgpu_op_name(opq.running->op) : "one", (int)getpid());
        pthread_mutex_unlock(&opq.lock);
        return -EBUSY;
    }
    if (opq.running || opq.n)
        log_info("%s requested by %s: queued behind %s%s", tcgpu_op_name(o->op), o->who,
                 opq.running ? "the running " : "", opq.running ? tcgpu_op_name(opq.running->op)
                                                                : "other requests");
    opq.q[(opq.head + opq.n) % (OP_QUEUE_MAX + 1)] = o;
    opq.n++;
    pthread_cond_signal(&opq.cv);
    pthread_mutex_unlock(&opq.lock);
    return 0;
}

/* The running operation, for status: its name, seconds so far and progress. */
static void put_progress(struct ctl_buf *b)
{
    pthread_mutex_lock(&opq.lock);
    if (opq.running) {
        ctl_buf_put(b, "op_running", tcgpu_op_name(opq.running->op));
        ctl_buf_put_u64(b, "op_elapsed_ms", (now_ns() - opq.since_ns) / 1000000u);
        ctl_buf_put_u64(b, "progress_done", opq.done);
        ctl_buf_put_u64(b, "progress_total", opq.total);
    }
    ctl_buf_put_u64(b, "ops_queued", (uint64_t)opq.n);
    pthread_mutex_unlock(&opq.lock);
}

static int op_thread_start(void)
{
    int r;

    if (opq.started)
        return 0;
    opq.stop = 0;
    r = core_thread_start(&opq.thread, op_thread_main, "tcgpu-ctl-ops", 0);
    if (r == 0)
        opq.started = 1;
    return r;
}

/* After the running operation: stop the thread; what still waits is refused. */
static void op_thread_stop(void)
{
    struct ctl_buf *b = malloc(sizeof(*b));

    if (!opq.started) {
        free(b);
        return;
    }
    pthread_mutex_lock(&opq.lock);
    opq.stop = 1;
    pthread_cond_broadcast(&opq.cv);
    pthread_mutex_unlock(&opq.lock);
    pthread_join(opq.thread, NULL);
    opq.started = 0;
    while (opq.n) {
        struct queued_op *o = opq.q[opq.head];
        opq.head = (opq.head + 1) % (OP_QUEUE_MAX + 1);
        opq.n--;
        if (b && o->fd >= 0) {
            ctl_buf_error(b, -ECANCELED, "the control channel stopped before the operation ran");
            send_reply(o->fd, b);
        }
        finish_queued(o);
    }
    free(b);
}

/* ---------------------------------------------------------------------------
 * Signal trigger
 * ------------------------------------------------------------------------- */

static int checkpoint_dir_next(char *dir, size_t len)
{
    for (int tries = 0; tries < 10000; tries++) {
        int n = snprintf(dir, len, "%s/ckpt-%d-%u", ctl.ckpt_dir, (int)getpid(), ++ctl.ckpt_seq);
        struct stat st;
        if (n < 0 || (size_t)n >= len)
            return -ENAMETOOLONG;
        if (lstat(dir, &st) < 0 && errno == ENOENT)
            return 0;
    }
    return -EEXIST;
}

/* The signal's operation, queued like a client's. */
static void on_signal_action(void)
{
    struct queued_op *o = calloc(1, sizeof(*o));
    char sname[32], why[256];
    int r;

    if (!o) {
        log_err("signal: out of memory; the operation is not run");
        return;
    }
    o->fd = -1;
    o->dirfd = -1;
    tcgpu_op_status(&o->before);
    switch (ctl.action) {
    case TCGPU_SIGACT_SUSPEND:
        o->op = TCGPU_OP_SUSPEND;
        break;
    case TCGPU_SIGACT_RESUME:
        o->op = TCGPU_OP_RESUME;
        break;
    case TCGPU_SIGACT_CHECKPOINT:
        o->op = TCGPU_OP_CHECKPOINT;
        break;
    default:
        /* toggle relative to where the process is heading */
        pthread_mutex_lock(&opq.lock);
        o->op = toggled_op(&o->before);
        pthread_mutex_unlock(&opq.lock);
        break;
    }
    snprintf(o->who, sizeof(o->who), "signal %s", tcgpu_signal_name(ctl.sig, sname, sizeof(sname)));
    if (o->op == TCGPU_OP_CHECKPOINT) {
        r = checkpoint_dir_next(o->dir, sizeof(o->dir));
        if (r < 0) {
            log_err("%s: no free checkpoint directory name under %s: %s", o->who, ctl.ckpt_dir,
                    strerror(-r));
            free(o);
            return;
        }
        log_debug("%s: checkpoint to %s", o->who, o->dir);
    }
    if (enqueue(o, why, sizeof(why)) < 0) {
        log_err("%s: %s not run: %s", o->who, tcgpu_op_name(o->op), why);
        free(o);
    }
}

/* ---------------------------------------------------------------------------
 * Serving one connection
 * ------------------------------------------------------------------------- */

/* send_reply with a descriptor attached (SCM_RIGHTS). */
static int send_reply_fd(int fd, struct ctl_buf *b, int pass)
{
    long n = ctl_buf_finish(b);

    if (n < 0)
        return -EMSGSIZE;
    if (ctl_send_with_fd(fd, b->data, (size_t)n, pass) < 0) {
        int e = errno;
        log_debug("control: reply not delivered: %s", strerror(e));
        return -e;
    }
    return 0;
}

/* Returns 0, or -errno when the reply was not delivered (-EPIPE: the client is gone). */
static int send_reply(int fd, struct ctl_buf *b)
{
    long n = ctl_buf_finish(b);

    if (n < 0) {
        ctl_buf_error(b, -EMSGSIZE, "reply too large");
        n = ctl_buf_finish(b);
    }
    if (send(fd, b->data, (size_t)n, MSG_NOSIGNAL) < 0) {
        int e = errno;
        log_debug("control: reply not delivered: %s", strerror(e));
        return -e;
    }
    return 0;
}

/* service_threads=T,T,...: the threads a resume needs while the rest of
 * the process is held (the CRIU plugin lets these run; thread.h). */
static void put_service_threads(struct ctl_buf *b)
{
    pid_t tids[CORE_MAX_SERVICE_THREADS];
    char list[CORE_MAX_SERVICE_THREADS * 12] = "";
    int n = core_thread_tids(tids, CORE_MAX_SERVICE_THREADS);
    size_t at = 0;

    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%d", i ? "," : "", (int)tids[i]);
    ctl_buf_put(b, "service_threads", list);
}

static void put_extras(struct ctl_buf *b)
{
    char sname[32];

    ctl_buf_put_u64(b, "pid", (uint64_t)getpid());
    ctl_buf_put(b, "version", TCGPU_VERSION_STRING);
    ctl_buf_put(b, "trigger_signal", tcgpu_signal_name(ctl.sig, sname, sizeof(sname)));
    ctl_buf_put(b, "trigger_action", tcgpu_sigaction_name(ctl.action));
    ctl_buf_put_u64(b, "trigger_installed", (uint64_t)(ctl.sig > 0 && tcgpu_signal_trigger_in_place()));
    put_service_threads(b);
    put_progress(b);
    tcgpu_op_put_blockers(b);
}

/* A request being served: the connection it came on, who sent it, what it
 * says, the directory it came with (-1: none); `taken` once an operation
 * owns the connection and that directory (it replies, then closes both). */
struct request {
    int fd;
    const struct ucred *peer;
    const struct ctl_msg *msg;
    int taken;
    int dirfd;
    int reply_fd;               /* a descriptor to send with the reply (ipc_export), or -1 */
    int keep;                   /* ipc_export: keep the connection while the peer maps the memory */
};

/* One command of the protocol (docs/cli.md, "The protocol"): its word, the
 * function that answers it into the reply, and the operation it runs. */
struct command {
    const char *word;
    void (*answer)(const struct command *cmd, const struct request *rq, struct ctl_buf *reply);
    enum tcgpu_op op;           /* answer_operation: what to run */
    int needs_dir;              /* answer_operation: dir= is required */
};

static void answer_status(const struct command *cmd, const struct request *rq, struct ctl_buf *b)
{
    struct tcgpu_status st;
    int r;

    (void)cmd;
    (void)rq;
    memset(&st, 0, sizeof(st));
    r = tcgpu_op_status(&st);
    if (r < 0) {
        ctl_buf_error(b, r, errmsg_get());
        return;
    }
    ctl_buf_ok(b);
    ctl_put_status(b, &st);
    put_extras(b);
}

static const struct command cmd_status = { .word = "status", .answer = answer_status };

/*
 * A relative dir= names an entry of the directory the client sent with the
 * request (SCM_RIGHTS), "." the directory itself: a CRIU plugin outside our
 * mount namespace hands us its images directory that way
 * (docs/kubernetes.md). We reach it through /proc/self/fd, which resolves
 * whatever our root is.
 */
static int dir_in_passed(const struct request *rq, const char *name, char *out, size_t len,
                         struct ctl_buf *b)
{
    struct stat st;

    if (rq->dirfd < 0) {
        ctl_buf_error(b, -EINVAL, "dir must be an absolute path");
        return -EINVAL;
    }
    if (strchr(name, '/') || !strcmp(name, "..") || fstat(rq->dirfd, &st) < 0 ||
        !S_ISDIR(st.st_mode)) {
        ctl_buf_error(b, -EINVAL, "dir must name an entry of the directory sent with the request");
        return -EINVAL;
    }
    if (tcgpu_proc_fd_path(rq->dirfd, name, out, len) < 0) {
        ctl_buf_error(b, -ENAMETOOLONG, "dir name too long");
        return -ENAMETOOLONG;
    }
    return 0;
}

/* The image directory of an operation: NULL for host memory, else absolute
 * (buf holds it when it had to be made). Returns 0, or -EINVAL with the reply
 * already written. */
static int operation_dir(const struct command *cmd, const struct request *rq, const char **dir,
                         char *buf, size_t len, struct ctl_buf *b)
{
    const struct ctl_msg *req = rq->msg;
    const char *d = ctl_get(req, "dir");

    if (cmd->needs_dir && (!d || !*d)) {
        char msg[64];
        snprintf(msg, sizeof(msg), "%s needs dir=PATH", cmd->word);
        ctl_buf_error(b, -EINVAL, msg);
        return -EINVAL;
    }
    if (d && !*d)
        d = NULL;
    if (d && d[0] != '/') {
        if (dir_in_passed(rq, d, buf, len, b) < 0)
            return -EINVAL;
        d = buf;
    }
    *dir = d;
    return 0;
}

/* "uid 1000 pid 42"; a peer in a pid namespace that does not see it (we
 * run in a container, it outside) has no pid here: the kernel says 0. */
static const char *describe_peer(const struct ucred *peer, char *buf, size_t len)
{
    if (peer->pid > 0)
        snprintf(buf, len, "uid %u pid %d", (unsigned)peer->uid, (int)peer->pid);
    else
        snprintf(buf, len, "uid %u (a process outside this pid namespace)", (unsigned)peer->uid);
    return buf;
}

/* The directory sent with the request: our path of it, and the client's
 * name of it (passed_dir=, absolute; only ever shown, never reached). */
static void note_passed_dir(struct queued_op *o, const struct request *rq)
{
    const char *shown = ctl_get(rq->msg, "passed_dir");

    if (rq->dirfd < 0 || !shown || shown[0] != '/' || strlen(shown) >= sizeof(o->dirfd_shown) ||
        tcgpu_proc_fd_path(rq->dirfd, NULL, o->dirfd_at, sizeof(o->dirfd_at)) < 0)
        return;
    snprintf(o->dirfd_shown, sizeof(o->dirfd_shown), "%s", shown);
}

/* Queues the operation; the operation thread replies when it has run. */
static void answer_operation(const struct command *cmd, const struct request *rq, struct ctl_buf *b)
{
    const char *dir, *parent = ctl_get(rq->msg, "parent");
    struct queued_op *o;
    char why[256], dirbuf[PATH_MAX];

    if (operation_dir(cmd, rq, &dir, dirbuf, sizeof(dirbuf), b) < 0)
        return;
    if ((dir && strlen(dir) >= sizeof(o->dir)) || (parent && strlen(parent) >= sizeof(o->parent))) {
        ctl_buf_error(b, -ENAMETOOLONG, "directory name too long");
        return;
    }
    if (!(o = calloc(1, sizeof(*o)))) {
        ctl_buf_error(b, -ENOMEM, "out of memory");
        return;
    }
    o->fd = rq->fd;
    o->dirfd = rq->dirfd;
    o->op = cmd->op;
    note_passed_dir(o, rq);
    snprintf(o->dir, sizeof(o->dir), "%s", dir ? dir : "");
    snprintf(o->parent, sizeof(o->parent), "%s", parent ? parent : "");
    describe_peer(rq->peer, o->who, sizeof(o->who));
    tcgpu_op_status(&o->before);
    log_debug("%s requested by %s%s%s", tcgpu_op_name(o->op), o->who, dir ? ", dir " : "",
              dir ? dir : "");
    if (enqueue(o, why, sizeof(why)) < 0) {
        free(o);
        ctl_buf_error(b, -EBUSY, why);
        return;
    }
    ((struct request *)rq)->taken = 1;
}

static const struct command cmd_checkpoint = {
    .word = "checkpoint", .answer = answer_operation, .op = TCGPU_OP_CHECKPOINT, .needs_dir = 1,
};
static const struct command cmd_suspend = {
    .word = "suspend", .answer = answer_operation, .op = TCGPU_OP_SUSPEND,
};
static const struct command cmd_resume = {
    .word = "resume", .answer = answer_operation, .op = TCGPU_OP_RESUME,
};

/*
 * ipc_export id=N token=HEX: another process of ours (same uid, or root:
 * serve_connection checked) opens memory we exported with
 * cuIpcGetMemHandle. The reply carries the segment's descriptor
 * (SCM_RIGHTS), and the connection stays open while the peer maps it.
 */
static void answer_ipc_export(const struct command *cmd, const struct request *rq, struct ctl_buf *b)
{
    struct request *r = (struct request *)rq;
    int fd;

    (void)cmd;
    if (n_ipc_peers >= IPC_PEERS_MAX) {
        ctl_buf_error(b, -EMFILE, "too many processes map this process's memory");
        return;
    }
    fd = tcgpu_op_ipc_export(rq->msg, rq->peer->pid, b);
    if (fd >= 0) {
        r->reply_fd = fd;
        r->keep = 1;
    }
}

static const struct command cmd_ipc_export = { .word = "ipc_export", .answer = answer_ipc_export };

/* ipc_forget id=N token=HEX: a process that imported our memory through a
 * shareable handle let it go for good (a suspend's release does not say
 * this), so what our program freed may be freed now. */
static void answer_ipc_forget(const struct command *cmd, const struct request *rq, struct ctl_buf *b)
{
    (void)cmd;
    tcgpu_op_ipc_forget(rq->msg, rq->peer->pid, b);
}

static const struct command cmd_ipc_forget = { .word = "ipc_forget", .answer = answer_ipc_forget };

static const struct command *const commands[] = {
    &cmd_status, &cmd_checkpoint, &cmd_suspend, &cmd_resume, &cmd_ipc_export, &cmd_ipc_forget,
};

static void handle_request(const struct request *rq, struct ctl_buf *b)
{
    char msg[96];

    for (size_t i = 0; i < NELEM(commands); i++) {
        if (!strcmp(rq->msg->word, commands[i]->word)) {
            commands[i]->answer(commands[i], rq, b);
            return;
        }
    }
    snprintf(msg, sizeof(msg), "unknown command '%s'", rq->msg->word);
    ctl_buf_error(b, -EINVAL, msg);
}

/* Serves one connection: 1 when an operation took it (and will close it),
 * else 0 (the caller closes it). */
static int serve_connection(int fd, char *rbuf, struct ctl_buf *b, struct ctl_msg *req)
{
    char who[96];
    struct ucred peer;
    socklen_t plen = sizeof(peer);
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    struct timeval tv = { .tv_sec = REPLY_SEND_SEC };
    struct request rq;
    ssize_t n;
    int r, allowed, dirfd = -1;

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &plen) < 0) {
        log_err("control: cannot read peer credentials: %s", strerror(errno));
        return 0;
    }
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    /* Read the request first, even from a caller we refuse: closing a socket
     * with unread data resets the connection, and the caller would never
     * see why it was refused. */
    allowed = peer.uid == 0 || peer.uid == geteuid();
    r = poll(&pfd, 1, allowed ? REQUEST_WAIT_MS : 1000);
    if (r <= 0) {
        log_debug("control: %s sent no request", describe_peer(&peer, who, sizeof(who)));
        return 0;
    }
    n = ctl_recv_with_fd(fd, rbuf, CTL_MSG_MAX, MSG_DONTWAIT, &dirfd);   /* its directory, if any */
    if (n <= 0)
        goto out;
    if (!allowed) {
        char msg[128];
        log_info("refused control connection from %s", describe_peer(&peer, who, sizeof(who)));
        snprintf(msg, sizeof(msg), "uid %u may not control process %d (owned by uid %u)",
                 (unsigned)peer.uid, (int)getpid(), (unsigned)geteuid());
        ctl_buf_error(b, -EACCES, msg);
        send_reply(fd, b);
        goto out;
    }
    if (n > CTL_MSG_MAX) {
        ctl_buf_error(b, -EMSGSIZE, "request too large");
        send_reply(fd, b);
        goto out;
    }
    r = ctl_parse(rbuf, (size_t)n, req);
    if (r < 0) {
        log_debug("control: malformed request from %s", describe_peer(&peer, who, sizeof(who)));
        ctl_buf_error(b, r, "malformed request");
        send_reply(fd, b);
        goto out;
    }
    rq = (struct request){ .fd = fd, .peer = &peer, .msg = req, .dirfd = dirfd, .reply_fd = -1 };
    handle_request(&rq, b);
    if (rq.taken)
        return 1;
    if (rq.reply_fd >= 0) {
        r = send_reply_fd(fd, b, rq.reply_fd);
        close(rq.reply_fd);
        if (r == 0 && rq.keep) {
            ipc_peers[n_ipc_peers].fd = fd;
            ipc_peers[n_ipc_peers++].pid = peer.pid;
            r = 1;
        } else if (rq.keep) {
            tcgpu_op_ipc_closed(peer.pid);      /* it never got the memory */
            r = 0;
        }
        if (dirfd >= 0)
            close(dirfd);
        return r;
    }
    send_reply(fd, b);
out:
    if (dirfd >= 0)
        close(dirfd);
    return 0;
}

/* ---------------------------------------------------------------------------
 * The service thread
 * ------------------------------------------------------------------------- */

/* Something happened on the connection of the i-th process that maps our
 * memory: its end (EOF, an error) means it no longer does; anything it
 * sends is read and ignored. */
static void ipc_peer_event(int i)
{
    char buf[256];
    ssize_t n = recv(ipc_peers[i].fd, buf, sizeof(buf), MSG_DONTWAIT);

    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
        return;
    close(ipc_peers[i].fd);
    tcgpu_op_ipc_closed(ipc_peers[i].pid);
    ipc_peers[i] = ipc_peers[--n_ipc_peers];
}

/* Close every IPC peer's connection; `tell`: the memory is no longer mapped
 * there as far as we know (stop), else just forget them (fork child). */
static void ipc_peers_close(int tell)
{
    for (int i = 0; i < n_ipc_peers; i++) {
        close(ipc_peers[i].fd);
        if (tell)
            tcgpu_op_ipc_closed(ipc_peers[i].pid);
    }
    n_ipc_peers = 0;
}

static void *service_main(void *arg)
{
    char *rbuf = malloc(CTL_MSG_MAX);
    struct ctl_buf *b = malloc(sizeof(*b));
    struct ctl_msg *req = malloc(sizeof(*req));
    int sig_fd = tcgpu_signal_trigger_fd();

    (void)arg;
    if (!rbuf || !b || !req) {
        log_err("control: out of memory; control channel disabled");
        goto out;
    }
    for (;;) {
        struct pollfd p[3 + IPC_PEERS_MAX] = {
            { .fd = ctl.stop_fd, .events = POLLIN },
            { .fd = ctl.sig > 0 ? sig_fd : -1, .events = POLLIN },
            { .fd = ctl.listen_fd, .events = POLLIN },
        };
        int np = n_ipc_peers;

        for (int i = 0; i < np; i++)
            p[3 + i] = (struct pollfd){ .fd = ipc_peers[i].fd, .events = POLLIN };
        if (poll(p, 3 + (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            log_err("control: poll: %s; control channel stopped", strerror(errno));
            break;
        }
        if (p[0].revents)
            break;
        if (p[1].revents && tcgpu_signal_trigger_take() > 0)
            on_signal_action();
        for (int i = np - 1; i >= 0; i--)
            if (p[3 + i].revents)
                ipc_peer_event(i);
        if (p[2].revents) {
            int fd;
            while ((fd = accept4(ctl.listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
                __atomic_store_n(&ctl.conn_fd, fd, __ATOMIC_RELEASE);
                int taken = serve_connection(fd, rbuf, b, req);
                __atomic_store_n(&ctl.conn_fd, -1, __ATOMIC_RELEASE);
                if (!taken) {
                    drain_request(fd);
                    close(fd);
                }
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                errno != ECONNABORTED) {
                log_err("control: accept: %s", strerror(errno));
                if (errno == EMFILE || errno == ENFILE)
                    usleep(100000);     /* do not spin while out of descriptors */
            }
        }
    }
out:
    free(rbuf);
    free(b);
    free(req);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Start, stop, fork
 * ------------------------------------------------------------------------- */

/* A socket file already at our path: a live server (pid reuse across PID
 * namespaces sharing the dir) or a leftover of a process that died. */
static int path_in_use(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int live;

    if (fd < 0)
        return 0;
    memcpy(a.sun_path, path, strlen(path) + 1);
    live = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return live;
}

static int open_socket(void)
{
    const struct tcgpu_settings *set = settings_get();
    struct tcgpu_rundir_env env = { set->run_dir, set->xdg_runtime_dir };
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    char dir[PATH_MAX], err[PATH_MAX + 128];
    int fd, r;

    r = tcgpu_rundir_prepare(&env, dir, sizeof(dir), err, sizeof(err));
    if (r < 0) {
        log_err("control socket disabled: %s", err);
        return r;
    }
    if (r > 0)
        log_err("%s", err);     /* the preferred run dir was refused: where it is instead */
    r = tcgpu_rundir_socket_path(dir, getpid(), ctl.sock_path, sizeof(ctl.sock_path));
    if (r < 0) {
        ctl.sock_path[0] = '\0';
        log_err("control socket disabled: path %s/%d.sock is too long for a socket "
                "(set TCGPU_RUN_DIR to a shorter directory)", dir, (int)getpid());
        return r;
    }
    if (path_in_use(ctl.sock_path)) {
        log_err("control socket disabled: %s is in use by another process", ctl.sock_path);
        ctl.sock_path[0] = '\0';
        return -EADDRINUSE;
    }
    unlink(ctl.sock_path);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        r = -errno;
        goto err;
    }
    memcpy(a.sun_path, ctl.sock_path, strlen(ctl.sock_path) + 1);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(ctl.sock_path, 0600) < 0 ||
        listen(fd, 16) < 0) {
        r = -errno;
        unlink(ctl.sock_path);
        close(fd);
        goto err;
    }
    ctl.listen_fd = fd;
    return 0;
err:
    log_err("control socket %s: %s", ctl.sock_path, strerror(-r));
    ctl.sock_path[0] = '\0';
    return r;
}

static void read_trigger_config(void)
{
    const struct tcgpu_settings *set = settings_get();
    const char *s = set->signal, *a = set->signal_action, *d = set->checkpoint_dir;
    char sname[32];
    int r;

    ctl.sig = tcgpu_signal_parse(s);
    if (ctl.sig < 0) {
        log_err("TCGPU_SIGNAL=%s: unknown or unusable signal; signal trigger disabled", s);
        ctl.sig = 0;
        return;
    }
    ctl.action = tcgpu_sigaction_parse(a);
    if (ctl.action < 0) {
        log_err("TCGPU_SIGNAL_ACTION=%s: not one of toggle, suspend, resume, checkpoint; "
                "signal trigger disabled", a);
        ctl.action = TCGPU_SIGACT_TOGGLE;
        ctl.sig = 0;
        return;
    }
    ctl.ckpt_dir[0] = '\0';
    if (*d)
        snprintf(ctl.ckpt_dir, sizeof(ctl.ckpt_dir), "%s", d);
    if (ctl.sig > 0 && ctl.action == TCGPU_SIGACT_CHECKPOINT && *d && *d != '/') {
        log_err("TCGPU_CHECKPOINT_DIR=%s must be an absolute path; signal trigger disabled", d);
        ctl.sig = 0;
        return;
    }
    if (ctl.sig > 0 && ctl.action == TCGPU_SIGACT_CHECKPOINT && !ctl.ckpt_dir[0]) {
        log_err("TCGPU_SIGNAL_ACTION=checkpoint needs TCGPU_CHECKPOINT_DIR; signal trigger disabled");
        ctl.sig = 0;
        return;
    }
    if (ctl.sig == 0)
        return;
    r = tcgpu_signal_trigger_install(ctl.sig);
    if (r == -EBUSY)
        log_err("the program has its own handler for %s; signal trigger disabled "
                "(choose another with TCGPU_SIGNAL)", tcgpu_signal_name(ctl.sig, sname, sizeof(sname)));
    else if (r < 0)
        log_err("cannot install a handler for %s: %s; signal trigger disabled",
                tcgpu_signal_name(ctl.sig, sname, sizeof(sname)), strerror(-r));
    if (r < 0)
        ctl.sig = 0;
}

static void at_exit(void)
{
    /* Only the process that made the socket removes it: never a forked child. */
    if (ctl.owner == getpid() && ctl.sock_path[0])
        unlink(ctl.sock_path);
}

/* Undo what tcgpu_control_start() set up, with no service thread running:
 * remove the socket, close the descriptors, put the signal's previous
 * disposition back. */
static void close_channel(void)
{
    if (ctl.sock_path[0])
        unlink(ctl.sock_path);
    ctl.sock_path[0] = '\0';
    close_fd(&ctl.listen_fd);
    close_fd(&ctl.stop_fd);
    tcgpu_signal_trigger_uninstall();
    ctl.sig = 0;
}

static void atfork_child_hook(void)
{
    tcgpu_control_atfork_child();
}

int tcgpu_control_start(void)
{
    char sname[32];
    int r = 0, sock_r;

    pthread_mutex_lock(&ctl_lock);
    if (ctl.started && ctl.owner == getpid()) {
        r = ctl.listen_fd >= 0 ? 0 : -ENOTCONN;
        goto out;
    }
    if (!hooks_registered) {
        pthread_atfork(NULL, NULL, atfork_child_hook);
        atexit(at_exit);
        hooks_registered = 1;
    }
    ctl.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ctl.stop_fd < 0 || tcgpu_signal_trigger_fd() < 0) {
        r = -errno;
        log_err("control channel disabled: eventfd: %s", strerror(errno));
        close_fd(&ctl.stop_fd);
        goto out;
    }
    sock_r = open_socket();
    read_trigger_config();
    if (ctl.listen_fd < 0 && ctl.sig == 0) {
        close_fd(&ctl.stop_fd);
        r = sock_r;
        goto out;
    }

    if ((r = op_thread_start()) < 0) {
        log_err("control channel disabled: cannot start its operation thread: %s", strerror(-r));
        close_channel();
        goto out;
    }
    /* The service thread takes no signals: the program's handlers (and ours,
     * which only wakes this thread) run on the program's threads. */
    r = core_thread_start(&ctl.thread, service_main, "tcgpu-control", 256 * 1024);
    if (r < 0) {
        log_err("control channel disabled: cannot start its thread: %s", strerror(-r));
        op_thread_stop();
        close_channel();
        goto out;
    }
    ctl.started = 1;
    ctl.owner = getpid();
    log_debug("control: socket %s, signal %s -> %s", ctl.sock_path[0] ? ctl.sock_path : "(none)",
              tcgpu_signal_name(ctl.sig, sname, sizeof(sname)), tcgpu_sigaction_name(ctl.action));
    r = sock_r;
out:
    pthread_mutex_unlock(&ctl_lock);
    return r;
}

void tcgpu_control_stop(void)
{
    uint64_t one = 1;

    pthread_mutex_lock(&ctl_lock);
    if (!ctl.started || ctl.owner != getpid() || pthread_equal(pthread_self(), ctl.thread) ||
        (opq.started && pthread_equal(pthread_self(), opq.thread))) {
        pthread_mutex_unlock(&ctl_lock);
        return;
    }
    if (write(ctl.stop_fd, &one, sizeof(one)) < 0) {
        /* the counter cannot be full: one write per stop */
    }
    pthread_join(ctl.thread, NULL);
    op_thread_stop();
    ipc_peers_close(1);
    close_channel();
    ctl.started = 0;
    ctl.owner = 0;
    pthread_mutex_unlock(&ctl_lock);
}

void tcgpu_control_atfork_child(void)
{
    int conn;

    if (ctl.started && ctl.owner == getpid())
        return;                 /* already this process's own channel */
    /* Single-threaded now; a parent thread may have held the lock at fork. */
    pthread_mutex_init(&ctl_lock, NULL);
    close_fd(&ctl.listen_fd);   /* closes our copy; the parent's stays open */
    ipc_peers_close(0);         /* the peers map the parent's memory, not ours */
    close_fd(&ctl.stop_fd);
    conn = __atomic_exchange_n(&ctl.conn_fd, -1, __ATOMIC_ACQ_REL);
    if (conn >= 0)
        close(conn);
    /* The operation thread does not exist here: forget the parent's queue
     * (our copies of its connections are closed, the parent answers them). */
    pthread_mutex_init(&opq.lock, NULL);
    pthread_cond_init(&opq.cv, NULL);
    if (opq.running) {
        if (opq.running->fd >= 0)
            close(opq.running->fd);
        if (opq.running->dirfd >= 0)
            close(opq.running->dirfd);
    }
    opq.running = NULL;
    while (opq.n) {
        struct queued_op *o = opq.q[opq.head];
        opq.head = (opq.head + 1) % (OP_QUEUE_MAX + 1);
        opq.n--;
        if (o->fd >= 0)
            close(o->fd);
        if (o->dirfd >= 0)
            close(o->dirfd);
        free(o);
    }
    opq.started = 0;
    opq.stop = 0;
    ctl.sock_path[0] = '\0';    /* so at_exit and stop never unlink the parent's */
    ctl.started = 0;
    ctl.owner = 0;
    ctl.sig = 0;
    tcgpu_signal_trigger_atfork_child();
}

const char *tcgpu_control_socket_path(void)
{
    return ctl.sock_path;
}
