/*
 * test_kernels.c - kernels of simcuda's tests (a module: shared object).
 */
#include "simcuda_kernel.h"

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
