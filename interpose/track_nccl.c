/*
 * track_nccl.c - NCCL's API, counted (lib/core/ncclcut.h).
 *
 * libtcgpu.so is first in the program's scope, so a program (or PyTorch)
 * linked against libnccl.so.2 calls these; each counts the operation and
 * calls the library's own (the next definition, RTLD_NEXT). A program
 * without NCCL never calls them. The names are in nccl.list
 * (tests/unit/test_interpose_exports.py checks that exactly those are
 * exported); every other NCCL function goes to the library directly.
 *
 * NCCL's API is simnccl's nccl.h: written from NCCL's public documentation
 * with NCCL's names, values and signatures, so these prototypes are the
 * real library's too.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "nccl.h"
#include "core/ncclcut.h"
#include "common/log.h"

/* The library's definition of name, looked up once. NULL when no later
 * object defines it (the program's NCCL is linked in statically, or it
 * resolved a name it never loaded): the call then fails as NCCL's internal
 * error, with the reason logged once. */
#define NO_NEXT ((void *)-1)
static void *next_fn(const char *name, void **cache)
{
    void *fn = __atomic_load_n(cache, __ATOMIC_ACQUIRE);

    if (!fn) {
        fn = dlsym(RTLD_NEXT, name);
        if (!fn) {
            log_err("%s: no NCCL library after libtcgpu.so defines it", name);
            fn = NO_NEXT;
        }
        __atomic_store_n(cache, fn, __ATOMIC_RELEASE);
    }
    return fn == NO_NEXT ? NULL : fn;
}

#define NEXT(name) ((__typeof__(&name))next_fn(#name, &next_##name))
#define NEXT_DECL(name) static void *next_##name

/* Calls the library makes into itself (one public function calling
 * another) are its own business: counted once, at the outermost call. */
static __thread int tl_inside;

static bool accepted(ncclResult_t rc)
{
    return rc == ncclSuccess || rc == ncclInProgress;
}

/* One counted operation around the library's call: rc = CALL. */
#define COUNTED(comm, kind, peer, fn, ...)                          \
    do {                                                            \
        __typeof__(&fn) next_ = NEXT(fn);                           \
        ncclResult_t rc_;                                           \
        if (!next_)                                                 \
            return ncclInternalError;                               \
        if (tl_inside++)                                            \
            rc_ = next_(__VA_ARGS__);                               \
        else {                                                      \
            ncclcut_issue((comm), (kind), (peer));                  \
            rc_ = next_(__VA_ARGS__);                               \
            ncclcut_done(accepted(rc_));                            \
        }                                                           \
        tl_inside--;                                                \
        return rc_;                                                 \
    } while (0)

/* --- communicators ------------------------------------------------------- */

NEXT_DECL(ncclCommInitRank);
NEXT_DECL(ncclCommInitRankConfig);
NEXT_DECL(ncclCommDestroy);
NEXT_DECL(ncclCommAbort);

/* The library's ncclCommSuspend/Resume, for tcgpu's own release of a
 * communicator's memory across a suspend (ncclcut.h); an NCCL before
 * 2.29.7 has neither, and its communicators' memory is drained instead. */
static __typeof__(&ncclCommSuspend) lib_suspend_fn;
static __typeof__(&ncclCommResume) lib_resume_fn;

static int lib_suspend_mem(const void *comm)
{
    return (int)lib_suspend_fn((ncclComm_t)comm, NCCL_SUSPEND_MEM);
}

static int lib_resume(const void *comm)
{
    return (int)lib_resume_fn((ncclComm_t)comm);
}

static void give_library(void)
{
    struct ncclcut_lib lib = { 0 };

    lib_suspend_fn = (__typeof__(lib_suspend_fn))dlsym(RTLD_NEXT, "ncclCommSuspend");
    lib_resume_fn = (__typeof__(lib_resume_fn))dlsym(RTLD_NEXT, "ncclCommResume");
    if (lib_suspend_fn && lib_resume_fn) {
        lib.suspend_mem = lib_suspend_mem;
        lib.resume = lib_resume;
    }
    ncclcut_set_lib(&lib);
}

static void give_library_once(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, give_library);
}

/* A nonblocking init answers ncclInProgress with the communicator made:
 * it is counted from then on, as its operations will be. */
static void attach_if_made(ncclResult_t rc, ncclComm_t *comm, const ncclUniqueId *id, int nranks,
                           int rank)
{
    if (accepted(rc) && comm && *comm && tl_inside == 1) {
        give_library_once();
        ncclcut_attach(*comm, id, sizeof(*id), nranks, rank);
    }
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    __typeof__(&ncclCommInitRank) next = NEXT(ncclCommInitRank);
    ncclResult_t rc;

    if (!next)
        return ncclInternalError;
    tl_inside++;
    rc = next(comm, nranks, commId, rank);
    attach_if_made(rc, comm, &commId, nranks, rank);
    tl_inside--;
    return rc;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
    __typeof__(&ncclCommInitRankConfig) next = NEXT(ncclCommInitRankConfig);
    ncclResult_t rc;

    if (!next)
        return ncclInternalError;
    tl_inside++;
    rc = next(comm, nranks, commId, rank, config);
    attach_if_made(rc, comm, &commId, nranks, rank);
    tl_inside--;
    return rc;
}

NEXT_DECL(ncclCommInitAll);

/* Every rank in this process, one per device (PyTorch's DataParallel, a
 * thread per GPU): counted too, so that a suspend lets each thread go on
 * until its rank is level with the others. */
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    __typeof__(&ncclCommInitAll) next = NEXT(ncclCommInitAll);
    ncclResult_t rc;

    if (!next)
        return ncclInternalError;
    tl_inside++;
    rc = next(comms, ndev, devlist);
    if (rc == ncclSuccess && comms && ndev > 1 && tl_inside == 1) {
        give_library_once();
        ncclcut_attach_all((const void *const *)comms, ndev);
    }
    tl_inside--;
    return rc;
}

NEXT_DECL(ncclCommSplit);
NEXT_DECL(ncclCommCount);
NEXT_DECL(ncclCommUserRank);

/* A split is collective over the parent: every rank of it calls this, and
 * each counts the split (ncclcut.h), with or without a communicator. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    __typeof__(&ncclCommSplit) next = NEXT(ncclCommSplit);
    __typeof__(&ncclCommCount) count = NEXT(ncclCommCount);
    __typeof__(&ncclCommUserRank) user_rank = NEXT(ncclCommUserRank);
    ncclComm_t made = NULL;
    int nranks = 0, rank = -1;
    ncclResult_t rc;

    if (!next)
        return ncclInternalError;
    if (tl_inside)
        return next(comm, color, key, newcomm, config);
    tl_inside++;
    rc = next(comm, color, key, newcomm, config);
    if (accepted(rc) && newcomm && *newcomm && count && user_rank &&
        count(*newcomm, &nranks) == ncclSuccess && user_rank(*newcomm, &rank) == ncclSuccess) {
        made = *newcomm;
        give_library_once();
    }
    ncclcut_attach_split(comm, color, made, nranks, rank);
    tl_inside--;
    return rc;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    __typeof__(&ncclCommDestroy) next = NEXT(ncclCommDestroy);

    if (!next)
        return ncclInternalError;
    if (!tl_inside)
        ncclcut_detach(comm);
    return next(comm);
}

/* An abort is also how a program gets a thread out of a communicator's
 * barrier: when tcgpu's resumer is in one (ncclCommResume waiting for a
 * peer that will not come), the library goes first. */
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    __typeof__(&ncclCommAbort) next = NEXT(ncclCommAbort);
    ncclResult_t rc;

    if (!next)
        return ncclInternalError;
    if (tl_inside)
        return next(comm);
    if (ncclcut_resuming(comm)) {
        rc = next(comm);
        ncclcut_detach(comm);
        return rc;
    }
    ncclcut_detach(comm);
    return next(comm);
}

/* --- the program's own suspend and resume --------------------------------- */

NEXT_DECL(ncclCommSuspend);
NEXT_DECL(ncclCommResume);

/* The program's own suspend or resume of comm (vLLM's): rc = CALL, which
 * leaves comm's memory released (1), taken back (0) or, refused, as it was
 * (ncclcut_program_suspend_end). */
#define OWN_SUSPEND(comm, released, fn, ...)                        \
    do {                                                            \
        __typeof__(&fn) next_ = NEXT(fn);                           \
        ncclResult_t rc_;                                           \
        if (!next_)                                                 \
            return ncclInternalError;                               \
        if (tl_inside)                                              \
            return next_(__VA_ARGS__);                              \
        tl_inside++;                                                \
        ncclcut_program_suspend_begin(comm);                        \
        rc_ = next_(__VA_ARGS__);                                   \
        ncclcut_program_suspend_end(comm, accepted(rc_) ? (released) : -1); \
        tl_inside--;                                                \
        return rc_;                                                 \
    } while (0)

ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags)
{
    OWN_SUSPEND(comm, (flags & NCCL_SUSPEND_MEM) ? 1 : -1, ncclCommSuspend, comm, flags);
}

ncclResult_t ncclCommResume(ncclComm_t comm)
{
    OWN_SUSPEND(comm, 0, ncclCommResume, comm);
}

/* --- collectives and point-to-point -------------------------------------- */

NEXT_DECL(ncclAllReduce);
NEXT_DECL(ncclBroadcast);
NEXT_DECL(ncclBcast);
NEXT_DECL(ncclReduce);
NEXT_DECL(ncclAllGather);
NEXT_DECL(ncclReduceScatter);
NEXT_DECL(ncclAlltoAll);
NEXT_DECL(ncclGather);
NEXT_DECL(ncclScatter);
NEXT_DECL(ncclSend);
NEXT_DECL(ncclRecv);

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclAllReduce, sendbuff, recvbuff, count, datatype, op, comm,
            stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclBroadcast, sendbuff, recvbuff, count, datatype, root, comm,
            stream);
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclBcast, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclReduce, sendbuff, recvbuff, count, datatype, op, root, comm,
            stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclAllGather, sendbuff, recvbuff, sendcount, datatype, comm,
            stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclReduceScatter, sendbuff, recvbuff, recvcount, datatype, op,
            comm, stream);
}

/* NCCL 2.28's: collectives (every rank calls them, in the same order as the
 * others), counted as such. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclAlltoAll, sendbuff, recvbuff, count, datatype, comm, stream);
}

ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclGather, sendbuff, recvbuff, count, datatype, root, comm,
            stream);
}

ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                         int root, ncclComm_t comm, cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_COLL, -1, ncclScatter, sendbuff, recvbuff, count, datatype, root, comm,
            stream);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_SEND, peer, ncclSend, sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    COUNTED(comm, NCCLCUT_RECV, peer, ncclRecv, recvbuff, count, datatype, peer, comm, stream);
}

/* --- groups -------------------------------------------------------------- */

NEXT_DECL(ncclGroupStart);
NEXT_DECL(ncclGroupEnd);

ncclResult_t ncclGroupStart(void)
{
    __typeof__(&ncclGroupStart) next = NEXT(ncclGroupStart);
    ncclResult_t rc;

    if (!next)
        return ncclInternalError;
    rc = next();
    if (!tl_inside && accepted(rc))
        ncclcut_group_start();
    return rc;
}

/* The outermost end is where the library issues the group: it waits and
 * counts like one operation. */
ncclResult_t ncclGroupEnd(void)
{
    __typeof__(&ncclGroupEnd) next = NEXT(ncclGroupEnd);
    ncclResult_t rc;

    if (!next)
        return ncclInternalError;
    if (tl_inside)
        return next();
    ncclcut_group_end_issue();
    rc = next();
    ncclcut_group_end_done(accepted(rc));
    return rc;
}
