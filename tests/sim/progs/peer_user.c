/*
 * peer_user - peer access under tcgpu. The memory tcgpu serves is VMM
 * memory, which context peer access does not reach on a GPU: tcgpu grants
 * the peer device access itself. A kernel of device 0 updates device 1's
 * memory after cuCtxEnablePeerAccess, across a suspend and resume (the
 * access is put back with the memory), and not after cuCtxDisablePeerAccess.
 *
 *   peer_user MODULE      run with libtcgpu.so preloaded, two simulated
 *                         devices (SIMCUDA_DEVICES=2); exit 0 when all checks pass
 */
#include <dlfcn.h>

#include "check.h"

static uint32_t read_word(CUcontext c1, CUdeviceptr p)
{
    CUcontext prev;
    uint32_t v = 0;

    cu(cuCtxPushCurrent(c1), "cuCtxPushCurrent");
    cu(cuMemcpyDtoH(&v, p, sizeof(v)), "cuMemcpyDtoH");
    cu(cuCtxPopCurrent(&prev), "cuCtxPopCurrent");
    return v;
}

int main(int argc, char **argv)
{
    int (*suspend)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_suspend");
    int (*resume)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "tcgpu_resume");
    CUcontext c0, c1, prev;
    CUmodule mod;
    CUfunction add;
    CUstream s;
    CUdeviceptr d1;
    uint64_t n = 1024;
    void *args[] = { &d1, &n };

    if (argc != 2 || !suspend || !resume) {
        fprintf(stderr, "usage: peer_user MODULE (with libtcgpu.so preloaded)\n");
        return 2;
    }
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&c0, 0), "retain 0");
    cu(cuDevicePrimaryCtxRetain(&c1, 1), "retain 1");
    cu(cuCtxPushCurrent(c1), "push 1");
    cu(cuMemAlloc(&d1, n * 4), "cuMemAlloc on device 1");
    cu(cuMemsetD32(d1, 41, n), "cuMemsetD32");
    cu(cuCtxPopCurrent(&prev), "pop");
    cu(cuCtxPushCurrent(c0), "push 0");
    cu(cuModuleLoad(&mod, argv[1]), "cuModuleLoad");
    cu(cuModuleGetFunction(&add, mod, "add_one"), "add_one");
    cu(cuStreamCreate(&s, 0), "cuStreamCreate");

    cu(cuCtxEnablePeerAccess(c1, 0), "cuCtxEnablePeerAccess");
    cu(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), "launch");
    cu(cuStreamSynchronize(s), "a kernel of device 0 on device 1's memory, with peer access");
    CHECK(read_word(c1, d1) == 42);

    CHECK(suspend(NULL) == 0);
    CHECK(resume() == 0);
    cu(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), "launch");
    cu(cuStreamSynchronize(s), "the same after a suspend and resume");
    CHECK(read_word(c1, d1) == 43);

    /* Without peer access the kernel faults (last: the fault is sticky). */
    cu(cuCtxDisablePeerAccess(c1), "cuCtxDisablePeerAccess");
    cu(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), "launch");
    CHECK(cuStreamSynchronize(s) == CUDA_ERROR_ILLEGAL_ADDRESS);
    if (failures)
        return 1;
    printf("peer access: ok\n");
    return 0;
}
