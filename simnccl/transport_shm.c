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
 */
#include "simnccl.h"

#include <stddef.h>

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

static ncclResult_t shm_setup(struct ncclComm *comm)
{
    uint32_t n = (uint32_t)comm->nranks;
    struct layout l = layout_of(n, comm->slot_bytes);
    struct snccl_devcomm *dc = comm->devcomm_host;
    CUdeviceptr base;
    CUresult r;

    r = cuMemHostRegister(comm->seg, comm->seg_bytes, CU_MEMHOSTREGISTER_DEVICEMAP);
    if (r != CUDA_SUCCESS)
        return snccl_cu(r, "cuMemHostRegister of the shm transport");
    comm->seg_registered = true;
    if ((r = cuMemHostGetDevicePointer(&base, comm->seg, 0)) != CUDA_SUCCESS)
        return snccl_cu(r, "cuMemHostGetDevicePointer of the shm transport");
    dc->bell = base + offsetof(struct snccl_seg, bell);
    dc->rank_ctr = base + l.rank_ctr;
    dc->pair_ctr = base + l.pair_ctr;
    for (uint32_t i = 0; i < n; i++)
        dc->table[i] = base + l.coll + i * comm->slot_bytes;
    for (uint32_t i = 0; i < n * n; i++)
        dc->table[n + i] = base + l.p2p + i * comm->slot_bytes;
    return ncclSuccess;
}

static void shm_teardown(struct ncclComm *comm)
{
    if (comm->seg_registered) {
        cuMemHostUnregister(comm->seg);
        comm->seg_registered = false;
    }
}

/* This rank's abort flag, as the kernels read it. */
static uint32_t *shm_abort_flag(struct ncclComm *comm)
{
    struct layout l = layout_of((uint32_t)comm->nranks, comm->slot_bytes);
    struct snccl_rank_ctr *rc = (struct snccl_rank_ctr *)((char *)comm->seg + l.rank_ctr);

    return &rc[comm->rank].abort;
}

const struct snccl_transport snccl_transport_shm = {
    .name = "SHM",
    .setup = shm_setup,
    .teardown = shm_teardown,
    .abort_flag = shm_abort_flag,
};
