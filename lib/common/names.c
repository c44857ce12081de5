/*
 * names.c - the names of states, operations and error codes (names.h), and
 * tcgpu.h's tcgpu_state_name(), tcgpu_op_name(), tcgpu_strerror().
 */
#include <errno.h>
#include <string.h>

#include "names.h"

#include "macros.h"

static const char *const state_names[] = {
    [TCGPU_STATE_RUNNING] = "running",
    [TCGPU_STATE_CHECKPOINTING] = "checkpointing",
    [TCGPU_STATE_SUSPENDING] = "suspending",
    [TCGPU_STATE_SUSPENDED] = "suspended",
    [TCGPU_STATE_RESUMING] = "resuming",
};

static const char *const op_names[] = {
    [TCGPU_OP_NONE] = "none",
    [TCGPU_OP_CHECKPOINT] = "checkpoint",
    [TCGPU_OP_SUSPEND] = "suspend",
    [TCGPU_OP_RESUME] = "resume",
};

static const char *const phase_names[] = {
    [TCGPU_PHASE_QUIESCE] = "quiesce",
    [TCGPU_PHASE_DRAIN] = "drain",
    [TCGPU_PHASE_RELEASE] = "release",
    [TCGPU_PHASE_WRITE] = "write",
    [TCGPU_PHASE_VERIFY] = "verify",
    [TCGPU_PHASE_REFILL] = "refill",
};

/* What each code means for a tcgpu operation (tcgpu.h lists who returns which). */
static const struct {
    int err;
    const char *text;
} error_texts[] = {
    { 0, "success" },
    { -EEXIST, "the image directory exists" },
    { -ENOTSUP, "the process holds device state that cannot be checkpointed" },
    { -ETIMEDOUT, "a CUDA call did not return within the gate timeout" },
    { -EBUSY, "the process is suspended: resume it first" },
    { -EALREADY, "the process is already in that state" },
    { -ENOMEM, "not enough memory (device or host)" },
    { -EBADMSG, "the image is corrupt or does not match the process" },
    { -ENOSPC, "no space left for the image" },
    { -ENODEV, "the CUDA driver is not available" },
    { -EINVAL, "invalid argument" },
    { -EIO, "the driver or the disk reported an error" },
};

static const char *name_of(const char *const *names, size_t n, unsigned i)
{
    return i < n && names[i] ? names[i] : "unknown";
}

static int index_of(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; name && i < n; i++)
        if (names[i] && !strcmp(names[i], name))
            return (int)i;
    return -1;
}

const char *tcgpu_phase_name(enum tcgpu_phase p)
{
    return name_of(phase_names, NELEM(phase_names), (unsigned)p);
}

TCGPU_API const char *tcgpu_state_name(enum tcgpu_state s)
{
    return name_of(state_names, NELEM(state_names), (unsigned)s);
}

TCGPU_API const char *tcgpu_op_name(enum tcgpu_op op)
{
    return name_of(op_names, NELEM(op_names), (unsigned)op);
}

int tcgpu_state_parse(const char *name)
{
    return index_of(state_names, NELEM(state_names), name);
}

int tcgpu_op_parse(const char *name)
{
    return index_of(op_names, NELEM(op_names), name);
}

TCGPU_API const char *tcgpu_strerror(int err)
{
    for (size_t i = 0; i < NELEM(error_texts); i++)
        if (error_texts[i].err == err)
            return error_texts[i].text;
    return err < 0 ? strerror(-err) : "unknown error";
}

const char *errno_name(int err)
{
    const char *n;

    if (err < 0)
        err = -err;
    if (err == EOPNOTSUPP)
        return "ENOTSUP";
    n = err > 0 ? strerrorname_np(err) : NULL;
    return n ? n : "E?";
}

int errno_from_name(const char *name)
{
    if (!name || name[0] != 'E')
        return 0;
    if (!strcmp(name, "ENOTSUP") || !strcmp(name, "EOPNOTSUPP"))
        return ENOTSUP;
    for (int e = 1; e < 4096; e++) {
        const char *n = strerrorname_np(e);
        if (n && !strcmp(n, name))
            return e;
    }
    return 0;
}
