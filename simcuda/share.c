/*
 * share.c - device memory and events that other processes open.
 *
 * Memory another process can map has a shared backing object instead of
 * anonymous memory: a memfd for a POSIX file-descriptor allocation
 * (cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, vmm.c), a
 * named /dev/shm object for a cuMemAlloc buffer once cuIpcGetMemHandle
 * exported it (memory.c). Every process maps the object MAP_SHARED, so
 * copies, memsets and kernels of each see the others' bytes.
 *
 * The machine-wide shm has an entry per such object (struct
 * sim_shm_share), found by the object's inode, that holds its bytes'
 * charge and a bit per process slot that holds it (a mapping, a handle).
 * The memory is given back when the last holder lets go: a process that
 * unmaps, releases or closes, or one that dies (sim_shm_reap clears a dead
 * slot's bits), as the driver keeps memory while any process maps it.
 * Within a process, references are counted here (local), so the bit is
 * set by the first and cleared by the last.
 *
 * An interprocess event (CU_EVENT_INTERPROCESS) has an entry too (struct
 * sim_shm_ipcev): a record takes a ticket when it is enqueued and sets
 * `done` to it when it completes, whichever process recorded it; a wait is
 * for `done` to reach the ticket of the last record seen when waiting began.
 */
#include "sim.h"

#include <errno.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uint64_t id;                 /* the entry's id when we took our first reference */
    int refs;
} local_share[SIM_MAX_SHARES], local_ev[SIM_MAX_IPC_EVENTS];

static int my_slot(void)
{
    return (int)(sim_self - sim_shm->procs);
}

int sim_device_ordinal_of_phys(int phys)
{
    for (int d = 0; d < sim_device_count(); d++)
        if (sim_device_phys(d) == phys)
            return d;
    return -1;
}

static void *share_map(int fd, uint64_t len, int flags)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | flags, fd, 0);

    if (p == MAP_FAILED)
        return NULL;
    if (len >= SIM_GRANULARITY && sim_device_wants_thp())
        madvise(p, len, MADV_HUGEPAGE);    /* as sim_backing_alloc; shmem may ignore it */
    return p;
}

void *sim_share_map(int fd, uint64_t len)
{
    return share_map(fd, len, 0);
}

/* Pages the file already has are mapped at once, 0.09 s/GiB here, rather
 * than by a fault each, 0.6-0.8 s/GiB (a kept allocation, keep.c). */
void *sim_share_map_warm(int fd, uint64_t len)
{
    return share_map(fd, len, MAP_POPULATE);
}

/* Our first reference to entry i (id) sets our bit (shm lock held). */
static void local_take(int i, uint64_t id)
{
    pthread_mutex_lock(&local_lock);
    if (local_share[i].id != id)
        local_share[i] = (typeof(local_share[i])){ id, 0 };
    local_share[i].refs++;
    pthread_mutex_unlock(&local_lock);
    sim_shm->shares[i].holders |= 1ull << my_slot();
}

CUresult sim_share_new(int fd, int dev, uint64_t size, bool legacy, const uint8_t *token,
                       bool charge, int *index)
{
    int phys = sim_device_phys(dev), at = -1;
    struct sim_shm_share *e;
    struct stat st;

    if (fstat(fd, &st) < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    sim_shm_lock(sim_shm);
    for (int i = 0; i < SIM_MAX_SHARES && at < 0; i++)
        if (!sim_shm->shares[i].id)
            at = i;
    if (charge && sim_shm->used[phys] + size > sim_shm->capacity[phys])
        sim_shm_reap(sim_shm);
    if (at < 0 || (charge && sim_shm->used[phys] + size > sim_shm->capacity[phys])) {
        sim_shm_unlock(sim_shm);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e = &sim_shm->shares[at];
    memset(e, 0, sizeof(*e));
    e->id = ++sim_shm->next_id;
    e->ino = st.st_ino;
    e->fsdev = st.st_dev;
    e->size = size;
    e->dev = phys;
    e->legacy = legacy;
    if (token)
        memcpy(e->token, token, sizeof(e->token));
    if (legacy)
        e->exporter = sim_self->id;
    if (charge) {
        sim_shm->used[phys] += size;
    } else {
        /* the bytes were this process's (an exported cuMemAlloc buffer): the
         * machine keeps them charged, now to the entry */
        sim_self->used[phys] -= size <= sim_self->used[phys] ? size : sim_self->used[phys];
    }
    local_take(at, e->id);
    sim_shm_unlock(sim_shm);
    *index = at;
    return CUDA_SUCCESS;
}

CUresult sim_share_find(int fd, int dev, uint64_t size, int *index)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_shm_lock(sim_shm);
    for (int i = 0; i < SIM_MAX_SHARES; i++) {
        struct sim_shm_share *e = &sim_shm->shares[i];

        if (e->id && e->ino == (uint64_t)st.st_ino && e->fsdev == (uint64_t)st.st_dev) {
            local_take(i, e->id);
            sim_shm_unlock(sim_shm);
            *index = i;
            return CUDA_SUCCESS;
        }
    }
    sim_shm_unlock(sim_shm);
    if (dev < 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Nobody held it while its descriptor travelled (the exporter released
     * everything before the importer imported): the memory still exists,
     * and it is charged again from now on. */
    return sim_share_new(fd, dev, size, false, NULL, true, index);
}

void sim_share_get(int i)
{
    pthread_mutex_lock(&local_lock);
    local_share[i].refs++;
    pthread_mutex_unlock(&local_lock);
}

void sim_share_put(int i)
{
    uint64_t id;
    int left;

    pthread_mutex_lock(&local_lock);
    left = --local_share[i].refs;
    id = local_share[i].id;
    pthread_mutex_unlock(&local_lock);
    if (left > 0)
        return;
    sim_shm_lock(sim_shm);
    if (sim_shm->shares[i].id == id)
        sim_shm_share_drop(sim_shm, &sim_shm->shares[i], my_slot());
    sim_shm_unlock(sim_shm);
}

/* ---- interprocess events ---------------------------------------------------- */

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static void ev_take(int i, uint64_t id)
{
    pthread_mutex_lock(&local_lock);
    if (local_ev[i].id != id)
        local_ev[i] = (typeof(local_ev[i])){ id, 0 };
    local_ev[i].refs++;
    pthread_mutex_unlock(&local_lock);
    sim_shm->ipcevs[i].holders |= 1ull << my_slot();
}

CUresult sim_ipcev_new(struct sim_shm_ipcev **out, uint64_t *id)
{
    struct sim_shm_ipcev *e = NULL;

    sim_shm_lock(sim_shm);
    for (int i = 0; i < SIM_MAX_IPC_EVENTS && !e; i++)
        if (!sim_shm->ipcevs[i].id)
            e = &sim_shm->ipcevs[i];
    if (e) {
        e->recorded = e->done = 0;
        if (getrandom(e->token, sizeof(e->token), 0) != (ssize_t)sizeof(e->token))
            memset(e->token, 0x5a, sizeof(e->token));
        __atomic_store_n(&e->id, ++sim_shm->next_id, __ATOMIC_RELEASE);
        ev_take((int)(e - sim_shm->ipcevs), e->id);
        *id = e->id;
    }
    sim_shm_unlock(sim_shm);
    *out = e;
    return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult sim_ipcev_open(uint32_t index, uint64_t id, const uint8_t token[16],
                        struct sim_shm_ipcev **out)
{
    struct sim_shm_ipcev *e;
    CUresult r = CUDA_ERROR_INVALID_VALUE;

    if (index >= SIM_MAX_IPC_EVENTS || !id)
        return r;
    e = &sim_shm->ipcevs[index];
    sim_shm_lock(sim_shm);
    if (e->id == id && !memcmp(e->token, token, sizeof(e->token))) {
        ev_take((int)index, id);
        *out = e;
        r = CUDA_SUCCESS;
    }
    sim_shm_unlock(sim_shm);
    return r;
}

void sim_ipcev_put(struct sim_shm_ipcev *e, uint64_t id)
{
    int i = (int)(e - sim_shm->ipcevs), left;

    pthread_mutex_lock(&local_lock);
    left = local_ev[i].id == id ? --local_ev[i].refs : 0;
    pthread_mutex_unlock(&local_lock);
    if (left > 0)
        return;
    sim_shm_lock(sim_shm);
    if (e->id == id)
        sim_shm_ipcev_drop(sim_shm, e, my_slot());
    sim_shm_unlock(sim_shm);
}

uint32_t sim_ipcev_record(struct sim_shm_ipcev *e)
{
    return __atomic_add_fetch(&e->recorded, 1, __ATOMIC_ACQ_REL);
}

void sim_ipcev_complete(struct sim_shm_ipcev *e, uint32_t ticket)
{
    uint32_t cur = __atomic_load_n(&e->done, __ATOMIC_ACQUIRE);

    /* the event is its last record: an older one completing later changes nothing */
    while ((int32_t)(ticket - cur) > 0 &&
           !__atomic_compare_exchange_n(&e->done, &cur, ticket, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
        ;
    futex(&e->done, FUTEX_WAKE, INT32_MAX, NULL);
}

bool sim_ipcev_reached(struct sim_shm_ipcev *e, uint32_t ticket)
{
    return (int32_t)(__atomic_load_n(&e->done, __ATOMIC_ACQUIRE) - ticket) >= 0;
}

uint32_t sim_ipcev_last(struct sim_shm_ipcev *e)
{
    return __atomic_load_n(&e->recorded, __ATOMIC_ACQUIRE);
}

void sim_ipcev_wait(struct sim_shm_ipcev *e, uint64_t id, uint32_t ticket)
{
    const struct timespec tick = { 0, 50 * 1000 * 1000 };

    /* Bounded sleeps: an entry freed meanwhile (every holder gone) ends the wait. */
    while (__atomic_load_n(&e->id, __ATOMIC_ACQUIRE) == id) {
        uint32_t cur = __atomic_load_n(&e->done, __ATOMIC_ACQUIRE);

        if ((int32_t)(cur - ticket) >= 0)
            return;
        futex(&e->done, FUTEX_WAIT, cur, &tick);
    }
}
