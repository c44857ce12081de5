/*
 * compute_hog - keeps a GPU busy with kernels for a while: a job that always
 * wants more compute, for the compute-share tests (tests/sim/compute_share.sh,
 * tests/sim/tcgpud_gang.sh).
 *
 *   compute_hog MODULE.so SECONDS KERNEL_US [DEVICE [MIB [STOPFILE]]]
 *
 * Launches `busy` kernels of KERNEL_US back to back on one stream (eight in
 * flight at a time) for SECONDS on device DEVICE (0), or until STOPFILE
 * exists, holding MIB of device memory (16) whose contents it checks at the
 * end, so a suspension in between must bring them back. Prints "running"
 * once started, then "kernels N" and "checksum ok" at the end.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda.h>

static void check(CUresult rc, const char *what)
{
    const char *name = "?";

    if (rc == CUDA_SUCCESS)
        return;
    cuGetErrorName(rc, &name);
    fprintf(stderr, "compute_hog: %s failed: %s\n", what, name);
    exit(1);
}

static double mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUstream s;
    CUdeviceptr p;
    CUdevice dev;

    if (argc < 4 || argc > 7) {
        fprintf(stderr, "usage: compute_hog MODULE.so SECONDS KERNEL_US [DEVICE [MIB [STOPFILE]]]\n");
        return 2;
    }
    const char *stop = argc > 6 ? argv[6] : NULL;
    double seconds = atof(argv[2]);
    uint32_t us = (uint32_t)strtoul(argv[3], NULL, 10);
    int ordinal = argc > 4 ? atoi(argv[4]) : 0;
    size_t bytes = (size_t)(argc > 5 ? strtoul(argv[5], NULL, 10) : 16) << 20;
    unsigned char *pattern = malloc(bytes), *back = malloc(bytes);

    if (!pattern || !back)
        return 1;
    for (size_t i = 0; i < bytes; i++)
        pattern[i] = (unsigned char)(i * 131 + 7);
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuMemAlloc(&p, bytes), "cuMemAlloc");
    check(cuMemcpyHtoD(p, pattern, bytes), "cuMemcpyHtoD");
    check(cuModuleLoad(&mod, argv[1]), "cuModuleLoad");
    check(cuModuleGetFunction(&fn, mod, "busy"), "cuModuleGetFunction");
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    printf("running\n");
    fflush(stdout);
    unsigned long n = 0;
    double end = mono() + seconds;
    while (mono() < end && !(stop && n % 64 == 0 && access(stop, F_OK) == 0)) {
        void *args[] = { &us };
        check(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), "cuLaunchKernel");
        if (++n % 8 == 0)
            check(cuStreamSynchronize(s), "cuStreamSynchronize");
    }
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    check(cuMemcpyDtoH(back, p, bytes), "cuMemcpyDtoH");
    printf("kernels %lu\n", n);
    printf("checksum %s\n", memcmp(pattern, back, bytes) ? "BAD" : "ok");
    return memcmp(pattern, back, bytes) ? 1 : 0;
}
