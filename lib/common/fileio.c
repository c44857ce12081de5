/*
 * fileio.c - complete writes, directory fsync, atomic replace (fileio.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"

int fileio_write_all(int fd, const void *p, size_t len)
{
    const char *c = p;

    while (len) {
        ssize_t n = write(fd, c, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        c += n;
        len -= (size_t)n;
    }
    return 0;
}

int fileio_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        r = -errno;
    close(fd);
    return r;
}

int fileio_parent_of(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');

    if (!slash)
        return snprintf(out, cap, ".") < (int)cap ? 0 : -ENAMETOOLONG;
    if (slash == path)
        return snprintf(out, cap, "/") < (int)cap ? 0 : -ENAMETOOLONG;
    if ((size_t)(slash - path) >= cap)
        return -ENAMETOOLONG;
    memcpy(out, path, (size_t)(slash - path));
    out[slash - path] = '\0';
    return 0;
}

int fileio_fsync_parent(const char *path)
{
    char parent[PATH_MAX];
    int r = fileio_parent_of(path, parent, sizeof(parent));

    return r ? r : fileio_fsync_dir(parent);
}

static int failed(const char **stage, const char *what, int r)
{
    if (stage)
        *stage = what;
    return r;
}

int fileio_replace(const char *path, mode_t mode, int (*fill)(int fd, void *arg), void *arg,
                   const char **stage)
{
    char tmp[PATH_MAX];
    int fd, r;

    /* The pid keeps two writers of the same path from sharing a temp file. */
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
        return failed(stage, "create", -ENAMETOOLONG);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)   /* left by a crash of ours */
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return failed(stage, "create", -errno);
    r = fill(fd, arg);
    if (r)
        failed(stage, "write", r);
    else if (fsync(fd) < 0)
        r = failed(stage, "fsync", -errno);
    if (close(fd) < 0 && r == 0)
        r = failed(stage, "fsync", -errno);
    if (r == 0 && rename(tmp, path) < 0)
        r = failed(stage, "rename", -errno);
    if (r) {
        unlink(tmp);
        return r;
    }
    r = fileio_fsync_parent(path);
    return r ? failed(stage, "fsync-dir", r) : 0;
}
