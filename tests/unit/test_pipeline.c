/*
 * test_pipeline.c - the drain/refill engine on simcuda (lib/engine/pipeline.h).
 *
 * The driver is simcuda, reached through the driver table as in the library
 * (TCGPU_REAL_LIBCUDA). Device buffers hold data for every codec path (zero,
 * random = RAW, text = ZSTD, floats = BYTEGROUP, odd tails, holes left by skip
 * hints); each test drains them, scribbles over the device, refills and
 * compares byte for byte:
 *   host        drain to a host store and back, helpers on and off
 *   image       streamed into an image, the codecs it chose, refilled from it
 *   store-image a host store written as an image (suspend to an image)
 *   chain       incremental images A <- B <- C: PARENT chunks, refill from C
 *               and from B, parent missing / corrupt / replaced -> clear errors
 *   devhash     the scan kernel's twin against the host reference (devhash.h)
 *   compress    background compression of a store, then refill
 *   ring        tiny chunks and slots, 1 and 5 workers: the rings wrap
 *   reuse       an emptied store's arena reused by the next host drain (and
 *               grown for more extents), the bytes right each time
 *   copy_fail   a copy that fails while a slot fills: the drain fails with
 *               the copy's message, and nothing of that slot is encoded
 *   unpinned    pinned memory refused: the ring's slots are plain memory
 *               registered with the driver, the bytes right, and pipe_free
 *               undoes every registration it made
 *   patch       block hashes: an incremental image after two one-byte
 *               changes stores two PATCH chunks and copies two blocks; after
 *               a dense step (every bf16 weight moved a little) the patches
 *               hold the XOR with the parent and are smaller than the same
 *               chunks of a full image; refills give the bytes back; a
 *               missing parent is refused at open, a damaged one (the bytes
 *               a patch applies to) by the stored-checksum check
 *
 *   test_pipeline [name [thp|4k]]   (no name: all; thp / 4k: host stores in
 *                                   huge pages faulted by the copies / in 4 KiB
 *                                   pages faulted ahead of them)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>

#include "driver/driver.h"
#include "image/image.h"
#include "engine/kernels/devhash.h"
#include "engine/pipeline.h"
#include "engine/dev.h"
#include "../common/check.h"
#include "../common/engine_ctx.h"
#include "../common/rand.h"

#define NBUF 7
#define MiB (1u << 20)

static char tmpdir[256];

struct buf {
    const char *what;
    size_t size;
    uint32_t dtype;
    CUdeviceptr va;
    uint8_t *want;
};

static struct buf bufs[NBUF] = {
    { .what = "zeros", .size = 9 * MiB, .dtype = TCGPU_DTYPE_UNKNOWN },
    { .what = "random", .size = 5 * MiB + 3, .dtype = TCGPU_DTYPE_U8 },
    { .what = "text", .size = 6 * MiB, .dtype = TCGPU_DTYPE_U8 },
    { .what = "bf16", .size = 8 * MiB, .dtype = TCGPU_DTYPE_BF16 },
    { .what = "fp32", .size = 4 * MiB + 4096, .dtype = TCGPU_DTYPE_FP32 },
    { .what = "small", .size = 1000, .dtype = TCGPU_DTYPE_UNKNOWN },
    { .what = "holes", .size = 12 * MiB, .dtype = TCGPU_DTYPE_FP32 },
};

/* Something like trained weights: small normal-ish floats. */
static float weight(void)
{
    double s = 0;

    for (int i = 0; i < 4; i++)
        s += (double)(t_rand() % 1000000) / 1e6 - 0.5;
    return (float)(s * 0.05);
}

static void fill(struct buf *b)
{
    static const char *words[] = { "the ", "model ", "weights ", "and ", "gradients ", "of ",
                                   "a ", "checkpoint\n" };
    size_t i;

    switch (b->what[0]) {
    case 'z':
        memset(b->want, 0, b->size);
        break;
    case 'r':
        for (i = 0; i < b->size; i++)
            b->want[i] = (uint8_t)t_rand();
        break;
    case 't':
        for (i = 0; i < b->size;) {
            const char *w = words[t_rand() % 8];
            for (; *w && i < b->size; w++)
                b->want[i++] = (uint8_t)*w;
        }
        break;
    case 'b':
        for (i = 0; i + 1 < b->size; i += 2) {
            float f = weight();
            uint32_t u;
            memcpy(&u, &f, 4);
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(b->want + i, &h, 2);
        }
        break;
    default:   /* fp32, small, holes */
        for (i = 0; i + 4 <= b->size; i += 4) {
            float f = weight();
            memcpy(b->want + i, &f, 4);
        }
        for (; i < b->size; i++)
            b->want[i] = (uint8_t)i;
        /* holes: a zero stretch too */
        if (b->what[0] == 'h')
            memset(b->want + 4 * MiB, 0, 4 * MiB);
    }
}

#define CU(call)                                                                        \
    do {                                                                                \
        CUresult rc_ = (call);                                                          \
        if (rc_ != CUDA_SUCCESS) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, rc_);  \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

/* How the host stores are made (pipe_opts; main's second argument). */
static int t_store_thp, t_prefault;

static struct pipe *new_pipe(unsigned workers, size_t chunk, size_t slot, int no_helpers)
{
    struct pipe_opts o = { .chunk_size = chunk, .workers = workers, .slot_size = slot,
                           .slots = slot ? 3 : 0, .no_helpers = no_helpers ? 1 : -1,
                           .device_hash = no_helpers ? 0 : 1, .store_thp = t_store_thp,
                           .prefault = t_prefault,
                           .ctx_enter = t_ctx_enter, .ctx_leave = t_ctx_leave };
    struct pipe *p = NULL;

    if (pipe_new(&p, &o)) {
        fprintf(stderr, "pipe_new failed\n");
        exit(1);
    }
    return p;
}

/* The extents: every buffer whole, except "holes", which skips [1, 2) MiB
 * and [9, 10.5) MiB (a framework's skip hints). */
static size_t extents(struct pipe_ext *e)
{
    size_t n = 0;

    for (int i = 0; i < NBUF; i++) {
        struct buf *b = &bufs[i];
        if (b->what[0] != 'h') {
            e[n++] = (struct pipe_ext){ b->va, b->size, (uint64_t)i + 10, 0, b->dtype, 0 };
            continue;
        }
        e[n++] = (struct pipe_ext){ b->va, MiB, (uint64_t)i + 10, 0, b->dtype, 0 };
        e[n++] = (struct pipe_ext){ b->va + 2 * MiB, 7 * MiB, (uint64_t)i + 10, 2 * MiB,
                                    b->dtype, 0 };
        e[n++] = (struct pipe_ext){ b->va + 21 * MiB / 2, 3 * MiB / 2, (uint64_t)i + 10,
                                    21 * MiB / 2, b->dtype, 0 };
    }
    return n;
}

static int is_hole(const struct buf *b, size_t off)
{
    return b->what[0] == 'h' && ((off >= MiB && off < 2 * MiB) ||
                                 (off >= 9 * MiB && off < 21 * MiB / 2));
}

static int upload_all(void)
{
    for (int i = 0; i < NBUF; i++)
        CU(TCGPU_REAL(cuMemcpyHtoD)(bufs[i].va, bufs[i].want, bufs[i].size));
    return 0;
}

static int scribble(void)
{
    for (int i = 0; i < NBUF; i++)
        CU(TCGPU_REAL(cuMemsetD8)(bufs[i].va, 0xA5, bufs[i].size));
    return 0;
}

/* Device == want, except in holes (left as they were: 0xA5 after scribble). */
static int compare(const char *when)
{
    for (int i = 0; i < NBUF; i++) {
        struct buf *b = &bufs[i];
        uint8_t *got = malloc(b->size);

        CU(TCGPU_REAL(cuMemcpyDtoH)(got, b->va, b->size));
        for (size_t k = 0; k < b->size; k++) {
            uint8_t want = is_hole(b, k) ? 0xA5 : b->want[k];
            if (got[k] != want) {
                fprintf(stderr, "FAIL %s: %s byte %zu is %#x, want %#x\n", when, b->what, k,
                        got[k], want);
                free(got);
                return 1;
            }
        }
        free(got);
    }
    return 0;
}

static int add_allocs(struct image_writer *w)
{
    struct image_device d = { .ordinal = 0, .name = "sim" };

    if (image_writer_add_device(w, &d, NULL))
        return 1;
    for (int i = 0; i < NBUF; i++) {
        struct image_alloc a = { .id = (uint64_t)i + 10, .addr = bufs[i].va,
                                 .size = bufs[i].size, .dtype = bufs[i].dtype };
        if (image_writer_add_allocation(w, &a))
            return 1;
    }
    return 0;
}

static void allocs_ext(struct pipe_ext *e)
{
    for (int i = 0; i < NBUF; i++)
        e[i] = (struct pipe_ext){ bufs[i].va, bufs[i].size, (uint64_t)i + 10, 0,
                                  bufs[i].dtype, 0 };
}

/* Streams the buffers into an image at dir (parent may be NULL). */
static int write_image(struct pipe *p, const char *dir, const char *parent_dir,
                       struct pipe_stats *st)
{
    struct pipe_ext e[NBUF + 4];
    size_t n = extents(e);
    struct image_writer *w = NULL;
    struct image *parent = NULL;
    struct chunk_sink sink;
    char err[512];
    int rc;

    REQUIRE(image_writer_begin(&w, dir, NULL, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(add_allocs(w) == 0, "allocations");
    if (parent_dir) {
        uint8_t csum[16];
        REQUIRE(image_open(&parent, parent_dir, 0, err, sizeof(err)) == 0, "%s", err);
        image_manifest_csum(parent, csum);
        REQUIRE(image_writer_set_parent(w, parent_dir, csum) == 0, "set_parent");
    }
    chunk_sink_init(&sink, w, parent);
    rc = pipe_drain_image(p, e, n, &sink);
    REQUIRE(rc == 0, "pipe_drain_image: %d %s", rc, pipe_error(p));
    pipe_get_stats(p, st);
    REQUIRE(image_writer_commit(w) == 0, "%s", image_writer_error(w));
    image_writer_free(w);
    image_close(parent);
    return 0;
}

static int refill_image(struct pipe *p, const char *dir, int want_rc, const char *want_msg)
{
    struct pipe_ext e[NBUF];
    struct image *img = NULL;
    struct chunk_source src;
    char err[512] = "";
    int rc = image_open(&img, dir, 0, err, sizeof(err));

    if (want_rc) {
        REQUIRE(rc == want_rc, "opening %s: %d, want %d (%s)", dir, rc, want_rc, err);
        REQUIRE(strstr(err, want_msg), "message '%s' lacks '%s'", err, want_msg);
        return 0;
    }
    REQUIRE(rc == 0, "%s", err);
    REQUIRE(image_verify_all(img, 0) == 0, "%s", image_error(img));
    allocs_ext(e);
    chunk_source_init(&src, img);
    rc = pipe_refill_image(p, &src, e, NBUF);
    REQUIRE(rc == 0, "pipe_refill_image: %s", pipe_error(p));
    image_close(img);
    return 0;
}

/* --- tests ------------------------------------------------------------------ */

static int test_host(void)
{
    for (int helpers = 0; helpers < 2; helpers++) {
        struct pipe *p = new_pipe(0, 0, 0, !helpers);
        struct pipe_ext e[NBUF + 4];
        size_t n = extents(e);
        struct pipe_store *s = NULL;
        struct pipe_stats st;

        if (upload_all())
            return 1;
        REQUIRE(pipe_drain_host(p, e, n, &s) == 0, "drain: %s", pipe_error(p));
        pipe_get_stats(p, &st);
        if (helpers) {
            REQUIRE(st.helpers == PDEV_SIM_TWIN, "helpers %d: the simcuda twin did not load",
                  st.helpers);
            /* zeros (3 chunks) + the zero stretch of holes (1) */
            REQUIRE(st.device_skipped >= 4, "device skipped only %llu chunks",
                  (unsigned long long)st.device_skipped);
            REQUIRE(st.copied_bytes < st.raw_bytes - 12 * MiB, "copied %llu of %llu",
                  (unsigned long long)st.copied_bytes, (unsigned long long)st.raw_bytes);
        } else {
            REQUIRE(st.copied_bytes == st.raw_bytes, "copied %llu of %llu",
                  (unsigned long long)st.copied_bytes, (unsigned long long)st.raw_bytes);
        }
        if (scribble())
            return 1;
        REQUIRE(pipe_refill_host(p, s) == 0, "refill: %s", pipe_error(p));
        if (compare(helpers ? "host, helpers" : "host"))
            return 1;
        pipe_store_free(s);
        pipe_free(p);
    }
    return 0;
}

static int test_image(void)
{
    struct pipe *p = new_pipe(0, 0, 0, 0);
    struct pipe_stats st;
    struct image *img = NULL;
    unsigned seen = 0;
    char dir[300], err[512];

    snprintf(dir, sizeof(dir), "%s/img", tmpdir);
    if (upload_all() || write_image(p, dir, NULL, &st))
        return 1;
    REQUIRE(image_open(&img, dir, 0, err, sizeof(err)) == 0, "%s", err);
    for (size_t i = 0; i < image_chunk_count(img); i++)
        seen |= 1u << image_chunk_at(img, i)->codec;
    image_close(img);
    REQUIRE(seen == ((1u << TCGPU_CODEC_ZERO) | (1u << TCGPU_CODEC_RAW) | (1u << TCGPU_CODEC_ZSTD) |
                   (1u << TCGPU_CODEC_BYTEGROUP)),
          "codecs used: mask %#x", seen);
    REQUIRE(st.stored_bytes < st.raw_bytes, "nothing compressed");
    if (scribble() || refill_image(p, dir, 0, NULL) || compare("image"))
        return 1;
    pipe_free(p);
    return 0;
}

static int test_store_image(void)
{
    struct pipe *p = new_pipe(2, 0, 0, 0);
    struct pipe_ext e[NBUF + 4];
    size_t n = extents(e);
    struct pipe_store *s = NULL;
    struct image_writer *w = NULL;
    struct chunk_sink sink;
    char dir[300], err[512];

    snprintf(dir, sizeof(dir), "%s/store-img", tmpdir);
    if (upload_all())
        return 1;
    REQUIRE(pipe_drain_host(p, e, n, &s) == 0, "drain: %s", pipe_error(p));
    if (scribble())   /* the device is "released": the store alone holds the bytes */
        return 1;
    REQUIRE(image_writer_begin(&w, dir, NULL, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(add_allocs(w) == 0, "allocations");
    chunk_sink_init(&sink, w, NULL);
    REQUIRE(pipe_write_store(p, s, &sink) == 0, "write store: %s", pipe_error(p));
    REQUIRE(image_writer_commit(w) == 0, "%s", image_writer_error(w));
    image_writer_free(w);
    pipe_store_free(s);
    if (refill_image(p, dir, 0, NULL) || compare("store to image"))
        return 1;
    pipe_free(p);
    return 0;
}

/* One changed byte in buffer `i` at `off`, on the device and in `want`. */
static int touch(int i, size_t off)
{
    uint8_t v = bufs[i].want[off] ^= 0x5A;

    CU(TCGPU_REAL(cuMemcpyHtoD)(bufs[i].va + off, &v, 1));
    return 0;
}

static size_t count_codec(const char *dir, unsigned codec)
{
    struct image *img = NULL;
    size_t n = 0;

    if (image_open(&img, dir, IMAGE_OPEN_NO_PARENT, NULL, 0))
        return (size_t)-1;
    for (size_t i = 0; i < image_chunk_count(img); i++) {
        n += image_chunk_at(img, i)->codec == codec;
        if (getenv("TEST_VERBOSE"))
            fprintf(stderr, "%s: chunk %zu alloc %llu +%#llx len %u codec %u\n", dir, i,
                    (unsigned long long)image_chunk_at(img, i)->alloc_id,
                    (unsigned long long)image_chunk_at(img, i)->alloc_offset,
                    image_chunk_at(img, i)->raw_len, image_chunk_at(img, i)->codec);
    }
    image_close(img);
    return n;
}

static int copy_file(const char *from, const char *to)
{
    char cmd[1024];

    snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s'", from, to);
    return system(cmd);
}

static int test_chain(void)
{
    char a[300], b[300], c[300], x[300], moved[300], path[1300];
    uint8_t *at_b[NBUF];
    struct pipe_stats st;

    snprintf(a, sizeof(a), "%s/A", tmpdir);
    snprintf(b, sizeof(b), "%s/B", tmpdir);
    snprintf(c, sizeof(c), "%s/C", tmpdir);
    snprintf(moved, sizeof(moved), "%s/A-moved", tmpdir);
    snprintf(x, sizeof(x), "%s/X", tmpdir);
    for (int helpers = 0; helpers < 2; helpers++) {
        struct pipe *p = new_pipe(0, 0, 0, !helpers);
        size_t total, parents_b, parents_c;

        if (helpers) {
            snprintf(path, sizeof(path), "rm -rf '%s' '%s' '%s' '%s'", a, b, c, moved);
            REQUIRE(system(path) == 0, "cleanup");
        }
        if (upload_all() || write_image(p, a, NULL, &st))
            return 1;
        total = count_codec(a, TCGPU_CODEC_ZERO) + count_codec(a, TCGPU_CODEC_RAW) +
                count_codec(a, TCGPU_CODEC_ZSTD) + count_codec(a, TCGPU_CODEC_BYTEGROUP);
        /* B: one byte of fp32's first chunk changed */
        if (touch(4, 100) || write_image(p, b, a, &st))
            return 1;
        /* Unchanged chunks are PARENT, or ZERO when the device found them
         * zero (as cheap, and self-contained). */
        parents_b = count_codec(b, TCGPU_CODEC_PARENT);
        REQUIRE(parents_b + count_codec(b, TCGPU_CODEC_ZERO) == total - 1,
              "B: %zu PARENT + %zu ZERO chunks of %zu, want all but one (helpers %d)",
              parents_b, count_codec(b, TCGPU_CODEC_ZERO), total, helpers);
        REQUIRE(st.parent_chunks == parents_b, "stats: %llu parent chunks",
              (unsigned long long)st.parent_chunks);
        if (helpers)   /* unchanged chunks never left the device */
            REQUIRE(st.copied_bytes <= 4 * MiB, "B copied %llu bytes",
                  (unsigned long long)st.copied_bytes);
        for (int i = 0; i < NBUF; i++) {
            at_b[i] = malloc(bufs[i].size);
            memcpy(at_b[i], bufs[i].want, bufs[i].size);
        }
        /* C: bf16's last chunk and the small buffer changed */
        if (touch(3, 8 * MiB - 1) || touch(5, 999) || write_image(p, c, b, &st))
            return 1;
        parents_c = count_codec(c, TCGPU_CODEC_PARENT) + count_codec(c, TCGPU_CODEC_ZERO);
        REQUIRE(parents_c == total - 2, "C: %zu PARENT chunks of %zu", parents_c, total);
        /* C resolves through B to A */
        if (scribble() || refill_image(p, c, 0, NULL) || compare("chain C"))
            return 1;
        /* B, as it was */
        for (int i = 0; i < NBUF; i++) {
            uint8_t *t = bufs[i].want;
            bufs[i].want = at_b[i];
            at_b[i] = t;
        }
        if (scribble() || refill_image(p, b, 0, NULL) || compare("chain B"))
            return 1;
        for (int i = 0; i < NBUF; i++) {
            free(bufs[i].want);
            bufs[i].want = at_b[i];
        }
        if (helpers && write_image(p, x, NULL, &st))
            return 1;
        pipe_free(p);
    }
    /* A moved away: C cannot be read (B's parent is missing) */
    REQUIRE(rename(a, moved) == 0, "rename");
    if (refill_image(NULL, c, -ENOENT, "parent image"))
        return 1;
    /* A replaced by another image (an independent full one): checksum differs */
    REQUIRE(copy_file(x, a) == 0, "copy");
    snprintf(path, sizeof(path), "rm -rf '%s'", a);
    if (refill_image(NULL, c, -EBADMSG, "is not the image"))
        return 1;
    REQUIRE(system(path) == 0, "rm");
    /* A back, with its manifest damaged */
    REQUIRE(rename(moved, a) == 0, "rename back");
    snprintf(path, sizeof(path), "%s/manifest", a);
    {
        int fd = open(path, O_RDWR);
        uint8_t byte;
        REQUIRE(fd >= 0 && pread(fd, &byte, 1, 100) == 1, "read");
        byte ^= 0x40;
        REQUIRE(pwrite(fd, &byte, 1, 100) == 1, "write");
        close(fd);
    }
    if (refill_image(NULL, c, -EBADMSG, "parent image"))
        return 1;
    return 0;
}

/* Scans every desc with the twin and checks its hashes and zero flags
 * against the host reference; even entries are random bytes, odd ones zero. */
static int check_twin_hashes(struct pdev *d, CUstream s, const struct pdev_desc *desc, size_t n,
                             const uint8_t *h, CUdeviceptr dbuf, unsigned form_flag,
                             const char *form)
{
    struct pdev_result res[2 * 16];
    char err[256];

    REQUIRE(pdev_scan(d, s, desc, n, PDEV_SCAN_HASH | form_flag, res, err, sizeof(err)) == 0,
            "scan: %s", err);
    for (size_t i = 0; i < n; i++) {
        uint32_t nz;
        uint64_t want = devhash_host(h + (desc[i].va - dbuf), desc[i].len, &nz);
        REQUIRE(res[i].hash == want, "%s: chunk %zu (len %llu): device hash %#llx, host %#llx",
                form, i, (unsigned long long)desc[i].len, (unsigned long long)res[i].hash,
                (unsigned long long)want);
        REQUIRE(res[i].nonzero == nz && nz == (i % 2 == 0), "%s: chunk %zu: nonzero %u", form, i,
                res[i].nonzero);
    }
    return 0;
}

static int test_devhash(void)
{
    /* around the vector form's eight pairs (128 bytes), and the usual sizes */
    static const size_t lens[] = { 1, 7, 8, 15, 16, 17, 31, 127, 128, 129, 143, 4096, 65537,
                                   4 * MiB - 1, 4 * MiB, 4 * MiB + 61 };
    struct pdev *d = NULL;
    CUstream s;
    CUdeviceptr dbuf;
    uint8_t *h = malloc(4 * MiB + 64);
    struct pdev_desc desc[2 * 16];
    struct pdev_result res[2 * 16];
    char err[256];
    size_t n = 0;

    CU(TCGPU_REAL(cuCtxPushCurrent)(t_ctx));
    CU(TCGPU_REAL(cuStreamCreate)(&s, CU_STREAM_NON_BLOCKING));
    REQUIRE(pdev_load(&d, 64, 0) == -ENOENT, "the GPU's image loaded on simcuda");
    REQUIRE(pdev_load(&d, 64, 1) == 0, "no helper image loads on simcuda");
    REQUIRE(pdev_kind(d) == PDEV_SIM_TWIN, "loaded kind %d", pdev_kind(d));
    CU(TCGPU_REAL(cuMemAlloc)(&dbuf, 4 * MiB + 64));
    for (size_t i = 0; i < 4 * MiB + 64; i++)
        h[i] = (uint8_t)t_rand();
    memset(h + 3 * MiB, 0, MiB + 64);
    CU(TCGPU_REAL(cuMemcpyHtoD)(dbuf, h, 4 * MiB + 64));
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        /* unaligned, random (the longest end in the zero tail: the buffer's end) */
        desc[n++] = (struct pdev_desc){ dbuf + 3, lens[i] };
        desc[n++] = (struct pdev_desc){ dbuf + 3 * MiB, lens[i] < MiB ? lens[i] : MiB };
    }
    /* The twin's vector form where the host has one, then its scalar form. */
    if (check_twin_hashes(d, s, desc, n, h, dbuf, 0, "default") ||
        check_twin_hashes(d, s, desc, n, h, dbuf, PDEV_SCAN_SCALAR, "scalar"))
        return 1;
    /* A single non-zero byte at the very end is seen; one bit flip changes the hash. */
    uint8_t one = 1;
    CU(TCGPU_REAL(cuMemcpyHtoD)(dbuf + 3 * MiB + 4095, &one, 1));
    desc[0] = (struct pdev_desc){ dbuf + 3 * MiB, 4096 };
    REQUIRE(pdev_scan(d, s, desc, 1, PDEV_SCAN_HASH, res, err, sizeof(err)) == 0, "scan: %s", err);
    REQUIRE(res[0].nonzero == 1, "last byte missed");
    {   /* zero detection alone agrees */
        struct pdev_result z[20];
        REQUIRE(pdev_scan(d, s, desc, 1, 0, z, err, sizeof(err)) == 0, "scan: %s", err);
        REQUIRE(z[0].nonzero == 1 && z[0].hash == 0, "zero-only scan: nonzero %u", z[0].nonzero);
    }
    REQUIRE(res[0].hash != devhash_host(h + 3 * MiB, 4096, NULL), "hash ignores a change");
    /* The library's own fast form (the workers' block hashes) agrees too,
     * at every alignment and around its 128-byte steps. */
    for (size_t len = 0; len < 3000; len += len < 300 ? 1 : 97) {
        for (size_t off = 0; off < 16; off += 5) {
            uint32_t nz_fast = 2, nz_ref = 3;

            REQUIRE(devhash_fast(h + off, len, &nz_fast) == devhash_host(h + off, len, &nz_ref) &&
                        nz_fast == nz_ref,
                    "devhash_fast (vector form %d) differs at length %zu, offset %zu",
                    devhash_fast_is_vector(), len, off);
        }
    }
    REQUIRE(devhash_fast(h + 3 * MiB, MiB, NULL) == devhash_host(h + 3 * MiB, MiB, NULL),
            "devhash_fast differs on zeros");
    /* Known answer: pins the definition (devhash.h) across builds. */
    {
        uint8_t k[40];
        for (int i = 0; i < 40; i++)
            k[i] = (uint8_t)i;
        uint64_t v = devhash_host(k, 40, NULL);
        REQUIRE(v == devhash_final(devhash_term(0, 0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull) +
                                 devhash_term(1, 0x1716151413121110ull, 0x1f1e1d1c1b1a1918ull) +
                                 devhash_term(2, 0x2726252423222120ull, 0), 40),
              "definition drift");
    }
    TCGPU_REAL(cuMemFree)(dbuf);
    pdev_unload(d);
    TCGPU_REAL(cuStreamDestroy)(s);
    t_ctx_leave(NULL);
    free(h);
    return 0;
}

static int test_compress(void)
{
    struct pipe *p = new_pipe(2, 0, 0, 0);
    struct pipe_ext e[NBUF + 4];
    size_t n = extents(e);
    struct pipe_store *s = NULL;
    uint64_t before;

    if (upload_all())
        return 1;
    REQUIRE(pipe_drain_host(p, e, n, &s) == 0, "drain: %s", pipe_error(p));
    before = pipe_store_bytes(s);
    REQUIRE(pipe_store_compress_start(s, 2) == 0, "start");
    usleep(300000);
    pipe_store_compress_stop(s);
    REQUIRE(pipe_store_bytes(s) < before, "store did not shrink: %llu -> %llu",
          (unsigned long long)before, (unsigned long long)pipe_store_bytes(s));
    if (scribble())
        return 1;
    REQUIRE(pipe_refill_host(p, s) == 0, "refill: %s", pipe_error(p));
    pipe_store_free(s);
    pipe_free(p);
    return compare("compressed store");
}

static int test_ring(void)
{
    static const unsigned workers[] = { 1, 5 };

    for (int k = 0; k < 2; k++) {
        struct pipe *p = new_pipe(workers[k], 64 * 1024, 64 * 1024 * 3, k);
        struct pipe_stats st;
        char dir[300];

        snprintf(dir, sizeof(dir), "%s/ring-%d", tmpdir, k);
        if (upload_all() || write_image(p, dir, NULL, &st))
            return 1;
        if (scribble() || refill_image(p, dir, 0, NULL) || compare("ring"))
            return 1;
        pipe_free(p);
    }
    return 0;
}

static int test_reuse(void)
{
    struct pipe *p = new_pipe(2, 0, 0, 1);
    struct pipe_ext e[NBUF + 4];
    size_t n = extents(e);
    struct pipe_store *s = NULL, *again = NULL;
    struct pipe_stats st;
    uint64_t kept;

    if (upload_all())
        return 1;
    REQUIRE(pipe_drain_host(p, e, n, &s) == 0, "drain: %s", pipe_error(p));
    pipe_get_stats(p, &st);
    REQUIRE(!st.store_reused, "a fresh store counted as reused");
    REQUIRE(pipe_refill_host(p, s) == 0, "refill: %s", pipe_error(p));
    kept = pipe_store_empty(s);
    REQUIRE(kept >= st.raw_bytes, "kept %llu bytes of %llu", (unsigned long long)kept,
            (unsigned long long)st.raw_bytes);
    REQUIRE(pipe_store_bytes(s) == 0, "an emptied store holds %llu bytes",
            (unsigned long long)pipe_store_bytes(s));
    /* Plain pages while kept; reclaimable (MADV_FREE) only when asked, once. */
    REQUIRE(!pipe_store_is_reclaimable(s), "an emptied store is reclaimable by itself");
    pipe_store_make_reclaimable(s);
    REQUIRE(pipe_store_is_reclaimable(s), "pipe_store_make_reclaimable did nothing");
    pipe_store_make_reclaimable(s);
    /* The program ran on: new contents, drained into the same pages (the
     * ones the kernel may have taken read as zero and are written too). */
    if (touch(3, 12345) || touch(4, 4 * MiB + 7))
        return 1;
    REQUIRE(pipe_drain_host_reuse(p, e, n, s, &again) == 0, "drain: %s", pipe_error(p));
    REQUIRE(!pipe_store_is_reclaimable(again), "a store drained into is still reclaimable");
    pipe_get_stats(p, &st);
    REQUIRE(again == s && st.store_reused, "the spare's arena was not reused");
    REQUIRE(pipe_store_kept_bytes(again) == kept, "arena %llu bytes, was %llu",
            (unsigned long long)pipe_store_kept_bytes(again), (unsigned long long)kept);
    if (scribble())
        return 1;
    REQUIRE(pipe_refill_host(p, again) == 0, "refill: %s", pipe_error(p));
    if (compare("reused store"))
        return 1;
    /* More memory than the arena has: it grows, the bytes stay right. */
    pipe_store_empty(again);
    {
        struct pipe_ext more[2 * (NBUF + 4)];
        for (size_t i = 0; i < n; i++)
            more[i] = more[i + n] = e[i];
        for (size_t i = n; i < 2 * n; i++)
            more[i].alloc_id += 100;   /* the same bytes saved twice, as other ids */
        REQUIRE(pipe_drain_host_reuse(p, more, 2 * n, again, &s) == 0, "drain: %s",
                pipe_error(p));
        REQUIRE(pipe_store_kept_bytes(s) >= 2 * st.raw_bytes, "arena did not grow");
        for (int i = 0; i < NBUF; i++) {
            uint8_t *got = malloc(bufs[i].size);
            size_t off = bufs[i].what[0] == 'h' ? 2 * MiB : 0;
            size_t len = bufs[i].what[0] == 'h' ? 7 * MiB : bufs[i].size;
            for (size_t at = off; at < off + len;) {   /* a read stays within a chunk */
                size_t step = (at / (4 * MiB) + 1) * (4 * MiB) - at;
                if (step > off + len - at)
                    step = off + len - at;
                REQUIRE(pipe_store_read(s, (uint64_t)i + 110, at, got + at, step) == 0,
                        "read %s at %zu", bufs[i].what, at);
                at += step;
            }
            CHECK(!memcmp(got + off, bufs[i].want + off, len), "grown store: buffer %s differs",
                  bufs[i].what);
            free(got);
        }
    }
    pipe_store_free(s);
    pipe_free(p);
    return 0;
}

static int test_copy_fail(void)
{
    struct pipe *p = new_pipe(2, 0, 0, 1);
    CUdeviceptr gone;
    struct image_writer *w = NULL;
    struct chunk_sink sink;
    struct pipe_stats st;
    char dir[300], err[512];
    int rc;

    /* An allocation freed before the drain: its copy fails at the call,
     * after the copy of bf16's first chunk into the same slot was issued. */
    CU(TCGPU_REAL(cuMemAlloc)(&gone, 4 * MiB));
    CU(TCGPU_REAL(cuMemFree)(gone));
    struct pipe_ext e[2] = {
        { bufs[3].va, 4 * MiB, 13, 0, bufs[3].dtype, 0 },
        { gone, 4 * MiB, 14, 0, TCGPU_DTYPE_U8, 0 },
    };
    struct image_alloc a1 = { .id = 13, .addr = bufs[3].va, .size = bufs[3].size };
    struct image_alloc a2 = { .id = 14, .addr = gone, .size = 4 * MiB };
    struct image_device d = { .ordinal = 0, .name = "sim" };

    if (upload_all())
        return 1;
    snprintf(dir, sizeof(dir), "%s/copy-fail", tmpdir);
    REQUIRE(image_writer_begin(&w, dir, NULL, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(image_writer_add_device(w, &d, NULL) == 0 && image_writer_add_allocation(w, &a1) == 0 &&
            image_writer_add_allocation(w, &a2) == 0, "allocations");
    chunk_sink_init(&sink, w, NULL);
    rc = pipe_drain_image(p, e, 2, &sink);
    pipe_get_stats(p, &st);
    REQUIRE(rc == -EIO, "drain of freed memory: %d (%s)", rc, pipe_error(p));
    CHECK(strstr(pipe_error(p), "cuMemcpyDtoHAsync"), "message: %s", pipe_error(p));
    CHECK(st.encoded_chunks == 0, "%llu chunks of the failed slot were encoded",
          (unsigned long long)st.encoded_chunks);
    image_writer_free(w);
    /* The pipe is still good for the next drain. */
    if (upload_all() || write_image(p, dir, NULL, &st) || scribble() ||
        refill_image(p, dir, 0, NULL) || compare("after a failed drain"))
        return 1;
    pipe_free(p);
    return 0;
}

/* Stored bytes of allocation `id` in the image at dir (alone: no parent). */
/* The driver refuses pinned memory: every registration the ring makes must
 * be undone when it is freed (a registered range outliving its free()
 * stays in the driver's tables and refuses the next registration there). */
static int registered, unregistered, unregister_failed;
static tcgpu_pfn_cuMemHostRegister_v2 real_register;
static tcgpu_pfn_cuMemHostUnregister real_unregister;

static CUresult CUDAAPI refuse_pinned(void **pp, size_t bytes, unsigned flags)
{
    (void)pp, (void)bytes, (void)flags;
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult CUDAAPI count_register(void *m, size_t bytes, unsigned flags)
{
    CUresult rc = real_register(m, bytes, flags);

    registered += rc == CUDA_SUCCESS;
    return rc;
}

static CUresult CUDAAPI count_unregister(void *m)
{
    CUresult rc = real_unregister(m);

    unregistered += rc == CUDA_SUCCESS;
    unregister_failed += rc != CUDA_SUCCESS;
    return rc;
}

static int test_unpinned(void)
{
    tcgpu_pfn_cuMemHostAlloc real_alloc = tcgpu_driver.fn_cuMemHostAlloc;
    struct pipe *p;
    struct pipe_stats st;
    char dir[300];
    int rc = 0;

    real_register = tcgpu_driver.fn_cuMemHostRegister_v2;
    real_unregister = tcgpu_driver.fn_cuMemHostUnregister;
    tcgpu_driver.fn_cuMemHostAlloc = refuse_pinned;
    tcgpu_driver.fn_cuMemHostRegister_v2 = count_register;
    tcgpu_driver.fn_cuMemHostUnregister = count_unregister;
    p = new_pipe(2, 0, 0, 1);
    snprintf(dir, sizeof(dir), "%s/unpinned", tmpdir);
    if (upload_all() || write_image(p, dir, NULL, &st) || scribble() ||
        refill_image(p, dir, 0, NULL) || compare("unpinned ring"))
        rc = 1;
    pipe_free(p);
    tcgpu_driver.fn_cuMemHostAlloc = real_alloc;
    tcgpu_driver.fn_cuMemHostRegister_v2 = real_register;
    tcgpu_driver.fn_cuMemHostUnregister = real_unregister;
    if (rc)
        return 1;
    REQUIRE(registered > 0, "no slot was registered");
    REQUIRE(unregistered == registered && !unregister_failed,
            "%d registrations, %d undone, %d refused", registered, unregistered, unregister_failed);
    return 0;
}

static uint64_t alloc_stored(const char *dir, uint64_t id, unsigned codec, size_t *count)
{
    struct image *img = NULL;
    uint64_t n = 0;

    *count = 0;
    if (image_open(&img, dir, IMAGE_OPEN_NO_PARENT, NULL, 0))
        return 0;
    for (size_t i = 0; i < image_chunk_count(img); i++) {
        const struct image_chunk *c = image_chunk_at(img, i);
        if (c->alloc_id == id && (codec == TCGPU_CODEC_COUNT || c->codec == codec)) {
            n += c->stored_len;
            (*count)++;
        }
    }
    image_close(img);
    return n;
}

/* Whether the images at a and b hold the same block hashes, chunk by chunk. */
static int same_block_hashes(const char *a, const char *b, size_t *chunks_with)
{
    struct image *ia = NULL, *ib = NULL;
    int same;

    *chunks_with = 0;
    if (image_open(&ia, a, IMAGE_OPEN_NO_PARENT, NULL, 0) ||
        image_open(&ib, b, IMAGE_OPEN_NO_PARENT, NULL, 0)) {
        image_close(ia);
        return 0;
    }
    same = image_chunk_count(ia) == image_chunk_count(ib);
    for (size_t i = 0; same && i < image_chunk_count(ia); i++) {
        uint32_t na = 0, nb = 0, bsa = 0, bsb = 0;
        const uint64_t *ha = image_chunk_blocks(ia, i, &na, &bsa);
        const uint64_t *hb = image_chunk_blocks(ib, i, &nb, &bsb);

        same = !ha == !hb && na == nb && bsa == bsb && (!ha || !memcmp(ha, hb, na * sizeof(*ha)));
        *chunks_with += ha != NULL;
    }
    image_close(ia);
    image_close(ib);
    return same;
}

/* A full image's block hashes, computed by the device's scan (what a GPU
 * always does, TCGPU_DEVICE_HASH=1 on simcuda) or by the workers as they
 * encode (simcuda's default without a parent): the same, and the device's
 * serve an incremental just as well. */
static int device_block_hashes(void)
{
    struct pipe *dev = new_pipe(2, 0, 0, 0), *host = new_pipe(2, 0, 0, 1);
    char a[300], h[300], b[300];
    struct pipe_stats st;
    size_t with;

    snprintf(a, sizeof(a), "%s/DA", tmpdir);
    snprintf(h, sizeof(h), "%s/DH", tmpdir);
    snprintf(b, sizeof(b), "%s/DB", tmpdir);
    if (upload_all() || write_image(dev, a, NULL, &st))
        return 1;
    REQUIRE(st.helpers == 1 && st.device_hashed > 0, "the device hashed %llu blocks (helpers %d)",
            (unsigned long long)st.device_hashed, st.helpers);
    if (write_image(host, h, NULL, &st))
        return 1;
    REQUIRE(st.device_hashed == 0, "the device hashed %llu blocks without helpers",
            (unsigned long long)st.device_hashed);
    REQUIRE(same_block_hashes(a, h, &with) && with > 0,
            "the device's block hashes differ from the workers' (%zu chunks with hashes)", with);
    if (touch(4, 100) || write_image(dev, b, a, &st))
        return 1;
    REQUIRE(st.patched_chunks == 1, "%llu PATCH chunks after one changed byte, from the device's hashes",
            (unsigned long long)st.patched_chunks);
    if (scribble() || refill_image(dev, b, 0, NULL) || compare("patch on the device's hashes"))
        return 1;
    pipe_free(dev);
    pipe_free(host);
    return 0;
}

static int test_patch(void)
{
    struct pipe *p = new_pipe(2, 0, 0, 0);
    char a[300], b[300], c[300], x[300], moved[300], path[400], err[512];
    struct pipe_stats st;
    struct image *img = NULL;
    size_t n, full_n;
    uint64_t full, patched;
    int rc;

    snprintf(a, sizeof(a), "%s/PA", tmpdir);
    snprintf(b, sizeof(b), "%s/PB", tmpdir);
    snprintf(c, sizeof(c), "%s/PC", tmpdir);
    snprintf(x, sizeof(x), "%s/PX", tmpdir);
    snprintf(moved, sizeof(moved), "%s/PA-moved", tmpdir);
    if (device_block_hashes() || upload_all() || write_image(p, a, NULL, &st))
        return 1;
    /* B: one byte in fp32's first chunk, one in bf16's second */
    if (touch(4, 100) || touch(3, 5 * MiB + 3) || write_image(p, b, a, &st))
        return 1;
    REQUIRE(st.patched_chunks == 2, "%llu PATCH chunks, want 2",
            (unsigned long long)st.patched_chunks);
    REQUIRE(alloc_stored(b, 14, TCGPU_CODEC_PATCH, &n) > 0 && n == 1, "fp32: %zu patches", n);
    REQUIRE(st.copied_bytes <= 2 * 64 * 1024, "B copied %llu bytes for two changed blocks",
            (unsigned long long)st.copied_bytes);
    if (scribble() || refill_image(p, b, 0, NULL) || compare("patch B"))
        return 1;
    /* C: a dense step: every bf16 weight moved a little, as by an optimizer */
    for (size_t i = 0; i + 1 < bufs[3].size; i += 2) {
        uint16_t h;
        memcpy(&h, bufs[3].want + i, 2);
        if ((h & 0x7f80) && (h & 0x7f80) != 0x7f80)   /* normal numbers: a mantissa step */
            h = (uint16_t)((h & 0xff80) | ((h + (t_rand() % 3)) & 0x7f));
        memcpy(bufs[3].want + i, &h, 2);
    }
    CU(TCGPU_REAL(cuMemcpyHtoD)(bufs[3].va, bufs[3].want, bufs[3].size));
    if (write_image(p, c, b, &st) || write_image(p, x, NULL, &st))
        return 1;
    patched = alloc_stored(c, 13, TCGPU_CODEC_PATCH, &n);
    full = alloc_stored(x, 13, TCGPU_CODEC_COUNT, &full_n);
    REQUIRE(n == 2 && full_n == 2, "bf16: %zu patches, %zu chunks in full", n, full_n);
    REQUIRE(patched < full * 3 / 4, "the XOR patches take %llu bytes, the full chunks %llu",
            (unsigned long long)patched, (unsigned long long)full);
    fprintf(stderr, "  dense bf16 step: XOR patches %llu bytes, full chunks %llu (%.3f)\n",
            (unsigned long long)patched, (unsigned long long)full, (double)patched / full);
    if (scribble() || refill_image(p, c, 0, NULL) || compare("patch C (XOR)"))
        return 1;
    pipe_free(p);
    /* The parent moved away: B cannot be opened. */
    REQUIRE(rename(a, moved) == 0, "rename");
    if (refill_image(NULL, b, -ENOENT, "parent image"))
        return 1;
    REQUIRE(rename(moved, a) == 0, "rename back");
    /* The parent's bytes under B's patch damaged: refused before any refill. */
    REQUIRE(image_open(&img, b, 0, err, sizeof(err)) == 0, "%s", err);
    {
        const struct image *base;
        size_t bi, pi = (size_t)-1;

        for (size_t i = 0; i < image_chunk_count(img); i++)
            if (image_chunk_at(img, i)->codec == TCGPU_CODEC_PATCH)
                pi = i;
        REQUIRE(pi != (size_t)-1 && image_chunk_base(img, pi, &base, &bi) == 0, "no base");
        const struct image_chunk *k = image_chunk_at(base, bi);
        int fd;
        uint8_t byte;

        snprintf(path, sizeof(path), "%s/data.0", a);
        fd = open(path, O_RDWR);
        REQUIRE(fd >= 0 && pread(fd, &byte, 1, (off_t)(k->file_offset + k->stored_len / 2)) == 1,
                "read");
        byte ^= 0x10;
        REQUIRE(pwrite(fd, &byte, 1, (off_t)(k->file_offset + k->stored_len / 2)) == 1, "write");
        close(fd);
    }
    rc = image_verify_stored(img, 2, err, sizeof(err));
    REQUIRE(rc == -EBADMSG && strstr(err, "stored checksum mismatch") && strstr(err, a),
            "damaged parent: rc %d: %s", rc, err);
    image_close(img);
    return 0;
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    const char *store = argc > 2 ? argv[2] : "";
    CUdevice dev;

    if (!strcmp(store, "thp")) {
        t_store_thp = 1;
        t_prefault = -1;
    } else if (!strcmp(store, "4k")) {
        t_store_thp = -1;
        t_prefault = 1;
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test-pipeline-XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    if (t_driver_load() != 0) {
        fprintf(stderr, "skip: no driver (set TCGPU_REAL_LIBCUDA to simcuda)\n");
        return T_EXIT_SKIP;
    }
    CU(TCGPU_REAL(cuInit)(0));
    CU(TCGPU_REAL(cuDeviceGet)(&dev, 0));
    CU(TCGPU_REAL(cuDevicePrimaryCtxRetain)(&t_ctx, dev));
    CU(TCGPU_REAL(cuCtxSetCurrent)(t_ctx));
    for (int i = 0; i < NBUF; i++) {
        bufs[i].want = malloc(bufs[i].size);
        fill(&bufs[i]);
        CU(TCGPU_REAL(cuMemAlloc)(&bufs[i].va, bufs[i].size));
    }
#define T(name) if (!only || !strcmp(only, #name)) RUN(test_##name)
    T(host);
    T(image);
    T(store_image);
    T(chain);
    T(devhash);
    T(compress);
    T(ring);
    T(reuse);
    T(copy_fail);
    T(unpinned);
    T(patch);
    {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            failures++;
    }
    return T_EXIT_STATUS();
}
