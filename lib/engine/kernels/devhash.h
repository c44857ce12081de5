/*
 * devhash.h - the device hash of a chunk: what the scan kernel computes on
 * the device (scan.cu), its simcuda twin (scan_sim.c) and the host reference
 * (tests), from this one definition.
 *
 * XXH3 is a sequential hash over stripes; a GPU wants a hash whose terms are
 * independent and combine by addition, so every thread can take its own
 * words. Definition, for `len` bytes b[0..len):
 *
 *   pairs   n = ceil(len / 16); pair j is the two little-endian u64 words
 *           a_j = b[16j .. 16j+8), c_j = b[16j+8 .. 16j+16), bytes past
 *           `len` read as zero.
 *   term    lo = a_j ^ (K1 + j * K2), hi = c_j ^ (K3 + j * K4)  (mod 2^64)
 *           m = lo * hi as a 128-bit product; t_j = (m.low ^ m.high)
 *           + (a_j ^ rotl64(c_j, 29))                            (mod 2^64)
 *   hash    H = mix(sum_j t_j + len * K5)                       (mod 2^64)
 *           mix(z) = splitmix64's finaliser: z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
 *           z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31.
 *
 *   K1 = 0x9e3779b97f4a7c15  K2 = 0xc2b2ae3d27d4eb4f  K3 = 0x165667b19e3779f9
 *   K4 = 0xd6e8feb86659fd93  K5 = 0x27d4eb2f165667c5
 *
 * The sum is order-free (threads add their terms in any order) and every
 * term depends on its position. It detects changes, it is not a
 * cryptographic hash: an image records it next to XXH3 (the authoritative
 * checksum, verified on restore), and a chunk is taken from the parent only
 * when its device hash, length and position match.
 *
 * The header is plain C99 + an optional qualifier, so nvcc compiles it too.
 */
#ifndef TCGPU_DEVHASH_H
#define TCGPU_DEVHASH_H

#include <stddef.h>
#include <stdint.h>

#ifndef DEVHASH_QUAL
#define DEVHASH_QUAL static inline
#endif

#define DEVHASH_K1 0x9e3779b97f4a7c15ull
#define DEVHASH_K2 0xc2b2ae3d27d4eb4full
#define DEVHASH_K3 0x165667b19e3779f9ull
#define DEVHASH_K4 0xd6e8feb86659fd93ull
#define DEVHASH_K5 0x27d4eb2f165667c5ull

DEVHASH_QUAL uint64_t devhash_mix(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Term j for the words a, c. */
DEVHASH_QUAL uint64_t devhash_term(uint64_t j, uint64_t a, uint64_t c)
{
    uint64_t lo = a ^ (DEVHASH_K1 + j * DEVHASH_K2);
    uint64_t hi = c ^ (DEVHASH_K3 + j * DEVHASH_K4);
#ifdef __CUDA_ARCH__
    uint64_t mlo = lo * hi, mhi = __umul64hi(lo, hi);
#else
    unsigned __int128 m = (unsigned __int128)lo * hi;
    uint64_t mlo = (uint64_t)m, mhi = (uint64_t)(m >> 64);
#endif
    return (mlo ^ mhi) + (a ^ ((c << 29) | (c >> 35)));
}

DEVHASH_QUAL uint64_t devhash_final(uint64_t sum, uint64_t len)
{
    return devhash_mix(sum + len * DEVHASH_K5);
}

/* Little-endian u64 of up to 8 bytes (the rest zero). */
DEVHASH_QUAL uint64_t devhash_load(const uint8_t *p, size_t avail)
{
    uint64_t v = 0;

    if (avail >= 8) {
        for (int i = 0; i < 8; i++)
            v |= (uint64_t)p[i] << (8 * i);
        return v;
    }
    for (size_t i = 0; i < avail; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#if !defined(__CUDA_ARCH__) && !defined(DEVHASH_NO_HOST)
/* The host reference: H of len bytes at p (any alignment), and whether all
 * are zero (*nonzero = 0). Assumes a little-endian host. */
static inline uint64_t devhash_host(const void *p, size_t len, uint32_t *nonzero)
{
    const uint8_t *b = (const uint8_t *)p;
    size_t full = len / 16, j;
    uint64_t sum = 0, any = 0;

    for (j = 0; j < full; j++) {
        uint64_t a, c;
        __builtin_memcpy(&a, b + 16 * j, 8);
        __builtin_memcpy(&c, b + 16 * j + 8, 8);
        any |= a | c;
        sum += devhash_term(j, a, c);
    }
    if (len % 16) {
        size_t at = 16 * full, rest = len - at;
        uint64_t a = devhash_load(b + at, rest);
        uint64_t c = rest > 8 ? devhash_load(b + at + 8, rest - 8) : 0;
        any |= a | c;
        sum += devhash_term(j, a, c);
    }
    if (nonzero)
        *nonzero = any != 0;
    return devhash_final(sum, len);
}
#endif

#endif
