/*
 * pool.c - the pipe's chunk workers: a FIFO of tasks under the pipe's mutex.
 * Workers only encode and decode (they never call the driver); the
 * operation's thread submits tasks and polls or waits for them.
 */
#include <pthread.h>

#include "driver/gate.h"
#include "internal.h"

/* --- pool ------------------------------------------------------------------ */

void *pool_worker_main(void *arg)
{
    struct worker *w = arg;
    struct pipe *p = w->p;

    /* Workers never call the driver, but the gate must not wait for them. */
    tcgpu_gate_set_exempt(true);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct task *t;

        while (!p->head && !p->quit)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->head)
            break;
        t = p->head;
        p->head = t->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        t->fn(p, w, t);
        pthread_mutex_lock(&p->mu);
        t->done = 1;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void pool_submit(struct pipe *p, struct task *t)
{
    pthread_mutex_lock(&p->mu);
    t->done = 0;
    t->rc = 0;
    t->next = NULL;
    if (p->tail)
        p->tail->next = t;
    else
        p->head = t;
    p->tail = t;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

int pool_task_done(struct pipe *p, struct task *t)
{
    int d;

    pthread_mutex_lock(&p->mu);
    d = t->done;
    pthread_mutex_unlock(&p->mu);
    return d;
}

void pool_task_wait(struct pipe *p, struct task *t)
{
    pthread_mutex_lock(&p->mu);
    while (!t->done)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
