/*
 * thread.h - how tcgpu starts the threads of its own in the program's
 * process (the control service, its operation thread, the operation worker,
 * the device waiter): named, and with every signal blocked, so that the
 * program's handlers (and the trigger's) run on the program's threads.
 */
#ifndef TCGPU_CORE_THREAD_H
#define TCGPU_CORE_THREAD_H

#include <pthread.h>
#include <stddef.h>

/*
 * Starts fn(NULL) on a new thread named name (at most 15 characters).
 * th NULL: detached; else joinable, its id stored in *th. stack_size 0: the
 * default. The caller's signal mask is left as it was. Thread-safe.
 * Returns 0 or -errno (pthread_create's).
 */
int core_thread_start(pthread_t *th, void *(*fn)(void *), const char *name, size_t stack_size);

#endif
