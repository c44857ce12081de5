/*
 * graph_exec.c - executable graphs: instantiation, per-node updates,
 * cuGraphExecUpdate, upload and launch (graph.h explains the structures).
 *
 * A launch is one SIM_OP_GRAPH on the stream, holding one operation per node
 * in a topological order: it runs after the stream's earlier work and the
 * executable graph's previous launch, and after the events its wait nodes
 * name (as recorded when the launch was made); the events of its record nodes
 * are recorded by it.
 */
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t exec_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_exec *execs;

CUresult sim_exec_get(CUgraphExec h, struct sim_exec **out)
{
    struct sim_exec *x = (struct sim_exec *)h;

    if (!sim_handle_ok(x, SIM_MAGIC_GEXEC))
        return CUDA_ERROR_INVALID_VALUE;
    *out = x;
    return CUDA_SUCCESS;
}

void sim_exec_forget_origin(struct sim_graph *g)
{
    pthread_mutex_lock(&exec_list_lock);
    for (struct sim_exec *x = execs; x; x = x->next_exec)
        if (x->origin == g)
            x->origin = NULL;
    pthread_mutex_unlock(&exec_list_lock);
}

/* ---- instantiation ---------------------------------------------------------------- */

#define KNOWN_FLAGS (CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | \
                     CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)

/* What a graph for device launch may hold: kernels, copies, memsets, children,
 * all of one context, and at least one such node. */
static CUgraphInstantiateResult device_launch_check(struct sim_graph *g, struct sim_ctx **ctx,
                                                    struct sim_gnode **bad, int *work)
{
    for (struct sim_gnode *n = g->head; n; n = n->next) {
        struct sim_ctx *c = NULL;
        CUgraphInstantiateResult r;

        switch (n->type) {
        case CU_GRAPH_NODE_TYPE_KERNEL: c = n->u.kernel.k.ctx; break;
        case CU_GRAPH_NODE_TYPE_MEMCPY: c = n->u.memcpy.ctx; break;
        case CU_GRAPH_NODE_TYPE_MEMSET: c = n->u.memset.ctx; break;
        case CU_GRAPH_NODE_TYPE_GRAPH:
            if ((r = device_launch_check(n->u.child, ctx, bad, work)))
                return r;
            continue;
        default:
            *bad = n;
            return CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED;
        }
        (*work)++;
        if (*ctx && c != *ctx) {
            *bad = n;
            return CUDA_GRAPH_INSTANTIATE_MULTIPLE_CTXS_NOT_SUPPORTED;
        }
        *ctx = c;
    }
    return CUDA_GRAPH_INSTANTIATE_SUCCESS;
}

static void exec_free(struct sim_exec *x)
{
    pthread_mutex_lock(&exec_list_lock);
    for (struct sim_exec **pp = &execs; *pp; pp = &(*pp)->next_exec)
        if (*pp == x) {
            *pp = x->next_exec;
            break;
        }
    if (x->origin)
        x->origin->nexec--;
    pthread_mutex_unlock(&exec_list_lock);
    sim_handle_del(x);
    x->magic = 0;
    if (x->last_s)
        sim_stream_unref(x->last_s);
    free(x->order);
    sim_graph_free(x->g);
    pthread_mutex_destroy(&x->lock);
    free(x);
}

static CUresult upload(struct sim_exec *x, CUstream hs, bool pt);

/* Instantiates g; *result and *err_node say why not. */
static CUresult instantiate(CUgraphExec *out, CUgraph hGraph, unsigned long long flags, CUstream upload_stream,
                            bool pt, CUgraphInstantiateResult *result, CUgraphNode *err_node)
{
    struct sim_graph *g;
    struct sim_exec *x;
    bool cycle;

    *result = CUDA_GRAPH_INSTANTIATE_ERROR;
    *err_node = NULL;
    if (!out || sim_graph_get(hGraph, &g) || (flags & ~(unsigned long long)KNOWN_FLAGS))
        return CUDA_ERROR_INVALID_VALUE;
    if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) &&
        (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH))
        return CUDA_ERROR_INVALID_VALUE;
    /* A moved child, a graph still being captured into, or a second instance
     * of a graph with memory nodes. */
    if (g->moved || sim_capture_uses_graph(g) || (g->nmem && g->nexec))
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) {
        struct sim_ctx *c = NULL;
        struct sim_gnode *bad = NULL;
        int work = 0;
        CUgraphInstantiateResult r = device_launch_check(g, &c, &bad, &work);

        if (r || !work) {
            *result = r ? r : CUDA_GRAPH_INSTANTIATE_NODE_OPERATION_NOT_SUPPORTED;
            *err_node = (CUgraphNode)bad;
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (!(x = calloc(1, sizeof(*x))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->magic = SIM_MAGIC_GEXEC;
    x->flags = flags;
    pthread_mutex_init(&x->lock, NULL);
    if (!(x->g = sim_graph_clone(g))) {
        pthread_mutex_destroy(&x->lock);
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!(x->order = sim_graph_topo(x->g, &cycle))) {
        sim_graph_free(x->g);
        pthread_mutex_destroy(&x->lock);
        free(x);
        if (!cycle)
            return CUDA_ERROR_OUT_OF_MEMORY;
        *result = CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE;
        return CUDA_ERROR_INVALID_VALUE;
    }
    x->n = x->g->nnodes;
    x->origin = g;
    pthread_mutex_lock(&exec_list_lock);
    g->nexec++;
    x->next_exec = execs;
    execs = x;
    pthread_mutex_unlock(&exec_list_lock);
    sim_handle_add(x);
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
        CUresult r = upload(x, upload_stream, pt);

        if (r) {
            exec_free(x);
            return r;
        }
    }
    *result = CUDA_GRAPH_INSTANTIATE_SUCCESS;
    *out = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    CUgraphInstantiateResult res;
    CUgraphNode bad;

    SIM_BEGIN();
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
        return CUDA_ERROR_INVALID_VALUE;    /* only cuGraphInstantiateWithParams uploads */
    return instantiate(phGraphExec, hGraph, flags, NULL, false, &res, &bad);
}
SIM_EXPORT(cuGraphInstantiateWithFlags);

static CUresult instantiate_with_params(CUgraphExec *phGraphExec, CUgraph hGraph,
                                        CUDA_GRAPH_INSTANTIATE_PARAMS *p, bool pt)
{
    CUresult r;

    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    r = instantiate(phGraphExec, hGraph, p->flags, p->hUploadStream, pt, &p->result_out, &p->hErrNode_out);
    return r;
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    SIM_BEGIN();
    return instantiate_with_params(phGraphExec, hGraph, instantiateParams, false);
}
SIM_EXPORT(cuGraphInstantiateWithParams);

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    SIM_BEGIN();
    return instantiate_with_params(phGraphExec, hGraph, instantiateParams, true);
}
SIM_EXPORT(cuGraphInstantiateWithParams_ptsz);

/* The CUDA 10/11 prototype: the failing node and a message in logBuffer. */
static CUresult instantiate_v1(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                               char *logBuffer, size_t bufferSize)
{
    CUgraphInstantiateResult res;
    CUgraphNode bad = NULL;
    CUresult r = instantiate(phGraphExec, hGraph, 0, NULL, false, &res, &bad);

    if (phErrorNode)
        *phErrorNode = bad;
    if (logBuffer && bufferSize)
        snprintf(logBuffer, bufferSize, "%s",
                 r == CUDA_SUCCESS ? "" :
                 res == CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE ? "the graph has a cycle" :
                 "the graph cannot be instantiated");
    return r;
}

CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                            char *logBuffer, size_t bufferSize)
{
    SIM_BEGIN();
    return instantiate_v1(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
SIM_EXPORT(cuGraphInstantiate);

CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                               char *logBuffer, size_t bufferSize)
{
    SIM_BEGIN();
    return instantiate_v1(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
SIM_EXPORT(cuGraphInstantiate_v2);

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    struct sim_exec *x;

    SIM_BEGIN();
    if (sim_exec_get(hGraphExec, &x))
        return CUDA_ERROR_INVALID_VALUE;
    /* Launches in flight own copies of what they run. */
    exec_free(x);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphExecDestroy);

CUresult cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags)
{
    struct sim_exec *x;

    SIM_BEGIN();
    if (!flags || sim_exec_get(hGraphExec, &x))
        return CUDA_ERROR_INVALID_VALUE;
    *flags = x->flags;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphExecGetFlags);

/* ---- launch ------------------------------------------------------------------------- */

struct build {
    struct sim_op *graph;         /* the launch's op (parent of every node op) */
    struct sim_op **ops;
    size_t n, cap;
    struct sim_dep *waits;        /* wait nodes' events, as recorded now (referenced) */
    size_t nwaits, wcap;
    struct sim_event **records;   /* record nodes' events */
    size_t nrec, rcap;
    bool nomem;
};

static bool grow(void **v, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *nv = realloc(*v, ncap * elem);

    if (!nv)
        return false;
    *v = nv;
    *cap = ncap;
    return true;
}

static void push_op(struct build *b, struct sim_op *op)
{
    if (!op || !grow((void **)&b->ops, &b->cap, b->n, sizeof(*b->ops))) {
        sim_op_free(op);
        b->nomem = true;
        return;
    }
    op->parent = b->graph;
    b->ops[b->n++] = op;
}

static struct sim_op *kernel_op(const struct sim_knode *k)
{
    struct sim_op *op = sim_op_new(SIM_OP_KERNEL);

    if (!op)
        return NULL;
    op->u.kernel.fn = k->k.fn;
    op->u.kernel.func = k->func;
    op->u.kernel.meta = k->k.meta;
    op->u.kernel.ctx = k->k.ctx;
    op->u.kernel.name = k->k.name;
    memcpy(op->u.kernel.grid, k->grid, sizeof(k->grid));
    memcpy(op->u.kernel.block, k->block, sizeof(k->block));
    op->u.kernel.shared = k->shared;
    if (k->attr_set & (1u << CU_LAUNCH_ATTRIBUTE_PRIORITY))
        op->u.kernel.priority = k->attrs[CU_LAUNCH_ATTRIBUTE_PRIORITY].priority;
    if (sim_args_copy(k->k.meta, k->params, &op->u.kernel.argbuf, &op->u.kernel.params)) {
        sim_op_free(op);
        return NULL;
    }
    return op;
}

static struct sim_op *memcpy_op(const CUDA_MEMCPY3D *p)
{
    struct sim_op *op = sim_op_new(SIM_OP_COPY);

    if (op && sim_copy_from_3d(p, &op->u.copy)) {
        sim_op_free(op);
        return NULL;
    }
    return op;
}

static struct sim_op *memset_op(const CUDA_MEMSET_NODE_PARAMS *p)
{
    struct sim_op *op = sim_op_new(SIM_OP_MEMSET);

    if (!op)
        return NULL;
    op->u.set.dst = p->dst;
    op->u.set.value = p->value;
    op->u.set.elem = p->elementSize;
    op->u.set.width = p->width;
    op->u.set.height = p->height;
    op->u.set.pitch = p->height > 1 ? p->pitch : p->width * p->elementSize;
    return op;
}

static void add_wait(struct build *b, struct sim_event *e)
{
    struct sim_dep d;

    sim_event_target(e, &d);
    if (!d.s)
        return;                   /* never recorded: nothing to wait for */
    if (!grow((void **)&b->waits, &b->wcap, b->nwaits, sizeof(*b->waits))) {
        sim_stream_unref(d.s);
        b->nomem = true;
        return;
    }
    b->waits[b->nwaits++] = d;
}

static void add_record(struct build *b, struct sim_event *e)
{
    struct sim_op *op = sim_op_new(SIM_OP_EVENT);

    for (size_t i = 0; i < b->nrec; i++)
        if (b->records[i] == e)
            goto op;
    if (!grow((void **)&b->records, &b->rcap, b->nrec, sizeof(*b->records))) {
        b->nomem = true;
        sim_op_free(op);
        return;
    }
    b->records[b->nrec++] = e;
op:
    if (op) {
        sim_event_ref(e);
        op->u.event = e;
    }
    push_op(b, op);
}

static void build_nodes(struct build *b, struct sim_gnode *const *order, size_t n);

static void build_child(struct build *b, struct sim_graph *g)
{
    bool cycle;
    struct sim_gnode **order = sim_graph_topo(g, &cycle);

    if (!order) {
        b->nomem = true;
        return;
    }
    build_nodes(b, order, g->nnodes);
    free(order);
}

static void build_nodes(struct build *b, struct sim_gnode *const *order, size_t n)
{
    for (size_t i = 0; i < n && !b->nomem; i++) {
        struct sim_gnode *x = order[i];
        struct sim_op *op;

        if (!x->enabled)
            continue;             /* a disabled node runs as an empty one */
        switch (x->type) {
        case CU_GRAPH_NODE_TYPE_KERNEL: push_op(b, kernel_op(&x->u.kernel)); break;
        case CU_GRAPH_NODE_TYPE_MEMCPY: push_op(b, memcpy_op(&x->u.memcpy.p)); break;
        case CU_GRAPH_NODE_TYPE_MEMSET: push_op(b, memset_op(&x->u.memset.p)); break;
        case CU_GRAPH_NODE_TYPE_HOST:
            if ((op = sim_op_new(SIM_OP_HOSTFN))) {
                op->u.hostfn.fn = x->u.host.fn;
                op->u.hostfn.data = x->u.host.userData;
            }
            push_op(b, op);
            break;
        case CU_GRAPH_NODE_TYPE_GRAPH: build_child(b, x->u.child); break;
        case CU_GRAPH_NODE_TYPE_WAIT_EVENT: add_wait(b, x->u.event); break;
        case CU_GRAPH_NODE_TYPE_EVENT_RECORD: add_record(b, x->u.event); break;
        case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        case CU_GRAPH_NODE_TYPE_MEM_FREE:
            if ((op = sim_op_new(x->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? SIM_OP_GMEM_MAP : SIM_OP_GMEM_UNMAP)))
                op->u.gmem = x->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? x->u.alloc.mem : x->u.free.mem;
            push_op(b, op);
            break;
        default:
            break;
        }
    }
}

static void build_free(struct build *b)
{
    for (size_t i = 0; i < b->nwaits; i++)
        sim_stream_unref(b->waits[i].s);
    free(b->waits);
    free(b->records);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;

    return x < y ? -1 : x > y;
}

/* Queues the launch's op (taken, freed on failure too); the record nodes'
 * events now stand for it. Events
 * are locked in address order while it is queued, as cuEventRecord locks its
 * event around the submission. */
static CUresult submit_launch(struct sim_exec *x, struct sim_stream *s, struct build *b)
{
    struct sim_dep *deps = b->waits;
    size_t ndeps = b->nwaits;
    uint64_t seq;
    CUresult r;

    if (x->last_s) {
        if (!grow((void **)&b->waits, &b->wcap, b->nwaits, sizeof(*b->waits))) {
            sim_op_free(b->graph);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        sim_stream_ref(x->last_s);
        b->waits[b->nwaits++] = (struct sim_dep){ x->last_s, x->last_seq };
        deps = b->waits;
        ndeps = b->nwaits;
    }
    qsort(b->records, b->nrec, sizeof(*b->records), cmp_ptr);
    for (size_t i = 0; i < b->nrec; i++)
        pthread_mutex_lock(&b->records[i]->lock);
    r = sim_submit(s, b->graph, deps, (int)ndeps, &seq);
    if (r == CUDA_SUCCESS) {
        for (size_t i = 0; i < b->nrec; i++) {
            struct sim_event *e = b->records[i];

            sim_stream_ref(s);
            if (e->s)
                sim_stream_unref(e->s);
            e->s = s;
            e->seq = seq;
        }
        sim_stream_ref(s);
        if (x->last_s)
            sim_stream_unref(x->last_s);
        x->last_s = s;
        x->last_seq = seq;
    }
    for (size_t i = b->nrec; i-- > 0;)
        pthread_mutex_unlock(&b->records[i]->lock);
    return r;
}

static CUresult launch(CUgraphExec hx, CUstream hs, bool pt)
{
    struct sim_gmem_launch mem;
    struct build b = { 0 };
    struct sim_gmem **held = NULL;
    struct sim_exec *x;
    struct sim_stream *s;
    bool handled = false;
    CUresult r;

    if (sim_exec_get(hx, &x))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    if (sim_capture_pending(s) && ((r = sim_capture_graph_launch(s, x, &handled)) || handled))
        return r;
    pthread_mutex_lock(&x->lock);
    if ((r = sim_gmem_launch_prepare(x, false, &mem)))
        goto out;
    r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!(b.graph = sim_op_new(SIM_OP_GRAPH)))
        goto abort;
    build_nodes(&b, x->order, x->n);
    b.graph->u.graph.ops = b.ops;
    b.graph->u.graph.n = b.n;
    if (b.nomem || (mem.n && !(held = malloc(mem.n * sizeof(*held))))) {
        sim_op_free(b.graph);
        goto abort;
    }
    /* The op holds the allocations' busy marks and drops them when done. */
    if (mem.n)
        memcpy(held, mem.mems, mem.n * sizeof(*held));
    b.graph->u.graph.mems = held;
    b.graph->u.graph.nmems = mem.n;
    if ((r = submit_launch(x, s, &b)))
        sim_gmem_launch_unmark(&mem);     /* the op is gone, and its busy marks with it */
    else
        sim_gmem_launch_commit(&mem);
    goto out_build;
abort:
    sim_gmem_launch_abort(&mem);
out_build:
    build_free(&b);
out:
    pthread_mutex_unlock(&x->lock);
    return r;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_BEGIN();
    return launch(hGraphExec, hStream, false);
}
SIM_EXPORT(cuGraphLaunch);

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    SIM_BEGIN();
    return launch(hGraphExec, hStream, true);
}
SIM_EXPORT(cuGraphLaunch_ptsz);

/* Upload: the launch's resources (graph memory) are set up now, nothing runs. */
static CUresult upload(struct sim_exec *x, CUstream hs, bool pt)
{
    struct sim_gmem_launch mem;
    struct sim_stream *s;
    CUresult r;

    if ((r = sim_stream_get(hs, pt, &s)) || (r = sim_capture_sync_call(s)))
        return r;
    pthread_mutex_lock(&x->lock);
    r = sim_gmem_launch_prepare(x, true, &mem);
    pthread_mutex_unlock(&x->lock);
    return r;
}

CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    struct sim_exec *x;

    SIM_BEGIN();
    if (sim_exec_get(hGraphExec, &x))
        return CUDA_ERROR_INVALID_VALUE;
    return upload(x, hStream, false);
}
SIM_EXPORT(cuGraphUpload);

CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    struct sim_exec *x;

    SIM_BEGIN();
    if (sim_exec_get(hGraphExec, &x))
        return CUDA_ERROR_INVALID_VALUE;
    return upload(x, hStream, true);
}
SIM_EXPORT(cuGraphUpload_ptsz);

/* ---- per-node updates of an executable graph ------------------------------------------ */

/* The exec's node instantiated from hNode (a node of the graph instantiated). */
static CUresult exec_node(CUgraphExec hx, CUgraphNode hNode, CUgraphNodeType type, struct sim_exec **xo,
                          struct sim_gnode **out)
{
    struct sim_exec *x;
    struct sim_gnode *o;

    if (sim_exec_get(hx, &x) || sim_gnode_get(hNode, &o) || o->type != type)
        return CUDA_ERROR_INVALID_VALUE;
    for (struct sim_gnode *n = x->g->head; n; n = n->next)
        if (n->clone_of == o) {
            *xo = x;
            *out = n;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

static bool cooperative(const struct sim_knode *k)
{
    return (k->attr_set & (1u << CU_LAUNCH_ATTRIBUTE_COOPERATIVE)) &&
           k->attrs[CU_LAUNCH_ATTRIBUTE_COOPERATIVE].cooperative;
}

static CUresult exec_kernel_set(CUgraphExec hx, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *p)
{
    struct sim_exec *x;
    struct sim_gnode *n;
    struct sim_knode k = { 0 };
    unsigned grid[3], block[3];
    CUresult r;

    if (!p || exec_node(hx, hNode, CU_GRAPH_NODE_TYPE_KERNEL, &x, &n))
        return CUDA_ERROR_INVALID_VALUE;
    grid[0] = p->gridDimX, grid[1] = p->gridDimY, grid[2] = p->gridDimZ;
    block[0] = p->blockDimX, block[1] = p->blockDimY, block[2] = p->blockDimZ;
    if ((r = sim_knode_set(&k, p->func, p->kern, p->ctx, grid, block, p->sharedMemBytes,
                           p->kernelParams, p->extra)))
        return r;
    if (k.k.ctx != n->u.kernel.k.ctx) {
        free(k.argbuf);
        return CUDA_ERROR_INVALID_VALUE;    /* the function's context cannot change */
    }
    free(n->u.kernel.argbuf);
    k.attr_set = n->u.kernel.attr_set;
    memcpy(k.attrs, n->u.kernel.attrs, sizeof(k.attrs));
    n->u.kernel = k;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                           const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    SIM_BEGIN();
    return exec_kernel_set(hGraphExec, hNode, nodeParams);
}
SIM_EXPORT(cuGraphExecKernelNodeSetParams_v2);
SIM_PARTIAL(cuGraphExecKernelNodeSetParams_v2,
    "packed arguments (extra), kernels without SIMCUDA_KERNEL_PARAMS: "
    "CUDA_ERROR_NOT_SUPPORTED");

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    CUDA_KERNEL_NODE_PARAMS v2;

    SIM_BEGIN();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    v2 = (CUDA_KERNEL_NODE_PARAMS){
        .func = p->func, .gridDimX = p->gridDimX, .gridDimY = p->gridDimY, .gridDimZ = p->gridDimZ,
        .blockDimX = p->blockDimX, .blockDimY = p->blockDimY, .blockDimZ = p->blockDimZ,
        .sharedMemBytes = p->sharedMemBytes, .kernelParams = p->kernelParams, .extra = p->extra,
    };
    return exec_kernel_set(hGraphExec, hNode, &v2);
}
SIM_EXPORT(cuGraphExecKernelNodeSetParams);
SIM_PARTIAL(cuGraphExecKernelNodeSetParams,
    "packed arguments (extra), kernels without SIMCUDA_KERNEL_PARAMS: "
    "CUDA_ERROR_NOT_SUPPORTED");

static int dev_of(uint64_t addr)
{
    struct sim_range *r;
    int dev = -1;

    sim_map_rdlock();
    if ((r = sim_map_find(addr)))
        dev = r->dev;
    sim_map_unlock();
    if (dev < 0) {
        struct sim_gmem *m = sim_gmem_find(addr, false);
        dev = m ? m->dev : -1;
    }
    return dev;
}

/* An executable memcpy keeps its memory types and devices. */
static bool copy_compatible(const struct sim_copy *a, const struct sim_copy *b)
{
    return a->dst_dev == b->dst_dev && a->src_dev == b->src_dev &&
           (!a->dst_dev || dev_of(a->dst) == dev_of(b->dst)) &&
           (!a->src_dev || dev_of(a->src) == dev_of(b->src));
}

CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMCPY3D *copyParams,
                                        CUcontext ctx)
{
    struct sim_exec *x;
    struct sim_gnode *n;
    struct sim_copy a, b;
    CUresult r;

    SIM_BEGIN();
    (void)ctx;
    if (!copyParams || exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, &x, &n))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_copy_from_3d(copyParams, &b)) || (r = sim_copy_check(&b)))
        return r;
    if ((r = sim_copy_from_3d(&n->u.memcpy.p, &a)) || !copy_compatible(&a, &b))
        return CUDA_ERROR_INVALID_VALUE;
    n->u.memcpy.p = *copyParams;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphExecMemcpyNodeSetParams);

/* 2D memsets may change address and value only; 1D ones their size too. */
static bool memset_compatible(const CUDA_MEMSET_NODE_PARAMS *a, const CUDA_MEMSET_NODE_PARAMS *b)
{
    if (dev_of(a->dst) != dev_of(b->dst))
        return false;
    if (a->height > 1 || b->height > 1)
        return a->height == b->height && a->width == b->width && a->pitch == b->pitch &&
               a->elementSize == b->elementSize;
    return true;
}

CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    struct sim_exec *x;
    struct sim_gnode *n;
    const CUDA_MEMSET_NODE_PARAMS *p = memsetParams;

    SIM_BEGIN();
    (void)ctx;
    if (!p || exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET, &x, &n))
        return CUDA_ERROR_INVALID_VALUE;
    if ((p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->width || !p->height ||
        p->dst % p->elementSize ||
        !sim_rows_covered(p->dst, p->width * p->elementSize, p->height,
                          p->height > 1 ? p->pitch : p->width * p->elementSize) ||
        !memset_compatible(&n->u.memset.p, p))
        return CUDA_ERROR_INVALID_VALUE;
    n->u.memset.p = *p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphExecMemsetNodeSetParams);

CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                      const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct sim_exec *x;
    struct sim_gnode *n;

    SIM_BEGIN();
    if (!nodeParams || !nodeParams->fn || exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, &x, &n))
        return CUDA_ERROR_INVALID_VALUE;
    n->u.host = *nodeParams;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphExecHostNodeSetParams);

static CUresult exec_event_set(CUgraphExec hx, CUgraphNode hNode, CUgraphNodeType type, CUevent event)
{
    struct sim_exec *x;
    struct sim_gnode *n;
    struct sim_event *e;

    if (exec_node(hx, hNode, type, &x, &n) || sim_event_get(event, &e))
        return CUDA_ERROR_INVALID_VALUE;
    sim_event_ref(e);
    sim_event_unref(n->u.event);
    n->u.event = e;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
    SIM_BEGIN();
    return exec_event_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}
SIM_EXPORT(cuGraphExecEventRecordNodeSetEvent);

CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
    SIM_BEGIN();
    return exec_event_set(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}
SIM_EXPORT(cuGraphExecEventWaitNodeSetEvent);

CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
    struct sim_gnode *o, *n;
    struct sim_exec *x;

    SIM_BEGIN();
    if (sim_gnode_get(hNode, &o) || (o->type != CU_GRAPH_NODE_TYPE_KERNEL &&
                                     o->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
                                     o->type != CU_GRAPH_NODE_TYPE_MEMSET) ||
        exec_node(hGraphExec, hNode, o->type, &x, &n))
        return CUDA_ERROR_INVALID_VALUE;
    n->enabled = isEnabled != 0;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphNodeSetEnabled);

CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled)
{
    struct sim_gnode *o, *n;
    struct sim_exec *x;

    SIM_BEGIN();
    if (!isEnabled || sim_gnode_get(hNode, &o) || (o->type != CU_GRAPH_NODE_TYPE_KERNEL &&
                                                   o->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
                                                   o->type != CU_GRAPH_NODE_TYPE_MEMSET) ||
        exec_node(hGraphExec, hNode, o->type, &x, &n))
        return CUDA_ERROR_INVALID_VALUE;
    *isEnabled = n->enabled;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuGraphNodeGetEnabled);

/* ---- cuGraphExecUpdate -------------------------------------------------------------- */

/*
 * Nodes pair by insertion order, dependencies by edge order, as the driver
 * documents ("the topology ... as well as the node insertion order, must
 * match"); then every pair must allow the change of parameters.
 */
static CUgraphExecUpdateResult pair_check(struct sim_graph *xg, struct sim_graph *g, struct sim_gnode **err,
                                          struct sim_gnode **err_from);

static size_t index_of(struct sim_graph *g, const struct sim_gnode *n)
{
    size_t i = 0;

    for (struct sim_gnode *x = g->head; x; x = x->next, i++)
        if (x == n)
            return i;
    return (size_t)-1;
}

static CUgraphExecUpdateResult params_check(struct sim_gnode *a, struct sim_gnode *b, struct sim_gnode **err,
                                            struct sim_gnode **err_from)
{
    switch (a->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        if (a->u.kernel.k.ctx != b->u.kernel.k.ctx)
            return CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE;
        if (cooperative(&a->u.kernel) != cooperative(&b->u.kernel))
            return CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED;
        return CU_GRAPH_EXEC_UPDATE_SUCCESS;
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
        struct sim_copy x, y;
        if (sim_copy_from_3d(&a->u.memcpy.p, &x) || sim_copy_from_3d(&b->u.memcpy.p, &y) ||
            !copy_compatible(&x, &y))
            return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
        return CU_GRAPH_EXEC_UPDATE_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET:
        return memset_compatible(&a->u.memset.p, &b->u.memset.p) ? CU_GRAPH_EXEC_UPDATE_SUCCESS
                                                                 : CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
        return a->u.alloc.mem == b->u.alloc.mem ? CU_GRAPH_EXEC_UPDATE_SUCCESS
                                                : CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return a->u.free.mem == b->u.free.mem ? CU_GRAPH_EXEC_UPDATE_SUCCESS
                                              : CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return pair_check(a->u.child, b->u.child, err, err_from);
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return CU_GRAPH_EXEC_UPDATE_SUCCESS;
    default:
        return CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    }
}

static CUgraphExecUpdateResult pair_check(struct sim_graph *xg, struct sim_graph *g, struct sim_gnode **err,
                                          struct sim_gnode **err_from)
{
    struct sim_gnode *a = xg->head, *b = g->head;

    if (xg->nnodes != g->nnodes) {
        *err = NULL;
        return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    for (; a && b; a = a->next, b = b->next) {
        CUgraphExecUpdateResult r;

        *err = b;
        if (a->type != b->type)
            return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        if (a->nin != b->nin)
            return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        for (size_t i = 0; i < a->nin; i++)
            if (index_of(xg, a->in[i]) != index_of(g, b->in[i])) {
                *err_from = b->in[i];
                return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
            }
        if ((r = params_check(a, b, err, err_from)))
            return r;
    }
    *err = NULL;
    return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

/* Copies b's parameters into a, pairwise (checked already); false on ENOMEM.
 * Kernel attributes come along; enabled flags stay the exec's. */
static bool apply(struct sim_graph *xg, struct sim_graph *g)
{
    for (struct sim_gnode *a = xg->head, *b = g->head; a && b; a = a->next, b = b->next) {
        if (a->type == CU_GRAPH_NODE_TYPE_GRAPH) {
            if (!apply(a->u.child, b->u.child))
                return false;
        } else if (sim_gnode_copy_params(a, b)) {
            return false;
        }
    }
    return true;
}

static CUresult exec_update(CUgraphExec hx, CUgraph hg, CUgraphExecUpdateResultInfo *info)
{
    struct sim_exec *x;
    struct sim_graph *g;
    struct sim_gnode *err = NULL, *err_from = NULL;
    CUgraphExecUpdateResult res;

    if (!info)
        return CUDA_ERROR_INVALID_VALUE;
    memset(info, 0, sizeof(*info));
    if (sim_exec_get(hx, &x) || sim_graph_get(hg, &g) || g->moved) {
        info->result = CU_GRAPH_EXEC_UPDATE_ERROR;
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&x->lock);
    res = pair_check(x->g, g, &err, &err_from);
    if (res == CU_GRAPH_EXEC_UPDATE_SUCCESS && !apply(x->g, g))
        res = CU_GRAPH_EXEC_UPDATE_ERROR;
    pthread_mutex_unlock(&x->lock);
    info->result = res;
    info->errorNode = (CUgraphNode)err;
    info->errorFromNode = (CUgraphNode)err_from;
    return res == CU_GRAPH_EXEC_UPDATE_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
}

CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)
{
    SIM_BEGIN();
    return exec_update(hGraphExec, hGraph, resultInfo);
}
SIM_EXPORT(cuGraphExecUpdate_v2);

CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                           CUgraphExecUpdateResult *updateResult_out)
{
    CUgraphExecUpdateResultInfo info;
    CUresult r;

    SIM_BEGIN();
    if (!hErrorNode_out || !updateResult_out)
        return CUDA_ERROR_INVALID_VALUE;
    r = exec_update(hGraphExec, hGraph, &info);
    *hErrorNode_out = info.errorNode;
    *updateResult_out = info.result;
    return r;
}
SIM_EXPORT(cuGraphExecUpdate);

CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph)
{
    struct sim_exec *x;
    struct sim_gnode *n, *err = NULL, *err_from = NULL;
    struct sim_graph *cg;
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    if (exec_node(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_GRAPH, &x, &n) || sim_graph_get(childGraph, &cg))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&x->lock);
    if (pair_check(n->u.child, cg, &err, &err_from))
        r = CUDA_ERROR_INVALID_VALUE;     /* the topology must stay the same */
    else if (!apply(n->u.child, cg))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&x->lock);
    return r;
}
SIM_EXPORT(cuGraphExecChildGraphNodeSetParams);

CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *p)
{
    SIM_BEGIN();
    if (!p)
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
        return exec_kernel_set(hGraphExec, hNode, &kp);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        return cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, &p->memcpy.copyParams, p->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
        CUDA_MEMSET_NODE_PARAMS mp = { m->dst, m->pitch, m->value, m->elementSize, m->width, m->height };
        return cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, &mp, m->ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS hp = { p->host.fn, p->host.userData };
        return cuGraphExecHostNodeSetParams(hGraphExec, hNode, &hp);
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
        return cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return exec_event_set(hGraphExec, hNode, p->type, p->eventWait.event);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return exec_event_set(hGraphExec, hNode, p->type, p->eventRecord.event);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}
SIM_EXPORT(cuGraphExecNodeSetParams);
SIM_PARTIAL(cuGraphExecNodeSetParams,
    "packed arguments (extra), kernels without SIMCUDA_KERNEL_PARAMS: "
    "CUDA_ERROR_NOT_SUPPORTED");
