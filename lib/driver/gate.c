/* The API gate: per-thread records, close/open, parking. Contract in gate.h. */
#include "common/clock.h"
#include "gate.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Atomic unsigned tcgpu_gate_word;
__thread struct tcgpu_gate_thread *tcgpu_gate_self __attribute__((tls_model("initial-exec")));

static _Atomic(struct tcgpu_gate_thread *) all_threads;   /* push-only list */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_key_t exit_key;
static _Atomic(struct tcgpu_gate_thread *) closer;         /* record of the closing thread */
static _Atomic unsigned parked;
static _Atomic bool use_membarrier;
static _Atomic bool membarrier_allowed = true;   /* tcgpu_gate_set_membarrier */

/* The full fence of the fallback (no membarrier) mode. Under TSan every gate
 * access is seq_cst already (gate.h), which orders them without it. */
static inline void full_fence(void)
{
#ifndef TCGPU_GATE_TSAN
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

static long sys_membarrier(int cmd)
{
    return syscall(SYS_membarrier, cmd, 0, 0);
}

static long futex(_Atomic unsigned *addr, int op, unsigned val, const struct timespec *timeout)
{
    return syscall(SYS_futex, (unsigned *)addr, op, val, timeout, NULL, 0);
}

/*
 * Sleeps while the gate word is still w; a wake or a signal ends it early
 * (the caller loads the word again).
 *
 * Under ThreadSanitizer a signal's handler runs only at the edge of a call
 * TSan intercepts, and a raw futex wait is none. A thread parked here is
 * often the only one a process-directed signal can reach while the gate is
 * closed (tcgpu's own threads block them all), so the trigger signal that
 * toggles a suspend (signal_trigger.c) would wait for the gate it is meant
 * to open. There the thread sleeps in slices and passes through poll(),
 * which TSan intercepts, after each.
 */
static void park(unsigned w)
{
#ifdef TCGPU_GATE_TSAN
    const struct timespec slice = { 0, 20 * 1000 * 1000 };

    futex(&tcgpu_gate_word, FUTEX_WAIT_PRIVATE, w, &slice);
    poll(NULL, 0, 0);
#else
    futex(&tcgpu_gate_word, FUTEX_WAIT_PRIVATE, w, NULL);
#endif
}

static bool membarrier_register(void)
{
    long cmds = sys_membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
        return false;
    return sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

/* Runs in the exiting thread after its last driver call (pthread key). */
static void thread_exit(void *p)
{
    struct tcgpu_gate_thread *t = p;
    atomic_store_explicit(&t->exempt, false, memory_order_relaxed);
    atomic_store_explicit(&t->call, NULL, memory_order_relaxed);
    atomic_store_explicit(&t->depth, 0, memory_order_release);
    atomic_store_explicit(&t->tid, 0, memory_order_release);   /* free for reuse */
    tcgpu_gate_self = NULL;
}

static void atfork_prepare(void)
{
    pthread_mutex_lock(&reg_lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&reg_lock);
}

/* The child has one thread: every other record is dead, the gate is open. */
static void atfork_child(void)
{
    pthread_mutex_init(&reg_lock, NULL);
    struct tcgpu_gate_thread *me = tcgpu_gate_self;
    for (struct tcgpu_gate_thread *t = atomic_load(&all_threads); t; t = atomic_load(&t->next)) {
        if (t == me)
            continue;
        atomic_store(&t->depth, 0);
        atomic_store(&t->exempt, false);
        atomic_store(&t->tid, 0);
    }
    if (me)
        atomic_store(&me->tid, (pid_t)syscall(SYS_gettid));
    atomic_store(&closer, NULL);
    atomic_store(&parked, 0);
    atomic_fetch_and(&tcgpu_gate_word, ~TCGPU_GATE_CLOSED);
    if (atomic_load(&use_membarrier) && !membarrier_register()) {
        atomic_store(&use_membarrier, false);
        atomic_fetch_or(&tcgpu_gate_word, TCGPU_GATE_FENCE);
    }
}

static void gate_init(void)
{
    bool mb = atomic_load(&membarrier_allowed) && membarrier_register();
    atomic_store(&use_membarrier, mb);
    if (!mb)
        atomic_fetch_or(&tcgpu_gate_word, TCGPU_GATE_FENCE);
    if (pthread_key_create(&exit_key, thread_exit) != 0) {
        fprintf(stderr, "tcgpu: gate: pthread_key_create failed\n");
        abort();
    }
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

struct tcgpu_gate_thread *tcgpu_gate_register(void)
{
    pthread_once(&init_once, gate_init);
    pid_t tid = (pid_t)syscall(SYS_gettid);
    struct tcgpu_gate_thread *t;

    pthread_mutex_lock(&reg_lock);
    for (t = atomic_load(&all_threads); t; t = atomic_load(&t->next))
        if (atomic_load_explicit(&t->tid, memory_order_relaxed) == 0)
            break;
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (!t) {
            fprintf(stderr, "tcgpu: gate: out of memory registering thread %d\n", (int)tid);
            abort();
        }
        atomic_store_explicit(&t->next, atomic_load(&all_threads), memory_order_relaxed);
        atomic_store_explicit(&all_threads, t, memory_order_release);
    }
    atomic_store_explicit(&t->depth, 0, memory_order_relaxed);
    atomic_store_explicit(&t->exempt, false, memory_order_relaxed);
    atomic_store_explicit(&t->tid, tid, memory_order_release);
    pthread_mutex_unlock(&reg_lock);

    tcgpu_gate_self = t;
    pthread_setspecific(exit_key, t);
    return t;
}

void tcgpu_gate_enter_slow(struct tcgpu_gate_thread *t)
{
    for (;;) {
        unsigned w = atomic_load_explicit(&tcgpu_gate_word, memory_order_acquire);
        if (w & TCGPU_GATE_FENCE) {
            full_fence();
            w = atomic_load_explicit(&tcgpu_gate_word, memory_order_acquire);
        }
        if (!(w & TCGPU_GATE_CLOSED))
            return;
        if (atomic_load_explicit(&t->exempt, memory_order_relaxed) ||
            atomic_load_explicit(&closer, memory_order_relaxed) == t)
            return;

        /* Step back out, then sleep until the gate opens. */
        atomic_store_explicit(&t->depth, 0, memory_order_release);
        atomic_fetch_add_explicit(&parked, 1, memory_order_relaxed);
        while ((w = atomic_load_explicit(&tcgpu_gate_word, memory_order_acquire)) & TCGPU_GATE_CLOSED)
            park(w);
        atomic_fetch_sub_explicit(&parked, 1, memory_order_relaxed);

        atomic_store_explicit(&t->depth, 1, TCGPU_GATE_ORDER_STORE);
        TCGPU_GATE_ENTER_FENCE();
        /* and check again: the gate may have closed once more */
    }
}

/* Make the CLOSED store visible to, and ordered with, every other thread's
 * depth store (see gate.h). */
static void close_barrier(void)
{
    if (atomic_load(&use_membarrier)) {
        if (sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
            return;
        if (errno == EPERM && membarrier_register() &&
            sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
            return;
        /* membarrier went away under us (seccomp?): switch to fences for
         * good. Threads that entered without a fence before they could see
         * the FENCE bit have had their stores drained long before the sleep
         * below ends (store buffers drain in nanoseconds). */
        fprintf(stderr, "tcgpu: gate: membarrier failed (%s); using fences\n", strerror(errno));
        atomic_store(&use_membarrier, false);
        atomic_fetch_or(&tcgpu_gate_word, TCGPU_GATE_FENCE);
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
    full_fence();
}

int tcgpu_gate_close(unsigned timeout_ms, struct tcgpu_gate_straggler *straggler)
{
    struct tcgpu_gate_thread *me = tcgpu_gate_self;
    if (!me)
        me = tcgpu_gate_register();

    unsigned w = atomic_load(&tcgpu_gate_word);
    do {
        if (w & TCGPU_GATE_CLOSED)
            return -EBUSY;
    } while (!atomic_compare_exchange_weak(&tcgpu_gate_word, &w, w | TCGPU_GATE_CLOSED));
    atomic_store(&closer, me);
    close_barrier();

    uint64_t start = now_ns();
    uint64_t deadline = start + (uint64_t)timeout_ms * 1000000u;
    unsigned backoff_us = 20;
    for (struct tcgpu_gate_thread *t = atomic_load_explicit(&all_threads, memory_order_acquire); t;
         t = atomic_load_explicit(&t->next, memory_order_acquire)) {
        if (t == me)
            continue;
        for (;;) {
            if (atomic_load_explicit(&t->tid, memory_order_acquire) == 0 ||
                atomic_load_explicit(&t->exempt, memory_order_relaxed) ||
                atomic_load_explicit(&t->depth, TCGPU_GATE_ORDER_LOAD) == 0)
                break;
            uint64_t now = now_ns();
            if (now >= deadline) {
                if (straggler) {
                    straggler->tid = atomic_load_explicit(&t->tid, memory_order_relaxed);
                    straggler->call = atomic_load_explicit(&t->call, memory_order_relaxed);
                    if (!straggler->call)
                        straggler->call = "(unknown call)";
                    straggler->waited_ms = (unsigned)((now - start) / 1000000u);
                }
                tcgpu_gate_open();
                return -ETIMEDOUT;
            }
            uint64_t left_us = (deadline - now) / 1000u + 1;
            struct timespec ts = { 0, (long)(backoff_us < left_us ? backoff_us : left_us) * 1000 };
            nanosleep(&ts, NULL);
            if (backoff_us < 1000)
                backoff_us *= 2;
        }
    }
    return 0;
}

int tcgpu_gate_open(void)
{
    if (!(atomic_load(&tcgpu_gate_word) & TCGPU_GATE_CLOSED))
        return -EINVAL;
    atomic_store(&closer, NULL);
    atomic_fetch_and_explicit(&tcgpu_gate_word, ~TCGPU_GATE_CLOSED, memory_order_seq_cst);
    futex(&tcgpu_gate_word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
    return 0;
}

bool tcgpu_gate_is_closed(void)
{
    return (atomic_load(&tcgpu_gate_word) & TCGPU_GATE_CLOSED) != 0;
}

void tcgpu_gate_set_exempt(bool exempt)
{
    struct tcgpu_gate_thread *t = tcgpu_gate_self;
    if (!t)
        t = tcgpu_gate_register();
    atomic_store(&t->exempt, exempt);
}

unsigned tcgpu_gate_depth(void)
{
    struct tcgpu_gate_thread *t = tcgpu_gate_self;
    return t ? atomic_load_explicit(&t->depth, memory_order_relaxed) : 0;
}

unsigned tcgpu_gate_parked(void)
{
    return atomic_load_explicit(&parked, memory_order_relaxed);
}

void tcgpu_gate_set_membarrier(bool allowed)
{
    atomic_store(&membarrier_allowed, allowed);
}

bool tcgpu_gate_uses_membarrier(void)
{
    pthread_once(&init_once, gate_init);
    return atomic_load(&use_membarrier);
}

void tcgpu_gate_format_straggler(const struct tcgpu_gate_straggler *s, char *buf, size_t len)
{
    snprintf(buf, len, "thread %d still inside %s after %u ms",
             (int)s->tid, s->call ? s->call : "(unknown call)", s->waited_ms);
}
