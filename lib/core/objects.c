/* Driver objects besides memory; see objects.h. */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

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
