/*
 * util.c - id map, chunk ordering, directory removal (internal.h).
 */
#include "internal.h"
#include "common/xxh.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t image_xxh64(const void *p, size_t len)
{
    return XXH3_64bits(p, len);
}

static size_t slot_of(uint64_t key, size_t cap)
{
    /* Ids are often small consecutive integers: mix before masking. */
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

static int idmap_grow(struct idmap *m)
{
    struct idmap n = {.cap = m->cap ? m->cap * 2 : 64};

    n.keys = calloc(n.cap, sizeof(*n.keys));
    n.vals = calloc(n.cap, sizeof(*n.vals));
    if (!n.keys || !n.vals) {
        idmap_free(&n);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (m->vals[i]) {
            size_t s = slot_of(m->keys[i], n.cap);

            while (n.vals[s])
                s = (s + 1) & (n.cap - 1);
            n.keys[s] = m->keys[i];
            n.vals[s] = m->vals[i];
        }
    }
    n.used = m->used;
    idmap_free(m);
    *m = n;
    return 0;
}

int idmap_put(struct idmap *m, uint64_t key, size_t index)
{
    size_t s;

    if ((m->used + 1) * 2 > m->cap && idmap_grow(m))
        return -ENOMEM;
    s = slot_of(key, m->cap);
    while (m->vals[s] && m->keys[s] != key)
        s = (s + 1) & (m->cap - 1);
    if (!m->vals[s])
        m->used++;
    m->keys[s] = key;
    m->vals[s] = index + 1;
    return 0;
}

int idmap_get(const struct idmap *m, uint64_t key, size_t *index)
{
    size_t s;

    if (!m->cap)
        return 0;
    s = slot_of(key, m->cap);
    while (m->vals[s]) {
        if (m->keys[s] == key) {
            *index = m->vals[s] - 1;
            return 1;
        }
        s = (s + 1) & (m->cap - 1);
    }
    return 0;
}

void idmap_free(struct idmap *m)
{
    free(m->keys);
    free(m->vals);
    *m = (struct idmap){0};
}

static int chunk_cmp(const void *a, const void *b)
{
    const struct image_chunk *x = a, *y = b;

    if (x->alloc_id != y->alloc_id)
        return x->alloc_id < y->alloc_id ? -1 : 1;
    if (x->alloc_offset != y->alloc_offset)
        return x->alloc_offset < y->alloc_offset ? -1 : 1;
    return 0;
}

void image_sort_chunks(struct image_chunk *c, size_t n)
{
    if (n > 1)
        qsort(c, n, sizeof(*c), chunk_cmp);
}

size_t image_find_overlap(const struct image_chunk *c, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        /* offset + raw_len cannot overflow: both were bounds-checked
         * against the allocation size first. */
        if (c[i].alloc_id == c[i - 1].alloc_id &&
            c[i].alloc_offset < c[i - 1].alloc_offset + c[i - 1].raw_len)
            return i;
    }
    return n;
}

/* Empties the directory open at `dfd` (which this function closes). */
static int remove_children(int dfd, int depth)
{
    DIR *d = fdopendir(dfd);
    struct dirent *e;
    int rc = 0;

    if (!d) {
        rc = -errno;
        close(dfd);
        return rc;
    }
    while ((e = readdir(d))) {
        struct stat st;
        int sub;

        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = rc ? rc : -errno;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (unlinkat(dirfd(d), e->d_name, 0) < 0 && !rc)
                rc = -errno;
            continue;
        }
        if (depth >= 32) {
            rc = rc ? rc : -ELOOP;
            continue;
        }
        sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0 || remove_children(sub, depth + 1) < 0 ||
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) < 0)
            rc = rc ? rc : -errno;
    }
    closedir(d);
    return rc;
}

int image_remove_tree(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int rc;

    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    rc = remove_children(fd, 0);
    if (rmdir(path) < 0 && !rc)
        rc = -errno;
    return rc;
}

int image_open_regular(int dfd, const char *name, struct stat *st)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    if (fstat(fd, st) < 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return -EBADMSG;
    }
    /* a regular file never blocks; keep reads plain */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* Whether the directory open at dfd holds a manifest that starts with the
 * image magic: 1, 0 (no manifest), -EBADMSG (something else by that name). */
static int holds_manifest(int dfd)
{
    struct stat st;
    char magic[8];
    int fd = image_open_regular(dfd, TCGPU_IMG_MANIFEST_NAME, &st), ok;

    if (fd == -ENOENT)
        return 0;
    if (fd < 0)
        return -EBADMSG;
    ok = read(fd, magic, sizeof(magic)) == (ssize_t)sizeof(magic) &&
         memcmp(magic, TCGPU_IMG_MAGIC, sizeof(magic)) == 0;
    close(fd);
    return ok ? 1 : -EBADMSG;
}

int image_remove(const char *dir, char *errbuf, size_t errlen)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), rc;
    char name[32];

    if (dfd < 0) {
        rc = -errno;
        if (errbuf)
            snprintf(errbuf, errlen, "%s: %s", dir, strerror(errno));
        return rc;
    }
    if (holds_manifest(dfd) != 1) {
        close(dfd);
        if (errbuf)
            snprintf(errbuf, errlen, "%s does not hold a tcgpu image: left alone", dir);
        return -EBADMSG;
    }
    /* the data files first: a directory with a manifest is an image */
    for (unsigned i = 0; i < TCGPU_IMG_MAX_FILES; i++) {
        snprintf(name, sizeof(name), TCGPU_IMG_DATA_FMT, i);
        if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT && errno != EISDIR) {
            /* go on: what is left stays, and rmdir says so */
        }
    }
    unlinkat(dfd, TCGPU_IMG_MANIFEST_NAME, 0);
    close(dfd);
    if (rmdir(dir) < 0) {
        rc = -errno;
        if (errbuf)
            snprintf(errbuf, errlen, "%s: %s (files other than the image's stay)", dir,
                     strerror(errno));
        return rc;
    }
    return 0;
}

int image_dir_replaceable(const char *path)
{
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), rc = 0;
    DIR *d;
    struct dirent *e;

    if (dfd < 0)
        return -errno;
    rc = holds_manifest(dfd);
    if (rc != 0) {
        close(dfd);
        return rc > 0;
    }
    d = fdopendir(dfd);
    if (!d) {
        rc = -errno;
        close(dfd);
        return rc;
    }
    rc = 1;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            rc = 0;
    closedir(d);
    return rc;
}
