/*
 * capture.c - stream capture: capture sequences, what a capturing stream
 * turns into nodes, and the rules of what is illegal during capture
 * (docs/simcuda.md, "Graphs and stream capture").
 *
 * A sequence starts on one stream (the origin) and spreads to others that
 * wait on an event recorded in it; each stream in it keeps the set of nodes
 * its next operation depends on. What the driver documents as invalid during
 * capture returns its error and invalidates the sequences concerned; later
 * operations on their streams return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
 * and cuStreamEndCapture ends them with that error and no graph.
 *
 * The rules, as the driver states them:
 *   - the legacy stream may not be used while a blocking stream of its
 *     context captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
 *   - synchronising or querying a capturing stream, or a context with a
 *     capturing stream, is unsupported (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
 *   - querying or synchronising an event last recorded in a capture is
 *     CUDA_ERROR_CAPTURED_EVENT;
 *   - waiting on an event of another sequence merges two sequences
 *     (CUDA_ERROR_STREAM_CAPTURE_MERGE); waiting on a non-captured event
 *     without CU_EVENT_WAIT_EXTERNAL crosses the boundary
 *     (CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
 *   - potentially unsafe calls (allocation, synchronisation, queries) are
 *     prohibited by the thread's capture mode (cuThreadExchangeStreamCaptureMode).
 * Everything here runs under one lock; the fast paths read the stream's
 * capture pointer and the context's counters without it.
 */
#include "graph.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_capture *caps;
static int ncaps;                       /* atomic copy of the list's length */
static uint64_t cap_ids, mark_epoch;
static __thread char thread_token;      /* its address names the thread */
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

bool sim_captures_active(void)
{
    return __atomic_load_n(&ncaps, __ATOMIC_ACQUIRE) > 0;
}

bool sim_capture_uses_graph(struct sim_graph *g)
{
    bool used = false;

    pthread_mutex_lock(&cap_lock);
    for (struct sim_capture *c = caps; c; c = c->next)
        if (c->graph == g)
            used = true;
    pthread_mutex_unlock(&cap_lock);
    return used;
}

/* ---- streams and their dependency sets (cap_lock held) ---------------------------- */

static bool blocking(const struct sim_stream *s)
{
    return !(s->flags & CU_STREAM_NON_BLOCKING);
}

static int deps_reserve(struct sim_stream *s, size_t n)
{
    if (n <= s->cdeps_cap)
        return 0;
    size_t cap = s->cdeps_cap ? s->cdeps_cap : 4;
    while (cap < n)
        cap *= 2;
    struct sim_gnode **v = realloc(s->cdeps, cap * sizeof(*v));
    if (!v)
        return -ENOMEM;
    s->cdeps = v;
    CUgraphEdgeData *e = realloc(s->cedges, cap * sizeof(*e));
    if (!e)
        return -ENOMEM;
    s->cedges = e;
    s->cdeps_cap = cap;
    return 0;
}

static int deps_set(struct sim_stream *s, struct sim_gnode *const *v, const CUgraphEdgeData *e, size_t n)
{
    if (deps_reserve(s, n))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        s->cdeps[i] = v[i];
        if (e)
            s->cedges[i] = e[i];
        else
            memset(&s->cedges[i], 0, sizeof(s->cedges[i]));
    }
    s->ncdeps = n;
    return 0;
}

/* Union: nodes already in the set stay once. */
static int deps_add(struct sim_stream *s, struct sim_gnode *const *v, const CUgraphEdgeData *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        bool have = false;

        for (size_t j = 0; j < s->ncdeps && !have; j++)
            have = s->cdeps[j] == v[i];
        if (have)
            continue;
        if (deps_reserve(s, s->ncdeps + 1))
            return -ENOMEM;
        s->cdeps[s->ncdeps] = v[i];
        if (e)
            s->cedges[s->ncdeps] = e[i];
        else
            memset(&s->cedges[s->ncdeps], 0, sizeof(s->cedges[0]));
        s->ncdeps++;
    }
    return 0;
}

static int cap_join(struct sim_capture *c, struct sim_stream *s)
{
    if (c->nstreams == c->streams_cap) {
        size_t cap = c->streams_cap ? c->streams_cap * 2 : 4;
        struct sim_stream **v = realloc(c->streams, cap * sizeof(*v));

        if (!v)
            return -ENOMEM;
        c->streams = v;
        c->streams_cap = cap;
    }
    sim_stream_ref(s);
    c->streams[c->nstreams++] = s;
    s->ncdeps = 0;
    __atomic_store_n(&s->cap, c, __ATOMIC_RELEASE);
    __atomic_add_fetch(&s->ctx->capturing, 1, __ATOMIC_ACQ_REL);
    if (blocking(s))
        __atomic_add_fetch(&s->ctx->capturing_blocking, 1, __ATOMIC_ACQ_REL);
    return 0;
}

static void stream_leave(struct sim_stream *s)
{
    __atomic_store_n(&s->cap, NULL, __ATOMIC_RELEASE);
    s->ncdeps = 0;
    __atomic_sub_fetch(&s->ctx->capturing, 1, __ATOMIC_ACQ_REL);
    if (blocking(s))
        __atomic_sub_fetch(&s->ctx->capturing_blocking, 1, __ATOMIC_ACQ_REL);
}

static void cap_record_event(struct sim_capture *c, struct sim_event *e)
{
    for (size_t i = 0; i < c->nevents; i++)
        if (c->events[i] == e)
            return;
    if (c->nevents == c->events_cap) {
        size_t cap = c->events_cap ? c->events_cap * 2 : 4;
        struct sim_event **v = realloc(c->events, cap * sizeof(*v));

        if (!v)
            return;              /* the event keeps pointing here: cleared at the end */
        c->events = v;
        c->events_cap = cap;
    }
    sim_event_ref(e);
    c->events[c->nevents++] = e;
}

static void event_uncapture(struct sim_event *e)
{
    e->cap = NULL;
    free(e->cnodes);
    e->cnodes = NULL;
    e->ncnodes = 0;
}

/* Ends c: every stream leaves, its events forget it; c is unlinked and freed.
 * Returns the graph (the caller frees it when it does not hand it out). */
static struct sim_graph *cap_end(struct sim_capture *c)
{
    struct sim_graph *g = c->graph;

    for (size_t i = 0; i < c->nstreams; i++) {
        stream_leave(c->streams[i]);
        sim_stream_unref(c->streams[i]);
    }
    for (size_t i = 0; i < c->nevents; i++) {
        if (c->events[i]->cap == c)
            event_uncapture(c->events[i]);
        sim_event_unref(c->events[i]);
    }
    for (struct sim_capture **pp = &caps; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    __atomic_sub_fetch(&ncaps, 1, __ATOMIC_ACQ_REL);
    g->capture = NULL;
    free(c->streams);
    free(c->events);
    free(c);
    return g;
}

static void invalidate(struct sim_capture *c)
{
    c->invalidated = true;
}

/* The legacy stream while blocking streams of its context capture: their
 * sequences are invalidated (invalidate) and the use is an error. */
static bool legacy_conflict(struct sim_stream *s, bool invalidate_them)
{
    bool hit = false;

    if (s->type != SIM_STREAM_LEGACY || !__atomic_load_n(&s->ctx->capturing_blocking, __ATOMIC_ACQUIRE))
        return false;
    for (struct sim_capture *c = caps; c; c = c->next)
        for (size_t i = 0; i < c->nstreams; i++)
            if (c->streams[i]->ctx == s->ctx && blocking(c->streams[i])) {
                hit = true;
                if (invalidate_them)
                    invalidate(c);
            }
    return hit;
}

/* A node for s's sequence: it depends on s's set, which becomes {n}. On
 * failure n is freed. */
static CUresult cap_node(struct sim_stream *s, struct sim_gnode *n)
{
    struct sim_capture *c = s->cap;
    CUresult r;

    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = sim_graph_add(c->graph, n, s->cdeps, s->cedges, s->ncdeps))) {
        sim_gnode_free(n);
        return r;
    }
    s->cdeps[0] = n;                 /* the set had room: cap_join reserved 4 */
    memset(&s->cedges[0], 0, sizeof(s->cedges[0]));
    s->ncdeps = 1;
    return CUDA_SUCCESS;
}

/* The common entry checks of an operation on s: legacy conflict, invalidated. */
static CUresult entry_check(struct sim_stream *s)
{
    if (legacy_conflict(s, true))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (s->cap && s->cap->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return CUDA_SUCCESS;
}

/* ---- hooks of the other files ------------------------------------------------------- */

CUresult sim_capture_op(struct sim_stream *s, struct sim_op *op)
{
    CUresult r;

    pthread_mutex_lock(&cap_lock);
    if ((r = entry_check(s)))
        goto out_free;
    if (!s->cap) {
        /* The capture ended meanwhile: the operation runs. */
        pthread_mutex_unlock(&cap_lock);
        return sim_submit(s, op, NULL, 0, NULL);
    }
    switch (op->kind) {
    case SIM_OP_COPY:
    case SIM_OP_MEMSET:
    case SIM_OP_KERNEL:
    case SIM_OP_HOSTFN:
        r = cap_node(s, sim_gnode_from_op(op, s->ctx));
        break;
    case SIM_OP_PREFETCH:
        r = CUDA_SUCCESS;        /* a hint: graphs have no prefetch node */
        break;
    default:
        invalidate(s->cap);      /* callbacks, attach and the like: not in graphs */
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        break;
    }
out_free:
    pthread_mutex_unlock(&cap_lock);
    sim_op_free(op);
    return r;
}

CUresult sim_capture_sync_call(struct sim_stream *s)
{
    CUresult r = CUDA_SUCCESS;

    if (!sim_capture_pending(s))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    if (legacy_conflict(s, true)) {
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else if (s->cap) {
        invalidate(s->cap);
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult sim_capture_unsafe_call(void)
{
    CUstreamCaptureMode mode = thread_mode;
    bool prohibited = false;

    if (!sim_captures_active() || mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    for (struct sim_capture *c = caps; c; c = c->next) {
        bool mine = c->thread == &thread_token;

        if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (!mine && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            invalidate(c);
            prohibited = true;
        }
    }
    pthread_mutex_unlock(&cap_lock);
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult sim_capture_ctx_sync(struct sim_ctx *ctx)
{
    bool hit = false;

    if (!__atomic_load_n(&ctx->capturing, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    for (struct sim_capture *c = caps; c; c = c->next)
        for (size_t i = 0; i < c->nstreams; i++)
            if (c->streams[i]->ctx == ctx) {
                invalidate(c);
                hit = true;
            }
    pthread_mutex_unlock(&cap_lock);
    return hit ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

static CUresult event_node(struct sim_stream *s, struct sim_event *e, CUgraphNodeType type)
{
    struct sim_gnode *n = sim_gnode_new(type);

    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_event_ref(e);
    n->u.event = e;
    return cap_node(s, n);
}

CUresult sim_capture_event_record(struct sim_event *e, struct sim_stream *s, unsigned flags, bool *handled)
{
    CUresult r = CUDA_SUCCESS;

    *handled = false;
    pthread_mutex_lock(&cap_lock);
    if ((r = entry_check(s))) {
        *handled = true;
    } else if (!s->cap) {
        if (e->cap)
            event_uncapture(e);      /* recorded outside capture again */
    } else if (flags & CU_EVENT_RECORD_EXTERNAL) {
        *handled = true;
        r = event_node(s, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    } else {
        struct sim_gnode **v = s->ncdeps ? malloc(s->ncdeps * sizeof(*v)) : NULL;

        *handled = true;
        if (s->ncdeps && !v) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            if (s->ncdeps)
                memcpy(v, s->cdeps, s->ncdeps * sizeof(*v));
            free(e->cnodes);
            e->cnodes = v;
            e->ncnodes = s->ncdeps;
            e->cap = s->cap;
            cap_record_event(s->cap, e);
        }
    }
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult sim_capture_wait_event(struct sim_stream *s, struct sim_event *e, unsigned flags, bool *handled)
{
    struct sim_capture *ec;
    CUresult r = CUDA_SUCCESS;

    *handled = true;
    pthread_mutex_lock(&cap_lock);
    ec = e->cap;
    if ((r = entry_check(s)))
        goto out;
    if (ec) {
        if (ec->invalidated) {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else if (!s->cap) {
            /* The stream joins the event's sequence (a fork). */
            if (s->type == SIM_STREAM_LEGACY) {
                invalidate(ec);
                r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
            } else if (cap_join(ec, s) || deps_reserve(s, 4) || deps_set(s, e->cnodes, NULL, e->ncnodes)) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else if (s->cap == ec) {
            if (deps_add(s, e->cnodes, NULL, e->ncnodes))
                r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            invalidate(ec);
            invalidate(s->cap);
            r = CUDA_ERROR_STREAM_CAPTURE_MERGE;
        }
    } else if (s->cap) {
        if (flags & CU_EVENT_WAIT_EXTERNAL) {
            r = event_node(s, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
        } else {
            invalidate(s->cap);
            r = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        }
    } else {
        *handled = false;
    }
out:
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult sim_capture_event_check(struct sim_event *e)
{
    CUresult r = CUDA_SUCCESS;

    if (!__atomic_load_n(&e->cap, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&cap_lock);
    if (e->cap) {
        invalidate(e->cap);
        r = CUDA_ERROR_CAPTURED_EVENT;
    }
    pthread_mutex_unlock(&cap_lock);
    return r;
}

void sim_capture_event_gone(struct sim_event *e)
{
    pthread_mutex_lock(&cap_lock);
    if (e->cap)
        event_uncapture(e);
    pthread_mutex_unlock(&cap_lock);
}

/* A stream destroyed while capturing invalidates its sequence; the origin
 * going ends the sequence (nothing could end it any more). */
void sim_capture_stream_gone(struct sim_stream *s)
{
    struct sim_graph *drop = NULL;
    struct sim_capture *c;

    if (!__atomic_load_n(&s->cap, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&cap_lock);
    if ((c = s->cap)) {
        invalidate(c);
        if (c->origin == s) {
            bool owns = c->owns_graph;
            struct sim_graph *g = cap_end(c);
            drop = owns ? g : NULL;
        } else {
            for (size_t i = 0; i < c->nstreams; i++)
                if (c->streams[i] == s) {
                    c->streams[i] = c->streams[--c->nstreams];
                    stream_leave(s);
                    sim_stream_unref(s);
                    break;
                }
        }
    }
    pthread_mutex_unlock(&cap_lock);
    sim_graph_free(drop);
}

CUresult sim_capture_alloc(struct sim_stream *s, const CUmemPoolProps *props, size_t size, CUdeviceptr *out)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p = { .poolProps = *props, .bytesize = size };
    struct sim_gnode *n;
    CUresult r;

    pthread_mutex_lock(&cap_lock);
    if ((r = entry_check(s)))
        goto out;
    if (!s->cap) {
        r = CUDA_ERROR_ILLEGAL_STATE;    /* the caller retries outside capture */
        goto out;
    }
    if ((r = sim_gmem_alloc_node_new(s->ctx, &p, &n)))
        goto out;
    n->u.alloc.mem->owner = s->cap->graph;
    *out = n->u.alloc.p.dptr;
    r = cap_node(s, n);
out:
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult sim_capture_free(struct sim_stream *s, CUdeviceptr p)
{
    struct sim_gnode *n;
    CUresult r;

    pthread_mutex_lock(&cap_lock);
    if ((r = entry_check(s)))
        goto out;
    if (!s->cap) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        goto out;
    }
    if ((r = sim_gmem_free_node_new(s->cap->graph, p, &n))) {
        invalidate(s->cap);      /* only graph allocations can be freed in a graph */
        goto out;
    }
    r = cap_node(s, n);
out:
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult sim_capture_graph_launch(struct sim_stream *s, struct sim_exec *x, bool *handled)
{
    struct sim_gnode *n;
    CUresult r;

    *handled = true;
    pthread_mutex_lock(&cap_lock);
    if ((r = entry_check(s)))
        goto out;
    if (!s->cap) {
        *handled = false;
        goto out;
    }
    if (x->g->nmem) {
        invalidate(s->cap);      /* graphs with memory nodes cannot be children */
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        goto out;
    }
    r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_GRAPH)))
        goto out;
    if (!(n->u.child = sim_graph_clone(x->g))) {
        sim_gnode_free(n);
        goto out;
    }
    n->u.child->parent = n;
    r = cap_node(s, n);
out:
    pthread_mutex_unlock(&cap_lock);
    return r;
}

/* ---- the API ---------------------------------------------------------------------- */

static CUresult begin(CUstream hs, bool pt, CUstreamCaptureMode mode, CUgraph into,
                      const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps)
{
    struct sim_stream *s;
    struct sim_graph *g = NULL;
    struct sim_capture *c;
    CUresult r;

    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    if (s->type == SIM_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;    /* the legacy stream cannot capture */
    if (into) {
        if (sim_graph_get(into, &g) || g->moved || (ndeps && !deps))
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < ndeps; i++)
            if (!sim_handle_ok(deps[i], SIM_MAGIC_GNODE) || !sim_graph_has(g, (struct sim_gnode *)deps[i]))
                return CUDA_ERROR_INVALID_VALUE;
    }
    if (!(c = calloc(1, sizeof(*c))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&cap_lock);
    if (s->cap || (g && g->capture)) {
        r = CUDA_ERROR_ILLEGAL_STATE;     /* capturing already */
        goto err;
    }
    if (!g && !(g = sim_graph_new())) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto err;
    }
    c->owns_graph = !into;
    c->graph = g;
    c->mode = mode;
    c->thread = &thread_token;
    c->origin = s;
    c->ctx = s->ctx;
    c->id = ++cap_ids;
    if (cap_join(c, s) || deps_reserve(s, ndeps > 4 ? ndeps : 4) ||
        deps_set(s, (struct sim_gnode *const *)deps, edges, ndeps)) {
        if (c->nstreams) {
            stream_leave(s);
            sim_stream_unref(s);
        }
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto err_graph;
    }
    g->capture = c;
    c->next = caps;
    caps = c;
    __atomic_add_fetch(&ncaps, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&cap_lock);
    return CUDA_SUCCESS;
err_graph:
    if (c->owns_graph)
        sim_graph_free(g);
err:
    pthread_mutex_unlock(&cap_lock);
    free(c->streams);
    free(c);
    return r;
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    SIM_BEGIN();
    return begin(hStream, false, mode, NULL, NULL, NULL, 0);
}
SIM_EXPORT(cuStreamBeginCapture_v2);

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    SIM_BEGIN();
    return begin(hStream, true, mode, NULL, NULL, NULL, 0);
}
SIM_EXPORT(cuStreamBeginCapture_v2_ptsz);

/* CUDA 10.0's prototype: global mode. */
CUresult cuStreamBeginCapture(CUstream hStream)
{
    SIM_BEGIN();
    return begin(hStream, false, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL, NULL, NULL, 0);
}
SIM_EXPORT(cuStreamBeginCapture);

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    SIM_BEGIN();
    return begin(hStream, true, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL, NULL, NULL, 0);
}
SIM_EXPORT(cuStreamBeginCapture_ptsz);

CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode)
{
    SIM_BEGIN();
    if (!hGraph)
        return CUDA_ERROR_INVALID_VALUE;
    return begin(hStream, false, mode, hGraph, dependencies, dependencyData, numDependencies);
}
SIM_EXPORT(cuStreamBeginCaptureToGraph);

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                          CUstreamCaptureMode mode)
{
    SIM_BEGIN();
    if (!hGraph)
        return CUDA_ERROR_INVALID_VALUE;
    return begin(hStream, true, mode, hGraph, dependencies, dependencyData, numDependencies);
}
SIM_EXPORT(cuStreamBeginCaptureToGraph_ptsz);

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUstreamCaptureMode prev;

    SIM_BEGIN();
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    prev = thread_mode;
    thread_mode = *mode;
    *mode = prev;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuThreadExchangeStreamCaptureMode);

/* Every stream that joined must have been joined back: the nodes its next
 * operation would depend on are the origin's dependencies or their ancestors. */
static void mark_ancestors(struct sim_gnode *n, uint64_t epoch)
{
    if (n->mark == epoch)
        return;
    n->mark = epoch;
    for (size_t i = 0; i < n->nin; i++)
        mark_ancestors(n->in[i], epoch);
}

static bool all_joined(struct sim_capture *c)
{
    uint64_t epoch = ++mark_epoch;

    for (size_t i = 0; i < c->origin->ncdeps; i++)
        mark_ancestors(c->origin->cdeps[i], epoch);
    for (size_t i = 0; i < c->nstreams; i++) {
        struct sim_stream *t = c->streams[i];

        if (t == c->origin)
            continue;
        for (size_t j = 0; j < t->ncdeps; j++)
            if (t->cdeps[j]->mark != epoch)
                return false;
    }
    return true;
}

static CUresult end(CUstream hs, bool pt, CUgraph *out)
{
    struct sim_stream *s;
    struct sim_capture *c;
    struct sim_graph *g = NULL;
    bool owns = false;
    CUresult r;

    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    pthread_mutex_lock(&cap_lock);
    if (!(c = s->cap)) {
        r = CUDA_ERROR_ILLEGAL_STATE;           /* not capturing */
        goto out;
    }
    if (c->origin != s) {
        invalidate(c);
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        goto out;
    }
    if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != &thread_token) {
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;   /* the sequence goes on */
        goto out;
    }
    if (c->invalidated)
        r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    else if (!all_joined(c))
        r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    owns = c->owns_graph;
    g = cap_end(c);
out:
    pthread_mutex_unlock(&cap_lock);
    if (g && r == CUDA_SUCCESS) {
        *out = (CUgraph)g;
        return CUDA_SUCCESS;
    }
    if (g) {
        *out = NULL;
        if (owns)
            sim_graph_free(g);
    }
    return r;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    SIM_BEGIN();
    return end(hStream, false, phGraph);
}
SIM_EXPORT(cuStreamEndCapture);

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    SIM_BEGIN();
    return end(hStream, true, phGraph);
}
SIM_EXPORT(cuStreamEndCapture_ptsz);

static CUresult is_capturing(CUstream hs, bool pt, CUstreamCaptureStatus *st)
{
    struct sim_stream *s;
    CUresult r;

    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    pthread_mutex_lock(&cap_lock);
    /* A query: the blocking capture is not invalidated. */
    if (legacy_conflict(s, false))
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else if (!s->cap)
        *st = CU_STREAM_CAPTURE_STATUS_NONE;
    else
        *st = s->cap->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    SIM_BEGIN();
    return is_capturing(hStream, false, captureStatus);
}
SIM_EXPORT(cuStreamIsCapturing);

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    SIM_BEGIN();
    return is_capturing(hStream, true, captureStatus);
}
SIM_EXPORT(cuStreamIsCapturing_ptsz);

static CUresult capture_info(CUstream hs, bool pt, CUstreamCaptureStatus *st, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                             size_t *ndeps, bool edges_known)
{
    struct sim_stream *s;
    CUresult r;

    if (!st || (edges && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    pthread_mutex_lock(&cap_lock);
    if (legacy_conflict(s, false)) {
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        goto out;
    }
    if (!s->cap) {
        *st = CU_STREAM_CAPTURE_STATUS_NONE;
        goto out;
    }
    *st = s->cap->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id)
        *id = s->cap->id;
    if (s->cap->invalidated)
        goto out;
    if (graph)
        *graph = (CUgraph)s->cap->graph;
    if (deps)
        *deps = (const CUgraphNode *)s->cdeps;
    if (edges)
        *edges = s->cedges;
    if (ndeps)
        *ndeps = s->ncdeps;
    if (deps && !edges && edges_known)
        for (size_t i = 0; i < s->ncdeps; i++) {
            static const CUgraphEdgeData zero;
            if (memcmp(&s->cedges[i], &zero, sizeof(zero)))
                r = CUDA_ERROR_LOSSY_QUERY;
        }
out:
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
{
    SIM_BEGIN();
    return capture_info(hStream, false, captureStatus_out, id_out, NULL, NULL, NULL, NULL, false);
}
SIM_EXPORT(cuStreamGetCaptureInfo);

CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                     cuuint64_t *id_out)
{
    SIM_BEGIN();
    return capture_info(hStream, true, captureStatus_out, id_out, NULL, NULL, NULL, NULL, false);
}
SIM_EXPORT(cuStreamGetCaptureInfo_ptsz);

CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out)
{
    SIM_BEGIN();
    return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                        numDependencies_out, true);
}
SIM_EXPORT(cuStreamGetCaptureInfo_v2);

CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    SIM_BEGIN();
    return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                        numDependencies_out, true);
}
SIM_EXPORT(cuStreamGetCaptureInfo_v2_ptsz);

CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    SIM_BEGIN();
    return capture_info(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                        numDependencies_out, true);
}
SIM_EXPORT(cuStreamGetCaptureInfo_v3);

CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out,
                                        const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    SIM_BEGIN();
    return capture_info(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                        numDependencies_out, true);
}
SIM_EXPORT(cuStreamGetCaptureInfo_v3_ptsz);

static CUresult update_deps(CUstream hs, bool pt, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n,
                            unsigned flags)
{
    struct sim_stream *s;
    CUresult r;

    if (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES || (n && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    pthread_mutex_lock(&cap_lock);
    if (!s->cap) {
        r = CUDA_ERROR_ILLEGAL_STATE;
        goto out;
    }
    if ((r = entry_check(s)))
        goto out;
    for (size_t i = 0; i < n; i++)
        if (!sim_handle_ok(deps[i], SIM_MAGIC_GNODE) ||
            !sim_graph_has(s->cap->graph, (struct sim_gnode *)deps[i])) {
            r = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES ? deps_set(s, (struct sim_gnode *const *)deps, edges, n)
                                                    : deps_add(s, (struct sim_gnode *const *)deps, edges, n))
        r = CUDA_ERROR_OUT_OF_MEMORY;
out:
    pthread_mutex_unlock(&cap_lock);
    return r;
}

CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies, size_t numDependencies,
                                           unsigned int flags)
{
    SIM_BEGIN();
    return update_deps(hStream, false, dependencies, NULL, numDependencies, flags);
}
SIM_EXPORT(cuStreamUpdateCaptureDependencies);

CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream, CUgraphNode *dependencies,
                                                size_t numDependencies, unsigned int flags)
{
    SIM_BEGIN();
    return update_deps(hStream, true, dependencies, NULL, numDependencies, flags);
}
SIM_EXPORT(cuStreamUpdateCaptureDependencies_ptsz);

CUresult cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
                                              const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                              unsigned int flags)
{
    SIM_BEGIN();
    return update_deps(hStream, false, dependencies, dependencyData, numDependencies, flags);
}
SIM_EXPORT(cuStreamUpdateCaptureDependencies_v2);

CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream hStream, CUgraphNode *dependencies,
                                                   const CUgraphEdgeData *dependencyData,
                                                   size_t numDependencies, unsigned int flags)
{
    SIM_BEGIN();
    return update_deps(hStream, true, dependencies, dependencyData, numDependencies, flags);
}
SIM_EXPORT(cuStreamUpdateCaptureDependencies_v2_ptsz);
