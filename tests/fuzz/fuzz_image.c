/*
 * fuzz_image - the image reader on hostile images, along the paths that
 * read them: resume (image_open, then every allocation decoded chunk by
 * chunk), verify (image_verify_all), inspect (image_describe, human and
 * JSON, also of a manifest opened alone).
 *
 * Input: u32 little-endian manifest length, the manifest, then data.0.
 * Before the image is written out the checksums a mutation breaks are
 * recomputed, so that mutated bytes reach the parsers and the codecs
 * instead of stopping at the first checksum: the header's XXH3_64, the
 * manifest length, data.0's size in its DATA_FILE section, each chunk's
 * stored checksum and, where the stored bytes decode, its raw checksum, and
 * last the trailer's XXH3_128 over all of it.
 */
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "fuzz.h"
#include "image/codec.h"
#include "image/format.h"
#include "image/image.h"

#define RAW_CHECK_MAX (8u << 20)  /* chunks larger than this keep their raw checksum */

/* Little-endian fields of n = 2, 4 or 8 bytes (format.h), with <endian.h>. */
static uint64_t get(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;

    memcpy(&v, p, n);
    return le64toh(v);
}

static void put(uint8_t *p, uint64_t v, unsigned n)
{
    v = htole64(v);
    memcpy(p, &v, n);
}

/* One chunk record's checksums, from the data it points at. */
static void fix_chunk(uint8_t *rec, const uint8_t *data, size_t dlen, struct codec_ctx *ctx)
{
    uint32_t raw_len = (uint32_t)get(rec + 16, 4), stored_len = (uint32_t)get(rec + 20, 4);
    uint64_t off = get(rec + 32, 8);
    unsigned codec = rec[24];
    const uint8_t *stored;
    uint8_t *raw;

    if (get(rec + 26, 2) != 0 || off > dlen || stored_len > dlen - off)
        return;
    stored = data + off;        /* only once it is known to point inside data.0 */
    put(rec + 48, XXH3_64bits(stored, stored_len), 8);
    if (raw_len == 0 || raw_len > RAW_CHECK_MAX || !(raw = malloc(raw_len)))
        return;
    if (codec_decode(ctx, codec, stored, stored_len, raw, raw_len) == 0)
        put(rec + 40, XXH3_64bits(raw, raw_len), 8);
    free(raw);
}

/* The sections between header and trailer: data.0's size, chunk checksums. */
static void fix_sections(uint8_t *m, size_t mlen, const uint8_t *data, size_t dlen)
{
    size_t at = (size_t)get(m + 12, 4), end = mlen - TCGPU_IMG_TRAILER_LEN;
    uint32_t nsec = (uint32_t)get(m + 24, 4);
    struct codec_ctx *ctx = NULL;

    if (at < TCGPU_IMG_HEADER_LEN || codec_ctx_new(&ctx, NULL) != 0)
        return;
    for (uint32_t s = 0; s < nsec && at <= end && end - at >= TCGPU_IMG_SECTION_HDR_LEN; s++) {
        uint32_t type = (uint32_t)get(m + at, 4);
        uint64_t len = get(m + at + 8, 8);
        uint8_t *p = m + at + TCGPU_IMG_SECTION_HDR_LEN;
        size_t room = end - at - TCGPU_IMG_SECTION_HDR_LEN;

        if (len > room)
            break;
        if (type == TCGPU_IMG_SEC_DATA_FILE && len >= 16 && get(p, 4) == 0)
            put(p + 8, dlen, 8);
        if (type == TCGPU_IMG_SEC_CHUNKS && len >= 8) {
            uint64_t n = get(p, 8);
            for (uint64_t i = 0; i < n && 8 + (i + 1) * TCGPU_IMG_CHUNK_REC_LEN <= len; i++)
                fix_chunk(p + 8 + i * TCGPU_IMG_CHUNK_REC_LEN, data, dlen, ctx);
        }
        at += TCGPU_IMG_SECTION_HDR_LEN + (size_t)len;
    }
    codec_ctx_free(ctx);
}

static void fix_envelope(uint8_t *m, size_t mlen, const uint8_t *data, size_t dlen)
{
    XXH128_hash_t h;

    if (mlen < TCGPU_IMG_HEADER_LEN + TCGPU_IMG_TRAILER_LEN)
        return;
    put(m + 16, mlen, 8);
    fix_sections(m, mlen, data, dlen);
    put(m + 32, XXH3_64bits(m, 32), 8);
    h = XXH3_128bits(m, mlen - 16);
    put(m + mlen - 16, h.low64, 8);
    put(m + mlen - 8, h.high64, 8);
}

static int ignore_chunk(void *arg, uint64_t offset, const void *bytes, size_t len)
{
    (void)arg;
    (void)offset;
    (void)bytes;
    (void)len;
    return 0;
}

/* What resume, verify and inspect do with the image at dir. */
static void read_image(const char *dir, FILE *devnull)
{
    struct image *img = NULL;
    char err[512];

    if (image_open(&img, dir, IMAGE_OPEN_NO_PARENT, err, sizeof(err)) == 0) {
        for (size_t i = 0; i < image_alloc_count(img); i++)
            image_read_allocation_cb(img, image_alloc_at(img, i)->id, ignore_chunk, NULL);
        image_verify_all(img, 0);
        image_describe(img, devnull);
        image_close(img);
    }
    if (image_open(&img, dir, IMAGE_OPEN_MANIFEST_ONLY | IMAGE_OPEN_NO_PARENT, err,
                   sizeof(err)) == 0) {
        image_describe(img, devnull);
        image_close(img);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *input, size_t size)
{
    static FILE *devnull;
    static char dir[4096];
    char path[4200];
    size_t mlen = size >= 4 ? (size_t)get(input, 4) : 0;
    uint8_t *copy;

    if (size < 4)
        return 0;
    if (mlen > size - 4)
        mlen = size - 4;
    copy = malloc(size - 4 + 1);
    if (!copy)
        return 0;
    memcpy(copy, input + 4, size - 4);
    fix_envelope(copy, mlen, copy + mlen, size - 4 - mlen);
    if (!devnull && !(devnull = fopen("/dev/null", "w")))
        abort();
    if (!dir[0])
        snprintf(dir, sizeof(dir), "%s", fuzz_scratch("img"));
    (void)!mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/" TCGPU_IMG_MANIFEST_NAME, dir);
    fuzz_write_file(path, copy, mlen);
    snprintf(path, sizeof(path), "%s/data.0", dir);
    fuzz_write_file(path, copy + mlen, size - 4 - mlen);
    read_image(dir, devnull);
    free(copy);
    return 0;
}
