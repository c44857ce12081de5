/*
 * test_abort.c - the hazard tcgpu must handle: a rank that never issues its
 * part of a collective leaves its peer's kernel waiting, the peer's stream
 * not complete (CUDA_ERROR_NOT_READY), without burning a core; ncclCommAbort
 * from another thread stops it and the stream completes. A suspend the peer
 * never joins waits in its barrier until ncclCommAbort from another thread.
 * And an init whose peers never come: nonblocking, ncclInProgress until
 * ncclCommAbort.
 */
#include "ranks.h"

#include <pthread.h>
#include <sys/resource.h>

static ncclComm_t comm;
static ncclUniqueId id2;      /* the second communicator's, from the parent */

static double cpu_seconds(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void *abort_later(void *arg)
{
    t_sleep_ms(300);
    *(double *)arg = t_now();
    NCCL_OK(ncclCommAbort(comm));
    return NULL;
}

/* Rank 0: issues an AllReduce that rank 1 never joins. */
static int waiter(ncclUniqueId id)
{
    CUstream s;
    CUdeviceptr d;
    pthread_t th;
    double cpu0, t0, aborted_at, done_at;
    ncclComm_t lonely;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t async;

    t_rank_ctx(0);
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    NCCL_OK(ncclCommInitRank(&comm, 2, id, 0));
    CU_OK(cuMemAlloc(&d, 1 << 20));
    NCCL_OK(ncclAllReduce((void *)d, (void *)d, 1 << 18, ncclFloat, ncclSum, comm, s));

    cpu0 = cpu_seconds();
    t0 = t_now();
    t_sleep_ms(600);
    CU_RES(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    /* the waiting kernel sleeps: far less than a core */
    if (cpu_seconds() - cpu0 > 0.25 * (t_now() - t0))
        FAIL("waiting for a peer used %.3f s of CPU in %.3f s", cpu_seconds() - cpu0, t_now() - t0);

    /* abort from another thread while this one waits on the stream */
    CHECK(pthread_create(&th, NULL, abort_later, &aborted_at) == 0);
    CU_OK(cuStreamSynchronize(s));
    done_at = t_now();
    CHECK(pthread_join(th, NULL) == 0);
    if (done_at - aborted_at > 2.0)
        FAIL("the stream completed %.3f s after ncclCommAbort", done_at - aborted_at);
    CU_OK(cuStreamQuery(s));
    CU_OK(cuMemFree(d));

    /* a suspend the peer never joins: blocked until aborted */
    NCCL_OK(ncclCommInitRank(&comm, 2, id2, 0));
    CHECK(pthread_create(&th, NULL, abort_later, &aborted_at) == 0);
    if (ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclSuccess)
        FAIL("ncclCommSuspend returned ncclSuccess though the peer never suspended");
    done_at = t_now();
    CHECK(pthread_join(th, NULL) == 0);
    if (done_at - aborted_at > 2.0)
        FAIL("ncclCommSuspend returned %.3f s after ncclCommAbort", done_at - aborted_at);

    /* an init nobody joins: nonblocking, in progress until aborted */
    NCCL_OK(ncclGetUniqueId(&id));
    cfg.blocking = 0;
    NCCL_RES(ncclCommInitRankConfig(&lonely, 2, id, 0, &cfg), ncclInProgress);
    CHECK(lonely != NULL);
    t_sleep_ms(200);
    NCCL_OK(ncclCommGetAsyncError(lonely, &async));
    CHECK_EQ(async, ncclInProgress);
    NCCL_RES(ncclAllReduce((void *)0, (void *)0, 0, ncclFloat, ncclSum, lonely, s), ncclInvalidUsage);
    t0 = t_now();
    NCCL_OK(ncclCommAbort(lonely));
    if (t_now() - t0 > 1.0)
        FAIL("aborting a pending init took %.3f s", t_now() - t0);
    t_send(4, "A", 1);
    return 0;
}

/* Rank 1: joins the communicator, never joins the collective. */
static int truant(ncclUniqueId id)
{
    char c;

    ncclComm_t comm2;

    t_rank_ctx(1);
    NCCL_OK(ncclCommInitRank(&comm, 2, id, 1));
    NCCL_OK(ncclCommInitRank(&comm2, 2, id2, 1));
    t_recv(3, &c, 1);           /* until the waiter is done */
    NCCL_OK(ncclCommDestroy(comm2));
    NCCL_OK(ncclCommDestroy(comm));
    return 0;
}

int main(int argc, char **argv)
{
    struct t_rank r0, r1;
    ncclUniqueId id;
    char c;
    int st0, st1;

    if (argc == 5 && !strcmp(argv[1], "rank")) {
        t_id_parse(argv[4], &id);
        t_recv(3, &id2, sizeof(id2));
        return atoi(argv[2]) == 0 ? waiter(id) : truant(id);
    }
    t_machine("abort", 2);
    t_new_id(&id);
    r0 = t_spawn("rank", 0, 2, &id);
    r1 = t_spawn("rank", 1, 2, &id);
    t_new_id(&id2);
    t_send(r0.to, &id2, sizeof(id2));
    t_send(r1.to, &id2, sizeof(id2));
    t_recv(r0.from, &c, 1);
    t_send(r1.to, "X", 1);
    st0 = t_wait(r0.pid);
    st1 = t_wait(r1.pid);
    CHECK_EQ(st0, 0);
    CHECK_EQ(st1, 0);
    printf("a rank that never joins a collective or a suspend leaves its peer waiting until ncclCommAbort\n");
    return 0;
}
