/*
 * checkpoint.c - the driver checkpoint API, callable from another process.
 *
 * Every attached process runs a service thread (its tid is the "restore
 * thread id") that waits on its slot of the shm table for commands. A caller
 * (another process, like cuda-checkpoint) takes the slot's command lock,
 * writes the command, bumps cmd_seq and wakes the futex; the service thread
 * executes it in the target process and answers through ack_seq. The futexes
 * are process-shared (no FUTEX_PRIVATE_FLAG): they live in the shm mapping.
 *
 * While attached, a process holds an io_uring instance with its rings
 * mapped: CRIU refuses to dump it, as it refuses /dev/nvidia* for a real
 * GPU process. Checkpoint closes it, stops the streams' workers (the GPU's
 * engines: a checkpointed process holds nothing on the device) and releases
 * the device capacity; Restore takes them back.
 *
 * The checkpointed state lives in the process's own memory, as with a real
 * driver: what CRIU dumps and restores (once, or twice from the same
 * images) carries it. A restored copy has a new start time, and in a new
 * container new pids: its service thread notices and registers the copy
 * under its new identity, still checkpointed, so that Restore finds it by
 * the pid its caller sees.
 */
#include "sim.h"

#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct io_uring ring;
static bool ring_open;

int sim_attach_resources(void)
{
    int rc;

    if (ring_open)
        return 0;
    rc = io_uring_queue_init(4, &ring, 0);
    if (rc)
        return rc;
    ring_open = true;
    return 0;
}

void sim_detach_resources(void)
{
    if (!ring_open)
        return;
    io_uring_queue_exit(&ring);
    ring_open = false;
}

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

/* ---- what the process itself keeps ----------------------------------------- */

static struct {
    struct sim_ident id;        /* who we are (registered under) */
    char comm[64];
    int state;                  /* CUprocessState: ours, whatever the table says */
    uint64_t parked[SIM_MAX_DEVICES];   /* device bytes held in host memory */
} self;

struct sim_shm_proc *sim_ckpt_claim(const char *comm)
{
    struct sim_shm_proc *p;

    sim_ident_self(&self.id);
    if (comm != self.comm)
        snprintf(self.comm, sizeof(self.comm), "%s", comm);
    p = sim_shm_claim(sim_shm, &self.id, self.comm);
    if (p) {
        p->state = self.state;
        for (int d = 0; d < sim_shm->ndev; d++)
            p->parked[d] = self.parked[d];
    }
    return p;
}

bool sim_ckpt_owns(const struct sim_shm_proc *p)
{
    return sim_slot_used(p) && sim_ident_same(&p->id, &self.id) && p->id.ns == self.id.ns;
}

/* ---- capacity while checkpointed ------------------------------------------- */

/* Device memory moves to host memory: our backing store already is host
 * memory, so what changes is the machine-wide accounting. */
void sim_ckpt_park_all(void)
{
    sim_shm_lock(sim_shm);
    for (int d = 0; d < sim_shm->ndev; d++) {
        uint64_t u = sim_self->used[d];

        sim_self->parked[d] = self.parked[d] = u;
        sim_shm->used[d] -= u <= sim_shm->used[d] ? u : sim_shm->used[d];
        sim_self->used[d] = 0;
    }
    sim_shm_unlock(sim_shm);
}

/* All or nothing: OUT_OF_MEMORY if any device lacks room now. */
CUresult sim_ckpt_unpark_all(void)
{
    CUresult r = CUDA_SUCCESS;

    sim_shm_lock(sim_shm);
    sim_shm_reap(sim_shm);
    for (int d = 0; d < sim_shm->ndev; d++)
        if (sim_shm->used[d] + self.parked[d] > sim_shm->capacity[d])
            r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!r)
        for (int d = 0; d < sim_shm->ndev; d++) {
            sim_shm->used[d] += self.parked[d];
            sim_self->used[d] = self.parked[d];
            sim_self->parked[d] = self.parked[d] = 0;
        }
    sim_shm_unlock(sim_shm);
    return r;
}

/* ---- moving to another simulated machine ----------------------------------- */

/* The physical device of machine `name` whose UUID is u, or -1. */
static int phys_by_uuid(const char *name, int ndev, const uint8_t u[16])
{
    for (int d = 0; d < ndev; d++) {
        CUuuid x;
        sim_device_uuid_phys_of(name, d, &x);
        if (!memcmp(x.bytes, u, 16))
            return d;
    }
    return -1;
}

/*
 * Restore on another node: the process, checkpointed (it holds nothing on
 * any device), leaves its machine for the restorer's, p->move_to. Each of
 * its devices goes to the one the restorer's GPU pairs name (old UUID ->
 * new UUID), else to the device of the same index. Its parked bytes go
 * with it; the caller then unparks them there. 0 or a CUresult; on failure
 * it stays where it was.
 */
static struct sim_shm *left_behind;     /* the machine a migration left */
static uint32_t moved_seen;             /* the new slot's cmd_seq when we took it */

static CUresult migrate(struct sim_shm_proc *p)
{
    struct sim_shm *to;
    struct sim_shm_proc *slot;
    const char *name;
    int phys[SIM_MAX_DEVICES];
    uint64_t parked[SIM_MAX_DEVICES] = { 0 };
    char moving_to[NAME_MAX + 1];

    snprintf(moving_to, sizeof(moving_to), "%s", p->move_to);
    if (sim_shm_open_name(moving_to, &to, &name))
        return CUDA_ERROR_INVALID_VALUE;
    for (int v = 0; v < sim_device_count(); v++) {
        int old = sim_device_phys(v), now = -1;
        CUuuid u;
        sim_device_uuid_phys(old, &u);
        for (int i = 0; i < p->npairs && i < SIM_MAX_DEVICES && now < 0; i++)
            if (!memcmp(p->pairs[i][0], u.bytes, 16))
                now = phys_by_uuid(moving_to, to->ndev, p->pairs[i][1]);
        if (now < 0)
            now = old < to->ndev ? old : -1;
        if (now < 0)
            return CUDA_ERROR_INVALID_DEVICE;   /* the new machine has fewer GPUs */
        phys[v] = now;
        parked[now] += self.parked[old];
    }
    sim_shm_lock(to);
    sim_shm_reap(to);
    slot = sim_shm_claim(to, &self.id, self.comm);
    if (slot) {
        slot->state = CU_PROCESS_STATE_CHECKPOINTED;
        memcpy(slot->parked, parked, sizeof(parked));
        /* Serve the new slot from now on, before the Restore's answer: the
         * restorer's next command (Unlock) may come at once, and one posted
         * before the service thread looked would be acknowledged unrun. */
        moved_seen = __atomic_load_n(&slot->cmd_seq, __ATOMIC_ACQUIRE);
        __atomic_store_n(&slot->ack_seq, moved_seen, __ATOMIC_RELEASE);
        __atomic_store_n(&slot->restore_tid, (int32_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    }
    sim_shm_unlock(to);
    if (!slot)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(self.parked, parked, sizeof(parked));     /* by the new machine's indexes */
    sim_visible_remap(phys);
    left_behind = sim_shm;
    sim_set_machine(to, moving_to);
    sim_self = slot;
    return CUDA_SUCCESS;
}

/* ---- the service thread (in the target process) ---------------------------- */

static void set_state(int state)
{
    self.state = state;
    __atomic_store_n(&sim_self->state, state, __ATOMIC_RELEASE);
}

static CUresult do_command(uint32_t cmd, uint32_t arg)
{
    CUresult r;

    switch (cmd) {
    case SIM_CMD_LOCK:
        if (self.state != CU_PROCESS_STATE_RUNNING)
            return CUDA_ERROR_ILLEGAL_STATE;
        if ((r = sim_gate_close(arg)))
            return r;                       /* timed out: still RUNNING */
        set_state(CU_PROCESS_STATE_LOCKED);
        return CUDA_SUCCESS;
    case SIM_CMD_CHECKPOINT:
        if (self.state != CU_PROCESS_STATE_LOCKED)
            return CUDA_ERROR_ILLEGAL_STATE;
        sim_streams_park();
        sim_ckpt_park_all();
        sim_detach_resources();
        set_state(CU_PROCESS_STATE_CHECKPOINTED);
        return CUDA_SUCCESS;
    case SIM_CMD_RESTORE:
        if (self.state != CU_PROCESS_STATE_CHECKPOINTED)
            return CUDA_ERROR_ILLEGAL_STATE;
        if (sim_self->move_to[0] && strcmp(sim_self->move_to, sim_shm_name()) &&
            (r = migrate(sim_self)))
            return r;                       /* still CHECKPOINTED, where it was */
        if ((r = sim_ckpt_unpark_all()))
            return r;                       /* still CHECKPOINTED */
        if (sim_attach_resources() || sim_streams_unpark()) {
            sim_detach_resources();
            sim_ckpt_park_all();
            return CUDA_ERROR_OPERATING_SYSTEM;
        }
        set_state(CU_PROCESS_STATE_LOCKED);
        return CUDA_SUCCESS;
    case SIM_CMD_UNLOCK:
        if (self.state != CU_PROCESS_STATE_LOCKED)
            return CUDA_ERROR_ILLEGAL_STATE;
        set_state(CU_PROCESS_STATE_RUNNING);
        sim_gate_open();
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* A checkpointed process may since have been dumped and restored (perhaps
 * twice, perhaps in a new container): then its start time is new. */
static bool restored_since_claim(void)
{
    struct sim_ident now;

    return sim_ident_self(&now) == 0 && (!sim_ident_same(&now, &self.id) || now.ns != self.id.ns);
}

/* Register this restored copy under its identity, checkpointed. The slot it
 * had belongs to the dumped original (gone) or by now to someone else. */
static void register_again(void)
{
    struct sim_shm_proc *p;

    sim_shm_lock(sim_shm);
    sim_shm_reap(sim_shm);
    p = sim_ckpt_claim(self.comm);
    if (p) {
        p->restore_tid = (int32_t)syscall(SYS_gettid);
        p->ack_seq = __atomic_load_n(&p->cmd_seq, __ATOMIC_ACQUIRE);
        sim_self = p;
    }
    sim_shm_unlock(sim_shm);
    if (!p)
        sim_log("restored, but the process table of %s is full: not registered", sim_shm_name());
}

static void *service(void *unused)
{
    struct sim_shm_proc *p = sim_self;
    uint32_t seen = __atomic_load_n(&p->cmd_seq, __ATOMIC_ACQUIRE);
    /* while checkpointed, look now and then whether we were restored */
    const struct timespec poll = { 0, 5000000 };

    (void)unused;
    __atomic_store_n(&p->ack_seq, seen, __ATOMIC_RELEASE);
    __atomic_store_n(&p->restore_tid, (int32_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    for (;;) {
        uint32_t cur;

        if (self.state == CU_PROCESS_STATE_CHECKPOINTED && restored_since_claim()) {
            register_again();
            p = sim_self;
            seen = __atomic_load_n(&p->cmd_seq, __ATOMIC_ACQUIRE);
        }
        cur = __atomic_load_n(&p->cmd_seq, __ATOMIC_ACQUIRE);
        if (cur == seen) {
            futex(&p->cmd_seq, FUTEX_WAIT, seen,
                  self.state == CU_PROCESS_STATE_CHECKPOINTED ? &poll : NULL);
            continue;
        }
        seen = cur;
        if (!sim_ckpt_owns(p))
            continue;           /* a slot we no longer hold: its commands are not ours */
        p->result = (int32_t)do_command(p->cmd, p->arg);
        __atomic_store_n(&p->ack_seq, cur, __ATOMIC_RELEASE);
        futex(&p->ack_seq, FUTEX_WAKE, INT_MAX, NULL);
        if (p != sim_self) {
            /* moved to another machine: leave the old slot, serve the new one */
            struct sim_shm *old = left_behind;
            if (old) {
                sim_shm_lock(old);
                sim_shm_release(old, p);
                sim_shm_unlock(old);
            }
            p = sim_self;
            seen = moved_seen;          /* commands after it are new (migrate()) */
        }
    }
    return NULL;
}

int sim_service_start(void)
{
    pthread_attr_t attr;
    pthread_t t;
    int rc;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &attr, service, NULL);
    pthread_attr_destroy(&attr);
    if (rc)
        return -rc;
    /* GetRestoreThreadId must answer as soon as cuInit has returned. */
    while (!__atomic_load_n(&sim_self->restore_tid, __ATOMIC_ACQUIRE)) {
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* ---- the caller's side ---------------------------------------------------------- */

/* How long a caller waits for a restored process to register again. */
#define REGISTER_WAIT_MS 3000

static struct sim_shm_proc *lookup(struct sim_shm *s, int pid)
{
    struct sim_shm_proc *p;

    sim_shm_lock(s);
    sim_shm_reap(s);
    p = sim_shm_find(s, pid);
    sim_shm_unlock(s);
    return p;
}

/* Machine `name`, mapped once for the life of the process. */
static struct sim_shm *machine_named(const char *name)
{
    static struct {
        char name[64];
        struct sim_shm *shm;
    } opened[8];
    static unsigned next;
    struct sim_shm *s;

    for (unsigned i = 0; i < 8; i++)
        if (opened[i].shm && !strcmp(opened[i].name, name))
            return opened[i].shm;
    if (sim_shm_open_name(name, &s, NULL))
        return NULL;
    /* a ninth machine replaces the oldest entry (its mapping stays) */
    snprintf(opened[next].name, sizeof(opened[next].name), "%s", name);
    opened[next].shm = s;
    next = (next + 1) % 8;
    return s;
}

/* pid's slot on another machine it is attached to (*mapped: it maps one): a
 * process restored here from another node's save still maps the machines
 * it was on, and has its slot on the last of them, which may come anywhere
 * in its address space; a real driver finds it on any GPU. */
static struct sim_shm_proc *lookup_elsewhere(int pid, bool *mapped)
{
    char name[64];
    struct sim_shm *s;
    struct sim_shm_proc *p;

    for (unsigned nth = 0; sim_shm_of_pid(pid, nth, name, sizeof(name)) == 0; nth++) {
        if (!strcmp(name, sim_shm_name()))
            continue;
        *mapped = true;
        if ((s = machine_named(name)) && (p = lookup(s, pid)))
            return p;
    }
    return NULL;
}

/*
 * The slot of process pid: on our machine, or on another it is attached to
 * (*foreign: 1). A process that has a device mapped but no slot may be a
 * copy CRIU just restored, whose service thread is about to register it
 * (checkpoint.c's header): wait for that, bounded.
 */
static CUresult find_proc_any(int pid, struct sim_shm_proc **out, int *foreign)
{
    struct timespec ts = { 0, 2000000 };

    if (!sim_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    *foreign = 0;
    for (int waited = 0;; waited += 2) {
        bool elsewhere = false;
        if ((*out = lookup(sim_shm, pid)))
            return CUDA_SUCCESS;
        if ((*out = lookup_elsewhere(pid, &elsewhere))) {
            *foreign = 1;
            return CUDA_SUCCESS;
        }
        if (waited >= REGISTER_WAIT_MS || !(elsewhere || sim_pid_maps_device(pid, sim_shm_name())))
            return CUDA_ERROR_INVALID_VALUE;
        nanosleep(&ts, NULL);
    }
}

static CUresult find_proc(int pid, struct sim_shm_proc **out)
{
    int foreign;

    return find_proc_any(pid, out, &foreign);
}

static void cmd_lock(struct sim_shm_proc *p)
{
    if (pthread_mutex_lock(&p->cmd_lock) == EOWNERDEAD)
        pthread_mutex_consistent(&p->cmd_lock);   /* a previous caller died mid-command */
}

/* Send cmd to pid's service thread and wait for its answer. A Restore
 * carries the GPU pairs, and our machine when the process is on another. */
static CUresult send_command(int pid, uint32_t cmd, uint32_t arg, const CUcheckpointRestoreArgs *ra)
{
    struct sim_shm_proc *p;
    struct sim_ident id;
    uint32_t seq;
    int foreign;
    CUresult r;

    if ((r = find_proc_any(pid, &p, &foreign)))
        return r;
    cmd_lock(p);
    if (!sim_slot_used(p) || sim_ident_of(pid, &id) < 0 || !sim_ident_same(&p->id, &id)) {
        pthread_mutex_unlock(&p->cmd_lock);     /* it went while we took the lock */
        return CUDA_ERROR_INVALID_VALUE;
    }
    p->move_to[0] = '\0';
    p->npairs = 0;
    if (cmd == SIM_CMD_RESTORE) {
        if (foreign)
            snprintf(p->move_to, sizeof(p->move_to), "%s", sim_shm_name());
        for (unsigned i = 0; ra && i < ra->gpuPairsCount; i++) {
            memcpy(p->pairs[i][0], ra->gpuPairs[i].oldUuid.bytes, 16);
            memcpy(p->pairs[i][1], ra->gpuPairs[i].newUuid.bytes, 16);
            p->npairs++;
        }
    } else if (foreign) {
        pthread_mutex_unlock(&p->cmd_lock);
        return CUDA_ERROR_INVALID_VALUE;    /* only a Restore brings it here */
    }
    p->cmd = cmd;
    p->arg = arg;
    seq = __atomic_add_fetch(&p->cmd_seq, 1, __ATOMIC_ACQ_REL);
    futex(&p->cmd_seq, FUTEX_WAKE, INT_MAX, NULL);
    for (;;) {
        uint32_t ack = __atomic_load_n(&p->ack_seq, __ATOMIC_ACQUIRE);
        struct timespec ts = { 0, 100000000 };

        if (ack == seq) {
            r = (CUresult)p->result;
            break;
        }
        if (sim_ident_alive(&id) == 0) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        futex(&p->ack_seq, FUTEX_WAIT, ack, &ts);
    }
    pthread_mutex_unlock(&p->cmd_lock);
    return r;
}

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
    struct sim_shm_proc *p;
    CUresult r;

    if (!tid)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = find_proc(pid, &p)))
        return r;
    /* the service thread's tid in the caller's view (a host tid from the host) */
    *tid = sim_ident_visible_tid(pid, __atomic_load_n(&p->restore_tid, __ATOMIC_ACQUIRE));
    return *tid ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SIM_EXPORT(cuCheckpointProcessGetRestoreThreadId);

CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    struct sim_shm_proc *p;
    CUresult r;

    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    if ((r = find_proc(pid, &p)))
        return r;
    *state = (CUprocessState)__atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
    return CUDA_SUCCESS;
}
SIM_EXPORT(cuCheckpointProcessGetState);

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    if (args && (args->reserved0 || !sim_zeroed(args->reserved1, sizeof(args->reserved1))))
        return CUDA_ERROR_INVALID_VALUE;
    return send_command(pid, SIM_CMD_LOCK, args ? args->timeoutMs : 0, NULL);
}
SIM_EXPORT(cuCheckpointProcessLock);

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    if (args && !sim_zeroed(args->reserved, sizeof(args->reserved)))
        return CUDA_ERROR_INVALID_VALUE;
    return send_command(pid, SIM_CMD_CHECKPOINT, 0, NULL);
}
SIM_EXPORT(cuCheckpointProcessCheckpoint);

CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    if (args && ((args->gpuPairsCount && !args->gpuPairs) || args->gpuPairsCount > SIM_MAX_DEVICES))
        return CUDA_ERROR_INVALID_VALUE;
    if (args && (!sim_zeroed(args->reserved, sizeof(args->reserved)) || args->reserved1))
        return CUDA_ERROR_INVALID_VALUE;
    return send_command(pid, SIM_CMD_RESTORE, 0, args);
}
SIM_EXPORT(cuCheckpointProcessRestore);

CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    if (args && !sim_zeroed(args->reserved, sizeof(args->reserved)))
        return CUDA_ERROR_INVALID_VALUE;
    return send_command(pid, SIM_CMD_UNLOCK, 0, NULL);
}
SIM_EXPORT(cuCheckpointProcessUnlock);
