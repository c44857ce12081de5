/*
 * engine_ctx.h - for test programs that drive the engine (lib/engine) on
 * the real driver table: the driver TCGPU_REAL_LIBCUDA names, and one
 * context, t_ctx, made current by the engine's enter/leave callbacks
 * (pipe_opts) on each of its threads.
 */
#ifndef TCGPU_TESTS_ENGINE_CTX_H
#define TCGPU_TESTS_ENGINE_CTX_H

#include <errno.h>
#include <stdlib.h>

#include <cuda.h>

#include "driver/driver.h"

static CUcontext t_ctx;

/* Loads the driver $TCGPU_REAL_LIBCUDA names (simcuda, in the tests): the
 * program reads its environment, the library takes the path. 0 or -ENOENT. */
static int __attribute__((unused)) t_driver_load(void)
{
    tcgpu_driver_set_path(getenv("TCGPU_REAL_LIBCUDA"));
    return tcgpu_driver_load();
}

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
