/* Driver objects besides memory; see objects.h. */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "driver/driver.h"
#include "objects.h"

#define MAX_CONTEXTS 256

struct ctx_rec {
    CUcontext ctx;
    CUdevice dev;
    int refs;                     /* primary contexts are retained repeatedly */
};

static pthread_mutex_t objects_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct ctx_rec contexts[MAX_CONTEXTS];
static size_t ncontexts;
static unsigned counts[OBJ_KIND_COUNT];

void objects_ctx_created(CUcontext ctx, CUdevice dev, int primary)
{
    pthread_mutex_lock(&objects_mutex);
    for (size_t i = 0; i < ncontexts; i++) {
        if (contexts[i].ctx == ctx) {
            contexts[i].refs += primary;
            pthread_mutex_unlock(&objects_mutex);
            return;
        }
    }
    /* More than MAX_CONTEXTS live contexts is far beyond what the driver
     * allows per device; the extra ones are only missing from the list. */
    if (ncontexts < MAX_CONTEXTS) {
        contexts[ncontexts++] = (struct ctx_rec){ ctx, dev, 1 };
        counts[OBJ_CONTEXT]++;
    }
    pthread_mutex_unlock(&objects_mutex);
}

/* Drops `refs` references of ctx (all: INT_MAX); 1 when it is gone now. */
static int ctx_drop(CUcontext ctx, int refs)
{
    int gone = 0;

    pthread_mutex_lock(&objects_mutex);
    for (size_t i = 0; i < ncontexts; i++) {
        if (contexts[i].ctx != ctx)
            continue;
        contexts[i].refs = refs >= contexts[i].refs ? 0 : contexts[i].refs - refs;
        if (contexts[i].refs == 0) {
            contexts[i] = contexts[--ncontexts];
            counts[OBJ_CONTEXT]--;
            gone = 1;
        }
        break;
    }
    pthread_mutex_unlock(&objects_mutex);
    return gone;
}

int objects_ctx_destroyed(CUcontext ctx)
{
    return ctx_drop(ctx, 1);
}

int objects_ctx_reset(CUcontext ctx)
{
    return ctx_drop(ctx, INT_MAX);
}

void objects_count(enum obj_kind kind, int delta)
{
    pthread_mutex_lock(&objects_mutex);
    if (delta > 0 || counts[kind] >= (unsigned)-delta)
        counts[kind] += (unsigned)delta;
    pthread_mutex_unlock(&objects_mutex);
}

unsigned objects_get_count(enum obj_kind kind)
{
    unsigned n;

    pthread_mutex_lock(&objects_mutex);
    n = counts[kind];
    pthread_mutex_unlock(&objects_mutex);
    return n;
}

size_t objects_contexts(CUcontext *ctxs, CUdevice *devs, size_t max)
{
    size_t n;

    pthread_mutex_lock(&objects_mutex);
    n = ncontexts;
    for (size_t i = 0; i < n && i < max; i++) {
        ctxs[i] = contexts[i].ctx;
        devs[i] = contexts[i].dev;
    }
    pthread_mutex_unlock(&objects_mutex);
    return n;
}

/* --- streams ---------------------------------------------------------------- */

static pthread_mutex_t streams_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct obj_stream *streams;
static size_t nstreams, streams_cap;

static pid_t my_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* Room for one more record (lock held): 0, or -1 without memory (the stream
 * then goes unnamed; the bounded context wait still covers it). */
static int streams_reserve(void)
{
    if (nstreams == streams_cap) {
        size_t cap = streams_cap ? streams_cap * 2 : 32;
        struct obj_stream *n = realloc(streams, cap * sizeof(*n));
        if (!n)
            return -1;
        streams = n;
        streams_cap = cap;
    }
    return 0;
}

void objects_stream_created(CUstream s, CUcontext ctx, unsigned flags)
{
    pthread_mutex_lock(&streams_mutex);
    if (streams_reserve() == 0)
        streams[nstreams++] = (struct obj_stream){ .kind = OBJ_STREAM_CREATED, .handle = s,
                                                   .ctx = ctx, .flags = flags, .tid = my_tid() };
    pthread_mutex_unlock(&streams_mutex);
}

void objects_stream_destroyed(CUstream s)
{
    pthread_mutex_lock(&streams_mutex);
    for (size_t i = 0; i < nstreams; i++) {
        if (streams[i].kind == OBJ_STREAM_CREATED && streams[i].handle == s) {
            streams[i] = streams[--nstreams];
            break;
        }
    }
    pthread_mutex_unlock(&streams_mutex);
}

/* The record of stream s as the calling thread names it (lock held), made
 * for a default stream on first use; NULL when unknown or out of memory. */
static struct obj_stream *stream_record(CUstream s, int per_thread)
{
    enum obj_stream_kind kind;
    CUcontext ctx = NULL;
    pid_t tid = 0;

    if (s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) {
        for (size_t i = 0; i < nstreams; i++)
            if (streams[i].kind == OBJ_STREAM_CREATED && streams[i].handle == s)
                return &streams[i];
        return NULL;
    }
    kind = s == CU_STREAM_PER_THREAD || (s == NULL && per_thread) ? OBJ_STREAM_PER_THREAD
                                                                  : OBJ_STREAM_LEGACY;
    if (TCGPU_REAL(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx)
        return NULL;
    if (kind == OBJ_STREAM_PER_THREAD)
        tid = my_tid();
    for (size_t i = 0; i < nstreams; i++)
        if (streams[i].kind == kind && streams[i].ctx == ctx && streams[i].tid == tid)
            return &streams[i];
    if (streams_reserve())
        return NULL;
    streams[nstreams] = (struct obj_stream){ .kind = kind, .ctx = ctx, .tid = tid };
    return &streams[nstreams++];
}

void objects_note_work(CUstream s, int per_thread, const char *call, enum obj_work_kind work,
                       const void *what)
{
    struct obj_stream *r;

    pthread_mutex_lock(&streams_mutex);
    if ((r = stream_record(s, per_thread)) != NULL) {
        r->call = call;
        r->work = work;
        r->what = what;
    }
    pthread_mutex_unlock(&streams_mutex);
}

size_t objects_streams_of(CUcontext ctx, struct obj_stream *out, size_t max)
{
    size_t n = 0;

    pthread_mutex_lock(&streams_mutex);
    for (size_t i = 0; i < nstreams; i++) {
        if (streams[i].ctx != ctx)
            continue;
        if (n < max)
            out[n] = streams[i];
        n++;
    }
    pthread_mutex_unlock(&streams_mutex);
    return n;
}

void objects_forget_streams(CUcontext ctx)
{
    pthread_mutex_lock(&streams_mutex);
    for (size_t i = 0; i < nstreams;) {
        if (streams[i].ctx == ctx)
            streams[i] = streams[--nstreams];
        else
            i++;
    }
    pthread_mutex_unlock(&streams_mutex);
}

/* "cuLaunchKernel(spin_forever)", "cuLaunchHostFunc(wait_for_app)". */
static void describe_work(const struct obj_stream *s, char *buf, size_t len)
{
    const char *name = NULL;
    Dl_info info;

    if (!s->call) {
        snprintf(buf, len, "no work noted");
        return;
    }
    switch (s->work) {
    case OBJ_WORK_KERNEL:
        if (!s->what || TCGPU_REAL(cuFuncGetName)(&name, (CUfunction)s->what) != CUDA_SUCCESS)
            name = NULL;
        snprintf(buf, len, "%s(%s)", s->call, name ? name : "a kernel");
        return;
    case OBJ_WORK_HOSTFN:
        if (s->what && dladdr(s->what, &info) && info.dli_sname)
            snprintf(buf, len, "%s(%s)", s->call, info.dli_sname);
        else
            snprintf(buf, len, "%s(host function %p)", s->call, s->what);
        return;
    case OBJ_WORK_WAIT:
        snprintf(buf, len, "%s (a wait that nothing has satisfied)", s->call);
        return;
    default:
        snprintf(buf, len, "%s", s->call);
        return;
    }
}

void objects_describe_stream(const struct obj_stream *s, char *buf, size_t len)
{
    char work[160];

    describe_work(s, work, sizeof(work));
    switch (s->kind) {
    case OBJ_STREAM_CREATED:
        snprintf(buf, len, "stream %p (%s, created by thread %d): last %s", (void *)s->handle,
                 s->flags & CU_STREAM_NON_BLOCKING ? "non-blocking" : "blocking", (int)s->tid,
                 work);
        return;
    case OBJ_STREAM_LEGACY:
        snprintf(buf, len, "the legacy default stream of context %p: last %s", (void *)s->ctx,
                 work);
        return;
    default:
        snprintf(buf, len, "the per-thread default stream of thread %d: last %s", (int)s->tid,
                 work);
        return;
    }
}
