/*
 * snapshot.h - the snapshot engine: what a checkpoint saves, and how device
 * memory is taken down and put back at the same addresses.
 *
 * A snapshot is the list of *regions* to save (live cuMemAlloc-family
 * allocations and the program's own VMM mappings, less ranges hinted as not
 * worth saving) plus their contents, held either in host memory (raw) or in
 * an image directory. ops.c drives it; every function here runs with the API
 * gate closed, so nothing in the registry changes underneath.
 *
 * Functions return 0 or -errno and, on failure, set the operation's message
 * (common/errmsg.h) naming the object and the driver's error.
 */
#ifndef TCGPU_SNAPSHOT_H
#define TCGPU_SNAPSHOT_H

#include <stdint.h>

#include "common/names.h"

/*
 * Progress of a long operation, for gpuckpt's progress display; may be NULL.
 * Each phase is reported first with done = 0 (when it starts), then as bytes
 * move (total 0: a phase without a byte count, such as release).
 */
typedef void (*tcgpu_progress_fn)(enum tcgpu_phase phase, uint64_t done_bytes, uint64_t total_bytes,
                                  void *arg);

struct snap;

/*
 * Lists the regions to save. -ENOTSUP when the process holds state that
 * cannot be restored (the message names the call that made it). The caller
 * owns *out (snap_free).
 *
 * SNAP_MANAGED adds managed memory. A checkpoint wants it; a suspend must
 * not: it cannot release managed memory anyway, and refilling it on resume
 * would overwrite what the program's host threads wrote to it meanwhile.
 */
#define SNAP_MANAGED 0x1u
/* SNAP_SUSPEND: for a suspend, where memory shared by CUDA IPC does not
 * refuse (ipcmem.h: the suspend releases and re-opens it). */
#define SNAP_SUSPEND 0x2u
int snap_collect(struct snap **out, unsigned flags);

/* Copies every region to host memory (the suspend-to-RAM path). */
int snap_save_host(struct snap *s, tcgpu_progress_fn progress, void *arg);

/*
 * Writes every region to a new image at `dir` (complete or absent): from the
 * host copy when snap_save_host made one (which is then freed: the image
 * holds the bytes), else streamed from the device.
 */
int snap_save_image(struct snap *s, const char *dir, tcgpu_progress_fn progress, void *arg);

/* Makes the next snap_save_image incremental against the image at
 * `parent_dir` (NULL: a full image). 0 or -ENOMEM. */
int snap_set_parent(struct snap *s, const char *parent_dir);

/* Compresses the host copy in memory, in the background (resume waits). */
void snap_compress_host(struct snap *s);

/*
 * Unmaps every mapping and releases every physical allocation: the device
 * memory is free for others, the addresses stay reserved. On failure part of
 * it may be released: the caller puts it back with snap_rebuild() (the
 * contents must already be saved).
 */
int snap_release(struct snap *s);

/*
 * Re-creates the physical memory, maps it at the same addresses and refills
 * it from the saved contents (an image is verified whole first). On failure
 * everything this call created is released again: the process stays off the
 * device, safely, and a later call may succeed (-ENOMEM: no room yet).
 */
int snap_rebuild(struct snap *s, tcgpu_progress_fn progress, void *arg);

/*
 * The image a snapshot was saved to, or NULL for a host-memory snapshot; and
 * where to find it from now on, when its owner moved it (gpuckpt save writes
 * into a temporary directory and renames it; CRIU restores the process with
 * the old path in its memory). snap_rebuild still checks that the image there
 * is the one the suspend wrote (its identity, the manifest checksum) and
 * holds this process's allocations. Returns 0, -EINVAL (a host-memory
 * snapshot, or dir not absolute), -ENOMEM.
 */
const char *snap_image_dir(const struct snap *s);
int snap_set_image_dir(struct snap *s, const char *dir);

/*
 * After a successful resume from the image a suspend wrote: removes it when
 * it is still where the suspend wrote it (it was this process's swap, and
 * the process has moved on: it could only mislead). An image found
 * elsewhere (snap_set_image_dir: moved into a gpuckpt save, found again by
 * a CRIU restore) belongs to that save, which must stay restorable: it is
 * left. Returns 0, or -errno when it could not be removed (logged; the
 * resume stands). docs/save-restore.md, "After a resume".
 */
int snap_discard_image(struct snap *s);

/* Bytes of the regions, and bytes their saved form takes (host or image). */
uint64_t snap_bytes(const struct snap *s);
uint64_t snap_stored_bytes(const struct snap *s);

void snap_free(struct snap *s);

#endif
