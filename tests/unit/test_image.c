/*
 * test_image.c - image v1: write and read back bit-exactly (io_uring and
 * pwrite paths, pre-encoded chunks out of order), atomic commit, refusal
 * of an existing directory, overwrite, file modes, the ring closed after
 * writing, clear errors on corrupt manifests, data and truncation, a fuzz
 * loop over manifest bytes, and (argument "enospc", root only) a full disk:
 * a tmpfs, and ext4 on a loop device, where the writer reserves room ahead.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY   /* XXH3_state_t */
#include <xxhash.h>
#ifdef TCGPU_HAVE_XXH_DISPATCH
#define XXH_DISPATCH_DISABLE_REPLACE   /* both: the plain functions and the dispatching ones */
#include <xxh_x86dispatch.h>
#endif

#include "image/image.h"
#include "image/iowriter.h"
#include "../common/check.h"
#include "testdata.h"

#define MIB (1024u * 1024u)

static char base[256];

/* The test image: four allocations exercising every codec and a gap. */
enum { A_WEIGHTS = 10, A_MIXED = 11, A_GAPPY = 12, A_EMPTY = 13, NALLOC = 4 };
static uint8_t *content[NALLOC];
static const uint64_t sizes[NALLOC] = {10 * MIB + 6, 6 * MIB, 3 * MIB, 0};

static void make_content(void)
{
    for (int i = 0; i < NALLOC; i++)
        content[i] = calloc(1, sizes[i] + 1);
    td_weights(content[0], sizes[0], TD_BF16, 0.02, 1);
    /* MIXED: 2 MiB zeros, 2 MiB random, 2 MiB text (3 chunks of 2 MiB) */
    td_random(content[1] + 2 * MIB, 2 * MIB, 2);
    td_text(content[1] + 4 * MIB, 2 * MIB, 3);
    /* GAPPY: fp32 in [0,1M) and [2M,3M); [1M,2M) not saved, reads as zero */
    td_weights(content[2], MIB, TD_FP32, 0.1, 4);
    td_weights(content[2] + 2 * MIB, MIB, TD_FP32, 0.1, 5);
}

static int count_io_uring_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[300], target[256];
    int n = 0;

    while (d && (e = readdir(d))) {
        ssize_t len;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, target, sizeof(target) - 1);
        if (len > 0) {
            target[len] = '\0';
            n += strstr(target, "io_uring") != NULL;
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* Entries in `dir` whose name contains `part` (temp dirs left behind). */
static int count_entries(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, part))
            n++;
    if (d)
        closedir(d);
    return n;
}

static int write_image(const char *dir, unsigned flags, int *uring_fds_during)
{
    struct image_writer_opts o = {.flags = flags, .chunk_size = 4 * MIB};
    struct image_process p = {.pid = 4242, .start_time_ns = 1700000000ull * 1000000000ull};
    struct image_device d = {.ordinal = 0,
                             .driver_version = 13000,
                             .total_mem = 2ull << 30,
                             .uuid = {0xde, 0xad, 0xbe, 0xef}};
    struct image_alloc a = {.kind = TCGPU_ALLOC_DEVICE};
    struct image_writer *w;
    struct codec_ctx *worker;
    /* aligned, with room to pad: the ZSTD chunk goes without a copy */
    uint8_t *enc = aligned_alloc(IMAGE_WRITE_ALIGN, 2 * MIB + IMAGE_WRITE_ALIGN);
    char err[512];
    int rc;

    strcpy(p.hostname, "node7");
    strcpy(p.exe, "/usr/bin/python3");
    strcpy(d.name, "simcuda \"GPU\" 0");
    rc = image_writer_begin(&w, dir, &o, err, sizeof(err));
    REQUIRE(rc == 0, "begin %s: %d %s", dir, rc, err);
    REQUIRE(image_writer_set_process(w, &p) == 0 && image_writer_add_device(w, &d, NULL) == 0,
          "identity");
    for (int i = 0; i < NALLOC; i++) {
        a.id = (uint64_t)(A_WEIGHTS + i);
        a.addr = 0x7f0000000000ull + (uint64_t)i * (64 * MIB);
        a.size = sizes[i];
        a.dtype = i == 0 ? TCGPU_DTYPE_BF16 : i == 2 ? TCGPU_DTYPE_FP32 : TCGPU_DTYPE_UNKNOWN;
        a.kind = (uint32_t)i;
        a.callsite = i == 0 ? "train.py:42 (model.to)" : NULL;
        REQUIRE(image_writer_add_allocation(w, &a) == 0, "alloc %d", i);
    }
    REQUIRE(image_writer_add_allocation(w, &a) == -EEXIST, "duplicate id");
    REQUIRE(image_writer_add_data(w, A_WEIGHTS, 0, content[0], sizes[0]) == 0, "weights: %s",
          image_writer_error(w));
    /* MIXED as a worker pipeline would: encoded elsewhere, appended out of
     * order, the ZSTD one written from `enc` itself (waited for before
     * `enc` is encoded into again) */
    REQUIRE(codec_ctx_new(&worker, NULL) == 0, "worker ctx");
    for (int k = 2; k >= 0; k--) {
        struct image_chunk c = {.alloc_id = A_MIXED, .alloc_offset = (uint64_t)k * 2 * MIB};
        const void *stored;

        REQUIRE(image_chunk_encode(worker, content[1] + c.alloc_offset, 2 * MIB, TCGPU_DTYPE_UNKNOWN,
                                 enc, 2 * MIB, &c, &stored) == 0,
              "encode");
        REQUIRE(c.codec == (k == 0   ? TCGPU_CODEC_ZERO
                          : k == 1 ? TCGPU_CODEC_RAW
                                   : TCGPU_CODEC_ZSTD),
              "mixed chunk %d chose %s", k, codec_name(c.codec));
        if (stored == enc) {
            uint64_t ticket;

            REQUIRE(image_writer_add_encoded_ref(w, &c, enc, 2 * MIB + IMAGE_WRITE_ALIGN, 0, NULL,
                                                 &ticket) == 0,
                    "add encoded, no copy: %s", image_writer_error(w));
            REQUIRE(image_writer_wait(w, ticket) == 0, "wait");
            memset(enc, 0xa5, 2 * MIB + IMAGE_WRITE_ALIGN);   /* written: ours again */
        } else {
            REQUIRE(image_writer_add_encoded(w, &c, stored) == 0, "add encoded");
        }
    }
    codec_ctx_free(worker);
    REQUIRE(image_writer_add_chunk(w, A_GAPPY, 2 * MIB, content[2] + 2 * MIB, MIB) == 0, "gappy 2");
    REQUIRE(image_writer_add_chunk(w, A_GAPPY, 0, content[2], MIB) == 0, "gappy 1");
    REQUIRE(image_writer_add_chunk(w, A_GAPPY, 3 * MIB - 4, content[2], 8) == -ERANGE, "beyond");
    REQUIRE(image_writer_add_chunk(w, 999, 0, content[2], 8) == -ENOENT, "unknown alloc");
    if (uring_fds_during)
        *uring_fds_during = count_io_uring_fds();
    rc = image_writer_commit(w);
    REQUIRE(rc == 0, "commit: %d %s", rc, image_writer_error(w));
    image_writer_free(w);
    free(enc);
    return 0;
}

static int check_image(const char *dir)
{
    struct image *img;
    char err[512];
    int rc = image_open(&img, dir, 0, err, sizeof(err));

    REQUIRE(rc == 0, "open %s: %d %s", dir, rc, err);
    REQUIRE(image_alloc_count(img) == NALLOC && image_chunk_count(img) == 3 + 3 + 2, "counts %zu %zu",
          image_alloc_count(img), image_chunk_count(img));
    REQUIRE(image_process_info(img)->pid == 4242 &&
              !strcmp(image_process_info(img)->exe, "/usr/bin/python3") &&
              image_process_info(img)->created_ns > 0,
          "process");
    REQUIRE(image_device_count(img) == 1 && image_device_info(img, 0)->driver_version == 13000 &&
              image_device_info(img, 0)->uuid[3] == 0xef,
          "device");
    REQUIRE(!strcmp(image_find_alloc(img, A_WEIGHTS)->callsite, "train.py:42 (model.to)"),
          "callsite");
    rc = image_verify_all(img, 0);
    REQUIRE(rc == 0, "verify: %d %s", rc, image_error(img));
    for (int i = 0; i < NALLOC; i++) {
        uint8_t *back = malloc(sizes[i] + 1);

        memset(back, 0xa5, sizes[i] + 1);
        rc = image_read_allocation(img, (uint64_t)(A_WEIGHTS + i), back, sizes[i]);
        REQUIRE(rc == 0, "read %d: %d %s", i, rc, image_error(img));
        REQUIRE(memcmp(back, content[i], sizes[i]) == 0, "allocation %d differs", i);
        free(back);
    }
    REQUIRE(image_read_allocation(img, A_WEIGHTS, content[0], 5) == -ENOBUFS, "small buffer");
    REQUIRE(image_read_allocation(img, 77, content[0], 5) == -ENOENT, "no such alloc");
    image_close(img);
    return 0;
}

static int test_roundtrip(void)
{
    char dir[300], sub[400];
    struct stat st;
    int during = -1;

    for (int pass = 0; pass < 2; pass++) {
        snprintf(dir, sizeof(dir), "%s/rt%d", base, pass);
        REQUIRE(write_image(dir, pass ? IMAGE_NO_URING : 0, &during) == 0, "write pass %d", pass);
        fprintf(stderr, "  pass %d: %d io_uring fds while writing, %d after\n", pass, during,
                count_io_uring_fds());
        REQUIRE(count_io_uring_fds() == 0, "the ring must be closed after commit (CRIU)");
        REQUIRE(pass == 0 || during == 0, "IMAGE_NO_URING used a ring");
        REQUIRE(count_entries(base, ".tmp-") == 0, "temp dir left");
        REQUIRE(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0700, "dir mode %o", st.st_mode);
        snprintf(sub, sizeof(sub), "%s/manifest", dir);
        REQUIRE(stat(sub, &st) == 0 && (st.st_mode & 07777) == 0600, "manifest mode %o", st.st_mode);
        snprintf(sub, sizeof(sub), "%s/data.0", dir);
        REQUIRE(stat(sub, &st) == 0 && (st.st_mode & 07777) == 0600, "data mode %o", st.st_mode);
        REQUIRE(check_image(dir) == 0, "check pass %d", pass);
    }
    return 0;
}

static int read_whole(const char *path, uint8_t **buf, size_t *len);

static int zero_between(const uint8_t *b, size_t from, size_t to)
{
    for (size_t k = from; k < to; k++)
        if (b[k])
            return 0;
    return 1;
}

/*
 * iowriter_append_ref between copied appends, in each I/O mode: every
 * piece lands where the writer said, padding is zeros, memory that cannot
 * go without a copy (misaligned, no room to pad) is copied (ticket 0), and
 * a ticket is done after iowriter_wait.
 */
static int check_ref_mode(int no_uring, int no_direct)
{
    enum { P = 4, LEN0 = 1000, LEN1 = 5000, LEN2 = 3, LEN3 = 7000, LEN4 = 8192 };
    const size_t lens[P + 1] = {LEN0, LEN1, LEN2, LEN3, LEN4};
    uint8_t *mem = aligned_alloc(IOWRITER_ALIGN, 4 * 8192);
    uint8_t *piece[P + 1], *back = NULL;
    uint64_t at[P + 1], t1 = 0, t3 = 0, t4 = 0;
    struct iowriter *w;
    char dir[300];
    size_t len;
    int dfd, rc;

    snprintf(dir, sizeof(dir), "%s/ref-%d%d", base, no_uring, no_direct);
    REQUIRE(mem && mkdir(dir, 0700) == 0 && (dfd = open(dir, O_DIRECTORY | O_RDONLY)) >= 0,
            "setup");
    piece[0] = malloc(LEN0);
    piece[1] = mem;                   /* aligned, room to pad: no copy */
    piece[2] = malloc(LEN2);
    piece[3] = mem + 8192 + 1;        /* misaligned: copied */
    piece[4] = mem + 2 * 8192;        /* aligned, exactly 8192: no copy */
    for (int i = 0; i <= P; i++)
        td_random(piece[i], lens[i], 100u + (unsigned)i);
    rc = iowriter_open(&w, dfd, "data", 0600,
                       &(struct iowriter_opts){.no_uring = no_uring, .no_direct = no_direct});
    REQUIRE(rc == 0, "open: %d", rc);
    at[0] = iowriter_offset(w);
    REQUIRE(iowriter_append(w, piece[0], LEN0) == 0, "append 0");
    REQUIRE(iowriter_append_ref(w, piece[1], LEN1, 8192, &at[1], &t1) == 0, "ref 1");
    at[2] = iowriter_offset(w);
    REQUIRE(iowriter_append(w, piece[2], LEN2) == 0, "append 2");
    REQUIRE(iowriter_append_ref(w, piece[3], LEN3, 8192 - 1, &at[3], &t3) == 0, "ref 3");
    REQUIRE(iowriter_append_ref(w, piece[4], LEN4, LEN4, &at[4], &t4) == 0, "ref 4");
    CHECK((t1 != 0) == !no_uring && (t4 != 0) == !no_uring, "tickets %llu %llu",
          (unsigned long long)t1, (unsigned long long)t4);
    CHECK(t3 == 0 || iowriter_uses_direct(w) == 0, "a misaligned buffer was not copied");
    CHECK(!iowriter_uses_direct(w) || (at[1] % IOWRITER_ALIGN == 0 && at[4] % IOWRITER_ALIGN == 0),
          "zero-copy writes at %llu, %llu", (unsigned long long)at[1], (unsigned long long)at[4]);
    REQUIRE(iowriter_wait(w, t4) == 0, "wait");
    /* ours again: what was written is not what is in memory now */
    memset(piece[1], 0x5a, LEN1);
    REQUIRE(iowriter_finish(w) == 0, "finish");
    snprintf(dir + strlen(dir), sizeof(dir) - strlen(dir), "/data");
    REQUIRE(read_whole(dir, &back, &len) == 0, "read back");
    CHECK(len == iowriter_offset(w), "file %zu bytes, writer says %llu", len,
          (unsigned long long)iowriter_offset(w));
    for (int i = 0; i <= P; i++) {
        uint8_t *want = malloc(lens[i]);

        td_random(want, lens[i], 100u + (unsigned)i);
        CHECK(at[i] + lens[i] <= len && !memcmp(back + at[i], want, lens[i]), "piece %d at %llu",
              i, (unsigned long long)at[i]);
        free(want);
    }
    CHECK(zero_between(back, at[0] + LEN0, at[1]) && zero_between(back, at[1] + LEN1, at[2]),
          "padding that is not zero");
    iowriter_free(w);
    close(dfd);
    free(back);
    free(piece[0]);
    free(piece[2]);
    free(mem);
    return 0;
}

static int test_zero_copy(void)
{
    for (int m = 0; m < 4; m++)
        if (check_ref_mode(m & 1, m >> 1) != 0)
            return T_EXIT_FAIL;
    return 0;
}

/* Images move between machines: the checksums the library computes with
 * the CPU's widest vectors (common/xxh.h) are libxxhash's plain XXH3, for
 * every length and alignment (the vector loops' edges). */
static int test_checksums_portable(void)
{
#ifdef TCGPU_HAVE_XXH_DISPATCH
    size_t max = 4u << 20;
    uint8_t *b = malloc(max + 64);
    XXH3_state_t *st = XXH3_createState();

    REQUIRE(b && st, "out of memory");
    for (size_t i = 0; i < max + 64; i++)
        b[i] = (uint8_t)(i * 2654435761u >> 13);
    for (size_t len = 0; len <= max; len = len < 300 ? len + 1 : len * 3 + 17) {
        for (unsigned off = 0; off < 64; off += 21) {
            uint64_t want = XXH3_64bits(b + off, len);
            REQUIRE(XXH3_64bits_dispatch(b + off, len) == want, "length %zu at +%u", len, off);
            REQUIRE(XXH3_64bits_reset(st) == XXH_OK &&
                        XXH3_64bits_update_dispatch(st, b + off, len / 3) == XXH_OK &&
                        XXH3_64bits_update_dispatch(st, b + off + len / 3, len - len / 3) == XXH_OK,
                    "streaming");
            REQUIRE(XXH3_64bits_digest(st) == want, "streamed length %zu at +%u", len, off);
        }
    }
    XXH3_freeState(st);
    free(b);
#else
    fprintf(stderr, "checksums_portable: libxxhash has no x86 dispatch here; nothing to compare\n");
#endif
    return 0;
}

static int test_describe(void)
{
    char dir[300], *buf = NULL;
    size_t len = 0;
    struct image *img;
    FILE *f;

    snprintf(dir, sizeof(dir), "%s/rt0", base);
    REQUIRE(image_open(&img, dir, IMAGE_OPEN_MANIFEST_ONLY, NULL, 0) == 0, "open");
    f = open_memstream(&buf, &len);
    REQUIRE(f && image_describe(img, f) == 0, "describe");
    fclose(f);
    REQUIRE(strstr(buf, "bytegroup") && strstr(buf, "train.py:42") &&
              strstr(buf, "0x00007f0004000000") && strstr(buf, "pid 4242"),
          "text:\n%s", buf);
    fputs(buf, stderr);
    free(buf);
    image_close(img);
    return 0;
}

static int test_existing_and_abort(void)
{
    char dir[300], other[300], err[512], path[400];
    struct image_writer *w;
    struct image *img;
    int fd;

    snprintf(dir, sizeof(dir), "%s/rt0", base);
    REQUIRE(image_writer_begin(&w, dir, NULL, err, sizeof(err)) == -EEXIST, "existing refused");
    REQUIRE(strstr(err, "already exists"), "message: %s", err);
    /* DIR appears while writing: commit refuses atomically, leaves nothing */
    snprintf(other, sizeof(other), "%s/late", base);
    REQUIRE(image_writer_begin(&w, other, NULL, err, sizeof(err)) == 0, "begin: %s", err);
    REQUIRE(mkdir(other, 0755) == 0, "mkdir");
    snprintf(path, sizeof(path), "%s/precious", other);
    fd = open(path, O_CREAT | O_WRONLY, 0644);
    close(fd);
    REQUIRE(image_writer_commit(w) == -EEXIST, "late existing refused");
    image_writer_free(w);
    REQUIRE(count_entries(base, ".tmp-") == 0, "temp dir left");
    /* overwrite may replace an image, never another directory */
    REQUIRE(image_writer_begin(&w, other, &(struct image_writer_opts){.flags = IMAGE_OVERWRITE}, err,
                             sizeof(err)) == 0,
          "begin overwrite");
    REQUIRE(image_writer_commit(w) == -ENOTEMPTY, "not an image: %s", image_writer_error(w));
    image_writer_free(w);
    REQUIRE(access(path, F_OK) == 0 && count_entries(base, ".tmp-") == 0, "precious kept");
    snprintf(dir, sizeof(dir), "%s/rt1", base);
    REQUIRE(image_writer_begin(&w, dir, &(struct image_writer_opts){.flags = IMAGE_OVERWRITE}, err,
                             sizeof(err)) == 0,
          "begin overwrite image");
    REQUIRE(image_writer_commit(w) == 0, "overwrite: %s", image_writer_error(w));
    image_writer_free(w);
    REQUIRE(image_open(&img, dir, 0, err, sizeof(err)) == 0 && image_alloc_count(img) == 0,
          "replaced image is the new, empty one");
    image_close(img);
    REQUIRE(count_entries(base, ".tmp-") == 0, "old image removed");
    /* abort: free without commit */
    snprintf(dir, sizeof(dir), "%s/aborted", base);
    REQUIRE(image_writer_begin(&w, dir, NULL, err, sizeof(err)) == 0, "begin");
    image_writer_free(w);
    REQUIRE(access(dir, F_OK) < 0 && count_entries(base, ".tmp-") == 0, "abort left something");
    return 0;
}

static int read_whole(const char *path, uint8_t **buf, size_t *len)
{
    struct stat st;
    int fd = open(path, O_RDONLY);

    if (fd < 0 || fstat(fd, &st) < 0)
        return -1;
    *len = (size_t)st.st_size;
    *buf = malloc(*len + 1);
    if (read(fd, *buf, *len) != (ssize_t)*len)
        return -1;
    close(fd);
    return 0;
}

static int write_whole(const char *path, const uint8_t *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600), ok;

    ok = fd >= 0 && write(fd, buf, len) == (ssize_t)len;
    close(fd);
    return ok ? 0 : -1;
}

/* A copy of the round-trip image under a new name, data file hard-linked
 * only when `copy_data` is 0. */
static int clone_image(const char *name, char *dir, size_t cap, int copy_data)
{
    char src[400], dst[400];
    uint8_t *buf;
    size_t len;

    snprintf(dir, cap, "%s/%s", base, name);
    if (mkdir(dir, 0700) < 0)
        return -1;
    for (int f = 0; f < 2; f++) {
        const char *n = f ? "data.0" : "manifest";

        snprintf(src, sizeof(src), "%s/rt0/%s", base, n);
        snprintf(dst, sizeof(dst), "%s/%s", dir, n);
        if (f && !copy_data) {
            if (link(src, dst) < 0)
                return -1;
            continue;
        }
        if (read_whole(src, &buf, &len) || write_whole(dst, buf, len))
            return -1;
        free(buf);
    }
    return 0;
}

static int flip_byte(const char *path, size_t at)
{
    uint8_t *buf;
    size_t len;

    if (read_whole(path, &buf, &len) || at >= len)
        return -1;
    buf[at] ^= 0x40;
    write_whole(path, buf, len);
    free(buf);
    return 0;
}

static int test_corruption(void)
{
    char dir[300], path[400], err[512];
    struct image *img;
    const struct image_chunk *victim = NULL;
    size_t vi = 0;
    int rc;

    REQUIRE(clone_image("badman", dir, sizeof(dir), 0) == 0, "clone");
    snprintf(path, sizeof(path), "%s/manifest", dir);
    REQUIRE(flip_byte(path, 300) == 0, "flip");
    rc = image_open(&img, dir, 0, err, sizeof(err));
    REQUIRE(rc == -EBADMSG && strstr(err, "manifest checksum mismatch") && strstr(err, path),
          "rc %d: %s", rc, err);
    REQUIRE(flip_byte(path, 300) == 0 && flip_byte(path, 9) == 0, "flip header");
    rc = image_open(&img, dir, 0, err, sizeof(err));
    REQUIRE(rc == -EBADMSG && strstr(err, "header checksum mismatch"), "rc %d: %s", rc, err);

    /* a data byte: open is fine (sizes agree), verify names the chunk */
    REQUIRE(clone_image("baddata", dir, sizeof(dir), 1) == 0, "clone");
    REQUIRE(image_open(&img, dir, 0, err, sizeof(err)) == 0, "open: %s", err);
    for (size_t i = 0; i < image_chunk_count(img); i++) {
        const struct image_chunk *c = image_chunk_at(img, i);

        if (c->alloc_id == A_MIXED && c->codec == TCGPU_CODEC_ZSTD)
            victim = c, vi = i;
    }
    REQUIRE(victim, "zstd chunk of MIXED");
    snprintf(path, sizeof(path), "%s/data.0", dir);
    REQUIRE(image_verify_stored(img, 3, err, sizeof(err)) == 0, "intact image: %s", err);
    REQUIRE(flip_byte(path, victim->file_offset + victim->stored_len / 2) == 0, "flip data");
    /* the parallel check of stored bytes (a restore's first step) refuses it
     * too, naming the same chunk whatever the thread count */
    for (unsigned t = 1; t <= 4; t += 3) {
        err[0] = '\0';
        rc = image_verify_stored(img, t, err, sizeof(err));
        REQUIRE(rc == -EBADMSG && strstr(err, "chunk 2 of allocation 11") &&
                    strstr(err, "stored checksum mismatch"),
                "%u threads: rc %d: %s", t, rc, err);
    }
    rc = image_verify_all(img, 0);
    REQUIRE(rc == -EBADMSG &&
              strstr(image_error(img), "chunk 2 of allocation 11 (0x7f0004000000+0x400000)") &&
              strstr(image_error(img), "stored checksum mismatch") &&
              strstr(image_error(img), path),
          "rc %d: %s", rc, image_error(img));
    fprintf(stderr, "  %s\n", image_error(img));
    REQUIRE(image_read_allocation(img, A_MIXED, content[1], sizes[1]) == -EBADMSG, "read bad");
    REQUIRE(image_read_allocation(img, A_WEIGHTS, content[0] + 0, sizes[0]) == 0, "others fine");
    (void)vi;
    image_close(img);

    /* truncation: the data file loses its last 1000 bytes */
    REQUIRE(truncate(path, 1000) == 0, "truncate");
    rc = image_open(&img, dir, 0, err, sizeof(err));
    REQUIRE(rc == -EBADMSG && strstr(err, "truncated:") && strstr(err, path) &&
              strstr(err, "is 1000 bytes"),
          "rc %d: %s", rc, err);
    fprintf(stderr, "  %s\n", err);
    REQUIRE(image_open(&img, dir, IMAGE_OPEN_MANIFEST_ONLY, err, sizeof(err)) == 0,
          "manifest-only open of a truncated image");
    image_close(img);
    return 0;
}

/* Recomputes both checksums so the mutation reaches the parser. */
static void reseal(uint8_t *m, size_t len)
{
    XXH128_hash_t h;
    uint64_t hs;

    if (len < 64)
        return;
    hs = XXH3_64bits(m, 32);
    memcpy(m + 32, &hs, 8); /* little-endian host: as the format stores it */
    h = XXH3_128bits(m, len - 16);
    memcpy(m + len - 16, &h.low64, 8);
    memcpy(m + len - 8, &h.high64, 8);
}

static int test_fuzz_manifest(void)
{
    char dir[300], path[400], err[512];
    uint8_t *orig, *m;
    size_t len;
    uint64_t s = 12345;
    int opened = 0;

    REQUIRE(clone_image("fuzz", dir, sizeof(dir), 0) == 0, "clone");
    snprintf(path, sizeof(path), "%s/manifest", dir);
    REQUIRE(read_whole(path, &orig, &len) == 0, "read");
    m = malloc(len);
    for (int i = 0; i < 2000; i++) {
        struct image *img;
        size_t n = len;
        int sealed = i % 2, rc;

        memcpy(m, orig, len);
        for (int k = 0; k < 1 + i % 3; k++) {
            /* bias towards the header and tables, where the numbers are */
            size_t at = td_next(&s) % (k ? len : (len < 400 ? len : 400));

            m[at] = (uint8_t)td_next(&s);
        }
        if (i % 7 == 0)
            n = td_next(&s) % len; /* truncated */
        if (sealed)
            reseal(m, n);
        if (!memcmp(m, orig, n) && n == len)
            continue; /* the mutation changed nothing */
        REQUIRE(write_whole(path, m, n) == 0, "write");
        rc = image_open(&img, dir, 0, err, sizeof(err));
        if (!sealed)
            REQUIRE(rc < 0 && err[0], "unsealed mutation %d accepted", i);
        if (rc == 0) {
            /* a resealed mutation the parser accepts must still be safe to use */
            opened++;
            image_verify_all(img, 0);
            for (size_t a = 0; a < image_alloc_count(img); a++) {
                const struct image_alloc *al = image_alloc_at(img, a);
                void *buf = al->size < 64 * MIB ? malloc(al->size + 1) : NULL;

                if (buf)
                    image_read_allocation(img, al->id, buf, al->size);
                free(buf);
            }
            image_close(img);
        } else {
            REQUIRE(rc < 0 && err[0], "error without a message (%d)", rc);
        }
    }
    fprintf(stderr, "  fuzz: %d of 2000 mutated manifests opened (resealed, harmless fields)\n",
            opened);
    free(m);
    free(orig);
    return 0;
}

/* ENOSPC in a private mount namespace on a 1 MiB tmpfs (root only). */
/* Random 1 MiB chunks of `buf` (RAW: stored where they are), no copy. */
static int add_by_ref(struct image_writer *w, uint8_t *buf, size_t len)
{
    struct codec_ctx *ctx;
    uint8_t *scratch = malloc(codec_bound(MIB));
    int rc = 0;

    if (!scratch || codec_ctx_new(&ctx, NULL) != 0) {
        free(scratch);
        return -ENOMEM;
    }
    for (size_t at = 0; at < len && rc == 0; at += MIB) {
        struct image_chunk c = {.alloc_id = 1, .alloc_offset = at};
        const void *stored;
        uint64_t ticket;

        rc = image_chunk_encode(ctx, buf + at, MIB, TCGPU_DTYPE_UNKNOWN, scratch, codec_bound(MIB),
                                &c, &stored);
        if (rc == 0 && stored != buf + at)
            rc = -EPROTO;         /* random bytes are stored as they are */
        if (rc == 0)
            rc = image_writer_add_encoded_ref(w, &c, (void *)stored, MIB, 0, NULL, &ticket);
    }
    codec_ctx_free(ctx);
    free(scratch);
    return rc;
}

/* An image of `mib` MiB of random bytes (chunks of 1 MiB) at dir: the
 * writer's result, its error in err. */
static int write_random(const char *dir, size_t mib, const uint8_t *buf, char *err, size_t len)
{
    struct image_alloc a = {.id = 1, .addr = 0x1000, .size = mib * MIB};
    struct image_writer *w;
    int rc = image_writer_begin(&w, dir, &(struct image_writer_opts){.chunk_size = MIB}, err, len);

    if (rc)
        return rc;
    rc = image_writer_add_allocation(w, &a);
    if (rc == 0)
        rc = image_writer_add_data(w, 1, 0, buf, mib * MIB);
    if (rc == 0)
        rc = image_writer_commit(w);
    snprintf(err, len, "%s", image_writer_error(w));
    image_writer_free(w);
    return rc;
}

/* The image at dir opens, verifies, and its data file is as long as the
 * bytes written and holds no more blocks than that (what the writer
 * reserved ahead of its writes is given back). */
static int whole_and_trimmed(const char *dir, size_t mib)
{
    char path[400], err[512];
    struct image *img;
    struct stat st;
    int rc = image_open(&img, dir, 0, err, sizeof(err));

    REQUIRE(rc == 0, "open: %s", err);
    rc = image_verify_all(img, 0);
    REQUIRE(rc == 0, "verify: %s", image_error(img));
    image_close(img);
    snprintf(path, sizeof(path), "%s/data.0", dir);
    REQUIRE(stat(path, &st) == 0, "stat %s", path);
    REQUIRE((size_t)st.st_size >= mib * MIB && (size_t)st.st_size < mib * MIB + MIB,
            "data.0 is %lld bytes for %zu MiB", (long long)st.st_size, mib);
    REQUIRE((uint64_t)st.st_blocks * 512 <= (uint64_t)st.st_size + 64 * 1024,
            "data.0 holds %lld bytes of blocks for %lld bytes: the reserve was kept",
            (long long)st.st_blocks * 512, (long long)st.st_size);
    return 0;
}

/*
 * ext4 on a loop device, where the data file is written O_DIRECT and the
 * writer reserves room ahead of its writes (fallocate): on a 16 MiB disk
 * the first reservation (20 MiB) fails part way, and an 8 MiB image is
 * still written whole, at its size; a 32 MiB image fails with -ENOSPC and
 * leaves nothing; on a 64 MiB disk the reserve is given back at commit.
 * Skipped (said so) where the loop device or mkfs.ext4 is missing.
 */
/* On the roomy disk: the writer's file reaches past what was written while
 * it writes (room reserved ahead of the O_DIRECT writes), and is cut back to
 * it by iowriter_finish. */
static int reserve_and_cut(const char *mnt, const uint8_t *buf)
{
    struct iowriter *w;
    struct stat st;
    int dfd = open(mnt, O_DIRECTORY | O_RDONLY), rc;

    REQUIRE(dfd >= 0, "open %s", mnt);
    rc = iowriter_open(&w, dfd, "direct", 0600, NULL);
    REQUIRE(rc == 0 && iowriter_uses_direct(w), "open: %d (direct %d)", rc,
            rc == 0 && iowriter_uses_direct(w));
    REQUIRE(iowriter_append(w, buf, 5 * MIB) == 0, "append");   /* one 4 MiB buffer goes out */
    REQUIRE(fstatat(dfd, "direct", &st, 0) == 0 && (uint64_t)st.st_size >= 20 * MIB,
            "while writing the file is %lld bytes: nothing reserved ahead", (long long)st.st_size);
    REQUIRE(iowriter_finish(w) == 0, "finish");
    REQUIRE(fstatat(dfd, "direct", &st, 0) == 0 && (uint64_t)st.st_size == 5 * MIB &&
                (uint64_t)st.st_blocks * 512 <= 5 * MIB + 64 * 1024,
            "after finish: %lld bytes, %lld in blocks (want 5 MiB)", (long long)st.st_size,
            (long long)st.st_blocks * 512);
    iowriter_free(w);
    unlinkat(dfd, "direct", 0);
    close(dfd);
    return 0;
}

static int ext4_passes(void)
{
    char fs[] = "/tmp/tcgpu-ext4-XXXXXX", mnt[] = "/tmp/tcgpu-ext4mnt-XXXXXX";
    char cmd[700], dir[300], err[512];
    static const struct { size_t disk_mib, image_mib; int fits; } cases[] = {
        {16, 8, 1}, {16, 32, 0}, {64, 24, 1},
    };
    uint8_t *buf = aligned_alloc(IMAGE_WRITE_ALIGN, 32 * MIB);
    int fd = mkstemp(fs), rc = 0;

    REQUIRE(buf && fd >= 0 && mkdtemp(mnt), "setup");
    close(fd);
    td_random(buf, 32 * MIB, 6);
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]) && rc == 0; i++) {
        snprintf(cmd, sizeof(cmd), "truncate -s %zuM %s && mkfs.ext4 -q -F -O ^has_journal -m 0 %s "
                 ">/dev/null 2>&1 && mount -o loop %s %s 2>/dev/null", cases[i].disk_mib, fs, fs,
                 fs, mnt);
        if (system(cmd) != 0) {
            fprintf(stderr, "  ext4 on a loop device: not here (mkfs.ext4, a loop device): "
                    "skipped\n");
            break;
        }
        snprintf(dir, sizeof(dir), "%s/img", mnt);
        rc = write_random(dir, cases[i].image_mib, buf, err, sizeof(err));
        fprintf(stderr, "  ext4 %zu MiB, image of %zu MiB: rc %d %s\n", cases[i].disk_mib,
                cases[i].image_mib, rc, err);
        if (cases[i].fits) {
            CHECK(rc == 0, "an image that fits was refused");
            rc = rc == 0 ? whole_and_trimmed(dir, cases[i].image_mib) : T_EXIT_FAIL;
            if (rc == 0 && cases[i].disk_mib >= 64)
                rc = reserve_and_cut(mnt, buf);
        } else {
            CHECK(rc == -ENOSPC, "want -ENOSPC, got %d", rc);
            CHECK(count_entries(mnt, "") == 1, "something left on the full disk");   /* lost+found */
            rc = rc == -ENOSPC ? 0 : T_EXIT_FAIL;
        }
        umount(mnt);
        unlink(fs);
    }
    rmdir(mnt);
    unlink(fs);
    free(buf);
    return rc;
}

static int enospc_child(void)
{
    char mnt[] = "/tmp/tcgpu-enospc-XXXXXX", dir[300], err[512];
    struct image_writer *w;
    struct image_alloc a = {.id = 1, .addr = 0x1000, .size = 8 * MIB};
    uint8_t *buf = aligned_alloc(IMAGE_WRITE_ALIGN, 8 * MIB);
    int rc;

    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        fprintf(stderr, "  no private mount namespace: %s\n", strerror(errno));
        return T_EXIT_SKIP;
    }
    REQUIRE(mkdtemp(mnt) && mount("tcgpu-test", mnt, "tmpfs", 0, "size=1m") == 0, "tmpfs: %s",
          strerror(errno));
    td_random(buf, 8 * MIB, 5);
    snprintf(dir, sizeof(dir), "%s/img", mnt);
    /* passes 0, 1: copied appends; 2, 3: written from `buf` itself */
    for (int pass = 0; pass < 4; pass++) {
        rc = image_writer_begin(
            &w, dir,
            &(struct image_writer_opts){.flags = pass & 1 ? IMAGE_NO_URING : 0, .chunk_size = MIB},
            err, sizeof(err));
        REQUIRE(rc == 0, "begin: %s", err);
        REQUIRE(image_writer_add_allocation(w, &a) == 0, "alloc");
        if (pass < 2)
            rc = image_writer_add_data(w, 1, 0, buf, 8 * MIB);
        else
            rc = add_by_ref(w, buf, 8 * MIB);
        if (rc == 0)
            rc = image_writer_wait(w, UINT64_MAX);
        if (rc == 0)
            rc = image_writer_commit(w);
        fprintf(stderr, "  pass %d: rc %d: %s\n", pass, rc, image_writer_error(w));
        REQUIRE(rc == -ENOSPC, "pass %d: want -ENOSPC, got %d", pass, rc);
        REQUIRE(image_writer_commit(w) == -ENOSPC, "sticky");
        image_writer_free(w);
        REQUIRE(count_entries(mnt, "") == 0, "pass %d: something left on the full disk", pass);
    }
    umount(mnt);
    rmdir(mnt);
    free(buf);
    return ext4_passes();
}

static int test_enospc(void)
{
    pid_t pid;
    int st;

    if (geteuid() != 0) {
        fprintf(stderr, "  not root: cannot mount a small tmpfs\n");
        return T_EXIT_SKIP;
    }
    pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0)
        _exit(enospc_child());
    REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st), "child");
    return WEXITSTATUS(st);
}

/* image_read_allocation_cb's chunks, put back where they belong. */
struct rebuilt {
    uint8_t *buf;
    size_t len;
};

static int rebuild_chunk(void *arg, uint64_t offset, const void *data, size_t len)
{
    struct rebuilt *r = arg;

    if (offset > r->len || len > r->len - offset)
        return -ERANGE;
    memcpy(r->buf + offset, data, len);
    return 0;
}

/*
 * Reading chunk by chunk when a ZERO chunk is larger than every chunk that
 * holds bytes, or when there is no such chunk at all: the reader's buffer
 * is sized for the largest chunk with bytes, and the zeros it hands out are
 * not that buffer (the fuzzer found it grown with realloc where it had been
 * mapped). Allocation 1: 4 MiB of zeros, then 1 MiB of random bytes (left
 * out in pass 1, so that only ZERO chunks remain); allocation 2: 8 MiB of
 * zeros.
 */
static int test_read_by_chunks(void)
{
    static const uint64_t size[2] = {5 * MIB, 8 * MIB};
    uint8_t *want = calloc(1, 8 * MIB), *got = malloc(8 * MIB);
    struct image_writer *w;
    struct image *img;
    char dir[300], err[512];
    int rc;

    REQUIRE(want && got, "memory");
    td_random(want + 4 * MIB, MIB, 9);
    for (int pass = 0; pass < 2; pass++) {
        snprintf(dir, sizeof(dir), "%s/bychunks%d", base, pass);
        rc = image_writer_begin(&w, dir, &(struct image_writer_opts){0}, err, sizeof(err));
        REQUIRE(rc == 0, "begin: %s", err);
        for (uint64_t id = 1; id <= 2; id++) {
            struct image_alloc a = {.id = id, .addr = id << 32, .size = size[id - 1]};

            REQUIRE(image_writer_add_allocation(w, &a) == 0, "alloc %llu", (unsigned long long)id);
        }
        REQUIRE(image_writer_add_data(w, 1, 0, want, pass ? 4 * MIB : 5 * MIB) == 0 &&
                    image_writer_add_data(w, 2, 0, want, 4 * MIB) == 0 &&
                    image_writer_add_data(w, 2, 4 * MIB, want, 4 * MIB) == 0,
                "data: %s", image_writer_error(w));
        REQUIRE(image_writer_commit(w) == 0, "commit: %s", image_writer_error(w));
        image_writer_free(w);
        rc = image_open(&img, dir, 0, err, sizeof(err));
        REQUIRE(rc == 0, "open: %s", err);
        for (uint64_t id = 1; id <= 2; id++) {
            struct rebuilt r = {.buf = got, .len = size[id - 1]};
            int same;

            memset(got, 0xa5, 8 * MIB);
            rc = image_read_allocation_cb(img, id, rebuild_chunk, &r);
            REQUIRE(rc == 0, "pass %d, allocation %llu: %d %s", pass, (unsigned long long)id, rc,
                    image_error(img));
            if (id == 2)
                same = codec_is_zero(got, 8 * MIB);
            else if (!pass)
                same = !memcmp(got, want, 5 * MIB);
            else        /* the MiB not saved is not handed out */
                same = codec_is_zero(got, 4 * MIB) && got[4 * MIB] == 0xa5 && got[5 * MIB - 1] == 0xa5;
            REQUIRE(same, "pass %d: allocation %llu read back differs", pass, (unsigned long long)id);
        }
        image_close(img);
    }
    free(want);
    free(got);
    return 0;
}

int main(int argc, char **argv)
{
    int rc;
    char cmd[300];

    if (argc > 1 && !strcmp(argv[1], "enospc")) {
        rc = test_enospc();
        fprintf(stderr, "%s test_enospc\n", rc == 0 ? "ok  " : rc == 77 ? "skip" : "FAIL");
        return rc;
    }
    snprintf(base, sizeof(base), "%s/tcgpu-image-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(base))
        return 1;
    make_content();
    RUN(test_roundtrip);
    RUN(test_zero_copy);
    RUN(test_checksums_portable);
    RUN(test_describe);
    RUN(test_existing_and_abort);
    RUN(test_corruption);
    RUN(test_fuzz_manifest);
    RUN(test_read_by_chunks);
    if (!failures) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", base);
    }
    for (int i = 0; i < NALLOC; i++)
        free(content[i]);
    return T_EXIT_STATUS();
}
