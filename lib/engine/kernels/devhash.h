/*
 * devhash.h - the device hash of a chunk: what the scan kernel computes on
 * the device (scan.cu), its simcuda twin (scan_sim.c), the host reference
 * (tests) and its vector form (devhash_fast: the twin, and the workers that
 * hash blocks on the host), from this one definition.
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
/* Adds the terms of pairs j.. of the len bytes at b (the last pair padded
 * with zeros) to *sum, and ORs their words into *any. Little-endian host. */
static inline void devhash_add_pairs(const uint8_t *b, size_t len, size_t j, uint64_t *sum,
                                     uint64_t *any)
{
    size_t full = len / 16;

    for (; j < full; j++) {
        uint64_t a, c;
        __builtin_memcpy(&a, b + 16 * j, 8);
        __builtin_memcpy(&c, b + 16 * j + 8, 8);
        *any |= a | c;
        *sum += devhash_term(j, a, c);
    }
    if (len % 16) {
        size_t at = 16 * full, rest = len - at;
        uint64_t a = devhash_load(b + at, rest);
        uint64_t c = rest > 8 ? devhash_load(b + at + 8, rest - 8) : 0;
        *any |= a | c;
        *sum += devhash_term(j, a, c);
    }
}

/* The host reference: H of len bytes at p (any alignment), and whether all
 * are zero (*nonzero = 0). */
static inline uint64_t devhash_host(const void *p, size_t len, uint32_t *nonzero)
{
    uint64_t sum = 0, any = 0;

    devhash_add_pairs((const uint8_t *)p, len, 0, &sum, &any);
    if (nonzero)
        *nonzero = any != 0;
    return devhash_final(sum, len);
}
#endif

/*
 * devhash_fast: devhash_host's value, eight pairs at a time with AVX-512F
 * where the CPU has it: the same terms summed in another order, which the
 * sum allows. The scalar form is bound by the core's one 64 x 64
 * multiplier: it hashed 512 MiB in 130 ms where a load alone takes 37; the
 * vector form, its 128-bit products made from 32-bit halves and a prefetch
 * 4 KiB ahead (the hardware's alone left it at half the load speed), takes
 * 60. Hosts: the scan kernel's simcuda twin, and the workers that hash the
 * blocks of a full image for the next incremental one.
 */
#if !defined(__CUDACC__) && !defined(DEVHASH_NO_HOST) && defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define DEVHASH_AVX512 __attribute__((target("avx512f")))
#define DEVHASH_PREFETCH 4096

/* lo ^ hi of the 128-bit products of eight lanes; no carry is lost in `mid`:
 * p01 plus two 32-bit values is at most 2^64 - 1. */
DEVHASH_AVX512 static inline __m512i devhash_mul_fold8(__m512i x, __m512i y)
{
    const __m512i m32 = _mm512_set1_epi64(0xffffffffll);
    __m512i xh = _mm512_srli_epi64(x, 32), yh = _mm512_srli_epi64(y, 32);
    __m512i p00 = _mm512_mul_epu32(x, y), p01 = _mm512_mul_epu32(x, yh);
    __m512i p10 = _mm512_mul_epu32(xh, y), p11 = _mm512_mul_epu32(xh, yh);
    __m512i mid = _mm512_add_epi64(_mm512_add_epi64(p01, _mm512_srli_epi64(p00, 32)),
                                   _mm512_and_si512(p10, m32));
    __m512i lo = _mm512_or_si512(_mm512_slli_epi64(mid, 32), _mm512_and_si512(p00, m32));
    __m512i hi = _mm512_add_epi64(_mm512_add_epi64(p11, _mm512_srli_epi64(mid, 32)),
                                  _mm512_srli_epi64(p10, 32));

    return _mm512_xor_si512(lo, hi);
}

DEVHASH_AVX512 static inline uint64_t devhash_avx512(const void *p, size_t len, uint32_t *nonzero)
{
    /* after the unpacks, lane i holds pair ord[i] of the eight */
    static const unsigned ord[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
    const uint8_t *b = (const uint8_t *)p;
    const __m512i step_a = _mm512_set1_epi64((long long)(8 * DEVHASH_K2));
    const __m512i step_c = _mm512_set1_epi64((long long)(8 * DEVHASH_K4));
    size_t pairs = len / 16, j = 0;
    uint64_t ka[8], kc[8], lane_sum[8], lane_any[8], sum = 0, any = 0;
    __m512i va, vc, vsum = _mm512_setzero_si512(), vany = _mm512_setzero_si512();

    for (int i = 0; i < 8; i++) {
        ka[i] = DEVHASH_K1 + ord[i] * DEVHASH_K2;
        kc[i] = DEVHASH_K3 + ord[i] * DEVHASH_K4;
    }
    va = _mm512_loadu_si512(ka);
    vc = _mm512_loadu_si512(kc);
    for (; j + 8 <= pairs; j += 8) {
        const uint8_t *at = b + 16 * j;
        __m512i v0, v1, a, c, t;

        _mm_prefetch((const char *)at + DEVHASH_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)at + DEVHASH_PREFETCH + 64, _MM_HINT_T0);
        v0 = _mm512_loadu_si512(at);
        v1 = _mm512_loadu_si512(at + 64);
        a = _mm512_unpacklo_epi64(v0, v1);
        c = _mm512_unpackhi_epi64(v0, v1);
        t = devhash_mul_fold8(_mm512_xor_si512(a, va), _mm512_xor_si512(c, vc));
        t = _mm512_add_epi64(t, _mm512_xor_si512(a, _mm512_rol_epi64(c, 29)));
        vsum = _mm512_add_epi64(vsum, t);
        vany = _mm512_or_si512(vany, _mm512_or_si512(v0, v1));
        va = _mm512_add_epi64(va, step_a);
        vc = _mm512_add_epi64(vc, step_c);
    }
    /* lanes added as unsigned words (the intrinsic _mm512_reduce_add_epi64
     * adds signed ones, whose wrap-around is undefined) */
    _mm512_storeu_si512(lane_sum, vsum);
    _mm512_storeu_si512(lane_any, vany);
    for (int i = 0; i < 8; i++) {
        sum += lane_sum[i];
        any |= lane_any[i];
    }
    devhash_add_pairs(b, len, j, &sum, &any);   /* the last < 8 pairs */
    if (nonzero)
        *nonzero = any != 0;
    return devhash_final(sum, len);
}

/* Whether devhash_fast takes the vector form here. */
static inline int devhash_fast_is_vector(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

static inline uint64_t devhash_fast(const void *p, size_t len, uint32_t *nonzero)
{
    return devhash_fast_is_vector() ? devhash_avx512(p, len, nonzero)
                                    : devhash_host(p, len, nonzero);
}
#elif !defined(__CUDA_ARCH__) && !defined(DEVHASH_NO_HOST)
static inline int devhash_fast_is_vector(void)
{
    return 0;
}

static inline uint64_t devhash_fast(const void *p, size_t len, uint32_t *nonzero)
{
    return devhash_host(p, len, nonzero);
}
#endif

#endif
