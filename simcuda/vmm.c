/*
 * vmm.c - the virtual memory management API.
 *
 * A physical allocation (cuMemCreate) is backing memory charged against the
 * device capacity; a reservation is a piece of the device address space; a
 * mapping puts part of a physical allocation at an address of a reservation
 * and is a translation range with no access until cuMemSetAccess, like on a
 * GPU. The physical memory (and its capacity) goes when its handle has been
 * released and no mapping is left.
 */
#include "sim.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct sim_phys {
    uint32_t magic;
    int dev;
    uint64_t size;
    unsigned char *backing;
    int handle_refs;     /* cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease */
    int map_refs;        /* live mappings */
    uint64_t id;         /* CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID of its mappings */
    CUmemAllocationProp prop;
    int fd;              /* shareable (POSIX file descriptor): its memfd, else -1 */
    int share;           /* ... and its machine-wide entry (share.c) once exported or
                          * imported, else -1: until then its bytes are its process's */
};

/*
 * A POSIX file-descriptor allocation is a memfd: the allocation's bytes,
 * then one page that says what they are (struct fd_header), so that an
 * importer learns size, device and properties from the descriptor alone,
 * whoever holds the allocation then (the machine-wide entry may be gone
 * while the descriptor travelled). The size is sealed; the header is
 * checked against the descriptor's size and this machine on import. The
 * importer could write the header through its own descriptor, as it can
 * write the bytes: only its own imports would then fail.
 */
#define FD_HEADER_LEN 4096ull
#define FD_MAGIC "simVMMf1"
struct fd_header {
    char magic[8];
    char machine[NAME_MAX + 1];   /* SIMCUDA_SHM of the machine it was made on, whole */
    int32_t phys;            /* physical device */
    int32_t _pad;
    uint64_t size;
    CUmemAllocationProp prop;   /* location.id: the creator's ordinal (replaced on import) */
};
_Static_assert(sizeof(struct fd_header) <= FD_HEADER_LEN, "header fits its page");

static const unsigned long long not_on_linux = CU_MEM_HANDLE_TYPE_WIN32 | CU_MEM_HANDLE_TYPE_WIN32_KMT |
                                               CU_MEM_HANDLE_TYPE_FABRIC;

struct resv {
    uint64_t va, size;
};

/* Guards reservations and phys reference counts. Lock order: vmm -> map. */
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct resv *resvs;
static size_t nresv, resv_cap;

static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id < 0 || prop->location.id >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    CUresult r;

    SIM_BEGIN();
    if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = check_prop(prop)))
        return r;
    *granularity = SIM_GRANULARITY;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemGetAllocationGranularity);

/* Free the physical memory once nothing refers to it (vmm_lock held). */
static void phys_put(struct sim_phys *p)
{
    if (p->handle_refs || p->map_refs)
        return;
    sim_handle_del(p);
    sim_backing_free(p->backing, p->size);
    if (p->share >= 0)
        sim_share_put(p->share);    /* the memory goes with its last holder */
    else
        sim_capacity_release(p->dev, p->size);
    if (p->fd >= 0) {
        /* never exported: nobody else holds the file, the device may keep it */
        sim_keep_release(p->fd, sim_device_phys(p->dev), p->size, p->share < 0);
        close(p->fd);
    }
    p->magic = 0;
    free(p);
}

/*
 * A new file for a shareable allocation of file_len bytes: a memfd whose
 * size is sealed, or, where the device keeps freed memory (keep.c), a file
 * that can be kept (a tmpfs file cannot be sealed; an importer that cuts it
 * then breaks its own mappings and those of the other holders).
 */
static int fd_new(uint64_t file_len)
{
    int fd = sim_keep_enabled() ? sim_keep_create(file_len) : -1;

    if (fd >= 0)
        return fd;
    if ((fd = memfd_create("simcuda-vmm", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0)
        return -1;
    if (ftruncate(fd, (off_t)file_len) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * The file of a shareable allocation, mapped: one the device kept, if it
 * has one of the size, else a new one. Its machine-wide entry comes at the
 * first cuMemExportToShareableHandle: until a descriptor leaves the process
 * the bytes are charged to it, as any allocation's are, and the machine's
 * table of shared objects holds only what is shared.
 */
static CUresult fd_create(struct sim_phys *p, uint64_t size, const CUmemAllocationProp *prop)
{
    struct fd_header h = { .phys = sim_device_phys(prop->location.id), .size = size, .prop = *prop };
    int fd = sim_keep_take(h.phys, size, size + FD_HEADER_LEN);
    bool kept = fd >= 0;

    if (!kept && (fd = fd_new(size + FD_HEADER_LEN)) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(h.magic, FD_MAGIC, sizeof(h.magic));
    snprintf(h.machine, sizeof(h.machine), "%s", sim_shm_name());
    if (pwrite(fd, &h, sizeof(h), (off_t)size) != (ssize_t)sizeof(h) ||
        !(p->backing = kept ? sim_share_map_warm(fd, size) : sim_share_map(fd, size)))
        goto err;
    if (kept)
        memset(p->backing, 0, size);    /* a GPU scrubs what another process freed */
    p->fd = fd;
    return CUDA_SUCCESS;
err:
    sim_keep_release(fd, h.phys, size, false);     /* a claimed file's name goes */
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    struct sim_phys *p;
    CUresult r;

    SIM_BEGIN();
    if (!handle || flags || !size || size % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = check_prop(prop)))
        return r;
    if (prop->requestedHandleTypes & not_on_linux)
        return CUDA_ERROR_NOT_SUPPORTED;    /* Windows handles; fabric needs IMEX */
    if (prop->requestedHandleTypes & ~(unsigned long long)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    if (size > sim_device_capacity(prop->location.id))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!(p = calloc(1, sizeof(*p))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->fd = -1;
    p->share = -1;
    if ((r = sim_capacity_charge(prop->location.id, size))) {
        free(p);
        return r;
    }
    if (prop->requestedHandleTypes)
        r = fd_create(p, size, prop);
    else if (!(p->backing = sim_backing_alloc(size)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r) {
        sim_capacity_release(prop->location.id, size);
        free(p);
        return r;
    }
    p->magic = SIM_MAGIC_PHYS;
    p->dev = prop->location.id;
    p->size = size;
    p->handle_refs = 1;
    p->id = sim_next_buffer_id();
    p->prop = *prop;
    sim_handle_add(p);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemCreate);
SIM_PARTIAL(cuMemCreate, "Windows and fabric handle types: CUDA_ERROR_NOT_SUPPORTED, as on Linux without IMEX");

static struct sim_phys *phys_of(CUmemGenericAllocationHandle h)
{
    struct sim_phys *p = (struct sim_phys *)(uintptr_t)h;

    return sim_handle_ok(p, SIM_MAGIC_PHYS) ? p : NULL;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct sim_phys *p;
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    pthread_mutex_lock(&vmm_lock);
    if (!(p = phys_of(handle)) || p->handle_refs <= 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        p->handle_refs--;
        phys_put(p);
    }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}
SIM_EXPORT(cuMemRelease);

static bool is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    uint64_t va = 0;
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    if (!ptr || !size || size % SIM_GRANULARITY || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!alignment)
        alignment = SIM_GRANULARITY;
    if (!is_pow2(alignment) || alignment % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    if (nresv == resv_cap) {
        size_t ncap = resv_cap ? resv_cap * 2 : 16;
        struct resv *n = realloc(resvs, ncap * sizeof(*n));

        if (!n) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        resvs = n;
        resv_cap = ncap;
    }
    /* The requested address is a hint: honoured when free, else another is chosen. */
    if (addr && addr % alignment == 0)
        va = sim_va_alloc(size, alignment, addr);
    if (!va)
        va = sim_va_alloc(size, alignment, 0);
    if (!va) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    resvs[nresv++] = (struct resv){ va, size };
    *ptr = va;
out:
    pthread_mutex_unlock(&vmm_lock);
    return r;
}
SIM_EXPORT(cuMemAddressReserve);

/* The reservation containing [va, va+size), or NULL (vmm_lock held). */
static struct resv *resv_find(uint64_t va, uint64_t size)
{
    for (size_t i = 0; i < nresv; i++)
        if (va >= resvs[i].va && size <= resvs[i].size && va - resvs[i].va <= resvs[i].size - size)
            return &resvs[i];
    return NULL;
}

static bool any_mapping(uint64_t va, uint64_t size)
{
    bool found;

    sim_map_rdlock();
    found = sim_map_overlaps(va, size);
    sim_map_unlock();
    return found;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct resv *rv;
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    pthread_mutex_lock(&vmm_lock);
    rv = resv_find(ptr, size);
    if (!rv || rv->va != ptr || rv->size != size || any_mapping(ptr, size)) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        sim_va_free(ptr);
        *rv = resvs[--nresv];
    }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}
SIM_EXPORT(cuMemAddressFree);

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    struct sim_phys *p;
    struct sim_range *m;
    struct resv *rv;
    CUresult r = CUDA_ERROR_INVALID_VALUE;

    SIM_BEGIN();
    if (flags || !size || size % SIM_GRANULARITY || offset % SIM_GRANULARITY || ptr % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(m = calloc(1, sizeof(*m))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&vmm_lock);
    if (!(p = phys_of(handle)) || p->handle_refs <= 0)
        goto out;
    if (offset > p->size || size > p->size - offset || !(rv = resv_find(ptr, size)))
        goto out;
    m->resv_va = rv->va;
    m->resv_size = rv->size;
    m->block_id = p->id;
    m->handle_types = p->prop.requestedHandleTypes;
    m->rdma = p->prop.allocFlags.gpuDirectRDMACapable;
    m->va = ptr;
    m->size = size;
    m->host = p->backing + offset;
    m->kind = SIM_R_VMM;
    m->ctx = NULL;
    m->dev = p->dev;
    m->id = sim_next_buffer_id();
    m->phys = p;
    m->phys_off = offset;
    sim_map_wrlock();
    if (sim_map_overlaps(ptr, size)) {
        sim_map_unlock();
        goto out;           /* already mapped */
    }
    if (sim_map_insert(m)) {
        sim_map_unlock();
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    sim_map_unlock();
    p->map_refs++;
    m = NULL;
    r = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&vmm_lock);
    free(m);
    return r;
}
SIM_EXPORT(cuMemMap);

/* Every range in [va, va+size) must be a whole VMM mapping; they are
 * collected into *out (map lock held). Returns the count or -1. */
static long vmm_ranges(uint64_t va, uint64_t size, struct sim_range ***out)
{
    long n = 0;
    struct sim_range **v = NULL;

    for (int pass = 0; pass < 2; pass++) {
        uint64_t a = va;
        long k = 0;
        struct sim_range *r;

        while ((r = sim_map_next(a)) && r->va < va + size) {
            if (r->kind != SIM_R_VMM || r->va < va || r->va + r->size > va + size) {
                free(v);
                return -1;
            }
            if (pass)
                v[k] = r;
            k++;
            a = r->va + r->size;
        }
        if (!pass) {
            n = k;
            if (!n || !(v = calloc((size_t)n, sizeof(*v))))
                return n ? -1 : 0;
        }
    }
    *out = v;
    return n;
}

/* A mapping out of the map: its physical memory loses a mapping. */
static void mapping_release(struct sim_range *r)
{
    struct sim_phys *p = r->phys;

    p->map_refs--;
    free(r);
    phys_put(p);
}

/* The last unpin of a mapping unmapped while device work used it. */
static void mapping_release_late(struct sim_range *r)
{
    pthread_mutex_lock(&vmm_lock);
    mapping_release(r);
    pthread_mutex_unlock(&vmm_lock);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct sim_range **v = NULL;
    long n;
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    if (!size || size % SIM_GRANULARITY || ptr % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    /* Work queued after this faults, as on a GPU. Copies and kernels running
     * now keep the views they have: a mapping they pinned goes (and its
     * physical memory with it, if released) when they are done with it. */
    sim_map_wrlock();
    n = vmm_ranges(ptr, size, &v);
    if (n <= 0 || !sim_map_covered(ptr, size)) {
        r = CUDA_ERROR_INVALID_VALUE;
        n = 0;
    }
    for (long i = 0; i < n; i++)
        sim_map_remove(v[i]);
    sim_map_unlock();
    for (long i = 0; i < n; i++)
        if (!sim_range_defer(v[i], mapping_release_late))
            mapping_release(v[i]);
    pthread_mutex_unlock(&vmm_lock);
    free(v);
    return r;
}
SIM_EXPORT(cuMemUnmap);

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    struct sim_range **v = NULL;
    unsigned flags;
    long n;

    SIM_BEGIN();
    if (!desc || !count || !size)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].location.id < 0 || desc[i].location.id >= sim_device_count())
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    sim_map_wrlock();
    n = vmm_ranges(ptr, size, &v);
    if (n <= 0 || !sim_map_covered(ptr, size)) {
        sim_map_unlock();
        free(v);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (long i = 0; i < n; i++) {
        /* Access is per device, and only the devices listed change: the
         * mapping's own device decides whether copies and kernels there may
         * touch it, the mask whether other devices may. */
        flags = v[i]->access_flags;
        for (size_t j = 0; j < count; j++) {
            if (desc[j].location.id == v[i]->dev)
                flags = desc[j].flags;
            if (desc[j].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
                v[i]->access_mask |= 1u << desc[j].location.id;
            else
                v[i]->access_mask &= ~(1u << desc[j].location.id);
        }
        v[i]->access_flags = flags;
        v[i]->access = flags != CU_MEM_ACCESS_FLAGS_PROT_NONE;
    }
    sim_map_unlock();
    free(v);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemSetAccess);

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    struct sim_range *r;
    CUresult res = CUDA_SUCCESS;

    SIM_BEGIN();
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (location->id < 0 || location->id >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    sim_map_rdlock();
    r = sim_map_find(ptr);
    if (!r || r->kind != SIM_R_VMM)
        res = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = location->id == r->dev ? r->access_flags : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    sim_map_unlock();
    return res;
}
SIM_EXPORT(cuMemGetAccess);

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    struct sim_range *r;
    CUresult res = CUDA_SUCCESS;

    SIM_BEGIN();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    sim_map_rdlock();
    r = sim_map_find((uint64_t)(uintptr_t)addr);
    if (!r || r->kind != SIM_R_VMM) {
        res = CUDA_ERROR_INVALID_VALUE;
    } else {
        r->phys->handle_refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)r->phys;
    }
    sim_map_unlock();
    pthread_mutex_unlock(&vmm_lock);
    return res;
}
SIM_EXPORT(cuMemRetainAllocationHandle);

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    struct sim_phys *p;
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    if (!(p = phys_of(handle)) || p->handle_refs <= 0)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *prop = p->prop;
    pthread_mutex_unlock(&vmm_lock);
    return r;
}
SIM_EXPORT(cuMemGetAllocationPropertiesFromHandle);

/*
 * Shareable handles. On Linux the driver exports POSIX file descriptors
 * (the caller owns the new descriptor) of allocations created with that
 * handle type; Windows handles are not to be had there, and fabric handles
 * need IMEX channels, which a machine without NVLink fabric does not have:
 * CUDA_ERROR_NOT_SUPPORTED. A handle created without the type requested:
 * CUDA_ERROR_INVALID_VALUE.
 */
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags)
{
    struct sim_phys *p;
    CUresult r = CUDA_SUCCESS;
    int fd;

    SIM_BEGIN();
    if (!shareableHandle || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType & not_on_linux)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    if (!(p = phys_of(handle)) || p->handle_refs <= 0 || p->fd < 0) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (p->share < 0 &&
               (r = sim_share_new(p->fd, p->dev, p->size, false, NULL, false, &p->share))) {
        p->share = -1;              /* the machine's table is full: not exported */
    } else if ((fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        r = errno == EMFILE ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
    } else {
        *(int *)shareableHandle = fd;
    }
    pthread_mutex_unlock(&vmm_lock);
    return r;
}
SIM_EXPORT(cuMemExportToShareableHandle);
SIM_PARTIAL(cuMemExportToShareableHandle, "POSIX file descriptors only (Windows, fabric: CUDA_ERROR_NOT_SUPPORTED)");

/* The header of a descriptor that claims to be a shareable allocation of
 * this machine: CUDA_SUCCESS, INVALID_VALUE (not one), NOT_SUPPORTED (of
 * another machine, or a device this process does not see). */
static CUresult fd_read_header(int fd, struct fd_header *h, int *ordinal)
{
    struct stat st;

    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < FD_HEADER_LEN)
        return CUDA_ERROR_INVALID_VALUE;
    if (pread(fd, h, sizeof(*h), st.st_size - (off_t)FD_HEADER_LEN) != (ssize_t)sizeof(*h) ||
        memcmp(h->magic, FD_MAGIC, sizeof(h->magic)) || h->size + FD_HEADER_LEN != (uint64_t)st.st_size ||
        !h->size || h->size % SIM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    h->machine[sizeof(h->machine) - 1] = 0;
    if (strcmp(h->machine, sim_shm_name()) || h->phys < 0 || h->phys >= SIM_MAX_DEVICES ||
        (*ordinal = sim_device_ordinal_of_phys(h->phys)) < 0)
        return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

/*
 * The descriptor stays the caller's; the handle keeps a descriptor of its
 * own. Each import is a new handle (the driver does not promise the same
 * one for the same descriptor), held by this process until released and
 * unmapped.
 */
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
    struct fd_header h;
    struct sim_phys *p;
    int fd = (int)(intptr_t)osHandle, ord, own;
    CUresult r;

    SIM_BEGIN();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType & not_on_linux)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = fd_read_header(fd, &h, &ord)))
        return r;
    if (!(p = calloc(1, sizeof(*p))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((own = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        free(p);
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
    if (!(p->backing = sim_share_map(own, h.size))) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto err;
    }
    if ((r = sim_share_find(own, ord, h.size, &p->share))) {
        munmap(p->backing, h.size);
        goto err;
    }
    p->magic = SIM_MAGIC_PHYS;
    p->fd = own;
    p->dev = ord;
    p->size = h.size;
    p->handle_refs = 1;
    p->id = sim_next_buffer_id();
    p->prop = h.prop;
    p->prop.location.id = ord;
    sim_handle_add(p);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    return CUDA_SUCCESS;
err:
    close(own);
    free(p);
    return r;
}
SIM_EXPORT(cuMemImportFromShareableHandle);
SIM_PARTIAL(cuMemImportFromShareableHandle, "POSIX file descriptors only (Windows, fabric: CUDA_ERROR_NOT_SUPPORTED)");
