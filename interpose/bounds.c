/* The driver's range checks on copies and memsets of tcgpu's memory; see bounds.h. */
#include <stdint.h>

#include "bounds.h"
#include "core/devmem.h"

bool tcgpu_range_ok(CUdeviceptr ptr, size_t len)
{
    return devmem_check_range(ptr, len) == 0;
}

bool tcgpu_range2d_ok(CUdeviceptr ptr, size_t pitch, size_t width, size_t height)
{
    if (width == 0 || height == 0)
        return true;
    /* rows wider than the pitch, or a span that overflows: the driver's
     * own checks refuse those, whatever the memory */
    if (height > 1 && (width > pitch || height - 1 > (SIZE_MAX - width) / pitch))
        return true;
    return tcgpu_range_ok(ptr, pitch * (height - 1) + width);
}

/* One side of a 2D/3D copy: device memory at base + offsets, `depth` slices
 * of `rows` rows of `width` bytes. */
static bool side_ok(CUmemorytype type, CUdeviceptr base, size_t x, size_t y, size_t z,
                    size_t pitch, size_t slice_rows, size_t width, size_t rows, size_t depth)
{
    size_t slice, first, span;

    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return true;                    /* host memory, arrays: not ours */
    if (width == 0 || rows == 0 || depth == 0)
        return true;
    if (depth > 1 && slice_rows < rows)
        return true;                    /* the driver refuses a bad layout itself */
    if (pitch && (slice_rows > SIZE_MAX / pitch))
        return true;
    slice = pitch * slice_rows;
    if ((pitch && (y > SIZE_MAX / pitch || rows - 1 > SIZE_MAX / pitch)) ||
        (slice && (z > SIZE_MAX / slice || depth - 1 > SIZE_MAX / slice)))
        return true;
    first = z * slice + y * pitch + x;
    span = (depth - 1) * slice + (rows - 1) * pitch + width;
    if (first < x || span < width || base + first < base)
        return true;
    return tcgpu_range_ok(base + first, span);
}

bool tcgpu_copy2d_ok(const CUDA_MEMCPY2D_v2 *p)
{
    if (!p)
        return true;                    /* the driver answers a NULL descriptor */
    return side_ok(p->srcMemoryType, p->srcDevice, p->srcXInBytes, p->srcY, 0, p->srcPitch,
                   p->Height, p->WidthInBytes, p->Height, 1) &&
           side_ok(p->dstMemoryType, p->dstDevice, p->dstXInBytes, p->dstY, 0, p->dstPitch,
                   p->Height, p->WidthInBytes, p->Height, 1);
}

/* Both sides of a 3D copy descriptor (plain or peer: the same fields). */
#define SIDES_3D_OK(p)                                                                     \
    (side_ok((p)->srcMemoryType, (p)->srcDevice, (p)->srcXInBytes, (p)->srcY, (p)->srcZ,   \
             (p)->srcPitch, (p)->srcHeight, (p)->WidthInBytes, (p)->Height, (p)->Depth) && \
     side_ok((p)->dstMemoryType, (p)->dstDevice, (p)->dstXInBytes, (p)->dstY, (p)->dstZ,   \
             (p)->dstPitch, (p)->dstHeight, (p)->WidthInBytes, (p)->Height, (p)->Depth))

bool tcgpu_copy3d_ok(const CUDA_MEMCPY3D_v2 *p)
{
    return !p || SIDES_3D_OK(p);
}

bool tcgpu_copy3d_peer_ok(const CUDA_MEMCPY3D_PEER_v1 *p)
{
    return !p || SIDES_3D_OK(p);
}

bool tcgpu_batch_ok(const CUdeviceptr *dsts, const CUdeviceptr *srcs, const size_t *sizes,
                    size_t count)
{
    if (!dsts || !srcs || !sizes)
        return true;
    for (size_t i = 0; i < count; i++)
        if (!tcgpu_range_ok(dsts[i], sizes[i]) || !tcgpu_range_ok(srcs[i], sizes[i]))
            return false;
    return true;
}
