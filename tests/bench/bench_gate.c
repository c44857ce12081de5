/*
 * bench_gate.c - the API gate's fast path, in ns per call (suite 'bench').
 *
 * Rows, each the best of several runs of N calls on one thread:
 *   empty call        a call through a function pointer to an empty function:
 *                     what a pass-through wrapper does besides the gate (baseline)
 *   enter+leave       one TCGPU_GATE_ENTER/LEAVE pair, inline, gate open
 *   gated call        a wrapper-shaped function: enter, call through the
 *                     pointer, leave (called through a pointer itself)
 *   gated call, T threads  the same on T threads at once (thread CPU time) (no shared cache line is
 *                     written, so it should not grow with T)
 * Then the two lines scripts read:
 *   gate_ns_per_call X     the enter+leave pair
 *   gate_overhead_ratio Y  gated call / empty call
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver/gate.h"

#define RUNS 5

/* CPU time of the calling thread: threads that share a core are not charged
 * for each other's time slices. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static int empty(int x)
{
    __asm__ volatile("" ::: "memory");
    return x;
}

static int (*volatile real_fn)(int) = empty;

__attribute__((noinline)) static int gated(int x)
{
    tcgpu_gate_enter("cuBench");
    int r = real_fn(x);
    tcgpu_gate_leave();
    return r;
}

static int (*volatile empty_ptr)(int) = empty;
static int (*volatile gated_ptr)(int) = gated;

static double run_calls(int (*volatile *fp)(int), long n)
{
    double best = 1e30;
    for (int r = 0; r < RUNS; r++) {
        int (*f)(int) = *fp;
        int acc = 0;
        uint64_t t0 = now_ns();
        for (long i = 0; i < n; i++)
            acc += f((int)i);
        uint64_t t1 = now_ns();
        __asm__ volatile("" ::"r"(acc));
        double ns = (double)(t1 - t0) / (double)n;
        if (ns < best)
            best = ns;
    }
    return best;
}

static double run_pairs(long n)
{
    double best = 1e30;
    for (int r = 0; r < RUNS; r++) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < n; i++) {
            tcgpu_gate_enter("cuBench");
            __asm__ volatile("" ::: "memory");
            tcgpu_gate_leave();
        }
        uint64_t t1 = now_ns();
        double ns = (double)(t1 - t0) / (double)n;
        if (ns < best)
            best = ns;
    }
    return best;
}

struct thr {
    long n;
    double ns;
};

static void *thread_run(void *arg)
{
    struct thr *t = arg;
    t->ns = run_calls(&gated_ptr, t->n);
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 50000000L;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = argc > 2 ? atoi(argv[2]) : (int)(cpus < 4 ? (cpus > 0 ? cpus : 1) : 4);
    const char *fences = getenv("TCGPU_GATE_NO_MEMBARRIER");

    if (fences && *fences && strcmp(fences, "0"))
        tcgpu_gate_set_membarrier(false);  /* as libtcgpu.so does with it set */
    tcgpu_gate_enter("cuWarmup");            /* register this thread */
    tcgpu_gate_leave();

    double base = run_calls(&empty_ptr, n);
    double pair = run_pairs(n);
    double call = run_calls(&gated_ptr, n);

    struct thr t[64];
    pthread_t th[64];
    if (nthreads > 64)
        nthreads = 64;
    for (int i = 0; i < nthreads; i++) {
        t[i].n = n / 2;
        pthread_create(&th[i], NULL, thread_run, &t[i]);
    }
    double worst = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        if (t[i].ns > worst)
            worst = t[i].ns;
    }

    printf("%-28s %10s\n", "what", "ns/call");
    printf("%-28s %10.3f\n", "empty call (baseline)", base);
    printf("%-28s %10.3f\n", "enter+leave", pair);
    printf("%-28s %10.3f\n", "gated call", call);
    char label[64];
    snprintf(label, sizeof(label), "gated call, %d threads", nthreads);
    printf("%-28s %10.3f\n", label, worst);
    printf("membarrier %s, %ld calls per run, best of %d\n",
           tcgpu_gate_uses_membarrier() ? "yes" : "no (fences)", n, RUNS);
    printf("gate_ns_per_call %.3f\n", pair);
    printf("gate_overhead_ratio %.3f\n", call / base);
    return 0;
}
