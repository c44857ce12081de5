/*
 * thread.c - tcgpu's own threads in the program's process (thread.h).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include "thread.h"

int core_thread_start(pthread_t *th, void *(*fn)(void *), const char *name, size_t stack_size)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t id;
    int rc;

    if ((rc = pthread_attr_init(&attr)))
        return -rc;
    if (!th)
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack_size)
        pthread_attr_setstacksize(&attr, stack_size);
    /* the new thread inherits the mask it is created under */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&id, &attr, fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc)
        return -rc;
    pthread_setname_np(id, name);
    if (th)
        *th = id;
    return 0;
}
