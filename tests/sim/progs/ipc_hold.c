/*
 * ipc_hold - a program that exported an IPC handle: another process may have
 * opened it, so its state cannot be checkpointed; a checkpoint must refuse,
 * name the call, and leave the program running (ipc_hold.desc).
 *
 * It exports an interprocess event (cuIpcGetEventHandle), and its memory
 * (cuIpcGetMemHandle: under tcgpu, tcgpu's own handle, lib/core/ipcmem.h).
 * A memory handle nobody opened holds nothing: the refusal names the event.
 *
 *   ipc_hold [--steps N] [--sleep-ms T]
 *        prints "exported" once the handle exists, then computes N steps
 *        (100), sleeping T ms (0) after each, and prints
 *        "checksum: <16 hex digits>", the same for the same N every time
 */
#include <stdio.h>
#include <cuda.h>

#include "check.h"
#include "state.h"

enum { N = 1 << 20 };

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
    cu(cuIpcGetMemHandle(&mem_handle, p), "cuIpcGetMemHandle");
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
