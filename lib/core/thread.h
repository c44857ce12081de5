/*
 * thread.h - how tcgpu starts the threads of its own in the program's
 * process (the control service, its operation thread, the operation worker,
 * the device waiter, the host memory monitor, the compute reporter): named,
 * with every signal blocked, so that the program's handlers (and the
 * trigger's) run on the program's threads, and listed, so that whoever
 * holds the process stopped (the CRIU plugin, under ptrace) can let exactly
 * these run for a resume.
 *
 * A service thread lives as long as the process, or until its owner joins
 * it: one that could end by itself at any moment must not be started here
 * (the CRIU plugin would let it go and then find it gone).
 */
#ifndef TCGPU_CORE_THREAD_H
#define TCGPU_CORE_THREAD_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#define CORE_MAX_SERVICE_THREADS 16

/*
 * Starts fn(NULL) on a new thread named name (at most 15 characters; longer
 * is cut). th NULL: detached; else joinable, its id stored in *th.
 * stack_size 0: the default. Returns once the thread has named itself and
 * joined the list (core_thread_tids); it leaves the list when fn returns.
 * The caller's signal mask is left as it was. Thread-safe. Returns 0 or
 * -errno (pthread_create's).
 */
int core_thread_start(pthread_t *th, void *(*fn)(void *), const char *name, size_t stack_size);

/*
 * The tids (gettid(): as this process's pid namespace numbers them) of the
 * service threads of this process alive now, at most max of them, into
 * tids. A fork child lists only the ones it started itself. Thread-safe.
 * Returns how many.
 */
int core_thread_tids(pid_t *tids, int max);

#endif
