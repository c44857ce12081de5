/*
 * graphmem.c - graph memory served by the interposer, and the captures in
 * progress; see graphmem.h.
 *
 * A capture's allocations form a *set*. Graphs and executable graphs hold
 * references to sets (an owner lists the sets it refers to); a set whose
 * last reference goes releases its blocks (devmem_graph_release). Block
 * states live in devmem (devmem.h, "Graph memory").
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "devmem.h"
#include "driver/driver.h"
#include "graphmem.h"
#include "common/log.h"

struct gm_block {
    CUdeviceptr p;
    int freed_inside;              /* the capture frees it too */
};

struct gm_set {
    uint64_t capture;              /* the driver's capture id */
    int refs;
    struct gm_block *blocks;       /* allocated in the capture */
    size_t nblocks;
    CUdeviceptr *frees;            /* graph memory of other sets the capture frees */
    size_t nfrees;
};

struct gm_capture {
    uint64_t id;
    CUstream stream;
    int per_thread;
    int mode;
    pthread_t thread;
    pid_t tid;
    CUgraph into;
    struct gm_set *set;
    struct gm_capture *next;
};

struct gm_owner {                  /* a graph or an executable graph */
    const void *handle;
    int is_exec;
    unsigned long long flags;      /* executable graphs: instantiation flags */
    struct gm_set **sets;
    size_t nsets;
    struct gm_undo { CUdeviceptr p; enum devmem_graph_state st; } *undo;   /* last launch */
    size_t nundo;
    CUgraphNode *nodes;            /* graphs: the nodes its capture made */
    size_t nnodes;
    struct gm_owner *next;
};

static pthread_mutex_t gm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gm_capture *captures;
static struct gm_owner *owners;
static int ncaptures;              /* atomic copy of the list's length */
static __thread int thread_mode;   /* CU_STREAM_CAPTURE_MODE_GLOBAL (0) by default */

/* ---- sets ---------------------------------------------------------------------------- */

static struct gm_set *set_new(uint64_t capture)
{
    struct gm_set *s = calloc(1, sizeof(*s));

    if (s) {
        s->capture = capture;
        s->refs = 1;
    }
    return s;
}

/* Drops a reference (lock held); the last one releases the blocks. */
static void set_put(struct gm_set *s)
{
    if (!s || --s->refs > 0)
        return;
    for (size_t i = 0; i < s->nblocks; i++)
        devmem_graph_release(s->blocks[i].p);
    free(s->blocks);
    free(s->frees);
    free(s);
}

static int set_add_block(struct gm_set *s, CUdeviceptr p)
{
    struct gm_block *v = realloc(s->blocks, (s->nblocks + 1) * sizeof(*v));

    if (!v)
        return -ENOMEM;
    s->blocks = v;
    s->blocks[s->nblocks++] = (struct gm_block){ p, 0 };
    return 0;
}

static struct gm_block *set_block(struct gm_set *s, CUdeviceptr p)
{
    for (size_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].p == p)
            return &s->blocks[i];
    return NULL;
}

/* ---- owners ---------------------------------------------------------------------------- */

static struct gm_owner *owner_find(const void *h)
{
    for (struct gm_owner *o = owners; o; o = o->next)
        if (o->handle == h)
            return o;
    return NULL;
}

static struct gm_owner *owner_get(const void *h, int is_exec)
{
    struct gm_owner *o = owner_find(h);

    if (o || !(o = calloc(1, sizeof(*o))))
        return o;
    o->handle = h;
    o->is_exec = is_exec;
    o->next = owners;
    owners = o;
    return o;
}

static bool owner_has(const struct gm_owner *o, const struct gm_set *s)
{
    for (size_t i = 0; i < o->nsets; i++)
        if (o->sets[i] == s)
            return true;
    return false;
}

static int owner_add(struct gm_owner *o, struct gm_set *s)
{
    struct gm_set **v;

    if (owner_has(o, s))
        return 0;
    if (!(v = realloc(o->sets, (o->nsets + 1) * sizeof(*v))))
        return -ENOMEM;
    o->sets = v;
    o->sets[o->nsets++] = s;
    s->refs++;
    return 0;
}

static void owner_drop(const void *h)
{
    for (struct gm_owner **pp = &owners; *pp; pp = &(*pp)->next) {
        struct gm_owner *o = *pp;

        if (o->handle != h)
            continue;
        *pp = o->next;
        for (size_t i = 0; i < o->nsets; i++)
            set_put(o->sets[i]);
        free(o->sets);
        free(o->undo);
        free(o->nodes);
        free(o);
        return;
    }
}

/* Does the owner hold any allocation (not just frees of others)? */
static bool owner_has_memory(const struct gm_owner *o)
{
    for (size_t i = 0; o && i < o->nsets; i++)
        if (o->sets[i]->nblocks || o->sets[i]->nfrees)
            return true;
    return false;
}

/* ---- captures ------------------------------------------------------------------------------ */

int graphmem_captures_active(void)
{
    return __atomic_load_n(&ncaptures, __ATOMIC_ACQUIRE);
}

void graphmem_thread_mode_set(int mode)
{
    thread_mode = mode;
}

int graphmem_capture_begun(CUstream stream, int per_thread, uint64_t id, int mode, CUgraph into)
{
    struct gm_capture *c = calloc(1, sizeof(*c));

    if (!c || !(c->set = set_new(id))) {
        free(c);
        log_err("out of memory tracking stream capture %llu: its stream-ordered allocations "
                "stay the driver's", (unsigned long long)id);
        return -ENOMEM;
    }
    c->id = id;
    c->stream = stream;
    c->per_thread = per_thread;
    c->mode = mode;
    c->thread = pthread_self();
    c->tid = (pid_t)syscall(SYS_gettid);
    c->into = into;
    pthread_mutex_lock(&gm_lock);
    c->next = captures;
    captures = c;
    __atomic_add_fetch(&ncaptures, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&gm_lock);
    return 0;
}

static struct gm_capture *capture_by_stream(CUstream stream, int per_thread)
{
    for (struct gm_capture *c = captures; c; c = c->next)
        if (c->stream == stream && c->per_thread == per_thread)
            return c;
    return NULL;
}

static struct gm_capture *capture_by_id(uint64_t id)
{
    for (struct gm_capture *c = captures; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

void graphmem_capture_ended(CUstream stream, int per_thread, CUresult rc, CUgraph graph, int ended)
{
    struct gm_capture *c;
    CUgraph to;

    pthread_mutex_lock(&gm_lock);
    c = capture_by_stream(stream, per_thread);
    if (!c || !ended) {
        pthread_mutex_unlock(&gm_lock);
        return;                    /* not ours, or still going (wrong thread) */
    }
    for (struct gm_capture **pp = &captures; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    __atomic_sub_fetch(&ncaptures, 1, __ATOMIC_ACQ_REL);
    /* A capture into an existing graph leaves its nodes there even when it
     * fails: the memory they use stays with that graph. */
    to = rc == CUDA_SUCCESS ? graph : c->into;
    if (to) {
        struct gm_owner *o = owner_get(to, 0), *adopted = owner_find(c);
        int bad = !o || owner_add(o, c->set);

        /* And what graph launches captured in it brought (child graph nodes). */
        for (size_t i = 0; adopted && o && i < adopted->nsets; i++)
            bad |= owner_add(o, adopted->sets[i]);
        if (bad)
            log_err("out of memory: graph memory of capture %llu is released although a graph uses it",
                    (unsigned long long)c->id);
    }
    owner_drop(c);
    set_put(c->set);               /* the capture's own reference */
    pthread_mutex_unlock(&gm_lock);
    free(c);
}

bool graphmem_unsafe_prohibited(void)
{
    int mode = thread_mode;
    bool no = false;

    if (!graphmem_captures_active() || mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return false;
    pthread_mutex_lock(&gm_lock);
    for (struct gm_capture *c = captures; c && !no; c = c->next) {
        bool mine = pthread_equal(c->thread, pthread_self());

        if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!mine && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL))
            no = true;
    }
    pthread_mutex_unlock(&gm_lock);
    return no;
}

bool graphmem_capture_describe(char *buf, size_t len)
{
    bool any;

    pthread_mutex_lock(&gm_lock);
    any = captures != NULL;
    if (any)
        snprintf(buf, len, "stream capture %llu in progress on stream %p, begun by thread %d",
                 (unsigned long long)captures->id, (void *)captures->stream, (int)captures->tid);
    pthread_mutex_unlock(&gm_lock);
    return any;
}

/* ---- allocations inside a capture -------------------------------------------------------------- */

/* The capture's allocations are made as relaxed-mode calls: the VMM calls
 * behind them are the interposer's, not the program's, and must not be
 * refused (nor invalidate the capture) on a driver that counts them as
 * potentially unsafe. */
static CUresult alloc_relaxed(CUdeviceptr *out, size_t size)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    int exchanged = TCGPU_REAL(cuThreadExchangeStreamCaptureMode)(&m) == CUDA_SUCCESS;
    CUresult rc = devmem_alloc(out, size, TC_ALLOC_GRAPH);

    if (exchanged)
        TCGPU_REAL(cuThreadExchangeStreamCaptureMode)(&m);
    return rc;
}

CUresult graphmem_alloc(uint64_t id, CUdeviceptr *out, size_t size)
{
    struct gm_capture *c;
    CUresult rc;

    pthread_mutex_lock(&gm_lock);
    c = capture_by_id(id);
    pthread_mutex_unlock(&gm_lock);
    if (!c)
        return CUDA_ERROR_NOT_FOUND;
    if ((rc = alloc_relaxed(out, size)) != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&gm_lock);
    /* The capture cannot end meanwhile: only its own thread (or stream user)
     * ends it, and the program does not race its own capture. */
    c = capture_by_id(id);
    if (!c || set_add_block(c->set, *out)) {
        pthread_mutex_unlock(&gm_lock);
        devmem_graph_release(*out);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&gm_lock);
    return CUDA_SUCCESS;
}

/* The set that allocated p, among every owner's and capture's sets (lock held). */
static struct gm_set *set_of_block(CUdeviceptr p)
{
    for (struct gm_capture *c = captures; c; c = c->next)
        if (set_block(c->set, p))
            return c->set;
    for (struct gm_owner *o = owners; o; o = o->next)
        for (size_t i = 0; i < o->nsets; i++)
            if (set_block(o->sets[i], p))
                return o->sets[i];
    return NULL;
}

/* Does any set other than `not` free p? (lock held) */
static bool freed_elsewhere(CUdeviceptr p, const struct gm_set *not)
{
    struct gm_set *seen[64];
    size_t nseen = 0;

    for (struct gm_capture *c = captures; c; c = c->next)
        if (c->set != not)
            for (size_t i = 0; i < c->set->nfrees; i++)
                if (c->set->frees[i] == p)
                    return true;
    for (struct gm_owner *o = owners; o; o = o->next)
        for (size_t i = 0; i < o->nsets; i++) {
            struct gm_set *s = o->sets[i];
            bool dup = false;

            for (size_t k = 0; k < nseen && !dup; k++)
                dup = seen[k] == s;
            if (dup || s == not)
                continue;
            if (nseen < 64)
                seen[nseen++] = s;
            for (size_t k = 0; k < s->nfrees; k++)
                if (s->frees[k] == p)
                    return true;
        }
    return false;
}

CUresult graphmem_free(uint64_t id, CUdeviceptr p)
{
    struct gm_capture *c;
    struct gm_set *owner;
    struct gm_block *b;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&gm_lock);
    c = capture_by_id(id);
    owner = c ? set_of_block(p) : NULL;
    if (!c || !owner) {
        rc = CUDA_ERROR_NOT_FOUND;
    } else if (owner == c->set) {
        /* Its own allocation: once, and not if another graph frees it. */
        b = set_block(owner, p);
        if (b->freed_inside || freed_elsewhere(p, c->set))
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            b->freed_inside = 1;
        if (!rc)
            devmem_graph_set(p, DEVMEM_GRAPH_INTERNAL);
    } else {
        /* Another graph's allocation: not if its own graph frees it, not twice here. */
        CUdeviceptr *v;

        b = set_block(owner, p);
        for (size_t i = 0; i < c->set->nfrees; i++)
            if (c->set->frees[i] == p)
                rc = CUDA_ERROR_INVALID_VALUE;
        if (b->freed_inside)
            rc = CUDA_ERROR_INVALID_VALUE;
        if (!rc) {
            if (!(v = realloc(c->set->frees, (c->set->nfrees + 1) * sizeof(*v))))
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            else {
                c->set->frees = v;
                c->set->frees[c->set->nfrees++] = p;
            }
        }
    }
    pthread_mutex_unlock(&gm_lock);
    return rc;
}

/* ---- graphs and executable graphs ----------------------------------------------------------------- */

bool graphmem_graph_has_memory(CUgraph g)
{
    bool has;

    pthread_mutex_lock(&gm_lock);
    has = owner_has_memory(owner_find(g));
    pthread_mutex_unlock(&gm_lock);
    return has;
}

bool graphmem_exec_has_memory(CUgraphExec x)
{
    bool has;

    pthread_mutex_lock(&gm_lock);
    has = owner_has_memory(owner_find(x));
    pthread_mutex_unlock(&gm_lock);
    return has;
}

int graphmem_graph_adopt(void *to, const void *from)
{
    struct gm_owner *f, *t;
    int rc = 0;

    pthread_mutex_lock(&gm_lock);
    f = owner_find(from);
    if (f && f->nsets) {
        t = owner_get(to, 0);
        for (size_t i = 0; t && i < f->nsets && !rc; i++)
            rc = owner_add(t, f->sets[i]);
        if (!t)
            rc = -ENOMEM;
    }
    pthread_mutex_unlock(&gm_lock);
    return rc;
}

int graphmem_capture_adopt(uint64_t id, CUgraphExec x)
{
    struct gm_capture *c;
    struct gm_owner *f, *t;
    int rc = 0;

    pthread_mutex_lock(&gm_lock);
    c = capture_by_id(id);
    f = owner_find(x);
    if (c && f) {
        /* Held under the capture's address until the capture ends. */
        if (!(t = owner_get(c, 0)))
            rc = -ENOMEM;
        for (size_t i = 0; t && i < f->nsets && !rc; i++)
            rc = owner_add(t, f->sets[i]);
    }
    pthread_mutex_unlock(&gm_lock);
    return rc;
}

void graphmem_graph_nodes(CUgraph g, const CUgraphNode *nodes, size_t n)
{
    struct gm_owner *o;
    CUgraphNode *v;

    pthread_mutex_lock(&gm_lock);
    if ((o = owner_find(g)) && n && (v = realloc(o->nodes, (o->nnodes + n) * sizeof(*v)))) {
        memcpy(v + o->nnodes, nodes, n * sizeof(*v));
        o->nodes = v;
        o->nnodes += n;
    }
    pthread_mutex_unlock(&gm_lock);
}

bool graphmem_node_protected(CUgraphNode node)
{
    bool hit = false;

    pthread_mutex_lock(&gm_lock);
    for (struct gm_owner *o = owners; o && !hit; o = o->next)
        if (owner_has_memory(o))
            for (size_t i = 0; i < o->nnodes && !hit; i++)
                hit = o->nodes[i] == node;
    pthread_mutex_unlock(&gm_lock);
    return hit;
}

void graphmem_graph_destroyed(CUgraph g)
{
    pthread_mutex_lock(&gm_lock);
    owner_drop(g);
    pthread_mutex_unlock(&gm_lock);
}

void graphmem_exec_destroyed(CUgraphExec x)
{
    pthread_mutex_lock(&gm_lock);
    owner_drop(x);
    pthread_mutex_unlock(&gm_lock);
}

/* Is there an executable graph holding one of g's sets with memory? (lock held) */
static bool instance_of(const struct gm_owner *g)
{
    for (struct gm_owner *o = owners; o; o = o->next)
        if (o->is_exec)
            for (size_t i = 0; i < g->nsets; i++)
                if (owner_has(o, g->sets[i]) && g->sets[i]->nblocks)
                    return true;
    return false;
}

CUresult graphmem_instantiate_check(CUgraph g)
{
    struct gm_owner *o;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&gm_lock);
    o = owner_find(g);
    if (o && owner_has_memory(o) && instance_of(o))
        rc = CUDA_ERROR_INVALID_VALUE;     /* one executable graph at a time */
    pthread_mutex_unlock(&gm_lock);
    return rc;
}

int graphmem_instantiated(CUgraph g, CUgraphExec x, unsigned long long flags)
{
    struct gm_owner *o, *e;
    int rc = 0;

    pthread_mutex_lock(&gm_lock);
    o = owner_find(g);
    if (o && o->nsets) {
        if (!(e = owner_get(x, 1)))
            rc = -ENOMEM;
        for (size_t i = 0; e && i < o->nsets && !rc; i++)
            rc = owner_add(e, o->sets[i]);
        if (e)
            e->flags = flags;
    }
    pthread_mutex_unlock(&gm_lock);
    return rc;
}

CUresult graphmem_update_check(CUgraphExec x, CUgraph g)
{
    struct gm_owner *o, *e;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&gm_lock);
    o = owner_find(g);
    e = owner_find(x);
    for (size_t i = 0; o && i < o->nsets && !rc; i++)
        if (!e || !owner_has(e, o->sets[i]))
            rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    pthread_mutex_unlock(&gm_lock);
    return rc;
}

/* ---- launches ------------------------------------------------------------------------------------ */

static int undo_push(struct gm_owner *x, CUdeviceptr p)
{
    enum devmem_graph_state st;
    struct gm_undo *v;

    if (devmem_graph_state(p, &st))
        return 0;
    if (!(v = realloc(x->undo, (x->nundo + 1) * sizeof(*v))))
        return -ENOMEM;
    x->undo = v;
    x->undo[x->nundo++] = (struct gm_undo){ p, st };
    return 0;
}

/* The relaunch rule, then the states the launch leaves (lock held). */
static CUresult launch_marks(struct gm_owner *x)
{
    int autofree = !!(x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    enum devmem_graph_state st;

    for (size_t i = 0; i < x->nsets; i++) {
        struct gm_set *s = x->sets[i];

        for (size_t k = 0; k < s->nblocks; k++)
            if (!s->blocks[k].freed_inside && !devmem_graph_state(s->blocks[k].p, &st) &&
                st == DEVMEM_GRAPH_LIVE && !autofree)
                return CUDA_ERROR_INVALID_VALUE;      /* unfreed since the last launch */
        for (size_t k = 0; k < s->nfrees; k++)
            if (devmem_graph_state(s->frees[k], &st) || st != DEVMEM_GRAPH_LIVE)
                return CUDA_ERROR_INVALID_VALUE;      /* freeing what is not allocated */
    }
    x->nundo = 0;
    for (size_t i = 0; i < x->nsets; i++) {
        struct gm_set *s = x->sets[i];

        for (size_t k = 0; k < s->nblocks; k++)
            if (undo_push(x, s->blocks[k].p))
                return CUDA_ERROR_OUT_OF_MEMORY;
        for (size_t k = 0; k < s->nfrees; k++)
            if (undo_push(x, s->frees[k]))
                return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; i < x->nsets; i++) {
        struct gm_set *s = x->sets[i];

        for (size_t k = 0; k < s->nblocks; k++)
            devmem_graph_set(s->blocks[k].p, s->blocks[k].freed_inside ? DEVMEM_GRAPH_INTERNAL
                                                                       : DEVMEM_GRAPH_LIVE);
        for (size_t k = 0; k < s->nfrees; k++)
            devmem_graph_set(s->frees[k], DEVMEM_GRAPH_IDLE);
    }
    return CUDA_SUCCESS;
}

CUresult graphmem_launch(CUgraphExec x)
{
    struct gm_owner *o;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&gm_lock);
    o = owner_find(x);
    if (o && o->nsets)
        rc = launch_marks(o);
    pthread_mutex_unlock(&gm_lock);
    return rc;
}

void graphmem_launch_failed(CUgraphExec x)
{
    struct gm_owner *o;

    pthread_mutex_lock(&gm_lock);
    o = owner_find(x);
    for (size_t i = 0; o && i < o->nundo; i++)
        devmem_graph_set(o->undo[i].p, o->undo[i].st);
    if (o)
        o->nundo = 0;
    pthread_mutex_unlock(&gm_lock);
}
