/*
 * coredump.c - GPU coredump attributes (cuCoredumpGet/SetAttribute[Global])
 * and the dump a device fault writes when dumps are enabled.
 *
 * As documented: global attributes start from the CUDA-GDB environment
 * variables, and a value set by the environment cannot be changed by the
 * API (CUDA_ERROR_NOT_PERMITTED); each context starts from the global ones
 * (CU_CTX_COREDUMP_ENABLE / CU_CTX_USER_COREDUMP_ENABLE turn dumps on for it);
 * the user trigger and its pipe are global only; the pipe cannot change once
 * user-triggered dumps are on. On a fault in a context with dumps enabled the
 * dump is written to the file attribute ("%p", "%h", "%t" expand to the pid,
 * host name and time, as CUDA-GDB does) and, unless CU_COREDUMP_SKIP_ABORT
 * is set or the host trigger is off, the process aborts, as the driver does.
 * The dump is a short text description of the fault (a GPU dump is an ELF
 * core of device state, which a CPU simulator does not have). User-triggered
 * dumps through the pipe are not simulated.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t dump_once = PTHREAD_ONCE_INIT;
static struct sim_coredump global;
static unsigned from_env;          /* bit a: attribute a was set by the environment */

static bool env_bool(const char *name, bool *out)
{
    const char *v = getenv(name);

    if (!v || !*v)
        return false;
    *out = !strcmp(v, "1") || !strcasecmp(v, "true");
    return true;
}

static int env_flags(const char *v)
{
    static const struct { const char *name; int bit; } names[] = {
        { "skip_nonrelocated_elf_images", CU_COREDUMP_SKIP_NONRELOCATED_ELF_IMAGES },
        { "skip_global_memory", CU_COREDUMP_SKIP_GLOBAL_MEMORY },
        { "skip_shared_memory", CU_COREDUMP_SKIP_SHARED_MEMORY },
        { "skip_local_memory", CU_COREDUMP_SKIP_LOCAL_MEMORY },
        { "skip_abort", CU_COREDUMP_SKIP_ABORT },
        { "skip_constbank_memory", CU_COREDUMP_SKIP_CONSTBANK_MEMORY },
    };
    int flags = 0;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strstr(v, names[i].name))
            flags |= names[i].bit;
    return flags;
}

static void dump_init(void)
{
    char host[256] = "localhost";
    const char *v;

    gethostname(host, sizeof(host) - 1);
    global.trigger_host = true;
    snprintf(global.file, sizeof(global.file), "core.cuda.%s.%d", host, (int)getpid());
    snprintf(global.pipe, sizeof(global.pipe), "corepipe.cuda.%s.%d", host, (int)getpid());
    if (env_bool("CUDA_ENABLE_COREDUMP_ON_EXCEPTION", &global.on_exception))
        from_env |= 1u << CU_COREDUMP_ENABLE_ON_EXCEPTION;
    if (env_bool("CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION", &global.trigger_host))
        from_env |= 1u << CU_COREDUMP_TRIGGER_HOST;
    if (env_bool("CUDA_ENABLE_LIGHTWEIGHT_COREDUMP", &global.lightweight))
        from_env |= 1u << CU_COREDUMP_LIGHTWEIGHT;
    if (env_bool("CUDA_ENABLE_USER_TRIGGERED_COREDUMP", &global.user_trigger))
        from_env |= 1u << CU_COREDUMP_ENABLE_USER_TRIGGER;
    if ((v = getenv("CUDA_COREDUMP_FILE")) && *v) {
        snprintf(global.file, sizeof(global.file), "%s", v);
        from_env |= 1u << CU_COREDUMP_FILE;
    }
    if ((v = getenv("CUDA_COREDUMP_PIPE")) && *v) {
        snprintf(global.pipe, sizeof(global.pipe), "%s", v);
        from_env |= 1u << CU_COREDUMP_PIPE;
    }
    if ((v = getenv("CUDA_COREDUMP_GENERATION_FLAGS")) && *v) {
        global.flags = env_flags(v);
        from_env |= 1u << CU_COREDUMP_GENERATION_FLAGS;
    }
}

void sim_coredump_ctx_init(struct sim_ctx *c)
{
    pthread_once(&dump_once, dump_init);
    pthread_mutex_lock(&dump_lock);
    if (c->flags & CU_CTX_USER_COREDUMP_ENABLE)
        global.user_trigger = true;      /* as setting the attribute globally */
    c->coredump = global;
    if (c->flags & (CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE))
        c->coredump.on_exception = true;
    pthread_mutex_unlock(&dump_lock);
}

/* ---- attribute access ------------------------------------------------------------- */

static CUresult attr_size(CUcoredumpSettings a, size_t *size)
{
    switch (a) {
    case CU_COREDUMP_ENABLE_ON_EXCEPTION:
    case CU_COREDUMP_TRIGGER_HOST:
    case CU_COREDUMP_LIGHTWEIGHT:
    case CU_COREDUMP_ENABLE_USER_TRIGGER:
        *size = sizeof(bool);
        return CUDA_SUCCESS;
    case CU_COREDUMP_FILE:
    case CU_COREDUMP_PIPE:
        *size = 1024;
        return CUDA_SUCCESS;
    case CU_COREDUMP_GENERATION_FLAGS:
        *size = sizeof(int);
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult get(const struct sim_coredump *d, CUcoredumpSettings a, void *value, size_t *size)
{
    const char *str = NULL;
    size_t need;
    CUresult r;

    if (!size || (r = attr_size(a, &need)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!value) {
        *size = need;
        return CUDA_SUCCESS;
    }
    if (a == CU_COREDUMP_FILE)
        str = d->file;
    else if (a == CU_COREDUMP_PIPE)
        str = d->pipe;
    if (str) {
        if (*size < strlen(str) + 1)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(value, str, strlen(str) + 1);
        *size = strlen(str) + 1;
        return CUDA_SUCCESS;
    }
    if (*size < need)
        return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_COREDUMP_ENABLE_ON_EXCEPTION: *(bool *)value = d->on_exception; break;
    case CU_COREDUMP_TRIGGER_HOST: *(bool *)value = d->trigger_host; break;
    case CU_COREDUMP_LIGHTWEIGHT: *(bool *)value = d->lightweight; break;
    case CU_COREDUMP_ENABLE_USER_TRIGGER: *(bool *)value = d->user_trigger; break;
    case CU_COREDUMP_GENERATION_FLAGS: *(int *)value = d->flags; break;
    default: break;
    }
    *size = need;
    return CUDA_SUCCESS;
}

static CUresult set(struct sim_coredump *d, CUcoredumpSettings a, const void *value, size_t *size)
{
    size_t need;

    if (!size || attr_size(a, &need))
        return CUDA_ERROR_INVALID_VALUE;
    if (!value) {
        *size = need;
        return CUDA_SUCCESS;
    }
    if (from_env & (1u << a))
        return CUDA_ERROR_NOT_PERMITTED;     /* the environment's value stays */
    if (a == CU_COREDUMP_FILE || a == CU_COREDUMP_PIPE) {
        /* The name is its first *size bytes, up to a NUL: a size that
         * leaves the NUL out is taken as the driver takes it (cuda-python
         * passes len(name)). */
        size_t len = strnlen(value, *size);
        char *to = a == CU_COREDUMP_FILE ? d->file : d->pipe;

        if (len > 1023)
            return CUDA_ERROR_INVALID_VALUE;
        if (a == CU_COREDUMP_PIPE && d->user_trigger)
            return CUDA_ERROR_NOT_PERMITTED;
        memcpy(to, value, len);
        to[len] = '\0';
        return CUDA_SUCCESS;
    }
    if (*size != need)
        return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_COREDUMP_ENABLE_ON_EXCEPTION: d->on_exception = *(const bool *)value; break;
    case CU_COREDUMP_TRIGGER_HOST: d->trigger_host = *(const bool *)value; break;
    case CU_COREDUMP_LIGHTWEIGHT: d->lightweight = *(const bool *)value; break;
    case CU_COREDUMP_ENABLE_USER_TRIGGER: d->user_trigger = *(const bool *)value; break;
    case CU_COREDUMP_GENERATION_FLAGS: {
        int f = *(const int *)value;
        const int known = CU_COREDUMP_SKIP_NONRELOCATED_ELF_IMAGES | CU_COREDUMP_SKIP_GLOBAL_MEMORY |
                          CU_COREDUMP_SKIP_SHARED_MEMORY | CU_COREDUMP_SKIP_LOCAL_MEMORY |
                          CU_COREDUMP_SKIP_ABORT | CU_COREDUMP_SKIP_CONSTBANK_MEMORY;
        if (f & ~known)
            return CUDA_ERROR_INVALID_VALUE;
        d->flags = f;
        break;
    }
    default:
        break;
    }
    return CUDA_SUCCESS;
}

CUresult cuCoredumpGetAttribute(CUcoredumpSettings attrib, void *value, size_t *size)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_ctx_current(&c)) == CUDA_ERROR_INVALID_CONTEXT)
        return r;
    pthread_mutex_lock(&dump_lock);
    /* The user trigger and its pipe are global settings. */
    struct sim_coredump view = c->coredump;
    view.user_trigger = global.user_trigger;
    memcpy(view.pipe, global.pipe, sizeof(view.pipe));
    r = get(&view, attrib, value, size);
    pthread_mutex_unlock(&dump_lock);
    return r;
}
SIM_EXPORT(cuCoredumpGetAttribute);

CUresult cuCoredumpGetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
    CUresult r;

    SIM_GATE();
    pthread_once(&dump_once, dump_init);
    pthread_mutex_lock(&dump_lock);
    r = get(&global, attrib, value, size);
    pthread_mutex_unlock(&dump_lock);
    return r;
}
SIM_EXPORT(cuCoredumpGetAttributeGlobal);

CUresult cuCoredumpSetAttribute(CUcoredumpSettings attrib, void *value, size_t *size)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_ctx_current(&c)) == CUDA_ERROR_INVALID_CONTEXT)
        return r;
    if (attrib == CU_COREDUMP_ENABLE_USER_TRIGGER || attrib == CU_COREDUMP_PIPE)
        return CUDA_ERROR_NOT_PERMITTED;     /* global only */
    pthread_mutex_lock(&dump_lock);
    r = set(&c->coredump, attrib, value, size);
    pthread_mutex_unlock(&dump_lock);
    return r;
}
SIM_EXPORT(cuCoredumpSetAttribute);

CUresult cuCoredumpSetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
    CUresult r;

    SIM_GATE();
    pthread_once(&dump_once, dump_init);
    pthread_mutex_lock(&dump_lock);
    r = set(&global, attrib, value, size);
    pthread_mutex_unlock(&dump_lock);
    return r;
}
SIM_EXPORT(cuCoredumpSetAttributeGlobal);
SIM_PARTIAL(cuCoredumpSetAttributeGlobal, "user-triggered dumps through the pipe are not written");

/* ---- the dump ---------------------------------------------------------------------- */

/* The file attribute with %p, %h, %t expanded. */
static void dump_path(const char *pattern, char *out, size_t len)
{
    char host[256] = "localhost";
    size_t o = 0;

    gethostname(host, sizeof(host) - 1);
    for (const char *p = pattern; *p && o + 1 < len; p++) {
        char piece[300] = { 0 };

        if (*p == '%' && p[1] == 'p')
            snprintf(piece, sizeof(piece), "%d", (int)getpid());
        else if (*p == '%' && p[1] == 'h')
            snprintf(piece, sizeof(piece), "%s", host);
        else if (*p == '%' && p[1] == 't')
            snprintf(piece, sizeof(piece), "%lld", (long long)time(NULL));
        else {
            out[o++] = *p;
            continue;
        }
        p++;
        for (const char *q = piece; *q && o + 1 < len; q++)
            out[o++] = *q;
    }
    out[o] = 0;
}

void sim_coredump_on_fault(struct sim_ctx *c, CUresult err, const char *what)
{
    struct sim_coredump d;
    char path[1100];
    FILE *f;
    int fd;

    pthread_mutex_lock(&dump_lock);
    d = c->coredump;
    pthread_mutex_unlock(&dump_lock);
    if (!d.on_exception || __atomic_load_n(&c->sticky, __ATOMIC_ACQUIRE))
        return;                          /* not enabled, or dumped for the first fault already */
    dump_path(d.file, path, sizeof(path));
    if ((fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0 ||
        !(f = fdopen(fd, "w"))) {
        sim_log("cannot write the GPU coredump %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    } else {
        fprintf(f, "simcuda GPU coredump\npid %d\ndevice %d\ncontext %llu\nerror %s\nkernel %s\n"
                   "lightweight %d\nflags %#x\n",
                (int)getpid(), c->dev, (unsigned long long)c->id, sim_result_name(err), what ? what : "?",
                d.lightweight || (d.flags & CU_COREDUMP_LIGHTWEIGHT_FLAGS) == CU_COREDUMP_LIGHTWEIGHT_FLAGS,
                (unsigned)d.flags);
        fclose(f);
        sim_log("GPU exception (%s in %s): coredump written to %s", sim_result_name(err), what ? what : "?",
                path);
    }
    if (d.trigger_host && !(d.flags & CU_COREDUMP_SKIP_ABORT))
        abort();
}
