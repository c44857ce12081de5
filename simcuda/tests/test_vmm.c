/*
 * test_vmm.c - reserve once, map/unmap/remap physical handles at a fixed
 * address; access rights; capacity follows the physical handles.
 */
#include "harness.h"

static CUmemAllocationProp prop(void)
{
    CUmemAllocationProp p = { 0 };

    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

static void set_rw(CUdeviceptr va, size_t size)
{
    CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

    CHECK(cuMemSetAccess(va, size, &d, 1));
}

int main(void)
{
    CUmemAllocationProp p;
    CUmemGenericAllocationHandle h1, h2, h3;
    CUdeviceptr va, va2, want;
    size_t g, f0, f1, total;
    uint32_t v[4];

    sim_test_setup("vmm");
    t_init();
    p = prop();
    CHECK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK_EQ(g, 2 << 20);
    CHECK(cuMemGetInfo(&f0, &total));

    /* A reservation at a chosen address is honoured when free. */
    CHECK(cuMemAddressReserve(&va, 64 * g, 0, 0, 0));
    CHECK(cuMemAddressFree(va, 64 * g));
    want = va + 8 * g;
    CHECK(cuMemAddressReserve(&va, 16 * g, 0, want, 0));
    CHECK_EQ(va, want);
    /* Taken: another address is picked. */
    CHECK(cuMemAddressReserve(&va2, 4 * g, 0, want, 0));
    CHECK_TRUE(va2 != want);
    CHECK(cuMemAddressFree(va2, 4 * g));
    CHECK_RES(cuMemAddressReserve(&va2, g + 1, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);

    CHECK_RES(cuMemCreate(&h1, g + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemCreate(&h1, 2 * g, &p, 0));
    CHECK(cuMemCreate(&h2, 2 * g, &p, 0));
    CHECK(cuMemGetInfo(&f1, &total));
    CHECK_EQ(f0 - f1, 4 * g);       /* capacity is taken at create */

    CHECK(cuMemMap(va, 2 * g, 0, h1, 0));
    CHECK_RES(cuMemMap(va, 2 * g, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);   /* already mapped */
    /* Mapped but no access yet (a copy of it faults when it runs: below). */
    unsigned long long fl = 99;
    CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, 0 };
    CHECK(cuMemGetAccess(&fl, &loc, va));
    CHECK_EQ(fl, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    set_rw(va, 2 * g);
    CHECK(cuMemGetAccess(&fl, &loc, va));
    CHECK_EQ(fl, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK(cuMemsetD32(va, 0x11111111, 2 * g / 4));

    /* A second handle next to the first; a copy may cross the two mappings. */
    CHECK(cuMemMap(va + 2 * g, 2 * g, 0, h2, 0));
    set_rw(va + 2 * g, 2 * g);
    CHECK(cuMemsetD32(va + 2 * g, 0x22222222, 2 * g / 4));
    CHECK(cuMemcpyDtoH(v, va + 2 * g - 8, 16));
    CHECK_EQ(v[0], 0x11111111);
    CHECK_EQ(v[3], 0x22222222);

    /* Remap h2 where h1 was: same address, other contents. */
    CHECK(cuMemUnmap(va, 2 * g));
    CHECK_RES(cuMemcpyDtoH(v, va, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemUnmap(va + 2 * g, 2 * g));
    CHECK(cuMemMap(va, 2 * g, 0, h2, 0));
    set_rw(va, 2 * g);
    CHECK(cuMemcpyDtoH(v, va, 4));
    CHECK_EQ(v[0], 0x22222222);
    /* Map h1 again: its contents survived the unmap (the handle lives). */
    CHECK(cuMemMap(va + 2 * g, 2 * g, 0, h1, 0));
    set_rw(va + 2 * g, 2 * g);
    CHECK(cuMemcpyDtoH(v, va + 2 * g, 4));
    CHECK_EQ(v[0], 0x11111111);

    /* Retain from an address: same handle; release drops that reference. */
    CHECK(cuMemRetainAllocationHandle(&h3, (void *)(uintptr_t)(va + 2 * g + 100)));
    CHECK_EQ(h3, h1);
    CHECK(cuMemRelease(h3));
    CUmemAllocationProp got;
    CHECK(cuMemGetAllocationPropertiesFromHandle(&got, h1));
    CHECK_EQ(got.location.id, 0);

    /* Released while mapped: capacity stays until the unmap. */
    CHECK(cuMemRelease(h1));
    CHECK(cuMemGetInfo(&f1, &total));
    CHECK_EQ(f0 - f1, 4 * g);
    CHECK(cuMemUnmap(va + 2 * g, 2 * g));
    CHECK(cuMemGetInfo(&f1, &total));
    CHECK_EQ(f0 - f1, 2 * g);
    CHECK_RES(cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE);

    /* A fresh handle at the old address: the old contents are gone. */
    CHECK(cuMemCreate(&h3, 2 * g, &p, 0));
    CHECK(cuMemMap(va + 2 * g, 2 * g, 0, h3, 0));
    set_rw(va + 2 * g, 2 * g);
    CHECK(cuMemcpyDtoH(v, va + 2 * g, 4));
    CHECK_TRUE(v[0] != 0x11111111);

    CHECK_RES(cuMemAddressFree(va, 16 * g), CUDA_ERROR_INVALID_VALUE);   /* still mapped */
    CHECK(cuMemUnmap(va, 4 * g));
    CHECK(cuMemRelease(h2));
    CHECK(cuMemRelease(h3));
    CHECK(cuMemAddressFree(va, 16 * g));
    CHECK(cuMemGetInfo(&f1, &total));
    CHECK_EQ(f1, f0);

    /* OOM is real: more than the device holds. */
    CHECK_RES(cuMemCreate(&h1, (total / g + 1) * g, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);

    /* A kernel touching a mapping without access faults (own context: sticky). */
    CUcontext ctx;
    CUmodule m;
    CUfunction touch;
    CHECK(cuCtxCreate(&ctx, NULL, 0, 0));
    CHECK(cuModuleLoad(&m, t_module_path()));
    CHECK(cuModuleGetFunction(&touch, m, "touch"));
    CHECK(cuMemAddressReserve(&va, 2 * g, 0, 0, 0));
    CHECK(cuMemCreate(&h1, 2 * g, &p, 0));
    CHECK(cuMemMap(va, 2 * g, 0, h1, 0));
    void *args[] = { &va };
    CHECK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK_RES(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(cuCtxDestroy(ctx));

    /* So does a copy: accepted at the call (the range is mapped), it faults
     * when the copy engine meets pages the device may not touch. */
    CHECK(cuCtxCreate(&ctx, NULL, 0, 0));
    CHECK(cuMemcpyDtoHAsync(v, va, 16, NULL));
    CHECK_RES(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_RES(cuMemcpyDtoH(v, va, 16), CUDA_ERROR_ILLEGAL_ADDRESS);     /* sticky */
    CHECK(cuCtxDestroy(ctx));
    printf("vmm: ok\n");
    return 0;
}
