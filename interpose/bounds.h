/*
 * bounds.h - the range checks the driver makes on copies and memsets, for
 * memory tcgpu serves.
 *
 * tcgpu carves small cuMemAlloc blocks out of shared arenas (lib/core/devmem.c),
 * so to the driver a copy that runs past the end of one allocation into its
 * neighbour is a copy inside one mapping, and it would let it through. The
 * driver refuses it for its own cuMemAlloc memory (CUDA_ERROR_INVALID_VALUE),
 * and so must we: the generated wrappers of the copies and memsets named in
 * interpose/bounds.list call these before the real call
 * (docs/interposition.md, "Range checks").
 *
 * Each returns true when the arguments may go to the driver: no part of them
 * starts in tcgpu's memory, or each range that does lies inside one live
 * allocation. Pointers the driver owns are left to it. Thread-safe.
 */
#ifndef TCGPU_INTERPOSE_BOUNDS_H
#define TCGPU_INTERPOSE_BOUNDS_H

#include <stdbool.h>
#include <stddef.h>
#include <cuda.h>

/* [ptr, ptr+len): inside one allocation, or not ours. */
bool tcgpu_range_ok(CUdeviceptr ptr, size_t len);

/* A pitched range of `height` rows of `width` bytes, `pitch` apart (a 2D
 * memset; widths in bytes). Height or width 0 touch nothing. */
bool tcgpu_range2d_ok(CUdeviceptr ptr, size_t pitch, size_t width, size_t height);

/* Each device side of a 2D / 3D / 3D peer copy. */
bool tcgpu_copy2d_ok(const CUDA_MEMCPY2D_v2 *p);
bool tcgpu_copy3d_ok(const CUDA_MEMCPY3D_v2 *p);
bool tcgpu_copy3d_peer_ok(const CUDA_MEMCPY3D_PEER_v1 *p);

/* Every pair of a batch of copies (cuMemcpyBatchAsync). */
bool tcgpu_batch_ok(const CUdeviceptr *dsts, const CUdeviceptr *srcs, const size_t *sizes,
                    size_t count);

#endif
