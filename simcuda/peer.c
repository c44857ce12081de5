/*
 * peer.c - peer access between simulated devices and peer copies.
 *
 * Every pair of distinct devices is linked (as by NVLink): cuDeviceCanAccessPeer
 * says yes, and cuCtxEnablePeerAccess lets work of the current context touch
 * memory allocated in the peer context, one way. Without it, a kernel on one
 * device that touches another device's cuMemAlloc or pool memory faults, as on
 * a GPU; VMM and graph memory follow their own access descriptors instead.
 * Copies between devices need no peer access (the driver stages them).
 */
#include "sim.h"

#include <string.h>

/* Guards every context's peer list. Taken under the map lock (kernels check
 * access while they run), so it is never held while taking another lock. */
static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;

static bool dev_ok(CUdevice d)
{
    return d >= 0 && d < sim_device_count();
}

CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    SIM_BEGIN();
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(dev) || !dev_ok(peerDev))
        return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceCanAccessPeer);

CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice, CUdevice dstDevice)
{
    SIM_BEGIN();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(srcDevice) || !dev_ok(dstDevice) || srcDevice == dstDevice)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; break;     /* one kind of link */
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = 1; break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *value = 1; break;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = 0; break;  /* no arrays */
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED: *value = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetP2PAttribute);

CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int *capabilities, const CUatomicOperation *operations,
                                          unsigned int count, CUdevice srcDevice, CUdevice dstDevice)
{
    const unsigned all = CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED |
                         CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32 |
                         CU_ATOMIC_CAPABILITY_SCALAR_64;

    SIM_BEGIN();
    if (!capabilities || !operations || !count)
        return CUDA_ERROR_INVALID_VALUE;
    if (!dev_ok(srcDevice) || !dev_ok(dstDevice) || srcDevice == dstDevice)
        return CUDA_ERROR_INVALID_DEVICE;
    for (unsigned i = 0; i < count; i++) {
        if ((unsigned)operations[i] >= CU_ATOMIC_OPERATION_MAX)
            return CUDA_ERROR_INVALID_VALUE;
        capabilities[i] = all;          /* integer and float operations, 32 and 64 bits */
    }
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuDeviceGetP2PAtomicCapabilities);

static long peer_index(const struct sim_ctx *c, const struct sim_ctx *p)
{
    for (int i = 0; i < c->npeers; i++)
        if (c->peers[i] == p)
            return i;
    return -1;
}

CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    struct sim_ctx *c, *p;
    CUresult r = CUDA_SUCCESS;

    SIM_BEGIN();
    if (sim_ctx_current(&c) == CUDA_ERROR_INVALID_CONTEXT || sim_ctx_check(peerContext, &p) || c == p)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (Flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->dev == p->dev)
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    pthread_mutex_lock(&peer_lock);
    if (peer_index(c, p) >= 0)
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else if (c->npeers == SIM_MAX_PEERS)
        r = CUDA_ERROR_TOO_MANY_PEERS;
    else
        c->peers[c->npeers++] = p;
    pthread_mutex_unlock(&peer_lock);
    return r;
}
SIM_EXPORT(cuCtxEnablePeerAccess);

CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    struct sim_ctx *c, *p;
    CUresult r = CUDA_SUCCESS;
    long i;

    SIM_BEGIN();
    if (sim_ctx_current(&c) == CUDA_ERROR_INVALID_CONTEXT || sim_ctx_check(peerContext, &p))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&peer_lock);
    if ((i = peer_index(c, p)) < 0)
        r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else
        c->peers[i] = c->peers[--c->npeers];
    pthread_mutex_unlock(&peer_lock);
    return r;
}
SIM_EXPORT(cuCtxDisablePeerAccess);

bool sim_peer_can_access(struct sim_ctx *c, const struct sim_range *r)
{
    bool ok;

    pthread_mutex_lock(&peer_lock);
    ok = peer_index(c, r->ctx) >= 0;
    pthread_mutex_unlock(&peer_lock);
    return ok;
}

bool sim_peer_can_access_dev(struct sim_ctx *c, int dev)
{
    bool ok = false;

    pthread_mutex_lock(&peer_lock);
    for (int i = 0; i < c->npeers && !ok; i++)
        ok = c->peers[i]->dev == dev;
    pthread_mutex_unlock(&peer_lock);
    return ok;
}

static void forget_one(struct sim_ctx *c, void *gone)
{
    long i = peer_index(c, gone);

    if (i >= 0)
        c->peers[i] = c->peers[--c->npeers];
}

/* A context goes: nobody's peer any more. */
void sim_peer_forget_ctx(struct sim_ctx *gone)
{
    pthread_mutex_lock(&peer_lock);
    gone->npeers = 0;
    sim_ctx_foreach(forget_one, gone);
    pthread_mutex_unlock(&peer_lock);
}

/* ---- peer copies ------------------------------------------------------------------ */

static CUresult peer_1d(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                        CUstream hs, bool sync, bool pt)
{
    struct sim_copy a = { dst, src, true, true, n, 1, n, n, 1, 1, 1 };
    struct sim_ctx *d, *s;

    SIM_BEGIN();
    if (sim_ctx_check(dctx, &d) || sim_ctx_check(sctx, &s))
        return CUDA_ERROR_INVALID_CONTEXT;
    return sim_copy_submit(&a, hs, sync, pt);
}

CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
                      size_t ByteCount)
{
    return peer_1d(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, true, false);
}
SIM_EXPORT(cuMemcpyPeer);

CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount)
{
    return peer_1d(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, true, true);
}
SIM_EXPORT(cuMemcpyPeer_ptds);

CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    return peer_1d(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, false, false);
}
SIM_EXPORT(cuMemcpyPeerAsync);

CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    return peer_1d(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, false, true);
}
SIM_EXPORT(cuMemcpyPeerAsync_ptsz);

static CUresult peer_3d(const CUDA_MEMCPY3D_PEER *p, CUstream hs, bool sync, bool pt)
{
    struct sim_ctx *c;
    struct sim_copy a;
    CUDA_MEMCPY3D q;
    CUresult r;

    SIM_BEGIN();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if ((p->srcContext && sim_ctx_check(p->srcContext, &c)) || (p->dstContext && sim_ctx_check(p->dstContext, &c)))
        return CUDA_ERROR_INVALID_CONTEXT;
    memset(&q, 0, sizeof(q));
    q.srcXInBytes = p->srcXInBytes, q.srcY = p->srcY, q.srcZ = p->srcZ, q.srcLOD = p->srcLOD;
    q.srcMemoryType = p->srcMemoryType, q.srcHost = p->srcHost, q.srcDevice = p->srcDevice;
    q.srcArray = p->srcArray, q.srcPitch = p->srcPitch, q.srcHeight = p->srcHeight;
    q.dstXInBytes = p->dstXInBytes, q.dstY = p->dstY, q.dstZ = p->dstZ, q.dstLOD = p->dstLOD;
    q.dstMemoryType = p->dstMemoryType, q.dstHost = p->dstHost, q.dstDevice = p->dstDevice;
    q.dstArray = p->dstArray, q.dstPitch = p->dstPitch, q.dstHeight = p->dstHeight;
    q.WidthInBytes = p->WidthInBytes, q.Height = p->Height, q.Depth = p->Depth;
    if ((r = sim_copy_from_3d(&q, &a)))
        return r;
    if (!a.width || !a.height || !a.depth)
        return CUDA_SUCCESS;
    return sim_copy_submit(&a, hs, sync, pt);
}

CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy) { return peer_3d(pCopy, NULL, true, false); }
SIM_EXPORT(cuMemcpy3DPeer);
SIM_PARTIAL(cuMemcpy3DPeer, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *pCopy) { return peer_3d(pCopy, NULL, true, true); }
SIM_EXPORT(cuMemcpy3DPeer_ptds);
SIM_PARTIAL(cuMemcpy3DPeer_ptds, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream) { return peer_3d(pCopy, hStream, false, false); }
SIM_EXPORT(cuMemcpy3DPeerAsync);
SIM_PARTIAL(cuMemcpy3DPeerAsync, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream) { return peer_3d(pCopy, hStream, false, true); }
SIM_EXPORT(cuMemcpy3DPeerAsync_ptsz);
SIM_PARTIAL(cuMemcpy3DPeerAsync_ptsz, "CUDA arrays: CUDA_ERROR_NOT_SUPPORTED");
