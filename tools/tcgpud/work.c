/*
 * work.c - tcgpud's workers: suspend, resume and status polls over
 * the jobs' control sockets (lib/ctl/client.h), one detached thread each,
 * results queued for the event loop. See tcgpud.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "ctl/client.h"
#include "ctl/proto.h"
#include "tcgpud.h"

#define POLL_TIMEOUT_MS 1000      /* a job busy with an operation answers status after it */

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
    r = ctl_connect(w->pid, &c, w->msg, sizeof(w->msg));
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
        for (size_t i = 0; i < w->n; i++) {
            struct work one = { .pid = w->items[i].pid };
            control_call(&one, "status", NULL, POLL_TIMEOUT_MS, &w->items[i].st);
            w->items[i].err = one.err;
        }
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
