/*
 * craft_image - writes hostile but well-formed images with tcgpu's own image
 * writer, for the reader's bounds (docs/image-format.md, "Reading untrusted
 * images").
 *
 *   craft_image DIR zero-bomb N    N allocations of 1 GiB, each one ZERO
 *                                  chunk of 1 GiB with the right checksum: a
 *                                  valid image of N * 56 bytes of chunk
 *                                  records declaring N GiB
 *   craft_image DIR ratio-bomb     one zstd chunk declaring 1 GiB from 64
 *                                  stored bytes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "image/image.h"

#define GIB (1ull << 30)

static int fail(const char *what, int rc, struct image_writer *w)
{
    fprintf(stderr, "craft_image: %s: %d %s\n", what, rc, w ? image_writer_error(w) : "");
    return 1;
}

/* XXH3_64 of `len` zero bytes, without a buffer that large. */
static uint64_t zero_hash(uint64_t len)
{
    static const unsigned char zeros[1 << 16];
    XXH3_state_t *st = XXH3_createState();
    uint64_t h;

    XXH3_64bits_reset(st);
    for (uint64_t done = 0; done < len; done += sizeof(zeros))
        XXH3_64bits_update(st, zeros, len - done < sizeof(zeros) ? len - done : sizeof(zeros));
    h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

int main(int argc, char **argv)
{
    struct image_process proc = { .pid = 4242 };
    struct image_device dev = { .ordinal = 0, .total_mem = 8 * GIB };
    struct image_writer *w = NULL;
    char err[512];
    int rc, n;

    if (argc < 3) {
        fprintf(stderr, "usage: craft_image DIR zero-bomb N | ratio-bomb\n");
        return 2;
    }
    snprintf(proc.hostname, sizeof(proc.hostname), "crafted");
    snprintf(proc.exe, sizeof(proc.exe), "/crafted");
    snprintf(dev.name, sizeof(dev.name), "crafted");
    if ((rc = image_writer_begin(&w, argv[1], NULL, err, sizeof(err))) != 0) {
        fprintf(stderr, "craft_image: %s\n", err);
        return 1;
    }
    if ((rc = image_writer_set_process(w, &proc)) || (rc = image_writer_add_device(w, &dev, NULL)))
        return fail("header", rc, w);
    n = !strcmp(argv[2], "zero-bomb") && argc > 3 ? atoi(argv[3]) : 1;
    for (int i = 0; i < n; i++) {
        struct image_alloc a = { .id = (uint64_t)i + 1, .addr = (uint64_t)(i + 1) * 2 * GIB,
                                 .size = GIB, .kind = TCGPU_ALLOC_DEVICE };
        if ((rc = image_writer_add_allocation(w, &a)))
            return fail("allocation", rc, w);
    }
    if (!strcmp(argv[2], "zero-bomb")) {
        uint64_t h = zero_hash(GIB);
        for (int i = 0; i < n; i++) {
            struct image_chunk c = { .alloc_id = (uint64_t)i + 1 };
            chunk_set_zero(&c, GIB, h);
            if ((rc = image_writer_add_encoded(w, &c, NULL)))
                return fail("zero chunk", rc, w);
        }
    } else if (!strcmp(argv[2], "ratio-bomb")) {
        unsigned char junk[64];
        struct image_chunk c = { .alloc_id = 1, .raw_len = (uint32_t)GIB, .stored_len = 64,
                                 .codec = TCGPU_CODEC_ZSTD };
        memset(junk, 0x5a, sizeof(junk));
        c.stored_csum = XXH3_64bits(junk, sizeof(junk));
        if ((rc = image_writer_add_encoded(w, &c, junk)))
            return fail("zstd chunk", rc, w);
    } else {
        fprintf(stderr, "craft_image: unknown kind %s\n", argv[2]);
        return 2;
    }
    if ((rc = image_writer_commit(w)))
        return fail("commit", rc, w);
    image_writer_free(w);
    return 0;
}
