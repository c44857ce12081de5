/*
 * engine_ctx.h - for test programs that drive the engine (lib/engine) on
 * the real driver table: one context, t_ctx, made current by the engine's
 * enter/leave callbacks (pipe_opts) on each of its threads.
 */
#ifndef TCGPU_TESTS_ENGINE_CTX_H
#define TCGPU_TESTS_ENGINE_CTX_H

#include <errno.h>

#include <cuda.h>

#include "driver/driver.h"

static CUcontext t_ctx;

static int __attribute__((unused)) t_ctx_enter(int device, void *arg)
{
    (void)device;
    (void)arg;
    return TCGPU_REAL(cuCtxPushCurrent)(t_ctx) == CUDA_SUCCESS ? 0 : -EIO;
}

static void __attribute__((unused)) t_ctx_leave(void *arg)
{
    CUcontext c;

    (void)arg;
    TCGPU_REAL(cuCtxPopCurrent)(&c);
}

#endif
