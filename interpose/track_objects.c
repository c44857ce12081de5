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
#include "core/objects.h"
#include "core/throttle.h"

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
        objects_ctx_destroyed(ctx);
        throttle_ctx_gone(ctx);         /* its events went with it */
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
        if (rc == CUDA_SUCCESS) {
            objects_ctx_destroyed(ctx);
            throttle_ctx_gone(ctx);
        }
    } else {
        rc = TCGPU_REAL(cuDevicePrimaryCtxRelease)(dev);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    TCGPU_GATE_ENTER("cuStreamCreate");
    CUresult rc = counted(TCGPU_REAL(cuStreamCreate)(phStream, Flags), OBJ_STREAM, +1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    TCGPU_GATE_ENTER("cuStreamCreateWithPriority");
    CUresult rc = counted(TCGPU_REAL(cuStreamCreateWithPriority)(phStream, flags, priority), OBJ_STREAM, +1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    TCGPU_GATE_ENTER("cuStreamDestroy_v2");
    CUresult rc = counted(TCGPU_REAL(cuStreamDestroy)(hStream), OBJ_STREAM, -1);
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
