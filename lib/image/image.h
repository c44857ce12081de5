/*
 * image.h - writing, reading, verifying and describing tcgpu images (format
 * v1, declared in format.h, explained in docs/image-format.md).
 *
 * Writing: image_writer_begin creates DIR.tmp-XXXXXX (mode 0700, files 0600:
 * images hold model weights), chunks are appended to data.0 as they come,
 * and image_writer_commit writes the manifest, fsyncs, and renames the
 * directory to DIR atomically: an image exists whole or not at all.
 *
 * Parallel pipelines: worker threads call image_chunk_encode with their own
 * codec context, and the one writer thread hands the results to
 * image_writer_add_encoded in any order; the writer records each chunk's
 * data-file offset. The snapshot engine does this through chunks.h, the
 * narrow face it sees of the writer and the reader.
 *
 * Reading: image_open parses and checks the whole manifest (checksums, every
 * count, offset and length: images are untrusted files) and the data files'
 * sizes; image_verify_all reads and checks every chunk, so a restore can
 * refuse a damaged image before it touches the process.
 *
 * Errors are 0 or -errno. Writers and readers keep a message naming the
 * file and the problem (image_writer_error, image_error).
 */
#ifndef TCGPU_IMAGE_H
#define TCGPU_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "chunks.h"
#include "codec.h"
#include "format.h"

struct image_process {
    uint32_t pid;
    uint64_t start_time_ns; /* CLOCK_REALTIME at process start; 0 = unknown */
    uint64_t created_ns;    /* set by the writer at commit */
    char hostname[TCGPU_IMG_MAX_NAME];
    char exe[TCGPU_IMG_MAX_PATH];
};

struct image_device {
    int32_t ordinal;
    uint32_t driver_version;
    uint64_t total_mem;
    uint8_t uuid[16];
    char name[TCGPU_IMG_MAX_NAME];
};

struct image_alloc {
    uint64_t id;   /* unique within the image */
    uint64_t addr; /* device address */
    uint64_t size;
    uint32_t kind;        /* enum tcgpu_alloc_kind */
    uint32_t flags;       /* opaque to the format */
    uint32_t dtype;       /* enum tcgpu_dtype */
    uint32_t device;      /* index of an image_device */
    const char *callsite; /* NULL or a string (TCGPU_TRACE_ALLOC); the
                                writer copies it, the reader owns its copy */
};

/* struct image_chunk, one chunk index entry in memory: chunks.h. */

/* ---- writer ------------------------------------------------------------------ */

struct image_writer;

#define IMAGE_OVERWRITE 0x1u /* replace an existing image at DIR (not any directory) */
#define IMAGE_NO_URING  0x2u /* write with pwrite only */
#define IMAGE_NO_DIRECT 0x4u /* never O_DIRECT */

struct image_writer_opts {
    unsigned flags;            /* IMAGE_* */
    size_t chunk_size;         /* image_writer_add_data splits at this; 0 = 4 MiB */
    struct codec_params codec; /* for the writer's own encoding */
};

/*
 * Starts an image at `dir` (its parent must exist): creates dir.tmp-XXXXXX
 * (0700) with an empty data.0 (0600). Refuses early with -EEXIST when `dir`
 * exists and IMAGE_OVERWRITE is not set (commit checks again, atomically).
 * `opts` may be NULL. Returns 0 and sets *out (caller owns it; always
 * image_writer_free it), or -errno; a failure leaves nothing behind.
 * errbuf (may be NULL) receives a message on failure.
 */
int image_writer_begin(struct image_writer **out, const char *dir,
                       const struct image_writer_opts *opts, char *errbuf, size_t errlen);

/* Process identity (copied). created_ns is ignored: commit sets it. 0 / -EINVAL. */
int image_writer_set_process(struct image_writer *w, const struct image_process *p);

/* Adds a device (copied); *index (may be NULL) receives its index. 0, -ENOSPC
 * (more than TCGPU_IMG_MAX_DEVICES), -ENOMEM. */
int image_writer_add_device(struct image_writer *w, const struct image_device *d, uint32_t *index);

/* Names the parent of an incremental image (its path and manifest checksum,
 * image_manifest_csum): required before PARENT chunks are added. 0, -EINVAL
 * (path too long). */
int image_writer_set_parent(struct image_writer *w, const char *path,
                            const uint8_t manifest_csum[16]);

/* Adds an allocation (copied, call site included). -EEXIST for a duplicate
 * id, -EINVAL for a bad kind/dtype/device or address overflow. */
int image_writer_add_allocation(struct image_writer *w, const struct image_alloc *a);

/*
 * Encodes `len` bytes (len <= TCGPU_IMG_MAX_CHUNK) at offset `offset` of
 * allocation `alloc_id` with the writer's codec context and appends them.
 * Returns 0, -ENOENT (no such allocation), -ERANGE (beyond its end), -EINVAL,
 * or an I/O error (-ENOSPC, ...), after which the temporary directory is
 * already gone and every later call returns the same error.
 */
int image_writer_add_chunk(struct image_writer *w, uint64_t alloc_id, uint64_t offset,
                           const void *src, size_t len);

/* image_writer_add_chunk over a whole range, in chunks of opts.chunk_size. */
int image_writer_add_data(struct image_writer *w, uint64_t alloc_id, uint64_t offset,
                          const void *src, size_t len);

/*
 * Encodes one chunk for image_writer_add_encoded; for worker threads (each
 * with its own `ctx`). Fills c->raw_len, stored_len, codec, raw_csum,
 * stored_csum (the caller sets alloc_id and alloc_offset); *stored points to
 * the stored bytes (into `dst` or `src`, see codec_encode). Thread-safe.
 * Returns 0 or codec_encode's errors.
 */
int image_chunk_encode(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                       void *dst, size_t dst_cap, struct image_chunk *c, const void **stored);

/*
 * image_chunk_encode for a caller that already has the XXH3_64 of the raw
 * bytes (the incremental path hashes before it decides to encode).
 */
int image_chunk_encode_hashed(struct codec_ctx *ctx, const void *src, size_t len,
                              enum tcgpu_dtype dtype, uint64_t raw_csum, void *dst, size_t dst_cap,
                              struct image_chunk *c, const void **stored);

/*
 * Fills `c` as a PARENT chunk of `len` raw bytes whose XXH3_64 is `raw_csum`:
 * unchanged since the parent image, nothing stored. The caller sets alloc_id
 * and alloc_offset; the writer needs image_writer_set_parent first, and the
 * reader requires the parent's chunk at the same allocation and offset to
 * have the same length and checksum.
 */
void image_chunk_parent(struct image_chunk *c, size_t len, uint64_t raw_csum);

/*
 * Appends a chunk encoded by image_chunk_encode: `c` as it returned it with
 * alloc_id and alloc_offset set; file and file_offset are assigned here.
 * Errors as image_writer_add_chunk, plus -EINVAL for inconsistent lengths.
 */
int image_writer_add_encoded(struct image_writer *w, const struct image_chunk *c,
                             const void *stored);

/*
 * image_writer_add_encoded with the device hashes of the chunk's blocks
 * (ceil(raw_len / block_size) of them, copied; NULL: none), for the next
 * incremental image (BLOCKHASH section; every chunk of an image uses one
 * block size, a power of two, TCGPU_PATCH_MIN_BLOCK .. MAX: -EINVAL else),
 * and without a copy of the stored bytes: they are written from `stored`
 * itself, which must stay unchanged until image_writer_wait(w, *ticket)
 * returns (or commit / free). `room` is how many bytes at `stored` the
 * writer may write (>= stored_len; 0: just those): when `stored` is
 * aligned to IMAGE_WRITE_ALIGN and `room` reaches the next multiple of it,
 * the write is padded with zeros there, so it can go to an O_DIRECT file
 * as it is (the padding is not the chunk's, and is in the data file).
 * Otherwise the bytes are copied and *ticket is 0. Same errors.
 */
#define IMAGE_WRITE_ALIGN CHUNK_WRITE_ALIGN
int image_writer_add_encoded_ref(struct image_writer *w, const struct image_chunk *c,
                                 void *stored, size_t room, uint32_t block_size,
                                 const uint64_t *hashes, uint64_t *ticket);

/*
 * Waits until the stored bytes of image_writer_add_encoded_ref calls up to
 * `ticket` (UINT64_MAX: all) are written: their memory may be reused.
 * Returns 0 or the writer's I/O error (sticky, as the adds).
 */
int image_writer_wait(struct image_writer *w, uint64_t ticket);

/*
 * Finishes the data file (fsync), checks the chunk table (no overlaps),
 * writes and fsyncs the manifest and the directory, and renames it to DIR.
 * If DIR exists: -EEXIST unless IMAGE_OVERWRITE, in which case an existing
 * image there (a directory holding a tcgpu manifest, or an empty one) is
 * swapped out atomically and removed; anything else is refused (-ENOTEMPTY).
 * On failure nothing is left behind. Returns 0 or -errno. The writer must
 * still be freed.
 */
int image_writer_commit(struct image_writer *w);

/* Removes the temporary directory if not committed, and frees. NULL is fine. */
void image_writer_free(struct image_writer *w);

/* Message for the last failure ("" if none); valid until the next call. */
const char *image_writer_error(const struct image_writer *w);

/* Statistics so far (for logs and the benchmark). */
void image_writer_stats(const struct image_writer *w, uint64_t *raw_bytes, uint64_t *stored_bytes,
                        uint64_t *chunks);

/* ---- reader ------------------------------------------------------------------ */

struct image;

#define IMAGE_OPEN_MANIFEST_ONLY 0x1u /* do not open data files (inspect a damaged image) */
#define IMAGE_OPEN_NO_PARENT                                                                       \
    0x2u                              /* do not open the parent chain (PARENT chunks
                      then read as -EOPNOTSUPP) */
#define IMAGE_VERIFY_STORED_ONLY 0x1u /* verify_all: skip decoding and raw checksums */

/*
 * Opens the image at `dir`: reads the manifest, verifies its checksums and
 * every bound, opens the data files and checks their sizes against the
 * chunks. An incremental image opens its parent chain too (the recorded
 * path, else a directory of the same name next to `dir`), checks each
 * parent's manifest checksum against the one recorded, and resolves every
 * PARENT chunk to the ancestor chunk holding its bytes: a missing parent is
 * -ENOENT, a different or corrupt one -EBADMSG, with a message naming it. Returns 0 and sets *out (caller owns it; image_close), or -errno:
 * -EBADMSG (corrupt manifest), -EPROTONOSUPPORT (other major version),
 * -ENOENT, -EIO... errbuf (may be NULL) receives a message naming the file.
 */
int image_open(struct image **out, const char *dir, unsigned flags, char *errbuf, size_t errlen);

/* Frees; NULL is fine. */
void image_close(struct image *img);

/* Message for the last failure of a call on `img`; "" if none. */
const char *image_error(const struct image *img);

/* Accessors: pointers stay valid until image_close. */
const struct image_process *image_process_info(const struct image *img);
uint32_t image_device_count(const struct image *img);
const struct image_device *image_device_info(const struct image *img, uint32_t i);
size_t image_alloc_count(const struct image *img);
const struct image_alloc *image_alloc_at(const struct image *img, size_t i);
const struct image_alloc *image_find_alloc(const struct image *img, uint64_t id);
size_t image_chunk_count(const struct image *img);
const struct image_chunk *image_chunk_at(const struct image *img, size_t i);
/* The manifest's checksum (its identity for child images). */
void image_manifest_csum(const struct image *img, uint8_t out[16]);
/* The chunk at (alloc_id, offset): 1 and *index, or 0. */
int image_find_chunk(const struct image *img, uint64_t alloc_id, uint64_t offset, size_t *index);
/* Codec and stored length of where chunk i's bytes really are: the chunk
 * itself, or for a resolved PARENT chunk the ancestor's chunk. */
void image_chunk_resolved(const struct image *img, size_t i, unsigned *codec, uint32_t *stored_len);
/* A PATCH chunk's base (where chunk i's bytes resolve to is a PATCH chunk):
 * 0 and the image and index of the chunk it patches; -ENOENT (not a
 * patch), -EOPNOTSUPP (its parent is not open). */
int image_chunk_base(const struct image *img, size_t i, const struct image **base, size_t *index);
/* The device hashes of chunk i's blocks (BLOCKHASH), or NULL: *n of them,
 * blocks of *block_size bytes. Valid until image_close. */
const uint64_t *image_chunk_blocks(const struct image *img, size_t i, uint32_t *n,
                                   uint32_t *block_size);
/* Parent path, or NULL when the image is not incremental. */
const char *image_parent(const struct image *img, uint8_t csum[16]);
uint32_t image_version_minor(const struct image *img);

/*
 * Reads and checks every chunk: stored checksum, then (unless
 * IMAGE_VERIFY_STORED_ONLY) decoding and the raw checksum. Returns 0 or the
 * first failure (-EBADMSG, -EIO, -EOPNOTSUPP for parent chunks) with
 * image_error naming the chunk, its allocation and the file.
 */
int image_verify_all(struct image *img, unsigned flags);

/*
 * Reads every chunk's stored bytes (a PARENT chunk's in its ancestor) and
 * checks their checksum, on `threads` threads (0: one per CPU): the cheap
 * check a restore makes before it touches anything (a damaged or truncated
 * file is refused), leaving the raw checksums to the decoding that follows.
 * Thread-safe on one image (pread). Returns 0 or the failure of the first
 * bad chunk in chunk order (-EBADMSG, -EIO, -EOPNOTSUPP, -ENOMEM), with a
 * message naming it in errbuf (may be NULL).
 */
int image_verify_stored(const struct image *img, unsigned threads, char *errbuf, size_t errlen);

/*
 * Decodes allocation `id` into `dst` (`dst_len` >= its size); bytes no chunk
 * covers become zero. Every chunk's checksums are checked on the way.
 * Returns 0, -ENOENT, -ENOBUFS (dst too small), or as image_verify_all.
 * Not thread-safe on one image (one decoding context per image).
 */
int image_read_allocation(struct image *img, uint64_t id, void *dst, size_t dst_len);

/*
 * Like image_read_allocation, but hands each decoded chunk to `cb` (offset
 * in the allocation, bytes, length; the bytes are valid during the call
 * only). Uncovered ranges are not reported. A non-zero return from `cb`
 * stops and is returned.
 */
typedef int (*image_chunk_cb)(void *arg, uint64_t offset, const void *data, size_t len);
int image_read_allocation_cb(struct image *img, uint64_t id, image_chunk_cb cb, void *arg);

/*
 * Reads chunk `i`'s stored bytes into `buf` (>= its resolved stored length,
 * image_chunk_resolved; a PARENT chunk reads from the ancestor) and checks
 * the stored checksum. Thread-safe (pread). errbuf may be NULL. 0 or -errno.
 */
int image_read_stored(const struct image *img, size_t i, void *buf, char *errbuf, size_t errlen);

/*
 * image_read_stored, and with IMAGE_READ_UNCHECKED the stored checksum of a
 * compressed chunk (ZSTD, BYTEGROUP, PATCH) is not checked: for a caller
 * that ran image_verify_stored already and decodes what it reads, whose raw
 * checksums then guard the bytes. RAW chunks are always checked (their
 * bytes are not decoded). Thread-safe.
 */
#define IMAGE_READ_UNCHECKED 0x1u
int image_read_stored_flags(const struct image *img, size_t i, void *buf, unsigned flags,
                            char *errbuf, size_t errlen);

/*
 * Decodes chunk `i` from its stored bytes into `dst` (>= raw_len) with the
 * caller's context and checks the raw checksum. Thread-safe with one ctx
 * per thread. 0 or -errno.
 */
int image_decode_chunk(const struct image *img, size_t i, struct codec_ctx *ctx, const void *stored,
                       void *dst, char *errbuf, size_t errlen);

/* ---- describing an image (gpuckpt inspect) ---------------------------------- */

/* Sums over chunks. */
struct image_sums {
    uint64_t chunks, raw_bytes, stored_bytes;
};

/* Over allocation id's chunks. */
void image_sum_alloc(const struct image *img, uint64_t id, struct image_sums *s);

/* Over every chunk: per codec (codec[k] for enum tcgpu_codec k) and in all. */
void image_sum_chunks(const struct image *img, struct image_sums codec[TCGPU_CODEC_COUNT],
                      struct image_sums *all);

/* The sum of every allocation's size. */
uint64_t image_alloc_bytes(const struct image *img);

/* "device", "pitch", "vmm", "pool", "host-pinned", "managed" (enum tcgpu_alloc_kind); "unknown". */
const char *image_alloc_kind_name(uint32_t kind);

/*
 * Removes the image at `dir`: only what an image is made of (its manifest
 * and data.<n> files, never following links), then the directory. Refuses
 * (-ENOTDIR, -EBADMSG) anything that is not a directory holding a tcgpu
 * manifest, and leaves the directory with what else it holds (-ENOTEMPTY).
 * errbuf (may be NULL) says why. 0 or -errno.
 */
int image_remove(const char *dir, char *errbuf, size_t errlen);

/*
 * Prints the manifest for `gpuckpt inspect` as a table for people (gpuckpt
 * writes --json itself from the accessors above). Returns 0 or -EIO when
 * writing to `out` failed.
 */
int image_describe(const struct image *img, FILE *out);

#endif /* TCGPU_IMAGE_H */
