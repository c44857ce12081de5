/*
 * saves.c - where a job's saves live; see tcgpu_slurm.h.
 *
 *   $TCGPU_SLURM_DIR/<job id>/                 the user's, 0700 (made by the first task)
 *       step<S>.task<N>.out                    task N's program output (relayed by its wrapper)
 *       step<S>.task<N>.run<R>/                task N's save, made during run R (its
 *                                              restart count): a gpuckpt save, root's
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
#include <sys/stat.h>
#include <unistd.h>

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
