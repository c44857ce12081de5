/*
 * helper_thread.c - threads that are gone once joined (helper_thread.h).
 */
#include <errno.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "helper_thread.h"

/* A second of waiting for an exit to finish: far beyond any real one. */
#define GONE_POLLS 20000
#define GONE_POLL_NS 50000

static void *trampoline(void *arg)
{
    struct helper_thread *h = arg;

    __atomic_store_n(&h->tid, gettid(), __ATOMIC_RELEASE);
    return h->fn(h->arg);
}

int helper_thread_start(struct helper_thread *h, void *(*fn)(void *), void *arg)
{
    int rc;

    h->fn = fn;
    h->arg = arg;
    h->tid = 0;
    h->started = 0;
    if ((rc = pthread_create(&h->th, NULL, trampoline, h)) != 0)
        return -rc;
    h->started = 1;
    return 0;
}

/* Still in our thread group? tgkill's signal 0 checks without sending. */
static int task_listed(pid_t tid)
{
    return syscall(SYS_tgkill, getpid(), tid, 0) == 0 || errno != ESRCH;
}

void helper_thread_join(struct helper_thread *h)
{
    struct timespec nap = { 0, GONE_POLL_NS };
    pid_t tid;

    if (!h->started)
        return;
    pthread_join(h->th, NULL);
    h->started = 0;
    tid = __atomic_load_n(&h->tid, __ATOMIC_ACQUIRE);
    if (tid <= 0)
        return;
    /* The first polls only yield: the exit is usually a few microseconds
     * from its end. */
    for (int i = 0; i < GONE_POLLS && task_listed(tid); i++) {
        if (i < 64)
            sched_yield();
        else
            nanosleep(&nap, NULL);
    }
}
