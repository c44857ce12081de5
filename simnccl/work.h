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

#include <stdbool.h>
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
    SNCCL_ALLTOALL,
    SNCCL_GATHER,
    SNCCL_SCATTER,
};

/* One operation. count: elements (AllGather, AlltoAll, Gather, Scatter: per
 * rank and destination; ReduceScatter: per rank received). step: the last
 * step of the channel it uses before it (collectives: the communicator's,
 * send/recv: the pair's). */
struct snccl_op {
    uint8_t kind, dtype, redop, pad;
    int32_t peer;                 /* root (Broadcast, Reduce, Gather, Scatter) or peer (Send, Recv) */
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
 * its slot, the last step it finished reading every slot of. With a proxy
 * (devcomm.proxy), the kernel writes its part into its staging buffer and
 * publishes staged/staged_len; the proxy thread copies it into the slot and
 * publishes posted. */
struct snccl_rank_ctr {
    uint64_t posted;
    uint64_t consumed;
    uint64_t staged, staged_len;
    uint32_t abort;               /* set by this rank's ncclCommAbort */
    uint32_t pad[7];
};

/* Counters of the channel src -> dst: written (by src) and read (by dst);
 * staged/staged_len as above, for src's proxy. */
struct snccl_pair_ctr {
    uint64_t sent;
    uint64_t acked;
    uint64_t staged, staged_len;
    uint64_t pad[4];
};

/* In device memory, one per rank (its persistent memory). */
struct snccl_devcomm {
    uint32_t magic, nranks, rank;
    uint32_t proxy;               /* 1: sends go through the staging buffer and a proxy */
    uint64_t slot_bytes;          /* bytes of every slot below */
    uint64_t devbuf;              /* this rank's receive buffer: nranks * slot_bytes; with a
                                   * proxy, then its staging buffer: (1 + nranks) slots, the
                                   * collective's part, then one per peer it sends to */
    uint64_t bell;                /* uint32_t futex word rung at every publish */
    uint64_t rank_ctr;            /* struct snccl_rank_ctr[nranks] */
    uint64_t pair_ctr;            /* struct snccl_pair_ctr[nranks * nranks], [src * n + dst] */
    /* coll_slot[r] (nranks entries), then p2p_slot[src * n + dst] */
    uint64_t table[];
};

/*
 * ThreadSanitizer sees only this process: when a kernel may reuse its staging
 * buffer because a peer process acknowledged the step the proxy copied out of
 * it, the order is real but passes through another process. The proxy marks
 * each finished copy (release) and the kernel marks the reuse (acquire) on
 * the same counter, so TSan builds see it too. No-ops otherwise.
 */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define SNCCL_TSAN_RELEASE(p) __tsan_release((void *)(p))
#define SNCCL_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define SNCCL_TSAN_RELEASE(p) ((void)(p))
#define SNCCL_TSAN_ACQUIRE(p) ((void)(p))
#endif

/* A collective whose sender puts a different block for each rank in its
 * slot: the slot is cut in nranks blocks, so a step moves slot_bytes /
 * nranks of each. The library counts steps (enqueue.c) as the kernels take
 * them (kernels.c). */
static inline bool snccl_blocked(uint8_t kind)
{
    return kind == SNCCL_REDUCESCATTER || kind == SNCCL_ALLTOALL || kind == SNCCL_SCATTER;
}

static inline uint64_t snccl_devcomm_bytes(uint32_t nranks)
{
    return sizeof(struct snccl_devcomm) + 8ull * (nranks + (uint64_t)nranks * nranks);
}

#endif
