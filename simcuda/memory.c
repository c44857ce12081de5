/*
 * memory.c - allocations, copies, memsets, host memory, pointer attributes.
 *
 * Copies and memsets are stream operations executed by a worker; synchronous
 * variants go to the default stream (legacy, or the thread's per-thread
 * stream for the _ptds ABI) and wait. Arguments are checked when the call is
 * made (unmapped device memory: CUDA_ERROR_INVALID_VALUE); when the operation
 * runs, the memory is translated again, and memory that has gone meanwhile is
 * a device fault (sticky CUDA_ERROR_ILLEGAL_ADDRESS), as on a GPU.
 */
#include "sim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- execution on the workers ---------------------------------------------- */

/* Host view for n bytes at addr on side dev (device: translated and pinned
 * in pins; host: as is). Returns the bytes available contiguously, 0 if the
 * address is not mapped. The operation holds no lock while it moves bytes:
 * what it pinned stays until it ends (sim.h, "Pins"). */
static uint64_t side_view(struct sim_pins *pins, uint64_t addr, bool dev, uint64_t n,
                          unsigned char **view)
{
    uint64_t got;

    if (!dev) {
        *view = (unsigned char *)(uintptr_t)addr;
        return n;
    }
    got = sim_pins_span(pins, addr, view);
    return got < n ? got : n;
}

static int copy_row(struct sim_pins *pins, uint64_t d, bool ddev, uint64_t s, bool sdev, uint64_t n)
{
    while (n) {
        unsigned char *dp, *sp;
        uint64_t dn = side_view(pins, d, ddev, n, &dp);
        uint64_t sn = side_view(pins, s, sdev, n, &sp);
        uint64_t k = dn < sn ? dn : sn;

        if (!k)
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        memmove(dp, sp, k);
        d += k;
        s += k;
        n -= k;
    }
    return 0;
}

int sim_exec_copy(struct sim_op *op)
{
    const struct sim_copy *c = &op->u.copy;
    uint64_t depth = c->depth ? c->depth : 1;
    struct sim_pins pins;
    int res = 0;

    sim_pins_init(&pins);
    for (uint64_t z = 0; z < depth && !res; z++) {
        uint64_t dz = z * c->dheight * c->dpitch, sz = z * c->sheight * c->spitch;

        for (uint64_t y = 0; y < c->height && !res; y++)
            res = copy_row(&pins, c->dst + dz + y * c->dpitch, c->dst_dev,
                           c->src + sz + y * c->spitch, c->src_dev, c->width);
    }
    sim_pins_release(&pins);
    return res;
}

static void fill(unsigned char *p, uint64_t count, unsigned elem, uint32_t v)
{
    switch (elem) {
    case 1:
        memset(p, (int)(v & 0xff), count);
        break;
    case 2:
        for (uint64_t i = 0; i < count; i++)
            memcpy(p + 2 * i, &(uint16_t){ (uint16_t)v }, 2);
        break;
    default:
        for (uint64_t i = 0; i < count; i++)
            memcpy(p + 4 * i, &v, 4);
        break;
    }
}

int sim_exec_memset(struct sim_op *op)
{
    unsigned elem = op->u.set.elem;
    struct sim_pins pins;
    int res = 0;

    sim_pins_init(&pins);
    for (uint64_t y = 0; y < op->u.set.height && !res; y++) {
        uint64_t a = op->u.set.dst + y * op->u.set.pitch;
        uint64_t left = op->u.set.width * elem;

        while (left) {
            unsigned char *p;
            uint64_t n = side_view(&pins, a, true, left, &p);

            n -= n % elem;
            if (!n) {
                res = CUDA_ERROR_ILLEGAL_ADDRESS;
                break;
            }
            fill(p, n / elem, elem, op->u.set.value);
            a += n;
            left -= n;
        }
    }
    sim_pins_release(&pins);
    return res;
}

/* ---- argument checks ------------------------------------------------------ */

/* Device memory, or the address range of a graph allocation (allocated or
 * not: work queued after the graph launch may use it). */
bool sim_is_device_address(uint64_t addr)
{
    bool r;

    sim_map_rdlock();
    r = sim_map_find(addr) != NULL;
    sim_map_unlock();
    return r || sim_gmem_covered(addr, 1);
}

#define is_device sim_is_device_address

/* A pitched range is checked whole, from its first byte to its last row's
 * end, as the driver checks it: every row inside the one allocation (a
 * last row that spills into the next allocation is refused). */
bool sim_rows_covered(uint64_t a, uint64_t width, uint64_t height, uint64_t pitch)
{
    uint64_t span;
    bool ok;

    if (!width || !height)
        return true;
    if (height > 1 && (pitch < width || (height - 1) > (UINT64_MAX - width) / pitch))
        return false;
    span = height > 1 ? pitch * (height - 1) + width : width;
    sim_map_rdlock();
    ok = sim_map_covered(a, span) || sim_gmem_covered(a, span);
    sim_map_unlock();
    return ok;
}

#define rows_covered sim_rows_covered

/* ---- copies ---------------------------------------------------------------- */

/* Every row of every slice of one side inside device memory. */
static bool side_covered(uint64_t a, const struct sim_copy *c, uint64_t pitch, uint64_t rows)
{
    uint64_t depth = c->depth ? c->depth : 1;

    for (uint64_t z = 0; z < depth; z++)
        if (!rows_covered(a + z * rows * pitch, c->width, c->height, pitch))
            return false;
    return true;
}

CUresult sim_copy_check(const struct sim_copy *a)
{
    if ((a->dst_dev && !side_covered(a->dst, a, a->dpitch, a->dheight)) ||
        (a->src_dev && !side_covered(a->src, a, a->spitch, a->sheight)))
        return CUDA_ERROR_INVALID_VALUE;
    if ((!a->dst_dev && !a->dst) || (!a->src_dev && !a->src))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Queue a copy on hs (sync: wait for it). pt: per-thread default stream ABI. */
static CUresult do_copy(const struct sim_copy *a, CUstream hs, bool sync, bool pt)
{
    struct sim_stream *s;
    struct sim_op *op;
    CUresult r;

    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    if (!a->width || !a->height)
        return CUDA_SUCCESS;
    if ((r = sim_copy_check(a)))
        return r;
    if (!(op = sim_op_new(SIM_OP_COPY)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy = *a;
    if (!op->u.copy.depth)
        op->u.copy.depth = 1;
    return sync ? sim_submit_sync(s, op) : sim_submit(s, op, NULL, 0, NULL);
}

CUresult sim_copy_submit(const struct sim_copy *a, CUstream hs, bool sync, bool pt)
{
    return do_copy(a, hs, sync, pt);
}

static CUresult copy1d(uint64_t dst, bool ddev, uint64_t src, bool sdev, size_t n,
                       CUstream hs, bool sync, bool pt)
{
    struct sim_copy a = { dst, src, ddev, sdev, n, 1, n, n, 1, 1, 1 };

    SIM_BEGIN();
    return do_copy(&a, hs, sync, pt);
}

/* Unified addressing: the direction follows from the addresses. */
static CUresult copy_unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hs, bool sync, bool pt)
{
    SIM_BEGIN();
    return copy1d(dst, is_device(dst), src, is_device(src), n, hs, sync, pt);
}

#define H(p) ((uint64_t)(uintptr_t)(p))

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { return copy1d(d, true, H(h), false, n, NULL, true, false); }
SIM_EXPORT(cuMemcpyHtoD_v2);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *h, size_t n) { return copy1d(d, true, H(h), false, n, NULL, true, true); }
SIM_EXPORT(cuMemcpyHtoD_v2_ptds);
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { return copy1d(H(h), false, d, true, n, NULL, true, false); }
SIM_EXPORT(cuMemcpyDtoH_v2);
CUresult cuMemcpyDtoH_v2_ptds(void *h, CUdeviceptr d, size_t n) { return copy1d(H(h), false, d, true, n, NULL, true, true); }
SIM_EXPORT(cuMemcpyDtoH_v2_ptds);
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy1d(d, true, s, true, n, NULL, true, false); }
SIM_EXPORT(cuMemcpyDtoD_v2);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy1d(d, true, s, true, n, NULL, true, true); }
SIM_EXPORT(cuMemcpyDtoD_v2_ptds);
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_unified(d, s, n, NULL, true, false); }
SIM_EXPORT(cuMemcpy);
CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy_unified(d, s, n, NULL, true, true); }
SIM_EXPORT(cuMemcpy_ptds);

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, CUstream s) { return copy1d(d, true, H(h), false, n, s, false, false); }
SIM_EXPORT(cuMemcpyHtoDAsync_v2);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *h, size_t n, CUstream s) { return copy1d(d, true, H(h), false, n, s, false, true); }
SIM_EXPORT(cuMemcpyHtoDAsync_v2_ptsz);
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream s) { return copy1d(H(h), false, d, true, n, s, false, false); }
SIM_EXPORT(cuMemcpyDtoHAsync_v2);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *h, CUdeviceptr d, size_t n, CUstream s) { return copy1d(H(h), false, d, true, n, s, false, true); }
SIM_EXPORT(cuMemcpyDtoHAsync_v2_ptsz);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr sp, size_t n, CUstream s) { return copy1d(d, true, sp, true, n, s, false, false); }
SIM_EXPORT(cuMemcpyDtoDAsync_v2);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr sp, size_t n, CUstream s) { return copy1d(d, true, sp, true, n, s, false, true); }
SIM_EXPORT(cuMemcpyDtoDAsync_v2_ptsz);
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr sp, size_t n, CUstream s) { return copy_unified(d, sp, n, s, false, false); }
SIM_EXPORT(cuMemcpyAsync);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr sp, size_t n, CUstream s) { return copy_unified(d, sp, n, s, false, true); }
SIM_EXPORT(cuMemcpyAsync_ptsz);

/* One side of a CUDA_MEMCPY2D: its address and whether it is device memory. */
static CUresult side_2d(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr,
                        size_t x, size_t y, size_t pitch, uint64_t *addr, bool *is_dev)
{
    uint64_t base;

    switch (t) {
    case CU_MEMORYTYPE_HOST:
        base = H(host);
        *is_dev = false;
        break;
    case CU_MEMORYTYPE_DEVICE:
        base = dev;
        *is_dev = true;
        break;
    case CU_MEMORYTYPE_UNIFIED:
        base = dev;
        *is_dev = is_device(dev);
        break;
    case CU_MEMORYTYPE_ARRAY:
        (void)arr;
        return CUDA_ERROR_NOT_SUPPORTED;    /* CUDA arrays are not simulated */
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    *addr = base + y * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream hs, bool sync, bool pt)
{
    struct sim_copy a = { 0 };
    CUresult r;

    SIM_BEGIN();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = side_2d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                     p->srcY, p->srcPitch, &a.src, &a.src_dev)) ||
        (r = side_2d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                     p->dstY, p->dstPitch, &a.dst, &a.dst_dev)))
        return r;
    if ((p->Height > 1 && (p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch)))
        return CUDA_ERROR_INVALID_VALUE;
    a.width = p->WidthInBytes;
    a.height = p->Height;
    a.spitch = p->Height > 1 ? p->srcPitch : p->WidthInBytes;
    a.dpitch = p->Height > 1 ? p->dstPitch : p->WidthInBytes;
    a.depth = 1;
    return do_copy(&a, hs, sync, pt);
}

CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy2d(p, NULL, true, false); }
SIM_EXPORT(cuMemcpy2D_v2);
SIM_PARTIAL(cuMemcpy2D_v2, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { return copy2d(p, NULL, true, true); }
SIM_EXPORT(cuMemcpy2D_v2_ptds);
SIM_PARTIAL(cuMemcpy2D_v2_ptds, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy2d(p, NULL, true, false); }
SIM_EXPORT(cuMemcpy2DUnaligned_v2);
SIM_PARTIAL(cuMemcpy2DUnaligned_v2, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p) { return copy2d(p, NULL, true, true); }
SIM_EXPORT(cuMemcpy2DUnaligned_v2_ptds);
SIM_PARTIAL(cuMemcpy2DUnaligned_v2_ptds, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { return copy2d(p, s, false, false); }
SIM_EXPORT(cuMemcpy2DAsync_v2);
SIM_PARTIAL(cuMemcpy2DAsync_v2, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s) { return copy2d(p, s, false, true); }
SIM_EXPORT(cuMemcpy2DAsync_v2_ptsz);
SIM_PARTIAL(cuMemcpy2DAsync_v2_ptsz, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");

CUresult sim_copy_from_3d(const CUDA_MEMCPY3D *p, struct sim_copy *out)
{
    CUresult r;

    if (!p || p->srcLOD || p->dstLOD || p->reserved0 || p->reserved1)
        return CUDA_ERROR_INVALID_VALUE;
    memset(out, 0, sizeof(*out));
    /* A slice is srcHeight rows of srcPitch bytes (pitch only matters beyond one row). */
    if ((r = side_2d(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                     p->srcY + p->srcZ * p->srcHeight, p->srcPitch, &out->src, &out->src_dev)) ||
        (r = side_2d(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                     p->dstY + p->dstZ * p->dstHeight, p->dstPitch, &out->dst, &out->dst_dev)))
        return r;
    if ((p->Height > 1 || p->Depth > 1) && (p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->Depth > 1 && (p->Height > p->srcHeight || p->Height > p->dstHeight))
        return CUDA_ERROR_INVALID_VALUE;
    out->width = p->WidthInBytes;
    out->height = p->Height;
    out->depth = p->Depth ? p->Depth : 1;
    out->spitch = p->Height > 1 || p->Depth > 1 ? p->srcPitch : p->WidthInBytes;
    out->dpitch = p->Height > 1 || p->Depth > 1 ? p->dstPitch : p->WidthInBytes;
    out->sheight = p->srcHeight;
    out->dheight = p->dstHeight;
    return CUDA_SUCCESS;
}

static CUresult copy3d(const CUDA_MEMCPY3D *p, CUstream hs, bool sync, bool pt)
{
    struct sim_copy a;
    CUresult r;

    SIM_BEGIN();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = sim_copy_from_3d(p, &a)))
        return r;
    if (!a.depth || !a.height || !a.width)
        return CUDA_SUCCESS;
    return do_copy(&a, hs, sync, pt);
}

CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy3d(p, NULL, true, false); }
SIM_EXPORT(cuMemcpy3D_v2);
SIM_PARTIAL(cuMemcpy3D_v2, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p) { return copy3d(p, NULL, true, true); }
SIM_EXPORT(cuMemcpy3D_v2_ptds);
SIM_PARTIAL(cuMemcpy3D_v2_ptds, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) { return copy3d(p, s, false, false); }
SIM_EXPORT(cuMemcpy3DAsync_v2);
SIM_PARTIAL(cuMemcpy3DAsync_v2, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s) { return copy3d(p, s, false, true); }
SIM_EXPORT(cuMemcpy3DAsync_v2_ptsz);
SIM_PARTIAL(cuMemcpy3DAsync_v2_ptsz, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");

/* ---- memsets ------------------------------------------------------------------ */

static CUresult do_memset(CUdeviceptr dst, size_t pitch, uint32_t v, unsigned elem,
                          size_t width, size_t height, CUstream hs, bool sync, bool pt)
{
    struct sim_stream *s;
    struct sim_op *op;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_stream_get(hs, pt, &s)))
        return r;
    if (!width || !height)
        return CUDA_SUCCESS;
    if (dst % elem || (height > 1 && (pitch < width * elem || pitch % elem)))
        return CUDA_ERROR_INVALID_VALUE;
    if (!rows_covered(dst, width * elem, height, pitch))
        return CUDA_ERROR_INVALID_VALUE;
    if (!(op = sim_op_new(SIM_OP_MEMSET)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = dst;
    op->u.set.value = v;
    op->u.set.elem = elem;
    op->u.set.width = width;
    op->u.set.height = height;
    op->u.set.pitch = pitch;
    return sync ? sim_submit_sync(s, op) : sim_submit(s, op, NULL, 0, NULL);
}

#define MEMSET_1D(name, T, elem, sync, pt)                                       \
    CUresult name(CUdeviceptr d, T v, size_t n)                                  \
    {                                                                            \
        return do_memset(d, n * (elem), v, elem, n, 1, NULL, sync, pt);          \
    }                                                                            \
    SIM_EXPORT(name)
#define MEMSET_1D_ASYNC(name, T, elem, pt)                                       \
    CUresult name(CUdeviceptr d, T v, size_t n, CUstream s)                      \
    {                                                                            \
        return do_memset(d, n * (elem), v, elem, n, 1, s, false, pt);            \
    }                                                                            \
    SIM_EXPORT(name)
#define MEMSET_2D(name, T, elem, sync, pt)                                       \
    CUresult name(CUdeviceptr d, size_t pitch, T v, size_t w, size_t h)          \
    {                                                                            \
        return do_memset(d, pitch, v, elem, w, h, NULL, sync, pt);               \
    }                                                                            \
    SIM_EXPORT(name)
#define MEMSET_2D_ASYNC(name, T, elem, pt)                                       \
    CUresult name(CUdeviceptr d, size_t pitch, T v, size_t w, size_t h, CUstream s) \
    {                                                                            \
        return do_memset(d, pitch, v, elem, w, h, s, false, pt);                 \
    }                                                                            \
    SIM_EXPORT(name)

MEMSET_1D(cuMemsetD8_v2, unsigned char, 1, true, false);
MEMSET_1D(cuMemsetD8_v2_ptds, unsigned char, 1, true, true);
MEMSET_1D(cuMemsetD16_v2, unsigned short, 2, true, false);
MEMSET_1D(cuMemsetD16_v2_ptds, unsigned short, 2, true, true);
MEMSET_1D(cuMemsetD32_v2, unsigned int, 4, true, false);
MEMSET_1D(cuMemsetD32_v2_ptds, unsigned int, 4, true, true);
MEMSET_1D_ASYNC(cuMemsetD8Async, unsigned char, 1, false);
MEMSET_1D_ASYNC(cuMemsetD8Async_ptsz, unsigned char, 1, true);
MEMSET_1D_ASYNC(cuMemsetD16Async, unsigned short, 2, false);
MEMSET_1D_ASYNC(cuMemsetD16Async_ptsz, unsigned short, 2, true);
MEMSET_1D_ASYNC(cuMemsetD32Async, unsigned int, 4, false);
MEMSET_1D_ASYNC(cuMemsetD32Async_ptsz, unsigned int, 4, true);
MEMSET_2D(cuMemsetD2D8_v2, unsigned char, 1, true, false);
MEMSET_2D(cuMemsetD2D8_v2_ptds, unsigned char, 1, true, true);
MEMSET_2D(cuMemsetD2D16_v2, unsigned short, 2, true, false);
MEMSET_2D(cuMemsetD2D16_v2_ptds, unsigned short, 2, true, true);
MEMSET_2D(cuMemsetD2D32_v2, unsigned int, 4, true, false);
MEMSET_2D(cuMemsetD2D32_v2_ptds, unsigned int, 4, true, true);
MEMSET_2D_ASYNC(cuMemsetD2D8Async, unsigned char, 1, false);
MEMSET_2D_ASYNC(cuMemsetD2D8Async_ptsz, unsigned char, 1, true);
MEMSET_2D_ASYNC(cuMemsetD2D16Async, unsigned short, 2, false);
MEMSET_2D_ASYNC(cuMemsetD2D16Async_ptsz, unsigned short, 2, true);
MEMSET_2D_ASYNC(cuMemsetD2D32Async, unsigned int, 4, false);
MEMSET_2D_ASYNC(cuMemsetD2D32Async_ptsz, unsigned int, 4, true);

/* ---- device allocations ----------------------------------------------------- */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct sim_ctx *c;
    struct sim_range *r;
    CUresult res;

    SIM_BEGIN();
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_ctx_current(&c)) || (res = sim_capture_unsafe_call()))
        return res;
    if (!bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_dev_alloc(c, bytesize, SIM_R_DEVICE, &r)))
        return res;
    *dptr = r->va;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemAlloc_v2);

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                            size_t Height, unsigned int ElementSizeBytes)
{
    size_t pitch;

    SIM_BEGIN();
    if (!dptr || !pPitch || !WidthInBytes || !Height ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    pitch = sim_round_up(WidthInBytes, 512);
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pPitch = pitch;
    return cuMemAlloc_v2(dptr, pitch * Height);
}
SIM_EXPORT(cuMemAllocPitch_v2);

/* Take the range whose base is va and of one of the kinds, out of the map. */
static struct sim_range *take_base(uint64_t va, unsigned kinds)
{
    struct sim_range *r;

    sim_map_wrlock();
    r = sim_map_find(va);
    /* memory opened by cuIpcOpenMemHandle goes by cuIpcCloseMemHandle only */
    if (r && (r->va != va || !(kinds & (1u << r->kind)) || r->ipc_refs))
        r = NULL;
    if (r)
        sim_map_remove(r);
    sim_map_unlock();
    return r;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    struct sim_ctx *c;
    struct sim_range *r;
    CUresult res;

    SIM_BEGIN();
    if ((res = sim_ctx_current(&c)) || (res = sim_capture_unsafe_call()))
        return res;
    if (!dptr)
        return CUDA_SUCCESS;
    if ((res = sim_gmem_free_sync(c, dptr)) != CUDA_ERROR_NOT_FOUND)
        return res;         /* a graph allocation */
    /* Stream-ordered memory: no implicit synchronisation (the caller makes
     * sure its work is done, cuda.h says). */
    if ((res = sim_pool_free_now(dptr)) != CUDA_ERROR_NOT_FOUND)
        return res;
    /* Other memory: cuMemFree synchronises (the driver "may"; it does, and
     * NCCL users know the hang it causes), so work using it finishes first. */
    if ((res = sim_ctx_sync(c)))
        return res;
    r = take_base(dptr, 1u << SIM_R_DEVICE | 1u << SIM_R_MANAGED);
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    sim_dev_free_range(r);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemFree_v2);

CUresult cuMemGetInfo_v2(size_t *free_, size_t *total)
{
    struct sim_ctx *c;
    CUresult res;

    SIM_BEGIN();
    if ((res = sim_ctx_current(&c)))
        return res;
    if (!free_ || !total)
        return CUDA_ERROR_INVALID_VALUE;
    sim_shm_lock(sim_shm);
    sim_shm_reap(sim_shm);
    *total = sim_shm->capacity[sim_device_phys(c->dev)];
    *free_ = *total - sim_shm->used[sim_device_phys(c->dev)];
    sim_shm_unlock(sim_shm);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemGetInfo_v2);

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct sim_ctx *c;
    struct sim_range *r;
    CUresult res;

    SIM_BEGIN();
    if ((res = sim_ctx_current(&c)))
        return res;
    sim_map_rdlock();
    r = sim_map_find(dptr);
    if (r) {
        if (pbase)
            *pbase = r->va;
        if (psize)
            *psize = r->size;
    }
    sim_map_unlock();
    return r ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
SIM_EXPORT(cuMemGetAddressRange_v2);

/*
 * Legacy IPC memory handles. As on a GPU, only the base of a cuMemAlloc
 * allocation can be exported (VMM and pool memory cannot:
 * CUDA_ERROR_INVALID_VALUE), and another process of the machine opens it at
 * an address of its own.
 *
 * The 64-byte handle cannot carry a descriptor, so the first export gives
 * the buffer a named backing object, "/simcuda-ipc-<token>" in /dev/shm,
 * whose name is made of 16 random bytes the handle carries: the buffer's
 * bytes are copied there and it is mapped over the buffer's host view, in
 * place. The object is its owner's alone (mode 0600): names in /dev/shm
 * can be listed by anyone, so the token is no secret there, and a world-
 * writable object would let any user of the machine into the buffer. So
 * processes of the exporter's user (and root) may open it, the case of
 * every multi-process job (PyTorch's workers, NCCL's ranks). The
 * buffer's bytes move from the exporter's charge to a machine-wide entry
 * (share.c), which the exporter and every opener hold: the memory stays
 * allocated until the last of them has freed, closed, or died.
 */
#define IPC_MEM_MAGIC "simIPCm1"
struct ipc_mem_handle {
    char magic[8];
    uint8_t token[16];
    uint64_t size;           /* the allocation's size */
    int32_t phys;            /* physical device */
    int32_t pid;             /* the exporter (for people reading a handle) */
    uint8_t _zero[24];
};
_Static_assert(sizeof(struct ipc_mem_handle) == sizeof(CUipcMemHandle), "a handle is 64 bytes");

/* Serialises opening and closing, so that an opened handle maps once per context. */
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;

/* Give cuMemAlloc buffer r a named shared backing (map write lock held). */
static CUresult ipc_export(struct sim_range *r)
{
    uint8_t token[16];
    char name[64];
    unsigned char *tmp;
    CUresult res = CUDA_ERROR_OPERATING_SYSTEM;
    int fd, idx;

    if (getrandom(token, sizeof(token), 0) != (ssize_t)sizeof(token))
        return res;
    sim_share_name(token, name, sizeof(name));
    if ((fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
        return res;
    if (ftruncate(fd, (off_t)r->map_len) < 0 || !(tmp = sim_share_map(fd, r->map_len)))
        goto err;
    memcpy(tmp, r->host, r->map_len);
    munmap(tmp, r->map_len);
    if (mmap(r->host, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
        goto err;
    if ((res = sim_share_new(fd, r->dev, r->charged, true, token, false, &idx)))
        goto err;           /* the buffer keeps its (now shared) backing, unexported */
    r->share = idx + 1;
    r->charged = 0;         /* the entry's now */
    close(fd);
    return CUDA_SUCCESS;
err:
    shm_unlink(name);
    close(fd);
    return res;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    struct ipc_mem_handle h = { .pid = (int32_t)getpid() };
    struct sim_range *r;
    CUresult res = CUDA_SUCCESS;

    SIM_BEGIN();
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(h.magic, IPC_MEM_MAGIC, sizeof(h.magic));
    sim_map_wrlock();
    r = sim_map_find(dptr);
    /* The first export moves the bytes to a shared object under the view:
     * not while device work writes them (only work on this buffer waits). */
    while (r && r->kind == SIM_R_DEVICE && r->va == dptr && !r->share && !r->ipc_refs &&
           sim_range_pinned(r)) {
        sim_map_unlock();
        nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
        sim_map_wrlock();
        r = sim_map_find(dptr);
    }
    if (!r || r->kind != SIM_R_DEVICE || r->va != dptr || r->ipc_refs)
        res = CUDA_ERROR_INVALID_VALUE;
    else if (!r->share)
        res = ipc_export(r);
    if (!res) {
        memcpy(h.token, sim_shm->shares[r->share - 1].token, sizeof(h.token));
        h.size = r->size;
        h.phys = sim_device_phys(r->dev);
    }
    sim_map_unlock();
    if (!res)
        memcpy(pHandle, &h, sizeof(h));
    return res;
}
SIM_EXPORT(cuIpcGetMemHandle);

/* The legacy entry named by token: its index, or -1 (holds nothing). */
static int ipc_entry(const uint8_t token[16], struct sim_ident *exporter)
{
    int at = -1;

    sim_shm_lock(sim_shm);
    for (int i = 0; i < SIM_MAX_SHARES && at < 0; i++)
        if (sim_shm->shares[i].id && sim_shm->shares[i].legacy &&
            !memcmp(sim_shm->shares[i].token, token, 16)) {
            at = i;
            *exporter = sim_shm->shares[i].exporter;
        }
    sim_shm_unlock(sim_shm);
    return at;
}

struct ipc_find {
    struct sim_ctx *c;
    int share;
    struct sim_range *r;
};

static void ipc_find_one(struct sim_range *r, void *arg)
{
    struct ipc_find *f = arg;

    if (r->ipc_refs && r->share == f->share && r->ctx == f->c)
        f->r = r;
}

/* Map the object of entry idx (named by token) as a range of context c. */
static CUresult ipc_map(struct sim_ctx *c, const struct ipc_mem_handle *h, int dev, bool peer_any,
                        struct sim_range **out)
{
    char name[64];
    struct stat st;
    struct sim_range *r;
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    int fd, idx;

    sim_share_name(h->token, name, sizeof(name));
    if ((fd = shm_open(name, O_RDWR | O_CLOEXEC, 0)) < 0)
        return errno == ENOENT ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OPERATING_SYSTEM;
    if (fstat(fd, &st) < 0 || !h->size || h->size > (uint64_t)st.st_size) {
        close(fd);
        return res;
    }
    if (!(r = calloc(1, sizeof(*r))) || !(r->host = sim_share_map(fd, (uint64_t)st.st_size))) {
        free(r);
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->map_len = (size_t)st.st_size;
    if ((res = sim_share_find(fd, -1, 0, &idx)))
        goto err;
    close(fd);
    fd = -1;
    r->share = idx + 1;
    res = CUDA_ERROR_OUT_OF_MEMORY;
    r->va = sim_va_alloc(h->size, SIM_GRANULARITY > h->size ? SIM_ALLOC_ALIGN : SIM_GRANULARITY, 0);
    if (!r->va)
        goto err_share;
    r->size = h->size;
    r->kind = SIM_R_DEVICE;
    r->ctx = c;
    r->dev = dev;
    r->id = sim_next_buffer_id();
    r->ipc_refs = 1;
    r->ipc_peer_any = peer_any;
    sim_map_wrlock();
    if (sim_map_insert(r)) {
        sim_map_unlock();
        sim_va_free(r->va);
        goto err_share;
    }
    sim_map_unlock();
    *out = r;
    return CUDA_SUCCESS;
err_share:
    sim_share_put(idx);
err:
    if (fd >= 0)
        close(fd);
    munmap(r->host, r->map_len);
    free(r);
    return res;
}

/*
 * Opening in the exporting process itself fails as with the driver
 * (CUDA_ERROR_INVALID_CONTEXT, "invalid device context"); a handle opened
 * again by the same context gives the same address, counted. A handle that
 * is not one, or whose memory is gone: CUDA_ERROR_INVALID_VALUE. Memory of
 * a device this process does not see: CUDA_ERROR_INVALID_DEVICE (the driver
 * can map it; simcuda cannot name it).
 */
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    struct ipc_mem_handle h;
    struct sim_ident exporter;
    struct sim_ctx *c;
    struct ipc_find f = { 0 };
    CUresult res;
    int idx, dev;

    SIM_BEGIN();
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_ctx_current(&c)))
        return res;
    memcpy(&h, &handle, sizeof(h));
    if (memcmp(h.magic, IPC_MEM_MAGIC, sizeof(h.magic)) || (idx = ipc_entry(h.token, &exporter)) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_ident_same(&exporter, &sim_self->id))
        return CUDA_ERROR_INVALID_CONTEXT;
    if ((dev = sim_device_ordinal_of_phys(h.phys)) < 0 || h.phys != sim_shm->shares[idx].dev)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&ipc_lock);
    f.c = c;
    f.share = idx + 1;
    sim_map_foreach(ipc_find_one, &f);
    if (f.r) {
        f.r->ipc_refs++;        /* under ipc_lock: only open and close change it */
        *pdptr = f.r->va;
    } else if (!(res = ipc_map(c, &h, dev, Flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, &f.r))) {
        *pdptr = f.r->va;
    }
    pthread_mutex_unlock(&ipc_lock);
    return res;
}
SIM_EXPORT(cuIpcOpenMemHandle_v2);
/* The CUDA 4.1 ABI name: the same call. */
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}
SIM_EXPORT(cuIpcOpenMemHandle);

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    struct sim_range *r;
    CUresult res = CUDA_SUCCESS;

    SIM_BEGIN();
    pthread_mutex_lock(&ipc_lock);
    sim_map_rdlock();
    r = sim_map_find(dptr);
    if (!r || r->va != dptr || !r->ipc_refs)
        r = NULL;
    sim_map_unlock();
    if (!r) {
        res = CUDA_ERROR_INVALID_VALUE;
    } else if (--r->ipc_refs == 0) {
        /* as cuMemFree: the context's work that may use it finishes first */
        res = sim_ctx_sync(r->ctx);
        sim_map_wrlock();
        sim_map_remove(r);
        sim_map_unlock();
        sim_dev_free_range(r);
    }
    pthread_mutex_unlock(&ipc_lock);
    return res;
}
SIM_EXPORT(cuIpcCloseMemHandle);

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    struct sim_ctx *c;
    struct sim_range *r;
    size_t len = sim_round_up(bytesize, (uint64_t)sysconf(_SC_PAGESIZE));
    CUresult res;

    SIM_BEGIN();
    if (!dptr || !bytesize || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_ctx_current(&c)) || (res = sim_capture_unsafe_call()))
        return res;
    if (!(r = calloc(1, sizeof(*r))))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = sim_capacity_charge(c->dev, len)))
        goto err_free;
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if (!(r->host = sim_backing_alloc(len)))
        goto err_charge;
    r->va = H(r->host);     /* managed memory is host-accessible at the same address */
    r->size = bytesize;
    r->kind = SIM_R_MANAGED;
    r->ctx = c;
    r->dev = c->dev;
    r->id = sim_next_buffer_id();
    r->charged = len;
    r->map_len = len;
    if (sim_managed_init(r))
        goto err_backing;
    sim_map_wrlock();
    if (sim_map_insert(r)) {
        sim_map_unlock();
        goto err_managed;
    }
    sim_map_unlock();
    *dptr = r->va;
    return CUDA_SUCCESS;
err_managed:
    sim_managed_drop(r);
err_backing:
    sim_backing_free(r->host, len);
err_charge:
    sim_capacity_release(c->dev, len);
err_free:
    free(r);
    return res;
}
SIM_EXPORT(cuMemAllocManaged);

/* ---- host memory ------------------------------------------------------------- */

/* Register [p, p+size) as pinned host memory (owned: we mmap'd it). */
static CUresult host_insert(struct sim_ctx *c, void *p, size_t size, size_t map_len,
                            unsigned flags, bool registered)
{
    struct sim_range *r = calloc(1, sizeof(*r));
    int rc;

    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r->va = H(p);
    r->host = p;
    r->size = size;
    r->kind = SIM_R_HOST;
    r->ctx = c;
    r->dev = c->dev;
    r->id = sim_next_buffer_id();
    r->map_len = map_len;
    r->host_flags = flags;
    r->host_registered = registered;
    sim_map_wrlock();
    rc = sim_map_insert(r);
    sim_map_unlock();
    if (rc) {
        free(r);
        return rc == -EEXIST ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    const unsigned known = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    struct sim_ctx *c;
    size_t len = sim_round_up(bytesize, (uint64_t)sysconf(_SC_PAGESIZE));
    void *p;
    CUresult res;

    SIM_BEGIN();
    if (!pp || !bytesize || (Flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_ctx_current(&c)) || (res = sim_capture_unsafe_call()))
        return res;
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((res = host_insert(c, p, bytesize, len, Flags, false))) {
        munmap(p, len);
        return res;
    }
    *pp = p;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemHostAlloc);

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}
SIM_EXPORT(cuMemAllocHost_v2);

CUresult cuMemFreeHost(void *p)
{
    struct sim_range *r;
    CUresult res;

    SIM_BEGIN();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_capture_unsafe_call()))
        return res;
    sim_map_wrlock();
    r = sim_map_find(H(p));
    if (r && (r->va != H(p) || r->kind != SIM_R_HOST || r->host_registered))
        r = NULL;
    if (r)
        sim_map_remove(r);
    sim_map_unlock();
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    sim_dev_free_range(r);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemFreeHost);

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                           CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    struct sim_ctx *c;
    CUresult res;

    SIM_BEGIN();
    if (!p || !bytesize || (Flags & ~known))
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_ctx_current(&c)) || (res = sim_capture_unsafe_call()))
        return res;
    if (sim_va_in_device_region(H(p), 1))
        return CUDA_ERROR_INVALID_VALUE;
    return host_insert(c, p, bytesize, 0, Flags, true);
}
SIM_EXPORT(cuMemHostRegister_v2);

CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}
SIM_EXPORT(cuMemHostRegister);

CUresult cuMemHostUnregister(void *p)
{
    struct sim_range *r;
    CUresult res;

    SIM_BEGIN();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if ((res = sim_capture_unsafe_call()))
        return res;
    sim_map_wrlock();
    r = sim_map_find(H(p));
    if (r && (r->va != H(p) || r->kind != SIM_R_HOST || !r->host_registered))
        r = NULL;
    if (r)
        sim_map_remove(r);
    sim_map_unlock();
    if (!r)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    /* The memory is the application's, which may unmap it once this
     * returns: device work running on it (only on it) finishes first. */
    sim_range_wait_unpinned(r);
    free(r);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemHostUnregister);

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    struct sim_range *r;

    SIM_BEGIN();
    if (!pdptr || !p || Flags)
        return CUDA_ERROR_INVALID_VALUE;
    sim_map_rdlock();
    r = sim_map_find(H(p));
    if (r && r->kind != SIM_R_HOST)
        r = NULL;
    sim_map_unlock();
    if (!r)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = H(p);      /* unified addressing: the device sees it at the host address */
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuMemHostGetDevicePointer_v2);

CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    struct sim_range *r;

    SIM_BEGIN();
    if (!pFlags || !p)
        return CUDA_ERROR_INVALID_VALUE;
    sim_map_rdlock();
    r = sim_map_find(H(p));
    if (r && r->kind == SIM_R_HOST)
        *pFlags = r->host_flags;
    sim_map_unlock();
    return r && r->kind == SIM_R_HOST ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SIM_EXPORT(cuMemHostGetFlags);

/* ---- pointer attributes ----------------------------------------------------------- */

/* Size of each attribute's value, so unknown pointers can be zeroed. */
static size_t attr_size(CUpointer_attribute a)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void *);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: return sizeof(bool);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return sizeof(bool);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: return sizeof(bool);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MAPPED: return sizeof(bool);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: return sizeof(bool);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return sizeof(void *);
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: return sizeof(bool);
    default: return 0;
    }
}

/* One attribute of the range r containing ptr (map lock held). */
static CUresult attr_of(const struct sim_range *r, CUpointer_attribute a, void *data, uint64_t ptr)
{
    bool host = r->kind == SIM_R_HOST || r->kind == SIM_R_MANAGED;

    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        /* Stream-ordered allocations are not context associated: NULL, as
         * VMM mappings (the CUDA programming guide, "Pointer Attributes"). */
        *(CUcontext *)data = r->kind == SIM_R_POOL ? NULL : (CUcontext)r->ctx;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = r->kind == SIM_R_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host)
            return CUDA_ERROR_INVALID_VALUE;    /* device memory has no host address */
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(bool *)data = false;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = r->id;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(bool *)data = r->kind == SIM_R_MANAGED;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = r->dev;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        /* an opened IPC mapping cannot be exported again */
        *(bool *)data = r->kind == SIM_R_DEVICE && !r->ipc_refs;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        /* VMM: the mappable range, i.e. the reservation (not the mapping). */
        *(CUdeviceptr *)data = r->kind == SIM_R_VMM ? r->resv_va : r->va;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = r->kind == SIM_R_VMM ? r->resv_size : r->size;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = r->kind == SIM_R_VMM ? r->handle_types : 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        /* Device memory is; VMM memory only if created so; host memory is not. */
        *(bool *)data = r->kind == SIM_R_VMM ? r->rdma : !host;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = r->size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = (void *)(uintptr_t)r->va;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = r->kind == SIM_R_VMM ? r->block_id : r->id;
        break;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(bool *)data = false;          /* no decompression engine is simulated */
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(bool *)data = true;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)data = r->kind == SIM_R_VMM && !r->access ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE
                                                                 : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = (CUmemoryPool)r->pool;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    struct sim_range *r;
    CUresult res;

    SIM_BEGIN();
    if (!data || !attr_size(attribute))
        return CUDA_ERROR_INVALID_VALUE;
    sim_map_rdlock();
    r = sim_map_find(ptr);
    res = r ? attr_of(r, attribute, data, ptr) : CUDA_ERROR_INVALID_VALUE;
    sim_map_unlock();
    return res;
}
SIM_EXPORT(cuPointerGetAttribute);

/* Unknown pointers are not an error here: their attributes read as zero. */
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                void **data, CUdeviceptr ptr)
{
    struct sim_range *r;

    SIM_BEGIN();
    if (!numAttributes || !attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; i++)
        if (!attr_size(attributes[i]) || !data[i])
            return CUDA_ERROR_INVALID_VALUE;
    sim_map_rdlock();
    r = sim_map_find(ptr);
    for (unsigned i = 0; i < numAttributes; i++)
        if (!r || attr_of(r, attributes[i], data[i], ptr))
            memset(data[i], 0, attr_size(attributes[i]));
    sim_map_unlock();
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuPointerGetAttributes);

/* ---- context teardown ------------------------------------------------------------ */

void sim_mem_release_ctx(struct sim_ctx *c)
{
    struct sim_range **v;
    size_t n = sim_map_take(c, 1u << SIM_R_DEVICE | 1u << SIM_R_MANAGED | 1u << SIM_R_HOST, &v);

    for (size_t i = 0; i < n; i++) {
        if (v[i]->kind == SIM_R_HOST && v[i]->host_registered) {
            sim_range_wait_unpinned(v[i]);     /* the memory is the application's */
            free(v[i]);
        } else
            sim_dev_free_range(v[i]);
    }
    free(v);
}
