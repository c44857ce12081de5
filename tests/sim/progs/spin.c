/*
 * spin - a program stuck in the driver: it launches a kernel that never ends
 * and waits for it in cuCtxSynchronize. A checkpoint must time out at the
 * gate, name this thread and call, and leave the program as it was.
 *
 *   spin MODULE.so      prints "spinning" once the wait has begun
 */
#include <stdio.h>
#include <stdlib.h>
#include <cuda.h>

static void check(CUresult rc, const char *what)
{
    const char *name = "?";

    if (rc == CUDA_SUCCESS)
        return;
    cuGetErrorName(rc, &name);
    fprintf(stderr, "spin: %s failed: %s\n", what, name);
    exit(1);
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUdeviceptr p;

    if (argc != 2) {
        fprintf(stderr, "usage: spin MODULE.so\n");
        return 2;
    }
    check(cuInit(0), "cuInit");
    check(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuMemAlloc(&p, 1 << 20), "cuMemAlloc");
    check(cuModuleLoad(&mod, argv[1]), "cuModuleLoad");
    check(cuModuleGetFunction(&fn, mod, "spin_forever"), "cuModuleGetFunction");
    int unused = 0;
    void *args[] = { &unused };
    check(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel");
    printf("spinning\n");
    fflush(stdout);
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    return 0;
}
