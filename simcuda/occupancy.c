/*
 * occupancy.c - occupancy queries, computed for the simulated device (an
 * H100-like SM: 2048 threads, 32 blocks, 64 K registers and 228 KiB of shared
 * memory per multiprocessor, 1 KiB of it reserved per block) and a function's
 * resources (SIM_REGS_PER_THREAD registers a thread, no static shared memory,
 * its CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). The formulas are the
 * ones of the CUDA occupancy calculator; nothing runs in parallel on the
 * simulator, so these numbers are only what a program would plan with.
 */
#include "sim.h"

#define THREADS_PER_SM 2048
#define BLOCKS_PER_SM 32
#define REGS_PER_SM 65536
#define REG_UNIT 256                  /* registers are allocated per warp, in units of 256 */
#define SMEM_PER_SM 233472
#define SMEM_RESERVED 1024            /* per block */
#define SMEM_UNIT 128
#define SMEM_PER_BLOCK_MAX 232448
#define WARP 32

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

static size_t round_up(size_t v, size_t a)
{
    return (v + a - 1) / a * a;
}

int sim_occupancy_blocks(const struct sim_fattrs *a, int block_size, size_t dyn_smem)
{
    int warps, by_warps, by_regs, by_smem;
    size_t smem;

    if (block_size <= 0 || block_size > 1024 || dyn_smem > (size_t)a->max_dyn_shared)
        return 0;
    warps = (block_size + WARP - 1) / WARP;
    by_warps = THREADS_PER_SM / WARP / warps;
    by_regs = REGS_PER_SM / (warps * (int)round_up(SIM_REGS_PER_THREAD * WARP, REG_UNIT));
    smem = round_up(dyn_smem + SMEM_RESERVED, SMEM_UNIT);
    by_smem = (int)(SMEM_PER_SM / smem);
    return min_int(min_int(BLOCKS_PER_SM, by_warps), min_int(by_regs, by_smem));
}

static CUresult attrs_of(CUfunction func, const struct sim_fattrs **out)
{
    struct sim_kfn k;
    CUresult r;

    if (!func)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((r = sim_func_resolve(func, sim_ctx_current_raw(), &k)))
        return r;
    *out = k.attrs;
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

#define KNOWN_FLAGS (CU_OCCUPANCY_DEFAULT | CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)

static CUresult max_active(int *num, CUfunction func, int block_size, size_t dyn, unsigned flags)
{
    const struct sim_fattrs *a;
    CUresult r;

    SIM_BEGIN();
    if (!num || (flags & ~(unsigned)KNOWN_FLAGS))
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = attrs_of(func, &a)))
        return r;
    *num = sim_occupancy_blocks(a, block_size, dyn);
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
                                                     size_t dynamicSMemSize)
{
    return max_active(numBlocks, func, blockSize, dynamicSMemSize, 0);
}
SIM_EXPORT(cuOccupancyMaxActiveBlocksPerMultiprocessor);

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
                                                              size_t dynamicSMemSize, unsigned int flags)
{
    return max_active(numBlocks, func, blockSize, dynamicSMemSize, flags);
}
SIM_EXPORT(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);

/* The block size with the highest occupancy (the largest such one), and the
 * grid that fills the device with it. */
static CUresult potential(int *min_grid, int *block_size, CUfunction func, CUoccupancyB2DSize b2d,
                          size_t dyn, int limit, unsigned flags)
{
    const struct sim_fattrs *a;
    int best = 0, best_bs = 0, best_blocks = 0;
    CUresult r;

    SIM_BEGIN();
    if (!min_grid || !block_size || (flags & ~(unsigned)KNOWN_FLAGS) || limit < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = attrs_of(func, &a)))
        return r;
    if (!limit || limit > 1024)
        limit = 1024;
    for (int bs = limit / WARP * WARP; bs >= WARP; bs -= WARP) {
        size_t d = b2d ? b2d(bs) : dyn;
        int blocks = sim_occupancy_blocks(a, bs, d);

        if (blocks * bs > best) {
            best = blocks * bs;
            best_bs = bs;
            best_blocks = blocks;
        }
    }
    *block_size = best_bs;
    *min_grid = best_blocks * SIM_SMS;
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                          CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
                                          int blockSizeLimit)
{
    return potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                     blockSizeLimit, 0);
}
SIM_EXPORT(cuOccupancyMaxPotentialBlockSize);

CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
                                                   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                   size_t dynamicSMemSize, int blockSizeLimit, unsigned int flags)
{
    return potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                     blockSizeLimit, flags);
}
SIM_EXPORT(cuOccupancyMaxPotentialBlockSizeWithFlags);

CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks,
                                                 int blockSize)
{
    const struct sim_fattrs *a;
    size_t per;
    CUresult r;

    SIM_BEGIN();
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = attrs_of(func, &a)))
        return r;
    /* numBlocks blocks must fit by threads and registers at all. */
    if (sim_occupancy_blocks(a, blockSize, 0) < numBlocks) {
        *dynamicSmemSize = 0;
        return CUDA_SUCCESS;
    }
    per = SMEM_PER_SM / (size_t)numBlocks / SMEM_UNIT * SMEM_UNIT;
    per = per > SMEM_RESERVED ? per - SMEM_RESERVED : 0;
    if (per > SMEM_PER_BLOCK_MAX)
        per = SMEM_PER_BLOCK_MAX;
    *dynamicSmemSize = per;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuOccupancyAvailableDynamicSMemPerBlock);

/* The block dimensions and dynamic shared memory of a launch configuration. */
static CUresult config_check(const CUlaunchConfig *c, int *block_size, unsigned cluster[3])
{
    const unsigned grid[3] = { c->gridDimX, c->gridDimY, c->gridDimZ };
    const unsigned block[3] = { c->blockDimX, c->blockDimY, c->blockDimZ };
    CUresult r;

    if ((r = sim_check_dims(grid, block, c->sharedMemBytes)))
        return r;
    if (c->numAttrs && !c->attrs)
        return CUDA_ERROR_INVALID_VALUE;
    cluster[0] = cluster[1] = cluster[2] = 0;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            cluster[0] = c->attrs[i].value.clusterDim.x;
            cluster[1] = c->attrs[i].value.clusterDim.y;
            cluster[2] = c->attrs[i].value.clusterDim.z;
        }
    *block_size = (int)(block[0] * block[1] * block[2]);
    return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config)
{
    const struct sim_fattrs *a;
    unsigned cluster[3];
    int bs;
    CUresult r;

    SIM_BEGIN();
    if (!clusterSize || !config)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = attrs_of(func, &a)) || (r = config_check(config, &bs, cluster)))
        return r;
    if (!sim_occupancy_blocks(a, bs, config->sharedMemBytes)) {
        *clusterSize = 0;
        return CUDA_SUCCESS;
    }
    *clusterSize = a->non_portable_cluster ? 16 : 8;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuOccupancyMaxPotentialClusterSize);

CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config)
{
    const struct sim_fattrs *a;
    unsigned cluster[3];
    int bs, blocks, size;
    CUresult r;

    SIM_BEGIN();
    if (!numClusters || !config)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = attrs_of(func, &a)) || (r = config_check(config, &bs, cluster)))
        return r;
    size = (int)(cluster[0] * cluster[1] * cluster[2]);
    if (!size) {
        if (!a->req_cluster[0])
            return CUDA_ERROR_INVALID_CLUSTER_SIZE;   /* a cluster size is needed */
        size = a->req_cluster[0] * (a->req_cluster[1] ? a->req_cluster[1] : 1) *
               (a->req_cluster[2] ? a->req_cluster[2] : 1);
    }
    if (size > (a->non_portable_cluster ? 16 : 8))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    blocks = sim_occupancy_blocks(a, bs, config->sharedMemBytes);
    *numClusters = blocks * SIM_SMS / size;
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuOccupancyMaxActiveClusters);
