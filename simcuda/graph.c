/*
 * graph.c - graphs and their nodes: creation, parameters, edges, clones,
 * queries, DOT output and user objects (graph.h explains the structures).
 *
 * Handles of graphs and nodes are checked against the handle set: a stale or
 * foreign handle answers CUDA_ERROR_INVALID_VALUE, as the driver's graph API
 * documents for its arguments.
 */
#include "graph.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- handles ----------------------------------------------------------------- */

CUresult sim_graph_get(CUgraph h, struct sim_graph **out)
{
    struct sim_graph *g = (struct sim_graph *)h;

    if (!sim_handle_ok(g, SIM_MAGIC_GRAPH))
        return CUDA_ERROR_INVALID_VALUE;
    *out = g;
    return CUDA_SUCCESS;
}

CUresult sim_gnode_get(CUgraphNode h, struct sim_gnode **out)
{
    struct sim_gnode *n = (struct sim_gnode *)h;

    if (!sim_handle_ok(n, SIM_MAGIC_GNODE))
        return CUDA_ERROR_INVALID_VALUE;
    *out = n;
    return CUDA_SUCCESS;
}

/* ---- user objects ------------------------------------------------------------ */

struct sim_uobj {
    uint32_t magic;
    int refs;                      /* atomic */
    void *ptr;
    CUhostFn destroy;
};

static void *uobj_destructor(void *arg)
{
    struct sim_uobj *o = arg;

    o->destroy(o->ptr);
    free(o);
    return NULL;
}

/* The last reference went: the destructor runs on a thread of its own, as on
 * the driver's internal thread (it may not call CUDA, and must not run under
 * the caller's locks). */
static void uobj_release(struct sim_uobj *o, unsigned count)
{
    pthread_attr_t attr;
    pthread_t t;

    if (__atomic_sub_fetch(&o->refs, (int)count, __ATOMIC_ACQ_REL) > 0)
        return;
    sim_handle_del(o);
    o->magic = 0;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, uobj_destructor, o))
        uobj_destructor(o);
    pthread_attr_destroy(&attr);
}

static CUresult uobj_get(CUuserObject h, struct sim_uobj **out)
{
    struct sim_uobj *o = (struct sim_uobj *)h;

    if (!sim_handle_ok(o, SIM_MAGIC_UOBJ))
        return CUDA_ERROR_INVALID_VALUE;
    *out = o;
    return CUDA_SUCCESS;
}

CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                            unsigned int initialRefcount, unsigned int flags)
{
    struct sim_uobj *o;

    SIM_BEGIN();
    if (!object_out || !destroy || !initialRefcount || initialRefcount > INT32_MAX ||
        flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(o = calloc(1, sizeof(*o))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->magic = SIM_MAGIC_UOBJ;
    o->refs = (int)initialRefcount;
    o->ptr = ptr;
    o->destroy = destroy;
    sim_handle_add(o);
    *object_out = (CUuserObject)o;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuUserObjectCreate);

CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    struct sim_uobj *o;
    CUresult r;

    SIM_BEGIN();
    if (!count || count > INT32_MAX || (r = uobj_get(object, &o)))
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_add_fetch(&o->refs, (int)count, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuUserObjectRetain);

CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    struct sim_uobj *o;

    SIM_BEGIN();
    if (!count || count > INT32_MAX || uobj_get(object, &o) ||
        __atomic_load_n(&o->refs, __ATOMIC_ACQUIRE) < (int)count)
        return CUDA_ERROR_INVALID_VALUE;
    uobj_release(o, count);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuUserObjectRelease);

static struct sim_uobj_ref *uobj_ref_of(struct sim_graph *g, struct sim_uobj *o)
{
    for (struct sim_uobj_ref *r = g->uobjs; r; r = r->next)
        if (r->obj == o)
            return r;
    return NULL;
}

static int uobj_ref_add(struct sim_graph *g, struct sim_uobj *o, unsigned count)
{
    struct sim_uobj_ref *r = uobj_ref_of(g, o);

    if (!r) {
        if (!(r = calloc(1, sizeof(*r))))
            return -ENOMEM;
        r->obj = o;
        r->next = g->uobjs;
        g->uobjs = r;
    }
    r->count += count;
    return 0;
}

CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count,
                                 unsigned int flags)
{
    struct sim_graph *g;
    struct sim_uobj *o;

    SIM_BEGIN();
    if (!count || count > INT32_MAX || (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE) ||
        sim_graph_get(graph, &g) || uobj_get(object, &o))
        return CUDA_ERROR_INVALID_VALUE;
    if (uobj_ref_add(g, o, count))
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* MOVE takes the caller's references; otherwise the graph gets new ones. */
    if (!(flags & CU_GRAPH_USER_OBJECT_MOVE))
        __atomic_add_fetch(&o->refs, (int)count, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphRetainUserObject);

CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count)
{
    struct sim_graph *g;
    struct sim_uobj *o;
    struct sim_uobj_ref *r;

    SIM_BEGIN();
    if (!count || sim_graph_get(graph, &g) || uobj_get(object, &o) ||
        !(r = uobj_ref_of(g, o)) || r->count < count)
        return CUDA_ERROR_INVALID_VALUE;
    r->count -= count;
    uobj_release(o, count);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphReleaseUserObject);

static void uobj_refs_drop(struct sim_graph *g)
{
    for (struct sim_uobj_ref *r = g->uobjs, *n; r; r = n) {
        n = r->next;
        if (r->count)
            uobj_release(r->obj, r->count);
        free(r);
    }
    g->uobjs = NULL;
}

/* A copy holds references of its own. */
static int uobj_refs_copy(struct sim_graph *dst, const struct sim_graph *src)
{
    for (struct sim_uobj_ref *r = src->uobjs; r; r = r->next) {
        if (!r->count)
            continue;
        if (uobj_ref_add(dst, r->obj, r->count))
            return -ENOMEM;
        __atomic_add_fetch(&r->obj->refs, (int)r->count, __ATOMIC_RELAXED);
    }
    return 0;
}

/* ---- nodes and graphs ---------------------------------------------------------- */

struct sim_gnode *sim_gnode_new(CUgraphNodeType type)
{
    struct sim_gnode *n = calloc(1, sizeof(*n));

    if (!n)
        return NULL;
    n->magic = SIM_MAGIC_GNODE;
    n->type = type;
    n->enabled = true;
    return n;
}

static void node_params_free(struct sim_gnode *n)
{
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        free(n->u.kernel.argbuf);
        n->u.kernel.argbuf = NULL;
        break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        sim_graph_free(n->u.child);
        n->u.child = NULL;
        break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        if (n->u.event)
            sim_event_unref(n->u.event);
        n->u.event = NULL;
        break;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        if (n->u.alloc.mem && n->u.alloc.mem->owner == n->graph)
            n->u.alloc.mem->owner = NULL;
        if (n->u.alloc.mem)
            sim_gmem_unref(n->u.alloc.mem);
        free(n->u.alloc.access);
        break;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        if (n->u.free.mem)
            sim_gmem_unref(n->u.free.mem);
        break;
    default:
        break;
    }
}

void sim_gnode_free(struct sim_gnode *n)
{
    if (!n)
        return;
    if (n->graph)
        sim_handle_del(n);
    node_params_free(n);
    free(n->in);
    free(n->out);
    free(n->in_edge);
    free(n->out_edge);
    n->magic = 0;
    free(n);
}

struct sim_graph *sim_graph_new(void)
{
    struct sim_graph *g = calloc(1, sizeof(*g));

    if (!g)
        return NULL;
    g->magic = SIM_MAGIC_GRAPH;
    sim_handle_add(g);
    return g;
}

void sim_graph_free(struct sim_graph *g)
{
    if (!g)
        return;
    sim_exec_forget_origin(g);
    for (struct sim_gnode *n = g->head, *next; n; n = next) {
        next = n->next;
        sim_gnode_free(n);
    }
    uobj_refs_drop(g);
    sim_handle_del(g);
    g->magic = 0;
    free(g);
}

bool sim_graph_has(struct sim_graph *g, struct sim_gnode *n)
{
    return n && n->graph == g;
}

static int edge_push(struct sim_gnode ***v, CUgraphEdgeData **e, size_t *n, size_t *cap,
                     struct sim_gnode *x, const CUgraphEdgeData *d)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4;
        struct sim_gnode **nv = realloc(*v, ncap * sizeof(**v));
        CUgraphEdgeData *ne;

        if (!nv)
            return -ENOMEM;
        *v = nv;
        if (!(ne = realloc(*e, ncap * sizeof(**e))))
            return -ENOMEM;
        *e = ne;
        *cap = ncap;
    }
    (*v)[*n] = x;
    if (d)
        (*e)[*n] = *d;
    else
        memset(&(*e)[*n], 0, sizeof(**e));
    (*n)++;
    return 0;
}

int sim_gnode_link(struct sim_gnode *from, struct sim_gnode *to, const CUgraphEdgeData *e)
{
    if (edge_push(&to->in, &to->in_edge, &to->nin, &to->in_cap, from, e))
        return -ENOMEM;
    if (edge_push(&from->out, &from->out_edge, &from->nout, &from->out_cap, to, e)) {
        to->nin--;
        return -ENOMEM;
    }
    return 0;
}

static long edge_index(struct sim_gnode *const *v, size_t n, const struct sim_gnode *x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return (long)i;
    return -1;
}

static void edge_erase(struct sim_gnode **v, CUgraphEdgeData *e, size_t *n, size_t i)
{
    memmove(&v[i], &v[i + 1], (*n - i - 1) * sizeof(*v));
    memmove(&e[i], &e[i + 1], (*n - i - 1) * sizeof(*e));
    (*n)--;
}

static void gnode_unlink(struct sim_gnode *from, struct sim_gnode *to)
{
    long i = edge_index(to->in, to->nin, from);
    long j = edge_index(from->out, from->nout, to);

    if (i >= 0)
        edge_erase(to->in, to->in_edge, &to->nin, (size_t)i);
    if (j >= 0)
        edge_erase(from->out, from->out_edge, &from->nout, (size_t)j);
}

static bool edge_data_zero(const CUgraphEdgeData *e)
{
    static const CUgraphEdgeData zero;

    return !e || !memcmp(e, &zero, sizeof(zero));
}

/* Edge data the driver accepts: ports only out of kernel nodes, no "to" port,
 * programmatic edges between kernels only, reserved bytes zero. */
static bool edge_data_ok(const struct sim_gnode *from, const struct sim_gnode *to,
                         const CUgraphEdgeData *e)
{
    static const unsigned char zero[sizeof(e->reserved)];

    if (!e)
        return true;
    if (e->to_port || memcmp(e->reserved, zero, sizeof(zero)) ||
        e->type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC || e->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER)
        return false;
    if ((e->from_port || e->type) && from->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return false;
    if (e->type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC && to->type != CU_GRAPH_NODE_TYPE_KERNEL)
        return false;
    return true;
}

CUresult sim_graph_add(struct sim_graph *g, struct sim_gnode *n, struct sim_gnode *const *deps,
                       const CUgraphEdgeData *edges, size_t ndeps)
{
    size_t linked = 0;

    if (ndeps && !deps)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < ndeps; i++) {
        if (!sim_handle_ok(deps[i], SIM_MAGIC_GNODE) || !sim_graph_has(g, deps[i]) ||
            !edge_data_ok(deps[i], n, edges ? &edges[i] : NULL))
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (deps[j] == deps[i])
                return CUDA_ERROR_INVALID_VALUE;     /* no duplicate entries */
    }
    for (; linked < ndeps; linked++)
        if (sim_gnode_link(deps[linked], n, edges ? &edges[linked] : NULL))
            goto nomem;
    n->graph = g;
    n->seq = g->next_seq++;
    n->prev = g->tail;
    n->next = NULL;
    if (g->tail)
        g->tail->next = n;
    else
        g->head = n;
    g->tail = n;
    g->nnodes++;
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
        g->nmem++;
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH)
        g->nmem += n->u.child->nmem;
    sim_handle_add(n);
    return CUDA_SUCCESS;
nomem:
    while (linked--)
        gnode_unlink(deps[linked], n);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Removes n from its graph and frees it (edges severed). */
static void graph_remove(struct sim_gnode *n)
{
    struct sim_graph *g = n->graph;

    while (n->nin)
        gnode_unlink(n->in[0], n);
    while (n->nout)
        gnode_unlink(n, n->out[0]);
    if (n->prev)
        n->prev->next = n->next;
    else
        g->head = n->next;
    if (n->next)
        n->next->prev = n->prev;
    else
        g->tail = n->prev;
    g->nnodes--;
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH)
        g->nmem -= n->u.child->nmem;
    sim_gnode_free(n);
}

/* ---- parameters ------------------------------------------------------------------ */

static bool is_set_attr(CUlaunchAttributeID id)
{
    switch (id) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        return true;
    default:
        return false;
    }
}

CUresult sim_knode_set(struct sim_knode *kn, CUfunction func, CUkernel kern, CUcontext ctx,
                       const unsigned grid[3], const unsigned block[3], unsigned shared,
                       void **params, void **extra)
{
    struct sim_ctx *c = NULL;
    struct sim_kfn k;
    void *argbuf = NULL, **pv = NULL;
    CUfunction h = func ? func : (CUfunction)kern;
    CUresult r;

    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    if (!func) {
        /* A CUkernel runs in the context given, else the current one. */
        if (ctx ? sim_ctx_check(ctx, &c) : sim_ctx_current(&c))
            return CUDA_ERROR_INVALID_CONTEXT;
    } else {
        c = sim_ctx_current_raw();
    }
    if ((r = sim_func_resolve(h, c, &k)))
        return r;
    if ((r = sim_check_dims(grid, block, shared)))
        return r;
    if (extra && extra[0] != CU_LAUNCH_PARAM_END)
        return CUDA_ERROR_NOT_SUPPORTED;    /* packed arguments are not simulated */
    if (!k.meta) {
        sim_log("graph node of kernel %s: its argument sizes are unknown (no SIMCUDA_KERNEL_PARAMS)",
                k.name);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (k.meta[0] && !params)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_args_copy(k.meta, params, &argbuf, &pv))
        return CUDA_ERROR_OUT_OF_MEMORY;
    free(kn->argbuf);
    kn->func = h;
    kn->k = k;
    memcpy(kn->grid, grid, sizeof(kn->grid));
    memcpy(kn->block, block, sizeof(kn->block));
    kn->shared = shared;
    kn->argbuf = argbuf;
    kn->params = pv;
    return CUDA_SUCCESS;
}

static CUresult knode_from_params(struct sim_knode *kn, const CUDA_KERNEL_NODE_PARAMS *p)
{
    unsigned grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ };
    unsigned block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };

    return sim_knode_set(kn, p->func, p->kern, p->ctx, grid, block, p->sharedMemBytes,
                         p->kernelParams, p->extra);
}

static void knode_to_params(const struct sim_knode *kn, CUDA_KERNEL_NODE_PARAMS *p)
{
    memset(p, 0, sizeof(*p));
    if (sim_is_kernel(kn->func)) {
        p->kern = (CUkernel)kn->func;
        p->ctx = (CUcontext)kn->k.ctx;
    } else {
        p->func = kn->func;
    }
    p->gridDimX = kn->grid[0], p->gridDimY = kn->grid[1], p->gridDimZ = kn->grid[2];
    p->blockDimX = kn->block[0], p->blockDimY = kn->block[1], p->blockDimZ = kn->block[2];
    p->sharedMemBytes = kn->shared;
    p->kernelParams = kn->params;
}

static CUresult memcpy_check(const CUDA_MEMCPY3D *p, CUcontext ctx, struct sim_ctx **out)
{
    struct sim_copy c;
    CUresult r;

    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx ? sim_ctx_check(ctx, out) : sim_ctx_current(out))
        return CUDA_ERROR_INVALID_CONTEXT;
    if ((r = sim_copy_from_3d(p, &c)))
        return r;
    if (!c.width || !c.height || !c.depth)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_copy_check(&c);
}

static CUresult memset_check(const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx, struct sim_ctx **out)
{
    unsigned e;

    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx ? sim_ctx_check(ctx, out) : sim_ctx_current(out))
        return CUDA_ERROR_INVALID_CONTEXT;
    e = p->elementSize;
    if ((e != 1 && e != 2 && e != 4) || !p->width || !p->height || p->dst % e)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->height > 1 && (p->pitch < p->width * e || p->pitch % e))
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_rows_covered(p->dst, p->width * e, p->height, p->height > 1 ? p->pitch : p->width * e))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Copies what a node of the same type must hold of src's parameters. Event
 * and graph-memory references are taken; arguments and child graphs copied. */
CUresult sim_gnode_copy_params(struct sim_gnode *dst, const struct sim_gnode *src)
{
    switch (src->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const struct sim_knode *k = &src->u.kernel;
        void *buf = NULL, **pv = NULL;

        if (sim_args_copy(k->k.meta, k->params, &buf, &pv))
            return CUDA_ERROR_OUT_OF_MEMORY;
        free(dst->u.kernel.argbuf);
        dst->u.kernel = *k;
        dst->u.kernel.argbuf = buf;
        dst->u.kernel.params = pv;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_GRAPH: {
        struct sim_graph *c = sim_graph_clone(src->u.child);

        if (!c)
            return CUDA_ERROR_OUT_OF_MEMORY;
        sim_graph_free(dst->u.child);
        dst->u.child = c;
        c->parent = dst;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        sim_event_ref(src->u.event);
        if (dst->u.event)
            sim_event_unref(dst->u.event);
        dst->u.event = src->u.event;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        size_t n = src->u.alloc.p.accessDescCount;
        CUmemAccessDesc *a = n ? malloc(n * sizeof(*a)) : NULL;

        if (n && !a)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (n)
            memcpy(a, src->u.alloc.access, n * sizeof(*a));
        sim_gmem_ref(src->u.alloc.mem);
        dst->u.alloc = src->u.alloc;
        dst->u.alloc.access = a;
        dst->u.alloc.p.accessDescs = a;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        if (src->u.free.mem)
            sim_gmem_ref(src->u.free.mem);
        dst->u.free = src->u.free;
        return CUDA_SUCCESS;
    default:
        dst->u = src->u;
        return CUDA_SUCCESS;
    }
}

/* Renumbers g's nodes 0..n-1 in insertion order (seq is only ever compared). */
static void renumber(struct sim_graph *g)
{
    uint64_t i = 0;

    for (struct sim_gnode *n = g->head; n; n = n->next)
        n->seq = i++;
    g->next_seq = i;
}

struct sim_graph *sim_graph_clone(struct sim_graph *g)
{
    struct sim_graph *c = sim_graph_new();
    struct sim_gnode **map = calloc(g->nnodes ? g->nnodes : 1, sizeof(*map));
    size_t i = 0, added = 0;

    if (!c || !map)
        goto err;
    renumber(g);
    for (struct sim_gnode *n = g->head; n; n = n->next, i++) {
        if (!(map[i] = sim_gnode_new(n->type)) || sim_gnode_copy_params(map[i], n))
            goto err;
        map[i]->clone_of = n;
        map[i]->enabled = n->enabled;
    }
    /* Nodes first, in insertion order; then each node's dependencies in their
     * order, so that a clone pairs with its original edge by edge. */
    for (; added < g->nnodes; added++)
        if (sim_graph_add(c, map[added], NULL, NULL, 0))
            goto err;
    i = 0;
    for (struct sim_gnode *n = g->head; n; n = n->next, i++)
        for (size_t d = 0; d < n->nin; d++)
            if (sim_gnode_link(map[n->in[d]->seq], map[i], &n->in_edge[d]))
                goto err;
    if (uobj_refs_copy(c, g))
        goto err;
    free(map);
    return c;
err:
    for (size_t k = added; map && k < g->nnodes; k++)
        sim_gnode_free(map[k]);
    free(map);
    sim_graph_free(c);
    return NULL;
}

struct sim_gnode *sim_gnode_from_op(struct sim_op *op, struct sim_ctx *c)
{
    struct sim_gnode *n;

    switch (op->kind) {
    case SIM_OP_KERNEL:
        if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_KERNEL)))
            return NULL;
        n->u.kernel.func = op->u.kernel.func;
        n->u.kernel.k = (struct sim_kfn){ op->u.kernel.fn, op->u.kernel.meta, op->u.kernel.ctx,
                                          op->u.kernel.name, NULL };
        memcpy(n->u.kernel.grid, op->u.kernel.grid, sizeof(n->u.kernel.grid));
        memcpy(n->u.kernel.block, op->u.kernel.block, sizeof(n->u.kernel.block));
        n->u.kernel.shared = op->u.kernel.shared;
        n->u.kernel.argbuf = op->u.kernel.argbuf;        /* taken */
        n->u.kernel.params = op->u.kernel.params;
        op->u.kernel.argbuf = NULL;
        if (op->u.kernel.priority) {
            n->u.kernel.attr_set |= 1u << CU_LAUNCH_ATTRIBUTE_PRIORITY;
            n->u.kernel.attrs[CU_LAUNCH_ATTRIBUTE_PRIORITY].priority = op->u.kernel.priority;
        }
        return n;
    case SIM_OP_COPY: {
        const struct sim_copy *cp = &op->u.copy;
        CUDA_MEMCPY3D *p;

        if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_MEMCPY)))
            return NULL;
        p = &n->u.memcpy.p;
        p->srcMemoryType = cp->src_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        p->dstMemoryType = cp->dst_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        if (cp->src_dev)
            p->srcDevice = cp->src;
        else
            p->srcHost = (const void *)(uintptr_t)cp->src;
        if (cp->dst_dev)
            p->dstDevice = cp->dst;
        else
            p->dstHost = (void *)(uintptr_t)cp->dst;
        p->srcPitch = cp->spitch;
        p->dstPitch = cp->dpitch;
        p->srcHeight = cp->depth > 1 ? cp->sheight : cp->height;
        p->dstHeight = cp->depth > 1 ? cp->dheight : cp->height;
        p->WidthInBytes = cp->width;
        p->Height = cp->height;
        p->Depth = cp->depth ? cp->depth : 1;
        n->u.memcpy.ctx = c;
        return n;
    }
    case SIM_OP_MEMSET:
        if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_MEMSET)))
            return NULL;
        n->u.memset.p = (CUDA_MEMSET_NODE_PARAMS){
            .dst = op->u.set.dst, .pitch = op->u.set.pitch, .value = op->u.set.value,
            .elementSize = op->u.set.elem, .width = op->u.set.width, .height = op->u.set.height,
        };
        n->u.memset.ctx = c;
        return n;
    case SIM_OP_HOSTFN:
        if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_HOST)))
            return NULL;
        n->u.host.fn = op->u.hostfn.fn;
        n->u.host.userData = op->u.hostfn.data;
        return n;
    default:
        return NULL;
    }
}

/* ---- the graph API ------------------------------------------------------------- */

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    struct sim_graph *g;

    SIM_BEGIN();
    if (!phGraph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(g = sim_graph_new()))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphCreate);

CUresult cuGraphDestroy(CUgraph hGraph)
{
    struct sim_graph *g;

    SIM_BEGIN();
    if (sim_graph_get(hGraph, &g) || g->parent || sim_capture_uses_graph(g))
        return CUDA_ERROR_INVALID_VALUE;
    sim_graph_free(g);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphDestroy);

/* Adds a node made by the caller; frees it on failure. */
static CUresult add_node(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                         const CUgraphEdgeData *edges, size_t ndeps, struct sim_gnode *n)
{
    struct sim_graph *g;
    CUresult r;

    if ((r = sim_graph_get(hGraph, &g)) ||
        (r = sim_graph_add(g, n, (struct sim_gnode *const *)deps, edges, ndeps))) {
        sim_gnode_free(n);
        return r;
    }
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

static CUresult add_kernel(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                           const CUgraphEdgeData *edges, size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct sim_gnode *n;
    CUresult r;

    if (!out || !p)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_KERNEL)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = knode_from_params(&n->u.kernel, p))) {
        sim_gnode_free(n);
        return r;
    }
    return add_node(out, hGraph, deps, edges, ndeps, n);
}

static CUDA_KERNEL_NODE_PARAMS kparams_from_v1(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    return (CUDA_KERNEL_NODE_PARAMS){
        .func = p->func, .gridDimX = p->gridDimX, .gridDimY = p->gridDimY, .gridDimZ = p->gridDimZ,
        .blockDimX = p->blockDimX, .blockDimY = p->blockDimY, .blockDimZ = p->blockDimZ,
        .sharedMemBytes = p->sharedMemBytes, .kernelParams = p->kernelParams, .extra = p->extra,
    };
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                 size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    SIM_BEGIN();
    return add_kernel(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}
SIM_EXPORT(cuGraphAddKernelNode_v2);
SIM_PARTIAL(cuGraphAddKernelNode_v2,
    "packed arguments (extra), kernels without SIMCUDA_KERNEL_PARAMS: "
    "CUDA_ERROR_NOT_SUPPORTED");

CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                              size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;

    SIM_BEGIN();
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    p = kparams_from_v1(nodeParams);
    return add_kernel(phGraphNode, hGraph, dependencies, NULL, numDependencies, &p);
}
SIM_EXPORT(cuGraphAddKernelNode);
SIM_PARTIAL(cuGraphAddKernelNode,
    "packed arguments (extra), kernels without SIMCUDA_KERNEL_PARAMS: "
    "CUDA_ERROR_NOT_SUPPORTED");

static CUresult typed_node(CUgraphNode h, CUgraphNodeType type, struct sim_gnode **out)
{
    if (sim_gnode_get(h, out) || (*out)->type != type)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!nodeParams || typed_node(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &n))
        return CUDA_ERROR_INVALID_VALUE;
    knode_to_params(&n->u.kernel, nodeParams);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphKernelNodeGetParams_v2);

CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;
    CUresult r;

    SIM_BEGIN();
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = cuGraphKernelNodeGetParams_v2(hNode, &p)))
        return r;
    if (!p.func)
        return CUDA_ERROR_INVALID_VALUE;     /* a CUkernel node: the v1 struct cannot say so */
    *nodeParams = (CUDA_KERNEL_NODE_PARAMS_v1){
        .func = p.func, .gridDimX = p.gridDimX, .gridDimY = p.gridDimY, .gridDimZ = p.gridDimZ,
        .blockDimX = p.blockDimX, .blockDimY = p.blockDimY, .blockDimZ = p.blockDimZ,
        .sharedMemBytes = p.sharedMemBytes, .kernelParams = p.kernelParams, .extra = NULL,
    };
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphKernelNodeGetParams);

CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!nodeParams || typed_node(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &n))
        return CUDA_ERROR_INVALID_VALUE;
    return knode_from_params(&n->u.kernel, nodeParams);
}
SIM_EXPORT(cuGraphKernelNodeSetParams_v2);
SIM_PARTIAL(cuGraphKernelNodeSetParams_v2,
    "packed arguments (extra), kernels without SIMCUDA_KERNEL_PARAMS: "
    "CUDA_ERROR_NOT_SUPPORTED");

CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;

    SIM_BEGIN();
    if (!nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    p = kparams_from_v1(nodeParams);
    return cuGraphKernelNodeSetParams_v2(hNode, &p);
}
SIM_EXPORT(cuGraphKernelNodeSetParams);
SIM_PARTIAL(cuGraphKernelNodeSetParams,
    "packed arguments (extra), kernels without SIMCUDA_KERNEL_PARAMS: "
    "CUDA_ERROR_NOT_SUPPORTED");

static CUresult add_memcpy(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                           const CUgraphEdgeData *edges, size_t ndeps, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    struct sim_gnode *n;
    struct sim_ctx *c;
    CUresult r;

    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = memcpy_check(p, ctx, &c)))
        return r;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_MEMCPY)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->u.memcpy.p = *p;
    n->u.memcpy.ctx = c;
    return add_node(out, hGraph, deps, edges, ndeps, n);
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                              size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    SIM_BEGIN();
    return add_memcpy(phGraphNode, hGraph, dependencies, NULL, numDependencies, copyParams, ctx);
}
SIM_EXPORT(cuGraphAddMemcpyNode);
SIM_PARTIAL(cuGraphAddMemcpyNode, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");

CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!nodeParams || typed_node(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &n))
        return CUDA_ERROR_INVALID_VALUE;
    *nodeParams = n->u.memcpy.p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphMemcpyNodeGetParams);

CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    struct sim_gnode *n;
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (typed_node(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &n))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = memcpy_check(nodeParams, (CUcontext)n->u.memcpy.ctx, &c)))
        return r;
    n->u.memcpy.p = *nodeParams;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphMemcpyNodeSetParams);

static CUresult add_memset(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                           const CUgraphEdgeData *edges, size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p,
                           CUcontext ctx)
{
    struct sim_gnode *n;
    struct sim_ctx *c;
    CUresult r;

    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = memset_check(p, ctx, &c)))
        return r;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_MEMSET)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->u.memset.p = *p;
    n->u.memset.ctx = c;
    return add_node(out, hGraph, deps, edges, ndeps, n);
}

CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                              size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    SIM_BEGIN();
    return add_memset(phGraphNode, hGraph, dependencies, NULL, numDependencies, memsetParams, ctx);
}
SIM_EXPORT(cuGraphAddMemsetNode);

CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!nodeParams || typed_node(hNode, CU_GRAPH_NODE_TYPE_MEMSET, &n))
        return CUDA_ERROR_INVALID_VALUE;
    *nodeParams = n->u.memset.p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphMemsetNodeGetParams);

CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    struct sim_gnode *n;
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if (typed_node(hNode, CU_GRAPH_NODE_TYPE_MEMSET, &n))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = memset_check(nodeParams, (CUcontext)n->u.memset.ctx, &c)))
        return r;
    n->u.memset.p = *nodeParams;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphMemsetNodeSetParams);

static CUresult add_host(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                         const CUgraphEdgeData *edges, size_t ndeps, const CUDA_HOST_NODE_PARAMS *p)
{
    struct sim_gnode *n;

    if (!out || !p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_HOST)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->u.host = *p;
    return add_node(out, hGraph, deps, edges, ndeps, n);
}

CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                            size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    SIM_BEGIN();
    return add_host(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}
SIM_EXPORT(cuGraphAddHostNode);

CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!nodeParams || typed_node(hNode, CU_GRAPH_NODE_TYPE_HOST, &n))
        return CUDA_ERROR_INVALID_VALUE;
    *nodeParams = n->u.host;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphHostNodeGetParams);

CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!nodeParams || !nodeParams->fn || typed_node(hNode, CU_GRAPH_NODE_TYPE_HOST, &n))
        return CUDA_ERROR_INVALID_VALUE;
    n->u.host = *nodeParams;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphHostNodeSetParams);

/* A child graph node: the child is cloned in, or (move) taken over. */
static CUresult add_child(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                          const CUgraphEdgeData *edges, size_t ndeps, CUgraph child, bool move)
{
    struct sim_graph *g, *cg, *copy;
    struct sim_gnode *n;
    CUresult r;

    if (!out || sim_graph_get(hGraph, &g) || sim_graph_get(child, &cg) || cg == g || cg->parent)
        return CUDA_ERROR_INVALID_VALUE;
    /* Memory nodes only move into a parent (and not in a clone). */
    if (cg->nmem && !move)
        return CUDA_ERROR_INVALID_VALUE;
    if (move && (cg->nexec || sim_capture_uses_graph(cg)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_GRAPH)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    copy = move ? cg : sim_graph_clone(cg);
    if (!copy) {
        sim_gnode_free(n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    n->u.child = copy;
    copy->parent = n;
    copy->moved = move;
    if ((r = sim_graph_add(g, n, (struct sim_gnode *const *)deps, edges, ndeps))) {
        if (move) {
            copy->parent = NULL;
            copy->moved = false;
            n->u.child = NULL;
        }
        sim_gnode_free(n);
        return r;
    }
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                  size_t numDependencies, CUgraph childGraph)
{
    SIM_BEGIN();
    return add_child(phGraphNode, hGraph, dependencies, NULL, numDependencies, childGraph, false);
}
SIM_EXPORT(cuGraphAddChildGraphNode);

CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!phGraph || typed_node(hNode, CU_GRAPH_NODE_TYPE_GRAPH, &n))
        return CUDA_ERROR_INVALID_VALUE;
    *phGraph = (CUgraph)n->u.child;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphChildGraphNodeGetGraph);

static CUresult add_empty(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                          const CUgraphEdgeData *edges, size_t ndeps)
{
    struct sim_gnode *n;

    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(n = sim_gnode_new(CU_GRAPH_NODE_TYPE_EMPTY)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return add_node(out, hGraph, deps, edges, ndeps, n);
}

CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                             size_t numDependencies)
{
    SIM_BEGIN();
    return add_empty(phGraphNode, hGraph, dependencies, NULL, numDependencies);
}
SIM_EXPORT(cuGraphAddEmptyNode);

static CUresult add_event(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                          const CUgraphEdgeData *edges, size_t ndeps, CUevent event, CUgraphNodeType type)
{
    struct sim_gnode *n;
    struct sim_event *e;

    if (!out || sim_event_get(event, &e))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(n = sim_gnode_new(type)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_event_ref(e);
    n->u.event = e;
    return add_node(out, hGraph, deps, edges, ndeps, n);
}

CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                   size_t numDependencies, CUevent event)
{
    SIM_BEGIN();
    return add_event(phGraphNode, hGraph, dependencies, NULL, numDependencies, event,
                     CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}
SIM_EXPORT(cuGraphAddEventRecordNode);

CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                 size_t numDependencies, CUevent event)
{
    SIM_BEGIN();
    return add_event(phGraphNode, hGraph, dependencies, NULL, numDependencies, event,
                     CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}
SIM_EXPORT(cuGraphAddEventWaitNode);

static CUresult event_node_get(CUgraphNode h, CUgraphNodeType type, CUevent *out)
{
    struct sim_gnode *n;

    if (!out || typed_node(h, type, &n))
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUevent)n->u.event;
    return CUDA_SUCCESS;
}

static CUresult event_node_set(CUgraphNode h, CUgraphNodeType type, CUevent event)
{
    struct sim_gnode *n;
    struct sim_event *e;

    if (typed_node(h, type, &n) || sim_event_get(event, &e))
        return CUDA_ERROR_INVALID_VALUE;
    sim_event_ref(e);
    sim_event_unref(n->u.event);
    n->u.event = e;
    return CUDA_SUCCESS;
}

CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    SIM_BEGIN();
    return event_node_get(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event_out);
}
SIM_EXPORT(cuGraphEventRecordNodeGetEvent);

CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    SIM_BEGIN();
    return event_node_set(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}
SIM_EXPORT(cuGraphEventRecordNodeSetEvent);

CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    SIM_BEGIN();
    return event_node_get(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event_out);
}
SIM_EXPORT(cuGraphEventWaitNodeGetEvent);

CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    SIM_BEGIN();
    return event_node_set(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}
SIM_EXPORT(cuGraphEventWaitNodeSetEvent);

/* ---- cuGraphAddNode: every simulated type through one struct ----------------------- */

static CUresult add_generic(CUgraphNode *out, CUgraph hGraph, const CUgraphNode *deps,
                            const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeParams *p)
{
    if (!out || !p || !sim_zeroed(p->reserved0, sizeof(p->reserved0)) || p->reserved2)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const CUDA_KERNEL_NODE_PARAMS_v3 *k = &p->kernel;
        CUDA_KERNEL_NODE_PARAMS kp = {
            .func = k->func, .gridDimX = k->gridDimX, .gridDimY = k->gridDimY, .gridDimZ = k->gridDimZ,
            .blockDimX = k->blockDimX, .blockDimY = k->blockDimY, .blockDimZ = k->blockDimZ,
            .sharedMemBytes = k->sharedMemBytes, .kernelParams = k->kernelParams, .extra = k->extra,
            .kern = k->kern, .ctx = k->ctx,
        };
        return add_kernel(out, hGraph, deps, edges, ndeps, &kp);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags || p->memcpy.reserved)
            return CUDA_ERROR_INVALID_VALUE;
        return add_memcpy(out, hGraph, deps, edges, ndeps, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
        CUDA_MEMSET_NODE_PARAMS mp = { m->dst, m->pitch, m->value, m->elementSize, m->width, m->height };
        return add_memset(out, hGraph, deps, edges, ndeps, &mp, m->ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS hp = { p->host.fn, p->host.userData };
        return add_host(out, hGraph, deps, edges, ndeps, &hp);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE &&
            p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
            return CUDA_ERROR_INVALID_VALUE;
        return add_child(out, hGraph, deps, edges, ndeps, p->graph.graph,
                         p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return add_empty(out, hGraph, deps, edges, ndeps);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return add_event(out, hGraph, deps, edges, ndeps, p->eventWait.event, p->type);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return add_event(out, hGraph, deps, edges, ndeps, p->eventRecord.event, p->type);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        CUDA_MEM_ALLOC_NODE_PARAMS ap = {
            .poolProps = p->alloc.poolProps, .accessDescs = p->alloc.accessDescs,
            .accessDescCount = p->alloc.accessDescCount, .bytesize = p->alloc.bytesize,
        };
        CUresult r = sim_gmem_add_alloc_node(out, hGraph, deps, edges, ndeps, &ap);
        if (r == CUDA_SUCCESS)
            p->alloc.dptr = ap.dptr;
        return r;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return sim_gmem_add_free_node(out, hGraph, deps, edges, ndeps, p->free.dptr);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;    /* semaphores, batch memops, conditionals */
    }
}

CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                           const CUgraphEdgeData *dependencyData, size_t numDependencies,
                           CUgraphNodeParams *nodeParams)
{
    SIM_BEGIN();
    return add_generic(phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams);
}
SIM_EXPORT(cuGraphAddNode_v2);
SIM_PARTIAL(cuGraphAddNode_v2,
    "external semaphore, batch memop and conditional nodes: CUDA_ERROR_NOT_SUPPORTED");

CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    SIM_BEGIN();
    return add_generic(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}
SIM_EXPORT(cuGraphAddNode);
SIM_PARTIAL(cuGraphAddNode,
    "external semaphore, batch memop and conditional nodes: CUDA_ERROR_NOT_SUPPORTED");

CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    struct sim_gnode *n;
    CUresult r;

    SIM_BEGIN();
    if (!nodeParams || sim_gnode_get(hNode, &n) || nodeParams->type != n->type)
        return CUDA_ERROR_INVALID_VALUE;
    switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const CUDA_KERNEL_NODE_PARAMS_v3 *k = &nodeParams->kernel;
        CUDA_KERNEL_NODE_PARAMS kp = {
            .func = k->func, .gridDimX = k->gridDimX, .gridDimY = k->gridDimY, .gridDimZ = k->gridDimZ,
            .blockDimX = k->blockDimX, .blockDimY = k->blockDimY, .blockDimZ = k->blockDimZ,
            .sharedMemBytes = k->sharedMemBytes, .kernelParams = k->kernelParams, .extra = k->extra,
            .kern = k->kern, .ctx = k->ctx,
        };
        return knode_from_params(&n->u.kernel, &kp);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        struct sim_ctx *c;
        if ((r = memcpy_check(&nodeParams->memcpy.copyParams, nodeParams->memcpy.copyCtx, &c)))
            return r;
        n->u.memcpy.p = nodeParams->memcpy.copyParams;
        n->u.memcpy.ctx = c;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &nodeParams->memset;
        CUDA_MEMSET_NODE_PARAMS mp = { m->dst, m->pitch, m->value, m->elementSize, m->width, m->height };
        struct sim_ctx *c;
        if ((r = memset_check(&mp, m->ctx, &c)))
            return r;
        n->u.memset.p = mp;
        n->u.memset.ctx = c;
        return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
        if (!nodeParams->host.fn)
            return CUDA_ERROR_INVALID_VALUE;
        n->u.host.fn = nodeParams->host.fn;
        n->u.host.userData = nodeParams->host.userData;
        return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return event_node_set(hNode, n->type, nodeParams->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return event_node_set(hNode, n->type, nodeParams->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;    /* child graphs and memory nodes cannot change */
    }
}
SIM_EXPORT(cuGraphNodeSetParams);
SIM_PARTIAL(cuGraphNodeSetParams,
    "packed arguments (extra), kernels without SIMCUDA_KERNEL_PARAMS: "
    "CUDA_ERROR_NOT_SUPPORTED");

/* ---- kernel node attributes -------------------------------------------------------- */

CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                       CUkernelNodeAttrValue *value_out)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!value_out || typed_node(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &n) || !is_set_attr(attr) ||
        (unsigned)attr >= SIM_KATTR_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *value_out = n->u.kernel.attrs[attr];
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphKernelNodeGetAttribute);

CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                       const CUkernelNodeAttrValue *value)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!value || typed_node(hNode, CU_GRAPH_NODE_TYPE_KERNEL, &n) || !is_set_attr(attr) ||
        (unsigned)attr >= SIM_KATTR_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (attr == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE &&
        (value->deviceUpdatableKernelNode.deviceUpdatable > 1 ||
         ((n->u.kernel.attr_set & (1u << attr)) && !value->deviceUpdatableKernelNode.deviceUpdatable)))
        return CUDA_ERROR_INVALID_VALUE;    /* 0 or 1, and no opting out */
    if (attr == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
        const unsigned *g = n->u.kernel.grid;
        unsigned x = value->clusterDim.x, y = value->clusterDim.y, z = value->clusterDim.z;
        if (x && y && z && (g[0] % x || g[1] % y || g[2] % z))
            return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    }
    n->u.kernel.attrs[attr] = *value;
    n->u.kernel.attr_set |= 1u << attr;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphKernelNodeSetAttribute);

CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
    struct sim_gnode *d, *s;
    const uint32_t upd = 1u << CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;

    SIM_BEGIN();
    if (typed_node(dst, CU_GRAPH_NODE_TYPE_KERNEL, &d) || typed_node(src, CU_GRAPH_NODE_TYPE_KERNEL, &s))
        return CUDA_ERROR_INVALID_VALUE;
    if ((d->u.kernel.attr_set | s->u.kernel.attr_set) & upd)
        return CUDA_ERROR_INVALID_VALUE;    /* device-updatable nodes do not copy */
    memcpy(d->u.kernel.attrs, s->u.kernel.attrs, sizeof(d->u.kernel.attrs));
    d->u.kernel.attr_set = s->u.kernel.attr_set;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphKernelNodeCopyAttributes);

/* ---- clones, queries, edges ----------------------------------------------------------- */

CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    struct sim_graph *g, *c;

    SIM_BEGIN();
    if (!phGraphClone || sim_graph_get(originalGraph, &g))
        return CUDA_ERROR_INVALID_VALUE;
    if (g->nmem)
        return CUDA_ERROR_NOT_SUPPORTED;     /* graphs with memory nodes cannot be cloned */
    if (!(c = sim_graph_clone(g)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraphClone = (CUgraph)c;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphClone);

CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph)
{
    struct sim_graph *c;
    struct sim_gnode *o;

    SIM_BEGIN();
    if (!phNode || sim_graph_get(hClonedGraph, &c) || sim_gnode_get(hOriginalNode, &o))
        return CUDA_ERROR_INVALID_VALUE;
    for (struct sim_gnode *n = c->head; n; n = n->next)
        if (n->clone_of == o) {
            *phNode = (CUgraphNode)n;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}
SIM_EXPORT(cuGraphNodeFindInClone);

CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!type || sim_gnode_get(hNode, &n))
        return CUDA_ERROR_INVALID_VALUE;
    *type = n->type;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphNodeGetType);

/* The list-returning queries: NULL array -> the count; else min(count, *n)
 * entries, the rest NULL, and *n the number returned. */
static void fill_nodes(CUgraphNode *out, size_t *n, struct sim_gnode *const *v, size_t count)
{
    size_t k = count < *n ? count : *n;

    for (size_t i = 0; i < *n; i++)
        out[i] = i < k ? (CUgraphNode)v[i] : NULL;
    *n = k;
}

static CUresult list_nodes(CUgraph hGraph, CUgraphNode *nodes, size_t *num, bool roots)
{
    struct sim_graph *g;
    struct sim_gnode **v;
    size_t k = 0;

    if (!num || sim_graph_get(hGraph, &g))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(v = calloc(g->nnodes + 1, sizeof(*v))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (struct sim_gnode *n = g->head; n; n = n->next)
        if (!roots || !n->nin)
            v[k++] = n;
    if (!nodes)
        *num = k;
    else
        fill_nodes(nodes, num, v, k);
    free(v);
    return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    SIM_BEGIN();
    return list_nodes(hGraph, nodes, numNodes, false);
}
SIM_EXPORT(cuGraphGetNodes);

CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
    SIM_BEGIN();
    return list_nodes(hGraph, rootNodes, numRootNodes, true);
}
SIM_EXPORT(cuGraphGetRootNodes);

/* Edges of g in node order; edge data lost (v1, or NULL array) with non-zero
 * data: CUDA_ERROR_LOSSY_QUERY. */
static CUresult get_edges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edata,
                          size_t *num)
{
    struct sim_graph *g;
    size_t total = 0, k = 0;
    bool lossy = false;

    if (!num || sim_graph_get(hGraph, &g) || (!from != !to) || (edata && !from))
        return CUDA_ERROR_INVALID_VALUE;
    for (struct sim_gnode *n = g->head; n; n = n->next)
        total += n->nin;
    if (!from) {
        *num = total;
        return CUDA_SUCCESS;
    }
    for (struct sim_gnode *n = g->head; n; n = n->next)
        for (size_t i = 0; i < n->nin; i++, k++) {
            if (k >= *num)
                continue;
            from[k] = (CUgraphNode)n->in[i];
            to[k] = (CUgraphNode)n;
            if (edata)
                edata[k] = n->in_edge[i];
            else if (!edge_data_zero(&n->in_edge[i]))
                lossy = true;
        }
    for (size_t i = total; i < *num; i++) {
        from[i] = to[i] = NULL;
        if (edata)
            memset(&edata[i], 0, sizeof(edata[i]));
    }
    if (total < *num)
        *num = total;
    return lossy ? CUDA_ERROR_LOSSY_QUERY : CUDA_SUCCESS;
}

CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
                            size_t *numEdges)
{
    SIM_BEGIN();
    return get_edges(hGraph, from, to, edgeData, numEdges);
}
SIM_EXPORT(cuGraphGetEdges_v2);

CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
    SIM_BEGIN();
    return get_edges(hGraph, from, to, NULL, numEdges);
}
SIM_EXPORT(cuGraphGetEdges);

static CUresult node_edges(CUgraphNode hNode, CUgraphNode *nodes, CUgraphEdgeData *edata, size_t *num,
                           bool deps)
{
    struct sim_gnode *n;
    struct sim_gnode **v;
    CUgraphEdgeData *e;
    size_t count, k;
    bool lossy = false;

    if (!num || sim_gnode_get(hNode, &n) || (edata && !nodes))
        return CUDA_ERROR_INVALID_VALUE;
    v = deps ? n->in : n->out;
    e = deps ? n->in_edge : n->out_edge;
    count = deps ? n->nin : n->nout;
    if (!nodes) {
        *num = count;
        return CUDA_SUCCESS;
    }
    k = count < *num ? count : *num;
    for (size_t i = 0; i < *num; i++) {
        nodes[i] = i < k ? (CUgraphNode)v[i] : NULL;
        if (edata) {
            if (i < k)
                edata[i] = e[i];
            else
                memset(&edata[i], 0, sizeof(edata[i]));
        } else if (i < k && !edge_data_zero(&e[i])) {
            lossy = true;
        }
    }
    *num = k;
    return lossy ? CUDA_ERROR_LOSSY_QUERY : CUDA_SUCCESS;
}

CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies, CUgraphEdgeData *edgeData,
                                       size_t *numDependencies)
{
    SIM_BEGIN();
    return node_edges(hNode, dependencies, edgeData, numDependencies, true);
}
SIM_EXPORT(cuGraphNodeGetDependencies_v2);

CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies)
{
    SIM_BEGIN();
    return node_edges(hNode, dependencies, NULL, numDependencies, true);
}
SIM_EXPORT(cuGraphNodeGetDependencies);

CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes, CUgraphEdgeData *edgeData,
                                         size_t *numDependentNodes)
{
    SIM_BEGIN();
    return node_edges(hNode, dependentNodes, edgeData, numDependentNodes, false);
}
SIM_EXPORT(cuGraphNodeGetDependentNodes_v2);

CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes, size_t *numDependentNodes)
{
    SIM_BEGIN();
    return node_edges(hNode, dependentNodes, NULL, numDependentNodes, false);
}
SIM_EXPORT(cuGraphNodeGetDependentNodes);

/* Every pair must be two distinct nodes of g. */
static CUresult check_pairs(struct sim_graph *g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
    if (n && (!from || !to))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        struct sim_gnode *a = (struct sim_gnode *)from[i], *b = (struct sim_gnode *)to[i];

        if (!sim_handle_ok(a, SIM_MAGIC_GNODE) || !sim_handle_ok(b, SIM_MAGIC_GNODE) ||
            !sim_graph_has(g, a) || !sim_graph_has(g, b) || a == b)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult add_deps(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                         const CUgraphEdgeData *edata, size_t n)
{
    struct sim_graph *g;
    size_t done = 0;

    if (sim_graph_get(hGraph, &g) || check_pairs(g, from, to, n))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        struct sim_gnode *a = (struct sim_gnode *)from[i], *b = (struct sim_gnode *)to[i];

        if (edge_index(b->in, b->nin, a) >= 0 || !edge_data_ok(a, b, edata ? &edata[i] : NULL))
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (from[j] == from[i] && to[j] == to[i])
                return CUDA_ERROR_INVALID_VALUE;
    }
    for (; done < n; done++)
        if (sim_gnode_link((struct sim_gnode *)from[done], (struct sim_gnode *)to[done],
                           edata ? &edata[done] : NULL))
            goto nomem;
    return CUDA_SUCCESS;
nomem:
    while (done--)
        gnode_unlink((struct sim_gnode *)from[done], (struct sim_gnode *)to[done]);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    SIM_BEGIN();
    return add_deps(hGraph, from, to, edgeData, numDependencies);
}
SIM_EXPORT(cuGraphAddDependencies_v2);

CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                size_t numDependencies)
{
    SIM_BEGIN();
    return add_deps(hGraph, from, to, NULL, numDependencies);
}
SIM_EXPORT(cuGraphAddDependencies);

static CUresult remove_deps(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                            const CUgraphEdgeData *edata, size_t n)
{
    struct sim_graph *g;

    if (sim_graph_get(hGraph, &g) || check_pairs(g, from, to, n) || g->nmem)
        return CUDA_ERROR_INVALID_VALUE;    /* graphs with memory nodes keep their edges */
    for (size_t i = 0; i < n; i++) {
        struct sim_gnode *a = (struct sim_gnode *)from[i], *b = (struct sim_gnode *)to[i];
        long k = edge_index(b->in, b->nin, a);
        static const CUgraphEdgeData zero;

        if (k < 0 || memcmp(&b->in_edge[k], edata ? &edata[i] : &zero, sizeof(zero)))
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < n; i++)
        gnode_unlink((struct sim_gnode *)from[i], (struct sim_gnode *)to[i]);
    return CUDA_SUCCESS;
}

CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                      const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    SIM_BEGIN();
    return remove_deps(hGraph, from, to, edgeData, numDependencies);
}
SIM_EXPORT(cuGraphRemoveDependencies_v2);

CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   size_t numDependencies)
{
    SIM_BEGIN();
    return remove_deps(hGraph, from, to, NULL, numDependencies);
}
SIM_EXPORT(cuGraphRemoveDependencies);

CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    struct sim_gnode *n;

    SIM_BEGIN();
    if (sim_gnode_get(hNode, &n) || n->graph->nmem || sim_capture_uses_graph(n->graph))
        return CUDA_ERROR_INVALID_VALUE;
    if (n->type == CU_GRAPH_NODE_TYPE_KERNEL &&
        (n->u.kernel.attr_set & (1u << CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE)))
        return CUDA_ERROR_INVALID_VALUE;
    graph_remove(n);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphDestroyNode);

/* ---- topological order ---------------------------------------------------------- */

struct sim_gnode **sim_graph_topo(struct sim_graph *g, bool *cycle)
{
    size_t n = g->nnodes, done = 0;
    struct sim_gnode **order = malloc((n ? n : 1) * sizeof(*order));
    size_t *indeg = calloc(n ? n : 1, sizeof(*indeg));
    struct sim_gnode **byidx = calloc(n ? n : 1, sizeof(*byidx));
    bool *taken = calloc(n ? n : 1, sizeof(*taken));
    size_t i = 0;

    *cycle = false;
    if (!order || !indeg || !byidx || !taken)
        goto err;
    for (struct sim_gnode *x = g->head; x; x = x->next, i++) {
        byidx[i] = x;
        x->seq = i;                    /* dense indices (insertion order kept) */
        indeg[i] = x->nin;
    }
    g->next_seq = n;
    /* Kahn's algorithm, the oldest ready node first: a stable order. */
    while (done < n) {
        size_t pick = n;

        for (size_t k = 0; k < n; k++)
            if (!taken[k] && !indeg[k]) {
                pick = k;
                break;
            }
        if (pick == n) {
            *cycle = true;
            goto err;
        }
        taken[pick] = true;
        order[done++] = byidx[pick];
        for (size_t k = 0; k < byidx[pick]->nout; k++)
            indeg[byidx[pick]->out[k]->seq]--;
    }
    free(indeg);
    free(byidx);
    free(taken);
    return order;
err:
    free(order);
    free(indeg);
    free(byidx);
    free(taken);
    return NULL;
}

/* ---- DOT output ------------------------------------------------------------------------ */

static const char *type_name(CUgraphNodeType t)
{
    switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "KERNEL";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "MEMSET";
    case CU_GRAPH_NODE_TYPE_HOST: return "HOST";
    case CU_GRAPH_NODE_TYPE_GRAPH: return "GRAPH";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "EMPTY";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "WAIT_EVENT";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "EVENT_RECORD";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "MEM_ALLOC";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "MEM_FREE";
    default: return "UNKNOWN";
    }
}

static void dot_graph(FILE *f, struct sim_graph *g, const char *prefix, unsigned flags)
{
    for (struct sim_gnode *n = g->head; n; n = n->next) {
        fprintf(f, "  \"%s%p\" [label=\"%s", prefix, (void *)n, type_name(n->type));
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL && n->u.kernel.k.name)
            fprintf(f, "\\n%s", n->u.kernel.k.name);
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL && (flags & CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_PARAMS))
            fprintf(f, "\\ngrid (%u,%u,%u) block (%u,%u,%u) shared %u", n->u.kernel.grid[0],
                    n->u.kernel.grid[1], n->u.kernel.grid[2], n->u.kernel.block[0],
                    n->u.kernel.block[1], n->u.kernel.block[2], n->u.kernel.shared);
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && (flags & CU_GRAPH_DEBUG_DOT_FLAGS_MEM_ALLOC_NODE_PARAMS))
            fprintf(f, "\\n0x%llx, %zu bytes", (unsigned long long)n->u.alloc.p.dptr, n->u.alloc.p.bytesize);
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_FREE && (flags & CU_GRAPH_DEBUG_DOT_FLAGS_MEM_FREE_NODE_PARAMS))
            fprintf(f, "\\n0x%llx", (unsigned long long)n->u.free.dptr);
        fprintf(f, "\"];\n");
        for (size_t i = 0; i < n->nin; i++)
            fprintf(f, "  \"%s%p\" -> \"%s%p\";\n", prefix, (void *)n->in[i], prefix, (void *)n);
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            char sub[64];

            snprintf(sub, sizeof(sub), "%s%p.", prefix, (void *)n);
            fprintf(f, "  subgraph \"cluster_%s\" {\n", sub);
            dot_graph(f, n->u.child, sub, flags);
            fprintf(f, "  }\n");
        }
    }
}

CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
    struct sim_graph *g;
    FILE *f;
    int bad;

    SIM_BEGIN();
    if (!path || sim_graph_get(hGraph, &g))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(f = fopen(path, "we")))
        return CUDA_ERROR_OPERATING_SYSTEM;
    fprintf(f, "digraph dot {\n");
    dot_graph(f, g, "", flags);
    fprintf(f, "}\n");
    bad = ferror(f);
    if (fclose(f) || bad)
        return CUDA_ERROR_OPERATING_SYSTEM;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphDebugDotPrint);
