/*
 * codec.c - chunk encoder and decoder (contracts in codec.h, formats in
 * format.h).
 */
#include "codec.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_compressSequences: literals-only planes */
#include <zstd.h>

#include "common/bigbuf.h"
#include "internal.h"
#include "planes.h"
#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t on the stack */
#include "common/xxh.h"

#define DEFAULT_SAMPLE (64u * 1024u)
#define SAMPLE_SLICES  4u
#define SAMPLE_SHARE   16u          /* the most of a chunk the probes read: 1/16 */
#define MIN_SAMPLE     (16u * 1024u) /* ... but never less than this */
/* Smaller than this, compression cannot pay for its header and its time. */
#define MIN_COMPRESS_LEN 128u

struct codec_ctx {
    struct codec_params p;
    ZSTD_CCtx *cctx;
    ZSTD_CCtx *plane_cctx; /* byte planes as literals only (below) */
    ZSTD_CCtx *match_cctx; /* byte planes whose matches pay (below) */
    ZSTD_DCtx *dctx;
    uint8_t *scratch; /* byte planes of a whole chunk */
    size_t scratch_cap;
    uint8_t *sample; /* gathered sample */
    uint8_t *sample_planes;
    uint8_t *sample_out; /* probe compression output, sample_size bytes */
    ZSTD_Sequence *seqs; /* one block delimiter per 128 KiB of a plane */
    size_t seqs_cap;
};

/* A candidate way of storing the chunk, as the probe rated it. */
struct plan {
    unsigned codec;
    unsigned esize; /* BYTEGROUP */
    unsigned zmask; /* BYTEGROUP: planes worth compressing */
    unsigned mmask; /* BYTEGROUP: of those, planes the match finder shrinks more */
    size_t sample_cost;
};

static const char *const codec_names[TCGPU_CODEC_COUNT] = {
    "zero", "raw", "zstd", "bytegroup", "parent", "patch",
};

static const char *const dtype_names[TCGPU_DTYPE_COUNT] = {
    "unknown", "u8", "bf16", "fp16", "fp32", "fp64", "i32", "i64",
};

const char *codec_name(unsigned codec)
{
    return codec < TCGPU_CODEC_COUNT ? codec_names[codec] : "unknown";
}

const char *codec_dtype_name(unsigned dtype)
{
    return dtype < TCGPU_DTYPE_COUNT ? dtype_names[dtype] : "unknown";
}

unsigned codec_dtype_esize(enum tcgpu_dtype dtype)
{
    switch (dtype) {
    case TCGPU_DTYPE_BF16:
    case TCGPU_DTYPE_FP16: return 2;
    case TCGPU_DTYPE_FP32:
    case TCGPU_DTYPE_I32: return 4;
    case TCGPU_DTYPE_FP64:
    case TCGPU_DTYPE_I64: return 8;
    default: return 0;
    }
}

/* Integers do not have a sign bit next to an exponent: rotating only hurts. */
static int dtype_rotates(enum tcgpu_dtype dtype)
{
    return dtype != TCGPU_DTYPE_I32 && dtype != TCGPU_DTYPE_I64;
}

size_t codec_bound(size_t raw_len)
{
    return raw_len;
}

int codec_is_zero(const void *p, size_t len)
{
    static const uint8_t zeros[16];
    const uint8_t *b = p;

    if (len == 0)
        return 1;
    if (len <= 16)
        return memcmp(b, zeros, len) == 0;
    /* First 16 bytes zero and every byte equal to the one 16 before it:
     * lets libc's vectorised memcmp do the scan. */
    return memcmp(b, zeros, 16) == 0 && memcmp(b, b + 16, len - 16) == 0;
}

void codec_ctx_free(struct codec_ctx *ctx)
{
    if (!ctx)
        return;
    ZSTD_freeCCtx(ctx->cctx);
    ZSTD_freeCCtx(ctx->plane_cctx);
    ZSTD_freeCCtx(ctx->match_cctx);
    ZSTD_freeDCtx(ctx->dctx);
    bigbuf_free(ctx->scratch, ctx->scratch_cap);
    free(ctx->sample);
    free(ctx->sample_planes);
    free(ctx->sample_out);
    free(ctx->seqs);
    free(ctx);
}

/*
 * An exponent plane is low-entropy bytes with few useful long matches: a
 * match finder spends its time on short matches that barely pay. So planes
 * are stored as zstd frames of literals only (ZSTD_compressSequences with a
 * block delimiter per 128 KiB or per 32 KiB, zstd_plane below, and no
 * matches): no match search at all, every block Huffman-coded (or raw when
 * that does not pay), decoded by any zstd. Measured on the bench bf16
 * weights, 128 KiB blocks: 0.6585 of raw at 1.6x zstd -1's speed per
 * CPU-second, against 0.6603 at 1.0x with a minimal match finder (below).
 * Some planes do hold matches (gradients with runs, squared moments): the
 * probe rates both on the sample, and takes matches only when they win by
 * a tenth (probe_bytegroup).
 */
static int plane_params(ZSTD_CCtx *lits, ZSTD_CCtx *match, int level)
{
    size_t r = ZSTD_CCtx_setParameter(lits, ZSTD_c_compressionLevel, level);

    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(lits, ZSTD_c_blockDelimiters, ZSTD_sf_explicitBlockDelimiters);
    /* The longest minimum match and a tiny hash table: the match finder
     * only takes long runs, the rest is left to the literal coder. */
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(match, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(match, ZSTD_c_minMatch, 7);
    if (!ZSTD_isError(r))
        r = ZSTD_CCtx_setParameter(match, ZSTD_c_hashLog, 6);
    return ZSTD_isError(r) ? -EINVAL : 0;
}

int codec_ctx_new(struct codec_ctx **out, const struct codec_params *p)
{
    struct codec_ctx *ctx = calloc(1, sizeof(*ctx));

    if (!ctx)
        return -ENOMEM;
    if (p)
        ctx->p = *p;
    if (ctx->p.zstd_level == 0)
        ctx->p.zstd_level = 1;
    if (ctx->p.zstd_level < ZSTD_minCLevel() || ctx->p.zstd_level > ZSTD_maxCLevel())
        goto inval;
    if (ctx->p.sample_size == 0)
        ctx->p.sample_size = DEFAULT_SAMPLE;
    /* Slices stay element-aligned (multiples of 8) and non-empty. */
    if (ctx->p.sample_size < 8 * SAMPLE_SLICES || ctx->p.sample_size > (16u << 20))
        goto inval;
    ctx->p.sample_size &= ~(size_t)(8 * SAMPLE_SLICES - 1);
    ctx->cctx = ZSTD_createCCtx();
    ctx->plane_cctx = ZSTD_createCCtx();
    ctx->match_cctx = ZSTD_createCCtx();
    ctx->dctx = ZSTD_createDCtx();
    if (ctx->plane_cctx && ctx->match_cctx &&
        plane_params(ctx->plane_cctx, ctx->match_cctx, ctx->p.zstd_level))
        goto inval;
    ctx->sample = malloc(ctx->p.sample_size);
    ctx->sample_planes = malloc(ctx->p.sample_size);
    ctx->sample_out = malloc(ctx->p.sample_size);
    if (!ctx->cctx || !ctx->plane_cctx || !ctx->match_cctx || !ctx->dctx || !ctx->sample || !ctx->sample_planes ||
        !ctx->sample_out)
        goto nomem;
    *out = ctx;
    return 0;
nomem:
    codec_ctx_free(ctx);
    return -ENOMEM;
inval:
    codec_ctx_free(ctx);
    return -EINVAL;
}

static int ensure_scratch(struct codec_ctx *ctx, size_t len)
{
    uint8_t *s;

    if (len <= ctx->scratch_cap)
        return 0;
    /* chunk-sized: mapped, so that it leaves with the context (common/bigbuf.h) */
    s = bigbuf_alloc(len);
    if (!s)
        return -ENOMEM;
    bigbuf_free(ctx->scratch, ctx->scratch_cap);
    ctx->scratch = s;
    ctx->scratch_cap = len;
    return 0;
}

/* ---- encoder ---------------------------------------------------------------- */

/* zstd into at most `cap` bytes; 0 when it does not fit (not worth storing). */
static size_t zstd_into(struct codec_ctx *ctx, void *dst, size_t cap, const void *src, size_t len)
{
    size_t r = ZSTD_compressCCtx(ctx->cctx, dst, cap, src, len, ctx->p.zstd_level);

    return ZSTD_isError(r) ? 0 : r;
}

/*
 * Each zstd block of a plane carries its own Huffman table. Weights change
 * scale from tensor to tensor (and rows within one), so an exponent plane's
 * statistics can change faster than zstd's 128 KiB blocks: tables per 32 KiB
 * then code it shorter (bench weights.bf16: 0.6561 of raw against 0.6585;
 * weights.fp32 0.8281 against 0.8293). Where the plane is steady they only
 * add headers (activations, 32 KiB throughout: 0.6622 against 0.6620), and
 * each costs zstd a table to build. So the choice is made
 * per plane from its byte counts: the entropy with tables per 32 KiB and per
 * 128 KiB, each block charged what zstd spends on it besides the codes. One
 * counting pass over a sixteenth of the bytes; the plane is then coded once.
 * Any zstd decodes either.
 */
#define SMALL_TABLE_BLOCK (32u << 10)
#define BLOCK_OVERHEAD_BITS (8 * 14)  /* block and literals headers, 4-stream jump table */
#define TABLE_BITS_PER_SYMBOL 4       /* a Huffman table's weights, FSE-coded: about 4 bits */

/* Counts every COUNT_STRIDE-th byte (n / COUNT_STRIDE of them): 2048 of a
 * 32 KiB block's bytes give its entropy to about a hundredth of a bit once
 * corrected for the sample's size (block_cost_bits), below the tenths the
 * choice turns on, at a sixteenth of the time of counting them all. */
#define COUNT_STRIDE 16u

static size_t count_bytes(const uint8_t *p, size_t n, uint32_t count[256])
{
    uint32_t c[2][256] = {{0}};    /* two tables: runs of one byte do not serialise */
    size_t i = 0, m = 0;

    for (; i + 2 * COUNT_STRIDE <= n; i += 2 * COUNT_STRIDE, m += 2) {
        c[0][p[i]]++;
        c[1][p[i + COUNT_STRIDE]]++;
    }
    for (; i < n; i += COUNT_STRIDE, m++)
        c[0][p[i]]++;
    for (int v = 0; v < 256; v++)
        count[v] = c[0][v] + c[1][v];
    return m;
}

/* What a block of n bytes costs at best, from the counts of m of them: its
 * entropy, its table, its headers; never more than storing it raw. */
static double block_cost_bits(const uint32_t count[256], size_t m, size_t n)
{
    double bits = 0;
    unsigned symbols = 0;

    for (int v = 0; v < 256; v++) {
        if (count[v]) {
            bits += count[v] * log2((double)m / count[v]);
            symbols++;
        }
    }
    /* Miller-Madow: a sample's entropy falls short by (symbols - 1) / (2 m ln 2) bits a byte */
    bits = (bits + (symbols - 1) / (2 * M_LN2)) * n / m + symbols * TABLE_BITS_PER_SYMBOL;
    return BLOCK_OVERHEAD_BITS + (bits < 8.0 * n ? bits : 8.0 * n);
}

static size_t plane_table_block(const uint8_t *p, size_t len)
{
    double small = 0, large = 0;

    if (len < 2 * SMALL_TABLE_BLOCK)
        return ZSTD_BLOCKSIZE_MAX;
    for (size_t at = 0; at < len; at += ZSTD_BLOCKSIZE_MAX) {
        size_t big_n = len - at < ZSTD_BLOCKSIZE_MAX ? len - at : ZSTD_BLOCKSIZE_MAX;
        uint32_t big[256] = {0}, c[256];
        size_t big_m = 0;

        for (size_t sub = 0; sub < big_n; sub += SMALL_TABLE_BLOCK) {
            size_t n = big_n - sub < SMALL_TABLE_BLOCK ? big_n - sub : SMALL_TABLE_BLOCK;
            size_t m = count_bytes(p + at + sub, n, c);

            small += block_cost_bits(c, m, n);
            for (int v = 0; v < 256; v++)
                big[v] += c[v];
            big_m += m;
        }
        large += block_cost_bits(big, big_m, big_n);
    }
    /* small tables must win by 0.2%: a near tie is not worth the headers */
    return small < large - large / 512 ? SMALL_TABLE_BLOCK : ZSTD_BLOCKSIZE_MAX;
}

/* A plane as one zstd frame of literals only (plane_params), with tables
 * per plane_table_block; 0 when it does not fit in `cap` or cannot be made. */
static size_t zstd_plane(struct codec_ctx *ctx, void *dst, size_t cap, const void *src, size_t len)
{
    size_t block = plane_table_block(src, len);
    size_t nb = (len + block - 1) / block, r;

    if (nb > ctx->seqs_cap) {
        ZSTD_Sequence *s = realloc(ctx->seqs, nb * sizeof(*s));

        if (!s)
            return 0;
        ctx->seqs = s;
        ctx->seqs_cap = nb;
    }
    for (size_t b = 0; b < nb; b++) {
        size_t at = b * block;

        ctx->seqs[b] = (ZSTD_Sequence){
            .litLength = (unsigned)(len - at < block ? len - at : block),
        };
    }
    r = ZSTD_compressSequences(ctx->plane_cctx, dst, cap, ctx->seqs, nb, src, len);
    return ZSTD_isError(r) ? 0 : r;
}

/*
 * The sample (64 KiB of a 4 MiB chunk) rates a plane by its average, so a
 * plane of noise that holds a few skewed stretches is rated flat and stored
 * raw, though those stretches would shrink by half or more: a small tensor
 * of bf16 upcast to fp32 among fp32 noise (its low bytes zero), LayerNorm
 * weights near 1.0. In MiniLM's fp32 weights 9 of a low plane's 174 blocks
 * of 128 KiB are such, 2.8 % of the plane. So a plane the plan leaves raw
 * is looked at through a window of SKEW_WINDOW bytes every SKEW_EVERY, and
 * coded when one of them is skewed; zstd stores the flat blocks raw (its
 * check of a flat block reads 8 KiB of it) and codes the rest.
 *
 * Skewed: the chance that two of the window's bytes are equal is above
 * 2^-7.2, that of 147 equally likely values (a collision entropy below 7.2
 * bits; the Shannon entropy is at least that, so a window that would lose a
 * tenth to a Huffman code is found, up to the window's sampling error).
 * Counting 1.5 % of a plane in stretches the prefetcher likes is lost in the
 * noise of the encode time; counting every 129th byte of it instead cost
 * 5 %, the loads pulled the whole plane through the caches. Planes shorter
 * than a window belong to chunks the sample covers whole.
 */
#define SKEW_WINDOW 1024u
#define SKEW_EVERY (64u << 10)
#define SKEW_VALUES 147u

/* The n >= 2 bytes at p are skewed (above). */
static int window_skewed(const uint8_t *p, size_t n)
{
    uint32_t c[256] = {0};
    uint64_t pairs = 0;

    for (size_t i = 0; i < n; i++)
        c[p[i]]++;
    for (int v = 0; v < 256; v++)
        if (c[v])
            pairs += (uint64_t)c[v] * (c[v] - 1);       /* ordered pairs of equal bytes */
    return pairs * SKEW_VALUES > (uint64_t)n * (n - 1);
}

static int has_skewed_block(const uint8_t *p, size_t len)
{
    if (len < SKEW_WINDOW)
        return 0;
    /* the last window ends at the plane's end: a few bytes are no sample */
    for (size_t at = 0; at < len; at += SKEW_EVERY)
        if (window_skewed(p + (at < len - SKEW_WINDOW ? at : len - SKEW_WINDOW), SKEW_WINDOW))
            return 1;
    return 0;
}

/* zstd_plane for a plane that has_skewed_block; 0 for the others. */
static size_t zstd_plane_if_skewed(struct codec_ctx *ctx, void *dst, size_t cap,
                                   const uint8_t *src, size_t len)
{
    return has_skewed_block(src, len) ? zstd_plane(ctx, dst, cap, src, len) : 0;
}

/* A plane through the minimal match finder (plane_params); 0 as above. */
static size_t zstd_plane_matches(struct codec_ctx *ctx, void *dst, size_t cap, const void *src,
                                 size_t len)
{
    size_t r = ZSTD_compress2(ctx->match_cctx, dst, cap, src, len);

    return ZSTD_isError(r) ? 0 : r;
}

/* A sample worth compressing must lose at least 3%; anything less is noise
 * that costs more time to decode than it saves in bytes. */
static int shrinks(size_t stored, size_t raw)
{
    return stored > 0 && stored < raw - raw / 32;
}

/*
 * How much of a chunk of len bytes the probes read: sample_size, but at
 * most a sixteenth of the chunk down to MIN_SAMPLE. The probes code the
 * sample up to four times (zstd whole, and per plane literals and matches),
 * so a sample as large as the chunk made a PATCH of three 64 KiB blocks
 * encode at a third of a full chunk's speed; an incremental image is made
 * of such. A 4 MiB chunk is rated on the same 64 KiB as before.
 */
static size_t sample_bytes(const struct codec_ctx *ctx, size_t len)
{
    size_t want = len / SAMPLE_SHARE;

    if (want < MIN_SAMPLE)
        want = MIN_SAMPLE;
    if (want > ctx->p.sample_size)
        want = ctx->p.sample_size;
    return want & ~(size_t)(8 * SAMPLE_SLICES - 1);
}

/* Gathers up to sample_bytes(len) from SAMPLE_SLICES places in the chunk so
 * a chunk whose start differs from its middle is rated fairly. */
static const uint8_t *gather_sample(struct codec_ctx *ctx, const uint8_t *src, size_t len,
                                    size_t *slen)
{
    size_t want = sample_bytes(ctx, len), slice = want / SAMPLE_SLICES;

    if (len <= want) {
        *slen = len;
        return src;
    }
    for (unsigned i = 0; i < SAMPLE_SLICES; i++) {
        size_t at = (len / SAMPLE_SLICES * i) & ~(size_t)7;

        memcpy(ctx->sample + i * slice, src + at, slice);
    }
    *slen = slice * SAMPLE_SLICES;
    return ctx->sample;
}

/*
 * Rates BYTEGROUP with `esize` on the sample: fills plan->zmask, mmask and
 * the cost. The match finder must beat literals by a tenth on the sample:
 * the sample flatters it. Of the bench planes for which the sample said
 * matches by 1 % or more, none was more than 0.5 % smaller with matches
 * when the whole plane was coded both ways, and the exponent planes of
 * adam_exp_avg_sq were 1.4-3.6 % larger (MiniLM fp32's first plane 5.6 %):
 * literal tables are chosen per 32 or 128 KiB of the whole plane, the
 * sample has one for its 16 KiB. With a tenth, adam_exp_avg_sq is 0.7813
 * of raw against 0.7825 and encodes at 1.19x zstd -1's speed per
 * CPU-second against 0.96x; adam_exp_avg is 0.8251 against 0.8249.
 */
static void probe_bytegroup(struct codec_ctx *ctx, const uint8_t *s, size_t slen, unsigned esize,
                            int rot, struct plan *plan)
{
    size_t n = slen / esize, cost = TCGPU_BG_HDR_LEN(esize) + slen % esize;

    uint8_t *pl[PLANES_MAX_ESIZE];

    planes_at(ctx->sample_planes, n, esize, pl);
    planes_split(s, n, esize, rot, pl);
    plan->codec = TCGPU_CODEC_BYTEGROUP;
    plan->esize = esize;
    plan->zmask = plan->mmask = 0;
    for (unsigned p = 0; p < esize; p++) {
        const uint8_t *plane = ctx->sample_planes + p * n;
        size_t z = zstd_plane(ctx, ctx->sample_out, n, plane, n);
        size_t m = zstd_plane_matches(ctx, ctx->sample_out, n, plane, n);

        if (m && (!z || m < z - z / 10)) {
            plan->mmask |= 1u << p;
            z = m;
        }
        if (shrinks(z, n)) {
            plan->zmask |= 1u << p;
            cost += z;
        } else {
            cost += n;
        }
    }
    plan->sample_cost = cost;
}

static struct plan choose_plan(struct codec_ctx *ctx, const uint8_t *src, size_t len,
                               enum tcgpu_dtype dtype)
{
    struct plan best = {.codec = TCGPU_CODEC_RAW}, cand;
    unsigned esizes[2], nes = 0, hinted = codec_dtype_esize(dtype);
    size_t slen;
    const uint8_t *s = gather_sample(ctx, src, len, &slen);

    best.sample_cost = slen;
    if (!(ctx->p.disable_mask & (1u << TCGPU_CODEC_ZSTD))) {
        size_t z = zstd_into(ctx, ctx->sample_out, slen, s, slen);

        if (z && z < best.sample_cost)
            best = (struct plan){.codec = TCGPU_CODEC_ZSTD, .sample_cost = z};
    }
    if (hinted)
        esizes[nes++] = hinted;
    else if (dtype == TCGPU_DTYPE_UNKNOWN)
        esizes[nes++] = 2, esizes[nes++] = 4;
    if (ctx->p.disable_mask & (1u << TCGPU_CODEC_BYTEGROUP))
        nes = 0;
    for (unsigned i = 0; i < nes; i++) {
        if (slen < esizes[i] * 16)
            continue;
        probe_bytegroup(ctx, s, slen, esizes[i], !ctx->p.no_rotate && dtype_rotates(dtype), &cand);
        if (cand.zmask && cand.sample_cost < best.sample_cost)
            best = cand;
    }
    if (!shrinks(best.sample_cost, slen))
        best.codec = TCGPU_CODEC_RAW;
    return best;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    le_store(p, v, 4);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)le_load(p, 4);
}

/* Plane p of the chunk as `plan` says (matches or literals only) into at
 * most cap bytes; 0 when the plan stores it as it is, or coding does not fit. */
static size_t code_plane(struct codec_ctx *ctx, const struct plan *plan, unsigned p, void *dst,
                         size_t cap, const uint8_t *plane, size_t n)
{
    if (!(plan->zmask & (1u << p)))
        return 0;
    if (plan->mmask & (1u << p))
        return zstd_plane_matches(ctx, dst, cap, plane, n);
    return zstd_plane(ctx, dst, cap, plane, n);
}

/*
 * A plane split straight into dst, one the plan stores raw, that holds
 * skewed stretches after all (zstd_plane_if_skewed): coded into `out`, a
 * plane's room in the scratch, then copied down to `to`, where the planes
 * before it end (zstd may not read and write the same bytes). Returns its
 * coded length, or 0 when it stays as it is.
 */
static size_t code_lead_plane(struct codec_ctx *ctx, const uint8_t *plane, size_t n, uint8_t *to,
                              size_t room, uint8_t *out)
{
    size_t z = zstd_plane_if_skewed(ctx, out, room < n ? room : n - 1, plane, n);

    if (z)
        memcpy(to, out, z);
    return z;
}

/* Stores the chunk as byte planes per `plan`; returns the stored length or 0
 * when that would not be smaller than the raw bytes. */
static size_t encode_bytegroup(struct codec_ctx *ctx, const uint8_t *src, size_t len,
                               const struct plan *plan, int rot, uint8_t *dst, size_t cap,
                               XXH3_state_t *h, int *hashed)
{
    unsigned es = plan->esize, zmask = 0, lead = 0;
    size_t n = len / es, tail = len % es, pos = TCGPU_BG_HDR_LEN(es);
    uint8_t *pl[PLANES_MAX_ESIZE];

    if (cap > len - 1)
        cap = len - 1; /* must beat RAW */
    /* The planes before the first one worth compressing are stored as they
     * are, at places known now: split straight into dst, not copied there. */
    while (lead < es && !(plan->zmask & (1u << lead)))
        lead++;
    if (lead == es || pos + lead * n + tail >= cap)
        return 0;
    planes_at(ctx->scratch, n, es, pl);
    for (unsigned p = 0; p < lead; p++)
        pl[p] = dst + pos + p * n;
    planes_split_hashing(src, n, es, rot, pl, h);
    if (h) {
        XXH3_64bits_update(h, src + n * es, tail);
        *hashed = 1;   /* whatever is stored now: the raw bytes are hashed */
    }
    for (unsigned p = 0; p < es; p++) {
        size_t room = cap - pos - tail, z;

        if (p < lead && (z = code_lead_plane(ctx, pl[p], n, dst + pos, room,
                                             ctx->scratch + p * n))) {
            zmask |= 1u << p;
        } else if (p < lead) {
            z = n;                  /* split in place already; moved down behind a coded plane */
            if (dst + pos != pl[p])
                memmove(dst + pos, pl[p], n);
        } else if ((z = code_plane(ctx, plan, p, dst + pos, room < n ? room : n - 1, pl[p], n))) {
            zmask |= 1u << p;
        } else if (!(plan->zmask & (1u << p)) &&
                   (z = zstd_plane_if_skewed(ctx, dst + pos, room < n ? room : n - 1, pl[p], n))) {
            zmask |= 1u << p;
        } else if (n <= room) {
            memcpy(dst + pos, pl[p], n);        /* did not shrink: as it is */
            z = n;
        } else {
            return 0;
        }
        put_u32(dst + 4 + 4 * p, (uint32_t)z);
        pos += z;
    }
    if (!zmask)
        return 0;
    memcpy(dst + pos, src + n * es, tail);
    dst[0] = (uint8_t)es;
    dst[1] = rot ? TCGPU_BG_ROTATE : 0;
    dst[2] = (uint8_t)zmask;
    dst[3] = 0;
    return pos + tail;
}

/* codec_encode; with `h`, the raw bytes go into it on the way when the
 * chosen codec reads them all (*hashed set), else *hashed is left alone. */
static int encode_chunk(struct codec_ctx *ctx, const void *src, size_t len,
                        enum tcgpu_dtype dtype, void *dst, size_t dst_cap, struct codec_out *out,
                        XXH3_state_t *h, int *hashed)
{
    struct plan plan;
    size_t stored = 0;
    int rot, rc;

    if (!ctx || !out || (len && !src) || len > TCGPU_IMG_MAX_CHUNK || dst_cap < codec_bound(len) ||
        (unsigned)dtype >= TCGPU_DTYPE_COUNT)
        return -EINVAL;
    *out = (struct codec_out){.codec = TCGPU_CODEC_ZERO};
    if (codec_is_zero(src, len))
        return 0;
    *out = (struct codec_out){.codec = TCGPU_CODEC_RAW, .stored_len = len, .data = src};
    if (len < MIN_COMPRESS_LEN)
        return 0;
    plan = choose_plan(ctx, src, len, dtype);
    rot = !ctx->p.no_rotate && dtype_rotates(dtype);
    if (plan.codec == TCGPU_CODEC_ZSTD) {
        stored = zstd_into(ctx, dst, len - 1, src, len);
    } else if (plan.codec == TCGPU_CODEC_BYTEGROUP) {
        rc = ensure_scratch(ctx, len);
        if (rc)
            return rc;
        stored = encode_bytegroup(ctx, src, len, &plan, rot, dst, dst_cap, h, hashed);
    }
    if (stored)
        *out = (struct codec_out){.codec = (uint8_t)plan.codec, .stored_len = stored, .data = dst};
    return 0;
}

int codec_encode(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                 void *dst, size_t dst_cap, struct codec_out *out)
{
    return encode_chunk(ctx, src, len, dtype, dst, dst_cap, out, NULL, NULL);
}

int codec_encode_and_hash(struct codec_ctx *ctx, const void *src, size_t len,
                          enum tcgpu_dtype dtype, void *dst, size_t dst_cap,
                          struct codec_out *out, uint64_t *raw_csum)
{
    XXH3_state_t h;
    int hashed = 0, rc;

    if (!raw_csum || XXH3_64bits_reset(&h) != XXH_OK)
        return -EINVAL;
    rc = encode_chunk(ctx, src, len, dtype, dst, dst_cap, out, &h, &hashed);
    if (rc == 0)
        *raw_csum = hashed ? XXH3_64bits_digest(&h) : XXH3_64bits(src, len);
    return rc;
}

/* ---- decoder ---------------------------------------------------------------- */

static int zstd_exact(struct codec_ctx *ctx, void *dst, size_t raw_len, const void *src,
                      size_t stored_len)
{
    size_t r;

    if (stored_len == 0)
        return -EBADMSG;
    r = ZSTD_decompressDCtx(ctx->dctx, dst, raw_len, src, stored_len);
    if (ZSTD_isError(r) || r != raw_len)
        return -EBADMSG;
    return 0;
}

/* Elements joined and hashed at a time: the slice's planes and its joined
 * bytes stay in the core's L2 between the join and the hash. */
#define JOIN_SLICE (32u * 1024u)

/*
 * The byte planes back into dst: the coded ones are decoded whole into the
 * scratch, the stored ones read where they lie in src (not copied); then
 * they are joined a slice at a time, each slice hashed into h (when not
 * NULL) right after its join, from the cache: the raw bytes are not read
 * back from memory in a pass of their own. Decoding a plane whole rather
 * than block by block alongside the others (zstd's bufferless API) keeps
 * zstd's one-shot decoder, which places the literals in the output: block
 * by block was 5-10 % slower per CPU-second on the bench files.
 */
static int decode_bytegroup(struct codec_ctx *ctx, const uint8_t *src, size_t stored_len,
                            uint8_t *dst, size_t raw_len, XXH3_state_t *h)
{
    const uint8_t *pl[PLANES_MAX_ESIZE];
    unsigned es, flags, zmask;
    size_t n, tail, pos, total;
    int rc;

    if (stored_len < 4)
        return -EBADMSG;
    es = src[0], flags = src[1], zmask = src[2];
    if ((es != 2 && es != 4 && es != 8) || (flags & ~TCGPU_BG_ROTATE) || src[3] ||
        zmask >= (1u << es) || stored_len < TCGPU_BG_HDR_LEN(es) || raw_len < es)
        return -EBADMSG;
    n = raw_len / es, tail = raw_len % es, pos = TCGPU_BG_HDR_LEN(es);
    total = pos + tail;
    for (unsigned p = 0; p < es; p++)
        total += get_u32(src + 4 + 4 * p); /* <= 8 * 4 GiB: no overflow in 64 bits */
    if (total != stored_len)
        return -EBADMSG;
    if ((rc = ensure_scratch(ctx, raw_len)) != 0)
        return rc;
    for (unsigned p = 0; p < es; p++) {
        size_t z = get_u32(src + 4 + 4 * p);

        pl[p] = ctx->scratch + p * n;
        if (zmask & (1u << p))
            rc = zstd_exact(ctx, ctx->scratch + p * n, n, src + pos, z);
        else if (z == n)
            pl[p] = src + pos;
        else
            rc = -EBADMSG;
        if (rc)
            return rc;
        pos += z;
    }
    for (size_t at = 0; at < n; at += JOIN_SLICE) {
        size_t k = n - at < JOIN_SLICE ? n - at : JOIN_SLICE;
        const uint8_t *sl[PLANES_MAX_ESIZE];

        for (unsigned p = 0; p < es; p++)
            sl[p] = pl[p] + at;
        planes_join(sl, k, es, flags & TCGPU_BG_ROTATE, dst + at * es);
        if (h)
            XXH3_64bits_update(h, dst + at * es, k * es);
    }
    memcpy(dst + n * es, src + pos, tail);
    if (h)
        XXH3_64bits_update(h, dst + n * es, tail);
    return 0;
}

/* codec_decode; with h, the raw bytes written go into it: byte planes a
 * slice at a time as they are joined, the other codecs' whole after. */
static int decode_chunk(struct codec_ctx *ctx, unsigned codec, const void *src, size_t stored_len,
                        void *dst, size_t raw_len, XXH3_state_t *h)
{
    int rc = 0;

    if (!ctx || (raw_len && !dst) || (stored_len && !src) || raw_len > TCGPU_IMG_MAX_CHUNK)
        return -EINVAL;
    switch (codec) {
    case TCGPU_CODEC_ZERO:
        if (stored_len)
            return -EBADMSG;
        if (raw_len)
            memset(dst, 0, raw_len);
        break;
    case TCGPU_CODEC_RAW:
        if (stored_len != raw_len)
            return -EBADMSG;
        if (raw_len)
            memcpy(dst, src, raw_len);
        break;
    case TCGPU_CODEC_ZSTD: rc = zstd_exact(ctx, dst, raw_len, src, stored_len); break;
    case TCGPU_CODEC_BYTEGROUP: return decode_bytegroup(ctx, src, stored_len, dst, raw_len, h);
    case TCGPU_CODEC_PARENT:
    case TCGPU_CODEC_PATCH: return -EOPNOTSUPP;    /* need the parent's bytes */
    default: return -EINVAL;
    }
    if (rc == 0 && h)
        XXH3_64bits_update(h, dst, raw_len);
    return rc;
}

int codec_decode(struct codec_ctx *ctx, unsigned codec, const void *src, size_t stored_len,
                 void *dst, size_t raw_len)
{
    return decode_chunk(ctx, codec, src, stored_len, dst, raw_len, NULL);
}

int codec_decode_and_hash(struct codec_ctx *ctx, unsigned codec, const void *src,
                          size_t stored_len, void *dst, size_t raw_len, uint64_t *raw_csum)
{
    XXH3_state_t h;
    int rc;

    if (!raw_csum || XXH3_64bits_reset(&h) != XXH_OK)
        return -EINVAL;
    rc = decode_chunk(ctx, codec, src, stored_len, dst, raw_len, &h);
    if (rc == 0)
        *raw_csum = XXH3_64bits_digest(&h);
    return rc;
}
