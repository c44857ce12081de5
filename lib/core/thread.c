/*
 * thread.c - tcgpu's own threads in the program's process (thread.h).
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "thread.h"

/* The service threads alive now, by tid. An entry is the process's only
 * when its pid is ours: a fork child has none of its parent's threads. */
static struct {
    pthread_mutex_t mu;
    struct { pid_t pid, tid; } t[CORE_MAX_SERVICE_THREADS];
} reg = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* What a new thread needs before it runs fn; on its creator's stack, which
 * waits for `ready`. */
struct start {
    void *(*fn)(void *);
    char name[16];
    sem_t ready;
};

/* A fork while another thread holds reg.mu must not leave the child's copy
 * locked: held across fork, released on both sides. */
static void reg_lock(void)
{
    pthread_mutex_lock(&reg.mu);
}

static void reg_unlock(void)
{
    pthread_mutex_unlock(&reg.mu);
}

static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void reg_atfork(void)
{
    pthread_atfork(reg_lock, reg_unlock, reg_unlock);
}

static void reg_add(pid_t tid)
{
    pid_t pid = getpid();

    reg_lock();
    for (int i = 0; i < CORE_MAX_SERVICE_THREADS; i++)
        if (reg.t[i].pid != pid) {
            reg.t[i].pid = pid;
            reg.t[i].tid = tid;
            break;
        }
    reg_unlock();
}

static void reg_remove(pid_t tid)
{
    pid_t pid = getpid();

    reg_lock();
    for (int i = 0; i < CORE_MAX_SERVICE_THREADS; i++)
        if (reg.t[i].pid == pid && reg.t[i].tid == tid)
            reg.t[i].pid = reg.t[i].tid = 0;
    reg_unlock();
}

/* Named and listed from inside, before its creator goes on: whoever lists
 * the process's threads never sees this one under the name it inherited,
 * nor missing from the list. */
static void *trampoline(void *arg)
{
    struct start *st = arg;
    void *(*fn)(void *) = st->fn;
    pid_t tid = gettid();
    void *ret;

    pthread_setname_np(pthread_self(), st->name);
    reg_add(tid);
    sem_post(&st->ready);       /* st is gone after this */
    ret = fn(NULL);
    reg_remove(tid);
    return ret;
}

int core_thread_start(pthread_t *th, void *(*fn)(void *), const char *name, size_t stack_size)
{
    struct start st = { .fn = fn };
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t id;
    int rc;

    pthread_once(&reg_once, reg_atfork);
    snprintf(st.name, sizeof(st.name), "%s", name);
    if ((rc = pthread_attr_init(&attr)))
        return -rc;
    if (!th)
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack_size)
        pthread_attr_setstacksize(&attr, stack_size);
    sem_init(&st.ready, 0, 0);
    /* the new thread inherits the mask it is created under */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&id, &attr, trampoline, &st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc == 0)
        while (sem_wait(&st.ready) < 0 && errno == EINTR)
            ;
    sem_destroy(&st.ready);
    if (rc)
        return -rc;
    if (th)
        *th = id;
    return 0;
}

int core_thread_tids(pid_t *tids, int max)
{
    pid_t pid = getpid();
    int n = 0;

    reg_lock();
    for (int i = 0; i < CORE_MAX_SERVICE_THREADS && n < max; i++)
        if (reg.t[i].pid == pid)
            tids[n++] = reg.t[i].tid;
    reg_unlock();
    return n;
}
