/*
 * snap_internal.h - private to lib/core/snapshot.c and windows.c: the
 * snapshot's own structs and the calls between the two. No other file
 * includes it; the rest of tcgpu sees snapshot.h (and devsync.h).
 *
 * The regions and the snapshot are snapshot.c's; windows.c maps them for the
 * copies, so it needs their layout. They are here, not in snapshot.h, so
 * that ops.c keeps holding a struct snap it cannot look into.
 */
#ifndef TCGPU_CORE_SNAP_INTERNAL_H
#define TCGPU_CORE_SNAP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#include "engine/pipeline.h"
#include "registry.h"

/*
 * A range whose contents a snapshot saves. `va` is its identity (the
 * program's address; for a physical allocation of the program's that no
 * mapping shows whole, the address of a mapping at its start, or 0 when it
 * has none), and where hints apply. The bytes are copied at `copy_va`: va
 * itself, or a window of tcgpu's own onto the physical allocation
 * (docs/save-restore.md, "Memory the program cannot reach").
 */
struct region {
    CUdeviceptr va;
    size_t size;
    uint64_t id;                      /* allocation id in the image */
    uint32_t kind;                    /* enum tcgpu_alloc_kind */
    uint32_t dtype;
    int device;
    const char *site;
    struct tc_phys *phys;             /* windowed: the program's physical allocation */
    CUdeviceptr copy_va;              /* where the engine copies it */
    CUdeviceptr win_va;               /* windowed: our reserved VA (0: not reserved yet) */
    int windowed, win_mapped;
};

struct snap {
    struct region *r;
    size_t n, cap;
    uint64_t bytes;
    uint64_t stored;
    struct pipe_store *store;         /* host copy (host mode, or before an image) */
    int keep_store;                   /* its memory serves the next suspend (hostkeep.h) */
    char *image_dir;                  /* saved to this image (image mode) */
    char *written_dir;                /* ... where it was written (image_dir may move) */
    uint8_t image_id[16];             /* its manifest checksum: the image's identity */
    uint64_t image_created_ns;        /* when it was committed */
    char *parent_dir;                 /* incremental: the parent image */
    struct pipe_stats stats;          /* of the last drain or refill */
};

/* --- windows.c: our own mappings of the program's physical memory ------- */

/* Maps every window (the physical memory must exist). All or none: 0, or
 * -ENOMEM/-EIO with the message set and no window mapped. */
int windows_open(struct snap *s);

/* Unmaps every window; the reservations stay (windows_free). */
void windows_close(struct snap *s);

/* Unmaps every window and frees its reserved VA (with the snapshot). */
void windows_free(struct snap *s);

#endif
