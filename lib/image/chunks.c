/*
 * chunks.c - the engine's chunk sink and source (chunks.h), over the image
 * writer and reader.
 */
#include <errno.h>
#include <stdlib.h>

#include "chunks.h"
#include "image.h"
#include "common/xxh.h"

int chunk_encode(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                 const struct image_chunk *parent, void *dst, size_t dst_cap,
                 struct image_chunk *c, const void **stored)
{
    if (!parent)
        return image_chunk_encode(ctx, src, len, dtype, dst, dst_cap, c, stored);
    /* Hashed before encoding: an unchanged chunk is not encoded at all. */
    return chunk_encode_hashed(ctx, src, len, dtype, parent, XXH3_64bits(src, len), dst, dst_cap,
                               c, stored);
}

int chunk_encode_hashed(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                        const struct image_chunk *parent, uint64_t raw_csum, void *dst,
                        size_t dst_cap, struct image_chunk *c, const void **stored)
{
    if (parent && raw_csum == parent->raw_csum) {
        chunk_set_parent(c, parent);
        *stored = NULL;
        return 0;
    }
    return image_chunk_encode_hashed(ctx, src, len, dtype, raw_csum, dst, dst_cap, c, stored);
}

int chunk_encode_patch(struct codec_ctx *ctx, struct codec_patch *pt, enum tcgpu_dtype dtype,
                       const struct image_chunk *parent, void *dst, size_t cap,
                       struct image_chunk *c, const void **stored)
{
    size_t len;
    uint64_t raw_csum;
    int rc;

    pt->base_csum = parent->raw_csum;
    rc = codec_patch_encode(ctx, pt, dtype, dst, cap, &len, &raw_csum);
    if (rc)
        return rc;
    c->codec = TCGPU_CODEC_PATCH;
    c->raw_len = (uint32_t)pt->raw_len;
    c->stored_len = (uint32_t)len;
    c->raw_csum = raw_csum;
    c->stored_csum = XXH3_64bits(dst, len);
    *stored = dst;
    return 0;
}

void chunk_set_zero(struct image_chunk *c, size_t len, uint64_t raw_csum)
{
    c->codec = TCGPU_CODEC_ZERO;
    c->raw_len = (uint32_t)len;
    c->raw_csum = raw_csum;
    c->stored_csum = XXH3_64bits(NULL, 0);
}

void chunk_set_parent(struct image_chunk *c, const struct image_chunk *parent)
{
    image_chunk_parent(c, parent->raw_len, parent->raw_csum);
}

void chunk_sink_init(struct chunk_sink *s, struct image_writer *w, const struct image *parent)
{
    s->writer = w;
    s->parent = parent;
}

const struct image_chunk *chunk_sink_parent(const struct chunk_sink *s, uint64_t alloc_id,
                                            uint64_t offset, size_t len)
{
    const struct image_chunk *c;
    size_t idx;

    if (!s->parent || !image_find_chunk(s->parent, alloc_id, offset, &idx))
        return NULL;
    c = image_chunk_at(s->parent, idx);
    return c && c->raw_len == len ? c : NULL;
}

int chunk_sink_parent_has_dev_hash(const struct chunk_sink *s)
{
    for (size_t i = 0; s->parent && i < image_chunk_count(s->parent); i++)
        if (image_chunk_at(s->parent, i)->has_dev_hash)
            return 1;
    return 0;
}

int chunk_sink_add_ref(struct chunk_sink *s, const struct image_chunk *c, void *stored,
                       size_t room, uint32_t block_size, const uint64_t *hashes, uint64_t *ticket)
{
    return image_writer_add_encoded_ref(s->writer, c, stored, room, block_size, hashes, ticket);
}

int chunk_sink_wait(struct chunk_sink *s, uint64_t ticket)
{
    return image_writer_wait(s->writer, ticket);
}

/* The parent's index of a chunk chunk_sink_parent returned. */
static size_t parent_index(const struct chunk_sink *s, const struct image_chunk *parent)
{
    return (size_t)(parent - image_chunk_at(s->parent, 0));
}

const uint64_t *chunk_sink_parent_blocks(const struct chunk_sink *s,
                                         const struct image_chunk *parent, uint32_t *n,
                                         uint32_t *block_size)
{
    if (!s->parent || !parent)
        return NULL;
    return image_chunk_blocks(s->parent, parent_index(s, parent), n, block_size);
}

int chunk_sink_parent_has_blocks(const struct chunk_sink *s, uint32_t block_size)
{
    uint32_t n, bs;

    for (size_t i = 0; s->parent && i < image_chunk_count(s->parent); i++)
        if (image_chunk_blocks(s->parent, i, &n, &bs))
            return bs == block_size;
    return 0;
}

int chunk_sink_parent_decode(const struct chunk_sink *s, const struct image_chunk *parent,
                             struct codec_ctx *ctx, void *dst, char *errbuf, size_t errlen)
{
    size_t i = parent_index(s, parent);
    uint32_t len;
    uint8_t *buf;
    int rc;

    image_chunk_resolved(s->parent, i, NULL, &len);
    if (!(buf = malloc(len ? len : 1)))
        return -ENOMEM;
    rc = image_read_stored(s->parent, i, buf, errbuf, errlen);
    if (rc == 0)
        rc = image_decode_chunk(s->parent, i, ctx, buf, dst, errbuf, errlen);
    free(buf);
    return rc;
}

const char *chunk_sink_error(const struct chunk_sink *s)
{
    return image_writer_error(s->writer);
}

void chunk_source_init(struct chunk_source *s, const struct image *img)
{
    s->img = img;
    s->read_flags = 0;
}

void chunk_source_init_verified(struct chunk_source *s, const struct image *img)
{
    s->img = img;
    s->read_flags = IMAGE_READ_UNCHECKED;
}

size_t chunk_source_count(const struct chunk_source *s)
{
    return image_chunk_count(s->img);
}

const struct image_chunk *chunk_source_at(const struct chunk_source *s, size_t i)
{
    return image_chunk_at(s->img, i);
}

void chunk_source_resolved(const struct chunk_source *s, size_t i, unsigned *codec,
                           uint32_t *stored_len)
{
    image_chunk_resolved(s->img, i, codec, stored_len);
}

int chunk_source_read(const struct chunk_source *s, size_t i, void *buf, char *errbuf,
                      size_t errlen)
{
    return image_read_stored_flags(s->img, i, buf, s->read_flags, errbuf, errlen);
}

int chunk_source_decode(const struct chunk_source *s, size_t i, struct codec_ctx *ctx,
                        const void *stored, void *dst, char *errbuf, size_t errlen)
{
    return image_decode_chunk(s->img, i, ctx, stored, dst, errbuf, errlen);
}
