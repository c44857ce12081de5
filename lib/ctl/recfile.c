/* recfile.c - sealed files of protocol records; see recfile.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "recfile.h"
#include "common/fileio.h"
#include "common/xxh.h"

#define CHECKSUM_LINE_LEN 30    /* "checksum xxh3=" + 16 hex digits */

int recfile_writer_init(struct recfile_writer *w)
{
    memset(w, 0, sizeof(*w));
    w->b = malloc(sizeof(*w->b));
    w->mem = w->b ? open_memstream(&w->text, &w->size) : NULL;
    if (!w->mem) {
        free(w->b);
        w->b = NULL;
        return -ENOMEM;
    }
    return 0;
}

struct ctl_buf *recfile_buf(struct recfile_writer *w)
{
    return w->b;
}

int recfile_put(struct recfile_writer *w)
{
    long n = ctl_buf_finish(w->b);
    int r = 0;

    if (n < 0)
        r = -EMSGSIZE;
    else if (fwrite(w->b->data, 1, (size_t)n, w->mem) != (size_t)n || fputc('\n', w->mem) == EOF)
        r = -ENOMEM;
    if (r < 0 && !w->err)
        w->err = r;
    return r;
}

static int write_sealed(int fd, const char *text, size_t size)
{
    char sum[64];
    int n = snprintf(sum, sizeof(sum), "checksum xxh3=%016" PRIx64 "\n",
                     (uint64_t)XXH3_64bits(text, size));
    int r = fileio_write_all(fd, text, size);

    if (r == 0)
        r = fileio_write_all(fd, sum, (size_t)n);
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    return r;
}

int recfile_commit(struct recfile_writer *w, int dirfd, const char *name, char *err, size_t len)
{
    char tmp[256];
    const char *step = "write";
    int fd = -1, r = w->err;

    if (r == 0 && fflush(w->mem) != 0)
        r = -ENOMEM;
    if (r < 0) {
        snprintf(err, len, "%s: cannot build its records: %s", name, strerror(-r));
        return r;
    }
    snprintf(tmp, sizeof(tmp), ".%.200s.tmp-%d", name, (int)getpid());
    unlinkat(dirfd, tmp, 0);
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        r = -errno;
        step = "create";
        goto out;
    }
    if ((r = write_sealed(fd, w->text, w->size)) < 0)
        goto out;
    step = "rename";
    if (renameat(dirfd, tmp, dirfd, name) < 0) {
        r = -errno;
        goto out;
    }
    tmp[0] = '\0';
    step = "fsync";
    if (fsync(dirfd) < 0)
        r = -errno;
out:
    if (fd >= 0)
        close(fd);
    if (r < 0) {
        if (tmp[0])
            unlinkat(dirfd, tmp, 0);
        snprintf(err, len, "cannot write %s (%s): %s", name, step, strerror(-r));
    }
    return r;
}

void recfile_writer_free(struct recfile_writer *w)
{
    if (w->mem)
        fclose(w->mem);
    free(w->text);
    free(w->b);
    memset(w, 0, sizeof(*w));
}

/* Checks the last line against the bytes before it; *body excludes it. */
static int check_seal(char *text, size_t n, size_t *body, char *why, size_t len)
{
    char *last;
    uint64_t want;

    if (n == 0 || text[n - 1] != '\n') {
        snprintf(why, len, "truncated (no final checksum line)");
        return -EBADMSG;
    }
    text[n - 1] = '\0';
    last = strrchr(text, '\n');
    last = last ? last + 1 : text;
    if (strlen(last) != CHECKSUM_LINE_LEN || sscanf(last, "checksum xxh3=%16" SCNx64, &want) != 1) {
        snprintf(why, len, "truncated or damaged (no final checksum line)");
        return -EBADMSG;
    }
    *body = (size_t)(last - text);
    if ((uint64_t)XXH3_64bits(text, *body) != want) {
        snprintf(why, len, "checksum mismatch: the file was modified or damaged");
        return -EBADMSG;
    }
    return 0;
}

static int each_record(char *text, size_t body, recfile_fn fn, void *arg, char *why, size_t len)
{
    struct ctl_msg *m = malloc(sizeof(*m));
    int line = 0, r = 0;

    if (!m)
        return -ENOMEM;
    for (char *s = text, *nl; r == 0 && s < text + body; s = nl + 1) {
        if (!(nl = memchr(s, '\n', (size_t)(text + body - s))))
            break;
        line++;
        if (ctl_parse(s, (size_t)(nl - s), m) < 0) {
            snprintf(why, len, "line %d is malformed", line);
            r = -EBADMSG;
            break;
        }
        r = fn(m, line, arg, why, len);
    }
    free(m);
    return r;
}

/* The whole file, NUL-terminated, into *text (caller frees). */
static int read_whole(int dirfd, const char *name, size_t max, char **text, size_t *n, char *why,
                      size_t len)
{
    struct stat st;
    ssize_t got;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), r = 0;

    *text = NULL;
    if (fd < 0) {
        r = -errno;
        snprintf(why, len, "%s", errno == ELOOP ? "a symbolic link, not a file" : strerror(errno));
        return r;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > max) {
        snprintf(why, len, "not a regular file of at most %zu bytes", max);
        r = -EBADMSG;
        goto out;
    }
    if (!(*text = malloc((size_t)st.st_size + 1))) {
        r = -ENOMEM;
        snprintf(why, len, "out of memory");
        goto out;
    }
    got = pread(fd, *text, (size_t)st.st_size, 0);
    if (got != st.st_size) {
        r = got < 0 ? -errno : -EBADMSG;
        snprintf(why, len, "%s", got < 0 ? strerror(errno) : "changed while read");
        goto out;
    }
    (*text)[got] = '\0';
    *n = (size_t)got;
out:
    close(fd);
    if (r < 0) {
        free(*text);
        *text = NULL;
    }
    return r;
}

int recfile_read(int dirfd, const char *name, size_t max, recfile_fn fn, void *arg, char *err,
                 size_t len)
{
    char why[256] = "", *text;
    size_t n = 0, body = 0;
    int r = read_whole(dirfd, name, max, &text, &n, why, sizeof(why));

    if (r == 0 && (r = check_seal(text, n, &body, why, sizeof(why))) == 0)
        r = each_record(text, body, fn, arg, why, sizeof(why));
    if (r < 0)
        snprintf(err, len, "%s: %s", name, why);
    free(text);
    return r;
}

int recfile_get_pid(const struct ctl_msg *m, const char *key, pid_t *out)
{
    uint64_t v;

    if (ctl_get_u64(m, key, &v) < 0 || v == 0 || v > INT32_MAX)
        return -1;
    *out = (pid_t)v;
    return 0;
}
