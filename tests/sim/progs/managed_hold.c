/*
 * managed_hold - managed memory that a kernel keeps touching, for
 * managed_suspend.sh: prints "ready" once its 64 MiB of managed memory and
 * 16 MiB of device memory are allocated and filled, then runs STEPS kernels
 * that add one to the managed memory (20 ms apart, "step K" every 10), and
 * checks every word at the end. Exit 0 when all are right, after
 * "checksum: HEX" of both memories: a state maker too (progs/managed_hold.desc).
 *
 *   managed_hold MODULE STEPS
 */
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "state.h"

#define MANAGED (64u << 20)
#define DEVICE (16u << 20)

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUmodule mod;
    CUfunction add;
    CUstream s;
    CUdeviceptr m, d;
    uint64_t n = MANAGED / 4;
    void *args[] = { &m, &n };
    int steps = argc == 3 ? atoi(argv[2]) : 0;
    struct timespec ts = { 0, 20 * 1000000L };

    if (argc != 3 || steps <= 0) {
        fprintf(stderr, "usage: managed_hold MODULE STEPS\n");
        return 2;
    }
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu(cuModuleLoad(&mod, argv[1]), "cuModuleLoad");
    cu(cuModuleGetFunction(&add, mod, "add_one"), "add_one");
    cu(cuStreamCreate(&s, 0), "cuStreamCreate");
    cu(cuMemAllocManaged(&m, MANAGED, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    cu(cuMemAlloc(&d, DEVICE), "cuMemAlloc");
    cu(cuMemsetD32(d, 5, DEVICE / 4), "cuMemsetD32");
    uint32_t *h = (uint32_t *)(uintptr_t)m;
    for (uint64_t i = 0; i < n; i++)
        h[i] = (uint32_t)i;
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < steps; i++) {
        cu(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), "launch");
        cu(cuStreamSynchronize(s), "cuStreamSynchronize");
        nanosleep(&ts, NULL);
        if ((i + 1) % 10 == 0) {
            printf("step %d\n", i + 1);
            fflush(stdout);
        }
    }
    for (uint64_t i = 0; i < n; i++)
        if (h[i] != (uint32_t)(i + (uint64_t)steps)) {
            fprintf(stderr, "managed word %llu is %u, expected %llu\n", (unsigned long long)i, h[i],
                    (unsigned long long)(i + (uint64_t)steps));
            return 1;
        }
    uint32_t v = 0;
    cu(cuMemcpyDtoH(&v, d + DEVICE - 4, 4), "cuMemcpyDtoH");
    CHECK(v == 5);
    if (failures)
        return 1;
    printf("managed memory intact\n");
    unsigned long long sum = fnv1a(FNV_OFFSET, (const unsigned char *)h, MANAGED, 1);
    printf("checksum: %016llx\n", fnv1a(sum, (const unsigned char *)&v, sizeof(v), 1));
    return 0;
}
