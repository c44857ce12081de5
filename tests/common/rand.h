/*
 * rand.h - the tests' pseudo-random numbers: xorshift64, deterministic for
 * a seed, so that a failing randomized test can be replayed. Not for
 * anything but tests. One stream per program (not thread-safe).
 */
#ifndef TCGPU_TESTS_RAND_H
#define TCGPU_TESTS_RAND_H

#include <stdint.h>

#define T_RAND_DEFAULT_SEED 88172645463325252ull

static uint64_t t_rng = T_RAND_DEFAULT_SEED;

/* Restart the stream; a zero seed (which xorshift cannot leave) means the default. */
static inline void __attribute__((unused)) t_seed(uint64_t seed)
{
    t_rng = seed ? seed : T_RAND_DEFAULT_SEED;
}

static inline uint64_t __attribute__((unused)) t_rand(void)
{
    t_rng ^= t_rng << 13;
    t_rng ^= t_rng >> 7;
    t_rng ^= t_rng << 17;
    return t_rng;
}

/* Uniform-ish in [0, n); 0 when n is 0. */
static inline uint64_t __attribute__((unused)) t_rand_below(uint64_t n)
{
    return n ? t_rand() % n : 0;
}

#endif
