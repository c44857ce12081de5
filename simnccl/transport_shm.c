/*
 * transport_shm.c - NCCL's SHM transport, as used between the GPUs of one
 * node when P2P is off: the ranks' slots are host memory shared by the
 * processes (the rendezvous segment) and registered with the driver, so the
 * kernels reach them through device addresses (cuMemHostRegister with
 * CU_MEMHOSTREGISTER_DEVICEMAP, cuMemHostGetDevicePointer).
 *
 * The segment after its header (rendezvous.c):
 *   struct snccl_rank_ctr [nranks]
 *   struct snccl_pair_ctr [nranks * nranks]
 *   collective slots      [nranks]           slot_bytes each, rank r's at r
 *   send/recv slots       [nranks * nranks]  slot_bytes each, src -> dst at src * n + dst
 * Pages are only used when touched (tmpfs), so the send/recv slots of pairs
 * that never talk cost nothing.
 *
 * With NCCL_SHM_USE_CUDA_MEMCPY=1 (snccl_transport_shm_proxy), as in NCCL,
 * the kernels stage what they send in device memory and a proxy thread of
 * the library, in the communicator's context, copies it into the slots with
 * cuMemcpyDtoHAsync on a stream of its own and publishes it: a library
 * thread that calls the driver while the program runs.
 */
#include "simnccl.h"

#include <stddef.h>
#include <string.h>

#define PAGE 4096ull

struct layout {
    uint64_t rank_ctr, pair_ctr, coll, p2p, total;
};

static uint64_t round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

static struct layout layout_of(uint32_t n, uint64_t slot)
{
    struct layout l;

    l.rank_ctr = round_up(sizeof(struct snccl_seg), PAGE);
    l.pair_ctr = l.rank_ctr + n * sizeof(struct snccl_rank_ctr);
    l.coll = round_up(l.pair_ctr + (uint64_t)n * n * sizeof(struct snccl_pair_ctr), PAGE);
    l.p2p = l.coll + n * slot;
    l.total = l.p2p + (uint64_t)n * n * slot;
    return l;
}

/* The rendezvous segment's size for n ranks. */
uint64_t snccl_shm_bytes(uint32_t nranks, uint64_t slot_bytes)
{
    return layout_of(nranks, slot_bytes).total;
}

/* The segment registered with the driver; its device address. */
static ncclResult_t shm_register(struct ncclComm *comm, CUdeviceptr *base)
{
    CUresult r;

    r = cuMemHostRegister(comm->seg, comm->seg_bytes, CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS)
        return snccl_cu(r, "cuMemHostRegister of the shared segment");
    comm->seg_registered = true;
    if ((r = cuMemHostGetDevicePointer(base, comm->seg, 0)) != CUDA_SUCCESS)
        return snccl_cu(r, "cuMemHostGetDevicePointer of the shared segment");
    return ncclSuccess;
}

ncclResult_t snccl_shm_counters(struct ncclComm *comm)
{
    struct layout l = layout_of((uint32_t)comm->nranks, comm->slot_bytes);
    struct snccl_devcomm *dc = comm->devcomm_host;
    CUdeviceptr base;
    ncclResult_t rc;

    if ((rc = shm_register(comm, &base)))
        return rc;
    dc->bell = base + offsetof(struct snccl_seg, bell);
    dc->rank_ctr = base + l.rank_ctr;
    dc->pair_ctr = base + l.pair_ctr;
    return ncclSuccess;
}

void snccl_shm_unregister(struct ncclComm *comm)
{
    if (comm->seg_registered) {
        cuMemHostUnregister(comm->seg);
        comm->seg_registered = false;
    }
}

static ncclResult_t shm_setup(struct ncclComm *comm)
{
    uint32_t n = (uint32_t)comm->nranks;
    struct layout l = layout_of(n, comm->slot_bytes);
    struct snccl_devcomm *dc = comm->devcomm_host;
    CUdeviceptr base;
    ncclResult_t rc;

    if ((rc = snccl_shm_counters(comm)))
        return rc;
    base = dc->bell - offsetof(struct snccl_seg, bell);
    for (uint32_t i = 0; i < n; i++)
        dc->table[i] = base + l.coll + i * comm->slot_bytes;
    for (uint32_t i = 0; i < n * n; i++)
        dc->table[n + i] = base + l.p2p + i * comm->slot_bytes;
    return ncclSuccess;
}

static void shm_teardown(struct ncclComm *comm)
{
    snccl_shm_unregister(comm);
}

/* This rank's abort flag, as the kernels read it. */
uint32_t *snccl_shm_abort_flag(struct ncclComm *comm)
{
    struct layout l = layout_of((uint32_t)comm->nranks, comm->slot_bytes);
    struct snccl_rank_ctr *rc = (struct snccl_rank_ctr *)((char *)comm->seg + l.rank_ctr);

    return &rc[comm->rank].abort;
}

/* --- the proxy ------------------------------------------------------------------ */

struct proxy_view {
    struct snccl_rank_ctr *me;
    struct snccl_pair_ctr *pairs;     /* [rank * n + dst] */
    unsigned char *coll_slot, *p2p_slots;
};

/* One staged step, if there is one: stage bytes into slot, then publish. */
static int forward(struct ncclComm *comm, uint64_t *staged, uint64_t *staged_len, uint64_t *published,
                   uint64_t stage_off, unsigned char *slot, bool *moved)
{
    uint64_t s = __atomic_load_n(staged, __ATOMIC_ACQUIRE), len;
    CUdeviceptr stage;
    CUresult r;

    if (s <= __atomic_load_n(published, __ATOMIC_RELAXED))
        return 0;
    len = __atomic_load_n(staged_len, __ATOMIC_RELAXED);
    stage = __atomic_load_n(&comm->devbuf, __ATOMIC_ACQUIRE) + stage_off;
    if (len && ((r = cuMemcpyDtoHAsync(slot, stage, len, comm->proxy_stream)) ||
                (r = cuStreamSynchronize(comm->proxy_stream)))) {
        snccl_cu(r, "the proxy's copy into the shm transport");
        return -1;
    }
    SNCCL_TSAN_RELEASE(staged);     /* the staging buffer is free again (work.h) */
    __atomic_store_n(published, s, __ATOMIC_RELEASE);
    snccl_bell_ring(comm);
    *moved = true;
    return 0;
}

static void *proxy_main(void *arg)
{
    struct ncclComm *comm = arg;
    uint32_t n = (uint32_t)comm->nranks, me = (uint32_t)comm->rank;
    uint64_t slot = comm->slot_bytes;
    struct layout l = layout_of(n, slot);
    unsigned char *base = (unsigned char *)comm->seg;
    struct proxy_view v = {
        .me = (struct snccl_rank_ctr *)(base + l.rank_ctr) + me,
        .pairs = (struct snccl_pair_ctr *)(base + l.pair_ctr) + me * n,
        .coll_slot = base + l.coll + me * slot,
        .p2p_slots = base + l.p2p + (uint64_t)me * n * slot,
    };

    if (cuCtxSetCurrent(comm->ctx) != CUDA_SUCCESS)
        return NULL;
    while (!__atomic_load_n(&comm->proxy_stop, __ATOMIC_ACQUIRE)) {
        uint32_t seen = __atomic_load_n(&comm->seg->bell, __ATOMIC_ACQUIRE);
        bool moved = false;
        int err = forward(comm, &v.me->staged, &v.me->staged_len, &v.me->posted, n * slot,
                          v.coll_slot, &moved);

        for (uint32_t dst = 0; dst < n && !err; dst++)
            err = forward(comm, &v.pairs[dst].staged, &v.pairs[dst].staged_len, &v.pairs[dst].sent,
                          (n + 1 + dst) * slot, v.p2p_slots + dst * slot, &moved);
        if (err)
            break;      /* the kernels waiting on it stay until an abort, as with NCCL */
        if (!moved)
            snccl_bell_wait(comm, seen);
    }
    return NULL;
}

static ncclResult_t proxy_setup(struct ncclComm *comm)
{
    ncclResult_t rc;
    CUresult r;

    if ((rc = shm_setup(comm)))
        return rc;
    comm->devcomm_host->proxy = 1;
    if ((r = cuStreamCreate(&comm->proxy_stream, CU_STREAM_NON_BLOCKING)))
        return snccl_cu(r, "cuStreamCreate for the proxy");
    if (pthread_create(&comm->proxy, NULL, proxy_main, comm))
        return snccl_fail(ncclSystemError, "pthread_create of the proxy thread");
    comm->proxy_live = true;
    return ncclSuccess;
}

static void proxy_teardown(struct ncclComm *comm)
{
    if (comm->proxy_live) {
        __atomic_store_n(&comm->proxy_stop, 1, __ATOMIC_RELEASE);
        snccl_bell_ring(comm);
        pthread_join(comm->proxy, NULL);
        comm->proxy_live = false;
    }
    if (comm->proxy_stream) {
        cuStreamDestroy(comm->proxy_stream);
        comm->proxy_stream = NULL;
    }
    shm_teardown(comm);
}

const struct snccl_transport snccl_transport_shm_proxy = {
    .name = "SHM/cudaMemcpy",
    .setup = proxy_setup,
    .teardown = proxy_teardown,
    .abort_flag = snccl_shm_abort_flag,
};

const struct snccl_transport snccl_transport_shm = {
    .name = "SHM",
    .setup = shm_setup,
    .teardown = shm_teardown,
    .abort_flag = snccl_shm_abort_flag,
};
