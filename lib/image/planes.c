/*
 * planes.c - byte planes and back (contracts in planes.h): the split and
 * its inverse run over every byte of every compressible chunk, so explicit
 * 2- and 4-byte loops (the generic one is several times slower) and on
 * x86-64 vector versions of them, which leave the scalar loops the tails.
 */
#include "planes.h"

#include "internal.h"

/* The widest form planes_limit lets run (tests: every form on one machine). */
static _Atomic int isa_limit = PLANES_AVX2;

void planes_limit(enum planes_isa widest)
{
    isa_limit = widest;
}

/* Whether the form `isa` may run: the CPU has it and planes_limit allows it. */
static int can(enum planes_isa isa)
{
    if ((int)isa > isa_limit)
        return 0;
#if defined(__x86_64__)
    switch (isa) {
    case PLANES_SCALAR:
    case PLANES_SSE2: return 1;
    case PLANES_SSSE3: return __builtin_cpu_supports("ssse3");
    case PLANES_AVX2: return __builtin_cpu_supports("avx2");
    }
#endif
    return isa == PLANES_SCALAR;
}

static uint64_t rotl(uint64_t v, unsigned bits)
{
    return ((v << 1) | (v >> (bits - 1))) & (bits == 64 ? ~0ull : (1ull << bits) - 1);
}

static uint64_t rotr(uint64_t v, unsigned bits)
{
    return ((v >> 1) | (v << (bits - 1))) & (bits == 64 ? ~0ull : (1ull << bits) - 1);
}

static void split2_scalar(const uint8_t *src, size_t from, size_t n, int rot, uint8_t *p0,
                          uint8_t *p1)
{
    for (size_t i = from; i < n; i++) {
        uint16_t v = (uint16_t)(src[2 * i] | (src[2 * i + 1] << 8));

        if (rot)
            v = (uint16_t)((v << 1) | (v >> 15));
        p0[i] = (uint8_t)v;
        p1[i] = (uint8_t)(v >> 8);
    }
}

static void split4_scalar(const uint8_t *src, size_t from, size_t n, int rot, uint8_t *p0,
                          uint8_t *p1, uint8_t *p2, uint8_t *p3)
{
    for (size_t i = from; i < n; i++) {
        uint32_t v = (uint32_t)src[4 * i] | (uint32_t)src[4 * i + 1] << 8 |
                     (uint32_t)src[4 * i + 2] << 16 | (uint32_t)src[4 * i + 3] << 24;

        if (rot)
            v = (v << 1) | (v >> 31);
        p0[i] = (uint8_t)v;
        p1[i] = (uint8_t)(v >> 8);
        p2[i] = (uint8_t)(v >> 16);
        p3[i] = (uint8_t)(v >> 24);
    }
}

static void join2_scalar(const uint8_t *p0, const uint8_t *p1, size_t from, size_t n, int rot,
                         uint8_t *dst)
{
    for (size_t i = from; i < n; i++) {
        uint16_t v = (uint16_t)(p0[i] | (p1[i] << 8));

        if (rot)
            v = (uint16_t)((v >> 1) | (v << 15));
        dst[2 * i] = (uint8_t)v;
        dst[2 * i + 1] = (uint8_t)(v >> 8);
    }
}

static void join4_scalar(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2,
                         const uint8_t *p3, size_t from, size_t n, int rot, uint8_t *dst)
{
    for (size_t i = from; i < n; i++) {
        uint32_t v =
            (uint32_t)p0[i] | (uint32_t)p1[i] << 8 | (uint32_t)p2[i] << 16 | (uint32_t)p3[i] << 24;

        if (rot)
            v = (v >> 1) | (v << 31);
        dst[4 * i] = (uint8_t)v;
        dst[4 * i + 1] = (uint8_t)(v >> 8);
        dst[4 * i + 2] = (uint8_t)(v >> 16);
        dst[4 * i + 3] = (uint8_t)(v >> 24);
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

#define ROTL16(v) _mm_or_si128(_mm_slli_epi16(v, 1), _mm_srli_epi16(v, 15))
#define ROTR16(v) _mm_or_si128(_mm_srli_epi16(v, 1), _mm_slli_epi16(v, 15))
#define ROTL32(v) _mm_or_si128(_mm_slli_epi32(v, 1), _mm_srli_epi32(v, 31))
#define ROTR32(v) _mm_or_si128(_mm_srli_epi32(v, 1), _mm_slli_epi32(v, 31))

/* 16 elements a round: low and high bytes packed apart. */
static size_t split2_sse2(const uint8_t *src, size_t n, int rot, uint8_t *p0, uint8_t *p1)
{
    const __m128i lo = _mm_set1_epi16(0x00ff);
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + 2 * i + 16));

        if (rot) {
            a = ROTL16(a);
            b = ROTL16(b);
        }
        _mm_storeu_si128((__m128i *)(p0 + i),
                         _mm_packus_epi16(_mm_and_si128(a, lo), _mm_and_si128(b, lo)));
        _mm_storeu_si128((__m128i *)(p1 + i),
                         _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
    }
    return i;
}

/* 32 elements a round; the per-lane packs put back in order. */
__attribute__((target("avx2"))) static size_t split2_avx2(const uint8_t *src, size_t n, int rot,
                                                           uint8_t *p0, uint8_t *p1)
{
    const __m256i lo = _mm256_set1_epi16(0x00ff);
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + 2 * i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + 2 * i + 32));

        if (rot) {
            a = _mm256_or_si256(_mm256_slli_epi16(a, 1), _mm256_srli_epi16(a, 15));
            b = _mm256_or_si256(_mm256_slli_epi16(b, 1), _mm256_srli_epi16(b, 15));
        }
        __m256i l = _mm256_packus_epi16(_mm256_and_si256(a, lo), _mm256_and_si256(b, lo));
        __m256i h = _mm256_packus_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
        _mm256_storeu_si256((__m256i *)(p0 + i), _mm256_permute4x64_epi64(l, 0xD8));
        _mm256_storeu_si256((__m256i *)(p1 + i), _mm256_permute4x64_epi64(h, 0xD8));
    }
    return i;
}

/* 16 elements a round: bytes grouped within each vector, then a 4x4
 * transpose of 32-bit lanes. */
__attribute__((target("ssse3"))) static size_t split4_ssse3(const uint8_t *src, size_t n, int rot,
                                                             uint8_t *p0, uint8_t *p1,
                                                             uint8_t *p2, uint8_t *p3)
{
    const __m128i group = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m128i v[4];

        for (int k = 0; k < 4; k++) {
            v[k] = _mm_loadu_si128((const __m128i *)(src + 4 * i + 16 * k));
            if (rot)
                v[k] = ROTL32(v[k]);
            v[k] = _mm_shuffle_epi8(v[k], group);
        }
        __m128i t0 = _mm_unpacklo_epi32(v[0], v[1]), t1 = _mm_unpacklo_epi32(v[2], v[3]);
        __m128i t2 = _mm_unpackhi_epi32(v[0], v[1]), t3 = _mm_unpackhi_epi32(v[2], v[3]);
        _mm_storeu_si128((__m128i *)(p0 + i), _mm_unpacklo_epi64(t0, t1));
        _mm_storeu_si128((__m128i *)(p1 + i), _mm_unpackhi_epi64(t0, t1));
        _mm_storeu_si128((__m128i *)(p2 + i), _mm_unpacklo_epi64(t2, t3));
        _mm_storeu_si128((__m128i *)(p3 + i), _mm_unpackhi_epi64(t2, t3));
    }
    return i;
}

/* 32 elements a round: split4_ssse3 in both lanes, whose 4-element groups
 * come out as 0 2 4 6 | 1 3 5 7 and are put back in order across lanes. */
__attribute__((target("avx2"))) static size_t split4_avx2(const uint8_t *src, size_t n, int rot,
                                                           uint8_t *p0, uint8_t *p1,
                                                           uint8_t *p2, uint8_t *p3)
{
    const __m256i group = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                           0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i v[4];

        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_si256((const __m256i *)(src + 4 * i + 32 * k));
            if (rot)
                v[k] = _mm256_or_si256(_mm256_slli_epi32(v[k], 1), _mm256_srli_epi32(v[k], 31));
            v[k] = _mm256_shuffle_epi8(v[k], group);
        }
        __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpacklo_epi32(v[2], v[3]);
        __m256i t2 = _mm256_unpackhi_epi32(v[0], v[1]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
        __m256i b[4] = { _mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1),
                         _mm256_unpacklo_epi64(t2, t3), _mm256_unpackhi_epi64(t2, t3) };
        uint8_t *p[4] = { p0, p1, p2, p3 };

        for (int k = 0; k < 4; k++)
            _mm256_storeu_si256((__m256i *)(p[k] + i), _mm256_permutevar8x32_epi32(b[k], order));
    }
    return i;
}

/* 16 elements a round: the planes' bytes interleaved again. */
static size_t join2_sse2(const uint8_t *p0, const uint8_t *p1, size_t n, int rot, uint8_t *dst)
{
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m128i l = _mm_loadu_si128((const __m128i *)(p0 + i));
        __m128i h = _mm_loadu_si128((const __m128i *)(p1 + i));
        __m128i a = _mm_unpacklo_epi8(l, h), b = _mm_unpackhi_epi8(l, h);

        if (rot) {
            a = ROTR16(a);
            b = ROTR16(b);
        }
        _mm_storeu_si128((__m128i *)(dst + 2 * i), a);
        _mm_storeu_si128((__m128i *)(dst + 2 * i + 16), b);
    }
    return i;
}

static size_t join4_sse2(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2,
                         const uint8_t *p3, size_t n, int rot, uint8_t *dst)
{
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m128i b0 = _mm_loadu_si128((const __m128i *)(p0 + i));
        __m128i b1 = _mm_loadu_si128((const __m128i *)(p1 + i));
        __m128i b2 = _mm_loadu_si128((const __m128i *)(p2 + i));
        __m128i b3 = _mm_loadu_si128((const __m128i *)(p3 + i));
        __m128i l01 = _mm_unpacklo_epi8(b0, b1), h01 = _mm_unpackhi_epi8(b0, b1);
        __m128i l23 = _mm_unpacklo_epi8(b2, b3), h23 = _mm_unpackhi_epi8(b2, b3);
        __m128i e[4] = { _mm_unpacklo_epi16(l01, l23), _mm_unpackhi_epi16(l01, l23),
                         _mm_unpacklo_epi16(h01, h23), _mm_unpackhi_epi16(h01, h23) };

        for (int k = 0; k < 4; k++)
            _mm_storeu_si128((__m128i *)(dst + 4 * i + 16 * k), rot ? ROTR32(e[k]) : e[k]);
    }
    return i;
}

/* 32 elements a round: join2_sse2 in both lanes, whose halves come out as
 * 0-7 16-23 | 8-15 24-31 and are put back in order across lanes. */
__attribute__((target("avx2"))) static size_t join2_avx2(const uint8_t *p0, const uint8_t *p1,
                                                          size_t n, int rot, uint8_t *dst)
{
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i l = _mm256_loadu_si256((const __m256i *)(p0 + i));
        __m256i h = _mm256_loadu_si256((const __m256i *)(p1 + i));
        __m256i a = _mm256_unpacklo_epi8(l, h), b = _mm256_unpackhi_epi8(l, h);

        if (rot) {
            a = _mm256_or_si256(_mm256_srli_epi16(a, 1), _mm256_slli_epi16(a, 15));
            b = _mm256_or_si256(_mm256_srli_epi16(b, 1), _mm256_slli_epi16(b, 15));
        }
        _mm256_storeu_si256((__m256i *)(dst + 2 * i), _mm256_permute2x128_si256(a, b, 0x20));
        _mm256_storeu_si256((__m256i *)(dst + 2 * i + 32), _mm256_permute2x128_si256(a, b, 0x31));
    }
    return i;
}

/* 32 elements a round: join4_sse2 in both lanes; e[k] holds elements
 * 4k..4k+3 in its low lane and 16+4k.. in its high one. */
__attribute__((target("avx2"))) static size_t join4_avx2(const uint8_t *p0, const uint8_t *p1,
                                                          const uint8_t *p2, const uint8_t *p3,
                                                          size_t n, int rot, uint8_t *dst)
{
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(p0 + i));
        __m256i b1 = _mm256_loadu_si256((const __m256i *)(p1 + i));
        __m256i b2 = _mm256_loadu_si256((const __m256i *)(p2 + i));
        __m256i b3 = _mm256_loadu_si256((const __m256i *)(p3 + i));
        __m256i l01 = _mm256_unpacklo_epi8(b0, b1), h01 = _mm256_unpackhi_epi8(b0, b1);
        __m256i l23 = _mm256_unpacklo_epi8(b2, b3), h23 = _mm256_unpackhi_epi8(b2, b3);
        __m256i e[4] = { _mm256_unpacklo_epi16(l01, l23), _mm256_unpackhi_epi16(l01, l23),
                         _mm256_unpacklo_epi16(h01, h23), _mm256_unpackhi_epi16(h01, h23) };
        __m256i o[4] = { _mm256_permute2x128_si256(e[0], e[1], 0x20),
                         _mm256_permute2x128_si256(e[2], e[3], 0x20),
                         _mm256_permute2x128_si256(e[0], e[1], 0x31),
                         _mm256_permute2x128_si256(e[2], e[3], 0x31) };

        for (int k = 0; k < 4; k++) {
            if (rot)
                o[k] = _mm256_or_si256(_mm256_srli_epi32(o[k], 1), _mm256_slli_epi32(o[k], 31));
            _mm256_storeu_si256((__m256i *)(dst + 4 * i + 32 * k), o[k]);
        }
    }
    return i;
}
#endif

static void split2(const uint8_t *src, size_t n, int rot, uint8_t *const pl[])
{
    size_t done = 0;

#if defined(__x86_64__)
    if (can(PLANES_AVX2))
        done = split2_avx2(src, n, rot, pl[0], pl[1]);
    else if (can(PLANES_SSE2))
        done = split2_sse2(src, n, rot, pl[0], pl[1]);
#endif
    split2_scalar(src, done, n, rot, pl[0], pl[1]);
}

static void split4(const uint8_t *src, size_t n, int rot, uint8_t *const pl[])
{
    size_t done = 0;

#if defined(__x86_64__)
    if (can(PLANES_AVX2))
        done = split4_avx2(src, n, rot, pl[0], pl[1], pl[2], pl[3]);
    else if (can(PLANES_SSSE3))
        done = split4_ssse3(src, n, rot, pl[0], pl[1], pl[2], pl[3]);
#endif
    split4_scalar(src, done, n, rot, pl[0], pl[1], pl[2], pl[3]);
}

void planes_split(const uint8_t *src, size_t n, unsigned esize, int rot,
                         uint8_t *const pl[])
{
    if (esize == 2)
        return split2(src, n, rot, pl);
    if (esize == 4)
        return split4(src, n, rot, pl);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = le_load(src + i * esize, esize);

        if (rot)
            v = rotl(v, 8 * esize);
        for (unsigned b = 0; b < esize; b++)
            pl[b][i] = (uint8_t)(v >> (8 * b));
    }
}

/* Split so many source bytes at a time when hashing on the way: each slice
 * is hashed just before it is split, so one of the two passes over it reads
 * the cache and the chunk comes from memory once, not twice. */
#define HASH_SLICE (64u * 1024u)

/* planes_split, and the n * esize source bytes into `h` when not NULL. */
void planes_split_hashing(const uint8_t *src, size_t n, unsigned esize, int rot,
                          uint8_t *const pl[], XXH3_state_t *h)
{
    size_t step = HASH_SLICE / esize;

    if (!h)
        return planes_split(src, n, esize, rot, pl);
    for (size_t at = 0; at < n; at += step) {
        size_t k = n - at < step ? n - at : step;
        uint8_t *sp[PLANES_MAX_ESIZE];

        for (unsigned b = 0; b < esize; b++)
            sp[b] = pl[b] + at;
        XXH3_64bits_update(h, src + at * esize, k * esize);
        planes_split(src + at * esize, k, esize, rot, sp);
    }
}

void planes_at(uint8_t *base, size_t n, unsigned esize, uint8_t *pl[])
{
    for (unsigned b = 0; b < esize; b++)
        pl[b] = base + b * n;
}

static void join_planes(const uint8_t *const pl[], size_t n, unsigned esize, int rot,
                        uint8_t *dst)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0;

        for (unsigned b = 0; b < esize; b++)
            v |= (uint64_t)pl[b][i] << (8 * b);
        if (rot)
            v = rotr(v, 8 * esize);
        le_store(dst + i * esize, v, esize);
    }
}

static void join2(const uint8_t *const pl[], size_t n, int rot, uint8_t *dst)
{
    size_t done = 0;

#if defined(__x86_64__)
    if (can(PLANES_AVX2))
        done = join2_avx2(pl[0], pl[1], n, rot, dst);
    else if (can(PLANES_SSE2))
        done = join2_sse2(pl[0], pl[1], n, rot, dst);
#endif
    join2_scalar(pl[0], pl[1], done, n, rot, dst);
}

static void join4(const uint8_t *const pl[], size_t n, int rot, uint8_t *dst)
{
    size_t done = 0;

#if defined(__x86_64__)
    if (can(PLANES_AVX2))
        done = join4_avx2(pl[0], pl[1], pl[2], pl[3], n, rot, dst);
    else if (can(PLANES_SSE2))
        done = join4_sse2(pl[0], pl[1], pl[2], pl[3], n, rot, dst);
#endif
    join4_scalar(pl[0], pl[1], pl[2], pl[3], done, n, rot, dst);
}

void planes_join(const uint8_t *const pl[], size_t n, unsigned esize, int rot, uint8_t *dst)
{
    if (esize == 2)
        join2(pl, n, rot, dst);
    else if (esize == 4)
        join4(pl, n, rot, dst);
    else
        join_planes(pl, n, esize, rot, dst);
}
