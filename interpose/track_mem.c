/*
 * track_mem.c - cuMemAlloc and friends, served from address-stable memory
 * (lib/core/devmem.c), and the queries that must answer per allocation.
 *
 * Every wrapper passes the API gate like the generated ones. Pointers that
 * are not ours (memory of another kind, or garbage) go to the real driver,
 * which answers as it would without us.
 */
#include <errno.h>
#include <string.h>
#include <cuda.h>

#include "core/devmem.h"
#include "core/graphmem.h"
#include "core/ipcmem.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "common/log.h"
#include "driver/unsupported.h"

/* The per-thread-stream flavours are only declared for the driver's own build. */
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                              CUmemoryPool pool, CUstream hStream);

#define PITCH_ALIGN 512               /* what the driver uses on current GPUs */

/*
 * While a capture forbids the calling thread potentially unsafe calls
 * (cuThreadExchangeStreamCaptureMode), the driver answers them: it refuses
 * and invalidates the capture, as without tcgpu. Should it let one through
 * after all, what it allocated is its own and noted as such.
 */
static const char driver_alloc_note[] =
    "memory the driver allocated during stream capture cannot be checkpointed";

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemAlloc_v2");
    if (graphmem_unsafe_prohibited()) {
        if ((rc = TCGPU_REAL(cuMemAlloc)(dptr, bytesize)) == CUDA_SUCCESS)
            tcgpu_note_unsupported("cuMemAlloc_v2", driver_alloc_note);
    } else {
        rc = devmem_alloc(dptr, bytesize, TC_ALLOC_DEVICE, NULL);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                 size_t Height, unsigned int ElementSizeBytes)
{
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    size_t pitch;

    TCGPU_GATE_ENTER("cuMemAllocPitch_v2");
    if (graphmem_unsafe_prohibited()) {
        if ((rc = TCGPU_REAL(cuMemAllocPitch)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes)) == CUDA_SUCCESS)
            tcgpu_note_unsupported("cuMemAllocPitch_v2", driver_alloc_note);
    } else if (dptr && pPitch && WidthInBytes && Height &&
        (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16)) {
        pitch = (WidthInBytes + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
        if (Height <= (size_t)-1 / pitch) {
            rc = devmem_alloc(dptr, pitch * Height, TC_ALLOC_PITCH, NULL);
            if (rc == CUDA_SUCCESS)
                *pPitch = pitch;
        }
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
    TCGPU_GATE_ENTER("cuMemFree_v2");
    CUresult rc = graphmem_unsafe_prohibited() ? TCGPU_REAL(cuMemFree)(dptr)
                                               : devmem_free(dptr);   /* NOT_FOUND: not ours */
    if (rc == CUDA_ERROR_NOT_FOUND) {
        rc = TCGPU_REAL(cuMemFree)(dptr);
        if (rc == CUDA_SUCCESS) {
            reg_lock();
            size_t size = reg_managed_remove(dptr);
            if (size)
                reg_hints_forget(dptr, size);
            reg_unlock();
        }
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/*
 * Managed memory stays the driver's (its pages move between host and device
 * on their own, at addresses the host uses too), so it is recorded rather
 * than served: checkpoints save it and refills write it back; a suspend
 * cannot release it.
 */
CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemAllocManaged");
    rc = TCGPU_REAL(cuMemAllocManaged)(dptr, bytesize, flags);
    if (rc == CUDA_SUCCESS) {
        TCGPU_REAL(cuCtxGetDevice)(&dev);
        TCGPU_REAL(cuCtxGetCurrent)(&ctx);
        reg_lock();
        int err = reg_managed_add(*dptr, bytesize, (int)dev, ctx);
        reg_unlock();
        if (err) {
            TCGPU_REAL(cuMemFree)(*dptr);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/*
 * Stream-ordered allocation: the memory is ready at once, which is always in
 * stream order; pools are not consulted (their attributes still are).
 *
 * Inside stream capture the allocation is graph memory (lib/core/graphmem.c
 * serves it, address-stable, owned by the graph the capture makes). Whatever
 * the capture state forbids (the legacy stream while a blocking stream
 * captures, an invalidated capture) the driver answers.
 */
CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out,
                                                const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out);

enum capture_state { NOT_CAPTURING, CAPTURING, DRIVER_DECIDES };

static enum capture_state capture_state(CUstream stream, int per_thread, cuuint64_t *id)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc;

    if (!graphmem_captures_active())
        return NOT_CAPTURING;
    rc = per_thread ? TCGPU_REAL_ABI(cuStreamGetCaptureInfo_v3_ptsz)(stream, &st, id, NULL, NULL, NULL, NULL)
                    : TCGPU_REAL_ABI(cuStreamGetCaptureInfo_v3)(stream, &st, id, NULL, NULL, NULL, NULL);
    if (rc != CUDA_SUCCESS || st == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        return DRIVER_DECIDES;
    return st == CU_STREAM_CAPTURE_STATUS_ACTIVE ? CAPTURING : NOT_CAPTURING;
}

static const char capture_note[] =
    "stream-ordered allocations of a capture tcgpu did not see begin cannot be checkpointed";

/* The pool cuMemAllocAsync takes from: the current pool of the current
 * context's device. NULL when the driver cannot say (no pools). */
static CUmemoryPool current_pool(void)
{
    CUmemoryPool pool = NULL;
    CUdevice dev;

    if (TCGPU_REAL(cuCtxGetDevice)(&dev) != CUDA_SUCCESS ||
        TCGPU_REAL(cuDeviceGetMemPool)(&pool, dev) != CUDA_SUCCESS)
        return NULL;
    return pool;
}

static CUresult real_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream,
                                 int per_thread)
{
    if (pool)
        return per_thread ? TCGPU_REAL_ABI(cuMemAllocFromPoolAsync_ptsz)(dptr, bytesize, pool, stream)
                          : TCGPU_REAL(cuMemAllocFromPoolAsync)(dptr, bytesize, pool, stream);
    return per_thread ? TCGPU_REAL(cuMemAllocAsync_ptsz)(dptr, bytesize, stream)
                      : TCGPU_REAL(cuMemAllocAsync)(dptr, bytesize, stream);
}

/* pool: the pool named by cuMemAllocFromPoolAsync, NULL for the current one. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream,
                            int per_thread, const char *call)
{
    cuuint64_t id = 0;
    CUresult rc;

    switch (capture_state(stream, per_thread, &id)) {
    case NOT_CAPTURING:
        return devmem_alloc(dptr, bytesize, TC_ALLOC_ASYNC, pool ? pool : current_pool());
    case CAPTURING:
        if (!dptr || !bytesize)
            return CUDA_ERROR_INVALID_VALUE;
        if ((rc = graphmem_alloc(id, dptr, bytesize)) != CUDA_ERROR_NOT_FOUND)
            return rc;
        /* A capture we did not see begin: the driver's graph memory. */
        rc = real_alloc_async(dptr, bytesize, pool, stream, per_thread);
        if (rc == CUDA_SUCCESS)
            tcgpu_note_unsupported(call, capture_note);
        return rc;
    default:
        return real_alloc_async(dptr, bytesize, pool, stream, per_thread);
    }
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    TCGPU_GATE_ENTER("cuMemAllocAsync");
    CUresult rc = alloc_async(dptr, bytesize, NULL, hStream, 0, "cuMemAllocAsync");
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    TCGPU_GATE_ENTER("cuMemAllocAsync_ptsz");
    CUresult rc = alloc_async(dptr, bytesize, NULL, hStream, 1, "cuMemAllocAsync_ptsz");
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{
    TCGPU_GATE_ENTER("cuMemAllocFromPoolAsync");
    CUresult rc = pool ? alloc_async(dptr, bytesize, pool, hStream, 0, "cuMemAllocFromPoolAsync")
                       : CUDA_ERROR_INVALID_VALUE;
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                              CUmemoryPool pool, CUstream hStream)
{
    TCGPU_GATE_ENTER("cuMemAllocFromPoolAsync_ptsz");
    CUresult rc = pool ? alloc_async(dptr, bytesize, pool, hStream, 1, "cuMemAllocFromPoolAsync_ptsz")
                       : CUDA_ERROR_INVALID_VALUE;
    TCGPU_GATE_LEAVE();
    return rc;
}

static CUresult real_free_async(CUdeviceptr dptr, CUstream stream, int per_thread)
{
    return per_thread ? TCGPU_REAL(cuMemFreeAsync_ptsz)(dptr, stream) : TCGPU_REAL(cuMemFreeAsync)(dptr, stream);
}

/*
 * Inside capture, a free of graph memory is recorded for the graph; a free
 * of anything else the driver refuses (only graph allocations can be freed
 * in a graph) and invalidates the capture, as it must.
 */
static CUresult free_async(CUdeviceptr dptr, CUstream stream, int per_thread)
{
    cuuint64_t id = 0;
    CUresult rc;

    switch (capture_state(stream, per_thread, &id)) {
    case CAPTURING:
        if ((rc = graphmem_free(id, dptr)) == CUDA_SUCCESS)
            return rc;
        return real_free_async(dptr, stream, per_thread);
    case DRIVER_DECIDES:
        return real_free_async(dptr, stream, per_thread);
    default:
        break;
    }
    devmem_trim();
    rc = devmem_free_async(dptr, stream, per_thread);
    if (rc == CUDA_ERROR_NOT_FOUND)
        rc = real_free_async(dptr, stream, per_thread);
    return rc;
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    TCGPU_GATE_ENTER("cuMemFreeAsync");
    CUresult rc = free_async(dptr, hStream, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    TCGPU_GATE_ENTER("cuMemFreeAsync_ptsz");
    CUresult rc = free_async(dptr, hStream, 1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct devmem_alloc a;
    CUdeviceptr base;
    size_t size;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemGetAddressRange_v2");
    switch (devmem_lookup(dptr, &a)) {
    case 0:
        if (pbase)
            *pbase = a.va;
        if (psize)
            *psize = a.size;
        rc = CUDA_SUCCESS;
        break;
    case -EFAULT:
        rc = CUDA_ERROR_NOT_FOUND;          /* freed: no allocation there */
        break;
    default:
        if (ipcmem_range(dptr, &base, &size) == 0) {       /* opened from another process */
            if (pbase)
                *pbase = base;
            if (psize)
                *psize = size;
            rc = CUDA_SUCCESS;
            break;
        }
        rc = TCGPU_REAL(cuMemGetAddressRange)(pbase, psize, dptr);
        break;
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* Buffer and block ids of tcgpu's allocations are tagged, so that they never
 * equal an id the driver gives memory tcgpu does not serve (ids are unique
 * within a process, as documented). */
#define OUR_ID_TAG (1ull << 63)

/*
 * The attributes the driver would answer per segment (the VMM mapping tcgpu
 * made); we answer per allocation, as the driver does for its own cuMemAlloc
 * and pool memory: the context current at the allocation (stream-ordered
 * memory has none), the pool of a stream-ordered allocation.
 * IS_LEGACY_CUDA_IPC_CAPABLE is true where tcgpu carries IPC of the
 * allocation (unless TCGPU_IPC=0, lib/core/ipcmem.h), else the driver's false for
 * VMM memory. (It is one byte: a bool, as the driver writes it.)
 */
static int answer_attribute(void *data, CUpointer_attribute attr, const struct devmem_alloc *a)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a->kind == TC_ALLOC_ASYNC ? NULL : a->ctx;
        return 1;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = a->kind == TC_ALLOC_ASYNC ? a->pool : NULL;
        return 1;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = a->va;
        return 1;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = a->size;
        return 1;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = a->id | OUR_ID_TAG;
        return 1;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = CU_MEM_HANDLE_TYPE_NONE;   /* as cuMemAlloc memory */
        return 1;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        if (a->kind == TC_ALLOC_GRAPH || !ipcmem_capable(a->va))
            return 0;
        *(unsigned char *)data = 1;
        return 1;
    default:
        return 0;
    }
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    struct devmem_alloc a;
    CUresult rc;

    TCGPU_GATE_ENTER("cuPointerGetAttribute");
    int found = devmem_lookup(ptr, &a);
    if (found == -EFAULT)
        rc = CUDA_ERROR_INVALID_VALUE;      /* freed: the driver knows no such pointer */
    else if (found == 0 && data && answer_attribute(data, attribute, &a))
        rc = CUDA_SUCCESS;
    else
        rc = TCGPU_REAL(cuPointerGetAttribute)(data, attribute, ptr);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    struct devmem_alloc a;
    CUresult rc;

    TCGPU_GATE_ENTER("cuPointerGetAttributes");
    int found = devmem_lookup(ptr, &a);
    /* Freed memory inside one of our segments: the driver would describe the
     * segment. Ask about a pointer it knows nothing of instead, which gets
     * exactly its answer for an unknown pointer (defaults, not an error). */
    rc = TCGPU_REAL(cuPointerGetAttributes)(numAttributes, attributes, data,
                                            found == -EFAULT ? 0 : ptr);
    if (rc == CUDA_SUCCESS && attributes && data && found == 0)
        for (unsigned i = 0; i < numAttributes; i++)
            if (data[i])
                answer_attribute(data[i], attributes[i], &a);
    TCGPU_GATE_LEAVE();
    return rc;
}

/*
 * A pool's usage counts what it handed out through us too: stream-ordered
 * allocations are served from tcgpu's memory (devmem.c), so the driver's
 * pool sees only what it made itself (allocations inside graph capture).
 */
static int pool_usage_attr(CUmemPool_attribute attr)
{
    return attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH ||
           attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH;
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct devmem_pool_use u;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemPoolGetAttribute");
    rc = TCGPU_REAL(cuMemPoolGetAttribute)(pool, attr, value);
    if (rc == CUDA_SUCCESS && value && pool_usage_attr(attr)) {
        devmem_pool_usage(pool, &u);
        /* our blocks are reserved while used: the pool releases them at once */
        *(cuuint64_t *)value += attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? u.used :
                                attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? u.used_high :
                                attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? u.reserved :
                                u.reserved_high;
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/*
 * Peer access: the driver enables it for its own allocations; the memory
 * tcgpu serves is VMM memory, which needs cuMemSetAccess for the peer device
 * too (lib/core/devmem.c). Undone if that fails, so that the program sees
 * one answer for both.
 */
static CUresult device_of(CUcontext ctx, int *dev)
{
    CUcontext ignored;
    CUdevice d;
    CUresult rc = TCGPU_REAL(cuCtxPushCurrent)(ctx);

    if (rc != CUDA_SUCCESS)
        return rc;
    rc = TCGPU_REAL(cuCtxGetDevice)(&d);
    TCGPU_REAL(cuCtxPopCurrent)(&ignored);
    *dev = (int)d;
    return rc;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    CUdevice me;
    int owner;
    CUresult rc;

    TCGPU_GATE_ENTER("cuCtxEnablePeerAccess");
    rc = TCGPU_REAL(cuCtxEnablePeerAccess)(peerContext, Flags);
    if (rc == CUDA_SUCCESS && (TCGPU_REAL(cuCtxGetDevice)(&me) != CUDA_SUCCESS ||
                               device_of(peerContext, &owner) != CUDA_SUCCESS ||
                               (rc = devmem_peer_access(owner, (int)me, 1)) != CUDA_SUCCESS)) {
        TCGPU_REAL(cuCtxDisablePeerAccess)(peerContext);
        if (rc == CUDA_SUCCESS)
            rc = CUDA_ERROR_INVALID_CONTEXT;
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemPoolSetAttribute");
    rc = TCGPU_REAL(cuMemPoolSetAttribute)(pool, attr, value);
    if (rc == CUDA_SUCCESS &&
        (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH))
        /* the driver accepts only a reset to 0 */
        devmem_pool_reset_high(pool, attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
    CUdevice me;
    int owner;
    CUresult rc;

    TCGPU_GATE_ENTER("cuCtxDisablePeerAccess");
    rc = TCGPU_REAL(cuCtxDisablePeerAccess)(peerContext);
    if (rc == CUDA_SUCCESS && TCGPU_REAL(cuCtxGetDevice)(&me) == CUDA_SUCCESS &&
        device_of(peerContext, &owner) == CUDA_SUCCESS)
        devmem_peer_access(owner, (int)me, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}
