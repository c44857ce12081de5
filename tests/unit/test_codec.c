/*
 * test_codec.c - the chunk codec: every codec path is taken and round-trips
 * bit-exactly, corrupt input is an error and never a crash, contexts work
 * from several threads, an exponent plane gets a table per 32 KiB where its
 * statistics change that fast, and on the shared bench data byte grouping
 * beats plain zstd on bf16 weights, a plane the sample rates flat still
 * codes a skewed stretch the sample missed; the hashing encoder stores the
 * same bytes and the XXH3 of the raw ones on every path, and so does the
 * hashing decoder.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_frameHeaderSize */
#include <zstd.h>
#include <xxhash.h>

#include "image/codec.h"
#include "image/format.h"
#include "../common/check.h"
#include "testdata.h"

#define MIB (1024u * 1024u)

/* first stored byte of the calling thread's last BYTEGROUP round trip */
static _Thread_local unsigned last_esize;

/* codec_encode_and_hash stores what codec_encode stored (`o`, whose bytes
 * are still in place) and hashes the raw bytes as XXH3_64bits does, on
 * every path: zero, raw, zstd, byte planes hashed slice by slice, tails. */
static int hashed_matches(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dt,
                          const struct codec_out *o)
{
    uint8_t *dst = malloc(codec_bound(len) + 1);
    uint64_t csum = ~XXH3_64bits(src, len);
    struct codec_out h;
    int rc;

    REQUIRE(dst, "malloc");
    rc = codec_encode_and_hash(ctx, src, len, dt, dst, codec_bound(len), &h, &csum);
    REQUIRE(rc == 0, "encode_hashed %zu bytes: %d", len, rc);
    REQUIRE(csum == XXH3_64bits(src, len), "%s: raw checksum %016llx, XXH3 says %016llx",
            codec_name(h.codec), (unsigned long long)csum,
            (unsigned long long)XXH3_64bits(src, len));
    REQUIRE(h.codec == o->codec && h.stored_len == o->stored_len &&
                (h.stored_len == 0 || memcmp(h.data, o->data, h.stored_len) == 0),
            "%s: hashing changed what is stored", codec_name(h.codec));
    REQUIRE(codec_encode_and_hash(ctx, src, len, dt, dst, codec_bound(len), &h, NULL) == -EINVAL,
            "no checksum pointer must be -EINVAL");
    free(dst);
    return 0;
}

/* codec_decode_and_hash writes what codec_decode wrote and hashes it as
 * XXH3_64bits does, on every path (byte planes joined and hashed slice by
 * slice: lengths that end inside a slice, tails). */
static int decoded_hash_matches(struct codec_ctx *ctx, const struct codec_out *o, const void *src,
                                size_t len)
{
    uint8_t *back = malloc(len + 1);
    uint64_t csum = ~XXH3_64bits(src, len);
    int rc;

    REQUIRE(back, "malloc");
    rc = codec_decode_and_hash(ctx, o->codec, o->data, o->stored_len, back, len, &csum);
    REQUIRE(rc == 0, "decode_and_hash %s: %d", codec_name(o->codec), rc);
    REQUIRE(len == 0 || memcmp(back, src, len) == 0, "%s: decode_and_hash wrote other bytes",
            codec_name(o->codec));
    REQUIRE(csum == XXH3_64bits(src, len), "%s: raw checksum %016llx, XXH3 says %016llx",
            codec_name(o->codec), (unsigned long long)csum,
            (unsigned long long)XXH3_64bits(src, len));
    REQUIRE(codec_decode_and_hash(ctx, o->codec, o->data, o->stored_len, back, len, NULL) ==
                -EINVAL, "no checksum pointer must be -EINVAL");
    free(back);
    return 0;
}

/* Encodes, checks the chosen codec (`want` < 0: any), decodes, compares. */
static int roundtrip(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dt,
                     int want, struct codec_out *out_copy)
{
    uint8_t *dst = malloc(codec_bound(len) + 1), *back = malloc(len + 1);
    struct codec_out o;
    int rc;

    REQUIRE(dst && back, "malloc");
    rc = codec_encode(ctx, src, len, dt, dst, codec_bound(len), &o);
    REQUIRE(rc == 0, "encode %zu bytes: %d", len, rc);
    REQUIRE(want < 0 || o.codec == want, "len %zu dtype %s: chose %s, want %s", len,
          codec_dtype_name(dt), codec_name(o.codec), codec_name((unsigned)want));
    REQUIRE(o.stored_len <= len, "stored %zu > raw %zu", o.stored_len, len);
    REQUIRE(hashed_matches(ctx, src, len, dt, &o) == 0, "codec_encode_and_hash, %zu bytes", len);
    if (o.codec == TCGPU_CODEC_RAW)
        REQUIRE(o.data == src && o.stored_len == len, "RAW must point at src, not copy");
    if (o.codec == TCGPU_CODEC_ZERO)
        REQUIRE(o.stored_len == 0, "ZERO stores nothing");
    rc = codec_decode(ctx, o.codec, o.data, o.stored_len, back, len);
    REQUIRE(rc == 0, "decode %s: %d", codec_name(o.codec), rc);
    REQUIRE(len == 0 || memcmp(back, src, len) == 0, "%s round trip differs (len %zu)",
          codec_name(o.codec), len);
    REQUIRE(decoded_hash_matches(ctx, &o, src, len) == 0, "codec_decode_and_hash, %zu bytes",
            len);
    if (o.codec == TCGPU_CODEC_BYTEGROUP)
        last_esize = ((const uint8_t *)o.data)[0];
    if (out_copy)
        *out_copy = o; /* data is dangling: only codec and stored_len are of use */
    free(dst);
    free(back);
    return 0;
}

static int test_zero_and_random(void)
{
    struct codec_ctx *ctx;
    size_t len = 4 * MIB;
    uint8_t *buf = calloc(1, len);

    REQUIRE(buf && codec_ctx_new(&ctx, NULL) == 0, "setup");
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_UNKNOWN, TCGPU_CODEC_ZERO, NULL) == 0, "zeros");
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_BF16, TCGPU_CODEC_ZERO, NULL) == 0, "zeros bf16");
    buf[len - 1] = 1; /* one non-zero byte at the very end is not zero */
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_UNKNOWN, -1, NULL) == 0, "almost zeros");
    REQUIRE(!codec_is_zero(buf, len) && codec_is_zero(buf, len - 1), "codec_is_zero");
    td_random(buf, len, 42);
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_UNKNOWN, TCGPU_CODEC_RAW, NULL) == 0, "random");
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_BF16, TCGPU_CODEC_RAW, NULL) == 0, "random bf16");
    codec_ctx_free(ctx);
    free(buf);
    return 0;
}

/* bf16/fp16/fp32/fp64 weights pick BYTEGROUP with the right element size,
 * with the hint and without it (detected). */
static int test_floats(void)
{
    static const struct {
        enum td_kind k;
        enum tcgpu_dtype dt;
        unsigned es;
    } cases[] = {
        {TD_BF16, TCGPU_DTYPE_BF16, 2},
        {TD_FP16, TCGPU_DTYPE_FP16, 2},
        {TD_FP32, TCGPU_DTYPE_FP32, 4},
        {TD_FP64, TCGPU_DTYPE_FP64, 8},
    };
    struct codec_ctx *ctx;
    size_t len = 4 * MIB;
    uint8_t *buf = malloc(len);
    struct codec_out o;

    REQUIRE(buf && codec_ctx_new(&ctx, NULL) == 0, "setup");
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        td_weights(buf, len, cases[i].k, 0.02, 100 + i);
        REQUIRE(roundtrip(ctx, buf, len, cases[i].dt, TCGPU_CODEC_BYTEGROUP, &o) == 0,
              "case %u hinted", i);
        fprintf(stderr, "  %-5s hinted:   ratio %.3f\n", codec_dtype_name(cases[i].dt),
                (double)o.stored_len / (double)len);
        if (cases[i].es == 8)
            continue; /* 8-byte elements are only grouped when hinted */
        REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_UNKNOWN, TCGPU_CODEC_BYTEGROUP, &o) == 0,
              "case %u detected", i);
        REQUIRE(last_esize == cases[i].es, "case %u: detected esize %u", i, last_esize);
    }
    /* An odd length keeps its tail bytes. */
    td_weights(buf, len, TD_FP32, 0.02, 7);
    REQUIRE(roundtrip(ctx, buf, len - 3, TCGPU_DTYPE_FP32, TCGPU_CODEC_BYTEGROUP, NULL) == 0,
          "fp32 odd length");
    codec_ctx_free(ctx);
    free(buf);
    return 0;
}

static int test_text_and_forced_paths(void)
{
    struct codec_ctx *ctx, *nobg, *nozstd;
    struct codec_params p = {.disable_mask = 1u << TCGPU_CODEC_BYTEGROUP};
    size_t len = 4 * MIB;
    uint8_t *buf = malloc(len);

    REQUIRE(buf && codec_ctx_new(&ctx, NULL) == 0 && codec_ctx_new(&nobg, &p) == 0, "setup");
    p.disable_mask = 1u << TCGPU_CODEC_ZSTD;
    REQUIRE(codec_ctx_new(&nozstd, &p) == 0, "setup");
    td_text(buf, len, 3);
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_UNKNOWN, TCGPU_CODEC_ZSTD, NULL) == 0, "text");
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_U8, TCGPU_CODEC_ZSTD, NULL) == 0, "text u8");
    td_weights(buf, len, TD_BF16, 0.02, 5);
    REQUIRE(roundtrip(nobg, buf, len, TCGPU_DTYPE_BF16, TCGPU_CODEC_ZSTD, NULL) == 0,
          "bf16 with bytegroup disabled");
    REQUIRE(roundtrip(nozstd, buf, len, TCGPU_DTYPE_BF16, TCGPU_CODEC_BYTEGROUP, NULL) == 0,
          "bf16 with zstd disabled");
    td_text(buf, len, 3);
    REQUIRE(roundtrip(nozstd, buf, len, TCGPU_DTYPE_U8, TCGPU_CODEC_RAW, NULL) == 0,
          "u8 text with zstd disabled: nothing left but RAW");
    codec_ctx_free(ctx);
    codec_ctx_free(nobg);
    codec_ctx_free(nozstd);
    free(buf);
    return 0;
}

/* A chunk whose halves differ, and many awkward sizes. */
static int test_mixed_and_sizes(void)
{
    static const size_t sizes[] = {0,   1,   2,    3,    7,     15,        16,     17,         127,
                                   128, 129, 1000, 4097, 65535, 65536 + 3, 262147, 5 * MIB + 1};
    struct codec_ctx *ctx;
    size_t len = 16 * MIB;
    uint8_t *buf = malloc(len);

    REQUIRE(buf && codec_ctx_new(&ctx, NULL) == 0, "setup");
    td_weights(buf, len, TD_BF16, 0.05, 11);
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_BF16, TCGPU_CODEC_BYTEGROUP, NULL) == 0,
          "16 MiB chunk");
    memset(buf, 0, len / 4);
    td_random(buf + len / 2, len / 4, 9);
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_UNKNOWN, -1, NULL) == 0, "mixed chunk");
    for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        td_weights(buf, sizes[i], TD_BF16, 0.02, i);
        REQUIRE(roundtrip(ctx, buf, sizes[i], TCGPU_DTYPE_UNKNOWN, sizes[i] ? -1 : TCGPU_CODEC_ZERO,
                        NULL) == 0,
              "size %zu", sizes[i]);
        REQUIRE(roundtrip(ctx, buf, sizes[i], TCGPU_DTYPE_FP32, -1, NULL) == 0, "size %zu fp32",
              sizes[i]);
    }
    codec_ctx_free(ctx);
    free(buf);
    return 0;
}

/* The byte split and join (vector code on x86-64, scalar tails): every
 * element size and rotation, lengths that leave each vector width a tail. */
static int test_split_tails(void)
{
    static const size_t lens[] = {4 * MIB, 4 * MIB + 1, 4 * MIB - 66, 262144 + 2 * 17 + 1,
                                  262144 + 4 * 15 + 3, 65536 + 62};
    static const enum tcgpu_dtype dts[] = {TCGPU_DTYPE_BF16, TCGPU_DTYPE_FP32, TCGPU_DTYPE_I32,
                                           TCGPU_DTYPE_FP64};
    struct codec_params norot = {.no_rotate = 1};
    struct codec_ctx *ctx, *nr;
    uint8_t *buf = malloc(4 * MIB + 64);

    REQUIRE(buf && codec_ctx_new(&ctx, NULL) == 0 && codec_ctx_new(&nr, &norot) == 0, "setup");
    for (unsigned d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            td_weights(buf, lens[i], dts[d] == TCGPU_DTYPE_BF16 ? TD_BF16 : dts[d] == TCGPU_DTYPE_FP64
                                                                            ? TD_FP64 : TD_FP32,
                       0.02, 40 + i);
            REQUIRE(roundtrip(ctx, buf, lens[i], dts[d], TCGPU_CODEC_BYTEGROUP, NULL) == 0,
                    "%s, %zu bytes", codec_dtype_name(dts[d]), lens[i]);
            REQUIRE(roundtrip(nr, buf, lens[i], dts[d], TCGPU_CODEC_BYTEGROUP, NULL) == 0,
                    "%s, %zu bytes, no rotation", codec_dtype_name(dts[d]), lens[i]);
        }
    }
    codec_ctx_free(ctx);
    codec_ctx_free(nr);
    free(buf);
    return 0;
}

/*
 * A stretch the sample does not see: fp32 noise with 512 KiB between the
 * sample's slices (at 0, 1, 2 and 3 MiB) whose elements keep fewer bits,
 * `mask` of them. The planes that stretch makes skewed are coded, the flat
 * ones stay raw; the stretch's bytes of a coded plane lose a tenth, those
 * of the planes in `quarter` (all zero there, or a sign) shrink to under a
 * quarter. With a tail: the planes after a coded one move down.
 */
static int skewed_stretch(struct codec_ctx *ctx, uint8_t *buf, size_t len, uint32_t mask,
                          unsigned want_zmask, unsigned quarter, const char *what)
{
    size_t from = 5 * MIB / 4 + 4096, n = len / 4, stretch = (512u << 10) / 4;
    uint8_t *dst = malloc(codec_bound(len));
    struct codec_out o;

    REQUIRE(dst, "malloc");
    td_weights(buf, len, TD_FP32, 0.02, 61);
    for (size_t at = from; at < from + 4 * stretch; at += 4) {
        uint32_t v;

        memcpy(&v, buf + at, 4);
        v &= mask;
        memcpy(buf + at, &v, 4);
    }
    REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_FP32, TCGPU_CODEC_BYTEGROUP, NULL) == 0,
            "%s: round trip", what);
    REQUIRE(codec_encode(ctx, buf, len, TCGPU_DTYPE_FP32, dst, codec_bound(len), &o) == 0, "encode");
    const uint8_t *st = o.data;

    REQUIRE(st[2] == want_zmask, "%s: planes coded %#x, want %#x", what, st[2], want_zmask);
    for (unsigned p = 0; p < 4; p++) {
        uint32_t z = st[4 + 4 * p] | (uint32_t)st[5 + 4 * p] << 8 | (uint32_t)st[6 + 4 * p] << 16 |
                     (uint32_t)st[7 + 4 * p] << 24;

        if (quarter & (1u << p))
            REQUIRE(z < n - stretch + stretch / 4, "%s: plane %u stored %u of %zu", what, p, z, n);
        else if (p < 3 && (want_zmask & (1u << p)))
            REQUIRE(z < n - stretch / 10, "%s: plane %u stored %u of %zu", what, p, z, n);
    }
    fprintf(stderr, "  %s: %.4f of raw, planes coded %#x\n", what, (double)o.stored_len / len, st[2]);
    free(dst);
    return 0;
}

static int test_skewed_stretch(void)
{
    struct codec_ctx *ctx;
    size_t len = 4 * MIB + 3;
    uint8_t *buf = malloc(len);

    REQUIRE(buf && codec_ctx_new(&ctx, NULL) == 0, "setup");
    /* Rotated (the sign to bit 0), plane p holds bits 8p-1 .. 8p+6 of the
     * element: 0 the sign and the low byte's, 3 the exponent. Upcast bf16:
     * plane 0 the sign alone, 1 zero, 2 seven random bits of eight. */
    REQUIRE(skewed_stretch(ctx, buf, len, ~0u, 0x8, 0, "noise alone") == 0, "noise");
    REQUIRE(skewed_stretch(ctx, buf, len, 0xffff0000u, 0xf, 0x3, "bf16 upcast to fp32") == 0,
            "bf16");
    REQUIRE(skewed_stretch(ctx, buf, len, 0xffff00ffu, 0xe, 0x2, "second byte zero") == 0, "byte 1");
    /* the low byte's top bit alone: plane 0 the sign alone, 1 and 2 raw and moved down */
    REQUIRE(skewed_stretch(ctx, buf, len, 0xffffff80u, 0x9, 0x1, "low seven bits zero") == 0,
            "low bits");
    codec_ctx_free(ctx);
    free(buf);
    return 0;
}

/* Decoding must fail cleanly: wrong lengths, truncation, flipped bytes,
 * garbage. Run under ASan to see that "cleanly" includes memory. */
static int test_corrupt(void)
{
    struct codec_ctx *ctx;
    size_t len = 1 * MIB;
    uint8_t *src = malloc(len), *enc = malloc(len), *dst = malloc(len + 64), *bad = malloc(len);
    uint64_t s = 77, csum;
    struct codec_out o;
    int rc;

    REQUIRE(src && enc && dst && bad && codec_ctx_new(&ctx, NULL) == 0, "setup");
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            td_weights(src, len, TD_BF16, 0.02, 1);
        else
            td_text(src, len, 1);
        REQUIRE(codec_encode(ctx, src, len, TCGPU_DTYPE_UNKNOWN, enc, len, &o) == 0, "encode");
        REQUIRE(o.codec == (pass ? TCGPU_CODEC_ZSTD : TCGPU_CODEC_BYTEGROUP), "path %s",
              codec_name(o.codec));
        REQUIRE(codec_decode(ctx, o.codec, enc, o.stored_len, dst, len - 1) == -EBADMSG,
              "raw_len too small");
        REQUIRE(codec_decode(ctx, o.codec, enc, o.stored_len, dst, len + 1) == -EBADMSG,
              "raw_len too large");
        for (size_t cut = 0; cut < o.stored_len; cut += 1 + cut / 3) {
            rc = codec_decode(ctx, o.codec, enc, cut, dst, len);
            REQUIRE(rc == -EBADMSG, "%s truncated to %zu: %d", codec_name(o.codec), cut, rc);
            rc = codec_decode_and_hash(ctx, o.codec, enc, cut, dst, len, &csum);
            REQUIRE(rc == -EBADMSG, "%s truncated to %zu, hashing: %d", codec_name(o.codec),
                    cut, rc);
        }
        for (int i = 0; i < 300; i++) {
            memcpy(bad, enc, o.stored_len);
            for (int f = 0; f < 1 + i % 4; f++)
                bad[td_next(&s) % (i % 2 ? 64 : o.stored_len)] ^= (uint8_t)(1 + td_next(&s) % 255);
            rc = codec_decode(ctx, o.codec, bad, o.stored_len, dst, len);
            REQUIRE(rc == 0 || rc == -EBADMSG, "flipped: %d", rc);
            rc = codec_decode_and_hash(ctx, o.codec, bad, o.stored_len, dst, len, &csum);
            REQUIRE(rc == 0 || rc == -EBADMSG, "flipped, hashing: %d", rc);
            REQUIRE(rc != 0 || csum == XXH3_64bits(dst, len), "flipped: the checksum is not "
                    "that of the bytes written");
        }
    }
    for (int i = 0; i < 2000; i++) {
        size_t n = td_next(&s) % 4096, raw = td_next(&s) % 8192;
        unsigned codec = (unsigned)(td_next(&s) % 6);

        td_random(bad, n, td_next(&s));
        if (i % 3 == 0 && n >= 4) { /* plausible bytegroup header, garbage after */
            bad[0] = (uint8_t)(2u << (i % 3));
            bad[1] = (uint8_t)(i & 1);
            bad[3] = 0;
        }
        rc = codec_decode(ctx, codec, bad, n, dst, raw);
        REQUIRE(rc == 0 || rc == -EBADMSG || rc == -EINVAL || rc == -EOPNOTSUPP, "garbage %u: %d",
              codec, rc);
        REQUIRE(rc != 0 || codec == TCGPU_CODEC_RAW || codec == TCGPU_CODEC_ZERO ||
                  codec == TCGPU_CODEC_ZSTD || codec == TCGPU_CODEC_BYTEGROUP,
              "garbage accepted");
    }
    REQUIRE(codec_decode(ctx, TCGPU_CODEC_PARENT, NULL, 0, dst, 16) == -EOPNOTSUPP, "parent");
    REQUIRE(codec_decode(ctx, 99, enc, 4, dst, 16) == -EINVAL, "unknown codec");
    REQUIRE(codec_decode(ctx, TCGPU_CODEC_ZERO, enc, 1, dst, 16) == -EBADMSG, "zero w/ data");
    REQUIRE(codec_decode(ctx, TCGPU_CODEC_RAW, enc, 15, dst, 16) == -EBADMSG, "raw short");
    codec_ctx_free(ctx);
    free(src);
    free(enc);
    free(dst);
    free(bad);
    return 0;
}

struct thr {
    int seed, rc;
};

static void *thread_main(void *arg)
{
    struct thr *t = arg;
    struct codec_ctx *ctx;
    size_t len = 2 * MIB;
    uint8_t *buf = malloc(len);

    t->rc = 1;
    if (!buf || codec_ctx_new(&ctx, NULL))
        return NULL;
    t->rc = 0;
    for (int i = 0; i < 6 && !t->rc; i++) {
        td_weights(buf, len, i % 2 ? TD_FP32 : TD_BF16, 0.02, (uint64_t)(t->seed * 10 + i));
        t->rc = roundtrip(ctx, buf, len, TCGPU_DTYPE_UNKNOWN, TCGPU_CODEC_BYTEGROUP, NULL);
    }
    codec_ctx_free(ctx);
    free(buf);
    return NULL;
}

static int test_threads(void)
{
    pthread_t th[4];
    struct thr t[4];

    for (int i = 0; i < 4; i++) {
        t[i].seed = i;
        REQUIRE(pthread_create(&th[i], NULL, thread_main, &t[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        REQUIRE(t[i].rc == 0, "thread %d", i);
    }
    return 0;
}

static double secs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint8_t *load(const char *dir, const char *name, size_t *len)
{
    char path[8192];
    FILE *f;
    uint8_t *buf = NULL;
    struct stat st;

    snprintf(path, sizeof(path), "%s/bench-data/%s", dir, name);
    if (stat(path, &st) < 0 || !(f = fopen(path, "rb")))
        return NULL;
    buf = malloc((size_t)st.st_size);
    if (buf && fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)st.st_size;
    return buf;
}

/* Stored size of `buf` in 4 MiB chunks with `ctx`; *mbs gets MB/s. */
static size_t stored_size(struct codec_ctx *ctx, const uint8_t *buf, size_t len,
                          enum tcgpu_dtype dt, double *mbs)
{
    size_t chunk = 4 * MIB, total = 0;
    uint8_t *dst = malloc(chunk);
    double t0 = secs();

    for (size_t at = 0; dst && at < len; at += chunk) {
        size_t n = len - at < chunk ? len - at : chunk;
        struct codec_out o;

        if (codec_encode(ctx, buf + at, n, dt, dst, chunk, &o))
            return 0;
        total += o.stored_len;
    }
    *mbs = (double)len / 1e6 / (secs() - t0);
    free(dst);
    return total;
}

/* Realism: on real bf16 weights, byte grouping must beat plain zstd. */
static int test_bench_data(void)
{
    static const struct {
        const char *file;
        enum tcgpu_dtype dt;
    } files[] = {
        {"weights.bf16", TCGPU_DTYPE_BF16},         {"grads.bf16", TCGPU_DTYPE_BF16},
        {"activations.bf16", TCGPU_DTYPE_BF16},     {"weights.fp16", TCGPU_DTYPE_FP16},
        {"weights.fp32", TCGPU_DTYPE_FP32},         {"adam_exp_avg.fp32", TCGPU_DTYPE_FP32},
        {"adam_exp_avg_sq.fp32", TCGPU_DTYPE_FP32},
    };
    const char *env = getenv("TCGPU_SHARED_DIR");
    char dir[4096];
    struct codec_ctx *ctx, *plain;
    struct codec_params p = {.disable_mask = 1u << TCGPU_CODEC_BYTEGROUP};

    if (env)
        snprintf(dir, sizeof(dir), "%s", env);
    else
        snprintf(dir, sizeof(dir), "%s", TCGPU_DEFAULT_SHARED_DIR);
    REQUIRE(codec_ctx_new(&ctx, NULL) == 0 && codec_ctx_new(&plain, &p) == 0, "setup");
    for (unsigned i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        size_t len, bg, z, bgu;
        double bg_mbs, z_mbs, u_mbs;
        uint8_t *buf = load(dir, files[i].file, &len);

        if (!buf) {
            fprintf(stderr, "  %s/bench-data/%s not found: skipped\n", dir, files[i].file);
            codec_ctx_free(ctx);
            codec_ctx_free(plain);
            return T_EXIT_SKIP;
        }
        bg = stored_size(ctx, buf, len, files[i].dt, &bg_mbs);
        bgu = stored_size(ctx, buf, len, TCGPU_DTYPE_UNKNOWN, &u_mbs);
        z = stored_size(plain, buf, len, TCGPU_DTYPE_UNKNOWN, &z_mbs);
        fprintf(stderr,
                "  %-22s bytegroup %.3f (%.0f MB/s)  detected %.3f (%.0f MB/s)  "
                "zstd-1 %.3f (%.0f MB/s)\n",
                files[i].file, (double)bg / (double)len, bg_mbs, (double)bgu / (double)len, u_mbs,
                (double)z / (double)len, z_mbs);
        REQUIRE(bg && z, "encode failed");
        if (files[i].dt == TCGPU_DTYPE_BF16 && strstr(files[i].file, "weights"))
            REQUIRE(bg < z && bgu < z, "%s: bytegroup %zu not below zstd %zu", files[i].file, bg, z);
        free(buf);
    }
    codec_ctx_free(ctx);
    codec_ctx_free(plain);
    return 0;
}

/*
 * An exponent plane's Huffman tables: per 32 KiB of the plane when its
 * statistics change that fast, per 128 KiB (zstd's block) when they do not.
 * bf16 elements: random sign and mantissa, exponents drawn from 4 values
 * that change every 32 Ki elements (2 bits each: 0.625 of raw at best with
 * tables per 32 KiB, 0.6875 with one table per 128 KiB), or from all 8
 * throughout (3 bits either way: more tables only cost headers).
 */
static void bf16_exponent_runs(uint8_t *buf, size_t len, int changing, uint64_t seed)
{
    uint64_t st = seed;

    for (size_t i = 0; i < len / 2; i++) {
        uint64_t r = td_next(&st);
        unsigned base = changing ? 0x70u + 4u * ((i >> 15) & 1u) : 0x70u;
        unsigned exp = base + (unsigned)(r % (changing ? 4u : 8u));
        uint16_t v = (uint16_t)(((r >> 8) & 1u) << 15 | exp << 7 | ((r >> 16) & 0x7fu));

        memcpy(buf + 2 * i, &v, 2);
    }
}

/* The number of blocks in a zstd frame (headers only, as RFC 8878 lays them out). */
static unsigned zstd_blocks(const uint8_t *f, size_t len)
{
    size_t at = ZSTD_frameHeaderSize(f, len);
    unsigned blocks = 0, last = 0;

    while (!ZSTD_isError(at) && !last && at + 3 <= len) {
        uint32_t h = f[at] | (uint32_t)f[at + 1] << 8 | (uint32_t)f[at + 2] << 16;
        unsigned type = (h >> 1) & 3u;

        last = h & 1u;
        at += 3 + (type == 1 ? 1 : h >> 3);     /* an RLE block holds one byte */
        blocks++;
    }
    return blocks;
}

static int test_plane_tables(void)
{
    struct codec_ctx *ctx;
    size_t len = 4 * MIB, plane = len / 2;
    uint8_t *buf = malloc(len), *dst = malloc(len);
    struct codec_out o;

    REQUIRE(buf && dst && codec_ctx_new(&ctx, NULL) == 0, "setup");
    for (int changing = 1; changing >= 0; changing--) {
        const uint8_t *st, *exp_frame;
        uint32_t sizes[2];
        unsigned blocks;

        bf16_exponent_runs(buf, len, changing, 77);
        REQUIRE(roundtrip(ctx, buf, len, TCGPU_DTYPE_BF16, TCGPU_CODEC_BYTEGROUP, NULL) == 0,
                "round trip");
        REQUIRE(codec_encode(ctx, buf, len, TCGPU_DTYPE_BF16, dst, len, &o) == 0 &&
                o.codec == TCGPU_CODEC_BYTEGROUP, "encode");
        st = o.data;
        for (unsigned p = 0; p < 2; p++)   /* the planes' stored sizes, little-endian */
            sizes[p] = st[4 + 4 * p] | (uint32_t)st[5 + 4 * p] << 8 |
                       (uint32_t)st[6 + 4 * p] << 16 | (uint32_t)st[7 + 4 * p] << 24;
        REQUIRE(st[2] == 2u, "only the exponent plane is coded (zmask %u)", st[2]);
        exp_frame = st + TCGPU_BG_HDR_LEN(2) + sizes[0];
        blocks = zstd_blocks(exp_frame, sizes[1]);
        fprintf(stderr, "  exponents %s: %.4f of raw, %u blocks in the exponent plane\n",
                changing ? "changing every 32 KiB" : "steady", (double)o.stored_len / len, blocks);
        if (changing) {
            REQUIRE(blocks == plane / (32u << 10), "changing: %u blocks, want one per 32 KiB",
                    blocks);
            /* below what any coder with one table per 128 KiB could reach (0.6875) */
            REQUIRE((double)o.stored_len / len < 0.64, "changing: %.4f of raw",
                    (double)o.stored_len / len);
        } else {
            REQUIRE(blocks == plane / (128u << 10), "steady: %u blocks, want one per 128 KiB",
                    blocks);
        }
    }
    codec_ctx_free(ctx);
    free(buf);
    free(dst);
    return 0;
}

int main(void)
{
    RUN(test_zero_and_random);
    RUN(test_floats);
    RUN(test_text_and_forced_paths);
    RUN(test_mixed_and_sizes);
    RUN(test_split_tails);
    RUN(test_skewed_stretch);
    RUN(test_plane_tables);
    RUN(test_corrupt);
    RUN(test_threads);
    RUN(test_bench_data);
    return T_EXIT_STATUS();
}
