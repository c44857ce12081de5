/*
 * objects.h - the driver objects a process holds besides memory: contexts,
 * streams, events and modules.
 *
 * Suspend in place keeps them all (only device memory is released), so the
 * registry needs little about them: the live contexts, to wait for their
 * work before draining, and counts for `gpuckpt status`. The interposer's
 * wrappers report creations and destructions here after the real call
 * succeeded. Thread-safe.
 */
#ifndef TCGPU_OBJECTS_H
#define TCGPU_OBJECTS_H

#include <stddef.h>
#include <cuda.h>

enum obj_kind { OBJ_CONTEXT, OBJ_STREAM, OBJ_EVENT, OBJ_MODULE, OBJ_KIND_COUNT };

void objects_ctx_created(CUcontext ctx, CUdevice dev, int primary);
/* A context destroyed, or a reference to a primary context released.
 * Returns 1 when the context is gone now (its last reference), else 0. */
int objects_ctx_destroyed(CUcontext ctx);
/* A primary context reset (cuDevicePrimaryCtxReset): gone, however many
 * references it had. Returns 1 when it was known. */
int objects_ctx_reset(CUcontext ctx);
void objects_count(enum obj_kind kind, int delta);

/* Counts for status. */
unsigned objects_get_count(enum obj_kind kind);

/*
 * Copies up to `max` live contexts (each with its device) into the arrays;
 * returns how many there are (may exceed max).
 */
size_t objects_contexts(CUcontext *ctxs, CUdevice *devs, size_t max);

#endif
