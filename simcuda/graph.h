/*
 * graph.h - graphs, executable graphs, graph memory and stream capture:
 * what capture.c, graph.c, graph_exec.c and graph_mem.c share (simcuda
 * internal; docs/simcuda.md describes the behaviour).
 *
 * A graph is a list of nodes in insertion order (the order cuGraphExecUpdate
 * pairs nodes by) with edges both ways. Nodes own copies of their parameters
 * (kernel argument values included). Instantiation clones the graph into the
 * executable graph, so later changes to the graph do not reach it, and keeps a
 * topological order; a launch turns the clone's nodes into stream operations,
 * in that order, inside one SIM_OP_GRAPH on the launch stream, so a launch is
 * one unit in stream order and runs its nodes in a legal serialisation of the
 * graph.
 *
 * Graph objects are not thread-safe (as documented for the driver): one
 * thread at a time per graph. Capture state is guarded by capture.c's lock.
 */
#ifndef SIMCUDA_GRAPH_H
#define SIMCUDA_GRAPH_H

#include "sim.h"

#define SIM_KATTR_MAX 17           /* launch attribute ids kept on kernel nodes */

struct sim_graph;

struct sim_knode {                 /* a kernel node's launch */
    CUfunction func;               /* as given: a CUfunction or a CUkernel */
    struct sim_kfn k;
    unsigned grid[3], block[3], shared;
    void *argbuf;                  /* owned copy of the argument values */
    void **params;
    uint32_t attr_set;             /* bit i: attrs[i] was set */
    CUlaunchAttributeValue attrs[SIM_KATTR_MAX];
};

struct sim_gnode {
    uint32_t magic;                /* SIM_MAGIC_GNODE */
    CUgraphNodeType type;
    struct sim_graph *graph;
    uint64_t seq;                  /* insertion order in its graph */
    struct sim_gnode *prev, *next; /* the graph's nodes, in insertion order */
    struct sim_gnode **in, **out;  /* dependencies, dependents */
    CUgraphEdgeData *in_edge, *out_edge;
    size_t nin, nout, in_cap, out_cap;
    struct sim_gnode *clone_of;    /* in a clone: the node it was copied from */
    bool enabled;                  /* executable graphs: cuGraphNodeSetEnabled */
    uint64_t mark;                 /* capture.c's reachability walks */
    union {
        struct sim_knode kernel;
        struct {
            CUDA_MEMCPY3D p;
            struct sim_ctx *ctx;
        } memcpy;
        struct {
            CUDA_MEMSET_NODE_PARAMS p;
            struct sim_ctx *ctx;
        } memset;
        CUDA_HOST_NODE_PARAMS host;
        struct sim_graph *child;   /* owned */
        struct sim_event *event;   /* record / wait nodes; referenced */
        struct {
            struct sim_gmem *mem;  /* referenced */
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            CUmemAccessDesc *access;   /* owned copy of p.accessDescs */
        } alloc;
        struct {
            CUdeviceptr dptr;
            struct sim_gmem *mem;  /* the allocation it frees; referenced */
        } free;
    } u;
};

struct sim_uobj;

struct sim_uobj_ref {              /* references a graph holds on a user object */
    struct sim_uobj *obj;
    unsigned count;
    struct sim_uobj_ref *next;
};

struct sim_graph {
    uint32_t magic;                /* SIM_MAGIC_GRAPH */
    struct sim_gnode *head, *tail;
    size_t nnodes;
    uint64_t next_seq;
    unsigned nmem;                 /* allocation and free nodes, children included */
    int nexec;                     /* live executable graphs instantiated from it */
    struct sim_capture *capture;   /* a capture sequence is adding nodes to it */
    struct sim_gnode *parent;      /* child graphs: the node that owns it */
    bool moved;                    /* a child graph moved into its parent (ownership MOVE) */
    struct sim_uobj_ref *uobjs;
};

struct sim_exec {
    uint32_t magic;                /* SIM_MAGIC_GEXEC */
    struct sim_graph *g;           /* private clone; its nodes' clone_of: the instantiated graph's */
    struct sim_graph *origin;      /* the graph instantiated, NULL once destroyed */
    struct sim_gnode **order;      /* g's nodes, topological order */
    size_t n;
    unsigned long long flags;
    pthread_mutex_t lock;          /* launches */
    struct sim_stream *last_s;     /* the previous launch: the next one runs after it */
    uint64_t last_seq;
    struct sim_exec *next_exec;    /* every executable graph (graph_exec.c) */
};

/* --- graph.c ------------------------------------------------------------------ */
CUresult sim_graph_get(CUgraph h, struct sim_graph **out);
CUresult sim_gnode_get(CUgraphNode h, struct sim_gnode **out);
struct sim_graph *sim_graph_new(void);
void sim_graph_free(struct sim_graph *g);
struct sim_gnode *sim_gnode_new(CUgraphNodeType type);
void sim_gnode_free(struct sim_gnode *n);
/* Adds n to g after deps (each in g, no duplicates): CUDA_SUCCESS or
 * CUDA_ERROR_INVALID_VALUE/OUT_OF_MEMORY (n is not freed). */
CUresult sim_graph_add(struct sim_graph *g, struct sim_gnode *n, struct sim_gnode *const *deps,
                       const CUgraphEdgeData *edges, size_t ndeps);
/* A copy of g, nodes' clone_of set to the originals (memory nodes share their allocation). */
struct sim_graph *sim_graph_clone(struct sim_graph *g);
/* Copies the parameters of src into dst, which has the same type (arguments copied too). */
CUresult sim_gnode_copy_params(struct sim_gnode *dst, const struct sim_gnode *src);
/* A node standing for operation op of a capturing stream of context c (takes op's
 * owned data: the kernel argument buffer). NULL on ENOMEM. */
struct sim_gnode *sim_gnode_from_op(struct sim_op *op, struct sim_ctx *c);
/* Fills a kernel node from CUDA_KERNEL_NODE_PARAMS-like fields (arguments copied). */
CUresult sim_knode_set(struct sim_knode *kn, CUfunction func, CUkernel kern, CUcontext ctx,
                       const unsigned grid[3], const unsigned block[3], unsigned shared,
                       void **params, void **extra);
bool sim_graph_has(struct sim_graph *g, struct sim_gnode *n);
/* g's nodes in a topological order (ties by insertion): malloc'd, or NULL with
 * *cycle set when g has a cycle. */
struct sim_gnode **sim_graph_topo(struct sim_graph *g, bool *cycle);
/* A dependency edge from -> to (no duplicate check): 0 or -ENOMEM. */
int sim_gnode_link(struct sim_gnode *from, struct sim_gnode *to, const CUgraphEdgeData *e);

/* --- graph_exec.c --------------------------------------------------------------- */
CUresult sim_exec_get(CUgraphExec h, struct sim_exec **out);
/* The graph being destroyed: its executable graphs forget it. */
void sim_exec_forget_origin(struct sim_graph *g);

/* --- graph_mem.c ---------------------------------------------------------------------- */
/*
 * A graph allocation. Its address is reserved when the allocation node is
 * created and stays fixed for the node's life; physical memory is charged at
 * the first launch (or upload) and kept ("reserved") until cuDeviceGraphMemTrim
 * or the allocation's end; the range is in the translation map only while the
 * allocation is allocated (from its allocation node to its free).
 */
struct sim_gmem {
    uint64_t va, size, charge;
    int dev;
    struct sim_ctx *ctx;
    int refs;                      /* nodes holding it (allocation node and its clones) */
    bool freed_in_graph;           /* its own graph frees it */
    bool freed_elsewhere;          /* another graph has a free node for it */
    bool outstanding;              /* allocated by a launch and not freed yet (API order) */
    int busy;                      /* launches queued or running that use it */
    unsigned char *backing;        /* reserved physical memory, or NULL */
    struct sim_range *range;       /* in the map: allocated now (worker order) */
    unsigned access_mask;          /* devices with read/write access */
    struct sim_graph *owner;       /* the graph of its allocation node */
    struct sim_gmem *next;
};
CUresult sim_gmem_create(struct sim_ctx *c, const CUDA_MEM_ALLOC_NODE_PARAMS *p,
                         struct sim_gmem **out);
/* Allocation and free nodes (graph_mem.c), for cuGraphAddNode too. */
CUresult sim_gmem_add_alloc_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                 const CUgraphEdgeData *edges, size_t ndeps,
                                 CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUresult sim_gmem_add_free_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                                const CUgraphEdgeData *edges, size_t ndeps, CUdeviceptr dptr);
/* Allocation node n of graph g, made by a capture: the allocation is new. */
CUresult sim_gmem_alloc_node_new(struct sim_ctx *c, const CUDA_MEM_ALLOC_NODE_PARAMS *p,
                                 struct sim_gnode **out);
/* Free node for dptr in graph g (capture or API): checks the rules. */
CUresult sim_gmem_free_node_new(struct sim_graph *g, CUdeviceptr dptr, struct sim_gnode **out);
void sim_gmem_ref(struct sim_gmem *m);
/* The graph allocation whose range starts at va (exact) or contains it. NULL if none. */
struct sim_gmem *sim_gmem_find(uint64_t va, bool exact);
/* Before a launch of x (API order): physical memory charged, the relaunch rule
 * checked, outstanding marks set. Undone by sim_gmem_launch_abort. */
struct sim_gmem_launch {           /* what a launch changed, to undo it */
    struct sim_gmem **mems;        /* every allocation it uses, busy (referenced) */
    bool *was_outstanding;
    size_t n;
};
CUresult sim_gmem_launch_prepare(struct sim_exec *x, bool upload_only, struct sim_gmem_launch *l);
/* The launch was not queued: marks back as they were, busy dropped. */
void sim_gmem_launch_abort(struct sim_gmem_launch *l);
/* The launch's op was freed without running (busy dropped with it): marks back. */
void sim_gmem_launch_unmark(struct sim_gmem_launch *l);
/* The launch is queued: forget the undo information. */
void sim_gmem_launch_commit(struct sim_gmem_launch *l);

/* --- capture.c ------------------------------------------------------------------ */
struct sim_capture {
    uint64_t id;                   /* unique over the process's life */
    struct sim_graph *graph;
    bool owns_graph;               /* cuStreamBeginCapture made it (not ...ToGraph) */
    CUstreamCaptureMode mode;
    const void *thread;            /* the thread that began it */
    bool invalidated;
    struct sim_stream *origin;
    struct sim_stream **streams;   /* every stream in the sequence, origin included (referenced) */
    size_t nstreams, streams_cap;
    struct sim_event **events;     /* events recorded in it (referenced) */
    size_t nevents, events_cap;
    struct sim_ctx *ctx;
    struct sim_capture *next;
};
/* Launch of an executable graph into a capturing stream: a child graph node. */
CUresult sim_capture_graph_launch(struct sim_stream *s, struct sim_exec *x, bool *handled);
/* Is a capture adding nodes to g right now? (destroy is refused then) */
bool sim_capture_uses_graph(struct sim_graph *g);

#endif
