/*
 * shm.c - the machine-wide state of the simulated GPUs.
 *
 * One POSIX shm object (SIMCUDA_SHM, default "/simcuda") holds the devices'
 * capacity and usage and the table of attached processes, so that every
 * process on the machine sees the same device, as with a real GPU. A process
 * that dies without detaching keeps its slot until someone notices that the
 * pid is gone (sim_shm_reap), and its memory is then free again.
 */
#include "sim.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

/* A pid counts as alive unless it does not exist or is a zombie (a killed
 * child that its parent has not reaped yet no longer holds a GPU either). */
bool sim_pid_alive(pid_t pid)
{
    char path[64], buf[256];
    FILE *f;
    char *p;

    if (kill(pid, 0) < 0 && errno == ESRCH)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "re");
    if (!f)
        return errno != ENOENT;
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (p && (p = strrchr(buf, ')')) && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'))
        return false;
    return true;
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

int sim_shm_open_name(const char *name, struct sim_shm **out, const char **name_out)
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
    close(fd);
    if (rc && created)
        shm_unlink(name);
    if (!rc && name_out)
        *name_out = name;
    return rc;
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

static void slot_clear(struct sim_shm *s, struct sim_shm_proc *p)
{
    for (int d = 0; d < s->ndev; d++) {
        s->used[d] -= p->used[d] <= s->used[d] ? p->used[d] : s->used[d];
        p->used[d] = 0;
        p->parked[d] = 0;
    }
    p->state = CU_PROCESS_STATE_RUNNING;
    p->restore_tid = 0;
    p->comm[0] = 0;
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
}

/* Free slots of dead processes. A dead process whose GPU state is checkpointed
 * is kept: CRIU dumped it and may restore it with the same pid, and it holds
 * no device memory. Such slots are recycled only when the table is full. */
void sim_shm_reap(struct sim_shm *s)
{
    bool full = true;

    for (int i = 0; i < SIM_MAX_PROCS; i++) {
        struct sim_shm_proc *p = &s->procs[i];

        if (!p->pid)
            full = false;
        else if (p->state != CU_PROCESS_STATE_CHECKPOINTED && !sim_pid_alive(p->pid)) {
            slot_clear(s, p);
            full = false;
        }
    }
    if (!full)
        return;
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        if (!sim_pid_alive(s->procs[i].pid))
            slot_clear(s, &s->procs[i]);
}

struct sim_shm_proc *sim_shm_find(struct sim_shm *s, pid_t pid)
{
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        if (s->procs[i].pid == pid)
            return &s->procs[i];
    return NULL;
}

/* Claim a slot for pid (lock held). A stale slot with our pid belongs to a
 * process that is necessarily gone: reuse it. NULL if the table is full. */
struct sim_shm_proc *sim_shm_claim(struct sim_shm *s, pid_t pid, const char *comm)
{
    struct sim_shm_proc *p = sim_shm_find(s, pid);

    if (p)
        slot_clear(s, p);
    else
        p = sim_shm_find(s, 0);
    if (!p)
        return NULL;
    p->state = CU_PROCESS_STATE_RUNNING;
    snprintf(p->comm, sizeof(p->comm), "%s", comm);
    __atomic_store_n(&p->pid, pid, __ATOMIC_RELEASE);
    return p;
}

int sim_shm_of_pid(pid_t pid, char *name, size_t len)
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
            pread(fd, &magic, sizeof(magic), 0) == sizeof(magic) && magic == SIM_SHM_MAGIC)
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
