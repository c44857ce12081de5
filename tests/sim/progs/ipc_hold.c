/*
 * ipc_hold - a program that exported an IPC handle of its memory: its state
 * cannot be checkpointed (another process may have mapped that memory), so a
 * checkpoint must refuse, name the call, and leave the program running.
 *
 *   ipc_hold SECONDS    prints "exported" once the handle exists, then keeps
 *                       computing for SECONDS and prints "checksum: <hex>"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda.h>

static void check(CUresult rc, const char *what)
{
    const char *name = "?";

    if (rc == CUDA_SUCCESS)
        return;
    cuGetErrorName(rc, &name);
    fprintf(stderr, "ipc_hold: %s failed: %s\n", what, name);
    exit(1);
}

int main(int argc, char **argv)
{
    enum { N = 1 << 20 };
    static unsigned char host[N];
    CUipcMemHandle handle;
    CUcontext ctx;
    CUdeviceptr p;
    unsigned long long h = 1469598103934665603ull;
    time_t end;

    if (argc != 2) {
        fprintf(stderr, "usage: ipc_hold SECONDS\n");
        return 2;
    }
    end = time(NULL) + atoi(argv[1]);
    check(cuInit(0), "cuInit");
    check(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuMemAlloc(&p, N), "cuMemAlloc");
    check(cuIpcGetMemHandle(&handle, p), "cuIpcGetMemHandle");
    printf("exported\n");
    fflush(stdout);
    for (unsigned v = 0; time(NULL) < end; v++) {
        check(cuMemsetD32(p, v, N / 4), "cuMemsetD32");
        check(cuMemcpyDtoH(host, p, N), "cuMemcpyDtoH");
        for (size_t i = 0; i < N; i += 4096)
            h = (h ^ host[i]) * 1099511628211ull;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    printf("checksum: %016llx\n", h);
    return 0;
}
