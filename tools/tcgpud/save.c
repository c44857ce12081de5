/*
 * save.c - the privileged path of gpuckpt save and restore: an ordinary
 * user's own process trees, saved and restored with CRIU by tcgpud (root).
 * docs/save-restore.md, "Ordinary users".
 *
 *   save pid=N dir=ABS [leave_running=1] [tcp_established=1] [shell_job=1]
 *                                 the tree under N, into DIR (a new directory)
 *   restore dir=ABS [detach=1]    a save this path made, as its owner
 *
 * CRIU needs root; a Slurm or container job does not run as root. tcgpud
 * runs `gpuckpt save --owner UID` / `gpuckpt restore --owner UID` as root for
 * a caller whose uid, from its peer credentials (never from the message),
 * is UID:
 *   - save: the root of the tree must be the caller's; gpuckpt then refuses
 *     the tree unless every process in it belongs to UID (real, effective,
 *     saved and filesystem uid), and records the owner in the save. DIR's
 *     parent must be a real directory (no symlink on the way) of the caller's
 *     that nobody else may write to, or a sticky one like /tmp. The save is
 *     root's (0711; criu/ 0700; gpu/ 0711, where each process writes its
 *     GPU image itself into a stage of its own the plugin makes): the caller
 *     cannot alter what CRIU will restore.
 *   - restore: DIR must be such a save (a root-owned 0711 directory, not a
 *     symlink); gpuckpt refuses it unless the save's owner and every process
 *     in it is UID (and, as always, verifies every GPU image against the
 *     manifest). CRIU gives the processes back their own credentials, so the
 *     restored tree runs as the caller.
 * gpuckpt's output comes back line by line ("line stream=out|err text=..."),
 * then "ok exit=N" (gpuckpt's exit code). An attached restore (the default)
 * lasts as long as the restored tree: gpuckpt stays its parent, and its exit
 * code is the tree's; when the caller hangs up first, the tree is killed,
 * as a job's processes die with the job that started them.
 *
 * Each request runs on a thread of its own, with its own copy of the
 * connection; the loop forgets the connection once it is handed over.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/companion.h"
#include "common/install_dirs.h"
#include "common/log.h"
#include "common/pathtrust.h"
#include "common/proc.h"
#include "ctl/daemon_io.h"
#include "conns.h"
#include "daemon.h"
#include "save.h"

#define KILL_TREE_MAX 4096        /* processes of an abandoned tree that are killed */

enum priv_kind { PRIV_SAVE, PRIV_RESTORE };

struct priv_req {
    enum priv_kind kind;
    int fd;                       /* the caller's connection, ours alone */
    uid_t uid;
    pid_t peer_pid, root;
    int detach;                   /* restore -d */
    int leave_running, tcp_established, shell_job;  /* save's options of the same names */
    char dir[PATH_MAX];
    char gpuckpt[PATH_MAX];
};

/* ---------------------------------------------------------------------------
 * Checks (on the loop's thread, before anything runs)
 * ------------------------------------------------------------------------- */

static int owned_by(pid_t pid, uid_t uid)
{
    struct tcgpu_proc_status st;
    const uid_t *u = st.uid;

    return tcgpu_proc_status(pid, 0, &st) == 0 && u[0] == uid && u[1] == uid && u[2] == uid &&
           u[3] == uid;
}

/*
 * dir must be absolute, its own name plain, and its parent a directory
 * reached without symlinks (realpath gives it back unchanged) where the
 * caller could have made dir itself: its own, writable by nobody else, or
 * root's sticky and world-writable (/tmp). Else tcgpud would create
 * directories for it where it may not. 0 or -errno, why.
 */
/* A first answer, by path: gpuckpt save --owner walks DIR's parent again
 * and works relative to what it checked (pathtrust.h), as a path checked
 * here may be swapped before it runs. */
static int check_save_dir(const char *dir, uid_t uid, char *why, size_t len)
{
    char parent[PATH_MAX], real[PATH_MAX], *slash;
    struct stat st;

    if (dir[0] != '/' || strstr(dir, "/../") || strstr(dir, "/./") || strlen(dir) > PATH_MAX - 64) {
        snprintf(why, len, "%s: not a plain absolute path", dir);
        return -EINVAL;
    }
    snprintf(parent, sizeof(parent), "%s", dir);
    slash = strrchr(parent, '/');
    if (!slash[1] || !strcmp(slash + 1, "..") || !strcmp(slash + 1, ".")) {
        snprintf(why, len, "%s: not a plain absolute path", dir);
        return -EINVAL;
    }
    *(slash == parent ? slash + 1 : slash) = '\0';
    if (!realpath(parent, real) || strcmp(real, parent)) {
        snprintf(why, len, "%s: its parent is not a directory reached without symlinks", dir);
        return -EACCES;
    }
    if (lstat(parent, &st) < 0 || !pathtrust_user_may_write(&st, uid)) {
        snprintf(why, len, "%s: its parent %s must be a directory of uid %u that nobody else "
                 "may write to (or a sticky one like /tmp)", dir, parent, (unsigned)uid);
        return -EACCES;
    }
    if (lstat(dir, &st) == 0) {
        snprintf(why, len, "%s exists: a save goes into a new directory", dir);
        return -EEXIST;
    }
    return 0;
}

/* A save this path made: a root-owned directory nobody else may write to
 * (0711: the user passes through to its GPU images in gpu/), not a symlink. */
static int check_restore_dir(const char *dir, char *why, size_t len)
{
    struct stat st;

    if (dir[0] != '/' || strstr(dir, "/../")) {
        snprintf(why, len, "%s: not an absolute path", dir);
        return -EINVAL;
    }
    if (lstat(dir, &st) < 0) {
        snprintf(why, len, "%s: %s", dir, strerror(errno));
        return -errno;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 066)) {
        snprintf(why, len, "%s is not a save made through tcgpud (a directory of root that "
                 "only root may read and write): tcgpud restores only what it saved", dir);
        return -EACCES;
    }
    return 0;
}

/* A file nobody but root may change, that root may run. */
static int root_executable(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 &&
           !(st.st_mode & 022) && access(path, X_OK) == 0;
}

/* gpuckpt, which tcgpud runs as root: $TCGPU_GPUCKPT, else beside tcgpud
 * (build tree, or the install's bindir relative to its sbindir). */
static int find_gpuckpt(char *out, size_t len)
{
    static const char *const dirs[] = { "../gpuckpt", TCGPU_SBINDIR_TO_BINDIR, TCGPU_BINDIR, NULL };
    const char *env = getenv("TCGPU_GPUCKPT");

    if (env && *env) {
        snprintf(out, len, "%s", env);
        if (root_executable(out))
            return 0;
    }
    return tcgpu_companion_find(dirs, "gpuckpt", root_executable, out, len);
}

/* ---------------------------------------------------------------------------
 * The worker: run gpuckpt, relay its output, give its exit code
 * ------------------------------------------------------------------------- */

static void send_line(int fd, const char *stream, const char *text)
{
    struct ctl_buf b;

    ctl_buf_request(&b, "line");
    ctl_buf_put(&b, "stream", stream);
    ctl_buf_put(&b, "text", text);
    tcgpud_send(fd, &b);
}

/* Every line of buf[0..*n) that is complete goes to the caller. */
static void relay_lines(int fd, const char *stream, char *buf, size_t *n)
{
    char *start = buf, *nl;

    while ((nl = memchr(start, '\n', (size_t)(buf + *n - start)))) {
        *nl = '\0';
        send_line(fd, stream, start);
        start = nl + 1;
    }
    *n = (size_t)(buf + *n - start);
    memmove(buf, start, *n);
    if (*n == 4095) {            /* a line longer than the buffer: pass it on in pieces */
        buf[*n] = '\0';
        send_line(fd, stream, buf);
        *n = 0;
    }
}

/* Every descendant of pid (forked by any of their threads), then pid, killed
 * (the caller of a restore left). Children go before their parents. */
static void kill_tree(pid_t pid)
{
    pid_t tree[KILL_TREE_MAX];
    int n = tcgpu_proc_tree(pid, tree, KILL_TREE_MAX);

    if (n == -E2BIG)
        n = KILL_TREE_MAX;
    for (int i = n - 1; i > 0; i--)
        kill(tree[i], SIGKILL);
    kill(pid, SIGKILL);
}

extern char **environ;

/* tcgpud's environment for gpuckpt, less the way back to tcgpud (gpuckpt is
 * root there and must do the work itself). NULL when out of memory. */
static char **child_environ(void)
{
    size_t n = 0, k = 0;
    char **env;

    while (environ[n])
        n++;
    if (!(env = calloc(n + 1, sizeof(*env))))
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TCGPU_DAEMON_SOCKET=", 20))
            env[k++] = environ[i];
    return env;
}

static pid_t spawn(const struct priv_req *r, int out[2], int err[2])
{
    char uid[24], pid[24];
    char *argv[16], **env = child_environ();
    int n = 0;
    pid_t child;

    if (!env) {
        errno = ENOMEM;
        return -1;
    }

    snprintf(uid, sizeof(uid), "%u", (unsigned)r->uid);
    snprintf(pid, sizeof(pid), "%d", (int)r->root);
    argv[n++] = (char *)r->gpuckpt;
    argv[n++] = r->kind == PRIV_SAVE ? "save" : "restore";
    if (r->kind == PRIV_SAVE)
        argv[n++] = pid;
    argv[n++] = "--owner";
    argv[n++] = uid;
    argv[n++] = "-D";
    argv[n++] = (char *)r->dir;
    if (r->kind == PRIV_RESTORE && r->detach)
        argv[n++] = "-d";
    if (r->leave_running)
        argv[n++] = "--leave-running";
    if (r->tcp_established)
        argv[n++] = "--tcp-established";
    if (r->shell_job)
        argv[n++] = "--shell-job";
    argv[n] = NULL;
    if ((child = fork()) != 0) {
        free(env);
        return child;
    }
    /* the child: tcgpud's signals are blocked for its signalfd; gpuckpt's must not be */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0)
        dup2(null, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execve(argv[0], argv, env);
    dprintf(2, "tcgpud: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/*
 * Relay gpuckpt's output until it exits; returns its exit code (128+signal),
 * or -1 when the caller hung up first (then gpuckpt and its tree are killed).
 */
static int relay(const struct priv_req *r, pid_t child, int out, int err)
{
    char bout[4096], berr[4096];
    size_t nout = 0, nerr = 0;
    int open_fds = 2, st, gone = 0;

    while (open_fds > 0 && !gone) {
        struct pollfd p[3] = { { .fd = out, .events = POLLIN }, { .fd = err, .events = POLLIN },
                               { .fd = r->fd, .events = POLLIN } };
        if (poll(p, 3, -1) < 0 && errno != EINTR)
            break;
        if (p[2].revents)
            gone = 1;       /* the caller sends nothing more: readable means it left */
        for (int i = 0; i < 2; i++) {
            char *b = i ? berr : bout;
            size_t *n = i ? &nerr : &nout;
            ssize_t k;
            if (!(p[i].revents & (POLLIN | POLLHUP)))
                continue;
            k = read(p[i].fd, b + *n, sizeof(bout) - 1 - *n);
            if (k <= 0) {
                p[i].fd = -1;
                *(i ? &err : &out) = -1;
                open_fds--;
                continue;
            }
            *n += (size_t)k;
            relay_lines(r->fd, i ? "err" : "out", b, n);
        }
    }
    if (gone) {
        log_info("%s of %s for uid %u: the caller (pid %d) left; ending it", r->kind == PRIV_SAVE
                 ? "save" : "restore", r->dir, (unsigned)r->uid, (int)r->peer_pid);
        kill_tree(child);
    }
    while (waitpid(child, &st, 0) < 0 && errno == EINTR)
        ;
    if (gone)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void *priv_worker(void *arg)
{
    struct priv_req *r = arg;
    int out[2] = { -1, -1 }, err[2] = { -1, -1 }, code;
    const char *what = r->kind == PRIV_SAVE ? "save" : "restore";
    struct ctl_buf b;
    pid_t child;

    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
        (child = spawn(r, out, err)) < 0) {
        ctl_buf_error(&b, -errno, "cannot run gpuckpt");
        tcgpud_send(r->fd, &b);
        goto out;
    }
    close(out[1]);
    close(err[1]);
    out[1] = err[1] = -1;
    code = relay(r, child, out[0], err[0]);
    if (code >= 0) {
        log_info("%s of %s for uid %u (pid %d): gpuckpt exit %d", what, r->dir, (unsigned)r->uid,
                 (int)r->peer_pid, code);
        ctl_buf_ok(&b);
        ctl_buf_put_u64(&b, "exit", (uint64_t)code);
        tcgpud_send(r->fd, &b);
    }
out:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    close(r->fd);
    free(r);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * The requests
 * ------------------------------------------------------------------------- */

/* Hands the connection to a worker thread of its own; replies on failure. */
static void start_worker(int ci, struct priv_req *r)
{
    pthread_attr_t a;
    pthread_t t;
    int e;

    r->fd = fcntl(d.conns[ci].fd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) {
        reply_error(ci, -errno, "cannot take the connection: %s", strerror(errno));
        free(r);
        return;
    }
    /* the worker's copy blocks; the loop's goes now */
    fcntl(r->fd, F_SETFL, fcntl(r->fd, F_GETFL) & ~O_NONBLOCK);
    conn_close(ci);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    e = pthread_create(&t, &a, priv_worker, r);
    pthread_attr_destroy(&a);
    if (e) {
        struct ctl_buf b;
        ctl_buf_error(&b, -e, "cannot start a worker");
        tcgpud_send(r->fd, &b);
        close(r->fd);
        free(r);
    }
}

/* Whether m has key=1 (an option of the command, passed on to gpuckpt). */
static int flag_set(const struct ctl_msg *m, const char *key)
{
    const char *v = ctl_get(m, key);

    return v && !strcmp(v, "1");
}

static struct priv_req *new_req(int ci, enum priv_kind kind, const struct ctl_msg *m)
{
    const char *dir = ctl_get(m, "dir");
    struct priv_req *r;

    if (!dir || dir[0] != '/' || strlen(dir) >= PATH_MAX - 64) {
        reply_error(ci, -EINVAL, "%s needs dir=ABSOLUTE_PATH", kind == PRIV_SAVE ? "save" : "restore");
        return NULL;
    }
    if (!(r = calloc(1, sizeof(*r)))) {
        reply_error(ci, -ENOMEM, "out of memory");
        return NULL;
    }
    r->kind = kind;
    r->uid = d.conns[ci].peer.uid;
    r->peer_pid = d.conns[ci].peer.pid;
    snprintf(r->dir, sizeof(r->dir), "%s", dir);
    if (find_gpuckpt(r->gpuckpt, sizeof(r->gpuckpt)) < 0) {
        reply_error(ci, -ENOENT, "tcgpud cannot find gpuckpt (a root-owned binary; set "
                    "TCGPU_GPUCKPT)");
        free(r);
        return NULL;
    }
    return r;
}

void priv_save(int ci, const struct ctl_msg *m, struct djob *unused)
{
    struct priv_req *r = new_req(ci, PRIV_SAVE, m);
    uint64_t pid;
    char why[PATH_MAX + 256];
    int e;

    (void)unused;
    if (!r)
        return;
    if (ctl_get_u64(m, "pid", &pid) < 0 || pid == 0 || pid > INT32_MAX) {
        reply_error(ci, -EINVAL, "save needs pid=N");
        goto err;
    }
    r->root = (pid_t)pid;
    r->leave_running = flag_set(m, "leave_running");
    r->tcp_established = flag_set(m, "tcp_established");
    r->shell_job = flag_set(m, "shell_job");
    if (kill(r->root, 0) < 0 && errno == ESRCH) {
        reply_error(ci, -ESRCH, "no process %d", (int)r->root);
        goto err;
    }
    if (!owned_by(r->root, r->uid)) {
        snprintf(why, sizeof(why), "process %d is not uid %u's", (int)r->root, (unsigned)r->uid);
        refuse(ci, "save", why);
        goto err;
    }
    if ((e = check_save_dir(r->dir, r->uid, why, sizeof(why))) < 0) {
        if (e == -EACCES)
            refuse(ci, "save", why);
        else
            reply_error(ci, e, "%s", why);
        goto err;
    }
    log_info("save of the tree under %d to %s for uid %u (pid %d)%s%s%s", (int)r->root, r->dir,
             (unsigned)r->uid, (int)r->peer_pid, r->leave_running ? ", leaving it running" : "",
             r->tcp_established ? ", with its TCP connections" : "",
             r->shell_job ? ", a shell job" : "");
    start_worker(ci, r);
    return;
err:
    free(r);
}

void priv_restore(int ci, const struct ctl_msg *m, struct djob *unused)
{
    struct priv_req *r = new_req(ci, PRIV_RESTORE, m);
    char why[PATH_MAX + 256];
    int e;

    (void)unused;
    if (!r)
        return;
    r->detach = flag_set(m, "detach");
    if ((e = check_restore_dir(r->dir, why, sizeof(why))) < 0) {
        if (e == -EACCES)
            refuse(ci, "restore", why);
        else
            reply_error(ci, e, "%s", why);
        free(r);
        return;
    }
    log_info("restore of %s for uid %u (pid %d)%s", r->dir, (unsigned)r->uid, (int)r->peer_pid,
             r->detach ? ", detached" : "");
    start_worker(ci, r);
}
