/*
 * test_registry - the registry's bookkeeping without a driver: hints (skip
 * ranges cut and split correctly, dtype lookups, hints of freed memory
 * vanish) and the parts of an allocation a snapshot saves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/check.h"
#include "core/registry.h"

struct parts {
    CUdeviceptr va[16];
    size_t len[16];
    int n;
};

static int collect(CUdeviceptr va, size_t len, void *arg)
{
    struct parts *p = arg;

    if (p->n == 16)
        return -1;
    p->va[p->n] = va;
    p->len[p->n] = len;
    p->n++;
    return 0;
}

static struct parts unskipped(CUdeviceptr va, size_t len)
{
    struct parts p = { .n = 0 };

    CHECK(reg_for_each_unskipped(va, len, collect, &p) == 0);
    return p;
}

static void test_no_hints(void)
{
    struct parts p = unskipped(0x1000, 0x1000);

    CHECK(p.n == 1 && p.va[0] == 0x1000 && p.len[0] == 0x1000);
}

static void test_skip_middle_and_split(void)
{
    reg_lock();
    CHECK(reg_hint_skip(0x10000, 0x10000, 1) == 0);        /* skip [64K, 128K) */
    reg_unlock();
    struct parts p = unskipped(0x0, 0x30000);
    CHECK(p.n == 2);
    CHECK(p.va[0] == 0x0 && p.len[0] == 0x10000);
    CHECK(p.va[1] == 0x20000 && p.len[1] == 0x10000);

    /* Withdraw the middle of the skip: the hint splits in two. */
    reg_lock();
    CHECK(reg_hint_skip(0x14000, 0x4000, 0) == 0);
    reg_unlock();
    p = unskipped(0x0, 0x30000);
    CHECK(p.n == 3);
    CHECK(p.va[1] == 0x14000 && p.len[1] == 0x4000);

    /* The memory is freed: its hints vanish, everything is saved again. */
    reg_lock();
    reg_hints_forget(0x0, 0x30000);
    reg_unlock();
    p = unskipped(0x0, 0x30000);
    CHECK(p.n == 1 && p.len[0] == 0x30000);
}

static void test_overlapping_skips(void)
{
    reg_lock();
    CHECK(reg_hint_skip(0x1000, 0x3000, 1) == 0);
    CHECK(reg_hint_skip(0x2000, 0x3000, 1) == 0);          /* overlaps the first */
    reg_unlock();
    struct parts p = unskipped(0x0, 0x8000);
    CHECK(p.n == 2);
    CHECK(p.va[0] == 0x0 && p.len[0] == 0x1000);
    CHECK(p.va[1] == 0x5000 && p.len[1] == 0x3000);
    /* Entirely skipped: nothing to save. */
    p = unskipped(0x1000, 0x4000);
    CHECK(p.n == 0);
    reg_lock();
    reg_hints_forget(0x0, 0x8000);
    reg_unlock();
}

static void test_dtype(void)
{
    reg_lock();
    CHECK(reg_hint_dtype(0x100000, 0x1000, TCGPU_DTYPE_BF16) == 0);
    CHECK(reg_hint_dtype_at(0x100800) == TCGPU_DTYPE_BF16);
    CHECK(reg_hint_dtype_at(0x101000) == TCGPU_DTYPE_UNKNOWN);
    CHECK(reg_hint_dtype(0x100000, 0x800, TCGPU_DTYPE_FP32) == 0);   /* later wins */
    CHECK(reg_hint_dtype_at(0x100000) == TCGPU_DTYPE_FP32);
    CHECK(reg_hint_dtype_at(0x100800) == TCGPU_DTYPE_BF16);
    reg_hints_forget(0x100000, 0x1000);
    CHECK(reg_hint_dtype_at(0x100800) == TCGPU_DTYPE_UNKNOWN);
    reg_unlock();
}

static void test_phys_and_maps(void)
{
    CUmemAllocationProp prop = { 0 };
    struct reg_counts c;

    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    reg_lock();
    struct tc_phys *p = reg_phys_add(0x1234, 2u << 20, &prop, 0, TC_OWNER_USER);
    CHECK(p && p->refs == 1 && p->nmaps == 0);
    CHECK(reg_phys_find(p->id) == p);
    CHECK(reg_phys_find(0x1234) == NULL);                 /* the real handle is never exposed */
    struct tc_map *m = reg_map_add(0x200000, 2u << 20, 0, p);
    CHECK(m && p->nmaps == 1);
    CHECK(reg_map_containing(0x3fffff) == m);
    CHECK(reg_map_containing(0x400000) == NULL);
    CUmemAccessDesc d = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    reg_map_set_access(0x200000, 2u << 20, &d, 1);
    reg_map_set_access(0x200000, 2u << 20, &d, 1);        /* same device: replaced, not added */
    CHECK(m->naccess == 1);
    reg_counts(&c);
    CHECK(c.phys == 1 && c.maps == 1 && c.phys_bytes == (2u << 20) && c.tracked_bytes == (2u << 20));
    p->real = 0;                                           /* as after a suspend */
    reg_counts(&c);
    CHECK(c.phys_bytes == 0 && c.tracked_bytes == (2u << 20));
    reg_map_remove(m);
    CHECK(p->nmaps == 0);
    reg_phys_remove(p);
    reg_counts(&c);
    CHECK(c.phys == 0 && c.maps == 0);
    reg_unlock();
}

int main(void)
{
    test_no_hints();
    test_skip_middle_and_split();
    test_overlapping_skips();
    test_dtype();
    test_phys_and_maps();
    if (failures) {
        fprintf(stderr, "test_registry: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_registry: ok\n");
    return 0;
}
