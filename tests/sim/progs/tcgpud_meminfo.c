/*
 * tcgpud_meminfo - what cuMemGetInfo says, and how much can be allocated.
 *
 *   tcgpud_meminfo HOLD_MIB MORE_MIB
 *
 * Allocates HOLD_MIB, prints "total=T free=F" (MiB, from cuMemGetInfo),
 * then tries MORE_MIB more: prints "more=ok" or "more=oom". Exit 0, or 1 on
 * any other error. The tcgpud limit tests read it.
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
    fprintf(stderr, "tcgpud_meminfo: %s failed: %s\n", what, name);
    exit(1);
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUdeviceptr p, q;
    size_t freemem, total;
    CUresult rc;

    if (argc != 3) {
        fprintf(stderr, "usage: tcgpud_meminfo HOLD_MIB MORE_MIB\n");
        return 2;
    }
    check(cuInit(0), "cuInit");
    check(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuMemAlloc(&p, strtoull(argv[1], NULL, 10) << 20), "cuMemAlloc(hold)");
    check(cuMemGetInfo(&freemem, &total), "cuMemGetInfo");
    printf("total=%zu free=%zu\n", total >> 20, freemem >> 20);
    rc = cuMemAlloc(&q, strtoull(argv[2], NULL, 10) << 20);
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY)
        check(rc, "cuMemAlloc(more)");
    printf("more=%s\n", rc == CUDA_SUCCESS ? "ok" : "oom");
    fflush(stdout);
    return 0;
}
