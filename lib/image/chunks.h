/*
 * chunks.h - the engine's face on images: a chunk *sink* that a drain
 * writes its chunks to (and asks for the parent's chunk at a position), and
 * a chunk *source* that a refill reads them from. The engine includes this
 * header and no other of this folder; the snapshot code, which opens the
 * images, builds the face over an image writer (and its parent) or an image
 * reader and hands it down (docs/engine.md).
 *
 * A sink or a source is a small value the caller fills with
 * chunk_sink_init / chunk_source_init; it owns nothing, and the writer and
 * images it names must outlive it. Its fields are this folder's: callers
 * use the functions.
 *
 * Threads: functions marked "any thread" are thread-safe (the refill's and
 * drain's workers call them, one codec context each); the others run on the
 * one thread that drives the drain or refill.
 *
 * Errors are 0 or -errno, with a message as each function says.
 */
#ifndef TCGPU_IMAGE_CHUNKS_H
#define TCGPU_IMAGE_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "format.h"

struct image;
struct image_writer;

/* One chunk index entry, in memory. */
struct image_chunk {
    uint64_t alloc_id;
    uint64_t alloc_offset;
    uint32_t raw_len;
    uint32_t stored_len;
    uint8_t codec; /* enum tcgpu_codec */
    uint16_t file; /* data file index */
    uint64_t file_offset;
    uint64_t raw_csum;    /* XXH3_64 of the raw bytes */
    uint64_t stored_csum; /* XXH3_64 of the stored bytes */
    uint64_t dev_hash;    /* device hash (kernels/devhash.h) when has_dev_hash */
    uint8_t has_dev_hash; /* the DEVHASH section carries it (minor 1) */
    uint32_t nblocks;     /* device hashes of its blocks (BLOCKHASH, minor 2): */
    uint64_t blocks_at;   /* how many, and where in the image's table */
};

/* ---- chunk records: what a drain hands to the sink --------------------------- */

/*
 * Encodes `len` raw bytes for chunk_sink_add_ref (any thread). `parent` (may be
 * NULL) is the parent's chunk at the same position and of the same length
 * (chunk_sink_parent): when the bytes' XXH3_64 equals its raw checksum, c
 * becomes a PARENT chunk and *stored NULL, nothing encoded. Otherwise as
 * image_chunk_encode: *stored points into `dst` or `src`. The caller sets
 * c->alloc_id and c->alloc_offset. Returns 0 or codec_encode's errors.
 */
int chunk_encode(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                 const struct image_chunk *parent, void *dst, size_t dst_cap,
                 struct image_chunk *c, const void **stored);

/* chunk_encode for a caller that has the bytes' XXH3_64 already (raw_csum). */
int chunk_encode_hashed(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                        const struct image_chunk *parent, uint64_t raw_csum, void *dst,
                        size_t dst_cap, struct image_chunk *c, const void **stored);

/*
 * Encodes a PATCH chunk for chunk_sink_add_ref (any thread): `pt` says which
 * blocks of the parent's chunk `parent` (chunk_sink_parent) are replaced
 * and by what (codec.h; pt->base_csum is taken from `parent`). Fills c
 * (codec, lengths, checksums); *stored points into dst (cap >=
 * codec_patch_bound). The caller sets c->alloc_id and c->alloc_offset.
 * Returns 0 or codec_patch_encode's errors.
 */
int chunk_encode_patch(struct codec_ctx *ctx, struct codec_patch *pt, enum tcgpu_dtype dtype,
                       const struct image_chunk *parent, void *dst, size_t cap,
                       struct image_chunk *c, const void **stored);

/* Fills c as a ZERO chunk of `len` bytes whose XXH3_64 is `raw_csum`
 * (nothing stored; any thread). */
void chunk_set_zero(struct image_chunk *c, size_t len, uint64_t raw_csum);

/* Fills c as a PARENT chunk standing for `parent` (chunk_sink_parent),
 * unchanged: nothing stored (any thread). */
void chunk_set_parent(struct image_chunk *c, const struct image_chunk *parent);

/* ---- the sink: an image being written ---------------------------------------- */

struct chunk_sink {
    struct image_writer *writer;
    const struct image *parent;
};

/*
 * A sink over `w`, whose allocations and devices are added already.
 * `parent` (may be NULL: a full image) is an open image already named as
 * w's parent (image_writer_set_parent).
 */
void chunk_sink_init(struct chunk_sink *s, struct image_writer *w, const struct image *parent);

/*
 * The parent's chunk at offset `offset` of allocation `alloc_id`, if it has
 * `len` raw bytes (an incremental image compares chunks by position), else
 * NULL (and NULL without a parent). Valid as long as the parent is open;
 * readable from any thread.
 */
const struct image_chunk *chunk_sink_parent(const struct chunk_sink *s, uint64_t alloc_id,
                                            uint64_t offset, size_t len);

/* Whether any chunk of the parent carries a device hash (0 without one). */
int chunk_sink_parent_has_dev_hash(const struct chunk_sink *s);

/* The device hashes of the blocks of `parent` (a chunk chunk_sink_parent
 * returned), *n of them of *block_size bytes, or NULL when it has none. */
const uint64_t *chunk_sink_parent_blocks(const struct chunk_sink *s,
                                         const struct image_chunk *parent, uint32_t *n,
                                         uint32_t *block_size);

/* Whether the parent's chunks carry block hashes of `block_size` bytes. */
int chunk_sink_parent_has_blocks(const struct chunk_sink *s, uint32_t block_size);

/*
 * Decodes the raw bytes of `parent` (a chunk chunk_sink_parent returned)
 * into dst (>= its raw length), checksums checked (any thread, the
 * caller's ctx): the base a PATCH chunk's XOR is taken against. 0 or
 * -errno with a message in errbuf.
 */
int chunk_sink_parent_decode(const struct chunk_sink *s, const struct image_chunk *parent,
                             struct codec_ctx *ctx, void *dst, char *errbuf, size_t errlen);

/* Stored bytes aligned to this, with room to its next multiple, are
 * written without a copy (chunk_sink_add_ref). */
#define CHUNK_WRITE_ALIGN 4096u

/*
 * Appends a chunk made by chunk_encode, chunk_encode_patch, chunk_set_zero
 * or chunk_set_parent, with the device hashes of its blocks (NULL: none;
 * image_writer_add_encoded_ref). Its stored bytes (`stored`, NULL when
 * it stores none) are written from where they are, not copied
 * (image_writer_add_encoded_ref): they stay the writer's until
 * chunk_sink_wait(s, *ticket) (0: copied after all), and `room` bytes at
 * `stored` are the writer's to pad into (to the next multiple of
 * CHUNK_WRITE_ALIGN). Errors as
 * image_writer_add_encoded, with chunk_sink_error naming the problem;
 * after an I/O error every later call fails the same way.
 */
int chunk_sink_add_ref(struct chunk_sink *s, const struct image_chunk *c, void *stored,
                       size_t room, uint32_t block_size, const uint64_t *hashes, uint64_t *ticket);

/* Waits until the bytes of chunk_sink_add_ref calls up to `ticket`
 * (UINT64_MAX: all) are written. 0 or the sink's I/O error. */
int chunk_sink_wait(struct chunk_sink *s, uint64_t ticket);

/* Message for the last failure of chunk_sink_add_ref or chunk_sink_wait ("" if none). */
const char *chunk_sink_error(const struct chunk_sink *s);

/* ---- the source: an image being read back ------------------------------------ */

struct chunk_source {
    const struct image *img;
    unsigned read_flags;
};

/* A source over `img`, open (with its parent chain) and verified by the caller. */
void chunk_source_init(struct chunk_source *s, const struct image *img);

/* The same over an image whose stored checksums the caller checked
 * (image_verify_stored): reads of chunks that are decoded skip that check,
 * their raw checksums guard them (IMAGE_READ_UNCHECKED). */
void chunk_source_init_verified(struct chunk_source *s, const struct image *img);

/* The number of chunks, and chunk i (0 <= i < count; valid while the image is open). */
size_t chunk_source_count(const struct chunk_source *s);
const struct image_chunk *chunk_source_at(const struct chunk_source *s, size_t i);

/* Codec and stored length of where chunk i's bytes really are: the chunk
 * itself, or for a PARENT chunk the ancestor's (either may be NULL). */
void chunk_source_resolved(const struct chunk_source *s, size_t i, unsigned *codec,
                           uint32_t *stored_len);

/*
 * Reads chunk i's stored bytes into `buf` (>= its resolved stored length)
 * and checks their checksum (any thread). 0 or -errno, with a message
 * naming the chunk and the file in errbuf (may be NULL).
 */
int chunk_source_read(const struct chunk_source *s, size_t i, void *buf, char *errbuf,
                      size_t errlen);

/*
 * Decodes chunk i from its stored bytes (chunk_source_read) into `dst`
 * (>= raw_len) and checks the raw checksum (any thread, with the caller's
 * ctx). 0 or -errno, with a message in errbuf (may be NULL).
 */
int chunk_source_decode(const struct chunk_source *s, size_t i, struct codec_ctx *ctx,
                        const void *stored, void *dst, char *errbuf, size_t errlen);

#endif /* TCGPU_IMAGE_CHUNKS_H */
