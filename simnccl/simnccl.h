/*
 * simnccl.h - simnccl's internals: the communicator, the transport interface
 * and the helpers the library's files share. Not installed.
 */
#ifndef SIMNCCL_INTERNAL_H
#define SIMNCCL_INTERNAL_H

#include "nccl.h"
#include "work.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define SNCCL_ID_MAGIC 0x31434e434d4953ull   /* "SIMNCC1" */
#define SNCCL_DEFAULT_BUFFSIZE (4ull << 20)  /* NCCL_BUFFSIZE's default, as NCCL's */
#define SNCCL_MAX_RANKS 64

/* What ncclGetUniqueId puts in the 128 bytes. */
struct snccl_id {
    uint64_t magic;
    uint64_t token;               /* random: tells two communicators apart */
    char name[64];                /* the rendezvous' shm segment */
};

struct ncclComm;

/*
 * A transport: how ranks of one node reach each other's data. setup() runs
 * once all ranks arrived (comm->peer_* known) and fills the slot and counter
 * addresses of comm->devcomm_host (work.h); teardown() undoes it. Today: shm
 * (host memory shared between the processes and registered with the driver,
 * NCCL's SHM transport). A P2P transport over shareable device memory would
 * be a second instance.
 */
struct snccl_transport {
    const char *name;
    ncclResult_t (*setup)(struct ncclComm *comm);
    void (*teardown)(struct ncclComm *comm);
    /* The word this rank's kernels poll to learn of ncclCommAbort. */
    uint32_t *(*abort_flag)(struct ncclComm *comm);
};
extern const struct snccl_transport snccl_transport_shm;
/* The same with NCCL_SHM_USE_CUDA_MEMCPY=1: a proxy thread of the library
 * copies what the kernels stage in device memory into the slots. */
extern const struct snccl_transport snccl_transport_shm_proxy;
/* NCCL_SHM_DISABLE=1: NCCL's P2P transport over CUDA IPC (transport_p2p.c):
 * each rank's slots in its own device memory, its peers' opened by IPC. */
extern const struct snccl_transport snccl_transport_p2p;

/* The P2P slots as VMM memory shared by descriptor (p2p_cumem.c), as NCCL's
 * cuMem path shares its buffers: each rank maps its own and serves their
 * descriptor to its peers over a Unix socket; each peer imports and maps
 * them. Undone by snccl_cumem_slots_free, also half made. */
ncclResult_t snccl_cumem_slots_alloc(struct ncclComm *comm, size_t bytes);
ncclResult_t snccl_cumem_slots_open(struct ncclComm *comm, int peer);
void snccl_cumem_slots_serve_end(struct ncclComm *comm);
void snccl_cumem_slots_free(struct ncclComm *comm);
/* The counters and the bell of the shared segment, registered with the
 * driver and put in the devcomm (both transports); undone by teardown. */
ncclResult_t snccl_shm_counters(struct ncclComm *comm);
void snccl_shm_unregister(struct ncclComm *comm);
/* This rank's abort word in the shared segment (both transports). */
uint32_t *snccl_shm_abort_flag(struct ncclComm *comm);

/* The rendezvous segment's header (rendezvous.c); the shm transport's slots
 * and counters follow it in the same segment. */
struct snccl_rank_info {
    uint32_t joined;              /* 1 once the rank arrived */
    int32_t pid;
    CUuuid uuid;                  /* its GPU */
    uint32_t pad[2];
    CUipcMemHandle p2p_slots;     /* the P2P transport: its slots, for its peers to open */
    int32_t split_color, split_key; /* ncclCommSplit (split.c): what it asked for */
    struct snccl_id split_id;     /* ... and, from a group's new rank 0, the group's id */
};

struct snccl_seg {
    uint64_t magic;               /* SNCCL_ID_MAGIC once the creator set it up */
    uint64_t token;
    uint64_t total_bytes;         /* of the whole segment */
    uint64_t slot_bytes;          /* the creator's NCCL_BUFFSIZE: every rank uses it */
    uint32_t nranks;
    uint32_t arrived;
    uint32_t bell;                /* futex word: rung on every change below and by kernels */
    uint32_t barrier_count, barrier_gen;
    uint32_t pad[7];
    struct snccl_rank_info ranks[SNCCL_MAX_RANKS];
};

enum snccl_state { SNCCL_INITIALIZING, SNCCL_READY, SNCCL_FAILED, SNCCL_FINALIZED };

struct ncclComm {
    uint64_t magic;               /* SNCCL_ID_MAGIC while alive */
    int nranks, rank;
    CUdevice cudev;
    CUcontext ctx;
    bool blocking;
    struct snccl_id id;

    /* state: init and async errors */
    pthread_mutex_t lock;
    enum snccl_state state;
    ncclResult_t async;           /* ncclInProgress while initializing */
    pthread_t init_thread;
    bool init_thread_live;
    int aborting;                 /* atomic: ncclCommAbort was called */
    int busy;                     /* atomic: host calls blocked on comm right now */

    /* the rendezvous segment */
    int seg_fd;
    struct snccl_seg *seg;
    uint64_t seg_bytes;
    bool seg_registered, seg_unlinked;

    /* the proxy thread (snccl_transport_shm_proxy) */
    pthread_t proxy;
    bool proxy_live;
    int proxy_stop;               /* atomic */
    CUstream proxy_stream;

    /* device side */
    const struct snccl_transport *transport;
    uint64_t slot_bytes;
    CUmodule module;
    CUfunction kernel;
    CUdeviceptr devcomm;          /* persistent: struct snccl_devcomm */
    struct snccl_devcomm *devcomm_host;
    CUdeviceptr devbuf;           /* suspendable: nranks * slot_bytes */
    CUdeviceptr p2p_mine;         /* the P2P transport: this rank's slots (1 + nranks) */
    CUdeviceptr p2p_peer[SNCCL_MAX_RANKS];   /* ... and its peers', opened by IPC */
    size_t p2p_bytes;             /* with NCCL_CUMEM_ENABLE=1: each rank's slots, VMM memory
                                   * mapped at p2p_mine and p2p_peer[], of this size */
    CUmemGenericAllocationHandle p2p_handle;   /* ... this rank's, */
    int p2p_fd;                   /* ... exported (-1: not), */
    int p2p_listen;               /* ... and served to peers on this socket (-1: not) */
    pthread_t p2p_server;
    bool p2p_serving;
    bool cumem;                   /* NCCL_CUMEM_ENABLE=1: devbuf is VMM memory */
    CUmemGenericAllocationHandle devbuf_handle;   /* its physical memory while mapped */
    size_t devbuf_bytes;          /* as allocated (VMM: rounded to the granularity) */
    bool suspended;
    CUevent last;                 /* recorded after every launch: the comm's work is serial */
    CUevent join;
    bool launched;

    /* steps already used: collectives (all ranks alike), sends to and receives
     * from each peer */
    uint64_t coll_step;
    uint64_t send_step[SNCCL_MAX_RANKS], recv_step[SNCCL_MAX_RANKS];

    /* operations of an open group */
    struct snccl_op pending[SNCCL_MAX_OPS];
    CUstream pending_stream[SNCCL_MAX_OPS];
    uint32_t npending;
    bool in_group;
};

/* errors: the message for ncclGetLastError, then rc */
ncclResult_t snccl_fail(ncclResult_t rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t snccl_cu(CUresult r, const char *what);
bool snccl_comm_ok(const struct ncclComm *comm);

/* rendezvous.c */
ncclResult_t snccl_rendezvous(struct ncclComm *comm);
void snccl_seg_close(struct ncclComm *comm);
ncclResult_t snccl_barrier(struct ncclComm *comm);
void snccl_bell_wait(struct ncclComm *comm, uint32_t seen);
void snccl_bell_ring(struct ncclComm *comm);

/* transport_shm.c: the size of the rendezvous segment with the shm transport */
uint64_t snccl_shm_bytes(uint32_t nranks, uint64_t slot_bytes);

/* The library's calls into its own API go to these, as NCCL's go to its
 * internal functions: never through the global scope, where a program's
 * interposer (libtcgpu.so) would take them for the program's own. */
ncclResult_t snccl_get_unique_id(ncclUniqueId *uniqueId);                 /* init.c */
ncclResult_t snccl_comm_init(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                             ncclConfig_t *config);
ncclResult_t snccl_comm_abort(ncclComm_t comm);
ncclResult_t snccl_group_start(void);                                     /* enqueue.c */
ncclResult_t snccl_group_end(void);

/* enqueue.c */
ncclResult_t snccl_flush(struct ncclComm *comm);
ncclResult_t snccl_wait_work(struct ncclComm *comm);
int snccl_group_depth(void);
ncclResult_t snccl_group_defer(ncclResult_t (*fn)(struct ncclComm *, int), struct ncclComm *comm, int arg);

/* init.c: comm is ready for work (not initializing, failed, finalized; usable:
 * nor suspended), or the failure */
ncclResult_t snccl_ready(struct ncclComm *comm, const char *fn);
ncclResult_t snccl_usable(struct ncclComm *comm, const char *fn);

/* memory.c */
size_t snccl_devbuf_bytes(const struct ncclComm *comm);
ncclResult_t snccl_devbuf_alloc(struct ncclComm *comm);
ncclResult_t snccl_devbuf_free(struct ncclComm *comm, bool keep_va);

#endif
