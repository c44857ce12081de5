/* The client side of the control channel; see client.h. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "common/clock.h"
#include "rundir.h"

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || !errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int ctl_socket_connect(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    size_t len = path ? strlen(path) : 0;
    int fd, r;

    if (!len || len >= sizeof(a.sun_path))
        return -EINVAL;
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    memcpy(a.sun_path, path, len + 1);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        r = -errno;
        close(fd);
        return r;
    }
    return fd;
}

static int connect_one(const char *path, pid_t pid, uid_t uid, struct ctl_conn *c, char *err,
                       size_t errlen)
{
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    struct stat st;
    size_t len = strlen(path);
    int fd;

    if (len >= sizeof(c->path)) {
        set_err(err, errlen, "%s: path too long for a socket", path);
        return -ENAMETOOLONG;
    }
    if (lstat(path, &st) < 0 || !S_ISSOCK(st.st_mode) || st.st_uid != uid) {
        set_err(err, errlen, "%s is not a socket owned by uid %u: refusing to use it", path,
                (unsigned)uid);
        return -EPERM;
    }
    fd = ctl_socket_connect(path);
    if (fd < 0) {
        if (fd == -ECONNREFUSED)
            set_err(err, errlen, "process %d does not answer on %s (stale socket: "
                    "a tcgpu process with this pid died)", (int)pid, path);
        else
            set_err(err, errlen, "cannot connect to %s: %s", path, strerror(-fd));
        return fd;
    }
    /* The server is pid, of uid or of root: CRIU binds and listens on a
     * restored process's socket before it gives the process its own
     * credentials, and SO_PEERCRED keeps the listener's (docs/save-restore.md,
     * "Ordinary users"). Root can act as anyone anyway. */
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
        (cred.uid != uid && cred.uid != 0) || cred.pid != pid) {
        set_err(err, errlen, "%s is served by pid %d uid %u, not by process %d uid %u: "
                "refusing to talk to it", path, (int)cred.pid, (unsigned)cred.uid, (int)pid,
                (unsigned)uid);
        close(fd);
        return -EPERM;
    }
    c->fd = fd;
    c->pid = pid;
    c->uid = uid;
    memcpy(c->path, path, len + 1);
    return 0;
}

int ctl_connect(pid_t pid, struct ctl_conn *c, char *err, size_t errlen)
{
    char dirs[TCGPU_RUNDIR_MAX_CANDIDATES][PATH_MAX];
    char path[PATH_MAX], looked[1024] = "";
    uid_t uid;
    int n, r;

    c->fd = -1;
    r = tcgpu_proc_uid(pid, &uid);
    if (r < 0) {
        if (r == -ESRCH)
            set_err(err, errlen, "no such process: %d", (int)pid);
        else
            set_err(err, errlen, "process %d: %s", (int)pid, strerror(-r));
        return r;
    }
    n = tcgpu_rundir_candidates(pid, uid, dirs, TCGPU_RUNDIR_MAX_CANDIDATES);
    for (int i = 0; i < n; i++) {
        struct stat st;
        char derr[PATH_MAX + 128];
        size_t l = strlen(looked);

        if (tcgpu_rundir_socket_path(dirs[i], pid, path, sizeof(path)) < 0)
            continue;
        if (l + strlen(dirs[i]) + 3 < sizeof(looked)) {
            memcpy(looked + l, l ? ", " : "", l ? 2 : 0);
            memcpy(looked + l + (l ? 2 : 0), dirs[i], strlen(dirs[i]) + 1);
        }
        if (lstat(path, &st) < 0) {
            if (errno == EACCES) {
                set_err(err, errlen, "cannot look into %s: permission denied (process %d "
                        "belongs to uid %u)", dirs[i], (int)pid, (unsigned)uid);
                return -EACCES;
            }
            continue;
        }
        r = tcgpu_rundir_check(dirs[i], uid, derr, sizeof(derr));
        if (r < 0) {
            set_err(err, errlen, "%s", derr);
            return -EPERM;
        }
        return connect_one(path, pid, uid, c, err, errlen);
    }
    set_err(err, errlen, "process %d has no control socket: it is not running under tcgpu "
            "(gpuckpt run / LD_PRELOAD=libtcgpu.so) or has not initialised CUDA yet "
            "(looked in %s)", (int)pid, looked);
    return -ENOENT;
}

int ctl_call(struct ctl_conn *c, const char *req, size_t len, struct ctl_msg *reply,
             int timeout_ms, ctl_progress_fn progress, void *arg)
{
    int64_t deadline = timeout_ms >= 0 ? (int64_t)now_ms() + timeout_ms : -1;
    char *buf;
    int r;

    if (len > CTL_MSG_MAX)
        return -EMSGSIZE;
    if (send(c->fd, req, len, MSG_NOSIGNAL) < 0)
        return errno == EPIPE ? -ECONNRESET : -errno;
    buf = malloc(CTL_MSG_MAX);
    if (!buf)
        return -ENOMEM;
    for (;;) {
        struct pollfd p = { .fd = c->fd, .events = POLLIN };
        int wait = -1;
        ssize_t n;

        if (deadline >= 0) {
            int64_t left = deadline - (int64_t)now_ms();
            if (left <= 0) {
                r = -ETIMEDOUT;
                break;
            }
            wait = left > INT_MAX ? INT_MAX : (int)left;
        }
        r = poll(&p, 1, wait);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            r = -errno;
            break;
        }
        if (r == 0)
            continue;           /* the deadline check above ends it */
        n = recv(c->fd, buf, CTL_MSG_MAX, MSG_TRUNC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = errno == ECONNRESET ? -ECONNRESET : -errno;
            break;
        }
        if (n == 0) {
            r = -ECONNRESET;
            break;
        }
        if (n > CTL_MSG_MAX || ctl_parse(buf, (size_t)n, reply) < 0) {
            r = -EPROTO;
            break;
        }
        if (!strcmp(reply->word, "progress")) {
            uint64_t done, total;
            if (progress && ctl_get_u64(reply, "done", &done) == 0 &&
                ctl_get_u64(reply, "total", &total) == 0)
                progress(done, total, arg);
            continue;
        }
        r = (!strcmp(reply->word, "ok") || !strcmp(reply->word, "error")) ? 0 : -EPROTO;
        break;
    }
    free(buf);
    return r;
}

void ctl_close(struct ctl_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

int ctl_exit_code(int err, int from_server)
{
    int e = err < 0 ? -err : err;

    if (e == 0)
        return CTL_EXIT_OK;
    switch (e) {
    case EACCES:
    case EPERM:
        return CTL_EXIT_PERM;
    case ETIMEDOUT:
        return CTL_EXIT_TIMEOUT;
    }
    if (!from_server) {
        switch (e) {
        case ESRCH:
        case ENOENT:
        case ECONNREFUSED:
        case ENOTSOCK:
            return CTL_EXIT_NOPROC;
        }
        return CTL_EXIT_FAILED;
    }
    switch (e) {
    case ENOTSUP:
    case EBUSY:
    case EALREADY:
        return CTL_EXIT_REFUSED;
    case EBADMSG:
        return CTL_EXIT_CORRUPT;
    case ENOMEM:
        return CTL_EXIT_NOROOM;
    case EINVAL:
    case EPROTO:
        return CTL_EXIT_USAGE;
    }
    return CTL_EXIT_FAILED;
}
