/*
 * init.c - communicators: unique ids, init (blocking or not), finalize,
 * destroy, abort and queries; errors and the version. Their device memory
 * (and suspend/resume) is memory.c's.
 *
 * An init runs snccl_rendezvous (all ranks meet in the id's shm segment),
 * sets the transport up, loads the kernel module into the communicator's
 * context and allocates its device memory: the devcomm (persistent) and the
 * receive buffer of nranks * NCCL_BUFFSIZE bytes (suspendable).
 */
#include "simnccl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define CONFIG_MAGIC 0xcafebeefu
#define KERNELS_NAME "simnccl-kernels.so"

/* --- errors ------------------------------------------------------------------ */

static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[512];

static bool debug_warn(void)
{
    const char *d = getenv("NCCL_DEBUG");

    return d && (!strcasecmp(d, "WARN") || !strcasecmp(d, "INFO") || !strcasecmp(d, "TRACE"));
}

ncclResult_t snccl_fail(ncclResult_t rc, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&err_lock);
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    if (debug_warn())
        fprintf(stderr, "simnccl %d WARN %s\n", (int)getpid(), last_error);
    pthread_mutex_unlock(&err_lock);
    return rc;
}

ncclResult_t snccl_cu(CUresult r, const char *what)
{
    const char *name = NULL;

    cuGetErrorName(r, &name);
    return snccl_fail(ncclUnhandledCudaError, "%s failed: %s (%d)", what, name ? name : "?", (int)r);
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_error;
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return snccl_fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

bool snccl_comm_ok(const struct ncclComm *comm)
{
    return comm && comm->magic == SNCCL_ID_MAGIC;
}

/* --- unique ids ------------------------------------------------------------- */

ncclResult_t snccl_get_unique_id(ncclUniqueId *uniqueId)
{
    struct snccl_id id = { .magic = SNCCL_ID_MAGIC };

    if (!uniqueId)
        return snccl_fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    if (getrandom(&id.token, sizeof(id.token), 0) != sizeof(id.token))
        return snccl_fail(ncclSystemError, "getrandom: %s", strerror(errno));
    snprintf(id.name, sizeof(id.name), "/simnccl-%d-%016llx", (int)getuid(),
             (unsigned long long)id.token);
    memset(uniqueId, 0, sizeof(*uniqueId));
    memcpy(uniqueId->internal, &id, sizeof(id));
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    return snccl_get_unique_id(uniqueId);
}

/* --- device memory ------------------------------------------------------------ */

static bool env_flag(const char *name, bool dflt)
{
    const char *e = getenv(name);

    return e && *e ? atoi(e) != 0 : dflt;
}

/* SIMNCCL_KERNELS, else simnccl-kernels.so beside this library. */
static void kernels_path(char *buf, size_t len)
{
    const char *e = getenv("SIMNCCL_KERNELS");
    Dl_info info;
    const char *slash;

    if (e && *e) {
        snprintf(buf, len, "%s", e);
        return;
    }
    if (dladdr((void *)ncclGetVersion, &info) && info.dli_fname && (slash = strrchr(info.dli_fname, '/')))
        snprintf(buf, len, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, KERNELS_NAME);
    else
        snprintf(buf, len, "%s", KERNELS_NAME);
}

static ncclResult_t device_setup(struct ncclComm *comm)
{
    uint64_t dc_bytes = snccl_devcomm_bytes((uint32_t)comm->nranks);
    char path[4096];
    ncclResult_t rc;
    CUresult r;

    if (!(comm->devcomm_host = calloc(1, dc_bytes)))
        return snccl_fail(ncclSystemError, "out of host memory");
    comm->devcomm_host->magic = SNCCL_DEVCOMM_MAGIC;
    comm->devcomm_host->nranks = (uint32_t)comm->nranks;
    comm->devcomm_host->rank = (uint32_t)comm->rank;
    comm->devcomm_host->slot_bytes = comm->slot_bytes;
    if (env_flag("NCCL_SHM_DISABLE", false))
        comm->transport = &snccl_transport_p2p;
    else if (env_flag("NCCL_SHM_USE_CUDA_MEMCPY", false))
        comm->transport = &snccl_transport_shm_proxy;
    else
        comm->transport = &snccl_transport_shm;
    if ((rc = comm->transport->setup(comm)))
        return rc;
    kernels_path(path, sizeof(path));
    if ((r = cuModuleLoad(&comm->module, path))) {
        comm->module = NULL;
        snccl_cu(r, "cuModuleLoad");
        return snccl_fail(ncclUnhandledCudaError, "cannot load simnccl's kernels from %s (set SIMNCCL_KERNELS)", path);
    }
    if ((r = cuModuleGetFunction(&comm->kernel, comm->module, SNCCL_KERNEL)))
        return snccl_cu(r, "cuModuleGetFunction " SNCCL_KERNEL);
    if ((r = cuEventCreate(&comm->last, CU_EVENT_DISABLE_TIMING)) ||
        (r = cuEventCreate(&comm->join, CU_EVENT_DISABLE_TIMING)))
        return snccl_cu(r, "cuEventCreate");
    if ((r = cuMemAlloc(&comm->devcomm, dc_bytes)))
        return snccl_cu(r, "cuMemAlloc of the devcomm");
    return snccl_devbuf_alloc(comm);
}

/* --- init ------------------------------------------------------------------- */

static void set_state(struct ncclComm *comm, enum snccl_state st, ncclResult_t async)
{
    pthread_mutex_lock(&comm->lock);
    comm->state = st;
    comm->async = async;
    pthread_mutex_unlock(&comm->lock);
}

static ncclResult_t init_run(struct ncclComm *comm, int unused)
{
    ncclResult_t rc;
    CUresult r;

    (void)unused;
    if ((r = cuCtxSetCurrent(comm->ctx)))
        rc = snccl_cu(r, "cuCtxSetCurrent");
    else if (!(rc = snccl_rendezvous(comm)))
        rc = device_setup(comm);
    set_state(comm, rc ? SNCCL_FAILED : SNCCL_READY, rc);
    return rc;
}

static void *init_thread(void *arg)
{
    init_run(arg, 0);
    return NULL;
}

/* The current context, or device 0's primary one made current (as the
 * runtime does for a program that did not choose). */
static ncclResult_t current_ctx(CUcontext *ctx, CUdevice *dev)
{
    CUresult r;

    if ((r = cuInit(0)))
        return snccl_cu(r, "cuInit");
    if ((r = cuCtxGetCurrent(ctx)))
        return snccl_cu(r, "cuCtxGetCurrent");
    if (!*ctx) {
        if ((r = cuDevicePrimaryCtxRetain(ctx, 0)) || (r = cuCtxSetCurrent(*ctx)))
            return snccl_cu(r, "making device 0's primary context current");
    }
    if ((r = cuCtxGetDevice(dev)))
        return snccl_cu(r, "cuCtxGetDevice");
    return ncclSuccess;
}

static void comm_free(struct ncclComm *comm);

ncclResult_t snccl_comm_init(ncclComm_t *out, int nranks, ncclUniqueId commId, int rank,
                             ncclConfig_t *config)
{
    struct snccl_id id;
    struct ncclComm *comm;
    ncclResult_t rc;
    int blocking = env_flag("NCCL_COMM_BLOCKING", true);

    if (!out)
        return snccl_fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *out = NULL;
    memcpy(&id, commId.internal, sizeof(id));
    if (id.magic != SNCCL_ID_MAGIC || !id.name[0] || memchr(id.name, 0, sizeof(id.name)) == NULL)
        return snccl_fail(ncclInvalidArgument, "ncclCommInitRank: not a unique id of ncclGetUniqueId");
    if (nranks < 1 || nranks > SNCCL_MAX_RANKS)
        return snccl_fail(ncclInvalidArgument, "ncclCommInitRank: nranks %d out of 1..%d", nranks,
                          SNCCL_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return snccl_fail(ncclInvalidArgument, "ncclCommInitRank: rank %d out of 0..%d", rank, nranks - 1);
    if (config) {
        if (config->magic != CONFIG_MAGIC || config->size < offsetof(ncclConfig_t, cgaClusterSize))
            return snccl_fail(ncclInvalidArgument, "ncclCommInitRankConfig: config not from NCCL_CONFIG_INITIALIZER");
        if (config->blocking != NCCL_CONFIG_UNDEF_INT) {
            if (config->blocking != 0 && config->blocking != 1)
                return snccl_fail(ncclInvalidArgument, "ncclCommInitRankConfig: blocking %d", config->blocking);
            blocking = config->blocking;
        }
    }
    if (!(comm = calloc(1, sizeof(*comm))))
        return snccl_fail(ncclSystemError, "out of host memory");
    comm->magic = SNCCL_ID_MAGIC;
    comm->nranks = nranks;
    comm->rank = rank;
    comm->id = id;
    comm->blocking = blocking;
    comm->cumem = env_flag("NCCL_CUMEM_ENABLE", false);
    comm->seg_fd = -1;
    comm->p2p_fd = comm->p2p_listen = -1;
    comm->state = SNCCL_INITIALIZING;
    comm->async = ncclInProgress;
    pthread_mutex_init(&comm->lock, NULL);
    if ((rc = current_ctx(&comm->ctx, &comm->cudev))) {
        comm_free(comm);
        return rc;
    }
    if (snccl_group_depth() > 0) {
        *out = comm;            /* joined at ncclGroupEnd, with the group's others */
        return snccl_group_defer(init_run, comm, 0);
    }
    if (!blocking) {
        if (pthread_create(&comm->init_thread, NULL, init_thread, comm)) {
            comm_free(comm);
            return snccl_fail(ncclSystemError, "pthread_create: %s", strerror(errno));
        }
        comm->init_thread_live = true;
        *out = comm;
        return ncclInProgress;
    }
    if ((rc = init_run(comm, 0))) {
        comm_free(comm);
        return rc;
    }
    *out = comm;
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
    return snccl_comm_init(comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return snccl_comm_init(comm, nranks, commId, rank, NULL);
}

/* As NCCL's, it makes its communicators through the library's own
 * functions, not the API: a program's interposer sees one ncclCommInitAll,
 * never the ncclCommInitRank and ncclGroupStart/End inside it. */
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    ncclUniqueId id;
    CUcontext saved = NULL, ctx;
    ncclResult_t rc, rc2;
    CUresult r;
    int count;

    if (!comms || ndev < 1 || ndev > SNCCL_MAX_RANKS)
        return snccl_fail(ncclInvalidArgument, "ncclCommInitAll: comms NULL or ndev %d", ndev);
    if ((r = cuInit(0)) || (r = cuDeviceGetCount(&count)))
        return snccl_cu(r, "cuDeviceGetCount");
    for (int i = 0; i < ndev; i++) {
        int d = devlist ? devlist[i] : i;

        comms[i] = NULL;
        if (d < 0 || d >= count)
            return snccl_fail(ncclInvalidArgument, "ncclCommInitAll: device %d out of 0..%d", d, count - 1);
        for (int j = 0; j < i; j++)
            if ((devlist ? devlist[j] : j) == d)
                return snccl_fail(ncclInvalidUsage, "ncclCommInitAll: device %d listed twice", d);
    }
    if ((rc = snccl_get_unique_id(&id)))
        return rc;
    cuCtxGetCurrent(&saved);
    rc = snccl_group_start();
    for (int i = 0; i < ndev && !rc; i++) {
        if ((r = cuDevicePrimaryCtxRetain(&ctx, devlist ? devlist[i] : i)) || (r = cuCtxSetCurrent(ctx)))
            rc = snccl_cu(r, "retaining a primary context");
        else
            rc = snccl_comm_init(&comms[i], ndev, id, i, NULL);
    }
    rc2 = snccl_group_end();
    cuCtxSetCurrent(saved);
    if (rc || rc2) {
        for (int i = 0; i < ndev; i++)
            if (comms[i]) {
                snccl_comm_abort(comms[i]);
                comms[i] = NULL;
            }
    }
    return rc ? rc : rc2;
}

/* --- state ------------------------------------------------------------------ */

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!snccl_comm_ok(comm) || !asyncError)
        return snccl_fail(ncclInvalidArgument, "ncclCommGetAsyncError: bad comm or asyncError NULL");
    pthread_mutex_lock(&comm->lock);
    *asyncError = comm->async;
    pthread_mutex_unlock(&comm->lock);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!snccl_comm_ok(comm) || !count)
        return snccl_fail(ncclInvalidArgument, "ncclCommCount: bad comm or count NULL");
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!snccl_comm_ok(comm) || !device)
        return snccl_fail(ncclInvalidArgument, "ncclCommCuDevice: bad comm or device NULL");
    *device = (int)comm->cudev;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!snccl_comm_ok(comm) || !rank)
        return snccl_fail(ncclInvalidArgument, "ncclCommUserRank: bad comm or rank NULL");
    *rank = comm->rank;
    return ncclSuccess;
}

/* comm is initialized, not failed, not finalized. */
ncclResult_t snccl_ready(struct ncclComm *comm, const char *fn)
{
    enum snccl_state st;

    if (!snccl_comm_ok(comm))
        return snccl_fail(ncclInvalidArgument, "%s: invalid communicator", fn);
    pthread_mutex_lock(&comm->lock);
    st = comm->state;
    pthread_mutex_unlock(&comm->lock);
    if (st == SNCCL_INITIALIZING)
        return snccl_fail(ncclInvalidUsage, "%s: communicator still initializing", fn);
    if (st != SNCCL_READY)
        return snccl_fail(ncclInvalidUsage, "%s: communicator failed or finalized", fn);
    return ncclSuccess;
}

/* --- teardown ----------------------------------------------------------------- */

static void comm_free(struct ncclComm *comm)
{
    bool pushed = comm->ctx && cuCtxPushCurrent(comm->ctx) == CUDA_SUCCESS;

    if (comm->launched)
        cuEventSynchronize(comm->last);
    if (comm->transport)
        comm->transport->teardown(comm);    /* the proxy stops before its buffers go */
    snccl_devbuf_free(comm, false);
    if (comm->devcomm)
        cuMemFree(comm->devcomm);
    if (comm->module)
        cuModuleUnload(comm->module);
    if (comm->last)
        cuEventDestroy(comm->last);
    if (comm->join)
        cuEventDestroy(comm->join);
    if (pushed)
        cuCtxPopCurrent(NULL);
    snccl_seg_close(comm);
    free(comm->devcomm_host);
    pthread_mutex_destroy(&comm->lock);
    comm->magic = 0;
    free(comm);
}

static void join_init(struct ncclComm *comm)
{
    if (comm->init_thread_live) {
        pthread_join(comm->init_thread, NULL);
        comm->init_thread_live = false;
    }
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    ncclResult_t rc;

    if (!snccl_comm_ok(comm))
        return snccl_fail(ncclInvalidArgument, "ncclCommFinalize: invalid communicator");
    join_init(comm);
    if ((rc = snccl_ready(comm, "ncclCommFinalize")))
        return rc;
    __atomic_add_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);   /* an abort waits for us */
    if (!(rc = snccl_wait_work(comm)))
        set_state(comm, SNCCL_FINALIZED, ncclSuccess);
    __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);
    return rc;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    if (!snccl_comm_ok(comm))
        return snccl_fail(ncclInvalidArgument, "ncclCommDestroy: invalid communicator");
    join_init(comm);
    comm_free(comm);            /* waits for its work */
    return ncclSuccess;
}

ncclResult_t snccl_comm_abort(ncclComm_t comm)
{
    uint32_t *flag;

    if (!comm)
        return ncclSuccess;
    if (!snccl_comm_ok(comm))
        return snccl_fail(ncclInvalidArgument, "ncclCommAbort: invalid communicator");
    __atomic_store_n(&comm->aborting, 1, __ATOMIC_RELEASE);
    join_init(comm);
    if (comm->seg && comm->transport && (flag = comm->transport->abort_flag(comm))) {
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        snccl_bell_ring(comm);  /* kernels that sleep look again */
    }
    while (__atomic_load_n(&comm->busy, __ATOMIC_ACQUIRE)) {
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);   /* a call blocked on comm in another thread leaves */
    }
    comm_free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return snccl_comm_abort(comm);
}

/* Used by enqueue.c to refuse work. */
ncclResult_t snccl_usable(struct ncclComm *comm, const char *fn)
{
    ncclResult_t rc = snccl_ready(comm, fn);

    if (!rc && comm->suspended)
        return snccl_fail(ncclInvalidUsage, "%s: communicator suspended", fn);
    return rc;
}
