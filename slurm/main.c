/*
 * tcgpu-slurm - Slurm jobs that survive preemption (docs/slurm.md).
 *
 *   srun tcgpu-slurm [--dir DIR] [--] CMD [ARG...]   a task: run CMD under tcgpu;
 *                                                    saved when preempted, restored
 *                                                    when Slurm runs the job again
 *   tcgpu-slurm epilog [--dir DIR]                   EpilogSlurmctld: remove the saves
 *                                                    of a job that ended for good
 *
 * This file: the command line and the messages; task.c is a task's life.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc.h"
#include "tcgpu_slurm.h"
#include "tcgpu.h"

static char who[64] = "tcgpu-slurm";

static void vsay(const char *fmt, va_list ap)
{
    char when[16];

    /* wall-clock time with milliseconds: the job's log is its preemption timeline */
    fprintf(stderr, "%s %s: ", who, wall_hms(when));
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
}

void ts_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
}

void ts_note(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
}

int ts_find_helper(const char *env, const char *const *rel, char *out, size_t len)
{
    const char *e = getenv(env);
    char exe[PATH_MAX];

    if (e && *e) {
        snprintf(out, len, "%s", e);
        return access(out, R_OK) == 0 ? 0 : -ENOENT;
    }
    if (tcgpu_proc_self_dir(exe, sizeof(exe)) < 0)
        return -ENOENT;
    for (; *rel; rel++) {
        snprintf(out, len, "%.3800s%s", exe, *rel);
        if (access(out, R_OK) == 0)
            return 0;
    }
    return -ENOENT;
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
        ts_error("epilog: no SLURM_JOB_ID or JOBID (run it as JobCompLoc of jobcomp/script, "
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
    if (ts_remove_job(root, (uint32_t)job) < 0 || lstat(path, &st) == 0) {
        ts_error("epilog: cannot remove %s", path);
        return 1;
    }
    ts_note("epilog: job %lu is over: removed its saves (%s)", job, path);
    return 0;
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
    int ch, is_epilog = argc > 1 && !strcmp(argv[1], "epilog");

    optind = is_epilog ? 2 : 1;
    while ((ch = getopt_long(argc, argv, "+d:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'd':
            if (optarg[0] != '/') {
                ts_error("--dir %s: an absolute path, please", optarg);
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
    snprintf(who, sizeof(who), "tcgpu-slurm[%u.%u.%u]", job.job_id, job.step_id, job.task);
    return ts_run_task(&job, argv + optind);
}
