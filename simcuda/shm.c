/*
 * shm.c - the machine-wide state of the simulated GPUs.
 *
 * One POSIX shm object (SIMCUDA_SHM, default "/simcuda") holds the devices'
 * capacity and usage and the table of attached processes, so that every
 * process on the machine sees the same device, as with a real GPU. A process
 * that dies without detaching keeps its slot until someone notices that the
 * pid is gone (sim_shm_reap), and its memory is then free again. Memory and
 * events several processes share have entries of their own (share.c), held
 * by a bit per process slot: clearing a slot lets go of them too.
 */
#include "sim.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <linux/futex.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SIM_SHM_MAGIC 0x53494d43u   /* "SIMC" */
#define SIM_DEFAULT_MEM (2ull << 30)

void sim_log(const char *fmt, ...)
{
    va_list ap;
    char buf[512];

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "simcuda[%d]: %s\n", (int)getpid(), buf);
}

/* "2G", "512M", "64K", "1048576" -> bytes; dflt if empty or malformed. */
uint64_t sim_parse_size(const char *s, uint64_t dflt)
{
    char *end;
    unsigned long long v;

    if (!s || !*s)
        return dflt;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s)
        return dflt;
    switch (toupper((unsigned char)*end)) {
    case 'T': v <<= 40; end++; break;
    case 'G': v <<= 30; end++; break;
    case 'M': v <<= 20; end++; break;
    case 'K': v <<= 10; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B' || *end == 'b')
        end++;
    if (*end == 'B')
        end++;
    return *end ? dflt : v;
}

void sim_device_uuid(const char *shm_name, int dev, unsigned char out[16])
{
    uint64_t h = 1469598103934665603ull;

    for (const char *p = shm_name; p && *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= (uint64_t)dev * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 16; i++) {
        h = h * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = (unsigned char)(h >> 56);
    }
}

const char *sim_state_name(int state)
{
    switch (state) {
    case CU_PROCESS_STATE_RUNNING: return "running";
    case CU_PROCESS_STATE_LOCKED: return "locked";
    case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
    case CU_PROCESS_STATE_FAILED: return "failed";
    default: return "?";
    }
}

static int init_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int rc;

    if ((rc = pthread_mutexattr_init(&a)))
        return -rc;
    rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!rc)
        rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!rc)
        rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -rc;
}

static int shm_init(struct sim_shm *s)
{
    long ndev = 1;
    const char *e = getenv("SIMCUDA_DEVICES");
    uint64_t cap = sim_parse_size(getenv("SIMCUDA_DEVICE_MEM"), SIM_DEFAULT_MEM);
    int rc;

    if (e && *e) {
        ndev = strtol(e, NULL, 10);
        if (ndev < 1 || ndev > SIM_MAX_DEVICES) {
            sim_log("SIMCUDA_DEVICES=%s out of range 1..%d, using 1", e, SIM_MAX_DEVICES);
            ndev = 1;
        }
    }
    if ((rc = init_mutex(&s->lock)))
        return rc;
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        if ((rc = init_mutex(&s->procs[i].cmd_lock)))
            return rc;
    s->ndev = (int32_t)ndev;
    for (int i = 0; i < ndev; i++)
        s->capacity[i] = cap;
    s->layout = sizeof(*s);
    __atomic_store_n(&s->magic, SIM_SHM_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

/* Wait (bounded) for the creator to finish initialising a fresh object. */
static int shm_wait_ready(struct sim_shm *s)
{
    for (int i = 0; i < 2000; i++) {
        if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == SIM_SHM_MAGIC)
            return s->layout == sizeof(*s) ? 0 : -EPROTO;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return -ETIMEDOUT;
}

static int shm_map(int fd, bool created, struct sim_shm **out)
{
    struct stat st;
    struct sim_shm *s;
    int rc;

    if (created && ftruncate(fd, sizeof(struct sim_shm)) < 0)
        return -errno;
    /* An opener may race the creator's ftruncate: wait for the size too. */
    for (int i = 0; i < 2000; i++) {
        if (fstat(fd, &st) < 0)
            return -errno;
        if ((size_t)st.st_size >= sizeof(struct sim_shm))
            break;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    if ((size_t)st.st_size < sizeof(struct sim_shm))
        return -EPROTO;
    s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED)
        return -errno;
    rc = created ? shm_init(s) : shm_wait_ready(s);
    if (rc) {
        munmap(s, sizeof(*s));
        return rc;
    }
    *out = s;
    return 0;
}

/* Returns 0 or -errno; *out stays mapped for the life of the process. */
int sim_shm_open(struct sim_shm **out, const char **name_out)
{
    const char *name = getenv("SIMCUDA_SHM");

    if (!name || !*name)
        name = "/simcuda";
    return sim_shm_open_name(name, out, name_out);
}

/* Whether any process we can see maps the shm object `name` ("/x"). */
static bool shm_mapped_by_anyone(const char *name)
{
    bool found = false;
    struct dirent *d;
    DIR *proc = opendir("/proc");

    if (!proc)
        return true;                        /* cannot tell: keep it */
    while (!found && (d = readdir(proc)))
        found = isdigit((unsigned char)d->d_name[0]) &&
                sim_pid_maps_device((pid_t)atoi(d->d_name), name);
    closedir(proc);
    return found;
}

/*
 * The object `fd` (open as `name`) is of another simcuda build's layout.
 * When no process maps it, it is a leftover (a build directory reused
 * after simcuda changed): it is removed so that a fresh machine can be
 * made in its place. One that is in use stays, and the open fails (two
 * machines under one name would split the processes that share it). The
 * flock makes one of several openers do it; the inode check, that nobody
 * has made the new one already. 0 when removed, -EPROTO when not.
 */
static int replace_stale(int fd, const char *name)
{
    char path[300];
    struct stat a, b;
    int rc = -EPROTO;

    snprintf(path, sizeof(path), "/dev/shm%s", name);
    if (flock(fd, LOCK_EX) != 0)
        return -EPROTO;
    if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_ino == b.st_ino &&
        !shm_mapped_by_anyone(name) && shm_unlink(name) == 0) {
        sim_log("removed %s: a machine of another simcuda build that no process uses", path);
        rc = 0;
    }
    flock(fd, LOCK_UN);
    return rc;
}

/* One try: -EAGAIN when a stale object was removed (try again). */
static int shm_open_once(const char *name, struct sim_shm **out, const char **name_out,
                         bool may_replace)
{
    bool created = false;
    int fd, rc;

    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
        created = true;
        fchmod(fd, 0666);   /* other users' programs share the device too */
    } else if (errno == EEXIST) {
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    }
    if (fd < 0)
        return -errno;
    rc = shm_map(fd, created, out);
    if (rc == -EPROTO && !created && may_replace && replace_stale(fd, name) == 0)
        rc = -EAGAIN;
    close(fd);
    if (rc && created)
        shm_unlink(name);
    if (!rc && name_out)
        *name_out = name;
    return rc;
}

int sim_shm_open_name(const char *name, struct sim_shm **out, const char **name_out)
{
    int rc = shm_open_once(name, out, name_out, true);

    /* a leftover of another build was removed: make the machine anew */
    return rc == -EAGAIN ? shm_open_once(name, out, name_out, false) : rc;
}

void sim_shm_lock(struct sim_shm *s)
{
    int rc = pthread_mutex_lock(&s->lock);

    if (rc == EOWNERDEAD) {
        /* The owner died inside a critical section; every update under this
         * lock is a few stores that leave the table usable, so carry on. */
        pthread_mutex_consistent(&s->lock);
    } else if (rc) {
        sim_log("shm lock: %s", strerror(rc));
        abort();
    }
}

void sim_shm_unlock(struct sim_shm *s)
{
    pthread_mutex_unlock(&s->lock);
}

void sim_share_name(const uint8_t token[16], char *name, size_t len)
{
    char hex[33];

    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", token[i]);
    snprintf(name, len, "/simcuda-ipc-%s", hex);
}

void sim_shm_share_drop(struct sim_shm *s, struct sim_shm_share *e, int slot)
{
    char name[64];

    e->holders &= ~(1ull << slot);
    if (!e->id || e->holders)
        return;
    if (e->dev >= 0 && e->dev < SIM_MAX_DEVICES)
        s->used[e->dev] -= e->size <= s->used[e->dev] ? e->size : s->used[e->dev];
    if (e->legacy) {
        /* Nobody can open it any more; a process that still has the name
         * open keeps its bytes (they are no longer charged: it mapped
         * nothing, or it would hold the entry). */
        sim_share_name(e->token, name, sizeof(name));
        shm_unlink(name);
    }
    memset(e, 0, sizeof(*e));
}

void sim_shm_ipcev_drop(struct sim_shm *s, struct sim_shm_ipcev *e, int slot)
{
    (void)s;
    e->holders &= ~(1ull << slot);
    if (!e->id || e->holders)
        return;
    __atomic_store_n(&e->id, 0, __ATOMIC_RELEASE);
    /* waiters in other processes see the id change */
    syscall(SYS_futex, &e->done, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    memset(e->token, 0, sizeof(e->token));
    e->recorded = e->done = 0;
}

/* The slot's claims on the compute engines (engine.c) end with it: its
 * kernels wait no more, and a turn it held ends, so that the process that
 * gets the slot next does not find itself the owner with kernels it never
 * ran counted as running. */
static void engine_forget(struct sim_shm *s, int slot)
{
    struct sim_shm_proc *p = &s->procs[slot];

    for (int d = 0; d < s->ndev; d++) {
        struct sim_engine *e = &s->engine[d];

        e->waiters -= p->engine_waiting[d];
        p->engine_waiting[d] = 0;
        if (e->owner != slot + 1)
            continue;
        e->owner = 0;
        e->running = 0;
        __atomic_add_fetch(&e->seq, 1, __ATOMIC_RELEASE);
        if (e->waiters > 0)
            syscall(SYS_futex, &e->seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    }
}

static void slot_clear(struct sim_shm *s, struct sim_shm_proc *p)
{
    int slot = (int)(p - s->procs);

    /* What it shared goes first: its bytes are not in p->used. */
    for (int i = 0; i < SIM_MAX_SHARES; i++)
        if (s->shares[i].holders & (1ull << slot))
            sim_shm_share_drop(s, &s->shares[i], slot);
    for (int i = 0; i < SIM_MAX_IPC_EVENTS; i++)
        if (s->ipcevs[i].holders & (1ull << slot))
            sim_shm_ipcev_drop(s, &s->ipcevs[i], slot);
    for (int d = 0; d < s->ndev; d++) {
        s->used[d] -= p->used[d] <= s->used[d] ? p->used[d] : s->used[d];
        p->used[d] = 0;
        p->parked[d] = 0;
        p->kernel_ns[d] = 0;
        p->device_cpu_ns[d] = 0;
    }
    engine_forget(s, slot);
    p->state = CU_PROCESS_STATE_RUNNING;
    p->restore_tid = 0;
    p->comm[0] = 0;
    p->id.hostpid = 0;
    p->id.ns = 0;
    p->id.start = 0;
    __atomic_store_n(&p->id.nspid, 0, __ATOMIC_RELEASE);
}

/*
 * Free the slots of dead processes, whatever their state: a checkpointed
 * process keeps its driver state in its own memory (as with a real driver),
 * and a copy CRIU restores registers again (checkpoint.c). A process in a
 * pid namespace this caller cannot see is left for one that can.
 */
void sim_shm_reap(struct sim_shm *s)
{
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_shm_proc *p = &s->procs[i];

        if (sim_slot_used(p) && sim_ident_alive(&p->id) == 0)
            slot_clear(s, p);
    }
}

struct sim_shm_proc *sim_shm_find(struct sim_shm *s, pid_t pid)
{
    struct sim_ident want;

    if (sim_ident_of(pid, &want) < 0)
        return NULL;
    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_shm_proc *p = &s->procs[i];

        if (sim_slot_used(p) && sim_ident_same(&p->id, &want)) {
            if (!p->id.hostpid)
                p->id.hostpid = want.hostpid;   /* learnt from the host's view */
            return p;
        }
    }
    return NULL;
}

/* Claim a slot (lock held). A slot with the same identity belongs to an
 * earlier life of this process that cannot be running: reuse it. NULL if
 * the table is full. */
struct sim_shm_proc *sim_shm_claim(struct sim_shm *s, const struct sim_ident *id, const char *comm)
{
    struct sim_shm_proc *p = NULL;

    for (int i = 0; i < SIM_MAX_PROCS && !p; i++)
        if (sim_slot_used(&s->procs[i]) && sim_ident_same(&s->procs[i].id, id))
            p = &s->procs[i];
    if (p)
        slot_clear(s, p);
    for (int i = 0; i < SIM_MAX_PROCS && !p; i++)
        if (!sim_slot_used(&s->procs[i]))
            p = &s->procs[i];
    if (!p)
        return NULL;
    p->state = CU_PROCESS_STATE_RUNNING;
    snprintf(p->comm, sizeof(p->comm), "%s", comm);
    p->id.hostpid = id->hostpid;
    p->id.ns = id->ns;
    p->id.start = id->start;
    __atomic_store_n(&p->id.nspid, id->nspid, __ATOMIC_RELEASE);
    return p;
}

int sim_shm_of_pid(pid_t pid, unsigned nth, char *name, size_t len)
{
    char path[64], line[1024];
    FILE *f;
    int found = -ENOENT;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    if (!(f = fopen(path, "re")))
        return -errno;
    while (found && fgets(line, sizeof(line), f)) {
        char *dev = strstr(line, " /dev/shm/");
        size_t n;
        if (!dev)
            continue;
        dev += 9;                           /* "/name" */
        n = strcspn(dev, " \n");
        if (n + 1 > len || strstr(dev, "(deleted)"))
            continue;
        memcpy(name, dev, n);
        name[n] = '\0';
        int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
        struct stat st;
        uint32_t magic = 0;
        if (fd < 0)
            continue;
        /* the machine is the one object of the right size and magic */
        if (fstat(fd, &st) == 0 && (size_t)st.st_size == sizeof(struct sim_shm) &&
            pread(fd, &magic, sizeof(magic), 0) == sizeof(magic) && magic == SIM_SHM_MAGIC &&
            nth-- == 0)
            found = 0;
        close(fd);
    }
    fclose(f);
    return found;
}

/* Release our slot (lock held): used at exit. */
void sim_shm_release(struct sim_shm *s, struct sim_shm_proc *p)
{
    slot_clear(s, p);
}
