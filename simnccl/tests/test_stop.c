/*
 * test_stop.c - a rank stopped in the middle of a collective (SIGSTOP, as a
 * suspend of one process would do): its peer's kernel goes past the steps
 * both had published, then waits, its stream not complete; once the rank
 * runs again both finish with the right result. Two ranks.
 */
#include "ranks.h"

#define CNT (1 << 20)          /* floats: 64 steps of 64 KiB */

static int rank_main(int rank, int n, const char *hex)
{
    ncclUniqueId id;
    ncclComm_t comm;
    CUstream s;
    CUdeviceptr d;
    float *h = malloc(CNT * sizeof(float));
    char c;

    t_id_parse(hex, &id);
    t_rank_ctx(rank);
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    NCCL_OK(ncclCommInitRank(&comm, n, id, rank));
    for (int i = 0; i < CNT; i++)
        h[i] = (float)((i & 1023) + rank);
    CU_OK(cuMemAlloc(&d, CNT * sizeof(float)));
    CU_OK(cuMemcpyHtoD(d, h, CNT * sizeof(float)));
    t_send(4, "I", 1);

    t_recv(3, &c, 1);          /* 'G': go */
    NCCL_OK(ncclAllReduce((void *)d, (void *)d, CNT, ncclFloat, ncclSum, comm, s));
    if (rank == 0) {
        t_sleep_ms(300);       /* the peer is stopped: we cannot finish */
        CU_RES(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    }
    t_send(4, "Q", 1);

    t_recv(3, &c, 1);          /* 'W': the peer runs again */
    CU_OK(cuStreamSynchronize(s));
    CU_OK(cuMemcpyDtoH(h, d, CNT * sizeof(float)));
    for (int i = 0; i < CNT; i++)
        if (h[i] != (float)(2 * (i & 1023) + 1))
            FAIL("rank %d: element %d = %g after the stop", rank, i, h[i]);
    NCCL_OK(ncclCommDestroy(comm));
    t_send(4, "D", 1);
    return 0;
}

int main(int argc, char **argv)
{
    struct t_rank r[2];
    ncclUniqueId id;
    char c;
    int st;

    if (argc == 5 && !strcmp(argv[1], "rank"))
        return rank_main(atoi(argv[2]), atoi(argv[3]), argv[4]);
    t_machine("stop", 2);
    setenv("NCCL_BUFFSIZE", "65536", 1);
    t_new_id(&id);
    for (int i = 0; i < 2; i++)
        r[i] = t_spawn("rank", i, 2, &id);
    for (int i = 0; i < 2; i++) {
        t_recv(r[i].from, &c, 1);
        CHECK_EQ(c, 'I');
    }
    /* rank 1 publishes its first step and waits for rank 0 there: stop it */
    t_send(r[1].to, "G", 1);
    t_recv(r[1].from, &c, 1);
    t_sleep_ms(100);
    CHECK(kill(r[1].pid, SIGSTOP) == 0);
    CHECK_EQ(waitpid(r[1].pid, &st, WUNTRACED), r[1].pid);
    CHECK(WIFSTOPPED(st));
    /* rank 0 goes as far as rank 1 went, then waits (it checks NOT_READY) */
    t_send(r[0].to, "G", 1);
    t_recv(r[0].from, &c, 1);
    CHECK_EQ(c, 'Q');
    CHECK(kill(r[1].pid, SIGCONT) == 0);
    for (int i = 0; i < 2; i++)
        t_send(r[i].to, "W", 1);
    for (int i = 0; i < 2; i++) {
        t_recv(r[i].from, &c, 1);
        CHECK_EQ(c, 'D');
        CHECK_EQ(t_wait(r[i].pid), 0);
    }
    printf("a rank stopped mid-collective holds its peer until it runs again; both finish right\n");
    return 0;
}
