/* Where control sockets live; see rundir.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "rundir.h"
#include "common/proc.h"

#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static int check_stat(const struct stat *stp, const char *dir, uid_t uid, char *err, size_t errlen)
{
    const struct stat st = *stp;

    if (S_ISLNK(st.st_mode)) {
        set_err(err, errlen, "run dir %s is a symbolic link: refusing to use it", dir);
        return -ENOTDIR;
    }
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "run dir %s is not a directory: refusing to use it", dir);
        return -ENOTDIR;
    }
    if (st.st_uid != uid) {
        set_err(err, errlen, "run dir %s is owned by uid %u, not %u: refusing to use it",
                dir, (unsigned)st.st_uid, (unsigned)uid);
        return -EPERM;
    }
    if (st.st_mode & 077) {
        set_err(err, errlen, "run dir %s has mode %04o; it must be 0700 (no group or other "
                "access): refusing to use it", dir, (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

int tcgpu_rundir_check(const char *dir, uid_t uid, char *err, size_t errlen)
{
    struct stat st;

    if (lstat(dir, &st) < 0) {
        int e = errno;
        set_err(err, errlen, "run dir %s: %s", dir, strerror(e));
        return -e;
    }
    return check_stat(&st, dir, uid, err, errlen);
}

int tcgpu_rundir_check_fd(int fd, const char *shown, uid_t uid, char *err, size_t errlen)
{
    struct stat st;

    if (fstat(fd, &st) < 0) {
        int e = errno;
        set_err(err, errlen, "run dir %s: %s", shown, strerror(e));
        return -e;
    }
    return check_stat(&st, shown, uid, err, errlen);
}

/* A directory owned by uid (for XDG_RUNTIME_DIR); follows symlinks like a shell would. */
static int dir_owned_by(const char *dir, uid_t uid)
{
    struct stat st;

    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid;
}

int tcgpu_rundir_choose(const struct tcgpu_rundir_env *env, char *dir, size_t dirlen, uid_t uid)
{
    const char *v = env->run_dir, *xdg = env->xdg_runtime_dir;
    int n;

    if (v && *v)
        n = snprintf(dir, dirlen, "%s", v);
    else if (xdg && *xdg == '/' && dir_owned_by(xdg, uid))
        n = snprintf(dir, dirlen, "%s/tcgpu", xdg);
    else
        n = snprintf(dir, dirlen, "/tmp/tcgpu-%u", (unsigned)uid);
    if (n < 0 || (size_t)n >= dirlen)
        return -ENAMETOOLONG;
    /* "dir/" and "dir" are the same place; keep one spelling */
    while (n > 1 && dir[n - 1] == '/')
        dir[--n] = '\0';
    return 0;
}

/* "/tmp/tcgpu-<uid>.": the start of the fallback dirs' names. */
static void fallback_prefix(uid_t uid, char *buf, size_t len)
{
    snprintf(buf, len, "/tmp/tcgpu-%u.", (unsigned)uid);
}

/* An existing fallback dir of uid that passes the checks, into dir. 0 or -ENOENT. */
static int find_fallback(uid_t uid, char *dir, size_t dirlen)
{
    char prefix[64];
    size_t pl;
    DIR *tmp = opendir("/tmp");
    struct dirent *e;
    int r = -ENOENT;

    if (!tmp)
        return -ENOENT;
    fallback_prefix(uid, prefix, sizeof(prefix));
    pl = strlen(prefix) - strlen("/tmp/");
    while (r < 0 && (e = readdir(tmp))) {
        if (strncmp(e->d_name, prefix + 5, pl) || strlen(e->d_name) != pl + 6)
            continue;
        if ((size_t)snprintf(dir, dirlen, "/tmp/%s", e->d_name) < dirlen &&
            tcgpu_rundir_check(dir, uid, NULL, 0) == 0)
            r = 0;
    }
    closedir(tmp);
    return r;
}

/*
 * The preferred run dir was refused (another user's, a symlink, a file...):
 * a private one nobody else can have made first, /tmp/tcgpu-<uid>.XXXXXX
 * (mkdtemp: a name not known in advance, created exclusively, 0700), or one
 * of those made earlier. Clients find it among their candidates.
 */
static int fall_back(char *dir, size_t dirlen, uid_t uid)
{
    char tmpl[64];

    if (find_fallback(uid, dir, dirlen) == 0)
        return 0;
    fallback_prefix(uid, tmpl, sizeof(tmpl));
    strcat(tmpl, "XXXXXX");
    if (!mkdtemp(tmpl))
        return -errno;
    if ((size_t)snprintf(dir, dirlen, "%s", tmpl) >= dirlen) {
        rmdir(tmpl);
        return -ENAMETOOLONG;
    }
    return tcgpu_rundir_check(dir, uid, NULL, 0);
}

int tcgpu_rundir_prepare(const struct tcgpu_rundir_env *env, char *dir, size_t dirlen, char *err,
                         size_t errlen)
{
    char refused[PATH_MAX + 160], wanted[PATH_MAX];
    uid_t uid = geteuid();
    int r, made;

    r = tcgpu_rundir_choose(env, dir, dirlen, uid);
    if (r < 0) {
        set_err(err, errlen, "run dir path is too long (TCGPU_RUN_DIR, XDG_RUNTIME_DIR)");
        return r;
    }
    made = mkdir(dir, 0700) == 0 || errno == EEXIST ? 0 : -errno;
    r = tcgpu_rundir_check(dir, uid, refused, sizeof(refused));
    if (r == 0)
        return 0;
    if (r == -ENOENT) {         /* a missing parent, say: the user's mistake to fix */
        set_err(err, errlen, "cannot create run dir %s: %s", dir, strerror(made ? -made : -r));
        return -ENOENT;
    }
    snprintf(wanted, sizeof(wanted), "%s", dir);
    r = fall_back(dir, dirlen, uid);
    if (r < 0) {
        set_err(err, errlen, "%s, and no private run dir could be made in /tmp: %s", refused,
                strerror(-r));
        return r;
    }
    set_err(err, errlen, "%s; using the private %s instead of %s (gpuckpt finds it)", refused,
            dir, wanted);
    return 1;
}

int tcgpu_rundir_socket_path(const char *dir, pid_t pid, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%d.sock", dir, (int)pid);

    if (n < 0 || (size_t)n >= len || (size_t)n > SUN_PATH_MAX)
        return -ENAMETOOLONG;
    return 0;
}

/* Read /proc/PID/environ and find NAME's value; NULL if absent or unreadable. */
static char *proc_getenv(char *env, size_t envlen, const char *name)
{
    size_t nl = strlen(name);

    for (size_t i = 0; i < envlen;) {
        char *e = env + i;
        size_t l = strnlen(e, envlen - i);
        if (l > nl && !memcmp(e, name, nl) && e[nl] == '=')
            return e + nl + 1;
        i += l + 1;
    }
    return NULL;
}

/* Append "<a><suffix>" unless it is already there or does not fit. */
static void add_candidate(char dirs[][PATH_MAX], int *n, int max, const char *a, const char *suffix)
{
    char d[PATH_MAX];
    int l;

    if (*n >= max)
        return;
    l = snprintf(d, sizeof(d), "%s%s", a, suffix);
    if (l <= 0 || (size_t)l >= sizeof(d))
        return;
    while (l > 1 && d[l - 1] == '/')
        d[--l] = '\0';
    for (int i = 0; i < *n; i++)
        if (!strcmp(dirs[i], d))
            return;
    memcpy(dirs[(*n)++], d, (size_t)l + 1);
}

/* Every fallback dir of uid (tcgpu_rundir_prepare's), whoever owns it: the
 * client checks each before it trusts one. */
static void add_fallbacks(char dirs[][PATH_MAX], int *n, int max, uid_t uid)
{
    char prefix[64];
    DIR *tmp = opendir("/tmp");
    struct dirent *e;
    size_t pl;

    if (!tmp)
        return;
    fallback_prefix(uid, prefix, sizeof(prefix));
    pl = strlen(prefix) - strlen("/tmp/");
    while (*n < max && (e = readdir(tmp)))
        if (!strncmp(e->d_name, prefix + 5, pl) && strlen(e->d_name) == pl + 6)
            add_candidate(dirs, n, max, "/tmp/", e->d_name);
    closedir(tmp);
}

int tcgpu_rundir_candidates(const char *own_run_dir, pid_t pid, uid_t uid, char dirs[][PATH_MAX],
                            int max)
{
    static const size_t cap = 1 << 20;
    char *env = malloc(cap);
    size_t envlen = env ? tcgpu_proc_environ(pid, env, cap) : 0;
    const char *v;
    char u[32];
    int n = 0;

    if (own_run_dir && *own_run_dir)
        add_candidate(dirs, &n, max, own_run_dir, "");
    v = envlen ? proc_getenv(env, envlen, "TCGPU_RUN_DIR") : NULL;
    if (v && *v)
        add_candidate(dirs, &n, max, v, "");
    v = envlen ? proc_getenv(env, envlen, "XDG_RUNTIME_DIR") : NULL;
    if (v && *v == '/')
        add_candidate(dirs, &n, max, v, "/tcgpu");
    snprintf(u, sizeof(u), "/run/user/%u", (unsigned)uid);
    add_candidate(dirs, &n, max, u, "/tcgpu");
    snprintf(u, sizeof(u), "%u", (unsigned)uid);
    add_candidate(dirs, &n, max, "/tmp/tcgpu-", u);
    add_fallbacks(dirs, &n, max, uid);
    free(env);
    return n;
}
