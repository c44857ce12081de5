/*
 * tcgpu-slurm - Slurm jobs that survive preemption (docs/slurm.md).
 *
 *   srun tcgpu-slurm [--dir DIR] [--] CMD [ARG...]   a task: run CMD under tcgpu;
 *                                                    saved when preempted, restored
 *                                                    when Slurm runs the job again
 *   tcgpu-slurm epilog [--dir DIR]                   EpilogSlurmctld: remove the saves
 *                                                    of a job that ended for good
 *
 * This file: the command line; task.c is a task's life.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "tcgpu_slurm.h"
#include "tcgpu.h"

/* Lines on stderr, "NAME HH:MM:SS.mmm: ...": the wall clock with milliseconds,
 * as the job's log is its preemption timeline. */
static void log_as(const char *name)
{
    tcgpu_log_setup(&(struct tcgpu_log_style){ .name = name, .flags = TCGPU_LOG_CLOCK,
                                              .level = TCGPU_LOG_INFO });
}

static void usage(FILE *f)
{
    fprintf(f, "usage: srun tcgpu-slurm [--dir DIR] [--] CMD [ARG...]\n"
               "       tcgpu-slurm epilog [--dir DIR]\n"
               "\n"
               "Run CMD as a task of a Slurm job under tcgpu: when the job is preempted its\n"
               "tasks are saved (gpuckpt save) and the job is requeued; when Slurm runs it\n"
               "again, on this node or another, they are restored instead of started anew.\n"
               "A job that is cancelled, fails or completes is not saved. `epilog`, run as\n"
               "EpilogSlurmctld, removes the saves of a job that has ended for good.\n"
               "\n"
               "  -d, --dir DIR   where saves live, one directory per job (TCGPU_SLURM_DIR,\n"
               "                  default " TS_DEFAULT_DIR "): shared by the nodes, writable\n"
               "                  by all with the sticky bit, as /tmp is\n"
               "  -h, --help      this text\n"
               "  -V, --version   the version\n"
               "\n"
               "docs/slurm.md has the slurm.conf lines, the signals and the limits.\n");
}

/*
 * A job cancelled during a save is over at once, while root's save still
 * writes into its directory: the epilog lets the save end first (saves.c).
 * Slurm kills the task KillWait after the cancel, and the save with it, so
 * the wait needs no more than the longest KillWait worth having.
 */
static void wait_saves(uint32_t job, const char *root)
{
    unsigned waited;
    int r = ts_wait_saves_over(root, job, TS_EPILOG_SAVE_WAIT_MS, &waited);

    if (r == -ETIMEDOUT)
        log_err("epilog: job %u: a task still saves after %.1f s: removing its directory anyway",
                job, waited / 1e3);
    else if (r < 0)
        log_err("epilog: job %u: cannot look for saves in progress: %s", job, strerror(-r));
    else if (waited >= 200)
        log_info("epilog: job %u is over: waited %.1f s for the save in progress to end", job,
                 waited / 1e3);
}

/* rm -rf, again while something still lands in it: a save Slurm's SIGKILL
 * cut short may write a last file after its mark went. 0, or -1. */
static int remove_job(const char *root, uint32_t job, const char *path)
{
    struct stat st;

    for (int i = 0; i < 3; i++) {
        if (i)
            sleep(1);
        if (ts_remove_job(root, job) == 0 && lstat(path, &st) < 0)
            return 0;
    }
    return -1;
}

/* EpilogSlurmctld: SLURM_JOB_ID's directory goes when the job will not run again. */
static int epilog(void)
{
    const char *root = getenv("TCGPU_SLURM_DIR"), *id = getenv("SLURM_JOB_ID");
    char *end, path[PATH_MAX];
    unsigned long job;
    struct stat st;
    int over;

    if (!root || !*root)
        root = TS_DEFAULT_DIR;
    /* jobcomp/script names the job JOBID; EpilogSlurmctld SLURM_JOB_ID */
    if (!id || !*id)
        id = getenv("JOBID");
    if (!id || !*id || (job = strtoul(id, &end, 10), *end) || !job || job > UINT32_MAX) {
        log_err("epilog: no SLURM_JOB_ID or JOBID (run it as JobCompLoc of jobcomp/script, "
                "or as EpilogSlurmctld)");
        return 1;
    }
    snprintf(path, sizeof(path), "%s/%lu", root, job);
    if (lstat(path, &st) < 0)
        return 0;               /* the job saved nothing */
    over = ts_job_over((uint32_t)job);
    if (over < 0)
        return 1;
    if (!over)
        return 0;               /* requeued: it comes back from its saves */
    wait_saves((uint32_t)job, root);
    if (remove_job(root, (uint32_t)job, path) < 0) {
        log_err("epilog: cannot remove %s", path);
        return 1;
    }
    log_info("epilog: job %lu is over: removed its saves (%s)", job, path);
    return 0;
}

/*
 * Which run this is decides between a start and a restore. Slurm puts it in
 * SLURM_RESTART_COUNT, which a step run with --export=NONE lacks: then
 * slurmctld says, where a slurm.conf tells libslurm where it is (without
 * one, libslurm looks for DNS SRV records, and fails loudly off a cluster).
 */
static int slurm_configured(void)
{
    const char *conf = getenv("SLURM_CONF");

    return access(conf && *conf ? conf : "/etc/slurm/slurm.conf", R_OK) == 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "dir", required_argument, NULL, 'd' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { 0 },
    };
    struct ts_job job;
    char who[64];
    int ch, is_epilog = argc > 1 && !strcmp(argv[1], "epilog");

    log_as("tcgpu-slurm");
    optind = is_epilog ? 2 : 1;
    while ((ch = getopt_long(argc, argv, "+d:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'd':
            if (optarg[0] != '/') {
                log_err("--dir %s: an absolute path, please", optarg);
                return 2;
            }
            setenv("TCGPU_SLURM_DIR", optarg, 1);
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tcgpu-slurm %s\n", TCGPU_VERSION_STRING); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (is_epilog)
        return optind == argc ? epilog() : (usage(stderr), 2);
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    if (ts_job_from_env(&job) < 0)
        return 2;
    if (!getenv("SLURM_RESTART_COUNT") && slurm_configured())
        ts_job_restart_count(job.job_id, &job.restarts);
    snprintf(who, sizeof(who), "tcgpu-slurm[%u.%u.%u]", job.job_id, job.step_id, job.task);
    log_as(who);
    return ts_run_task(&job, argv + optind);
}
