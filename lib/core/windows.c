/*
 * windows.c - our own mappings of the program's physical memory, for the
 * copies of a snapshot (snap_internal.h).
 *
 * Apart from snapshot.c because it is a mechanism with a life of its own
 * (reserved while the snapshot lives, mapped only around each drain or
 * refill) that snapshot.c only opens and closes; which memory needs a
 * window is snapshot.c's decision (add_user_memory).
 */
#include <errno.h>

#include "driver/driver.h"
#include "snap_internal.h"
#include "common/errmsg.h"

/* --- windows: our own mappings of the program's physical memory ----------
 *
 * A window reserves VA of our own the size of the physical allocation, maps
 * it there and gives its device read/write access, for the copies only; the
 * program's mappings are never touched. The reservation is kept while the
 * snapshot lives (a host copy refills at the addresses it was drained from)
 * and freed with it; the mapping is taken down after each drain or refill,
 * before the physical memory is released. */

static int window_map(struct region *r)
{
    CUmemAccessDesc acc = { .location = r->phys->prop.location,
                            .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUresult rc = CUDA_SUCCESS;

    if (!r->win_va)
        rc = TCGPU_REAL(cuMemAddressReserve)(&r->win_va, r->size, 0, 0, 0);
    if (rc == CUDA_SUCCESS && (rc = TCGPU_REAL(cuMemMap)(r->win_va, r->size, 0, r->phys->real, 0))
        == CUDA_SUCCESS) {
        if ((rc = TCGPU_REAL(cuMemSetAccess)(r->win_va, r->size, &acc, 1)) == CUDA_SUCCESS) {
            r->win_mapped = 1;
            r->copy_va = r->win_va;
            return 0;
        }
        TCGPU_REAL(cuMemUnmap)(r->win_va, r->size);
    }
    errmsg_set("cannot map physical allocation %#llx (%zu bytes) for the copy: %s",
               (unsigned long long)r->id, r->size, cu_error_name(rc));
    return rc == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

void windows_close(struct snap *s)
{
    for (size_t i = 0; i < s->n; i++) {
        struct region *r = &s->r[i];
        if (r->win_mapped) {
            TCGPU_REAL(cuMemUnmap)(r->win_va, r->size);
            r->win_mapped = 0;
        }
    }
}

/* Maps every window (the physical memory must exist). All or none. */
int windows_open(struct snap *s)
{
    for (size_t i = 0; i < s->n; i++) {
        int rc = s->r[i].windowed && !s->r[i].win_mapped ? window_map(&s->r[i]) : 0;
        if (rc) {
            windows_close(s);
            return rc;
        }
    }
    return 0;
}

void windows_free(struct snap *s)
{
    windows_close(s);
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i].win_va) {
            TCGPU_REAL(cuMemAddressFree)(s->r[i].win_va, s->r[i].size);
            s->r[i].win_va = 0;
        }
    }
}
