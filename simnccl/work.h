/*
 * work.h - what libnccl hands its kernels (kernels.c): the device-side
 * communicator and the work of one launch. Shared by the library and the
 * kernel module, nothing else.
 *
 * The kernel reaches every buffer through device addresses (k->dev): the
 * transport fills the tables of struct snccl_devcomm with the addresses of
 * its slots and counters, so a kernel does not know whether they are shared
 * host memory (transport_shm.c) or a peer's device memory (a P2P transport).
 */
#ifndef SIMNCCL_WORK_H
#define SIMNCCL_WORK_H

#include <stdint.h>

#define SNCCL_DEVCOMM_MAGIC 0x736e636cu   /* "sncl" */
#define SNCCL_MAX_OPS 32                  /* operations of one comm in one launch */
#define SNCCL_KERNEL "simnccl_kernel"     /* the module's one kernel */

enum snccl_kind {
    SNCCL_ALLREDUCE,
    SNCCL_BROADCAST,
    SNCCL_REDUCE,
    SNCCL_ALLGATHER,
    SNCCL_REDUCESCATTER,
    SNCCL_SEND,
    SNCCL_RECV,
};

/* One operation. count: elements (AllGather: per rank sent; ReduceScatter:
 * per rank received). step: the last step of the channel it uses before it
 * (collectives: the communicator's, send/recv: the pair's). */
struct snccl_op {
    uint8_t kind, dtype, redop, pad;
    int32_t peer;                 /* root (Broadcast, Reduce) or peer (Send, Recv) */
    uint64_t sendbuff, recvbuff;  /* device addresses */
    uint64_t count;
    uint64_t step;
};

/* The kernel's one argument, by value. */
struct snccl_work {
    uint64_t devcomm;             /* device address of struct snccl_devcomm */
    uint32_t nops, pad;
    struct snccl_op ops[SNCCL_MAX_OPS];
};

/* Counters a rank publishes for collectives: the last step whose data is in
 * its slot, the last step it finished reading every slot of. */
struct snccl_rank_ctr {
    uint64_t posted;
    uint64_t consumed;
    uint32_t abort;               /* set by this rank's ncclCommAbort */
    uint32_t pad[11];
};

/* Counters of the channel src -> dst: written (by src) and read (by dst). */
struct snccl_pair_ctr {
    uint64_t sent;
    uint64_t acked;
    uint64_t pad[6];
};

/* In device memory, one per rank (its persistent memory). */
struct snccl_devcomm {
    uint32_t magic, nranks, rank, pad;
    uint64_t slot_bytes;          /* bytes of every slot below */
    uint64_t devbuf;              /* this rank's receive buffer: nranks * slot_bytes */
    uint64_t bell;                /* uint32_t futex word rung at every publish */
    uint64_t rank_ctr;            /* struct snccl_rank_ctr[nranks] */
    uint64_t pair_ctr;            /* struct snccl_pair_ctr[nranks * nranks], [src * n + dst] */
    /* coll_slot[r] (nranks entries), then p2p_slot[src * n + dst] */
    uint64_t table[];
};

static inline uint64_t snccl_devcomm_bytes(uint32_t nranks)
{
    return sizeof(struct snccl_devcomm) + 8ull * (nranks + (uint64_t)nranks * nranks);
}

#endif
