/*
 * work.c - tcgpud's workers: suspend, resume and status polls over
 * the jobs' control sockets (lib/ctl/client.h), one detached thread each,
 * results queued for the event loop. See tcgpud.h.
 *
 * A status round asks every job at once over non-blocking sockets and ends
 * at one deadline, whatever the jobs do: a job whose socket never answers
 * (busy with an operation, stopped, or hostile) costs the round nothing but
 * its own answer, and cannot hold up the decisions that wait for the round.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "ctl/client.h"
#include "ctl/proto.h"
#include "tcgpud.h"

#define POLL_TIMEOUT_MS 1000      /* a job busy with an operation answers status after it */
#define RELEARN_TIMEOUT_MS 30000  /* a restarted tcgpud waits this long for jobs to settle */
#define SETTLE_EVERY_MS 100       /* a job in between is asked again this often */
#define STATUS_WINDOW 256         /* sockets open at once in a round */

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct work *queue_head, *queue_tail;
static int wake_fd = -1;

int tcgpud_work_init(void)
{
    wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    return wake_fd < 0 ? -errno : 0;
}

int tcgpud_work_fd(void)
{
    return wake_fd;
}

static void finish(struct work *w)
{
    uint64_t one = 1;

    pthread_mutex_lock(&queue_lock);
    w->next = NULL;
    if (queue_tail)
        queue_tail->next = w;
    else
        queue_head = w;
    queue_tail = w;
    pthread_mutex_unlock(&queue_lock);
    if (write(wake_fd, &one, sizeof(one)) < 0) {
        /* the counter cannot overflow in practice; the loop also drains on its tick */
    }
}

struct work *tcgpud_work_take(void)
{
    uint64_t v;
    struct work *w;

    if (read(wake_fd, &v, sizeof(v)) < 0) {
        /* EAGAIN: nothing signalled, but the queue is checked anyway */
    }
    pthread_mutex_lock(&queue_lock);
    w = queue_head;
    queue_head = queue_tail = NULL;
    pthread_mutex_unlock(&queue_lock);
    return w;
}

void tcgpud_work_free(struct work *w)
{
    if (w) {
        free(w->items);
        free(w);
    }
}

/* One request to pid's control socket; fills err/msg/st. */
static void control_call(struct work *w, const char *word, const char *dir, int timeout_ms,
                         struct tcgpu_status *st)
{
    struct ctl_conn c;
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    long len;
    int r;

    w->from_server = 0;
    if (!req || !rep) {
        w->err = -ENOMEM;
        snprintf(w->msg, sizeof(w->msg), "out of memory");
        goto out;
    }
    r = ctl_connect(w->pid, getenv("TCGPU_RUN_DIR"), &c, w->msg, sizeof(w->msg));
    if (r < 0) {
        w->err = r;
        goto out;
    }
    ctl_buf_request(req, word);
    if (dir && *dir)
        ctl_buf_put(req, "dir", dir);
    len = ctl_buf_finish(req);
    r = len < 0 ? (int)len : ctl_call(&c, req->data, (size_t)len, rep, timeout_ms, NULL, NULL);
    ctl_close(&c);
    if (r < 0) {
        w->err = r;
        snprintf(w->msg, sizeof(w->msg), "%s of process %d: %s", word, (int)w->pid,
                 r == -ETIMEDOUT ? "no reply in time" : strerror(-r));
        goto out;
    }
    w->err = rep->err;
    w->from_server = 1;
    if (rep->err)
        snprintf(w->msg, sizeof(w->msg), "%s: %s", rep->err_name, rep->err_text);
    memset(st, 0, sizeof(*st));
    if (ctl_get_status(rep, st) < 0 && !rep->err) {
        w->err = -EPROTO;
        snprintf(w->msg, sizeof(w->msg), "%s of process %d: malformed status in the reply", word,
                 (int)w->pid);
    }
out:
    free(req);
    free(rep);
}

/* ---------------------------------------------------------------------------
 * Status rounds
 * ------------------------------------------------------------------------- */

/* One job's part in a round. */
struct asking {
    struct poll_item *it;
    int fd;                       /* -1: not asked now */
    int done;
    uint64_t again_ms;            /* settle: ask again at this time */
};

static int in_between(enum tcgpu_state s)
{
    return s == TCGPU_STATE_SUSPENDING || s == TCGPU_STATE_RESUMING ||
           s == TCGPU_STATE_CHECKPOINTING;
}

/* Connect and send "status" without waiting; on failure the item is done. */
static void ask_status(struct asking *a)
{
    static const char req[] = "status";
    struct ctl_conn c;
    char err[512];
    int r = ctl_connect_flags(a->it->pid, getenv("TCGPU_RUN_DIR"), &c, CTL_CONNECT_NONBLOCK, err,
                             sizeof(err));

    if (r == 0 && send(c.fd, req, sizeof(req) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        r = errno == EAGAIN ? -ETIMEDOUT : -errno;
        ctl_close(&c);
    }
    if (r < 0) {
        a->it->err = r == -EAGAIN ? -ETIMEDOUT : r;
        a->done = 1;
        return;
    }
    a->fd = c.fd;
}

/* The reply waiting on a->fd; done unless settle wants the job asked again. */
static void take_status(struct asking *a, char *buf, struct ctl_msg *m, int settle)
{
    ssize_t n = recv(a->fd, buf, CTL_MSG_MAX, MSG_DONTWAIT | MSG_TRUNC);

    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    close(a->fd);
    a->fd = -1;
    a->done = 1;
    memset(&a->it->st, 0, sizeof(a->it->st));
    if (n <= 0)
        a->it->err = n == 0 ? -ECONNRESET : -errno;
    else if (n > CTL_MSG_MAX || ctl_parse(buf, (size_t)n, m) < 0)
        a->it->err = -EPROTO;
    else if (m->err)
        a->it->err = m->err;
    else
        a->it->err = ctl_get_status(m, &a->it->st) < 0 ? -EPROTO : 0;
    if (settle && a->it->err == 0 && in_between(a->it->st.state)) {
        a->done = 0;              /* in between: ask again shortly */
        a->again_ms = now_ms() + SETTLE_EVERY_MS;
    }
}

/* Open sockets for up to STATUS_WINDOW items whose turn it is. */
static void ask_due(struct asking *as, size_t n, uint64_t now)
{
    size_t open = 0;

    for (size_t i = 0; i < n; i++)
        open += as[i].fd >= 0;
    for (size_t i = 0; i < n && open < STATUS_WINDOW; i++) {
        if (as[i].done || as[i].fd >= 0 || as[i].again_ms > now)
            continue;
        ask_status(&as[i]);
        open += as[i].fd >= 0;
    }
}

/*
 * Ask every item's job for its status, all at once, until each has
 * answered or the deadline passes (those get -ETIMEDOUT). With settle, a job
 * in the middle of an operation is asked again until it is not.
 */
static void status_round(struct poll_item *items, size_t n, int timeout_ms, int settle)
{
    struct asking *as = calloc(n ? n : 1, sizeof(*as));
    struct pollfd *p = calloc(n ? n : 1, sizeof(*p));
    size_t *idx = calloc(n ? n : 1, sizeof(*idx));
    char *buf = malloc(CTL_MSG_MAX);
    struct ctl_msg *m = malloc(sizeof(*m));
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;

    if (!as || !p || !idx || !buf || !m) {
        for (size_t i = 0; i < n; i++)
            items[i].err = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        as[i] = (struct asking){ .it = &items[i], .fd = -1 };
    for (;;) {
        uint64_t now = now_ms();
        size_t np = 0, left = 0;
        int wait = (int)(deadline > now ? deadline - now : 0);

        ask_due(as, n, now);
        for (size_t i = 0; i < n; i++) {
            left += !as[i].done;
            if (as[i].fd >= 0) {
                p[np] = (struct pollfd){ .fd = as[i].fd, .events = POLLIN };
                idx[np++] = i;
            } else if (!as[i].done && as[i].again_ms > now && (int)(as[i].again_ms - now) < wait) {
                wait = (int)(as[i].again_ms - now);
            }
        }
        if (!left || now >= deadline)
            break;
        if (poll(p, np, wait) < 0 && errno != EINTR)
            break;
        for (size_t k = 0; k < np; k++)
            if (p[k].revents)
                take_status(&as[idx[k]], buf, m, settle);
    }
    for (size_t i = 0; i < n; i++) {
        if (as[i].fd >= 0)
            close(as[i].fd);
        if (!as[i].done)
            items[i].err = -ETIMEDOUT;
    }
out:
    free(as);
    free(p);
    free(idx);
    free(buf);
    free(m);
}

static void *worker_main(void *arg)
{
    struct work *w = arg;
    uint64_t t0 = now_ns();

    switch (w->kind) {
    case WORK_SUSPEND:
        control_call(w, "suspend", w->dir, w->timeout_ms, &w->st);
        break;
    case WORK_RESUME:
        control_call(w, "resume", NULL, w->timeout_ms, &w->st);
        break;
    case WORK_POLL:
        status_round(w->items, w->n, POLL_TIMEOUT_MS, 0);
        break;
    case WORK_RELEARN:
        status_round(w->items, w->n, RELEARN_TIMEOUT_MS, 1);
        break;
    }
    w->ns = now_ns() - t0;
    finish(w);
    return NULL;
}

int tcgpud_work_start(struct work *w)
{
    pthread_attr_t a;
    pthread_t t;
    int r;

    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    r = pthread_create(&t, &a, worker_main, w);
    pthread_attr_destroy(&a);
    return -r;
}
