/*
 * ptrquery - address-range and pointer-attribute queries answer per
 * allocation, as the driver does, also when tcgpu carves small buffers out of
 * one shared segment. Run with and without libtcgpu.so preloaded: the answers
 * must be the same.
 *
 *   ptrquery       exit 0 when every check passed
 */
#include <stdio.h>
#include <stdlib.h>
#include <cuda.h>

#include "check.h"

int main(void)
{
    static const size_t sizes[] = { 256, 1000, 4096, 65536, 3u << 20 };
    enum { K = sizeof(sizes) / sizeof(sizes[0]) };
    CUdeviceptr p[K], base;
    unsigned long long id[K];
    size_t size;
    CUcontext ctx;

    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    for (int i = 0; i < K; i++)
        cu(cuMemAlloc(&p[i], sizes[i]), "cuMemAlloc");

    for (int i = 0; i < K; i++) {
        CHECK(p[i] % 256 == 0);
        /* Any interior pointer names its own allocation. */
        cu(cuMemGetAddressRange(&base, &size, p[i] + sizes[i] / 2), "cuMemGetAddressRange");
        CHECK(base == p[i]);
        CHECK(size >= sizes[i] && size < sizes[i] + 256);
        cu(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p[i] + 1),
           "cuPointerGetAttribute(RANGE_START_ADDR)");
        CHECK(base == p[i]);
        cu(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p[i]),
           "cuPointerGetAttribute(RANGE_SIZE)");
        CHECK(size >= sizes[i] && size < sizes[i] + 256);
        cu(cuPointerGetAttribute(&id[i], CU_POINTER_ATTRIBUTE_BUFFER_ID, p[i]),
           "cuPointerGetAttribute(BUFFER_ID)");
        for (int j = 0; j < i; j++)
            CHECK(id[i] != id[j]);
        unsigned int type = 0;
        cu(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p[i]),
           "cuPointerGetAttribute(MEMORY_TYPE)");
        CHECK(type == CU_MEMORYTYPE_DEVICE);

        CUpointer_attribute attrs[2] = { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                         CU_POINTER_ATTRIBUTE_BUFFER_ID };
        CUdeviceptr b2 = 0;
        unsigned long long id2 = 0;
        void *data[2] = { &b2, &id2 };
        cu(cuPointerGetAttributes(2, attrs, data, p[i] + 3), "cuPointerGetAttributes");
        CHECK(b2 == p[i] && id2 == id[i]);
    }
    /* Freeing an interior pointer is an error, as with the driver. */
    CHECK(cuMemFree(p[1] + 256) != CUDA_SUCCESS);
    for (int i = 0; i < K; i++)
        cu(cuMemFree(p[i]), "cuMemFree");
    /* A freed buffer is gone. */
    CHECK(cuMemGetAddressRange(&base, &size, p[2]) != CUDA_SUCCESS);
    if (failures)
        return 1;
    printf("ptrquery: ok\n");
    return 0;
}
