/*
 * ipc_hold - a program that exported an IPC handle: another process may have
 * opened it, so its state cannot be checkpointed; a checkpoint must refuse,
 * name the call, and leave the program running.
 *
 * It exports an interprocess event (cuIpcGetEventHandle). Memory served by
 * tcgpu is VMM memory, which the driver's legacy IPC refuses to export, as a
 * GPU does; so under tcgpu cuIpcGetMemHandle fails at the call (checked here
 * too) and events are how a program ends up holding an IPC handle.
 *
 *   ipc_hold SECONDS [--expect-mem-refused]
 *        prints "exported" once the handle exists, then keeps computing for
 *        SECONDS and prints "checksum: <hex>"; with the flag it first checks
 *        that exporting its (VMM-backed) memory fails
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
    CUipcMemHandle mem_handle;
    CUipcEventHandle handle;
    CUcontext ctx;
    CUevent ev;
    CUdeviceptr p;
    unsigned long long h = 1469598103934665603ull;
    time_t end;

    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: ipc_hold SECONDS [--expect-mem-refused]\n");
        return 2;
    }
    end = time(NULL) + atoi(argv[1]);
    check(cuInit(0), "cuInit");
    check(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuMemAlloc(&p, N), "cuMemAlloc");
    if (argc == 3 && cuIpcGetMemHandle(&mem_handle, p) == CUDA_SUCCESS) {
        fprintf(stderr, "ipc_hold: cuIpcGetMemHandle of VMM-backed memory succeeded\n");
        return 1;
    }
    check(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    check(cuIpcGetEventHandle(&handle, ev), "cuIpcGetEventHandle");
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
