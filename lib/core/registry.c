/*
 * registry.c - physical allocations, mappings and hints; see registry.h.
 *
 * Lists are short (a physical allocation is at least 2 MiB: a 140 GB device
 * holds at most ~70 000, and real programs hold tens to hundreds), so plain
 * linked lists and sorted arrays are the right tools here.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "registry.h"

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct tc_phys *phys_list;
static struct tc_map *map_list;
static uint64_t next_phys_id = 1;

/* Program-visible handles look like this, which helps when reading dumps. */
#define TC_HANDLE_TAG 0x7c60000000000000ull
#define TC_HANDLE_TAG_MASK 0xffff000000000000ull

void reg_lock(void)
{
    pthread_mutex_lock(&registry_mutex);
}

void reg_unlock(void)
{
    pthread_mutex_unlock(&registry_mutex);
}

int reg_trylock(void)
{
    return pthread_mutex_trylock(&registry_mutex) == 0;
}

struct tc_phys *reg_phys_add(CUmemGenericAllocationHandle real, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags,
                             enum tc_owner owner)
{
    struct tc_phys *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->id = TC_HANDLE_TAG | next_phys_id++;
    p->real = real;
    p->size = size;
    p->prop = *prop;
    p->flags = flags;
    p->owner = owner;
    p->refs = 1;
    p->next = phys_list;
    phys_list = p;
    return p;
}

struct tc_phys *reg_phys_find(uint64_t id)
{
    for (struct tc_phys *p = phys_list; p; p = p->next)
        if (p->id == id)
            return p;
    return NULL;
}

int reg_phys_is_ours(uint64_t handle)
{
    return (handle & TC_HANDLE_TAG_MASK) == TC_HANDLE_TAG;
}

void reg_phys_remove(struct tc_phys *p)
{
    for (struct tc_phys **pp = &phys_list; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            free(p);
            return;
        }
    }
}

struct tc_map *reg_map_add(CUdeviceptr va, size_t size, size_t offset, struct tc_phys *p)
{
    struct tc_map *m = calloc(1, sizeof(*m));

    if (!m)
        return NULL;
    m->va = va;
    m->size = size;
    m->offset = offset;
    m->phys = p;
    m->next = map_list;
    map_list = m;
    p->nmaps++;
    return m;
}

struct tc_map *reg_map_find(CUdeviceptr va, size_t size)
{
    for (struct tc_map *m = map_list; m; m = m->next)
        if (m->va == va && m->size == size)
            return m;
    return NULL;
}

struct tc_map *reg_map_containing(CUdeviceptr va)
{
    for (struct tc_map *m = map_list; m; m = m->next)
        if (va >= m->va && va - m->va < m->size)
            return m;
    return NULL;
}

void reg_map_remove(struct tc_map *m)
{
    for (struct tc_map **pp = &map_list; *pp; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            m->phys->nmaps--;
            free(m);
            return;
        }
    }
}

static void map_merge_access(struct tc_map *m, const CUmemAccessDesc *d)
{
    for (int i = 0; i < m->naccess; i++) {
        if (m->access[i].location.type == d->location.type &&
            m->access[i].location.id == d->location.id) {
            m->access[i].flags = d->flags;
            return;
        }
    }
    if (m->naccess < TC_MAX_ACCESS)
        m->access[m->naccess++] = *d;
}

void reg_map_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    for (struct tc_map *m = map_list; m; m = m->next) {
        if (m->va >= va && m->va - va < size)
            for (size_t i = 0; i < count; i++)
                map_merge_access(m, &desc[i]);
    }
}

struct tc_phys *reg_phys_first(void)
{
    return phys_list;
}

struct tc_map *reg_map_first(void)
{
    return map_list;
}

/* --- managed memory ----------------------------------------------------- */

static struct tc_managed *managed_list;

int reg_managed_add(CUdeviceptr va, size_t size, int device, CUcontext ctx)
{
    struct tc_managed *m = calloc(1, sizeof(*m));

    if (!m)
        return -ENOMEM;
    m->va = va;
    m->size = size;
    m->device = device;
    m->ctx = ctx;
    m->next = managed_list;
    managed_list = m;
    return 0;
}

size_t reg_managed_remove(CUdeviceptr va)
{
    for (struct tc_managed **pp = &managed_list; *pp; pp = &(*pp)->next) {
        if ((*pp)->va == va) {
            struct tc_managed *m = *pp;
            size_t size = m->size;
            *pp = m->next;
            free(m);
            return size;
        }
    }
    return 0;
}

void reg_managed_forget_ctx(CUcontext ctx)
{
    for (struct tc_managed **pp = &managed_list; *pp;) {
        struct tc_managed *m = *pp;
        if (m->ctx != ctx) {
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        reg_hints_forget(m->va, m->size);
        free(m);
    }
}

struct tc_managed *reg_managed_first(void)
{
    return managed_list;
}

/* --- hints ----------------------------------------------------------------
 * Kept as one array of ranges; a later hint over the same bytes wins. */

enum hint_kind { HINT_SKIP = 1, HINT_DTYPE = 2 };

struct hint {
    CUdeviceptr va;
    size_t len;
    enum hint_kind kind;
    enum tcgpu_dtype dtype;
};

static struct hint *hints;
static size_t nhints, hints_cap;

/* Room for one more hint: 0 or -ENOMEM. */
static int hints_reserve(void)
{
    size_t cap;
    struct hint *n;

    if (nhints < hints_cap)
        return 0;
    cap = hints_cap ? hints_cap * 2 : 64;
    n = realloc(hints, cap * sizeof(*n));
    if (!n)
        return -ENOMEM;
    hints = n;
    hints_cap = cap;
    return 0;
}

/* Removes [va, va+len) of `kind` from the hint list, splitting ranges as needed. */
static int hints_cut(CUdeviceptr va, size_t len, enum hint_kind kind)
{
    CUdeviceptr end = va + len;

    for (size_t i = 0; i < nhints; i++) {
        struct hint *h = &hints[i];
        CUdeviceptr hend = h->va + h->len;

        if (h->kind != kind || hend <= va || h->va >= end)
            continue;
        if (h->va < va && hend > end) {            /* split in two */
            struct hint tail = { end, hend - end, h->kind, h->dtype };
            if (hints_reserve())
                return -ENOMEM;
            h = &hints[i];
            h->len = va - h->va;
            hints[nhints++] = tail;
        } else if (h->va < va) {
            h->len = va - h->va;
        } else if (hend > end) {
            h->len = hend - end;
            h->va = end;
        } else {
            hints[i--] = hints[--nhints];
        }
    }
    return 0;
}

static int hints_add(CUdeviceptr va, size_t len, enum hint_kind kind, enum tcgpu_dtype dtype)
{
    if (hints_reserve())
        return -ENOMEM;
    hints[nhints++] = (struct hint){ va, len, kind, dtype };
    return 0;
}

int reg_hint_skip(CUdeviceptr va, size_t len, int skip)
{
    int rc = hints_cut(va, len, HINT_SKIP);

    if (rc == 0 && skip)
        rc = hints_add(va, len, HINT_SKIP, TCGPU_DTYPE_UNKNOWN);
    return rc;
}

int reg_hint_dtype(CUdeviceptr va, size_t len, enum tcgpu_dtype dtype)
{
    int rc = hints_cut(va, len, HINT_DTYPE);

    if (rc == 0 && dtype != TCGPU_DTYPE_UNKNOWN)
        rc = hints_add(va, len, HINT_DTYPE, dtype);
    return rc;
}

/* Drops every hint that overlaps [va, va+len), whole. */
static void hints_drop_overlapping(CUdeviceptr va, size_t len)
{
    for (size_t i = 0; i < nhints; i++)
        if (hints[i].va < va + len && hints[i].va + hints[i].len > va)
            hints[i--] = hints[--nhints];
}

void reg_hints_forget(CUdeviceptr va, size_t len)
{
    /* A hint may reach past the freed range into live memory: cut it
     * exactly. Cutting can need memory (a split); if that fails, losing the
     * whole hint only costs image size, never correctness. */
    if (hints_cut(va, len, HINT_SKIP) || hints_cut(va, len, HINT_DTYPE))
        hints_drop_overlapping(va, len);
}

enum tcgpu_dtype reg_hint_dtype_at(CUdeviceptr va)
{
    for (size_t i = 0; i < nhints; i++)
        if (hints[i].kind == HINT_DTYPE && va >= hints[i].va && va - hints[i].va < hints[i].len)
            return hints[i].dtype;
    return TCGPU_DTYPE_UNKNOWN;
}

static int cmp_hint_va(const void *a, const void *b)
{
    const struct hint *x = a, *y = b;

    return x->va < y->va ? -1 : x->va > y->va;
}

int reg_for_each_unskipped(CUdeviceptr va, size_t size,
                           int (*fn)(CUdeviceptr va, size_t size, void *arg), void *arg)
{
    CUdeviceptr end = va + size, pos = va;
    struct hint *skips = NULL;
    size_t n = 0;
    int rc = 0;

    for (size_t i = 0; i < nhints; i++)
        if (hints[i].kind == HINT_SKIP && hints[i].va < end && hints[i].va + hints[i].len > va)
            n++;
    if (n) {
        skips = malloc(n * sizeof(*skips));
        if (!skips)
            return -ENOMEM;
        n = 0;
        for (size_t i = 0; i < nhints; i++)
            if (hints[i].kind == HINT_SKIP && hints[i].va < end && hints[i].va + hints[i].len > va)
                skips[n++] = hints[i];
        qsort(skips, n, sizeof(*skips), cmp_hint_va);
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (skips[i].va > pos)
            rc = fn(pos, skips[i].va - pos, arg);
        if (skips[i].va + skips[i].len > pos)
            pos = skips[i].va + skips[i].len;
    }
    if (rc == 0 && pos < end)
        rc = fn(pos, end - pos, arg);
    free(skips);
    return rc;
}

void reg_counts(struct reg_counts *c)
{
    memset(c, 0, sizeof(*c));
    for (struct tc_phys *p = phys_list; p; p = p->next) {
        c->phys++;
        if (p->real && p->owner != TC_OWNER_IMPORTED)   /* the exporter's to count */
            c->phys_bytes += p->size;
    }
    for (struct tc_map *m = map_list; m; m = m->next) {
        c->maps++;
        if (m->phys->owner == TC_OWNER_USER) {
            c->tracked_bytes += m->size;
            c->allocations++;
        }
    }
    for (struct tc_managed *m = managed_list; m; m = m->next) {
        c->tracked_bytes += m->size;
        c->allocations++;
    }
}
