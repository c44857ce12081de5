/*
 * gpuckpt save PID -D DIR: a whole process tree to disk
 * (docs/save-restore.md).
 *
 *   1. walk the tree and classify every process, refusing before anything
 *      is touched: a process the driver knows (it holds a GPU) that is not
 *      under tcgpu, or a tcgpu process that is not running;
 *   2. criu dump the tree into DIR.tmp-XXXXXX/criu with tcgpu's CRIU plugin
 *      (plugins/criu): it suspends every tcgpu process into
 *      DIR.tmp-XXXXXX/gpu/<pid> and hands its context to the driver before
 *      CRIU freezes it; the same mechanism podman and the kubelet use;
 *   3. write the tree manifest, with the size and checksum of every file
 *      CRIU wrote (filesums.h), fsync everything, rename DIR.tmp-XXXXXX to DIR;
 *   4. without --leave-running, wait (bounded) until every pid of the tree is
 *      free, so that a restore may follow at once.
 * A failed dump leaves the tree running: the plugin gives every process back
 * what it took before criu returns; gpuckpt removes the temporary directory.
 * With --leave-running the plugin gives it back after the dump, from the
 * images it wrote.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "commands.h"
#include "ops.h"
#include "ckptapi/ckptapi.h"
#include "filesums.h"
#include "tree.h"
#include "tcgpud.h"
#include "util.h"
#include "image/image.h"
#include "json/json.h"
#include "tcgpu.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/pathtrust.h"
#include "common/proc.h"

struct save_opts {
    pid_t root;
    char dir[PATH_MAX];         /* final, absolute: what messages name */
    char at[PATH_MAX];          /* where it is reached: dir, or /proc/self/fd/N/LEAF (--owner) */
    char tmp[PATH_MAX + 16];    /* AT.tmp-XXXXXX, where the work is done */
    char tmp_shown[PATH_MAX + 16];  /* DIR.tmp-XXXXXX, what messages name */
    int parent_fd;              /* --owner: DIR's parent, walked and checked once; else -1 */
    char criu[PATH_MAX];
    char plugins[PATH_MAX];     /* tcgpu's CRIU plugin directory */
    int leave_running, tcp_established, shell_job;
    long long owner;            /* --owner UID (tcgpud, for that user), else -1 */
    double t_gpu, t_criu, t_sums, t_sync;   /* seconds in each phase, for the summary */
};

static double now_s(void)
{
    return (double)now_ns() / 1e9;
}

/* ---- classification ---------------------------------------------------------- */

/*
 * The rule (docs/save-restore.md): a process holds the GPU when the driver's
 * checkpoint API knows it (cuCheckpointProcessGetState answers for its pid)
 * or it has a /dev/nvidia* file open. It is a tcgpu process when its control
 * socket answers. Holding the GPU without being a tcgpu process is refused:
 * CRIU could not dump it, and we could not give its memory back.
 */
static int classify(struct tree *t, char *err, size_t len)
{
    int need_driver = 0;

    for (int i = 0; i < t->nproc; i++) {
        struct tree_proc *p = &t->proc[i];
        struct ctl_conn c;
        char why[1024] = "cannot reach its control socket";
        int state, r, gpu;

        r = ctl_connect(p->pid, getenv("TCGPU_RUN_DIR"), &c, why, sizeof(why));
        if (r == 0) {
            p->tcgpu = 1;
            snprintf(p->socket, sizeof(p->socket), "%s", c.path);
            snprintf(p->image, sizeof(p->image), "gpu/%d", (int)p->pid);
            ctl_close(&c);
            need_driver = 1;
            continue;
        }
        if (r != -ENOENT && r != -ECONNREFUSED) {
            snprintf(err, len, "process %d (%s): %s", (int)p->pid, p->comm, why);
            return r;
        }
        gpu = gdrv_get_state(p->pid, &state, NULL, 0) == 0 ||
              tcgpu_proc_holds_file(p->pid, "/dev/nvidia");
        if (gpu) {
            snprintf(err, len, "process %d (%s) uses the GPU but is not under tcgpu (no control "
                     "socket): its GPU state cannot be saved; run it with gpuckpt run, or leave it "
                     "out of the tree", (int)p->pid, p->comm);
            return -ENOTSUP;
        }
    }
    if (need_driver && !gdrv_available(err, len)) {
        size_t n = strlen(err);
        snprintf(err + n, len - n, ": tcgpu processes would keep their CUDA context, which CRIU "
                 "cannot dump");
        return -ENOTSUP;
    }
    return 0;
}

/* Every tcgpu process must be running now (a suspended one's memory is elsewhere). */
static int check_running(struct tree *t, char *err, size_t len)
{
    for (int i = 0; i < t->nproc; i++) {
        struct tcgpu_status st;
        int r;

        if (!t->proc[i].tcgpu)
            continue;
        r = gpuckpt_call("status", t->proc[i].pid, NULL, &st);
        if (r != CTL_EXIT_OK) {
            snprintf(err, len, "process %d (%s): no status", (int)t->proc[i].pid, t->proc[i].comm);
            return -EIO;
        }
        if (st.state != TCGPU_STATE_RUNNING) {
            snprintf(err, len, "process %d (%s) is %s: resume it first (gpuckpt resume %d)",
                     (int)t->proc[i].pid, t->proc[i].comm, tcgpu_state_name(st.state),
                     (int)t->proc[i].pid);
            return -EBUSY;
        }
    }
    return 0;
}

/* ---- the GPU images the plugin wrote ---------------------------------------------- */

static int image_csum(const char *dir, uint8_t out[16], char *err, size_t len)
{
    struct image *img = NULL;
    int r = image_open(&img, dir, IMAGE_OPEN_MANIFEST_ONLY, err, len);

    if (r == 0)
        image_manifest_csum(img, out);
    image_close(img);
    return r;
}

/* Every tcgpu process's image, made by the plugin during the dump, into the manifest. */
static int record_images(struct tree *t, const struct save_opts *o, char *err, size_t len)
{
    for (int i = 0; i < t->nproc; i++) {
        char img[PATH_MAX], why[1024];
        int r;

        if (!t->proc[i].tcgpu)
            continue;
        snprintf(img, sizeof(img), "%s/%s", o->tmp, t->proc[i].image);
        if ((r = image_csum(img, t->proc[i].image_csum, why, sizeof(why))) < 0) {
            snprintf(err, len, "process %d (%s): no GPU image after the dump: %s", (int)t->proc[i].pid,
                     t->proc[i].comm, why);
            return r == -ENOENT ? -EIO : r;
        }
    }
    return 0;
}

/* ---- CRIU ------------------------------------------------------------------------ */

/*
 * The dump, with the plugin doing the GPU side: it puts the images in
 * DIR.tmp/gpu (TCGPU_CRIU_GPU_DIR) and, told so (TCGPU_CRIU_LEAVE_RUNNING),
 * gives the processes back before criu returns. On failure err says why:
 * the plugin's reason when it failed (a GPU image that did not fit), CRIU's
 * otherwise; *gpu_side says which.
 */
static int criu_dump(const struct tree *t, const struct save_opts *o, int *gpu_side, char *err,
                     size_t len)
{
    char imgdir[PATH_MAX], log[PATH_MAX], gpudir[PATH_MAX], pid[16], why[4096];
    char preload[PATH_MAX];
    char *argv[20];
    int n = 0, r;

    *gpu_side = 0;
    snprintf(imgdir, sizeof(imgdir), "%s/criu", o->tmp);
    snprintf(gpudir, sizeof(gpudir), "%s/gpu", o->tmp);
    snprintf(pid, sizeof(pid), "%d", (int)o->root);
    argv[n++] = (char *)o->criu;
    argv[n++] = "dump";
    argv[n++] = "-t";
    argv[n++] = pid;
    argv[n++] = "-D";
    argv[n++] = imgdir;
    argv[n++] = "-o";
    argv[n++] = "dump.log";
    argv[n++] = "-v4";
    argv[n++] = "-L";
    argv[n++] = (char *)o->plugins;
    /* file locks held by the tree are dumped rather than refused */
    argv[n++] = "--file-locks";
    if (o->leave_running)
        argv[n++] = "--leave-running";
    if (o->tcp_established)
        argv[n++] = "--tcp-established";
    if (o->shell_job)
        argv[n++] = "--shell-job";
    argv[n] = NULL;
    /* another user's processes, without CAP_SYS_RESOURCE (tree.h) */
    if (criu_dump_preload(t, preload, sizeof(preload)) < 0) {
        snprintf(err, len, "CRIU cannot read the resource limits of another user's processes "
                 "without CAP_SYS_RESOURCE, and libtcgpu-criu-rlimits.so is not installed");
        return -ENOTSUP;
    }
    setenv("TCGPU_CRIU_GPU_DIR", gpudir, 1);
    setenv("TCGPU_CRIU_LEAVE_RUNNING", o->leave_running ? "1" : "0", 1);
    snprintf(log, sizeof(log), "%s/criu/dump.out", o->tmp);
    r = criu_run_preloaded(argv, log, preload);
    unsetenv("TCGPU_CRIU_GPU_DIR");
    unsetenv("TCGPU_CRIU_LEAVE_RUNNING");
    snprintf(log, sizeof(log), "%s/criu/dump.log", o->tmp);
    if (r == 0)
        return 0;
    if (r > 0 && criu_plugin_errors(log, why, sizeof(why)) > 0) {
        *gpu_side = 1;
        snprintf(err, len, "%s", why);
        return -EIO;
    }
    {
        char printed[PATH_MAX];
        snprintf(printed, sizeof(printed), "%s/criu/dump.out", o->tmp);
        criu_failure(r, log, printed, 3, why, sizeof(why));
    }
    if (r < 0)
        snprintf(err, len, "criu dump of the tree under %d failed: %s", (int)o->root, why);
    else
        snprintf(err, len, "criu dump of the tree under %d failed (exit %d):\n  %s", (int)o->root, r, why);
    return -EIO;
}

/* Whether every process of the tree has gone (CRIU ended it after dumping,
 * or it finished once given back). */
static int tree_gone(const struct tree *t)
{
    for (int i = 0; i < t->nproc; i++)
        if (tcgpu_proc_live(t->proc[i].pid))
            return 0;
    return 1;
}

/* How long a saved tree may take to be gone: its processes exit (a large
 * one takes a while to free its memory) and their parents reap them. */
#define TREE_FREED_WAIT_MS 30000

/*
 * After a dump without --leave-running: wait until CRIU's kill has freed every
 * pid of the tree, zombies reaped, so that a restore started at once finds
 * them free. Bounded; when one is still held, says which, why and by whom.
 */
static void wait_tree_freed(const struct tree *t, pid_t root)
{
    uint64_t deadline = now_ns() + (uint64_t)TREE_FREED_WAIT_MS * 1000000u;
    struct tcgpu_proc_stat st;
    char pcomm[64] = "?";
    int i = 0;

    while (i < t->nproc) {
        if (tcgpu_proc_pid_free(t->proc[i].pid)) {
            i++;
            continue;
        }
        if (now_ns() >= deadline)
            break;
        usleep(5000);
    }
    if (i == t->nproc)
        return;
    if (tcgpu_proc_stat(t->proc[i].pid, &st) < 0)
        return;                 /* freed just now */
    if (st.state != 'Z') {
        gpuckpt_error("save %d: saved, but process %d (%s) has not exited %d s after the dump: a "
                      "restore needs its pid free", (int)root, (int)t->proc[i].pid,
                      t->proc[i].comm, TREE_FREED_WAIT_MS / 1000);
        return;
    }
    tcgpu_proc_comm(st.ppid, 0, pcomm, sizeof(pcomm));
    gpuckpt_error("save %d: saved, but process %d (%s) is still a zombie %d s after the dump: its "
                  "parent %d (%s) has not reaped it, and a restore needs its pid free", (int)root,
                  (int)t->proc[i].pid, t->proc[i].comm, TREE_FREED_WAIT_MS / 1000, (int)st.ppid,
                  pcomm);
}

/* tcgpu processes of the tree that are not running (the plugin could not give
 * them back; it said why in CRIU's log, which is printed here). */
static int tcgpu_still_suspended(const struct tree *t)
{
    int bad = 0;

    for (int i = 0; i < t->nproc; i++) {
        struct tcgpu_status st;

        if (!t->proc[i].tcgpu || !tcgpu_proc_live(t->proc[i].pid))
            continue;
        /* given back, it runs on and may finish at any moment: one that no
         * longer answers because it has exited is not suspended */
        if (gpuckpt_call("status", t->proc[i].pid, NULL, &st) != CTL_EXIT_OK ?
                tcgpu_proc_live(t->proc[i].pid) : st.state != TCGPU_STATE_RUNNING) {
            gpuckpt_error("process %d (%s) stays suspended (retry: gpuckpt resume %d)",
                          (int)t->proc[i].pid, t->proc[i].comm, (int)t->proc[i].pid);
            bad++;
        }
    }
    return bad;
}

/* Keep CRIU's log of a failed dump: the temporary directory goes away. */
static void keep_log(const struct save_opts *o, char *kept, size_t len)
{
    char src[PATH_MAX], cmd[PATH_MAX];
    int in, out;
    ssize_t n;

    kept[0] = '\0';
    snprintf(src, sizeof(src), "%s/criu/dump.log", o->tmp);
    snprintf(cmd, sizeof(cmd), "%s.failed-dump.log", o->at);
    if ((in = open(src, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    if ((out = open(cmd, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) >= 0) {
        char buf[65536];
        int ok = 1;
        while ((n = read(in, buf, sizeof(buf))) > 0)
            if (write(out, buf, (size_t)n) != n) {
                ok = 0;          /* a full disk: no log to keep */
                break;
            }
        close(out);
        if (ok)
            snprintf(kept, len, "%s.failed-dump.log", o->dir);
        else
            unlink(cmd);
    }
    close(in);
}

/* ---- the command ------------------------------------------------------------------ */

static int parse_save_args(const struct gpuckpt_command *self, int argc, char **argv,
                           struct save_opts *o)
{
    enum { OPT_LEAVE = 1000, OPT_TCP, OPT_SHELL, OPT_OWNER };
    static const struct option longopts[] = {
        { "dir", required_argument, NULL, 'D' },
        { "leave-running", no_argument, NULL, OPT_LEAVE },
        { "tcp-established", no_argument, NULL, OPT_TCP },
        { "shell-job", no_argument, NULL, OPT_SHELL },
        { "owner", required_argument, NULL, OPT_OWNER },
        { "json", no_argument, NULL, 'j' },
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    const char *dir = NULL;
    int ch;

    o->owner = -1;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hD:o:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h': gpuckpt_command_help(self); return -1;
        case 'D': dir = optarg; break;
        case 'j': gpuckpt_set_json(); break;
        case 'o':
            if ((ch = gpuckpt_set_format("save", optarg)) != 0)
                return ch;
            break;
        case OPT_LEAVE: o->leave_running = 1; break;
        case OPT_TCP: o->tcp_established = 1; break;
        case OPT_SHELL: o->shell_job = 1; break;
        case OPT_OWNER:
            if ((o->owner = tree_parse_uid(optarg)) < 0)
                return gpuckpt_usage_error("save", "--owner takes a uid");
            break;
        default: return gpuckpt_option_error("save", argc, argv, "hD:o:", longopts);
        }
    }
    if (optind != argc - 1)
        return gpuckpt_usage_error("save", "one PID, please");
    if (gpuckpt_parse_pid(argv[optind], &o->root) < 0)
        return gpuckpt_usage_error("save", "PID is not a process id");
    if (!dir)
        return gpuckpt_usage_error("save", "-D DIR is required");
    if (gpuckpt_absolute_dir(dir, o->dir, sizeof(o->dir)) < 0 || strlen(o->dir) > PATH_MAX - 64)
        return gpuckpt_usage_error("save", "bad directory");
    return 0;
}

/*
 * The uid every tcgpu process of the tree runs as, when that is one user
 * other than root: its processes write their GPU images themselves, into
 * stages of their own the plugin makes in gpu/, so they may pass through
 * DIR and gpu/ (0711); all of it stays root's. -1 otherwise.
 */
static long long images_owner(const struct tree *t)
{
    long long uid = -1;

    for (int i = 0; i < t->nproc; i++) {
        if (!t->proc[i].tcgpu)
            continue;
        if (uid >= 0 && uid != (long long)t->proc[i].uid)
            return -1;
        uid = t->proc[i].uid;
    }
    return uid > 0 ? uid : -1;
}

/*
 * A save for another user (--owner: tcgpud runs us for them) goes where
 * that user says, and root must not be led elsewhere: DIR's parent is
 * walked from "/" once, every component checked for the user (pathtrust.h:
 * a symlink or a directory someone else may change refuses), and everything
 * after works relative to that descriptor, which CRIU inherits
 * (/proc/self/fd/N/LEAF). Swapping the parent, or a directory above it, for
 * a symlink after the check changes nothing: tcgpud's own check of the path
 * could only ever be a first answer. Root's own save goes where root says.
 */
static int reach_dir(struct save_opts *o, char *err, size_t len)
{
    char leaf[NAME_MAX + 1], why[512];
    struct stat st;
    int fd;

    o->parent_fd = -1;
    if (o->owner < 0) {
        snprintf(o->at, sizeof(o->at), "%s", o->dir);
        return 0;
    }
    fd = pathtrust_open_parent(o->dir, (uid_t)o->owner, leaf, sizeof(leaf), why, sizeof(why));
    if (fd < 0) {
        snprintf(err, len, "%s", why);
        return fd == -EPERM ? -EACCES : fd;
    }
    /* the user's own directory, or a sticky one: never one root alone may
     * write, which a symlink of the user's could lead to */
    if (fstat(fd, &st) < 0 || !pathtrust_user_may_write(&st, (uid_t)o->owner)) {
        close(fd);
        snprintf(err, len, "%s: its parent must be a directory of uid %lld that nobody else may "
                 "write to (or a sticky one like /tmp)", o->dir, o->owner);
        return -EACCES;
    }
    /* CRIU, our child, reaches the images through it */
    if (fcntl(fd, F_SETFD, 0) < 0) {
        int e = errno;
        close(fd);
        snprintf(err, len, "%s: %s", o->dir, strerror(e));
        return -e;
    }
    if (tcgpu_proc_fd_path(fd, leaf, o->at, sizeof(o->at)) < 0) {
        close(fd);
        snprintf(err, len, "%s: %s", o->dir, strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
    }
    o->parent_fd = fd;
    return 0;
}

static int prepare_dirs(struct save_opts *o, const struct tree *t, char *err, size_t len)
{
    long long img_uid = images_owner(t);
    char sub[PATH_MAX + 32];
    struct stat st;
    int r;

    if ((r = reach_dir(o, err, len)) < 0)
        return r;
    if (lstat(o->at, &st) == 0) {
        snprintf(err, len, "%s exists: gpuckpt save writes a new directory", o->dir);
        return -EEXIST;
    }
    snprintf(o->tmp, sizeof(o->tmp), "%s.tmp-XXXXXX", o->at);
    if (!mkdtemp(o->tmp)) {
        int e = errno;
        snprintf(err, len, "cannot create %s.tmp-XXXXXX: %s", o->dir, strerror(e));
        o->tmp[0] = '\0';
        return -e;
    }
    snprintf(o->tmp_shown, sizeof(o->tmp_shown), "%s%s", o->dir, o->tmp + strlen(o->at));
    /* images hold model weights: private to the user (who may only pass
     * through to its stages in gpu/ when the tree is not root's) */
    chmod(o->tmp, img_uid >= 0 ? 0711 : 0700);
    snprintf(sub, sizeof(sub), "%s/gpu", o->tmp);
    if (tree_mkdir(sub) == 0 && (img_uid < 0 || chmod(sub, 0711) == 0)) {
        snprintf(sub, sizeof(sub), "%s/criu", o->tmp);
        if (tree_mkdir(sub) == 0)
            return 0;
    }
    snprintf(err, len, "cannot create %s/%s: %s", o->tmp_shown, strrchr(sub, '/') + 1,
             strerror(errno));
    return -errno;
}

static void fill_header(struct tree *t, const struct save_opts *o)
{
    struct gdrv_device d[TREE_MAX_DEVICES];
    int n = gdrv_devices(d, TREE_MAX_DEVICES, NULL, 0);

    t->created = (uint64_t)time(NULL);
    t->owner = o->owner;
    gethostname(t->host, sizeof(t->host) - 1);
    t->driver = gdrv_driver_version();
    snprintf(t->criu_flags, sizeof(t->criu_flags), "%s%s%s", o->shell_job ? "shell-job" : "",
             o->shell_job && o->tcp_established ? "," : "", o->tcp_established ? "tcp-established" : "");
    t->ndev = 0;
    for (int i = 0; i < n && i < TREE_MAX_DEVICES; i++) {
        t->dev[i].ordinal = d[i].ordinal;
        t->dev[i].total_mem = d[i].total_mem;
        memcpy(t->dev[i].uuid, d[i].uuid, 16);
        snprintf(t->dev[i].name, sizeof(t->dev[i].name), "%s", d[i].name);
        t->ndev++;
    }
}

/* After the dump: DIR.tmp -> DIR, durably. */
static int commit(const struct save_opts *o, char *err, size_t len)
{
    int r;

    if ((r = tree_fsync_all(o->tmp)) < 0) {
        snprintf(err, len, "cannot sync %s: %s", o->tmp_shown, strerror(-r));
        return r;
    }
    if (renameat2(AT_FDCWD, o->tmp, AT_FDCWD, o->at, RENAME_NOREPLACE) < 0) {
        r = -errno;
        snprintf(err, len, "cannot rename %s to %s: %s", o->tmp_shown, o->dir, strerror(errno));
        return r;
    }
    fileio_fsync_parent(o->at);    /* best effort: the save is complete either way */
    return 0;
}

/* Dump (the plugin takes the GPU processes off; *dumped says it worked), then the manifest. */
static int save_tree(struct tree *t, struct save_opts *o, int *dumped, int *gpu_side, char *err,
                     size_t len)
{
    double t0 = now_s();
    char log[PATH_MAX];
    int r;

    r = criu_dump(t, o, gpu_side, err, len);
    snprintf(log, sizeof(log), "%s/criu/dump.log", o->tmp);
    o->t_gpu = criu_plugin_gpu_seconds(log);
    o->t_criu = now_s() - t0 - o->t_gpu;
    *dumped = r == 0;
    if (r < 0)
        return r;
    fill_header(t, o);
    if ((r = record_images(t, o, err, len)) < 0)
        return r;
    t0 = now_s();
    r = filesums_record(t, o->tmp, err, len);
    o->t_sums = now_s() - t0;
    return r < 0 ? r : tree_write(t, o->tmp, err, len);
}

/* The save object (docs/cli.md, "JSON output"). */
static int report_json(const struct tree *t, const struct save_opts *o, double secs, int ntc)
{
    json_t *procs = json_array(), *v;

    for (int i = 0; procs && i < t->nproc; i++) {
        const struct tree_proc *p = &t->proc[i];
        json_t *e = json_pack("{sI sI so sb so}", "pid", (json_int_t)p->pid, "ppid", (json_int_t)p->ppid,
                              "comm", tc_json_string(p->comm), "tcgpu", p->tcgpu,
                              "image", p->tcgpu ? tc_json_string(p->image) : json_null());
        if (json_array_append_new(procs, e) < 0) {
            json_decref(procs);
            procs = NULL;
        }
    }
    v = json_pack("{sb sI so si si so sb si s{sf sf sf sf sf}}", "ok", 1, "root", (json_int_t)o->root,
                  "dir", tc_json_string(o->dir), "processes_total", t->nproc, "tcgpu_processes", ntc,
                  "processes", procs, "leave_running", o->leave_running, "files_checked", t->nfiles,
                  "seconds", "total", secs, "gpu", o->t_gpu, "criu", o->t_criu, "checksums", o->t_sums,
                  "sync", o->t_sync);
    return gpuckpt_print_json(v);
}

static int report(const struct tree *t, const struct save_opts *o, double secs)
{
    int ntc = 0;

    for (int i = 0; i < t->nproc; i++)
        ntc += t->proc[i].tcgpu;
    if (gpuckpt_json())
        return report_json(t, o, secs, ntc);
    printf("saved the tree under %d (%d process%s, %d under tcgpu) to %s in %.2f s "
           "(GPU images %.2f s, CRIU dump %.2f s, checksums of %d files %.2f s, sync %.2f s)%s\n",
           (int)o->root, t->nproc, t->nproc == 1 ? "" : "es", ntc, o->dir, secs, o->t_gpu,
           o->t_criu, t->nfiles, o->t_sums, o->t_sync, o->leave_running ? "; it runs on" : "");
    return CTL_EXIT_OK;
}

/*
 * A save that failed once CRIU ran (err says why): where CRIU's log was
 * kept, and what became of the tree and of what was written.
 */
static void say_not_saved(const struct tree *t, const struct save_opts *o, int dumped,
                          int gpu_side, const char *err)
{
    char kept[PATH_MAX] = "";

    gpuckpt_error("save %d: %s", (int)o->root, err);
    if (!gpu_side)
        keep_log(o, kept, sizeof(kept));   /* CRIU's reason: worth keeping */
    if (kept[0])
        gpuckpt_error("save %d: CRIU's log: %s", (int)o->root, kept);
    if (dumped && !o->leave_running) {
        /* CRIU killed the tree after dumping it: the images are all there is */
        gpuckpt_error("save %d: the tree was dumped and has exited; its images stay in %s",
                      (int)o->root, o->tmp_shown);
    } else {
        /* the plugin gave every process back before criu returned */
        int bad = tcgpu_still_suspended(t);
        tree_remove_all(o->tmp);
        gpuckpt_error("save %d: nothing saved; %s", (int)o->root,
                      bad ? "some processes could not be resumed (above)"
                      : tree_gone(t) ? "the tree has ended meanwhile"
                                     : "the tree runs on as it was");
    }
}

int gpuckpt_cmd_save(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct save_opts o = { .parent_fd = -1 };
    struct tree *t = calloc(1, sizeof(*t));
    char err[16384] = "";
    double t0 = now_s();
    int r, rc, dumped = 0, gpu_side = 0;

    if (!t)
        return CTL_EXIT_FAILED;
    if ((r = parse_save_args(self, argc, argv, &o)) != 0) {
        rc = r < 0 ? CTL_EXIT_OK : r;
        goto out;
    }
    if (geteuid() != 0) {
        /* CRIU needs root: tcgpud does it for a user's own tree, with its options */
        const char *flags[4];
        int n = 0;

        if (o.leave_running)
            flags[n++] = "leave_running";
        if (o.tcp_established)
            flags[n++] = "tcp_established";
        if (o.shell_job)
            flags[n++] = "shell_job";
        flags[n] = NULL;
        rc = gpuckpt_tcgpud_privileged("save", o.root, o.dir, flags,
                                       "CRIU dumps a process tree only as root");
        goto out;
    }
    if (criu_find(o.criu, sizeof(o.criu)) < 0) {
        gpuckpt_error("save %d: CRIU not found (set TCGPU_CRIU, or put criu on PATH)", (int)o.root);
        rc = CTL_EXIT_FAILED;
        goto out;
    }
    if (criu_plugin_find(o.plugins, sizeof(o.plugins)) < 0) {
        gpuckpt_error("save %d: tcgpu's CRIU plugin (tcgpu_plugin.so) is not in %s: it is built when "
                      "CRIU's plugin header is installed (scripts/setup.sh); TCGPU_CRIU_PLUGIN_DIR "
                      "names another place", (int)o.root, o.plugins);
        rc = CTL_EXIT_FAILED;
        goto out;
    }
    if ((r = tree_walk(t, o.root)) < 0) {
        gpuckpt_error("save %d: %s", (int)o.root, r == -ESRCH ? "no such process" : "tree too large");
        rc = tree_exit_code(r);
        goto out;
    }
    /* refusals first: nothing is touched yet */
    if ((r = classify(t, err, sizeof(err))) < 0 || (r = check_running(t, err, sizeof(err))) < 0 ||
        (o.owner >= 0 && (r = tree_check_owner(t, (uid_t)o.owner, err, sizeof(err))) < 0) ||
        (r = prepare_dirs(&o, t, err, sizeof(err))) < 0) {
        gpuckpt_error("save %d: %s", (int)o.root, err);
        rc = tree_exit_code(r);
        goto out;
    }
    r = save_tree(t, &o, &dumped, &gpu_side, err, sizeof(err));
    if (r == 0) {
        double t1 = now_s();
        r = commit(&o, err, sizeof(err));
        o.t_sync = now_s() - t1;
    }
    if (r < 0) {
        say_not_saved(t, &o, dumped, gpu_side, err);
        rc = tree_exit_code(r);
        goto out;
    }
    if (o.leave_running && tcgpu_still_suspended(t) > 0) {
        gpuckpt_error("save %d: saved to %s, but some processes could not be resumed (CRIU's log: "
                      "%s/criu/dump.log)", (int)o.root, o.dir, o.dir);
        rc = CTL_EXIT_FAILED;
        goto out;
    }
    if (!o.leave_running)
        wait_tree_freed(t, o.root);
    rc = report(t, &o, now_s() - t0);
out:
    if (o.parent_fd >= 0)
        close(o.parent_fd);
    free(t);
    return rc;
}
