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

/* Every wrapper's body: the real call `call` between the gate and the throttle. */
#define THROTTLED(abi, fn, stream, per_thread, call)                                     \
    do {                                                                                 \
        struct throttle_ticket t_;                                                       \
        TCGPU_GATE_ENTER(#abi);                                                          \
        throttle_before(&t_, (fn), (stream), (per_thread));                              \
        CUresult rc_ = (call);                                                           \
        throttle_after(&t_, rc_);                                                        \
        TCGPU_GATE_LEAVE();                                                              \
        return rc_;                                                                      \
    } while (0)

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
    THROTTLED(cuLaunchKernel, f, hStream, 0,
              TCGPU_REAL_ABI(cuLaunchKernel)(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                             blockDimZ, sharedMemBytes, hStream, kernelParams, extra));
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    THROTTLED(cuLaunchKernel_ptsz, f, hStream, 1,
              TCGPU_REAL_ABI(cuLaunchKernel_ptsz)(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                  blockDimY, blockDimZ, sharedMemBytes, hStream,
                                                  kernelParams, extra));
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{
    THROTTLED(cuLaunchKernelEx, f, config ? config->hStream : NULL, 0,
              TCGPU_REAL_ABI(cuLaunchKernelEx)(config, f, kernelParams, extra));
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{
    THROTTLED(cuLaunchKernelEx_ptsz, f, config ? config->hStream : NULL, 1,
              TCGPU_REAL_ABI(cuLaunchKernelEx_ptsz)(config, f, kernelParams, extra));
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams)
{
    THROTTLED(cuLaunchCooperativeKernel, f, hStream, 0,
              TCGPU_REAL_ABI(cuLaunchCooperativeKernel)(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                        blockDimY, blockDimZ, sharedMemBytes,
                                                        hStream, kernelParams));
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                CUstream hStream, void **kernelParams)
{
    THROTTLED(cuLaunchCooperativeKernel_ptsz, f, hStream, 1,
              TCGPU_REAL_ABI(cuLaunchCooperativeKernel_ptsz)(f, gridDimX, gridDimY, gridDimZ,
                                                             blockDimX, blockDimY, blockDimZ,
                                                             sharedMemBytes, hStream, kernelParams));
}
