/*
 * alloc_probe - can this process get N MiB of device memory right now?
 *
 *   alloc_probe MIB     exit 0 and print "allocated MIB MiB" if cuMemAlloc
 *                       succeeded, exit 3 on CUDA_ERROR_OUT_OF_MEMORY,
 *                       exit 1 on any other error.
 *
 * The suspend tests use it as "another job" that wants the memory a
 * suspended process gave back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <cuda.h>

static int check(CUresult rc, const char *what)
{
    const char *name = "?";

    if (rc == CUDA_SUCCESS)
        return 0;
    cuGetErrorName(rc, &name);
    fprintf(stderr, "alloc_probe: %s failed: %s\n", what, name);
    exit(rc == CUDA_ERROR_OUT_OF_MEMORY ? 3 : 1);
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUdeviceptr p;
    size_t mib;

    if (argc != 2) {
        fprintf(stderr, "usage: alloc_probe MIB\n");
        return 2;
    }
    mib = strtoull(argv[1], NULL, 10);
    check(cuInit(0), "cuInit");
    check(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuMemAlloc(&p, mib << 20), "cuMemAlloc");
    printf("allocated %zu MiB\n", mib);
    check(cuMemFree(p), "cuMemFree");
    return 0;
}
