/*
 * test_graphs.c - graphs, stream capture and graph memory, as the driver
 * documents them: what a graph computes, the order it runs in, what capture
 * records and what it refuses (with the capture invalidated), and graph
 * allocations (fixed addresses, the relaunch rule, trim, attributes).
 *
 * Runs with and without libtcgpu.so preloaded (meson: simcuda-graphs and
 * simcuda-graphs-tcgpu); the few answers that differ under tcgpu, which
 * serves graph allocations itself, are checked for what tcgpu documents.
 */
#include "harness.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

static CUfunction k_fill, k_add, k_mark;
static CUdeviceptr logbuf;
static bool under_tcgpu;

#define N 1024

static void fill_node_params(CUDA_KERNEL_NODE_PARAMS *p, CUfunction f, void **args)
{
    memset(p, 0, sizeof(*p));
    p->func = f;
    p->gridDimX = p->gridDimY = p->gridDimZ = 1;
    p->blockDimX = p->blockDimY = p->blockDimZ = 1;
    p->kernelParams = args;
}

static uint32_t word(CUdeviceptr p, size_t i)
{
    uint32_t v;

    CHECK(cuMemcpyDtoH(&v, p + i * 4, 4));
    return v;
}

/* The same on the per-thread default stream, which a capture on a blocking
 * stream does not forbid (the legacy stream it does). */
static uint32_t word_ptds(CUdeviceptr p, size_t i)
{
    uint32_t v;

    CHECK(cuMemcpyDtoH_v2_ptds(&v, p + i * 4, 4));
    return v;
}

static unsigned log_read(void)
{
    return t_log_read(logbuf);
}

static void host_count(void *arg)
{
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static void callback(CUstream s, CUresult r, void *arg)
{
    (void)s;
    (void)r;
    (void)arg;
}

/* ---- explicit graphs -------------------------------------------------------------- */

/* fill(5) -> add_one -> {memcpy to host, host node}; a memset node alone. */
static void test_explicit(CUstream s)
{
    CUdeviceptr buf, other;
    CUgraph g;
    CUgraphExec x;
    CUgraphNode kf, ka, cp, hn, ms, nodes[8], from[8], to[8];
    CUDA_KERNEL_NODE_PARAMS kp;
    CUDA_MEMCPY3D c;
    CUDA_MEMSET_NODE_PARAMS m;
    CUDA_HOST_NODE_PARAMS h;
    uint32_t host[N];
    uint64_t n = N;
    uint32_t five = 5;
    void *fa[] = { &buf, &n, &five }, *aa[] = { &buf, &n };
    int calls = 0;
    size_t num;
    CUgraphNodeType t;

    CHECK(cuMemAlloc(&buf, N * 4));
    CHECK(cuMemAlloc(&other, N * 4));
    CHECK(cuGraphCreate(&g, 0));
    fill_node_params(&kp, k_fill, fa);
    CHECK(cuGraphAddKernelNode(&kf, g, NULL, 0, &kp));
    five = 99;                         /* the node copied the value at creation */
    fill_node_params(&kp, k_add, aa);
    CHECK(cuGraphAddKernelNode(&ka, g, &kf, 1, &kp));
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = buf;
    c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = host;
    c.WidthInBytes = N * 4, c.Height = 1, c.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&cp, g, &ka, 1, &c, NULL));
    h.fn = host_count, h.userData = &calls;
    CHECK(cuGraphAddHostNode(&hn, g, &ka, 1, &h));
    m = (CUDA_MEMSET_NODE_PARAMS){ .dst = other, .value = 7, .elementSize = 4, .width = N, .height = 1 };
    CHECK(cuGraphAddMemsetNode(&ms, g, NULL, 0, &m, NULL));

    CHECK(cuGraphGetNodes(g, NULL, &num));
    CHECK_EQ(num, 5);
    num = 8;
    CHECK(cuGraphGetRootNodes(g, nodes, &num));
    CHECK_EQ(num, 2);
    num = 8;
    CHECK(cuGraphGetEdges(g, from, to, NULL, &num));
    CHECK_EQ(num, 3);
    CHECK(cuGraphNodeGetType(cp, &t));
    CHECK_EQ(t, CU_GRAPH_NODE_TYPE_MEMCPY);
    num = 8;
    CHECK(cuGraphNodeGetDependentNodes(ka, nodes, NULL, &num));
    CHECK_EQ(num, 2);
    CHECK_RES(cuGraphAddKernelNode(&ka, g, &kf, 0, NULL), CUDA_ERROR_INVALID_VALUE);

    CHECK(cuGraphInstantiate(&x, g, 0));
    memset(host, 0, sizeof(host));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(host[0], 6);
    CHECK_EQ(host[N - 1], 6);
    CHECK_EQ(word(other, N - 1), 7);
    CHECK_EQ(calls, 1);

    /* The executable graph is a copy: changing the graph does not reach it,
     * changing the executable's node does. */
    five = 40;
    fill_node_params(&kp, k_fill, fa);
    CHECK(cuGraphKernelNodeSetParams(kf, &kp));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(host[3], 6);
    CHECK(cuGraphExecKernelNodeSetParams(x, kf, &kp));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(host[3], 41);
    CHECK_EQ(calls, 3);

    /* A disabled node runs as an empty one. */
    CHECK(cuGraphNodeSetEnabled(x, ka, 0));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(host[3], 40);
    CHECK_RES(cuGraphNodeSetEnabled(x, hn, 0), CUDA_ERROR_INVALID_VALUE);   /* kernels, copies, memsets */
    CHECK(cuGraphNodeSetEnabled(x, ka, 1));

    /* cuGraphExecUpdate: same topology, new parameters. */
    CUgraph g2;
    CUgraphExecUpdateResultInfo info;
    CUgraphNode kf2;
    five = 2;
    CHECK(cuGraphClone(&g2, g));
    CHECK(cuGraphNodeFindInClone(&kf2, kf, g2));
    CHECK(cuGraphKernelNodeSetParams(kf2, &kp));
    CHECK(cuGraphExecUpdate(x, g2, &info));
    CHECK_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(host[3], 3);
    /* ... but not a new topology, nor a changed node type. */
    CUgraphNode extra;
    CHECK(cuGraphAddEmptyNode(&extra, g2, NULL, 0));
    CHECK_RES(cuGraphExecUpdate(x, g2, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    CHECK_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    CHECK(cuGraphDestroy(g2));

    /* A cycle cannot be instantiated. */
    CUgraphExec bad;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = { 0 };
    CHECK(cuGraphAddDependencies(g, &cp, &kf, NULL, 1));
    CHECK_RES(cuGraphInstantiateWithParams(&bad, g, &ip), CUDA_ERROR_INVALID_VALUE);
    CHECK_EQ(ip.result_out, CUDA_GRAPH_INSTANTIATE_INVALID_STRUCTURE);
    CHECK(cuGraphRemoveDependencies(g, &cp, &kf, NULL, 1));
    CHECK_RES(cuGraphRemoveDependencies(g, &cp, &kf, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphDestroyNode(ms));
    CHECK(cuGraphGetNodes(g, NULL, &num));
    CHECK_EQ(num, 4);

    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK_RES(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree(buf));
    CHECK(cuMemFree(other));
}

/* Dependencies decide the order: mark nodes log their ids as they run. */
static void test_order_and_children(CUstream s)
{
    CUgraph g, child, outer;
    CUgraphExec x;
    CUgraphNode a, b, c, d, cn;
    CUDA_KERNEL_NODE_PARAMS kp;
    uint32_t ids[4] = { 1, 2, 3, 4 }, ms0 = 0, ms30 = 30;
    void *args[4][3] = {
        { &logbuf, &ids[0], &ms30 }, { &logbuf, &ids[1], &ms0 }, { &logbuf, &ids[2], &ms0 },
        { &logbuf, &ids[3], &ms0 },
    };

    CHECK(cuMemsetD32(logbuf, 0, 64));
    CHECK(cuGraphCreate(&g, 0));
    fill_node_params(&kp, k_mark, args[2]);
    CHECK(cuGraphAddKernelNode(&c, g, NULL, 0, &kp));       /* 3 first in insertion order... */
    fill_node_params(&kp, k_mark, args[0]);
    CHECK(cuGraphAddKernelNode(&a, g, NULL, 0, &kp));
    fill_node_params(&kp, k_mark, args[1]);
    CHECK(cuGraphAddKernelNode(&b, g, &a, 1, &kp));
    CHECK(cuGraphAddDependencies(g, &b, &c, NULL, 1));            /* ...but it depends on 1 -> 2 */
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphLaunch(x, s));
    CHECK_EQ(log_read(), 123);

    /* A child graph node runs the child (a copy) where it sits. */
    CHECK(cuGraphCreate(&child, 0));
    fill_node_params(&kp, k_mark, args[3]);
    CHECK(cuGraphAddKernelNode(&d, child, NULL, 0, &kp));
    CHECK(cuGraphCreate(&outer, 0));
    fill_node_params(&kp, k_mark, args[0]);
    CHECK(cuGraphAddKernelNode(&a, outer, NULL, 0, &kp));
    CHECK(cuGraphAddChildGraphNode(&cn, outer, &a, 1, child));
    CHECK(cuGraphDestroy(child));                            /* the node has its own copy */
    CUgraphExec xo;
    CHECK(cuGraphInstantiate(&xo, outer, 0));
    CHECK(cuMemsetD32(logbuf, 0, 64));
    CHECK(cuGraphLaunch(xo, s));
    CHECK(cuGraphLaunch(x, s));
    CHECK_EQ(log_read(), 14123);

    /* DOT output names every node. */
    char dot[] = "/tmp/simcuda-graph-XXXXXX";
    int fd = mkstemp(dot);
    CHECK_TRUE(fd >= 0);
    close(fd);
    CHECK(cuGraphDebugDotPrint(outer, dot, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE));
    FILE *f = fopen(dot, "r");
    char text[4096] = { 0 };
    CHECK_TRUE(f && fread(text, 1, sizeof(text) - 1, f) > 0);
    fclose(f);
    unlink(dot);
    CHECK_TRUE(strstr(text, "digraph") && strstr(text, "KERNEL") && strstr(text, "GRAPH"));

    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphExecDestroy(xo));
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(outer));
}

/* Event record and wait nodes order work across graphs and streams. */
static void test_event_nodes(CUstream s)
{
    CUstream s2;
    CUevent e;
    CUgraph gr, gw;
    CUgraphExec xr, xw;
    CUgraphNode n, w;
    CUDA_KERNEL_NODE_PARAMS kp;
    uint32_t one = 1, two = 2, ms = 80, zero = 0;
    void *a1[] = { &logbuf, &one, &ms }, *a2[] = { &logbuf, &two, &zero };

    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuGraphCreate(&gr, 0));
    fill_node_params(&kp, k_mark, a1);
    CHECK(cuGraphAddKernelNode(&n, gr, NULL, 0, &kp));
    CHECK(cuGraphAddEventRecordNode(&w, gr, &n, 1, e));
    CHECK(cuGraphCreate(&gw, 0));
    CHECK(cuGraphAddEventWaitNode(&w, gw, NULL, 0, e));
    fill_node_params(&kp, k_mark, a2);
    CHECK(cuGraphAddKernelNode(&n, gw, &w, 1, &kp));
    CHECK(cuGraphInstantiate(&xr, gr, 0));
    CHECK(cuGraphInstantiate(&xw, gw, 0));
    CHECK(cuMemsetD32(logbuf, 0, 64));
    CHECK(cuGraphLaunch(xr, s));
    CHECK(cuGraphLaunch(xw, s2));
    CHECK_EQ(log_read(), 12);
    CHECK(cuEventSynchronize(e));
    CHECK(cuGraphExecDestroy(xr));
    CHECK(cuGraphExecDestroy(xw));
    CHECK(cuGraphDestroy(gr));
    CHECK(cuGraphDestroy(gw));
    CHECK(cuEventDestroy(e));
    CHECK(cuStreamDestroy(s2));
}

/* ---- stream capture ----------------------------------------------------------------------- */

static void launch_add_n(CUstream s, CUdeviceptr p, uint64_t n)
{
    void *a[] = { &p, &n };

    CHECK(cuLaunchKernel(k_add, 1, 1, 1, 1, 1, 1, 0, s, a, NULL));
}

static void launch_add(CUstream s, CUdeviceptr p)
{
    uint64_t n = N;
    void *a[] = { &p, &n };

    CHECK(cuLaunchKernel(k_add, 1, 1, 1, 1, 1, 1, 0, s, a, NULL));
}

static void expect_invalidated(CUstream s);

/* A fork/join capture: what it records does not run until launched. */
static void test_capture(CUstream s)
{
    CUstream side;
    CUevent fork, join;
    CUdeviceptr buf;
    CUgraph g;
    CUgraphExec x;
    CUstreamCaptureStatus st;
    cuuint64_t id, id2;
    const CUgraphNode *deps;
    size_t ndeps, num;
    int calls = 0;
    uint32_t host[N];

    CHECK(cuStreamCreate(&side, 0));
    CHECK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    CHECK(cuMemAlloc(&buf, N * 4));
    CHECK(cuMemsetD32(buf, 10, N));

    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuStreamIsCapturing(s, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CHECK(cuStreamGetCaptureInfo(s, &st, &id, &g, &deps, NULL, &ndeps));
    CHECK_EQ(ndeps, 0);
    launch_add_n(s, buf, 512);
    CHECK(cuStreamGetCaptureInfo(s, &st, &id2, NULL, &deps, NULL, &ndeps));
    CHECK_EQ(id2, id);
    CHECK_EQ(ndeps, 1);
    CHECK(cuEventRecord(fork, s));
    CHECK(cuStreamWaitEvent(side, fork, 0));           /* side joins the capture */
    CHECK(cuStreamIsCapturing(side, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    launch_add_n(side, buf + 512 * 4, 512);
    CHECK(cuLaunchHostFunc(side, host_count, &calls));
    CHECK(cuMemsetD32Async(buf + 1020 * 4, 3, 4, s));
    CHECK(cuEventRecord(join, side));
    CHECK(cuStreamWaitEvent(s, join, 0));
    CHECK(cuMemcpyDtoHAsync(host, buf, N * 4, s));
    /* Nothing of it ran. */
    CHECK_EQ(word_ptds(buf, 0), 10);
    CHECK_EQ(calls, 0);
    CHECK(cuStreamEndCapture(s, &g));
    CHECK_TRUE(g != NULL);
    CHECK(cuStreamIsCapturing(side, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
    CHECK(cuGraphGetNodes(g, NULL, &num));
    CHECK_EQ(num, 5);

    CHECK(cuGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 3; i++)
        CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(host[0], 13);
    CHECK_EQ(host[600], 13);
    CHECK_EQ(host[1019], 13);
    CHECK_EQ(host[1023], 3);
    CHECK_EQ(calls, 3);

    /* Capturing a graph launch makes a child graph node. */
    CUgraph g2;
    CUgraphNode kids[4];
    CUgraphNodeType t;
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuStreamEndCapture(s, &g2));
    num = 4;
    CHECK(cuGraphGetNodes(g2, kids, &num));
    CHECK_EQ(num, 1);
    CHECK(cuGraphNodeGetType(kids[0], &t));
    CHECK_EQ(t, CU_GRAPH_NODE_TYPE_GRAPH);
    CHECK(cuGraphDestroy(g2));

    /* Capture into an existing graph, after a node of it. */
    CUgraph into;
    CUgraphNode root;
    CHECK(cuGraphCreate(&into, 0));
    CHECK(cuGraphAddEmptyNode(&root, into, NULL, 0));
    CHECK(cuStreamBeginCaptureToGraph(s, into, &root, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launch_add(s, buf);
    CHECK(cuStreamEndCapture(s, &g2));
    CHECK_TRUE(g2 == into);
    num = 4;
    CHECK(cuGraphGetRootNodes(into, kids, &num));
    CHECK_EQ(num, 1);
    CHECK_TRUE(kids[0] == root);
    CHECK(cuGraphDestroy(into));

    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuMemFree(buf));
    CHECK(cuEventDestroy(fork));
    CHECK(cuEventDestroy(join));
    CHECK(cuStreamDestroy(side));
}

/* Ends a capture that must have been invalidated. */
static void expect_invalidated(CUstream s)
{
    CUstreamCaptureStatus st;
    CUgraph g = (CUgraph)1;

    CHECK(cuStreamIsCapturing(s, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK_TRUE(g == NULL);
    CHECK(cuStreamIsCapturing(s, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
}

struct other_thread {
    CUcontext ctx;
    CUstreamCaptureMode mode;
    CUresult result;
};

static void *alloc_elsewhere(void *arg)
{
    struct other_thread *o = arg;
    CUdeviceptr p;

    cuCtxSetCurrent(o->ctx);
    cuThreadExchangeStreamCaptureMode(&o->mode);
    o->result = cuMemAlloc(&p, 4096);
    if (o->result == CUDA_SUCCESS)
        cuMemFree(p);
    return NULL;
}

static CUresult alloc_in_thread(CUcontext ctx, CUstreamCaptureMode mode)
{
    struct other_thread o = { ctx, mode, CUDA_ERROR_UNKNOWN };
    pthread_t t;

    CHECK_TRUE(pthread_create(&t, NULL, alloc_elsewhere, &o) == 0);
    pthread_join(t, NULL);
    return o.result;
}

static void *end_elsewhere(void *arg)
{
    void **a = arg;
    CUgraph g;

    cuCtxSetCurrent((CUcontext)a[1]);
    *(CUresult *)a[2] = cuStreamEndCapture((CUstream)a[0], &g);
    if (*(CUresult *)a[2] == CUDA_SUCCESS)
        cuGraphDestroy(g);
    return NULL;
}

static CUresult end_in_thread(CUstream s, CUcontext ctx)
{
    CUresult r = CUDA_ERROR_UNKNOWN;
    void *a[3] = { s, ctx, &r };
    pthread_t t;

    CHECK_TRUE(pthread_create(&t, NULL, end_elsewhere, a) == 0);
    pthread_join(t, NULL);
    return r;
}

static void test_capture_rules(CUcontext ctx, CUstream s)
{
    CUstream other, nb;
    CUevent e, e2;
    CUdeviceptr p;
    CUgraph g;
    CUstreamCaptureStatus st;
    CUstreamCaptureMode mode;

    CHECK(cuStreamCreate(&other, 0));
    CHECK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));

    CHECK_RES(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CHECK_RES(cuStreamBeginCapture(s, (CUstreamCaptureMode)7), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);

    /* The legacy stream: a query says IMPLICIT and leaves the capture alone;
     * using it is an error that invalidates the blocking capture. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
    CHECK_RES(cuStreamIsCapturing(CU_STREAM_LEGACY, &st), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    CHECK(cuStreamIsCapturing(s, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CHECK_RES(cuMemsetD32Async(logbuf, 0, 1, CU_STREAM_LEGACY), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    launch_add_n(nb, logbuf, 64);               /* a non-blocking stream is unaffected */
    CHECK_RES(cuMemsetD32Async(logbuf, 0, 1, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    expect_invalidated(s);
    CHECK(cuStreamSynchronize(nb));

    /* Synchronising the capturing stream or the context. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_RES(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_RES(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);

    /* Potentially unsafe calls, by capture mode and thread mode. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CHECK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CHECK(cuMemAlloc(&p, 4096));                       /* relaxed: allowed (PyTorch does this) */
    CHECK(cuMemFree(p));
    CHECK(cuThreadExchangeStreamCaptureMode(&mode));
    CHECK_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
    CHECK(cuStreamIsCapturing(s, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CHECK_EQ(alloc_in_thread(ctx, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
    CHECK_EQ(alloc_in_thread(ctx, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);

    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK_EQ(alloc_in_thread(ctx, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    CHECK_RES(cuMemAlloc(&p, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);

    /* Events: a captured event cannot be queried; waiting on a non-captured
     * one crosses the boundary, unless it is an external wait. */
    CHECK(cuEventRecord(e2, other));
    CHECK(cuStreamSynchronize(other));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuEventRecord(e, s));
    CHECK_RES(cuEventQuery(e), CUDA_ERROR_CAPTURED_EVENT);
    expect_invalidated(s);
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_RES(cuStreamWaitEvent(s, e2, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
    expect_invalidated(s);
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuStreamWaitEvent(s, e2, CU_EVENT_WAIT_EXTERNAL));
    CHECK(cuEventRecordWithFlags(e2, s, CU_EVENT_RECORD_EXTERNAL));
    CHECK(cuStreamEndCapture(s, &g));
    size_t num;
    CHECK(cuGraphGetNodes(g, NULL, &num));
    CHECK_EQ(num, 2);                                  /* a wait node and a record node */
    CHECK(cuGraphDestroy(g));

    /* Two sequences cannot merge. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuEventRecord(e, s));
    CHECK_RES(cuStreamWaitEvent(other, e, 0), CUDA_ERROR_STREAM_CAPTURE_MERGE);
    expect_invalidated(s);
    expect_invalidated(other);

    /* A fork that is not joined back. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuEventRecord(e, s));
    CHECK(cuStreamWaitEvent(other, e, 0));
    launch_add_n(other, logbuf, 64);
    CHECK_RES(cuStreamEndCapture(other, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuEventRecord(e, s));
    CHECK(cuStreamWaitEvent(other, e, 0));
    launch_add_n(other, logbuf, 64);
    CHECK_RES(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    CHECK_TRUE(g == NULL);
    CHECK(cuStreamIsCapturing(other, &st));
    CHECK_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);

    /* Ending from another thread: only a relaxed sequence. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_EQ(end_in_thread(s, ctx), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
    CHECK(cuStreamEndCapture(s, &g));
    CHECK(cuGraphDestroy(g));
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK_EQ(end_in_thread(s, ctx), CUDA_SUCCESS);

    /* Callbacks cannot be captured; a dependency set can be edited. */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_RES(cuStreamAddCallback(s, callback, NULL, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    expect_invalidated(s);
    CHECK_RES(cuStreamUpdateCaptureDependencies(s, NULL, NULL, 0, 0), CUDA_ERROR_ILLEGAL_STATE);

    CHECK(cuEventDestroy(e));
    CHECK(cuEventDestroy(e2));
    CHECK(cuStreamDestroy(other));
    CHECK(cuStreamDestroy(nb));
}

/* ---- graph memory -------------------------------------------------------------------------- */

static uint64_t graph_mem(CUgraphMem_attribute a)
{
    cuuint64_t v = 0;

    CHECK(cuDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

static void test_graph_memory(CUstream s)
{
    const size_t size = 4u << 20;
    CUdeviceptr tmp, kept, first = 0;
    CUgraph g;
    CUgraphExec x, x2;
    CUgraphNode nodes[8];
    CUgraphNodeType t;
    uint32_t host[N];
    uint64_t n = N;
    uint32_t v = 21;
    size_t num, free0, free1, total;

    /* A step that allocates a temporary and frees it, and allocates a result
     * it leaves allocated (the program frees it after each launch). */
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(&tmp, size, s));
    CHECK(cuMemAllocAsync(&kept, N * 4, s));
    void *fa[] = { &tmp, &n, &v }, *aa[] = { &tmp, &n };
    CHECK(cuLaunchKernel(k_fill, 1, 1, 1, 1, 1, 1, 0, s, fa, NULL));
    CHECK(cuLaunchKernel(k_add, 1, 1, 1, 1, 1, 1, 0, s, aa, NULL));
    CHECK(cuMemcpyDtoDAsync(kept, tmp, N * 4, s));
    CHECK(cuMemFreeAsync(tmp, s));
    CHECK_RES(cuMemFreeAsync(logbuf, s), CUDA_ERROR_INVALID_VALUE);    /* not a graph allocation */
    expect_invalidated(s);

    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(&tmp, size, s));
    CHECK(cuMemAllocAsync(&kept, N * 4, s));
    CHECK(cuLaunchKernel(k_fill, 1, 1, 1, 1, 1, 1, 0, s, fa, NULL));
    CHECK(cuLaunchKernel(k_add, 1, 1, 1, 1, 1, 1, 0, s, aa, NULL));
    CHECK(cuMemcpyDtoDAsync(kept, tmp, N * 4, s));
    CHECK(cuMemFreeAsync(tmp, s));
    CHECK(cuStreamEndCapture(s, &g));
    num = 8;
    CHECK(cuGraphGetNodes(g, nodes, &num));
    if (under_tcgpu) {
        /* tcgpu serves graph memory itself: the driver's graph has no
         * memory nodes, only the fill, add and copy. */
        CHECK_EQ(num, 3);
    } else {
        CHECK_EQ(num, 6);
        CHECK(cuGraphNodeGetType(nodes[0], &t));
        CHECK_EQ(t, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
        CHECK(cuGraphNodeGetType(nodes[5], &t));
        CHECK_EQ(t, CU_GRAPH_NODE_TYPE_MEM_FREE);
        CUDA_MEM_ALLOC_NODE_PARAMS ap;
        CHECK(cuGraphMemAllocNodeGetParams(nodes[0], &ap));
        CHECK_EQ(ap.dptr, tmp);
        CHECK_EQ(ap.bytesize, size);
    }

    /* The restrictions of graphs with memory nodes. */
    CUgraph clone, parent;
    CUgraphNode child;
    CHECK_RES(cuGraphClone(&clone, g), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuGraphCreate(&parent, 0));
    CHECK_RES(cuGraphAddChildGraphNode(&child, parent, NULL, 0, g), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGraphDestroyNode(nodes[under_tcgpu ? 0 : 2]), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphDestroy(parent));

    CHECK(cuMemGetInfo(&free0, &total));
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK_RES(cuGraphInstantiate(&x2, g, 0), CUDA_ERROR_INVALID_VALUE);   /* one instance at a time */
    for (int i = 0; i < 3; i++) {
        memset(host, 0, sizeof(host));
        CHECK(cuGraphLaunch(x, s));
        /* Stream work after the launch may use the unfreed allocation. */
        CHECK(cuMemcpyDtoHAsync(host, kept, N * 4, s));
        CHECK(cuStreamSynchronize(s));
        CHECK_EQ(host[0], 22);
        CHECK_EQ(host[N - 1], 22);
        /* Relaunching before freeing it is refused. */
        CHECK_RES(cuGraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE);
        if (!first)
            first = kept;
        CHECK_EQ(kept, first);                /* the address is fixed */
        if (i == 0)
            CHECK(cuMemFreeAsync(kept, s));
        else
            CHECK(cuMemFree(kept));
        CHECK_RES(cuMemFree(kept), CUDA_ERROR_INVALID_VALUE);   /* freed already */
    }
    CHECK(cuStreamSynchronize(s));
    /* The temporary is gone (its own graph freed it); memory stays reserved. */
    if (!under_tcgpu) {
        unsigned long long id;
        CHECK_RES(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, tmp), CUDA_ERROR_INVALID_VALUE);
        CHECK_EQ(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT), 0);
        CHECK_TRUE(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) >= size + N * 4);
        CHECK_TRUE(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) >= size);
        CHECK(cuMemGetInfo(&free1, &total));
        CHECK_TRUE(free1 + size <= free0);      /* reserved memory is taken from the device */
        CHECK(cuDeviceGraphMemTrim(0));
        CHECK_EQ(graph_mem(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), 0);
        CHECK(cuMemGetInfo(&free1, &total));
        CHECK_EQ(free1, free0);                 /* and given back by the trim */
        cuuint64_t zero = 0, one = 1;
        CHECK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
        CHECK_EQ(graph_mem(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), 0);
        CHECK_RES(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one), CUDA_ERROR_INVALID_VALUE);
    }
    CHECK(cuGraphExecDestroy(x));

    /* With AUTO_FREE_ON_LAUNCH a relaunch frees what the last launch left. */
    CHECK(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuMemcpyDtoHAsync(host, kept, N * 4, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(host[5], 22);
    cuuint64_t flags;
    CHECK(cuGraphExecGetFlags(x, &flags));
    CHECK_EQ(flags, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    CHECK(cuMemFree(kept));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));

    /* Explicit allocation and free nodes. */
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    CUgraphNode an, fn, kn;
    CUdeviceptr dptr;
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&p, 0, sizeof(p));
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = N * 4;
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphAddMemAllocNode(&an, g, NULL, 0, &p));
    dptr = p.dptr;
    CHECK_TRUE(dptr != 0);
    void *ka[] = { &dptr, &n };
    fill_node_params(&kp, k_add, ka);
    CHECK(cuGraphAddKernelNode(&kn, g, &an, 1, &kp));
    CHECK(cuGraphAddMemFreeNode(&fn, g, &kn, 1, dptr));
    CHECK_RES(cuGraphAddMemFreeNode(&fn, g, &kn, 1, dptr), CUDA_ERROR_INVALID_VALUE);   /* twice */
    CHECK_RES(cuGraphAddMemFreeNode(&fn, g, &kn, 1, logbuf), CUDA_ERROR_INVALID_VALUE); /* not a graph's */
    CUdeviceptr got;
    CHECK(cuGraphMemFreeNodeGetParams(fn, &got));
    CHECK_EQ(got, dptr);
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphLaunch(x, s));
    CHECK(cuGraphLaunch(x, s));                   /* freed inside: relaunch is fine */
    CHECK(cuStreamSynchronize(s));
    CHECK(cuGraphExecDestroy(x));
    CHECK(cuGraphDestroy(g));
    CHECK(cuDeviceGraphMemTrim(0));
}

/* ---- user objects ---------------------------------------------------------------------------- */

static int destroyed;

static void uobj_destroy(void *p)
{
    __atomic_store_n((int *)p, 1, __ATOMIC_SEQ_CST);
}

static void test_user_objects(void)
{
    CUuserObject o;
    CUgraph g;
    CUgraphExec x;

    CHECK(cuUserObjectCreate(&o, &destroyed, uobj_destroy, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphRetainUserObject(g, o, 1, CU_GRAPH_USER_OBJECT_MOVE));   /* the caller's reference */
    CHECK(cuGraphInstantiate(&x, g, 0));
    CHECK(cuGraphDestroy(g));
    t_sleep_ms(20);
    CHECK_EQ(__atomic_load_n(&destroyed, __ATOMIC_SEQ_CST), 0);          /* the executable holds it */
    CHECK(cuGraphExecDestroy(x));
    for (int i = 0; i < 200 && !__atomic_load_n(&destroyed, __ATOMIC_SEQ_CST); i++)
        t_sleep_ms(5);
    CHECK_EQ(__atomic_load_n(&destroyed, __ATOMIC_SEQ_CST), 1);
    CHECK_RES(cuUserObjectCreate(&o, &destroyed, uobj_destroy, 1, 0), CUDA_ERROR_INVALID_VALUE);
}

int main(void)
{
    CUcontext ctx;
    CUmodule mod;
    CUstream s;

    sim_test_setup("graphs");
    under_tcgpu = dlsym(RTLD_DEFAULT, "tcgpu_status") != NULL;
    ctx = t_init();
    CHECK(cuModuleLoad(&mod, t_module_path()));
    CHECK(cuModuleGetFunction(&k_fill, mod, "fill_u32"));
    CHECK(cuModuleGetFunction(&k_add, mod, "add_one"));
    CHECK(cuModuleGetFunction(&k_mark, mod, "mark"));
    CHECK(cuMemAlloc(&logbuf, 64 * 4));
    CHECK(cuStreamCreate(&s, 0));

    test_explicit(s);
    test_order_and_children(s);
    test_event_nodes(s);
    test_capture(s);
    test_capture_rules(ctx, s);
    test_graph_memory(s);
    test_user_objects();

    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(logbuf));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(0));
    printf("graphs%s: ok\n", under_tcgpu ? " (under tcgpu)" : "");
    return 0;
}
