/* A path whose every ancestor its user can trust; see pathtrust.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pathtrust.h"

#define MAX_LINKS 40              /* as the kernel's own limit on a lookup */

/* The walk: where we are (a checked directory), and what is left to go. */
struct walk {
    uid_t uid;
    int fd;                       /* O_PATH of the directory `where` */
    struct stat st;               /* of fd */
    char where[PATH_MAX];         /* its path, for messages */
    char rest[2 * PATH_MAX];      /* components still to walk, '/'-separated */
    int links;
    char *err;
    size_t errlen;
};

static int fail(struct walk *w, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(struct walk *w, int r, const char *fmt, ...)
{
    va_list ap;

    if (w->err && w->errlen) {
        va_start(ap, fmt);
        vsnprintf(w->err, w->errlen, fmt, ap);
        va_end(ap);
    }
    return r;
}

static int trusted_owner(const struct walk *w, uid_t owner)
{
    return owner == 0 || owner == w->uid;
}

/* Others than the owner may add or remove entries. */
static int others_may_write(const struct stat *st)
{
    return (st->st_mode & (S_IWGRP | S_IWOTH)) != 0;
}

/* Whether the directory fd (at path p) may be walked through. 0 or -EPERM. */
static int check_dir(struct walk *w, const struct stat *st, const char *p)
{
    if (!trusted_owner(w, st->st_uid))
        return fail(w, -EPERM, "%s is owned by uid %u, neither root nor uid %u: refusing to "
                    "write under it", p, (unsigned)st->st_uid, (unsigned)w->uid);
    if (others_may_write(st) && !(st->st_mode & S_ISVTX))
        return fail(w, -EPERM, "%s may be written by others (mode %04o, not sticky): refusing "
                    "to write under it", p, (unsigned)(st->st_mode & 07777));
    return 0;
}

/* Move to the directory nfd (path p): check it, and make it the current one. */
static int enter(struct walk *w, int nfd, const char *p)
{
    struct stat st;
    int r;

    if (fstat(nfd, &st) < 0) {
        r = -errno;
        close(nfd);
        return fail(w, r, "%s: %s", p, strerror(-r));
    }
    r = check_dir(w, &st, p);
    if (r < 0) {
        close(nfd);
        return r;
    }
    if (w->fd >= 0)
        close(w->fd);
    w->fd = nfd;
    w->st = st;
    if (p != w->where && snprintf(w->where, sizeof(w->where), "%s", p) >= (int)sizeof(w->where))
        w->where[sizeof(w->where) - 1] = '\0';
    return 0;
}

static int enter_root(struct walk *w)
{
    int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0)
        return fail(w, -errno, "/: %s", strerror(errno));
    return enter(w, fd, "/");
}

/*
 * "/proc/self/fd/N/...": a directory this process holds open (one a peer
 * passed over its socket, whose credentials were checked: the CRIU
 * plugin's images directory, which may not exist in our mount namespace).
 * The walk starts at that descriptor, checked as any directory, instead of
 * resolving the magic link by its name. Returns 1 when rest was such a
 * path (w entered, w->rest what follows), 0 when not, or -errno.
 */
static int enter_held_fd(struct walk *w)
{
    static const char prefix[] = "/proc/self/fd/";
    const char *p = w->rest + sizeof(prefix) - 1, *end;
    char name[64];
    long n;
    int fd;

    if (strncmp(w->rest, prefix, sizeof(prefix) - 1) || *p < '0' || *p > '9')
        return 0;
    n = strtol(p, (char **)&end, 10);
    if ((*end && *end != '/') || n < 0 || n > INT_MAX)
        return 0;
    snprintf(name, sizeof(name), "%s%ld", prefix, n);
    fd = openat((int)n, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fail(w, -errno, "%s: %s", name, strerror(errno));
    int r = enter(w, fd, name);
    if (r < 0)
        return r;
    memmove(w->rest, end, strlen(end) + 1);
    return 1;
}

/* "where/name", for messages (where is "/" at the top); a path too long
 * for PATH_MAX fails at openat before it matters. */
static void child_path(const struct walk *w, const char *name, char *out, size_t len)
{
    if (snprintf(out, len, "%s%s%s", w->where, strcmp(w->where, "/") ? "/" : "", name) >= (int)len)
        out[len - 1] = '\0';
}

/* A symbolic link in the current directory: follow it if it is trusted
 * (its target then goes in front of what is left to walk). */
static int follow(struct walk *w, const char *name, const struct stat *st, const char *after)
{
    char p[PATH_MAX], target[PATH_MAX], rest[2 * PATH_MAX];
    ssize_t n;

    child_path(w, name, p, sizeof(p));
    if (!trusted_owner(w, st->st_uid) && st->st_uid != w->st.st_uid && others_may_write(&w->st))
        return fail(w, -EPERM, "%s is a symbolic link owned by uid %u in %s, which others may "
                    "write: refusing to follow it", p, (unsigned)st->st_uid, w->where);
    if (++w->links > MAX_LINKS)
        return fail(w, -ELOOP, "%s: too many levels of symbolic links", p);
    n = readlinkat(w->fd, name, target, sizeof(target) - 1);
    if (n < 0)
        return fail(w, -errno, "%s: %s", p, strerror(errno));
    target[n] = '\0';
    if ((size_t)snprintf(rest, sizeof(rest), "%s/%s", target, after) >= sizeof(w->rest))
        return fail(w, -ENAMETOOLONG, "%s: the path is too long", p);
    memcpy(w->rest, rest, sizeof(w->rest));
    return target[0] == '/' ? enter_root(w) : 0;
}

/* One component of the walk. */
static int step(struct walk *w, const char *name, const char *after)
{
    char p[PATH_MAX];
    struct stat st;
    int nfd;

    if (!strcmp(name, "..")) {
        char up[PATH_MAX], *slash;
        memcpy(up, w->where, sizeof(up));
        slash = strrchr(up, '/');
        if (slash && slash != up)
            *slash = '\0';
        else
            snprintf(up, sizeof(up), "/");
        nfd = openat(w->fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        return nfd < 0 ? fail(w, -errno, "%s/..: %s", w->where, strerror(errno)) : enter(w, nfd, up);
    }
    child_path(w, name, p, sizeof(p));
    if (fstatat(w->fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fail(w, -errno, "%s: %s", p, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return follow(w, name, &st, after);
    if (!S_ISDIR(st.st_mode))
        return fail(w, -ENOTDIR, "%s is not a directory", p);
    nfd = openat(w->fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0)
        return fail(w, -errno, "%s: %s", p, strerror(errno));
    return enter(w, nfd, p);
}

/* Walk w->rest to its end. */
static int walk_all(struct walk *w)
{
    for (;;) {
        char name[NAME_MAX + 1], *s = w->rest, *slash;
        size_t n;
        int r;

        while (*s == '/')
            s++;
        if (!*s)
            return 0;
        slash = strchr(s, '/');
        n = slash ? (size_t)(slash - s) : strlen(s);
        if (n > NAME_MAX)
            return fail(w, -ENAMETOOLONG, "%s: a component is too long", w->where);
        memcpy(name, s, n);
        name[n] = '\0';
        memmove(w->rest, s + n, strlen(s + n) + 1);
        if (!strcmp(name, "."))
            continue;
        r = step(w, name, w->rest);
        if (r < 0)
            return r;
    }
}

int pathtrust_open_parent(const char *path, uid_t uid, char *leaf, size_t leaflen, char *err,
                          size_t errlen)
{
    struct walk *w;
    const char *last;
    size_t len, n;
    int r;

    if (!path || path[0] != '/')
        return -EINVAL;
    len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    for (last = path + len; last > path && last[-1] != '/'; last--)
        ;
    n = (size_t)(path + len - last);
    if (n == 0 || n >= leaflen || (n == 1 && last[0] == '.') ||
        (n == 2 && last[0] == '.' && last[1] == '.')) {
        if (err && errlen)
            snprintf(err, errlen, "%s: not a path to a new entry", path);
        return -EINVAL;
    }
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    *w = (struct walk){ .uid = uid, .fd = -1, .err = err, .errlen = errlen };
    if ((size_t)(last - path) >= sizeof(w->rest)) {
        free(w);
        return -ENAMETOOLONG;
    }
    memcpy(w->rest, path, (size_t)(last - path));
    w->rest[last - path] = '\0';
    r = enter_held_fd(w);
    if (r == 0)
        r = enter_root(w);
    if (r >= 0)
        r = walk_all(w);
    if (r == 0) {
        memcpy(leaf, last, n);
        leaf[n] = '\0';
        r = w->fd;
        w->fd = -1;
    }
    if (w->fd >= 0)
        close(w->fd);
    free(w);
    return r;
}

int pathtrust_user_may_write(const struct stat *st, uid_t uid)
{
    if (!S_ISDIR(st->st_mode))
        return 0;
    if (st->st_uid == uid)
        return !(st->st_mode & 022);
    return st->st_uid == 0 && (st->st_mode & S_ISVTX) && (st->st_mode & 002);
}
