/*
 * testdata.h - generators of realistic device-memory contents for codec and
 * image tests: normal-distributed weights as bf16/fp16/fp32/fp64, random
 * bytes, text-like data. Deterministic for a given seed.
 */
#ifndef TCGPU_TESTDATA_H
#define TCGPU_TESTDATA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t td_next(uint64_t *s)
{
    /* xorshift64*: fast, good enough for test data */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static inline double td_normal(uint64_t *s)
{
    double u1 = ((double)(td_next(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(td_next(s) >> 11) / 9007199254740992.0;

    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static inline void td_random(void *dst, size_t len, uint64_t seed)
{
    uint8_t *p = dst;
    uint64_t s = seed | 1;

    for (size_t i = 0; i < len; i += 8) {
        uint64_t v = td_next(&s);

        memcpy(p + i, &v, len - i < 8 ? len - i : 8);
    }
}

static inline uint32_t td_f32_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return u;
}

static inline uint16_t td_bf16(float f)
{
    uint32_t u = td_f32_bits(f);

    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); /* round to nearest even */
}

static inline uint16_t td_fp16(float f)
{
    uint32_t u = td_f32_bits(f), sign = (u >> 16) & 0x8000;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    uint32_t m = u & 0x7fffff;

    if (e <= 0)
        return (uint16_t)(e < -10 ? sign : sign | ((m | 0x800000) >> (14 - e)));
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    return (uint16_t)(sign | (uint32_t)e << 10 | m >> 13);
}

enum td_kind { TD_BF16, TD_FP16, TD_FP32, TD_FP64 };

/* Weights ~ N(0, std) in the given dtype, little-endian; len in bytes (a
 * trailing partial element gets random bytes). */
static inline void td_weights(void *dst, size_t len, enum td_kind k, double std, uint64_t seed)
{
    uint8_t *p = dst;
    uint64_t s = seed | 1;
    size_t es = k == TD_FP64 ? 8 : k == TD_FP32 ? 4 : 2, n = len / es;

    for (size_t i = 0; i < n; i++) {
        double v = td_normal(&s) * std;
        uint16_t h;
        float f = (float)v;

        switch (k) {
        case TD_BF16:
            h = td_bf16(f);
            memcpy(p + 2 * i, &h, 2);
            break;
        case TD_FP16:
            h = td_fp16(f);
            memcpy(p + 2 * i, &h, 2);
            break;
        case TD_FP32: memcpy(p + 4 * i, &f, 4); break;
        case TD_FP64: memcpy(p + 8 * i, &v, 8); break;
        }
    }
    td_random(p + n * es, len - n * es, seed + 7);
}

/* Text-like bytes: words from a small vocabulary (zstd's home ground). */
static inline void td_text(void *dst, size_t len, uint64_t seed)
{
    static const char *const words[] = {
        "the",     "gradient", "of",          "loss", "with",      "respect", "to",
        "weights", "is",       "accumulated", "over", "each",      "micro",   "batch",
        "and",     "then",     "applied",     "by",   "optimizer", "step",    "\n",
    };
    uint8_t *p = dst;
    uint64_t s = seed | 1;
    size_t at = 0;

    while (at < len) {
        const char *w = words[td_next(&s) % (sizeof(words) / sizeof(words[0]))];
        size_t n = strlen(w);

        for (size_t i = 0; i <= n && at < len; i++)
            p[at++] = (uint8_t)(i < n ? w[i] : ' ');
    }
}

#endif
