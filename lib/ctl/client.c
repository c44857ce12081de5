/* The client side of the control channel; see client.h. */
#include <errno.h>
#include <fcntl.h>
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
#include "fdpass.h"
#include "common/clock.h"
#include "common/proc.h"
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

static int socket_connect(const char *path, int nonblock)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    size_t len = path ? strlen(path) : 0;
    int fd, r;

    if (!len || len >= sizeof(a.sun_path))
        return -EINVAL;
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
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

int ctl_socket_connect(const char *path)
{
    return socket_connect(path, 0);
}

/*
 * The server end must be the target process itself, of uid or of root: CRIU
 * binds and listens on a restored process's socket before it gives the
 * process its own credentials, and SO_PEERCRED keeps the listener's
 * (docs/save-restore.md, "Ordinary users"). Root can act as anyone anyway.
 */
static int check_peer(int fd, const char *path, pid_t pid, uid_t uid, char *err, size_t errlen)
{
    struct ucred cred;
    socklen_t clen = sizeof(cred);

    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 ||
        (cred.uid != uid && cred.uid != 0) || cred.pid != pid) {
        set_err(err, errlen, "%s is served by pid %d uid %u, not by process %d uid %u: "
                "refusing to talk to it", path, (int)cred.pid, (unsigned)cred.uid, (int)pid,
                (unsigned)uid);
        return -EPERM;
    }
    return 0;
}

static void conn_set(struct ctl_conn *c, int fd, pid_t pid, uid_t uid, const char *path)
{
    c->fd = fd;
    c->pid = pid;
    c->uid = uid;
    c->pass_fd = -1;
    c->recv_fd = -1;
    snprintf(c->path, sizeof(c->path), "%s", path);
}

static int connect_one(const char *path, pid_t pid, uid_t uid, int flags, struct ctl_conn *c,
                       char *err, size_t errlen)
{
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
    fd = socket_connect(path, flags & CTL_CONNECT_NONBLOCK);
    if (fd < 0) {
        if (fd == -EAGAIN)
            set_err(err, errlen, "process %d does not accept connections now (%s is full)",
                    (int)pid, path);
        else if (fd == -ECONNREFUSED)
            set_err(err, errlen, "process %d does not answer on %s (stale socket: "
                    "a tcgpu process with this pid died)", (int)pid, path);
        else
            set_err(err, errlen, "cannot connect to %s: %s", path, strerror(-fd));
        return fd;
    }
    if (check_peer(fd, path, pid, uid, err, errlen) < 0) {
        close(fd);
        return -EPERM;
    }
    conn_set(c, fd, pid, uid, path);
    return 0;
}

/*
 * The socket `sock` in run dir `dir` of a process in another mount namespace
 * (a container): both opened inside its root, so that nothing planted there
 * leads out of it; checked as connect_one checks; connected through the
 * opened file. Returns 0, -ENOENT (no socket there: try the next dir), or
 * -errno with the message in err.
 */
static int connect_in_root(pid_t pid, uid_t uid, const char *dir, const char *sock, int flags,
                           struct ctl_conn *c, char *err, size_t errlen)
{
    char via[64], derr[PATH_MAX + 128];
    struct stat st;
    int dfd, sfd, fd, r;

    if ((dfd = tcgpu_proc_open_in_root(pid, dir, O_DIRECTORY)) < 0) {
        if (dfd == -ENOTDIR || dfd == -ELOOP || dfd == -ENOENT)
            return -ENOENT;
        /* (a caller's syscall filter without openat2, /proc/PID/root denied) */
        set_err(err, errlen, "cannot open %s in process %d's root (a mount namespace not ours): %s",
                dir, (int)pid, strerror(-dfd));
        return dfd;
    }
    sfd = tcgpu_proc_open_in_root(pid, sock, 0);
    if (sfd < 0) {
        close(dfd);
        if (sfd != -ELOOP)
            return -ENOENT;
        set_err(err, errlen, "%s (in process %d's root) is a symlink: refusing to use it", sock,
                (int)pid);
        return -EPERM;
    }
    r = tcgpu_rundir_check_fd(dfd, dir, uid, derr, sizeof(derr));
    close(dfd);
    if (r < 0) {
        set_err(err, errlen, "process %d: %s", (int)pid, derr);
        close(sfd);
        return -EPERM;
    }
    if (fstat(sfd, &st) < 0 || !S_ISSOCK(st.st_mode) || st.st_uid != uid) {
        set_err(err, errlen, "%s (in process %d's root) is not a socket owned by uid %u: "
                "refusing to use it", sock, (int)pid, (unsigned)uid);
        close(sfd);
        return -EPERM;
    }
    tcgpu_proc_fd_path(sfd, NULL, via, sizeof(via));
    fd = socket_connect(via, flags & CTL_CONNECT_NONBLOCK);
    close(sfd);
    if (fd == -ECONNREFUSED) {
        set_err(err, errlen, "process %d does not answer on %s (stale socket: a tcgpu process "
                "with this pid died)", (int)pid, sock);
        return fd;
    }
    if (fd < 0) {
        set_err(err, errlen, "cannot connect to %s (in process %d's root): %s", sock, (int)pid,
                strerror(-fd));
        return fd;
    }
    if ((r = check_peer(fd, sock, pid, uid, err, errlen)) < 0) {
        close(fd);
        return r;
    }
    conn_set(c, fd, pid, uid, sock);
    return 0;
}

/* Append dir to the list of places looked in (for the message). */
static void note_looked(char *looked, size_t len, const char *dir)
{
    size_t l = strlen(looked);

    if (l + strlen(dir) + 3 < len)
        snprintf(looked + l, len - l, "%s%s", l ? ", " : "", dir);
}

int ctl_connect_flags(pid_t pid, const char *own_run_dir, struct ctl_conn *c, int flags,
                      char *err, size_t errlen)
{
    char dirs[TCGPU_RUNDIR_MAX_CANDIDATES][PATH_MAX];
    char path[PATH_MAX], looked[2048] = "", refused[PATH_MAX + 160] = "";
    struct tcgpu_proc_ns ns;
    uid_t uid;
    int n, r;

    c->fd = -1;
    c->pass_fd = -1;
    c->recv_fd = -1;
    r = tcgpu_proc_uid(pid, &uid);
    if (r == 0)
        r = tcgpu_proc_ns(pid, &ns);
    if (r < 0) {
        if (r == -ESRCH)
            set_err(err, errlen, "no such process: %d", (int)pid);
        else
            set_err(err, errlen, "process %d: %s", (int)pid, strerror(-r));
        return r;
    }
    /* A candidate that is not the target user's private dir (another user
     * planted it, say) is passed over: the process fell back to another. */
    n = tcgpu_rundir_candidates(own_run_dir, pid, uid, dirs, TCGPU_RUNDIR_MAX_CANDIDATES);
    for (int i = 0; i < n; i++) {
        struct stat st;
        char why[PATH_MAX + 160];

        /* named by its pid where it lives (a container's pid 1 has 1.sock) */
        if (tcgpu_rundir_socket_path(dirs[i], ns.nspid, path, sizeof(path)) < 0)
            continue;
        if (ns.foreign_mounts) {
            /* a container's: its run dir is checked inside its root */
            note_looked(looked, sizeof(looked), dirs[i]);
            r = connect_in_root(pid, uid, dirs[i], path, flags, c, err, errlen);
            if (r != -ENOENT)
                return r;
            continue;
        }
        if (tcgpu_rundir_check(dirs[i], uid, why, sizeof(why)) < 0) {
            if (access(dirs[i], F_OK) == 0 || errno != ENOENT) {
                note_looked(looked, sizeof(looked), dirs[i]);
                if (!refused[0])
                    snprintf(refused, sizeof(refused), "%s", why);
            }
            continue;
        }
        note_looked(looked, sizeof(looked), dirs[i]);
        if (lstat(path, &st) < 0) {
            if (errno == EACCES) {
                set_err(err, errlen, "cannot look into %s: permission denied (process %d "
                        "belongs to uid %u)", dirs[i], (int)pid, (unsigned)uid);
                return -EACCES;
            }
            continue;
        }
        return connect_one(path, pid, uid, flags, c, err, errlen);
    }
    if (refused[0])
        set_err(err, errlen, "process %d has no control socket in a run dir of uid %u's that "
                "tcgpu trusts (looked in %s; %s)", (int)pid, (unsigned)uid, looked, refused);
    else
        set_err(err, errlen, "process %d has no control socket: it is not running under tcgpu "
                "(gpuckpt run / LD_PRELOAD=libtcgpu.so) or has not initialised CUDA yet "
                "(looked in %s%s)", (int)pid, looked[0] ? looked : "no run dir of its user",
                ns.foreign_mounts ? ", inside its root" : "");
    return -ENOENT;
}

int ctl_connect(pid_t pid, const char *own_run_dir, struct ctl_conn *c, char *err,
                size_t errlen)
{
    return ctl_connect_flags(pid, own_run_dir, c, 0, err, errlen);
}

int ctl_call(struct ctl_conn *c, const char *req, size_t len, struct ctl_msg *reply,
             int timeout_ms, ctl_progress_fn progress, void *arg)
{
    int64_t deadline = timeout_ms >= 0 ? (int64_t)now_ms() + timeout_ms : -1;
    char *buf;
    int r;

    if (len > CTL_MSG_MAX)
        return -EMSGSIZE;
    if (ctl_send_with_fd(c->fd, req, len, c->pass_fd) < 0)
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
        n = ctl_recv_with_fd(c->fd, buf, CTL_MSG_MAX, 0, &c->recv_fd);
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
            const char *phase = ctl_get(reply, "phase");
            if (progress && ctl_get_u64(reply, "done", &done) == 0 &&
                ctl_get_u64(reply, "total", &total) == 0)
                progress(phase ? phase : "", done, total, arg);
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
    if (c->recv_fd >= 0)
        close(c->recv_fd);
    c->recv_fd = -1;
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
    case EAGAIN:                /* not now: what it needs is not back yet (memory another
                                 * process shares is suspended with it) */
        return CTL_EXIT_NOROOM;
    case EINVAL:
    case EPROTO:
        return CTL_EXIT_USAGE;
    }
    return CTL_EXIT_FAILED;
}
