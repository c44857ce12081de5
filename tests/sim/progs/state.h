/*
 * state.h - what the state makers of tests/sim/progs share (their .desc files
 * run them through tests/common/scenario.sh): the --steps N and --sleep-ms T
 * arguments, the pause after a step, and FNV-1a 64 for the checksum.
 */
#ifndef TCGPU_TEST_STATE_H
#define TCGPU_TEST_STATE_H

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FNV_OFFSET 1469598103934665603ull
#define FNV_PRIME 1099511628211ull

/* Parses [--steps N] [--sleep-ms T] into *steps and *sleep_ms (which hold
 * the defaults); -1 on anything else or a negative value. */
static inline int state_parse_args(int argc, char **argv, long *steps, long *sleep_ms)
{
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            return -1;
        if (!strcmp(argv[i], "--steps"))
            *steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--sleep-ms"))
            *sleep_ms = atol(argv[i + 1]);
        else
            return -1;
    }
    return *steps >= 0 && *sleep_ms >= 0 ? 0 : -1;
}

/* The pause after a step, so that a mode acts mid-run. */
static inline void state_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

static inline unsigned long long fnv1a(unsigned long long h, const unsigned char *p, size_t n,
                                       size_t stride)
{
    for (size_t i = 0; i < n; i += stride)
        h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

#endif
