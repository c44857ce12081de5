/*
 * track_objects.c - contexts, streams, events and modules.
 *
 * Suspend in place keeps these objects (only device memory is released), so
 * the wrappers only tell lib/core/objects.c what exists: the live contexts, whose
 * work a snapshot waits for, and counts for `gpuckpt status`.
 */
#include <cuda.h>

#include "driver/driver.h"
#include "driver/gate.h"
#include "driver/unsupported.h"
#include "core/devmem.h"
#include "core/objects.h"
#include "core/registry.h"
#include "core/throttle.h"

/*
 * A context is gone: as the driver, forget what was allocated in it (the
 * memory tcgpu serves is not the driver's, so nothing else would free it),
 * and the events the compute share timed in it went with it.
 */
static void context_gone(CUcontext ctx)
{
    objects_forget_streams(ctx);
    devmem_context_destroyed(ctx);
    reg_lock();
    reg_managed_forget_ctx(ctx);
    reg_unlock();
    throttle_ctx_gone(ctx);
}

/* Counts an object the real call made or destroyed. */
static CUresult counted(CUresult rc, enum obj_kind kind, int delta)
{
    if (rc == CUDA_SUCCESS)
        objects_count(kind, delta);
    return rc;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                             CUdevice dev)
{
    TCGPU_GATE_ENTER("cuCtxCreate_v4");
    CUresult rc = TCGPU_REAL(cuCtxCreate)(pctx, params, flags, dev);
    if (rc == CUDA_SUCCESS)
        objects_ctx_created(*pctx, dev, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

/* The older prototypes of cuCtxCreate, still exported by the driver. */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev);

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    TCGPU_GATE_ENTER("cuCtxCreate_v2");
    CUresult rc = TCGPU_REAL(cuCtxCreate_v2)(pctx, flags, dev);
    if (rc == CUDA_SUCCESS)
        objects_ctx_created(*pctx, dev, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    TCGPU_GATE_ENTER("cuCtxCreate_v3");
    CUresult rc = TCGPU_REAL(cuCtxCreate_v3)(pctx, paramsArray, numParams, flags, dev);
    if (rc == CUDA_SUCCESS)
        objects_ctx_created(*pctx, dev, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    TCGPU_GATE_ENTER("cuCtxDestroy_v2");
    CUresult rc = TCGPU_REAL(cuCtxDestroy)(ctx);
    if (rc == CUDA_SUCCESS) {
        objects_ctx_reset(ctx);
        context_gone(ctx);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    TCGPU_GATE_ENTER("cuDevicePrimaryCtxRetain");
    CUresult rc = TCGPU_REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (rc == CUDA_SUCCESS)
        objects_ctx_created(*pctx, dev, 1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    CUcontext ctx = NULL;

    TCGPU_GATE_ENTER("cuDevicePrimaryCtxRelease_v2");
    /* Learn the handle first: after the last release it is gone. */
    CUresult rc = TCGPU_REAL(cuDevicePrimaryCtxRetain)(&ctx, dev);
    if (rc == CUDA_SUCCESS) {
        TCGPU_REAL(cuDevicePrimaryCtxRelease)(dev);
        rc = TCGPU_REAL(cuDevicePrimaryCtxRelease)(dev);
        if (rc == CUDA_SUCCESS && objects_ctx_destroyed(ctx))
            context_gone(ctx);          /* the last reference: the driver destroys it */
    } else {
        rc = TCGPU_REAL(cuDevicePrimaryCtxRelease)(dev);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* A reset destroys the primary context's allocations, however many
 * references it has. */
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    CUcontext ctx = NULL;
    unsigned flags;
    int active = 0;

    TCGPU_GATE_ENTER("cuDevicePrimaryCtxReset_v2");
    /* Learn the handle without activating it: an inactive one holds nothing. */
    if (TCGPU_REAL(cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS && active &&
        TCGPU_REAL(cuDevicePrimaryCtxRetain)(&ctx, dev) == CUDA_SUCCESS)
        TCGPU_REAL(cuDevicePrimaryCtxRelease)(dev);
    CUresult rc = TCGPU_REAL(cuDevicePrimaryCtxReset)(dev);
    if (rc == CUDA_SUCCESS && ctx) {
        objects_ctx_reset(ctx);
        context_gone(ctx);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* A stream the program made: counted, and known by handle for the
 * bounded device wait of an operation. */
static CUresult stream_made(CUresult rc, CUstream s, unsigned flags)
{
    CUcontext ctx = NULL;

    if (rc == CUDA_SUCCESS && TCGPU_REAL(cuCtxGetCurrent)(&ctx) == CUDA_SUCCESS)
        objects_stream_created(s, ctx, flags);
    return counted(rc, OBJ_STREAM, +1);
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    TCGPU_GATE_ENTER("cuStreamCreate");
    CUresult rc = TCGPU_REAL(cuStreamCreate)(phStream, Flags);
    rc = stream_made(rc, rc == CUDA_SUCCESS ? *phStream : NULL, Flags);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    TCGPU_GATE_ENTER("cuStreamCreateWithPriority");
    CUresult rc = TCGPU_REAL(cuStreamCreateWithPriority)(phStream, flags, priority);
    rc = stream_made(rc, rc == CUDA_SUCCESS ? *phStream : NULL, flags);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    TCGPU_GATE_ENTER("cuStreamDestroy_v2");
    CUresult rc = counted(TCGPU_REAL(cuStreamDestroy)(hStream), OBJ_STREAM, -1);
    if (rc == CUDA_SUCCESS)
        objects_stream_destroyed(hStream);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    TCGPU_GATE_ENTER("cuEventCreate");
    CUresult rc = counted(TCGPU_REAL(cuEventCreate)(phEvent, Flags), OBJ_EVENT, +1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    TCGPU_GATE_ENTER("cuEventDestroy_v2");
    CUresult rc = counted(TCGPU_REAL(cuEventDestroy)(hEvent), OBJ_EVENT, -1);
    if (rc == CUDA_SUCCESS)                 /* an IPC event's note goes with it */
        tcgpu_unsupported_release(TCGPU_HELD_BY_EVENT, (uint64_t)(uintptr_t)hEvent);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
    TCGPU_GATE_ENTER("cuModuleLoad");
    CUresult rc = counted(TCGPU_REAL(cuModuleLoad)(module, fname), OBJ_MODULE, +1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    TCGPU_GATE_ENTER("cuModuleLoadData");
    CUresult rc = counted(TCGPU_REAL(cuModuleLoadData)(module, image), OBJ_MODULE, +1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues)
{
    TCGPU_GATE_ENTER("cuModuleLoadDataEx");
    CUresult rc = counted(TCGPU_REAL(cuModuleLoadDataEx)(module, image, numOptions, options, optionValues), OBJ_MODULE, +1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    TCGPU_GATE_ENTER("cuModuleUnload");
    CUresult rc = counted(TCGPU_REAL(cuModuleUnload)(hmod), OBJ_MODULE, -1);
    TCGPU_GATE_LEAVE();
    return rc;
}
