/*
 * saves.c - where a job's saves live; see tcgpu_slurm.h.
 *
 *   $TCGPU_SLURM_DIR/<job id>/                 the user's, 0700 (made by the first task)
 *       step<S>.task<N>.out                    task N's program output (relayed by its wrapper)
 *       step<S>.task<N>.run<R>/                task N's save, made during run R (its
 *                                              restart count): a gpuckpt save, root's
 *       step<S>.task<N>.saving                 there and locked (flock) while task N
 *                                              saves: the epilog waits for it
 *
 * A requeued job runs its batch script again, so its steps get the same
 * ids, and each task finds its save under the same name. A set of saves is
 * whole when every task of the step has one of the same run. Tasks come
 * back from the latest run that saved anything, when its set is whole; one
 * that some tasks have and others not is refused (all tasks or none: the
 * job fails rather than continue half from a save and half from scratch).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "tcgpu_slurm.h"

static int env_u32(const char *name, uint32_t dflt, int required, uint32_t *out)
{
    const char *s = getenv(name);
    char *end;
    unsigned long v;

    if (!s || !*s) {
        if (required)
            return -EINVAL;
        *out = dflt;
        return 0;
    }
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end || v > UINT32_MAX)
        return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

int ts_job_from_env(struct ts_job *j)
{
    const char *root = getenv("TCGPU_SLURM_DIR");
    uint32_t task, ntasks, restarts;

    memset(j, 0, sizeof(*j));
    if (env_u32("SLURM_JOB_ID", 0, 1, &j->job_id) < 0 || !j->job_id ||
        env_u32("SLURM_STEP_ID", 0, 0, &j->step_id) < 0 ||
        env_u32("SLURM_PROCID", 0, 0, &task) < 0 ||
        env_u32("SLURM_NTASKS", 1, 0, &ntasks) < 0 ||
        env_u32("SLURM_RESTART_COUNT", 0, 0, &restarts) < 0) {
        log_err("not a task of a Slurm job step (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_PROCID, "
                "SLURM_NTASKS): run it under srun");
        return -EINVAL;
    }
    if (!ntasks || task >= ntasks || ntasks > 4096) {
        log_err("task %u of %u: Slurm's environment makes no sense", task, ntasks);
        return -EINVAL;
    }
    j->task = task;
    j->ntasks = ntasks;
    j->restarts = restarts;
    snprintf(j->root, sizeof(j->root), "%s", root && *root ? root : TS_DEFAULT_DIR);
    if (j->root[0] != '/' || strlen(j->root) > PATH_MAX - 128) {
        log_err("TCGPU_SLURM_DIR=%s: not an absolute path", j->root);
        return -EINVAL;
    }
    snprintf(j->dir, sizeof(j->dir), "%s/%u", j->root, j->job_id);
    return 0;
}

int ts_job_dir(const struct ts_job *j)
{
    struct stat st;

    if (mkdir(j->dir, 0700) < 0 && errno != EEXIST) {
        log_err("cannot create %s: %s (TCGPU_SLURM_DIR must exist and be writable, as /tmp "
                "is: docs/slurm.md)", j->dir, strerror(errno));
        return -errno;
    }
    /* another task made it, or an earlier run: it must be ours, and private */
    if (lstat(j->dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077)) {
        log_err("%s is not a private directory of this user: refusing to keep saves there",
                j->dir);
        return -EACCES;
    }
    return 0;
}

void ts_save_path(const struct ts_job *j, unsigned task, unsigned run, char *out, size_t len)
{
    snprintf(out, len, "%.4000s/step%u.task%u.run%u", j->dir, j->step_id, task, run);
}

void ts_output_path(const struct ts_job *j, unsigned task, char *out, size_t len)
{
    snprintf(out, len, "%.4000s/step%u.task%u.out", j->dir, j->step_id, task);
}

static int is_dir(const char *path)
{
    struct stat st;

    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ts_set_whole(const struct ts_job *j, unsigned run)
{
    char path[PATH_MAX];

    for (unsigned t = 0; t < j->ntasks; t++) {
        ts_save_path(j, t, run, path, sizeof(path));
        if (!is_dir(path))
            return 0;
    }
    return 1;
}

int ts_latest_whole_set(const struct ts_job *j, unsigned *run, char *why, size_t len)
{
    char path[PATH_MAX];

    /* runs are few (one per requeue): the latest run that saved anything decides */
    for (int r = (int)j->restarts; r >= 0; r--) {
        unsigned have = 0;
        for (unsigned t = 0; t < j->ntasks; t++) {
            ts_save_path(j, t, (unsigned)r, path, sizeof(path));
            have += is_dir(path);
        }
        if (!have)
            continue;
        if (have == j->ntasks) {
            *run = (unsigned)r;
            return 0;
        }
        snprintf(why, len, "the save of step %u made in run %d is incomplete: %u of its %u "
                 "tasks have one (a task's save failed at the preemption)", j->step_id, r, have,
                 j->ntasks);
        return -EBADMSG;
    }
    return -ENOENT;
}

static void remove_all(int at, const char *name)
{
    struct stat st;
    int fd;
    DIR *d;
    struct dirent *e;

    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        unlinkat(at, name, 0);
        return;
    }
    fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && (d = fdopendir(fd))) {
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                remove_all(dirfd(d), e->d_name);
        closedir(d);
    } else if (fd >= 0) {
        close(fd);
    }
    unlinkat(at, name, AT_REMOVEDIR);
}

int ts_remove_job(const char *root, uint32_t job_id)
{
    char name[16];
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    snprintf(name, sizeof(name), "%u", job_id);
    remove_all(fd, name);
    close(fd);
    return 0;
}

/* ---------------------------------------------------------------------------
 * A save in progress, and the epilog that waits for it
 *
 * A job cancelled while a task saves is over for slurmctld at once, and its
 * epilog runs then, while root's save still writes into the job's directory:
 * removing it under the save makes CRIU fail, and the task's log say so. The
 * task marks its save with a file it and its gpuckpt save hold locked (flock:
 * the lock goes with the last of them, even when Slurm kills them); the epilog waits, bounded, until no
 * mark is locked. flock works across the nodes of an NFS mount (as a POSIX
 * lock); where the shared file system cannot lock, a mark that stands is
 * taken for a save in progress, and the wait is the bound.
 * ------------------------------------------------------------------------- */

static void saving_path(const struct ts_job *j, char *out, size_t len)
{
    snprintf(out, len, "%.4000s/step%u.task%u.saving", j->dir, j->step_id, j->task);
}

int ts_saving_begin(const struct ts_job *j)
{
    char path[PATH_MAX];
    int fd;

    saving_path(j, path, sizeof(path));
    /* no O_CLOEXEC: gpuckpt save inherits the lock, and holds it as long as
     * the save runs (tcgpud ends a save whose caller left), should Slurm
     * kill the wrapper first */
    fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0600);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        log_err("cannot mark the save in %s: %s (an epilog may remove the job's directory "
                "while it runs)", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    return fd;
}

void ts_saving_end(const struct ts_job *j, int fd)
{
    char path[PATH_MAX];

    if (fd < 0)
        return;
    saving_path(j, path, sizeof(path));
    unlink(path);               /* before the lock goes: the epilog sees no mark, or a locked one */
    close(fd);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);

    return n > k && !strcmp(s + n - k, suffix);
}

/* 1 when the mark `name` of the job's directory dirfd is held by a task
 * saving (or cannot be told apart from one), 0 when it is a leftover. */
static int mark_held(int dirfd, const char *name)
{
    struct stat st;
    int fd, held;

    /* the user's file, read by root: no symlink, no FIFO to block on */
    fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return 0;               /* gone since the listing: that save is over */
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return 0;
    }
    held = flock(fd, LOCK_SH | LOCK_NB) < 0;   /* EWOULDBLOCK, or no locks here: the mark says */
    close(fd);
    return held;
}

/* The number of held marks in the job's directory, or -errno. The listing
 * opens the directory anew each time: a dup() of dirfd would share its
 * offset, and every listing after the first would start at its end (the
 * epilog saw no mark 0.2 s into a save, and removed the directory under it). */
static int saves_running(int dirfd)
{
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = 0;
    struct dirent *e;
    DIR *d;

    if (fd < 0)
        return -errno;
    if (!(d = fdopendir(fd))) {
        close(fd);
        return -errno;
    }
    while ((e = readdir(d)))
        if (ends_with(e->d_name, ".saving"))
            n += mark_held(dirfd, e->d_name);
    closedir(d);
    return n;
}

int ts_wait_saves_over(const char *root, uint32_t job_id, unsigned max_ms, unsigned *waited_ms)
{
    uint64_t t0 = now_ms();
    char name[16];
    int rootfd, dirfd, n;

    *waited_ms = 0;
    snprintf(name, sizeof(name), "%u", job_id);
    if ((rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return -errno;
    dirfd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(rootfd);
    if (dirfd < 0)
        return errno == ENOENT ? 0 : -errno;
    while ((n = saves_running(dirfd)) > 0 && now_ms() - t0 < max_ms)
        usleep(200 * 1000);
    close(dirfd);
    *waited_ms = (unsigned)(now_ms() - t0);
    return n > 0 ? -ETIMEDOUT : n;
}
