/*
 * track_graphs.c - stream capture and graphs: what lib/core/graphmem.c
 * must know to serve memory allocated inside capture (graphmem.h), and the
 * driver's rules for graphs with memory nodes, which the driver cannot
 * enforce on graphs whose memory tcgpu serves (docs/interposition.md,
 * "Graphs and stream capture").
 *
 * Every wrapper passes the API gate and calls the real function first (or
 * refuses as the driver would have); only a successful call is recorded.
 */
#include <stdlib.h>
#include <cuda.h>

#include "core/devmem.h"
#include "core/graphmem.h"
#include "core/objects.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "driver/unsupported.h"

/* The older and per-thread-stream ABI names (declared for the driver's own build only). */
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);

/* ---- capture ---------------------------------------------------------------------- */

/* The capture id of stream after a successful begin; 0 if it cannot be had. */
static cuuint64_t capture_id(CUstream stream, int per_thread)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUresult rc = per_thread
        ? TCGPU_REAL_ABI(cuStreamGetCaptureInfo_v3_ptsz)(stream, &st, &id, NULL, NULL, NULL, NULL)
        : TCGPU_REAL_ABI(cuStreamGetCaptureInfo_v3)(stream, &st, &id, NULL, NULL, NULL, NULL);

    return rc == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? id : 0;
}

static CUresult begun(CUresult rc, CUstream stream, int per_thread, int mode, CUgraph into)
{
    cuuint64_t id;

    if (rc == CUDA_SUCCESS && (id = capture_id(stream, per_thread)))
        graphmem_capture_begun(stream, per_thread, id, mode, into);
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    TCGPU_GATE_ENTER("cuStreamBeginCapture_v2");
    CUresult rc = begun(TCGPU_REAL_ABI(cuStreamBeginCapture_v2)(hStream, mode), hStream, 0, mode, NULL);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    TCGPU_GATE_ENTER("cuStreamBeginCapture_v2_ptsz");
    CUresult rc = begun(TCGPU_REAL_ABI(cuStreamBeginCapture_v2_ptsz)(hStream, mode), hStream, 1, mode, NULL);
    TCGPU_GATE_LEAVE();
    return rc;
}

/* CUDA 10.0's prototype, global mode. */
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream)
{
    TCGPU_GATE_ENTER("cuStreamBeginCapture_ptsz");
    CUresult rc = begun(TCGPU_REAL_ABI(cuStreamBeginCapture_ptsz)(hStream), hStream, 1,
                        CU_STREAM_CAPTURE_MODE_GLOBAL, NULL);
    TCGPU_GATE_LEAVE();
    return rc;
}

/* cuda.h renames cuStreamBeginCapture: the v1 ABI name is defined by address. */
CUresult CUDAAPI tcgpu_cuStreamBeginCapture_v1(CUstream hStream) __asm__("cuStreamBeginCapture");
__attribute__((visibility("default"))) CUresult CUDAAPI tcgpu_cuStreamBeginCapture_v1(CUstream hStream)
{
    TCGPU_GATE_ENTER("cuStreamBeginCapture");
    CUresult rc = begun(TCGPU_REAL_ABI(cuStreamBeginCapture)(hStream), hStream, 0,
                        CU_STREAM_CAPTURE_MODE_GLOBAL, NULL);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode)
{
    TCGPU_GATE_ENTER("cuStreamBeginCaptureToGraph");
    CUresult rc = begun(TCGPU_REAL_ABI(cuStreamBeginCaptureToGraph)(hStream, hGraph, dependencies, dependencyData,
                                                                     numDependencies, mode),
                        hStream, 0, mode, hGraph);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode)
{
    TCGPU_GATE_ENTER("cuStreamBeginCaptureToGraph_ptsz");
    CUresult rc = begun(TCGPU_REAL_ABI(cuStreamBeginCaptureToGraph_ptsz)(hStream, hGraph, dependencies,
                                                                          dependencyData, numDependencies, mode),
                        hStream, 1, mode, hGraph);
    TCGPU_GATE_LEAVE();
    return rc;
}

static int stream_capturing(CUstream stream, int per_thread)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = per_thread ? TCGPU_REAL_ABI(cuStreamIsCapturing_ptsz)(stream, &st)
                             : TCGPU_REAL_ABI(cuStreamIsCapturing)(stream, &st);

    return rc != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The nodes of a graph holding graph memory, so that their removal is refused. */
static void protect_nodes(CUgraph g)
{
    CUgraphNode *v;
    size_t n = 0;

    if (!graphmem_graph_has_memory(g) || TCGPU_REAL(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS || !n)
        return;
    if ((v = calloc(n, sizeof(*v))) && TCGPU_REAL(cuGraphGetNodes)(g, v, &n) == CUDA_SUCCESS)
        graphmem_graph_nodes(g, v, n);
    free(v);
}

static CUresult ended(CUresult rc, CUstream stream, int per_thread, CUgraph *graph)
{
    int over = rc == CUDA_SUCCESS || !stream_capturing(stream, per_thread);

    graphmem_capture_ended(stream, per_thread, rc, rc == CUDA_SUCCESS && graph ? *graph : NULL, over);
    if (rc == CUDA_SUCCESS && graph)
        protect_nodes(*graph);
    if (over && !graphmem_captures_active())
        devmem_trim();                    /* frees held back during the capture */
    return rc;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    TCGPU_GATE_ENTER("cuStreamEndCapture");
    CUresult rc = ended(TCGPU_REAL_ABI(cuStreamEndCapture)(hStream, phGraph), hStream, 0, phGraph);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    TCGPU_GATE_ENTER("cuStreamEndCapture_ptsz");
    CUresult rc = ended(TCGPU_REAL_ABI(cuStreamEndCapture_ptsz)(hStream, phGraph), hStream, 1, phGraph);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUstreamCaptureMode want = mode ? *mode : CU_STREAM_CAPTURE_MODE_GLOBAL;

    TCGPU_GATE_ENTER("cuThreadExchangeStreamCaptureMode");
    CUresult rc = TCGPU_REAL(cuThreadExchangeStreamCaptureMode)(mode);
    if (rc == CUDA_SUCCESS)
        graphmem_thread_mode_set(want);
    TCGPU_GATE_LEAVE();
    return rc;
}

/* ---- graphs ---------------------------------------------------------------------- */

/*
 * A graph with memory nodes of the driver's (cuGraphAddMemAllocNode) holds a
 * note that blocks checkpoints (lib/driver/unsupported.h); what is made from
 * it holds it too: its clones, the graphs it becomes a child of, its
 * executable graphs. The note goes when the last of them is destroyed (and
 * lib/core/blockers.c then asks the driver whether the memory is freed).
 */
static void graph_note_passes(enum tcgpu_holder to_kind, const void *to, CUgraph from)
{
    tcgpu_unsupported_inherit(TCGPU_HELD_BY_GRAPH, (uint64_t)(uintptr_t)from, to_kind, (uint64_t)(uintptr_t)to);
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    TCGPU_GATE_ENTER("cuGraphDestroy");
    CUresult rc = TCGPU_REAL(cuGraphDestroy)(hGraph);
    if (rc == CUDA_SUCCESS) {
        graphmem_graph_destroyed(hGraph);
        tcgpu_unsupported_release(TCGPU_HELD_BY_GRAPH, (uint64_t)(uintptr_t)hGraph);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* The driver does not clone graphs with memory nodes. */
CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphClone");
    if (graphmem_graph_has_memory(originalGraph)) {
        rc = CUDA_ERROR_NOT_SUPPORTED;
    } else {
        rc = TCGPU_REAL(cuGraphClone)(phGraphClone, originalGraph);
        if (rc == CUDA_SUCCESS) {
            graphmem_graph_adopt(*phGraphClone, originalGraph);
            graph_note_passes(TCGPU_HELD_BY_GRAPH, *phGraphClone, originalGraph);
        }
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* A child is cloned into its parent: not one with memory nodes. */
CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUgraph childGraph)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphAddChildGraphNode");
    if (graphmem_graph_has_memory(childGraph)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        rc = TCGPU_REAL(cuGraphAddChildGraphNode)(phGraphNode, hGraph, dependencies, numDependencies, childGraph);
        if (rc == CUDA_SUCCESS) {
            graphmem_graph_adopt(hGraph, childGraph);
            graph_note_passes(TCGPU_HELD_BY_GRAPH, hGraph, childGraph);
        }
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* cuGraphAddNode's child and memory-node kinds, as the dedicated calls. */
static CUresult add_node_checked(CUgraph hGraph, CUgraphNodeParams *p, int *move)
{
    *move = 0;
    if (!p)
        return CUDA_SUCCESS;
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) {
        *move = p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
        if (!*move && graphmem_graph_has_memory(p->graph.graph))
            return CUDA_ERROR_INVALID_VALUE;
    }
    (void)hGraph;
    return CUDA_SUCCESS;
}

static void add_node_done(CUgraph hGraph, CUgraphNodeParams *p, int move)
{
    if (!p)
        return;
    if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) {
        graphmem_graph_adopt(hGraph, p->graph.graph);
        graph_note_passes(TCGPU_HELD_BY_GRAPH, hGraph, p->graph.graph);
        if (move)
            graphmem_graph_destroyed(p->graph.graph);   /* the parent owns it now */
    }
    if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        tcgpu_note_unsupported_held("cuGraphAddNode", "graph memory nodes added explicitly are the driver's: "
                                                      "they cannot be checkpointed yet",
                                    TCGPU_HELD_BY_GRAPH, (uint64_t)(uintptr_t)hGraph);
}

CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                   CUgraphNodeParams *nodeParams)
{
    int move;
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphAddNode_v2");
    if ((rc = add_node_checked(hGraph, nodeParams, &move)) == CUDA_SUCCESS) {
        rc = TCGPU_REAL_ABI(cuGraphAddNode_v2)(phGraphNode, hGraph, dependencies, dependencyData,
                                               numDependencies, nodeParams);
        if (rc == CUDA_SUCCESS)
            add_node_done(hGraph, nodeParams, move);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI tcgpu_cuGraphAddNode_v1(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                        size_t numDependencies, CUgraphNodeParams *nodeParams)
    __asm__("cuGraphAddNode");
__attribute__((visibility("default"))) CUresult CUDAAPI
tcgpu_cuGraphAddNode_v1(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    int move;
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphAddNode");
    if ((rc = add_node_checked(hGraph, nodeParams, &move)) == CUDA_SUCCESS) {
        rc = TCGPU_REAL_ABI(cuGraphAddNode)(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
        if (rc == CUDA_SUCCESS)
            add_node_done(hGraph, nodeParams, move);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* Graphs with memory nodes keep their nodes and edges. */
CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode)
{
    TCGPU_GATE_ENTER("cuGraphDestroyNode");
    CUresult rc = graphmem_node_protected(hNode) ? CUDA_ERROR_INVALID_VALUE : TCGPU_REAL(cuGraphDestroyNode)(hNode);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                              const CUgraphEdgeData *edgeData, size_t numDependencies)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphRemoveDependencies_v2");
    rc = graphmem_graph_has_memory(hGraph)
             ? CUDA_ERROR_INVALID_VALUE
             : TCGPU_REAL_ABI(cuGraphRemoveDependencies_v2)(hGraph, from, to, edgeData, numDependencies);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI tcgpu_cuGraphRemoveDependencies_v1(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                                   size_t numDependencies) __asm__("cuGraphRemoveDependencies");
__attribute__((visibility("default"))) CUresult CUDAAPI
tcgpu_cuGraphRemoveDependencies_v1(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   size_t numDependencies)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphRemoveDependencies");
    rc = graphmem_graph_has_memory(hGraph)
             ? CUDA_ERROR_INVALID_VALUE
             : TCGPU_REAL_ABI(cuGraphRemoveDependencies)(hGraph, from, to, numDependencies);
    TCGPU_GATE_LEAVE();
    return rc;
}

/* ---- executable graphs -------------------------------------------------------------- */

static CUresult instantiated(CUresult rc, CUgraphExec *x, CUgraph g, unsigned long long flags)
{
    if (rc == CUDA_SUCCESS && graphmem_instantiated(g, *x, flags)) {
        TCGPU_REAL(cuGraphExecDestroy)(*x);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc == CUDA_SUCCESS)
        graph_note_passes(TCGPU_HELD_BY_GRAPH_EXEC, *x, g);
    return rc;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphInstantiateWithFlags");
    if ((rc = graphmem_instantiate_check(hGraph)) == CUDA_SUCCESS)
        rc = instantiated(TCGPU_REAL_ABI(cuGraphInstantiateWithFlags)(phGraphExec, hGraph, flags),
                          phGraphExec, hGraph, flags);
    TCGPU_GATE_LEAVE();
    return rc;
}

static CUresult with_params(CUgraphExec *x, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p, int per_thread)
{
    CUresult rc = graphmem_instantiate_check(g);

    if (rc != CUDA_SUCCESS) {
        if (p) {
            p->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
            p->hErrNode_out = NULL;
        }
        return rc;
    }
    rc = per_thread ? TCGPU_REAL_ABI(cuGraphInstantiateWithParams_ptsz)(x, g, p)
                    : TCGPU_REAL_ABI(cuGraphInstantiateWithParams)(x, g, p);
    return instantiated(rc, x, g, p ? p->flags : 0);
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    TCGPU_GATE_ENTER("cuGraphInstantiateWithParams");
    CUresult rc = with_params(phGraphExec, hGraph, instantiateParams, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    TCGPU_GATE_ENTER("cuGraphInstantiateWithParams_ptsz");
    CUresult rc = with_params(phGraphExec, hGraph, instantiateParams, 1);
    TCGPU_GATE_LEAVE();
    return rc;
}

/* The CUDA 10/11 prototypes (cuGraphInstantiate, _v2): no flags. */
CUresult CUDAAPI tcgpu_cuGraphInstantiate_v1(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                            char *logBuffer, size_t bufferSize) __asm__("cuGraphInstantiate");
__attribute__((visibility("default"))) CUresult CUDAAPI
tcgpu_cuGraphInstantiate_v1(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                            size_t bufferSize)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphInstantiate");
    if ((rc = graphmem_instantiate_check(hGraph)) == CUDA_SUCCESS)
        rc = instantiated(TCGPU_REAL_ABI(cuGraphInstantiate)(phGraphExec, hGraph, phErrorNode, logBuffer,
                                                              bufferSize),
                          phGraphExec, hGraph, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphInstantiate_v2");
    if ((rc = graphmem_instantiate_check(hGraph)) == CUDA_SUCCESS)
        rc = instantiated(TCGPU_REAL_ABI(cuGraphInstantiate_v2)(phGraphExec, hGraph, phErrorNode, logBuffer,
                                                                 bufferSize),
                          phGraphExec, hGraph, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    TCGPU_GATE_ENTER("cuGraphExecDestroy");
    CUresult rc = TCGPU_REAL(cuGraphExecDestroy)(hGraphExec);
    if (rc == CUDA_SUCCESS) {
        graphmem_exec_destroyed(hGraphExec);
        tcgpu_unsupported_release(TCGPU_HELD_BY_GRAPH_EXEC, (uint64_t)(uintptr_t)hGraphExec);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* Memory nodes cannot change: an update may only bring memory the
 * executable graph holds already. */
CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphExecUpdate_v2");
    if ((rc = graphmem_update_check(hGraphExec, hGraph)) != CUDA_SUCCESS) {
        if (resultInfo)
            *resultInfo = (CUgraphExecUpdateResultInfo){ CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, NULL, NULL };
    } else {
        rc = TCGPU_REAL_ABI(cuGraphExecUpdate_v2)(hGraphExec, hGraph, resultInfo);
        if (rc == CUDA_SUCCESS)
            graph_note_passes(TCGPU_HELD_BY_GRAPH_EXEC, hGraphExec, hGraph);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI tcgpu_cuGraphExecUpdate_v1(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                                           CUgraphExecUpdateResult *updateResult_out) __asm__("cuGraphExecUpdate");
__attribute__((visibility("default"))) CUresult CUDAAPI
tcgpu_cuGraphExecUpdate_v1(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
                           CUgraphExecUpdateResult *updateResult_out)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphExecUpdate");
    if ((rc = graphmem_update_check(hGraphExec, hGraph)) != CUDA_SUCCESS) {
        if (hErrorNode_out)
            *hErrorNode_out = NULL;
        if (updateResult_out)
            *updateResult_out = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    } else {
        rc = TCGPU_REAL_ABI(cuGraphExecUpdate)(hGraphExec, hGraph, hErrorNode_out, updateResult_out);
        if (rc == CUDA_SUCCESS)
            graph_note_passes(TCGPU_HELD_BY_GRAPH_EXEC, hGraphExec, hGraph);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuGraphExecChildGraphNodeSetParams");
    rc = graphmem_update_check(hGraphExec, childGraph) != CUDA_SUCCESS
             ? CUDA_ERROR_INVALID_VALUE
             : TCGPU_REAL(cuGraphExecChildGraphNodeSetParams)(hGraphExec, hNode, childGraph);
    TCGPU_GATE_LEAVE();
    return rc;
}

/*
 * A launch: the relaunch rule of graph memory first (refused as the driver
 * refuses it), marks undone if the driver refuses. Launched into a capture,
 * it becomes a child graph there: the capture's graph holds the memory too.
 */
static CUresult launch(CUgraphExec x, CUstream s, int per_thread)
{
    cuuint64_t id = 0;
    CUresult rc;

    if (graphmem_captures_active() && (id = capture_id(s, per_thread))) {
        rc = per_thread ? TCGPU_REAL_ABI(cuGraphLaunch_ptsz)(x, s) : TCGPU_REAL_ABI(cuGraphLaunch)(x, s);
        if (rc == CUDA_SUCCESS && graphmem_exec_has_memory(x))
            graphmem_capture_adopt(id, x);
        return rc;
    }
    if ((rc = graphmem_launch(x)) != CUDA_SUCCESS)
        return rc;
    rc = per_thread ? TCGPU_REAL_ABI(cuGraphLaunch_ptsz)(x, s) : TCGPU_REAL_ABI(cuGraphLaunch)(x, s);
    if (rc != CUDA_SUCCESS)
        graphmem_launch_failed(x);
    return rc;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    TCGPU_GATE_ENTER("cuGraphLaunch");
    CUresult rc = launch(hGraphExec, hStream, 0);
    if (rc == CUDA_SUCCESS)
        objects_note_work(hStream, 0, "cuGraphLaunch", OBJ_WORK_GRAPH, hGraphExec);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    TCGPU_GATE_ENTER("cuGraphLaunch_ptsz");
    CUresult rc = launch(hGraphExec, hStream, 1);
    if (rc == CUDA_SUCCESS)
        objects_note_work(hStream, 1, "cuGraphLaunch_ptsz", OBJ_WORK_GRAPH, hGraphExec);
    TCGPU_GATE_LEAVE();
    return rc;
}
