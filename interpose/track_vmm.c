/*
 * track_vmm.c - the program's own use of the VMM API (PyTorch's expandable
 * segments, custom allocators), recorded so that suspend can release its
 * physical memory and resume can map new memory at the same addresses.
 *
 * The program never holds a real handle of an allocation it created: it gets
 * the registry's handle (struct tc_phys id), which stays valid while the real
 * handle behind it is released and re-created, and every call that takes one
 * is given the real one here.
 *
 * Shareable handles (POSIX descriptors) of those allocations are carried
 * like CUDA IPC (lib/core/ipcmem.h): the exporter gets a descriptor of
 * tcgpu's, and an importer under tcgpu a handle of the registry's
 * (TC_OWNER_IMPORTED) that a suspend releases and a resume imports and maps
 * again. Handles the driver gave the program through calls tcgpu does not
 * carry (a descriptor of the driver's imported, cuMulticastCreate) are the
 * driver's and pass through: those calls note state a checkpoint cannot
 * carry (unsupported.list), so a suspend never meets them. Address
 * reservations need no tracking: they survive a suspend untouched.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda.h>

#include "driver/driver.h"
#include "driver/gate.h"
#include "driver/unsupported.h"
#include "core/ipcmem.h"
#include "core/registry.h"
#include "core/settings.h"
#include "common/log.h"

CUresult CUDAAPI cuMemMapArrayAsync_ptsz(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream);
static void sweep_orphans(void);

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUmemGenericAllocationHandle real;
    struct tc_phys *p;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemCreate");
    sweep_orphans();
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

/* The driver frees a physical allocation once it is released and unmapped.
 * An imported one's id goes to *imported (0: none), for ipcmem_import_forget
 * once the registry's lock is dropped. One we exported is ipcmem's to free:
 * it stays while a process that imported it may map it again (ipcmem.h). */
static void drop_if_unused(struct tc_phys *p, uint64_t *imported)
{
    if (p->refs != 0 || p->nmaps != 0)
        return;
    if (p->exported) {
        ipcmem_orphans_mark();
        return;
    }
    if (p->real)
        TCGPU_REAL(cuMemRelease)(p->real);
    if (p->owner == TC_OWNER_IMPORTED)
        *imported = p->id;
    reg_phys_remove(p);
}

/* Inside a program's call, the gate open: no operation holds a snapshot of
 * the registry, so exported allocations nobody holds may go. */
static void sweep_orphans(void)
{
    ipcmem_orphans_free();
}

/* A physical allocation of the program's: its own or one it imported. */
static int programs(const struct tc_phys *p)
{
    return p && (p->owner == TC_OWNER_USER || p->owner == TC_OWNER_IMPORTED);
}

/* ... whose handle it has not released (the driver's handle is gone then,
 * though mappings keep the memory). */
static int live_handle(const struct tc_phys *p)
{
    return programs(p) && p->refs > 0;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct tc_phys *p;
    uint64_t imported = 0;
    CUresult rc = CUDA_SUCCESS;

    TCGPU_GATE_ENTER("cuMemRelease");
    reg_lock();
    p = reg_phys_find(handle);
    if (!p && !reg_phys_is_ours(handle)) {
        rc = TCGPU_REAL(cuMemRelease)(handle);
    } else if (!programs(p) || p->refs == 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        p->refs--;
        drop_if_unused(p, &imported);
    }
    reg_unlock();
    if (imported)
        ipcmem_import_forget(imported);
    sweep_orphans();
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
    } else if (!live_handle(p)) {
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
    uint64_t imported = 0;
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
                drop_if_unused(p, &imported);
                if (imported) {             /* one at a time: the lock is dropped */
                    reg_unlock();
                    ipcmem_import_forget(imported);
                    imported = 0;
                    reg_lock();
                    next = reg_map_first();
                }
            }
        }
        reg_hints_forget(ptr, size);
    }
    reg_unlock();
    sweep_orphans();
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
    if (!m || !programs(m->phys)) {
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
    return live_handle(p) ? p->real : 0;
}

static const char exported_note[] = "memory exported as a shareable handle cannot be checkpointed";

/*
 * NCCL's cuMem path and PyTorch's expandable segments shared with another
 * process. A POSIX descriptor of the program's own allocation is carried
 * (ipcmem.h): the driver checks the export (it refuses an allocation made
 * without that handle type), and the program gets our descriptor instead
 * of its. Other handle types, TCGPU_IPC=0, and handles of the driver's go
 * to the driver, noted: another process then maps memory a suspend would
 * release under it.
 */
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    CUmemGenericAllocationHandle real;
    struct tc_phys *p;
    uint64_t id = 0;
    size_t size = 0;
    int carried, fd = -1;
    CUresult rc;

    TCGPU_GATE_ENTER("cuMemExportToShareableHandle");
    reg_lock();
    p = reg_phys_find(handle);
    real = real_handle(handle);
    carried = p && p->owner == TC_OWNER_USER && handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
              settings_get()->ipc > 0;
    if (p && p->owner == TC_OWNER_IMPORTED) {
        rc = CUDA_ERROR_NOT_SUPPORTED;
        log_err("cuMemExportToShareableHandle: memory imported from another process is not exported "
                "again under tcgpu (export it from the process that made it)");
    } else if (!real) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (carried) {
        /* the driver's answer for this allocation, and its descriptor unused */
        rc = TCGPU_REAL(cuMemExportToShareableHandle)(&fd, real, handleType, flags);
        id = p->id;
        size = p->size;
    } else {
        rc = TCGPU_REAL(cuMemExportToShareableHandle)(shareableHandle, real, handleType, flags);
    }
    reg_unlock();
    if (carried && rc == CUDA_SUCCESS) {
        close(fd);
        rc = shareableHandle ? ipcmem_export_phys(id, size, (int *)shareableHandle)
                             : CUDA_ERROR_INVALID_VALUE;
        if (rc == CUDA_SUCCESS) {
            reg_lock();
            if ((p = reg_phys_find(id)))
                p->exported = 1;
            reg_unlock();
        }
    } else if (rc == CUDA_SUCCESS) {
        tcgpu_note_unsupported("cuMemExportToShareableHandle", exported_note);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

/* A descriptor of ours is imported through its exporter (ipcmem.h); any
 * other goes to the driver, noted. */
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    CUresult rc = CUDA_ERROR_NOT_FOUND;

    TCGPU_GATE_ENTER("cuMemImportFromShareableHandle");
    if (shHandleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        rc = ipcmem_import_phys((int)(intptr_t)osHandle, handle);
    if (rc == CUDA_ERROR_NOT_FOUND) {
        rc = TCGPU_REAL(cuMemImportFromShareableHandle)(handle, osHandle, shHandleType);
        if (rc == CUDA_SUCCESS)
            tcgpu_note_unsupported("cuMemImportFromShareableHandle",
                                   "memory imported from a shareable handle cannot be checkpointed");
    }
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
