/*
 * api.c - the public C API (tcgpu.h) over the operations (ops.h) and the
 * registry's hints. The names are in common/names.c, the event callback in
 * events.c, the version in common/version.c.
 */
#include <errno.h>
#include <string.h>

#include "common/errmsg.h"
#include "ops.h"
#include "registry.h"
#include "tcgpu.h"

/*
 * What tcgpu_last_error() shows: while an operation of this file runs, it is
 * the calling thread's record (errmsg.h), so that the threads the operation
 * crosses leave its result and message there; the other functions never
 * touch it (tcgpu.h).
 */
static __thread struct errmsg_record last_op;

static struct errmsg_record *op_begin(void)
{
    return errmsg_carry(&last_op);
}

/* A success leaves "" (tcgpu.h). */
static int op_end(struct errmsg_record *before, int rc)
{
    errmsg_result(rc);
    errmsg_carry(before);
    return rc;
}

TCGPU_API int tcgpu_checkpoint(const char *dir)
{
    struct errmsg_record *before = op_begin();

    return op_end(before, tcgpu_op_checkpoint(dir, NULL));
}

TCGPU_API int tcgpu_suspend(const char *dir)
{
    struct errmsg_record *before = op_begin();

    return op_end(before, tcgpu_op_suspend(dir, NULL));
}

TCGPU_API int tcgpu_resume(void)
{
    struct errmsg_record *before = op_begin();

    return op_end(before, tcgpu_op_resume(NULL));
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
    return last_op.text;
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
