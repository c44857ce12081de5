/*
 * nccl.h - simnccl's public header: the NCCL API, as NVIDIA documents it,
 * for the simulated NCCL of this project (simnccl/README.md).
 *
 * Written from NCCL's public API documentation; the names, values and
 * signatures are NCCL's so that a program built against NVIDIA's nccl.h runs
 * on libnccl.so.2 from simnccl and the other way round. Only the subset that
 * simnccl implements is declared here (README.md says which).
 *
 * Error convention: every function returns an ncclResult_t; ncclSuccess (0)
 * on success. ncclGetErrorString() names a code, ncclGetLastError() gives the
 * last failure's message.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <cuda.h>
#include <driver_types.h>     /* cudaStream_t: the same CUstream_st * as CUstream */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 29
#define NCCL_PATCH 7
#define NCCL_SUFFIX "simnccl"

/* Since 2.9 the minor takes two digits: 2.29.7 is 22907. */
#define NCCL_VERSION(X, Y, Z) \
    (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

/* An opaque communicator. */
typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

/* What ranks need to find each other; made by ncclGetUniqueId() on one
 * rank and passed to the others by the program (MPI, a file, a pipe). */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1

/* Communicator options for ncclCommInitRankConfig(). Start from
 * NCCL_CONFIG_INITIALIZER; fields left undefined take NCCL's defaults.
 * simnccl reads size, magic, version and blocking; the others are accepted
 * and ignored (there are no CTAs or networks to tune). */
typedef struct ncclConfig_v22700 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;           /* 0: calls return ncclInProgress, see ncclCommGetAsyncError */
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER {                                                  \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
    NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT }

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,    /* declared; simnccl answers ncclInvalidArgument */
    ncclFloat8e5m2 = 11,    /* declared; simnccl answers ncclInvalidArgument */
    ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclDataType_t))
} ncclRedOp_t;

/* ncclCommSuspend() flags: release the communicator's suspendable GPU memory. */
#define NCCL_SUSPEND_MEM 0x01

/* ncclCommMemStats() selectors. */
typedef enum {
    ncclStatGpuMemSuspend = 0,    /* GPU bytes a suspend releases */
    ncclStatGpuMemSuspended = 1,  /* 1 while suspended, 0 otherwise */
    ncclStatGpuMemPersist = 2,    /* GPU bytes kept across a suspend */
    ncclStatGpuMemTotal = 3       /* GPU bytes held now */
} ncclCommMemStat_t;

/* --- errors and version ---------------------------------------------------- */

/* A static string naming result. */
const char *ncclGetErrorString(ncclResult_t result);
/* The message of the last failure (of any communicator, or of comm's init);
 * not cleared by reading it. Never NULL. */
const char *ncclGetLastError(ncclComm_t comm);
/* NCCL_VERSION_CODE of the library that runs. */
ncclResult_t ncclGetVersion(int *version);

/* --- communicators ----------------------------------------------------------- */

/* A fresh id for one communicator; call once, on one rank, and hand it to
 * every rank's ncclCommInitRank. An id serves one communicator only. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);

/* Rank `rank` of nranks joins the communicator of commId, on the current
 * context's device (device 0's primary context when none is current). Blocks
 * until all nranks ranks joined: collective. Two ranks on one device:
 * ncclInvalidUsage. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
/* As ncclCommInitRank, with options. With config->blocking == 0 it returns
 * ncclInProgress at once with *comm set: poll ncclCommGetAsyncError(*comm)
 * until it is no longer ncclInProgress, or ncclCommAbort(*comm). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
/* ndev communicators of one process, rank i on devlist[i] (or device i when
 * devlist is NULL). */
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
/* Collective over comm (every rank calls it, outside a group): a new
 * communicator of the ranks that give the same color, ranked by key (ties by
 * their rank in comm), on comm's device; NCCL_SPLIT_NOCOLOR: none (*newcomm
 * NULL). config as for ncclCommInitRankConfig (NULL: comm's blocking mode
 * is not inherited here: blocking unless NCCL_COMM_BLOCKING=0). */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);

/* Waits for the communicator's queued operations (they must be able to end:
 * every peer must issue its part) and marks it finished. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
/* Frees the communicator after its queued work ended. */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/* Stops the communicator's kernels (they return at once), cancels a pending
 * init and frees everything. May be called from another thread while a call
 * on comm is blocked; that call then returns an error. Peers are not told. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
/* ncclSuccess, ncclInProgress (a nonblocking init or call still running) or
 * the error that stopped the communicator. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

/* Collective (every rank calls it, no work of comm queued or running): waits
 * for the communicator's work, then with NCCL_SUSPEND_MEM frees its
 * suspendable GPU memory. Collectives on a suspended communicator:
 * ncclInvalidUsage. Inside ncclGroupStart/End, the calls of several
 * communicators of one thread run together at ncclGroupEnd. */
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
/* Collective: allocates again what ncclCommSuspend freed. */
ncclResult_t ncclCommResume(ncclComm_t comm);
/* One statistic of comm's GPU memory (bytes, or 0/1 for ncclStatGpuMemSuspended). */
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);

/* --- collectives (enqueued on stream; every rank must issue the same
 * collectives in the same order with the same counts) ---------------------- */

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
/* The legacy in-place broadcast. */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
/* recvbuff holds nranks * sendcount elements, rank r's at r * sendcount. */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* sendbuff holds nranks * recvcount elements; rank r receives block r reduced. */
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
/* (2.28) sendbuff's block j (count elements at j * count) goes to rank j,
 * rank i's block for this rank lands at recvbuff + i * count; out of place. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* (2.28) root's recvbuff gets rank i's count elements at i * count; recvbuff
 * is used on root only. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);
/* (2.28) rank i's recvbuff gets root's count elements at sendbuff + i * count;
 * sendbuff is used on root only. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                         int root, ncclComm_t comm, cudaStream_t stream);

/* Point to point: a send on one rank pairs with a recv of the same count on
 * the peer. Put both sides of an exchange in one group, or they may wait on
 * each other. */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

/* --- groups: calls between Start and End are issued together at End ------ */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#ifdef __cplusplus
}
#endif

#endif
