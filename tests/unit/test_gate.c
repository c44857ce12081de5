/*
 * test_gate.c - the API gate (lib/driver/gate.h) on its own, no driver.
 *
 *   test_gate            all cases
 *   test_gate hammer     only the hammer (run again with TCGPU_GATE_NO_MEMBARRIER=1)
 *
 * The hammer: worker threads enter/leave in a tight loop (some nested) while
 * the main thread closes and opens the gate again and again. Each worker
 * counts, inside the gate, how many calls it is in (in_calls) and how many it
 * made (ops). Whenever close returns 0, no worker may be inside, and no worker
 * may get inside until the gate opens again.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "driver/gate.h"
#include "../common/check.h"

#define WORKERS 8

static _Atomic int in_calls;               /* workers between enter and leave */
static _Atomic unsigned long ops[WORKERS];
static _Atomic int stop;

static void sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

static void *hammer_worker(void *arg)
{
    int id = (int)(long)arg;
    unsigned long n = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        tcgpu_gate_enter("cuHammer");
        atomic_fetch_add_explicit(&in_calls, 1, memory_order_relaxed);
        if ((n & 7) == 0) {                /* a nested call now and then */
            tcgpu_gate_enter("cuNested");
            atomic_fetch_add_explicit(&ops[id], 1, memory_order_relaxed);
            tcgpu_gate_leave();
        }
        atomic_fetch_add_explicit(&ops[id], 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&in_calls, 1, memory_order_relaxed);
        tcgpu_gate_leave();
        n++;
        if ((n & 1023) == 0)
            sched_yield();
    }
    return NULL;
}

static unsigned long total_ops(void)
{
    unsigned long s = 0;
    for (int i = 0; i < WORKERS; i++)
        s += atomic_load_explicit(&ops[i], memory_order_relaxed);
    return s;
}

static int test_hammer(void)
{
    pthread_t th[WORKERS];
    atomic_store(&stop, 0);
    for (long i = 0; i < WORKERS; i++)
        REQUIRE(pthread_create(&th[i], NULL, hammer_worker, (void *)i) == 0, "pthread_create");

    int rounds = 300, parked_seen = 0;
    unsigned long progress_before = total_ops();
    for (int r = 0; r < rounds; r++) {
        struct tcgpu_gate_straggler s;
        int rc = tcgpu_gate_close(5000, &s);
        REQUIRE(rc == 0, "round %d: close returned %d", r, rc);
        REQUIRE(atomic_load(&in_calls) == 0, "round %d: %d workers inside after close",
              r, atomic_load(&in_calls));
        unsigned long a = total_ops();
        sleep_us(r % 10 == 0 ? 2000 : 100);
        REQUIRE(atomic_load(&in_calls) == 0, "round %d: a worker got inside while closed", r);
        REQUIRE(total_ops() == a, "round %d: %lu calls made while closed", r, total_ops() - a);
        if (tcgpu_gate_parked() > 0)
            parked_seen++;
        REQUIRE(tcgpu_gate_open() == 0, "open");
        sleep_us(200);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    REQUIRE(total_ops() > progress_before, "workers made no progress");
    REQUIRE(parked_seen > 0, "no worker was ever parked");
    fprintf(stderr, "hammer: %d rounds, %lu calls, parked seen in %d rounds, membarrier %s\n",
            rounds, total_ops(), parked_seen, tcgpu_gate_uses_membarrier() ? "yes" : "no (fences)");
    return 0;
}

static int test_nesting(void)
{
    REQUIRE(tcgpu_gate_depth() == 0, "depth %u at start", tcgpu_gate_depth());
    tcgpu_gate_enter("cuOuter");
    tcgpu_gate_enter("cuInner");
    tcgpu_gate_enter("cuInnermost");
    REQUIRE(tcgpu_gate_depth() == 3, "depth %u", tcgpu_gate_depth());
    tcgpu_gate_leave();
    tcgpu_gate_leave();
    REQUIRE(tcgpu_gate_depth() == 1, "depth %u", tcgpu_gate_depth());
    tcgpu_gate_leave();
    REQUIRE(tcgpu_gate_depth() == 0, "depth %u", tcgpu_gate_depth());
    return 0;
}

struct stuck {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int inside, release;
    pid_t tid;
};

static void *stuck_thread(void *arg)
{
    struct stuck *s = arg;
    tcgpu_gate_enter("cuStreamSynchronize");
    tcgpu_gate_enter("cuNestedHelper");     /* the outermost name is reported */
    pthread_mutex_lock(&s->lock);
    s->tid = (pid_t)syscall(SYS_gettid);
    s->inside = 1;
    pthread_cond_broadcast(&s->cond);
    while (!s->release)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    tcgpu_gate_leave();
    tcgpu_gate_leave();
    return NULL;
}

static void *enter_once(void *arg)
{
    _Atomic int *done = arg;
    tcgpu_gate_enter("cuQuick");
    tcgpu_gate_leave();
    atomic_store(done, 1);
    return NULL;
}

static int test_timeout(void)
{
    struct stuck s = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, stuck_thread, &s) == 0, "pthread_create");
    pthread_mutex_lock(&s.lock);
    while (!s.inside)
        pthread_cond_wait(&s.cond, &s.lock);
    pthread_mutex_unlock(&s.lock);

    struct tcgpu_gate_straggler who;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = tcgpu_gate_close(150, &who);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    REQUIRE(rc == -ETIMEDOUT, "close returned %d", rc);
    REQUIRE(ms >= 150 && ms < 2000, "close waited %ld ms", ms);
    REQUIRE(who.tid == s.tid, "straggler tid %d, expected %d", (int)who.tid, (int)s.tid);
    REQUIRE(who.call && strcmp(who.call, "cuStreamSynchronize") == 0, "straggler call %s", who.call);
    char msg[128], want[128];
    tcgpu_gate_format_straggler(&who, msg, sizeof(msg));
    snprintf(want, sizeof(want), "thread %d still inside cuStreamSynchronize after %u ms",
             (int)s.tid, who.waited_ms);
    REQUIRE(strcmp(msg, want) == 0, "message '%s'", msg);
    REQUIRE(who.waited_ms >= 150, "waited_ms %u", who.waited_ms);
    fprintf(stderr, "timeout: %s\n", msg);

    /* The gate is open again: another thread gets in without waiting. */
    REQUIRE(!tcgpu_gate_is_closed(), "gate still closed after a timeout");
    _Atomic int done = 0;
    pthread_t q;
    pthread_create(&q, NULL, enter_once, &done);
    pthread_join(q, NULL);
    REQUIRE(atomic_load(&done) == 1, "enter after timeout");

    pthread_mutex_lock(&s.lock);
    s.release = 1;
    pthread_cond_broadcast(&s.cond);
    pthread_mutex_unlock(&s.lock);
    pthread_join(th, NULL);

    /* Now nobody is inside: close succeeds at once, even with timeout 0. */
    REQUIRE(tcgpu_gate_close(0, NULL) == 0, "close after the straggler left");
    REQUIRE(tcgpu_gate_open() == 0, "open");
    return 0;
}

static void *exempt_thread(void *arg)
{
    _Atomic int *done = arg;
    tcgpu_gate_set_exempt(true);
    tcgpu_gate_enter("cuExempt");           /* the gate is closed: must not park */
    tcgpu_gate_leave();
    atomic_store(done, 1);
    return NULL;
}

static int test_close_rules(void)
{
    REQUIRE(tcgpu_gate_open() == -EINVAL, "open of an open gate");
    REQUIRE(tcgpu_gate_close(1000, NULL) == 0, "close");
    REQUIRE(tcgpu_gate_is_closed(), "is_closed");
    REQUIRE(tcgpu_gate_close(1000, NULL) == -EBUSY, "second close");

    /* The closing thread itself keeps calling the driver. */
    tcgpu_gate_enter("cuCloserCall");
    REQUIRE(tcgpu_gate_depth() == 1, "closer entered");
    tcgpu_gate_leave();

    /* Exempt threads are not parked. */
    _Atomic int done = 0;
    pthread_t th;
    pthread_create(&th, NULL, exempt_thread, &done);
    pthread_join(th, NULL);
    REQUIRE(atomic_load(&done) == 1, "exempt thread");

    /* A normal thread parks until open. */
    atomic_store(&done, 0);
    pthread_create(&th, NULL, enter_once, &done);
    for (int i = 0; i < 1000 && tcgpu_gate_parked() == 0; i++)
        sleep_us(1000);
    REQUIRE(tcgpu_gate_parked() == 1, "parked %u", tcgpu_gate_parked());
    sleep_us(20000);
    REQUIRE(atomic_load(&done) == 0, "a normal thread passed a closed gate");
    REQUIRE(tcgpu_gate_open() == 0, "open");
    pthread_join(th, NULL);
    REQUIRE(atomic_load(&done) == 1, "parked thread did not resume");
    REQUIRE(tcgpu_gate_parked() == 0, "parked %u after open", tcgpu_gate_parked());
    return 0;
}

static void *short_lived(void *arg)
{
    (void)arg;
    tcgpu_gate_enter("cuShort");
    tcgpu_gate_leave();
    return NULL;
}

/* Records of exited threads are recycled and never waited for. */
static int test_thread_exit(void)
{
    for (int round = 0; round < 50; round++) {
        pthread_t th[20];
        for (int i = 0; i < 20; i++)
            pthread_create(&th[i], NULL, short_lived, NULL);
        for (int i = 0; i < 20; i++)
            pthread_join(th[i], NULL);
    }
    REQUIRE(tcgpu_gate_close(0, NULL) == 0, "close with only exited threads");
    REQUIRE(tcgpu_gate_open() == 0, "open");
    return 0;
}

int main(int argc, char **argv)
{
    const char *fences = getenv("TCGPU_GATE_NO_MEMBARRIER");

    /* the program reads its environment; the gate takes the option */
    if (fences && *fences && strcmp(fences, "0")) {
        tcgpu_gate_set_membarrier(false);
        REQUIRE(!tcgpu_gate_uses_membarrier(), "membarrier used after all");
    }
    if (argc > 1 && strcmp(argv[1], "hammer") == 0) {
        RUN(test_hammer);
        return T_EXIT_STATUS();
    }
    RUN(test_nesting);
    RUN(test_close_rules);
    RUN(test_timeout);
    RUN(test_thread_exit);
    RUN(test_hammer);
    return T_EXIT_STATUS();
}
