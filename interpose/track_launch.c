/*
 * track_launch.c - kernel launches, held to the job's share of the GPU's
 * compute (lib/core/throttle.h, docs/tcgpud.md "Compute share").
 *
 * A job without a share pays a relaxed load (and a relaxed store when tcgpud
 * counts its launches) on top of the gate. Graph launches (cuGraphLaunch)
 * are not throttled: see docs/tcgpud.md, "Limits".
 */
#include <cuda.h>

#include "driver/driver.h"
#include "driver/gate.h"
#include "core/throttle.h"

/* The per-thread-stream flavours, declared only with the internal API names. */
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra);
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra);
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                CUstream hStream, void **kernelParams);

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    struct throttle_ticket t;

    TCGPU_GATE_ENTER("cuLaunchKernel");
    throttle_before(&t, f, hStream, 0);
    CUresult rc = TCGPU_REAL_ABI(cuLaunchKernel)(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                 blockDimY, blockDimZ, sharedMemBytes, hStream,
                                                 kernelParams, extra);
    throttle_after(&t, rc);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    struct throttle_ticket t;

    TCGPU_GATE_ENTER("cuLaunchKernel_ptsz");
    throttle_before(&t, f, hStream, 1);
    CUresult rc = TCGPU_REAL_ABI(cuLaunchKernel_ptsz)(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                      blockDimY, blockDimZ, sharedMemBytes,
                                                      hStream, kernelParams, extra);
    throttle_after(&t, rc);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{
    struct throttle_ticket t;

    TCGPU_GATE_ENTER("cuLaunchKernelEx");
    throttle_before(&t, f, config ? config->hStream : NULL, 0);
    CUresult rc = TCGPU_REAL_ABI(cuLaunchKernelEx)(config, f, kernelParams, extra);
    throttle_after(&t, rc);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{
    struct throttle_ticket t;

    TCGPU_GATE_ENTER("cuLaunchKernelEx_ptsz");
    throttle_before(&t, f, config ? config->hStream : NULL, 1);
    CUresult rc = TCGPU_REAL_ABI(cuLaunchKernelEx_ptsz)(config, f, kernelParams, extra);
    throttle_after(&t, rc);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams)
{
    struct throttle_ticket t;

    TCGPU_GATE_ENTER("cuLaunchCooperativeKernel");
    throttle_before(&t, f, hStream, 0);
    CUresult rc = TCGPU_REAL_ABI(cuLaunchCooperativeKernel)(f, gridDimX, gridDimY, gridDimZ,
                                                            blockDimX, blockDimY, blockDimZ,
                                                            sharedMemBytes, hStream, kernelParams);
    throttle_after(&t, rc);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                CUstream hStream, void **kernelParams)
{
    struct throttle_ticket t;

    TCGPU_GATE_ENTER("cuLaunchCooperativeKernel_ptsz");
    throttle_before(&t, f, hStream, 1);
    CUresult rc = TCGPU_REAL_ABI(cuLaunchCooperativeKernel_ptsz)(f, gridDimX, gridDimY, gridDimZ,
                                                                 blockDimX, blockDimY, blockDimZ,
                                                                 sharedMemBytes, hStream,
                                                                 kernelParams);
    throttle_after(&t, rc);
    TCGPU_GATE_LEAVE();
    return rc;
}
