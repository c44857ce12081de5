/*
 * api.c - the public C API (tcgpu.h) over the operations (ops.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "registry.h"
#include "tcgpu.h"

static pthread_mutex_t callback_mutex = PTHREAD_MUTEX_INITIALIZER;
static tcgpu_event_fn event_fn;
static void *event_arg;

static __thread char last_error[512];

/* Keeps the operation's message for tcgpu_last_error() on this thread. */
static int finish(int rc)
{
    snprintf(last_error, sizeof(last_error), "%s", rc ? tcgpu_op_error() : "");
    return rc;
}

TCGPU_API int tcgpu_checkpoint(const char *dir)
{
    return finish(tcgpu_op_checkpoint(dir, NULL, NULL));
}

TCGPU_API int tcgpu_suspend(const char *dir)
{
    return finish(tcgpu_op_suspend(dir, NULL, NULL));
}

TCGPU_API int tcgpu_resume(void)
{
    return finish(tcgpu_op_resume(NULL, NULL));
}

TCGPU_API int tcgpu_status(struct tcgpu_status *st)
{
    return tcgpu_op_status(st);
}

TCGPU_API const char *tcgpu_last_error(void)
{
    return last_error;
}

TCGPU_API const char *tcgpu_state_name(enum tcgpu_state s)
{
    switch (s) {
    case TCGPU_STATE_RUNNING:       return "running";
    case TCGPU_STATE_CHECKPOINTING: return "checkpointing";
    case TCGPU_STATE_SUSPENDING:    return "suspending";
    case TCGPU_STATE_SUSPENDED:     return "suspended";
    case TCGPU_STATE_RESUMING:      return "resuming";
    }
    return "unknown";
}

TCGPU_API const char *tcgpu_op_name(enum tcgpu_op op)
{
    switch (op) {
    case TCGPU_OP_NONE:       return "none";
    case TCGPU_OP_CHECKPOINT: return "checkpoint";
    case TCGPU_OP_SUSPEND:    return "suspend";
    case TCGPU_OP_RESUME:     return "resume";
    }
    return "unknown";
}

TCGPU_API const char *tcgpu_strerror(int err)
{
    switch (err) {
    case 0:           return "success";
    case -EEXIST:     return "the image directory exists";
    case -ENOTSUP:    return "the process holds device state that cannot be checkpointed";
    case -ETIMEDOUT:  return "a CUDA call did not return within the gate timeout";
    case -EBUSY:      return "another operation holds the process";
    case -EALREADY:   return "the process is already in that state";
    case -ENOMEM:     return "not enough memory (device or host)";
    case -EBADMSG:    return "the image is corrupt or does not match the process";
    case -ENOSPC:     return "no space left for the image";
    case -ENODEV:     return "the CUDA driver is not available";
    case -EINVAL:     return "invalid argument";
    case -EIO:        return "the driver or the disk reported an error";
    default:          return err < 0 ? strerror(-err) : "unknown error";
    }
}

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

static int valid_range(uint64_t ptr, size_t len)
{
    return ptr != 0 && len != 0 && ptr + len > ptr;
}

TCGPU_API int tcgpu_hint_skip(uint64_t ptr, size_t len, int skip)
{
    int rc;

    if (!valid_range(ptr, len))
        return -EINVAL;
    reg_lock();
    rc = reg_hint_skip(ptr, len, skip);
    reg_unlock();
    return rc;
}

TCGPU_API int tcgpu_hint_dtype(uint64_t ptr, size_t len, enum tcgpu_dtype dtype)
{
    int rc;

    if (!valid_range(ptr, len) || (unsigned)dtype >= TCGPU_DTYPE_COUNT)
        return -EINVAL;
    reg_lock();
    rc = reg_hint_dtype(ptr, len, dtype);
    reg_unlock();
    return rc;
}
