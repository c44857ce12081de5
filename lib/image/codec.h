/*
 * codec.h - the chunk codec: how one chunk of device memory is stored.
 *
 * Per chunk the encoder keeps the smallest of ZERO (all zero, nothing
 * stored), RAW, ZSTD and BYTEGROUP (byte planes of 2-, 4- or 8-byte elements,
 * each plane zstd-compressed or raw). The on-disk forms are declared in
 * format.h. To keep incompressible data cheap the encoder first
 * compresses a small sample of the chunk with each candidate; when nothing
 * shrinks the sample it stores RAW without compressing the chunk at all, and
 * planes whose sample does not shrink are stored raw.
 *
 * Threads: a struct codec_ctx holds zstd contexts and scratch memory; use one
 * per thread. Functions that take no context are thread-safe.
 *
 * Errors: 0 or a negative errno. -EBADMSG means the stored bytes are
 * corrupt; -EINVAL a caller error; -ENOMEM, -EOPNOTSUPP as usual.
 */
#ifndef TCGPU_CODEC_H
#define TCGPU_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "format.h"

struct codec_ctx;

struct codec_params {
    int zstd_level;        /* zstd level; 0 = 1 (fast: the drain must keep up with PCIe) */
    size_t sample_size;    /* bytes probed before compressing; 0 = 64 KiB */
    unsigned disable_mask; /* bit (1u << TCGPU_CODEC_x): never choose codec x;
                              ZERO and RAW cannot be disabled */
    int no_rotate;         /* BYTEGROUP without the sign rotation (benchmarks) */
};

/* What codec_encode chose. */
struct codec_out {
    uint8_t codec;     /* enum tcgpu_codec */
    size_t stored_len; /* bytes at `data` */
    const void *data;  /* stored bytes: NULL for ZERO, `src` itself for RAW
                             (no copy), else `dst` */
};

/*
 * Creates a context. `p` may be NULL for defaults. Returns 0 and sets *out
 * (the caller owns it; free with codec_ctx_free), or -ENOMEM / -EINVAL.
 */
int codec_ctx_new(struct codec_ctx **out, const struct codec_params *p);

/* Frees a context; NULL is fine. */
void codec_ctx_free(struct codec_ctx *ctx);

/*
 * The largest stored form of `raw_len` bytes: the size `dst` must have for
 * codec_encode. The encoder never stores more than the raw length, so this
 * is raw_len; use the function anyway so the format may change.
 */
size_t codec_bound(size_t raw_len);

/*
 * Encodes `len` bytes at `src` (len <= TCGPU_IMG_MAX_CHUNK) into `dst`
 * (`dst_cap` >= codec_bound(len)). `dtype` is the allocation's hint
 * (TCGPU_DTYPE_UNKNOWN: detect the element size). Fills *out; out->data may
 * point into `src` (RAW) so keep `src` alive until the bytes are written.
 * Returns 0, -EINVAL (bad arguments) or -ENOMEM (scratch growth failed).
 */
int codec_encode(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                 void *dst, size_t dst_cap, struct codec_out *out);

/*
 * codec_encode, and XXH3_64 of the `len` raw bytes into *raw_csum: hashed
 * slice by slice on the way when the codec splits byte planes (the slice is
 * in the cache for the split), in a pass of its own otherwise. The same
 * errors, and -EINVAL for a NULL raw_csum; *raw_csum is set only on success.
 */
int codec_encode_and_hash(struct codec_ctx *ctx, const void *src, size_t len,
                          enum tcgpu_dtype dtype, void *dst, size_t dst_cap,
                          struct codec_out *out, uint64_t *raw_csum);

/*
 * Decodes `stored_len` bytes at `src`, stored with `codec`, into exactly
 * `raw_len` bytes at `dst`. Safe on untrusted input: it never reads beyond
 * src + stored_len nor writes beyond dst + raw_len. Returns 0, -EBADMSG
 * (corrupt or inconsistent lengths), -EOPNOTSUPP (PARENT: the bytes are in
 * the parent image), -EINVAL (unknown codec, raw_len too large) or -ENOMEM.
 */
int codec_decode(struct codec_ctx *ctx, unsigned codec, const void *src, size_t stored_len,
                 void *dst, size_t raw_len);

/*
 * codec_decode, and XXH3_64 of the `raw_len` bytes written into *raw_csum:
 * BYTEGROUP chunks are hashed a slice at a time as their planes are joined
 * (the slice still in the cache), the others after decoding. The same
 * errors, and -EINVAL for a NULL raw_csum; *raw_csum is set only on success.
 */
int codec_decode_and_hash(struct codec_ctx *ctx, unsigned codec, const void *src,
                          size_t stored_len, void *dst, size_t raw_len, uint64_t *raw_csum);

/* ---- PATCH chunks (patch.c; payload in format.h) ---------------------------- */

/* What a PATCH chunk replaces in its base. */
struct codec_patch {
    size_t raw_len;           /* of the chunk */
    uint32_t block_size;      /* a power of two, TCGPU_PATCH_MIN_BLOCK .. MAX */
    uint32_t k;               /* blocks replaced, >= 1 */
    const uint32_t *idx;      /* their indices, increasing */
    const uint8_t *blocks;    /* their new bytes, concatenated (the last block
                                 of the chunk may be short) */
    const uint8_t *base;      /* NULL, or the base chunk's raw bytes: then the
                                 XOR with them is stored (mode 1) */
    uint8_t *scratch;         /* with base: room for the blocks' bytes */
    uint64_t base_csum;       /* the base chunk record's raw checksum */
};

/* The most a PATCH payload of k blocks of `blocks_len` bytes takes. */
size_t codec_patch_bound(uint32_t k, size_t blocks_len);

/*
 * Encodes a PATCH payload into dst (cap >= codec_patch_bound): *stored_len
 * and the chunk record's raw checksum (format.h). Thread-safe with one ctx
 * per thread. 0, -EINVAL, -ENOSPC (cap), -ENOMEM.
 */
int codec_patch_encode(struct codec_ctx *ctx, const struct codec_patch *pt, enum tcgpu_dtype dtype,
                       void *dst, size_t cap, size_t *stored_len, uint64_t *raw_csum);

/* The base's raw checksum a PATCH payload names. 0 or -EBADMSG. */
int codec_patch_base_csum(const void *stored, size_t stored_len, uint64_t *base_csum);

/*
 * Applies a PATCH payload to `dst`, which holds the base's raw_len bytes
 * (decoded and checked by the caller): every replaced block is checked
 * against its XXH3, the block list against `raw_csum` (the record's).
 * Safe on untrusted input. 0, -EBADMSG, -ENOMEM.
 */
int codec_patch_apply(struct codec_ctx *ctx, const void *stored, size_t stored_len, void *dst,
                      size_t raw_len, uint64_t raw_csum);

/* "zero", "raw", "zstd", "bytegroup", "parent", "patch" or "unknown"; static strings. */
const char *codec_name(unsigned codec);

/* Element size the dtype implies for byte grouping (0: none, e.g. U8 or UNKNOWN). */
unsigned codec_dtype_esize(enum tcgpu_dtype dtype);

/* "unknown", "u8", "bf16", ...; static strings. */
const char *codec_dtype_name(unsigned dtype);

/* Whether `len` bytes at `p` are all zero (fast word-at-a-time scan). */
int codec_is_zero(const void *p, size_t len);

#endif /* TCGPU_CODEC_H */
