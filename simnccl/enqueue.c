/*
 * enqueue.c - collectives and send/recv become device work on the user's
 * stream, and groups gather them.
 *
 * Every call is checked, given its steps on its channel (work.h) in issue
 * order, and added to its communicator's pending list; outside a group the
 * list is launched at once, inside one at ncclGroupEnd. A launch is one
 * kernel per communicator with its pending operations, on the stream of the
 * first; the streams of the others wait for it and it waits for them. A
 * communicator's launches are chained by an event, so they run one after the
 * other whatever streams they are on.
 *
 * Blocking calls made in a group (init, suspend, resume) are deferred to
 * ncclGroupEnd and run there together, one thread each, so one thread can
 * drive several ranks that wait for each other.
 */
#include "simnccl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GROUP_COMMS 64
#define MAX_DEFERRED 64

struct deferred {
    ncclResult_t (*fn)(struct ncclComm *, int);
    struct ncclComm *comm;
    int arg;
    ncclResult_t rc;
    pthread_t thread;
};

static __thread int group_depth;
static __thread struct ncclComm *group_comms[MAX_GROUP_COMMS];
static __thread int group_ncomms;
static __thread struct deferred group_tasks[MAX_DEFERRED];
static __thread int group_ntasks;
static __thread ncclResult_t group_error;

int snccl_group_depth(void)
{
    return group_depth;
}

ncclResult_t snccl_group_defer(ncclResult_t (*fn)(struct ncclComm *, int), struct ncclComm *comm, int arg)
{
    if (group_ntasks == MAX_DEFERRED)
        return snccl_fail(ncclInvalidUsage, "more than %d blocking calls in one group", MAX_DEFERRED);
    group_tasks[group_ntasks++] = (struct deferred){ fn, comm, arg, ncclSuccess, 0 };
    return ncclSuccess;
}

/* --- launching ---------------------------------------------------------------- */

ncclResult_t snccl_wait_work(struct ncclComm *comm)
{
    CUresult r;

    if (!comm->launched)
        return ncclSuccess;
    if ((r = cuEventSynchronize(comm->last)))
        return snccl_cu(r, "cuEventSynchronize of the communicator's work");
    return ncclSuccess;
}

static bool seen_stream(struct ncclComm *comm, uint32_t i)
{
    for (uint32_t j = 0; j < i; j++)
        if (comm->pending_stream[j] == comm->pending_stream[i])
            return true;
    return false;
}

/* One kernel with comm's pending operations. */
ncclResult_t snccl_flush(struct ncclComm *comm)
{
    struct snccl_work work = { .devcomm = comm->devcomm, .nops = comm->npending };
    void *params[] = { &work };
    CUstream main_s = comm->pending_stream[0];
    ncclResult_t rc = ncclSuccess;
    CUresult r;

    if (!comm->npending)
        return ncclSuccess;
    memcpy(work.ops, comm->pending, comm->npending * sizeof(work.ops[0]));
    if ((r = cuCtxPushCurrent(comm->ctx)))
        return snccl_cu(r, "cuCtxPushCurrent");
    for (uint32_t i = 1; i < comm->npending && !r; i++)
        if (comm->pending_stream[i] != main_s && !seen_stream(comm, i) &&
            !(r = cuEventRecord(comm->join, comm->pending_stream[i])))
            r = cuStreamWaitEvent(main_s, comm->join, 0);
    if (!r && comm->launched)
        r = cuStreamWaitEvent(main_s, comm->last, 0);
    if (!r)
        r = cuLaunchKernel(comm->kernel, 1, 1, 1, 1, 1, 1, 0, main_s, params, NULL);
    if (!r)
        r = cuEventRecord(comm->last, main_s);
    if (!r)
        comm->launched = true;
    for (uint32_t i = 1; i < comm->npending && !r; i++)
        if (comm->pending_stream[i] != main_s && !seen_stream(comm, i))
            r = cuStreamWaitEvent(comm->pending_stream[i], comm->last, 0);
    if (r)
        rc = snccl_cu(r, "launching simnccl's kernel");
    cuCtxPopCurrent(NULL);
    comm->npending = 0;
    return rc;
}

/* --- checking and queueing ------------------------------------------------- */

static size_t elem_size(ncclDataType_t t)
{
    static const unsigned char sz[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2 };

    return (unsigned)t < sizeof(sz) ? sz[t] : 0;
}

static ncclResult_t check_type(ncclDataType_t t, const char *fn)
{
    if (!elem_size(t))
        return snccl_fail(ncclInvalidArgument, "%s: datatype %d not supported", fn, (int)t);
    return ncclSuccess;
}

static ncclResult_t check_op(ncclRedOp_t op, const char *fn)
{
    if ((unsigned)op >= ncclNumOps)
        return snccl_fail(ncclInvalidArgument, "%s: reduction op %d not supported", fn, (int)op);
    return ncclSuccess;
}

/* Steps a channel moves count elements in (as kernels.c splits them). */
static uint64_t steps_of(const struct ncclComm *comm, const struct snccl_op *op)
{
    uint64_t chunk = comm->slot_bytes / elem_size(op->dtype);

    if (snccl_blocked(op->kind))
        chunk /= (uint64_t)comm->nranks;
    return (op->count + chunk - 1) / chunk;
}

static ncclResult_t enqueue(struct ncclComm *comm, struct snccl_op *op, CUstream stream)
{
    uint64_t *step;
    ncclResult_t rc;
    int i;

    if (op->kind == SNCCL_SEND)
        step = &comm->send_step[op->peer];
    else if (op->kind == SNCCL_RECV)
        step = &comm->recv_step[op->peer];
    else
        step = &comm->coll_step;
    op->step = *step;
    *step += steps_of(comm, op);
    if (comm->npending == SNCCL_MAX_OPS && (rc = snccl_flush(comm)))
        return rc;      /* a group too long for one launch: in several */
    comm->pending[comm->npending] = *op;
    comm->pending_stream[comm->npending++] = stream;
    if (!group_depth)
        return snccl_flush(comm);
    for (i = 0; i < group_ncomms; i++)
        if (group_comms[i] == comm)
            return ncclSuccess;
    if (group_ncomms == MAX_GROUP_COMMS)
        return snccl_fail(ncclInvalidUsage, "more than %d communicators in one group", MAX_GROUP_COMMS);
    group_comms[group_ncomms++] = comm;
    return ncclSuccess;
}

static bool has_root(uint8_t kind)
{
    return kind == SNCCL_BROADCAST || kind == SNCCL_REDUCE || kind == SNCCL_GATHER ||
           kind == SNCCL_SCATTER;
}

/* The peer or root is a rank of comm. */
static ncclResult_t check_peer(const struct snccl_op *op, const struct ncclComm *comm, const char *fn)
{
    bool p2p = op->kind == SNCCL_SEND || op->kind == SNCCL_RECV;

    if ((p2p || has_root(op->kind)) && (op->peer < 0 || op->peer >= comm->nranks))
        return snccl_fail(ncclInvalidArgument, "%s: %s %d out of 0..%d", fn, p2p ? "peer" : "root",
                          op->peer, comm->nranks - 1);
    return ncclSuccess;
}

/* The buffers this rank's part reads and writes are there: a root-only
 * buffer (Broadcast's send, Reduce's and Gather's receive, Scatter's send)
 * is not looked at on the other ranks, as in NCCL. An AlltoAll moves its
 * blocks in place of each other: out of place only. */
static ncclResult_t check_buffers(const struct snccl_op *op, const struct ncclComm *comm, const char *fn)
{
    bool root = op->peer == comm->rank;
    bool need_send = op->kind != SNCCL_RECV &&
                     !((op->kind == SNCCL_BROADCAST || op->kind == SNCCL_SCATTER) && !root);
    bool need_recv = op->kind != SNCCL_SEND &&
                     !((op->kind == SNCCL_REDUCE || op->kind == SNCCL_GATHER) && !root);

    if (!op->count)
        return ncclSuccess;
    if ((need_send && !op->sendbuff) || (need_recv && !op->recvbuff))
        return snccl_fail(ncclInvalidArgument, "%s: %s is NULL", fn,
                          need_send && !op->sendbuff ? "sendbuff" : "recvbuff");
    if (op->kind == SNCCL_ALLTOALL && op->sendbuff == op->recvbuff)
        return snccl_fail(ncclInvalidArgument, "%s: sendbuff == recvbuff (out of place only)", fn);
    return ncclSuccess;
}

/* SIMNCCL_ENQUEUE_DELAY_MS (tests only; no NCCL setting): each operation
 * waits that long inside the library before its work goes to the stream,
 * so that a caller stopped there, as on a loaded machine, is met often. */
static void enqueue_test_delay(void)
{
    static long ms = -1;
    long v = __atomic_load_n(&ms, __ATOMIC_RELAXED);

    if (v < 0) {
        const char *e = getenv("SIMNCCL_ENQUEUE_DELAY_MS");
        v = e && *e ? strtol(e, NULL, 10) : 0;
        __atomic_store_n(&ms, v > 0 ? v : 0, __ATOMIC_RELAXED);
    }
    if (v > 0) {
        struct timespec ts = { v / 1000, v % 1000 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

static ncclResult_t submit(struct snccl_op op, ncclComm_t comm, cudaStream_t stream, const char *fn)
{
    ncclResult_t rc;

    if ((rc = snccl_usable(comm, fn)) || (rc = check_type((ncclDataType_t)op.dtype, fn)))
        goto out;
    if ((op.kind == SNCCL_ALLREDUCE || op.kind == SNCCL_REDUCE || op.kind == SNCCL_REDUCESCATTER) &&
        (rc = check_op((ncclRedOp_t)op.redop, fn)))
        goto out;
    if ((rc = check_peer(&op, comm, fn)) || (rc = check_buffers(&op, comm, fn)))
        goto out;
    enqueue_test_delay();
    rc = enqueue(comm, &op, (CUstream)stream);
out:
    if (rc && group_depth && !group_error)
        group_error = rc;
    return rc;
}

#define BUF(p) ((uint64_t)(uintptr_t)(p))
/* an enum value as a byte of the work; out of range stays out of range */
#define BYTE(v) ((unsigned)(v) < 255 ? (uint8_t)(v) : (uint8_t)255)

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_ALLREDUCE, .dtype = BYTE(datatype), .redop = BYTE(op),
                          .sendbuff = BUF(sendbuff), .recvbuff = BUF(recvbuff), .count = count };
    return submit(o, comm, stream, "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_BROADCAST, .dtype = BYTE(datatype), .peer = root,
                          .sendbuff = BUF(sendbuff), .recvbuff = BUF(recvbuff), .count = count };
    return submit(o, comm, stream, "ncclBroadcast");
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_BROADCAST, .dtype = BYTE(datatype), .peer = root,
                          .sendbuff = BUF(buff), .recvbuff = BUF(buff), .count = count };
    return submit(o, comm, stream, "ncclBcast");
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_REDUCE, .dtype = BYTE(datatype), .redop = BYTE(op),
                          .peer = root, .sendbuff = BUF(sendbuff), .recvbuff = BUF(recvbuff),
                          .count = count };
    return submit(o, comm, stream, "ncclReduce");
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_ALLGATHER, .dtype = BYTE(datatype),
                          .sendbuff = BUF(sendbuff), .recvbuff = BUF(recvbuff), .count = sendcount };
    return submit(o, comm, stream, "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_REDUCESCATTER, .dtype = BYTE(datatype), .redop = BYTE(op),
                          .sendbuff = BUF(sendbuff), .recvbuff = BUF(recvbuff), .count = recvcount };
    return submit(o, comm, stream, "ncclReduceScatter");
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_ALLTOALL, .dtype = BYTE(datatype),
                          .sendbuff = BUF(sendbuff), .recvbuff = BUF(recvbuff), .count = count };
    return submit(o, comm, stream, "ncclAlltoAll");
}

ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_GATHER, .dtype = BYTE(datatype), .peer = root,
                          .sendbuff = BUF(sendbuff), .recvbuff = BUF(recvbuff), .count = count };
    return submit(o, comm, stream, "ncclGather");
}

ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                         int root, ncclComm_t comm, cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_SCATTER, .dtype = BYTE(datatype), .peer = root,
                          .sendbuff = BUF(sendbuff), .recvbuff = BUF(recvbuff), .count = count };
    return submit(o, comm, stream, "ncclScatter");
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_SEND, .dtype = BYTE(datatype), .peer = peer,
                          .sendbuff = BUF(sendbuff), .count = count };
    return submit(o, comm, stream, "ncclSend");
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    struct snccl_op o = { .kind = SNCCL_RECV, .dtype = BYTE(datatype), .peer = peer,
                          .recvbuff = BUF(recvbuff), .count = count };
    return submit(o, comm, stream, "ncclRecv");
}

/* --- groups ------------------------------------------------------------------- */

ncclResult_t snccl_group_start(void)
{
    if (!group_depth++)
        group_error = ncclSuccess;
    return ncclSuccess;
}

static void *deferred_main(void *arg)
{
    struct deferred *d = arg;

    d->rc = d->fn(d->comm, d->arg);
    return NULL;
}

/* The deferred blocking calls, together: one thread each when several. */
static ncclResult_t run_deferred(void)
{
    ncclResult_t rc = ncclSuccess;
    int n = group_ntasks;

    group_ntasks = 0;
    if (n == 1)
        return group_tasks[0].fn(group_tasks[0].comm, group_tasks[0].arg);
    for (int i = 0; i < n; i++)
        if (pthread_create(&group_tasks[i].thread, NULL, deferred_main, &group_tasks[i])) {
            group_tasks[i].rc = snccl_fail(ncclSystemError, "pthread_create: %s", strerror(errno));
            group_tasks[i].thread = 0;
        }
    for (int i = 0; i < n; i++) {
        if (group_tasks[i].thread)
            pthread_join(group_tasks[i].thread, NULL);
        if (group_tasks[i].rc && !rc)
            rc = group_tasks[i].rc;
    }
    return rc;
}

ncclResult_t snccl_group_end(void)
{
    ncclResult_t rc = ncclSuccess, rc2;

    if (group_depth <= 0)
        return snccl_fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth)
        return ncclSuccess;
    for (int i = 0; i < group_ncomms; i++)
        if ((rc2 = snccl_flush(group_comms[i])) && !rc)
            rc = rc2;
    group_ncomms = 0;
    if ((rc2 = run_deferred()) && !rc)
        rc = rc2;
    if (group_error && !rc)
        rc = group_error;
    return rc;
}

ncclResult_t ncclGroupStart(void)
{
    return snccl_group_start();
}

ncclResult_t ncclGroupEnd(void)
{
    return snccl_group_end();
}
