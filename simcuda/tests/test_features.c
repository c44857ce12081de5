/*
 * test_features.c - the driver features frameworks use beyond the basics:
 * managed memory advice, prefetch and residency; peer access between two
 * devices; cuLaunchKernelEx and its attributes; libraries and kernels;
 * occupancy; pointer attributes; 3D copies; the profiler; coredumps (a
 * faulting kernel in a child process writes one, and aborts it unless told
 * not to). Two simulated devices (the test sets SIMCUDA_DEVICES=2).
 *
 * Runs with and without libtcgpu.so preloaded (simcuda-features and
 * simcuda-features-tcgpu): tcgpu passes these calls through, and must not
 * change a single answer.
 */
#include "harness.h"

#include <cudaProfiler.h>

#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>

static CUfunction k_fill, k_add, k_touch;
static bool under_tcgpu;

static size_t device_used(int dev)
{
    size_t free_, total;
    CUcontext c, prev;

    CHECK(cuDevicePrimaryCtxRetain(&c, dev));
    CHECK(cuCtxPushCurrent(c));
    CHECK(cuMemGetInfo(&free_, &total));
    CHECK(cuCtxPopCurrent(&prev));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return total - free_;
}

/* ---- managed memory ------------------------------------------------------------------------ */

static int range_int(CUdeviceptr p, size_t n, CUmem_range_attribute a)
{
    int v = 12345;

    CHECK(cuMemRangeGetAttribute(&v, sizeof(v), a, p, n));
    return v;
}

static void test_managed(CUstream s)
{
    const size_t size = 8u << 20;
    CUdeviceptr m, d;
    CUmemLocation host = { CU_MEM_LOCATION_TYPE_HOST, 0 }, dev0 = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
    size_t before, on_dev;
    int by[3];

    CHECK(cuMemAlloc(&d, 4096));
    before = device_used(0);
    CHECK(cuMemAllocManaged(&m, size, CU_MEM_ATTACH_GLOBAL));
    on_dev = device_used(0);
    CHECK_TRUE(on_dev >= before + size);

    /* Advice, as the range attributes report it. */
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 0);
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION), CU_DEVICE_INVALID);
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION), CU_DEVICE_INVALID);
    CHECK(cuMemAdvise(m, size, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0));
    CHECK(cuMemAdvise(m, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
    CHECK(cuMemAdvise(m, size, CU_MEM_ADVISE_SET_ACCESSED_BY, dev0));
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 1);
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION), CU_DEVICE_CPU);
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE), CU_MEM_LOCATION_TYPE_HOST);
    CHECK(cuMemRangeGetAttribute(by, sizeof(by), CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, m, size));
    CHECK_EQ(by[0], 0);
    CHECK_EQ(by[1], CU_DEVICE_INVALID);
    CHECK_EQ(by[2], CU_DEVICE_INVALID);
    /* The host too: devices come first, then the host, as the driver lists them. */
    CHECK(cuMemAdvise(m, size, CU_MEM_ADVISE_SET_ACCESSED_BY, host));
    CHECK(cuMemRangeGetAttribute(by, sizeof(by), CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, m, size));
    CHECK_EQ(by[0], 0);
    CHECK_EQ(by[1], CU_DEVICE_CPU);
    CHECK_EQ(by[2], CU_DEVICE_INVALID);
    CHECK(cuMemAdvise(m, size, CU_MEM_ADVISE_UNSET_ACCESSED_BY, host));
    /* Advice on part of the range: the whole range no longer agrees. */
    CHECK(cuMemAdvise(m, 1u << 20, CU_MEM_ADVISE_UNSET_READ_MOSTLY, dev0));
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 0);
    CHECK_EQ(range_int(m + (2u << 20), 1u << 20, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY), 1);
    CHECK(cuMemAdvise(m, size, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, host));
    CHECK(cuMemAdvise(m, size, CU_MEM_ADVISE_UNSET_ACCESSED_BY, dev0));
    CHECK(cuMemAdvise_v2(m, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev0));
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION), 0);
    CHECK(cuMemAdvise(m, size, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, dev0));

    /* Errors: not managed memory, beyond the allocation, a bad device. */
    CHECK_RES(cuMemAdvise(d, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAdvise(m, size + 1, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemAdvise(m, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                          (CUmemLocation){ CU_MEM_LOCATION_TYPE_DEVICE, 9 }), CUDA_ERROR_INVALID_DEVICE);
    CHECK_RES(cuMemPrefetchAsync(d, 4096, host, 0, s), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemPrefetchAsync(m, size, host, 1, s), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemRangeGetAttribute(by, 3, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, size), CUDA_ERROR_INVALID_VALUE);

    /* Prefetching to the host frees the device; back, it takes it again; a
     * kernel touching host-resident pages moves them to its device. */
    CHECK(cuMemPrefetchAsync(m, size, host, 0, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_TRUE(device_used(0) + size <= on_dev);
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION), CU_DEVICE_CPU);
    ((uint32_t *)(uintptr_t)m)[0] = 41;                 /* host threads use it directly */
    CHECK(cuMemPrefetchAsync(m, size, dev0, 0, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_TRUE(device_used(0) >= on_dev);
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION), 0);
    CHECK_EQ(range_int(m, size, CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE), CU_MEM_LOCATION_TYPE_DEVICE);
    CHECK(cuMemPrefetchAsync_v2(m, size, host, 0, s));
    CHECK(cuStreamSynchronize(s));
    uint64_t one = 1;
    void *args[] = { &m, &one };
    CHECK(cuLaunchKernel(k_add, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(((uint32_t *)(uintptr_t)m)[0], 42);
    CHECK_TRUE(device_used(0) >= before + (64u << 10));   /* the touched page came back */
    CHECK_TRUE(device_used(0) < on_dev);                  /* the others did not */
    CHECK(cuMemFree(m));
    CHECK_EQ(device_used(0), before);
    CHECK(cuMemFree(d));
}

/* ---- peer access -------------------------------------------------------------------------- */

static void test_peer(CUcontext ctx0, CUstream s0)
{
    CUcontext ctx1, prev;
    CUdeviceptr d0, d1;
    int can = -1, v = -1;
    uint32_t host[256];

    CHECK(cuDeviceCanAccessPeer(&can, 0, 1));
    CHECK_EQ(can, 1);
    CHECK(cuDeviceCanAccessPeer(&can, 0, 0));
    CHECK_EQ(can, 0);
    CHECK(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
    CHECK_EQ(v, 1);
    CHECK_RES(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 0), CUDA_ERROR_INVALID_DEVICE);

    CHECK(cuDevicePrimaryCtxRetain(&ctx1, 1));
    CHECK(cuCtxPushCurrent(ctx1));
    CHECK(cuMemAlloc(&d1, sizeof(host)));
    CHECK(cuMemsetD32(d1, 5, 256));
    CHECK(cuCtxPopCurrent(&prev));
    CHECK(cuMemAlloc(&d0, sizeof(host)));

    /* Copies between devices need no peer access. */
    CHECK(cuMemcpyPeer(d0, ctx0, d1, ctx1, sizeof(host)));
    CHECK(cuMemcpyDtoH(host, d0, sizeof(host)));
    CHECK_EQ(host[255], 5);
    CHECK(cuMemsetD32(d0, 9, 256));
    CHECK(cuMemcpyPeerAsync(d1, ctx1, d0, ctx0, sizeof(host), s0));
    CHECK(cuStreamSynchronize(s0));
    CHECK(cuCtxPushCurrent(ctx1));
    CHECK(cuMemcpyDtoH(host, d1, sizeof(host)));
    CHECK(cuCtxPopCurrent(&prev));
    CHECK_EQ(host[0], 9);

    /* Peer access: one way, once, not to the same device or context. */
    CHECK_RES(cuCtxEnablePeerAccess(ctx0, 0), CUDA_ERROR_INVALID_CONTEXT);
    CHECK_RES(cuCtxEnablePeerAccess(ctx1, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuCtxDisablePeerAccess(ctx1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    CHECK(cuCtxEnablePeerAccess(ctx1, 0));
    CHECK_RES(cuCtxEnablePeerAccess(ctx1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    /* With it, a kernel of device 0 updates device 1's memory. */
    uint64_t n = 256;
    void *args[] = { &d1, &n };
    CHECK(cuLaunchKernel(k_add, 1, 1, 1, 1, 1, 1, 0, s0, args, NULL));
    CHECK(cuStreamSynchronize(s0));
    CHECK(cuCtxPushCurrent(ctx1));
    CHECK(cuMemcpyDtoH(host, d1, sizeof(host)));
    CHECK(cuCtxPopCurrent(&prev));
    CHECK_EQ(host[17], 10);
    CHECK(cuCtxDisablePeerAccess(ctx1));

    /* 3D peer copy: a 16 x 4 x 2 box out of device 1 into device 0. */
    CUDA_MEMCPY3D_PEER p;
    memset(&p, 0, sizeof(p));
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE, p.srcDevice = d1, p.srcContext = ctx1, p.srcPitch = 64, p.srcHeight = 4;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE, p.dstDevice = d0, p.dstContext = ctx0, p.dstPitch = 64, p.dstHeight = 4;
    p.WidthInBytes = 64, p.Height = 4, p.Depth = 2;
    CHECK(cuMemsetD32(d0, 0, 256));
    CHECK(cuMemcpy3DPeer(&p));
    CHECK(cuMemcpyDtoH(host, d0, sizeof(host)));
    CHECK_EQ(host[0], 10);
    CHECK_EQ(host[127], 10);
    CHECK_EQ(host[128], 0);

    CHECK(cuMemFree(d0));
    CHECK(cuCtxPushCurrent(ctx1));
    CHECK(cuMemFree(d1));
    CHECK(cuCtxPopCurrent(&prev));
    CHECK(cuDevicePrimaryCtxRelease(1));
}

/* CUDA 13's entry points that name the context instead of using the current
 * one (the CUDA 13 runtime asks cuGetProcAddress for them). */
static void test_ctx_argument(CUcontext ctx0, CUstream s0)
{
    CUresult (*get_device)(CUdevice *, CUcontext) = NULL;
    CUresult (*sync)(CUcontext) = NULL;
    CUresult (*stream_ctx)(CUstream, CUcontext *, CUgreenCtx *) = NULL;
    CUdriverProcAddressQueryResult q;
    CUcontext ctx1, got, prev;
    CUgreenCtx green = (CUgreenCtx)&got;
    CUdevice dev = -1;

    CHECK(cuGetProcAddress_v2("cuCtxGetDevice", (void **)&get_device, 13000, 0, &q));
    CHECK(cuGetProcAddress_v2("cuCtxSynchronize", (void **)&sync, 13000, 0, &q));
    CHECK(cuGetProcAddress_v2("cuStreamGetCtx", (void **)&stream_ctx, 12050, 0, &q));
    CHECK(cuDevicePrimaryCtxRetain(&ctx1, 1));
    CHECK(get_device(&dev, ctx1));
    CHECK_EQ(dev, 1);
    CHECK(get_device(&dev, NULL));
    CHECK_EQ(dev, 0);
    CHECK_RES(get_device(NULL, ctx1), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(get_device(&dev, (CUcontext)&dev), CUDA_ERROR_INVALID_CONTEXT);

    /* Synchronising another context waits for its work, not the current one's. */
    CUdeviceptr d1;
    uint32_t v = 0;
    CUstream s1;
    CHECK(cuCtxPushCurrent(ctx1));
    CHECK(cuMemAlloc(&d1, 1 << 20));
    CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemsetD32Async(d1, 7, 1 << 18, s1));
    CHECK(cuCtxPopCurrent(&prev));
    CHECK(sync(ctx1));
    CHECK_EQ(cuStreamQuery(s1), CUDA_SUCCESS);
    CHECK(sync(NULL));
    CHECK_RES(sync((CUcontext)&v), CUDA_ERROR_INVALID_CONTEXT);

    CHECK(stream_ctx(s1, &got, &green));
    CHECK_TRUE(got == ctx1 && green == NULL);
    CHECK(stream_ctx(s0, &got, &green));
    CHECK_TRUE(got == ctx0);
    CHECK_RES(stream_ctx(s0, &got, NULL), CUDA_ERROR_INVALID_VALUE);

    CHECK(cuCtxPushCurrent(ctx1));
    CHECK(cuMemcpyDtoH(&v, d1 + 4092, sizeof(v)));
    CHECK_EQ(v, 7);
    CHECK(cuStreamDestroy(s1));
    CHECK(cuMemFree(d1));
    CHECK(cuCtxPopCurrent(&prev));
    CHECK(cuDevicePrimaryCtxRelease(1));
}

/* Without peer access, a kernel of device 0 touching device 1's memory faults. */
static void test_peer_fault(void)
{
    pid_t pid = fork();
    int st;

    if (pid == 0) {
        CUcontext c0, c1, prev;
        CUdeviceptr d1;
        CUstream s;
        uint64_t n = 1;
        CUmodule mod;
        CUfunction add;

        if (cuInit(0) || cuDevicePrimaryCtxRetain(&c0, 0) || cuDevicePrimaryCtxRetain(&c1, 1) ||
            cuCtxPushCurrent(c1) || cuMemAlloc(&d1, 4096) || cuCtxPopCurrent(&prev) ||
            cuCtxPushCurrent(c0) || cuModuleLoad(&mod, t_module_path()) ||
            cuModuleGetFunction(&add, mod, "add_one") || cuStreamCreate(&s, 0))
            _exit(2);
        void *args[] = { &d1, &n };
        if (cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, s, args, NULL))
            _exit(3);
        _exit(cuStreamSynchronize(s) == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 4);
    }
    CHECK_TRUE(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK_TRUE(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}

/* ---- launches ---------------------------------------------------------------------------- */

static void test_launch_ex(CUstream s)
{
    CUdeviceptr buf;
    CUevent done;
    CUlaunchAttribute attrs[4];
    CUlaunchConfig c;
    uint64_t n = 64;
    uint32_t v = 3, host[64];
    void *args[] = { &buf, &n, &v };

    CHECK(cuMemAlloc(&buf, sizeof(host)));
    CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    memset(&c, 0, sizeof(c));
    c.gridDimX = 8, c.gridDimY = 1, c.gridDimZ = 1, c.blockDimX = 32, c.blockDimY = 1, c.blockDimZ = 1;
    c.hStream = s;
    c.attrs = attrs;
    memset(attrs, 0, sizeof(attrs));
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[0].value.clusterDim.x = 2, attrs[0].value.clusterDim.y = 1, attrs[0].value.clusterDim.z = 1;
    attrs[1].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attrs[1].value.priority = -3;
    attrs[2].id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
    attrs[2].value.launchCompletionEvent.event = done;
    attrs[3].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
    c.numAttrs = 4;
    CHECK(cuLaunchKernelEx(&c, k_fill, args, NULL));
    CHECK(cuEventSynchronize(done));
    CHECK(cuMemcpyDtoH(host, buf, sizeof(host)));
    CHECK_EQ(host[63], 3);

    /* Clusters must divide the grid and fit; events must not time; unknown ids. */
    attrs[0].value.clusterDim.x = 3;
    CHECK_RES(cuLaunchKernelEx(&c, k_fill, args, NULL), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    c.gridDimX = 16;
    attrs[0].value.clusterDim.x = 16;
    CHECK_RES(cuLaunchKernelEx(&c, k_fill, args, NULL), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    CHECK(cuFuncSetAttribute(k_fill, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
    CHECK(cuLaunchKernelEx(&c, k_fill, args, NULL));
    CHECK(cuFuncSetAttribute(k_fill, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 0));
    attrs[0].value.clusterDim.x = 2;
    CUevent timed;
    CHECK(cuEventCreate(&timed, 0));
    attrs[2].value.launchCompletionEvent.event = timed;
    CHECK_RES(cuLaunchKernelEx(&c, k_fill, args, NULL), CUDA_ERROR_INVALID_VALUE);
    attrs[2].id = CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY;      /* streams only */
    CHECK_RES(cuLaunchKernelEx(&c, k_fill, args, NULL), CUDA_ERROR_INVALID_VALUE);
    attrs[2].id = (CUlaunchAttributeID)99;
    CHECK_RES(cuLaunchKernelEx(&c, k_fill, args, NULL), CUDA_ERROR_INVALID_VALUE);
    attrs[2].id = CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;  /* graphs only */
    attrs[2].value.deviceUpdatableKernelNode.deviceUpdatable = 1;
    CHECK_RES(cuLaunchKernelEx(&c, k_fill, args, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuLaunchKernelEx(NULL, k_fill, args, NULL), CUDA_ERROR_INVALID_VALUE);

    /* A cooperative grid must be resident at once: 132 SMs x 2 blocks of 1024. */
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[0].value.cooperative = 1;
    c.numAttrs = 1;
    c.blockDimX = 1024;
    c.gridDimX = 264;
    CHECK(cuLaunchKernelEx(&c, k_fill, args, NULL));
    c.gridDimX = 265;
    CHECK_RES(cuLaunchKernelEx(&c, k_fill, args, NULL), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    CHECK_RES(cuLaunchCooperativeKernel(k_fill, 265, 1, 1, 1024, 1, 1, 0, s, args), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);

    /* Shared memory beyond 48 KiB needs the function's opt-in. */
    CHECK_RES(cuLaunchKernel(k_fill, 1, 1, 1, 1, 1, 1, 64 << 10, s, args, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuFuncSetAttribute(k_fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10));
    CHECK(cuLaunchKernel(k_fill, 1, 1, 1, 1, 1, 1, 64 << 10, s, args, NULL));
    CHECK(cuFuncSetAttribute(k_fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 48 << 10));
    CHECK_RES(cuFuncSetAttribute(k_fill, CU_FUNC_ATTRIBUTE_NUM_REGS, 8), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamSynchronize(s));

    CHECK(cuEventDestroy(done));
    CHECK(cuEventDestroy(timed));
    CHECK(cuMemFree(buf));
}

static void test_occupancy(void)
{
    int blocks, grid, bs, cluster;
    size_t smem;
    CUlaunchConfig c;

    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k_fill, 256, 0));
    CHECK_EQ(blocks, 8);                   /* 2048 threads / 256 */
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k_fill, 32, 0));
    CHECK_EQ(blocks, 32);                  /* the block limit */
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k_fill, 128, 40 << 10));
    CHECK_EQ(blocks, 5);                   /* 228 KiB / (40 KiB + 1 KiB) */
    CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k_fill, 1025, 0));
    CHECK_EQ(blocks, 0);
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &bs, k_fill, NULL, 0, 0));
    CHECK_EQ(bs, 1024);
    CHECK_EQ(grid, 2 * 132);
    CHECK(cuOccupancyMaxPotentialBlockSize(&grid, &bs, k_fill, NULL, 0, 100));
    CHECK_EQ(bs, 64);                      /* 32 x 64 fills the SM; 21 x 96 does not */
    CHECK(cuOccupancyAvailableDynamicSMemPerBlock(&smem, k_fill, 4, 256));
    CHECK_EQ(smem, 233472 / 4 / 128 * 128 - 1024);
    memset(&c, 0, sizeof(c));
    c.gridDimX = 16, c.gridDimY = c.gridDimZ = 1, c.blockDimX = 128, c.blockDimY = c.blockDimZ = 1;
    CHECK(cuOccupancyMaxPotentialClusterSize(&cluster, k_fill, &c));
    CHECK_EQ(cluster, 8);
    CHECK_RES(cuOccupancyMaxActiveClusters(&cluster, k_fill, &c), CUDA_ERROR_INVALID_CLUSTER_SIZE);
    CUlaunchAttribute a = { .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION };
    a.value.clusterDim.x = 4, a.value.clusterDim.y = a.value.clusterDim.z = 1;
    c.attrs = &a, c.numAttrs = 1;
    CHECK(cuOccupancyMaxActiveClusters(&cluster, k_fill, &c));
    CHECK_EQ(cluster, 16 * 132 / 4);
    CHECK_RES(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, NULL, 256, 0), CUDA_ERROR_INVALID_HANDLE);
}

/* ---- libraries ---------------------------------------------------------------------------- */

static void test_library(CUstream s)
{
    CUlibrary lib, lib2;
    CUkernel k, list[8];
    CUfunction f, f2;
    CUmodule mod;
    const char *name;
    unsigned count;
    size_t off, size;
    int v;
    CUdeviceptr buf;
    uint64_t n = 16;
    uint32_t val = 77, host[16];
    void *args[] = { &buf, &n, &val };
    FILE *fp;
    long len;
    void *image;

    CHECK(cuLibraryLoadFromFile(&lib, t_module_path(), NULL, NULL, 0, NULL, NULL, 0));
    CHECK(cuLibraryGetKernelCount(&count, lib));
    CHECK_EQ(count, 6);     /* fill_u32, add_one, mark, touch, burn_threaded, wait_then_fill */
    CHECK(cuLibraryEnumerateKernels(list, 8, lib));
    CHECK(cuLibraryGetKernel(&k, lib, "fill_u32"));
    CHECK_RES(cuLibraryGetKernel(&k, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    CHECK(cuLibraryGetKernel(&k, lib, "fill_u32"));
    CHECK(cuKernelGetName(&name, k));
    CHECK_TRUE(!strcmp(name, "fill_u32"));
    CHECK(cuKernelGetParamInfo(k, 2, &off, &size));
    CHECK_EQ(off, 16);
    CHECK_EQ(size, 4);
    CHECK(cuKernelGetLibrary(&lib2, k));
    CHECK_TRUE(lib2 == lib);

    /* A CUkernel launches in the current context, directly or as a function. */
    CHECK(cuMemAlloc(&buf, sizeof(host)));
    CHECK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(host, buf, sizeof(host)));
    CHECK_EQ(host[15], 77);
    CHECK(cuKernelGetFunction(&f, k));
    CHECK(cuKernelGetFunction(&f2, k));
    CHECK_TRUE(f == f2);
    CHECK(cuFuncGetName(&name, f));
    CHECK_TRUE(!strcmp(name, "fill_u32"));
    val = 78;
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(host, buf, sizeof(host)));
    CHECK_EQ(host[0], 78);
    CHECK(cuLibraryGetModule(&mod, lib));
    CHECK_RES(cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);   /* it goes with the library */

    /* Kernel attributes, per kernel. */
    CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000, k, 0));
    CHECK(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0));
    CHECK_EQ(v, 100000);
    CHECK_RES(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1, k, 7), CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 90000, s, args, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK_RES(cuLibraryGetGlobal(&buf, &size, lib, "x"), CUDA_ERROR_NOT_FOUND);
    CHECK(cuLibraryUnload(lib));
    CHECK_RES(cuKernelGetName(&name, k), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);

    /* From memory, as the runtime loads a fat binary. */
    CHECK_TRUE((fp = fopen(t_module_path(), "rb")) != NULL);
    fseek(fp, 0, SEEK_END);
    len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    CHECK_TRUE((image = malloc((size_t)len)) && fread(image, 1, (size_t)len, fp) == (size_t)len);
    fclose(fp);
    CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
    free(image);
    CHECK(cuLibraryGetKernel(&k, lib, "add_one"));
    n = 16;
    void *aa[] = { &buf, &n };
    CHECK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, s, aa, NULL));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(host, buf, sizeof(host)));
    CHECK_EQ(host[3], 79);
    CHECK(cuLibraryUnload(lib));
    CHECK_RES(cuLibraryLoadData(&lib, "not an image", NULL, NULL, 0, NULL, NULL, 0), CUDA_ERROR_INVALID_IMAGE);
    CHECK(cuMemFree(buf));
}

/* ---- pointer attributes, functions, the profiler --------------------------------------------- */

static void test_pointer_attributes(void)
{
    CUdeviceptr d, va;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    unsigned long long types = 99, block1 = 0, block2 = 0;
    size_t msize = 0, rsize = 0;
    void *mbase = NULL;
    CUdeviceptr rbase = 0;
    bool rdma = false;
    const size_t gran = 2u << 20;

    CHECK(cuMemAlloc(&d, 1000));
    CHECK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, d));
    CHECK_EQ(types, CU_MEM_HANDLE_TYPE_NONE);
    CHECK(cuPointerGetAttribute(&rdma, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, d));
    CHECK_TRUE(rdma);
    CHECK(cuPointerGetAttribute(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, d + 10));
    /* tcgpu keeps the size asked for, as the driver answers it. */
    CHECK_EQ(msize, 1000);
    CHECK(cuPointerGetAttribute(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, d + 10));
    CHECK_EQ((uintptr_t)mbase, d);
    CHECK(cuPointerGetAttribute(&block1, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, d));
    CHECK_TRUE(block1 != 0);

    /* VMM: the mapping is not the reservation; its block is the handle's. */
    CHECK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
    CHECK(cuMemCreate(&h, 2 * gran, &prop, 0));
    CHECK(cuMemMap(va + gran, 2 * gran, 0, h, 0));
    CHECK(cuMemSetAccess(va + gran, 2 * gran, &acc, 1));
    CHECK(cuPointerGetAttribute(&rbase, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + gran + 5));
    CHECK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + gran + 5));
    CHECK(cuPointerGetAttribute(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, va + gran + 5));
    CHECK(cuPointerGetAttribute(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + gran + 5));
    if (!under_tcgpu) {
        /* tcgpu answers range queries per allocation (its own VMM memory
         * underneath cuMemAlloc is the same kind); a program's own VMM
         * mappings it passes through, as here. */
        CHECK_EQ(rbase, va);
        CHECK_EQ(rsize, 4 * gran);
    }
    CHECK_EQ((uintptr_t)mbase, va + gran);
    CHECK_EQ(msize, 2 * gran);
    CHECK(cuPointerGetAttribute(&block2, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID, va + 3 * gran - 1));
    CHECK_TRUE(block2 != 0 && block2 != block1);
    CHECK(cuPointerGetAttribute(&rdma, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, va + gran));
    CHECK_TRUE(!rdma);                      /* not created GPUDirect RDMA capable */
    CHECK(cuMemUnmap(va + gran, 2 * gran));
    CHECK(cuMemRelease(h));
    CHECK(cuMemAddressFree(va, 4 * gran));

    /* Many at once, as frameworks query them. */
    CUpointer_attribute attrs[] = { CU_POINTER_ATTRIBUTE_MAPPING_SIZE, CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID,
                                    CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES };
    void *data[] = { &msize, &block2, &types };
    CHECK(cuPointerGetAttributes(3, attrs, data, d));
    CHECK_EQ(msize, 1000);
    CHECK_EQ(block2, block1);
    CHECK(cuMemFree(d));
}

static void test_functions_and_profiler(void)
{
    const char *name = NULL;
    CUcontext prev;

    CHECK_RES(cuFuncGetName(&name, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuFuncGetName(NULL, k_fill), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuFuncGetName(&name, k_fill));
    CHECK_TRUE(!strcmp(name, "fill_u32"));
    CHECK(cuProfilerStart());
    CHECK(cuProfilerStart());                /* already on: no effect */
    CHECK(cuProfilerStop());
    CHECK(cuProfilerStop());
    CHECK(cuCtxPopCurrent(&prev));
    CHECK_RES(cuProfilerStart(), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuCtxPushCurrent(prev));
}

/* ---- coredumps -------------------------------------------------------------------------------- */

static void test_coredump_attributes(void)
{
    bool on = false;
    size_t size = 0;
    char file[1024];
    int flags;

    CHECK(cuCoredumpGetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, NULL, &size));
    CHECK_EQ(size, sizeof(bool));
    size = sizeof(on);
    CHECK(cuCoredumpGetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, &size));
    CHECK_TRUE(!on);
    size = sizeof(file);
    CHECK(cuCoredumpGetAttribute(CU_COREDUMP_FILE, file, &size));
    CHECK_TRUE(!strncmp(file, "core.cuda.", 10));
    size = sizeof(file);
    CHECK(cuCoredumpGetAttribute(CU_COREDUMP_PIPE, file, &size));
    CHECK_TRUE(!strncmp(file, "corepipe.cuda.", 14));
    on = true;
    size = sizeof(on);
    CHECK_RES(cuCoredumpSetAttribute(CU_COREDUMP_ENABLE_USER_TRIGGER, &on, &size), CUDA_ERROR_NOT_PERMITTED);
    CHECK_RES(cuCoredumpSetAttribute(CU_COREDUMP_PIPE, "x", &(size_t){ 2 }), CUDA_ERROR_NOT_PERMITTED);
    size = 1;
    CHECK_RES(cuCoredumpSetAttribute(CU_COREDUMP_GENERATION_FLAGS, &flags, &size), CUDA_ERROR_INVALID_VALUE);
    flags = 1 << 20;
    size = sizeof(flags);
    CHECK_RES(cuCoredumpSetAttribute(CU_COREDUMP_GENERATION_FLAGS, &flags, &size), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuCoredumpGetAttribute((CUcoredumpSettings)77, &on, &size), CUDA_ERROR_INVALID_VALUE);
    /* A name's size may leave its NUL out, as cuda-python's len(b"corefile");
     * it ends at the size even where the bytes go on. */
    size = 8;
    CHECK(cuCoredumpSetAttribute(CU_COREDUMP_FILE, "corefile.extra", &size));
    size = sizeof(file);
    CHECK(cuCoredumpGetAttribute(CU_COREDUMP_FILE, file, &size));
    CHECK_TRUE(!strcmp(file, "corefile"));
    CHECK_EQ(size, 9);
    size = 1024;
    memset(file, 'a', sizeof(file));
    CHECK_RES(cuCoredumpSetAttribute(CU_COREDUMP_FILE, file, &size), CUDA_ERROR_INVALID_VALUE);
    size = sizeof(file);
    CHECK(cuCoredumpGetAttribute(CU_COREDUMP_FILE, file, &size));
    CHECK_TRUE(!strcmp(file, "corefile"));      /* a refused name changes nothing */
    /* The user trigger is global; once on, its pipe is fixed. */
    size = sizeof(on);
    CHECK(cuCoredumpSetAttributeGlobal(CU_COREDUMP_ENABLE_USER_TRIGGER, &on, &size));
    size = 2;
    CHECK_RES(cuCoredumpSetAttributeGlobal(CU_COREDUMP_PIPE, "p", &size), CUDA_ERROR_NOT_PERMITTED);
    on = false;
    size = sizeof(on);
    CHECK(cuCoredumpSetAttributeGlobal(CU_COREDUMP_ENABLE_USER_TRIGGER, &on, &size));
}

/* A child enables dumps in its context, then faults: the dump is written;
 * with skip_abort it goes on, without it aborts as the driver makes it. */
static void fault_child(const char *path, bool skip_abort)
{
    CUcontext c;
    CUmodule mod;
    CUfunction touch;
    CUstream s;
    bool on = true;
    size_t size = sizeof(on);
    int flags = skip_abort ? CU_COREDUMP_SKIP_ABORT : 0;
    CUdeviceptr bad = 16;
    void *args[] = { &bad };

    if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c) ||
        cuModuleLoad(&mod, t_module_path()) || cuModuleGetFunction(&touch, mod, "touch") ||
        cuStreamCreate(&s, 0))
        _exit(2);
    if (cuCoredumpSetAttribute(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, &size))
        _exit(3);
    size = strlen(path) + 1;
    if (cuCoredumpSetAttribute(CU_COREDUMP_FILE, (void *)path, &size))
        _exit(4);
    size = sizeof(flags);
    if (cuCoredumpSetAttribute(CU_COREDUMP_GENERATION_FLAGS, &flags, &size))
        _exit(5);
    cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
    _exit(cuStreamSynchronize(s) == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 6);
}

static void test_coredump_on_fault(void)
{
    char dir[] = "/tmp/simcuda-core-XXXXXX", path[128], want[128], text[512] = { 0 };
    struct stat st;
    int status;
    pid_t pid;
    FILE *f;

    CHECK_TRUE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/core.%%p", dir);
    for (int abort_too = 0; abort_too < 2; abort_too++) {
        if ((pid = fork()) == 0)
            fault_child(path, !abort_too);
        CHECK_TRUE(pid > 0 && waitpid(pid, &status, 0) == pid);
        if (abort_too)
            CHECK_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
        else
            CHECK_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        snprintf(want, sizeof(want), "%s/core.%d", dir, (int)pid);
        CHECK_TRUE(stat(want, &st) == 0 && (st.st_mode & 0777) == 0600);
        CHECK_TRUE((f = fopen(want, "r")) && fread(text, 1, sizeof(text) - 1, f) > 0);
        fclose(f);
        CHECK_TRUE(strstr(text, "CUDA_ERROR_ILLEGAL_ADDRESS") && strstr(text, "kernel touch"));
        unlink(want);
    }
    rmdir(dir);
}

/* ---- 3D copies ---------------------------------------------------------------------------------- */

static void test_copy3d(void)
{
    uint8_t host[8][4][16], back[2][3][8];
    CUdeviceptr d;
    CUDA_MEMCPY3D c;

    for (int z = 0; z < 8; z++)
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 16; x++)
                host[z][y][x] = (uint8_t)(z * 64 + y * 16 + x);
    CHECK(cuMemAlloc(&d, sizeof(host)));
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = host, c.srcPitch = 16, c.srcHeight = 4;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = d, c.dstPitch = 16, c.dstHeight = 4;
    c.WidthInBytes = 16, c.Height = 4, c.Depth = 8;
    CHECK(cuMemcpy3D(&c));
    /* A box (x 4..11, y 1..3, z 5..6) back into a tight buffer. */
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = d, c.srcPitch = 16, c.srcHeight = 4;
    c.srcXInBytes = 4, c.srcY = 1, c.srcZ = 5;
    c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = back, c.dstPitch = 8, c.dstHeight = 3;
    c.WidthInBytes = 8, c.Height = 3, c.Depth = 2;
    CHECK(cuMemcpy3D(&c));
    for (int z = 0; z < 2; z++)
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < 8; x++)
                CHECK_EQ(back[z][y][x], host[5 + z][1 + y][4 + x]);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    CHECK_RES(cuMemcpy3D(&c), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuMemFree(d));
}

int main(void)
{
    CUcontext ctx;
    CUmodule mod;
    CUstream s;
    int ndev;

    sim_test_setup("features");
    setenv("SIMCUDA_DEVICES", "2", 1);      /* read by whoever creates the machine: us */
    under_tcgpu = dlsym(RTLD_DEFAULT, "tcgpu_status") != NULL;
    test_peer_fault();
    test_coredump_on_fault();
    ctx = t_init();
    CHECK(cuDeviceGetCount(&ndev));
    CHECK_EQ(ndev, 2);
    CHECK(cuModuleLoad(&mod, t_module_path()));
    CHECK(cuModuleGetFunction(&k_fill, mod, "fill_u32"));
    CHECK(cuModuleGetFunction(&k_add, mod, "add_one"));
    CHECK(cuModuleGetFunction(&k_touch, mod, "touch"));
    CHECK(cuStreamCreate(&s, 0));

    test_managed(s);
    test_peer(ctx, s);
    test_ctx_argument(ctx, s);
    test_launch_ex(s);
    test_occupancy();
    test_library(s);
    test_pointer_attributes();
    test_functions_and_profiler();
    test_coredump_attributes();
    test_copy3d();

    CHECK(cuStreamDestroy(s));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(0));
    printf("features%s: ok\n", under_tcgpu ? " (under tcgpu)" : "");
    return 0;
}
