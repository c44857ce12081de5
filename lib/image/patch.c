/*
 * patch.c - PATCH chunks: a chunk as its base (the parent image's chunk at
 * the same position) with some blocks replaced, their new bytes or their
 * XOR with the base's stored with an inner codec. Payload layout in
 * format.h; contracts in codec.h; docs/image-format.md ("Incremental
 * images") explains when the engine makes them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "internal.h"
#include "common/xxh.h"

/* dst = a ^ b over n bytes, eight at a time (the compiler vectorises it). */
static void xor_bytes(uint8_t *dst, const uint8_t *a, const uint8_t *b, size_t n)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;

        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        x ^= y;
        memcpy(dst + i, &x, 8);
    }
    for (; i < n; i++)
        dst[i] = a[i] ^ b[i];
}

static size_t block_len(uint32_t idx, uint32_t bs, size_t raw_len)
{
    size_t at = (size_t)idx * bs;

    return raw_len - at < bs ? raw_len - at : bs;
}

static int block_size_ok(uint32_t bs)
{
    return bs >= TCGPU_PATCH_MIN_BLOCK && bs <= TCGPU_PATCH_MAX_BLOCK && !(bs & (bs - 1));
}

size_t codec_patch_bound(uint32_t k, size_t blocks_len)
{
    return TCGPU_PATCH_HDR_LEN + 12u * (size_t)k + codec_bound(blocks_len);
}

int codec_patch_encode(struct codec_ctx *ctx, const struct codec_patch *pt, enum tcgpu_dtype dtype,
                       void *dst, size_t cap, size_t *stored_len, uint64_t *raw_csum)
{
    uint8_t *d = dst, *meta;
    const uint8_t *data = pt->blocks;
    size_t len = 0, meta_len, at;
    struct codec_out o;
    int rc;

    if (!pt->k || !block_size_ok(pt->block_size) || !pt->blocks ||
        (pt->base && !pt->scratch))
        return -EINVAL;
    for (uint32_t i = 0; i < pt->k; i++) {
        if ((size_t)pt->idx[i] * pt->block_size >= pt->raw_len || (i && pt->idx[i] <= pt->idx[i - 1]))
            return -EINVAL;
        len += block_len(pt->idx[i], pt->block_size, pt->raw_len);
    }
    meta_len = 12u * (size_t)pt->k;
    if (cap < TCGPU_PATCH_HDR_LEN + meta_len + codec_bound(len))
        return -ENOSPC;
    meta = d + TCGPU_PATCH_HDR_LEN;
    at = 0;
    for (uint32_t i = 0; i < pt->k; i++) {
        size_t n = block_len(pt->idx[i], pt->block_size, pt->raw_len);

        le_store(meta + 4 * i, pt->idx[i], 4);
        le_store(meta + 4 * pt->k + 8 * i, XXH3_64bits(pt->blocks + at, n), 8);
        if (pt->base) {           /* XOR with the base's bytes of the same block */
            const uint8_t *b = pt->base + (size_t)pt->idx[i] * pt->block_size;

            xor_bytes(pt->scratch + at, pt->blocks + at, b, n);
        }
        at += n;
    }
    if (pt->base)
        data = pt->scratch;
    rc = codec_encode(ctx, data, len, dtype, d + TCGPU_PATCH_HDR_LEN + meta_len,
                      cap - TCGPU_PATCH_HDR_LEN - meta_len, &o);
    if (rc)
        return rc;
    if (o.codec == TCGPU_CODEC_RAW)
        memcpy(d + TCGPU_PATCH_HDR_LEN + meta_len, o.data, o.stored_len);
    le_store(d, pt->block_size, 4);
    le_store(d + 4, pt->k, 4);
    d[8] = pt->base ? TCGPU_PATCH_XOR : TCGPU_PATCH_NEW;
    d[9] = o.codec;
    le_store(d + 10, 0, 2);
    le_store(d + 12, o.stored_len, 4);
    le_store(d + 16, pt->base_csum, 8);
    *stored_len = TCGPU_PATCH_HDR_LEN + meta_len + o.stored_len;
    *raw_csum = XXH3_64bits(d + 16, 8 + meta_len);
    return 0;
}

int codec_patch_base_csum(const void *stored, size_t stored_len, uint64_t *base_csum)
{
    if (stored_len < TCGPU_PATCH_HDR_LEN)
        return -EBADMSG;
    *base_csum = le_load((const uint8_t *)stored + 16, 8);
    return 0;
}

/* Checks the header and the block list against the chunk; fills the sizes. */
static int parse_header(const uint8_t *s, size_t stored_len, size_t raw_len, uint64_t raw_csum,
                        uint32_t *bs, uint32_t *k, size_t *blocks_len)
{
    uint32_t nblocks, inner;
    size_t meta;

    if (stored_len < TCGPU_PATCH_HDR_LEN)
        return -EBADMSG;
    *bs = (uint32_t)le_load(s, 4);
    *k = (uint32_t)le_load(s + 4, 4);
    inner = (uint32_t)le_load(s + 12, 4);
    if (!block_size_ok(*bs) || s[8] > TCGPU_PATCH_XOR || le_load(s + 10, 2) ||
        (s[9] != TCGPU_CODEC_ZERO && s[9] != TCGPU_CODEC_RAW && s[9] != TCGPU_CODEC_ZSTD &&
         s[9] != TCGPU_CODEC_BYTEGROUP))
        return -EBADMSG;
    nblocks = (uint32_t)((raw_len + *bs - 1) / *bs);
    meta = 12u * (size_t)*k;
    if (!*k || *k > nblocks || stored_len - TCGPU_PATCH_HDR_LEN < meta ||
        stored_len - TCGPU_PATCH_HDR_LEN - meta != inner ||
        XXH3_64bits(s + 16, 8 + meta) != raw_csum)
        return -EBADMSG;
    *blocks_len = 0;
    for (uint32_t i = 0; i < *k; i++) {
        uint32_t idx = (uint32_t)le_load(s + TCGPU_PATCH_HDR_LEN + 4 * i, 4);

        if (idx >= nblocks || (i && idx <= le_load(s + TCGPU_PATCH_HDR_LEN + 4 * (i - 1), 4)))
            return -EBADMSG;
        *blocks_len += block_len(idx, *bs, raw_len);
    }
    return 0;
}

int codec_patch_apply(struct codec_ctx *ctx, const void *stored, size_t stored_len, void *dst,
                      size_t raw_len, uint64_t raw_csum)
{
    const uint8_t *s = stored, *meta = s + TCGPU_PATCH_HDR_LEN;
    uint8_t *d = dst, *blocks;
    size_t len, at = 0;
    uint32_t bs, k;
    int rc = parse_header(s, stored_len, raw_len, raw_csum, &bs, &k, &len);

    if (rc)
        return rc;
    if (!(blocks = malloc(len ? len : 1)))
        return -ENOMEM;
    rc = codec_decode(ctx, s[9], meta + 12u * (size_t)k, le_load(s + 12, 4), blocks, len);
    for (uint32_t i = 0; i < k && rc == 0; i++) {
        uint32_t idx = (uint32_t)le_load(meta + 4 * i, 4);
        size_t n = block_len(idx, bs, raw_len);
        uint8_t *b = d + (size_t)idx * bs;

        if (s[8] == TCGPU_PATCH_XOR)
            xor_bytes(b, b, blocks + at, n);
        else
            memcpy(b, blocks + at, n);
        if (XXH3_64bits(b, n) != le_load(meta + 4 * k + 8 * i, 8))
            rc = -EBADMSG;
        at += n;
    }
    free(blocks);
    return rc;
}
