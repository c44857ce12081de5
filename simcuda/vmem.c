/*
 * vmem.c - device memory: address space, translation, capacity.
 *
 * Device pointers are addresses inside a large PROT_NONE reservation, so a
 * host dereference faults as it would with a real GPU. What lives at a device
 * address is described by a sim_range in a sorted map; copies, memsets and
 * kernels translate through it under the read lock, and pin each range they
 * translate (sim.h, "Pins") so that they touch its host view without the
 * lock: a free of a pinned range defers unmapping it to the last unpin,
 * instead of waiting or pulling memory away; allocations, frees and
 * mappings of other memory never wait for device work.
 * Bytes are charged against the machine-wide capacity in the shm.
 */
#include "graph.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEFAULT_VA_SIZE (256ull << 30)

static uint64_t region_base, region_size;

/* Used extents of the device region, sorted by start. */
struct extent {
    uint64_t start, size;
};
static pthread_mutex_t va_lock = PTHREAD_MUTEX_INITIALIZER;
static struct extent *ext;
static size_t next_, ext_cap;

static pthread_rwlock_t map_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct sim_range **map;
static size_t nmap, map_cap;

static uint64_t buffer_ids;

uint64_t sim_round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

uint64_t sim_next_buffer_id(void)
{
    return __atomic_add_fetch(&buffer_ids, 1, __ATOMIC_RELAXED);
}

int sim_vmem_init(void)
{
    uint64_t size = sim_parse_size(getenv("SIMCUDA_VA_SIZE"), DEFAULT_VA_SIZE);
    void *p;

    size = sim_round_up(size, SIM_GRANULARITY);
    /* Over-reserve by one granule so the region can start 2 MiB aligned. */
    p = mmap(NULL, size + SIM_GRANULARITY, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    region_base = sim_round_up((uint64_t)(uintptr_t)p, SIM_GRANULARITY);
    /* Never hand out address 0 of the region's first granule to nobody: keep
     * the first granule unused so that base+small offsets of NULL-ish
     * arithmetic never land in an allocation. */
    region_base += SIM_GRANULARITY;
    region_size = size - SIM_GRANULARITY;
    return 0;
}

bool sim_va_in_device_region(uint64_t va, uint64_t size)
{
    return va >= region_base && size <= region_size && va - region_base <= region_size - size;
}

static int ext_insert(size_t at, uint64_t start, uint64_t size)
{
    if (next_ == ext_cap) {
        size_t ncap = ext_cap ? ext_cap * 2 : 64;
        struct extent *n = realloc(ext, ncap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        ext = n;
        ext_cap = ncap;
    }
    memmove(&ext[at + 1], &ext[at], (next_ - at) * sizeof(*ext));
    ext[at] = (struct extent){ start, size };
    next_++;
    return 0;
}

/* Index of the first extent ending after va. */
static size_t ext_lower(uint64_t va)
{
    size_t lo = 0, hi = next_;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ext[mid].start + ext[mid].size <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint64_t va_fixed(uint64_t size, uint64_t fixed)
{
    size_t i;

    if (!sim_va_in_device_region(fixed, size))
        return 0;
    i = ext_lower(fixed);
    if (i < next_ && ext[i].start < fixed + size)
        return 0;
    return ext_insert(i, fixed, size) ? 0 : fixed;
}

/* First fit from the region start. */
static uint64_t va_first_fit(uint64_t size, uint64_t align)
{
    uint64_t cand = region_base;

    for (size_t i = 0; i <= next_; i++) {
        uint64_t end = i < next_ ? ext[i].start : region_base + region_size;

        cand = sim_round_up(cand, align);
        if (cand <= end && end - cand >= size)
            return ext_insert(i, cand, size) ? 0 : cand;
        if (i < next_)
            cand = ext[i].start + ext[i].size;
    }
    return 0;
}

uint64_t sim_va_alloc(uint64_t size, uint64_t align, uint64_t fixed)
{
    uint64_t va;

    if (!size || size > region_size)
        return 0;
    if (align < SIM_ALLOC_ALIGN)
        align = SIM_ALLOC_ALIGN;
    pthread_mutex_lock(&va_lock);
    va = fixed ? va_fixed(size, fixed) : va_first_fit(size, align);
    pthread_mutex_unlock(&va_lock);
    return va;
}

void sim_va_free(uint64_t va)
{
    size_t i;

    pthread_mutex_lock(&va_lock);
    i = ext_lower(va);
    if (i < next_ && ext[i].start == va) {
        memmove(&ext[i], &ext[i + 1], (next_ - i - 1) * sizeof(*ext));
        next_--;
    }
    pthread_mutex_unlock(&va_lock);
}

/* --- translation map ------------------------------------------------------ */

void sim_map_rdlock(void) { pthread_rwlock_rdlock(&map_lock); }
void sim_map_wrlock(void) { pthread_rwlock_wrlock(&map_lock); }
void sim_map_unlock(void) { pthread_rwlock_unlock(&map_lock); }

/* Index of the first range ending after va. */
static size_t map_lower(uint64_t va)
{
    size_t lo = 0, hi = nmap;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (map[mid]->va + map[mid]->size <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int sim_map_insert(struct sim_range *r)
{
    size_t i = map_lower(r->va);

    if (i < nmap && map[i]->va < r->va + r->size)
        return -EEXIST;
    if (nmap == map_cap) {
        size_t ncap = map_cap ? map_cap * 2 : 256;
        struct sim_range **n = realloc(map, ncap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        map = n;
        map_cap = ncap;
    }
    memmove(&map[i + 1], &map[i], (nmap - i) * sizeof(*map));
    map[i] = r;
    nmap++;
    return 0;
}

void sim_map_remove(struct sim_range *r)
{
    size_t i = map_lower(r->va);

    if (i < nmap && map[i] == r) {
        memmove(&map[i], &map[i + 1], (nmap - i - 1) * sizeof(*map));
        nmap--;
    }
}

struct sim_range *sim_map_find(uint64_t va)
{
    size_t i = map_lower(va);

    return i < nmap && map[i]->va <= va ? map[i] : NULL;
}

struct sim_range *sim_map_next(uint64_t va)
{
    size_t i = map_lower(va);

    return i < nmap ? map[i] : NULL;
}

bool sim_map_overlaps(uint64_t va, uint64_t len)
{
    struct sim_range *r = sim_map_next(va);

    return r && r->va < va + len;
}

/* VMM memory is touched only where some device was granted access to it:
 * its own or another (a mapping of another GPU's memory, as NCCL maps its
 * peers' buffers, is usually granted to the mapping process's device only). */
static bool range_accessible(const struct sim_range *r)
{
    return r->kind != SIM_R_VMM || r->access_mask != 0;
}

uint64_t sim_map_span(uint64_t va, unsigned char **view)
{
    struct sim_range *r = sim_map_find(va);

    if (!r || !range_accessible(r))
        return 0;
    *view = r->host + (va - r->va);
    return r->va + r->size - va;
}

void *sim_map_view(uint64_t va, uint64_t len)
{
    unsigned char *v;
    uint64_t n = sim_map_span(va, &v);

    return n && len <= n ? v : NULL;
}

/* May work of context c touch r? Memory of another device needs peer access
 * (VMM and graph memory: access granted to c's device). */
static bool ctx_may_access(struct sim_ctx *c, const struct sim_range *r)
{
    if (c && r->kind == SIM_R_VMM)
        return (r->access_mask >> c->dev) & 1;      /* its own device too: granted or not */
    if (!c || r->dev == c->dev)
        return true;
    switch (r->kind) {
    case SIM_R_GRAPH: return r->gmem && ((r->gmem->access_mask >> c->dev) & 1);
    case SIM_R_DEVICE:
        /* another process's memory: peer access to its device, or opened so */
        if (r->ipc_refs)
            return r->ipc_peer_any || sim_peer_can_access_dev(c, r->dev);
        return sim_peer_can_access(c, r);
    case SIM_R_POOL: return sim_peer_can_access(c, r);
    default: return true;          /* host and managed memory */
    }
}

void *sim_map_view_ctx(struct sim_ctx *c, uint64_t va, uint64_t len)
{
    struct sim_range *r = sim_map_find(va);
    void *v = sim_map_view(va, len);

    if (!v || !r || !ctx_may_access(c, r))
        return NULL;
    if (r->kind == SIM_R_MANAGED && c)
        sim_managed_touch(r, va, len, c->dev);
    return v;
}

/* A copy must stay inside one allocation; only VMM mappings that are
 * contiguous in a reservation can be crossed, as on a GPU. */
bool sim_map_covered(uint64_t va, uint64_t len)
{
    struct sim_range *prev = NULL;

    while (len) {
        struct sim_range *r = sim_map_find(va);
        uint64_t n;

        if (!r || (prev && (prev->kind != SIM_R_VMM || r->kind != SIM_R_VMM)))
            return false;
        n = r->va + r->size - va;
        if (n >= len)
            return true;
        va += n;
        len -= n;
        prev = r;
    }
    return true;
}

size_t sim_map_take(struct sim_ctx *ctx, unsigned kinds, struct sim_range ***out)
{
    size_t n = 0, k = 0;
    struct sim_range **res;

    sim_map_wrlock();
    for (size_t i = 0; i < nmap; i++)
        if ((!ctx || map[i]->ctx == ctx) && (kinds & (1u << map[i]->kind)))
            n++;
    res = n ? malloc(n * sizeof(*res)) : NULL;
    if (n && !res) {
        sim_map_unlock();
        *out = NULL;
        return 0;
    }
    for (size_t i = 0; i < nmap;) {
        if ((!ctx || map[i]->ctx == ctx) && (kinds & (1u << map[i]->kind))) {
            res[k++] = map[i];
            memmove(&map[i], &map[i + 1], (nmap - i - 1) * sizeof(*map));
            nmap--;
        } else {
            i++;
        }
    }
    sim_map_unlock();
    *out = res;
    return k;
}

void sim_map_foreach(void (*fn)(struct sim_range *, void *), void *arg)
{
    sim_map_rdlock();
    for (size_t i = 0; i < nmap; i++)
        fn(map[i], arg);
    sim_map_unlock();
}

/* --- pins ------------------------------------------------------------------ */

/* Guards every range's pins and release; taken under the map lock (either
 * side) or alone, never the other way round. */
static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pin_cv = PTHREAD_COND_INITIALIZER;      /* a pin count fell to 0 */

void sim_pins_init(struct sim_pins *p)
{
    p->v = p->inl;
    p->n = 0;
    p->cap = sizeof(p->inl) / sizeof(p->inl[0]);
}

/* Pin r into p once (map lock held, so r is in the map): false if out of memory. */
static bool pins_add(struct sim_pins *p, struct sim_range *r)
{
    for (size_t i = p->n; i-- > 0;)
        if (p->v[i] == r)
            return true;
    if (p->n == p->cap) {
        size_t ncap = p->cap * 2;
        struct sim_range **n = malloc(ncap * sizeof(*n));

        if (!n)
            return false;
        memcpy(n, p->v, p->n * sizeof(*n));
        if (p->v != p->inl)
            free(p->v);
        p->v = n;
        p->cap = ncap;
    }
    pthread_mutex_lock(&pin_lock);
    r->pins++;
    pthread_mutex_unlock(&pin_lock);
    p->v[p->n++] = r;
    return true;
}

static void range_unpin(struct sim_range *r)
{
    void (*release)(struct sim_range *) = NULL;

    pthread_mutex_lock(&pin_lock);
    if (--r->pins == 0) {
        release = r->release;
        r->release = NULL;
        pthread_cond_broadcast(&pin_cv);
    }
    pthread_mutex_unlock(&pin_lock);
    if (release)
        release(r);
}

void sim_pins_release(struct sim_pins *p)
{
    for (size_t i = 0; i < p->n; i++)
        range_unpin(p->v[i]);
    if (p->v != p->inl)
        free(p->v);
    sim_pins_init(p);
}

void *sim_pins_view_ctx(struct sim_pins *p, struct sim_ctx *c, uint64_t va, uint64_t len)
{
    void *v;

    sim_map_rdlock();
    v = sim_map_view_ctx(c, va, len);
    if (v && !pins_add(p, sim_map_find(va)))
        v = NULL;
    sim_map_unlock();
    return v;
}

uint64_t sim_pins_span(struct sim_pins *p, uint64_t va, unsigned char **view)
{
    uint64_t n;

    sim_map_rdlock();
    n = sim_map_span(va, view);
    if (n && !pins_add(p, sim_map_find(va)))
        n = 0;
    sim_map_unlock();
    return n;
}

bool sim_range_defer(struct sim_range *r, void (*release)(struct sim_range *))
{
    bool later;

    pthread_mutex_lock(&pin_lock);
    later = r->pins > 0;
    if (later)
        r->release = release;
    pthread_mutex_unlock(&pin_lock);
    return later;
}

void sim_range_wait_unpinned(struct sim_range *r)
{
    pthread_mutex_lock(&pin_lock);
    while (r->pins)
        pthread_cond_wait(&pin_cv, &pin_lock);
    pthread_mutex_unlock(&pin_lock);
}

bool sim_range_pinned(struct sim_range *r)
{
    bool pinned;

    pthread_mutex_lock(&pin_lock);
    pinned = r->pins > 0;
    pthread_mutex_unlock(&pin_lock);
    return pinned;
}

/* --- backing store and capacity ------------------------------------------- */

/*
 * Whether the guest gives its free memory back to the hypervisor: a virtio
 * balloon with free page reporting (VIRTIO_BALLOON_F_REPORTING, feature bit
 * 5) reports free blocks of page_reporting_order (a huge page) and up, and
 * the host drops them within seconds.
 */
static bool guest_reports_free_pages(void)
{
    const char *dir = "/sys/bus/virtio/drivers/virtio_balloon";
    char path[512], bits[128] = "";
    struct dirent *d;
    bool found = false;
    DIR *dp;
    FILE *f;

    if (access("/sys/module/page_reporting/parameters/page_reporting_order", F_OK) != 0 ||
        !(dp = opendir(dir)))
        return false;
    while (!found && (d = readdir(dp))) {
        if (strncmp(d->d_name, "virtio", 6))
            continue;
        snprintf(path, sizeof(path), "%s/%s/features", dir, d->d_name);
        if ((f = fopen(path, "re"))) {
            found = fgets(bits, sizeof(bits), f) && strlen(bits) > 5 && bits[5] == '1';
            fclose(f);
        }
    }
    closedir(dp);
    return found;
}

/*
 * Whether device memory asks for transparent huge pages: SIMCUDA_DEVICE_THP
 * (1 or 0), else unless the guest reports free pages. A GPU's memory never
 * goes back to the host, but the memory a suspend frees here does, on such
 * a guest: faulting fresh huge pages then costs the hypervisor 1.4-2.1
 * CPU-s per GiB, against 0.41 for small pages whatever the delay (issue
 * 39's measures), and every restore would pay a cost no GPU has.
 */
bool sim_device_wants_thp(void)
{
    static int wanted = -1;
    int w = __atomic_load_n(&wanted, __ATOMIC_RELAXED);
    const char *e;

    if (w < 0) {
        e = getenv("SIMCUDA_DEVICE_THP");
        w = e && *e ? strcmp(e, "0") != 0 : !guest_reports_free_pages();
        __atomic_store_n(&wanted, w, __ATOMIC_RELAXED);
    }
    return w;
}

/*
 * A GPU hands out device memory in 2 MiB pages (SIM_GRANULARITY) and pays
 * nothing to hand out fresh ones. So backing of 2 MiB or more is aligned to
 * 2 MiB and, where that pays (sim_device_wants_thp), asks for transparent
 * huge pages: the first copy into new device memory (a resume's, a
 * restore's) then faults it in 2 MiB at a time. A 4 KiB page at a time,
 * these VMs charge 0.41 s per GiB for it, three times what warm huge pages
 * cost (0.13 s), for work a GPU does not do. Where huge pages are not to be
 * had, the kernel gives small ones.
 */
void *sim_backing_alloc(size_t len)
{
    size_t over = len >= SIM_GRANULARITY ? SIM_GRANULARITY : 0;
    size_t span = sim_round_up(len, (uint64_t)sysconf(_SC_PAGESIZE));   /* what mmap maps */
    uint8_t *p = mmap(NULL, span + over, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), *at;

    if (p == MAP_FAILED)
        return NULL;
    if (!over)
        return p;
    at = (uint8_t *)sim_round_up((uintptr_t)p, SIM_GRANULARITY);
    if (at > p)
        munmap(p, (size_t)(at - p));
    if (at < p + over)      /* the tail past the aligned span, from a page boundary */
        munmap(at + span, (size_t)(p + over - at));
    if (sim_device_wants_thp())
        madvise(at, len, MADV_HUGEPAGE);    /* advice: without it, small pages */
    return at;
}

void sim_backing_free(void *p, size_t len)
{
    if (p && len)
        munmap(p, len);
}

CUresult sim_capacity_charge(int ord, uint64_t bytes)
{
    int dev = sim_device_phys(ord);
    CUresult r = CUDA_SUCCESS;

    sim_shm_lock(sim_shm);
    if (sim_shm->used[dev] + bytes > sim_shm->capacity[dev])
        sim_shm_reap(sim_shm);   /* a dead process's memory may be free now */
    if (sim_shm->used[dev] + bytes > sim_shm->capacity[dev]) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        sim_shm->used[dev] += bytes;
        sim_self->used[dev] += bytes;
    }
    sim_shm_unlock(sim_shm);
    return r;
}

void sim_capacity_release(int ord, uint64_t bytes)
{
    int dev = sim_device_phys(ord);

    sim_shm_lock(sim_shm);
    /* Never underflow: the accounting is shared with other processes. */
    sim_shm->used[dev] -= bytes <= sim_shm->used[dev] ? bytes : sim_shm->used[dev];
    sim_self->used[dev] -= bytes <= sim_self->used[dev] ? bytes : sim_self->used[dev];
    sim_shm_unlock(sim_shm);
}

/* Capacity is charged by whole pages, as backing memory is allocated. */
static uint64_t charge_of(uint64_t size)
{
    return sim_round_up(size, (uint64_t)sysconf(_SC_PAGESIZE));
}

CUresult sim_dev_alloc(struct sim_ctx *c, uint64_t size, enum sim_range_kind kind,
                       struct sim_range **out)
{
    struct sim_range *r;
    uint64_t charge = charge_of(size);
    CUresult res;

    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    if (charge > sim_device_capacity(c->dev))
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = calloc(1, sizeof(*r));
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = sim_capacity_charge(c->dev, charge)))
        goto err_free;
    res = CUDA_ERROR_OUT_OF_MEMORY;
    r->host = sim_backing_alloc(charge);
    if (!r->host)
        goto err_charge;
    /* A pool block is handed out again for any size up to its charge
     * (pool.c), so its addresses span the charge, not the first size. */
    r->va = sim_va_alloc(kind == SIM_R_POOL ? charge : size,
                         SIM_GRANULARITY > size ? SIM_ALLOC_ALIGN : SIM_GRANULARITY, 0);
    if (!r->va)
        goto err_backing;
    r->size = size;
    r->kind = kind;
    r->ctx = c;
    r->dev = c->dev;
    r->id = sim_next_buffer_id();
    r->charged = charge;
    r->map_len = charge;
    sim_map_wrlock();
    if (sim_map_insert(r)) {
        sim_map_unlock();
        goto err_va;
    }
    sim_map_unlock();
    *out = r;
    return CUDA_SUCCESS;

err_va:
    sim_va_free(r->va);
err_backing:
    sim_backing_free(r->host, charge);
err_charge:
    sim_capacity_release(c->dev, charge);
err_free:
    free(r);
    return res;
}

static void range_release(struct sim_range *r)
{
    if (r->kind == SIM_R_MANAGED)
        sim_managed_free(r);        /* releases what is charged page by page */
    sim_backing_free(r->host, r->map_len);
    if (r->charged)
        sim_capacity_release(r->dev, r->charged);
    if (r->share)
        sim_share_put(r->share - 1);    /* the last holder gives the bytes back */
    if (r->kind == SIM_R_DEVICE || r->kind == SIM_R_POOL)
        sim_va_free(r->va);
    free(r);
}

/* A free never waits for device work: a range a kernel, copy or memset still
 * holds goes, with its bytes, when the last of them is done with it. */
void sim_dev_free_range(struct sim_range *r)
{
    if (!sim_range_defer(r, range_release))
        range_release(r);
}
