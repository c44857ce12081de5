/*
 * pool.c - stream-ordered allocation (cuMemAllocAsync / cuMemFreeAsync).
 *
 * A pool keeps freed blocks (still charged against the device capacity, as a
 * real pool keeps its physical memory) for reuse, and gives memory back above
 * its release threshold at synchronisation points (stream/event/context
 * synchronize). Allocation happens when the call is made; the free happens
 * in stream order: work queued before cuMemFreeAsync can still use the block.
 * A freed block is out of the translation map, so a use after free faults.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

struct sim_pool {
    uint32_t magic;
    int dev;
    bool destroyed;
    uint64_t threshold;
    int reuse[3];                    /* REUSE_* attributes, stored only */
    uint64_t reserved, used, reserved_high, used_high;
    struct sim_range **free_blocks;
    size_t nfree, free_cap;
    struct sim_pool *next;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_pool *pools;
static struct sim_pool *default_pool[SIM_MAX_DEVICES];
static struct sim_pool *current_pool[SIM_MAX_DEVICES];

static struct sim_pool *pool_new(int dev)
{
    struct sim_pool *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->magic = SIM_MAGIC_POOL;
    p->dev = dev;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->next = pools;
    pools = p;
    sim_handle_add(p);
    return p;
}

/* Release one free block for good (pool_lock held). */
static void block_release(struct sim_pool *p, size_t i)
{
    struct sim_range *r = p->free_blocks[i];

    p->free_blocks[i] = p->free_blocks[--p->nfree];
    p->reserved -= r->charged;
    sim_dev_free_range(r);
}

static void trim_to(struct sim_pool *p, uint64_t keep)
{
    while (p->reserved > keep && p->nfree)
        block_release(p, p->nfree - 1);
}

void sim_pools_trim(void)
{
    pthread_mutex_lock(&pool_lock);
    for (struct sim_pool *p = pools; p; p = p->next)
        trim_to(p, p->threshold);
    pthread_mutex_unlock(&pool_lock);
}

static CUresult pool_get(CUmemoryPool h, struct sim_pool **out)
{
    struct sim_pool *p = (struct sim_pool *)h;

    if (!sim_handle_ok(p, SIM_MAGIC_POOL) || p->destroyed)
        return CUDA_ERROR_INVALID_VALUE;
    *out = p;
    return CUDA_SUCCESS;
}

static CUresult default_get(CUdevice dev, struct sim_pool **out, bool current)
{
    CUresult r = CUDA_SUCCESS;

    if (dev < 0 || dev >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&pool_lock);
    if (!default_pool[dev] && !(default_pool[dev] = pool_new(dev)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    *out = current && current_pool[dev] ? current_pool[dev] : default_pool[dev];
    pthread_mutex_unlock(&pool_lock);
    return r;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = default_get(dev, &p, false)))
        return r;
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetDefaultMemPool);

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = default_get(dev, &p, true)))
        return r;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetMemPool);

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if (dev < 0 || dev >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    if ((r = pool_get(pool, &p)))
        return r;
    if (p->dev != dev)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&pool_lock);
    current_pool[dev] = p;
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceSetMemPool);

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    struct sim_pool *p;

    SIM_BEGIN();
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.id < 0 || props->location.id >= sim_device_count())
        return CUDA_ERROR_INVALID_DEVICE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&pool_lock);
    p = pool_new(props->location.id);
    pthread_mutex_unlock(&pool_lock);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemPoolCreate);
SIM_PARTIAL(cuMemPoolCreate, "shareable handle types: CUDA_ERROR_NOT_SUPPORTED");

/* A destroyed pool's free blocks go now; blocks still allocated go when freed.
 * The structure stays (marked destroyed) so that late frees find it. */
CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if ((r = pool_get(pool, &p)))
        return r;
    pthread_mutex_lock(&pool_lock);
    if (p == default_pool[p->dev]) {
        pthread_mutex_unlock(&pool_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (current_pool[p->dev] == p)
        current_pool[p->dev] = NULL;
    p->destroyed = true;
    trim_to(p, 0);
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemPoolDestroy);

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if ((r = pool_get(pool, &p)))
        return r;
    pthread_mutex_lock(&pool_lock);
    trim_to(p, minBytesToKeep);
    pthread_mutex_unlock(&pool_lock);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemPoolTrimTo);

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = pool_get(pool, &p)))
        return r;
    pthread_mutex_lock(&pool_lock);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        /* Only a reset to zero is allowed: the mark restarts at the current value. */
        if (*(cuuint64_t *)value)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
            p->reserved_high = p->reserved;
        else
            p->used_high = p->used;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&pool_lock);
    return r;
}
SIM_EXPORT(cuMemPoolSetAttribute);

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = pool_get(pool, &p)))
        return r;
    pthread_mutex_lock(&pool_lock);
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; break;
    default: r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&pool_lock);
    return r;
}
SIM_EXPORT(cuMemPoolGetAttribute);

/* A free block that fits without wasting more than half of it (pool_lock held). */
static struct sim_range *reuse_block(struct sim_pool *p, uint64_t size)
{
    for (size_t i = 0; i < p->nfree; i++) {
        struct sim_range *r = p->free_blocks[i];

        if (r->charged >= size && r->charged / 2 < size) {
            p->free_blocks[i] = p->free_blocks[--p->nfree];
            return r;
        }
    }
    return NULL;
}

/* Reserved: what the pool holds (blocks are charged by the page). Used: the
 * bytes of live allocations, as the driver counts them (an allocation of
 * 1024 bytes is 1024 used). */
static void account_alloc(struct sim_pool *p, struct sim_range *r, bool fresh)
{
    if (fresh)
        p->reserved += r->charged;
    p->used += r->size;
    if (p->reserved > p->reserved_high)
        p->reserved_high = p->reserved;
    if (p->used > p->used_high)
        p->used_high = p->used;
}

/* Stream-ordered allocation on a capturing stream: a graph allocation node,
 * with the pool's properties (capture.c, graph_mem.c). */
static CUresult alloc_captured(struct sim_pool *p, CUdeviceptr *dptr, size_t size, struct sim_stream *s)
{
    CUmemPoolProps props = {
        .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
        .location = { CU_MEM_LOCATION_TYPE_DEVICE, p->dev },
    };

    return sim_capture_alloc(s, &props, size, dptr);
}

static CUresult alloc_from(struct sim_pool *p, CUdeviceptr *dptr, size_t size, CUstream hs, bool pt)
{
    struct sim_stream *s;
    struct sim_range *r;
    CUresult res;

    if (!dptr || !size)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_stream_get(hs, pt, &s)))
        return res;
    if (s->ctx->dev != p->dev)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_capture_pending(s) && (res = alloc_captured(p, dptr, size, s)) != CUDA_ERROR_ILLEGAL_STATE)
        return res;         /* ILLEGAL_STATE: the capture ended meanwhile */
    pthread_mutex_lock(&pool_lock);
    r = reuse_block(p, size);
    if (r) {
        r->size = size;
        r->ctx = s->ctx;
        r->free_pending = false;
        r->id = sim_next_buffer_id();
        sim_map_wrlock();
        if (sim_map_insert(r)) {
            sim_map_unlock();
            p->free_blocks[p->nfree++] = r;
            pthread_mutex_unlock(&pool_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        sim_map_unlock();
        account_alloc(p, r, false);
    } else {
        /* Make room from our own free blocks before failing: a real pool
         * releases unused memory when an allocation would otherwise fail. */
        res = sim_dev_alloc(s->ctx, size, SIM_R_POOL, &r);
        if (res == CUDA_ERROR_OUT_OF_MEMORY && p->nfree) {
            trim_to(p, 0);
            res = sim_dev_alloc(s->ctx, size, SIM_R_POOL, &r);
        }
        if (res) {
            pthread_mutex_unlock(&pool_lock);
            return res;
        }
        r->pool = p;
        account_alloc(p, r, true);
    }
    pthread_mutex_unlock(&pool_lock);
    *dptr = r->va;
    return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream hs, bool pt)
{
    struct sim_stream *s;
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    if ((r = default_get(s->ctx->dev, &p, true)))
        return r;
    return alloc_from(p, dptr, size, hs, pt);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) { return alloc_async(dptr, bytesize, hStream, false); }
SIM_EXPORT(cuMemAllocAsync);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) { return alloc_async(dptr, bytesize, hStream, true); }
SIM_EXPORT(cuMemAllocAsync_ptsz);

static CUresult alloc_pool_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream hs, bool pt)
{
    struct sim_pool *p;
    CUresult r;

    SIM_BEGIN();
    if ((r = pool_get(pool, &p)))
        return r;
    return alloc_from(p, dptr, size, hs, pt);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return alloc_pool_async(dptr, bytesize, pool, hStream, false);
}
SIM_EXPORT(cuMemAllocFromPoolAsync);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return alloc_pool_async(dptr, bytesize, pool, hStream, true);
}
SIM_EXPORT(cuMemAllocFromPoolAsync_ptsz);

/* Runs on the worker, in stream order. */
void sim_pool_free_exec(struct sim_range *r)
{
    struct sim_pool *p = r->pool;
    struct sim_range **n;

    sim_map_wrlock();
    sim_map_remove(r);
    sim_map_unlock();
    pthread_mutex_lock(&pool_lock);
    p->used -= r->size;
    if (p->nfree == p->free_cap) {
        size_t ncap = p->free_cap ? p->free_cap * 2 : 16;

        if ((n = realloc(p->free_blocks, ncap * sizeof(*n)))) {
            p->free_blocks = n;
            p->free_cap = ncap;
        }
    }
    if (p->nfree < p->free_cap && !p->destroyed) {
        p->free_blocks[p->nfree++] = r;
    } else {
        p->reserved -= r->charged;    /* no room to keep it: give it back */
        sim_dev_free_range(r);
    }
    pthread_mutex_unlock(&pool_lock);
}

CUresult sim_pool_free_now(uint64_t dptr)
{
    struct sim_range *r;

    sim_map_wrlock();
    r = sim_map_find(dptr);
    if (!r || r->va != dptr || r->kind != SIM_R_POOL || r->free_pending) {
        sim_map_unlock();
        return CUDA_ERROR_NOT_FOUND;
    }
    r->free_pending = true;
    sim_map_unlock();
    sim_pool_free_exec(r);
    return CUDA_SUCCESS;
}

static CUresult free_async(CUdeviceptr dptr, CUstream hs, bool pt)
{
    struct sim_stream *s;
    struct sim_range *r;
    struct sim_op *op;
    CUresult res;

    SIM_BEGIN();
    if ((res = sim_stream_get(hs, pt, &s)))
        return res;
    if (sim_capture_pending(s) && (res = sim_capture_free(s, dptr)) != CUDA_ERROR_ILLEGAL_STATE)
        return res;         /* a graph free node (only graph allocations can be freed there) */
    if ((res = sim_gmem_free_async(s, dptr)) != CUDA_ERROR_NOT_FOUND)
        return res;         /* a graph allocation, freed after its launch */
    if (!(op = sim_op_new(SIM_OP_POOL_FREE)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_map_wrlock();
    r = sim_map_find(dptr);
    if (!r || r->va != dptr || r->kind != SIM_R_POOL || r->free_pending) {
        sim_map_unlock();
        sim_op_free(op);
        return CUDA_ERROR_INVALID_VALUE;
    }
    r->free_pending = true;
    sim_map_unlock();
    op->u.pool_free.range = r;
    if ((res = sim_submit(s, op, NULL, 0, NULL))) {
        sim_map_wrlock();
        r->free_pending = false;    /* not queued: the block is still allocated */
        sim_map_unlock();
    }
    return res;
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, false); }
SIM_EXPORT(cuMemFreeAsync);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, true); }
SIM_EXPORT(cuMemFreeAsync_ptsz);

/* Context teardown: its pool allocations still in use are freed. */
void sim_pools_release_ctx(struct sim_ctx *c)
{
    struct sim_range **v;
    size_t n = sim_map_take(c, 1u << SIM_R_POOL, &v);

    pthread_mutex_lock(&pool_lock);
    for (size_t i = 0; i < n; i++) {
        v[i]->pool->used -= v[i]->size;
        v[i]->pool->reserved -= v[i]->charged;
        sim_dev_free_range(v[i]);
    }
    pthread_mutex_unlock(&pool_lock);
    free(v);
}
