/*
 * api.c - the public C API (tcgpu.h) over the operations (ops.h) and the
 * registry's hints. The names are in common/names.c, the event callback in
 * events.c, the version in common/version.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/errmsg.h"
#include "ops.h"
#include "registry.h"
#include "tcgpu.h"

static __thread char last_error[512];

/* Keeps the operation's message for tcgpu_last_error() on this thread:
 * the failure's, or "" after a success (tcgpu.h). */
static int finish(int rc)
{
    snprintf(last_error, sizeof(last_error), "%s", rc ? errmsg_get() : "");
    return rc;
}

TCGPU_API int tcgpu_checkpoint(const char *dir)
{
    return finish(tcgpu_op_checkpoint(dir, NULL));
}

TCGPU_API int tcgpu_suspend(const char *dir)
{
    return finish(tcgpu_op_suspend(dir, NULL));
}

TCGPU_API int tcgpu_resume(void)
{
    return finish(tcgpu_op_resume(NULL));
}

TCGPU_API int tcgpu_get_status(struct tcgpu_status *st, size_t size)
{
    struct tcgpu_status now;
    int rc;

    if (!st || size < TCGPU_STATUS_SIZE_0_1)
        return -EINVAL;
    if ((rc = tcgpu_op_status(&now)) != 0)
        return rc;
    if (size > sizeof(now)) {       /* a newer header: fields we do not know */
        memset((char *)st + sizeof(now), 0, size - sizeof(now));
        size = sizeof(now);
    }
    memcpy(st, &now, size);
    return 0;
}

TCGPU_API int tcgpu_status(struct tcgpu_status *st)
{
    return tcgpu_get_status(st, TCGPU_STATUS_SIZE_0_1);
}

TCGPU_API const char *tcgpu_last_error(void)
{
    return last_error;
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
