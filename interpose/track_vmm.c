/*
 * track_vmm.c - the program's own use of the VMM API (PyTorch's expandable
 * segments, custom allocators), recorded so that suspend can release its
 * physical memory and resume can map new memory at the same addresses.
 *
 * The program never holds a real CUmemGenericAllocationHandle: it gets the
 * registry's handle (struct tc_phys id), which stays valid while the real
 * handle behind it is released and re-created. Address reservations need no
 * tracking: they survive a suspend untouched.
 */
#include <cuda.h>

#include "driver/driver.h"
#include "driver/gate.h"
#include "core/registry.h"

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUmemGenericAllocationHandle real;
    struct tc_phys *p;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemCreate");
    rc = TCGPU_REAL(cuMemCreate)(&real, size, prop, flags);
    if (rc == CUDA_SUCCESS) {
        reg_lock();
        p = reg_phys_add(real, size, prop, flags, TC_OWNER_USER);
        reg_unlock();
        if (p) {
            *handle = p->id;
        } else {
            TCGPU_REAL(cuMemRelease)(real);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* The driver frees a physical allocation once it is released and unmapped. */
static void drop_if_unused(struct tc_phys *p)
{
    if (p->refs == 0 && p->nmaps == 0) {
        if (p->real)
            TCGPU_REAL(cuMemRelease)(p->real);
        reg_phys_remove(p);
    }
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct tc_phys *p;
    CUresult rc = CUDA_SUCCESS;

    TCGPU_GATE_ENTER("cuMemRelease");
    reg_lock();
    p = reg_phys_find(handle);
    if (!p || p->owner != TC_OWNER_USER || p->refs == 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        p->refs--;
        drop_if_unused(p);
    }
    reg_unlock();
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    struct tc_phys *p;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemMap");
    reg_lock();
    p = reg_phys_find(handle);
    if (!p || p->owner != TC_OWNER_USER) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        rc = TCGPU_REAL(cuMemMap)(ptr, size, offset, p->real, flags);
        if (rc == CUDA_SUCCESS && !reg_map_add(ptr, size, offset, p)) {
            TCGPU_REAL(cuMemUnmap)(ptr, size);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    reg_unlock();
    TCGPU_GATE_LEAVE();
    return rc;
}

/* Whether [ptr, ptr+size) touches memory the allocator (devmem.c) owns. */
static int overlaps_devmem(CUdeviceptr ptr, size_t size)
{
    for (struct tc_map *m = reg_map_first(); m; m = m->next)
        if (m->phys->owner == TC_OWNER_DEVMEM && m->va < ptr + size && ptr < m->va + m->size)
            return 1;
    return 0;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct tc_map *m, *next;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemUnmap");
    reg_lock();
    if (overlaps_devmem(ptr, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;      /* cuMemAlloc memory is freed with cuMemFree */
    } else {
        rc = TCGPU_REAL(cuMemUnmap)(ptr, size);
    }
    if (rc == CUDA_SUCCESS) {
        for (m = reg_map_first(); m; m = next) {
            next = m->next;
            if (m->va >= ptr && m->va - ptr < size) {
                struct tc_phys *p = m->phys;
                reg_map_remove(m);
                drop_if_unused(p);
            }
        }
        reg_hints_forget(ptr, size);
    }
    reg_unlock();
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemSetAccess");
    rc = TCGPU_REAL(cuMemSetAccess)(ptr, size, desc, count);
    if (rc == CUDA_SUCCESS) {
        reg_lock();
        reg_map_set_access(ptr, size, desc, count);
        reg_unlock();
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    struct tc_map *m;
    CUresult rc = CUDA_SUCCESS;

    TCGPU_GATE_ENTER("cuMemRetainAllocationHandle");
    reg_lock();
    m = reg_map_containing((CUdeviceptr)(uintptr_t)addr);
    if (!m || m->phys->owner != TC_OWNER_USER) {
        rc = m ? CUDA_ERROR_INVALID_VALUE : TCGPU_REAL(cuMemRetainAllocationHandle)(handle, addr);
    } else if (!handle) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        m->phys->refs++;
        *handle = m->phys->id;
    }
    reg_unlock();
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    struct tc_phys *p;
    CUresult rc = CUDA_SUCCESS;

    TCGPU_GATE_ENTER("cuMemGetAllocationPropertiesFromHandle");
    reg_lock();
    p = reg_phys_find(handle);
    if (!p || !prop)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *prop = p->prop;
    reg_unlock();
    TCGPU_GATE_LEAVE();
    return rc;
}
