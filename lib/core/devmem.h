/*
 * devmem.h - address-stable device memory for cuMemAlloc and friends.
 *
 * The driver's own cuMemAlloc memory cannot be released and later put back at
 * the same address. So the interposer serves cuMemAlloc, cuMemAllocPitch,
 * cuMemAllocAsync and cuMemAllocFromPoolAsync itself, from *segments*: device
 * VA reserved with cuMemAddressReserve and backed by one physical allocation
 * (cuMemCreate + cuMemMap + cuMemSetAccess), recorded in the registry.
 *
 *   - A request of more than half an arena gets a dedicated segment, rounded
 *     up to the allocation granularity (as the driver rounds large blocks).
 *   - Smaller requests are carved out of shared 2 MiB arenas (first fit,
 *     256-byte alignment, free neighbours merged), so small buffers do not
 *     cost 2 MiB each.
 *
 * Each allocation keeps its own identity (base, size, buffer id), so that
 * cuMemGetAddressRange and cuPointerGetAttribute answer per allocation, not
 * per segment.
 *
 * All functions return CUresult (the wrappers hand them to the program) and
 * take the registry lock themselves; they call the real driver through the
 * function table. The calling thread must have a current context (the
 * allocation goes to its device), as for the real calls.
 */
#ifndef TCGPU_DEVMEM_H
#define TCGPU_DEVMEM_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#include "registry.h"

#define DEVMEM_ALIGN 256

/* A tracked allocation, as handed to iteration callbacks. */
struct devmem_alloc {
    CUdeviceptr va;
    size_t size;
    enum tc_alloc_kind kind;
    uint64_t id;
    int device;
    const char *site;             /* call site when TCGPU_TRACE_ALLOC=1, else NULL */
    int contents_dead;            /* graph memory between launches: nothing to save */
};

/*
 * Graph memory (kind TC_ALLOC_GRAPH, graphmem.h). Such a block is
 *   IDLE      the graph's, not allocated from the program's view (made in a
 *             capture and not launched yet, or freed by the program);
 *   INTERNAL  freed inside its own graph: allocated only during launches;
 *   LIVE      left allocated by a launch: the program's until it frees it.
 * Only LIVE contents outlive a launch. A free (cuMemFree, cuMemFreeAsync) of
 * a LIVE block makes it IDLE and keeps the memory (the graph's next launch
 * uses it); of another graph block it is CUDA_ERROR_INVALID_VALUE.
 */
enum devmem_graph_state { DEVMEM_GRAPH_IDLE = 0, DEVMEM_GRAPH_INTERNAL, DEVMEM_GRAPH_LIVE };
/* The state of the graph block at p: 0, or -ENOENT if p is not the base of one. */
int devmem_graph_state(CUdeviceptr p, enum devmem_graph_state *st);
int devmem_graph_set(CUdeviceptr p, enum devmem_graph_state st);
/* Its graphs are gone: an IDLE or INTERNAL block is freed, a LIVE one
 * becomes an ordinary stream-ordered allocation of the program. */
void devmem_graph_release(CUdeviceptr p);

/* cuMemAlloc semantics: size 0 -> CUDA_ERROR_INVALID_VALUE. */
CUresult devmem_alloc(CUdeviceptr *out, size_t size, enum tc_alloc_kind kind);

/*
 * Frees the allocation that starts at p. CUDA_ERROR_NOT_FOUND when p is not
 * the start of one of ours (the caller then passes the call to the driver,
 * which answers as it would); CUDA_SUCCESS otherwise. Like the driver's
 * cuMemFree it waits for the device work that may use the block, except
 * while a stream capture is in progress: synchronising the context then
 * would invalidate the capture, so the block is held back (not reusable,
 * already freed for the program) until a later trim without capture.
 */
CUresult devmem_free(CUdeviceptr p);

/*
 * cuMemFreeAsync: the block returns to the allocator once `stream` reaches
 * this point (a host function enqueued on it; `per_thread` picks the _ptsz
 * flavour for stream 0). CUDA_ERROR_NOT_FOUND as for devmem_free.
 */
CUresult devmem_free_async(CUdeviceptr p, CUstream stream, int per_thread);

/*
 * The allocation containing p: 0 and *a filled; -EFAULT when p lies in one
 * of our segments but in no live allocation (freed memory: the caller must
 * answer as the driver does for an unknown pointer, not pass it on, since the
 * driver would see the segment); -ENOENT when p is not ours at all.
 */
int devmem_lookup(CUdeviceptr p, struct devmem_alloc *a);

/* Calls fn for every live allocation, in address order; stops at a non-zero return. */
int devmem_for_each(int (*fn)(const struct devmem_alloc *a, void *arg), void *arg);

/*
 * cuCtxEnablePeerAccess / cuCtxDisablePeerAccess: the memory tcgpu serves is
 * VMM memory, which the driver's context peer access does not reach (VMM
 * access is per mapping, cuMemSetAccess). So device `peer` is given (or
 * loses) read/write access to every segment of device `owner`, now and for
 * segments made later, as peer access covers all of a context's
 * allocations. Takes the lock; calls the driver. CUDA_SUCCESS or its error.
 */
CUresult devmem_peer_access(int owner, int peer, int enable);

/* Bytes the program holds (sum of allocation sizes) and their count. */
void devmem_usage(uint64_t *bytes, uint32_t *count);

/*
 * Returns the blocks of completed cuMemFreeAsync calls to the allocator,
 * the blocks held back during captures (when none is in progress: after a
 * cuCtxSynchronize), and releases cached empty segments. Calls the driver;
 * not from a callback.
 */
void devmem_trim(void);

#endif
