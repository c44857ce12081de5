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
 * Each allocation keeps its own identity (base, the size asked for, buffer
 * id, the context current at the call, the pool of a stream-ordered one), so
 * that cuMemGetAddressRange and cuPointerGetAttribute answer per allocation,
 * as the driver does, not per segment; and copies that would run past an
 * allocation's end into its neighbour are refused as the driver refuses them
 * (devmem_check_range). Destroying a context frees what was allocated in it.
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
    CUcontext ctx;                /* current when it was allocated */
    CUmemoryPool pool;            /* TC_ALLOC_ASYNC: its pool; else NULL */
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

/*
 * cuMemAlloc semantics: size 0 -> CUDA_ERROR_INVALID_VALUE. `pool` is the
 * pool a stream-ordered allocation (TC_ALLOC_ASYNC) is taken from, for its
 * MEMPOOL_HANDLE attribute and the pool's usage; ignored for other kinds.
 */
CUresult devmem_alloc(CUdeviceptr *out, size_t size, enum tc_alloc_kind kind, CUmemoryPool pool);

/*
 * Frees the allocation that starts at p. CUDA_ERROR_NOT_FOUND when p is not
 * in our memory at all (the caller then passes the call to the driver, which
 * answers as it would); CUDA_ERROR_INVALID_VALUE when it is in one of our
 * segments but not the start of a live allocation (freed already, or its
 * context destroyed), as the driver answers; CUDA_SUCCESS otherwise. Like
 * the driver's cuMemFree it waits for the device work that may use the
 * block, except while a stream capture is in progress: synchronising the
 * context then would invalidate the capture, so the block is held back (not
 * reusable, already freed for the program) until a later trim without
 * capture.
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

/*
 * Whether [p, p+len) may be copied to or from, as the driver checks a copy's
 * or memset's range: 0 when p is not in our memory (the driver checks it),
 * or when the range lies inside one live allocation; -EFAULT when p is in
 * one of our segments but the range starts in no live allocation or runs
 * past its end (the driver: CUDA_ERROR_INVALID_VALUE). len 0 is fine.
 */
int devmem_check_range(CUdeviceptr p, size_t len);

/*
 * The context was destroyed (cuCtxDestroy, the last release or a reset of a
 * primary context): its allocations are gone, as the driver frees them, and
 * so are the empty arenas otherwise kept for the next small block.
 */
void devmem_context_destroyed(CUcontext ctx);

/* What a pool has handed out through us, for cuMemPoolGetAttribute: used,
 * the bytes its live allocations asked for (as the driver counts them);
 * reserved, the memory they take (rounded to 256 bytes, or to the
 * granularity for a segment of its own); each with its high-water mark
 * since the last reset. */
struct devmem_pool_use {
    uint64_t used, used_high, reserved, reserved_high;
};
void devmem_pool_usage(CUmemoryPool pool, struct devmem_pool_use *use);
/* cuMemPoolSetAttribute(USED_MEM_HIGH or, with `reserved`, RESERVED_MEM_HIGH,
 * 0): that mark restarts at the current value. */
void devmem_pool_reset_high(CUmemoryPool pool, int reserved);

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
/* The same with the registry lock already held. */
void devmem_usage_locked(uint64_t *bytes, uint32_t *count);

/*
 * Returns the blocks of completed cuMemFreeAsync calls to the allocator,
 * the blocks held back during captures (when none is in progress: after a
 * cuCtxSynchronize), and releases cached empty segments. Calls the driver;
 * not from a callback.
 */
void devmem_trim(void);

#endif
