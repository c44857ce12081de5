/*
 * registry.h - the device memory a process holds, in a form that can be
 * taken off the GPU and put back at the same addresses.
 *
 * Everything the snapshot engine releases is a *physical allocation* (a VMM
 * handle from cuMemCreate) mapped into *reserved device VA*:
 *
 *   - memory the program allocated with cuMemAlloc and friends is served by
 *     devmem.c from segments it creates this way (owner TC_OWNER_DEVMEM);
 *   - programs that use the VMM API themselves (PyTorch's expandable
 *     segments) have their handles and mappings recorded as they make them
 *     (owner TC_OWNER_USER).
 *
 * Suspend unmaps every mapping and releases every physical allocation; the
 * VA stays reserved. Resume creates physical allocations with the same
 * properties and maps them at the same addresses. The program never sees a
 * real VMM handle: it gets our handle (struct tc_phys id), which stays valid
 * across suspend and resume while the real one behind it changes.
 *
 * What must be saved is a list of *regions*: the live blocks of devmem
 * segments, and whole user mappings, minus ranges the framework marked as not
 * worth saving (tcgpu_hint_skip).
 *
 * Locking: one mutex (reg_lock/reg_unlock) guards everything here. The API
 * wrappers take it for short updates; the operations take it while the API
 * gate is closed, so the structure is stable under them.
 */
#ifndef TCGPU_REGISTRY_H
#define TCGPU_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#include "tcgpu.h"

/*
 * TC_OWNER_IMPORTED: the program imported it from another process's
 * allocation exported through tcgpu (cuMemImportFromShareableHandle of a
 * descriptor tcgpu made, ipcmem.h). The exporter holds and saves it; a
 * suspend here only unmaps and releases it, and the resume imports it again
 * and maps it where it was (ipcmem.c), so the snapshot engine leaves it be.
 */
enum tc_owner { TC_OWNER_DEVMEM = 1, TC_OWNER_USER = 2, TC_OWNER_IMPORTED = 3 };

#define TC_MAX_ACCESS 8           /* devices one mapping can be made accessible to */

struct tc_phys {
    uint64_t id;                  /* the handle the program sees (TC_OWNER_USER) */
    CUmemGenericAllocationHandle real;   /* 0 while suspended */
    size_t size;
    CUmemAllocationProp prop;
    unsigned long long flags;
    enum tc_owner owner;
    int refs;                     /* program's references (create, retain) */
    int nmaps;                    /* mappings of it */
    int exported;                 /* TC_OWNER_USER exported through tcgpu (ipcmem.h): kept,
                                   * with no reference and no mapping left, while imported */
    struct tc_phys *next;
};

struct tc_map {
    CUdeviceptr va;
    size_t size;
    size_t offset;                /* into phys */
    struct tc_phys *phys;
    CUmemAccessDesc access[TC_MAX_ACCESS];
    int naccess;
    int unmapped;                 /* taken down by a suspend, not yet back */
    struct tc_map *next;
};

/* A tracked allocation as the program sees it (cuMemAlloc & co). */
enum tc_alloc_kind {
    TC_ALLOC_DEVICE = 1,          /* cuMemAlloc */
    TC_ALLOC_PITCH,               /* cuMemAllocPitch */
    TC_ALLOC_ASYNC,               /* cuMemAllocAsync / FromPoolAsync */
    TC_ALLOC_VMM,                 /* a user mapping */
    TC_ALLOC_GRAPH,               /* cuMemAllocAsync inside stream capture: a graph's (graphmem.h) */
};

/* A range of device memory whose contents a snapshot saves. */
struct tc_region {
    CUdeviceptr va;
    size_t size;
    enum tc_alloc_kind kind;
    enum tcgpu_dtype dtype;
    uint64_t alloc_id;
    const char *site;             /* call site (TCGPU_TRACE_ALLOC), or NULL; owned by the registry */
};

void reg_lock(void);
void reg_unlock(void);
/* reg_lock when it is free now: 1 (locked) or 0. For status, which must not
 * wait for an operation that holds the lock over many driver calls. */
int reg_trylock(void);

/* --- physical allocations and mappings (caller holds the lock) --- */

/* Records a new physical allocation; returns it (refs = 1) or NULL (ENOMEM). */
struct tc_phys *reg_phys_add(CUmemGenericAllocationHandle real, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags,
                             enum tc_owner owner);
/* The physical allocation with the program-visible handle `id`, or NULL. */
struct tc_phys *reg_phys_find(uint64_t id);
/* Whether `handle` has the form of ours (live or not). Any other handle is
 * the driver's, given to the program by a call tcgpu does not track (an
 * import from a shareable handle, a multicast object): it passes through. */
int reg_phys_is_ours(uint64_t handle);
/* Forgets `p` (no mappings, no references left). Does not call the driver. */
void reg_phys_remove(struct tc_phys *p);

/* Records a mapping; returns it or NULL (ENOMEM). */
struct tc_map *reg_map_add(CUdeviceptr va, size_t size, size_t offset, struct tc_phys *p);
/* The mapping that starts exactly at va with this size, or NULL. */
struct tc_map *reg_map_find(CUdeviceptr va, size_t size);
/* The mapping that contains va, or NULL. */
struct tc_map *reg_map_containing(CUdeviceptr va);
void reg_map_remove(struct tc_map *m);
/* Remembers what cuMemSetAccess granted over [va, va+size) for each mapping inside. */
void reg_map_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);

/* Iteration, for the snapshot engine (lock held). */
struct tc_phys *reg_phys_first(void);
struct tc_map *reg_map_first(void);

/* --- managed memory (cuMemAllocManaged) ---
 * The driver owns its pages and moves them between host and device, so a
 * suspend cannot release it; it is saved in checkpoints and images like any
 * other allocation and put back on refill (caller holds the lock). */
struct tc_managed {
    CUdeviceptr va;
    size_t size;
    int device;
    CUcontext ctx;                /* current at the allocation: it dies with it */
    struct tc_managed *next;
};
int reg_managed_add(CUdeviceptr va, size_t size, int device, CUcontext ctx);
/* Forgets the managed allocation at va; returns its size, 0 if there was none. */
size_t reg_managed_remove(CUdeviceptr va);
/* Forgets every managed allocation of a destroyed context (the driver freed them). */
void reg_managed_forget_ctx(CUcontext ctx);
struct tc_managed *reg_managed_first(void);

/* --- hints (tcgpu_hint_skip / tcgpu_hint_dtype) --- */
int reg_hint_skip(CUdeviceptr va, size_t len, int skip);
int reg_hint_dtype(CUdeviceptr va, size_t len, enum tcgpu_dtype dtype);
/* Drops hints inside [va, va+len) (the memory was freed). */
void reg_hints_forget(CUdeviceptr va, size_t len);
/* The dtype hinted for the range that contains va, or TCGPU_DTYPE_UNKNOWN. */
enum tcgpu_dtype reg_hint_dtype_at(CUdeviceptr va);

/*
 * Splits [va, va+size) into the parts not marked "skip": calls fn for each
 * part to save. Returns the first non-zero value fn returns, else 0.
 */
int reg_for_each_unskipped(CUdeviceptr va, size_t size,
                           int (*fn)(CUdeviceptr va, size_t size, void *arg), void *arg);

/* --- counters for status --- */
struct reg_counts {
    uint64_t phys_bytes;          /* physical device memory held now (not imported) */
    uint64_t tracked_bytes;       /* bytes the program allocated (devmem + user maps) */
    uint32_t allocations;
    uint32_t phys, maps;
};
void reg_counts(struct reg_counts *c);

#endif
