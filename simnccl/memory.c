/*
 * memory.c - a communicator's device memory: the receive buffers (cuMemAlloc,
 * or VMM memory with NCCL_CUMEM_ENABLE=1), released by ncclCommSuspend and
 * given back by ncclCommResume (both collective: a barrier of all ranks in
 * the rendezvous segment), and ncclCommMemStats.
 */
#include <stdlib.h>
#include <time.h>

#include "simnccl.h"

/* The receive buffer as VMM memory (NCCL_CUMEM_ENABLE=1, as NCCL does when
 * the driver has it): the address is reserved once and kept across a
 * suspend, only the physical memory goes. */
static CUresult cumem_map(struct ncclComm *comm, size_t bytes)
{
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, comm->cudev } };
    CUmemAccessDesc access = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    size_t gran = 0;
    CUresult r;

    if (!comm->devbuf) {
        if ((r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)))
            return r;
        comm->devbuf_bytes = (bytes + gran - 1) / gran * gran;
        if ((r = cuMemAddressReserve(&comm->devbuf, comm->devbuf_bytes, 0, 0, 0)))
            return r;
    }
    if ((r = cuMemCreate(&comm->devbuf_handle, comm->devbuf_bytes, &prop, 0)))
        return r;
    if ((r = cuMemMap(comm->devbuf, comm->devbuf_bytes, 0, comm->devbuf_handle, 0))) {
        cuMemRelease(comm->devbuf_handle);
        comm->devbuf_handle = 0;
        return r;
    }
    return cuMemSetAccess(comm->devbuf, comm->devbuf_bytes, &access, 1);
}

/* The receive buffer (nranks slots), and with a proxy the staging buffer
 * after it (1 + nranks slots): kernels.c's rows. */
size_t snccl_devbuf_bytes(const struct ncclComm *comm)
{
    uint64_t rows = (uint64_t)comm->nranks * (comm->devcomm_host->proxy ? 2 : 1) +
                    (comm->devcomm_host->proxy ? 1 : 0);

    return comm->slot_bytes * rows;
}

/* The receive buffer, and the devcomm that points at it. */
ncclResult_t snccl_devbuf_alloc(struct ncclComm *comm)
{
    size_t bytes = snccl_devbuf_bytes(comm);
    CUresult r;

    if (comm->cumem)
        r = cumem_map(comm, bytes);
    else if (!(r = cuMemAlloc(&comm->devbuf, bytes)))
        comm->devbuf_bytes = bytes;
    if (r)
        return snccl_cu(r, comm->cumem ? "mapping the communicator's buffers (cuMemCreate)"
                                       : "cuMemAlloc of the communicator's buffers");
    comm->devcomm_host->devbuf = comm->devbuf;
    if ((r = cuMemcpyHtoD(comm->devcomm, comm->devcomm_host, snccl_devcomm_bytes((uint32_t)comm->nranks))))
        return snccl_cu(r, "cuMemcpyHtoD of the devcomm");
    return ncclSuccess;
}

/* Frees the receive buffer; VMM memory keeps its address if keep_va. */
ncclResult_t snccl_devbuf_free(struct ncclComm *comm, bool keep_va)
{
    CUresult r = CUDA_SUCCESS;

    if (!comm->devbuf)
        return ncclSuccess;
    if (!comm->cumem) {
        r = cuMemFree(comm->devbuf);
        comm->devbuf = 0;
    } else {
        if (comm->devbuf_handle) {
            if (!(r = cuMemUnmap(comm->devbuf, comm->devbuf_bytes)))
                r = cuMemRelease(comm->devbuf_handle);
            comm->devbuf_handle = 0;
        }
        if (!keep_va) {
            cuMemAddressFree(comm->devbuf, comm->devbuf_bytes);
            comm->devbuf = 0;
        }
    }
    return r ? snccl_cu(r, "freeing the communicator's buffers") : ncclSuccess;
}

/* --- suspend / resume ---------------------------------------------------------- */

static ncclResult_t suspend_run(struct ncclComm *comm, int flags)
{
    ncclResult_t rc;
    CUresult r;

    __atomic_add_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);
    if ((r = cuCtxPushCurrent(comm->ctx))) {
        rc = snccl_cu(r, "cuCtxPushCurrent");
        goto out;
    }
    /* the work queued before must end, on every rank, before buffers go */
    if (!(rc = snccl_wait_work(comm)) && !(rc = snccl_barrier(comm)) && (flags & NCCL_SUSPEND_MEM)) {
        if (!(rc = snccl_devbuf_free(comm, true)))
            comm->suspended = true;
    }
    cuCtxPopCurrent(NULL);
out:
    __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);
    return rc;
}

static ncclResult_t resume_run(struct ncclComm *comm, int unused)
{
    ncclResult_t rc;
    CUresult r;

    (void)unused;
    __atomic_add_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);
    if ((r = cuCtxPushCurrent(comm->ctx))) {
        rc = snccl_cu(r, "cuCtxPushCurrent");
        goto out;
    }
    if (!(rc = snccl_devbuf_alloc(comm)) && !(rc = snccl_barrier(comm)))
        comm->suspended = false;
    cuCtxPopCurrent(NULL);
out:
    __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);
    return rc;
}

ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags)
{
    ncclResult_t rc;

    if (!snccl_comm_ok(comm))
        return snccl_fail(ncclInvalidArgument, "ncclCommSuspend: invalid communicator");
    if (flags & ~NCCL_SUSPEND_MEM)
        return snccl_fail(ncclInvalidArgument, "ncclCommSuspend: unknown flags 0x%x", flags);
    if ((rc = snccl_ready(comm, "ncclCommSuspend")))
        return rc;
    if (comm->suspended)
        return snccl_fail(ncclInvalidUsage, "ncclCommSuspend: communicator already suspended");
    if (snccl_group_depth() > 0)
        return snccl_group_defer(suspend_run, comm, flags);
    return suspend_run(comm, flags);
}

/* SIMNCCL_RESUME_DELAY_MS (tests only; no NCCL setting): ncclCommResume
 * sleeps that long before it takes anything back, so that a caller who
 * uses a communicator while its owner's resume is under way meets it
 * still suspended, as it might on a loaded machine. */
static void resume_test_delay(void)
{
    const char *e = getenv("SIMNCCL_RESUME_DELAY_MS");
    long ms = e && *e ? strtol(e, NULL, 10) : 0;
    struct timespec ts = { ms / 1000, ms % 1000 * 1000000L };

    if (ms > 0)
        nanosleep(&ts, NULL);
}

ncclResult_t ncclCommResume(ncclComm_t comm)
{
    ncclResult_t rc;

    if (!snccl_comm_ok(comm))
        return snccl_fail(ncclInvalidArgument, "ncclCommResume: invalid communicator");
    if ((rc = snccl_ready(comm, "ncclCommResume")))
        return rc;
    if (!comm->suspended)
        return snccl_fail(ncclInvalidUsage, "ncclCommResume: communicator not suspended");
    resume_test_delay();
    if (snccl_group_depth() > 0)
        return snccl_group_defer(resume_run, comm, 0);
    return resume_run(comm, 0);
}

ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value)
{
    uint64_t suspendable, persist;
    ncclResult_t rc;

    if (!snccl_comm_ok(comm) || !value)
        return snccl_fail(ncclInvalidArgument, "ncclCommMemStats: invalid communicator or value NULL");
    if ((rc = snccl_ready(comm, "ncclCommMemStats")))
        return rc;
    suspendable = snccl_devbuf_bytes(comm);
    persist = snccl_devcomm_bytes((uint32_t)comm->nranks);
    switch (stat) {
    case ncclStatGpuMemSuspend: *value = suspendable; break;
    case ncclStatGpuMemSuspended: *value = comm->suspended; break;
    case ncclStatGpuMemPersist: *value = persist; break;
    case ncclStatGpuMemTotal: *value = persist + (comm->suspended ? 0 : suspendable); break;
    default: return snccl_fail(ncclInvalidArgument, "ncclCommMemStats: unknown stat %d", (int)stat);
    }
    return ncclSuccess;
}
