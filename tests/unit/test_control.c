/*
 * The control channel end to end in one process: the real server
 * (lib/core/control.c, signal_trigger.c, rundir.c) and the real client
 * (lib/ctl/client.c), with the operations of lib/core/ops.h replaced by a test
 * double below that records what it was asked and returns chosen results.
 *
 *   test_control rundir            run-dir safety checks
 *   test_control e2e               requests, replies, errors and exit codes
 *   test_control signal            the signal trigger
 *   test_control fork              a forked child does not answer for its parent
 *   test_control peercred          another uid is refused (needs root; else 77)
 *   test_control gpuckpt PATH      the gpuckpt binary against this process
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/control.h"
#include "ctl/client.h"
#include "ctl/proto.h"
#include "core/ops.h"
#include "core/settings.h"
#include "ctl/rundir.h"
#include "core/signal_trigger.h"
#include "core/thread.h"

#include "../common/check.h"
#include "common/errmsg.h"

/* ---------------------------------------------------------------------------
 * The test double of ops.h
 * ------------------------------------------------------------------------- */

static pthread_mutex_t fk_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int calls[4];               /* by enum tcgpu_op */
    enum tcgpu_op last;
    char dir[PATH_MAX];
    int had_dir;
    pthread_t thread;
    enum tcgpu_state state;
    int next_result;            /* one-shot forced result */
    char next_msg[200];
    int delay_ms;
    int hold;                   /* operations wait for fk_cv while set */
    struct tcgpu_status st;
} fk;
static pthread_cond_t fk_cv = PTHREAD_COND_INITIALIZER;

static int fake_op(enum tcgpu_op op, const char *dir, const struct tcgpu_op_caller *by)
{
    tcgpu_progress_fn progress = by ? by->progress : NULL;
    void *arg = by ? by->arg : NULL;
    int r, delay;

    pthread_mutex_lock(&fk_lock);
    fk.calls[op]++;
    fk.last = op;
    fk.thread = pthread_self();
    fk.had_dir = dir != NULL;
    snprintf(fk.dir, sizeof(fk.dir), "%s", dir ? dir : "");
    while (fk.hold)
        pthread_cond_wait(&fk_cv, &fk_lock);
    delay = fk.delay_ms;
    r = fk.next_result;
    fk.next_result = 0;
    if (r && !strcmp(fk.next_msg, "%DIR%"))          /* an error naming the directory */
        errmsg_set("%s/gpu.img: write: No space left on device", dir ? dir : "");
    else if (r)
        errmsg_set("%s", fk.next_msg);
    else if (op == TCGPU_OP_SUSPEND && fk.state == TCGPU_STATE_SUSPENDED) {
        r = -EALREADY;
        errmsg_set("already suspended");
    } else if (op == TCGPU_OP_RESUME && fk.state != TCGPU_STATE_SUSPENDED) {
        r = -EALREADY;
        errmsg_set("not suspended");
    } else if (op == TCGPU_OP_CHECKPOINT && fk.state == TCGPU_STATE_SUSPENDED) {
        r = -EBUSY;
        errmsg_set("the process is suspended");
    }
    pthread_mutex_unlock(&fk_lock);

    /* as the real ones do: every phase starts at 0, then bytes */
    if (progress)
        progress(TCGPU_PHASE_QUIESCE, 0, 0, arg);
    for (int i = 0; i <= 4; i++) {
        if (progress)
            progress(TCGPU_PHASE_DRAIN, (uint64_t)i << 20, 4 << 20, arg);
        if (delay)
            usleep((useconds_t)delay * 250);
    }

    pthread_mutex_lock(&fk_lock);
    if (r == 0 && op == TCGPU_OP_SUSPEND)
        fk.state = TCGPU_STATE_SUSPENDED;
    if (r == 0 && op == TCGPU_OP_RESUME)
        fk.state = TCGPU_STATE_RUNNING;
    if (r == 0)
        errmsg_clear();
    fk.st.last_op = op;
    fk.st.last_result = r;
    fk.st.last_total_ns = 1234567;
    fk.st.image_bytes = 4 << 20;
    snprintf(fk.st.last_error, sizeof(fk.st.last_error), "%s", errmsg_get());
    pthread_mutex_unlock(&fk_lock);
    return r;
}

int tcgpu_op_checkpoint(const char *dir, const struct tcgpu_op_caller *by)
{
    return fake_op(TCGPU_OP_CHECKPOINT, dir, by);
}

int tcgpu_op_checkpoint_parent(const char *dir, const char *parent, const struct tcgpu_op_caller *by)
{
    (void)parent;
    return tcgpu_op_checkpoint(dir, by);
}

int tcgpu_op_suspend(const char *dir, const struct tcgpu_op_caller *by)
{
    return fake_op(TCGPU_OP_SUSPEND, dir, by);
}

int tcgpu_op_resume(const struct tcgpu_op_caller *by)
{
    return fake_op(TCGPU_OP_RESUME, NULL, by);
}

int tcgpu_op_resume_from(const char *dir, const struct tcgpu_op_caller *by)
{
    return fake_op(TCGPU_OP_RESUME, dir, by);
}

int tcgpu_op_status(struct tcgpu_status *st)
{
    pthread_mutex_lock(&fk_lock);
    *st = fk.st;
    st->state = fk.state;
    st->gpu_bytes = fk.state == TCGPU_STATE_SUSPENDED ? 0 : 4 << 20;
    st->tracked_bytes = 4 << 20;
    st->allocations = 3;
    pthread_mutex_unlock(&fk_lock);
    return 0;
}

/* Nothing blocks a checkpoint of the fake (tests/sim/blockers.sh checks the real ones). */
void tcgpu_op_put_blockers(struct ctl_buf *reply)
{
    ctl_buf_put_u64(reply, "blockers", 0);
}

/* The fake exports no memory. */
int tcgpu_op_ipc_export(const struct ctl_msg *req, pid_t peer, struct ctl_buf *reply)
{
    (void)req;
    (void)peer;
    ctl_buf_error(reply, -ENOENT, "no such IPC export");
    return -1;
}

void tcgpu_op_ipc_closed(pid_t peer)
{
    (void)peer;
}

/* ... and forgets nothing. */
int tcgpu_op_ipc_forget(const struct ctl_msg *req, pid_t peer, struct ctl_buf *reply)
{
    (void)req;
    (void)peer;
    ctl_buf_ok(reply);
    return 0;
}

static int calls(enum tcgpu_op op)
{
    int n;

    pthread_mutex_lock(&fk_lock);
    n = fk.calls[op];
    pthread_mutex_unlock(&fk_lock);
    return n;
}

/* Whether the last operation had dir= want (read under the double's lock:
 * the operation ran on the server's thread). */
static int last_dir_is(const char *want)
{
    int same;

    pthread_mutex_lock(&fk_lock);
    same = fk.had_dir && !strcmp(fk.dir, want);
    pthread_mutex_unlock(&fk_lock);
    return same;
}

static void force_next(int r, const char *msg)
{
    pthread_mutex_lock(&fk_lock);
    fk.next_result = r;
    snprintf(fk.next_msg, sizeof(fk.next_msg), "%s", msg);
    pthread_mutex_unlock(&fk_lock);
}

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static char tmpdir[200];

static void make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");

    snprintf(tmpdir, sizeof(tmpdir), "%s/tcgpu-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static void cleanup_tmpdir(void)
{
    char cmd[PATH_MAX + 16];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* A run dir of our own for the server, via TCGPU_RUN_DIR. */
static void use_run_dir(void)
{
    char d[PATH_MAX];

    snprintf(d, sizeof(d), "%s/run", tmpdir);
    setenv("TCGPU_RUN_DIR", d, 1);
}

/* The run dir's variables as the test has set them now. */
static const struct tcgpu_rundir_env *rundir_env(void)
{
    static struct tcgpu_rundir_env env;

    env.run_dir = getenv("TCGPU_RUN_DIR");
    env.xdg_runtime_dir = getenv("XDG_RUNTIME_DIR");
    return &env;
}

/* The server, with the settings of the environment the test has set now
 * (libtcgpu.so reads them once, when it is loaded). */
static int start_control(void)
{
    settings_reload();
    return tcgpu_control_start();
}

static struct ctl_msg reply;
static struct ctl_buf req;

static int progress_calls, saw_quiesce, saw_drain_start, saw_drain_end;

static void on_progress(const char *phase, uint64_t done, uint64_t total, void *arg)
{
    (void)arg;
    if (done <= total || !total)
        progress_calls++;
    saw_quiesce |= !strcmp(phase, "quiesce") && done == 0 && total == 0;
    saw_drain_start |= !strcmp(phase, "drain") && done == 0 && total == 4 << 20;
    saw_drain_end |= !strcmp(phase, "drain") && done == 4 << 20 && total == 4 << 20;
}

/* One request to ourselves, dir relative to the directory dirfd sent along
 * (-1: none) which the client calls `shown` (NULL: it does not say); returns
 * the exit code gpuckpt would give. */
static int request_passing(const char *word, const char *dir, int dirfd, const char *shown, int timeout_ms)
{
    struct ctl_conn c;
    char err[1024];
    int r;

    r = ctl_connect(getpid(), getenv("TCGPU_RUN_DIR"), &c, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "connect: %s\n", err);
        return ctl_exit_code(r, 0);
    }
    ctl_buf_request(&req, word);
    if (dir)
        ctl_buf_put(&req, "dir", dir);
    if (shown)
        ctl_buf_put(&req, "passed_dir", shown);
    c.pass_fd = dirfd;
    r = ctl_call(&c, req.data, (size_t)ctl_buf_finish(&req), &reply, timeout_ms, on_progress, NULL);
    ctl_close(&c);
    if (r < 0)
        return ctl_exit_code(r, 0);
    return ctl_exit_code(reply.err, 1);
}

static int request(const char *word, const char *dir, int timeout_ms)
{
    return request_passing(word, dir, -1, NULL, timeout_ms);
}

static char server_path[PATH_MAX];     /* saved: a forked child forgets it */

/* Send raw bytes on a fresh connection; the reply's error (0 for ok) or -errno. */
static int raw_request(const char *data, size_t len)
{
    /* Static, not malloc'ed: test_peercred calls this in a child forked
     * from this threaded process, where the allocator's lock may be held
     * by a thread that is not there (ASan's: 7 of 40 runs hung in malloc). */
    static char buf[CTL_MSG_MAX];
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ssize_t n;
    int r;

    memcpy(a.sun_path, server_path, sizeof(a.sun_path) - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        r = -errno;
        goto out;
    }
    if (len && send(fd, data, len, 0) < 0) {
        r = -errno;
        goto out;
    }
    if (!len) {
        r = 0;
        goto out;
    }
    n = recv(fd, buf, CTL_MSG_MAX, 0);
    if (n <= 0 || ctl_parse(buf, (size_t)n, &reply) < 0)
        r = -EPROTO;
    else
        r = reply.err;
out:
    if (fd >= 0)
        close(fd);
    return r;
}

/* Sends a request on a new connection and leaves it open, unread: its fd or -1. */
static int send_raw(const char *text)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

    memcpy(a.sun_path, server_path, sizeof(a.sun_path) - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        send(fd, text, strlen(text), 0) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static int resumes_before;

/* A suspend whose client left was undone: resumed once more, running. */
static int suspend_undone(void)
{
    int s;

    pthread_mutex_lock(&fk_lock);
    s = fk.calls[TCGPU_OP_RESUME] > resumes_before && fk.state == TCGPU_STATE_RUNNING;
    pthread_mutex_unlock(&fk_lock);
    return s;
}

/* The server says one operation runs. */
static int one_running(void)
{
    return request("status", NULL, 5000) == 0 && ctl_get(&reply, "op_running");
}

/* The server says one operation runs and 8 wait. */
static int one_queued_full(void)
{
    const char *q;

    if (request("status", NULL, 5000) != 0)
        return 0;
    q = ctl_get(&reply, "ops_queued");
    return q && atoi(q) == 8 && ctl_get(&reply, "op_running");
}

static int queue_empty(void)
{
    const char *q;

    if (request("status", NULL, 5000) != 0)
        return 0;
    q = ctl_get(&reply, "ops_queued");
    return q && atoi(q) == 0 && !ctl_get(&reply, "op_running");
}

static int wait_for(int (*pred)(void), int ms)
{
    for (int i = 0; i < ms / 10; i++) {
        if (pred())
            return 1;
        usleep(10000);
    }
    return pred();
}

/* ---------------------------------------------------------------------------
 * rundir
 * ------------------------------------------------------------------------- */

static int test_rundir(void)
{
    char dir[PATH_MAX], err[2 * PATH_MAX + 256], p[PATH_MAX], fb[PATH_MAX];
    char cand[TCGPU_RUNDIR_MAX_CANDIDATES][PATH_MAX];
    struct stat st;
    uid_t uid = geteuid();
    int fd, n;

    /* created 0700 when missing */
    snprintf(p, sizeof(p), "%s/run", tmpdir);
    setenv("TCGPU_RUN_DIR", p, 1);
    CHECK(tcgpu_rundir_prepare(rundir_env(), dir, sizeof(dir), err, sizeof(err)) == 0);
    CHECK(!strcmp(dir, p));
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0700 && st.st_uid == uid);
    CHECK(tcgpu_rundir_check(dir, uid, err, sizeof(err)) == 0);
    /* a trailing slash is the same dir */
    snprintf(p, sizeof(p), "%s/run//", tmpdir);
    setenv("TCGPU_RUN_DIR", p, 1);
    CHECK(tcgpu_rundir_prepare(rundir_env(), dir, sizeof(dir), err, sizeof(err)) == 0);
    CHECK(dir[strlen(dir) - 1] != '/');

    /* group/other bits: refused, and not silently repaired; the process
     * falls back to a private /tmp/tcgpu-UID.XXXXXX and says so */
    chmod(dir, 0755);
    CHECK(tcgpu_rundir_check(dir, uid, err, sizeof(err)) == -EPERM && strstr(err, "0755"));
    CHECK(tcgpu_rundir_prepare(rundir_env(), fb, sizeof(fb), err, sizeof(err)) == 1 &&
          strstr(err, "0755") &&
          strstr(err, fb) && strstr(err, dir), "%s", err);
    snprintf(p, sizeof(p), "/tmp/tcgpu-%u.", (unsigned)uid);
    CHECK(!strncmp(fb, p, strlen(p)) && strlen(fb) == strlen(p) + 6, "fallback %s", fb);
    CHECK(tcgpu_rundir_check(fb, uid, err, sizeof(err)) == 0, "%s", err);
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0755);
    /* ... the same one next time, and clients look there */
    CHECK(tcgpu_rundir_prepare(rundir_env(), p, sizeof(p), err, sizeof(err)) == 1 &&
          !strcmp(p, fb), "%s", p);
    n = tcgpu_rundir_candidates(getenv("TCGPU_RUN_DIR"), getpid(), uid, cand,
                                TCGPU_RUNDIR_MAX_CANDIDATES);
    int listed = 0;
    for (int i = 0; i < n; i++)
        listed |= !strcmp(cand[i], fb);
    CHECK(listed, "%s is not among a client's candidates", fb);
    chmod(dir, 0701);
    CHECK(tcgpu_rundir_check(dir, uid, err, sizeof(err)) == -EPERM);
    chmod(dir, 0700);

    /* another owner */
    CHECK(tcgpu_rundir_check(dir, uid + 1, err, sizeof(err)) == -EPERM && strstr(err, "owned by"));
    if (uid == 0) {
        snprintf(p, sizeof(p), "%s/theirs", tmpdir);
        CHECK(mkdir(p, 0700) == 0 && chown(p, 65534, 65534) == 0);
        setenv("TCGPU_RUN_DIR", p, 1);
        CHECK(tcgpu_rundir_prepare(rundir_env(), dir, sizeof(dir), err, sizeof(err)) == 1 &&
              !strcmp(dir, fb) && strstr(err, "owned by uid 65534"), "%s", err);
    }

    /* a symlink to a good dir is refused */
    snprintf(p, sizeof(p), "%s/link", tmpdir);
    snprintf(dir, sizeof(dir), "%s/run", tmpdir);
    CHECK(symlink(dir, p) == 0);
    CHECK(tcgpu_rundir_check(p, uid, err, sizeof(err)) == -ENOTDIR && strstr(err, "symbolic link"));
    setenv("TCGPU_RUN_DIR", p, 1);
    CHECK(tcgpu_rundir_prepare(rundir_env(), dir, sizeof(dir), err, sizeof(err)) == 1 &&
          !strcmp(dir, fb) &&
          strstr(err, "symbolic link"), "%s", err);

    /* a plain file, a missing dir under a missing parent */
    snprintf(p, sizeof(p), "%s/file", tmpdir);
    fd = open(p, O_CREAT | O_WRONLY, 0600);
    CHECK(fd >= 0);
    close(fd);
    CHECK(tcgpu_rundir_check(p, uid, err, sizeof(err)) == -ENOTDIR);
    snprintf(p, sizeof(p), "%s/no/such", tmpdir);
    CHECK(tcgpu_rundir_check(p, uid, err, sizeof(err)) == -ENOENT);
    setenv("TCGPU_RUN_DIR", p, 1);
    CHECK(tcgpu_rundir_prepare(rundir_env(), dir, sizeof(dir), err, sizeof(err)) == -ENOENT &&
          strstr(err, "cannot create"));

    /* XDG_RUNTIME_DIR when it is ours, /tmp/tcgpu-UID otherwise */
    unsetenv("TCGPU_RUN_DIR");
    snprintf(p, sizeof(p), "%s/xdg", tmpdir);
    CHECK(mkdir(p, 0700) == 0);
    setenv("XDG_RUNTIME_DIR", p, 1);
    CHECK(tcgpu_rundir_prepare(rundir_env(), dir, sizeof(dir), err, sizeof(err)) == 0);
    snprintf(p, sizeof(p), "%s/xdg/tcgpu", tmpdir);
    CHECK(!strcmp(dir, p));
    if (uid == 0) {
        snprintf(p, sizeof(p), "%s/xdg", tmpdir);
        CHECK(chown(p, 65534, 65534) == 0);
        CHECK(tcgpu_rundir_prepare(rundir_env(), dir, sizeof(dir), err, sizeof(err)) == 0);
        snprintf(p, sizeof(p), "/tmp/tcgpu-%u", (unsigned)uid);
        CHECK(!strcmp(dir, p));
    }
    unsetenv("XDG_RUNTIME_DIR");

    /* socket paths must fit sun_path */
    CHECK(tcgpu_rundir_socket_path("/tmp/x", 42, p, sizeof(p)) == 0 && !strcmp(p, "/tmp/x/42.sock"));
    memset(dir, 'd', 120);
    dir[0] = '/';
    dir[120] = '\0';
    CHECK(tcgpu_rundir_socket_path(dir, 42, p, sizeof(p)) == -ENAMETOOLONG);

    /* a client's candidates: its own TCGPU_RUN_DIR first, /tmp/tcgpu-UID last, no duplicates */
    setenv("TCGPU_RUN_DIR", "/somewhere/", 1);
    n = tcgpu_rundir_candidates(getenv("TCGPU_RUN_DIR"), getpid(), uid, cand,
                                TCGPU_RUNDIR_MAX_CANDIDATES);
    CHECK(n >= 2 && !strcmp(cand[0], "/somewhere"));
    snprintf(p, sizeof(p), "/tmp/tcgpu-%u", (unsigned)uid);
    listed = 0;
    for (int i = 1; i < n; i++)
        listed |= !strcmp(cand[i], p);
    CHECK(n >= 2 && listed);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            CHECK(strcmp(cand[i], cand[j]));
    unsetenv("TCGPU_RUN_DIR");
    rmdir(fb);                  /* the fallback made here, if it is still empty */
    return 0;
}

/* ---------------------------------------------------------------------------
 * e2e
 * ------------------------------------------------------------------------- */

static int test_e2e(void)
{
    struct stat st;
    struct ctl_conn c;
    char err[1024], d[PATH_MAX], dpath[PATH_MAX];
    struct tcgpu_status ts;
    int r;

    use_run_dir();
    setenv("TCGPU_SIGNAL", "off", 1);
    CHECK(start_control() == 0);
    CHECK(start_control() == 0);         /* idempotent */
    snprintf(server_path, sizeof(server_path), "%s", tcgpu_control_socket_path());
    CHECK(*tcgpu_control_socket_path());
    CHECK(stat(tcgpu_control_socket_path(), &st) == 0 && S_ISSOCK(st.st_mode) &&
          (st.st_mode & 0777) == 0600);

    /* status */
    CHECK(request("status", NULL, 5000) == 0);
    CHECK(!strcmp(reply.word, "ok"));
    CHECK(ctl_get_status(&reply, &ts) == 0 && ts.state == TCGPU_STATE_RUNNING && ts.gpu_bytes == 4 << 20);
    CHECK(ctl_get(&reply, "trigger_signal") && !strcmp(ctl_get(&reply, "trigger_signal"), "off"));
    CHECK(ctl_get(&reply, "version") && !strcmp(ctl_get(&reply, "version"), TCGPU_VERSION_STRING));
    CHECK(ctl_get(&reply, "pid") && atoi(ctl_get(&reply, "pid")) == getpid());

    /* suspend to host memory, on the service thread, with progress: every
     * phase's start and end arrive, whatever the rate limit drops between */
    progress_calls = 0;
    CHECK(request("suspend", NULL, 5000) == 0);
    CHECK(calls(TCGPU_OP_SUSPEND) == 1 && !fk.had_dir);
    CHECK(!pthread_equal(fk.thread, pthread_self()));
    CHECK(progress_calls >= 3);
    CHECK(saw_quiesce && saw_drain_start && saw_drain_end);
    CHECK(ctl_get_status(&reply, &ts) == 0 && ts.state == TCGPU_STATE_SUSPENDED && ts.gpu_bytes == 0);
    CHECK(ts.last_op == TCGPU_OP_SUSPEND && ts.last_result == 0);

    /* refusals in this state: exit 4, with the errno's name and the message */
    CHECK(request("suspend", NULL, 5000) == CTL_EXIT_REFUSED);
    CHECK(reply.err == -EALREADY && !strcmp(reply.err_name, "EALREADY") && !strcmp(reply.err_text, "already suspended"));
    CHECK(request("checkpoint", "/x/ckpt", 5000) == CTL_EXIT_REFUSED && reply.err == -EBUSY);
    CHECK(ctl_get_status(&reply, &ts) == 0 && ts.state == TCGPU_STATE_SUSPENDED);

    /* resume dir=: the image moved (gpuckpt save/restore) */
    CHECK(request("resume", "/moved/img", 5000) == 0);
    CHECK(calls(TCGPU_OP_RESUME) == 1 && fk.state == TCGPU_STATE_RUNNING);
    CHECK(fk.had_dir && !strcmp(fk.dir, "/moved/img"));
    CHECK(request("resume", NULL, 5000) == CTL_EXIT_REFUSED);

    /* checkpoint with a directory that needs escaping */
    r = calls(TCGPU_OP_CHECKPOINT);
    CHECK(request("checkpoint", "/scratch/a b=c%d", 5000) == 0);
    CHECK(calls(TCGPU_OP_CHECKPOINT) == r + 1 && !strcmp(fk.dir, "/scratch/a b=c%d"));
    CHECK(request("suspend", "/scratch/s", 5000) == 0 && fk.had_dir && !strcmp(fk.dir, "/scratch/s"));
    CHECK(request("resume", NULL, 5000) == 0);

    /* bad requests: exit 2 and no operation run */
    r = calls(TCGPU_OP_CHECKPOINT);
    CHECK(request("checkpoint", NULL, 5000) == CTL_EXIT_USAGE && reply.err == -EINVAL &&
          !strcmp(reply.err_text, "checkpoint needs dir=PATH"));
    CHECK(request("checkpoint", "", 5000) == CTL_EXIT_USAGE && reply.err == -EINVAL);
    CHECK(request("checkpoint", "relative/dir", 5000) == CTL_EXIT_USAGE &&
          !strcmp(reply.err_text, "dir must be an absolute path"));
    CHECK(request("frobnicate", NULL, 5000) == CTL_EXIT_USAGE &&
          !strcmp(reply.err_text, "unknown command 'frobnicate'"));
    CHECK(calls(TCGPU_OP_CHECKPOINT) == r);
    r = calls(TCGPU_OP_SUSPEND);
    CHECK(request("suspend", "relative/dir", 5000) == CTL_EXIT_USAGE && reply.err == -EINVAL);
    CHECK(calls(TCGPU_OP_SUSPEND) == r);
    CHECK(raw_request("status k", 8) == -EPROTO);
    CHECK(raw_request("status\0", 7) == -EPROTO);
    char *big = malloc(CTL_MSG_MAX + 100);
    memset(big, 'a', CTL_MSG_MAX + 100);
    CHECK(raw_request(big, CTL_MSG_MAX + 100) == -EMSGSIZE);
    free(big);
    CHECK(raw_request("", 0) == 0);            /* connect and leave */
    CHECK(request("status", NULL, 5000) == 0); /* still serving */

    /* each failure of an operation maps to its documented exit code */
    static const struct { int err; int code; } map[] = {
        { -ETIMEDOUT, CTL_EXIT_TIMEOUT }, { -EBADMSG, CTL_EXIT_CORRUPT }, { -ENOMEM, CTL_EXIT_NOROOM },
        { -ENOSPC, CTL_EXIT_FAILED }, { -EIO, CTL_EXIT_FAILED }, { -ENOTSUP, CTL_EXIT_REFUSED },
        { -EEXIST, CTL_EXIT_FAILED }, { -EACCES, CTL_EXIT_PERM },
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        force_next(map[i].err, "cuIpcGetMemHandle: IPC memory handles cannot be checkpointed");
        CHECK(request("checkpoint", "/x/c", 5000) == map[i].code);
        CHECK(reply.err == map[i].err);
        CHECK(!strcmp(reply.err_text, "cuIpcGetMemHandle: IPC memory handles cannot be checkpointed"));
        CHECK(ctl_get_status(&reply, &ts) == 0 && ts.last_result == map[i].err);
    }

    /* a directory sent along: the operation reaches it as /proc/self/fd/N,
     * and the reply names it as the client does (passed_dir=) */
    int dfd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(dfd >= 0);
    force_next(-ENOSPC, "%DIR%");
    CHECK(request_passing("checkpoint", "img", dfd, "/home/me/ckpt", 5000) == CTL_EXIT_FAILED);
    CHECK(!strncmp(fk.dir, "/proc/self/fd/", 14), "the operation got %s", fk.dir);
    CHECK(!strcmp(reply.err_text, "/home/me/ckpt/img/gpu.img: write: No space left on device"),
          "the reply says: %s", reply.err_text);
    force_next(-ENOSPC, "%DIR%");          /* no name from the client: ours stays */
    CHECK(request_passing("checkpoint", "img", dfd, NULL, 5000) == CTL_EXIT_FAILED);
    CHECK(!strncmp(reply.err_text, "/proc/self/fd/", 14), "the reply says: %s", reply.err_text);
    close(dfd);

    /* the client's timeout: exit 5, and the server carries on; then, finding
     * nobody to take the suspend's reply, it undoes the suspend */
    pthread_mutex_lock(&fk_lock);
    fk.delay_ms = 400;
    pthread_mutex_unlock(&fk_lock);
    resumes_before = calls(TCGPU_OP_RESUME);
    CHECK(request("suspend", NULL, 100) == CTL_EXIT_TIMEOUT);
    /* status answers while the suspend runs, and names it */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(request("status", NULL, 5000) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(ctl_get(&reply, "op_running") && !strcmp(ctl_get(&reply, "op_running"), "suspend"));
    CHECK(ctl_get(&reply, "progress_total") != NULL);
    CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 250,
          "status waited for the operation");
    pthread_mutex_lock(&fk_lock);
    fk.delay_ms = 0;
    pthread_mutex_unlock(&fk_lock);
    CHECK(wait_for(suspend_undone, 5000));
    CHECK(request("status", NULL, 5000) == 0 && !ctl_get(&reply, "op_running"));
    CHECK(ctl_get_status(&reply, &ts) == 0 && ts.state == TCGPU_STATE_RUNNING &&
          ts.last_op == TCGPU_OP_RESUME && ts.last_result == 0);

    /* operations queue behind the running one; beyond 8 waiting, refused at once */
    pthread_mutex_lock(&fk_lock);
    fk.hold = 1;                    /* the first runs until released: the rest wait */
    pthread_mutex_unlock(&fk_lock);
    r = calls(TCGPU_OP_CHECKPOINT);
    int held[9];
    /* The first must be running before the others come: were all nine to
     * arrive before the operation thread took the first, the ninth would
     * find eight waiting and be refused (a loaded machine did that). */
    held[0] = send_raw("checkpoint dir=/x/q\n");
    CHECK(wait_for(one_running, 10000));
    for (int i = 1; i < 9; i++)
        held[i] = send_raw("checkpoint dir=/x/q\n");
    CHECK(wait_for(one_queued_full, 10000));
    CHECK(request("checkpoint", "/x/r", 5000) == CTL_EXIT_REFUSED && reply.err == -EBUSY &&
          strstr(reply.err_text, "already wait behind the running checkpoint"),
          "%s", reply.err_text);
    for (int i = 0; i < 9; i++)
        if (held[i] >= 0)
            close(held[i]);
    pthread_mutex_lock(&fk_lock);
    fk.hold = 0;
    pthread_cond_broadcast(&fk_cv);
    pthread_mutex_unlock(&fk_lock);
    CHECK(wait_for(queue_empty, 5000));
    CHECK(calls(TCGPU_OP_CHECKPOINT) == r + 9, "%d of 9 queued checkpoints ran",
          calls(TCGPU_OP_CHECKPOINT) - r);

    /* reaching processes that cannot answer */
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    CHECK(ctl_connect(child, getenv("TCGPU_RUN_DIR"), &c, err, sizeof(err)) == -ENOENT &&
          strstr(err, "no control socket"));
    CHECK(ctl_exit_code(-ENOENT, 0) == CTL_EXIT_NOPROC);
    /* a stale socket file: nobody listening */
    snprintf(d, sizeof(d), "%s/run", tmpdir);
    CHECK(tcgpu_rundir_socket_path(d, child, dpath, sizeof(dpath)) == 0);
    {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        memcpy(a.sun_path, dpath, sizeof(a.sun_path) - 1);
        CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
        close(fd);
        CHECK(ctl_connect(child, getenv("TCGPU_RUN_DIR"), &c, err, sizeof(err)) == -ECONNREFUSED &&
              strstr(err, "stale"));
        unlink(dpath);
        /* an impostor: a live socket under the child's name served by us */
        fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 1) == 0);
        r = ctl_connect(child, getenv("TCGPU_RUN_DIR"), &c, err, sizeof(err));
        CHECK(r == -EPERM && strstr(err, "refusing"));
        CHECK(ctl_exit_code(r, 0) == CTL_EXIT_PERM);
        if (r == 0)
            ctl_close(&c);
        close(fd);
        unlink(dpath);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK(ctl_connect(child, getenv("TCGPU_RUN_DIR"), &c, err, sizeof(err)) == -ESRCH &&
          strstr(err, "no such process"));

    /* stop: socket gone, and a restart works */
    snprintf(dpath, sizeof(dpath), "%s", tcgpu_control_socket_path());
    tcgpu_control_stop();
    CHECK(access(dpath, F_OK) < 0 && errno == ENOENT);
    CHECK(request("status", NULL, 1000) == CTL_EXIT_NOPROC);
    CHECK(start_control() == 0);
    CHECK(request("status", NULL, 5000) == 0);
    tcgpu_control_stop();
    return 0;
}

/* ---------------------------------------------------------------------------
 * signal
 * ------------------------------------------------------------------------- */

static int one_suspend(void) { return calls(TCGPU_OP_SUSPEND) >= 1; }
static int one_resume(void) { return calls(TCGPU_OP_RESUME) >= 1; }
static int one_checkpoint(void) { return calls(TCGPU_OP_CHECKPOINT) >= 1; }

static void programs_handler(int sig) { (void)sig; }

static int test_signal(void)
{
    char name[32], want[PATH_MAX];
    struct sigaction sa, cur;

    /* names */
    CHECK(tcgpu_signal_parse("USR2") == SIGUSR2 && tcgpu_signal_parse("SIGUSR2") == SIGUSR2);
    CHECK(tcgpu_signal_parse("sigusr1") == SIGUSR1 && tcgpu_signal_parse("HUP") == SIGHUP);
    CHECK(tcgpu_signal_parse("RTMIN+4") == SIGRTMIN + 4 && tcgpu_signal_parse("SIGRTMIN") == SIGRTMIN);
    CHECK(tcgpu_signal_parse("SIGRTMAX-1") == SIGRTMAX - 1 && tcgpu_signal_parse("rtmax") == SIGRTMAX);
    CHECK(tcgpu_signal_parse("38") == 38 && tcgpu_signal_parse("10") == 10);
    CHECK(tcgpu_signal_parse("off") == 0 && tcgpu_signal_parse("") == 0 && tcgpu_signal_parse(NULL) == 0);
    CHECK(tcgpu_signal_parse("none") == 0 && tcgpu_signal_parse("0") == 0);
    CHECK(tcgpu_signal_parse("KILL") == -EINVAL && tcgpu_signal_parse("STOP") == -EINVAL);
    CHECK(tcgpu_signal_parse("SEGV") == -EINVAL && tcgpu_signal_parse("9") == -EINVAL);
    CHECK(tcgpu_signal_parse("32") == -EINVAL && tcgpu_signal_parse("RTMIN+999") == -EINVAL);
    CHECK(tcgpu_signal_parse("RTMIN+") == -EINVAL && tcgpu_signal_parse("RTMIN-1") == -EINVAL);
    CHECK(tcgpu_signal_parse("12x") == -EINVAL && tcgpu_signal_parse("WHAT") == -EINVAL);
    CHECK(tcgpu_signal_parse("99999999999") == -EINVAL);
    CHECK(!strcmp(tcgpu_signal_name(SIGRTMIN + 4, name, sizeof(name)), "SIGRTMIN+4"));
    CHECK(!strcmp(tcgpu_signal_name(SIGRTMAX - 1, name, sizeof(name)), "SIGRTMAX-1"));
    CHECK(!strcmp(tcgpu_signal_name(SIGUSR2, name, sizeof(name)), "SIGUSR2"));
    CHECK(!strcmp(tcgpu_signal_name(0, name, sizeof(name)), "off"));
    CHECK(tcgpu_sigaction_parse("toggle") == TCGPU_SIGACT_TOGGLE && tcgpu_sigaction_parse(NULL) == TCGPU_SIGACT_TOGGLE);
    CHECK(tcgpu_sigaction_parse("Checkpoint") == TCGPU_SIGACT_CHECKPOINT && tcgpu_sigaction_parse("nap") == -EINVAL);

    /* the default signal toggles: suspend, then resume, on the service thread */
    use_run_dir();
    unsetenv("TCGPU_SIGNAL");
    unsetenv("TCGPU_SIGNAL_ACTION");
    CHECK(start_control() == 0);
    CHECK(tcgpu_signal_trigger_signal() == SIGRTMIN + 4);
    CHECK(sigaction(SIGRTMIN + 4, NULL, &cur) == 0 && (cur.sa_flags & SA_RESTART));
    CHECK(request("status", NULL, 5000) == 0 && !strcmp(ctl_get(&reply, "trigger_signal"), "SIGRTMIN+4"));
    CHECK(!strcmp(ctl_get(&reply, "trigger_action"), "toggle") && !strcmp(ctl_get(&reply, "trigger_installed"), "1"));
    raise(SIGRTMIN + 4);
    CHECK(wait_for(one_suspend, 5000));
    CHECK(!pthread_equal(fk.thread, pthread_self()));   /* not run in the handler */
    CHECK(fk.state == TCGPU_STATE_SUSPENDED && !fk.had_dir);
    raise(SIGRTMIN + 4);
    CHECK(wait_for(one_resume, 5000));
    CHECK(fk.state == TCGPU_STATE_RUNNING);
    /* errno survives the handler */
    errno = EDOM;
    raise(SIGRTMIN + 4);
    CHECK(errno == EDOM);
    usleep(200000);
    tcgpu_control_stop();
    /* our handler is gone and the old disposition is back */
    CHECK(sigaction(SIGRTMIN + 4, NULL, &cur) == 0 && cur.sa_handler == SIG_DFL);

    /* checkpoint action: into TCGPU_CHECKPOINT_DIR/ckpt-<pid>-<n> */
    setenv("TCGPU_SIGNAL", "USR2", 1);
    setenv("TCGPU_SIGNAL_ACTION", "checkpoint", 1);
    setenv("TCGPU_CHECKPOINT_DIR", tmpdir, 1);
    pthread_mutex_lock(&fk_lock);
    fk.state = TCGPU_STATE_RUNNING;
    pthread_mutex_unlock(&fk_lock);
    CHECK(start_control() == 0);
    raise(SIGUSR2);
    CHECK(wait_for(one_checkpoint, 5000));
    snprintf(want, sizeof(want), "%s/ckpt-%d-1", tmpdir, (int)getpid());
    CHECK(last_dir_is(want));
    /* the program replaces our handler: status says so */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = programs_handler;
    sigaction(SIGUSR2, &sa, NULL);
    CHECK(request("status", NULL, 5000) == 0 && !strcmp(ctl_get(&reply, "trigger_installed"), "0"));
    tcgpu_control_stop();
    /* stop leaves the program's handler alone */
    CHECK(sigaction(SIGUSR2, NULL, &cur) == 0 && cur.sa_handler == programs_handler);

    /* a handler the program installed first is never replaced */
    CHECK(start_control() == 0);
    CHECK(sigaction(SIGUSR2, NULL, &cur) == 0 && cur.sa_handler == programs_handler);
    CHECK(request("status", NULL, 5000) == 0 && !strcmp(ctl_get(&reply, "trigger_signal"), "off"));
    tcgpu_control_stop();

    /* checkpoint action without a directory: trigger off, socket still up */
    signal(SIGUSR2, SIG_DFL);
    unsetenv("TCGPU_CHECKPOINT_DIR");
    CHECK(start_control() == 0);
    CHECK(request("status", NULL, 5000) == 0 && !strcmp(ctl_get(&reply, "trigger_signal"), "off"));
    tcgpu_control_stop();
    /* a bad signal name: same */
    setenv("TCGPU_SIGNAL", "KILL", 1);
    unsetenv("TCGPU_SIGNAL_ACTION");
    CHECK(start_control() == 0);
    CHECK(request("status", NULL, 5000) == 0 && !strcmp(ctl_get(&reply, "trigger_signal"), "off"));
    tcgpu_control_stop();
    return 0;
}

/* ---------------------------------------------------------------------------
 * fork
 * ------------------------------------------------------------------------- */

/* The name of this process's thread tid, "" when there is none. */
static void thread_comm(pid_t tid, char *out, size_t len)
{
    char path[64];
    FILE *f;

    out[0] = '\0';
    snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
    if ((f = fopen(path, "re"))) {
        if (fgets(out, (int)len, f))
            out[strcspn(out, "\n")] = '\0';
        fclose(f);
    }
}

/* status' service_threads: live threads of ours, the control's two among them. */
static int status_lists_service_threads(void)
{
    int control = 0, ops = 0, n = 0;
    const char *list;
    char comm[32];

    if (request("status", NULL, 5000) != 0 || !(list = ctl_get(&reply, "service_threads")))
        return 0;
    for (const char *p = list; *p; p += *p == ',') {
        char *end;
        long tid = strtol(p, &end, 10);
        if (end == p)
            return 0;
        thread_comm((pid_t)tid, comm, sizeof(comm));
        if (!comm[0])
            return 0;           /* not a thread of this process */
        control += !strcmp(comm, "tcgpu-control");
        ops += !strcmp(comm, "tcgpu-ctl-ops");
        n++;
        p = end;
    }
    return control == 1 && ops == 1 && n == core_thread_tids((pid_t[CORE_MAX_SERVICE_THREADS]){ 0 },
                                                                CORE_MAX_SERVICE_THREADS);
}

static int test_fork(void)
{
    char parent_sock[PATH_MAX], child_sock[PATH_MAX], d[PATH_MAX];
    int status, before;
    pid_t child;

    use_run_dir();
    setenv("TCGPU_SIGNAL", "USR2", 1);
    unsetenv("TCGPU_SIGNAL_ACTION");
    CHECK(start_control() == 0);
    snprintf(parent_sock, sizeof(parent_sock), "%s", tcgpu_control_socket_path());
    before = calls(TCGPU_OP_SUSPEND);

    child = fork();
    if (child == 0) {
        int bad = 0;
        /* the parent's channel is forgotten, not closed for the parent */
        if (*tcgpu_control_socket_path())
            bad |= 1;
        /* our signal reaches no one (the parent's thread must not see it) */
        raise(SIGUSR2);
        /* the child's own channel when it starts one */
        /* none of the parent's service threads is ours */
        pid_t tids[CORE_MAX_SERVICE_THREADS];
        if (core_thread_tids(tids, CORE_MAX_SERVICE_THREADS) != 0)
            bad |= 4;
        if (tcgpu_control_start() != 0 || !*tcgpu_control_socket_path() ||
            !strcmp(tcgpu_control_socket_path(), parent_sock))
            bad |= 2;
        /* our own are, once started */
        int n = core_thread_tids(tids, CORE_MAX_SERVICE_THREADS);
        char comm[32];
        for (int i = 0; i < n; i++) {
            thread_comm(tids[i], comm, sizeof(comm));
            bad |= strncmp(comm, "tcgpu-", 6) ? 8 : 0;
        }
        bad |= n == 2 ? 0 : 16;
        exit(bad);              /* runs atexit: removes the child's socket only */
    }
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status));
    if (WEXITSTATUS(status))
        fprintf(stderr, "fork: the child's checks failed: %#x\n", WEXITSTATUS(status));
    CHECK(WEXITSTATUS(status) == 0);
    usleep(300000);
    CHECK(calls(TCGPU_OP_SUSPEND) == before);
    CHECK(access(parent_sock, F_OK) == 0);
    snprintf(d, sizeof(d), "%s/run", tmpdir);
    tcgpu_rundir_socket_path(d, child, child_sock, sizeof(child_sock));
    CHECK(access(child_sock, F_OK) < 0);
    CHECK(request("status", NULL, 5000) == 0);
    CHECK(status_lists_service_threads());
    /* and the parent's trigger still works */
    raise(SIGUSR2);
    CHECK(wait_for(one_suspend, 5000));
    tcgpu_control_stop();
    /* joined: no longer listed */
    CHECK(core_thread_tids((pid_t[CORE_MAX_SERVICE_THREADS]){ 0 }, CORE_MAX_SERVICE_THREADS) == 0);
    return 0;
}

/* ---------------------------------------------------------------------------
 * peercred
 * ------------------------------------------------------------------------- */

static int test_peercred(void)
{
    char d[PATH_MAX];
    int status;
    pid_t child;

    if (geteuid() != 0) {
        fprintf(stderr, "peercred: needs root (to become another uid); skipped\n");
        return 77;
    }
    use_run_dir();
    setenv("TCGPU_SIGNAL", "off", 1);
    CHECK(start_control() == 0);
    snprintf(server_path, sizeof(server_path), "%s", tcgpu_control_socket_path());
    /* Defeat the file permissions on purpose: the peer check must hold alone. */
    snprintf(d, sizeof(d), "%s/run", tmpdir);
    CHECK(chmod(tmpdir, 0711) == 0 && chmod(d, 0711) == 0 && chmod(tcgpu_control_socket_path(), 0666) == 0);

    child = fork();
    if (child == 0) {
        if (setgid(65534) < 0 || setuid(65534) < 0)
            _exit(10);
        int r = raw_request("suspend", 7);
        if (r != -EACCES || !strstr(reply.err_text, "uid 65534")) {
            fprintf(stderr, "peercred child: got %d '%s'\n", r, reply.err_text);
            _exit(11);
        }
        _exit(0);
    }
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(calls(TCGPU_OP_SUSPEND) == 0);
    chmod(d, 0700);
    chmod(tmpdir, 0700);
    CHECK(request("status", NULL, 5000) == 0);      /* the owner still gets in */
    tcgpu_control_stop();
    return 0;
}

/* ---------------------------------------------------------------------------
 * gpuckpt
 * ------------------------------------------------------------------------- */

static int run_gpuckpt(const char *exe, char *out, size_t outlen, ...)
{
    char *argv[16];
    int pipefd[2], status, n = 0;
    va_list ap;
    pid_t pid;

    argv[n++] = (char *)exe;
    va_start(ap, outlen);
    for (char *a; n < 15 && (a = va_arg(ap, char *));)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    if (pipe(pipefd) < 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        close(pipefd[1]);
        execv(exe, argv);
        _exit(99);
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t r;
    char sink[4096];
    /* read to the end, keeping what fits */
    while ((r = read(pipefd[0], got < outlen - 1 ? out + got : sink,
                     got < outlen - 1 ? outlen - 1 - got : sizeof(sink))) > 0)
        if (got < outlen - 1)
            got += (size_t)r;
    out[got] = '\0';
    close(pipefd[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int test_gpuckpt(const char *exe)
{
    char out[65536], pid[16], want[PATH_MAX + 32], cwd[PATH_MAX];

    use_run_dir();
    setenv("TCGPU_SIGNAL", "off", 1);
    CHECK(start_control() == 0);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());

    CHECK(run_gpuckpt(exe, out, sizeof(out), "--version", NULL) == 0 && strstr(out, TCGPU_VERSION_STRING));
    CHECK(run_gpuckpt(exe, out, sizeof(out), "--help", NULL) == 0 && strstr(out, "checkpoint PID -D DIR"));
    CHECK(run_gpuckpt(exe, out, sizeof(out), "suspend", "--help", NULL) == 0 && strstr(out, "usage: gpuckpt suspend"));
    CHECK(run_gpuckpt(exe, out, sizeof(out), NULL) == 2);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "frobnicate", NULL) == 2);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "status", NULL) == 2);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "status", "12ab", NULL) == 2);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "status", pid, "--bogus", NULL) == 2);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "checkpoint", pid, NULL) == 2);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "status", "2147483647", NULL) == 3);

    CHECK(run_gpuckpt(exe, out, sizeof(out), "status", pid, "--json", NULL) == 0);
    CHECK(strstr(out, "\"state\":\"running\"") && strstr(out, "\"gpu_bytes\":4194304") && strstr(out, "\"last_error\":\"\""));
    CHECK(run_gpuckpt(exe, out, sizeof(out), "status", pid, NULL) == 0 && strstr(out, ": running"));
    CHECK(run_gpuckpt(exe, out, sizeof(out), "suspend", pid, NULL) == 0 && strstr(out, "suspended"));
    CHECK(run_gpuckpt(exe, out, sizeof(out), "suspend", pid, NULL) == CTL_EXIT_REFUSED);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "status", "--json", pid, NULL) == 0 && strstr(out, "\"state\":\"suspended\""));
    CHECK(run_gpuckpt(exe, out, sizeof(out), "resume", pid, "-q", NULL) == 0 && !*out);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "checkpoint", pid, "-D", "rel/img", NULL) == 0);
    CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
    snprintf(want, sizeof(want), "%s/rel/img", strcmp(cwd, "/") ? cwd : "");
    CHECK(last_dir_is(want));
    force_next(-ETIMEDOUT, "thread 1234 stuck in cuStreamSynchronize");
    CHECK(run_gpuckpt(exe, out, sizeof(out), "checkpoint", pid, "--dir", "/x/y", NULL) == CTL_EXIT_TIMEOUT);
    force_next(-EBADMSG, "data.0: chunk 7 checksum mismatch");
    CHECK(run_gpuckpt(exe, out, sizeof(out), "suspend", pid, "-D", "/x/y", NULL) == CTL_EXIT_CORRUPT);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "inspect", "/nonexistent/image", NULL) == CTL_EXIT_FAILED);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "verify", NULL) == CTL_EXIT_USAGE);
    /* run: a missing library is a clear failure, and the command runs with it preloaded */
    setenv("TCGPU_LIB", "/nonexistent/libtcgpu.so", 1);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "run", "--", "true", NULL) == CTL_EXIT_FAILED);
    /* a file that is not libtcgpu.so: ld.so would skip it and run the command
     * without tcgpu, so gpuckpt refuses before */
    snprintf(want, sizeof(want), "%s/libfake.so", tmpdir);
    close(open(want, O_CREAT | O_WRONLY, 0644));
    setenv("TCGPU_LIB", want, 1);
    unsetenv("LD_PRELOAD");
    CHECK(run_gpuckpt(exe, out, sizeof(out), "run", "/usr/bin/env", NULL) == CTL_EXIT_FAILED &&
          !strstr(out, "LD_PRELOAD="), "the command ran: %s", out);
    if (getenv("TCGPU_BUILD_ROOT")) {
        snprintf(want, sizeof(want), "%s/interpose/libtcgpu.so", getenv("TCGPU_BUILD_ROOT"));
        setenv("TCGPU_LIB", want, 1);
        CHECK(run_gpuckpt(exe, out, sizeof(out), "run", "--signal", "USR2", "/usr/bin/env", NULL) == 0);
        CHECK(strstr(out, "LD_PRELOAD=") && strstr(out, "libtcgpu.so") && strstr(out, "TCGPU_SIGNAL=USR2"),
              "%s", out);
    }
    CHECK(run_gpuckpt(exe, out, sizeof(out), "run", "--signal", "KILL", "true", NULL) == CTL_EXIT_USAGE);
    CHECK(run_gpuckpt(exe, out, sizeof(out), "run", "/nonexistent/cmd", NULL) == 127);
    unsetenv("TCGPU_LIB");
    tcgpu_control_stop();
    return 0;
}

int main(int argc, char **argv)
{
    int r;

    if (argc < 2) {
        fprintf(stderr, "usage: test_control rundir|e2e|signal|fork|peercred|gpuckpt PATH\n");
        return 2;
    }
    setenv("TCGPU_LOG", getenv("TCGPU_TEST_LOG") ? getenv("TCGPU_TEST_LOG") : "quiet", 1);
    unsetenv("TCGPU_RUN_DIR");
    unsetenv("TCGPU_SIGNAL");
    unsetenv("TCGPU_SIGNAL_ACTION");
    unsetenv("TCGPU_CHECKPOINT_DIR");
    settings_reload();
    make_tmpdir();
    if (!strcmp(argv[1], "rundir"))
        r = test_rundir();
    else if (!strcmp(argv[1], "e2e"))
        r = test_e2e();
    else if (!strcmp(argv[1], "signal"))
        r = test_signal();
    else if (!strcmp(argv[1], "fork"))
        r = test_fork();
    else if (!strcmp(argv[1], "peercred"))
        r = test_peercred();
    else if (!strcmp(argv[1], "gpuckpt") && argc > 2)
        r = test_gpuckpt(argv[2]);
    else {
        fprintf(stderr, "unknown test '%s'\n", argv[1]);
        r = 2;
    }
    cleanup_tmpdir();
    if (r)
        return r;
    if (failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", argv[1], failures);
        return 1;
    }
    printf("control %s: all checks passed\n", argv[1]);
    return 0;
}
