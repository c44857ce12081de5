/*
 * rendezvous.c - how the ranks of a communicator find each other: a POSIX
 * shm segment named in the unique id. The first rank to arrive creates it
 * (O_EXCL) and sets its header up; the others wait for the header, and every
 * rank marks itself in. The rank that completes the count unlinks the name:
 * the mappings stay, and the id cannot be used again. The same segment
 * carries the shm transport's slots (transport_shm.c) and the barrier of
 * ncclCommSuspend/Resume.
 */
#include "simnccl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HOST_WAIT_NS 10000000L

static bool aborting(struct ncclComm *comm)
{
    return __atomic_load_n(&comm->aborting, __ATOMIC_ACQUIRE);
}

void snccl_bell_wait(struct ncclComm *comm, uint32_t seen)
{
    struct timespec ts = { 0, HOST_WAIT_NS };

    syscall(SYS_futex, &comm->seg->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
}

void snccl_bell_ring(struct ncclComm *comm)
{
    __atomic_add_fetch(&comm->seg->bell, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &comm->seg->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void nap_ms(long ms)
{
    struct timespec ts = { 0, ms * 1000000L };

    nanosleep(&ts, NULL);
}

/* NCCL_BUFFSIZE (bytes), as NCCL reads it; the default otherwise. */
static uint64_t buffsize(void)
{
    const char *e = getenv("NCCL_BUFFSIZE");
    char *end;
    unsigned long long v;

    if (!e || !*e)
        return SNCCL_DEFAULT_BUFFSIZE;
    v = strtoull(e, &end, 0);
    if (*end || v < 4096 || v > (1ull << 30))
        return SNCCL_DEFAULT_BUFFSIZE;
    return (v + 63) & ~63ull;
}

static ncclResult_t create_seg(struct ncclComm *comm, int fd)
{
    uint64_t slot = buffsize(), total = snccl_shm_bytes((uint32_t)comm->nranks, slot);
    struct snccl_seg *s;

    if (ftruncate(fd, (off_t)total))
        return snccl_fail(ncclSystemError, "ftruncate of %s to %llu bytes: %s", comm->id.name,
                          (unsigned long long)total, strerror(errno));
    s = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED)
        return snccl_fail(ncclSystemError, "mmap of %s: %s", comm->id.name, strerror(errno));
    s->token = comm->id.token;
    s->total_bytes = total;
    s->slot_bytes = slot;
    s->nranks = (uint32_t)comm->nranks;
    __atomic_store_n(&s->magic, SNCCL_ID_MAGIC, __ATOMIC_RELEASE);
    comm->seg = s;
    comm->seg_bytes = total;
    return ncclSuccess;
}

/* Another rank created it: wait for its header, then map it whole. */
static ncclResult_t open_seg(struct ncclComm *comm, int fd)
{
    struct snccl_seg *s;
    struct stat st;
    uint64_t total;

    for (;;) {
        if (aborting(comm))
            return snccl_fail(ncclInvalidUsage, "communicator aborted during init");
        if (fstat(fd, &st))
            return snccl_fail(ncclSystemError, "fstat of %s: %s", comm->id.name, strerror(errno));
        if ((uint64_t)st.st_size >= sizeof(*s))
            break;
        nap_ms(1);
    }
    s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED)
        return snccl_fail(ncclSystemError, "mmap of %s: %s", comm->id.name, strerror(errno));
    while (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != SNCCL_ID_MAGIC) {
        if (aborting(comm)) {
            munmap(s, sizeof(*s));
            return snccl_fail(ncclInvalidUsage, "communicator aborted during init");
        }
        nap_ms(1);
    }
    total = s->total_bytes;
    if (s->token != comm->id.token || s->nranks != (uint32_t)comm->nranks) {
        ncclResult_t rc = snccl_fail(ncclInvalidArgument,
                                     "rank %d: nranks %d, but the communicator of this id has %u",
                                     comm->rank, comm->nranks, s->nranks);
        munmap(s, sizeof(*s));
        return rc;
    }
    munmap(s, sizeof(*s));
    s = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED)
        return snccl_fail(ncclSystemError, "mmap of %s: %s", comm->id.name, strerror(errno));
    comm->seg = s;
    comm->seg_bytes = total;
    return ncclSuccess;
}

static ncclResult_t map_seg(struct ncclComm *comm)
{
    int fd = shm_open(comm->id.name, O_RDWR | O_CREAT | O_EXCL, 0600);

    if (fd >= 0) {
        comm->seg_fd = fd;
        return create_seg(comm, fd);
    }
    if (errno != EEXIST)
        return snccl_fail(ncclSystemError, "shm_open %s: %s", comm->id.name, strerror(errno));
    fd = shm_open(comm->id.name, O_RDWR, 0600);
    if (fd < 0)
        return snccl_fail(errno == ENOENT ? ncclInvalidUsage : ncclSystemError,
                          "shm_open %s: %s (was this unique id used already?)", comm->id.name,
                          strerror(errno));
    comm->seg_fd = fd;
    return open_seg(comm, fd);
}

/* Mark me in, then wait for all. */
static ncclResult_t join(struct ncclComm *comm)
{
    struct snccl_seg *s = comm->seg;
    struct snccl_rank_info *me = &s->ranks[comm->rank];
    uint32_t zero = 0;

    if (cuDeviceGetUuid_v2(&me->uuid, comm->cudev) != CUDA_SUCCESS)
        memset(&me->uuid, 0, sizeof(me->uuid));
    me->pid = getpid();
    if (!__atomic_compare_exchange_n(&me->joined, &zero, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return snccl_fail(ncclInvalidUsage, "rank %d joined this communicator twice", comm->rank);
    if (__atomic_add_fetch(&s->arrived, 1, __ATOMIC_ACQ_REL) == s->nranks) {
        shm_unlink(comm->id.name);      /* all are in: the id is spent */
        comm->seg_unlinked = true;
    }
    snccl_bell_ring(comm);
    for (;;) {
        uint32_t seen = __atomic_load_n(&s->bell, __ATOMIC_ACQUIRE);

        if (__atomic_load_n(&s->arrived, __ATOMIC_ACQUIRE) >= s->nranks)
            break;
        if (aborting(comm))
            return snccl_fail(ncclInvalidUsage, "communicator aborted during init");
        snccl_bell_wait(comm, seen);
    }
    comm->seg_unlinked = true;
    for (int r = 0; r < comm->nranks; r++)
        if (r != comm->rank && !memcmp(&s->ranks[r].uuid, &me->uuid, sizeof(me->uuid)))
            return snccl_fail(ncclInvalidUsage,
                              "Duplicate GPU detected: rank %d and rank %d both on the same GPU",
                              comm->rank, r);
    return ncclSuccess;
}

ncclResult_t snccl_rendezvous(struct ncclComm *comm)
{
    ncclResult_t rc;

    if ((rc = map_seg(comm)))
        return rc;
    comm->slot_bytes = comm->seg->slot_bytes;
    return join(comm);
}

void snccl_seg_close(struct ncclComm *comm)
{
    if (comm->seg) {
        munmap(comm->seg, comm->seg_bytes);
        comm->seg = NULL;
    }
    if (comm->seg_fd >= 0) {
        close(comm->seg_fd);
        comm->seg_fd = -1;
    }
    if (!comm->seg_unlinked && comm->id.name[0]) {
        shm_unlink(comm->id.name);      /* init never completed: nobody else will */
        comm->seg_unlinked = true;
    }
}

/* All ranks reach this point (suspend, resume). */
ncclResult_t snccl_barrier(struct ncclComm *comm)
{
    struct snccl_seg *s = comm->seg;
    uint32_t gen = __atomic_load_n(&s->barrier_gen, __ATOMIC_ACQUIRE);

    if (__atomic_add_fetch(&s->barrier_count, 1, __ATOMIC_ACQ_REL) == s->nranks) {
        __atomic_store_n(&s->barrier_count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&s->barrier_gen, gen + 1, __ATOMIC_RELEASE);
        snccl_bell_ring(comm);
        return ncclSuccess;
    }
    for (;;) {
        uint32_t seen = __atomic_load_n(&s->bell, __ATOMIC_ACQUIRE);

        if (__atomic_load_n(&s->barrier_gen, __ATOMIC_ACQUIRE) != gen)
            return ncclSuccess;
        if (aborting(comm))
            return snccl_fail(ncclInvalidUsage, "communicator aborted in a barrier");
        snccl_bell_wait(comm, seen);
    }
}
