/*
 * slurmapi.c - what tcgpu-slurm asks slurmctld, through libslurm
 * (slurm/slurm.h from libslurm-dev); see tcgpu_slurm.h.
 *
 * The grace-time signal of a preemption (SIGTERM, and the --signal one
 * with preempt_send_user_signal) is the signal scancel, the time limit and
 * `scontrol requeue` send too: only slurmctld knows which it was. It records
 * what it does in the job before it signals it (preempt_time for a
 * preemption; for a requeue the restart count, one more than the run's, and
 * the requeue flag; for a cancel or a time limit the state), so a wrapper
 * that asks after the signal arrived gets the truth.
 */
#include <errno.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "tcgpu_slurm.h"

static void init_once(void)
{
    static int done;

    if (!done) {
        slurm_init(NULL);       /* SLURM_CONF, else the default slurm.conf */
        done = 1;
    }
}

/* The job's record; the caller frees *msg. 0 or -errno (said, unless ENOENT). */
static int load_job(uint32_t job_id, job_info_msg_t **msg)
{
    init_once();
    if (slurm_load_job(msg, job_id, SHOW_DETAIL) != SLURM_SUCCESS) {
        int e = slurm_get_errno();
        if (e == ESLURM_INVALID_JOB_ID)
            return -ENOENT;
        log_err("cannot ask slurmctld about job %u: %s", job_id, slurm_strerror(e));
        return -EIO;
    }
    if ((*msg)->record_count < 1) {
        slurm_free_job_info_msg(*msg);
        return -ENOENT;
    }
    return 0;
}

/* The job's state in words, for what the wrapper says ("job 7 is cancelled"). */
static const char *state_words(uint32_t state)
{
    switch (state & JOB_STATE_BASE) {
    case JOB_PENDING: return "pending";
    case JOB_RUNNING: return "running";
    case JOB_SUSPENDED: return "suspended";
    case JOB_COMPLETE: return "completed";
    case JOB_CANCELLED: return "cancelled";
    case JOB_FAILED: return "failed";
    case JOB_TIMEOUT: return "at its time limit";
    case JOB_NODE_FAIL: return "ended by a node failure";
    case JOB_PREEMPTED: return "preempted";
    case JOB_BOOT_FAIL: return "ended by a boot failure";
    case JOB_DEADLINE: return "past its deadline";
    case JOB_OOM: return "out of memory";
    default: return "ending";
    }
}

/* Requeued: it runs again (scontrol requeue, requeuehold, the end of a grace
 * time). The restart count rises at the requeue, before any signal. */
static int requeued(const slurm_job_info_t *job, unsigned run)
{
    return job->restart_cnt > run ||
           (job->job_state & (JOB_REQUEUE | JOB_REQUEUE_HOLD | JOB_REQUEUE_FED)) ||
           (job->job_state & JOB_STATE_BASE) == JOB_PENDING;
}

/* Preempted during this run, and still running its grace time: a cancel
 * during the grace time makes it cancelled, not preempted. */
static int preempted(const slurm_job_info_t *job)
{
    uint32_t base = job->job_state & JOB_STATE_BASE;

    return job->preempt_time && job->preempt_time >= job->start_time &&
           (base == JOB_RUNNING || base == JOB_SUSPENDED);
}

int ts_job_why_signalled(uint32_t job_id, unsigned run, char *state, size_t len)
{
    job_info_msg_t *msg;
    slurm_job_info_t *job;
    int r = load_job(job_id, &msg);

    if (r < 0) {
        snprintf(state, len, "unknown to slurmctld");
        return r;
    }
    job = &msg->job_array[0];
    snprintf(state, len, "%s", state_words(job->job_state));
    r = requeued(job, run) ? TS_REQUEUED : preempted(job) ? TS_PREEMPTED : TS_ENDING;
    slurm_free_job_info_msg(msg);
    return r;
}

int ts_job_restart_count(uint32_t job_id, unsigned *count)
{
    job_info_msg_t *msg;
    int r = load_job(job_id, &msg);

    if (r < 0)
        return r;
    *count = msg->job_array[0].restart_cnt;
    slurm_free_job_info_msg(msg);
    return 0;
}

int ts_kill_wait(unsigned *seconds)
{
    slurm_conf_t *conf;

    init_once();
    if (slurm_load_ctl_conf((time_t)0, &conf) != SLURM_SUCCESS) {
        log_err("cannot ask slurmctld for its KillWait: %s", slurm_strerror(slurm_get_errno()));
        return -EIO;
    }
    *seconds = conf->kill_wait;
    slurm_free_ctl_conf(conf);
    return 0;
}

int ts_job_requeue(uint32_t job_id)
{
    init_once();
    if (slurm_requeue(job_id, 0) != SLURM_SUCCESS) {
        int e = slurm_get_errno();
        /* another task of the job asked first */
        if (e == ESLURM_JOB_PENDING || e == ESLURM_TRANSITION_STATE_NO_UPDATE)
            return 0;
        log_err("cannot requeue job %u: %s", job_id, slurm_strerror(e));
        return -EIO;
    }
    return 0;
}

int ts_job_over(uint32_t job_id)
{
    job_info_msg_t *msg;
    uint32_t state;
    int r = load_job(job_id, &msg);

    if (r == -ENOENT)
        return 1;               /* purged: long over */
    if (r < 0)
        return r;
    state = msg->job_array[0].job_state;
    /* a requeued job passes through a completing state with the requeue flag */
    r = !(state & (JOB_REQUEUE | JOB_REQUEUE_HOLD | JOB_REQUEUE_FED)) &&
        (state & JOB_STATE_BASE) >= JOB_COMPLETE;
    slurm_free_job_info_msg(msg);
    return r;
}

int ts_node_gres(const char *node, char *buf, size_t len)
{
    node_info_msg_t *msg = NULL;
    int r = 0;

    init_once();
    if (slurm_load_node_single(&msg, (char *)node, SHOW_ALL) != SLURM_SUCCESS) {
        log_err("cannot ask slurmctld about node %s: %s", node, slurm_strerror(slurm_get_errno()));
        return -EIO;
    }
    if (msg->record_count < 1 || !msg->node_array[0].gres)
        r = -ENOENT;
    else
        snprintf(buf, len, "%s", msg->node_array[0].gres);
    slurm_free_node_info_msg(msg);
    return r;
}
