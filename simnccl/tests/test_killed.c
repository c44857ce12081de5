/*
 * test_killed.c - a rank killed in the middle of a collective: its peer's
 * kernel waits (stream NOT_READY) until the peer aborts its communicator;
 * the survivor then makes a new communicator (a fresh unique id) with a new
 * process in the dead rank's place, and collectives work again. What a job
 * that loses a rank, or is restored elsewhere, does with NCCL.
 */
#include "ranks.h"

#define CNT (1 << 18)          /* floats: 16 steps of 64 KiB */

static CUstream s;
static CUdeviceptr d;
static float *h;

static void fill(int rank)
{
    for (int i = 0; i < CNT; i++)
        h[i] = (float)((i & 511) + rank);
    CU_OK(cuMemcpyHtoD(d, h, CNT * sizeof(float)));
}

static void allreduce_check(ncclComm_t comm, int rank)
{
    fill(rank);
    NCCL_OK(ncclAllReduce((void *)d, (void *)d, CNT, ncclFloat, ncclSum, comm, s));
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuMemcpyDtoH(h, d, CNT * sizeof(float)));
    for (int i = 0; i < CNT; i++)
        if (h[i] != (float)(2 * (i & 511) + 1))
            FAIL("rank %d: element %d = %g", rank, i, h[i]);
}

static void setup(int rank)
{
    h = malloc(CNT * sizeof(float));
    t_rank_ctx(rank);
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuMemAlloc(&d, CNT * sizeof(float)));
}

/* Rank 0: survives. */
static int survivor(ncclUniqueId id)
{
    ncclComm_t comm;
    char c;

    setup(0);
    NCCL_OK(ncclCommInitRank(&comm, 2, id, 0));
    t_send(4, "I", 1);
    t_recv(3, &c, 1);          /* 'G': the peer is dead */
    fill(0);
    NCCL_OK(ncclAllReduce((void *)d, (void *)d, CNT, ncclFloat, ncclSum, comm, s));
    t_sleep_ms(300);
    CU_RES(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    NCCL_OK(ncclCommAbort(comm));
    CU_OK(cuStreamSynchronize(s));

    t_recv(3, &id, sizeof(id)); /* a new communicator with the replacement */
    NCCL_OK(ncclCommInitRank(&comm, 2, id, 0));
    allreduce_check(comm, 0);
    NCCL_OK(ncclCommDestroy(comm));
    t_send(4, "D", 1);
    return 0;
}

/* Rank 1: joins, publishes the first step of the collective, is killed. */
static int victim(ncclUniqueId id)
{
    ncclComm_t comm;

    setup(1);
    NCCL_OK(ncclCommInitRank(&comm, 2, id, 1));
    t_send(4, "I", 1);
    fill(1);
    NCCL_OK(ncclAllReduce((void *)d, (void *)d, CNT, ncclFloat, ncclSum, comm, s));
    t_send(4, "Q", 1);
    for (;;)
        pause();
}

/* Rank 1 again, in a new process. */
static int replacement(ncclUniqueId id)
{
    ncclComm_t comm;

    setup(1);
    NCCL_OK(ncclCommInitRank(&comm, 2, id, 1));
    allreduce_check(comm, 1);
    NCCL_OK(ncclCommDestroy(comm));
    return 0;
}

int main(int argc, char **argv)
{
    struct t_rank r0, r1, r2;
    ncclUniqueId id;
    char c;
    int st;

    if (argc == 5) {
        t_id_parse(argv[4], &id);
        if (!strcmp(argv[1], "survivor"))
            return survivor(id);
        return !strcmp(argv[1], "victim") ? victim(id) : replacement(id);
    }
    t_machine("killed", 2);
    setenv("NCCL_BUFFSIZE", "65536", 1);
    t_new_id(&id);
    r0 = t_spawn("survivor", 0, 2, &id);
    r1 = t_spawn("victim", 1, 2, &id);
    t_recv(r0.from, &c, 1);
    t_recv(r1.from, &c, 1);
    t_recv(r1.from, &c, 1);
    CHECK_EQ(c, 'Q');
    t_sleep_ms(100);
    CHECK(kill(r1.pid, SIGKILL) == 0);
    st = t_wait(r1.pid);
    CHECK_EQ(st, 128 + SIGKILL);
    t_send(r0.to, "G", 1);
    t_new_id(&id);
    t_send(r0.to, &id, sizeof(id));
    r2 = t_spawn("replacement", 1, 2, &id);
    t_recv(r0.from, &c, 1);
    CHECK_EQ(c, 'D');
    CHECK_EQ(t_wait(r0.pid), 0);
    CHECK_EQ(t_wait(r2.pid), 0);
    printf("a killed rank holds its peer until ncclCommAbort; a new communicator with a new process works\n");
    return 0;
}
