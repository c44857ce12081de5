/*
 * dump.c - the plugin's side of criu dump.
 *
 * PAUSE_DEVICES comes for each task just before CRIU stops it, so the task
 * still runs: a tcgpu process is asked to suspend into a GPU image, which it
 * writes itself into a stage directory we made for it (and own it: the job
 * may run as another user) inside the GPU images directory; the image is
 * then moved to <vpid>. Its context goes to the driver (Lock + Checkpoint),
 * after which it holds nothing on the GPU and CRIU can dump it. The index is
 * rewritten after each process, so it always says what was done.
 *
 * Afterwards (fini): when the dump failed, or the tasks are to run on
 * (--leave-running), every process gets its context and memory back before
 * CRIU lets the tasks go. CRIU does not tell plugins whether it will kill or
 * release the tasks: we know it from TCGPU_CRIU_LEAVE_RUNNING=1 (gpuckpt
 * sets it) or criu's command line; otherwise (runc's RPC, as podman, CRI-O
 * and containerd use it) a watcher process (helper.c) waits, and gives back
 * what the tasks need if they are still alive once CRIU has let them go.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "rmtree.h"
#include "criu-plugin.h"
#include "common/proc.h"
#include "common/clock.h"
#include "ckptapi/ckptapi.h"     /* the GDRV_* states */
#include "image/image.h"

static struct {
    const struct tp_config *cfg;
    int imgdir, gpudir;
    int looked;                 /* the tree was looked at (the root's PAUSE) */
    int inventory;              /* we are in CRIU's inventory */
    struct tp_index idx;
} d = { .imgdir = -1, .gpudir = -1 };

int tp_dump_init(const struct tp_config *c)
{
    d.cfg = c;
    d.imgdir = criu_get_image_dir();
    d.gpudir = -1;
    d.looked = d.inventory = 0;
    d.idx.n = 0;
    return d.imgdir >= 0 ? 0 : -EBADF;
}

/* ---- before the first freeze ---------------------------------------------------- */

/* Whether root or one of its descendants is a tcgpu process (bounded: the
 * first TP_MAX_PROCS of the tree, parents first). */
static int tree_has_tcgpu(pid_t root)
{
    pid_t pids[TP_MAX_PROCS];
    char buf[4096];
    struct tcgpu_status st;
    int n = tcgpu_proc_tree(root, pids, TP_MAX_PROCS);

    if (n == -E2BIG)
        n = TP_MAX_PROCS;
    for (int i = 0; i < n; i++)
        if (tp_job_call(pids[i], "status", -1, NULL, 5000, &st, buf, sizeof(buf)) == 0)
            return 1;
    return 0;
}

/*
 * A tcgpu process must be able to run its own threads while CRIU holds it
 * (fini, below): a task stopped by the cgroup freezer cannot, one stopped by
 * ptrace can. So when the tree holds one, CRIU is asked to stop tasks with
 * ptrace only, as NVIDIA's cuda_plugin asks. This must be decided at the
 * root's PAUSE_DEVICES: the freezer would stop the whole tree right after.
 */
static void prefer_ptrace_stop(pid_t root)
{
    void (*interrupt_only)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "set_compel_interrupt_only_mode");

    d.looked = 1;
    if (!tree_has_tcgpu(root))
        return;
    if (interrupt_only)
        interrupt_only();
    else
        log_warn("this CRIU does not export set_compel_interrupt_only_mode: with --freeze-cgroup a "
                 "failed dump cannot give the GPU back until CRIU lets the tasks go");
}

static void join_inventory(void)
{
    int (*add)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "add_inventory_plugin");

    /* in the inventory, a restore without this plugin is refused rather than leaving
     * the job suspended for ever */
    if (d.inventory || !add)
        return;
    if (add(TP_NAME) == 0)
        d.inventory = 1;
    else
        log_warn("cannot add %s to CRIU's inventory", TP_NAME);
}

/* ---- one process ----------------------------------------------------------------- */

static void proc_identity(struct tp_proc *p, pid_t pid)
{
    memset(p, 0, sizeof(*p));
    p->pid = pid;
    p->vpid = tp_job_vpid(pid);
    if (tcgpu_proc_uid(pid, &p->uid) < 0)
        p->uid = 0;
    tcgpu_proc_comm(pid, 0, p->comm, sizeof(p->comm));
}

/* A directory for the process to write its image in, its own (it may be another user). */
static int make_stage(const struct tp_proc *p, char *name, size_t len)
{
    int fd, r;

    snprintf(name, len, ".%d.stage", (int)p->vpid);
    tp_rmtree_at(d.gpudir, name);
    if (mkdirat(d.gpudir, name, 0700) < 0 ||
        fchownat(d.gpudir, name, p->uid, (gid_t)-1, AT_SYMLINK_NOFOLLOW) < 0 ||
        (fd = openat(d.gpudir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        r = -errno;
        log_err("process %d (%s): cannot make its stage directory: %s", (int)p->pid, p->comm,
                strerror(errno));
        tp_rmtree_at(d.gpudir, name);
        return r;
    }
    return fd;
}

static int image_checksum(const struct tp_proc *p, const char *name, uint8_t out[16])
{
    struct image *img = NULL;
    char path[64], err[512];
    int r;

    tcgpu_proc_fd_path(d.gpudir, name, path, sizeof(path));
    r = image_open(&img, path, IMAGE_OPEN_MANIFEST_ONLY, err, sizeof(err));
    if (r == 0)
        image_manifest_csum(img, out);
    else
        log_err("process %d (%s): its new image does not open: %s", (int)p->pid, p->comm, err);
    image_close(img);
    return r;
}

/* Suspends p into <gpudir>/<vpid>: written by the process in a stage, then moved. */
static int suspend_to_image(struct tp_proc *p)
{
    char stage[32], name[16], err[1024];
    int sfd, r;

    snprintf(name, sizeof(name), "%d", (int)p->vpid);
    if ((sfd = make_stage(p, stage, sizeof(stage))) < 0)
        return sfd;
    tp_rmtree_at(d.gpudir, name);   /* an earlier dump into the same directory */
    r = tp_job_call(p->pid, "suspend", sfd, "image", d.cfg->timeout_ms, NULL, err, sizeof(err));
    if (r < 0) {
        log_err("process %d (%s): %s", (int)p->pid, p->comm, err);
        goto out;
    }
    p->suspended_by_us = 1;
    if (renameat(sfd, "image", d.gpudir, name) < 0) {
        r = -errno;
        log_err("process %d (%s): cannot move its image into place: %s", (int)p->pid, p->comm,
                strerror(errno));
        goto out;
    }
    r = image_checksum(p, name, p->image_csum);
out:
    close(sfd);
    tp_rmtree_at(d.gpudir, stage);
    return r;
}

/* The threads of p a resume will need, after the driver's: the ones its
 * library lists, or for an older library, the ones named tcgpu-*. */
static int service_threads(struct tp_proc *p)
{
    char err[1024];
    int r = tp_job_service_threads(p->pid, p->tids, &p->ntids, TP_MAX_TIDS, d.cfg->timeout_ms,
                                   err, sizeof(err));

    if (r == -ENOENT) {
        p->ntids = tp_threads_tcgpu(p->pid, p->tids, p->ntids, TP_MAX_TIDS);
        return 0;
    }
    if (r < 0)
        log_err("process %d (%s): %s", (int)p->pid, p->comm, err);
    return r;
}

/* Its context to the driver (Lock + Checkpoint), and the threads a resume will need. */
static int release_context(struct tp_proc *p)
{
    char err[1024];
    pid_t tid = 0;
    int state, r;

    if ((r = tp_driver_helper.state(p->pid, &state, &tid, err, sizeof(err))) < 0) {
        log_err("process %d (%s): %s%s", (int)p->pid, p->comm, err,
                r == -ENODEV ? ": its CUDA context would stay, and CRIU cannot dump it" : "");
        return r;
    }
    if (tid && (tid = tp_tid_ns(p->pid, tid)))
        p->tids[p->ntids++] = tid;
    if ((r = service_threads(p)) < 0)
        return r;
    if (state == GDRV_CHECKPOINTED)
        return 0;               /* released by whoever suspended it: theirs to take back */
    if (state != GDRV_RUNNING) {
        log_err("process %d (%s): the driver has it %s: resume it first", (int)p->pid, p->comm,
                gdrv_state_name(state));
        return -EBUSY;
    }
    if ((r = tp_driver_helper.release(p->pid, (unsigned)d.cfg->timeout_ms, err, sizeof(err))) < 0) {
        log_err("process %d (%s): %s", (int)p->pid, p->comm, err);
        return r;
    }
    p->released_by_us = 1;
    return 0;
}

/* Takes p off the GPU; on failure gives back what was taken (it still runs). */
static int take_off(struct tp_proc *p, const struct tcgpu_status *st)
{
    char name[16];
    int r = 0;

    if (st->state == TCGPU_STATE_RUNNING)
        r = suspend_to_image(p);
    else if (st->state != TCGPU_STATE_SUSPENDED) {
        log_err("process %d (%s) is %s: a checkpoint cannot take it now; try again", (int)p->pid,
                p->comm, tcgpu_state_name(st->state));
        return -EBUSY;
    } else {
        log_info("process %d (%s) was suspended before the dump: it stays so", (int)p->pid, p->comm);
    }
    if (r == 0)
        r = release_context(p);
    if (r == 0)
        return 0;
    if (p->suspended_by_us || p->released_by_us)
        tp_job_give_back(p, p->pid, d.gpudir, d.cfg->timeout_ms, &tp_driver_helper);
    snprintf(name, sizeof(name), "%d", (int)p->vpid);
    tp_rmtree_at(d.gpudir, name);
    return r;
}

int tp_dump_pause(pid_t pid)
{
    struct tcgpu_status st;
    struct tp_proc *p;
    char err[1024];
    uint64_t t0;
    int r;

    if (!d.looked)
        prefer_ptrace_stop(pid);
    r = tp_job_call(pid, "status", -1, NULL, d.cfg->timeout_ms, &st, err, sizeof(err));
    if (r == -ENOENT || r == -ECONNREFUSED || r == -ESRCH)
        return -ENOTSUP;        /* not a tcgpu process: not ours */
    if (r < 0) {
        log_err("process %d: %s", (int)pid, err);
        return -1;
    }
    if (d.idx.n >= TP_MAX_PROCS) {
        log_err("more than %d tcgpu processes in one dump", TP_MAX_PROCS);
        return -1;
    }
    if (d.gpudir < 0 && (d.gpudir = tp_gpu_dir_open(d.imgdir, 1)) < 0)
        return -1;
    p = &d.idx.proc[d.idx.n];
    proc_identity(p, pid);
    t0 = now_ns();
    if (take_off(p, &st) < 0)
        return -1;
    d.idx.n++;
    join_inventory();
    if (tp_index_write(d.imgdir, &d.idx) < 0)
        return -1;              /* fini gives everything back */
    /* gpuckpt save reads this line: the GPU's part of the dump's time */
    log_info("process %d (%s, pid %d where it lives): off the GPU in %.3f s%s", (int)pid, p->comm,
             (int)p->vpid, (double)(now_ns() - t0) / 1e9, p->suspended_by_us ? ", image written" : "");
    return 0;
}

int tp_dump_owns(pid_t pid)
{
    for (int i = 0; i < d.idx.n; i++)
        if (d.idx.proc[i].pid == pid)
            return 1;
    return 0;
}

/* ---- afterwards ---------------------------------------------------------------------- */

/* Gives every process back what was taken, in reverse order, its threads let run. */
static void give_all_back(void)
{
    for (int i = d.idx.n - 1; i >= 0; i--) {
        const struct tp_proc *p = &d.idx.proc[i];
        struct tp_running run;

        if (tp_threads_run(p->pid, p->tids, p->ntids, &run) < 0)
            continue;
        tp_job_give_back(p, p->pid, d.gpudir, d.cfg->timeout_ms, &tp_driver_helper);
        tp_threads_hold(&run);
    }
}

/* criu dump -R / --leave-running on its command line, or gpuckpt's word for it. */
static int leave_running_asked(void)
{
    const char *env = getenv("TCGPU_CRIU_LEAVE_RUNNING");
    char buf[8192];
    size_t n;

    if (env && !strcmp(env, "1"))
        return 1;
    n = tcgpu_proc_cmdline(0, buf, sizeof(buf));
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
        if (!strcmp(buf + i, "-R") || !strcmp(buf + i, "--leave-running"))
            return 1;
    return 0;
}

/*
 * The watcher (helper.c) is a program of its own: after a fork, the driver
 * this process loaded must not be used, and the watcher needs a fresh one.
 * It gets the images directory and the GPU images directory as descriptors,
 * and nothing else of CRIU's.
 */
static void start_watcher(void)
{
    char exe[PATH_MAX], a_img[16], a_gpu[16], a_to[16];
    pid_t child;

    if (tp_helper_path(exe, sizeof(exe)) < 0) {
        log_err("no %s beside the plugin: if the tasks run on, resume their GPU state by hand "
                "(gpuckpt resume)", TP_HELPER);
        return;
    }
    snprintf(a_img, sizeof(a_img), "%d", d.imgdir);
    snprintf(a_gpu, sizeof(a_gpu), "%d", d.gpudir);
    snprintf(a_to, sizeof(a_to), "%d", d.cfg->timeout_ms);
    if ((child = fork()) < 0) {
        log_err("cannot start %s (%s): if the tasks run on, resume their GPU state by hand "
                "(gpuckpt resume)", TP_HELPER, strerror(errno));
        return;
    }
    if (child == 0) {
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);

        /* twice, so that CRIU never has to reap it */
        if (fork() != 0)
            _exit(0);
        setsid();
        for (int fd = 0; fd < 3; fd++)
            dup2(null, fd);
        fcntl(d.imgdir, F_SETFD, 0);
        fcntl(d.gpudir, F_SETFD, 0);
        for (int fd = 3; fd < 65536; fd++)
            if (fd != d.imgdir && fd != d.gpudir)
                fcntl(fd, F_SETFD, FD_CLOEXEC);
        execl(exe, TP_HELPER, "watch", a_img, a_gpu, a_to, (char *)NULL);
        _exit(127);
    }
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
        ;
    log_info("%s watches the dumped tcgpu processes: those CRIU lets run on get their GPU state back",
             TP_HELPER);
}

void tp_dump_fini(int ret)
{
    if (d.idx.n == 0)
        goto out;
    if (ret != 0) {
        log_info("the dump failed: every tcgpu process gets its GPU state back");
        give_all_back();
    } else if (leave_running_asked()) {
        give_all_back();
    } else {
        start_watcher();
    }
out:
    if (d.gpudir >= 0)
        close(d.gpudir);
    d.gpudir = -1;
    d.idx.n = 0;
}
