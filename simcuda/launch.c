/*
 * launch.c - cuLaunchKernelEx and its launch attributes, cooperative launches.
 *
 * Every attribute the driver accepts for a launch is checked as it checks
 * it; the ones that change scheduling only (priority, access policy, memory
 * sync domains, carveout, NVLink hints) are accepted and change nothing here:
 * simcuda runs each kernel once, on the stream's worker. Cluster dimensions
 * must divide the grid and fit (8 blocks, 16 when the function allows
 * non-portable sizes); a cooperative grid must fit on the device at once; a
 * programmatic or launch-completion event is recorded when the kernel has run.
 */
#include "sim.h"

#include <string.h>

struct launch_opts {
    bool cooperative;
    unsigned cluster[3];
    unsigned preferred_cluster[3];
    int priority;
    CUevent events[2];             /* programmatic, launch completion */
    bool device_updatable;
};

static CUresult event_ok(CUevent h)
{
    struct sim_event *e;

    if (sim_event_get(h, &e))
        return CUDA_ERROR_INVALID_HANDLE;
    /* Timing must be off, and the event must not be an IPC event. */
    if (!(e->flags & CU_EVENT_DISABLE_TIMING) || (e->flags & CU_EVENT_INTERPROCESS))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult read_attr(const CUlaunchAttribute *a, struct launch_opts *o)
{
    const CUlaunchAttributeValue *v = &a->value;

    switch (a->id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        if (v->accessPolicyWindow.hitRatio < 0.0f || v->accessPolicyWindow.hitRatio > 1.0f)
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        o->cooperative = v->cooperative != 0;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        o->cluster[0] = v->clusterDim.x, o->cluster[1] = v->clusterDim.y, o->cluster[2] = v->clusterDim.z;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        o->preferred_cluster[0] = v->preferredClusterDim.x;
        o->preferred_cluster[1] = v->preferredClusterDim.y;
        o->preferred_cluster[2] = v->preferredClusterDim.z;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        return (unsigned)v->clusterSchedulingPolicyPreference <= CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING
                   ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
        o->events[0] = v->programmaticEvent.event;
        return event_ok(o->events[0]);
    case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
        o->events[1] = v->launchCompletionEvent.event;
        return event_ok(o->events[1]);
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        o->priority = v->priority < -5 ? -5 : v->priority > 0 ? 0 : v->priority;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        return (unsigned)v->memSyncDomain <= CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE ? CUDA_SUCCESS
                                                                              : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
        if (v->deviceUpdatableKernelNode.deviceUpdatable > 1)
            return CUDA_ERROR_INVALID_VALUE;
        o->device_updatable = v->deviceUpdatableKernelNode.deviceUpdatable;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        return v->sharedMemCarveout <= 100 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        return v->nvlinkUtilCentricScheduling <= 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        /* Stream-only attributes (synchronization policy) and unknown ids. */
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static bool divides(const unsigned grid[3], const unsigned c[3])
{
    return c[0] && c[1] && c[2] && !(grid[0] % c[0]) && !(grid[1] % c[1]) && !(grid[2] % c[2]);
}

static CUresult cluster_check(const unsigned grid[3], const struct launch_opts *o, const struct sim_kfn *k)
{
    const unsigned *c = o->cluster;
    const unsigned *p = o->preferred_cluster;
    unsigned max = k->attrs && k->attrs->non_portable_cluster ? 16 : 8;

    if (!c[0] && !c[1] && !c[2])
        return CUDA_SUCCESS;
    if (!divides(grid, c) || (uint64_t)c[0] * c[1] * c[2] > max)
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    if (k->attrs && k->attrs->req_cluster[0] &&
        ((int)c[0] != k->attrs->req_cluster[0] || (int)c[1] != (k->attrs->req_cluster[1] ? k->attrs->req_cluster[1] : 1) ||
         (int)c[2] != (k->attrs->req_cluster[2] ? k->attrs->req_cluster[2] : 1)))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;   /* the function fixed its cluster size */
    /* A preferred cluster is a multiple of the cluster that divides the grid. */
    if ((p[0] || p[1] || p[2]) &&
        (!divides(grid, p) || p[0] % c[0] || p[1] % c[1] || p[2] % c[2]))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    return CUDA_SUCCESS;
}

static CUresult cooperative_check(const unsigned grid[3], const unsigned block[3], unsigned shared,
                                  const struct sim_kfn *k)
{
    struct sim_fattrs dflt;
    const struct sim_fattrs *a = k->attrs;
    uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];
    int per_sm;

    if (!a) {
        sim_fattrs_init(&dflt);
        a = &dflt;
    }
    per_sm = sim_occupancy_blocks(a, (int)(block[0] * block[1] * block[2]), shared);
    return blocks <= (uint64_t)per_sm * SIM_SMS ? CUDA_SUCCESS : CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra, bool pt,
                          bool cooperative)
{
    struct launch_opts o = { .cooperative = cooperative };
    struct sim_stream *s;
    struct sim_kfn k;
    struct sim_op *op;
    CUresult r;

    SIM_BEGIN();
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    const unsigned grid[3] = { config->gridDimX, config->gridDimY, config->gridDimZ };
    const unsigned block[3] = { config->blockDimX, config->blockDimY, config->blockDimZ };
    for (unsigned i = 0; i < config->numAttrs; i++)
        if ((r = read_attr(&config->attrs[i], &o)))
            return r;
    if ((r = sim_stream_get(config->hStream, pt, &s)))
        return r;
    if (o.device_updatable && !sim_capture_pending(s))
        return CUDA_ERROR_INVALID_VALUE;    /* graphs only */
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = sim_func_resolve(f, s->ctx, &k)) || (r = cluster_check(grid, &o, &k)) ||
        (o.cooperative && (r = cooperative_check(grid, block, config->sharedMemBytes, &k))))
        return r;
    if ((r = sim_launch_prepare(f, s, grid, block, config->sharedMemBytes, params, extra, &op)))
        return r;
    op->u.kernel.priority = o.priority;
    if ((r = sim_launch_submit(s, op)))
        return r;
    for (int i = 0; i < 2; i++)
        if (o.events[i] && (r = pt ? cuEventRecord_ptsz(o.events[i], config->hStream)
                                   : cuEventRecord(o.events[i], config->hStream)))
            return r;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    return launch_ex(config, f, kernelParams, extra, false, false);
}
SIM_EXPORT(cuLaunchKernelEx);
SIM_PARTIAL(cuLaunchKernelEx,
    "scheduling attributes (priority, access policy, memory sync domains, carveout) are "
    "checked and have no effect");
SIM_PARTIAL(cuLaunchKernelEx,
    "packed arguments (extra): CUDA_ERROR_NOT_SUPPORTED; a kernel without "
    "SIMCUDA_KERNEL_PARAMS runs synchronously and cannot be captured "
    "(CUDA_ERROR_NOT_SUPPORTED)");

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    return launch_ex(config, f, kernelParams, extra, true, false);
}
SIM_EXPORT(cuLaunchKernelEx_ptsz);
SIM_PARTIAL(cuLaunchKernelEx_ptsz,
    "scheduling attributes (priority, access policy, memory sync domains, carveout) are "
    "checked and have no effect");
SIM_PARTIAL(cuLaunchKernelEx_ptsz,
    "packed arguments (extra): CUDA_ERROR_NOT_SUPPORTED; a kernel without "
    "SIMCUDA_KERNEL_PARAMS runs synchronously and cannot be captured "
    "(CUDA_ERROR_NOT_SUPPORTED)");

static CUresult cooperative(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shared, CUstream hs, void **params, bool pt)
{
    CUlaunchConfig c = {
        .gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = bx, .blockDimY = by, .blockDimZ = bz,
        .sharedMemBytes = shared, .hStream = hs,
    };

    return launch_ex(&c, f, params, NULL, pt, true);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                   unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                   unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                   void **kernelParams)
{
    return cooperative(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                       kernelParams, false);
}
SIM_EXPORT(cuLaunchCooperativeKernel);
SIM_PARTIAL(cuLaunchCooperativeKernel,
    "packed arguments (extra): CUDA_ERROR_NOT_SUPPORTED; a kernel without "
    "SIMCUDA_KERNEL_PARAMS runs synchronously and cannot be captured "
    "(CUDA_ERROR_NOT_SUPPORTED)");

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                        unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                        void **kernelParams)
{
    return cooperative(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                       kernelParams, true);
}
SIM_EXPORT(cuLaunchCooperativeKernel_ptsz);
SIM_PARTIAL(cuLaunchCooperativeKernel_ptsz,
    "packed arguments (extra): CUDA_ERROR_NOT_SUPPORTED; a kernel without "
    "SIMCUDA_KERNEL_PARAMS runs synchronously and cannot be captured "
    "(CUDA_ERROR_NOT_SUPPORTED)");
