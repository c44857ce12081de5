/*
 * engine.c - the device's compute engine, shared by the processes' kernels
 * (sim.h, "the compute engine").
 *
 * State lives in the shm, under its lock. A kernel that cannot start waits
 * on the engine's futex word (process-shared) with a timeout, so that an
 * owner that died holding the engine is noticed and cleared. The last owner
 * stands back for a moment when others wait, so the engine really passes
 * round instead of going back to whoever releases and retakes it fastest.
 *
 * A process's claims (its turn, its waiting kernels) are in its slot, and a
 * killed process's slot stays until someone reaps it (shm.c): a dead owner
 * is cleared here at once, a dead waiter as soon as a turn offered to it
 * goes untaken, and a freed slot gives its claims back (shm.c, engine_forget).
 */
#include "sim.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HANDOFF_NS 20000000ull      /* the last owner lets a waiter go first this long */
#define WAIT_NS    10000000L        /* re-check for a dead owner this often */

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void futex_wait(uint32_t *word, uint32_t seen)
{
    struct timespec ts = { 0, WAIT_NS };

    syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void futex_wake(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A process is its slot's number + 1 here: pids differ between pid
 * namespaces, slots do not (pidns.c). 0: nobody. */
static int32_t slot_no(const struct sim_shm *s, const struct sim_shm_proc *p)
{
    return (int32_t)(p - s->procs) + 1;
}

/* Another process than ours has a kernel waiting on dev (lock held). */
static bool others_wait(const struct sim_shm *s, int dev, int32_t me)
{
    for (int i = 0; i < SIM_MAX_PROCS; i++)
        if (sim_slot_used(&s->procs[i]) && i + 1 != me && s->procs[i].engine_waiting[dev] > 0)
            return true;
    return false;
}

/*
 * Another process waits, and is alive (lock held). A killed process's
 * waiting kernels stay counted in its slot until the slot is reaped, which
 * only attaching or allocating processes do; a dead waiter would then make
 * every kernel of ours stand back for a handoff nobody takes. A turn that
 * was offered (the handoff passed) and not taken, the engine idle, is the
 * sign of one: reap the dead then, not on every kernel, as it reads /proc.
 */
static bool others_wait_alive(struct sim_shm *s, int dev, int32_t me, uint64_t now)
{
    const struct sim_engine *e = &s->engine[dev];

    if (e->waiters <= sim_self->engine_waiting[dev] || !others_wait(s, dev, me))
        return false;
    if (e->owner || now < e->handoff_until_ns)
        return true;
    sim_shm_reap(s);
    return others_wait(s, dev, me);
}

/* The owner died holding the engine, or its slot went (lock held). */
static bool owner_gone(struct sim_shm *s, int32_t owner)
{
    struct sim_shm_proc *p = &s->procs[owner - 1];

    return !sim_slot_used(p) || sim_ident_alive(&p->id) == 0;
}

/* May process me start a kernel on dev now? Takes the engine if so (lock held). */
static bool try_take(struct sim_shm *s, int dev, int32_t me, uint64_t now)
{
    struct sim_engine *e = &s->engine[dev];
    bool others = others_wait_alive(s, dev, me, now);

    if (e->owner == me)
        return others ? false : (e->running++, true);   /* let the owner drain first */
    if (e->owner && owner_gone(s, e->owner)) {
        e->owner = 0;                   /* died holding it: nothing of it runs any more */
        e->running = 0;
    }
    if (e->owner || (e->last == me && others && now < e->handoff_until_ns))
        return false;
    e->owner = me;
    e->running = 1;
    e->since_ns = now;
    return true;
}

/* A kernel has waited long for the engine: say who holds it and why it is
 * not taken (lock held), once per wait, so that a stuck turn can be told
 * from a slow one. */
#define WAIT_SAY_NS 10000000000ull

static void say_long_wait(const struct sim_shm *s, int dev, int32_t me)
{
    const struct sim_engine *e = &s->engine[dev];
    const struct sim_shm_proc *o = e->owner > 0 ? &s->procs[e->owner - 1] : NULL;

    sim_log("a kernel on device %d has waited 10 s for the compute engine: owner slot %d "
            "(pid %d, nspid %d, slot %s), running %d, last %d, waiters %d, this process slot %d "
            "waiting %d, others waiting %s",
            dev, (int)e->owner, o ? (int)o->id.hostpid : 0, o ? (int)o->id.nspid : 0,
            o ? (sim_slot_used(o) ? "used" : "free") : "-", (int)e->running, (int)e->last,
            (int)e->waiters, (int)me, (int)sim_self->engine_waiting[dev],
            others_wait(s, dev, me) ? "yes" : "no");
}

/* Our slot is still ours (lock held). A process that exits gives it back
 * from its destructor while its stream threads still run, and another
 * process may get it next: a kernel of ours then runs outside the turns and
 * touches none of the slot's claims (slot_clear dropped them, shm.c), or it
 * would hand the next process a turn or a waiting count it never had. */
static bool slot_ours(void)
{
    return sim_ckpt_owns(sim_self);
}

void sim_engine_acquire(int dev)
{
    bool waited = false, said = false;
    uint64_t t0 = mono_ns();
    int32_t me;

    if (!sim_shm || !sim_self || dev < 0 || dev >= sim_device_count())
        return;
    dev = sim_device_phys(dev);         /* the engine is the machine's GPU's, not the ordinal's */
    me = slot_no(sim_shm, sim_self);
    sim_shm_lock(sim_shm);
    while (slot_ours() && !try_take(sim_shm, dev, me, mono_ns())) {
        struct sim_engine *e = &sim_shm->engine[dev];
        uint32_t seen = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        if (!waited) {
            sim_self->engine_waiting[dev]++;
            e->waiters++;
            waited = true;
        }
        if (!said && mono_ns() - t0 > WAIT_SAY_NS) {
            say_long_wait(sim_shm, dev, me);
            said = true;
        }
        sim_shm_unlock(sim_shm);
        futex_wait(&e->seq, seen);
        sim_shm_lock(sim_shm);
    }
    if (waited && slot_ours()) {
        sim_self->engine_waiting[dev]--;
        sim_shm->engine[dev].waiters--;
    }
    sim_shm_unlock(sim_shm);
}

void sim_engine_release(int dev)
{
    struct sim_engine *e;
    bool wake = false;

    if (!sim_shm || !sim_self || dev < 0 || dev >= sim_device_count())
        return;
    dev = sim_device_phys(dev);         /* the engine is the machine's GPU's, not the ordinal's */
    e = &sim_shm->engine[dev];
    sim_shm_lock(sim_shm);
    if (slot_ours() && e->owner == slot_no(sim_shm, sim_self) && --e->running <= 0) {
        uint64_t now = mono_ns();
        sim_self->kernel_ns[dev] += now - e->since_ns;
        e->owner = 0;
        e->running = 0;
        e->last = slot_no(sim_shm, sim_self);
        e->handoff_until_ns = now + HANDOFF_NS;
        __atomic_add_fetch(&e->seq, 1, __ATOMIC_RELEASE);
        wake = e->waiters > 0;
    }
    sim_shm_unlock(sim_shm);
    if (wake)
        futex_wake(&e->seq);
}
