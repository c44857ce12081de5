/* The save's file checksums; see filesums.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "filesums.h"
#include "common/xxh.h"

#define CRIU_SUBDIR "criu"
#define READ_CHUNK (1u << 20)

/* Opens DIR/rel for reading: a regular file only, no link followed,
 * nothing that blocks (a FIFO planted there). The fd, or -errno / -EBADMSG. */
static int open_regular(const char *dir, const char *rel, struct stat *st)
{
    char path[PATH_MAX];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ELOOP ? -EBADMSG : -errno;
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return -EBADMSG;
    }
    return fd;
}

/* Size and XXH3-64 of the file open at fd. 0 or -errno. */
static int hash_fd(int fd, uint64_t *size, uint64_t *sum)
{
    XXH3_state_t *st = XXH3_createState();
    char *buf = malloc(READ_CHUNK);
    uint64_t total = 0;
    ssize_t n;
    int r = 0;

    if (!st || !buf) {
        r = -ENOMEM;
        goto out;
    }
    XXH3_64bits_reset(st);
    while ((n = read(fd, buf, READ_CHUNK)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            r = -errno;
            goto out;
        }
        XXH3_64bits_update(st, buf, (size_t)n);
        total += (uint64_t)n;
    }
    *size = total;
    *sum = XXH3_64bits_digest(st);
out:
    XXH3_freeState(st);
    free(buf);
    return r;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const struct tree_file *)a)->path, ((const struct tree_file *)b)->path);
}

int filesums_record(struct tree *t, const char *dir, char *err, size_t len)
{
    char sub[PATH_MAX];
    struct dirent *e;
    struct stat st;
    DIR *d;
    int r = 0;

    t->nfiles = 0;
    snprintf(sub, sizeof(sub), "%s/" CRIU_SUBDIR, dir);
    if (!(d = opendir(sub))) {
        r = -errno;
        snprintf(err, len, "cannot read %s: %s", sub, strerror(errno));
        return r;
    }
    while (r == 0 && (e = readdir(d))) {
        struct tree_file *f;
        int fd;

        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (t->nfiles == TREE_MAX_FILES) {
            snprintf(err, len, "%s holds more than %d files", sub, TREE_MAX_FILES);
            r = -E2BIG;
            break;
        }
        f = &t->file[t->nfiles];
        if ((size_t)snprintf(f->path, sizeof(f->path), CRIU_SUBDIR "/%s", e->d_name) >=
            sizeof(f->path)) {
            snprintf(err, len, "%s/%s: name too long", sub, e->d_name);
            r = -EBADMSG;
            break;
        }
        fd = open_regular(dir, f->path, &st);
        if (fd < 0) {
            snprintf(err, len, "%s/%s: %s", dir, f->path,
                     fd == -EBADMSG ? "not a regular file" : strerror(-fd));
            r = fd;
            break;
        }
        r = hash_fd(fd, &f->size, &f->xxh3);
        close(fd);
        if (r < 0)
            snprintf(err, len, "cannot read %s/%s: %s", dir, f->path, strerror(-r));
        else
            t->nfiles++;
    }
    closedir(d);
    if (r == 0)
        qsort(t->file, (size_t)t->nfiles, sizeof(t->file[0]), by_path);
    return r;
}

static int listed(const struct tree *t, const char *path)
{
    struct tree_file key;
    size_t n = strlen(path);

    if (n >= sizeof(key.path))
        return 0;                   /* no listed name is that long */
    memcpy(key.path, path, n + 1);
    return bsearch(&key, t->file, (size_t)t->nfiles, sizeof(t->file[0]), by_path) != NULL;
}

/* A CRIU image in DIR/criu that the save did not write (a planted one). */
static int check_unlisted(const struct tree *t, const char *dir, char *err, size_t len)
{
    char sub[PATH_MAX], rel[sizeof(t->file[0].path) + 300];
    struct dirent *e;
    size_t n;
    DIR *d;

    snprintf(sub, sizeof(sub), "%s/" CRIU_SUBDIR, dir);
    if (!(d = opendir(sub)))
        return 0;                   /* missing: check_criu_images says so */
    while ((e = readdir(d))) {
        n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".img"))
            continue;
        snprintf(rel, sizeof(rel), CRIU_SUBDIR "/%s", e->d_name);
        if (!listed(t, rel)) {
            snprintf(err, len, "%s/%s is not a file this save wrote", dir, rel);
            closedir(d);
            return -EBADMSG;
        }
    }
    closedir(d);
    return 0;
}

int filesums_check(const struct tree *t, const char *dir, char *err, size_t len)
{
    for (int i = 0; i < t->nfiles; i++) {
        const struct tree_file *f = &t->file[i];
        uint64_t size, sum;
        struct stat st;
        int fd = open_regular(dir, f->path, &st), r;

        if (fd < 0) {
            snprintf(err, len, "%s/%s: %s", dir, f->path,
                     fd == -EBADMSG ? "not a regular file (replaced?)"
                     : fd == -ENOENT ? "missing" : strerror(-fd));
            return fd == -ENOMEM ? fd : -EBADMSG;
        }
        if ((uint64_t)st.st_size != f->size) {
            snprintf(err, len, "%s/%s is %lld bytes, the save wrote %llu (truncated or replaced)",
                     dir, f->path, (long long)st.st_size, (unsigned long long)f->size);
            close(fd);
            return -EBADMSG;
        }
        r = hash_fd(fd, &size, &sum);
        close(fd);
        if (r < 0) {
            snprintf(err, len, "cannot read %s/%s: %s", dir, f->path, strerror(-r));
            return r == -ENOMEM ? r : -EIO;
        }
        if (size != f->size || sum != f->xxh3) {
            snprintf(err, len, "%s/%s: checksum mismatch: the file was modified or damaged "
                     "after the save", dir, f->path);
            return -EBADMSG;
        }
    }
    return check_unlisted(t, dir, err, len);
}
