/*
 * managed.c - managed memory: where its pages are, the advice on them,
 * cuMemPrefetchAsync, and the range attributes that report both.
 *
 * A managed allocation is host memory at the same address on both sides
 * (memory.c); what simcuda models is *where its pages count*: each 64 KiB
 * page is resident on one device (charged to that device's capacity, as on a
 * GPU) or on the host (charged to nothing). Pages start on the allocating
 * device. They move when prefetched (in stream order) and when a kernel or
 * copy on another device touches them, unless the advice says the toucher
 * maps them remotely instead (preferred location elsewhere and "accessed by"
 * the toucher, or preferred location the host). Host threads touching pages
 * move nothing: simcuda sees no page faults. A page that does not fit on its
 * device when it should move stays where it is (oversubscription), as the
 * driver evicts instead of failing.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

#define MPAGE (64ull << 10)
#define LOC_NONE (-2)              /* CU_DEVICE_INVALID: no advice / never prefetched */
#define LOC_HOST (-1)              /* CU_DEVICE_CPU */
#define ACCESS_HOST (1u << 15)     /* accessed-by bit of the host */

struct sim_managed {
    pthread_mutex_t lock;
    size_t npages;
    uint64_t len;                  /* bytes charged when all pages are on devices */
    int8_t *loc;                   /* device, or LOC_HOST */
    int8_t *pref;                  /* preferred location: LOC_NONE, LOC_HOST or a device */
    int8_t *last;                  /* last prefetch location: LOC_NONE, LOC_HOST or a device */
    uint8_t *read_mostly;
    uint16_t *accessed;            /* devices (bit d) and the host (ACCESS_HOST) */
};

static uint64_t page_bytes(const struct sim_managed *m, size_t i)
{
    uint64_t start = i * MPAGE;

    return m->len - start < MPAGE ? m->len - start : MPAGE;
}

static void meta_free(struct sim_managed *m)
{
    free(m->loc);
    free(m->pref);
    free(m->last);
    free(m->read_mostly);
    free(m->accessed);
    free(m);
}

void sim_managed_drop(struct sim_range *r)
{
    if (r->managed) {
        pthread_mutex_destroy(&r->managed->lock);
        meta_free(r->managed);
    }
    r->managed = NULL;
}

int sim_managed_init(struct sim_range *r)
{
    struct sim_managed *m = calloc(1, sizeof(*m));
    size_t n = (size_t)((r->charged + MPAGE - 1) / MPAGE);

    if (!m)
        return -1;
    m->npages = n;
    m->len = r->charged;
    m->loc = malloc(n);
    m->pref = malloc(n);
    m->last = malloc(n);
    m->read_mostly = calloc(n, 1);
    m->accessed = calloc(n, sizeof(*m->accessed));
    if (!m->loc || !m->pref || !m->last || !m->read_mostly || !m->accessed) {
        meta_free(m);
        return -1;
    }
    memset(m->loc, r->dev, n);
    memset(m->pref, LOC_NONE, n);
    memset(m->last, LOC_NONE, n);
    pthread_mutex_init(&m->lock, NULL);
    r->managed = m;
    return 0;
}

/* Releases what the pages on devices are charged; r->charged is then zero. */
void sim_managed_free(struct sim_range *r)
{
    struct sim_managed *m = r->managed;
    uint64_t on[SIM_MAX_DEVICES] = { 0 };

    if (!m)
        return;
    for (size_t i = 0; i < m->npages; i++)
        if (m->loc[i] >= 0)
            on[m->loc[i]] += page_bytes(m, i);
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        if (on[d])
            sim_capacity_release(d, on[d]);
    r->charged = 0;
    sim_managed_drop(r);
}

static void page_span(const struct sim_range *r, uint64_t va, uint64_t len, size_t *first, size_t *end)
{
    uint64_t off = va - r->va, stop = off + len;

    *first = (size_t)(off / MPAGE);
    *end = (size_t)((stop + MPAGE - 1) / MPAGE);
    if (*end > r->managed->npages)
        *end = r->managed->npages;
}

/* Moves page i to dev (LOC_HOST: the host); false if it does not fit there. */
static bool page_move(struct sim_managed *m, size_t i, int dev)
{
    uint64_t b = page_bytes(m, i);

    if (m->loc[i] == dev)
        return true;
    if (dev >= 0 && sim_capacity_charge(dev, b))
        return false;
    if (m->loc[i] >= 0)
        sim_capacity_release(m->loc[i], b);
    m->loc[i] = (int8_t)dev;
    return true;
}

/* Would a touch by dev move page i there, or map it remotely? */
static bool touch_moves(const struct sim_managed *m, size_t i, int dev)
{
    if (m->pref[i] == LOC_HOST)
        return false;
    if (m->pref[i] >= 0 && m->pref[i] != dev && (m->accessed[i] & (1u << dev)))
        return false;
    return true;
}

void sim_managed_touch(struct sim_range *r, uint64_t va, uint64_t len, int dev)
{
    struct sim_managed *m = r->managed;
    size_t first, end;

    if (!m)
        return;
    page_span(r, va, len, &first, &end);
    pthread_mutex_lock(&m->lock);
    for (size_t i = first; i < end; i++)
        if (m->loc[i] != dev && touch_moves(m, i, dev))
            page_move(m, i, dev);
    pthread_mutex_unlock(&m->lock);
}

void sim_exec_prefetch(struct sim_op *op)
{
    struct sim_range *r;
    size_t first, end;

    sim_map_rdlock();
    r = sim_map_find(op->u.prefetch.va);
    if (r && r->kind == SIM_R_MANAGED && r->managed) {
        struct sim_managed *m = r->managed;

        page_span(r, op->u.prefetch.va, op->u.prefetch.size, &first, &end);
        pthread_mutex_lock(&m->lock);
        for (size_t i = first; i < end; i++) {
            page_move(m, i, op->u.prefetch.dev);
            m->last[i] = (int8_t)op->u.prefetch.dev;
        }
        pthread_mutex_unlock(&m->lock);
    }
    sim_map_unlock();
}

/* ---- the API -------------------------------------------------------------------- */

/* The managed range holding all of [p, p+count) (map lock held), or NULL. */
static struct sim_range *managed_of(uint64_t p, uint64_t count)
{
    struct sim_range *r = sim_map_find(p);

    if (!r || r->kind != SIM_R_MANAGED || !r->managed || !count || count > r->size - (p - r->va))
        return NULL;
    return r;
}

/* A location as a device number: LOC_HOST for host locations, else the device. */
static CUresult location_dev(CUmemLocation loc, int *dev)
{
    switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (loc.id < 0 || loc.id >= sim_device_count())
            return CUDA_ERROR_INVALID_DEVICE;
        *dev = loc.id;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        *dev = LOC_HOST;
        return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (loc.id != 0)
            return CUDA_ERROR_INVALID_VALUE;    /* one NUMA node */
        *dev = LOC_HOST;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUmemLocation device_location(CUdevice d)
{
    CUmemLocation l = { CU_MEM_LOCATION_TYPE_DEVICE, d };

    if (d == CU_DEVICE_CPU)
        l.type = CU_MEM_LOCATION_TYPE_HOST, l.id = 0;
    return l;
}

static CUresult prefetch(CUdeviceptr p, size_t count, CUmemLocation loc, unsigned flags, CUstream hs, bool pt)
{
    struct sim_stream *s;
    struct sim_op *op;
    bool ok;
    int dev;
    CUresult r;

    SIM_BEGIN();
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = location_dev(loc, &dev)))
        return r;
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    sim_map_rdlock();
    ok = managed_of(p, count) != NULL;
    sim_map_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(op = sim_op_new(SIM_OP_PREFETCH)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.prefetch.va = p;
    op->u.prefetch.size = count;
    op->u.prefetch.dev = dev;
    return sim_submit(s, op, NULL, 0, NULL);
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                               CUstream hStream)
{
    return prefetch(devPtr, count, location, flags, hStream, false);
}
SIM_EXPORT(cuMemPrefetchAsync_v2);

CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                    unsigned int flags, CUstream hStream)
{
    return prefetch(devPtr, count, location, flags, hStream, true);
}
SIM_EXPORT(cuMemPrefetchAsync_v2_ptsz);

CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
    return prefetch(devPtr, count, device_location(dstDevice), 0, hStream, false);
}
SIM_EXPORT(cuMemPrefetchAsync);

CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
    return prefetch(devPtr, count, device_location(dstDevice), 0, hStream, true);
}
SIM_EXPORT(cuMemPrefetchAsync_ptsz);

static uint16_t access_bit(int dev)
{
    return dev == LOC_HOST ? ACCESS_HOST : (uint16_t)(1u << dev);
}

static CUresult advise(CUdeviceptr p, size_t count, CUmem_advise advice, CUmemLocation loc)
{
    struct sim_range *r;
    struct sim_managed *m;
    size_t first, end;
    int dev = LOC_NONE;
    CUresult res;

    SIM_BEGIN();
    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    /* Read-mostly takes no location; the others need a valid one. */
    if (advice != CU_MEM_ADVISE_SET_READ_MOSTLY && advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
        advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION && (res = location_dev(loc, &dev)))
        return res;
    sim_map_rdlock();
    if (!(r = managed_of(p, count))) {
        sim_map_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    m = r->managed;
    page_span(r, p, count, &first, &end);
    pthread_mutex_lock(&m->lock);
    for (size_t i = first; i < end; i++) {
        switch (advice) {
        case CU_MEM_ADVISE_SET_READ_MOSTLY: m->read_mostly[i] = 1; break;
        case CU_MEM_ADVISE_UNSET_READ_MOSTLY: m->read_mostly[i] = 0; break;
        case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: m->pref[i] = (int8_t)dev; break;
        case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: m->pref[i] = LOC_NONE; break;
        case CU_MEM_ADVISE_SET_ACCESSED_BY: m->accessed[i] |= access_bit(dev); break;
        case CU_MEM_ADVISE_UNSET_ACCESSED_BY: m->accessed[i] &= (uint16_t)~access_bit(dev); break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    sim_map_unlock();
    return CUDA_SUCCESS;
}

CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
    return advise(devPtr, count, advice, location);
}
SIM_EXPORT(cuMemAdvise_v2);

CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
    return advise(devPtr, count, advice, device_location(device));
}
SIM_EXPORT(cuMemAdvise);

/* ---- range attributes ------------------------------------------------------------- */

/* The value every page of [first, end) has in v, or LOC_NONE. */
static int uniform(const int8_t *v, size_t first, size_t end)
{
    for (size_t i = first + 1; i < end; i++)
        if (v[i] != v[first])
            return LOC_NONE;
    return first < end ? v[first] : LOC_NONE;
}

static CUmemLocationType loc_type(int v)
{
    return v == LOC_NONE ? CU_MEM_LOCATION_TYPE_INVALID : v == LOC_HOST ? CU_MEM_LOCATION_TYPE_HOST
                                                                         : CU_MEM_LOCATION_TYPE_DEVICE;
}

static CUresult range_attr(struct sim_managed *m, size_t first, size_t end, CUmem_range_attribute a,
                           void *data, size_t size)
{
    int v;

    if (a == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY) {
        uint16_t all = 0xffff;
        size_t k = 0, max = size / 4;

        if (!size || size % 4)
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = first; i < end; i++)
            all &= m->accessed[i];
        /* Devices by ordinal, then the host, as the driver lists them
         * (cuda-python's test_cuda_mem_range_attr reads [0, -1, -2]). */
        for (int d = 0; d < SIM_MAX_DEVICES && k < max; d++)
            if (all & (1u << d))
                ((int *)data)[k++] = d;
        if (all & ACCESS_HOST && k < max)
            ((int *)data)[k++] = CU_DEVICE_CPU;
        while (k < max)
            ((int *)data)[k++] = CU_DEVICE_INVALID;
        return CUDA_SUCCESS;
    }
    if (size != 4)
        return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
        v = 1;
        for (size_t i = first; i < end; i++)
            v &= m->read_mostly[i];
        break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: v = uniform(m->pref, first, end); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: v = uniform(m->last, first, end); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE: v = loc_type(uniform(m->pref, first, end)); break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE: v = loc_type(uniform(m->last, first, end)); break;
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
        v = uniform(m->pref, first, end);
        v = v < 0 ? 0 : v;
        break;
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
        v = uniform(m->last, first, end);
        v = v < 0 ? 0 : v;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *(int *)data = v;
    return CUDA_SUCCESS;
}

static CUresult range_attrs(void **data, const size_t *sizes, const CUmem_range_attribute *attrs, size_t n,
                            CUdeviceptr p, size_t count)
{
    struct sim_range *r;
    size_t first, end;
    CUresult res = CUDA_SUCCESS;

    if (!data || !sizes || !attrs || !n)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++)
        if (!data[i])
            return CUDA_ERROR_INVALID_VALUE;
    sim_map_rdlock();
    if (!(r = managed_of(p, count))) {
        sim_map_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    page_span(r, p, count, &first, &end);
    pthread_mutex_lock(&r->managed->lock);
    for (size_t i = 0; i < n && !res; i++)
        res = range_attr(r->managed, first, end, attrs[i], data[i], sizes[i]);
    pthread_mutex_unlock(&r->managed->lock);
    sim_map_unlock();
    return res;
}

CUresult cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute, CUdeviceptr devPtr,
                                size_t count)
{
    SIM_BEGIN();
    return range_attrs(&data, &dataSize, &attribute, 1, devPtr, count);
}
SIM_EXPORT(cuMemRangeGetAttribute);

CUresult cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
                                 size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
    SIM_BEGIN();
    return range_attrs(data, dataSizes, attributes, numAttributes, devPtr, count);
}
SIM_EXPORT(cuMemRangeGetAttributes);
