/*
 * graphmem.h - memory allocated inside stream capture, owned by the graphs
 * made from it, and the captures in progress (docs/interposition.md,
 * "Graphs and stream capture").
 *
 * Inside a capture, the driver turns cuMemAllocAsync into a graph allocation
 * node whose physical memory it owns: memory a suspend could not release nor
 * put back. So the interposer serves such allocations itself, from
 * address-stable memory (devmem.c, kind TC_ALLOC_GRAPH), and the driver's
 * graph gets no memory nodes: each launch finds the memory at the same
 * address, which is what the driver promises for graph allocations. What
 * the driver enforces for graphs with memory nodes is enforced here instead:
 *
 *   - an allocation the capture also frees is the graph's own, for its life;
 *     its contents do not survive a launch (a snapshot skips them);
 *   - an allocation the capture leaves allocated is the program's after each
 *     launch until it frees it (cuMemFreeAsync, cuMemFree, or a free in
 *     another graph); relaunching before that is CUDA_ERROR_INVALID_VALUE
 *     unless instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
 *   - such a graph is instantiated once at a time, not cloned, not embedded
 *     as a child, and its nodes and edges are not removed.
 * Blocks live as long as a graph or an executable graph refers to them
 * (through clones and updates too); the last reference releases them.
 *
 * The captures in progress are tracked (begin, end, the thread that began
 * them, their mode and every thread's capture mode), so that calls the
 * driver would refuse during capture reach the driver (which refuses them
 * and invalidates the capture as it must), and so that a checkpoint, which
 * must synchronise the device, is refused while one is in progress.
 *
 * Thread-safe; one lock, never held while calling the driver except from
 * the functions that say so. Functions returning CUresult hand it to the
 * program; they call the real driver through the function table.
 */
#ifndef TCGPU_GRAPHMEM_H
#define TCGPU_GRAPHMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

/* --- captures ------------------------------------------------------------- */

/* A capture began on stream (per_thread: the _ptsz flavour), with the driver's
 * capture id; into: the graph of cuStreamBeginCaptureToGraph, else NULL.
 * Returns 0 or -ENOMEM (the capture is then not tracked: allocations inside
 * it go to the driver and are noted as unsupported). */
int graphmem_capture_begun(CUstream stream, int per_thread, uint64_t id, int mode, CUgraph into);

/*
 * cuStreamEndCapture on stream returned rc and graph; ended: the stream is no
 * longer capturing. On success the capture's allocations become graph's; if
 * the capture ended without a graph they are released (a capture into an
 * existing graph gives them to that graph either way).
 */
void graphmem_capture_ended(CUstream stream, int per_thread, CUresult rc, CUgraph graph, int ended);

/* Captures in progress (cheap: one atomic load). */
int graphmem_captures_active(void);

/* The calling thread's capture mode changed (cuThreadExchangeStreamCaptureMode). */
void graphmem_thread_mode_set(int mode);

/* Would the driver refuse a potentially unsafe call (cuMemAlloc, cuMemFree)
 * of this thread now? (cuThreadExchangeStreamCaptureMode's rule) */
bool graphmem_unsafe_prohibited(void);

/* "stream capture 3 in progress on stream 0x..., begun by thread 1234" into
 * buf; false if none is. */
bool graphmem_capture_describe(char *buf, size_t len);

/* --- allocations inside a capture ------------------------------------------ */

/*
 * cuMemAllocAsync inside capture `id`: *out gets address-stable memory that
 * belongs to the capture. CUDA_ERROR_NOT_FOUND when the capture is not
 * tracked (the caller passes the call to the driver); the allocator's
 * errors otherwise.
 */
CUresult graphmem_alloc(uint64_t id, CUdeviceptr *out, size_t size);

/*
 * cuMemFreeAsync of p inside capture `id`: a free of graph memory, recorded.
 * CUDA_ERROR_NOT_FOUND when p is not graph memory (the driver answers: only
 * graph allocations can be freed in a graph) or the capture is not tracked;
 * CUDA_ERROR_INVALID_VALUE for a second free, or a free of memory its own
 * graph frees.
 */
CUresult graphmem_free(uint64_t id, CUdeviceptr p);

/* --- graphs and executable graphs ------------------------------------------ */

/* Does g (or e, an executable graph) hold graph memory of ours? */
bool graphmem_graph_has_memory(CUgraph g);
bool graphmem_exec_has_memory(CUgraphExec x);

/* to refers to from's graph memory too (a clone, a child graph node,
 * a capture of a graph launch): 0 or -ENOMEM. */
int graphmem_graph_adopt(void *to, const void *from);

/* An executable graph was launched into capture `id` (a child graph node):
 * the capture's graph holds x's graph memory too. 0 or -ENOMEM. */
int graphmem_capture_adopt(uint64_t id, CUgraphExec x);

/* The nodes capture made in g (a graph holding graph memory): their removal
 * is refused (cuGraphDestroyNode), as for graphs with memory nodes. */
void graphmem_graph_nodes(CUgraph g, const CUgraphNode *nodes, size_t n);
bool graphmem_node_protected(CUgraphNode node);

/* g is destroyed / x is destroyed: their references go. */
void graphmem_graph_destroyed(CUgraph g);
void graphmem_exec_destroyed(CUgraphExec x);

/* Before instantiating g: CUDA_ERROR_INVALID_VALUE if g holds graph memory
 * and an executable graph of it exists. */
CUresult graphmem_instantiate_check(CUgraph g);
/* g was instantiated as x with flags: 0 or -ENOMEM. */
int graphmem_instantiated(CUgraph g, CUgraphExec x, unsigned long long flags);

/* cuGraphExecUpdate(x, g): only to a graph whose memory x holds already
 * (memory nodes cannot change): CUDA_SUCCESS or CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE. */
CUresult graphmem_update_check(CUgraphExec x, CUgraph g);

/*
 * Before launching x: the relaunch rule checked and the blocks marked as the
 * launch leaves them (API order, as the driver). On CUDA_SUCCESS the caller
 * launches, and calls graphmem_launch_failed(x) if the driver refuses.
 */
CUresult graphmem_launch(CUgraphExec x);
void graphmem_launch_failed(CUgraphExec x);

#endif
