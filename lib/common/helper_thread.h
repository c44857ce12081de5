/*
 * helper_thread.h - short-lived threads of an operation that are gone, not
 * only finished, once joined.
 *
 * pthread_join returns when the kernel clears the thread's tid, early in its
 * exit; the task stays listed in /proc/self/task until the exit is over. An
 * operation that replies "done" in that window hands whoever acts next on
 * the process a thread that vanishes under it: CRIU seizes it, then fails
 * with "Can't dump threads" (a save refused for nothing; io_uring's workers
 * did that to the CRIU plugin's checkpoints, core/snapshot.c). With a bare
 * pthread_join, 3-4 of 300 joined threads were still listed (unit test
 * helper-thread). helper_thread_join waits until the task is gone too.
 *
 * A struct helper_thread belongs to its creator, who keeps it alive and in
 * place from helper_thread_start to helper_thread_join; one thread joins it.
 */
#ifndef TCGPU_COMMON_HELPER_THREAD_H
#define TCGPU_COMMON_HELPER_THREAD_H

#include <pthread.h>
#include <sys/types.h>

struct helper_thread {
    pthread_t th;
    pid_t tid;                  /* written by the thread before fn runs */
    void *(*fn)(void *);
    void *arg;
    int started;
};

/*
 * Runs fn(arg) on a new thread, with the caller's signal mask. 0, or
 * -errno (h->started stays 0: nothing to join, and the caller may run
 * fn itself).
 */
int helper_thread_start(struct helper_thread *h, void *(*fn)(void *), void *arg);

/*
 * Joins the thread and returns once its task is out of the process's thread
 * list (at most about a second; in practice microseconds). Does nothing for a
 * thread that was not started or is joined already. fn's result is dropped.
 */
void helper_thread_join(struct helper_thread *h);

#endif
