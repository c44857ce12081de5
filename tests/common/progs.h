/*
 * progs.h - what the test programs on the driver API share (tests/criu/progs,
 * tests/slurm/progs): dying on a failed CUDA call with its name, the FNV-1a
 * hash their checksums are made of, a sleep that survives signals. Header
 * only; single-threaded use.
 */
#ifndef TCGPU_TESTS_PROGS_H
#define TCGPU_TESTS_PROGS_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define PROGS_FNV_BASIS 1469598103934665603ull

/* "<prog>[pid]: <what> failed: <CUDA error name>" on stderr, then exit(1). */
static inline void __attribute__((noreturn)) progs_die(const char *prog, const char *what,
                                                       CUresult rc)
{
    const char *name = "?";

    cuGetErrorName(rc, &name);
    fprintf(stderr, "%s[%d]: %s failed: %s\n", prog, (int)getpid(), what, name);
    exit(1);
}

/* FNV-1a of n bytes, continuing from h (PROGS_FNV_BASIS to start). */
static inline uint64_t progs_fnv(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Sleep ms milliseconds, resumed after a signal handler. */
static inline void progs_sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (ms && nanosleep(&ts, &ts) != 0)
        ;
}

#endif
