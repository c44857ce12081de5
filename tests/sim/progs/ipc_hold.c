/*
 * ipc_hold - a program that exported an IPC handle: another process may have
 * opened it, so its state cannot be checkpointed; a checkpoint must refuse,
 * name the call, and leave the program running (ipc_hold.desc).
 *
 * It exports an interprocess event (cuIpcGetEventHandle). Memory served by
 * tcgpu is VMM memory, which the driver's legacy IPC refuses to export, as a
 * GPU does; so under tcgpu cuIpcGetMemHandle fails at the call (checked here
 * when tcgpu is loaded) and events are how a program ends up holding an IPC
 * handle.
 *
 *   ipc_hold [--steps N] [--sleep-ms T]
 *        prints "exported" once the handle exists, then computes N steps
 *        (100), sleeping T ms (0) after each, and prints
 *        "checksum: <16 hex digits>", the same for the same N every time
 */
#include <dlfcn.h>
#include <stdio.h>
#include <cuda.h>

#include "check.h"
#include "state.h"

enum { N = 1 << 20 };

static int tcgpu_loaded(void)
{
    return dlsym(RTLD_DEFAULT, "tcgpu_status") != NULL;
}

/* Step v: the device memory filled with a value of v, mixed into h. */
static unsigned long long mix_step(CUdeviceptr p, unsigned char *host, unsigned v,
                                   unsigned long long h)
{
    cu(cuMemsetD32(p, v * 2654435761u, N / 4), "cuMemsetD32");
    cu(cuMemcpyDtoH(host, p, N), "cuMemcpyDtoH");
    return fnv1a(h, host, N, 1021);
}

int main(int argc, char **argv)
{
    static unsigned char host[N];
    CUipcMemHandle mem_handle;
    CUipcEventHandle handle;
    CUcontext ctx;
    CUevent ev;
    CUdeviceptr p;
    unsigned long long h = FNV_OFFSET;
    long steps = 100, sleep_ms = 0;

    if (state_parse_args(argc, argv, &steps, &sleep_ms) < 0) {
        fprintf(stderr, "usage: ipc_hold [--steps N] [--sleep-ms T]\n");
        return 2;
    }
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu(cuMemAlloc(&p, N), "cuMemAlloc");
    if (tcgpu_loaded() && cuIpcGetMemHandle(&mem_handle, p) == CUDA_SUCCESS) {
        fprintf(stderr, "ipc_hold: cuIpcGetMemHandle of VMM-backed memory succeeded\n");
        return 1;
    }
    cu(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    cu(cuIpcGetEventHandle(&handle, ev), "cuIpcGetEventHandle");
    printf("exported\n");
    fflush(stdout);
    for (long v = 0; v < steps; v++) {
        h = mix_step(p, host, (unsigned)v, h);
        state_sleep_ms(sleep_ms);
    }
    printf("checksum: %016llx\n", h);
    return 0;
}
