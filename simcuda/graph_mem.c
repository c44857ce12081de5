/*
 * graph_mem.c - graph memory: allocation and free nodes, what a launch does
 * with them, cuDeviceGraphMemTrim and the graph memory attributes.
 *
 * As the driver documents (cuGraphAddMemAllocNode):
 *   - an allocation node's address is reserved when the node is made and
 *     stays fixed across instantiations and launches;
 *   - the allocation exists from its node to its free: a free node of its own
 *     graph (then nothing outside the graph may free it), a free node of
 *     another graph, cuMemFreeAsync or cuMemFree; until then it outlives the
 *     launch and stream work after the launch may use it;
 *   - relaunching while an allocation of the previous launch is unfreed is
 *     CUDA_ERROR_INVALID_VALUE, unless instantiated with AUTO_FREE_ON_LAUNCH;
 *   - physical memory stays with the device's graph pool after a free, for
 *     the next launch, until cuDeviceGraphMemTrim gives it back.
 * "Freed" and "outstanding" follow API order (the call); the address leaves
 * the translation map in stream order (when the free runs), so a use after
 * the free faults as it would on a GPU.
 */
#include "graph.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Guards every sim_gmem's state and the counters. Never held while taking
 * the map lock (the map lock may be held while this one is taken). */
static pthread_mutex_t gmem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_gmem *gmems;
static uint64_t used_now[SIM_MAX_DEVICES], used_high[SIM_MAX_DEVICES];
static uint64_t reserved_now[SIM_MAX_DEVICES], reserved_high[SIM_MAX_DEVICES];

static uint64_t page_round(uint64_t v)
{
    return sim_round_up(v, (uint64_t)sysconf(_SC_PAGESIZE));
}

/* ---- lifetime ---------------------------------------------------------------- */

static void backing_release(struct sim_gmem *m)
{
    if (!m->backing)
        return;
    sim_backing_free(m->backing, m->charge);
    sim_capacity_release(m->dev, m->charge);
    reserved_now[m->dev] -= m->charge;
    m->backing = NULL;
}

/* Nothing refers to it any more (gmem_lock held): unlink and free. */
static void maybe_destroy(struct sim_gmem *m)
{
    if (m->refs || m->outstanding || m->busy || m->range)
        return;
    for (struct sim_gmem **pp = &gmems; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    backing_release(m);
    sim_va_free(m->va);
    free(m);
}

void sim_gmem_ref(struct sim_gmem *m)
{
    pthread_mutex_lock(&gmem_lock);
    m->refs++;
    pthread_mutex_unlock(&gmem_lock);
}

void sim_gmem_unref(struct sim_gmem *m)
{
    pthread_mutex_lock(&gmem_lock);
    m->refs--;
    maybe_destroy(m);
    pthread_mutex_unlock(&gmem_lock);
}

static CUresult check_props(const CUDA_MEM_ALLOC_NODE_PARAMS *p, unsigned *mask)
{
    const CUmemPoolProps *pp = &p->poolProps;

    if (!p->bytesize || pp->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        pp->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (pp->location.id < 0 || pp->location.id >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    if (pp->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
        return CUDA_ERROR_NOT_SUPPORTED;    /* shareable graph memory is not simulated */
    if (p->accessDescCount > (size_t)sim_device_count() || (p->accessDescCount && !p->accessDescs))
        return CUDA_ERROR_INVALID_VALUE;
    *mask = 1u << pp->location.id;
    for (size_t i = 0; i < p->accessDescCount; i++) {
        const CUmemAccessDesc *a = &p->accessDescs[i];

        if (a->location.type != CU_MEM_LOCATION_TYPE_DEVICE || a->location.id < 0 ||
            a->location.id >= sim_device_count())
            return CUDA_ERROR_INVALID_VALUE;
        if (a->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            *mask |= 1u << a->location.id;
        else if (a->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
            return CUDA_ERROR_INVALID_VALUE;   /* read-only graph memory: not supported */
    }
    return CUDA_SUCCESS;
}

CUresult sim_gmem_create(struct sim_ctx *c, const CUDA_MEM_ALLOC_NODE_PARAMS *p, struct sim_gmem **out)
{
    struct sim_gmem *m;
    unsigned mask;
    CUresult r;

    if ((r = check_props(p, &mask)))
        return r;
    if (!(m = calloc(1, sizeof(*m))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->size = p->bytesize;
    m->charge = page_round(p->bytesize);
    m->dev = p->poolProps.location.id;
    m->ctx = c;
    m->access_mask = mask;
    m->va = sim_va_alloc(m->size, m->size >= SIM_GRANULARITY ? SIM_GRANULARITY : SIM_ALLOC_ALIGN, 0);
    if (!m->va) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->refs = 1;
    pthread_mutex_lock(&gmem_lock);
    m->next = gmems;
    gmems = m;
    pthread_mutex_unlock(&gmem_lock);
    *out = m;
    return CUDA_SUCCESS;
}

static struct sim_gmem *find_locked(uint64_t va, bool exact)
{
    for (struct sim_gmem *m = gmems; m; m = m->next)
        if (exact ? m->va == va : (va >= m->va && va - m->va < m->size))
            return m;
    return NULL;
}

struct sim_gmem *sim_gmem_find(uint64_t va, bool exact)
{
    struct sim_gmem *m;

    pthread_mutex_lock(&gmem_lock);
    m = find_locked(va, exact);
    pthread_mutex_unlock(&gmem_lock);
    return m;
}

bool sim_gmem_covered(uint64_t va, uint64_t len)
{
    struct sim_gmem *m;
    bool ok;

    pthread_mutex_lock(&gmem_lock);
    m = find_locked(va, false);
    ok = m && len <= m->size - (va - m->va);
    pthread_mutex_unlock(&gmem_lock);
    return ok;
}

/* ---- nodes ---------------------------------------------------------------------- */

CUresult sim_gmem_alloc_node_new(struct sim_ctx *c, const CUDA_MEM_ALLOC_NODE_PARAMS *p,
                                 struct sim_gnode **out)
{
    struct sim_gnode *n;
    struct sim_gmem *m;
    CUresult r;

    if ((r = sim_gmem_create(c, p, &m)))
        return r;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_MEM_ALLOC)))
        goto nomem;
    n->u.alloc.p = *p;
    n->u.alloc.p.dptr = m->va;
    if (p->accessDescCount) {
        if (!(n->u.alloc.access = malloc(p->accessDescCount * sizeof(*p->accessDescs))))
            goto nomem;
        memcpy(n->u.alloc.access, p->accessDescs, p->accessDescCount * sizeof(*p->accessDescs));
    }
    n->u.alloc.p.accessDescs = n->u.alloc.access;
    n->u.alloc.mem = m;
    *out = n;
    return CUDA_SUCCESS;
nomem:
    if (n)
        n->u.alloc.mem = NULL;
    sim_gnode_free(n);
    sim_gmem_unref(m);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* A free node of g for dptr: only graph allocations, once in their own graph,
 * or in other graphs if their own graph does not free them. */
CUresult sim_gmem_free_node_new(struct sim_graph *g, CUdeviceptr dptr, struct sim_gnode **out)
{
    struct sim_gnode *n;
    struct sim_gmem *m;
    CUresult r = CUDA_SUCCESS;

    pthread_mutex_lock(&gmem_lock);
    m = find_locked(dptr, true);
    if (!m) {
        r = CUDA_ERROR_INVALID_VALUE;    /* not an address an allocation node returned */
    } else {
        for (struct sim_gnode *x = g->head; x; x = x->next)
            if (x->type == CU_GRAPH_NODE_TYPE_MEM_FREE && x->u.free.mem == m)
                r = CUDA_ERROR_INVALID_VALUE;       /* twice in one graph */
        if (m->owner == g ? m->freed_elsewhere : m->freed_in_graph)
            r = CUDA_ERROR_INVALID_VALUE;           /* freed in both its graph and another */
    }
    if (r == CUDA_SUCCESS) {
        if (m->owner == g)
            m->freed_in_graph = true;
        else
            m->freed_elsewhere = true;
        m->refs++;
    }
    pthread_mutex_unlock(&gmem_lock);
    if (r)
        return r;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_MEM_FREE))) {
        sim_gmem_unref(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    n->u.free.dptr = dptr;
    n->u.free.mem = m;
    *out = n;
    return CUDA_SUCCESS;
}

static CUresult add_to(CUgraphNode *out, struct sim_graph *g, const CUgraphNode *deps,
                       const CUgraphEdgeData *edges, size_t ndeps, struct sim_gnode *n)
{
    CUresult r = sim_graph_add(g, n, (struct sim_gnode *const *)deps, edges, ndeps);

    if (r) {
        sim_gnode_free(n);
        return r;
    }
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

CUresult sim_gmem_add_alloc_node(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                                 const CUgraphEdgeData *edges, size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct sim_graph *g;
    struct sim_gnode *n;
    struct sim_ctx *c = NULL;
    CUresult r;

    if (!out || !p || sim_graph_get(hGraph, &g) || g->moved)
        return CUDA_ERROR_INVALID_VALUE;
    sim_ctx_current(&c);
    if ((r = sim_gmem_alloc_node_new(c, p, &n)))
        return r;
    n->u.alloc.mem->owner = g;
    if ((r = add_to(out, g, deps, edges, ndeps, n)))
        return r;
    p->dptr = n->u.alloc.p.dptr;
    return CUDA_SUCCESS;
}

CUresult sim_gmem_add_free_node(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                                const CUgraphEdgeData *edges, size_t ndeps, CUdeviceptr dptr)
{
    struct sim_graph *g;
    struct sim_gnode *n;
    CUresult r;

    if (!out || sim_graph_get(hGraph, &g) || g->moved)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_gmem_free_node_new(g, dptr, &n)))
        return r;
    return add_to(out, g, deps, edges, ndeps, n);
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    SIM_BEGIN();
    return sim_gmem_add_alloc_node(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}
SIM_EXPORT(cuGraphAddMemAllocNode);
SIM_PARTIAL(cuGraphAddMemAllocNode,
    "shareable handle types: CUDA_ERROR_NOT_SUPPORTED; read-only access: "
    "CUDA_ERROR_INVALID_VALUE");

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!params_out || sim_gnode_get(hNode, &n) || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    *params_out = n->u.alloc.p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphMemAllocNodeGetParams);

CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                               size_t numDependencies, CUdeviceptr dptr)
{
    SIM_BEGIN();
    return sim_gmem_add_free_node(phGraphNode, hGraph, dependencies, NULL, numDependencies, dptr);
}
SIM_EXPORT(cuGraphAddMemFreeNode);

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!dptr_out || sim_gnode_get(hNode, &n) || n->type != CU_GRAPH_NODE_TYPE_MEM_FREE)
        return CUDA_ERROR_INVALID_VALUE;
    *dptr_out = n->u.free.dptr;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphMemFreeNodeGetParams);

/* ---- launches ---------------------------------------------------------------------- */

struct walk {
    struct sim_gmem **allocs, **frees;
    size_t nalloc, nfree, cap_a, cap_f;
    bool nomem;
};

static void walk_push(struct sim_gmem ***v, size_t *n, size_t *cap, struct sim_gmem *m, bool *nomem)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        struct sim_gmem **nv = realloc(*v, ncap * sizeof(*nv));

        if (!nv) {
            *nomem = true;
            return;
        }
        *v = nv;
        *cap = ncap;
    }
    (*v)[(*n)++] = m;
}

/* The allocations and frees of g and its (moved) children. */
static void walk_graph(struct sim_graph *g, struct walk *w)
{
    for (struct sim_gnode *n = g->head; n; n = n->next) {
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            walk_push(&w->allocs, &w->nalloc, &w->cap_a, n->u.alloc.mem, &w->nomem);
        else if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
            walk_push(&w->frees, &w->nfree, &w->cap_f, n->u.free.mem, &w->nomem);
        else if (n->type == CU_GRAPH_NODE_TYPE_GRAPH)
            walk_graph(n->u.child, w);
    }
}

static bool in_list(struct sim_gmem *const *v, size_t n, const struct sim_gmem *m)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == m)
            return true;
    return false;
}

/* Physical memory for m, charged now: a launch may fail with OUT_OF_MEMORY. */
static CUresult back(struct sim_gmem *m)
{
    CUresult r;

    if (m->backing)
        return CUDA_SUCCESS;
    if ((r = sim_capacity_charge(m->dev, m->charge)))
        return r;
    if (!(m->backing = sim_backing_alloc(m->charge))) {
        sim_capacity_release(m->dev, m->charge);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    reserved_now[m->dev] += m->charge;
    if (reserved_now[m->dev] > reserved_high[m->dev])
        reserved_high[m->dev] = reserved_now[m->dev];
    return CUDA_SUCCESS;
}

CUresult sim_gmem_launch_prepare(struct sim_exec *x, bool upload_only, struct sim_gmem_launch *l)
{
    struct walk w = { 0 };
    bool autofree = x->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
    CUresult r = CUDA_SUCCESS;

    memset(l, 0, sizeof(*l));
    walk_graph(x->g, &w);
    if (w.nomem) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (!w.nalloc && !w.nfree)
        goto out;
    pthread_mutex_lock(&gmem_lock);
    /* Checks first: a refused launch changes nothing but reserved memory. */
    for (size_t i = 0; i < w.nalloc && !r; i++)
        if (w.allocs[i]->outstanding && !autofree && !upload_only)
            r = CUDA_ERROR_INVALID_VALUE;       /* unfreed from the previous launch */
    for (size_t i = 0; i < w.nfree && !r; i++)
        if (!in_list(w.allocs, w.nalloc, w.frees[i]) && !w.frees[i]->outstanding && !upload_only)
            r = CUDA_ERROR_INVALID_VALUE;       /* freeing what is not allocated */
    for (size_t i = 0; i < w.nalloc && !r; i++)
        r = back(w.allocs[i]);
    if (r || upload_only) {
        pthread_mutex_unlock(&gmem_lock);
        goto out;
    }
    l->n = w.nalloc + w.nfree;
    l->mems = malloc(l->n * sizeof(*l->mems));
    l->was_outstanding = malloc(l->n * sizeof(*l->was_outstanding));
    if (!l->mems || !l->was_outstanding) {
        pthread_mutex_unlock(&gmem_lock);
        free(l->mems);
        free(l->was_outstanding);
        memset(l, 0, sizeof(*l));
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < l->n; i++) {
        struct sim_gmem *m = i < w.nalloc ? w.allocs[i] : w.frees[i - w.nalloc];

        l->mems[i] = m;
        l->was_outstanding[i] = m->outstanding;
        m->busy++;
    }
    /* What the launch leaves allocated, and what it frees, in API order. */
    for (size_t i = 0; i < w.nalloc; i++)
        w.allocs[i]->outstanding = !in_list(w.frees, w.nfree, w.allocs[i]);
    for (size_t i = 0; i < w.nfree; i++)
        if (!in_list(w.allocs, w.nalloc, w.frees[i]))
            w.frees[i]->outstanding = false;
    pthread_mutex_unlock(&gmem_lock);
out:
    free(w.allocs);
    free(w.frees);
    return r;
}

void sim_gmem_launch_abort(struct sim_gmem_launch *l)
{
    pthread_mutex_lock(&gmem_lock);
    for (size_t i = 0; i < l->n; i++) {
        l->mems[i]->outstanding = l->was_outstanding[i];
        l->mems[i]->busy--;
    }
    for (size_t i = 0; i < l->n; i++)
        maybe_destroy(l->mems[i]);
    pthread_mutex_unlock(&gmem_lock);
    free(l->mems);
    free(l->was_outstanding);
    memset(l, 0, sizeof(*l));
}

void sim_gmem_launch_unmark(struct sim_gmem_launch *l)
{
    pthread_mutex_lock(&gmem_lock);
    for (size_t i = 0; i < l->n; i++)
        l->mems[i]->outstanding = l->was_outstanding[i];
    pthread_mutex_unlock(&gmem_lock);
    sim_gmem_launch_commit(l);
}

void sim_gmem_launch_commit(struct sim_gmem_launch *l)
{
    free(l->mems);
    free(l->was_outstanding);
    memset(l, 0, sizeof(*l));
}

void sim_gmem_launch_done(struct sim_gmem *m)
{
    pthread_mutex_lock(&gmem_lock);
    m->busy--;
    maybe_destroy(m);
    pthread_mutex_unlock(&gmem_lock);
}

/* ---- on the worker: the allocation appears and goes ------------------------------ */

void sim_gmem_exec_map(struct sim_gmem *m)
{
    struct sim_range *r = calloc(1, sizeof(*r));

    pthread_mutex_lock(&gmem_lock);
    if (m->range || !r || !m->backing) {
        /* Mapped already (an AUTO_FREE relaunch keeps it), or no memory:
         * later use faults, as a failed allocation would. */
        pthread_mutex_unlock(&gmem_lock);
        free(r);
        return;
    }
    r->va = m->va;
    r->size = m->size;
    r->host = m->backing;
    r->kind = SIM_R_GRAPH;
    r->ctx = m->ctx;
    r->dev = m->dev;
    r->id = sim_next_buffer_id();
    r->gmem = m;
    m->range = r;
    used_now[m->dev] += m->charge;
    if (used_now[m->dev] > used_high[m->dev])
        used_high[m->dev] = used_now[m->dev];
    pthread_mutex_unlock(&gmem_lock);
    sim_map_wrlock();
    if (sim_map_insert(r))
        sim_log("graph allocation at 0x%llx overlaps other memory", (unsigned long long)r->va);
    sim_map_unlock();
}

/* The last unpin of an allocation freed while device work used it: its
 * backing was kept for that work (busy) until now. */
static void range_release_late(struct sim_range *r)
{
    struct sim_gmem *m = r->gmem;

    free(r);
    pthread_mutex_lock(&gmem_lock);
    m->busy--;
    maybe_destroy(m);
    pthread_mutex_unlock(&gmem_lock);
}

void sim_gmem_exec_unmap(struct sim_gmem *m)
{
    struct sim_range *r;

    pthread_mutex_lock(&gmem_lock);
    r = m->range;
    m->range = NULL;
    if (r)
        used_now[m->dev] -= m->charge;
    pthread_mutex_unlock(&gmem_lock);
    if (!r)
        return;
    sim_map_wrlock();
    sim_map_remove(r);
    sim_map_unlock();
    pthread_mutex_lock(&gmem_lock);
    m->busy++;          /* a pin may hold its backing: not trimmed meanwhile */
    pthread_mutex_unlock(&gmem_lock);
    if (sim_range_defer(r, range_release_late))
        return;
    range_release_late(r);
}

/* ---- frees outside graphs ---------------------------------------------------------- */

/* The allocation at p, marked freed (API order) and busy for the unmap. */
static CUresult take_for_free(uint64_t p, struct sim_gmem **out)
{
    struct sim_gmem *m;
    CUresult r = CUDA_SUCCESS;

    pthread_mutex_lock(&gmem_lock);
    m = find_locked(p, true);
    if (!m)
        r = CUDA_ERROR_NOT_FOUND;
    else if (!m->outstanding || m->freed_in_graph)
        r = CUDA_ERROR_INVALID_VALUE;       /* not allocated now, or its graph frees it */
    else {
        m->outstanding = false;
        m->busy++;
    }
    pthread_mutex_unlock(&gmem_lock);
    *out = m;
    return r;
}

CUresult sim_gmem_free_async(struct sim_stream *s, uint64_t p)
{
    struct sim_gmem *m;
    struct sim_op *op;
    CUresult r;

    if ((r = take_for_free(p, &m)))
        return r;
    if (!(op = sim_op_new(SIM_OP_GMEM_UNMAP))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto undo;
    }
    op->u.gmem = m;
    if ((r = sim_submit(s, op, NULL, 0, NULL)) == CUDA_SUCCESS)
        return CUDA_SUCCESS;      /* the op drops busy when freed */
    return r;
undo:
    pthread_mutex_lock(&gmem_lock);
    m->outstanding = true;
    m->busy--;
    pthread_mutex_unlock(&gmem_lock);
    return r;
}

CUresult sim_gmem_free_sync(struct sim_ctx *c, uint64_t p)
{
    struct sim_gmem *m;
    CUresult r;

    if ((r = take_for_free(p, &m)))
        return r;
    r = sim_ctx_sync(c);
    sim_gmem_exec_unmap(m);
    sim_gmem_launch_done(m);
    return r;
}

void sim_gmem_release_ctx(struct sim_ctx *c)
{
    for (;;) {
        struct sim_gmem *m = NULL;

        pthread_mutex_lock(&gmem_lock);
        for (struct sim_gmem *x = gmems; x; x = x->next)
            if (x->ctx == c && (x->range || x->outstanding)) {
                m = x;
                m->outstanding = false;
                m->busy++;
                break;
            }
        pthread_mutex_unlock(&gmem_lock);
        if (!m)
            return;
        sim_gmem_exec_unmap(m);
        sim_gmem_launch_done(m);
    }
}

/* ---- trim and attributes ----------------------------------------------------------- */

CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    SIM_BEGIN();
    if (device < 0 || device >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&gmem_lock);
    for (struct sim_gmem *m = gmems; m; m = m->next)
        if (m->dev == device && !m->busy && !m->range && !m->outstanding)
            backing_release(m);
    pthread_mutex_unlock(&gmem_lock);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGraphMemTrim);

CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    if (device < 0 || device >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&gmem_lock);
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = used_now[device]; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = used_high[device]; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = reserved_now[device]; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = reserved_high[device]; break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&gmem_lock);
    return r;
}
SIM_EXPORT(cuDeviceGetGraphMemAttribute);
SIM_PARTIAL(cuDeviceGetGraphMemAttribute,
            "USED_MEM_CURRENT counts an allocation from when its launch runs on the stream until its free "
            "runs; the driver counts it from the cuGraphLaunch call, and after the free until "
            "cuDeviceGraphMemTrim (cuda-core's graph memory tests)");

/* Only the high watermarks can be set, and only to zero (a reset). */
CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    if (device < 0 || device >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value || *(cuuint64_t *)value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&gmem_lock);
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        used_high[device] = used_now[device];
    else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        reserved_high[device] = reserved_now[device];
    else
        r = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&gmem_lock);
    return r;
}
SIM_EXPORT(cuDeviceSetGraphMemAttribute);
