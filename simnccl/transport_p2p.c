/*
 * transport_p2p.c - NCCL's P2P transport over CUDA IPC, as NCCL uses
 * between GPUs of one node that reach each other's memory when its cuMem
 * path is off (cudaIpcGetMemHandle of its buffers): each rank's slots are
 * device memory of its own GPU, exported with cuIpcGetMemHandle; the
 * handles meet in the rendezvous segment and every rank opens its peers'
 * (cuIpcOpenMemHandle), so the kernels write their own slots and read their
 * peers' directly, GPU to GPU. The counters and the bell stay in the shared
 * host segment, registered as with SHM (transport_shm.c).
 *
 * A rank's slots, slot_bytes each: [collective][to rank 0]...[to rank n-1]:
 * the collective slot it publishes its part in, and the slot of each pair
 * it sends on (the receiver reads it from the sender's GPU).
 *
 * Chosen with NCCL_SHM_DISABLE=1 (NCCL then takes P2P within a node). The
 * slots stay allocated through ncclCommSuspend: peers map them. With
 * NCCL_CUMEM_ENABLE=1 the slots are VMM memory shared by descriptor, as
 * NCCL's cuMem path shares them (p2p_cumem.c), instead of legacy IPC.
 */
#include "simnccl.h"

static ncclResult_t open_peers(struct ncclComm *comm)
{
    struct snccl_seg *s = comm->seg;
    CUresult r;

    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank)
            continue;
        r = cuIpcOpenMemHandle(&comm->p2p_peer[p], s->ranks[p].p2p_slots,
                               CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r != CUDA_SUCCESS) {
            comm->p2p_peer[p] = 0;
            return snccl_cu(r, "cuIpcOpenMemHandle of a peer's P2P slots");
        }
    }
    return ncclSuccess;
}

/* Where rank src's slot `which` (0: collective, 1 + dst: to dst) is. */
static CUdeviceptr slot_of(const struct ncclComm *comm, int src, uint32_t which)
{
    CUdeviceptr base = src == comm->rank ? comm->p2p_mine : comm->p2p_peer[src];

    return base + which * comm->slot_bytes;
}

static ncclResult_t p2p_setup(struct ncclComm *comm)
{
    uint32_t n = (uint32_t)comm->nranks;
    struct snccl_devcomm *dc = comm->devcomm_host;
    ncclResult_t rc;
    CUresult r;

    if ((rc = snccl_shm_counters(comm)))
        return rc;
    if (comm->cumem) {
        if ((rc = snccl_cumem_slots_alloc(comm, (1 + n) * comm->slot_bytes)))
            return rc;
        for (int p = 0; p < comm->nranks; p++)
            if (p != comm->rank && (rc = snccl_cumem_slots_open(comm, p)))
                return rc;
        /* every rank has its peers' slots: nobody asks any more */
        if ((rc = snccl_barrier(comm)))
            return rc;
        snccl_cumem_slots_serve_end(comm);
    } else {
        if ((r = cuMemAlloc(&comm->p2p_mine, (1 + n) * comm->slot_bytes))) {
            comm->p2p_mine = 0;
            return snccl_cu(r, "cuMemAlloc of the P2P slots");
        }
        if ((r = cuIpcGetMemHandle(&comm->seg->ranks[comm->rank].p2p_slots, comm->p2p_mine)))
            return snccl_cu(r, "cuIpcGetMemHandle of the P2P slots");
        /* every handle is published before anyone opens one */
        if ((rc = snccl_barrier(comm)) || (rc = open_peers(comm)))
            return rc;
    }
    for (uint32_t i = 0; i < n; i++)
        dc->table[i] = slot_of(comm, (int)i, 0);
    for (uint32_t src = 0; src < n; src++)
        for (uint32_t dst = 0; dst < n; dst++)
            dc->table[n + src * n + dst] = slot_of(comm, (int)src, 1 + dst);
    return ncclSuccess;
}

static void p2p_teardown(struct ncclComm *comm)
{
    if (comm->cumem) {
        snccl_cumem_slots_free(comm);
        snccl_shm_unregister(comm);
        return;
    }
    for (int p = 0; p < comm->nranks; p++)
        if (comm->p2p_peer[p]) {
            cuIpcCloseMemHandle(comm->p2p_peer[p]);
            comm->p2p_peer[p] = 0;
        }
    if (comm->p2p_mine) {
        cuMemFree(comm->p2p_mine);      /* a peer still mapping it keeps it alive */
        comm->p2p_mine = 0;
    }
    snccl_shm_unregister(comm);
}

/* The abort word lives with the counters, as with SHM. */
const struct snccl_transport snccl_transport_p2p = {
    .name = "P2P/IPC",
    .setup = p2p_setup,
    .teardown = p2p_teardown,
    .abort_flag = snccl_shm_abort_flag,
};
