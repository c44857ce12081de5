/*
 * test_suspend.c - ncclCommSuspend(NCCL_SUSPEND_MEM) frees the communicator's
 * buffers (the device's free memory grows by what ncclCommMemStats says),
 * ncclCommResume allocates them again, and collectives work after; the calls
 * that do not fit the state are refused. Two ranks, two processes; with
 * argument "cumem", the buffers are VMM memory (NCCL_CUMEM_ENABLE=1).
 */
#include "ranks.h"

#define MiB (1ull << 20)
#define CNT 300000            /* floats: several slots */

static ncclComm_t comm;
static CUstream s;
static int g_rank, g_n;

static uint64_t stat(ncclCommMemStat_t st)
{
    uint64_t v = ~0ull;

    NCCL_OK(ncclCommMemStats(comm, st, &v));
    return v;
}

static size_t dev_free(void)
{
    size_t f, t;

    CU_OK(cuMemGetInfo(&f, &t));
    return f;
}

/* AllReduce (sum) of i * (rank + 1): every element must be i * n(n+1)/2. */
static void allreduce_check(int round)
{
    float *h = malloc(CNT * sizeof(float));
    CUdeviceptr d;

    for (int i = 0; i < CNT; i++)
        h[i] = (float)((i % 1000) * (g_rank + 1) + round);
    CU_OK(cuMemAlloc(&d, CNT * sizeof(float)));
    CU_OK(cuMemcpyHtoD(d, h, CNT * sizeof(float)));
    NCCL_OK(ncclAllReduce((void *)d, (void *)d, CNT, ncclFloat, ncclSum, comm, s));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuMemcpyDtoH(h, d, CNT * sizeof(float)));
    for (int i = 0; i < CNT; i++) {
        float want = (float)((i % 1000) * g_n * (g_n + 1) / 2 + round * g_n);
        if (h[i] != want)
            FAIL("rank %d round %d: element %d = %g, want %g", g_rank, round, i, h[i], want);
    }
    CU_OK(cuMemFree(d));
    free(h);
}

static int rank_main(int rank, int n, const char *hex)
{
    ncclUniqueId id;
    size_t before, held, suspended, resumed;
    uint64_t buffers, persist;
    CUdeviceptr d;

    g_rank = rank;
    g_n = n;
    t_id_parse(hex, &id);
    t_rank_ctx(rank);
    CU_OK(cuStreamCreate(&s, 0));
    CU_OK(cuMemAlloc(&d, 4096));
    before = dev_free();
    NCCL_OK(ncclCommInitRank(&comm, n, id, rank));
    held = dev_free();

    /* the buffers: n slots of NCCL_BUFFSIZE (with a proxy, 1 + n more to
     * stage sends), in device memory a tool can see */
    buffers = stat(ncclStatGpuMemSuspend);
    persist = stat(ncclStatGpuMemPersist);
    if (getenv("NCCL_SHM_USE_CUDA_MEMCPY") && atoi(getenv("NCCL_SHM_USE_CUDA_MEMCPY")))
        CHECK_EQ(buffers, (uint64_t)(2 * n + 1) * 4 * MiB);
    else
        CHECK_EQ(buffers, (uint64_t)n * 4 * MiB);
    CHECK_EQ(stat(ncclStatGpuMemSuspended), 0);
    CHECK_EQ(stat(ncclStatGpuMemTotal), buffers + persist);
    CHECK(before - held >= buffers + persist);
    NCCL_RES(ncclCommMemStats(comm, (ncclCommMemStat_t)99, &(uint64_t){0}), ncclInvalidArgument);

    allreduce_check(1);

    /* suspend: work queued just before ends first, then the buffers go */
    NCCL_OK(ncclAllReduce((void *)d, (void *)d, 1024, ncclInt32, ncclSum, comm, s));
    NCCL_RES(ncclCommSuspend(comm, 0x10), ncclInvalidArgument);
    NCCL_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
    CU_OK(cuStreamQuery(s));
    suspended = dev_free();
    if (suspended - held < buffers)
        FAIL("rank %d: suspend freed %zu bytes, the buffers are %llu (free: %zu before init, %zu held, %zu suspended)",
             rank, suspended - held, (unsigned long long)buffers, before, held, suspended);
    CHECK_EQ(stat(ncclStatGpuMemSuspended), 1);
    CHECK_EQ(stat(ncclStatGpuMemTotal), persist);
    CHECK_EQ(stat(ncclStatGpuMemSuspend), buffers);

    /* nothing runs on a suspended communicator */
    NCCL_RES(ncclAllReduce((void *)d, (void *)d, 1024, ncclInt32, ncclSum, comm, s), ncclInvalidUsage);
    NCCL_RES(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclInvalidUsage);

    NCCL_OK(ncclCommResume(comm));
    resumed = dev_free();
    CHECK_EQ(resumed, held);
    CHECK_EQ(stat(ncclStatGpuMemSuspended), 0);
    CHECK_EQ(stat(ncclStatGpuMemTotal), buffers + persist);
    NCCL_RES(ncclCommResume(comm), ncclInvalidUsage);

    allreduce_check(2);
    /* twice more, to see nothing leaks or drifts */
    for (int i = 0; i < 2; i++) {
        NCCL_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
        CHECK_EQ(dev_free(), suspended);
        NCCL_OK(ncclCommResume(comm));
        allreduce_check(3 + i);
    }
    NCCL_OK(ncclCommDestroy(comm));
    /* over P2P a peer maps this rank's slots until its own destroy: the
     * memory comes back once every peer has closed it (the driver's rule) */
    for (int i = 0; i < 500 && dev_free() != before; i++)
        usleep(10000);
    CHECK_EQ(dev_free(), before);
    CU_OK(cuMemFree(d));
    t_send(4, "D", 1);
    return 0;
}

int main(int argc, char **argv)
{
    struct t_rank ranks[2];
    ncclUniqueId id;
    int bad = 0;

    if (argc == 5 && !strcmp(argv[1], "rank"))
        return rank_main(atoi(argv[2]), atoi(argv[3]), argv[4]);
    t_machine("suspend", 2);
    if (argc > 1 && !strcmp(argv[1], "cumem"))
        setenv("NCCL_CUMEM_ENABLE", "1", 1);     /* the buffers as VMM memory */
    else
        setenv("NCCL_CUMEM_ENABLE", "0", 1);
    setenv("NCCL_BUFFSIZE", "4194304", 1);
    t_new_id(&id);
    for (int r = 0; r < 2; r++)
        ranks[r] = t_spawn("rank", r, 2, &id);
    for (int r = 0; r < 2; r++) {
        int st = t_wait(ranks[r].pid);
        if (st) {
            fprintf(stderr, "rank %d exited with %d\n", r, st);
            bad = 1;
        }
    }
    if (!bad)
        printf("suspend frees the buffers, resume gives them back, collectives work after\n");
    return bad;
}
