/*
 * events.c - the program's event callback (tcgpu.h, events.h).
 */
#include <pthread.h>

#include "events.h"

static pthread_mutex_t callback_mutex = PTHREAD_MUTEX_INITIALIZER;
static tcgpu_event_fn event_fn;
static void *event_arg;

TCGPU_API int tcgpu_set_event_callback(tcgpu_event_fn fn, void *arg)
{
    pthread_mutex_lock(&callback_mutex);
    event_fn = fn;
    event_arg = arg;
    pthread_mutex_unlock(&callback_mutex);
    return 0;
}

void tcgpu_emit_event(enum tcgpu_event ev, enum tcgpu_op op, int result)
{
    tcgpu_event_fn fn;
    void *arg;

    pthread_mutex_lock(&callback_mutex);
    fn = event_fn;
    arg = event_arg;
    pthread_mutex_unlock(&callback_mutex);
    if (fn)
        fn(ev, op, result, arg);
}
