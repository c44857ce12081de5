/*
 * test_api.c - one process: the version, error strings and argument checks;
 * a communicator of one rank; ncclCommInitAll over two GPUs driven from one
 * thread with groups (collectives, suspend and resume of both together).
 */
#include "ranks.h"

static void version_and_errors(void)
{
    int v = 0;

    NCCL_OK(ncclGetVersion(&v));
    CHECK_EQ(v, NCCL_VERSION_CODE);
    CHECK(v >= NCCL_VERSION(2, 29, 7));
    CHECK_EQ(NCCL_VERSION(2, 29, 7), 22907);
    CHECK_EQ(sizeof(ncclUniqueId), 128);
    NCCL_RES(ncclGetVersion(NULL), ncclInvalidArgument);
    CHECK(!strcmp(ncclGetErrorString(ncclSuccess), "no error"));
    CHECK(strstr(ncclGetErrorString(ncclInvalidArgument), "invalid argument"));
    CHECK(strstr(ncclGetErrorString(ncclInvalidUsage), "invalid usage"));
    CHECK(strstr(ncclGetErrorString(ncclInProgress), "in progress"));
    CHECK(strstr(ncclGetErrorString((ncclResult_t)42), "unknown"));
    CHECK(ncclGetLastError(NULL) != NULL);
}

static void bad_arguments(void)
{
    ncclUniqueId id, junk;
    ncclComm_t c;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    int v;

    NCCL_RES(ncclGetUniqueId(NULL), ncclInvalidArgument);
    t_new_id(&id);
    memset(&junk, 0x5a, sizeof(junk));
    NCCL_RES(ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument);
    NCCL_RES(ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument);
    NCCL_RES(ncclCommInitRank(&c, 2, id, 2), ncclInvalidArgument);
    NCCL_RES(ncclCommInitRank(&c, 2, id, -1), ncclInvalidArgument);
    NCCL_RES(ncclCommInitRank(&c, 1, junk, 0), ncclInvalidArgument);
    cfg.magic = 0;
    NCCL_RES(ncclCommInitRankConfig(&c, 1, id, 0, &cfg), ncclInvalidArgument);
    NCCL_RES(ncclCommCount(NULL, &v), ncclInvalidArgument);
    NCCL_RES(ncclCommUserRank(NULL, &v), ncclInvalidArgument);
    NCCL_RES(ncclCommCuDevice(NULL, &v), ncclInvalidArgument);
    NCCL_RES(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument);
    NCCL_RES(ncclAlltoAll(NULL, NULL, 0, ncclFloat, NULL, NULL), ncclInvalidArgument);
    NCCL_RES(ncclGather(NULL, NULL, 0, ncclFloat, 0, NULL, NULL), ncclInvalidArgument);
    NCCL_RES(ncclScatter(NULL, NULL, 0, ncclFloat, 0, NULL, NULL), ncclInvalidArgument);
    NCCL_RES(ncclCommSuspend(NULL, NCCL_SUSPEND_MEM), ncclInvalidArgument);
    NCCL_RES(ncclCommResume(NULL), ncclInvalidArgument);
    NCCL_RES(ncclCommMemStats(NULL, ncclStatGpuMemTotal, &(uint64_t){0}), ncclInvalidArgument);
    NCCL_RES(ncclGroupEnd(), ncclInvalidUsage);
    NCCL_OK(ncclCommDestroy(NULL));
}

/* A communicator of one rank: collectives copy, checks of its arguments. */
static void single_rank(void)
{
    ncclUniqueId id;
    ncclComm_t c;
    CUstream s;
    CUdeviceptr a, b;
    int in[100], out[100];

    t_new_id(&id);
    NCCL_OK(ncclCommInitRank(&c, 1, id, 0));
    CU_OK(cuStreamCreate(&s, 0));
    CU_OK(cuMemAlloc(&a, sizeof(in)));
    CU_OK(cuMemAlloc(&b, sizeof(in)));
    for (int i = 0; i < 100; i++)
        in[i] = i * 3 - 50;
    CU_OK(cuMemcpyHtoD(a, in, sizeof(in)));
    NCCL_OK(ncclAllReduce((void *)a, (void *)b, 100, ncclInt32, ncclMax, c, s));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuMemcpyDtoH(out, b, sizeof(out)));
    CHECK(!memcmp(in, out, sizeof(in)));
    /* one rank's AlltoAll, Gather and Scatter are copies too */
    NCCL_OK(ncclAlltoAll((void *)a, (void *)b, 50, ncclInt32, c, s));
    NCCL_OK(ncclGather((void *)(a + 200), (void *)(b + 200), 50, ncclInt32, 0, c, s));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuMemcpyDtoH(out, b, sizeof(out)));
    CHECK(!memcmp(in, out, sizeof(in)));
    CU_OK(cuMemsetD8(b, 0, sizeof(in)));
    NCCL_OK(ncclScatter((void *)a, (void *)b, 100, ncclInt32, 0, c, s));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuMemcpyDtoH(out, b, sizeof(out)));
    CHECK(!memcmp(in, out, sizeof(in)));

    NCCL_RES(ncclAllReduce((void *)a, (void *)b, 100, (ncclDataType_t)77, ncclSum, c, s), ncclInvalidArgument);
    NCCL_RES(ncclAllReduce((void *)a, (void *)b, 100, ncclFloat8e4m3, ncclSum, c, s), ncclInvalidArgument);
    NCCL_RES(ncclAllReduce((void *)a, (void *)b, 100, ncclInt32, (ncclRedOp_t)9, c, s), ncclInvalidArgument);
    NCCL_RES(ncclAllReduce(NULL, (void *)b, 100, ncclInt32, ncclSum, c, s), ncclInvalidArgument);
    NCCL_RES(ncclBroadcast((void *)a, (void *)b, 100, ncclInt32, 1, c, s), ncclInvalidArgument);
    NCCL_RES(ncclReduce((void *)a, (void *)b, 100, ncclInt32, ncclSum, -1, c, s), ncclInvalidArgument);
    NCCL_RES(ncclSend((void *)a, 100, ncclInt32, 3, c, s), ncclInvalidArgument);
    NCCL_RES(ncclRecv(NULL, 100, ncclInt32, 0, c, s), ncclInvalidArgument);
    NCCL_RES(ncclGather((void *)a, (void *)b, 100, ncclInt32, 1, c, s), ncclInvalidArgument);
    NCCL_RES(ncclScatter(NULL, (void *)b, 100, ncclInt32, 0, c, s), ncclInvalidArgument);
    NCCL_RES(ncclAlltoAll((void *)a, (void *)a, 100, ncclInt32, c, s), ncclInvalidArgument);
    /* an error inside a group is the group's too */
    NCCL_OK(ncclGroupStart());
    NCCL_RES(ncclSend((void *)a, 100, ncclInt32, 5, c, s), ncclInvalidArgument);
    NCCL_RES(ncclGroupEnd(), ncclInvalidArgument);

    NCCL_OK(ncclCommFinalize(c));
    NCCL_RES(ncclAllReduce((void *)a, (void *)b, 1, ncclInt32, ncclSum, c, s), ncclInvalidUsage);
    NCCL_OK(ncclCommDestroy(c));
    CU_OK(cuMemFree(a));
    CU_OK(cuMemFree(b));
    CU_OK(cuStreamDestroy(s));
}

/* Two ranks of one process, one thread: ncclCommInitAll and groups. */
static void init_all(void)
{
    ncclComm_t comms[2];
    CUcontext ctx[2];
    CUstream s[2];
    CUdeviceptr d[2];
    double h[2][500], out[500];
    int dev;

    NCCL_OK(ncclCommInitAll(comms, 2, NULL));
    for (int i = 0; i < 2; i++) {
        NCCL_OK(ncclCommCuDevice(comms[i], &dev));
        CHECK_EQ(dev, i);
        CU_OK(cuDevicePrimaryCtxRetain(&ctx[i], i));
        CU_OK(cuCtxSetCurrent(ctx[i]));
        CU_OK(cuStreamCreate(&s[i], 0));
        for (int j = 0; j < 500; j++)
            h[i][j] = j * 0.25 + i;
        CU_OK(cuMemAlloc(&d[i], sizeof(h[i])));
        CU_OK(cuMemcpyHtoD(d[i], h[i], sizeof(h[i])));
    }
    for (int round = 0; round < 2; round++) {
        NCCL_OK(ncclGroupStart());
        for (int i = 0; i < 2; i++)
            NCCL_OK(ncclAllReduce((void *)d[i], (void *)d[i], 500, ncclDouble, ncclSum, comms[i], s[i]));
        NCCL_OK(ncclGroupEnd());
        for (int i = 0; i < 2; i++) {
            CU_OK(cuCtxSetCurrent(ctx[i]));
            CU_OK(cuStreamSynchronize(s[i]));
            CU_OK(cuMemcpyDtoH(out, d[i], sizeof(out)));
            for (int j = 0; j < 500; j++)
                if (out[j] != (j * 0.25 * 2 + 1) * (round ? 2 : 1))
                    FAIL("InitAll rank %d round %d: element %d = %g", i, round, j, out[j]);
        }
        /* suspend and resume both from this thread: together, in groups */
        NCCL_OK(ncclGroupStart());
        for (int i = 0; i < 2; i++)
            NCCL_OK(ncclCommSuspend(comms[i], NCCL_SUSPEND_MEM));
        NCCL_OK(ncclGroupEnd());
        for (int i = 0; i < 2; i++) {
            uint64_t v;
            NCCL_OK(ncclCommMemStats(comms[i], ncclStatGpuMemSuspended, &v));
            CHECK_EQ(v, 1);
        }
        NCCL_OK(ncclGroupStart());
        for (int i = 0; i < 2; i++)
            NCCL_OK(ncclCommResume(comms[i]));
        NCCL_OK(ncclGroupEnd());
    }
    for (int i = 0; i < 2; i++)
        NCCL_OK(ncclCommDestroy(comms[i]));
    NCCL_RES(ncclCommInitAll(comms, 2, (int[]){ 0, 0 }), ncclInvalidUsage);
    NCCL_RES(ncclCommInitAll(comms, 2, (int[]){ 0, 7 }), ncclInvalidArgument);
}

int main(void)
{
    t_machine("api", 2);
    version_and_errors();
    bad_arguments();
    t_rank_ctx(0);
    single_rank();
    init_all();
    printf("version, errors, one-rank and InitAll communicators as documented\n");
    return 0;
}
