/*
 * test_kernels.c - kernels of simcuda's tests (a module: shared object).
 */
#include "simcuda_kernel.h"

#include <pthread.h>
#include <time.h>

/* p[i] = v for i < n */
SIMCUDA_KERNEL(fill_u32)
{
    uint64_t p = SIMCUDA_ARG(uint64_t, 0);
    uint64_t n = SIMCUDA_ARG(uint64_t, 1);
    uint32_t v = SIMCUDA_ARG(uint32_t, 2);
    uint32_t *a = k->dev(k, p, n * sizeof(uint32_t));

    if (!a)
        return;
    for (uint64_t i = 0; i < n; i++)
        a[i] = v;
}
SIMCUDA_KERNEL_PARAMS(fill_u32, sizeof(uint64_t), sizeof(uint64_t), sizeof(uint32_t));

/* p[i] += 1 for i < n */
SIMCUDA_KERNEL(add_one)
{
    uint64_t p = SIMCUDA_ARG(uint64_t, 0);
    uint64_t n = SIMCUDA_ARG(uint64_t, 1);
    uint32_t *a = k->dev(k, p, n * sizeof(uint32_t));

    if (!a)
        return;
    for (uint64_t i = 0; i < n; i++)
        a[i] += 1;
}
SIMCUDA_KERNEL_PARAMS(add_one, sizeof(uint64_t), sizeof(uint64_t));

/* Sleep ms, then append id to the log: log[0] counts, log[1..] are the ids. */
SIMCUDA_KERNEL(mark)
{
    uint64_t p = SIMCUDA_ARG(uint64_t, 0);
    uint32_t id = SIMCUDA_ARG(uint32_t, 1);
    uint32_t ms = SIMCUDA_ARG(uint32_t, 2);
    uint32_t *log = k->dev(k, p, 64 * sizeof(uint32_t));
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    if (!log)
        return;
    while (ms && nanosleep(&ts, &ts))
        ;
    uint32_t at = __atomic_fetch_add(&log[0], 1, __ATOMIC_SEQ_CST);
    if (at < 63)
        __atomic_store_n(&log[1 + at], id, __ATOMIC_SEQ_CST);
}
SIMCUDA_KERNEL_PARAMS(mark, sizeof(uint64_t), sizeof(uint32_t), sizeof(uint32_t));

/* Touches memory it was given a bad pointer to: the launch faults. */
SIMCUDA_KERNEL(touch)
{
    uint64_t p = SIMCUDA_ARG(uint64_t, 0);
    uint32_t *a = k->dev(k, p, sizeof(uint32_t));

    if (a)
        a[0] = 42;
}
SIMCUDA_KERNEL_PARAMS(touch, sizeof(uint64_t));

/* No SIMCUDA_KERNEL_PARAMS: launched synchronously by simcuda. */
SIMCUDA_KERNEL(add_one_nometa)
{
    uint64_t p = SIMCUDA_ARG(uint64_t, 0);
    uint32_t *a = k->dev(k, p, sizeof(uint32_t));

    if (a)
        a[0] += 1;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *burn(void *arg)
{
    uint64_t *ns = arg, t0 = thread_cpu_ns();
    volatile uint64_t x = 0;

    while (thread_cpu_ns() - t0 < *ns)
        x++;
    *ns = thread_cpu_ns() - t0;
    return NULL;
}

/* Burns ms of CPU on a thread of its own, and charges it to the device
 * when `charge` (simcuda_kernel_ctx.charge_cpu). */
SIMCUDA_KERNEL(burn_threaded)
{
    uint32_t ms = SIMCUDA_ARG(uint32_t, 0);
    uint32_t charge = SIMCUDA_ARG(uint32_t, 1);
    uint64_t ns = (uint64_t)ms * 1000000u;
    pthread_t th;

    if (pthread_create(&th, NULL, burn, &ns))
        return;
    pthread_join(th, NULL);
    if (charge && k->abi >= 2 && k->charge_cpu)
        k->charge_cpu(k, ns);
}
SIMCUDA_KERNEL_PARAMS(burn_threaded, sizeof(uint32_t), sizeof(uint32_t));

/* Translates p (n words) and flag (two words, in host memory), sets flag[0] =
 * 1, waits until the host sets flag[1], writes p[i] = v for i < n, then sets
 * flag[0] = 2. A kernel that runs as long as the host wants, as a collective
 * kernel waiting for a peer does. */
SIMCUDA_KERNEL(wait_then_fill)
{
    uint64_t p = SIMCUDA_ARG(uint64_t, 0);
    uint64_t n = SIMCUDA_ARG(uint64_t, 1);
    uint64_t flag = SIMCUDA_ARG(uint64_t, 2);
    uint32_t v = SIMCUDA_ARG(uint32_t, 3);
    uint32_t *a = k->dev(k, p, n * sizeof(uint32_t));
    uint32_t *f = k->dev(k, flag, 2 * sizeof(uint32_t));
    struct timespec ms = { 0, 1000000 };

    if (!a || !f)
        return;
    __atomic_store_n(&f[0], 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&f[1], __ATOMIC_ACQUIRE))
        nanosleep(&ms, NULL);
    for (uint64_t i = 0; i < n; i++)
        a[i] = v;
    __atomic_store_n(&f[0], 2, __ATOMIC_SEQ_CST);
}
SIMCUDA_KERNEL_PARAMS(wait_then_fill, sizeof(uint64_t), sizeof(uint64_t), sizeof(uint64_t),
                      sizeof(uint32_t));
