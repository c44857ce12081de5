/*
 * identity - memory served by tcgpu identifies itself as the driver's own
 * does, and goes when its context goes. Run with and without libtcgpu.so
 * preloaded: every answer must be the driver's.
 *
 *   identity       exit 0 when every check passed (RUN lines name each part)
 *
 * What libraries branch on (MPI's and UCX's CUDA paths, allocators):
 *   - the exact size of an allocation, and that a pointer one past its end is
 *     not in it (tcgpu rounds blocks to 256 bytes inside shared arenas);
 *   - the context of cuMemAlloc memory, none for stream-ordered memory, and
 *     the pool of the latter; the pool's used/reserved counters;
 *   - a copy or memset past an allocation's end is refused, and its
 *     neighbour left untouched;
 *   - destroying a context frees its cuMemAlloc and pool memory (cuMemFree
 *     of it is then an error; cuMemGetInfo shows it all back), and a process with no context left can
 *     still be suspended and resumed (its VMM memory kept).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

#include "check.h"

static CUcontext primary;

static int exact_ranges(void)
{
    CUdeviceptr p, q, base = 0;
    size_t size = 0;

    cu(cuMemAlloc(&p, 1000), "cuMemAlloc");
    cu(cuMemAlloc(&q, 1000), "cuMemAlloc");
    cu(cuMemGetAddressRange(&base, &size, p + 999), "cuMemGetAddressRange");
    CHECK(base == p && size == 1000, "base %#llx size %zu", (unsigned long long)base, size);
    cu(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p), "RANGE_SIZE");
    CHECK(size == 1000, "RANGE_SIZE %zu", size);
    /* One past the end is not part of it (it is nothing, or the next one). */
    base = 0;
    CUresult rc = cuMemGetAddressRange(&base, &size, p + 1000);
    CHECK(rc != CUDA_SUCCESS || base != p, "%#llx resolves to %#llx",
          (unsigned long long)(p + 1000), (unsigned long long)base);
    cu(cuMemFree(p), "cuMemFree");
    cu(cuMemFree(q), "cuMemFree");
    return T_EXIT_PASS;
}

static int owners(void)
{
    CUcontext ctx = (CUcontext)1;
    CUmemoryPool pool = NULL, mp = (CUmemoryPool)1;
    CUdeviceptr p, a, b;
    CUstream s;
    cuuint64_t used = 0, reserved = 0, high = 0, zero = 0;

    cu(cuMemAlloc(&p, 4096), "cuMemAlloc");
    cu(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p), "CONTEXT");
    CHECK(ctx == primary, "CONTEXT of cuMemAlloc memory is %p, not the allocating %p",
          (void *)ctx, (void *)primary);
    cu(cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p), "MEMPOOL_HANDLE");
    CHECK(mp == NULL, "cuMemAlloc memory has pool %p", (void *)mp);

    cu(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    cu(cuDeviceGetMemPool(&pool, 0), "cuDeviceGetMemPool");
    cu(cuMemAllocAsync(&a, 1 << 20, s), "cuMemAllocAsync");
    cu(cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a), "MEMPOOL_HANDLE");
    CHECK(mp == pool, "pool memory names pool %p, not %p", (void *)mp, (void *)pool);
    ctx = (CUcontext)1;
    cu(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, a), "CONTEXT");
    CHECK(ctx == NULL, "stream-ordered memory has context %p", (void *)ctx);
    cu(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), "USED_MEM_CURRENT");
    cu(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
       "RESERVED_MEM_CURRENT");
    CHECK(used == (1 << 20), "USED_MEM_CURRENT %llu", (unsigned long long)used);
    CHECK(reserved >= used, "RESERVED_MEM_CURRENT %llu < used %llu",
          (unsigned long long)reserved, (unsigned long long)used);
    /* Used is the bytes asked for: a 3 MiB block is 3 MiB, though the memory
     * behind it comes in 2 MiB pieces (tcgpu's segment of it is 4 MiB). */
    cu(cuMemAllocAsync(&b, 3 << 20, s), "cuMemAllocAsync");
    cu(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), "USED_MEM_CURRENT");
    cu(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
       "RESERVED_MEM_CURRENT");
    CHECK(used == (4 << 20), "USED_MEM_CURRENT %llu with 1 + 3 MiB live", (unsigned long long)used);
    CHECK(reserved >= used, "RESERVED_MEM_CURRENT %llu < used %llu",
          (unsigned long long)reserved, (unsigned long long)used);
    cu(cuMemFreeAsync(b, s), "cuMemFreeAsync");
    cu(cuMemFreeAsync(a, s), "cuMemFreeAsync");
    cu(cuStreamSynchronize(s), "cuStreamSynchronize");
    cu(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), "USED_MEM_CURRENT");
    CHECK(used == 0, "USED_MEM_CURRENT %llu after the free", (unsigned long long)used);
    cu(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high), "USED_MEM_HIGH");
    CHECK(high == (4 << 20), "USED_MEM_HIGH %llu", (unsigned long long)high);
    cu(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero), "reset USED_MEM_HIGH");
    cu(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high), "USED_MEM_HIGH");
    CHECK(high == 0, "USED_MEM_HIGH %llu after a reset", (unsigned long long)high);
    cu(cuStreamDestroy(s), "cuStreamDestroy");
    cu(cuMemFree(p), "cuMemFree");
    return T_EXIT_PASS;
}

static int overruns(void)
{
    unsigned char big[8192], back[4096];
    CUdeviceptr a, b;
    CUDA_MEMCPY2D c2;

    cu(cuMemAlloc(&a, 4096), "cuMemAlloc");
    cu(cuMemAlloc(&b, 4096), "cuMemAlloc");
    cu(cuMemsetD8(b, 0x5a, 4096), "cuMemsetD8");
    memset(big, 0xee, sizeof(big));
    CHECK(cuMemcpyHtoD(a, big, 8192) == CUDA_ERROR_INVALID_VALUE, "HtoD past the end");
    CHECK(cuMemcpyHtoDAsync(a + 4000, big, 200, NULL) == CUDA_ERROR_INVALID_VALUE,
          "async HtoD past the end");
    CHECK(cuMemsetD8(a, 1, 4097) == CUDA_ERROR_INVALID_VALUE, "memset past the end");
    CHECK(cuMemsetD32(a + 4, 1, 1024) == CUDA_ERROR_INVALID_VALUE, "memset32 past the end");
    CHECK(cuMemcpyDtoD(b, a, 4097) == CUDA_ERROR_INVALID_VALUE, "DtoD past the end");
    CHECK(cuMemcpyDtoH(big, a, 4097) == CUDA_ERROR_INVALID_VALUE, "DtoH past the end");
    memset(&c2, 0, sizeof(c2));
    c2.srcMemoryType = CU_MEMORYTYPE_HOST;
    c2.srcHost = big;
    c2.srcPitch = 1024;
    c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.dstDevice = a;
    c2.dstPitch = 1024;
    c2.WidthInBytes = 1024;
    c2.Height = 5;                          /* 5 KiB into 4 KiB */
    CHECK(cuMemcpy2D(&c2) == CUDA_ERROR_INVALID_VALUE, "2D copy past the end");
    c2.Height = 4;
    cu(cuMemcpy2D(&c2), "cuMemcpy2D within bounds");
    cu(cuMemcpyHtoD(a, big, 4096), "cuMemcpyHtoD within bounds");
    cu(cuCtxSynchronize(), "cuCtxSynchronize");
    cu(cuMemcpyDtoH(back, b, 4096), "cuMemcpyDtoH");
    int intact = 1;
    for (size_t i = 0; i < sizeof(back); i++)
        intact &= back[i] == 0x5a;
    CHECK(intact, "the neighbour of the overrun allocation was overwritten");
    cu(cuMemFree(a), "cuMemFree");
    cu(cuMemFree(b), "cuMemFree");
    return T_EXIT_PASS;
}

static size_t free_now(void)
{
    size_t f = 0, t = 0;

    cu(cuMemGetInfo(&f, &t), "cuMemGetInfo");
    return f;
}

/* A context that made and freed a small block, then destroyed, leaves
 * nothing in use: tcgpu's empty arena kept for the next small block goes
 * with it (it showed 2 MiB used where the driver shows none). Runs first, in
 * a process that holds no device memory yet. */
static int arena_returned(void)
{
    size_t before = free_now(), after;
    CUdeviceptr a;
    CUcontext c;

    cu(cuCtxCreate(&c, NULL, 0, 0), "cuCtxCreate");
    cu(cuMemAlloc(&a, 4096), "cuMemAlloc");
    cu(cuMemFree(a), "cuMemFree");
    cu(cuCtxDestroy(c), "cuCtxDestroy");
    cu(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    after = free_now();
    CHECK(after == before, "%lld KiB still used after the context went",
          ((long long)before - (long long)after) / 1024);
    return T_EXIT_PASS;
}

static int context_destroy(void)
{
    CUdeviceptr p[5];
    size_t before, after;

    before = free_now();
    for (int i = 0; i < 5; i++) {
        CUcontext c;
        CUdeviceptr a;
        CUstream s;

        cu(cuCtxCreate(&c, NULL, 0, 0), "cuCtxCreate");
        cu(cuMemAlloc(&p[i], 32 << 20), "cuMemAlloc");
        cu(cuMemAlloc(&a, 4096), "cuMemAlloc");
        cu(cuStreamCreate(&s, 0), "cuStreamCreate");
        cu(cuMemAllocAsync(&a, 1 << 20, s), "cuMemAllocAsync");
        cu(cuStreamSynchronize(s), "cuStreamSynchronize");
        cu(cuCtxDestroy(c), "cuCtxDestroy");
    }
    cu(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    after = free_now();
    CHECK(after >= before, "5 destroyed contexts still hold %zu KiB", (before - after) >> 10);
    for (int i = 0; i < 5; i++)
        CHECK(cuMemFree(p[i]) == CUDA_ERROR_INVALID_VALUE,
              "cuMemFree of a destroyed context's memory did not fail");
    return T_EXIT_PASS;
}

/* With every context gone, VMM memory stays, and a suspend must cope. */
static int no_context_left(void)
{
    int (*suspend)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_suspend");
    int (*resume)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "tcgpu_resume");
    const char *(*last_error)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "tcgpu_last_error");
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    size_t g = 2 << 20;
    uint32_t v = 0;
    CUcontext c;

    cu(cuMemAddressReserve(&va, g, 0, 0, 0), "cuMemAddressReserve");
    cu(cuMemCreate(&h, g, &prop, 0), "cuMemCreate");
    cu(cuMemMap(va, g, 0, h, 0), "cuMemMap");
    cu(cuMemSetAccess(va, g, &acc, 1), "cuMemSetAccess");
    cu(cuMemsetD32(va, 0xc0ffee, g / 4), "cuMemsetD32");
    cu(cuCtxSynchronize(), "cuCtxSynchronize");
    cu(cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease");
    if (suspend && resume) {
        int r = suspend(NULL);
        CHECK(r == 0, "suspend with no context left: %d (%s)", r, last_error());
        if (r == 0) {
            r = resume();
            CHECK(r == 0, "resume: %d (%s)", r, last_error());
        }
    }
    cu(cuCtxCreate(&c, NULL, 0, 0), "cuCtxCreate");
    cu(cuMemcpyDtoH(&v, va + g - 4, 4), "cuMemcpyDtoH");
    CHECK(v == 0xc0ffee, "VMM memory reads %#x after the suspend", v);
    cu(cuMemUnmap(va, g), "cuMemUnmap");
    cu(cuMemRelease(h), "cuMemRelease");
    cu(cuMemAddressFree(va, g), "cuMemAddressFree");
    cu(cuCtxDestroy(c), "cuCtxDestroy");
    return T_EXIT_PASS;
}

int main(void)
{
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&primary, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    RUN(arena_returned);
    RUN(exact_ranges);
    RUN(owners);
    RUN(overruns);
    RUN(context_destroy);
    RUN(no_context_left);
    return T_EXIT_STATUS();
}
