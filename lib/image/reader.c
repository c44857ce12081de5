/*
 * reader.c - opening, verifying and reading images (contracts in
 * image.h). Every byte of an image is untrusted: each count, length and
 * offset is checked before it is used, and arithmetic on them is done so
 * that it cannot overflow.
 */
#include "image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "common/bigbuf.h"
#include "common/xxh.h"

struct datafile {
    char name[32];
    uint64_t size; /* as the manifest records it */
    int fd;
};

/* Where an allocation's chunks are in the sorted chunk table. */
struct alloc_span {
    size_t first, count;
};

/* Where a chunk's bytes are: the chunk itself, or for a PARENT chunk the
 * ancestor's chunk it resolves to (never a PARENT chunk itself). */
struct chunk_src {
    const struct image *img;
    size_t idx;
};

/* Longest chain of parents followed; deeper chains are refused. */
#define MAX_PARENT_DEPTH 64

struct image {
    char *dir;
    int dfd;               /* the directory, open: its files are opened relative to it */
    uint16_t vmajor, vminor;
    size_t manifest_len;
    uint8_t csum[16];
    struct image_process proc;
    int have_proc;
    struct image_device *devs;
    uint32_t ndevs;
    int have_parent;
    char parent_path[TCGPU_IMG_MAX_PATH];
    uint8_t parent_csum[16];
    struct datafile *files;
    uint32_t nfiles;
    struct image_alloc *allocs;
    struct alloc_span *spans;
    size_t nallocs;
    int have_allocs, have_chunks, have_devhash, have_blockhash;
    uint32_t block_size;   /* BLOCKHASH: of every chunk's block hashes */
    uint64_t *blocks;      /* BLOCKHASH: the hashes, chunks' blocks_at index it */
    uint64_t nblock_hashes;
    struct chunk_src *base; /* per chunk: a PATCH chunk's base (resolved), or {NULL} */
    struct idmap ids;
    struct image_chunk *chunks; /* sorted by (allocation id, offset) */
    size_t nchunks;
    struct image *parent;  /* opened when the image is incremental */
    struct chunk_src *src; /* per chunk, after resolve_parent_chunks */
    struct codec_ctx *ctx;
    uint8_t *stored_buf, *raw_buf;
    size_t max_stored, max_raw;
    void *zeros;           /* a ZERO chunk for image_read_allocation_cb: never written */
    size_t zeros_len;
    char msg[512];
};

static void __attribute__((format(printf, 2, 3))) say(struct image *img, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(img->msg, sizeof(img->msg), fmt, ap);
    va_end(ap);
}

const char *image_error(const struct image *img)
{
    return img->msg;
}

/* ---- bounded cursor ------------------------------------------------------------- */

struct cur {
    const uint8_t *p;
    size_t len, off;
    int bad; /* read past the end, or an invalid string */
};

static int cur_need(struct cur *c, size_t n)
{
    if (c->bad || c->len - c->off < n) {
        c->bad = 1;
        return 0;
    }
    return 1;
}

static uint64_t cur_int(struct cur *c, unsigned n)
{
    uint64_t v;

    if (!cur_need(c, n))
        return 0;
    v = le_load(c->p + c->off, n);
    c->off += n;
    return v;
}

static void cur_bytes(struct cur *c, void *dst, size_t n)
{
    if (!cur_need(c, n))
        return;
    memcpy(dst, c->p + c->off, n);
    c->off += n;
}

/* A string of at most cap-1 bytes, without NUL, into dst (NUL-terminated). */
static void cur_str(struct cur *c, char *dst, size_t cap)
{
    uint64_t n = cur_int(c, 4);

    dst[0] = '\0';
    if (c->bad || n >= cap || !cur_need(c, (size_t)n) || memchr(c->p + c->off, 0, (size_t)n)) {
        c->bad = 1;
        return;
    }
    memcpy(dst, c->p + c->off, (size_t)n);
    dst[n] = '\0';
    c->off += (size_t)n;
}

/* ---- sections ------------------------------------------------------------------ */

static int parse_process(struct image *img, struct cur *c)
{
    struct image_process *p = &img->proc;

    if (img->have_proc)
        return -EBADMSG;
    img->have_proc = 1;
    p->pid = (uint32_t)cur_int(c, 4);
    if (cur_int(c, 4) != 0)
        return -EBADMSG;
    p->start_time_ns = cur_int(c, 8);
    p->created_ns = cur_int(c, 8);
    cur_str(c, p->hostname, sizeof(p->hostname));
    cur_str(c, p->exe, sizeof(p->exe));
    return 0;
}

static int parse_device(struct image *img, struct cur *c)
{
    struct image_device *d, *n;

    if (img->ndevs >= TCGPU_IMG_MAX_DEVICES)
        return -EBADMSG;
    n = realloc(img->devs, (img->ndevs + 1) * sizeof(*n));
    if (!n)
        return -ENOMEM;
    img->devs = n;
    d = &img->devs[img->ndevs++];
    memset(d, 0, sizeof(*d));
    d->ordinal = (int32_t)(uint32_t)cur_int(c, 4);
    d->driver_version = (uint32_t)cur_int(c, 4);
    d->total_mem = cur_int(c, 8);
    cur_bytes(c, d->uuid, 16);
    cur_str(c, d->name, sizeof(d->name));
    return 0;
}

static int parse_parent(struct image *img, struct cur *c)
{
    if (img->have_parent)
        return -EBADMSG;
    img->have_parent = 1;
    cur_bytes(c, img->parent_csum, 16);
    cur_str(c, img->parent_path, sizeof(img->parent_path));
    return img->parent_path[0] || c->bad ? 0 : -EBADMSG;
}

/* Data files must be named data.<index>: a name from the manifest never
 * becomes a path elsewhere ("../x", "/etc/..."). */
static int parse_data_file(struct image *img, struct cur *c)
{
    struct datafile *n, *f;
    char name[32], want[32];
    uint32_t index;

    index = (uint32_t)cur_int(c, 4);
    if (cur_int(c, 4) != 0 || index != img->nfiles || img->nfiles >= TCGPU_IMG_MAX_FILES)
        return -EBADMSG;
    n = realloc(img->files, (img->nfiles + 1) * sizeof(*n));
    if (!n)
        return -ENOMEM;
    img->files = n;
    f = &img->files[img->nfiles];
    f->fd = -1;
    f->size = cur_int(c, 8);
    cur_str(c, name, sizeof(name));
    snprintf(want, sizeof(want), TCGPU_IMG_DATA_FMT, index);
    if (c->bad || strcmp(name, want))
        return -EBADMSG;
    strcpy(f->name, name);
    img->nfiles++;
    return 0;
}

/* Fixed part of an allocation record, before its call-site string. */
#define ALLOC_REC_MIN (8 + 8 + 8 + 4 + 4 + 4 + 4 + 4)

static int parse_one_alloc(struct image *img, struct cur *c, struct image_alloc *a)
{
    uint64_t n;

    a->id = cur_int(c, 8);
    a->addr = cur_int(c, 8);
    a->size = cur_int(c, 8);
    a->kind = (uint32_t)cur_int(c, 4);
    a->flags = (uint32_t)cur_int(c, 4);
    a->dtype = (uint32_t)cur_int(c, 4);
    a->device = (uint32_t)cur_int(c, 4);
    n = cur_int(c, 4);
    if (c->bad || a->kind >= TCGPU_ALLOC_KIND_COUNT || a->dtype >= TCGPU_DTYPE_COUNT ||
        a->addr + a->size < a->addr || n >= TCGPU_IMG_MAX_STRING || !cur_need(c, (size_t)n) ||
        memchr(c->p + c->off, 0, (size_t)n))
        return -EBADMSG;
    if (n) {
        char *s = malloc((size_t)n + 1);

        if (!s)
            return -ENOMEM;
        memcpy(s, c->p + c->off, (size_t)n);
        s[n] = '\0';
        a->callsite = s;
        c->off += (size_t)n;
    }
    return 0;
}

static int parse_allocs(struct image *img, struct cur *c)
{
    uint64_t count;
    size_t idx;
    int rc;

    if (img->have_allocs)
        return -EBADMSG;
    img->have_allocs = 1;
    count = cur_int(c, 4);
    if (cur_int(c, 4) != 0 || c->bad || count > (c->len - c->off) / ALLOC_REC_MIN)
        return -EBADMSG;
    img->allocs = calloc(count ? count : 1, sizeof(*img->allocs));
    img->spans = calloc(count ? count : 1, sizeof(*img->spans));
    if (!img->allocs || !img->spans)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++) {
        rc = parse_one_alloc(img, c, &img->allocs[i]);
        img->nallocs = i + 1; /* so close frees the call site */
        if (rc)
            return rc;
        if (idmap_get(&img->ids, img->allocs[i].id, &idx))
            return -EBADMSG; /* duplicate id */
        if (idmap_put(&img->ids, img->allocs[i].id, i))
            return -ENOMEM;
    }
    return 0;
}

static int parse_chunks(struct image *img, struct cur *c)
{
    uint64_t count;

    if (img->have_chunks)
        return -EBADMSG;
    img->have_chunks = 1;
    count = cur_int(c, 8);
    if (c->bad || count > (c->len - c->off) / TCGPU_IMG_CHUNK_REC_LEN)
        return -EBADMSG;
    img->chunks = calloc(count ? count : 1, sizeof(*img->chunks));
    if (!img->chunks)
        return -ENOMEM;
    for (size_t i = 0; i < count; i++) {
        struct image_chunk *k = &img->chunks[i];

        k->alloc_id = cur_int(c, 8);
        k->alloc_offset = cur_int(c, 8);
        k->raw_len = (uint32_t)cur_int(c, 4);
        k->stored_len = (uint32_t)cur_int(c, 4);
        k->codec = (uint8_t)cur_int(c, 1);
        if (cur_int(c, 1) != 0)
            return -EBADMSG;
        k->file = (uint16_t)cur_int(c, 2);
        if (cur_int(c, 4) != 0)
            return -EBADMSG;
        k->file_offset = cur_int(c, 8);
        k->raw_csum = cur_int(c, 8);
        k->stored_csum = cur_int(c, 8);
    }
    img->nchunks = (size_t)count;
    return c->bad ? -EBADMSG : 0;
}

static int parse_devhash(struct image *img, struct cur *c)
{
    uint64_t count;

    if (!img->have_chunks || img->have_devhash)
        return -EBADMSG;
    img->have_devhash = 1;
    count = cur_int(c, 8);
    if (c->bad || count != img->nchunks || count > (c->len - c->off) / 9)
        return -EBADMSG;
    for (size_t i = 0; i < img->nchunks; i++) {
        uint64_t has = cur_int(c, 1), h = cur_int(c, 8);

        if (has > 1)
            return -EBADMSG;
        img->chunks[i].has_dev_hash = (uint8_t)has;
        img->chunks[i].dev_hash = h;
    }
    return c->bad ? -EBADMSG : 0;
}

static int parse_blockhash(struct image *img, struct cur *c)
{
    uint64_t count, total = 0;

    if (!img->have_chunks || img->have_blockhash)
        return -EBADMSG;
    img->have_blockhash = 1;
    img->block_size = (uint32_t)cur_int(c, 4);
    count = cur_int(c, 4) == 0 ? cur_int(c, 8) : UINT64_MAX;
    if (c->bad || count != img->nchunks || img->block_size < TCGPU_PATCH_MIN_BLOCK ||
        img->block_size > TCGPU_PATCH_MAX_BLOCK || (img->block_size & (img->block_size - 1)))
        return -EBADMSG;
    /* Counts first, against the bytes there are, before anything is allocated. */
    for (size_t i = 0, at = c->off; i < img->nchunks; i++) {
        uint64_t n = (img->chunks[i].raw_len + (uint64_t)img->block_size - 1) / img->block_size;

        if (at >= c->len || c->p[at] > 1)
            return -EBADMSG;
        if (c->p[at++]) {
            if ((c->len - at) / 8 < n)
                return -EBADMSG;
            at += 8 * n;
            total += n;
        }
    }
    img->blocks = malloc((total ? total : 1) * sizeof(*img->blocks));
    if (!img->blocks)
        return -ENOMEM;
    for (size_t i = 0; i < img->nchunks; i++) {
        struct image_chunk *k = &img->chunks[i];
        uint32_t n = (uint32_t)((k->raw_len + (uint64_t)img->block_size - 1) / img->block_size);

        if (!cur_int(c, 1))
            continue;
        k->nblocks = n;
        k->blocks_at = img->nblock_hashes;
        for (uint32_t b = 0; b < n; b++)
            img->blocks[img->nblock_hashes++] = cur_int(c, 8);
    }
    return c->bad ? -EBADMSG : 0;
}

/* Parses one section's payload; unknown non-critical sections are skipped. */
static int parse_section(struct image *img, uint32_t type, uint32_t flags, struct cur *c)
{
    int rc;

    switch (type) {
    case TCGPU_IMG_SEC_PROCESS: rc = parse_process(img, c); break;
    case TCGPU_IMG_SEC_DEVICE: rc = parse_device(img, c); break;
    case TCGPU_IMG_SEC_PARENT: rc = parse_parent(img, c); break;
    case TCGPU_IMG_SEC_DATA_FILE: rc = parse_data_file(img, c); break;
    case TCGPU_IMG_SEC_ALLOCATIONS: rc = parse_allocs(img, c); break;
    case TCGPU_IMG_SEC_CHUNKS: rc = parse_chunks(img, c); break;
    case TCGPU_IMG_SEC_DEVHASH: rc = parse_devhash(img, c); break;
    case TCGPU_IMG_SEC_BLOCKHASH: rc = parse_blockhash(img, c); break;
    default:
        if (flags & TCGPU_IMG_SECTION_CRITICAL) {
            say(img, "unknown critical section %u in %s/manifest", type, img->dir);
            return -EPROTONOSUPPORT;
        }
        return 0;
    }
    if (rc == -ENOMEM)
        return rc;
    /* A newer minor version may append fields to a known section. */
    if (rc || c->bad || (c->off != c->len && img->vminor <= TCGPU_IMG_VERSION_MINOR)) {
        say(img, "malformed section %u in %s/manifest", type, img->dir);
        return -EBADMSG;
    }
    return 0;
}

/* ---- manifest ------------------------------------------------------------------ */

/* What a directory entry that should be a regular file is instead. */
static const char *file_type(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link"
         : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

/* Opens the image's file `name` (image_open_regular: no blocking, no link
 * followed, regular files only). The fd, or -errno with the message said. */
static int open_member(struct image *img, const char *name, struct stat *st)
{
    int fd = image_open_regular(img->dfd, name, st);

    if (fd == -EBADMSG || fd == -ELOOP) {
        struct stat lst;
        const char *what = fstatat(img->dfd, name, &lst, AT_SYMLINK_NOFOLLOW) == 0
                               ? file_type(lst.st_mode) : "not a regular file";
        say(img, "%s/%s is %s, not an image file: refused", img->dir, name, what);
        return -EBADMSG;
    }
    if (fd < 0)
        say(img, "cannot open %s/%s: %s", img->dir, name, strerror(-fd));
    return fd;
}

static int read_file(struct image *img, const char *name, uint8_t **out, size_t *len)
{
    char path[4200];
    struct stat st;
    uint8_t *buf = NULL;
    int fd, rc;
    size_t got = 0;

    snprintf(path, sizeof(path), "%s/%s", img->dir, name);
    fd = open_member(img, name, &st);
    if (fd < 0) {
        rc = fd;
        goto err;
    }
    rc = -EBADMSG;
    if ((uint64_t)st.st_size > TCGPU_IMG_MAX_MANIFEST) {
        say(img, "%s is larger than %llu bytes", path, (unsigned long long)TCGPU_IMG_MAX_MANIFEST);
        goto err;
    }
    rc = -ENOMEM;
    buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        goto err;
    while (got < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            say(img, "cannot read %s: %s", path, n < 0 ? strerror(errno) : "file shrank");
            goto err;
        }
        got += (size_t)n;
    }
    close(fd);
    *out = buf;
    *len = got;
    return 0;
err:
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

/* Header and trailer: magic, version, lengths, both checksums. */
static int check_envelope(struct image *img, const uint8_t *m, size_t len, uint32_t *nsec,
                          size_t *hlen)
{
    struct cur c = {.p = m, .len = len};
    XXH128_hash_t h;
    uint64_t mlen, hsum;

    if (len < TCGPU_IMG_HEADER_LEN + TCGPU_IMG_TRAILER_LEN || memcmp(m, TCGPU_IMG_MAGIC, 8)) {
        say(img, "%s/manifest is not a tcgpu image manifest (bad magic or too short)", img->dir);
        return -EBADMSG;
    }
    c.off = 8;
    img->vmajor = (uint16_t)cur_int(&c, 2);
    img->vminor = (uint16_t)cur_int(&c, 2);
    *hlen = (size_t)cur_int(&c, 4);
    mlen = cur_int(&c, 8);
    *nsec = (uint32_t)cur_int(&c, 4);
    c.off += 4; /* flags: checked after the checksum */
    hsum = cur_int(&c, 8);
    if (hsum != XXH3_64bits(m, 32)) {
        say(img, "header checksum mismatch in %s/manifest", img->dir);
        return -EBADMSG;
    }
    if (img->vmajor != TCGPU_IMG_VERSION_MAJOR) {
        say(img, "%s/manifest has format version %u.%u; this build reads %u.x", img->dir,
            img->vmajor, img->vminor, TCGPU_IMG_VERSION_MAJOR);
        return -EPROTONOSUPPORT;
    }
    if (mlen != len) {
        say(img, "truncated: %s/manifest is %zu bytes, its header says %llu", img->dir, len,
            (unsigned long long)mlen);
        return -EBADMSG;
    }
    h = XXH3_128bits(m, len - 16);
    c.off = len - 16;
    if (memcmp(m + len - TCGPU_IMG_TRAILER_LEN, TCGPU_IMG_TRAILER_MAGIC, 8) ||
        cur_int(&c, 8) != h.low64 || cur_int(&c, 8) != h.high64) {
        say(img, "manifest checksum mismatch in %s/manifest", img->dir);
        return -EBADMSG;
    }
    memcpy(img->csum, m + len - 16, 16);
    if (*hlen < TCGPU_IMG_HEADER_LEN || *hlen > len - TCGPU_IMG_TRAILER_LEN ||
        m[28] | m[29] | m[30] | m[31]) {
        say(img, "malformed header in %s/manifest", img->dir);
        return -EBADMSG;
    }
    return 0;
}

static int parse_manifest(struct image *img, const uint8_t *m, size_t len)
{
    struct cur c = {.p = m, .len = len - TCGPU_IMG_TRAILER_LEN};
    uint32_t nsec;
    size_t hlen;
    int rc = check_envelope(img, m, len, &nsec, &hlen);

    if (rc)
        return rc;
    c.off = hlen;
    for (uint32_t i = 0; i < nsec; i++) {
        uint32_t type = (uint32_t)cur_int(&c, 4), flags = (uint32_t)cur_int(&c, 4);
        uint64_t plen = cur_int(&c, 8);
        struct cur s;

        if (c.bad || plen > c.len - c.off) {
            say(img, "section %u of %s/manifest runs past the end", i, img->dir);
            return -EBADMSG;
        }
        s = (struct cur){.p = m + c.off, .len = (size_t)plen};
        rc = parse_section(img, type, flags, &s);
        if (rc)
            return rc;
        c.off += (size_t)plen;
    }
    if (c.off != c.len || !img->have_proc || !img->have_allocs || !img->have_chunks) {
        say(img, "%s/manifest: %s", img->dir,
            c.off != c.len ? "bytes after the last section" : "a required section is missing");
        return -EBADMSG;
    }
    return 0;
}

/* ---- consistency of the tables -------------------------------------------------- */

static void chunk_label(const struct image *img, size_t i, char *buf, size_t cap)
{
    const struct image_chunk *k = &img->chunks[i];
    size_t a;

    if (idmap_get(&img->ids, k->alloc_id, &a))
        snprintf(buf, cap, "chunk %zu of allocation %llu (0x%llx+0x%llx)", i - img->spans[a].first,
                 (unsigned long long)k->alloc_id, (unsigned long long)img->allocs[a].addr,
                 (unsigned long long)k->alloc_offset);
    else
        snprintf(buf, cap, "chunk %zu", i);
}

static int chunk_fields_ok(const struct image *img, const struct image_chunk *k,
                           const struct image_alloc *a)
{
    int lens_ok;

    if (k->raw_len == 0 || k->raw_len > TCGPU_IMG_MAX_CHUNK || k->alloc_offset > a->size ||
        k->raw_len > a->size - k->alloc_offset || k->file >= img->nfiles)
        return 0;
    switch (k->codec) {
    case TCGPU_CODEC_ZERO: lens_ok = k->stored_len == 0; break;
    case TCGPU_CODEC_PARENT: lens_ok = k->stored_len == 0 && img->have_parent; break;
    case TCGPU_CODEC_PATCH:
        lens_ok = k->stored_len >= TCGPU_PATCH_HDR_LEN && img->have_parent;
        break;
    case TCGPU_CODEC_RAW: lens_ok = k->stored_len == k->raw_len; break;
    case TCGPU_CODEC_ZSTD:
    case TCGPU_CODEC_BYTEGROUP:
        lens_ok = k->stored_len > 0 && k->stored_len <= codec_bound(k->raw_len);
        break;
    default: lens_ok = 0;
    }
    /* file_offset + stored_len: stored_len < 2^32 and the size check
     * comes first, so the sum cannot wrap. */
    return lens_ok && k->file_offset <= img->files[k->file].size &&
           k->stored_len <= img->files[k->file].size - k->file_offset;
}

/*
 * Whether a compressed chunk's lengths are possible: zstd's densest block
 * (RLE: 4 bytes for 128 KiB) bounds what a stored length can hold at 32768
 * raw bytes a byte, byte groups being zstd planes. A declared size beyond it
 * is a crafted chunk that would cost time and memory to refute by decoding.
 */
#define MAX_ZSTD_RATIO 32768u

static int ratio_possible(const struct image_chunk *k)
{
    if (k->codec != TCGPU_CODEC_ZSTD && k->codec != TCGPU_CODEC_BYTEGROUP)
        return 1;
    return (uint64_t)k->raw_len <= (uint64_t)k->stored_len * MAX_ZSTD_RATIO;
}

/* Sorts the chunk table, checks every chunk against its allocation and data
 * file, and indexes each allocation's chunks. */
static int check_tables(struct image *img)
{
    size_t a, bad;
    char label[160];

    if (img->nfiles == 0 && img->nchunks) {
        say(img, "%s/manifest lists chunks but no data file", img->dir);
        return -EBADMSG;
    }
    for (size_t i = 0; i < img->nallocs; i++)
        if (img->ndevs ? img->allocs[i].device >= img->ndevs : img->allocs[i].device != 0)
            goto bad_alloc;
    image_sort_chunks(img->chunks, img->nchunks);
    for (size_t i = 0; i < img->nchunks; i++) {
        const struct image_chunk *k = &img->chunks[i];

        if (!idmap_get(&img->ids, k->alloc_id, &a) || !chunk_fields_ok(img, k, &img->allocs[a])) {
            snprintf(label, sizeof(label), "chunk %zu", i);
            say(img,
                "%s in %s/manifest: invalid (allocation %llu, offset 0x%llx, "
                "codec %u, raw %u, stored %u)",
                label, img->dir, (unsigned long long)k->alloc_id,
                (unsigned long long)k->alloc_offset, k->codec, k->raw_len, k->stored_len);
            return -EBADMSG;
        }
        if (!img->spans[a].count)
            img->spans[a].first = i;
        img->spans[a].count++;
        if (!ratio_possible(k)) {
            chunk_label(img, i, label, sizeof(label));
            say(img, "%s in %s/manifest declares %u bytes from %u stored, more than %s can "
                "encode in that: refused", label, img->dir, k->raw_len, k->stored_len,
                codec_name(k->codec));
            return -EBADMSG;
        }
        if (k->stored_len > img->max_stored)
            img->max_stored = k->stored_len;
        /* a ZERO chunk is checked and read without a buffer of its size */
        if (k->codec != TCGPU_CODEC_ZERO && k->raw_len > img->max_raw)
            img->max_raw = k->raw_len;
    }
    bad = image_find_overlap(img->chunks, img->nchunks);
    if (bad < img->nchunks) {
        chunk_label(img, bad, label, sizeof(label));
        say(img, "%s overlaps the chunk before it in %s/manifest", label, img->dir);
        return -EBADMSG;
    }
    return 0;
bad_alloc:
    say(img, "allocation on an unknown device in %s/manifest", img->dir);
    return -EBADMSG;
}

/* Opens the data files and finds any chunk that a short file cuts off. */
static int open_data_files(struct image *img)
{
    char path[4200], label[160];
    struct stat st;

    for (uint32_t f = 0; f < img->nfiles; f++) {
        snprintf(path, sizeof(path), "%s/%s", img->dir, img->files[f].name);
        img->files[f].fd = open_member(img, img->files[f].name, &st);
        if (img->files[f].fd < 0)
            return img->files[f].fd;
        if ((uint64_t)st.st_size == img->files[f].size)
            continue;
        for (size_t i = 0; i < img->nchunks; i++) {
            const struct image_chunk *k = &img->chunks[i];

            if (k->file == f && k->file_offset + k->stored_len > (uint64_t)st.st_size) {
                chunk_label(img, i, label, sizeof(label));
                say(img, "truncated: %s is %lld bytes, %s ends at %llu", path,
                    (long long)st.st_size, label,
                    (unsigned long long)(k->file_offset + k->stored_len));
                return -EBADMSG;
            }
        }
        say(img, "%s is %lld bytes, the manifest says %llu", path, (long long)st.st_size,
            (unsigned long long)img->files[f].size);
        return -EBADMSG;
    }
    return 0;
}

void image_close(struct image *img)
{
    if (!img)
        return;
    image_close(img->parent);
    free(img->src);
    free(img->base);
    free(img->blocks);
    for (uint32_t f = 0; f < img->nfiles; f++)
        if (img->files[f].fd >= 0)
            close(img->files[f].fd);
    for (size_t i = 0; i < img->nallocs; i++)
        free((char *)img->allocs[i].callsite);
    free(img->files);
    free(img->allocs);
    free(img->spans);
    free(img->devs);
    free(img->chunks);
    idmap_free(&img->ids);
    codec_ctx_free(img->ctx);
    bigbuf_free(img->stored_buf, img->max_stored);
    bigbuf_free(img->raw_buf, img->max_raw);
    if (img->zeros)
        munmap(img->zeros, img->zeros_len);
    if (img->dfd >= 0)
        close(img->dfd);
    free(img->dir);
    free(img);
}

/* The chunk of `img` at (alloc_id, offset), binary search in its span. */
static int find_chunk(const struct image *img, uint64_t alloc_id, uint64_t offset, size_t *index)
{
    struct alloc_span sp;
    size_t a, lo, hi;

    if (!idmap_get(&img->ids, alloc_id, &a))
        return 0;
    sp = img->spans[a];
    lo = sp.first, hi = sp.first + sp.count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (img->chunks[mid].alloc_offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < sp.first + sp.count && img->chunks[lo].alloc_offset == offset) {
        *index = lo;
        return 1;
    }
    return 0;
}

int image_find_chunk(const struct image *img, uint64_t alloc_id, uint64_t offset, size_t *index)
{
    return find_chunk(img, alloc_id, offset, index);
}

static int resolve_patch_bases(struct image *img);

/*
 * Resolves every PARENT chunk to the ancestor chunk that holds its bytes: the
 * parent's chunk at the same allocation and offset, with the same length and
 * raw checksum (itself resolved already, so chains collapse to one hop).
 */
static int resolve_parent_chunks(struct image *img)
{
    char label[160];

    img->src = calloc(img->nchunks ? img->nchunks : 1, sizeof(*img->src));
    if (!img->src)
        return -ENOMEM;
    for (size_t i = 0; i < img->nchunks; i++) {
        const struct image_chunk *k = &img->chunks[i];
        const struct image *p = img->parent;
        size_t j;

        img->src[i] = (struct chunk_src){img, i};
        /* Without the parent (IMAGE_OPEN_NO_PARENT) a PARENT chunk stays
         * unresolved and reads as -EOPNOTSUPP. */
        if (k->codec != TCGPU_CODEC_PARENT || !p)
            continue;
        if (!find_chunk(p, k->alloc_id, k->alloc_offset, &j) ||
            p->chunks[j].raw_len != k->raw_len || p->chunks[j].raw_csum != k->raw_csum) {
            chunk_label(img, i, label, sizeof(label));
            say(img, "%s of %s: the parent image %s holds no matching chunk", label, img->dir,
                img->parent_path);
            return -EBADMSG;
        }
        img->src[i] = p->src[j];
    }
    return resolve_patch_bases(img);
}

/* A PATCH chunk's base: the parent's chunk at the same allocation and offset,
 * of the same length (where its bytes really are). Its raw checksum is
 * checked against the one the patch names when the patch is decoded. */
static int resolve_patch_bases(struct image *img)
{
    char label[160];

    img->base = calloc(img->nchunks ? img->nchunks : 1, sizeof(*img->base));
    if (!img->base)
        return -ENOMEM;
    for (size_t i = 0; i < img->nchunks; i++) {
        const struct image_chunk *k = &img->chunks[i];
        const struct image *p = img->parent;
        size_t j;

        if (k->codec != TCGPU_CODEC_PATCH || !p)
            continue;
        if (!find_chunk(p, k->alloc_id, k->alloc_offset, &j) || p->chunks[j].raw_len != k->raw_len) {
            chunk_label(img, i, label, sizeof(label));
            say(img, "%s of %s: the parent image %s holds no chunk it patches", label, img->dir,
                img->parent_path);
            return -EBADMSG;
        }
        img->base[i] = p->src[j];
    }
    for (size_t i = 0; i < img->nchunks; i++) {
        const struct chunk_src *c = &img->src[i];
        uint32_t n = c->img->chunks[c->idx].stored_len;

        if (n > img->max_stored)
            img->max_stored = n;
    }
    return 0;
}

static int open_depth(struct image **out, const char *dir, unsigned flags, char *errbuf,
                      size_t errlen, int depth);

/* The parent's recorded path, or if that is gone, a directory of the same
 * name next to this image (a chain of images moved together). */
static int open_parent(struct image *img, unsigned flags, int depth)
{
    char err[512] = "", alt[4200];
    uint8_t csum[16];
    const char *base;
    int rc;

    if (!strcmp(img->parent_path, img->dir)) {
        say(img, "%s names itself as its parent image", img->dir);
        return -EBADMSG;
    }
    if (depth >= MAX_PARENT_DEPTH) {
        say(img, "%s: chain of parent images longer than %d", img->dir, MAX_PARENT_DEPTH);
        return -ELOOP;
    }
    rc = open_depth(&img->parent, img->parent_path, flags, err, sizeof(err), depth + 1);
    if (rc == -ENOENT && (base = strrchr(img->parent_path, '/')) != NULL) {
        const char *slash = strrchr(img->dir, '/');
        int n = slash ? (int)(slash - img->dir) : 1;

        snprintf(alt, sizeof(alt), "%.*s%s", n, slash ? img->dir : ".", base);
        if (strcmp(alt, img->parent_path) && access(alt, F_OK) == 0)
            rc = open_depth(&img->parent, alt, flags, err, sizeof(err), depth + 1);
    }
    if (rc) {
        say(img, "parent image of %s: %s", img->dir, err[0] ? err : strerror(-rc));
        return rc == -ENOMEM ? rc : rc == -ENOENT ? -ENOENT : -EBADMSG;
    }
    image_manifest_csum(img->parent, csum);
    if (memcmp(csum, img->parent_csum, 16)) {
        say(img,
            "parent image %s is not the image %s was made from (manifest checksum "
            "differs)",
            img->parent->dir, img->dir);
        return -EBADMSG;
    }
    return 0;
}

static int open_depth(struct image **out, const char *dir, unsigned flags, char *errbuf,
                      size_t errlen, int depth)
{
    struct image *img;
    uint8_t *m = NULL;
    size_t mlen = 0;
    int rc;

    if (!out || !dir || strlen(dir) > 4000)
        return -EINVAL;
    img = calloc(1, sizeof(*img));
    if (!img || !(img->dir = strdup(dir))) {
        free(img);
        return -ENOMEM;
    }
    /* The directory as named (a link to it is the user's choice); what is
     * inside is opened relative to it, never through a link. */
    img->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (img->dfd < 0) {
        rc = -errno;
        /* what the caller looks for is the manifest */
        say(img, "cannot open %s/%s: %s", dir, TCGPU_IMG_MANIFEST_NAME, strerror(errno));
        goto err;
    }
    rc = read_file(img, TCGPU_IMG_MANIFEST_NAME, &m, &mlen);
    if (rc)
        goto err;
    img->manifest_len = mlen;
    rc = parse_manifest(img, m, mlen);
    if (!rc)
        rc = check_tables(img);
    if (!rc && !(flags & IMAGE_OPEN_MANIFEST_ONLY)) {
        rc = open_data_files(img);
        if (!rc && img->have_parent && !(flags & IMAGE_OPEN_NO_PARENT))
            rc = open_parent(img, flags, depth);
        if (!rc)
            rc = resolve_parent_chunks(img);
    }
    if (!rc)
        rc = codec_ctx_new(&img->ctx, NULL);
    if (rc)
        goto err;
    free(m);
    *out = img;
    return 0;
err:
    if (rc == -ENOMEM && !img->msg[0])
        say(img, "out of memory reading %s/manifest", dir);
    if (errbuf && errlen)
        snprintf(errbuf, errlen, "%s", img->msg);
    free(m);
    image_close(img);
    return rc;
}

int image_open(struct image **out, const char *dir, unsigned flags, char *errbuf, size_t errlen)
{
    return open_depth(out, dir, flags, errbuf, errlen, 0);
}

/* ---- accessors ------------------------------------------------------------------ */

const struct image_process *image_process_info(const struct image *img)
{
    return &img->proc;
}
uint32_t image_device_count(const struct image *img)
{
    return img->ndevs;
}
size_t image_alloc_count(const struct image *img)
{
    return img->nallocs;
}
size_t image_chunk_count(const struct image *img)
{
    return img->nchunks;
}
uint32_t image_version_minor(const struct image *img)
{
    return img->vminor;
}

const struct image_device *image_device_info(const struct image *img, uint32_t i)
{
    return i < img->ndevs ? &img->devs[i] : NULL;
}

const struct image_alloc *image_alloc_at(const struct image *img, size_t i)
{
    return i < img->nallocs ? &img->allocs[i] : NULL;
}

const struct image_alloc *image_find_alloc(const struct image *img, uint64_t id)
{
    size_t i;

    return idmap_get(&img->ids, id, &i) ? &img->allocs[i] : NULL;
}

const struct image_chunk *image_chunk_at(const struct image *img, size_t i)
{
    return i < img->nchunks ? &img->chunks[i] : NULL;
}

void image_manifest_csum(const struct image *img, uint8_t out[16])
{
    memcpy(out, img->csum, 16);
}

const char *image_parent(const struct image *img, uint8_t csum[16])
{
    if (!img->have_parent)
        return NULL;
    if (csum)
        memcpy(csum, img->parent_csum, 16);
    return img->parent_path;
}

/* ---- chunk reads ---------------------------------------------------------------- */

static void put_err(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put_err(char *errbuf, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!errbuf || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
}

void image_chunk_resolved(const struct image *img, size_t i, unsigned *codec, uint32_t *stored_len)
{
    const struct image_chunk *k = &img->chunks[i];

    if (img->src && k->codec == TCGPU_CODEC_PARENT)
        k = &img->src[i].img->chunks[img->src[i].idx];
    if (codec)
        *codec = k->codec;
    if (stored_len)
        *stored_len = k->stored_len;
}

int image_read_stored(const struct image *img, size_t i, void *buf, char *errbuf, size_t errlen)
{
    return image_read_stored_flags(img, i, buf, 0, errbuf, errlen);
}

int image_read_stored_flags(const struct image *img, size_t i, void *buf, unsigned flags,
                            char *errbuf, size_t errlen)
{
    const struct image_chunk *k;
    const struct datafile *f;
    const struct image *o = img;
    char label[160];
    size_t got = 0;

    if (i >= img->nchunks)
        return -EINVAL;
    k = &img->chunks[i];
    chunk_label(img, i, label, sizeof(label));
    if (k->codec == TCGPU_CODEC_PARENT) {
        if (!img->src || img->src[i].img == img) {
            put_err(errbuf, errlen, "%s: stored in the parent image %s, which is not open", label,
                    img->parent_path);
            return -EOPNOTSUPP;
        }
        o = img->src[i].img;
        k = &o->chunks[img->src[i].idx];
    }
    f = &o->files[k->file];
    if (f->fd < 0) {
        put_err(errbuf, errlen, "%s: %s/%s not open", label, o->dir, f->name);
        return -EBADF;
    }
    while (got < k->stored_len) {
        ssize_t n =
            pread(f->fd, (uint8_t *)buf + got, k->stored_len - got, (off_t)(k->file_offset + got));

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            put_err(errbuf, errlen, "%s: cannot read %s/%s: %s", label, o->dir, f->name,
                    n < 0 ? strerror(errno) : "unexpected end of file");
            return n < 0 ? -errno : -EBADMSG;
        }
        got += (size_t)n;
    }
    if ((flags & IMAGE_READ_UNCHECKED) &&
        (k->codec == TCGPU_CODEC_ZSTD || k->codec == TCGPU_CODEC_BYTEGROUP ||
         k->codec == TCGPU_CODEC_PATCH))
        return 0;                 /* checked up front; the decoding checks the raw bytes */
    if (XXH3_64bits(buf, k->stored_len) != k->stored_csum) {
        put_err(errbuf, errlen, "%s: stored checksum mismatch in %s/%s", label, o->dir, f->name);
        return -EBADMSG;
    }
    return 0;
}

/* Where chunk i's bytes are: the chunk, or the ancestor's a PARENT chunk resolves to. */
static void where(const struct image *img, size_t i, const struct image **o, size_t *idx)
{
    *o = img;
    *idx = i;
    if (img->chunks[i].codec == TCGPU_CODEC_PARENT && img->src && img->src[i].img != img) {
        *o = img->src[i].img;
        *idx = img->src[i].idx;
    }
}

int image_chunk_base(const struct image *img, size_t i, const struct image **base, size_t *index)
{
    const struct image *o;
    size_t j;

    if (i >= img->nchunks)
        return -EINVAL;
    where(img, i, &o, &j);
    if (o->chunks[j].codec != TCGPU_CODEC_PATCH)
        return -ENOENT;
    if (!o->base || !o->base[j].img)
        return -EOPNOTSUPP;
    *base = o->base[j].img;
    *index = o->base[j].idx;
    return 0;
}

/* Decodes the PATCH chunk j of o (stored bytes at `stored`) into dst: its
 * base first (read, checked, decoded: recursively), then the blocks. */
static int decode_patch(const struct image *o, size_t j, struct codec_ctx *ctx, const void *stored,
                        void *dst, const char *label, char *errbuf, size_t errlen)
{
    const struct image_chunk *s = &o->chunks[j];
    const struct image *b;
    uint64_t named;
    uint32_t blen;
    size_t bi;
    uint8_t *bstored;
    int rc = image_chunk_base(o, j, &b, &bi);

    if (rc) {
        put_err(errbuf, errlen, "%s: patches a chunk of the parent image %s, which is not open",
                label, o->parent_path);
        return -EOPNOTSUPP;
    }
    if (codec_patch_base_csum(stored, s->stored_len, &named) || named != b->chunks[bi].raw_csum) {
        put_err(errbuf, errlen, "%s: patches a chunk the parent image %s does not hold (its "
                "checksum differs)", label, b->dir);
        return -EBADMSG;
    }
    blen = b->chunks[bi].stored_len;
    if (!(bstored = malloc(blen ? blen : 1)))
        return -ENOMEM;
    rc = image_read_stored(b, bi, bstored, errbuf, errlen);
    if (rc == 0)
        rc = image_decode_chunk(b, bi, ctx, bstored, dst, errbuf, errlen);
    free(bstored);
    if (rc)
        return rc;
    rc = codec_patch_apply(ctx, stored, s->stored_len, dst, s->raw_len, s->raw_csum);
    if (rc)
        put_err(errbuf, errlen, "%s: patch data does not apply (%s) in %s/%s", label,
                strerror(-rc), o->dir, o->files[s->file].name);
    return rc;
}

int image_decode_chunk(const struct image *img, size_t i, struct codec_ctx *ctx, const void *stored,
                       void *dst, char *errbuf, size_t errlen)
{
    const struct image_chunk *k, *s;
    const struct image *o;
    char label[160];
    uint64_t raw_csum;
    size_t j;
    int rc;

    if (i >= img->nchunks || !ctx)
        return -EINVAL;
    k = &img->chunks[i];
    where(img, i, &o, &j);
    s = &o->chunks[j];
    chunk_label(img, i, label, sizeof(label));
    if (s->codec == TCGPU_CODEC_PATCH)   /* checked block by block, not by XXH3 of all */
        return decode_patch(o, j, ctx, stored, dst, label, errbuf, errlen);
    rc = codec_decode_and_hash(ctx, s->codec, stored, s->stored_len, dst, k->raw_len, &raw_csum);
    if (rc == -EOPNOTSUPP) {
        put_err(errbuf, errlen, "%s: stored in the parent image %s, which is not open", label,
                img->parent_path);
        return rc;
    }
    if (rc) {
        put_err(errbuf, errlen, "%s: %s data does not decode (%s) in %s/%s", label,
                codec_name(s->codec), strerror(-rc), o->dir, o->files[s->file].name);
        return rc;
    }
    if (raw_csum != k->raw_csum) {
        put_err(errbuf, errlen, "%s: raw checksum mismatch after decoding from %s/%s", label,
                o->dir, o->files[s->file].name);
        return -EBADMSG;
    }
    return 0;
}

const uint64_t *image_chunk_blocks(const struct image *img, size_t i, uint32_t *n,
                                   uint32_t *block_size)
{
    const struct image_chunk *k;

    if (i >= img->nchunks || !img->chunks[i].nblocks)
        return NULL;
    k = &img->chunks[i];
    *n = k->nblocks;
    *block_size = img->block_size;
    return img->blocks + k->blocks_at;
}

static int ensure_bufs(struct image *img)
{
    /* chunk-sized: mapped, so that they leave with the image (common/bigbuf.h) */
    if (!img->stored_buf && img->max_stored && !(img->stored_buf = bigbuf_alloc(img->max_stored)))
        return -ENOMEM;
    if (!img->raw_buf && img->max_raw && !(img->raw_buf = bigbuf_alloc(img->max_raw)))
        return -ENOMEM;
    return 0;
}

/*
 * len bytes of zeros, for a ZERO chunk handed to a callback: a read-only
 * anonymous mapping, which costs neither memory nor commit charge however
 * much the chunk declares (up to TCGPU_IMG_MAX_CHUNK, 1 GiB) and which
 * nobody can write to by mistake. raw_buf, sized for the largest chunk
 * that holds bytes, is not grown for it.
 */
static const void *zeros_of(struct image *img, size_t len)
{
    void *z;

    if (len <= img->zeros_len)
        return img->zeros;
    z = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (z == MAP_FAILED)
        return NULL;
    if (img->zeros)
        munmap(img->zeros, img->zeros_len);
    img->zeros = z;
    img->zeros_len = len;
    return z;
}

/* Reads, checks and decodes chunk i into dst. */
static int load_chunk(struct image *img, size_t i, void *dst, int decode)
{
    int rc = ensure_bufs(img);
    unsigned codec;
    uint32_t stored_len;

    if (rc)
        return rc;
    image_chunk_resolved(img, i, &codec, &stored_len);
    if (stored_len) {
        rc = image_read_stored(img, i, img->stored_buf, img->msg, sizeof(img->msg));
        if (rc || !decode)
            return rc;
    } else if (codec == TCGPU_CODEC_ZERO && !decode) {
        return 0;
    }
    return image_decode_chunk(img, i, img->ctx, img->stored_buf, dst, img->msg, sizeof(img->msg));
}

/*
 * A ZERO chunk holds no bytes to check: its record is covered by the
 * manifest's checksum, and decoding it would only write and hash zeros,
 * as many as it declares. So verifying costs what is stored, not what the
 * image claims to hold.
 */
int image_verify_all(struct image *img, unsigned flags)
{
    int rc = ensure_bufs(img);

    img->msg[0] = '\0';
    for (size_t i = 0; i < img->nchunks && !rc; i++) {
        unsigned codec;

        image_chunk_resolved(img, i, &codec, NULL);
        if (codec != TCGPU_CODEC_ZERO)
            rc = load_chunk(img, i, img->raw_buf, !(flags & IMAGE_VERIFY_STORED_ONLY));
    }
    return rc;
}

int image_read_allocation(struct image *img, uint64_t id, void *dst, size_t dst_len)
{
    const struct image_alloc *a;
    struct alloc_span sp;
    uint64_t at = 0;
    size_t idx;
    uint8_t *d = dst;

    img->msg[0] = '\0';
    if (!idmap_get(&img->ids, id, &idx)) {
        say(img, "no allocation %llu in %s", (unsigned long long)id, img->dir);
        return -ENOENT;
    }
    a = &img->allocs[idx];
    sp = img->spans[idx];
    if (dst_len < a->size) {
        say(img, "buffer of %zu bytes for allocation %llu of %llu bytes", dst_len,
            (unsigned long long)id, (unsigned long long)a->size);
        return -ENOBUFS;
    }
    for (size_t i = sp.first; i < sp.first + sp.count; i++) {
        const struct image_chunk *k = &img->chunks[i];
        int rc;

        memset(d + at, 0, (size_t)(k->alloc_offset - at));
        rc = load_chunk(img, i, d + k->alloc_offset, 1);
        if (rc)
            return rc;
        at = k->alloc_offset + k->raw_len;
    }
    memset(d + at, 0, (size_t)(a->size - at));
    return 0;
}

int image_read_allocation_cb(struct image *img, uint64_t id, image_chunk_cb cb, void *arg)
{
    struct alloc_span sp;
    size_t idx;

    img->msg[0] = '\0';
    if (!idmap_get(&img->ids, id, &idx)) {
        say(img, "no allocation %llu in %s", (unsigned long long)id, img->dir);
        return -ENOENT;
    }
    if (ensure_bufs(img))
        return -ENOMEM;
    sp = img->spans[idx];
    for (size_t i = sp.first; i < sp.first + sp.count; i++) {
        const struct image_chunk *k = &img->chunks[i];
        const void *data = img->raw_buf;
        unsigned codec;
        int rc;

        image_chunk_resolved(img, i, &codec, NULL);
        if (codec == TCGPU_CODEC_ZERO)
            rc = (data = zeros_of(img, k->raw_len)) ? 0 : -ENOMEM;
        else
            rc = load_chunk(img, i, img->raw_buf, 1);
        if (!rc)
            rc = cb(arg, k->alloc_offset, data, k->raw_len);
        if (rc)
            return rc;
    }
    return 0;
}
