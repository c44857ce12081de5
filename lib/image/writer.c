/*
 * writer.c - the image writer: temporary directory, chunk appends, manifest
 * serialisation and the atomic commit (contracts in image.h, layout in
 * format.h).
 */
#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fileio.h"
#include "common/pathtrust.h"
#include "internal.h"
#include "iowriter.h"
#include "common/xxh.h"

#define DEFAULT_CHUNK (4u << 20)

struct image_writer {
    char *dir; /* final path */
    char *tmp; /* DIR.tmp-XXXXXX */
    int parentfd; /* O_PATH of DIR's parent, every ancestor checked (pathtrust.h) */
    char leaf[NAME_MAX + 1]; /* DIR's name in it */
    char tmpleaf[NAME_MAX + 1]; /* the temporary directory's */
    int tmpfd;
    unsigned flags;
    size_t chunk_size;
    struct codec_ctx *ctx;
    uint8_t *encbuf;
    size_t encbuf_cap;
    struct iowriter *data; /* data.0 */
    struct image_process proc;
    struct image_device *devs;
    uint32_t ndevs;
    int have_parent;
    char parent_path[TCGPU_IMG_MAX_PATH];
    uint8_t parent_csum[16];
    struct image_alloc *allocs;
    size_t nallocs, alloc_cap;
    struct idmap ids;
    struct image_chunk *chunks;
    size_t nchunks, chunk_cap;
    uint32_t block_size;   /* of the block hashes (BLOCKHASH), 0 until the first */
    uint64_t *blocks;      /* every chunk's block hashes; chunks' blocks_at index it */
    size_t nblocks, blocks_cap;
    uint64_t raw_bytes, stored_bytes;
    int err; /* sticky I/O error; the temp dir is gone */
    int committed;
    char msg[512];
};

/* ---- manifest buffer ---------------------------------------------------------- */

struct mbuf {
    uint8_t *p;
    size_t len, cap;
    int oom;
};

static void mb_put(struct mbuf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        uint8_t *p;

        while (cap < b->len + n)
            cap *= 2;
        p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void mb_int(struct mbuf *b, uint64_t v, unsigned n)
{
    uint8_t t[8];

    le_store(t, v, n);
    mb_put(b, t, n);
}

static void mb_str(struct mbuf *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;

    mb_int(b, n, 4);
    if (n)
        mb_put(b, s, n);
}

/* Starts a section; returns where its length goes for mb_end_section. */
static size_t mb_section(struct mbuf *b, uint32_t type, uint32_t flags)
{
    size_t at;

    mb_int(b, type, 4);
    mb_int(b, flags, 4);
    at = b->len;
    mb_int(b, 0, 8);
    return at;
}

static void mb_end_section(struct mbuf *b, size_t at)
{
    if (!b->oom)
        le_store(b->p + at, b->len - at - 8, 8);
}

/* ---- errors ------------------------------------------------------------------- */

static void __attribute__((format(printf, 2, 3))) say(struct image_writer *w, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
    va_end(ap);
}

const char *image_writer_error(const struct image_writer *w)
{
    return w->msg;
}

void image_writer_stats(const struct image_writer *w, uint64_t *raw_bytes, uint64_t *stored_bytes,
                        uint64_t *chunks)
{
    if (raw_bytes)
        *raw_bytes = w->raw_bytes;
    if (stored_bytes)
        *stored_bytes = w->stored_bytes;
    if (chunks)
        *chunks = w->nchunks;
}

static void drop_tmp(struct image_writer *w)
{
    iowriter_free(w->data);
    w->data = NULL;
    if (w->tmpfd >= 0)
        close(w->tmpfd);
    w->tmpfd = -1;
    if (w->tmp && !w->committed)
        image_remove_tree(w->tmp);
}

/* An I/O failure: remove the temporary directory at once (a full disk wants
 * its space back) and make the error sticky. */
static int fail_io(struct image_writer *w, int rc, const char *what)
{
    say(w, "%s in %s: %s", what, w->tmp, strerror(-rc));
    w->err = rc;
    drop_tmp(w);
    return rc;
}

/* ---- begin / free ------------------------------------------------------------- */

void image_writer_free(struct image_writer *w)
{
    if (!w)
        return;
    drop_tmp(w);
    if (w->parentfd >= 0)
        close(w->parentfd);
    codec_ctx_free(w->ctx);
    for (size_t i = 0; i < w->nallocs; i++)
        free((char *)w->allocs[i].callsite);
    free(w->allocs);
    idmap_free(&w->ids);
    free(w->chunks);
    free(w->blocks);
    free(w->devs);
    free(w->encbuf);
    free(w->dir);
    free(w->tmp);
    free(w);
}

static void set_errbuf(char *errbuf, size_t errlen, const char *msg)
{
    if (errbuf && errlen)
        snprintf(errbuf, errlen, "%s", msg);
}

/* mkdtemp in the checked parent: DIR.tmp-XXXXXX, 0700, created exclusively. */
static int mkdtemp_at(struct image_writer *w)
{
    static const char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[6];

    for (int tries = 0; tries < 100; tries++) {
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
            return -EIO;
        if ((size_t)snprintf(w->tmpleaf, sizeof(w->tmpleaf), "%s.tmp-", w->leaf) + 6 >=
            sizeof(w->tmpleaf))
            return -ENAMETOOLONG;
        for (size_t i = 0, n = strlen(w->tmpleaf); i < 6; i++)
            w->tmpleaf[n + i] = chars[rnd[i] % (sizeof(chars) - 1)];
        w->tmpleaf[strlen(w->leaf) + 11] = '\0';
        if (mkdirat(w->parentfd, w->tmpleaf, 0700) == 0)
            return 0;
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

static int make_tmp(struct image_writer *w, const struct image_writer_opts *o)
{
    struct iowriter_opts io = {
        .no_uring = !!(o->flags & IMAGE_NO_URING),
        .no_direct = !!(o->flags & IMAGE_NO_DIRECT),
    };
    char name[32];
    int rc;

    rc = mkdtemp_at(w);
    if (rc || asprintf(&w->tmp, "%s.tmp-%s", w->dir, w->tmpleaf + strlen(w->leaf) + 5) < 0) {
        w->tmp = NULL;
        rc = rc ? rc : -ENOMEM;
        if (rc != -ENOMEM)
            say(w, "cannot create %s.tmp-XXXXXX: %s", w->dir, strerror(-rc));
        return rc;
    }
    w->tmpfd = openat(w->parentfd, w->tmpleaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    /* mkdirat honours the umask; an image is private whatever it is. */
    if (w->tmpfd < 0 || fchmod(w->tmpfd, 0700) < 0) {
        rc = -errno;
        say(w, "cannot open %s: %s", w->tmp, strerror(errno));
        return rc;
    }
    snprintf(name, sizeof(name), TCGPU_IMG_DATA_FMT, 0u);
    rc = iowriter_open(&w->data, w->tmpfd, name, 0600, &io);
    if (rc)
        say(w, "cannot create %s/%s: %s", w->tmp, name, strerror(-rc));
    return rc;
}

/* DIR's parent, walked and checked from "/" (pathtrust.h): an image is never
 * written where someone else may rename or replace it. */
static int open_parent(struct image_writer *w)
{
    char why[sizeof(w->msg)];
    int fd = pathtrust_open_parent(w->dir, geteuid(), w->leaf, sizeof(w->leaf), why, sizeof(why));

    if (fd == -EINVAL && w->dir[0] != '/') {
        say(w, "%s: an image path must be absolute", w->dir);
        return fd;
    }
    if (fd < 0) {
        say(w, "cannot write an image at %s: %s", w->dir, why);
        return fd;
    }
    w->parentfd = fd;
    return 0;
}

int image_writer_begin(struct image_writer **out, const char *dir,
                       const struct image_writer_opts *opts, char *errbuf, size_t errlen)
{
    struct image_writer_opts o = opts ? *opts : (struct image_writer_opts){0};
    struct image_writer *w;
    struct stat st;
    int rc;

    if (!out || !dir || !*dir || strlen(dir) > PATH_MAX - 32 ||
        o.chunk_size > TCGPU_IMG_MAX_CHUNK) {
        set_errbuf(errbuf, errlen, "invalid image path or options");
        return -EINVAL;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->tmpfd = -1;
    w->parentfd = -1;
    w->flags = o.flags;
    w->chunk_size = o.chunk_size ? o.chunk_size : DEFAULT_CHUNK;
    /* Trailing slashes would put the temp dir inside DIR. */
    w->dir = strdup(dir);
    rc = -ENOMEM;
    if (!w->dir)
        goto err;
    for (size_t n = strlen(w->dir); n > 1 && w->dir[n - 1] == '/'; n--)
        w->dir[n - 1] = '\0';
    rc = open_parent(w);
    if (rc)
        goto err;
    rc = -EEXIST;
    if (!(o.flags & IMAGE_OVERWRITE) && fstatat(w->parentfd, w->leaf, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        say(w, "%s already exists: an image goes to a directory that does not exist yet", w->dir);
        goto err;
    }
    rc = codec_ctx_new(&w->ctx, &o.codec);
    if (rc) {
        say(w, "codec parameters rejected: %s", strerror(-rc));
        goto err;
    }
    rc = make_tmp(w, &o);
    if (rc)
        goto err;
    *out = w;
    return 0;
err:
    set_errbuf(errbuf, errlen, w->msg[0] ? w->msg : strerror(-rc));
    image_writer_free(w);
    return rc;
}

/* ---- identity, allocations ------------------------------------------------------ */

static int str_ok(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

int image_writer_set_process(struct image_writer *w, const struct image_process *p)
{
    if (!p || !str_ok(p->hostname, sizeof(p->hostname)) || !str_ok(p->exe, sizeof(p->exe)))
        return -EINVAL;
    w->proc = *p;
    return 0;
}

int image_writer_add_device(struct image_writer *w, const struct image_device *d, uint32_t *index)
{
    struct image_device *n;

    if (!d || !str_ok(d->name, sizeof(d->name)))
        return -EINVAL;
    if (w->ndevs >= TCGPU_IMG_MAX_DEVICES)
        return -ENOSPC;
    n = realloc(w->devs, (w->ndevs + 1) * sizeof(*n));
    if (!n)
        return -ENOMEM;
    w->devs = n;
    w->devs[w->ndevs] = *d;
    if (index)
        *index = w->ndevs;
    w->ndevs++;
    return 0;
}

int image_writer_set_parent(struct image_writer *w, const char *path,
                            const uint8_t manifest_csum[16])
{
    if (!path || !manifest_csum || strlen(path) >= sizeof(w->parent_path))
        return -EINVAL;
    strcpy(w->parent_path, path);
    memcpy(w->parent_csum, manifest_csum, 16);
    w->have_parent = 1;
    return 0;
}

int image_writer_add_allocation(struct image_writer *w, const struct image_alloc *a)
{
    struct image_alloc c;
    size_t idx;

    if (!a || a->kind >= TCGPU_ALLOC_KIND_COUNT || a->dtype >= TCGPU_DTYPE_COUNT ||
        (a->device && a->device >= w->ndevs) || a->addr + a->size < a->addr ||
        (a->callsite && strlen(a->callsite) >= TCGPU_IMG_MAX_STRING))
        return -EINVAL;
    if (idmap_get(&w->ids, a->id, &idx))
        return -EEXIST;
    if (w->nallocs == w->alloc_cap) {
        size_t cap = w->alloc_cap ? w->alloc_cap * 2 : 64;
        struct image_alloc *n = realloc(w->allocs, cap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        w->allocs = n, w->alloc_cap = cap;
    }
    c = *a;
    c.callsite = NULL;
    if (a->callsite && *a->callsite && !(c.callsite = strdup(a->callsite)))
        return -ENOMEM;
    if (idmap_put(&w->ids, a->id, w->nallocs)) {
        free((char *)c.callsite);
        return -ENOMEM;
    }
    w->allocs[w->nallocs++] = c;
    return 0;
}

/* ---- chunks ------------------------------------------------------------------- */

static int encode(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                  const uint64_t *raw_csum, void *dst, size_t dst_cap, struct image_chunk *c,
                  const void **stored)
{
    struct codec_out o;
    int rc;

    if (!c || !stored || len == 0)
        return -EINVAL;
    if (raw_csum) {
        rc = codec_encode(ctx, src, len, dtype, dst, dst_cap, &o);
        c->raw_csum = *raw_csum;
    } else {
        rc = codec_encode_and_hash(ctx, src, len, dtype, dst, dst_cap, &o, &c->raw_csum);
    }
    if (rc)
        return rc;
    c->raw_len = (uint32_t)len;
    c->stored_len = (uint32_t)o.stored_len;
    c->codec = o.codec;
    /* RAW stores the raw bytes: same checksum, no second pass. */
    c->stored_csum = o.codec == TCGPU_CODEC_RAW ? c->raw_csum : XXH3_64bits(o.data, o.stored_len);
    *stored = o.data;
    return 0;
}

int image_chunk_encode(struct codec_ctx *ctx, const void *src, size_t len, enum tcgpu_dtype dtype,
                       void *dst, size_t dst_cap, struct image_chunk *c, const void **stored)
{
    return encode(ctx, src, len, dtype, NULL, dst, dst_cap, c, stored);
}

int image_chunk_encode_hashed(struct codec_ctx *ctx, const void *src, size_t len,
                              enum tcgpu_dtype dtype, uint64_t raw_csum, void *dst, size_t dst_cap,
                              struct image_chunk *c, const void **stored)
{
    return encode(ctx, src, len, dtype, &raw_csum, dst, dst_cap, c, stored);
}

void image_chunk_parent(struct image_chunk *c, size_t len, uint64_t raw_csum)
{
    c->raw_len = (uint32_t)len;
    c->stored_len = 0;
    c->codec = TCGPU_CODEC_PARENT;
    c->raw_csum = raw_csum;
    c->stored_csum = XXH3_64bits(NULL, 0);
}

static int stored_len_ok(const struct image_chunk *c, int have_parent)
{
    switch (c->codec) {
    case TCGPU_CODEC_ZERO: return c->stored_len == 0;
    case TCGPU_CODEC_PARENT: return c->stored_len == 0 && have_parent;
    case TCGPU_CODEC_PATCH: return c->stored_len >= TCGPU_PATCH_HDR_LEN && have_parent;
    case TCGPU_CODEC_RAW: return c->stored_len == c->raw_len;
    case TCGPU_CODEC_ZSTD:
    case TCGPU_CODEC_BYTEGROUP:
        return c->stored_len > 0 && c->stored_len <= codec_bound(c->raw_len);
    default: return 0;
    }
}

static int check_chunk(struct image_writer *w, const struct image_chunk *c)
{
    const struct image_alloc *a;
    size_t idx;

    if (!idmap_get(&w->ids, c->alloc_id, &idx)) {
        say(w, "chunk for unknown allocation %llu", (unsigned long long)c->alloc_id);
        return -ENOENT;
    }
    a = &w->allocs[idx];
    if (c->alloc_offset > a->size || c->raw_len > a->size - c->alloc_offset) {
        say(w, "chunk 0x%llx+0x%x beyond allocation %llu (size 0x%llx)",
            (unsigned long long)c->alloc_offset, c->raw_len, (unsigned long long)a->id,
            (unsigned long long)a->size);
        return -ERANGE;
    }
    if (c->raw_len == 0 || c->raw_len > TCGPU_IMG_MAX_CHUNK || !stored_len_ok(c, w->have_parent)) {
        say(w, "inconsistent chunk (codec %u, raw %u, stored %u)", c->codec, c->raw_len,
            c->stored_len);
        return -EINVAL;
    }
    return 0;
}

/* Keeps the chunk's block hashes; rec gets their place. 0, -EINVAL, -ENOMEM. */
static int add_blocks(struct image_writer *w, struct image_chunk *rec, uint32_t block_size,
                      const uint64_t *hashes)
{
    uint32_t n;

    rec->nblocks = 0;
    if (!hashes)
        return 0;
    if (block_size < TCGPU_PATCH_MIN_BLOCK || block_size > TCGPU_PATCH_MAX_BLOCK ||
        (block_size & (block_size - 1)) || (w->block_size && w->block_size != block_size))
        return -EINVAL;
    w->block_size = block_size;
    n = (uint32_t)((rec->raw_len + (uint64_t)block_size - 1) / block_size);
    if (w->nblocks + n > w->blocks_cap) {
        size_t cap = w->blocks_cap ? w->blocks_cap * 2 : 4096;
        uint64_t *b;

        while (cap < w->nblocks + n)
            cap *= 2;
        if (!(b = realloc(w->blocks, cap * sizeof(*b))))
            return -ENOMEM;
        w->blocks = b, w->blocks_cap = cap;
    }
    memcpy(w->blocks + w->nblocks, hashes, n * sizeof(*hashes));
    rec->blocks_at = w->nblocks;
    rec->nblocks = n;
    w->nblocks += n;
    return 0;
}

_Static_assert(IMAGE_WRITE_ALIGN == IOWRITER_ALIGN, "image.h and iowriter.h agree");

/* Appends a chunk record; its stored bytes are copied (room 0) or written
 * from `stored` itself (image_writer_add_encoded_ref). */
static int add_encoded(struct image_writer *w, const struct image_chunk *c, const void *stored,
                       size_t room, uint32_t block_size, const uint64_t *hashes, uint64_t *ticket)
{
    struct image_chunk rec;
    int rc;

    if (w->err)
        return w->err;
    if (w->committed || !c || (c->stored_len && !stored) || (room && room < c->stored_len))
        return -EINVAL;
    rc = check_chunk(w, c);
    if (rc)
        return rc;
    if (w->nchunks == w->chunk_cap) {
        size_t cap = w->chunk_cap ? w->chunk_cap * 2 : 256;
        struct image_chunk *n = realloc(w->chunks, cap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        w->chunks = n, w->chunk_cap = cap;
    }
    rec = *c;
    if ((rc = add_blocks(w, &rec, block_size, hashes)) != 0)
        return rc;
    rec.file = 0;
    rec.file_offset = 0;
    if (c->stored_len) {
        rec.file_offset = iowriter_offset(w->data);
        rc = room ? iowriter_append_ref(w->data, (void *)stored, c->stored_len, room,
                                        &rec.file_offset, ticket)
                  : iowriter_append(w->data, stored, c->stored_len);
        if (rc)
            return fail_io(w, rc,
                           "cannot write "
                           "data.0");
    }
    w->chunks[w->nchunks++] = rec;
    w->raw_bytes += rec.raw_len;
    w->stored_bytes += rec.stored_len;
    return 0;
}

int image_writer_add_encoded(struct image_writer *w, const struct image_chunk *c,
                             const void *stored)
{
    return add_encoded(w, c, stored, 0, 0, NULL, NULL);
}

int image_writer_add_encoded_ref(struct image_writer *w, const struct image_chunk *c,
                                 void *stored, size_t room, uint32_t block_size,
                                 const uint64_t *hashes, uint64_t *ticket)
{
    *ticket = 0;
    return add_encoded(w, c, stored, room ? room : c->stored_len, block_size, hashes, ticket);
}

int image_writer_wait(struct image_writer *w, uint64_t ticket)
{
    int rc;

    if (!w->data)
        return w->err;
    rc = iowriter_wait(w->data, ticket);
    return rc ? fail_io(w, rc, "cannot write data.0") : 0;
}

int image_writer_add_chunk(struct image_writer *w, uint64_t alloc_id, uint64_t offset,
                           const void *src, size_t len)
{
    struct image_chunk c = {.alloc_id = alloc_id, .alloc_offset = offset};
    const void *stored;
    size_t idx;
    int rc;

    if (w->err)
        return w->err;
    if (!src || len == 0 || len > TCGPU_IMG_MAX_CHUNK)
        return -EINVAL;
    if (!idmap_get(&w->ids, alloc_id, &idx))
        return -ENOENT;
    if (w->encbuf_cap < codec_bound(len)) {
        uint8_t *b = realloc(w->encbuf, codec_bound(len));

        if (!b)
            return -ENOMEM;
        w->encbuf = b, w->encbuf_cap = codec_bound(len);
    }
    rc = image_chunk_encode(w->ctx, src, len, w->allocs[idx].dtype, w->encbuf, w->encbuf_cap, &c,
                            &stored);
    if (rc)
        return rc;
    return image_writer_add_encoded(w, &c, stored);
}

int image_writer_add_data(struct image_writer *w, uint64_t alloc_id, uint64_t offset,
                          const void *src, size_t len)
{
    const uint8_t *p = src;

    while (len) {
        size_t n = len < w->chunk_size ? len : w->chunk_size;
        int rc = image_writer_add_chunk(w, alloc_id, offset, p, n);

        if (rc)
            return rc;
        p += n, offset += n, len -= n;
    }
    return 0;
}

/* ---- manifest ----------------------------------------------------------------- */

static void put_process(struct mbuf *b, const struct image_process *p)
{
    size_t s = mb_section(b, TCGPU_IMG_SEC_PROCESS, TCGPU_IMG_SECTION_CRITICAL);

    mb_int(b, p->pid, 4);
    mb_int(b, 0, 4);
    mb_int(b, p->start_time_ns, 8);
    mb_int(b, p->created_ns, 8);
    mb_str(b, p->hostname);
    mb_str(b, p->exe);
    mb_end_section(b, s);
}

static void put_device(struct mbuf *b, const struct image_device *d)
{
    size_t s = mb_section(b, TCGPU_IMG_SEC_DEVICE, TCGPU_IMG_SECTION_CRITICAL);

    mb_int(b, (uint32_t)d->ordinal, 4);
    mb_int(b, d->driver_version, 4);
    mb_int(b, d->total_mem, 8);
    mb_put(b, d->uuid, 16);
    mb_str(b, d->name);
    mb_end_section(b, s);
}

static void put_allocs(struct mbuf *b, const struct image_writer *w)
{
    size_t s = mb_section(b, TCGPU_IMG_SEC_ALLOCATIONS, TCGPU_IMG_SECTION_CRITICAL);

    mb_int(b, w->nallocs, 4);
    mb_int(b, 0, 4);
    for (size_t i = 0; i < w->nallocs; i++) {
        const struct image_alloc *a = &w->allocs[i];

        mb_int(b, a->id, 8);
        mb_int(b, a->addr, 8);
        mb_int(b, a->size, 8);
        mb_int(b, a->kind, 4);
        mb_int(b, a->flags, 4);
        mb_int(b, a->dtype, 4);
        mb_int(b, a->device, 4);
        mb_str(b, a->callsite);
    }
    mb_end_section(b, s);
}

static void put_chunks(struct mbuf *b, const struct image_writer *w)
{
    size_t s = mb_section(b, TCGPU_IMG_SEC_CHUNKS, TCGPU_IMG_SECTION_CRITICAL);

    mb_int(b, w->nchunks, 8);
    for (size_t i = 0; i < w->nchunks; i++) {
        const struct image_chunk *c = &w->chunks[i];

        mb_int(b, c->alloc_id, 8);
        mb_int(b, c->alloc_offset, 8);
        mb_int(b, c->raw_len, 4);
        mb_int(b, c->stored_len, 4);
        mb_int(b, c->codec, 1);
        mb_int(b, 0, 1);
        mb_int(b, c->file, 2);
        mb_int(b, 0, 4);
        mb_int(b, c->file_offset, 8);
        mb_int(b, c->raw_csum, 8);
        mb_int(b, c->stored_csum, 8);
    }
    mb_end_section(b, s);
}

static int any_dev_hash(const struct image_writer *w)
{
    for (size_t i = 0; i < w->nchunks; i++)
        if (w->chunks[i].has_dev_hash)
            return 1;
    return 0;
}

static void put_devhash(struct mbuf *b, const struct image_writer *w)
{
    size_t s = mb_section(b, TCGPU_IMG_SEC_DEVHASH, 0);

    mb_int(b, w->nchunks, 8);
    for (size_t i = 0; i < w->nchunks; i++) {
        mb_int(b, w->chunks[i].has_dev_hash ? 1 : 0, 1);
        mb_int(b, w->chunks[i].has_dev_hash ? w->chunks[i].dev_hash : 0, 8);
    }
    mb_end_section(b, s);
}

static void put_blockhash(struct mbuf *b, const struct image_writer *w)
{
    size_t s = mb_section(b, TCGPU_IMG_SEC_BLOCKHASH, 0);

    mb_int(b, w->block_size, 4);
    mb_int(b, 0, 4);
    mb_int(b, w->nchunks, 8);
    for (size_t i = 0; i < w->nchunks; i++) {
        const struct image_chunk *c = &w->chunks[i];

        mb_int(b, c->nblocks ? 1 : 0, 1);
        for (uint32_t k = 0; k < c->nblocks; k++)
            mb_int(b, w->blocks[c->blocks_at + k], 8);
    }
    mb_end_section(b, s);
}

/* Serialises the whole manifest (header, sections, trailer) into `b`. */
static void build_manifest(struct mbuf *b, const struct image_writer *w, uint64_t data_size)
{
    int devhash = any_dev_hash(w);
    int blockhash = w->nblocks > 0;
    uint32_t nsec = 4 + w->ndevs + (w->have_parent ? 1 : 0) + (devhash ? 1 : 0) + blockhash;
    XXH128_hash_t h;
    size_t s;

    mb_put(b, TCGPU_IMG_MAGIC, 8);
    mb_int(b, TCGPU_IMG_VERSION_MAJOR, 2);
    mb_int(b, TCGPU_IMG_VERSION_MINOR, 2);
    mb_int(b, TCGPU_IMG_HEADER_LEN, 4);
    mb_int(b, 0, 8); /* manifest length, patched below */
    mb_int(b, nsec, 4);
    mb_int(b, 0, 4);
    mb_int(b, 0, 8); /* header checksum, patched below */
    put_process(b, &w->proc);
    for (uint32_t i = 0; i < w->ndevs; i++)
        put_device(b, &w->devs[i]);
    if (w->have_parent) {
        s = mb_section(b, TCGPU_IMG_SEC_PARENT, TCGPU_IMG_SECTION_CRITICAL);
        mb_put(b, w->parent_csum, 16);
        mb_str(b, w->parent_path);
        mb_end_section(b, s);
    }
    s = mb_section(b, TCGPU_IMG_SEC_DATA_FILE, TCGPU_IMG_SECTION_CRITICAL);
    mb_int(b, 0, 4);
    mb_int(b, 0, 4);
    mb_int(b, data_size, 8);
    mb_str(b, "data.0");
    mb_end_section(b, s);
    put_allocs(b, w);
    put_chunks(b, w);
    if (devhash)
        put_devhash(b, w);
    if (blockhash)
        put_blockhash(b, w);
    mb_put(b, TCGPU_IMG_TRAILER_MAGIC, 8);
    if (b->oom)
        return;
    le_store(b->p + 16, b->len + 16, 8);
    le_store(b->p + 32, XXH3_64bits(b->p, 32), 8);
    h = XXH3_128bits(b->p, b->len);
    mb_int(b, h.low64, 8);
    mb_int(b, h.high64, 8);
}

static int write_manifest(struct image_writer *w, uint64_t data_size)
{
    struct mbuf b = {0};
    int fd = -1, rc = -ENOMEM;

    build_manifest(&b, w, data_size);
    if (b.oom)
        goto err;
    fd = openat(w->tmpfd, TCGPU_IMG_MANIFEST_NAME, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        goto err;
    }
    rc = fileio_write_all(fd, b.p, b.len);
    if (!rc && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && !rc)
        rc = -errno;
err:
    free(b.p);
    return rc;
}

/* ---- commit ------------------------------------------------------------------- */

/* Replaces an existing image at w->dir by the temporary directory. On
 * success the old image has been swapped to w->tmp and is removed. */
static int replace_existing(struct image_writer *w)
{
    int ok = image_dir_replaceable(w->dir), rc;

    if (ok <= 0) {
        say(w, "%s exists and is not a tcgpu image: refusing to replace it", w->dir);
        return ok < 0 ? ok : -ENOTEMPTY;
    }
    if (renameat2(w->parentfd, w->tmpleaf, w->parentfd, w->leaf, RENAME_EXCHANGE) < 0) {
        rc = -errno;
        say(w, "cannot swap %s into %s: %s", w->tmp, w->dir, strerror(errno));
        return rc;
    }
    w->committed = 1; /* w->tmp now names the old image */
    rc = image_remove_tree(w->tmp);
    if (rc)
        say(w, "new image in place; old image left at %s: %s", w->tmp, strerror(-rc));
    return 0;
}

/* Moves the temporary directory to w->dir without ever exposing a partial
 * image: RENAME_NOREPLACE refuses atomically, RENAME_EXCHANGE replaces
 * atomically. */
static int install(struct image_writer *w)
{
    int rc;

    if (renameat2(w->parentfd, w->tmpleaf, w->parentfd, w->leaf, RENAME_NOREPLACE) == 0) {
        w->committed = 1;
        return 0;
    }
    rc = -errno;
    if (rc == -EEXIST && (w->flags & IMAGE_OVERWRITE))
        return replace_existing(w);
    if (rc == -EEXIST)
        say(w, "%s already exists (it appeared while the image was written): the image is "
            "not kept", w->dir);
    else
        say(w, "cannot rename %s to %s: %s", w->tmp, w->dir, strerror(-rc));
    return rc;
}

/* fsync of the checked parent (an O_PATH descriptor cannot be fsynced itself). */
static int fsync_parent(struct image_writer *w)
{
    int fd = openat(w->parentfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

    if (fd < 0 || fsync(fd) < 0)
        r = -errno;
    if (fd >= 0)
        close(fd);
    return r;
}

static int fail_commit(struct image_writer *w, int rc)
{
    w->err = rc;
    drop_tmp(w);
    return rc;
}

int image_writer_commit(struct image_writer *w)
{
    uint64_t data_size;
    size_t bad;
    int rc;

    if (w->err || w->committed)
        return w->err ? w->err : -EINVAL;
    image_sort_chunks(w->chunks, w->nchunks);
    bad = image_find_overlap(w->chunks, w->nchunks);
    if (bad < w->nchunks) {
        say(w, "chunks overlap in allocation %llu at offset 0x%llx",
            (unsigned long long)w->chunks[bad].alloc_id,
            (unsigned long long)w->chunks[bad].alloc_offset);
        return fail_commit(w, -EINVAL);
    }
    rc = iowriter_finish(w->data);
    if (rc)
        return fail_io(w, rc, "cannot write data.0");
    data_size = iowriter_offset(w->data);
    iowriter_free(w->data);
    w->data = NULL;
    w->proc.created_ns = wall_ns();
    rc = write_manifest(w, data_size);
    if (rc)
        return fail_io(w, rc, "cannot write " TCGPU_IMG_MANIFEST_NAME);
    if (fsync(w->tmpfd) < 0)
        return fail_io(w, -errno, "cannot fsync the directory");
    rc = install(w);
    if (rc)
        return fail_commit(w, rc);
    /* The rename itself is durable only once the parent directory is. */
    if (fsync_parent(w) < 0)
        say(w, "image committed but fsync of the directory holding %s failed", w->dir);
    close(w->tmpfd);
    w->tmpfd = -1;
    return 0;
}
