/*
 * tcgpu_slurm.h - what the files of tcgpu-slurm share (docs/slurm.md).
 *
 *   main.c      the command line: the task wrapper (srun tcgpu-slurm -- CMD) and
 *               the controller's epilog (tcgpu-slurm epilog)
 *   task.c      one task's life: started or restored, its signals, its save
 *   saves.c     where a job's saves live, and whether a set of them is whole
 *   slurmapi.c  what tcgpu-slurm asks slurmctld (libslurm): preempted, requeued
 *               or ending? requeue; is the job over?
 *   defer.c     libtcgpu-slurm-defer.so, preloaded into the program: holds back
 *               the signals Slurm sends every process until the wrapper says what
 *               they mean
 *
 * tcgpu-slurm is single-threaded; nothing here is thread-safe. Functions
 * return 0 or -errno and say what failed on stderr ("tcgpu-slurm: ...").
 */
#ifndef TCGPU_SLURM_H
#define TCGPU_SLURM_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#define TS_DEFAULT_DIR       "/var/lib/tcgpu/slurm"
#define TS_RELEASE_SIGNAL    "RTMIN+5"      /* defer.c's: "do what the program would" */
#define TS_DEFERRED_SIGNALS  "TERM,TSTP"
/* How long the epilog waits for a save in progress of a job that ended (more
 * than Slurm's default KillWait, 30 s, after which Slurm kills the save). */
#define TS_EPILOG_SAVE_WAIT_MS  (60 * 1000)

/* The job and task this wrapper is, from Slurm's environment. */
struct ts_job {
    uint32_t job_id, step_id;
    unsigned task, ntasks;      /* SLURM_PROCID, SLURM_NTASKS */
    unsigned restarts;          /* SLURM_RESTART_COUNT */
    char root[PATH_MAX];        /* TCGPU_SLURM_DIR */
    char dir[PATH_MAX];         /* root/<job id>: this job's saves, the user's */
};

/* saves.c */
/* Fills j from the environment; -EINVAL (not in a Slurm step) said. */
int ts_job_from_env(struct ts_job *j);
/* Creates j->dir (0700) or checks it is the user's own directory. */
int ts_job_dir(const struct ts_job *j);
/* The save of task `task` made during run `run` (its restart count): path. */
void ts_save_path(const struct ts_job *j, unsigned task, unsigned run, char *out, size_t len);
/* The output file of task `task` (the program's stdout and stderr). */
void ts_output_path(const struct ts_job *j, unsigned task, char *out, size_t len);
/*
 * The latest run whose save every task of the step has: 0 with *run set;
 * -ENOENT when no task has any save (start afresh); -EBADMSG when some
 * tasks have one and others not (the set is broken: refuse), said in why.
 */
int ts_latest_whole_set(const struct ts_job *j, unsigned *run, char *why, size_t len);
/* 1 when every task has a save of run `run`. */
int ts_set_whole(const struct ts_job *j, unsigned run);
/* rm -rf of a job's directory under root, without following symlinks. */
int ts_remove_job(const char *root, uint32_t job_id);
/*
 * A task's save in progress, for the epilog: the file step<S>.task<N>.saving
 * of the job's directory, created and locked (flock) for as long as the save
 * runs. Returns its descriptor, or -errno (said: the save goes on unmarked).
 */
int ts_saving_begin(const struct ts_job *j);
/* The save is over: the mark goes (fd < 0: nothing to do). */
void ts_saving_end(const struct ts_job *j, int fd);
/*
 * The epilog: waits while a task of the job holds a save mark, at most
 * max_ms. 0 once none does (or the job has no directory), -ETIMEDOUT, or
 * -errno; *waited_ms says how long it waited.
 */
int ts_wait_saves_over(const char *root, uint32_t job_id, unsigned max_ms, unsigned *waited_ms);

/* slurmapi.c */
/* What a SIGTERM to the job means, as slurmctld tells it. */
enum ts_why {
    TS_PREEMPTED,   /* preempted: its grace time runs, and it is not requeued yet */
    TS_REQUEUED,    /* requeued (scontrol requeue, the end of a grace time): it runs again */
    TS_ENDING,      /* cancelled, timed out, failed...: it does not run again */
};
/* enum ts_why for the job during run `run` (the restart count it started
 * with), its state in words into state ("cancelled"); or -errno, said. */
int ts_job_why_signalled(uint32_t job_id, unsigned run, char *state, size_t len);
/* The job's restart count as slurmctld keeps it: 0 with *count, or -errno. */
int ts_job_restart_count(uint32_t job_id, unsigned *count);
/* Slurm's KillWait (seconds from a job's SIGTERM to its SIGKILL): 0 with
 * *seconds, or -errno (said). */
int ts_kill_wait(unsigned *seconds);
/* Requeue the job now (its owner may). 0 or -errno, said. */
int ts_job_requeue(uint32_t job_id);
/* 1: the job is over for good (completed, cancelled, failed, timed out...) or
 * unknown to slurmctld; 0: it will run again (pending, requeued) or runs; -errno. */
int ts_job_over(uint32_t job_id);

/* The node's gres list as slurmctld knows it ("gpu:2,shard:8"), into buf:
 * 0, -ENOENT (none), or -EIO (said). */
int ts_node_gres(const char *node, char *buf, size_t len);

/* shards.c */
/* The count of gres `name` in a node's gres list, its types summed
 * ("gpu:a100:2(S:0-1),shard:8": gpu 2, shard 8): 0 with *count, or -ENOENT. */
int ts_gres_count(const char *gres, const char *name, unsigned long *count);
/*
 * A task given shards of a GPU (SLURM_SHARDS_ON_NODE) gets their share of
 * the GPU's memory and compute as its limits (TCGPU_GPU_MEM,
 * TCGPU_GPU_COMPUTE, set in this process's environment for the program).
 * 0 (set, or no shards, or a whole GPU's worth), or -errno: said; the task
 * must not start then, since nothing would keep it off its neighbours' share.
 */
int ts_shard_limits(void);

/* task.c: the wrapper of one task; returns its exit status. */
int ts_run_task(const struct ts_job *j, char *const argv[]);

#endif
