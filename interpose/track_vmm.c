/*
 * track_vmm.c - the program's own use of the VMM API (PyTorch's expandable
 * segments, custom allocators), recorded so that suspend can release its
 * physical memory and resume can map new memory at the same addresses.
 *
 * The program never holds a real handle of an allocation it created: it gets
 * the registry's handle (struct tc_phys id), which stays valid while the real
 * handle behind it is released and re-created, and every call that takes one
 * is given the real one here. Handles the driver gave the program through a
 * call tcgpu does not track (cuMemImportFromShareableHandle,
 * cuMulticastCreate) are the driver's and pass through: those calls note
 * state a checkpoint cannot carry (unsupported.list), so a suspend never
 * meets them. Address reservations need no tracking: they survive a suspend
 * untouched.
 */
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

#include "driver/driver.h"
#include "driver/gate.h"
#include "driver/unsupported.h"
#include "core/registry.h"

CUresult CUDAAPI cuMemMapArrayAsync_ptsz(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream);

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
    if (!p && !reg_phys_is_ours(handle)) {
        rc = TCGPU_REAL(cuMemRelease)(handle);
    } else if (!p || p->owner != TC_OWNER_USER || p->refs == 0) {
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
    if (!p && !reg_phys_is_ours(handle)) {
        rc = TCGPU_REAL(cuMemMap)(ptr, size, offset, handle, flags);
    } else if (!p || p->owner != TC_OWNER_USER) {
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
    if (!p && !reg_phys_is_ours(handle))
        rc = TCGPU_REAL(cuMemGetAllocationPropertiesFromHandle)(prop, handle);
    else if (!p || !prop)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *prop = p->prop;
    reg_unlock();
    TCGPU_GATE_LEAVE();
    return rc;
}

/*
 * The real handle behind a handle the program holds: ours translated (0 when
 * it is not a live one of the program's), the driver's as it is. Lock held.
 */
static CUmemGenericAllocationHandle real_handle(CUmemGenericAllocationHandle handle)
{
    struct tc_phys *p;

    if (!reg_phys_is_ours(handle))
        return handle;
    p = reg_phys_find(handle);
    return p && p->owner == TC_OWNER_USER ? p->real : 0;
}

/* The driver exports the real allocation (NCCL's cuMem path, PyTorch's
 * expandable segments shared with another process). Another process then
 * maps memory a suspend would release under it: noted, as before. */
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    CUmemGenericAllocationHandle real;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemExportToShareableHandle");
    reg_lock();
    real = real_handle(handle);
    rc = real ? TCGPU_REAL(cuMemExportToShareableHandle)(shareableHandle, real, handleType, flags)
              : CUDA_ERROR_INVALID_VALUE;
    reg_unlock();
    if (rc == CUDA_SUCCESS)
        tcgpu_note_unsupported("cuMemExportToShareableHandle",
                               "memory exported as a shareable handle cannot be checkpointed");
    TCGPU_GATE_LEAVE();
    return rc;
}

/* Binding an allocation of the program's to a multicast object (NVLS). */
CUresult CUDAAPI cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                    CUmemGenericAllocationHandle memHandle, size_t memOffset,
                                    size_t size, unsigned long long flags)
{
    CUmemGenericAllocationHandle real;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMulticastBindMem");
    reg_lock();
    real = real_handle(memHandle);
    rc = real ? TCGPU_REAL(cuMulticastBindMem)(mcHandle, mcOffset, real, memOffset, size, flags)
              : CUDA_ERROR_INVALID_VALUE;
    reg_unlock();
    if (rc == CUDA_SUCCESS)
        tcgpu_note_unsupported("cuMulticastBindMem", "multicast bindings cannot be checkpointed");
    TCGPU_GATE_LEAVE();
    return rc;
}

/*
 * Sparse arrays mapped onto the program's allocations: the list goes to the
 * driver with real handles (a copy: the program's list is its own). Arrays
 * are noted where they are created, so nothing here is carried.
 */
static CUresult map_array(CUarrayMapInfo *list, unsigned count, CUstream stream, int ptsz)
{
    CUarrayMapInfo *real_list = NULL;
    CUresult rc = CUDA_SUCCESS;

    if (list && count) {
        real_list = malloc((size_t)count * sizeof(*real_list));
        if (!real_list)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(real_list, list, (size_t)count * sizeof(*real_list));
        reg_lock();
        for (unsigned i = 0; i < count && rc == CUDA_SUCCESS; i++) {
            CUmemGenericAllocationHandle *h = &real_list[i].memHandle.memHandle;

            if (real_list[i].memOperationType != CU_MEM_OPERATION_TYPE_MAP ||
                real_list[i].memHandleType != CU_MEM_HANDLE_TYPE_GENERIC)
                continue;
            *h = real_handle(*h);
            if (!*h)
                rc = CUDA_ERROR_INVALID_VALUE;
        }
        reg_unlock();
    }
    if (rc == CUDA_SUCCESS)
        rc = ptsz ? TCGPU_REAL_ABI(cuMemMapArrayAsync_ptsz)(real_list ? real_list : list, count, stream)
                  : TCGPU_REAL_ABI(cuMemMapArrayAsync)(real_list ? real_list : list, count, stream);
    free(real_list);
    return rc;
}

CUresult CUDAAPI cuMemMapArrayAsync(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemMapArrayAsync");
    rc = map_array(mapInfoList, count, hStream, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuMemMapArrayAsync_ptsz(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemMapArrayAsync_ptsz");
    rc = map_array(mapInfoList, count, hStream, 1);
    TCGPU_GATE_LEAVE();
    return rc;
}
