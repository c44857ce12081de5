/*
 * devmem.c - address-stable device memory; see devmem.h.
 *
 * Segments are kept in an array sorted by address (lookups are a binary
 * search); each segment's blocks, used and free, tile it in offset order.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callsite.h"
#include "daemon_client.h"
#include "devmem.h"
#include "driver/driver.h"
#include "graphmem.h"
#include "objects.h"
#include "settings.h"
#include "common/log.h"

#define ARENA_SIZE (2u << 20)

struct block {
    size_t off, len;              /* the span it tiles in the segment (DEVMEM_ALIGN multiple) */
    size_t size;                  /* what the program asked for, exactly */
    uint64_t id;                  /* 0 when free */
    enum tc_alloc_kind kind;
    CUcontext ctx;                /* current at the allocation: it dies with it */
    CUmemoryPool pool;            /* TC_ALLOC_ASYNC: the pool it was taken from */
    enum devmem_graph_state gstate;   /* TC_ALLOC_GRAPH */
    int held;                     /* freed during a capture, not reusable yet (id 0) */
    char *site;
};

struct segment {
    CUdeviceptr va;
    size_t size;
    int device;
    int dedicated;                /* one allocation, released when freed */
    struct tc_phys *phys;
    struct tc_map *map;
    struct block *blocks;
    size_t nblocks, cap;
    size_t used;                  /* bytes in used blocks */
};

static struct segment **segs;
static size_t nsegs, segs_cap;
static uint64_t next_alloc_id = 1;
static uint64_t live_bytes;
static uint32_t live_count;
static size_t nheld;              /* blocks held back by frees during captures */
static unsigned peers_of[TC_MAX_ACCESS];   /* devices given peer access to a device's memory */

/* What each pool has handed out through us, for its USED/RESERVED attributes. */
struct pool_use {
    CUmemoryPool pool;
    struct devmem_pool_use u;
};
static struct pool_use *pool_uses;
static size_t npool_uses, pool_uses_cap;

static void drain_pending_frees(void);

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

/* --- pool accounting (lock held) ------------------------------------------ */

static struct pool_use *pool_use_of(CUmemoryPool pool, int create)
{
    for (size_t i = 0; i < npool_uses; i++)
        if (pool_uses[i].pool == pool)
            return &pool_uses[i];
    if (!create)
        return NULL;
    if (npool_uses == pool_uses_cap) {
        size_t cap = pool_uses_cap ? pool_uses_cap * 2 : 8;
        struct pool_use *n = realloc(pool_uses, cap * sizeof(*n));
        if (!n)
            return NULL;
        pool_uses = n;
        pool_uses_cap = cap;
    }
    pool_uses[npool_uses] = (struct pool_use){ .pool = pool };
    return &pool_uses[npool_uses++];
}

static void count_up(uint64_t *cur, uint64_t *high, uint64_t n)
{
    *cur += n;
    if (*cur > *high)
        *high = *cur;
}

static void count_down(uint64_t *cur, uint64_t n)
{
    *cur -= n <= *cur ? n : *cur;
}

/* Block b went to (delta > 0) or came back from its pool: used counts the
 * bytes asked for, as the driver does; reserved the span it takes. A record
 * that cannot be made only costs the attribute's accuracy. */
static void pool_account(const struct block *b, int delta)
{
    struct pool_use *p = b->pool ? pool_use_of(b->pool, delta > 0) : NULL;

    if (!p)
        return;
    if (delta > 0) {
        count_up(&p->u.used, &p->u.used_high, b->size);
        count_up(&p->u.reserved, &p->u.reserved_high, b->len);
    } else {
        count_down(&p->u.used, b->size);
        count_down(&p->u.reserved, b->len);
    }
}

/* --- segment array ------------------------------------------------------- */

static size_t seg_index_at_or_before(CUdeviceptr va)
{
    size_t lo = 0, hi = nsegs;          /* first segment with va > target */

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (segs[mid]->va <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;                          /* segs[lo-1] is the candidate */
}

static struct segment *seg_containing(CUdeviceptr va)
{
    size_t i = seg_index_at_or_before(va);

    if (i == 0)
        return NULL;
    struct segment *s = segs[i - 1];
    return va - s->va < s->size ? s : NULL;
}

static int seg_insert(struct segment *s)
{
    if (nsegs == segs_cap) {
        size_t cap = segs_cap ? segs_cap * 2 : 16;
        struct segment **n = realloc(segs, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        segs = n;
        segs_cap = cap;
    }
    size_t i = seg_index_at_or_before(s->va);
    memmove(&segs[i + 1], &segs[i], (nsegs - i) * sizeof(*segs));
    segs[i] = s;
    nsegs++;
    return 0;
}

static void seg_erase(struct segment *s)
{
    for (size_t i = 0; i < nsegs; i++) {
        if (segs[i] == s) {
            memmove(&segs[i], &segs[i + 1], (nsegs - i - 1) * sizeof(*segs));
            nsegs--;
            return;
        }
    }
}

/* --- creating and releasing segments (driver calls) ---------------------- */

static CUresult current_device(int *device)
{
    CUdevice dev;
    CUresult rc = TCGPU_REAL(cuCtxGetDevice)(&dev);

    if (rc == CUDA_SUCCESS)
        *device = (int)dev;
    return rc;
}

/* cuMemAlloc memory is GPUDirect RDMA capable where the platform allows it
 * (NCCL relies on it); VMM memory only if created so, where the device
 * supports the flag. */
static int rdma_capable(int device)
{
    int vmm = 0, rdma = 0;

    return TCGPU_REAL(cuDeviceGetAttribute)(&vmm, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
                                            device) == CUDA_SUCCESS &&
           TCGPU_REAL(cuDeviceGetAttribute)(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
                                            device) == CUDA_SUCCESS && vmm && rdma;
}

/* TCGPU_IPC (on unless 0) and the device has POSIX file-descriptor handles: segments
 * another process can map (lib/core/ipcmem.h, cuIpcGetMemHandle). A
 * suspend re-creates them with the same properties (snapshot.c). */
static int exportable(int device)
{
    int fd = 0;

    return settings_get()->ipc > 0 &&
           TCGPU_REAL(cuDeviceGetAttribute)(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                            device) == CUDA_SUCCESS && fd;
}

static void device_prop(CUmemAllocationProp *prop, int device)
{
    memset(prop, 0, sizeof(*prop));
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = device;
    prop->allocFlags.gpuDirectRDMACapable = (unsigned char)rdma_capable(device);
    if (exportable(device))
        prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static CUresult granularity(const CUmemAllocationProp *prop, size_t *gran)
{
    CUresult rc = TCGPU_REAL(cuMemGetAllocationGranularity)(gran, prop,
                                                            CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    if (rc == CUDA_SUCCESS && *gran == 0)
        rc = CUDA_ERROR_UNKNOWN;
    return rc;
}

/* Read/write access for the device, and for the devices peer access was
 * enabled for (lock held). Returns how many descriptors. */
static size_t segment_access(int device, CUmemAccessDesc *d)
{
    size_t n = 0;

    memset(d, 0, TC_MAX_ACCESS * sizeof(*d));
    d[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d[n].location.id = device;
    d[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int p = 0; device >= 0 && device < TC_MAX_ACCESS && p < TC_MAX_ACCESS && n < TC_MAX_ACCESS; p++)
        if (p != device && (peers_of[device] >> p & 1)) {
            d[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            d[n].location.id = p;
            d[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        }
    return n;
}

/*
 * Reserve, create, map, grant access: the four steps of a segment, undone in
 * reverse on failure so a failed allocation leaves nothing behind.
 */
static CUresult seg_create(size_t want, int dedicated, struct segment **out)
{
    CUmemAllocationProp prop;
    CUmemAccessDesc access[TC_MAX_ACCESS];
    size_t naccess;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    struct segment *s = NULL;
    size_t gran, size;
    int device;
    CUresult rc;

    if ((rc = current_device(&device)) != CUDA_SUCCESS)
        return rc;
    device_prop(&prop, device);
    if ((rc = granularity(&prop, &gran)) != CUDA_SUCCESS)
        return rc;
    size = round_up(want, gran);
    if ((rc = TCGPU_REAL(cuMemAddressReserve)(&va, size, gran, 0, 0)) != CUDA_SUCCESS)
        return rc;
    rc = TCGPU_REAL(cuMemCreate)(&h, size, &prop, 0);
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY && prop.requestedHandleTypes) {
        prop.requestedHandleTypes = 0;      /* not exportable, but memory all the same */
        rc = TCGPU_REAL(cuMemCreate)(&h, size, &prop, 0);
    }
    if (rc != CUDA_SUCCESS)
        goto err_va;
    if ((rc = TCGPU_REAL(cuMemMap)(va, size, 0, h, 0)) != CUDA_SUCCESS)
        goto err_handle;
    naccess = segment_access(device, access);
    if ((rc = TCGPU_REAL(cuMemSetAccess)(va, size, access, naccess)) != CUDA_SUCCESS)
        goto err_map;

    rc = CUDA_ERROR_OUT_OF_MEMORY;      /* host memory, from here on */
    s = calloc(1, sizeof(*s));
    if (!s)
        goto err_map;
    s->va = va;
    s->size = size;
    s->device = device;
    s->dedicated = dedicated;
    s->blocks = malloc(4 * sizeof(*s->blocks));
    if (!s->blocks)
        goto err_seg;
    s->cap = 4;
    s->nblocks = 1;
    s->blocks[0] = (struct block){ .off = 0, .len = size };
    s->phys = reg_phys_add(h, size, &prop, 0, TC_OWNER_DEVMEM);
    if (!s->phys)
        goto err_seg;
    s->map = reg_map_add(va, size, 0, s->phys);
    if (!s->map)
        goto err_phys;
    reg_map_set_access(va, size, access, naccess);
    if (seg_insert(s))
        goto err_regmap;
    *out = s;
    return CUDA_SUCCESS;

err_regmap:
    reg_map_remove(s->map);
err_phys:
    reg_phys_remove(s->phys);
err_seg:
    if (s)
        free(s->blocks);
    free(s);
err_map:
    TCGPU_REAL(cuMemUnmap)(va, size);
err_handle:
    TCGPU_REAL(cuMemRelease)(h);
err_va:
    TCGPU_REAL(cuMemAddressFree)(va, size);
    return rc;
}

static void seg_destroy(struct segment *s)
{
    /* While suspended the physical memory is already gone (phys->real == 0);
     * the VA reservation is all that is left to return. */
    if (s->phys->real) {
        TCGPU_REAL(cuMemUnmap)(s->va, s->size);
        TCGPU_REAL(cuMemRelease)(s->phys->real);
    }
    TCGPU_REAL(cuMemAddressFree)(s->va, s->size);
    reg_map_remove(s->map);
    reg_phys_remove(s->phys);
    seg_erase(s);
    for (size_t i = 0; i < s->nblocks; i++)
        free(s->blocks[i].site);
    free(s->blocks);
    free(s);
}

/* --- blocks within a segment --------------------------------------------- */

static int block_insert(struct segment *s, size_t i, struct block b)
{
    if (s->nblocks == s->cap) {
        size_t cap = s->cap * 2;
        struct block *n = realloc(s->blocks, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        s->blocks = n;
        s->cap = cap;
    }
    memmove(&s->blocks[i + 1], &s->blocks[i], (s->nblocks - i) * sizeof(*s->blocks));
    s->blocks[i] = b;
    s->nblocks++;
    return 0;
}

static void block_erase(struct segment *s, size_t i)
{
    memmove(&s->blocks[i], &s->blocks[i + 1], (s->nblocks - i - 1) * sizeof(*s->blocks));
    s->nblocks--;
}

/* Carves `len` bytes from the first free block that fits; returns its index or -1. */
static long block_take(struct segment *s, size_t len)
{
    for (size_t i = 0; i < s->nblocks; i++) {
        struct block *b = &s->blocks[i];
        if (b->id || b->held || b->len < len)
            continue;
        if (b->len > len) {
            struct block rest = { .off = b->off + len, .len = b->len - len };
            if (block_insert(s, i + 1, rest))
                return -1;
            s->blocks[i].len = len;
        }
        return (long)i;
    }
    return -1;
}

static bool block_free_span(const struct block *b)
{
    return !b->id && !b->held;
}

/* Free neighbours join the free block at i. */
static void block_merge(struct segment *s, size_t i)
{
    struct block *b = &s->blocks[i];

    if (i + 1 < s->nblocks && block_free_span(&s->blocks[i + 1])) {
        b->len += s->blocks[i + 1].len;
        block_erase(s, i + 1);
    }
    if (i > 0 && block_free_span(&s->blocks[i - 1])) {
        s->blocks[i - 1].len += s->blocks[i].len;
        block_erase(s, i);
    }
}

/* The program no longer has the block (its accounting goes now). */
static void block_forget(struct segment *s, size_t i)
{
    struct block *b = &s->blocks[i];

    live_bytes -= b->size;
    live_count--;
    if (b->kind == TC_ALLOC_ASYNC)
        pool_account(b, -1);
    b->ctx = NULL;
    b->pool = NULL;
    reg_hints_forget(s->va + b->off, b->len);
    free(b->site);
    b->site = NULL;
    b->id = 0;
}

static void block_release(struct segment *s, size_t i)
{
    s->used -= s->blocks[i].len;
    block_forget(s, i);
    block_merge(s, i);
}

/* Freed for the program, but the span stays taken until block_unhold. */
static void block_hold(struct segment *s, size_t i)
{
    block_forget(s, i);
    s->blocks[i].held = 1;
    nheld++;
}

static void block_unhold(struct segment *s, size_t i)
{
    s->blocks[i].held = 0;
    s->used -= s->blocks[i].len;
    nheld--;
    block_merge(s, i);
}

/* The live block at p (exact: starting at p; else containing p within the
 * program's size), or -1. */
static long block_find(const struct segment *s, CUdeviceptr p, int exact)
{
    size_t off = p - s->va;

    for (size_t i = 0; i < s->nblocks; i++) {
        const struct block *b = &s->blocks[i];
        if (off < b->off || off - b->off >= b->len)
            continue;                   /* blocks tile the segment: one matches */
        if (!b->id || (exact ? off != b->off : off - b->off >= b->size))
            return -1;
        return (long)i;
    }
    return -1;
}

/* --- the API ------------------------------------------------------------- */

/* Who an allocation belongs to: the context current at the call, and for a
 * stream-ordered one its pool. */
struct owner {
    CUcontext ctx;
    CUmemoryPool pool;
};

static void block_claim(struct segment *s, size_t i, size_t size, enum tc_alloc_kind kind,
                        const struct owner *who, CUdeviceptr *out)
{
    struct block *b = &s->blocks[i];

    b->id = next_alloc_id++;
    b->size = size;
    b->kind = kind;
    b->ctx = who->ctx;
    b->pool = who->pool;
    b->gstate = DEVMEM_GRAPH_IDLE;
    b->held = 0;
    b->site = callsite_capture(size);
    s->used += b->len;
    live_bytes += size;
    live_count++;
    if (kind == TC_ALLOC_ASYNC)
        pool_account(b, +1);
    *out = s->va + b->off;
}

static struct segment *arena_with_room(size_t len, int device)
{
    for (size_t i = 0; i < nsegs; i++) {
        struct segment *s = segs[i];
        if (!s->dedicated && s->device == device && s->size - s->used >= len)
            for (size_t j = 0; j < s->nblocks; j++)
                if (block_free_span(&s->blocks[j]) && s->blocks[j].len >= len)
                    return s;
    }
    return NULL;
}

static int devmem_owns(CUdeviceptr p)
{
    int owns;

    reg_lock();
    owns = seg_containing(p) != NULL;
    reg_unlock();
    return owns;
}

/* One try. *over: it failed because of the job's memory limit, not the device. */
static CUresult alloc_once(CUdeviceptr *out, size_t size, enum tc_alloc_kind kind,
                           CUmemoryPool pool, int *over)
{
    struct owner who = { .pool = kind == TC_ALLOC_ASYNC ? pool : NULL };
    struct segment *s;
    size_t len;
    long i;
    int device;
    CUresult rc;

    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = current_device(&device)) != CUDA_SUCCESS ||
        (rc = TCGPU_REAL(cuCtxGetCurrent)(&who.ctx)) != CUDA_SUCCESS)
        return rc;
    len = round_up(size, DEVMEM_ALIGN);
    if (len < size)
        return CUDA_ERROR_OUT_OF_MEMORY;

    reg_lock();
    drain_pending_frees();
    if (tcgpu_daemon_limit() && live_bytes + len > tcgpu_daemon_limit()) {
        *over = 1;                      /* the job's limit (tcgpud, TCGPU_GPU_MEM) */
        reg_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (len > ARENA_SIZE / 2) {
        rc = seg_create(len, 1, &s);
        if (rc == CUDA_SUCCESS) {
            /* The block tiles the whole rounded segment; the program's
             * size is what lookups report and snapshots save. */
            block_claim(s, 0, size, kind, &who, out);
        }
        reg_unlock();
        return rc;
    }
    s = arena_with_room(len, device);
    if (!s && (rc = seg_create(ARENA_SIZE, 0, &s)) != CUDA_SUCCESS) {
        reg_unlock();
        return rc;
    }
    i = block_take(s, len);
    if (i < 0) {
        reg_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    block_claim(s, (size_t)i, size, kind, &who, out);
    reg_unlock();
    return CUDA_SUCCESS;
}

/*
 * An allocation the device has no room for asks tcgpud before it fails:
 * tcgpud may make room by suspending other jobs, and the allocation is tried
 * again. Without tcgpud, or beyond the job's own limit (which is hard),
 * tcgpu_daemon_make_room() says no at once.
 */
#define MAKE_ROOM_TRIES 4

CUresult devmem_alloc(CUdeviceptr *out, size_t size, enum tc_alloc_kind kind, CUmemoryPool pool)
{
    for (int attempt = 0;; attempt++) {
        uint64_t used;
        uint32_t count;
        int over = 0, device;
        CUresult rc = alloc_once(out, size, kind, pool, &over);

        if (rc != CUDA_ERROR_OUT_OF_MEMORY || attempt == MAKE_ROOM_TRIES)
            return rc;
        devmem_usage(&used, &count);
        /* what the device needs for it: an arena for a small block */
        if (current_device(&device) != CUDA_SUCCESS ||
            !tcgpu_daemon_make_room(device, round_up(size, ARENA_SIZE), used, over))
            return rc;
    }
}

/* Releases s if empty, but keeps one empty arena per device cached for the
 * next small block while `keep_cache`. Lock held. */
static void release_if_unused(struct segment *s, int keep_cache)
{
    if (s->used)
        return;
    if (!s->dedicated && keep_cache) {
        for (size_t i = 0; i < nsegs; i++)
            if (segs[i] != s && !segs[i]->dedicated && segs[i]->device == s->device &&
                segs[i]->used == 0)
                goto release;
        return;                         /* the only empty arena: keep it */
    }
release:
    seg_destroy(s);
}

/* A free of graph memory (lock held): a LIVE block goes back to its graph. */
static CUresult graph_block_free(struct block *b)
{
    if (b->gstate != DEVMEM_GRAPH_LIVE)
        return CUDA_ERROR_INVALID_VALUE;    /* not allocated, or its own graph frees it */
    b->gstate = DEVMEM_GRAPH_IDLE;
    return CUDA_SUCCESS;
}

/* The graph block at p (lock held), or NULL. */
static struct block *graph_block(CUdeviceptr p, struct segment **sp)
{
    struct segment *s = seg_containing(p);
    long i = s ? block_find(s, p, 1) : -1;

    if (i < 0 || s->blocks[i].kind != TC_ALLOC_GRAPH)
        return NULL;
    if (sp)
        *sp = s;
    return &s->blocks[i];
}

CUresult devmem_free(CUdeviceptr p)
{
    struct segment *s;
    struct block *gb;
    int hold = graphmem_captures_active();
    long i;

    reg_lock();
    if ((gb = graph_block(p, NULL))) {
        CUresult rc = graph_block_free(gb);
        reg_unlock();
        return rc;
    }
    reg_unlock();
    /* As the driver's cuMemFree: work in flight may still use the block, so
     * wait for it before the block can be handed out again. During a capture
     * the wait is left for later (see devmem.h). */
    if (!hold && devmem_owns(p)) {
        CUresult rc = TCGPU_REAL(cuCtxSynchronize)();
        if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_INVALID_CONTEXT)
            return rc;
    }
    reg_lock();
    drain_pending_frees();
    s = seg_containing(p);
    i = s ? block_find(s, p, 1) : -1;
    if (i < 0) {
        reg_unlock();
        /* Inside one of our segments but not a live allocation's start
         * (freed, or its context destroyed): the driver's answer for a
         * pointer it did not allocate. */
        return s ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_FOUND;
    }
    if (hold) {
        block_hold(s, (size_t)i);
    } else {
        block_release(s, (size_t)i);
        release_if_unused(s, 1);
    }
    reg_unlock();
    return CUDA_SUCCESS;
}

/*
 * Frees queued by cuMemFreeAsync whose stream has reached them. The driver's
 * callback thread only pushes onto this list (it may not call CUDA, and must
 * not wait for the registry lock: a thread holding it may be in a driver call
 * that waits for that very callback); whoever takes the lock next returns the
 * blocks to the allocator.
 */
struct pending_free {
    CUdeviceptr p;
    struct pending_free *next;
};
static _Atomic(struct pending_free *) pending_frees;

static void free_when_reached(void *arg)
{
    struct pending_free *f = arg;

    f->next = atomic_load_explicit(&pending_frees, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&pending_frees, &f->next, f,
                                                  memory_order_release, memory_order_relaxed))
        ;
}

/* Lock held. */
static void drain_pending_frees(void)
{
    struct pending_free *f = atomic_exchange_explicit(&pending_frees, NULL, memory_order_acquire);

    while (f) {
        struct pending_free *next = f->next;
        struct segment *s = seg_containing(f->p);
        long i = s ? block_find(s, f->p, 1) : -1;
        if (i >= 0)
            block_release(s, (size_t)i);
        free(f);
        f = next;
    }
}

CUresult devmem_free_async(CUdeviceptr p, CUstream stream, int per_thread)
{
    struct pending_free *f;
    struct segment *s;
    CUresult rc;

    struct block *gb;

    reg_lock();
    if ((gb = graph_block(p, NULL))) {
        /* Graph memory is not released: its state changes in API order. */
        rc = graph_block_free(gb);
        reg_unlock();
        return rc;
    }
    s = seg_containing(p);
    rc = (s && block_find(s, p, 1) >= 0) ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    reg_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    f = malloc(sizeof(*f));
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->p = p;
    rc = per_thread ? TCGPU_REAL(cuLaunchHostFunc_ptsz)(stream, free_when_reached, f)
                    : TCGPU_REAL(cuLaunchHostFunc)(stream, free_when_reached, f);
    if (rc != CUDA_SUCCESS)
        free(f);
    return rc;
}

/* Waits for the device work of every context (held blocks may be in use). */
static void sync_all_contexts(void)
{
    CUcontext ctxs[64], ignored;
    CUdevice devs[64];
    size_t n = objects_contexts(ctxs, devs, 64);

    for (size_t i = 0; i < n && i < 64; i++)
        if (TCGPU_REAL(cuCtxPushCurrent)(ctxs[i]) == CUDA_SUCCESS) {
            TCGPU_REAL(cuCtxSynchronize)();
            TCGPU_REAL(cuCtxPopCurrent)(&ignored);
        }
}

/* The blocks held back during captures, once none is in progress. */
static void release_held(void)
{
    reg_lock();
    size_t held = nheld;
    reg_unlock();
    if (!held || graphmem_captures_active())
        return;
    sync_all_contexts();
    reg_lock();
    if (!graphmem_captures_active())
        for (size_t k = 0; k < nsegs; k++)
            for (size_t j = 0; j < segs[k]->nblocks; j++)
                if (segs[k]->blocks[j].held) {
                    block_unhold(segs[k], j);
                    j = (size_t)-1;     /* blocks merged: start the segment again */
                }
    reg_unlock();
}

void devmem_trim(void)
{
    release_held();
    reg_lock();
    drain_pending_frees();
    for (size_t i = 0; i < nsegs; i++) {
        size_t before = nsegs;
        release_if_unused(segs[i], 1);
        if (nsegs < before)
            i--;
    }
    reg_unlock();
}

static void fill_alloc(const struct segment *s, const struct block *b, struct devmem_alloc *a)
{
    a->va = s->va + b->off;
    a->size = b->size;
    a->kind = b->kind;
    a->id = b->id;
    a->device = s->device;
    a->ctx = b->ctx;
    a->pool = b->pool;
    a->site = b->site;
    a->contents_dead = b->kind == TC_ALLOC_GRAPH && b->gstate != DEVMEM_GRAPH_LIVE;
}

CUresult devmem_peer_access(int owner, int peer, int enable)
{
    CUmemAccessDesc d;
    CUresult rc = CUDA_SUCCESS;

    if (owner < 0 || owner >= TC_MAX_ACCESS || peer < 0 || peer >= TC_MAX_ACCESS)
        return CUDA_ERROR_INVALID_DEVICE;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = peer;
    d.flags = enable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
    reg_lock();
    for (size_t i = 0; i < nsegs && rc == CUDA_SUCCESS; i++) {
        struct segment *s = segs[i];

        if (s->device != owner)
            continue;
        /* While suspended the mapping is gone: the access is recorded and
         * applied when it is mapped again. */
        if (s->phys->real)
            rc = TCGPU_REAL(cuMemSetAccess)(s->va, s->size, &d, 1);
        if (rc == CUDA_SUCCESS)
            reg_map_set_access(s->va, s->size, &d, 1);
    }
    if (rc == CUDA_SUCCESS) {
        if (enable)
            peers_of[owner] |= 1u << peer;
        else
            peers_of[owner] &= ~(1u << peer);
    }
    reg_unlock();
    return rc;
}

int devmem_graph_state(CUdeviceptr p, enum devmem_graph_state *st)
{
    struct block *b;
    int rc = -ENOENT;

    reg_lock();
    if ((b = graph_block(p, NULL))) {
        *st = b->gstate;
        rc = 0;
    }
    reg_unlock();
    return rc;
}

int devmem_graph_set(CUdeviceptr p, enum devmem_graph_state st)
{
    struct block *b;
    int rc = -ENOENT;

    reg_lock();
    if ((b = graph_block(p, NULL))) {
        b->gstate = st;
        rc = 0;
    }
    reg_unlock();
    return rc;
}

void devmem_graph_release(CUdeviceptr p)
{
    struct segment *s;
    struct block *b;

    reg_lock();
    if ((b = graph_block(p, &s))) {
        if (b->gstate == DEVMEM_GRAPH_LIVE) {
            b->kind = TC_ALLOC_ASYNC;       /* the program's now, to free as its own */
        } else {
            block_release(s, (size_t)(b - s->blocks));
            release_if_unused(s, 1);
        }
    }
    reg_unlock();
}

int devmem_check_range(CUdeviceptr p, size_t len)
{
    struct devmem_alloc a;
    int rc;

    if (len == 0)
        return 0;
    rc = devmem_lookup(p, &a);
    if (rc == -ENOENT)
        return 0;                       /* not ours: the driver checks it */
    if (rc)
        return rc;
    return len <= a.size - (p - a.va) ? 0 : -EFAULT;   /* p - a.va < a.size */
}

void devmem_context_destroyed(CUcontext ctx)
{
    if (!ctx)
        return;
    reg_lock();
    drain_pending_frees();
    for (size_t i = 0; i < nsegs; i++) {
        struct segment *s = segs[i];
        size_t before = nsegs;

        for (size_t j = 0; j < s->nblocks; j++) {
            if (!s->blocks[j].id || s->blocks[j].ctx != ctx)
                continue;
            block_release(s, j);
            j = (size_t)-1;             /* merging moved the blocks: start over */
        }
        /* The cached empty arena goes too: after a context's destruction
         * cuMemGetInfo shows its memory back, as the driver's does. */
        release_if_unused(s, 0);
        if (nsegs < before)
            i--;
    }
    reg_unlock();
}

void devmem_pool_usage(CUmemoryPool pool, struct devmem_pool_use *use)
{
    struct pool_use *p;

    reg_lock();
    drain_pending_frees();
    p = pool_use_of(pool, 0);
    *use = p ? p->u : (struct devmem_pool_use){ 0 };
    reg_unlock();
}

void devmem_pool_reset_high(CUmemoryPool pool, int reserved)
{
    struct pool_use *p;

    reg_lock();
    if ((p = pool_use_of(pool, 0)) != NULL) {
        if (reserved)
            p->u.reserved_high = p->u.reserved;
        else
            p->u.used_high = p->u.used;
    }
    reg_unlock();
}

int devmem_lookup(CUdeviceptr p, struct devmem_alloc *a)
{
    struct segment *s;
    long i;
    int rc = -ENOENT;

    reg_lock();
    s = seg_containing(p);
    if (s) {
        i = block_find(s, p, 0);
        rc = -EFAULT;
        if (i >= 0) {
            fill_alloc(s, &s->blocks[i], a);
            rc = 0;
        }
    }
    reg_unlock();
    return rc;
}

int devmem_for_each(int (*fn)(const struct devmem_alloc *a, void *arg), void *arg)
{
    struct devmem_alloc a;
    int rc = 0;

    /* The caller holds the gate closed, so no allocation changes under us;
     * callbacks may take the registry lock themselves. */
    for (size_t i = 0; i < nsegs && rc == 0; i++) {
        struct segment *s = segs[i];
        for (size_t j = 0; j < s->nblocks && rc == 0; j++) {
            if (!s->blocks[j].id)
                continue;
            fill_alloc(s, &s->blocks[j], &a);
            rc = fn(&a, arg);
        }
    }
    return rc;
}

void devmem_usage_locked(uint64_t *bytes, uint32_t *count)
{
    *bytes = live_bytes;
    *count = live_count;
}

void devmem_usage(uint64_t *bytes, uint32_t *count)
{
    reg_lock();
    devmem_usage_locked(bytes, count);
    reg_unlock();
}
